"""FrameStackReplayBuffer: equal to a plain buffer storing full stacks, Gymnasium path, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
from replaybuf import FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer, PrioritizedReplayBuffer
from replaybuf.errors import ArgumentError, CheckpointError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.storages import stacked_leaves
from replaybuf.storages.frames import FrameStorage, _words

FRAME = (3, 2)


def spec(k: int, axis: int, next_obs: bool = True) -> dict:
    shape = list(FRAME)
    shape.insert(axis % (len(FRAME) + 1), k)
    out = {
        "observation": replaybuf.ArraySpec(tuple(shape), np.uint8),
        "action": replaybuf.ArraySpec((), np.int64),
        "step_type": replaybuf.ArraySpec((), np.int32),
    }
    if next_obs:
        out["next_observation"] = replaybuf.ArraySpec(tuple(shape), np.uint8)
    return out


def episodes(rng: np.random.Generator, batch: int, steps: int, k: int, axis: int, next_obs: bool, levels: int):
    """``steps`` adds of ``batch`` streams of random episodes, stacked as FrameStackObservation
    does (padding: repeat the first frame, zeros, or random frames), frames drawn from
    ``levels`` values so that equal and all-zero frames are common."""
    stacks = [None] * batch
    for _ in range(steps):
        obs, nxt, types = [], [], []
        for s in range(batch):
            if stacks[s] is None or rng.random() < 0.15:
                first = rng.integers(0, levels, FRAME, dtype=np.uint8)
                pad = rng.integers(3)
                older = (
                    [first] * (k - 1)
                    if pad == 0
                    else [np.zeros(FRAME, np.uint8)] * (k - 1)
                    if pad == 1
                    else [rng.integers(0, levels, FRAME, dtype=np.uint8) for _ in range(k - 1)]
                )
                stacks[s] = older + [first]
                types.append(0)
            else:
                types.append(1)
            new = stacks[s][1:] + [rng.integers(0, levels, FRAME, dtype=np.uint8)]
            obs.append(np.stack(stacks[s], axis=axis))
            nxt.append(np.stack(new, axis=axis))
            stacks[s] = new
        item = {
            "observation": np.stack(obs),
            "action": rng.integers(0, 5, batch),
            "step_type": np.asarray(types, np.int32),
        }
        if next_obs:
            item["next_observation"] = np.stack(nxt)
        yield item


def assert_same(a, b) -> None:
    (items_a, info_a), (items_b, info_b) = a, b
    for key in items_a:
        np.testing.assert_array_equal(items_a[key], items_b[key], err_msg=key)
        assert items_a[key].shape == items_b[key].shape and items_a[key].dtype == items_b[key].dtype
    np.testing.assert_array_equal(info_a.ids, info_b.ids)
    np.testing.assert_array_equal(info_a.probabilities, info_b.probabilities)


def use_path(buffer, compiled: bool):
    """Read and split frames with numba's kernels (skipped when numba is missing) or NumPy."""
    if compiled:
        pytest.importorskip("numba")
        assert buffer._storage.kernels is not None
    else:
        buffer._storage.kernels = None
    return buffer


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("next_obs", [True, False])
def test_samples_equal_a_plain_buffer_storing_full_stacks(batch, axis, next_obs, compiled):
    k, max_length = 4, 7
    data_spec = spec(k, axis, next_obs)
    plain = replaybuf.UniformReplayBuffer(data_spec, batch, max_length, seed=3)
    frames = use_path(FrameStackReplayBuffer(data_spec, batch, max_length, seed=3, stack_axis=axis), compiled)
    rng = np.random.default_rng(batch * 10 + axis)
    for step, item in enumerate(episodes(rng, batch, 60, k, axis, next_obs, levels=3)):  # 8 wraps
        plain.add_batch(item)
        frames.add_batch(item)
        for size, steps in [(None, None), (5, None), (4, 3), (None, 2)]:
            if steps is None or step + 1 >= steps:
                assert_same(plain.get_next(size, steps), frames.get_next(size, steps))
        gathered = frames.gather_all()
        for key, value in plain.gather_all().items():
            np.testing.assert_array_equal(value, gathered[key])
    assert frames.num_frames() == plain.num_frames()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 3),
    max_length=st.integers(1, 9),
    k=st.integers(1, 4),
    steps=st.integers(1, 40),
    levels=st.sampled_from([1, 2, 256]),
)
def test_every_stored_item_reads_back_as_added(seed, batch, max_length, k, steps, levels):
    data_spec = spec(k, 0)
    plain = replaybuf.UniformReplayBuffer(data_spec, batch, max_length)
    frames = FrameStackReplayBuffer(data_spec, batch, max_length)
    numpy_path = use_path(FrameStackReplayBuffer(data_spec, batch, max_length), compiled=False)
    for item in episodes(np.random.default_rng(seed), batch, steps, k, 0, True, levels):
        for buffer in (plain, frames, numpy_path):
            buffer.add_batch(item)
    for buffer in (frames, numpy_path):
        gathered = buffer.gather_all()
        for key, value in plain.gather_all().items():
            np.testing.assert_array_equal(value, gathered[key])
    assert frames._storage.pool.counter == numpy_path._storage.pool.counter  # both match the same frames


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 5),
    frame=st.sampled_from([(3, 2), (5,), (2, 1, 3)]),
    dtype=st.sampled_from([np.uint8, np.float32, np.bool_]),
    axis=st.integers(-4, 3),
    two=st.booleans(),
    n=st.integers(1, 9),
)
def test_compiled_kernels_equal_numpy(seed, k, frame, dtype, axis, two, n):
    """Reads (interleave, the fused next observation) and splits on add: same bytes both ways."""
    pytest.importorskip("numba")
    check_kernels(seed, k, frame, dtype, axis, two, n)


