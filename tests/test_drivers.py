"""Drivers over single and vector Gymnasium envs, checked against a model of the transitions.

``CountEnv`` is deterministic: observation ``[episode, t]``, reward ``10 * t + action``,
episodes of ``length`` steps that end by termination or by truncation. ``expected_items``
writes down, independently of the driver, the Trajectory items a driver must produce
(TF-Agents' layout: the LAST -> FIRST boundary item is stored with reward 0, discount 1).
"""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArgumentError, ArraySpec, PyUniformReplayBuffer, UniformReplayBuffer
from replaybuf.drivers import EpisodeDriver, EpisodeReturns, PolicyStep, StepDriver
from replaybuf.trajectory import StepType, Trajectory, collect_data_spec

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


class CountEnv(gym.Env):
    """Observation [episode, t]; reward 10 * t + action; ends after ``length`` steps."""

    observation_space = gym.spaces.Box(0, 1000, (2,), np.int64)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, length=3, truncate=False):
        self.length, self.truncate = length, truncate
        self.episode, self.t = -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return np.array([self.episode, 0]), {}

    def step(self, action):
        self.t += 1
        end = self.t == self.length
        reward = float(10 * self.t + int(action))
        return (
            np.array([self.episode, self.t]),
            reward,
            end and not self.truncate,
            end and self.truncate,
            {},
        )


def policy(observation):
    """Action = t mod 3, per stream."""
    return observation[:, 1] % 3


def expected_items(length, truncate, count):
    """The first ``count`` Trajectory items of one stream, as tuples of Python values."""
    items, episode, t = [], 0, 0
    while len(items) < count:
        action = t % 3
        if t == length:  # boundary: the final observation, then the env resets
            items.append((L, (episode, t), action, F, 0.0, 1.0))
            episode, t = episode + 1, 0
            continue
        last = t + 1 == length
        discount = 0.0 if last and not truncate else 1.0
        items.append(
            (
                F if t == 0 else M,
                (episode, t),
                action,
                L if last else M,
                10.0 * (t + 1) + action,
                discount,
            )
        )
        t += 1
    return items


def as_items(traj, stream):
    """Stored items of one stream (gather_all layout) as tuples of Python values."""
    return [
        (
            int(traj.step_type[stream, i]),
            tuple(int(v) for v in traj.observation[stream, i]),
            int(traj.action[stream, i]),
            int(traj.next_step_type[stream, i]),
            float(traj.reward[stream, i]),
            float(traj.discount[stream, i]),
        )
        for i in range(traj.step_type.shape[1])
    ]


def vector_env(*kwargs, **vec_kwargs):
    return SyncVectorEnv([lambda kw=kw: CountEnv(**kw) for kw in kwargs], **vec_kwargs)


@pytest.mark.parametrize("truncate", [False, True])
def test_single_env_items_match_the_model_exactly(truncate):
    env = CountEnv(length=3, truncate=truncate)
    buffer = PyUniformReplayBuffer(collect_data_spec(env), capacity=50)
    StepDriver(env, policy, [buffer.add_batch], num_steps=10).run()
    stored = as_items(buffer.gather_all(), 0)
    assert stored == expected_items(3, truncate, len(stored))
    assert len(stored) == 13  # 10 counted steps + 3 boundaries


@pytest.mark.parametrize("truncate", [False, True])
def test_vector_env_gives_one_stream_per_sub_env(truncate):
    lengths = (2, 3, 5)
    env = vector_env(*({"length": n, "truncate": truncate} for n in lengths))
    buffer = UniformReplayBuffer(collect_data_spec(env), batch_size=3, max_length=50)
    driver = StepDriver(env, policy, [buffer.add_batch], num_steps=30)
    assert driver.batch_size == 3
    driver.run()
    traj = buffer.gather_all()
    for stream, length in enumerate(lengths):
        stored = as_items(traj, stream)
        assert stored == expected_items(length, truncate, len(stored))


@settings(max_examples=25, deadline=None)
@given(
    envs=st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=1, max_size=4),
    num_steps=st.integers(1, 25),
    runs=st.integers(1, 3),
)
def test_every_stream_matches_the_model(envs, num_steps, runs):
    """Any mix of episode lengths and end kinds, over several runs: each stream is exact."""
    env = vector_env(*({"length": n, "truncate": t} for n, t in envs))
    buffer = UniformReplayBuffer(collect_data_spec(env), batch_size=len(envs), max_length=200)
    driver = StepDriver(env, policy, [buffer.add_batch], num_steps=num_steps)
    counted = sum(driver.run() for _ in range(runs))
    traj = buffer.gather_all()
    assert counted == int(np.count_nonzero(~traj.is_boundary())) >= num_steps * runs
    for stream, (length, truncate) in enumerate(envs):
        stored = as_items(traj, stream)
        assert stored == expected_items(length, truncate, len(stored))


