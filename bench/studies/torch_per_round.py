"""Study: how far is the torch prioritized round on a CPU from NumPy's, in one process?
Answer: bench/analysis/89-torch-prioritized.md ("After the trims of the CPU path").

The `gpu_per256_numpy` row's round (sample 256, update their 256 priorities; capacity 1M,
200k small transitions stored in 256 streams, alpha 0.6, beta 0.4; float32 priority tensors
for torch, float64 arrays for NumPy) of `TorchPrioritizedReplayBuffer(device="cpu")` and
`PrioritizedReplayBuffer`, alternating: each repetition times `--rounds` rounds of one buffer
then of the other, in thread CPU time (one torch thread). Prints the medians (us per round)
and torch's time over NumPy's (median, first quartile and best repetition).

Run: PYTHONPATH=src python bench/studies/torch_per_round.py [--reps 80] [--rounds 25]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from common import small_pool, small_spec  # noqa: E402
from replaybuf import PrioritizedReplayBuffer
from replaybuf.torch import TorchPrioritizedReplayBuffer

BATCH, CAPACITY, STORED = 256, 1_000_000, 200_192


def round_of(buffer, priorities: list):
    """One round of ``buffer``: sample 256, set their priorities (the next of 16 sets)."""
    turn = itertools.count()

    def round_() -> None:
        _, info = buffer.get_next(BATCH)
        buffer.update_priorities(info.ids, priorities[next(turn) & 15])

    return round_


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pool = small_pool(STORED)
    options = {"batch_size": BATCH, "max_length": CAPACITY // BATCH, "alpha": 0.6, "beta": 0.4, "seed": 1}
    ours, numpy_rb = (
        TorchPrioritizedReplayBuffer(small_spec(), **options),
        PrioritizedReplayBuffer(small_spec(), **options),
    )
    for start in range(0, STORED, BATCH):
        batch = {key: value[start : start + BATCH] for key, value in pool.items()}
        ours.add_batch(batch)
        numpy_rb.add_batch(batch)
    generator = torch.Generator().manual_seed(1)
    tensors = [torch.rand(BATCH, generator=generator) + 0.01 for _ in range(16)]
    rounds = {
        "torch": round_of(ours, tensors),
        "numpy": round_of(numpy_rb, [p.numpy().astype(np.float64) for p in tensors]),
    }
    times: dict[str, list[float]] = {name: [] for name in rounds}
    for _ in range(args.reps):
        for name, step in rounds.items():
            step()
            start = time.thread_time()
            for _ in range(args.rounds):
                step()
            times[name].append((time.thread_time() - start) / args.rounds * 1e6)
    median = {name: statistics.median(values) for name, values in times.items()}
    first = {name: statistics.quantiles(values, n=4)[0] for name, values in times.items()}
    best = {name: min(values) for name, values in times.items()}
    print(f"us per round (median): torch {median['torch']:.1f}, numpy {median['numpy']:.1f}")
    for label, figures in (("median", median), ("first quartile", first), ("best", best)):
        print(f"torch / numpy time, {label}: {figures['torch'] / figures['numpy']:.3f}")


if __name__ == "__main__":
    main()
