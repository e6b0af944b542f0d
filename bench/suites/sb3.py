"""replaybuf.sb3 beside Stable-Baselines3's own ReplayBuffer, the two in one process per job (docs/sb3.md).

- ``sb3_add``: ``add`` of one CartPole-sized transition per call (what SB3's DQN passes:
  float32 obs, int64 actions ``[n_envs]``, float32 rewards, bool dones; 4,096 distinct);
- ``sb3_sample256``: ``sample(256)`` of 100k stored CartPole transitions;
- ``sb3_dqn_cartpole`` / ``sb3_dqn_atari``: SB3's DQN ``learn`` (collect + train) in steps/s
  on CartPole (``MlpPolicy``) and on Pong (``CnnPolicy``, frame stacks of 4, ours with lz4
  frame stacks); one ``learn`` a repetition, the model built untimed before each (the
  harness's ``before``), the libraries in turn;
- ``sb3_rss``: resident memory added per stored Atari transition (real frames from the
  emulator, each buffer filled alone in a fresh process): ours with lz4 frame stacks and
  timeout handling, SB3's default and its ``optimize_memory_usage=True``. Target: <= 2 KB.

SB3 lives in the main environment (replaybuf.sb3 needs it), so both sides share one process.

    PYTHONPATH=src .venv/bin/python -m bench sb3 [--workloads sb3_add,sb3_sample256]
    PYTHONPATH=src .venv/bin/python bench/suites/sb3.py --rss KIND --transitions N   # one RSS figure
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from common import rss_bytes  # noqa: E402
from harness import Workload  # noqa: E402
from suites import Job  # noqa: E402

SB3 = "stable-baselines3"
SB3_OPTIMIZE = "stable-baselines3 optimize_memory_usage"
SIZES = {
    "full": {"stored": 100_000, "cartpole_steps": 10_000, "loop_reps": 3, "atari_steps": 2_000, "rss": 100_000},
    "quick": {"stored": 20_000, "cartpole_steps": 2_000, "loop_reps": 2, "atari_steps": 400, "rss": 5_000},
    "tiny": {"stored": 2_000, "cartpole_steps": 150, "loop_reps": 1, "atari_steps": 60, "rss": 200},
}
SB3_RSS_SHARE = 4  # SB3's buffers store a quarter as many transitions (their arrays are touched linearly)

WORKLOADS = [
    Workload("sb3_add", "add one CartPole transition", "items/s", peers=(SB3,)),
    Workload(
        "sb3_sample256",
        "sample(256) of 100k CartPole transitions",
        "batches/s",
        peers=(SB3,),
        goal_vs=SB3,
        goal_ratio=1.5,
        readme="SB3 ReplayBuffer.sample(256) (replaybuf.sb3)",
    ),
    Workload(
        "sb3_dqn_cartpole",
        "SB3 DQN learn on CartPole (collect + train)",
        "steps/s",
        peers=(SB3,),
        goal_vs=SB3,
        goal_ratio=1.0,
    ),
    Workload(
        "sb3_dqn_atari",
        "SB3 DQN CnnPolicy learn on Pong, frame stacks of 4 (ours lz4)",
        "steps/s",
        peers=(SB3,),
        goal_vs=SB3,
        goal_ratio=1.0,
    ),
    Workload(
        "sb3_rss",
        "RSS per stored Pong transition (target <= 2 KB)",
        "bytes",
        peers=(SB3, SB3_OPTIMIZE),
        higher_is_better=False,
    ),
]
#: one process per group of workloads, each within its timeout
JOBS = [
    Job("buffers", None, ("replaybuf", SB3), workloads=("sb3_add", "sb3_sample256")),
    Job("dqn", None, ("replaybuf", SB3), workloads=("sb3_dqn_cartpole", "sb3_dqn_atari"), timeout=2400),
    Job("rss", None, ("replaybuf", SB3, SB3_OPTIMIZE), workloads=("sb3_rss",)),
]


def _buffers(capacity: int) -> dict:
    """Our ReplayBuffer and SB3's for CartPole's spaces."""
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    from replaybuf.sb3 import ReplayBuffer

    env = gym.make("CartPole-v1")
    args = (capacity, env.observation_space, env.action_space, "cpu")
    return {"replaybuf": ReplayBuffer(*args), SB3: SB3ReplayBuffer(*args)}


def _step_args(n: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, 1, 4)).astype(np.float32)
    done = rng.random((n, 1)) < 0.02
    return [(obs[i], obs[i + 1], np.array([i % 2]), np.ones(1, np.float32), done[i], [{}]) for i in range(n)]


def add_runs() -> dict:
    steps = _step_args(4096)

    def runner(buffer):
        def run(n: int) -> None:
            for i in range(n):
                buffer.add(*steps[i % len(steps)])

        return run

    return {lib: runner(buffer) for lib, buffer in _buffers(len(steps)).items()}


def sample_runs(stored: int) -> dict:
    steps = _step_args(stored)
    buffers = _buffers(stored)
    for buffer in buffers.values():
        for step in steps:
            buffer.add(*step)
    return {lib: harness.repeat(buffer.sample, 256) for lib, buffer in buffers.items()}


def _atari_env(n_envs: int = 1):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=n_envs, seed=0), n_stack=4)


class Loops:
    """SB3 DQN ``learn(steps)`` as a ``run(n)`` per library, and the ``before`` hooks that build
    a fresh model (seeded by its repetition) untimed before each repetition."""

    def __init__(self, game: str, steps: int):
        import torch

        from replaybuf.sb3 import ReplayBuffer

        torch.set_num_threads(1)
        self.steps, self.models, self.seeds = steps, {}, {}
        if game == "cartpole":
            self.common = {"policy": "MlpPolicy", "env": "CartPole-v1", "learning_starts": min(1000, steps // 2)}
            ours = {"replay_buffer_class": ReplayBuffer}
        else:
            self.common = {"policy": "CnnPolicy", "env": _atari_env(), "learning_starts": steps // 2}
            ours = {"replay_buffer_class": ReplayBuffer, "replay_buffer_kwargs": {"compression": "lz4"}}
        self.kwargs = {"replaybuf": ours, SB3: {}}
        for lib in self.kwargs:
            self.build(lib)

    def build(self, lib: str) -> None:
        from stable_baselines3 import DQN

        seed = self.seeds[lib] = self.seeds.get(lib, -1) + 1
        self.models[lib] = DQN(buffer_size=max(self.steps, 1000), seed=seed, **self.common, **self.kwargs[lib])

    def runs(self) -> dict:
        def run(lib: str):
            return lambda n: [self.models[lib].learn(self.steps) for _ in range(n)]

        return {lib: run(lib) for lib in self.kwargs}

    def before(self) -> dict:
        return {lib: lambda lib=lib: self.build(lib) for lib in self.kwargs}


def rss_per_transition(kind: str, transitions: int) -> float:
    """(child process) RSS added per stored Atari transition by one buffer filled from the emulator."""
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    from replaybuf.sb3 import ReplayBuffer

    env = _atari_env()
    obs = env.reset()
    args = (transitions, env.observation_space, env.action_space, "cpu")
    before = rss_bytes()
    if kind == "replaybuf":
        buffer = ReplayBuffer(*args, handle_timeout_termination=True, compression="lz4")
    elif kind == SB3:
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


def measure_rss(workload: Workload, transitions: int) -> None:
    """Each buffer filled alone in a fresh process, so no freed memory of another is reused."""
    for kind in ("replaybuf", SB3, SB3_OPTIMIZE):
        count = transitions if kind == "replaybuf" else max(1, transitions // SB3_RSS_SHARE)
        command = [sys.executable, __file__, "--rss", kind, "--transitions", str(count)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        harness.figure(workload, kind, float(out.strip().splitlines()[-1]), note=f"{count} transitions")


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This job's workloads (``keys`` only, when given) at ``size``."""
    import stable_baselines3

    import replaybuf

    settings, timing = SIZES[size], harness.TIMINGS[size]
    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}")
    harness.emit(lib=SB3, version=f"stable-baselines3 {stable_baselines3.__version__}")
    one_call = harness.Timing(settings["loop_reps"], 0.0, 0.0)
    for workload in WORKLOADS:
        if workload.key not in job.workloads or (keys and workload.key not in keys):
            continue
        if workload.key == "sb3_add":
            harness.measure(workload, add_runs(), timing)
        elif workload.key == "sb3_sample256":
            harness.measure(workload, sample_runs(settings["stored"]), timing)
        elif workload.key == "sb3_rss":
            measure_rss(workload, settings["rss"])
        else:
            game = workload.key.removeprefix("sb3_dqn_")
            loops = Loops(game, settings[f"{game}_steps"])
            workload = dataclasses.replace(workload, per_call=loops.steps)
            harness.measure(workload, loops.runs(), one_call, before=loops.before())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rss", choices=("replaybuf", SB3, SB3_OPTIMIZE), required=True)
    parser.add_argument("--transitions", type=int, required=True)
    args = parser.parse_args(argv)
    print(rss_per_transition(args.rss, args.transitions))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