@pytest.mark.parametrize("seed", range(5))
def test_compiled_kernels_equal_numpy_for_interleaved_4_frame_pairs(seed):
    """The uint32-word paths: obs and next_obs [H, W, 4] uint8, shared and not."""
    pytest.importorskip("numba")
    check_kernels(seed, 4, (3, 5), np.uint8, -1, True, 6)


def check_kernels(seed, k, frame, dtype, axis, two, n):
    shape = list(frame)
    axis = axis % (len(frame) + 1)
    shape.insert(axis, k)
    leaf = replaybuf.ArraySpec(tuple(shape), dtype)
    data_spec = {"observation": leaf, **({"next_observation": leaf} if two else {})}
    flat = FlatSpec(data_spec)
    storage = FrameStorage(flat.leaves, stacked_leaves(flat, None, axis), 1, 4)
    assert storage.kernels is not None
    rng = np.random.default_rng(seed)
    storage.pool.frames[:] = rng.integers(0, 256, storage.pool.frames.shape).astype(dtype)
    storage.pool.frames[-1] = 0
    pointers = [rng.integers(-1, 3 * storage.pool.size, (n, k)) for _ in storage.stacked]
    if two and rng.random() < 0.7:  # mostly next observations that share k - 1 frames
        shares = rng.random(n) < 0.8
        pointers[1][shares, :-1] = pointers[0][shares, 1:]
    compiled = storage._gather_compiled(pointers, storage.pool.frames, storage.pool.size)
    expected = storage._gather_numpy(pointers, storage.pool.frames, storage.pool.size)
    for got, want in zip(compiled, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    stacks = [rng.integers(0, 256, (n, *shape)).astype(dtype) for _ in storage.stacked]
    if two:  # next observations: most are the observation shifted by one frame, plus one
        shifted = rng.random(n) < 0.7
        np.moveaxis(stacks[1], 1 + axis, 1)[shifted, :-1] = np.moveaxis(stacks[0], 1 + axis, 1)[shifted, 1:]

    def split_all() -> list[np.ndarray]:
        raws, resolved, out = [], [], []
        for i, (leaf, layout) in enumerate(zip(storage.stacked, storage._layout, strict=True)):
            raws.append(np.ascontiguousarray(stacks[i]).reshape(n, -1).view(np.uint8))
            frames, _ = storage._split(i, leaf, layout, raws[-1], raws, resolved)
            resolved.append((_words(frames), None))
            out.append(frames.copy())
        return out

    compiled = split_all()
    storage.kernels = None
    for got, want in zip(compiled, split_all(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_episode_windows_and_prioritized_sampling_equal_the_plain_buffers():
    data_spec = spec(3, 0)
    pairs = [
        (
            replaybuf.UniformReplayBuffer(data_spec, 2, 9, seed=5, respect_episodes=True),
            FrameStackReplayBuffer(data_spec, 2, 9, seed=5, respect_episodes=True),
        ),
        (PrioritizedReplayBuffer(data_spec, 2, 9, seed=5), PrioritizedFrameStackReplayBuffer(data_spec, 2, 9, seed=5)),
    ]
    for item in episodes(np.random.default_rng(1), 2, 30, 3, 0, True, levels=4):
        for plain, frames in pairs:
            plain.add_batch(item)
            frames.add_batch(item)
    for plain, frames in pairs:
        for _ in range(5):
            a, b = plain.get_next(6, 2), frames.get_next(6, 2)
            assert_same(a, b)
            if isinstance(plain, PrioritizedReplayBuffer):
                np.testing.assert_array_equal(a[1].weights, b[1].weights)
                priorities = np.arange(1, 7, dtype=np.float64)
                plain.update_priorities(a[1].ids, priorities)
                frames.update_priorities(b[1].ids, priorities)


def test_clear_forgets_everything_and_later_adds_read_back():
    data_spec = spec(2, 0)
    plain = replaybuf.UniformReplayBuffer(data_spec, 1, 4, seed=0)
    frames = FrameStackReplayBuffer(data_spec, 1, 4, seed=0)
    stream = episodes(np.random.default_rng(2), 1, 20, 2, 0, True, levels=256)
    for step, item in enumerate(stream):
        if step == 9:
            plain.clear()
            frames.clear()
            assert frames.num_frames() == 0
        plain.add_batch(item)
        frames.add_batch(item)
    assert_same(plain.get_next(8), frames.get_next(8))


def test_one_frame_per_transition_in_the_steady_state():
    k = 4
    buffer = FrameStackReplayBuffer(spec(k, 0), 1, 50)
    items = list(episodes(np.random.default_rng(0), 1, 200, k, 0, True, levels=256))
    for item in items:
        buffer.add_batch(item)
    starts = sum(int(item["step_type"][0] == 0) for item in items)
    pads = buffer._storage.pool.counter - len(items)  # the extra frames: one per start at most, unless raw padding
    assert 0 <= pads <= starts * k
    assert buffer._storage.pool.counter < 2 * len(items)


def test_the_pool_grows_when_stacks_share_no_frames():
    rng = np.random.default_rng(4)
    data_spec = spec(4, 0)
    plain = replaybuf.UniformReplayBuffer(data_spec, 2, 5, seed=1)
    frames = FrameStackReplayBuffer(data_spec, 2, 5, seed=1)
    size = frames._storage.pool.size
    for _ in range(30):  # every stack new: 8 frames per item
        item = {
            "observation": rng.integers(0, 256, (2, 4, *FRAME), dtype=np.uint8),
            "next_observation": rng.integers(0, 256, (2, 4, *FRAME), dtype=np.uint8),
            "action": np.zeros(2, np.int64),
            "step_type": np.zeros(2, np.int32),
        }
        plain.add_batch(item)
        frames.add_batch(item)
    assert frames._storage.pool.size > size
    assert_same(plain.get_next(10, 2), frames.get_next(10, 2))


class TinyImageEnv(gym.Env):
    """Observations are uint8 [6, 5] images of a counter; episodes last 4 to 9 steps."""

    observation_space = gym.spaces.Box(0, 255, (6, 5), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._length = 0, int(self.np_random.integers(4, 10))
        return self._image(), {}

    def step(self, action):
        self._t += 1
        return self._image(), 1.0, self._t >= self._length, False, {}

    def _image(self):
        return self.np_random.integers(0, 256, (6, 5), dtype=np.uint8)


@pytest.mark.parametrize("padding_type", ["reset", "zero"])
def test_gymnasium_frame_stack_observation_is_added_directly(padding_type):
    env = gym.wrappers.FrameStackObservation(TinyImageEnv(), 4, padding_type=padding_type)
    box = env.observation_space
    data_spec = {
        "observation": box,
        "action": env.action_space,
        "reward": replaybuf.ArraySpec((), np.float32),
        "next_observation": box,
        "done": replaybuf.ArraySpec((), np.bool_),
    }
    plain = replaybuf.UniformReplayBuffer(data_spec, 1, 40, seed=2)
    frames = FrameStackReplayBuffer(data_spec, 1, 40, seed=2)  # stack_axis=0: Gymnasium's layout
    obs, _ = env.reset(seed=0)
    for _ in range(100):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        item = {
            "observation": obs[None],
            "action": np.asarray([action]),
            "reward": np.float32([reward]),
            "next_observation": next_obs[None],
            "done": np.asarray([terminated]),
        }
        plain.add_batch(item)
        frames.add_batch(item)
        obs = env.reset()[0] if terminated or truncated else next_obs
    assert_same(plain.get_next(16), frames.get_next(16))
    np.testing.assert_array_equal(plain.gather_all()["next_observation"], frames.gather_all()["next_observation"])
    assert frames._storage.pool.counter <= 100 + 100 // 4 + 1  # one frame per step, one more per episode


def test_errors():
    data_spec = spec(4, 0)
    with pytest.raises(ArgumentError, match="stacked_fields"):
        FrameStackReplayBuffer({"image": data_spec["observation"]})
    with pytest.raises(ArgumentError, match="pixels"):
        FrameStackReplayBuffer(data_spec, stacked_fields=["pixels"])
    with pytest.raises(ArgumentError, match="string"):
        FrameStackReplayBuffer(data_spec, stacked_fields="observation")
    with pytest.raises(ArgumentError, match="stack_axis"):
        FrameStackReplayBuffer(data_spec, stack_axis=3)
    mixed = dict(data_spec, next_observation=replaybuf.ArraySpec((4, 3, 3), np.uint8))
    with pytest.raises(ArgumentError, match="frames shaped"):
        FrameStackReplayBuffer(mixed)
    with pytest.raises(ArgumentError, match="storage: expected 'memory' or 'memmap'"):
        FrameStackReplayBuffer(data_spec, storage="columns")
    buffer = FrameStackReplayBuffer(data_spec, 2, 3)
    with pytest.raises(CheckpointError):
        buffer.load_state_dict({})
    good = next(episodes(np.random.default_rng(0), 2, 1, 4, 0, True, 3))
    bad = dict(good, next_observation=good["next_observation"][:, :3])
    with pytest.raises(SpecMismatchError, match="next_observation"):
        buffer.add_batch(bad)
    assert buffer.num_frames() == 0 and buffer._storage.pool.counter == 0


def filled_pair(cls, **kwargs):
    """A frame buffer after 2.5 wraps of random episodes (padding: repeat, zeros, raw)."""
    data_spec = spec(4, -1)
    buffer = cls(data_spec, 2, 9, seed=7, stack_axis=-1, **kwargs)
    items = list(episodes(np.random.default_rng(11), 2, 40, 4, -1, True, levels=5))
    for item in items[:23]:
        buffer.add_batch(item)
    return buffer, items[23:]


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (FrameStackReplayBuffer, {}),
        (FrameStackReplayBuffer, {"respect_episodes": True}),
        (PrioritizedFrameStackReplayBuffer, {}),
    ],
)
@pytest.mark.parametrize("through_files", [False, True])
def test_checkpoint_round_trip_continues_exactly(cls, kwargs, through_files, tmp_path):
    original, later = filled_pair(cls, **kwargs)
    restored = cls(original.data_spec, 2, 9, seed=99, stack_axis=-1, **kwargs)
    if through_files:
        original.save(tmp_path / "ckpt")
        restored.load(tmp_path / "ckpt")
    else:
        restored.load_state_dict(original.state_dict())
    state = original.state_dict()
    assert set(state["items"]) == {"0", "3"}  # action, step_type: the stacks are in state["frames"]
    assert state["frames"]["pool"].shape[0] <= original._storage.pool.counter
    for a, b in [(original, restored)] * 3:
        assert_same(a.get_next(6, 2), b.get_next(6, 2))
    for item in later:  # adds after the restore store as many frames and read back the same
        counters = original._storage.pool.counter, restored._storage.pool.counter
        original.add_batch(item)
        restored.add_batch(item)
        assert original._storage.pool.counter - counters[0] == restored._storage.pool.counter - counters[1]
        sample = original.get_next(5)
        assert_same(sample, restored.get_next(5))
        if isinstance(original, PrioritizedReplayBuffer):
            priorities = np.arange(1.0, 6.0)
            original.update_priorities(sample[1].ids, priorities)
            restored.update_priorities(sample[1].ids, priorities)
    for key, value in original.gather_all().items():
        np.testing.assert_array_equal(value, restored.gather_all()[key])


def test_checkpoint_of_a_grown_pool_and_of_an_empty_buffer_load(tmp_path):
    data_spec = spec(4, 0)
    source = FrameStackReplayBuffer(data_spec, 2, 5, seed=1)
    rng = np.random.default_rng(4)
    for _ in range(12):  # every stack new: the pool grows past its first size
        source.add_batch(
            {
                "observation": rng.integers(0, 256, (2, 4, *FRAME), dtype=np.uint8),
                "next_observation": rng.integers(0, 256, (2, 4, *FRAME), dtype=np.uint8),
                "action": np.zeros(2, np.int64),
                "step_type": np.zeros(2, np.int32),
            }
        )
    target = FrameStackReplayBuffer(data_spec, 2, 5, seed=1)
    assert source._storage.pool.size > target._storage.pool.size
    target.load_state_dict(source.state_dict())
    assert_same(source.get_next(10, 2), target.get_next(10, 2))
    empty = FrameStackReplayBuffer(data_spec, 2, 5, seed=1)
    target.load_state_dict(empty.state_dict())
    assert target.num_frames() == 0 and target._storage.pool.counter == 0
    source.load_state_dict(empty.state_dict())
    source.save(tmp_path / "empty")
    target.load(tmp_path / "empty")
    assert target.num_frames() == 0 and target.gather_all()["observation"].shape == (2, 0, 4, *FRAME)


def test_corrupt_or_foreign_checkpoints_are_refused_and_change_nothing(tmp_path):
    buffer, _ = filled_pair(FrameStackReplayBuffer)
    buffer.save(tmp_path / "ckpt")
    target, _ = filled_pair(FrameStackReplayBuffer)
    target.add_batch(_[0])
    before = target.gather_all()
    version = next(p for p in (tmp_path / "ckpt").iterdir() if p.is_dir())
    pool_file = next(version.glob("*pool*.npy"))
    data = bytearray(pool_file.read_bytes())
    data[-1] ^= 0xFF
    pool_file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        target.load(tmp_path / "ckpt")
    good = buffer.state_dict()
    frames = good["frames"]
    bad_states = [
        dict(good, frames=dict(frames, pool=frames["pool"][:, :2])),
        dict(good, frames=dict(frames, axes=[0, 0])),
        dict(good, frames=dict(frames, pointers={"2": frames["pointers"]["2"]})),
        dict(good, frames=dict(frames, pointers=dict(frames["pointers"], **{"2": frames["pointers"]["2"] + 10**6}))),
        dict(good, frames=dict(frames, floors=frames["floors"] + 10**6)),
        dict(good, frames=dict(frames, floors=frames["floors"][1:])),
        dict(good, items=dict(good["items"], **{"0": good["items"]["0"][1:]})),
        {key: value for key, value in good.items() if key != "frames"},
        dict(good, rng={"bit_generator": "nonsense"}),
    ]
    for bad in bad_states:
        with pytest.raises(CheckpointError):
            target.load_state_dict(bad)
        after = target.gather_all()
        for key, value in before.items():
            np.testing.assert_array_equal(value, after[key])
    plain = replaybuf.UniformReplayBuffer(buffer.data_spec, 2, 9)
    with pytest.raises(CheckpointError, match=r"state\['frames'\]: the checkpoint holds frame stacks"):
        plain.load_state_dict(good)
    buffer.save(tmp_path / "lazy")  # items handed over as unread files, as UniformReplayBuffer.load does
    target.load_state_dict(replaybuf.persistence.read_state(tmp_path / "lazy", lazy=("items",)))
    for key, value in buffer.gather_all().items():
        np.testing.assert_array_equal(value, target.gather_all()[key])


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 3),
    max_length=st.integers(1, 8),
    k=st.integers(1, 4),
    axis=st.sampled_from([0, -1]),
    before=st.integers(0, 25),
    after=st.integers(1, 12),
)
def test_a_restored_buffer_reads_and_continues_like_the_original(seed, batch, max_length, k, axis, before, after):
    data_spec = spec(k, axis)
    original = FrameStackReplayBuffer(data_spec, batch, max_length, seed=seed % 7, stack_axis=axis)
    restored = FrameStackReplayBuffer(data_spec, batch, max_length, stack_axis=axis)
    stream = episodes(np.random.default_rng(seed), batch, before + after, k, axis, True, levels=3)
    for _ in range(before):
        original.add_batch(next(stream))
    restored.load_state_dict(original.state_dict())
    for item in stream:
        original.add_batch(item)
        restored.add_batch(item)
        assert_same(original.get_next(4), restored.get_next(4))
    for key, value in original.gather_all().items():
        np.testing.assert_array_equal(value, restored.gather_all()[key])


