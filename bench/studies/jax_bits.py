"""Study: Are the written-out Threefry bits faster than jax.random.bits inside a scan?
Answer: docs/jax.md, "Random numbers".

replaybuf.jax.bits.random_bits beside jax.random.bits: us per call inside a jitted scan.

    PYTHONPATH=src bench/.venvs/jax/bin/python bench/studies/jax_bits.py [--reps 7]

Each scan step folds its index into a key, draws ``n`` words and adds their low bits to the
carry (so nothing is dropped). Median of ``--reps`` runs of 1000 steps, the two generators
interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from replaybuf.jax.bits import random_bits

STEPS = 1000


def scanned(draw, n: int):
    def body(total, i):
        words = draw(jax.random.fold_in(jax.random.key(1), i), (n,))
        return total + jnp.sum(words & 1023), None

    run = jax.jit(lambda: jax.lax.scan(body, jnp.uint32(0), jnp.arange(STEPS))[0])
    run().block_until_ready()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    draws = {
        "jax.random.bits": lambda key, shape: jax.random.bits(key, shape, jnp.uint32),
        "replaybuf random_bits": random_bits,
    }
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; us per step, median of {args.reps} x {STEPS}")
    print("| words | " + " | ".join(draws) + " |")
    print("| ---: |" + " ---: |" * len(draws))
    for n in (256, 512, 2048):
        runs = {name: scanned(draw, n) for name, draw in draws.items()}
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.reps):
            for name, run in runs.items():
                start = time.perf_counter()
                run().block_until_ready()
                times[name].append((time.perf_counter() - start) / STEPS * 1e6)
        print(f"| {n} | " + " | ".join(f"{statistics.median(t):.2f}" for t in times.values()) + " |")


if __name__ == "__main__":
    main()
