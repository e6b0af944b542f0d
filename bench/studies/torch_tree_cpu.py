"""Study: on a CPU, are the torch tensor trees (replaybuf.torch.sumtree) worth using over the host ones?
Answer: docs/gpu.md, "Trees on the device" (no: TorchPrioritizedReplayBuffer keeps tree_device="host").

One 1M-slot sum tree (arity 16, float64, random masses) per kind; 200 batches of 256 leaf
updates and 256 prefix-sum searches each, CPU thread time per batch (torch on one thread).

Run: PYTHONPATH=src python bench/studies/torch_tree_cpu.py
"""

from __future__ import annotations

import time

import numpy as np
import torch

from replaybuf.samplers.sumtree import SumTree
from replaybuf.torch.sumtree import TorchSumTree

N, B, R = 1_000_000, 256, 200


def per_batch(step) -> float:
    """Microseconds of thread time per call of ``step(i)``, after one warm-up call."""
    step(0)
    start = time.thread_time()
    for i in range(R):
        step(i)
    return (time.thread_time() - start) / R * 1e6


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    leaves = rng.random(N) + 0.01
    host, tensors = SumTree(N), TorchSumTree(N)
    host.update(np.arange(N), leaves)
    tensors.update(torch.arange(N), torch.from_numpy(leaves))
    slots = [rng.integers(0, N, B) for _ in range(R)]
    values = [rng.random(B) + 0.01 for _ in range(R)]
    targets = [rng.random(B) * host.root() for _ in range(R)]
    found, mass = np.empty(B, np.int64), np.empty(B)
    rows = {
        "host update 256": lambda i: host.update(slots[i], values[i]),
        "torch update 256": lambda i: tensors.update(torch.from_numpy(slots[i]), torch.from_numpy(values[i])),
        "host find 256": lambda i: host.kernels.find(host.tree, host.offsets, host.arity, targets[i], found, mass),
        "torch find 256": lambda i: tensors.find(torch.from_numpy(targets[i])),
    }
    print(f"host kernels: {getattr(host.kernels, '__name__', type(host.kernels).__name__)}")
    for name, step in rows.items():
        print(f"{name}: {per_batch(step):.0f} us")


if __name__ == "__main__":
    main()
