"""Study: How much does an add cost on a buffer that has served sequences?
Answer: bench/analysis/88-sequences.md (docs/benchmarks.md), "Adds after sequence samples".

Two buffers of the ``sequences`` suite's small transitions (one stream, episodes of 50-500
steps) filled alike in one process; one served the sequence samples named by ``--variants``
(its window count, its start lists), the other none. Then add_batch of one transition to
each in turn, ``--block`` adds at a time, the two orders alternating, this thread's CPU time;
the medians over ``--reps`` blocks and their ratio (the suite's goal: >= 0.95):

    PYTHONPATH=src python bench/studies/sequence_adds.py [--stored 100000] [--variants uniform,period40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from suites import sequences as suite  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--variants", default="uniform,period40", help="suite variants sampled first ('' for none)")
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--block", type=int, default=300)
    args = parser.parse_args(argv)
    data = suite.small_steps(args.stored)
    made = {name: suite.small_buffer(args.stored, False) for name in ("sampled", "never")}
    suite._fill_steps(list(made.values()), data, suite.FIELDS)
    for variant in filter(None, args.variants.split(",")):
        suite._sampler(made["sampled"], 256, variant)(1)
    columns = {name: data[name][:, None] for name in suite.FIELDS}
    count = min(args.stored, args.reps * args.block)
    items = [{name: columns[name][i] for name in suite.FIELDS} for i in range(count)]
    clock, spent = time.thread_time, {name: [] for name in made}
    order = list(made.items())
    for rep in range(args.reps):
        block = items[(rep * args.block) % count :][: args.block]
        for name, buffer in order if rep % 2 else order[::-1]:
            add = buffer.add_batch
            began = clock()
            for item in block:
                add(item)
            spent[name].append((clock() - began) / len(block))
    sampled, never = (statistics.median(spent[name]) * 1e6 for name in ("sampled", "never"))
    print(
        f"variants {args.variants!r}: sampled {sampled:.2f} us, never sampled {never:.2f} us per add; "
        f"ratio {never / sampled:.3f}; load {harness.load()}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
