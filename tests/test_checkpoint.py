"""state_dict / load_state_dict, save / load folders, and what a bad checkpoint raises."""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
from conformance_data import SPEC, fields_for_ids, step_batch
from replaybuf import PrioritizedReplayBuffer
from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.persistence import folder as checkpoint_folder

ID = str(replaybuf.nest.FlatSpec(SPEC).paths.index("id"))  # the key of the "id" leaf in state["items"]


def uniform(batch_size=2, max_length=5, seed=7, **kwargs):
    return replaybuf.UniformReplayBuffer(SPEC, batch_size=batch_size, max_length=max_length, seed=seed, **kwargs)


def py_uniform(capacity=7, seed=7, **kwargs):
    return replaybuf.PyUniformReplayBuffer(SPEC, capacity=capacity, seed=seed, **kwargs)


def fill(buffer, steps, start=0):
    for step in range(start, start + steps):
        buffer.add_batch(step_batch(step, buffer.batch_size))


def samples(buffer, n=5):
    """A trace of what the buffer returns next: sampled ids and items."""
    out = []
    for _ in range(n):
        items, info = buffer.get_next(4, 2)
        out.append((info.ids.tolist(), items["id"].tolist()))
    return out


def assert_same_buffer(a, b):
    """Same contents, counters and, from here on, the same samples."""
    assert a.num_frames() == b.num_frames()
    np.testing.assert_array_equal(a.gather_all()["id"], b.gather_all()["id"])
    np.testing.assert_array_equal(a.gather_all()["observation"]["camera"], b.gather_all()["observation"]["camera"])
    assert samples(a) == samples(b)


@given(batch_size=st.integers(1, 4), max_length=st.integers(2, 6), steps=st.integers(2, 20), draws=st.integers(0, 3))
@settings(max_examples=40, deadline=None)
def test_state_dict_round_trip_continues_exactly(batch_size, max_length, steps, draws):
    original = uniform(batch_size, max_length)
    fill(original, steps)
    for _ in range(draws):  # move the RNG away from its seed
        original.get_next(3)
    restored = uniform(batch_size, max_length, seed=12345)
    restored.load_state_dict(original.state_dict())
    assert_same_buffer(original, restored)
    fill(original, 3, start=steps)
    fill(restored, 3, start=steps)
    assert_same_buffer(original, restored)


def test_state_dict_is_plain_and_a_snapshot():
    buffer = uniform()
    fill(buffer, 3)
    state = buffer.state_dict()
    assert state["steps"] == 3 and state["checkpoint"]["saved_by"] == "UniformReplayBuffer"
    ids = state["items"][ID].copy()
    np.testing.assert_array_equal(ids, np.arange(6))  # id order, oldest first, valid items only
    fill(buffer, 4, start=3)
    np.testing.assert_array_equal(state["items"][ID], ids)


def test_py_uniform_round_trip_through_a_folder(tmp_path):
    original = py_uniform(capacity=7)
    original.add_batch(fields_for_ids(np.arange(10)))  # wraps
    original.get_next(2)
    original.save(tmp_path / "ckpt")
    restored = py_uniform(capacity=7, seed=0)
    restored.load(tmp_path / "ckpt")
    assert_same_buffer(original, restored)


def test_empty_buffer_round_trip(tmp_path):
    original = uniform()
    original.save(tmp_path / "ckpt")
    restored = uniform(seed=1)
    fill(restored, 2)
    restored.load(tmp_path / "ckpt")
    assert restored.num_frames() == 0
    with pytest.raises(replaybuf.EmptyBufferError):
        restored.get_next()


def test_saves_replace_the_previous_version_and_files_need_no_replaybuf(tmp_path):
    buffer = uniform()
    fill(buffer, 2)
    buffer.save(tmp_path)
    fill(buffer, 6, start=2)
    buffer.save(tmp_path)
    pointer = json.loads((tmp_path / "CURRENT").read_text())
    assert sorted(os.listdir(tmp_path)) == ["CURRENT", pointer["current"]]
    folder = tmp_path / pointer["current"]
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = manifest["state"]["items"][ID]
    ids = np.load(folder / entry["__npy__"], allow_pickle=False)
    np.testing.assert_array_equal(ids, np.arange(6, 16))
    restored = uniform(seed=3)
    restored.load(folder)  # a version folder loads directly too
    assert_same_buffer(buffer, restored)


