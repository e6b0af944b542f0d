"""RLlib's own algorithms train on replaybuf.rllib's buffers: DQN on CartPole through the dotted
``type`` (the tuned example's settings, examples/rllib_dqn_cartpole.py, shortened: the full 30k-step
run and its return are in docs/rllib.md), SAC on Pendulum through ``install()``, and the buffer
saved beside an algorithm checkpoint and restored. Runs in .venv-rllib (Makefile); skipped elsewhere."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

if Path(sys.prefix).name != ".venv-rllib":  # there ray.rllib must import: a missing one fails
    pytest.skip("RLlib runs in .venv-rllib (make test)", allow_module_level=True)
import ray  # noqa: E402
import torch  # noqa: E402

import replaybuf.rllib  # noqa: E402
from replaybuf.rllib import PrioritizedEpisodeReplayBuffer  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
try:
    from rllib_dqn_cartpole import OURS, dqn_config, env_steps  # noqa: E402
finally:
    sys.path.remove(str(EXAMPLES))

#: the short run: epsilon down within 1k steps, learning from step 200, an iteration every 500 steps
SHORT = {"epsilon": [(0, 1.0), (1000, 0.02)], "num_steps_sampled_before_learning_starts": 200}
SHORT_STEPS = 2000


@pytest.fixture(scope="module")
def ray_local():
    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class Spy:
    """Counts the calls RLlib's DQN makes on the buffer (the real methods still run)."""

    def __init__(self, buffer):
        self.calls = {"add": 0, "sample": 0, "update_priorities": 0}
        for name in self.calls:
            setattr(buffer, name, self._counted(name, getattr(buffer, name)))

    def _counted(self, name, method):
        def call(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def dqn(ray_local):
    """A DQN trained SHORT_STEPS env steps on our buffer (seeded), its buffer's spy, its results."""
    config = dqn_config(OURS, seed=0, **SHORT).reporting(min_sample_timesteps_per_iteration=500)
    config.replay_buffer_config["seed"] = 0
    algo = config.build_algo()
    spy = Spy(algo.local_replay_buffer)
    results = []
    while not results or env_steps(results[-1]) < SHORT_STEPS:
        results.append(algo.train())
    yield algo, spy, results
    algo.stop()


@pytest.mark.timeout(900)
def test_dqn_cartpole_trains_on_our_prioritized_buffer(dqn):
    algo, spy, results = dqn
    buffer = algo.local_replay_buffer
    assert type(buffer) is PrioritizedEpisodeReplayBuffer
    steps = env_steps(results[-1])
    assert buffer.get_added_timesteps() == steps == buffer.get_num_timesteps()  # all below capacity 50k
    assert spy.calls["add"] > 0 and spy.calls["sample"] == spy.calls["update_priorities"] > 0
    # each sample drew 32 steps (one learner update each)
    assert buffer.get_sampled_timesteps() == 32 * spy.calls["sample"]
    # the TD errors came back as priorities: the stored steps' masses differ, the largest above 1
    mass = buffer.get_state()["store"]["mass"]
    assert len(mass) > steps and np.unique(mass).size > 100
    assert buffer.get_state()["_max_priority"] > 1.0
    # the learner learned from what it drew: its Q estimates climb from ~0 towards the n-step
    # returns of CartPole's reward of 1 a step (2,000 steps are too few for the episode return
    # to climb: it stays 10-23 with epsilon down; the full run's return is in docs/rllib.md)
    q = [r["learners"]["default_policy"]["qf_mean"] for r in results if "default_policy" in r.get("learners", {})]
    assert len(q) >= 3 and q[-1] > max(2.0, 2 * q[0]), q


@pytest.mark.timeout(900)
def test_buffer_saved_beside_the_algorithm_checkpoint_and_restored(dqn, tmp_path):
    algo, spy, _ = dqn
    buffer = algo.local_replay_buffer
    path = replaybuf.rllib.save_algorithm(algo, tmp_path / "checkpoint")
    assert (path / replaybuf.rllib.checkpoint.BUFFER_FOLDER).is_dir()
    saved = buffer.get_state()
    draws = [buffer.sample(num_items=8, n_step=3, gamma=0.99, beta=0.4, sample_episodes=True) for _ in range(2)]
    algo.training_step()  # the buffer moves on: a step added, one sample, its priorities
    assert buffer.get_added_timesteps() > saved["_num_timesteps_added"]

    replaybuf.rllib.restore_algorithm(algo, path)
    restored = buffer.get_state()
    for key in ("_num_timesteps", "_num_timesteps_added", "sampled_timesteps", "_max_priority"):
        assert restored[key] == saved[key], key
    np.testing.assert_array_equal(restored["store"]["mass"], saved["store"]["mass"])
    for a, b in zip(restored["store"]["columns"].values(), saved["store"]["columns"].values(), strict=True):
        np.testing.assert_array_equal(a, b)
    # the draws' random state came back too: the same episodes again
    again = [buffer.sample(num_items=8, n_step=3, gamma=0.99, beta=0.4, sample_episodes=True) for _ in range(2)]
    for first, second in zip(draws, again, strict=True):
        assert [e.get_observations(0).tolist() for e in first] == [e.get_observations(0).tolist() for e in second]


@pytest.mark.timeout(900)
def test_sac_pendulum_two_iterations_with_install(ray_local):
    from ray.rllib.algorithms.sac import SACConfig

    replaybuf.rllib.install()
    try:
        config = (
            SACConfig()
            .environment("Pendulum-v1")
            .env_runners(num_env_runners=0)
            .learners(num_learners=0)
            .training(
                replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 10000, "seed": 0},
                num_steps_sampled_before_learning_starts=100,
                train_batch_size_per_learner=64,
            )
            .reporting(min_sample_timesteps_per_iteration=150)
            .debugging(seed=0)
        )
        algo = config.build_algo()
    finally:
        replaybuf.rllib.uninstall()
    try:
        buffer = algo.local_replay_buffer
        assert type(buffer) is PrioritizedEpisodeReplayBuffer
        results = [algo.train() for _ in range(2)]
        assert buffer.get_added_timesteps() == env_steps(results[-1]) >= 300
        assert buffer.get_sampled_timesteps() > 0
        learner = results[-1]["learners"]["default_policy"]
        assert np.isfinite(learner["qf_loss"]) and np.isfinite(learner["policy_loss"])
    finally:
        algo.stop()
    from ray.rllib.utils import replay_buffers

    assert replay_buffers.PrioritizedEpisodeReplayBuffer is not PrioritizedEpisodeReplayBuffer  # uninstalled
