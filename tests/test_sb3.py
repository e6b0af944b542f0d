"""replaybuf.sb3's ReplayBuffer, DictReplayBuffer and NStepReplayBuffer against SB3's own
classes (fed the same steps, sampled with the same NumPy seed) and their own rules."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common import buffers as sb3  # noqa: E402

import replaybuf.sb3 as ours  # noqa: E402
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError  # noqa: E402

BOX = spaces.Box(-10, 10, (3,), np.float32)
DICT = spaces.Dict({"a": spaces.Box(-10, 10, (2,), np.float32), "b": spaces.Discrete(5)})


def _steps(space, n_envs, count, seed=0):
    """``count`` SB3 ``add`` argument tuples with episode ends and timeouts mixed in."""
    rng = np.random.default_rng(seed)

    def obs():
        if isinstance(space, spaces.Dict):
            return {"a": rng.normal(size=(n_envs, 2)).astype(np.float32), "b": rng.integers(0, 5, n_envs)}
        return rng.normal(size=(n_envs, 3)).astype(np.float32)

    for _ in range(count):
        done = rng.random(n_envs) < 0.2
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        yield obs(), obs(), rng.integers(0, 4, (n_envs, 1)), rng.normal(size=n_envs), done, infos


def _pair(ours_cls, sb3_cls, space, n_envs=2, size=20, count=33, **kwargs):
    action = spaces.Discrete(4)
    mine = ours_cls(size, space, action, device="cpu", n_envs=n_envs, **kwargs)
    theirs = sb3_cls(size, space, action, device="cpu", n_envs=n_envs, **kwargs)
    for step in _steps(space, n_envs, count):
        mine.add(*copy.deepcopy(step))
        theirs.add(*copy.deepcopy(step))
    return mine, theirs


def _assert_same_draws(a, b, batch_size, seed=3):
    """``a`` and ``b`` sample the same tensors from the same NumPy seed."""
    np.random.seed(seed)
    first = a.sample(batch_size)
    np.random.seed(seed)
    _assert_same(first, b.sample(batch_size))


def _assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for key in x:
                assert th.equal(x[key], y[key]), key
        elif x is None:
            assert y is None
        else:
            assert x.dtype == y.dtype and th.allclose(x, y), (x, y)


@pytest.mark.parametrize(
    ("ours_cls", "sb3_cls", "space"),
    [
        (ours.ReplayBuffer, sb3.ReplayBuffer, BOX),
        (ours.DictReplayBuffer, sb3.DictReplayBuffer, DICT),
        (ours.NStepReplayBuffer, sb3.NStepReplayBuffer, BOX),
    ],
)
@pytest.mark.parametrize("count", [7, 33])  # before and after the ring wraps
@pytest.mark.parametrize("n_envs", [1, 2])  # one env: no env draw, and the generator's stream stays SB3's
def test_samples_equal_sb3s_for_the_same_steps_and_seed(ours_cls, sb3_cls, space, count, n_envs):
    mine, theirs = _pair(ours_cls, sb3_cls, space, n_envs=n_envs, count=count)
    assert (mine.pos, mine.full, mine.size()) == (theirs.pos, theirs.full, theirs.size())
    np.random.seed(3)
    drawn = [mine.sample(64) for _ in range(3)]
    np.random.seed(3)
    for first in drawn:  # every later sample too: both took as much from NumPy's generator
        _assert_same(first, theirs.sample(64))


def test_arrays_are_sb3s_shapes_and_writable_views_of_the_storage():
    mine, theirs = _pair(ours.ReplayBuffer, sb3.ReplayBuffer, BOX)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        a, b = getattr(mine, name), getattr(theirs, name)
        assert (a.shape, a.dtype) == (b.shape, b.dtype), name
        np.testing.assert_array_equal(a, b)
    mine.dones[:] = 1  # SB3's algorithms write through these arrays (learn() truncating the last step)
    mine.timeouts[:] = 0
    assert mine.sample(16).dones.eq(1).all()


def test_pickles_and_deep_copies_with_its_transitions():
    mine, _ = _pair(ours.DictReplayBuffer, sb3.DictReplayBuffer, DICT)
    for clone in (pickle.loads(pickle.dumps(mine)), copy.deepcopy(mine)):
        assert isinstance(clone, ours.DictReplayBuffer) and (clone.pos, clone.full) == (mine.pos, mine.full)
        np.testing.assert_array_equal(clone.observations["a"], mine.observations["a"])
        _assert_same_draws(clone, mine, 8)


def test_is_an_sb3_buffer_and_reset_empties_it():
    mine, _ = _pair(ours.NStepReplayBuffer, sb3.NStepReplayBuffer, BOX)
    assert isinstance(mine, sb3.NStepReplayBuffer) and isinstance(mine, sb3.ReplayBuffer)
    mine.reset()
    assert mine.size() == 0 and mine.native.num_frames() == 0
    with pytest.raises(EmptyBufferError, match="ReplayBuffer is empty"):
        mine.sample(4)


def test_timeouts_and_memory_saving_combine():
    # SB3 refuses optimize_memory_usage with handle_timeout_termination; ours records the flag
    buffer = ours.ReplayBuffer(8, BOX, spaces.Discrete(2), optimize_memory_usage=True)
    assert buffer.optimize_memory_usage and buffer.handle_timeout_termination


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"buffer_size": 0}, "buffer_size: expected a positive int, got 0"),
        ({"n_envs": 0}, "n_envs: expected a positive int, got 0"),
        ({"observation_space": DICT}, r"observation_space: expected a non-Dict space \(ReplayBuffer\)"),
        ({"compression": "lz4"}, "compression: only image observations"),
        ({"frames": True}, "frames: True needs image observations"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs, match):
    arguments = {"buffer_size": 8, "observation_space": BOX, "action_space": spaces.Discrete(2), **kwargs}
    with pytest.raises(ArgumentError, match=match):
        ours.ReplayBuffer(**arguments)


def test_dict_buffer_refuses_a_plain_space():
    with pytest.raises(ArgumentError, match=r"observation_space: expected a gymnasium.spaces.Dict"):
        ours.DictReplayBuffer(8, BOX, spaces.Discrete(2))


@pytest.mark.parametrize(
    ("n_steps", "gamma", "match"),
    [(0, 0.9, "n_steps: expected a positive int"), (3, 1.5, r"gamma: expected a float in \[0, 1\]")],
)
def test_nstep_arguments(n_steps, gamma, match):
    with pytest.raises(ArgumentError, match=match):
        ours.NStepReplayBuffer(8, BOX, spaces.Discrete(2), n_steps=n_steps, gamma=gamma)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"obs": np.zeros((2, 4), np.float32)}, r"obs: expected 2 rows \(one per env\) of shape \(3,\) float32"),
        ({"action": np.zeros(3)}, r"action: expected 2 rows"),
        ({"reward": "x"}, r"reward: expected 2 rows .* got shape \(\) <U1"),
        ({"infos": [{}]}, r"infos: expected a list of 2 dicts \(one per env\), got 1"),
    ],
)
def test_a_bad_add_names_the_argument_and_writes_nothing(change, match):
    buffer = ours.ReplayBuffer(8, BOX, spaces.Discrete(4), n_envs=2)
    step = dict(zip(("obs", "next_obs", "action", "reward", "done", "infos"), next(_steps(BOX, 2, 1)), strict=True))
    step.update(change)
    with pytest.raises(SpecMismatchError, match=match):
        buffer.add(**step)
    assert buffer.pos == 0 and buffer.native.num_frames() == 0


def test_dict_add_names_the_missing_key():
    buffer = ours.DictReplayBuffer(8, DICT, spaces.Discrete(4), n_envs=2)
    obs, next_obs, *rest = next(_steps(DICT, 2, 1))
    with pytest.raises(SpecMismatchError, match=r"next_obs: expected a dict with the keys \['a', 'b'\], got \['a'\]"):
        buffer.add(obs, {"a": next_obs["a"]}, *rest)
    with pytest.raises(SpecMismatchError, match=r"obs/b: expected 2 rows"):
        buffer.add({"a": obs["a"], "b": np.zeros(3)}, next_obs, *rest)


def test_public_names():
    assert set(ours.__all__) == {
        "DictReplayBuffer",
        "HerReplayBuffer",
        "NStepReplayBuffer",
        "PrioritizedDQN",
        "PrioritizedReplayBuffer",
        "PrioritizedReplayBufferSamples",
        "ReplayBuffer",
    }


def test_replaybuf_checkpoint_folder_round_trip(tmp_path):
    mine, _ = _pair(ours.ReplayBuffer, sb3.ReplayBuffer, BOX)
    mine.save(tmp_path / "ckpt")
    other = ours.ReplayBuffer(20, BOX, spaces.Discrete(4), device="cpu", n_envs=2)
    other.load(tmp_path / "ckpt")
    assert (other.pos, other.full) == (mine.pos, mine.full)
    _assert_same_draws(other, mine, 32)
    wrong = ours.ReplayBuffer(30, BOX, spaces.Discrete(4), device="cpu", n_envs=2)
    with pytest.raises(CheckpointError):
        wrong.load(tmp_path / "ckpt")
    assert wrong.size() == 0


def test_gymnasium_vector_infos_dict_is_accepted():
    # CleanRL passes Gymnasium's vector-env infos: one dict of per-env arrays, not a list
    buffer = ours.ReplayBuffer(8, BOX, spaces.Discrete(4), device="cpu", n_envs=2)
    obs, next_obs, action, reward, done, _ = next(_steps(BOX, 2, 1))
    buffer.add(obs, next_obs, action, reward, done, {"TimeLimit.truncated": np.array([True, False])})
    buffer.add(obs, next_obs, action, reward, done, {})
    np.testing.assert_array_equal(buffer.timeouts[:2], [[1, 0], [0, 0]])


def test_infos_as_a_tuple_of_dicts_is_accepted():
    # SubprocVecEnv hands its infos over as a tuple
    buffer = ours.ReplayBuffer(8, BOX, spaces.Discrete(4), device="cpu", n_envs=2)
    obs, next_obs, action, reward, done, _ = next(_steps(BOX, 2, 1))
    buffer.add(obs, next_obs, action, reward, done, ({"TimeLimit.truncated": True}, {}))
    np.testing.assert_array_equal(buffer.timeouts[:1], [[1, 0]])
