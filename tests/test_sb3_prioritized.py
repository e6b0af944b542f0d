"""replaybuf.sb3.PrioritizedReplayBuffer and PrioritizedDQN."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402

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
    # one transition gets a huge priority: it is then (nearly) all that is drawn (every copy of
    # its id in the batch gets it: a draw with replacement may repeat it, and the last one wins)
    ids = np.asarray(sample.ids)
    priorities = np.where(ids == ids[0], 1e6, 1e-3)
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


def _stack(t):
    """VecFrameStack's observation at step t: frames t-3..t on the last axis, frame k all 10 + k."""
    return np.stack([np.full((36, 36), 10 + k, np.uint8) for k in range(t - 3, t + 1)], axis=-1)


def test_image_spaces_draw_from_prioritized_frame_stacks():
    """Frame stacks come back whole (obs and next_obs) with the weights their priorities give."""
    space = spaces.Box(0, 255, (36, 36, 4), np.uint8)
    buffer = PrioritizedReplayBuffer(10, space, spaces.Discrete(2), compression="lz4", alpha=0.5, epsilon=0.0)
    assert isinstance(buffer.native, PrioritizedFrameStackReplayBuffer)
    for t in range(8):
        buffer.add(_stack(t)[None], _stack(t + 1)[None], np.array([t % 2]), np.array([t]), np.zeros(1), [{}])
    priorities = np.arange(1.0, 9.0)  # one env: transition t has id t
    buffer.update_priorities(np.arange(8), priorities)
    buffer.beta = 1.0
    sample = buffer.sample(64)
    for row, t in enumerate(sample.ids):
        np.testing.assert_array_equal(sample.observations[row].numpy(), _stack(t))
        np.testing.assert_array_equal(sample.next_observations[row].numpy(), _stack(t + 1))
    assert th.equal(sample.rewards[:, 0], th.as_tensor(sample.ids, dtype=th.float32))
    # w = (N P(i)) ** -beta over its largest: (p_i / p_min) ** -(alpha * beta) with epsilon 0
    expected = (priorities[sample.ids] / priorities.min()) ** -0.5
    np.testing.assert_allclose(sample.weights[:, 0].numpy(), expected, rtol=1e-5)


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


def test_a_train_step_sets_td_error_priorities_and_a_zero_weight_row_adds_no_gradient():
    """One ``PrioritizedDQN.train`` step on a hand-built buffer: each drawn transition's new
    priority is its ``|Q(s, a) - r - gamma (1 - done) max Q_target(s')|`` (the networks of before
    the step) plus the 1e-6 floor, and a row of importance weight 0 adds nothing to the gradient."""
    th.manual_seed(0)
    model = PrioritizedDQN(
        "MlpPolicy",
        "CartPole-v1",
        buffer_size=100,
        batch_size=4,
        max_grad_norm=1e9,  # no clipping: the gradient stays the loss's
        replay_buffer_kwargs={"alpha": 1.0, "epsilon": 0.0},  # stored mass = priority
        seed=0,
    )
    model.set_logger(configure(None, []))
    buffer, rng = model.replay_buffer, np.random.default_rng(0)
    states = rng.normal(size=(7, 1, 4)).astype(np.float32)
    for t in range(6):
        buffer.add(states[t], states[t + 1], np.array([t % 2]), np.array([t / 2]), np.array([t == 5]), [{}])
    drawn, sample = [], buffer.sample

    def sample_with_a_zero_weight(batch_size, env=None):
        data = sample(batch_size, env)._replace(weights=th.tensor([[1.0], [0.0], [1.0], [1.0]]))
        drawn.append(data)
        return data

    buffer.sample = sample_with_a_zero_weight
    q_net, q_target = copy.deepcopy(model.q_net), copy.deepcopy(model.q_net_target)
    model.train(gradient_steps=1, batch_size=4)
    (data,) = drawn
    with th.no_grad():
        target = data.rewards + (1 - data.dones) * model.gamma * q_target(data.next_observations).max(1).values[:, None]
    q = q_net(data.observations).gather(1, data.actions.long())
    masses = buffer.native.state_dict()["priorities"]["mass"]  # one env: transition t has id t
    expected = (q - target).abs().detach().numpy().ravel() + 1e-6
    np.testing.assert_allclose(masses[data.ids], expected, rtol=1e-5)
    assert (masses[np.setdiff1d(np.arange(6), data.ids)] == 1.0).all()  # not drawn: a new item's 1.0
    # the gradient of the batch's mean loss without row 1
    rows = [0, 2, 3]
    (F.smooth_l1_loss(q[rows], target[rows], reduction="sum") / 4).backward()
    for got, want in zip(model.q_net.parameters(), q_net.parameters(), strict=True):
        th.testing.assert_close(got.grad, want.grad)


# the CartPole configuration of the test below (6,000 steps) and of docs/sb3.md's table (12,000): one update per step
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
        model.learn(6_000)  # greedy return 220.9 here (208.5 at 8,000 steps, 196.4 at docs/sb3.md's 12,000)
    finally:
        th.set_num_threads(threads)
    assert model.replay_buffer.beta == pytest.approx(1.0, abs=0.01)  # annealed to beta_end
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=10, deterministic=True)
    assert mean >= 150  # a random policy scores ~20


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize("compression", [None, "lz4"])
def test_a_frame_folder_on_disk_goes_to_and_from_sb3_buffers(tmp_path, cls, compression):
    """An SB3 buffer's saved transitions load into its native frame-stack buffer on disk
    (storage="memmap", raw or compressed frames); the reopened folder saves them back into a
    fresh SB3 buffer, which then holds and samples the same transitions."""
    space = spaces.Box(0, 255, (36, 36, 4), np.uint8)
    source = cls(10, space, spaces.Discrete(2), compression=compression)
    for t in range(14):  # wraps the 10 slots
        source.add(_stack(t)[None], _stack(t + 1)[None], np.array([t % 2]), np.array([t]), np.zeros(1), [{}])
    source.save(tmp_path / "from_sb3")
    native = source.native
    options = {**source._native_options, "storage": "memmap", "path": tmp_path / "rb"}
    on_disk = type(native)(native.data_spec, native.batch_size, native.max_length, **options)
    on_disk.load(tmp_path / "from_sb3" / "transitions")
    del on_disk
    reopened = type(native)(native.data_spec, native.batch_size, native.max_length, **options)
    reopened.save(tmp_path / "to_sb3" / "transitions")
    back = cls(10, space, spaces.Discrete(2), compression=compression)
    back.load(tmp_path / "to_sb3")
    assert back.pos == source.pos and back.full == source.full
    for a, b in zip(back.native.gather_all().values(), source.native.gather_all().values(), strict=True):
        np.testing.assert_array_equal(a, b)
    sample = back.sample(16)
    for row in range(16):
        t = int(sample.rewards[row, 0])
        np.testing.assert_array_equal(sample.observations[row].numpy(), _stack(t))
        np.testing.assert_array_equal(sample.next_observations[row].numpy(), _stack(t + 1))
