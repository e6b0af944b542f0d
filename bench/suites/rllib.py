"""replaybuf.rllib beside RLlib 2.60's own new-stack episode buffers, in one process (docs/rllib.md).

Both sides get the same SingleAgentEpisode objects from a real CartPole-v1 (random actions),
as RLlib's env runner hands them over (``to_numpy()``-ed; a chunk per ``cut()``):

- ``rllib_add_50k`` / ``rllib_add_200k``: ``PrioritizedEpisodeReplayBuffer.add`` of one
  1-step chunk per call (what an env runner with ``rollout_fragment_length=1`` sends; chunks
  of one episode joined by id) to a buffer filled to its capacity (50k or 200k steps), so
  every add evicts. The chunks are made before the timed loop. Goal: flat in capacity and
  >= 10x RLlib's at 200k;
- ``rllib_sample32``: ``sample(num_items=32, n_step=(2, 5), gamma=0.99, beta=0.4)`` (DQN's
  call: ``sample_episodes=True``) of 50k stored steps. Goal >= 3x;
- ``rllib_bytes``: bytes per stored CartPole step (tracemalloc: what the filled buffer keeps
  alive, the episodes handed to it included, over the steps it holds) beside the raw data
  (``raw``: observation, action and reward of a step as the episode holds them: 16 + 8 + 4
  bytes). Lower is better; goal <= 2x raw;
- ``rllib_dqn``: ``training_step()`` of RLlib's DQN on CartPole with the tuned example's
  settings (examples/rllib_dqn_cartpole.py: one env step, the add, a sample of 32, one
  learner update, the priority update) per CPU second, each algorithm's buffer prefilled
  with the same 20k random steps. Goal >= 1.3x.

Every figure is CPU time of the process (``time.process_time``: the shared machine makes wall
time useless). Runs in .venv-rllib (the Makefile's RLlib venv; ``make .venv-rllib/.installed``):

    PYTHONPATH=src python -m bench rllib [--quick] [--workloads rllib_add_50k,...]
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from harness import Workload  # noqa: E402
from suites import Job  # noqa: E402

RLLIB = "rllib"
RAW = "raw"
CLOCK = time.process_time
#: add capacities (``rllib_add_50k``, ``rllib_add_200k``), timed adds, stored steps, DQN prefill
SIZES = {
    "full": {"capacities": (50_000, 200_000), "add_calls": 2000, "add_reps": 3, "stored": 50_000, "prefill": 20_000},
    "quick": {"capacities": (10_000, 40_000), "add_calls": 1000, "add_reps": 3, "stored": 10_000, "prefill": 4_000},
    "tiny": {"capacities": (500, 2000), "add_calls": 50, "add_reps": 1, "stored": 500, "prefill": 200},
}
ADDS = ("rllib_add_50k", "rllib_add_200k")

WORKLOADS = [
    Workload(
        "rllib_add_50k",
        "prioritized add of a 1-step chunk, 50k capacity (evicting)",
        "items/s",
        peers=(RLLIB,),
        goal_vs=RLLIB,
        goal_ratio=10.0,
    ),
    Workload(
        "rllib_add_200k",
        "prioritized add of a 1-step chunk, 200k capacity (evicting)",
        "items/s",
        peers=(RLLIB,),
        goal_vs=RLLIB,
        goal_ratio=10.0,
        readme="RLlib PrioritizedEpisodeReplayBuffer add, 200k (replaybuf.rllib)",
    ),
    Workload(
        "rllib_sample32",
        "prioritized sample(32, n_step=(2, 5)) of 50k CartPole steps",
        "batches/s",
        peers=(RLLIB,),
        goal_vs=RLLIB,
        goal_ratio=3.0,
    ),
    Workload(
        "rllib_bytes",
        "bytes per stored CartPole step (goal <= 2x raw)",
        "bytes",
        references=(RAW,),
        peers=(RLLIB,),
        higher_is_better=False,
    ),
    Workload(
        "rllib_dqn",
        "RLlib DQN CartPole training_step (tuned example's settings)",
        "iterations/s",
        peers=(RLLIB,),
        goal_vs=RLLIB,
        goal_ratio=1.3,
    ),
]
JOBS = [
    Job("buffers", "rllib", ("replaybuf", RLLIB, RAW), workloads=tuple(w.key for w in WORKLOADS[:4]), timeout=2400),
    Job("dqn", "rllib", ("replaybuf", RLLIB), workloads=("rllib_dqn",), timeout=2400),
]


def _classes(prioritized: bool = True) -> dict:
    from ray.rllib.utils import replay_buffers as stock

    import replaybuf.rllib as ours

    name = "PrioritizedEpisodeReplayBuffer" if prioritized else "EpisodeReplayBuffer"
    return {"replaybuf": getattr(ours, name), RLLIB: getattr(stock, name)}


class CartPoleStream:
    """SingleAgentEpisode chunks of a real CartPole-v1 under random actions, as an env runner
    sends them: ``chunks(n, steps)``: n chunks of ``steps`` steps each (episodes continue across
    chunks, joined by id; a chunk ends early where its episode does)."""

    def __init__(self, seed: int = 0):
        import gymnasium as gym
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        self._episode_cls = SingleAgentEpisode
        self.env = gym.make("CartPole-v1")
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.episode = self._reset()

    def _reset(self):
        episode = self._episode_cls()
        obs, info = self.env.reset(seed=self.seed)
        self.seed += 1
        episode.add_env_reset(observation=obs, infos=info)
        return episode

    def chunks(self, n: int, steps: int) -> list:
        out = []
        while len(out) < n:
            for _ in range(steps):
                action = int(self.rng.integers(2))
                obs, reward, terminated, truncated, info = self.env.step(action)
                self.episode.add_env_step(obs, action, reward, infos=info, terminated=terminated, truncated=truncated)
                if self.episode.is_done:
                    break
            chunk = self.episode
            self.episode = self._reset() if chunk.is_done else chunk.cut()
            out.append(chunk.to_numpy())
        return out


def fill(buffer, stream: CartPoleStream, steps: int, chunk_steps: int) -> None:
    """Add ``steps`` steps of ``stream`` in chunks of up to ``chunk_steps`` steps, at most 256
    steps or a 20th of ``steps`` an add (one chunk at least) (RLlib's buffer fails with 'pop from an empty deque'
    on an add larger than its capacity). A buffer at capacity stays just under it after an add
    (eviction takes whole episodes), so the count is of steps added."""
    per_add = max(1, min(256, steps // 20) // chunk_steps)
    while buffer.get_added_timesteps() < steps:
        buffer.add(stream.chunks(per_add, chunk_steps))


def add_figures(workload: Workload, capacity: int, settings: dict) -> None:
    """Each buffer filled to ``capacity`` with whole-ish chunks (untimed), then ``add`` of 1-step
    chunks timed in repetitions of ``add_calls`` calls; the median repetition's items/s."""
    reps, calls = settings["add_reps"], settings["add_calls"]
    for lib, cls in _classes().items():
        stream = CartPoleStream(seed=1)
        buffer = cls(capacity=capacity, alpha=0.6)
        fill(buffer, stream, capacity, 50)
        times = []
        for _ in range(reps):
            chunks = stream.chunks(calls, 1)
            start = CLOCK()
            for chunk in chunks:
                buffer.add(chunk)
            times.append((CLOCK() - start) / calls)
            del chunks
        harness.figure(workload, lib, 1.0 / statistics.median(times), note=f"{reps} x {calls} adds, CPU time")