def test_memmap_and_memory_buffers_share_the_state_format(tmp_path):
    memory = uniform()
    fill(memory, 9)
    disk = uniform(storage="memmap", path=tmp_path / "disk")
    disk.load_state_dict(memory.state_dict())
    assert_same_buffer(memory, disk)
    disk.save(tmp_path / "ckpt")
    back = uniform()
    back.load(tmp_path / "ckpt")
    assert_same_buffer(disk, back)
    again = uniform(storage="memmap", path=tmp_path / "again")  # files streamed into the mapping
    again.load(tmp_path / "ckpt")
    assert_same_buffer(memory, again)
    del again
    reopened = uniform(storage="memmap", path=tmp_path / "again")  # and kept there (the RNG restarts)
    np.testing.assert_array_equal(reopened.gather_all()["id"], memory.gather_all()["id"])


def test_memmap_reopen_keeps_items(tmp_path):
    first = py_uniform(capacity=5, storage="memmap", path=tmp_path / "rb")
    first.add_batch(fields_for_ids(np.arange(8)))
    del first
    again = py_uniform(capacity=5, storage="memmap", path=tmp_path / "rb")
    np.testing.assert_array_equal(again.gather_all()["id"], [[3, 4, 5, 6, 7]])
    again.clear()
    assert py_uniform(capacity=5, storage="memmap", path=tmp_path / "rb").num_frames() == 0


# -- refused states: CheckpointError, and the buffer keeps what it had ---------------------------
def broken_states():
    good = uniform()
    fill(good, 3)

    def edit(change):
        state = good.state_dict()
        change(state)
        return state

    return {
        "header version": edit(lambda s: s["checkpoint"].update({"version": 3})),
        "header disagrees": edit(lambda s: s["checkpoint"].update({"priorities": True})),
        "spec": edit(lambda s: s["spec"].update({"dtypes": ["<f8"] * 4})),
        "geometry": edit(lambda s: s.update({"max_length": 9})),
        "missing key": edit(lambda s: s.pop("steps")),
        "item shape": edit(lambda s: s["items"].update({"1": np.zeros((6, 4), np.float32)})),
        "item count": edit(lambda s: s["items"].update({k: v[:3] for k, v in s["items"].items()})),
        "steps": edit(lambda s: s.update({"steps": -1})),
        "rng": edit(lambda s: s.update({"rng": {"bit_generator": "MT19937"}})),
        "not a dict": [1, 2],
    }


@pytest.mark.parametrize("name", sorted(broken_states()))
def test_bad_state_is_refused_and_nothing_changes(name):
    buffer = uniform()
    fill(buffer, 4, start=10)
    before = buffer.state_dict()
    with pytest.raises(CheckpointError):
        buffer.load_state_dict(broken_states()[name])
    after = buffer.state_dict()
    assert after["steps"] == before["steps"] and after["rng"] == before["rng"]
    np.testing.assert_array_equal(after["items"]["0"], before["items"]["0"])


def test_unsaveable_state_raises_argument_error(tmp_path):
    with pytest.raises(ArgumentError, match="object arrays"):
        checkpoint_folder.write_state(tmp_path, {"x": np.array([object()])})
    with pytest.raises(ArgumentError, match="set"):
        checkpoint_folder.write_state(tmp_path, {"x": {1, 2}})
    with pytest.raises(ArgumentError, match="keys must be strings"):
        checkpoint_folder.write_state(tmp_path, {1: 2})


# -- corrupt folders ------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    buffer = uniform()
    fill(buffer, 7)
    buffer.save(tmp_path / "ckpt")
    folder = tmp_path / "ckpt" / json.loads((tmp_path / "ckpt" / "CURRENT").read_text())["current"]
    return tmp_path / "ckpt", folder


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())  # offset may be negative (from the end)
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def npy_files(folder):
    return sorted(folder.glob("*.npy"))