def test_collection_modules_import_no_framework():
    code = (
        "import sys, replaybuf, replaybuf.drivers, replaybuf.trajectory; "
        "print(sorted({'gymnasium', 'torch', 'tensorflow'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_termination_and_truncation_discounts_are_kept_apart():
    for truncate, final_discount in ((False, 0.0), (True, 1.0)):
        seen = []
        StepDriver(CountEnv(4, truncate), policy, [seen.append], num_steps=8).run()
        traj = Trajectory(*(() if isinstance(x[0], tuple) else np.concatenate(x) for x in zip(*seen, strict=True)))
        assert traj.discount[traj.is_last()].tolist() == [final_discount] * 2
        assert (traj.discount[~traj.is_last()] == 1.0).all()


def test_cartpole_truncation_and_termination_discounts():
    truncated = gym.make("CartPole-v1", max_episode_steps=5)  # cannot fall within 5 steps
    seen = []
    EpisodeDriver(truncated, lambda o: np.zeros(len(o), np.int64), [seen.append], 2, seed=0).run()
    assert [float(t.discount[0]) for t in seen if t.is_last()[0]] == [1.0, 1.0]
    falling = gym.make("CartPole-v1")  # always pushing left: it falls (terminates)
    seen = []
    EpisodeDriver(falling, lambda o: np.zeros(len(o), np.int64), [seen.append], 2, seed=0).run()
    assert [float(t.discount[0]) for t in seen if t.is_last()[0]] == [0.0, 0.0]


def test_cartpole_items_match_a_manual_rollout():
    actions = [0, 1, 1, 0, 1, 0, 0, 1] * 20
    manual = gym.make("CartPole-v1")
    observation, _ = manual.reset(seed=7)
    expected = []  # (observation, action, reward, terminated)
    for action in actions:
        next_observation, reward, terminated, truncated, _ = manual.step(action)
        expected.append((observation, action, reward, terminated))
        observation = next_observation
        if terminated or truncated:
            break
    final_observation = observation

    counter = iter(range(10**6))
    env = gym.make("CartPole-v1")
    buffer = PyUniformReplayBuffer(collect_data_spec(env), capacity=500)
    cycle = lambda o: np.array([actions[next(counter) % len(actions)]])  # noqa: E731
    driver = EpisodeDriver(env, cycle, [buffer.add_batch], 1, seed=7)
    driver.run()
    traj = buffer.gather_all()
    assert traj.step_type.shape == (1, len(expected))
    np.testing.assert_array_equal(traj.observation[0], np.stack([e[0] for e in expected]))
    np.testing.assert_array_equal(traj.action[0], [e[1] for e in expected])
    np.testing.assert_array_equal(traj.reward[0], [e[2] for e in expected])
    assert traj.step_type[0].tolist() == [F] + [M] * (len(expected) - 1)
    assert traj.next_step_type[0].tolist() == [M] * (len(expected) - 1) + [L]
    assert traj.discount[0, -1] == (0.0 if expected[-1][3] else 1.0)
    # the next episode starts with the boundary item: the final observation, reward 0
    driver.run()
    boundary = buffer.gather_all()
    n = len(expected)
    np.testing.assert_array_equal(boundary.observation[0, n], final_observation)
    assert (boundary.step_type[0, n], boundary.next_step_type[0, n]) == (L, F)
    assert (boundary.reward[0, n], boundary.discount[0, n]) == (0.0, 1.0)
    assert boundary.step_type[0, n + 1] == F


def test_cartpole_vector_env_with_every_buffer_class():
    env = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    spec = collect_data_spec(env)
    uniform = UniformReplayBuffer(spec, batch_size=4, max_length=100)
    flat = PyUniformReplayBuffer(spec, capacity=400)
    random_policy = lambda o: np.random.default_rng(0).integers(0, 2, len(o))  # noqa: E731
    steps = StepDriver(env, random_policy, [uniform.add_batch, flat.add_batch], 60, seed=1).run()
    assert steps == 60
    calls = uniform.num_frames() // 4
    assert flat.num_frames() == uniform.num_frames() == 4 * calls >= 60
    windows, _ = uniform.get_next(sample_batch_size=8, num_steps=2)
    assert windows.observation.shape == (8, 2, 4) and windows.action.shape == (8, 2)
    env.close()


def test_step_driver_counts_steps_without_boundaries():
    calls = []
    driver = StepDriver(CountEnv(3), policy, [calls.append], num_steps=7)
    assert driver.run() == 7
    assert len(calls) == 9  # items 3 and 7 are boundaries
    assert driver.run() == 7  # continues where it stopped
    observations = [tuple(c.observation[0]) for c in calls]
    assert observations[9] == (2, 1) and len(calls) == 18


def test_step_driver_on_vector_env_counts_every_stream():
    calls = []
    driver = StepDriver(vector_env({"length": 10}, {"length": 10}, {"length": 10}), policy, [calls.append], 5)
    assert driver.run() == 6  # two batched steps of 3 streams
    assert len(calls) == 2 and calls[0].step_type.shape == (3,)


def test_episode_driver_counts_episodes():
    calls = []
    assert EpisodeDriver(CountEnv(3), policy, [calls.append], num_episodes=2).run() == 2
    assert len(calls) == 7 and calls[-1].is_last().all()
    calls = []
    env = vector_env({"length": 2}, {"length": 5})
    assert EpisodeDriver(env, policy, [calls.append], num_episodes=3).run() == 3
    assert len(calls) == 5  # stream 0 ends at calls 2 and 5, stream 1 at call 5


def test_observers_are_called_in_order_with_the_same_trajectory():
    log = []
    observers = [lambda t: log.append(("a", id(t))), lambda t: log.append(("b", id(t)))]
    StepDriver(CountEnv(3), policy, observers, num_steps=3).run()
    assert [name for name, _ in log] == ["a", "b"] * 3
    assert all(log[i][1] == log[i + 1][1] for i in range(0, 6, 2))


def test_episode_returns_observer():
    returns = EpisodeReturns()
    EpisodeDriver(vector_env({"length": 2}, {"length": 3}), policy, [returns], num_episodes=4).run()
    first = 10 * 1 + 0 + 10 * 2 + 1  # length 2: rewards 10 + a0, 20 + a1
    second = first + 10 * 3 + 2
    # episodes end at calls 2, 5 (stream 0) and 3, 7 (stream 1)
    assert returns.returns == [first, second, first, second]
    assert returns.lengths == [2, 3, 2, 3]


def test_policy_info_is_stored():
    env = CountEnv(3)
    spec = collect_data_spec(env, policy_info_spec={"q": ArraySpec((), np.float32)})
    buffer = PyUniformReplayBuffer(spec, capacity=10)

    def with_info(observation):
        return PolicyStep(policy(observation), {"q": observation[:, 1].astype(np.float32) / 2})

    StepDriver(env, with_info, [buffer.add_batch], num_steps=3).run()
    assert buffer.gather_all().policy_info["q"][0].tolist() == [0.0, 0.5, 1.0]


def test_policy_may_return_torch_tensors():
    import torch

    env = CountEnv(3)
    buffer = PyUniformReplayBuffer(collect_data_spec(env), capacity=10)
    StepDriver(env, lambda o: torch.as_tensor(o[:, 1] % 3), [buffer.add_batch], 4).run()
    assert buffer.gather_all().action[0].tolist() == [0, 1, 2, 0, 0]  # item 3 is the boundary


def test_single_env_trajectory_has_batch_dim_one():
    seen = []
    StepDriver(gym.make("CartPole-v1"), lambda o: np.zeros(len(o), np.int64), [seen.append], 1, seed=0).run()
    assert seen[0].observation.shape == (1, 4) and seen[0].step_type.shape == (1,)


@pytest.mark.parametrize("bad", [0, -1, 1.5, None])
def test_bad_counts_raise(bad):
    with pytest.raises(ArgumentError, match="num_steps"):
        StepDriver(CountEnv(), policy, [], num_steps=bad)
    with pytest.raises(ArgumentError, match="num_episodes"):
        EpisodeDriver(CountEnv(), policy, [], num_episodes=bad)


def test_bad_policy_and_observers_raise():
    with pytest.raises(ArgumentError, match="observers/1"):
        StepDriver(CountEnv(), policy, [print, "not callable"], 1)
    with pytest.raises(ArgumentError, match="policy"):
        StepDriver(CountEnv(), None, [], 1)


def test_policy_without_batch_dimension_raises_before_stepping():
    env = CountEnv()
    calls = []
    with pytest.raises(ArgumentError, match="leading batch dimension of 1"):
        StepDriver(env, lambda o: 0, [calls.append], 1).run()
    assert calls == [] and env.t == 0


def test_same_step_autoreset_is_rejected():
    env = vector_env({"length": 2}, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ArgumentError, match="NEXT_STEP"):
        StepDriver(env, policy, [], 1)
