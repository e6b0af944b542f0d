"""Study: what do the sample-count rules cost a torch (CPU) or JAX (CPU) uniform sample?

The data and rules of bench/studies/sample_rules.py (``get_next(256)`` on 200k small
transitions), on ``TorchUniformReplayBuffer`` and ``JaxReplayBuffer``: without rules they draw
on their own (``torch.randint``; the jitted core's draw), with rules the host draws (the NumPy
buffers' ``RuledSampler``) and the backend reads. Interleaved round by round in one process,
timed by the process's CPU clock (JAX's CPU client runs work on its own threads; this machine
is shared). Prints each rule's median time and its ratio to that backend's plain sample.

    PYTHONPATH=src python bench/studies/sample_rules_backends.py [--backend torch|jax] [--rounds 5] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from sample_rules import RULES, SPEC, STEPS, STREAMS


def filled(backend: str, **rules):
    if backend == "torch":
        from replaybuf.torch import TorchUniformReplayBuffer as cls
    else:
        from replaybuf.jax import JaxReplayBuffer as cls
    buffer = cls(SPEC, batch_size=STREAMS, max_length=STEPS, seed=0, **rules)
    step = {name: np.zeros((STREAMS, *spec.shape), spec.dtype) for name, spec in SPEC.items()}  # zeros, as there
    for _ in range(STEPS):
        buffer.add_batch(step)
    return buffer


def sample(buffer) -> None:
    items, info = buffer.get_next(256)
    if hasattr(info.ids, "block_until_ready"):  # JAX dispatches asynchronously: wait for the read
        items["observation"].block_until_ready()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["torch", "jax"], default="torch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    buffers = {name: filled(args.backend, **rules) for name, rules in RULES.items()}
    for buffer in buffers.values():
        sample(buffer)  # compiles (JAX) before timing
    rounds = [{name: per_call(buffer, args.calls) for name, buffer in buffers.items()} for _ in range(args.rounds)]
    medians = {name: statistics.median(r[name] for r in rounds) for name in RULES}
    for name, median in medians.items():
        ratio = medians["plain"] / median
        print(f"{args.backend} {name:20s} {median * 1e6:7.1f} us  {ratio:5.2f}x the plain sample's throughput")


def per_call(buffer, calls: int) -> float:
    """Process CPU seconds per ``get_next(256)`` over ``calls`` calls."""
    start = time.process_time()
    for _ in range(calls):
        sample(buffer)
    return (time.process_time() - start) / calls


if __name__ == "__main__":
    main()
