"""replaybuf.sb3 against Stable-Baselines3's own ReplayBuffer, in one run (docs/sb3.md).

Rows (each a median over repetitions that alternate the two buffers, and the ratio):
``add`` (one CartPole-sized transition per call) and ``sample(256)`` of 100k stored;
SB3's DQN loop (collect + train, ``model.learn``) in steps/s on CartPole and on Atari
(Pong, ``CnnPolicy``, frame stacks of 4); and the resident memory per stored Atari
transition (real frames from the emulator, measured in a fresh process per buffer):
ours with lz4 frame stacks and timeout handling, SB3's default and its
``optimize_memory_usage=True``.

    python bench/sb3.py            # the full run (~20 min on 2 busy cores)
    python bench/sb3.py --quick    # a smoke run (tests/test_bench_smoke.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import rss_bytes  # noqa: E402
from harness import Timing, interleave  # noqa: E402

FULL = {
    "stored": 100_000,
    "reps": 5,
    "rep_seconds": 0.3,
    "cartpole_steps": 10_000,
    "loop_reps": 3,
    "atari_steps": 2_000,
    "atari_reps": 3,
    "ours_rss": 100_000,
    "sb3_rss": 25_000,
}
QUICK = {
    "stored": 2_000,
    "reps": 2,
    "rep_seconds": 0.02,
    "cartpole_steps": 200,
    "loop_reps": 1,
    "atari_steps": 120,
    "atari_reps": 1,
    "ours_rss": 300,
    "sb3_rss": 300,
}


def _buffers(capacity: int):
    """Our ReplayBuffer and SB3's for CartPole's spaces."""
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    from replaybuf.sb3 import ReplayBuffer

    env = gym.make("CartPole-v1")
    args = (capacity, env.observation_space, env.action_space, "cpu")
    return {"replaybuf": ReplayBuffer(*args), "sb3": SB3ReplayBuffer(*args)}


def _step_args(n: int):
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, 1, 4)).astype(np.float32)
    done = rng.random((n, 1)) < 0.02
    # what SB3's DQN passes for CartPole: float32 obs, int64 actions [n_envs], float32 rewards, bool dones
    return [(obs[i], obs[i + 1], np.array([i % 2]), np.ones(1, np.float32), done[i], [{}]) for i in range(n)]


def _alternating(runs: dict, settings: dict) -> dict:
    """Seconds per operation of each ``run(n)``: median of reps, the libraries alternating
    (the bench harness's ``interleave``)."""
    times, _ = interleave(runs, Timing(settings["reps"], settings["rep_seconds"], 0.0))
    for got in times.values():
        if isinstance(got, Exception):
            raise got
    return {lib: statistics.median(got) for lib, got in times.items()}


def bench_add(settings: dict) -> dict:
    steps = _step_args(4096)
    buffers = _buffers(len(steps))

    def runner(buffer):
        def run(n: int) -> None:
            for i in range(n):
                buffer.add(*steps[i % len(steps)])

        return run

    seconds = _alternating({lib: runner(b) for lib, b in buffers.items()}, settings)
    return {lib: 1 / s for lib, s in seconds.items()}  # transitions/s


def bench_sample(settings: dict) -> dict:
    steps = _step_args(settings["stored"])
    buffers = _buffers(len(steps))
    for buffer in buffers.values():
        for step in steps:
            buffer.add(*step)

    def runner(buffer):
        def run(n: int) -> None:
            for _ in range(n):
                buffer.sample(256)

        return run

    seconds = _alternating({lib: runner(b) for lib, b in buffers.items()}, settings)
    return {lib: 1 / s for lib, s in seconds.items()}  # batches/s


def _atari_env(n_envs: int = 1):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=n_envs, seed=0), n_stack=4)


