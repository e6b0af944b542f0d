"""Study: how much of a learner's loop is spent waiting for its next batch, with and without
``replaybuf.torch.prefetch``? Answer: bench/analysis/87-prefetch.md, docs/gpu.md.

The learner takes a batch, then "trains" for a fixed time (``time.sleep(step)``: the GPU's
work, which leaves the host's cores free as a real CUDA step does while the host waits), for
``--steps`` steps. The batch is ``get_next(256)`` of 84x84x4 uint8 frames from a
``UniformReplayBuffer`` of 4,096 items (28 MB per batch), as tensors on the device: without
prefetch, sampled and converted in the loop (``prefetch(..., depth=0)``: the same staging
in the caller); with prefetch, by its background thread ``--depth`` batches ahead. Printed
per row: the fraction of the loop's wall time spent in ``next`` (waiting), and ms per step.
The device is CUDA when the process has one, else the CPU (no pinning, no copy).
Run:
    PYTHONPATH=src .venv/bin/python bench/studies/prefetch_wait.py [--step-ms 20] [--steps 60] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from replaybuf import ArraySpec, UniformReplayBuffer
from replaybuf.torch import prefetch

SPEC = {"frame": ArraySpec((84, 84, 4), np.uint8), "action": ArraySpec((), np.int64)}


def filled(seed: int) -> UniformReplayBuffer:
    rb = UniformReplayBuffer(SPEC, batch_size=8, max_length=512, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(512):
        rb.add_batch({"frame": rng.integers(0, 255, (8, 84, 84, 4), np.uint8), "action": np.arange(8)})
    return rb


def loop(rb: UniformReplayBuffer, depth: int, step: float, steps: int) -> tuple[float, float]:
    """``(waiting fraction, seconds per step)`` of ``steps`` steps after two warm-up steps."""
    with prefetch(rb.as_dataset(256), depth=depth) as batches:
        for _ in range(2):
            next(batches)
            time.sleep(step)
        waited, start = 0.0, time.perf_counter()
        for _ in range(steps):
            asked = time.perf_counter()
            items, _ = next(batches)
            if items["frame"].is_cuda:
                torch.cuda.current_stream().synchronize()  # the batch is really there
            waited += time.perf_counter() - asked
            time.sleep(step)
        total = time.perf_counter() - start
    return waited / total, total / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--depth", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rb = filled(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device {device}, train step {args.step_ms} ms, {args.steps} steps, median of {args.reps}")
    rows: dict[str, list[tuple[float, float]]] = {"no prefetch": [], f"prefetch depth={args.depth}": []}
    for _ in range(args.reps):  # rows alternate so that load changes hit both
        rows["no prefetch"].append(loop(rb, 0, args.step_ms / 1e3, args.steps))
        rows[f"prefetch depth={args.depth}"].append(loop(rb, args.depth, args.step_ms / 1e3, args.steps))
    print("| loop | waiting for the batch | ms per step |")
    print("| --- | ---: | ---: |")
    for name, runs in rows.items():
        wait = statistics.median(r[0] for r in runs)
        per = statistics.median(r[1] for r in runs)
        print(f"| {name} | {100 * wait:.1f}% | {1e3 * per:.1f} |")


if __name__ == "__main__":
    main()
