"""W1-W4: replaybuf's NumPy buffers beside the libraries users would pick instead, and beside
plain implementations of the same work on the same bytes (bench/libs/ holds the adapters).

- W1: transitions of obs float32[4], action int64, reward float32, done bool, next_obs
  float32[4] (45 bytes) in a buffer of capacity 1M; single adds from per-row NumPy values,
  adds of 256 rows at once, samples of 256 from 200k stored.
- W2: obs uint8[84,84,4] + action, reward, done; capacity 100k, 50k stored; MB/s of returned
  bytes; RSS growth per stored transition.
- W3: proportional prioritized replay, sample 256 then update those 256 priorities, 200k stored.
- W4: 256 windows of 8 consecutive steps (episode-aware where the library can; see notes).
- References, in replaybuf's process: numpy-loop (a Python loop of row writes of the five
  fields), numpy-slice (slice assignment), numpy-fancy (random integers + fancy index),
  numpy-take (np.take into preallocated arrays), numpy-memcpy (a contiguous copy of as many
  rows from the same store), gather-floor (the same rows drawn at random, one compiled
  memcpy per row split over two threads: the fastest random gather on the host,
  bench/libs/gather_ref.py; gather-1thread: the same loop in one thread; gather-fresh: into
  a new output each call), numpy-per (cumsum + searchsorted over the priorities).
"""

from __future__ import annotations

from common import BATCH, IMAGE_ITEM_BYTES
from harness import Workload
from suites import Job

MB = 1e6
W2_REFERENCES = ("gather-floor", "numpy-memcpy", "numpy-take", "gather-1thread", "gather-fresh")

WORKLOADS = [
    Workload(
        "w1_add1",
        "W1a single add (45-byte transition)",
        "items/s",
        references=("numpy-loop",),
        goal_vs="best peer",
        goal_ratio=1.0,
    ),
    Workload(
        "w1_add256",
        "W1b add 256 at once",
        "items/s",
        BATCH,
        references=("numpy-slice",),
        goal_vs="best peer",
        goal_ratio=1.0,
    ),
    Workload(
        "w1_sample256",
        "W1c sample 256 of 200k stored",
        "batches/s",
        references=("numpy-fancy",),
        goal_vs="numpy-fancy",
        goal_ratio=1.5,
        readme="sample 256 small transitions of 200k",
    ),
    Workload(
        "w2_sample32",
        "W2 sample 32 x 84x84x4 uint8",
        "MB/s",
        32 * IMAGE_ITEM_BYTES / MB,
        references=W2_REFERENCES,
        goal_vs="gather-floor",
        goal_ratio=0.9,
        readme="sample 32 x 84x84x4 uint8",
    ),
    Workload(
        "w2_sample256",
        "W2 sample 256 x 84x84x4 uint8",
        "MB/s",
        BATCH * IMAGE_ITEM_BYTES / MB,
        references=W2_REFERENCES,
        goal_vs="gather-floor",
        goal_ratio=0.9,
        readme="sample 256 x 84x84x4 uint8",
    ),
    Workload(
        "w2_rss",
        "W2 RSS per stored 84x84x4 transition",
        "bytes",
        references=("numpy-take",),
        higher_is_better=False,
    ),
    Workload(
        "w3_per",
        "W3 PER sample 256 + update priorities",
        "rounds/s",
        references=("numpy-per",),
        goal_vs="best peer",
        goal_ratio=2,
        readme="prioritized sample 256 + update of those 256 (1M capacity)",
    ),
    Workload(
        "w4_windows",
        "W4 sample 256 windows of 8 steps",
        "batches/s",
        references=("numpy-fancy",),
        goal_vs="flashbax",
        goal_ratio=2,
        readme="256 episode-aware windows of 8",
    ),
]

#: replaybuf and the NumPy references share one process, their repetitions interleaved
JOBS = [
    Job(
        "replaybuf",
        None,
        (
            "replaybuf",
            "numpy-loop",
            "numpy-slice",
            "numpy-fancy",
            "numpy-per",
            "numpy-take",
            "numpy-memcpy",
            "gather-floor",
            "gather-1thread",
            "gather-fresh",
        ),
        ("replaybuf_lib", "numpy_ref", "gather_ref"),
    ),
    Job("cpprb", "cpprb", ("cpprb",), ("cpprb_lib",)),
    Job("sb3", "sb3", ("stable-baselines3",), ("sb3_lib",)),
    Job("torchrl", "torchrl", ("torchrl",), ("torchrl_lib",)),
    Job("tianshou", "tianshou", ("tianshou",), ("tianshou_lib",)),
    Job("flashbax", "flashbax", ("flashbax",), ("flashbax_lib",)),
    Job("tfagents", "tfagents", ("tf-agents PyUniform",), ("tfagents_lib",)),
]


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Time the job's adapters on this suite's workloads."""
    import libs

    libs.measure(WORKLOADS, job.adapters, size, keys)