@pytest.mark.parametrize(
    "damage",
    [
        "flip data byte",
        "flip header byte",
        "truncate array",
        "extend array",
        "delete array",
        "truncate manifest",
        "edit manifest",
        "corrupt pointer",
        "pointer to nothing",
    ],
)
def test_corrupt_checkpoint_is_refused_and_nothing_is_loaded(saved, damage):
    root, folder = saved
    target = npy_files(folder)[1]
    if damage == "flip data byte":
        flip_byte(target, target.stat().st_size - 3)
    elif damage == "flip header byte":
        flip_byte(target, 20)
    elif damage == "truncate array":
        target.write_bytes(target.read_bytes()[:-5])
    elif damage == "extend array":
        target.write_bytes(target.read_bytes() + b"\0")
    elif damage == "delete array":
        target.unlink()
    elif damage == "truncate manifest":
        manifest = folder / "manifest.json"
        manifest.write_bytes(manifest.read_bytes()[:100])
    elif damage == "edit manifest":
        manifest = folder / "manifest.json"
        manifest.write_text(manifest.read_text().replace('"steps": 7', '"steps": 6'))
    elif damage == "corrupt pointer":
        (root / "CURRENT").write_text('{"current": "v0000')
    elif damage == "pointer to nothing":
        (root / "CURRENT").write_text('{"current": "v000099"}')
    buffer = uniform()
    fill(buffer, 2, start=50)
    with pytest.raises(CheckpointError):
        buffer.load(root)
    if damage == "flip data byte":  # found while streaming the items in: nothing of them is kept
        assert buffer.num_frames() == 0
        fill(buffer, 1, start=60)
        np.testing.assert_array_equal(buffer.gather_all()["id"], [[120], [121]])
    else:  # found before anything changed
        np.testing.assert_array_equal(buffer.gather_all()["id"], [[100, 102], [101, 103]])


def test_missing_checkpoint_and_foreign_folders(tmp_path):
    with pytest.raises(CheckpointError, match="no replaybuf checkpoint"):
        uniform().load(tmp_path / "nothing")
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not a replaybuf checkpoint folder"):
        uniform().save(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    with pytest.raises(CheckpointError, match="existing file"):
        uniform().save(tmp_path / "mine.txt")


def test_newer_format_version_is_refused(saved):
    root, folder = saved
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format_version"] = 99
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="format_version 99"):
        uniform().load(folder)


# -- storage arguments -----------------------------------------------------------------------------
def test_storage_arguments_are_checked(tmp_path):
    with pytest.raises(ArgumentError, match="storage"):
        uniform(storage="disk")
    with pytest.raises(ArgumentError, match="path"):
        uniform(storage="memmap")
    with pytest.raises(ArgumentError, match="path"):
        uniform(path=tmp_path)


def test_memmap_folder_of_another_buffer_is_refused(tmp_path):
    uniform(storage="memmap", path=tmp_path / "rb")
    with pytest.raises(CheckpointError, match="max_length"):
        uniform(max_length=6, storage="memmap", path=tmp_path / "rb")
    with pytest.raises(CheckpointError, match="spec"):
        replaybuf.UniformReplayBuffer(
            {"x": replaybuf.ArraySpec((), np.float32)}, 2, 5, storage="memmap", path=tmp_path / "rb"
        )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.bin").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="not a memmap buffer folder"):
        uniform(storage="memmap", path=tmp_path / "other")


# -- buffers built on UniformReplayBuffer: priorities and episode bookkeeping ---------------------
def prioritized(seed=3, **kwargs):
    return PrioritizedReplayBuffer(SPEC, batch_size=2, max_length=8, alpha=0.7, beta=0.5, seed=seed, **kwargs)


def prioritized_trace(buffer, n=5):
    out = []
    for _ in range(n):
        items, info = buffer.get_next(6, 2)
        out.append((info.ids.tolist(), items["id"].tolist(), info.probabilities.tolist(), info.weights.tolist()))
    return out


@pytest.mark.parametrize("route", ["state_dict", "folder"])
def test_prioritized_round_trip_keeps_priorities_and_samples(tmp_path, route):
    original = prioritized()
    fill(original, 11)
    _, info = original.get_next(6)
    original.update_priorities(info.ids, np.linspace(0.1, 5.0, 6))
    restored = prioritized(seed=0)
    if route == "folder":
        original.save(tmp_path / "ckpt")
        restored.load(tmp_path / "ckpt")
    else:
        restored.load_state_dict(original.state_dict())
    np.testing.assert_array_equal(original.gather_all()["id"], restored.gather_all()["id"])
    assert prioritized_trace(original) == prioritized_trace(restored)
    fill(original, 3, start=11)
    fill(restored, 3, start=11)
    assert prioritized_trace(original) == prioritized_trace(restored)


