"""Hindsight relabelling: a relabelled sample of 256 on the same episodes (docs/her.md).

Episodes of BitFlipping with 15 bits (15 steps each; observation, achieved and desired goals
of 15 float32 bits), one environment, the size's transitions stored in buffers of its
capacity (full: 50k in 1M, SB3's default ``buffer_size``), "future" goals for 80% of the
batch (SB3's n_sampled_goal=4). ``her_sample256`` times, interleaved in one process:

- ``replaybuf``: UniformReplayBuffer(respect_episodes=True, her=HindsightRelabel(...)).get_next(256)
  (NumPy out; rewards from ``sparse_reward``, BitFlippingEnv's rule written vectorised);
- ``no-her floor``: the same buffer's items without ``her=``, a plain episode-aware sample;
- ``replaybuf.torch cpu``: TorchUniformReplayBuffer(her=...) on the CPU with the same items
  (goals drawn on the host, written and rewarded with torch ops);
- ``stable-baselines3``: SB3's HerReplayBuffer.sample(256);
- ``cpprb``: HindsightReplayBuffer(prioritized=False, additional_goals=4).sample(256) in
  bench/.venvs/cpprb, a subprocess that samples n times per request; cpprb relabels when an
  episode ends and stores the relabelled copies, so its sample is a plain one.

``her_sb3_sample256``: replaybuf.sb3.HerReplayBuffer.sample(256) (SB3's API, torch out,
rewards through the VecEnv's env_method) beside SB3's. Timed in CPU seconds of this
process plus cpprb's (torch on one thread), so that a loaded machine's waits count for none,
with both processes held to one CPU (where the platform allows): on a shared machine the
other CPU's state differs, and cpprb's process alone landing there moved the per-round
ratio between 0.69x and 1.29x in one run (bench/analysis/86-her.md).
Targets: >= 1.5x cpprb's sample, >= 3x SB3's.

    PYTHONPATH=src .venv/bin/python -m bench her
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import harness
import venvs
from harness import Workload
from suites import Job

SB3, CPPRB_LABEL = "stable-baselines3", "cpprb"
#: per size: (buffer capacity, transitions stored, timing in CPU seconds)
SIZES = {
    "full": (1_000_000, 50_000, harness.Timing(7, 0.3, 0.15)),
    "quick": (100_000, 10_000, harness.Timing(3, 0.1, 0.05)),
    "tiny": (3_000, 1_500, harness.Timing(2, 0.02, 0.01)),
}
WORKLOADS = [
    Workload(
        "her_sample256",
        "relabelled sample of 256, BitFlipping 15 bits",
        "batches/s",
        references=("no-her floor", "replaybuf.torch cpu"),
        peers=(SB3, CPPRB_LABEL),
        goal_vs=CPPRB_LABEL,
        goal_ratio=1.5,
        readme="hindsight-relabelled sample of 256 (BitFlipping)",
    ),
    Workload(
        "her_sb3_sample256",
        "HerReplayBuffer.sample(256) through SB3's API",
        "batches/s",
        peers=(SB3,),
        goal_vs=SB3,
        goal_ratio=3.0,
    ),
]
JOBS = [Job("replaybuf", None, ("replaybuf", "no-her floor", "replaybuf.torch cpu", SB3, CPPRB_LABEL))]
BITS, B, N_SAMPLED_GOAL = 15, 256, 4


def episodes(stored: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``stored`` BitFlipping-like steps: episodes of BITS steps, one bit flipped per step."""
    rng = np.random.default_rng(seed)
    count = -(-stored // BITS)
    start = rng.integers(0, 2, (count, 1, BITS))
    flips = rng.integers(0, BITS, (count, BITS))
    onehot = np.eye(BITS, dtype=np.int64)[flips]  # [episode, step, bit]
    states = (start + np.cumsum(onehot, axis=1)) % 2
    obs = np.concatenate([start, states[:, :-1]], axis=1).reshape(-1, BITS)[:stored]
    next_obs = states.reshape(-1, BITS)[:stored]
    goal = np.repeat(rng.integers(0, 2, (count, BITS)), BITS, axis=0)[:stored]
    done = np.zeros(stored, bool)
    done[BITS - 1 :: BITS] = True
    reward = -(np.abs(next_obs - goal).sum(axis=1) > 0).astype(np.float32)
    return {
        "obs": obs.astype(np.float32),
        "next_obs": next_obs.astype(np.float32),
        "goal": goal.astype(np.float32),
        "action": flips.reshape(-1)[:stored],
        "reward": reward.astype(np.float32),
        "done": done,
    }


def sparse_reward(achieved: np.ndarray, desired: np.ndarray, info: object) -> np.ndarray:
    """BitFlippingEnv's reward, vectorised: 0 where every bit matches, else -1 (cpprb gets the same)."""
    return -(np.abs(achieved - desired).sum(axis=1) > 0).astype(np.float32)


def bitflip_env():
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: BitFlippingEnv(n_bits=BITS)])


