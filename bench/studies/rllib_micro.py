"""Study: replaybuf.rllib's PrioritizedEpisodeReplayBuffer beside RLlib 2.60's, one process.
Answer: docs/rllib.md, "Measured".

CartPole-shaped steps (obs f32[4], Discrete(2) action, reward 1.0) arrive as 1-step chunks
of 200-step episodes (what an env runner returns every step), numpy'd as env runners return
them. Per implementation: the buffer is filled to ``--capacity`` steps, then timed on 2000
more 1-step adds (each evicting once an episode is full), on ``sample(32, n_step=(2, 5),
beta=0.4)`` followed by ``update_priorities`` (50 calls), and measured for memory per stored
step (tracemalloc over a fresh fill of whole 200-step episodes, after a warm-up that compiles
and imports what both need). Figures are CPU time of the process (``time.process_time``: the
machine is shared), one run each.

    PYTHONPATH=src .venv-rllib/bin/python bench/studies/rllib_micro.py --capacity 50000
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer as StockPrioritized

from replaybuf.rllib import PrioritizedEpisodeReplayBuffer

OBS, ACT = gym.spaces.Box(-5.0, 5.0, (4,), np.float32), gym.spaces.Discrete(2)
LENGTH = 200


def one_step_chunks(count: int, rng: np.random.Generator) -> list:
    chunks, t, serial = [], 0, 0
    obs = rng.normal(size=4).astype(np.float32)
    for _ in range(count):
        nxt = rng.normal(size=4).astype(np.float32)
        done = t + 1 == LENGTH
        chunk = SingleAgentEpisode(
            id_=f"e{serial}", observations=[obs, nxt], actions=[1], rewards=[1.0], terminated=done,
            observation_space=OBS, action_space=ACT, t_started=t, len_lookback_buffer=0,
        )  # fmt: skip
        chunk.to_numpy()
        chunks.append(chunk)
        obs, t = nxt, t + 1
        if done:
            t, serial = 0, serial + 1
    return chunks


def whole_episodes(steps: int, rng: np.random.Generator) -> list:
    out = []
    for _ in range(steps // LENGTH):
        episode = SingleAgentEpisode(
            observations=list(rng.normal(size=(LENGTH + 1, 4)).astype(np.float32)),
            actions=[int(a) for a in rng.integers(0, 2, LENGTH)], rewards=[1.0] * LENGTH, terminated=True,
            observation_space=OBS, action_space=ACT, len_lookback_buffer=0,
        )  # fmt: skip
        episode.to_numpy()
        out.append(episode)
    return out


def measure(cls: type, capacity: int, chunks: list, episodes: list) -> dict:
    buffer = cls(capacity)
    for chunk in chunks[:capacity]:
        buffer.add(chunk)
    timed = chunks[capacity:]
    start = time.process_time()
    for chunk in timed:
        buffer.add(chunk)
    add_us = (time.process_time() - start) / len(timed) * 1e6
    buffer.get_metrics()
    start = time.process_time()
    for _ in range(50):
        buffer.sample(32, n_step=(2, 5), beta=0.4, gamma=0.99)
        buffer.update_priorities(np.ones(32))
    sample_ms = (time.process_time() - start) / 50 * 1e3
    warm = cls(1000)
    warm.add(episodes[0])
    warm.sample(4, n_step=1)
    warm.get_metrics()
    tracemalloc.start()
    fresh = cls(capacity)
    for episode in episodes:
        fresh.add(episode)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"add_us": add_us, "sample_ms": sample_ms, "bytes_per_step": used / fresh.get_num_timesteps()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=50000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    chunks = one_step_chunks(args.capacity + 2000, rng)
    episodes = whole_episodes(args.capacity, rng)
    for name, cls in (("replaybuf", PrioritizedEpisodeReplayBuffer), ("rllib", StockPrioritized)):
        row = measure(cls, args.capacity, chunks, episodes)
        print(
            f"{name:9s} capacity {args.capacity}: add {row['add_us']:.1f} us per 1-step chunk, "
            f"sample(32, n_step=(2, 5)) + update {row['sample_ms']:.2f} ms, {row['bytes_per_step']:.1f} bytes per step"
        )


if __name__ == "__main__":
    main()
