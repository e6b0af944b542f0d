"""replaybuf.sb3.HerReplayBuffer against SB3's own HerReplayBuffer (fed the same steps) and
SB3's rules: only finished episodes are sampled, the batch's last int(her_ratio * B) are
relabelled from the same episode, rewards come from the env's compute_reward.

Each step's achieved goal holds, in BitFlipping's 15 bits, the number ``2 * step + env``,
so a relabelled goal says which stored transition it came from."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import HerReplayBuffer as SB3HerReplayBuffer  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.envs import BitFlippingEnv  # noqa: E402

from replaybuf.errors import ArgumentError  # noqa: E402
from replaybuf.sb3 import HerReplayBuffer  # noqa: E402

BITS, ENVS = 15, 2
WEIGHTS = 2 ** np.arange(BITS)


def code(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits) * WEIGHTS).sum(axis=-1)


def bits(numbers: np.ndarray) -> np.ndarray:
    return ((np.asarray(numbers)[..., None] >> np.arange(BITS)) & 1).astype(np.int8)


@pytest.fixture(scope="module")
def venv():
    return make_vec_env(lambda: BitFlippingEnv(n_bits=BITS), n_envs=ENVS)


def make(kind, venv, buffer_size=40, **kwargs):
    options = {"n_sampled_goal": 3, "goal_selection_strategy": "future", **kwargs}
    return kind(buffer_size, venv.observation_space, venv.action_space, venv, device="cpu", n_envs=ENVS, **options)


def add_steps(buffer, steps, ends, start=0):
    """``steps`` adds; env e's episode ends at steps where ``ends(step, e)``; goals desire 0."""
    for step in range(start, start + steps):
        now, after = bits(2 * step + np.arange(ENVS)), bits(2 * (step + 1) + np.arange(ENVS))
        zero = np.zeros((ENVS, BITS), np.int8)
        obs = {"observation": now, "achieved_goal": now, "desired_goal": zero}
        next_obs = {"observation": after, "achieved_goal": now, "desired_goal": zero}
        done = np.array([ends(step, e) for e in range(ENVS)])
        buffer.add(obs, next_obs, np.zeros((ENVS, 1)), np.full(ENVS, -1.0), done, [{} for _ in range(ENVS)])


def episode_of(step: int, env: int, length: int) -> int:
    return step // length if env == 0 else (step + 1) // length


