"""RLlib's DQN on CartPole-v1 with replaybuf's prioritized episode buffer (docs/rllib.md).

The settings are those of RLlib's tuned example (``tuned_examples/dqn/cartpole_dqn.py``:
prioritized replay of 50k steps, alpha 0.6, beta 0.4, n-step 2-5, double and dueling Q,
256-unit tanh layers, epsilon 1.0 -> 0.02 over 10k steps, batch 32, lr 5e-4); the only
change is the buffer's ``type``, the dotted name of replaybuf's class. Trains on the
driver (no env-runner or learner actors) until ``--steps`` env steps, then prints the
mean return of the last episodes (RLlib's smoothed ``episode_return_mean``).

    PYTHONPATH=src .venv-rllib/bin/python examples/rllib_dqn_cartpole.py [--steps 30000] [--stock]

``--stock`` runs RLlib's own ``PrioritizedEpisodeReplayBuffer`` instead, for comparison.
Needs the ``rllib`` extra (``ray[rllib]==2.60.0``; the Makefile's .venv-rllib).
"""

from __future__ import annotations

import argparse
import time

import torch

OURS = "replaybuf.rllib.PrioritizedEpisodeReplayBuffer"
STOCK = "PrioritizedEpisodeReplayBuffer"


def dqn_config(buffer_type: str = OURS, seed: int = 0, **overrides):
    """The tuned example's DQN config with ``buffer_type`` as the replay buffer (on the driver:
    no env-runner actors, one local learner). ``overrides``: ``training`` keywords to change."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    training = {
        "lr": 0.0005,
        "train_batch_size_per_learner": 32,
        "replay_buffer_config": {"type": buffer_type, "capacity": 50000, "alpha": 0.6, "beta": 0.4},
        "n_step": (2, 5),
        "double_q": True,
        "num_atoms": 1,
        "noisy": False,
        "dueling": True,
        "epsilon": [(0, 1.0), (10000, 0.02)],
    }
    training.update(overrides)
    return (
        DQNConfig()
        .environment(env="CartPole-v1")
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .training(**training)
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                fcnet_bias_initializer="zeros_",
                head_fcnet_hiddens=[256],
                head_fcnet_bias_initializer="zeros_",
            )
        )
        .debugging(seed=seed)
    )


def return_mean(result: dict) -> float:
    """The smoothed mean return of the last episodes an iteration's result reports (NaN before any)."""
    return float(result["env_runners"].get("episode_return_mean", float("nan")))


def env_steps(result: dict) -> int:
    return int(result["env_runners"]["num_env_steps_sampled_lifetime"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000, help="env steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stock", action="store_true", help="RLlib's own buffer instead of replaybuf's")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one learner thread: steadier on a shared machine

    algo = dqn_config(STOCK if args.stock else OURS, seed=args.seed).build_algo()
    start_wall, start_cpu = time.time(), time.process_time()
    best = float("-inf")
    while True:
        result = algo.train()
        steps, mean = env_steps(result), return_mean(result)
        best = max(best, mean) if mean == mean else best
        print(
            f"env steps {steps:6d}  return mean {mean:6.1f}  ({time.process_time() - start_cpu:.0f} s CPU)", flush=True
        )
        if steps >= args.steps:
            break
    buffer = algo.local_replay_buffer
    print(
        f"{type(buffer).__module__}.{type(buffer).__name__}: {steps} env steps, final return mean "
        f"{mean:.1f} (best {best:.1f}); {time.time() - start_wall:.0f} s wall, "
        f"{time.process_time() - start_cpu:.0f} s CPU"
    )
    algo.stop()


if __name__ == "__main__":
    main()
