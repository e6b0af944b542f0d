"""The checkpoint protocol on the torch buffers: state_dict with tensors (torch.save-able with
weights_only=True), load_state_dict continuing exactly, and the shared folder format."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
from conformance_data import SPEC, fields_for_ids, step_batch
from replaybuf.errors import CheckpointError
from replaybuf.persistence import folder as checkpoint_folder

torch = pytest.importorskip("torch")
from replaybuf.mindspore_rl import ReplayBuffer  # noqa: E402
from replaybuf.torch import TorchPyUniformReplayBuffer, TorchUniformReplayBuffer  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def segmented(seed=7, device="cpu", batch_size=2, max_length=5):
    return TorchUniformReplayBuffer(SPEC, batch_size=batch_size, max_length=max_length, seed=seed, device=device)


def fill(buffer, steps, start=0):
    for step in range(start, start + steps):
        buffer.add_batch(step_batch(step, buffer.batch_size))


def trace(buffer, n=4):
    """What the buffer returns next: sampled ids and items."""
    out = []
    for _ in range(n):
        items, info = buffer.get_next(4, 2)
        out.append((info.ids.tolist(), items["id"].tolist(), items["observation"]["camera"].tolist()))
    return out


def assert_same(a, b):
    a_all, b_all = a.gather_all(), b.gather_all()
    assert torch.equal(a_all["id"], b_all["id"])
    assert torch.equal(a_all["observation"]["position"], b_all["observation"]["position"])
    assert a.num_frames() == b.num_frames()
    assert trace(a) == trace(b)


@given(batch_size=st.integers(1, 3), max_length=st.integers(2, 6), steps=st.integers(0, 15), draws=st.integers(0, 3))
@settings(max_examples=30, deadline=None)
def test_state_dict_round_trip_continues_exactly(batch_size, max_length, steps, draws):
    original = segmented(batch_size=batch_size, max_length=max_length)
    fill(original, steps)
    for _ in range(draws if steps else 0):  # move the generator away from its seed
        original.get_next(3)
    restored = segmented(seed=999, batch_size=batch_size, max_length=max_length)
    fill(restored, 2, start=50)
    restored.load_state_dict(original.state_dict())
    fill(original, 2, start=steps)
    fill(restored, 2, start=steps)
    assert_same(original, restored)


def test_state_dict_holds_tensors_and_survives_torch_save_weights_only():
    original = TorchPyUniformReplayBuffer(SPEC, capacity=6, seed=3)
    original.add_batch(fields_for_ids(np.arange(9)))  # wraps
    original.get_next(2)
    state = original.state_dict()
    assert isinstance(state["items"]["0"], torch.Tensor) and isinstance(state["rng"], torch.Tensor)
    assert state["steps"] == 9 and state["checkpoint"]["saved_by"] == "TorchPyUniformReplayBuffer"
    ids = state["items"][str(replaybuf.nest.FlatSpec(SPEC).paths.index("id"))]
    assert ids.tolist() == list(range(3, 9))  # valid items only, oldest first
    original.add_batch(fields_for_ids(np.arange(9, 12)))
    assert ids.tolist() == list(range(3, 9))  # a snapshot, not a view
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    restored = TorchPyUniformReplayBuffer(SPEC, capacity=6, seed=0)
    restored.load_state_dict(loaded)
    again = TorchPyUniformReplayBuffer(SPEC, capacity=6, seed=0)
    again.load_state_dict(state)
    assert_same(restored, again)


def test_folder_round_trip_and_numpy_readable_files(tmp_path):
    original = segmented()
    fill(original, 8)
    original.get_next(5)
    original.save(tmp_path / "ckpt")
    restored = segmented(seed=0)
    restored.load(tmp_path / "ckpt")
    assert_same(original, restored)
    state = checkpoint_folder.read_state(tmp_path / "ckpt")  # plain NumPy, no torch needed
    assert isinstance(state["rng"], np.ndarray) and state["rng"].dtype == np.uint8
    np.testing.assert_array_equal(state["items"]["0"], original.state_dict()["items"]["0"].numpy())


def test_numpy_state_is_accepted():
    original = segmented()
    fill(original, 4)
    state = original.state_dict()
    state["items"] = {k: v.numpy() for k, v in state["items"].items()}
    state["rng"] = state["rng"].numpy()
    restored = segmented(seed=1)
    restored.load_state_dict(state)
    assert_same(original, restored)


def broken_states():
    good = segmented()
    fill(good, 3)

    def edit(change):
        state = good.state_dict()
        change(state)
        return state

    return {
        "header version": edit(lambda s: s["checkpoint"].update({"version": 3})),
        "priorities": edit(lambda s: s.update({"priorities": {"mass": np.ones(6), "max_priority": 1.0}})),
        "spec": edit(lambda s: s["spec"].update({"dtypes": ["<f8"] * 4})),
        "geometry": edit(lambda s: s.update({"batch_size": 3})),
        "item shape": edit(lambda s: s["items"].update({"1": torch.zeros(6, 4)})),
        "item dtype": edit(lambda s: s["items"].update({"0": s["items"]["0"].to(torch.float64)})),
        "item count": edit(lambda s: s["items"].update({k: v[:2] for k, v in s["items"].items()})),
        "rng not a state": edit(lambda s: s.update({"rng": torch.zeros(3, dtype=torch.uint8)})),
        "rng missing": edit(lambda s: s.pop("rng")),
        "not a dict": [1],
    }


@pytest.mark.parametrize("name", sorted(broken_states()))
def test_bad_state_is_refused_and_nothing_changes(name):
    buffer = segmented()
    fill(buffer, 4, start=10)
    before = buffer.state_dict()
    with pytest.raises(CheckpointError):
        buffer.load_state_dict(broken_states()[name])
    after = buffer.state_dict()
    assert after["steps"] == before["steps"] and torch.equal(after["rng"], before["rng"])
    assert all(torch.equal(after["items"][k], before["items"][k]) for k in before["items"])


def test_a_numpy_buffer_checkpoint_loads_and_keeps_the_torch_generator(tmp_path):
    numpy_buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=5, seed=1)
    numpy_buffer.add_batch(step_batch(0, 2))
    numpy_buffer.save(tmp_path / "ckpt")
    restored, twin = segmented(), segmented()
    restored.load(tmp_path / "ckpt")
    twin.add_batch(step_batch(0, 2))
    assert restored.gather_all()["id"].tolist() == [[0], [1]]
    assert torch.equal(restored.state_dict()["rng"], twin.state_dict()["rng"])  # a PCG64 state is not a torch one


def test_corrupt_item_file_leaves_the_buffer_empty(tmp_path):
    original = segmented()
    fill(original, 5)
    original.save(tmp_path / "ckpt")
    folder = tmp_path / "ckpt" / json.loads((tmp_path / "ckpt" / "CURRENT").read_text())["current"]
    target = sorted(folder.glob("*items*.npy"))[0]
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01
    target.write_bytes(bytes(data))
    buffer = segmented()
    fill(buffer, 2, start=30)
    with pytest.raises(CheckpointError, match="checksum"):
        buffer.load(tmp_path / "ckpt")
    assert buffer.num_frames() == 0
    fill(buffer, 1, start=40)
    assert buffer.gather_all()["id"].tolist() == [[80], [81]]


@CUDA
def test_cuda_round_trip_through_state_dict_and_folder(tmp_path):
    original = segmented(device="cuda")
    fill(original, 8)
    original.get_next(3)
    restored = segmented(device="cuda", seed=0)
    restored.load_state_dict(original.state_dict())
    assert_same(original, restored)
    original.save(tmp_path / "ckpt")
    again = segmented(device="cuda", seed=0)
    again.load(tmp_path / "ckpt")
    assert_same(original, again)


FOLDERS = Path(__file__).parent / "fixtures" / "torch-v1"  # written by the per-leaf storage (main at 3dd3388)


def test_folders_of_the_per_leaf_storage_still_load():
    expected = json.loads((FOLDERS / "expected.json").read_text())
    buffer = segmented(seed=0)
    buffer.load(FOLDERS / "uniform")
    stored = buffer.gather_all()
    assert stored["id"].tolist() == [[6, 8, 10, 12, 14], [7, 9, 11, 13, 15]]
    want = fields_for_ids(stored["id"].numpy())
    np.testing.assert_array_equal(stored["observation"]["camera"].numpy(), want["observation"]["camera"])
    np.testing.assert_array_equal(stored["observation"]["position"].numpy(), want["observation"]["position"])
    assert buffer.get_next(4, 2)[1].ids.tolist() == expected["uniform_next_ids"]  # the generator continues
    types = [torch.float32, torch.int32, torch.float32, torch.float32]
    rows = ReplayBuffer(4, 6, [(4,), (1,), (1,), (4,)], types, device="cpu", seed=0)
    rows.load(FOLDERS / "mindspore")
    assert (rows.head, rows.count) == (3, 6)
    assert [int(rows.get_item(i)[1]) for i in range(6)] == [3, 4, 5, 6, 7, 8]
    assert rows.get_item(2)[3].tolist() == [-5.0] * 4
    assert rows.sample()[1][:, 0].tolist() == expected["mindspore_next_sample_rows"]
