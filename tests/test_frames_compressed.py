"""Compressed frame storage: ``compression="lz4" | "zstd"`` on the frame-stack buffers.

Every read must equal the uncompressed frame buffer's (and so the plain buffer's) for the
same seed and calls; checkpoints keep the blobs as they are and load across kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

import replaybuf
from replaybuf import FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer
from replaybuf.errors import ArgumentError, CheckpointError, ReplayBufferError
from replaybuf.storages import codecs
from replaybuf.storages.codecs import make_codec
from test_frames import assert_same, episodes, filled_pair, spec, use_path

CODECS = [("lz4", None), ("lz4", 0), ("lz4", 9), ("zstd", None), ("zstd", -3), ("zstd", 19)]


def blob_of(storage, counter: int) -> bytes:
    """The compressed bytes the storage holds for frame ``counter``."""
    return storage.pool.blobs.blob(counter % storage.pool.size).tobytes()


def live_blobs(storage) -> list[bytes]:
    """The blobs of the frames still in the pool's ring, oldest first."""
    return [blob_of(storage, c) for c in range(max(0, storage.pool.counter - storage.pool.size), storage.pool.counter)]


@pytest.mark.parametrize("compression, level", CODECS)
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("batch, axis", [(1, 0), (2, -1), (2, 1)])
def test_samples_equal_the_uncompressed_frame_buffer(compression, level, compiled, batch, axis):
    data_spec = spec(4, axis)
    raw = FrameStackReplayBuffer(data_spec, batch, 13, seed=3, stack_axis=axis)
    packed = use_path(
        FrameStackReplayBuffer(
            data_spec, batch, 13, seed=3, stack_axis=axis, compression=compression, compression_level=level
        ),
        compiled,
    )
    assert packed._storage.pool.codec.name == compression and packed._storage.pool.codec.level == level
    for item in episodes(np.random.default_rng(5), batch, 45, 4, axis, True, levels=4):  # 3.5 wraps
        raw.add_batch(item)
        packed.add_batch(item)
        assert packed._storage.pool.counter == raw._storage.pool.counter  # the same frames kept, once each
        assert_same(raw.get_next(7), packed.get_next(7))
    assert_same(raw.get_next(5, 3), packed.get_next(5, 3))
    assert_same(raw.get_next(), packed.get_next())
    for key, value in raw.gather_all().items():
        np.testing.assert_array_equal(value, packed.gather_all()[key])
    codec, held = packed._storage.pool.codec, live_blobs(packed._storage)  # each decodes to one frame
    assert held and all(len(codec.checked(blob, "blob")) == codec.frame_bytes for blob in held)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_frames_are_held_compressed_and_decoded_exactly(compression):
    """Atari-like frames (flat background, a few sprites) shrink several-fold; each blob
    decodes to exactly the frame it came from."""
    data_spec = {
        "observation": replaybuf.ArraySpec((4, 84, 84), np.uint8),
        "next_observation": replaybuf.ArraySpec((4, 84, 84), np.uint8),
    }
    buffer = FrameStackReplayBuffer(data_spec, 1, 50, seed=0, compression=compression)
    rng = np.random.default_rng(0)
    frames = []
    for t in range(12):
        frame = np.full((84, 84), 90, np.uint8)
        frame[10:20, 5 + t : 12 + t] = 200  # a sprite that moves
        frame[70:72] = rng.integers(0, 256, 84, dtype=np.uint8)  # a noisy score row
        frames.append(frame)
    for t in range(8):
        stacks = np.stack(frames[t : t + 4])[None], np.stack(frames[t + 1 : t + 5])[None]
        buffer.add_batch({"observation": stacks[0], "next_observation": stacks[1]})
    storage = buffer._storage
    assert storage.pool.counter == 12 and all(len(blob_of(storage, c)) < 84 * 84 // 4 for c in range(12))
    pointers = storage.records.records[storage._pointer_names[0]][:8]  # the observations' frames
    for t in range(8):
        for j in range(4):
            blob = blob_of(storage, pointers[t, j])
            decoded = np.frombuffer(storage.pool.codec.decompress(blob), np.uint8)
            np.testing.assert_array_equal(decoded, frames[t + j].ravel())
    items = buffer.gather_all()
    for t in range(8):
        np.testing.assert_array_equal(items["observation"][0, t], np.stack(frames[t : t + 4]))
        np.testing.assert_array_equal(items["next_observation"][0, t], np.stack(frames[t + 1 : t + 5]))


def test_lz4_defaults_to_lz4_hc_level_3_and_level_0_is_fast_mode():
    """HC blobs of a game-like frame are smaller than fast mode's (and decode faster,
    docs/images.md); None means level 3."""
    rng = np.random.default_rng(0)
    frame = np.repeat(rng.integers(0, 4, (84, 21), dtype=np.uint8) * 60, 4, axis=1).tobytes()
    default, hc3, fast = (make_codec("lz4", level, len(frame)) for level in (None, 3, 0))
    assert default.compress(frame) == hc3.compress(frame)
    assert len(hc3.compress(frame)) < len(fast.compress(frame))
    for codec in (default, fast):
        assert codec.decompress(codec.compress(frame)) == frame


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
@pytest.mark.parametrize("axis", [-1, 0])  # decoded into a scratch pool / straight into the batch
def test_threaded_decoding_equals_one_thread(monkeypatch, compression, axis):
    """Batches of many distinct frames are decoded by several threads into the same bytes."""
    monkeypatch.setattr(codecs, "PARALLEL_FRAMES", 8)
    data_spec = spec(4, axis)
    one = FrameStackReplayBuffer(data_spec, 2, 30, seed=1, stack_axis=axis, compression=compression)
    many = FrameStackReplayBuffer(data_spec, 2, 30, seed=1, stack_axis=axis, compression=compression)
    assert one._storage._decode_in_place == (axis == 0)
    one._storage.decode_threads, many._storage.decode_threads = 1, 3
    for item in episodes(np.random.default_rng(2), 2, 40, 4, axis, True, levels=200):
        one.add_batch(item)
        many.add_batch(item)
    calls = []  # (start, stop) of each run, whichever decoder the codec uses
    for name in ("_decode_run", "_decode_many"):
        run = getattr(codecs, name)
        monkeypatch.setattr(codecs, name, lambda *args, run=run: calls.append(args[-2:]) or run(*args))
    for _ in range(3):
        assert_same(one.get_next(40, 2), many.get_next(40, 2))
    assert len(calls) == 3 * 4  # one run for the single thread, three for the threaded buffer
    assert len({start for start, _ in calls}) > 1


def test_lz4_without_the_direct_decoder_reads_the_same_bytes():
    """Without numba, or where the lz4 package exports no LZ4_decompress_safe, frames decode
    through lz4.block.decompress and a copy, into the same bytes."""
    data_spec = spec(4, 0)
    raw = FrameStackReplayBuffer(data_spec, 2, 20, seed=4, stack_axis=0)
    packed = FrameStackReplayBuffer(data_spec, 2, 20, seed=4, stack_axis=0, compression="lz4")
    assert packed._storage.pool.codec.decode_many is not None  # numba, and the pinned lz4 wheel exports it
    packed._storage.pool.codec.decode_many = None
    for item in episodes(np.random.default_rng(6), 2, 30, 4, 0, True, levels=50):
        raw.add_batch(item)
        packed.add_batch(item)
    for _ in range(3):
        assert_same(raw.get_next(9, 2), packed.get_next(9, 2))


@pytest.mark.parametrize("prefetching", [True, False])
def test_the_compiled_lz4_loop_decodes_with_and_without_prefetching(prefetching):
    """The loop prefetches the blobs ahead (the plain loop is the fallback where numba cannot
    lower the prefetch): both decode every blob, in any row order, to its frame."""
    import lz4.block

    rng = np.random.default_rng(3)
    frames = [np.repeat(rng.integers(0, 3, (84, 12), dtype=np.uint8) * 80, 7, axis=1) for _ in range(9)]
    blobs = [np.frombuffer(lz4.block.compress(f.tobytes(), store_size=False), np.uint8) for f in frames]
    addresses = np.array([b.ctypes.data for b in blobs], np.uint64)
    lengths = np.array([b.size for b in blobs], np.int64)
    decode_many = codecs._build_decode_many(codecs.lz4_decompress_safe(), prefetching)
    rows, out_rows = np.array([4, 0, 8, 8, 2, 7]), np.array([5, 0, 1, 2, 3, 4])
    out = np.zeros((6, 84 * 84), np.uint8)
    assert decode_many(addresses, lengths, rows, out, out_rows, 84 * 84, 0, 6) == 0
    for row, place in zip(rows, out_rows, strict=True):
        np.testing.assert_array_equal(out[place], frames[row].ravel())
    lengths[8] -= 5  # a cut blob (read twice) is counted, not decoded into garbage
    assert decode_many(addresses, lengths, rows, out, out_rows, 84 * 84, 0, 6) == 2


def test_a_damaged_blob_in_memory_raises_instead_of_returning_garbage():
    packed = FrameStackReplayBuffer(spec(4, 0), 1, 20, seed=4, stack_axis=0, compression="lz4")
    for item in episodes(np.random.default_rng(6), 1, 10, 4, 0, True, levels=50):
        packed.add_batch(item)
    storage = packed._storage
    storage.pool.blobs.lengths //= 2  # every blob cut short
    with pytest.raises(ReplayBufferError, match=r"frame pool: \d+ lz4 blob\(s\) did not decode to one frame"):
        packed.get_next(4)


def test_prioritized_samples_and_updates_equal_the_uncompressed_buffer():
    data_spec = spec(4, 0)
    raw = PrioritizedFrameStackReplayBuffer(data_spec, 2, 11, seed=8)
    packed = PrioritizedFrameStackReplayBuffer(data_spec, 2, 11, seed=8, compression="lz4")
    for item in episodes(np.random.default_rng(9), 2, 30, 4, 0, True, levels=6):
        raw.add_batch(item)
        packed.add_batch(item)
        a, b = raw.get_next(6), packed.get_next(6)
        assert_same(a, b)
        np.testing.assert_array_equal(a[1].weights, b[1].weights)
        priorities = np.random.default_rng(int(a[1].ids.sum())).random(6) + 0.1
        raw.update_priorities(a[1].ids, priorities)
        packed.update_priorities(b[1].ids, priorities)


def test_a_dataset_with_parallel_calls_decodes_ahead_the_same_batches():
    data_spec = spec(4, -1)
    raw = FrameStackReplayBuffer(data_spec, 2, 20, seed=4, stack_axis=-1)
    packed = FrameStackReplayBuffer(data_spec, 2, 20, seed=4, stack_axis=-1, compression="lz4")
    for item in episodes(np.random.default_rng(6), 2, 25, 4, -1, True, levels=9):
        raw.add_batch(item)
        packed.add_batch(item)
    ahead = iter(packed.as_dataset(8, 2, num_parallel_calls=3))
    plain = iter(raw.as_dataset(8, 2))
    for _ in range(5):
        assert_same(next(plain), next(ahead))
    ahead.close()


@pytest.mark.parametrize("source, target", [("lz4", "lz4"), ("zstd", None), (None, "zstd"), ("lz4", "zstd")])
@pytest.mark.parametrize("through_files", [False, True])
def test_checkpoints_load_across_compressed_and_uncompressed_buffers(source, target, through_files, tmp_path):
    original, later = filled_pair(FrameStackReplayBuffer, compression=source)
    restored = FrameStackReplayBuffer(original.data_spec, 2, 9, seed=99, stack_axis=-1, compression=target)
    state = original.state_dict()
    assert state["frames"]["codec"] == source
    if source is not None:
        assert "pool" not in state["frames"]
        blobs = [
            blob_of(original._storage, c)
            for c in range(
                original._storage.pool.counter - len(state["frames"]["sizes"]), original._storage.pool.counter
            )
        ]
        assert state["frames"]["blobs"].tobytes() == b"".join(blobs)  # saved as they are
        np.testing.assert_array_equal(state["frames"]["sizes"], [len(b) for b in blobs])
    if through_files:
        original.save(tmp_path / "ckpt")
        restored.load(tmp_path / "ckpt")
    else:
        restored.load_state_dict(state)
    if source == target:  # the same codec: the blobs are taken as they are, not recompressed
        assert b"".join(blob_of(restored._storage, c) for c in range(restored._storage.pool.counter)) == b"".join(
            blob_of(original._storage, c)
            for c in range(
                original._storage.pool.counter - restored._storage.pool.counter, original._storage.pool.counter
            )
        )
    for _ in range(3):
        assert_same(original.get_next(6, 2), restored.get_next(6, 2))
    for item in later:
        original.add_batch(item)
        restored.add_batch(item)
        assert_same(original.get_next(5), restored.get_next(5))
    back = FrameStackReplayBuffer(original.data_spec, 2, 9, seed=5, stack_axis=-1, compression=source)
    back.load_state_dict(restored.state_dict())  # and back into the original's kind
    for key, value in original.gather_all().items():
        np.testing.assert_array_equal(value, back.gather_all()[key])


def test_corrupt_compressed_checkpoints_are_refused_and_change_nothing(tmp_path):
    buffer, _ = filled_pair(FrameStackReplayBuffer, compression="lz4")
    good = buffer.state_dict()
    frames = good["frames"]
    before = buffer.gather_all()
    blobs, sizes = frames["blobs"], frames["sizes"]
    flipped = blobs.copy()
    flipped[: sizes[0]] = 255  # the first blob is no LZ4 block of one frame any more
    cases = [
        (dict(frames, codec="snappy"), "codec"),
        (dict(frames, codec=7), "codec"),
        ({k: v for k, v in frames.items() if k != "blobs"}, "blobs"),
        (dict(frames, blobs=blobs.astype(np.int16)), "blobs"),
        (dict(frames, sizes=sizes.astype(np.int32)), "sizes"),
        (dict(frames, sizes=sizes[:-1]), "sizes"),
        (dict(frames, sizes=np.concatenate([[0], sizes[:-1], sizes[-1:]])), "sizes"),
        (dict(frames, blobs=flipped), r"blobs'\]\[0\]"),
        (dict(frames, codec="zstd"), r"blobs'\]\[0\]: not a zstd frame"),
        (dict(frames, codec=None), "pool"),
    ]
    for target in (buffer, FrameStackReplayBuffer(buffer.data_spec, 2, 9, seed=1, stack_axis=-1)):
        snapshot = target.gather_all()
        for bad, match in cases:
            with pytest.raises(CheckpointError, match=match):
                target.load_state_dict(dict(good, frames=bad))
            for key, value in target.gather_all().items():
                np.testing.assert_array_equal(value, snapshot[key])
    for key, value in buffer.gather_all().items():
        np.testing.assert_array_equal(value, before[key])


def test_a_blob_padded_past_the_codecs_bound_is_refused():
    """zstandard decodes a frame followed by anything, so a checkpoint's blob can decode to one
    frame and still be megabytes long: kept as it is, it could not fit the ring's chunks."""
    buffer, _ = filled_pair(FrameStackReplayBuffer, compression="zstd")
    good = buffer.state_dict()
    frames = good["frames"]
    blobs, sizes = frames["blobs"], frames["sizes"]
    padded = np.concatenate([blobs[: sizes[0]], np.zeros(4 << 20, np.uint8), blobs[sizes[0] :]])
    bad = dict(frames, blobs=padded, sizes=np.concatenate([[sizes[0] + (4 << 20)], sizes[1:]]))
    assert (
        len(buffer._storage.pool.codec.checked(padded[: bad["sizes"][0]], "blob"))
        == buffer._storage.pool.codec.frame_bytes
    )
    before = buffer.gather_all()
    with pytest.raises(CheckpointError, match=r"sizes'\]: expected blobs of at most \d+ bytes .*got one of \d+"):
        buffer.load_state_dict(dict(good, frames=bad))
    for key, value in buffer.gather_all().items():
        np.testing.assert_array_equal(value, before[key])


def test_errors_name_the_argument_and_build_nothing():
    data_spec = spec(4, 0)
    cases = [
        ({"compression": "gzip"}, r"compression: expected one of \('lz4', 'zstd'\) or None, got 'gzip'"),
        ({"compression": True}, "compression: expected one of"),
        ({"compression_level": 3}, "compression_level: only used with a compression codec"),
        ({"compression": "lz4", "compression_level": 13}, "compression_level: expected None or an int from 0 to 12"),
        ({"compression": "zstd", "compression_level": 23}, "from -7 to 22 for 'zstd', got 23"),
        ({"compression": "zstd", "compression_level": 2.0}, "got 2.0"),
    ]
    for cls in (FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer):
        for kwargs, match in cases:
            with pytest.raises(ArgumentError, match=match):
                cls(data_spec, 1, 5, **kwargs)


def test_a_missing_codec_package_is_an_argument_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def without_lz4(name, *args, **kwargs):
        if name.startswith("lz4"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_lz4)
    with pytest.raises(ArgumentError, match=r"'lz4' needs the lz4 package \(pip install 'replaybuf\[compress\]'\)"):
        FrameStackReplayBuffer(spec(4, 0), 1, 5, compression="lz4")
    with pytest.raises(ArgumentError, match="zstandard"):
        monkeypatch.setattr(
            builtins,
            "__import__",
            lambda n, *a, **k: (_ for _ in ()).throw(ImportError(n)) if n.startswith("zstandard") else real(n, *a, **k),
        )
        make_codec("zstd", None, 4)


def test_real_atari_frames_read_back_exactly():
    """Frames of a real game (ALE Breakout through Gymnasium, bundled ROM), stacked as
    FrameStackObservation does, read back from both codecs as added."""
    ale_py = pytest.importorskip("ale_py")
    gym = pytest.importorskip("gymnasium")
    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", obs_type="grayscale", frameskip=4, repeat_action_probability=0.0)
    env = gym.wrappers.FrameStackObservation(env, 4)
    data_spec = {"observation": env.observation_space, "next_observation": env.observation_space}
    buffers = [FrameStackReplayBuffer(data_spec, 1, 64, seed=2, compression=c) for c in (None, "lz4", "zstd")]
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(80):
        nxt, _, terminated, truncated, _ = env.step(env.action_space.sample())
        for buffer in buffers:
            buffer.add_batch({"observation": obs[None], "next_observation": nxt[None]})
        obs = env.reset()[0] if terminated or truncated else nxt
    env.close()
    samples = [buffer.get_next(32) for buffer in buffers]  # each buffer's first draw: the same ids
    for buffer, sample in zip(buffers[1:], samples[1:], strict=True):
        assert_same(samples[0], sample)
        for key, value in buffers[0].gather_all().items():
            np.testing.assert_array_equal(value, buffer.gather_all()[key])
    blobs = live_blobs(buffers[2]._storage)
    assert sum(map(len, blobs)) * 4 < len(blobs) * 210 * 160  # real frames compress > 4x