def bench_dqn_loop(game: str, settings: dict) -> dict:
    """SB3 DQN ``learn`` steps/s with each buffer (model built outside the timing)."""
    import torch as th
    from stable_baselines3 import DQN

    from replaybuf.sb3 import ReplayBuffer

    th.set_num_threads(1)
    if game == "cartpole":
        steps, reps = settings["cartpole_steps"], settings["loop_reps"]
        common = {"policy": "MlpPolicy", "env": "CartPole-v1", "learning_starts": 1000 if steps > 2000 else 100}
    else:
        steps, reps = settings["atari_steps"], settings["atari_reps"]
        common = {"policy": "CnnPolicy", "env": _atari_env(), "learning_starts": steps // 2}
    variants = {
        "replaybuf": {"replay_buffer_class": ReplayBuffer}
        | ({"replay_buffer_kwargs": {"compression": "lz4"}} if game == "atari" else {}),
        "sb3": {},
    }
    times = {lib: [] for lib in variants}
    for rep in range(reps):
        for lib in list(variants)[:: 1 if rep % 2 else -1]:  # each library first in every other rep
            kwargs = variants[lib]
            model = DQN(buffer_size=max(steps, 1000), seed=rep, **common, **kwargs)
            start = time.perf_counter()
            model.learn(steps)
            times[lib].append(steps / (time.perf_counter() - start))
    return {lib: statistics.median(values) for lib, values in times.items()}


def rss_per_transition(kind: str, transitions: int) -> float:
    """RSS added per stored Atari transition by one buffer filled from the emulator (this process)."""
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    from replaybuf.sb3 import ReplayBuffer

    env = _atari_env()
    obs = env.reset()
    args = (transitions, env.observation_space, env.action_space, "cpu")
    before = rss_bytes()
    if kind == "replaybuf-lz4":
        buffer = ReplayBuffer(*args, handle_timeout_termination=True, compression="lz4")
    elif kind == "sb3":
        buffer = SB3ReplayBuffer(*args)
    else:
        buffer = SB3ReplayBuffer(*args, optimize_memory_usage=True, handle_timeout_termination=False)
    rng = np.random.default_rng(0)
    for _ in range(transitions):
        action = rng.integers(0, env.action_space.n, 1)
        next_obs, reward, done, infos = env.step(action)
        stored = next_obs.copy()
        if done[0]:
            stored[0] = infos[0]["terminal_observation"]
        buffer.add(obs, stored, action, reward, done, infos)
        obs = next_obs
    return (rss_bytes() - before) / transitions


def bench_rss(settings: dict) -> dict:
    """Each buffer in a fresh process, so no freed memory of another is reused."""
    out = {}
    for kind, count in (
        ("replaybuf-lz4", settings["ours_rss"]),
        ("sb3", settings["sb3_rss"]),
        ("sb3-optimize", settings["sb3_rss"]),
    ):
        command = [sys.executable, __file__, "--rss", kind, "--transitions", str(count)]
        result = subprocess.run(command, check=True, capture_output=True, text=True)
        out[kind] = {"bytes_per_transition": float(result.stdout.strip().splitlines()[-1]), "transitions": count}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument("--rows", default="add,sample,cartpole,atari,rss", help="comma-separated rows to run")
    parser.add_argument("--rss", help=argparse.SUPPRESS)  # worker mode: one buffer's RSS
    parser.add_argument("--transitions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss:
        print(rss_per_transition(args.rss, args.transitions))
        return 0
    settings = QUICK if args.quick else FULL
    jobs = {
        "add": lambda: bench_add(settings),
        "sample": lambda: bench_sample(settings),
        "cartpole": lambda: bench_dqn_loop("cartpole", settings),
        "atari": lambda: bench_dqn_loop("atari", settings),
        "rss": lambda: bench_rss(settings),
    }
    results = {
        "command": "python bench/sb3.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": settings,
    }
    for row in args.rows.split(","):
        figures = jobs[row]()
        if row != "rss":
            figures["ratio"] = figures["replaybuf"] / figures["sb3"]
        results[row] = figures
        print(row, json.dumps(figures), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
