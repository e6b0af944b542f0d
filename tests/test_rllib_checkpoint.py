"""An RLlib algorithm checkpoint with its replaybuf buffer beside it (replaybuf.rllib's
save_algorithm / restore_algorithm) on a real DQN. Runs in .venv-rllib (make test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if Path(sys.prefix).name != ".venv-rllib":  # there ray.rllib must import: a missing one fails
    pytest.skip("RLlib runs in .venv-rllib (make test)", allow_module_level=True)
import ray  # noqa: E402
from ray.rllib.algorithms.dqn import DQNConfig  # noqa: E402

from replaybuf.rllib import PrioritizedEpisodeReplayBuffer, restore_algorithm, save_algorithm  # noqa: E402


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_dqn_checkpoint_brings_its_buffer_back(local_ray, tmp_path):
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=50)
        .training(
            replay_buffer_config={
                "type": "replaybuf.rllib.PrioritizedEpisodeReplayBuffer",
                "capacity": 2000,
                "seed": 0,
            },
            num_steps_sampled_before_learning_starts=50,
            train_batch_size=16,
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        algo.train()
        buffer = algo.local_replay_buffer
        assert isinstance(buffer, PrioritizedEpisodeReplayBuffer) and len(buffer) >= 100
        saved = (buffer.episode_ids(), len(buffer), buffer.get_added_timesteps())
        checkpoint = save_algorithm(algo, tmp_path / "ckpt")
        assert (checkpoint / "replaybuf_buffer").is_dir()
        algo.train()  # the buffer moves on
        assert buffer.get_added_timesteps() > saved[2]
        restore_algorithm(algo, checkpoint)
        assert (buffer.episode_ids(), len(buffer), buffer.get_added_timesteps()) == saved
        assert algo.local_replay_buffer is buffer
        algo.train()  # and training goes on from the restored buffer
    finally:
        algo.stop()
