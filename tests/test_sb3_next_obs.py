"""replaybuf.sb3 stores a vector observation once: the next observation is the next step's
observation, except where they differ (episode ends, timeouts, CleanRL's truncations without
a done flag), where the true final observation is kept apart."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from gymnasium import spaces  # noqa: E402
from stable_baselines3.common import buffers as sb3  # noqa: E402

import replaybuf.sb3 as ours  # noqa: E402
from replaybuf.errors import CheckpointError  # noqa: E402

BOX = spaces.Box(-1e6, 1e6, (6,), np.float32)
N_ENVS, SIZE = 3, 40  # 40 // 3 = 13 steps per env: the ring wraps several times


def _episodes(steps: int, seed: int = 0):
    """SB3 ``add`` arguments of N_ENVS environments whose observations code (step, env):
    episodes end by termination (done), by a timeout (done + TimeLimit.truncated) or by a
    truncation CleanRL stores without a done flag; each end's next observation is the true
    final one, and the next step starts from a reset observation."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N_ENVS, 6)).astype(np.float32)
    for t in range(steps):
        following = obs + 1
        following[:, 0] = t + 1
        end = rng.random(N_ENVS) < 0.25
        kind = rng.integers(0, 3, N_ENVS)  # 0: terminated, 1: timeout, 2: truncated without done
        done = end & (kind < 2)
        infos = [{"TimeLimit.truncated": bool(e and k == 1)} for e, k in zip(end, kind, strict=True)]
        action = rng.integers(0, 4, N_ENVS)
        reward = rng.normal(size=N_ENVS).astype(np.float32)
        yield obs, following.copy(), action, reward, done, infos, int(end.sum())
        reset = rng.normal(size=(N_ENVS, 6)).astype(np.float32) * 100  # a new episode's first observation
        obs = np.where(end[:, None], reset, following)


def _fill(mine, theirs, steps):
    ends = []
    for *step, n_ends in _episodes(steps):
        mine.add(*step)
        theirs.add(*step)
        ends.append(n_ends)
    return ends


@pytest.mark.parametrize("steps", [5, 13, 50])  # before, at and after the ring wraps
def test_every_next_observation_is_sb3s_and_only_episode_ends_are_stored_twice(steps):
    mine = ours.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    theirs = sb3.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    ends = _fill(mine, theirs, steps)
    # each stored item holds the observation once (no next observation field) ...
    assert "next_observation" not in mine.native.data_spec
    item_bytes = sum(leaf.dtype.itemsize * math.prod(leaf.shape) for leaf in mine.native.data_spec.values())
    assert item_bytes == 6 * 4 + 8 + 3 * 4 + 8  # one observation, the action, reward, done, timeout, a counter
    # ... and the kept final observations are the episode ends (not the last step's: it waits)
    assert mine._finals.count == sum(ends[:-1])
    stored = min(steps, mine.buffer_size)
    np.testing.assert_array_equal(mine.next_observations[:stored], theirs.next_observations[:stored])
    np.testing.assert_array_equal(mine.observations[:stored], theirs.observations[:stored])
    np.random.seed(1)
    got = mine.sample(500)
    np.random.seed(1)
    want = theirs.sample(500)
    np.testing.assert_array_equal(got.next_observations.numpy(), want.next_observations.numpy())
    np.testing.assert_array_equal(got.dones.numpy(), want.dones.numpy())


def test_final_rows_grow_when_episodes_are_short_and_survive_pickling_and_checkpoints(tmp_path):
    mine = ours.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    theirs = sb3.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    rng = np.random.default_rng(3)
    for _ in range(60):  # every step an episode end: each next observation is a final one
        done = np.ones(N_ENVS, bool)
        step = (rng.normal(size=(N_ENVS, 6)), rng.normal(size=(N_ENVS, 6)), np.zeros(N_ENVS), np.ones(N_ENVS), done)
        mine.add(*step, [{}] * N_ENVS)
        theirs.add(*step, [{}] * N_ENVS)
    assert len(mine._finals.rows) <= 4 * SIZE  # grown to the live ones, not one per step ever added
    copy = pickle.loads(pickle.dumps(mine))
    mine.save(tmp_path / "ckpt")
    loaded = ours.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    loaded.load(tmp_path / "ckpt")
    for buffer in (mine, copy, loaded):
        np.testing.assert_array_equal(buffer.next_observations, theirs.next_observations.astype(np.float32))
        assert (buffer.pos, buffer.full) == (theirs.pos, theirs.full)
    other = ours.ReplayBuffer(SIZE, spaces.Box(-1, 1, (5,), np.float32), spaces.Discrete(4), n_envs=N_ENVS)
    with pytest.raises(CheckpointError, match="next_observations: expected next observations"):
        other.load(tmp_path / "ckpt")
    assert other.size() == 0


def test_prioritized_samples_carry_the_right_next_observations():
    mine = ours.PrioritizedReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    theirs = sb3.ReplayBuffer(SIZE, BOX, spaces.Discrete(4), device="cpu", n_envs=N_ENVS)
    _fill(mine, theirs, 30)
    expected = {
        theirs.observations[s, e].tobytes(): theirs.next_observations[s, e]
        for s in range(theirs.buffer_size)
        for e in range(N_ENVS)
    }
    samples = mine.sample(300)
    for obs, following in zip(samples.observations.numpy(), samples.next_observations.numpy(), strict=True):
        np.testing.assert_array_equal(following, expected[obs.tobytes()])