def test_prioritized_state_without_fitting_priorities_is_refused():
    source = prioritized()
    fill(source, 5)
    state = source.state_dict()
    state["priorities"]["mass"] = state["priorities"]["mass"][:3]
    target = prioritized()
    fill(target, 2, start=40)
    with pytest.raises(CheckpointError, match="priorities"):
        target.load_state_dict(state)
    np.testing.assert_array_equal(target.gather_all()["id"], [[80, 82], [81, 83]])
    with pytest.raises(CheckpointError, match=r"state\['priorities'\]: the checkpoint holds priorities"):
        uniform(max_length=8).load_state_dict(source.state_dict())


def test_episode_bookkeeping_round_trip(tmp_path):
    def make(seed):
        return uniform(max_length=8, seed=seed, respect_episodes=True, episode_end_field="flag")

    original = make(3)
    fill(original, 13)
    original.save(tmp_path / "ckpt")
    restored = make(0)
    restored.load(tmp_path / "ckpt")
    assert samples(original) == samples(restored)


# -- reopening a memmap folder rebuilds what derives from the items -------------------------------
def episode_batch(step, batch_size, ends):
    items = step_batch(step, batch_size)
    items["flag"] = np.asarray(ends, bool)
    return items


@pytest.mark.parametrize("pad", [False, True])
def test_memmap_reopen_rebuilds_the_episode_index(tmp_path, pad):
    def make(**kwargs):
        episodes = {"respect_episodes": True, "pad_episode_ends": pad, "episode_end_field": "flag"}
        return uniform(max_length=9, seed=5, **episodes, **kwargs)

    rng = np.random.default_rng(0)
    disk, twin = make(storage="memmap", path=tmp_path / "rb"), make()
    for step in range(23):  # wraps: the oldest stored items start mid-episode
        ends = rng.random(2) < 0.3
        disk.add_batch(episode_batch(step, 2, ends))
        twin.add_batch(episode_batch(step, 2, ends))
    del disk
    reopened = make(storage="memmap", path=tmp_path / "rb")
    for num_steps in (2, 3, 5):
        for _ in range(4):
            a_items, a_info = reopened.get_next(6, num_steps)
            b_items, b_info = twin.get_next(6, num_steps)
            np.testing.assert_array_equal(a_info.ids, b_info.ids)
            if pad:
                np.testing.assert_array_equal(a_info.mask, b_info.mask)
    reopened.add_batch(episode_batch(23, 2, [True, False]))
    twin.add_batch(episode_batch(23, 2, [True, False]))
    assert samples(reopened) == samples(twin)


def test_memmap_reopen_of_an_empty_or_lost_episode_buffer(tmp_path):
    kwargs = dict(max_length=4, respect_episodes=True, episode_end_field="flag", storage="memmap", path=tmp_path / "rb")
    uniform(**kwargs)
    assert uniform(**kwargs).num_frames() == 0
    cursor = np.load(tmp_path / "rb" / "cursor.npy", mmap_mode="r+")
    cursor[:] = [6, 10]  # a torn add of 4 steps over a full ring: nothing intact is left
    del cursor
    buffer = uniform(**kwargs)
    assert buffer.num_frames() == 0
    fill(buffer, 3, start=6)
    np.testing.assert_array_equal(buffer.gather_all()["id"], [[12, 14, 16], [13, 15, 17]])


def test_memmap_reopen_gives_recovered_items_a_new_items_priority(tmp_path):
    disk, twin = prioritized(storage="memmap", path=tmp_path / "rb"), prioritized()
    fill(disk, 11)
    fill(twin, 11)
    _, info = disk.get_next(6)
    disk.update_priorities(info.ids, np.linspace(0.1, 5.0, 6))  # not kept by the folder
    del disk
    reopened = prioritized(storage="memmap", path=tmp_path / "rb")
    for a, b in zip(prioritized_trace(reopened), prioritized_trace(twin), strict=True):
        assert a[:2] == b[:2]
        np.testing.assert_allclose(a[2:], b[2:], rtol=1e-6)
    fill(reopened, 2, start=11)
    fill(twin, 2, start=11)
    assert [t[0] for t in prioritized_trace(reopened)] == [t[0] for t in prioritized_trace(twin)]