def test_without_numba_the_numpy_path_is_used(monkeypatch):
    import sys

    import replaybuf.storages.frames as frames_storage

    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "replaybuf.storages._frame_kernels", raising=False)
    monkeypatch.delattr(replaybuf.storages, "_frame_kernels", raising=False)
    monkeypatch.setattr(frames_storage, "_kernels", False)
    buffer = FrameStackReplayBuffer(spec(4, -1), 2, 5, seed=0, stack_axis=-1)
    assert buffer._storage.kernels is None
    plain = replaybuf.UniformReplayBuffer(spec(4, -1), 2, 5, seed=0)
    for item in episodes(np.random.default_rng(0), 2, 12, 4, -1, True, levels=4):
        buffer.add_batch(item)
        plain.add_batch(item)
    assert_same(plain.get_next(6, 2), buffer.get_next(6, 2))


def test_save_streams_a_wrapped_frame_ring_and_load_reads_it_back(tmp_path):
    data_spec = spec(4, -1)
    original = FrameStackReplayBuffer(data_spec, 1, 5, seed=3, stack_axis=-1)
    for item in episodes(np.random.default_rng(5), 1, 61, 4, -1, True, levels=256):
        original.add_batch(item)
    storage = original._storage
    oldest = storage.pool.counter - original.state_dict()["frames"]["pool"].shape[0]
    assert oldest % storage.pool.size + storage.pool.counter - oldest > storage.pool.size  # the live frames wrap
    original.save(tmp_path / "ckpt")
    restored = FrameStackReplayBuffer(data_spec, 1, 5, stack_axis=-1)
    restored.load(tmp_path / "ckpt")
    for _ in range(3):
        assert_same(original.get_next(4, 2), restored.get_next(4, 2))