def fill_sb3(buffer, data: dict[str, np.ndarray]) -> None:
    for t in range(data["obs"].shape[0]):
        obs = {
            "observation": data["obs"][t : t + 1],
            "achieved_goal": data["obs"][t : t + 1],
            "desired_goal": data["goal"][t : t + 1],
        }
        next_obs = {
            "observation": data["next_obs"][t : t + 1],
            "achieved_goal": data["next_obs"][t : t + 1],
            "desired_goal": data["goal"][t : t + 1],
        }
        buffer.add(obs, next_obs, data["action"][t : t + 1], data["reward"][t : t + 1], data["done"][t : t + 1], [{}])


def sb3_contenders(capacity: int, data: dict[str, np.ndarray]) -> dict:
    """replaybuf.sb3's HerReplayBuffer (as ``replaybuf``) and SB3's, filled alike: label -> sample(256)."""
    import torch
    from stable_baselines3 import HerReplayBuffer as SB3Her

    from replaybuf.sb3 import HerReplayBuffer

    torch.set_num_threads(1)
    env = bitflip_env()
    made = {}
    for name, kind in (("replaybuf", HerReplayBuffer), (SB3, SB3Her)):
        buffer = kind(
            capacity, env.observation_space, env.action_space, env, device="cpu", n_sampled_goal=N_SAMPLED_GOAL
        )
        fill_sb3(buffer, data)
        made[name] = lambda buffer=buffer: buffer.sample(B)
    return made


def native_parts(reward) -> tuple:
    """The native buffers' data_spec and ``HindsightRelabel`` (80% "future" goals, ``reward``)."""
    import replaybuf
    from replaybuf import ArraySpec

    goal = ArraySpec((BITS,), np.float32)
    spec = {
        "observation": {"observation": goal, "achieved_goal": goal, "desired_goal": goal},
        "next_observation": {"observation": goal, "achieved_goal": goal, "desired_goal": goal},
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "done": ArraySpec((), np.bool_),
    }
    her = replaybuf.HindsightRelabel(
        goal_field=("observation/desired_goal", "next_observation/desired_goal"),
        achieved_field="next_observation/achieved_goal",
        compute_reward=reward,
        ratio=1 - 1 / (N_SAMPLED_GOAL + 1),
    )
    return spec, her


def fill_native(buffer, data: dict[str, np.ndarray]) -> None:
    for start in range(data["obs"].shape[0]):
        t = slice(start, start + 1)
        buffer.add_batch(
            {
                "observation": {
                    "observation": data["obs"][t],
                    "achieved_goal": data["obs"][t],
                    "desired_goal": data["goal"][t],
                },
                "next_observation": {
                    "observation": data["next_obs"][t],
                    "achieved_goal": data["next_obs"][t],
                    "desired_goal": data["goal"][t],
                },
                "action": data["action"][t],
                "reward": data["reward"][t],
                "done": data["done"][t],
            }
        )


def native_contender(capacity: int, data: dict[str, np.ndarray]) -> dict:
    import replaybuf

    spec, her = native_parts(sparse_reward)
    buffer = replaybuf.UniformReplayBuffer(
        spec, 1, capacity, seed=0, respect_episodes=True, episode_end_field="done", her=her
    )
    fill_native(buffer, data)
    plain = replaybuf.UniformReplayBuffer(spec, 1, capacity, seed=0, respect_episodes=True, episode_end_field="done")
    plain.load_state_dict(buffer.state_dict())  # the same items: what a sample costs without relabelling
    return {"replaybuf": lambda: buffer.get_next(B), "no-her floor": lambda: plain.get_next(B)}