# -- streaming: blocks, bounce buffers, checksums -------------------------------------------------
@given(
    capacity=st.integers(1, 40),
    added=st.integers(0, 90),
    chunk=st.sampled_from([1, 7, 64, 1 << 21]),
)
@settings(max_examples=40, deadline=None)
def test_save_and_load_stream_in_blocks_of_any_size(tmp_path_factory, capacity, added, chunk):
    """Strided fields of a wrapped ring, cut into blocks of any size, write and read back exactly."""
    folder = tmp_path_factory.mktemp("ckpt")
    original = py_uniform(capacity=capacity)
    original.add_batch(fields_for_ids(np.arange(added)))
    saved = checkpoint_folder._CHUNK, checkpoint_folder._READ_CHUNK
    checkpoint_folder._CHUNK = checkpoint_folder._READ_CHUNK = chunk
    try:
        original.save(folder)
        restored = py_uniform(capacity=capacity, seed=0)
        restored.load(folder)
    finally:
        checkpoint_folder._CHUNK, checkpoint_folder._READ_CHUNK = saved
    expected = original.state_dict()["items"]
    got = restored.state_dict()["items"]
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
    plain = checkpoint_folder.read_state(folder)  # np.load-compatible files with zlib's CRC-32
    version = folder / json.loads((folder / "CURRENT").read_text())["current"]
    manifest = json.loads((version / "manifest.json").read_text())
    for key, entry in manifest["state"]["items"].items():
        path = version / entry["__npy__"]
        assert zlib.crc32(path.read_bytes()) == entry["crc32"]
        np.testing.assert_array_equal(np.load(path, allow_pickle=False), expected[key])
        np.testing.assert_array_equal(plain["items"][key], expected[key])


def test_lazy_read_checks_headers_first_and_the_target_shape(tmp_path):
    buffer = uniform()
    fill(buffer, 3)
    buffer.save(tmp_path)
    state = checkpoint_folder.read_state(tmp_path, lazy=("items",))
    stored = state["items"]["0"]
    assert isinstance(stored, checkpoint_folder.StoredArray) and isinstance(state["rng"], dict)
    with pytest.raises(CheckpointError, match="target"):
        stored.read_into(np.empty((stored.shape[0] + 1, *stored.shape[1:]), stored.dtype))
    np.testing.assert_array_equal(stored.read(), buffer.state_dict()["items"]["0"])


def test_prioritized_load_of_a_corrupt_item_file_clears_the_trees(tmp_path):
    source = prioritized()
    fill(source, 6)
    source.save(tmp_path / "ckpt")
    folder = tmp_path / "ckpt" / json.loads((tmp_path / "ckpt" / "CURRENT").read_text())["current"]
    flip_byte(sorted(folder.glob("*items*.npy"))[0], -1)
    target = prioritized()
    fill(target, 8, start=20)
    with pytest.raises(CheckpointError, match="checksum"):
        target.load(tmp_path / "ckpt")
    assert target.num_frames() == 0
    fill(target, 1, start=40)
    _, info = target.get_next(50)
    assert set(info.ids.tolist()) == {0, 1}  # ids restart after the clear
    np.testing.assert_allclose(info.probabilities, 0.5)  # no old mass left in the trees


def test_round_trip_with_zlibs_crc32(tmp_path, monkeypatch):
    """Without the optional ISA-L package the same files come out (zlib's CRC-32)."""
    original = py_uniform(capacity=9)
    original.add_batch(fields_for_ids(np.arange(13)))
    original.save(tmp_path / "fast")
    monkeypatch.setattr(checkpoint_folder, "_crc32", zlib.crc32)
    original.save(tmp_path / "zlib")
    fast, slow = sorted((tmp_path / "fast").rglob("*.npy")), sorted((tmp_path / "zlib").rglob("*.npy"))
    for a, b in zip(fast, slow, strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "fast" / "CURRENT").read_text() == (tmp_path / "zlib" / "CURRENT").read_text()
    restored = py_uniform(capacity=9, seed=0)
    restored.load(tmp_path / "fast")
    assert_same_buffer(original, restored)
