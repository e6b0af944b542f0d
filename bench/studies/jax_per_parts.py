"""Study: where does a prioritized sample + update of the JAX core spend its time on a GPU,
beside a uniform sample (issue 33's target: at most 2x)? Answer: docs/gpu.md, "Figures".

us per scanned iteration (the jax_core suite's cases: one jitted, donated ``lax.scan``), median
of ``--reps`` repetitions of one scan each, the cases interleaved by the harness
(bench/harness.py), at the jax_gpu suite's full capacity:

    PYTHONPATH=src python bench/studies/jax_per_parts.py [--capacity 262144] [--reps 7]

``--path levels`` or ``--path wide`` forces one path of the sum tree and the draws on any
platform (``forced_tree_path``: the CPU's rejection rounds, or the masked, loop-free draws of
every other platform), to compare the two on one machine.

Run it again with ``XLA_FLAGS=--xla_gpu_enable_command_buffer=...,WHILE,CONDITIONAL`` to see
what the rejection loop's host round trip costs (XLA's GPU runtime reads a data-dependent
loop's predicate on the host unless the loop runs inside a command buffer).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from replaybuf.jax import make_buffer  # noqa: E402
from replaybuf.jax.sumtree import forced_tree_path  # noqa: E402
from suites.jax_core import SAMPLE, SPEC, STREAMS, Case, checksum, fill, pool  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=262144)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--path", choices=("levels", "wide"), help="force one path (default: the platform's)")
    args = parser.parse_args(argv)
    if args.path:
        with forced_tree_path(args.path):
            return measure(args)
    return measure(args)


def measure(args: argparse.Namespace) -> int:
    data = pool(64)
    ours = make_buffer(SPEC, STREAMS, args.capacity // STREAMS)
    per = make_buffer(SPEC, STREAMS, args.capacity // STREAMS, sampler="prioritized", alpha=0.6)
    state = fill(ours.init(), ours.add, data, args.capacity // STREAMS)
    per_state = fill(per.init(), per.add, data, args.capacity // STREAMS)
    ids = jnp.arange(SAMPLE, dtype=jnp.int32) * 97

    def update(s, b, k):
        return per.update_priorities(s, ids + jax.random.randint(k, (), 0, 1000), b["reward"] ** 2 + 0.01), 0.0

    def sample_update(s, b, k):
        sampled, info = per.sample(s, k, SAMPLE, 2)
        return per.update_priorities(s, info.ids[:, 0], b["reward"] ** 2 + 0.01), checksum(sampled)

    cases = {
        "uniform sample 256 pairs": (state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE, 2)[0]))),
        "uniform sample 256 items": (state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE)[0]))),
        "prioritized sample 256 pairs": (per_state, lambda s, b, k: (s, checksum(per.sample(s, k, SAMPLE, 2)[0]))),
        "prioritized sample 256 items": (per_state, lambda s, b, k: (s, checksum(per.sample(s, k, SAMPLE)[0]))),
        "update 256 priorities": (per_state, update),
        "prioritized sample 256 pairs + update": (per_state, sample_update),
    }
    runs = {name: Case(s, step, data, args.steps).run for name, (s, step) in cases.items()}
    seconds = harness.medians(runs, harness.Timing(args.reps, 0.0, 0.0))  # one scan a repetition, after one compiling
    device, path = jax.devices()[0].device_kind, args.path or "the platform's"
    print(f"JAX {jax.__version__} on {device}, capacity {args.capacity}, path {path}")
    print("| case | us per iteration |\n| --- | ---: |")
    for name, value in seconds.items():
        print(f"| {name} | {value / args.steps * 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
