"""replaybuf.sb3.PrioritizedReplayBuffer and PrioritizedDQN."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402

from replaybuf.buffers import PrioritizedFrameStackReplayBuffer  # noqa: E402
from replaybuf.errors import ArgumentError, EmptyBufferError, PriorityError  # noqa: E402
from replaybuf.sb3 import PrioritizedDQN, PrioritizedReplayBuffer, ReplayBuffer  # noqa: E402

BOX = spaces.Box(-10, 10, (2,), np.float32)


def _filled(count=50, n_envs=2, **kwargs):
    buffer = PrioritizedReplayBuffer(100, BOX, spaces.Discrete(3), device="cpu", n_envs=n_envs, **kwargs)
    for t in range(count):
        obs = np.full((n_envs, 2), t, np.float32)
        buffer.add(obs, obs + 1, np.zeros(n_envs, np.int64), np.full(n_envs, t), np.zeros(n_envs), [{}] * n_envs)
    return buffer


def test_samples_carry_weights_and_ids_that_steer_later_draws():
    buffer = _filled()
    sample = buffer.sample(32)
    assert sample.weights.shape == (32, 1) and sample.weights.dtype == th.float32
    assert ((sample.weights > 0) & (sample.weights <= 1)).all()
    assert sample.ids.shape == (32,) and sample.discounts is None
    # one transition gets a huge priority: it is then (nearly) all that is drawn
    priorities = np.full(32, 1e-3)
    priorities[0] = 1e6
    buffer.update_priorities(sample.ids, th.as_tensor(priorities))
    again = buffer.sample(256)
    favourite = sample.observations[0, 0].item()
    assert (again.observations[:, 0] == favourite).float().mean() > 0.9
    assert th.equal(again.rewards[:, 0], again.observations[:, 0])  # fields of one transition (reward t at obs t)


def test_beta_is_settable_and_zero_beta_gives_unit_weights():
    buffer = _filled(beta=0.5)
    assert buffer.beta == 0.5
    buffer.update_priorities(np.arange(10), np.arange(1, 11, dtype=np.float64))
    buffer.beta = 0.0
    assert th.equal(buffer.sample(64).weights, th.ones(64, 1))


def test_pickle_keeps_priorities_and_the_generator():
    buffer = _filled()
    sample = buffer.sample(16)
    buffer.update_priorities(sample.ids, np.linspace(0.1, 5, 16))
    clone = pickle.loads(pickle.dumps(buffer))
    a, b = clone.sample(64), buffer.sample(64)
    assert np.array_equal(a.ids, b.ids) and th.equal(a.weights, b.weights)


def test_image_spaces_draw_from_prioritized_frame_stacks():
    space = spaces.Box(0, 255, (36, 36, 4), np.uint8)
    buffer = PrioritizedReplayBuffer(10, space, spaces.Discrete(2), compression="lz4")
    assert isinstance(buffer.native, PrioritizedFrameStackReplayBuffer)


def test_errors():
    with pytest.raises(EmptyBufferError, match="is empty"):
        _filled(count=0).sample(4)
    with pytest.raises(ArgumentError, match="batch_size: expected a positive int, got 0"):
        _filled().sample(0)
    with pytest.raises(ArgumentError, match="alpha: expected a finite float >= 0"):
        _filled(alpha=-1)
    buffer = _filled()
    sample = buffer.sample(4)
    with pytest.raises(PriorityError):
        buffer.update_priorities(sample.ids, np.array([1.0, np.nan, 1.0, 1.0]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"beta_start": 1.5}, r"beta_start: expected a float in \[0, 1\], got 1.5"),
        ({"beta_end": -0.1}, r"beta_end: expected a float in \[0, 1\]"),
        ({"replay_buffer_class": ReplayBuffer}, "replay_buffer_class: PrioritizedDQN needs"),
    ],
)
def test_prioritized_dqn_arguments(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        PrioritizedDQN("MlpPolicy", "CartPole-v1", **kwargs)


# the CartPole configuration of the test below and of docs/sb3.md's table (one update per step)
CARTPOLE = {
    "learning_rate": 1e-3,
    "batch_size": 64,
    "buffer_size": 20_000,
    "learning_starts": 1000,
    "target_update_interval": 500,
    "train_freq": 1,
    "gradient_steps": 1,
    "exploration_fraction": 0.1,
    "exploration_final_eps": 0.02,
}


def test_prioritized_dqn_learns_cartpole():
    threads = th.get_num_threads()
    th.set_num_threads(1)  # one thread: a small network, and the same result on every run
    try:
        model = PrioritizedDQN("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [64, 64]}, seed=0, **CARTPOLE)
        model.learn(12_000)
    finally:
        th.set_num_threads(threads)
    assert model.replay_buffer.beta == pytest.approx(1.0, abs=0.01)  # annealed to beta_end
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=10, deterministic=True)
    assert mean >= 150  # a random policy scores ~20
