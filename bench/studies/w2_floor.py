"""Study: What separates W2's sample from its random-gather floor, at batch 32 and 256?
Answer: docs/benchmarks.md, "W2 against its random-gather floor" (bench/analysis/15-w2-floor.md).

In one process, timed by the harness (interleaved, median; MB/s of 28,237-byte records, the
W2 store of the peers suite at ``--size``):

- replaybuf: ``get_next(B)`` of the peers suite's W2 buffer (draw, checks, the read, the dict);
- read: that buffer's storage read alone at freshly drawn slots (``read_rows``: one ``take``
  below 4 MiB, the compiled loop split over the cores idle at that moment from there);
- read-split: the same read with the split forced at any size and any load (the threshold
  set to 0, every core taken as idle);
- take: ``records.take(slots)``, one thread;
- gather-floor, gather-1thread, gather-fresh: the peers suite's references (bench/libs/gather_ref.py).

    PYTHONPATH=src .venv/bin/python bench/studies/w2_floor.py [--size full|quick|tiny]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from common import SIZES  # noqa: E402
from libs import gather_ref, replaybuf_lib  # noqa: E402
from replaybuf.storages import row_copy  # noqa: E402
from suites.peers import WORKLOADS  # noqa: E402


def read_run(storage, stored: int, batch: int, threshold: int | None = None):
    """``run(n)``: n storage reads of ``batch`` random slots (``threshold``: the split's, while it
    runs, at any load)."""
    rng = np.random.default_rng(2)

    def run(n: int) -> None:
        saved = row_copy.PARALLEL_BYTES, row_copy.idle_threads
        if threshold is not None:
            row_copy.PARALLEL_BYTES, row_copy.idle_threads = threshold, lambda threads: threads
        try:
            for _ in range(n):
                storage.read(rng.integers(0, stored, batch))
        finally:
            row_copy.PARALLEL_BYTES, row_copy.idle_threads = saved

    return run


def take_run(records: np.ndarray, stored: int, batch: int):
    rng = np.random.default_rng(3)
    return harness.repeat(lambda: records.take(rng.integers(0, stored, batch)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    args = parser.parse_args(argv)
    sizes, timing = SIZES[args.size], harness.TIMINGS[args.size]
    buffer, _ = replaybuf_lib._filled_images(sizes)
    storage = buffer._storage
    for workload in (w for w in WORKLOADS if w.key in ("w2_sample32", "w2_sample256")):
        batch = int(workload.key.removeprefix("w2_sample"))
        runs = {
            "replaybuf": harness.repeat(buffer.get_next, batch),
            "read": read_run(storage, sizes.image_stored, batch),
            "read-split": read_run(storage, sizes.image_stored, batch, threshold=0),
            "take": take_run(storage.records, sizes.image_stored, batch),
        }
        for label, factories in gather_ref.LIBS.items():
            runs[label] = factories[workload.key](sizes)
        print(f"{workload.title}: threads {storage.read_threads}")
        for rec in harness.measure(workload, runs, timing):
            print(f"  {rec['lib']:>15} {rec.get('value', 0):10.0f} {workload.unit}  spread {rec.get('spread')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