def sample_figures(workload: Workload, stored: int, timing: harness.Timing) -> None:
    runs = {}
    for lib, cls in _classes().items():
        buffer = cls(capacity=stored, alpha=0.6)
        fill(buffer, CartPoleStream(seed=2), stored, 500)  # whole episodes of ~22 steps

        def run(n: int, buffer=buffer) -> None:
            for _ in range(n):
                buffer.sample(num_items=32, n_step=(2, 5), gamma=0.99, beta=0.4, sample_episodes=True)

        runs[lib] = run
    harness.measure(workload, runs, timing, clock=CLOCK)


def bytes_figures(workload: Workload, steps: int) -> None:
    """What each filled buffer keeps alive per stored step (tracemalloc), the episodes handed
    to it made inside the window and dropped after the adds, beside the raw step bytes."""
    raw = None
    for lib, cls in _classes().items():
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        stream = CartPoleStream(seed=3)
        buffer = cls(capacity=steps, alpha=0.6)
        if raw is None:
            e = CartPoleStream(seed=3).chunks(1, 500)[0]
            step = e.get_observations(slice(1, None)).nbytes + e.get_actions().nbytes + e.get_rewards().nbytes
            raw = step / len(e)
        fill(buffer, stream, steps, 500)
        del stream
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        stored = buffer.get_num_timesteps()
        harness.figure(workload, lib, used / stored, note=f"{stored} steps, tracemalloc")
        del buffer
    harness.figure(workload, RAW, raw, note="observation + action + reward bytes per step")


class DQNLoops:
    """One DQN algorithm per buffer (the tuned example's config), each buffer prefilled with the
    same random CartPole steps, ``training_step()`` as the timed call."""

    def __init__(self, prefill: int):
        import torch

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
        from rllib_dqn_cartpole import OURS, STOCK, dqn_config

        torch.set_num_threads(1)
        episodes = CartPoleStream(seed=4).chunks(max(1, prefill // 22), 500)
        self.algos = {}
        for lib, kind in (("replaybuf", OURS), (RLLIB, STOCK)):
            algo = dqn_config(kind, seed=0, num_steps_sampled_before_learning_starts=0).build_algo()
            algo.local_replay_buffer.add(episodes)
            self.algos[lib] = algo

    def runs(self) -> dict:
        def run(algo):
            def go(n: int) -> None:
                for _ in range(n):
                    algo.training_step()

            return go

        return {lib: run(algo) for lib, algo in self.algos.items()}

    def stop(self) -> None:
        for algo in self.algos.values():
            algo.stop()


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This job's workloads (``keys`` only, when given) at ``size``."""
    import ray

    import replaybuf

    settings, timing = SIZES[size], harness.TIMINGS[size]
    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}")
    harness.emit(lib=RLLIB, version=f"ray[rllib] {ray.__version__}")
    for workload in WORKLOADS:
        if workload.key not in job.workloads or (keys and workload.key not in keys):
            continue
        if workload.key in ADDS:
            add_figures(workload, settings["capacities"][ADDS.index(workload.key)], settings)
        elif workload.key == "rllib_sample32":
            sample_figures(workload, settings["stored"], timing)
        elif workload.key == "rllib_bytes":
            bytes_figures(workload, settings["stored"])
        else:
            loops = DQNLoops(settings["prefill"])
            try:
                one = harness.Timing(timing.reps, timing.rep_seconds * 8, timing.warmup_seconds)
                harness.measure(workload, loops.runs(), one, clock=CLOCK)
            finally:
                loops.stop()
            ray.shutdown()
