"""Frame-stack buffers with ``storage="memmap"`` and ``compression=`` (docs/images.md, "On
disk"): the in-memory compressed buffer's samples, reopened whole, crash-safe, a file that
grows with the compressed bytes, bad files refused. An add cut short and the resident memory
bound: tests/test_frames_memmap.py, for both kinds of frames."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf import ArraySpec, FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer
from replaybuf.errors import CheckpointError
from replaybuf.storages.frame_blob_file import BLOBS, BlobFilePool
from test_frames_memmap import (
    CRASH_WRITER,
    adds,
    assert_same_samples,
    killed_writers_reopen_whole,
    spec,
    unshared_item,
)


def _pair(cls, tmp_path, codec: str, axis: int = 0, **options):
    memory = cls(spec(axis), 2, 10, stack_axis=axis, seed=5, compression=codec, **options)
    mapped = cls(spec(axis), 2, 10, stack_axis=axis, seed=5, compression=codec, storage="memmap",
                 path=tmp_path / "rb", **options)  # fmt: skip
    return memory, mapped


def _same_items(a, b) -> None:
    for key, value in a.gather_all().items():
        np.testing.assert_array_equal(value, b.gather_all()[key])


@pytest.mark.parametrize("cls", [FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer])
@pytest.mark.parametrize(("axis", "codec"), [(0, "lz4"), (-1, "zstd"), (0, "zstd"), (-1, "lz4")])
def test_samples_equal_the_in_memory_compressed_buffers_and_reopen(tmp_path, cls, axis, codec):
    memory, mapped = _pair(cls, tmp_path, codec, axis)
    for round_ in range(4):  # across wraparound of the items, the rows and the byte ring
        adds(memory, 13, round_, axis, 13 * round_)
        adds(mapped, 13, round_, axis, 13 * round_)
        assert_same_samples(memory, mapped)
        _same_items(memory, mapped)
    assert isinstance(mapped.storage.pool, BlobFilePool)
    assert mapped.storage.pool.counter == memory.storage.pool.counter  # the same frames stored
    del mapped
    reopened = cls(spec(axis), 2, 10, stack_axis=axis, seed=5, compression=codec, storage="memmap",
                   path=tmp_path / "rb")  # fmt: skip
    _same_items(memory, reopened)
    before = (memory.storage.pool.counter, reopened.storage.pool.counter)
    adds(memory, 5, 99, axis, 52)  # continuing episodes match the reopened newest step
    adds(reopened, 5, 99, axis, 52)
    assert reopened.storage.pool.counter - before[1] == memory.storage.pool.counter - before[0]
    _same_items(memory, reopened)
    assert sorted(p.name for p in (tmp_path / "rb").iterdir()) == [BLOBS, "cursor.npy", "meta.json", "records.npy"]


def test_the_file_grows_with_the_compressed_bytes_and_reopens(tmp_path):
    """Random frames (nothing shared, nothing compresses) outgrow the rows and the byte ring:
    the file is rewritten larger, every item reads back, the reopened file keeps its size."""
    rng = np.random.default_rng(0)
    memory, mapped = _pair(FrameStackReplayBuffer, tmp_path, "lz4")
    rows, data = mapped.storage.pool.size, mapped.storage.pool.data_bytes
    for t in range(60):
        item = unshared_item(rng, t)
        memory.add_batch(item)
        mapped.add_batch(item)
        _same_items(memory, mapped)
    pool = mapped.storage.pool
    assert pool.size > rows and pool.data_bytes > data
    grown = (pool.size, pool.data_bytes)
    assert_same_samples(memory, mapped)
    del mapped, pool
    reopened = FrameStackReplayBuffer(spec(0), 2, 10, seed=5, compression="lz4", storage="memmap", path=tmp_path / "rb")
    assert (reopened.storage.pool.size, reopened.storage.pool.data_bytes) == grown
    _same_items(memory, reopened)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rb"]  # no temporary file left


def test_compressed_frames_take_less_disk_than_raw_ones(tmp_path):
    """Atari-like frames (flat areas): the blob file's allocated blocks are a fraction of the raw ring's."""
    data_spec = {"observation": ArraySpec((4, 84, 84), np.uint8), "action": ArraySpec((), np.int64)}
    window = np.zeros((4, 4, 84, 84), np.uint8)
    buffers = {
        codec: FrameStackReplayBuffer(
            data_spec, 4, 500, compression=codec, storage="memmap", path=tmp_path / str(codec)
        )
        for codec in (None, "lz4")
    }
    for t in range(500):
        window[:, :3] = window[:, 1:]
        window[:, 3] = 0
        window[:, 3, 20:40, (t % 60) : (t % 60) + 20] = 255  # a moving block
        for rb in buffers.values():
            rb.add_batch({"observation": window, "action": t * 4 + np.arange(4)})
    used = {codec: sum(p.stat().st_blocks * 512 for p in (tmp_path / str(codec)).iterdir()) for codec in buffers}
    assert used["lz4"] < used[None] / 5, used
    for a, b in zip(buffers[None].gather_all().values(), buffers["lz4"].gather_all().values(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_writer_killed_mid_add_leaves_a_folder_that_reopens_whole(tmp_path):
    writer = CRASH_WRITER.replace('storage="memmap"', 'compression="lz4", storage="memmap"')
    assert writer != CRASH_WRITER
    killed_writers_reopen_whole(tmp_path / "rb", writer, compression="lz4")


def test_the_folder_belongs_to_its_codec(tmp_path):
    FrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap", path=tmp_path / "rb")
    for codec in (None, "zstd"):  # raw or another codec: refused, nothing written
        with pytest.raises(CheckpointError, match="frames="):
            FrameStackReplayBuffer(spec(0), 2, 10, compression=codec, storage="memmap", path=tmp_path / "rb")
    FrameStackReplayBuffer(
        spec(0), 2, 10, compression="lz4", compression_level=9, storage="memmap", path=tmp_path / "rb"
    )  # fmt: skip  (the level only changes new blobs)
    FrameStackReplayBuffer(spec(0), 2, 10, storage="memmap", path=tmp_path / "raw")
    with pytest.raises(CheckpointError, match="frames="):
        FrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap", path=tmp_path / "raw")


def _closed_blob_file(path):
    """``(blobs.bin, its bytes, the newest frame's row)`` of an lz4 folder after 5 adds, closed."""
    rb = FrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap", path=path)
    adds(rb, 5, 0)
    newest = (rb.storage.pool.counter - 1) % rb.storage.pool.size
    del rb
    return path / BLOBS, bytearray((path / BLOBS).read_bytes()), newest


@pytest.mark.parametrize("damage", ["cut", "magic", "rows", "index"])
def test_a_damaged_blob_file_is_refused(tmp_path, damage):
    blobs, data, newest = _closed_blob_file(tmp_path / "rb")
    if damage == "cut":
        data = data[:-1]
    elif damage == "magic":
        data[0] ^= 0xFF
    elif damage == "rows":
        data[8:16] = np.array([7], "<i8").tobytes()
    else:  # the newest frame's index row: a blob past the data
        data[32 + 16 * newest : 40 + 16 * newest] = np.array([1 << 40], "<i8").tobytes()
    blobs.write_bytes(bytes(data))
    message = "holds a blob at" if damage == "index" else "not a ring of compressed frames"
    with pytest.raises(CheckpointError, match=message):
        FrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap", path=tmp_path / "rb")
    assert blobs.read_bytes() == bytes(data)


@pytest.mark.parametrize("source", [None, "lz4", "zstd"])
def test_a_checkpoint_loads_into_a_compressed_memmap_buffer(tmp_path, source):
    memory = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, seed=5, compression=source)
    adds(memory, 17, 0)
    mapped = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, seed=5, compression="lz4", storage="memmap",
                                               path=tmp_path / "rb")  # fmt: skip
    mapped.load_state_dict(memory.state_dict())
    assert_same_samples(memory, mapped)
    back = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, seed=5, compression=source)
    mapped.save(tmp_path / "saved")  # and its frames go back out (blobs read from the file)
    back.load(tmp_path / "saved")
    _same_items(memory, back)
    del mapped
    reopened = PrioritizedFrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap",
                                                 path=tmp_path / "rb")  # fmt: skip
    _same_items(memory, reopened)
    adds(reopened, 4, 3, first=17)
    assert reopened.num_frames() == 20


