"""replaybuf.rllib's multi-agent prioritized buffer beside RLlib 2.60's: CPU time (thread time,
one process) of ``add`` (2-agent episodes of 100 env steps arriving in 4-step chunks, as env
runners' pieces, into a full buffer that evicts) and of ``sample(32, n_step=(2, 5))`` plus
both modules' ``update_priorities`` (multi-agent DQN's loop). Run in .venv-rllib:

    PYTHONPATH=src .venv-rllib/bin/python bench/studies/rllib_multi_agent.py [--capacity N]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.replay_buffers import MultiAgentPrioritizedEpisodeReplayBuffer as Stock

from replaybuf.rllib import MultiAgentPrioritizedEpisodeReplayBuffer as Ours

SPACE = gym.spaces.Box(-5.0, 5.0, (4,), np.float32)


def chunks(total_steps: int, seed: int = 0) -> list:
    """4-env-step chunks of 100-step episodes of two agents (one module each)."""
    rng = np.random.default_rng(seed)
    out = []
    while sum(len(c) for c in out) < total_steps:
        episode = MultiAgentEpisode(
            observation_space={0: SPACE, 1: SPACE},
            action_space={0: gym.spaces.Discrete(2), 1: gym.spaces.Discrete(2)},
            agent_to_module_mapping_fn=lambda agent, _: f"p{agent}",
        )
        episode.add_env_reset(observations={a: rng.normal(size=4).astype(np.float32) for a in (0, 1)})
        for t in range(100):
            done = t == 99
            episode.add_env_step(
                {a: rng.normal(size=4).astype(np.float32) for a in (0, 1)},
                {a: int(rng.integers(2)) for a in (0, 1)},
                {a: 1.0 for a in (0, 1)},
                terminateds={0: done, 1: done, "__all__": done},
                truncateds={0: False, 1: False, "__all__": False},
            )
            if done:
                out.append(episode)
            elif len(episode) == 4:
                out.append(episode)
                episode = episode.cut()
    return out


def measure(cls, capacity: int, pieces: list, samples: int) -> tuple[float, float]:
    buffer = cls(capacity)
    for chunk in pieces[: len(pieces) // 2]:
        buffer.add(chunk)
    start = time.thread_time()
    timed = pieces[len(pieces) // 2 :]
    for chunk in timed:
        buffer.add(chunk)
    add_us = (time.thread_time() - start) / len(timed) * 1e6
    start = time.thread_time()
    for _ in range(samples):
        buffer.sample(32, n_step=(2, 5), gamma=0.99, beta=0.4)
        for module_id in ("p0", "p1"):
            buffer.update_priorities(np.random.default_rng(0).uniform(0.1, 2.0, 32), module_id)
    sample_us = (time.thread_time() - start) / samples * 1e6
    return add_us, sample_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    pieces = chunks(2 * args.capacity + 1000)
    ours = measure(Ours, args.capacity, pieces, args.samples)
    stock = measure(Stock, args.capacity, pieces, args.samples)
    print(f"capacity {args.capacity} env steps, 2 agents, 4-step chunks")
    print(f"add (us per chunk):    replaybuf {ours[0]:9.1f}   RLlib {stock[0]:9.1f}   {stock[0] / ours[0]:5.1f}x")
    print(f"sample+update (us):    replaybuf {ours[1]:9.1f}   RLlib {stock[1]:9.1f}   {stock[1] / ours[1]:5.1f}x")


if __name__ == "__main__":
    main()
