"""Study: cProfile of RLlib's DQN CartPole ``training_step()`` with either buffer, to see what
bounds the loop's ratio beyond the buffer (answer: bench/analysis/90-rllib.md, "The DQN loop
profiled"). The config and the 20k prefilled steps are ``rllib_dqn_split.py``'s.

    PYTHONPATH=src .venv-rllib/bin/python bench/studies/rllib_dqn_profile.py ours|stock [N]
    RLLIB_TEST_NO_TF_IMPORT=1 ...   # RLlib as a torch-only install sees it (no TensorFlow)
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "bench"), str(ROOT / "bench" / "suites")]

import torch  # noqa: E402
from rllib_dqn_cartpole import OURS, STOCK, dqn_config  # noqa: E402

from suites.rllib import CartPoleStream  # noqa: E402


def main() -> None:
    kind = {"ours": OURS, "stock": STOCK}[sys.argv[1]]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    torch.set_num_threads(1)
    config = dqn_config(kind, seed=0, num_steps_sampled_before_learning_starts=0).reporting(
        min_sample_timesteps_per_iteration=1, min_time_s_per_iteration=0, min_train_timesteps_per_iteration=0
    )
    algo = config.build_algo()
    algo.local_replay_buffer.add(CartPoleStream(seed=4).chunks(20000 // 22, 500))
    for _ in range(10):
        algo.training_step()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        algo.training_step()
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(60)
    algo.stop()


if __name__ == "__main__":
    main()
