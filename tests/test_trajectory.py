"""Trajectory predicates, StepType, and collect_data_spec over Gymnasium spaces."""

import gymnasium as gym
import numpy as np
import pytest

from replaybuf import ArraySpec, BoundedArraySpec, SpecError, UniformReplayBuffer
from replaybuf.trajectory import StepType, Trajectory, collect_data_spec

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def test_step_type_values_match_tf_agents():
    assert (int(F), int(M), int(L)) == (0, 1, 2)


def _batch(step_types, next_step_types):
    n = len(step_types)
    return Trajectory(
        np.array(step_types, np.int32),
        np.zeros((n, 2)),
        np.zeros(n),
        (),
        np.array(next_step_types, np.int32),
        np.zeros(n, np.float32),
        np.ones(n, np.float32),
    )


def test_predicates_on_every_step_type_pair():
    pairs = [(a, b) for a in (F, M, L) for b in (F, M, L)]
    traj = _batch([a for a, _ in pairs], [b for _, b in pairs])
    assert traj.is_first().tolist() == [a == F for a, _ in pairs]
    assert traj.is_last().tolist() == [b == L for _, b in pairs]
    assert traj.is_boundary().tolist() == [a == L for a, _ in pairs]
    assert traj.is_mid().tolist() == [a == M and b == M for a, b in pairs]


def test_predicates_keep_window_shape():
    traj = _batch([F, L], [M, F])
    windows = Trajectory(*(np.stack([x, x]) if isinstance(x, np.ndarray) else x for x in traj))
    assert windows.is_boundary().shape == (2, 2)
    assert windows.is_boundary()[:, 1].all() and not windows.is_boundary()[:, 0].any()


def test_collect_data_spec_of_cartpole():
    spec = collect_data_spec(gym.make("CartPole-v1"))
    assert spec.step_type == ArraySpec((), np.int32, "step_type")
    assert spec.next_step_type == ArraySpec((), np.int32, "next_step_type")
    assert spec.reward == ArraySpec((), np.float32, "reward")
    assert spec.discount == ArraySpec((), np.float32, "discount")
    assert spec.observation.shape == (4,) and spec.observation.dtype == np.float32
    assert isinstance(spec.action, BoundedArraySpec)
    assert (spec.action.shape, int(spec.action.minimum), int(spec.action.maximum)) == ((), 0, 1)
    assert spec.policy_info == ()


def test_collect_data_spec_of_vector_env_uses_single_spaces():
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    assert collect_data_spec(env) == collect_data_spec(gym.make("CartPole-v1"))
    env.close()


class _DictEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "flag": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Box(-1, 1, (2,), np.float64)


def test_collect_data_spec_with_nested_spaces_and_policy_info():
    info_spec = {"q": ArraySpec((2,), np.float32)}
    spec = collect_data_spec(_DictEnv(), policy_info_spec=info_spec)
    assert set(spec.observation) == {"pos", "flag"}
    assert spec.observation["pos"].shape == (2,) and spec.action.dtype == np.float64
    assert spec.policy_info == info_spec
    buffer = UniformReplayBuffer(spec, batch_size=2, max_length=4)  # the spec builds a buffer
    assert buffer.capacity == 8


class _TextEnv(gym.Env):
    observation_space = gym.spaces.Text(5)
    action_space = gym.spaces.Discrete(2)


def test_collect_data_spec_rejects_a_space_without_array_spec():
    with pytest.raises(SpecError, match="observation"):
        collect_data_spec(_TextEnv())


def test_collect_data_spec_rejects_bad_policy_info_spec():
    with pytest.raises(SpecError, match="policy_info"):
        collect_data_spec(gym.make("CartPole-v1"), policy_info_spec={"logits": 3})  # 3 is no spec
