"""Minari datasets into a buffer: ``replaybuf.minari.load`` beside TorchRL's ``MinariExperienceReplay``.

Two CartPole-v1 datasets are recorded (seeded, so every job's process records the same ones)
into a temporary Minari root (HDF5, Minari's default): ``random`` (a uniform random policy:
~22-step episodes, the per-episode cost shows) and ``balancing`` (a pole-balancing rule with
10% random actions: episodes of up to 500 steps, the per-step cost shows). One call is a
load from nothing until the buffer holds the dataset (transitions per second), timed by the
harness, one load a repetition after one untimed warm-up load:

- ``replaybuf``: ``load(id)``, which builds a ``PyUniformReplayBuffer`` (one stream, a chunk
  of items per ``add_batch``);
- ``numpy-stream`` and ``torch``: ``load(id, buffer)`` into a given ``UniformReplayBuffer(spec,
  1, n)`` and ``replaybuf.torch.TorchUniformReplayBuffer(spec, 1, n, device="cpu")``: buffers
  of ``batch_size`` streams, one ``add_batch`` per item;
- ``torchrl``: ``MinariExperienceReplay(id, batch_size=256, root=<new temp dir>,
  load_from_local_minari=True)`` (its only way to build from a local dataset: it reads the
  whole HDF5 file into a TensorDict, copies it episode by episode into a preallocated one
  and writes that as a memory map under ``root``), in bench/.venvs/torchrl-minari.

Issue 35's goal: ``load(id)`` at >= 2x TorchRL.

    PYTHONPATH=src .venv/bin/python -m bench minari_load [--libs replaybuf]
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import warnings

import numpy as np

import harness
from harness import Workload
from suites import Job

POLICIES = ("random", "balancing")
#: per size: (transitions per dataset, timing: one load a repetition)
SIZES = {
    "full": (30_000, harness.Timing(3, 0.0, 0.0)),
    "quick": (5_000, harness.Timing(2, 0.0, 0.0)),
    "tiny": (300, harness.Timing(1, 0.0, 0.0)),
}
TITLES = {"random": "~22-step episodes (random policy)", "balancing": "episodes of up to 500 steps (balancing)"}
WORKLOADS = [
    Workload(
        f"minari_{policy}",
        f"load a CartPole Minari dataset, {TITLES[policy]}",
        "transitions/s",
        SIZES["full"][0],  # replaced by the recorded dataset's transitions
        references=("numpy-stream", "torch"),
        peers=("torchrl",),
        goal_vs="torchrl",
        goal_ratio=2.0,
    )
    for policy in POLICIES
]
#: replaybuf's loaders: label -> what it loads into
TARGETS = {"replaybuf": "numpy", "numpy-stream": "numpy-stream", "torch": "torch"}
JOBS = [
    Job("replaybuf", None, tuple(TARGETS)),
    Job("torchrl", "torchrl-minari", ("torchrl",)),
]


def record(dataset_id: str, steps: int, policy: str, seed: int = 0) -> int:
    """Record at least ``steps`` CartPole transitions as a Minari dataset; return its transitions."""
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    episodes, total = [], 0
    while total < steps:
        observation, _ = env.reset(seed=int(rng.integers(2**31)))
        observations, actions, rewards, terminations, truncations = [observation], [], [], [], []
        done = False
        while not done:
            balance = observation[2] + 0.5 * observation[3] > 0
            greedy = policy == "balancing" and rng.random() > 0.1
            action = int(balance) if greedy else int(rng.integers(2))
            observation, reward, terminated, truncated, _ = env.step(action)
            observations.append(observation)
            actions.append(action)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            done = terminated or truncated
        episodes.append(
            EpisodeBuffer(
                observations=np.array(observations),
                actions=np.array(actions),
                rewards=np.array(rewards),
                terminations=np.array(terminations),
                truncations=np.array(truncations),
            )
        )
        total += len(actions)
    minari.create_dataset_from_buffers(
        dataset_id, episodes, env="CartPole-v1", algorithm_name=policy, description=f"bench minari_load {policy}"
    )
    return total


class Loads:
    """``run(n)`` of each loader and the ``before`` hooks that drop what the last load built (untimed)."""

    def __init__(self, dataset_id: str):
        self.dataset_id, self.built, self.roots = dataset_id, None, []

    def drop(self) -> None:
        self.built = None
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)
        self.roots = []

    def replaybuf(self, target: str):
        import minari

        import replaybuf
        import replaybuf.minari

        def into() -> object:
            dataset = minari.load_dataset(self.dataset_id)
            spec = replaybuf.collect_data_spec(dataset)
            capacity = dataset.total_steps + dataset.total_episodes
            if target == "torch":
                from replaybuf.torch import TorchUniformReplayBuffer

                buffer = TorchUniformReplayBuffer(spec, 1, capacity, device="cpu")
            else:
                buffer = replaybuf.UniformReplayBuffer(spec, 1, capacity)
            replaybuf.minari.load(dataset, buffer, progress=False)
            return buffer

        def load() -> None:
            self.built = replaybuf.minari.load(self.dataset_id, progress=False) if target == "numpy" else into()

        return harness.repeat(load)

    def torchrl(self):
        from torchrl.data.datasets.minari_data import MinariExperienceReplay

        def load() -> None:
            self.roots.append(tempfile.mkdtemp(prefix="torchrl-minari-"))
            self.built = MinariExperienceReplay(
                self.dataset_id, batch_size=256, root=self.roots[-1], load_from_local_minari=True
            )

        return harness.repeat(load)


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Record the datasets in a temporary Minari root, then time this job's loaders on each."""
    steps, timing = SIZES[size]
    root = tempfile.mkdtemp(prefix="replaybuf-bench-minari-")
    os.environ["MINARI_DATASETS_PATH"] = root
    warnings.simplefilter("ignore")  # Minari's advice on metadata, TorchRL's on its own versions
    try:
        import minari

        harness.emit(lib=job.labels[0], version=f"minari {minari.__version__}, {_version(job)}")
        for workload in [w for w in WORKLOADS if not keys or w.key in keys]:
            policy = workload.key.removeprefix("minari_")
            dataset_id = f"bench/cartpole-{policy}-v0"
            workload = dataclasses.replace(workload, per_call=record(dataset_id, steps, policy))
            loads = Loads(dataset_id)
            if job.name == "torchrl":
                runs = {"torchrl": loads.torchrl()}
            else:
                runs = {label: loads.replaybuf(target) for label, target in TARGETS.items()}
            harness.measure(workload, runs, timing, before=dict.fromkeys(runs, loads.drop))
            loads.drop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _version(job: Job) -> str:
    if job.name == "torchrl":
        import torchrl

        return f"torchrl {torchrl.__version__}"
    import replaybuf

    return f"replaybuf {replaybuf.__version__}"
