"""Sample-count rules (issue 49): get_next(256) under each rule beside TorchRL 0.14's samplers.

200k small transitions (obs float32[4], action int64, reward float32, policy_version int64:
32 bytes) are stored, every one at policy version 0; each call samples 256 of them:

- ``rules_plain``: uniform with replacement (the reference of the issue's 0.8x goal);
  TorchRL: ``RandomSampler``.
- ``rules_epoch``: ``replacement=False`` (shuffled epochs); TorchRL: ``SamplerWithoutReplacement()``.
- ``rules_consume``: ``max_times_sampled=10**9`` (every draw counted, a batch's items distinct,
  none consumed within the run, so that the timed calls all do the same work); TorchRL:
  ``ConsumingSampler(max_sample_count=10**9)``.
- ``rules_stale``: ``max_staleness=5`` with the learner's version at 3 (every item eligible,
  the rule checked); TorchRL: ``StalenessAwareSampler(max_staleness=5, staleness_weight_fn=
  ones)`` with ``consumer_version = 3`` (uniform over the fresh items, as replaybuf draws).

replaybuf: ``UniformReplayBuffer`` of 1000 streams x 200 steps; TorchRL:
``TensorDictReplayBuffer(LazyTensorStorage(200_000), batch_size=256)``, one thread. Batches
per second of the process's CPU time (``CLOCK``: the machine is shared). Goals: each rule at
4x TorchRL's sampler for it (the issue's), and ``rules_epoch`` / ``rules_consume`` at 0.8x
replaybuf's own plain sample (measured by bench/studies/sample_rules.py, in one process).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from harness import Workload  # noqa: E402
from suites import Job  # noqa: E402

CLOCK = time.process_time
TORCHRL = "torchrl"
BATCH = 256
SIZES = {"full": (1000, 200), "quick": (1000, 200), "tiny": (16, 64)}  # streams x steps stored

#: workload -> (replaybuf's rule keywords, TorchRL's sampler as text for the notes)
RULES = {
    "rules_plain": ({}, "RandomSampler()"),
    "rules_epoch": ({"replacement": False}, "SamplerWithoutReplacement()"),
    "rules_consume": ({"max_times_sampled": 10**9}, "ConsumingSampler(max_sample_count=10**9)"),
    "rules_stale": ({"max_staleness": 5}, "StalenessAwareSampler(max_staleness=5, weight 1), consumer_version=3"),
}
TITLES = {
    "rules_plain": "get_next(256) with replacement",
    "rules_epoch": "get_next(256), replacement=False (epochs)",
    "rules_consume": "get_next(256), max_times_sampled (counted, distinct)",
    "rules_stale": "get_next(256), max_staleness=5",
}
WORKLOADS = [
    Workload(
        key,
        f"{TITLES[key]}, 200k small transitions",
        "batches/s",
        peers=(TORCHRL,),
        goal_vs=TORCHRL,
        goal_ratio=1.0 if key == "rules_plain" else 4.0,
        readme=TITLES[key],
    )
    for key in RULES
]
JOBS = [Job("replaybuf", None, ("replaybuf",)), Job("torchrl", "torchrl", (TORCHRL,))]
VERSION = 3  # the learner's policy version while sampling: every stored item (version 0) is within 5


def _steps(streams: int, steps: int) -> dict[str, np.ndarray]:
    """The stored transitions, ``[steps * streams]`` of each field (step-major, as added)."""
    rng = np.random.default_rng(0)
    n = streams * steps
    return {
        "observation": rng.standard_normal((n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n),
        "reward": rng.standard_normal(n).astype(np.float32),
        "policy_version": np.zeros(n, np.int64),
    }


def measure_replaybuf(size: str, keys: list[str]) -> None:
    import replaybuf

    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}, numpy {np.__version__}")
    streams, steps = SIZES[size]
    data = _steps(streams, steps)
    spec = {
        "observation": replaybuf.ArraySpec((4,), np.float32),
        "action": replaybuf.ArraySpec((), np.int64),
        "reward": replaybuf.ArraySpec((), np.float32),
        "policy_version": replaybuf.ArraySpec((), np.int64),
    }
    batch = min(BATCH, streams * steps // 4)
    for workload in WORKLOADS:
        if workload.key not in keys:
            continue
        buffer = replaybuf.UniformReplayBuffer(
            spec, batch_size=streams, max_length=steps, seed=0, **RULES[workload.key][0]
        )
        for t in range(steps):
            buffer.add_batch({k: v[t * streams : (t + 1) * streams] for k, v in data.items()})
        buffer.policy_version = VERSION
        run = harness.repeat(buffer.get_next, batch)
        harness.measure(workload, {"replaybuf": run}, harness.TIMINGS[size], clock=CLOCK)


def measure_torchrl(size: str, keys: list[str]) -> None:
    from importlib.metadata import version as dist_version

    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers import samplers

    torch.set_num_threads(1)
    versions = f"torchrl {dist_version('torchrl')}, tensordict {dist_version('tensordict')}"
    harness.emit(lib=TORCHRL, version=f"{versions}, torch {torch.__version__}, numpy {np.__version__}")
    streams, steps = SIZES[size]
    data = _steps(streams, steps)
    n = streams * steps
    batch = min(BATCH, n // 4)

    def ones(staleness: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(staleness, dtype=torch.float32)

    made = {
        "rules_plain": lambda: samplers.RandomSampler(),
        "rules_epoch": lambda: samplers.SamplerWithoutReplacement(),
        "rules_consume": lambda: samplers.ConsumingSampler(max_sample_count=10**9),
        "rules_stale": lambda: samplers.StalenessAwareSampler(max_staleness=5, staleness_weight_fn=ones),
    }
    content = TensorDict({k: torch.from_numpy(v) for k, v in data.items()}, batch_size=[n])
    for workload in WORKLOADS:
        if workload.key not in keys:
            continue
        sampler = made[workload.key]()
        buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler, batch_size=batch)
        buffer.extend(content)
        if workload.key == "rules_stale":
            sampler.consumer_version = VERSION
        notes = {TORCHRL: RULES[workload.key][1]}
        harness.measure(workload, {TORCHRL: harness.repeat(buffer.sample)}, harness.TIMINGS[size], notes, clock=CLOCK)


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This job's figures of ``keys`` (every workload when empty) at ``size``."""
    keys = keys or [w.key for w in WORKLOADS]
    if job.name == TORCHRL:
        measure_torchrl(size, keys)
    else:
        measure_replaybuf(size, keys)
