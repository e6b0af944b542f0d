"""DQN + HER on SB3's BitFlippingEnv: replaybuf.sb3.HerReplayBuffer beside SB3's own HerReplayBuffer.

Each seed trains the same DQN (SB3's settings of its HER performance test: n_sampled_goal=5,
"future" goals, lr 2e-3, batch 32, 2 envs; learning starts after one episode per env) once
with each buffer and prints the success rate of the last 100 training episodes and of 100
greedy evaluation episodes. The seed fixes
NumPy, torch and the envs, so a run is repeatable; the two buffers draw differently, so
their figures differ by the noise of training, not by construction.

    .venv/bin/python examples/her_bitflipping.py --bits 15 --steps 20000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3 import HerReplayBuffer as SB3HerReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import BitFlippingEnv

from replaybuf.sb3 import HerReplayBuffer

BUFFERS = {"replaybuf": HerReplayBuffer, "sb3": SB3HerReplayBuffer}


def greedy_success(model: DQN, bits: int, episodes: int, seed: int) -> float:
    """The share of ``episodes`` greedy episodes that reach the goal."""
    env = BitFlippingEnv(n_bits=bits)
    successes = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed * 100_000 + episode)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += bool(info["is_success"])
    return successes / episodes


def train(buffer: str, bits: int, steps: int, seed: int) -> tuple[float, float]:
    """(success rate of the last 100 training episodes, greedy success over 100 episodes)."""
    torch.set_num_threads(1)
    env = make_vec_env(lambda: BitFlippingEnv(n_bits=bits), n_envs=2, seed=seed)
    model = DQN(
        "MultiInputPolicy",
        env,
        replay_buffer_class=BUFFERS[buffer],
        replay_buffer_kwargs={"n_sampled_goal": 5, "goal_selection_strategy": "future"},
        learning_rate=2e-3,
        train_freq=1,
        gradient_steps=2,
        learning_starts=2 * bits + 2,  # one episode per env first (SB3's test: 20 for 10 bits)
        exploration_final_eps=0.02,
        target_update_interval=100,
        batch_size=32,
        buffer_size=100_000,
        stats_window_size=100,
        seed=seed,
        device="cpu",
    )
    model.learn(total_timesteps=steps)
    return float(np.mean(model.ep_success_buffer)), greedy_success(model, bits, 100, seed)


def main(argv: list[str] | None = None) -> dict[str, list[tuple[float, float]]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bits", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--buffers", nargs="+", default=list(BUFFERS), choices=list(BUFFERS))
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {}
    for seed in args.seeds:
        for buffer in args.buffers:
            results.setdefault(buffer, []).append(train(buffer, args.bits, args.steps, seed))
            training, greedy = results[buffer][-1]
            print(f"seed {seed} {buffer:9s}: training success {training:.2f}, greedy success {greedy:.2f}", flush=True)
    for buffer, runs in results.items():
        training, greedy = zip(*runs, strict=True)
        print(
            f"{buffer:9s}: mean training success {statistics.mean(training):.3f}, greedy {statistics.mean(greedy):.3f}"
        )
    return results


if __name__ == "__main__":
    main()
