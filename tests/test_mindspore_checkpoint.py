"""Checkpoints of the MindSpore-style ReplayBuffer (replaybuf.mindspore_rl): state_dict with
tensors (torch.save-able with weights_only=True), load_state_dict continuing exactly (same
rows, head, count and samples), the shared folder format, and refusals that change nothing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArraySpec
from replaybuf.errors import CheckpointError
from replaybuf.persistence import folder as checkpoint_folder

torch = pytest.importorskip("torch")
from replaybuf.mindspore_rl import ReplayBuffer  # noqa: E402
from replaybuf.torch import TorchUniformReplayBuffer  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SHAPES = [(4,), (1,), (1,), (4,)]
TYPES = [torch.float32, torch.int32, torch.float32, torch.float32]


def buffer(seed=7, capacity=6, ordered=False, device="cpu", shapes=SHAPES, types=TYPES):
    return ReplayBuffer(3, capacity, shapes, types, seed=seed, ordered=ordered, device=device)


def rows(first: int, n: int) -> list[torch.Tensor]:
    """``n`` rows numbered from ``first``: every column of row k holds k."""
    k = torch.arange(first, first + n)
    return [k[:, None].expand(n, 4).float(), k[:, None].int(), k[:, None].float(), -k[:, None].expand(n, 4).float()]


def view(rb, draws=4) -> tuple:
    """What the buffer shows: cursors, every row by get_item, then the next samples (advances)."""
    contents = [[column.tolist() for column in rb.get_item(i)] for i in range(rb.size())]
    samples = [[column.tolist() for column in rb.sample()] for _ in range(draws if rb.size() else 0)]
    return rb.head, rb.count, rb.size(), rb.full(), contents, samples


def assert_unchanged(rb, before: dict) -> None:
    after = rb.state_dict()
    assert (after["steps"], after["head"], after["count"]) == (before["steps"], before["head"], before["count"])
    assert torch.equal(after["rng"], before["rng"])
    assert all(torch.equal(after["items"][k], before["items"][k]) for k in before["items"])


@given(
    capacity=st.integers(1, 7),
    inserts=st.lists(st.integers(0, 5), max_size=6),
    draws=st.integers(0, 3),
    ordered=st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_state_dict_round_trip_continues_exactly(capacity, inserts, draws, ordered):
    original = buffer(capacity=capacity, ordered=ordered)
    first = 0
    for n in inserts:  # batches of n rows (0 included): wraps once more than capacity rows went in
        original.insert(rows(first, n))
        first += n
    for _ in range(draws if original.size() else 0):  # move the generator away from its seed
        original.sample()
    restored = buffer(seed=999, capacity=capacity, ordered=ordered)
    restored.insert(rows(100, 2))
    restored.load_state_dict(original.state_dict())
    assert view(restored) == view(original)
    for rb in (original, restored):
        rb.insert(rows(first, 3))
    assert view(restored) == view(original)


def test_state_dict_holds_tensors_and_survives_torch_save_weights_only():
    original = buffer(seed=3)
    original.insert(rows(0, 9))  # wraps: head 3
    original.sample()
    state = original.state_dict()
    assert isinstance(state["items"]["0"], torch.Tensor) and isinstance(state["rng"], torch.Tensor)
    assert (state["checkpoint"]["saved_by"], state["capacity"], state["steps"], state["head"], state["count"]) == (
        "ReplayBuffer",
        6,
        9,
        3,
        6,
    )
    assert state["items"]["1"][:, 0].tolist() == list(range(3, 9))  # valid rows only, oldest first
    original.insert(rows(9, 2))
    assert state["items"]["1"][:, 0].tolist() == list(range(3, 9))  # a snapshot, not a view
    stream = io.BytesIO()
    torch.save(state, stream)
    stream.seek(0)
    restored, again = buffer(seed=0), buffer(seed=0)
    restored.load_state_dict(torch.load(stream, weights_only=True))
    again.load_state_dict(state)
    assert view(restored) == view(again)


def test_numpy_state_is_accepted():
    original = buffer(ordered=True)
    original.insert(rows(0, 8))
    state = original.state_dict()
    state["items"] = {k: v.numpy() for k, v in state["items"].items()}
    state["rng"] = state["rng"].numpy()
    restored = buffer(seed=1, ordered=True)
    restored.load_state_dict(state)
    assert view(restored) == view(original)


@pytest.mark.parametrize("ordered", [False, True])
def test_folder_round_trip_and_numpy_readable_files(tmp_path, ordered):
    original = buffer(ordered=ordered)
    original.insert(rows(0, 10))
    original.sample()
    original.save(tmp_path / "ckpt")
    restored = buffer(seed=0, ordered=ordered)
    restored.load(tmp_path / "ckpt")
    assert view(restored) == view(original)
    state = checkpoint_folder.read_state(tmp_path / "ckpt")  # plain NumPy, no torch needed
    assert (state["head"], state["count"]) == (4, 6)
    assert state["rng"].dtype == np.uint8
    np.testing.assert_array_equal(state["items"]["1"][:, 0], np.arange(4, 10))


def test_reset_then_restore_of_an_empty_buffer():
    original = buffer()
    original.insert(rows(0, 4))
    original.reset()
    restored = buffer(seed=0)
    restored.insert(rows(50, 8))
    restored.load_state_dict(original.state_dict())
    assert (restored.size(), restored.head, restored.full()) == (0, 0, False)
    for rb in (original, restored):
        rb.insert(rows(20, 2))
    assert view(restored) == view(original)


def broken_states():
    good = buffer()
    good.insert(rows(0, 8))

    def edit(change):
        state = good.state_dict()
        change(state)
        return state

    def other(**kwargs):  # two zero rows in a buffer of another config
        rb = buffer(**kwargs)
        rb.insert([torch.zeros((2, *shape), dtype=dtype) for shape, dtype in zip(rb.shapes, rb.types, strict=True)])
        return rb.state_dict()

    spec = tuple(ArraySpec(shape, dtype) for shape, dtype in zip(SHAPES, TYPES, strict=True))
    other_streams = TorchUniformReplayBuffer(spec, batch_size=2, max_length=3)  # capacity 6 as 2 streams
    other_streams.add_batch(tuple(rows(0, 2)))
    return {
        "other streams": other_streams.state_dict(),
        "shapes": other(shapes=[(4,), (1,), (2,), (4,)]),
        "types": other(types=[torch.float32, torch.int64, torch.float32, torch.float32]),
        "columns": other(shapes=SHAPES[:3], types=TYPES[:3]),
        "capacity": other(capacity=8),
        "head": edit(lambda s: s.update({"head": 0})),
        "count": edit(lambda s: s.update({"count": 5})),
        "steps": edit(lambda s: s.update({"steps": 5})),
        "steps missing": edit(lambda s: s.pop("steps")),
        "item shape": edit(lambda s: s["items"].update({"0": torch.zeros(6, 3)})),
        "item dtype": edit(lambda s: s["items"].update({"1": s["items"]["1"].long()})),
        "item count": edit(lambda s: s["items"].update({k: v[:4] for k, v in s["items"].items()})),
        "item missing": edit(lambda s: s["items"].pop("3")),
        "rng not a state": edit(lambda s: s.update({"rng": torch.zeros(3, dtype=torch.uint8)})),
        "rng missing": edit(lambda s: s.pop("rng")),
        "not a dict": [1],
    }


@pytest.mark.parametrize("name", sorted(broken_states()))
def test_bad_state_is_refused_and_nothing_changes(name):
    rb = buffer()
    rb.insert(rows(10, 8))
    before = rb.state_dict()
    with pytest.raises(CheckpointError):
        rb.load_state_dict(broken_states()[name])
    assert_unchanged(rb, before)


def test_refusals_name_the_field_and_both_values():
    rb = buffer()
    with pytest.raises(CheckpointError, match=r"state\['capacity'\]: saved 8, this buffer has 6"):
        rb.load_state_dict(broken_states()["capacity"])
    with pytest.raises(CheckpointError, match=r"state\['head'\]: expected 2 \(from steps=8\), got 0"):
        rb.load_state_dict(broken_states()["head"])
    with pytest.raises(CheckpointError, match=r"another data_spec.*\(1,\) int64.*\(1,\) int32"):
        rb.load_state_dict(broken_states()["types"])
    with pytest.raises(CheckpointError, match=r"state\['batch_size'\]: saved 2, this buffer has 1"):
        rb.load_state_dict(broken_states()["other streams"])


def current_version(path):
    return path / json.loads((path / "CURRENT").read_text())["current"]


def flip_last_byte(file):
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def test_folder_of_another_config_is_refused_and_nothing_changes(tmp_path):
    other = buffer(shapes=[(4,), (1,), (1,), (3,)])
    other.insert(rows(0, 2)[:3] + [torch.zeros(2, 3)])
    other.save(tmp_path / "ckpt")
    rb = buffer()
    rb.insert(rows(10, 8))
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match="another data_spec"):
        rb.load(tmp_path / "ckpt")
    assert_unchanged(rb, before)


@pytest.mark.parametrize("damage", ["rng file", "manifest truncated"])
def test_corrupt_checkpoint_is_refused_and_nothing_changes(tmp_path, damage):
    original = buffer()
    original.insert(rows(0, 5))
    original.save(tmp_path / "ckpt")
    folder = current_version(tmp_path / "ckpt")
    if damage == "rng file":  # a small array: its checksum is checked before anything changes
        flip_last_byte(next(folder.glob("*rng*.npy")))
    else:
        manifest = folder / "manifest.json"
        manifest.write_bytes(manifest.read_bytes()[:-20])
    rb = buffer()
    rb.insert(rows(10, 8))
    before = rb.state_dict()
    with pytest.raises(CheckpointError):
        rb.load(tmp_path / "ckpt")
    assert_unchanged(rb, before)


def test_corrupt_row_file_leaves_the_buffer_empty_and_usable(tmp_path):
    original = buffer()
    original.insert(rows(0, 5))
    original.save(tmp_path / "ckpt")
    flip_last_byte(sorted(current_version(tmp_path / "ckpt").glob("*items*.npy"))[0])
    rb = buffer()
    rb.insert(rows(30, 2))
    with pytest.raises(CheckpointError, match="checksum"):
        rb.load(tmp_path / "ckpt")
    assert (rb.size(), rb.head, rb.full()) == (0, 0, False)
    rb.insert(rows(40, 1))
    assert rb.get_item(0)[1].tolist() == [40]


@CUDA
def test_cuda_round_trip_through_state_dict_and_folder(tmp_path):
    original = buffer(device="cuda")
    original.insert(rows(0, 9))
    original.sample()
    state = original.state_dict()
    assert state["items"]["0"].device.type == "cuda"
    restored = buffer(device="cuda", seed=0)
    restored.load_state_dict(state)
    assert view(restored) == view(original)
    original.save(tmp_path / "ckpt")
    again = buffer(device="cuda", seed=0)
    again.load(tmp_path / "ckpt")
    assert view(again) == view(original)
