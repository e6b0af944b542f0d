"""Study: Are the written-out Threefry bits faster than jax.random.bits inside a scan?
Answer: docs/jax.md, "Random numbers".

replaybuf.jax.bits.random_bits beside jax.random.bits: us per call inside a jitted scan.

    PYTHONPATH=src bench/.venvs/jax/bin/python bench/studies/jax_bits.py [--reps 7]

Each scan step folds its index into a key, draws ``n`` words and adds their low bits to the
carry (so nothing is dropped). Median of ``--reps`` repetitions of scans of 1000 steps, the
two generators interleaved by the harness.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from replaybuf.jax.bits import random_bits  # noqa: E402

STEPS = 1000


def scanned(draw, n: int):
    """``run(k)``: k calls of a jitted scan of ``STEPS`` steps drawing ``n`` words each (compiled here)."""

    def body(total, i):
        words = draw(jax.random.fold_in(jax.random.key(1), i), (n,))
        return total + jnp.sum(words & 1023), None

    scan = jax.jit(lambda: jax.lax.scan(body, jnp.uint32(0), jnp.arange(STEPS))[0])
    scan().block_until_ready()
    return harness.repeat(lambda: scan().block_until_ready())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    draws = {
        "jax.random.bits": lambda key, shape: jax.random.bits(key, shape, jnp.uint32),
        "replaybuf random_bits": random_bits,
    }
    platform = jax.devices()[0].platform
    print(f"jax {jax.__version__}, {platform}; us per step, median of {args.reps} interleaved repetitions")
    print("| words | " + " | ".join(draws) + " |")
    print("| ---: |" + " ---: |" * len(draws))
    for n in (256, 512, 2048):
        runs = {name: scanned(draw, n) for name, draw in draws.items()}
        times, _ = harness.interleave(runs, harness.Timing(args.reps, 0.2, 0.0))
        print(f"| {n} | " + " | ".join(f"{statistics.median(t) / STEPS * 1e6:.2f}" for t in times.values()) + " |")


if __name__ == "__main__":
    main()
