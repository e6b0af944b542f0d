"""Frame-stack buffers with ``storage="memmap"`` (docs/images.md, docs/persistence.md): the
samples of the in-memory buffer, bounded resident memory, crash-safe, reopened whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import replaybuf
from replaybuf import ArraySpec, FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer
from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.storages.frame_blob_file import BlobFilePool
from replaybuf.storages.frame_memmap import MappedFramePool

FRAME = (6, 5)


def spec(axis: int, frame: tuple[int, ...] = FRAME) -> dict:
    shape = list(frame)
    shape.insert(axis % (len(frame) + 1), 4)
    return {
        "observation": ArraySpec(tuple(shape), np.uint8),
        "action": ArraySpec((), np.int64),
        "step_type": ArraySpec((), np.int32),
        "next_observation": ArraySpec(tuple(shape), np.uint8),
    }


def adds(rb, steps: int, seed: int, axis: int = 0, first: int = 0) -> None:
    """``steps`` adds of 2 streams of episodes (reset padding repeats the first frame, some
    frames all zero), reproducible from ``seed``; actions count from ``first``."""
    rng = np.random.default_rng(seed)
    stacks: list = [None, None]
    for t in range(steps):
        obs, nxt, types = [], [], []
        for s in range(2):
            if stacks[s] is None or rng.random() < 0.2:
                start = rng.integers(0, 4, FRAME, dtype=np.uint8)
                stacks[s] = [start] * 4
                types.append(0)
            else:
                types.append(1)
            new = rng.integers(0, 4, FRAME, dtype=np.uint8) * (rng.random() < 0.9)
            obs.append(np.stack(stacks[s], axis=axis))
            stacks[s] = stacks[s][1:] + [new]
            nxt.append(np.stack(stacks[s], axis=axis))
        rb.add_batch(
            {
                "observation": np.stack(obs),
                "action": np.arange(2) + 2 * (first + t),
                "step_type": np.array(types, np.int32),
                "next_observation": np.stack(nxt),
            }
        )


def assert_same_samples(a, b, calls: int = 6) -> None:
    for _ in range(calls):
        (x, xi), (y, yi) = a.get_next(8, 2), b.get_next(8, 2)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
        np.testing.assert_array_equal(xi.ids, yi.ids)
        np.testing.assert_array_equal(xi.probabilities, yi.probabilities)


@pytest.mark.parametrize("cls", [FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer])
@pytest.mark.parametrize("axis", [0, -1])
def test_samples_equal_the_in_memory_buffers(tmp_path, cls, axis):
    memory = cls(spec(axis), 2, 10, stack_axis=axis, seed=5)
    mapped = cls(spec(axis), 2, 10, stack_axis=axis, seed=5, storage="memmap", path=tmp_path / "rb")
    for round_ in range(4):  # across wraparound and the frame ring's growth
        adds(memory, 13, round_, axis, 13 * round_)
        adds(mapped, 13, round_, axis, 13 * round_)
        assert_same_samples(memory, mapped)
        for key, value in memory.gather_all().items():
            np.testing.assert_array_equal(value, mapped.gather_all()[key])
    assert mapped.storage.pool.counter == memory.storage.pool.counter  # the same frames stored
    assert isinstance(mapped.storage.pool, MappedFramePool)


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_a_sample_is_its_own_copy_of_the_mapped_frames(tmp_path, compression):
    """Samples are gathered from the file's read-only mapping into arrays of their own: adds
    that write over every frame of the file leave them as they were, and the next read sees
    the new frames."""
    rb = FrameStackReplayBuffer(spec(0), 2, 10, seed=0, compression=compression, storage="memmap", path=tmp_path / "rb")
    memory = FrameStackReplayBuffer(spec(0), 2, 10, seed=0, compression=compression)
    for buffer in (rb, memory):
        adds(buffer, 10, 0)
    before = rb.gather_all()
    kept = {key: value.copy() for key, value in before.items()}
    assert before["observation"].flags.writeable
    counter = rb.storage.pool.counter
    for buffer in (rb, memory):
        adds(buffer, 40, 1, first=10)
    assert rb.storage.pool.counter - counter >= rb.storage.pool.size  # every row written over
    for key, value in kept.items():
        np.testing.assert_array_equal(before[key], value)
    for key, value in memory.gather_all().items():
        np.testing.assert_array_equal(rb.gather_all()[key], value)


def test_reopening_recovers_the_items_and_the_frame_matching(tmp_path):
    memory = FrameStackReplayBuffer(spec(0), 2, 10, seed=5)
    mapped = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    adds(memory, 27, 0)
    adds(mapped, 27, 0)
    del mapped
    reopened = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    assert reopened.num_frames() == memory.num_frames() == 20
    for key, value in memory.gather_all().items():
        np.testing.assert_array_equal(value, reopened.gather_all()[key])
    # the continuing episodes match the reopened newest step: one new frame per transition, as
    # in the buffer that never closed (the generator continues where it was)
    before = (memory.storage.pool.counter, reopened.storage.pool.counter)
    adds(memory, 1, 99, first=27)
    adds(reopened, 1, 99, first=27)
    assert reopened.storage.pool.counter - before[1] == memory.storage.pool.counter - before[0]
    for key, value in memory.gather_all().items():
        np.testing.assert_array_equal(value, reopened.gather_all()[key])


def unshared_item(rng: np.random.Generator, t: int) -> dict:
    """Step ``t`` of 2 streams whose stacks share no frame (8 new random frames an item)."""
    return {
        "observation": rng.integers(1, 255, (2, 4, *FRAME), np.uint8),
        "action": np.arange(2) + 2 * t,
        "step_type": np.ones(2, np.int32),
        "next_observation": rng.integers(1, 255, (2, 4, *FRAME), np.uint8),
    }


def test_a_ring_that_grows_is_rewritten_and_reopens(tmp_path):
    """Stacks sharing no frame (8 new frames an item) outgrow the ring sized for one: it is
    rewritten larger, every item still reads back, and the reopened folder has its size."""
    rng = np.random.default_rng(0)
    memory = FrameStackReplayBuffer(spec(0), 2, 10, seed=5)
    mapped = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    size = mapped.storage.pool.size
    for t in range(25):
        item = unshared_item(rng, t)
        memory.add_batch(item)
        mapped.add_batch(item)
    assert mapped.storage.pool.size > size
    assert_same_samples(memory, mapped)
    grown = mapped.storage.pool.size
    del mapped
    reopened = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    assert reopened.storage.pool.size == grown
    for key, value in memory.gather_all().items():
        np.testing.assert_array_equal(value, reopened.gather_all()[key])
    assert sorted(p.name for p in (tmp_path).iterdir()) == ["rb"]  # no temporary file left
    assert sorted(p.name for p in (tmp_path / "rb").iterdir()) == [
        "cursor.npy",
        "frames.npy",
        "meta.json",
        "records.npy",
    ]


@pytest.mark.parametrize("cls", [FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer])
def test_a_reopened_buffer_keeps_windows_inside_episodes(tmp_path, cls):
    """The episode index is rebuilt from the stored step types (read by flat index)."""
    options = {"respect_episodes": True, "seed": 5}
    memory = cls(spec(0), 2, 10, **options)
    mapped = cls(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb", **options)
    adds(memory, 23, 0)
    adds(mapped, 23, 0)
    del mapped
    reopened = cls(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb", **options)
    assert_same_samples(memory, reopened)
    for _ in range(5):
        items, _ = reopened.get_next(16, 3)
        assert np.all(items["step_type"][:, 1:] != 0)  # no window crosses an episode start


def _step(observation: np.ndarray, next_observation: np.ndarray) -> dict:
    mid = np.ones(2, np.int32)
    return {"observation": observation, "action": np.arange(2), "step_type": mid, "next_observation": next_observation}


def test_a_cleared_folder_reopens_empty_and_takes_adds(tmp_path):
    memory = FrameStackReplayBuffer(spec(0), 2, 10, seed=5)
    mapped = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    adds(mapped, 12, 0)
    mapped.clear()
    del mapped
    reopened = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    assert reopened.num_frames() == 0 and reopened.storage.pool.counter == 0
    adds(memory, 14, 1)
    adds(reopened, 14, 1)
    assert_same_samples(memory, reopened)


def test_a_reopened_buffer_stores_a_continuing_episode_once(tmp_path):
    """Observations continuing the reopened newest step share its frames (obs == next_obs)."""
    data_spec = spec(0)
    rb = FrameStackReplayBuffer(data_spec, 2, 10, storage="memmap", path=tmp_path / "rb")
    stack = np.arange(2 * 4 * 30, dtype=np.uint8).reshape(2, 4, 6, 5) % 7 + 1
    for t in range(3):
        nxt = np.concatenate([stack[:, 1:], stack[:, :1] + t + 1], axis=1)
        rb.add_batch(_step(stack, nxt))
        stack = nxt
    counter = rb.storage.pool.counter
    del rb
    rb = FrameStackReplayBuffer(data_spec, 2, 10, storage="memmap", path=tmp_path / "rb")
    assert rb.storage.pool.counter == counter
    nxt = np.concatenate([stack[:, 1:], stack[:, :1] + 9], axis=1)
    rb.add_batch(_step(stack, nxt))
    assert rb.storage.pool.counter == counter + 2  # one new frame per stream
    np.testing.assert_array_equal(rb.gather_all()["observation"][:, -1], stack)


@pytest.mark.parametrize(
    ("compression", "pool", "method"), [(None, MappedFramePool, "append"), ("lz4", BlobFilePool, "_append")]
)
def test_an_add_cut_short_reopens_to_the_whole_items(tmp_path, monkeypatch, compression, pool, method):
    """An add dies after its records, while appending its frames (raw) or blobs (lz4):
    reopening drops it and the items it was overwriting, and every other item reads back as added."""
    options = {"seed": 5, "compression": compression}
    memory = FrameStackReplayBuffer(spec(0), 2, 10, **options)
    mapped = FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb", **options)
    adds(memory, 14, 0)
    adds(mapped, 14, 0)
    original = getattr(pool, method)

    def dies_halfway(self, new_frames, oldest):
        original(self, new_frames[: len(new_frames) // 2], oldest)
        raise KeyboardInterrupt

    monkeypatch.setattr(pool, method, dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        adds(mapped, 1, 7, first=14)
    monkeypatch.undo()
    reopened = FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb", **options)
    assert reopened.num_frames() == 18  # 10 steps held; the oldest (being overwritten) dropped
    want = memory.gather_all()
    got = reopened.gather_all()
    for key, value in want.items():
        np.testing.assert_array_equal(value[:, 1:], got[key])
    adds(reopened, 3, 8, first=14)  # and it takes adds again
    assert reopened.num_frames() == 20


CRASH_WRITER = """
import sys
import numpy as np
from replaybuf import ArraySpec, FrameStackReplayBuffer
spec = {"observation": ArraySpec((4, 32, 32), np.uint8), "action": ArraySpec((), np.int64)}
rb = FrameStackReplayBuffer(spec, 4, 50, storage="memmap", path=sys.argv[1])
t = rb.num_frames() // 4
print("ready", flush=True)
while True:  # frame of stream s at step t: all (t * 4 + s) % 250 + 1; the stack holds steps t-3..t
    values = (np.arange(t - 3, t + 1)[None, :] * 4 + np.arange(4)[:, None]) % 250 + 1
    frames = np.broadcast_to(values[:, :, None, None], (4, 4, 32, 32)).astype(np.uint8)
    rb.add_batch({"observation": frames, "action": t * 4 + np.arange(4)})
    t += 1