def torch_contender(capacity: int, data: dict[str, np.ndarray]) -> dict:
    """TorchUniformReplayBuffer(her=) on the CPU (goals drawn on the host, applied with torch ops)."""
    import torch

    from replaybuf.torch import TorchUniformReplayBuffer

    def reward(achieved, desired, info):  # sparse_reward with tensors
        return -((achieved - desired).abs().sum(dim=1) > 0).float()

    torch.set_num_threads(1)
    spec, her = native_parts(reward)
    buffer = TorchUniformReplayBuffer(spec, 1, capacity, seed=0, episode_end_field="done", her=her)
    fill_native(buffer, data)
    return {"replaybuf.torch cpu": lambda: buffer.get_next(B)}


CPPRB = """
import sys, time
import numpy as np
from cpprb import HindsightReplayBuffer
capacity, path = int(sys.argv[1]), sys.argv[2]
data = dict(np.load(path))
bits = data["obs"].shape[1]
def reward(state, action, goal):  # sparse_reward of bench/suites/her.py
    return -(np.abs(state - goal).sum(axis=1) > 0).astype(np.float32)
env_dict = {"obs": {"shape": bits}, "act": {"dtype": np.int64}, "next_obs": {"shape": bits}, "done": {}}
buffer = HindsightReplayBuffer(capacity * 5, env_dict, max_episode_len=bits, reward_func=reward,
                               goal_shape=bits, additional_goals=4, prioritized=False)
for t in range(data["obs"].shape[0]):
    buffer.add(obs=data["obs"][t], act=data["action"][t], next_obs=data["next_obs"][t], done=data["done"][t])
    if data["done"][t]:
        buffer.on_episode_end(data["goal"][t])
buffer.sample(256)
print("ready", flush=True)
for line in sys.stdin:  # n samples per request; the reply is this process's CPU seconds so far
    for _ in range(int(line)):
        buffer.sample(256)
    print(time.process_time(), flush=True)
"""


class CpprbProcess:
    """cpprb in its own venv, filled with the same episodes; ``run(n)`` samples n times there,
    and ``cpu`` is that process's CPU seconds as of its last reply."""

    def __init__(self, python: Path, capacity: int, data_path: Path):
        self.cpu = 0.0
        self.process = subprocess.Popen(
            [str(python), "-c", CPPRB, str(capacity), str(data_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            self.process.kill()
            self.close()
            raise RuntimeError("cpprb's process failed to start")

    def run(self, n: int) -> None:
        self.process.stdin.write(f"{n}\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("cpprb's process stopped")
        self.cpu = float(reply)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()


def cpprb_python(size: str) -> Path:
    """bench/.venvs/cpprb's interpreter, built first unless at the smoke tests' size (where a missing one
    raises ``VenvError``)."""
    if size == "tiny" and not venvs.python_of("cpprb").exists():
        raise venvs.VenvError("bench/.venvs/cpprb is not built (python bench/venvs.py cpprb)")
    return venvs.ensure("cpprb")


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Fill every contender with the same episodes, then time each workload's contenders interleaved."""
    import stable_baselines3

    import replaybuf

    capacity, stored, timing = SIZES[size]
    if hasattr(os, "sched_setaffinity"):  # this process and cpprb's (started below) on one CPU
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}")
    harness.emit(lib=SB3, version=f"stable-baselines3 {stable_baselines3.__version__}")
    data = episodes(stored)
    cpprb = None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "episodes.npz"
        np.savez(path, **data)
        try:
            cpprb = CpprbProcess(cpprb_python(size), capacity, path)
        except (venvs.VenvError, RuntimeError) as exc:
            harness.missing(["her_sample256"], CPPRB_LABEL, str(exc)[:300])
        try:
            sb3 = sb3_contenders(capacity, data)
            native = {**native_contender(capacity, data), **torch_contender(capacity, data), SB3: sb3[SB3]}
            runs = {
                "her_sample256": {label: harness.repeat(step) for label, step in native.items()},
                "her_sb3_sample256": {label: harness.repeat(step) for label, step in sb3.items()},
            }
            if cpprb is not None:
                runs["her_sample256"][CPPRB_LABEL] = cpprb.run
            # CPU seconds of this process and cpprb's (a shared machine's waits count for nobody)
            clock = lambda: time.process_time() + (cpprb.cpu if cpprb else 0.0)  # noqa: E731
            for workload in WORKLOADS:
                if not keys or workload.key in keys:
                    harness.measure(workload, runs[workload.key], timing, clock=clock)
        finally:
            if cpprb is not None:
                cpprb.close()