def test_samples_relabel_the_last_share_from_the_same_episode_ahead(venv):
    length = 5
    rb = make(HerReplayBuffer, venv, buffer_size=200)
    add_steps(rb, 42, lambda t, e: (t + e) % length == length - 1)  # env 1's episodes are shifted by one
    np.random.seed(0)
    samples = rb.sample(300)
    achieved = code(samples.next_observations["achieved_goal"].numpy())  # 2 * step + env of each transition
    goal = code(samples.observations["desired_goal"].numpy())
    np.testing.assert_array_equal(goal, code(samples.next_observations["desired_goal"].numpy()))
    virtual = int(rb.her_ratio * 300)
    assert virtual == 225 and (goal[: 300 - virtual] == 0).all()  # real transitions first, as SB3's
    step, env = achieved[-virtual:] // 2, achieved[-virtual:] % 2
    goal_step, goal_env = goal[-virtual:] // 2, goal[-virtual:] % 2
    assert (goal_env == env).all() and (goal_step >= step).all()
    same = [episode_of(a, e, length) == episode_of(b, e, length) for a, b, e in zip(step, goal_step, env, strict=True)]
    assert all(same)
    stepped = [episode_of(int(t), int(e), length) for t, e in zip(achieved // 2, achieved % 2, strict=True)]
    last_finished = {e: episode_of(41, e, length) - (0 if (41 + e) % length == length - 1 else 1) for e in (0, 1)}
    assert all(ep <= last_finished[int(e)] for ep, e in zip(stepped, achieved % 2, strict=True))  # finished only
    expected = venv.envs[0].unwrapped.compute_reward(
        samples.next_observations["achieved_goal"].numpy()[-virtual:],
        samples.observations["desired_goal"].numpy()[-virtual:],
        None,
    )
    np.testing.assert_array_equal(samples.rewards.numpy()[-virtual:, 0], expected)
    assert (samples.rewards.numpy()[:-virtual] == -1).all()


def test_episode_bookkeeping_matches_sb3s(venv):
    ours, theirs = make(HerReplayBuffer, venv, buffer_size=80), make(SB3HerReplayBuffer, venv, buffer_size=80)
    for rb in (ours, theirs):
        add_steps(rb, 33, lambda t, e: (t * (e + 2)) % 7 == 3)  # no slot overwritten yet (40 per env)
    np.testing.assert_array_equal(ours._current_ep_start, theirs._current_ep_start)
    np.testing.assert_array_equal(ours.ep_length, theirs.ep_length)
    finished = theirs.ep_length > 0
    np.testing.assert_array_equal(ours.ep_start[finished], theirs.ep_start[finished])
    for key in ("observation", "achieved_goal", "desired_goal"):
        np.testing.assert_array_equal(ours.observations[key][:33], theirs.observations[key][:33])


def test_nothing_to_sample_before_an_episode_ends(venv):
    rb = make(HerReplayBuffer, venv)
    add_steps(rb, 3, lambda t, e: False)
    with pytest.raises(RuntimeError, match="Unable to sample before the end of the first episode"):
        rb.sample(4)
    with pytest.warns(UserWarning, match="The last trajectory in the replay buffer will be truncated"):
        rb.truncate_last_trajectory()  # what load_replay_buffer(truncate_last_traj=True) calls
    assert rb.dones[2].all() and rb.timeouts[2].all() and (rb._current_ep_start == rb.pos).all()
    assert (rb.ep_length[:3] == 3).all()
    samples = rb.sample(50)
    assert set(code(samples.observations["observation"].numpy()) // 2) == {0, 1, 2}


def test_overwritten_steps_are_never_goals(venv):
    rb = make(HerReplayBuffer, venv, buffer_size=ENVS * 8, goal_selection_strategy="episode")
    add_steps(rb, 30, lambda t, e: t % 6 == 5)  # steps 22..29 stored; episode 18..23 lost its start
    np.random.seed(1)
    goal = code(rb.sample(400).observations["desired_goal"].numpy()[-300:]) // 2
    assert goal.min() >= 22 and goal.max() <= 29


def test_pickles_without_its_env_and_samples_after_set_env(venv):
    rb = make(HerReplayBuffer, venv, copy_info_dict=True)
    add_steps(rb, 12, lambda t, e: t % 4 == 3)
    copied = pickle.loads(pickle.dumps(rb))
    assert copied.env is None
    with pytest.raises(ArgumentError, match="env: expected a VecEnv"):
        copied.sample(8)
    copied.set_env(venv)
    np.testing.assert_array_equal(copied.observations["observation"], rb.observations["observation"])
    assert copied.sample(8).rewards.shape == (8, 1)
    assert copy.deepcopy(rb).env is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_sampled_goal": -1}, "n_sampled_goal: expected an int >= 0, got -1"),
        ({"goal_selection_strategy": "last"}, "goal_selection_strategy: expected one of"),
    ],
)
def test_bad_arguments_are_refused(venv, options, message):
    with pytest.raises(ArgumentError, match=message):
        make(HerReplayBuffer, venv, **options)


def test_a_space_without_goals_is_refused(venv):
    from gymnasium import spaces

    space = spaces.Dict({"observation": venv.observation_space["observation"]})
    with pytest.raises(ArgumentError, match="observation_space: expected a Dict space with 'achieved_goal'"):
        HerReplayBuffer(10, space, venv.action_space, venv)