"""


def _check_whole(rb) -> None:
    items = rb.gather_all()
    actions = items["action"]  # [4, n]: action = id
    assert actions.size > 0
    for s in range(4):
        for i, action in enumerate(actions[s]):
            t = int(action) // 4
            want = [((u * 4 + s) % 250) + 1 for u in range(t - 3, t + 1)]
            assert items["observation"][s, i, :, 0, 0].tolist() == want
            assert np.all(items["observation"][s, i] == np.array(want, np.uint8)[:, None, None])


def killed_writers_reopen_whole(path, writer: str, **options) -> None:
    """Two rounds of: the ``writer`` script (CRASH_WRITER's adds into the folder ``path``)
    SIGKILLed mid-stream, then the folder reopened with ``options``: every item whole."""
    for round_ in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(writer), str(path)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            assert child.stdout.readline().strip() == b"ready"
            time.sleep(0.3 + 0.2 * round_)
            child.send_signal(signal.SIGKILL)
        finally:
            child.wait(timeout=30)
            child.stdout.close()
        spec_ = {"observation": ArraySpec((4, 32, 32), np.uint8), "action": ArraySpec((), np.int64)}
        rb = FrameStackReplayBuffer(spec_, 4, 50, storage="memmap", path=path, **options)
        _check_whole(rb)
        for _ in range(3):
            items, info = rb.get_next(16)
            np.testing.assert_array_equal(items["action"], info.ids)
        del rb


def test_a_writer_killed_mid_add_leaves_a_folder_that_reopens_whole(tmp_path):
    killed_writers_reopen_whole(tmp_path / "rb", CRASH_WRITER)


def resident() -> dict[str, int]:
    """This process's resident bytes, anonymous (``RssAnon``) and file-backed (``RssFile``)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("RssAnon", "RssFile")}


def mapped_resident(path) -> int:
    """The resident bytes of this process's mappings of the file ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:  # a mapping's first line: range, perms, ..., path
                inside = head[-1] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_resident_memory_grows_by_what_is_sampled_not_by_the_frames_written(tmp_path, compression):
    """400 MB of frames (compressed: of blobs, the frames' random bytes do not compress) go to
    disk while this process's RSS grows by less than 100 MB. Samples read the file through its
    mapping: anonymous RSS stays under 100 MB, and the file's pages left mapped (page cache, in
    RssFile) follow the frames sampled: 160 stacks read about 4% of the frames and, as the
    kernel maps the cached pages around each one read, left about a quarter of the file mapped
    here, under the half asserted (docs/persistence.md)."""
    frame = (160, 160)  # 25.6 KB; 16 streams: one new frame per stream and add, 410 KB an add
    data_spec = {"observation": ArraySpec((4, *frame), np.uint8), "action": ArraySpec((), np.int64)}
    streams, steps = 16, 1000
    rb = FrameStackReplayBuffer(
        data_spec, streams, steps, storage="memmap", path=tmp_path / "rb", seed=0, compression=compression
    )
    noise = np.random.default_rng(0).integers(0, 256, (64, *frame), np.uint8)
    before = resident()
    window = np.zeros((streams, 4, *frame), np.uint8)
    for t in range(steps):
        window[:, :3] = window[:, 1:]
        window[:, 3] = noise[(t * streams + np.arange(streams)) % 61]
        window[:, 3, 0, 0] = (t * streams + np.arange(streams)) % 250 + 1
        rb.add_batch({"observation": window, "action": t * streams + np.arange(streams)})
    pool = rb.storage.pool
    written = pool.counter * frame[0] * frame[1] if compression is None else int(pool.index[:, 1].sum())
    assert written >= 400e6
    grown = sum(resident().values()) - sum(before.values())
    assert grown < 100e6, f"RSS grew by {grown / 1e6:.0f} MB while {written / 1e6:.0f} MB of frames were written"
    assert mapped_resident(pool.path) < 1e6  # adds write with os.pwrite (compressed: a few index rows read)
    for _ in range(5):
        items, info = rb.get_next(32)
        assert np.all(items["observation"][:, -1, 0, 0] == (info.ids % 250) + 1)
    anon = resident()["RssAnon"] - before["RssAnon"]
    assert anon < 100e6, f"anonymous RSS grew by {anon / 1e6:.0f} MB after sampling"
    mapped = mapped_resident(pool.path)
    assert 0 < mapped < written / 2, f"{mapped / 1e6:.0f} MB of {pool.path.name} resident after 160 samples"


def test_the_folder_belongs_to_its_spec(tmp_path):
    FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
    with pytest.raises(CheckpointError, match="frames="):
        FrameStackReplayBuffer(spec(-1), 2, 10, stack_axis=-1, storage="memmap", path=tmp_path / "rb")
    with pytest.raises(CheckpointError, match="format="):  # a plain buffer cannot open it
        replaybuf.UniformReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
    replaybuf.UniformReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "plain")
    with pytest.raises(CheckpointError, match="format="):  # nor a frame buffer a plain folder
        FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "plain")
    meta = json.loads((tmp_path / "rb" / "meta.json").read_text())
    assert meta["format"] == "replaybuf-memmap-frames"


def test_a_cut_frame_file_is_refused(tmp_path):
    rb = FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
    adds(rb, 3, 0)
    del rb
    frames = tmp_path / "rb" / "frames.npy"
    os.truncate(frames, frames.stat().st_size - 1)
    with pytest.raises(CheckpointError, match="frames.npy holds .*; truncated or corrupt"):
        FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")


def test_a_flipped_byte_in_the_frame_files_header_opens_or_is_refused(tmp_path):
    """Every byte of frames.npy's header, flipped: the folder opens (the byte did not matter)
    or raises CheckpointError, never another exception; the folder is not written."""
    rb = FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
    adds(rb, 3, 0)
    del rb
    frames = tmp_path / "rb" / "frames.npy"
    original = frames.read_bytes()
    header = original.index(b"\n") + 1
    for at in range(header):
        flipped = bytearray(original)
        flipped[at] ^= 0xFF
        frames.write_bytes(bytes(flipped))
        try:
            FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
        except CheckpointError:
            pass
        assert frames.read_bytes() == bytes(flipped), at
    frames.write_bytes(original)


def test_a_checkpoint_loads_into_a_memmap_frame_buffer(tmp_path):
    memory = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, seed=5)
    adds(memory, 17, 0)
    mapped = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, seed=5, storage="memmap", path=tmp_path / "rb")
    mapped.load_state_dict(memory.state_dict())
    assert_same_samples(memory, mapped)
    del mapped
    reopened = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "rb")
    for key, value in memory.gather_all().items():
        np.testing.assert_array_equal(value, reopened.gather_all()[key])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"storage": "disk"}, "storage: expected 'memory' or 'memmap', got 'disk'"),
        ({"storage": "memmap"}, "path: storage='memmap' needs a folder path"),
        ({"path": "somewhere"}, "path: only used with storage='memmap'"),
        ({"storage": "memmap", "path": "somewhere", "compression": "lz5"}, "compression: expected one of"),
    ],
)
def test_storage_arguments(tmp_path, options, message):
    with pytest.raises(ArgumentError, match=message):
        FrameStackReplayBuffer(spec(0), 2, 10, **options)
    assert not (tmp_path / "somewhere").exists()