def test_a_cleared_folder_reopens_empty_and_takes_adds(tmp_path):
    memory, mapped = _pair(FrameStackReplayBuffer, tmp_path, "zstd")
    adds(mapped, 12, 0)
    mapped.clear()
    del mapped
    reopened = FrameStackReplayBuffer(
        spec(0), 2, 10, seed=5, compression="zstd", storage="memmap", path=tmp_path / "rb"
    )
    assert reopened.num_frames() == 0 and reopened.storage.pool.counter == 0 and reopened.storage.pool.head == 0
    adds(memory, 14, 1)
    adds(reopened, 14, 1)
    assert_same_samples(memory, reopened)
    _same_items(memory, reopened)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_blobs_of_mixed_sizes_wrap_grow_and_reopen_as_in_memory(tmp_path, codec):
    """Frames from all-zero to random bytes (blobs of very different sizes), episodes of
    random lengths, a reopen after every round: the byte ring wraps and grows, and every
    item still equals the in-memory compressed buffer's."""
    rng = np.random.default_rng(3)
    frame = (32, 32)  # blobs of 20-1,040 bytes: the live ones outgrow the first data size
    options = {"seed": 5, "compression": codec}
    memory = FrameStackReplayBuffer(spec(0, frame), 2, 10, **options)
    mapped = FrameStackReplayBuffer(spec(0, frame), 2, 10, **options, storage="memmap", path=tmp_path / "rb")
    data = mapped.storage.pool.data_bytes
    stacks: list = [None, None]
    for round_ in range(6):
        for t in range(15):
            obs, nxt, types = [], [], []
            for s in range(2):
                if stacks[s] is None or rng.random() < 0.15:
                    stacks[s] = [np.zeros(frame, np.uint8)] * 4
                    types.append(0)
                else:
                    types.append(1)
                high = int(rng.choice([1, 2, 256]))  # flat, two values, noise
                new = rng.integers(0, high, frame, dtype=np.uint8)
                obs.append(np.stack(stacks[s]))
                stacks[s] = stacks[s][1:] + [new]
                nxt.append(np.stack(stacks[s]))
            step = 15 * round_ + t
            item = {
                "observation": np.stack(obs),
                "action": np.arange(2) + 2 * step,
                "step_type": np.array(types, np.int32),
                "next_observation": np.stack(nxt),
            }
            memory.add_batch(item)
            mapped.add_batch(item)
        _same_items(memory, mapped)
        del mapped
        mapped = FrameStackReplayBuffer(spec(0, frame), 2, 10, **options, storage="memmap", path=tmp_path / "rb")
        _same_items(memory, mapped)
    assert mapped.storage.pool.counter == memory.storage.pool.counter
    assert mapped.storage.pool.data_bytes > data  # grown (and wrapped before and after)


def test_a_damaged_index_row_is_refused_when_read(tmp_path):
    """An older frame's index row pointing past the data (the reopen checks only the
    newest's): reading it raises CheckpointError naming the row, never reads past the mapping."""
    blobs, data, newest = _closed_blob_file(tmp_path / "rb")
    row = 0  # the first frame written: items of the first add use it
    assert newest > 0
    data[32 + 16 * row : 40 + 16 * row] = np.array([1 << 40], "<i8").tobytes()
    blobs.write_bytes(bytes(data))
    rb = FrameStackReplayBuffer(spec(0), 2, 10, compression="lz4", storage="memmap", path=tmp_path / "rb")
    with pytest.raises(CheckpointError, match=f"blobs.bin row {row} holds a blob at {1 << 40} of"):
        rb.gather_all()
