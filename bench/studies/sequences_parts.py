"""Study: Where does get_next(burn_in=40, num_steps=40) of 256 sequences spend its time?
Answer: bench/analysis/88-sequences.md (docs/benchmarks.md), "What bounds the sequences".

The ``sequences`` suite's small transitions (or its 84x84x4 frame stacks with ``--frames``) in
one process: each get_next's CPU time (this thread's) cut into ``sequence_windows`` (ids,
mask, learn from the drawn starts: replaybuf.samplers.sequences), ``storage.read`` (the
gather of the rows) and the rest (the start draw, argument checks, the nest), medians over
calls; beside it the suite's ``numpy-gather`` floor (one np.take of a record array by
the same pattern of rows, cycling through 8 patterns as it did until 2026-11-29 and
through the suite's ``FLOOR_PATTERNS`` now) and sequence_windows alone:

    PYTHONPATH=src python bench/studies/sequences_parts.py [--stored 1000000] [--frames]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from replaybuf.samplers import episodes  # noqa: E402
from suites import sequences as suite  # noqa: E402

VARIANTS = (("uniform", False, {}), ("padded", True, {}), ("period40", False, {"period": 40}))


def buffers(stored: int, frames: bool) -> tuple[dict, np.ndarray]:
    """Unpadded and padded buffers (keyed by ``pad``) holding ``stored`` steps, and the floor's record array."""
    if frames:
        return suite.frame_buffers(stored, 20_000)
    data = suite.small_steps(stored)
    made = {pad: suite.small_buffer(stored, pad) for pad in (False, True)}
    suite._fill_steps(list(made.values()), data, suite.FIELDS)
    return made, suite._records(data, suite.FIELDS, stored)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--frames", action="store_true", help="84x84x4 frame stacks (FrameStackReplayBuffer)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    made, records = buffers(args.stored, args.frames)
    print(f"filled {args.stored} steps in {time.perf_counter() - start:.0f} s; load {harness.load()}", flush=True)
    clock, spent = time.thread_time, {}
    windows = episodes.sequence_windows

    def timed_windows(*a, **k):
        began = clock()
        got = windows(*a, **k)
        spent["sequence_windows"] = spent.get("sequence_windows", 0.0) + clock() - began
        return got

    episodes.sequence_windows = timed_windows
    for buffer in made.values():
        read = buffer._storage.read

        def timed_read(ids, read=read):
            began = clock()
            got = read(ids)
            spent["storage.read"] = spent.get("storage.read", 0.0) + clock() - began
            return got

        buffer._storage.read = timed_read
    for name, pad, keywords in VARIANTS:
        buffer = made[pad]
        for _ in range(5):
            buffer.get_next(args.batch, suite.STEPS, burn_in=suite.BURN_IN, **keywords)
        rows = []
        for _ in range(args.calls):
            spent.clear()
            began = clock()
            buffer.get_next(args.batch, suite.STEPS, burn_in=suite.BURN_IN, **keywords)
            rows.append((clock() - began, spent.get("sequence_windows", 0.0), spent.get("storage.read", 0.0)))
        total, seq, read = (statistics.median(row[i] for row in rows) * 1e3 for i in range(3))
        rest = statistics.median(row[0] - row[1] - row[2] for row in rows) * 1e3
        print(
            f"{name}: get_next {total:.3f} ms; sequence_windows {seq:.3f} ms ({seq / total:.0%}), "
            f"storage.read {read:.3f} ms ({read / total:.0%}), the rest {rest:.3f} ms ({rest / total:.0%})",
            flush=True,
        )
    for count in (8, suite.FLOOR_PATTERNS):  # the floor until 2026-11-29, the suite's now
        patterns = suite.windows(records.shape[0], args.batch, count)
        floor = []
        for i in range(args.calls):
            began = clock()
            records.take(patterns[i % count])
            floor.append(clock() - began)
        print(f"numpy-gather of the same number of rows, {count} patterns: {statistics.median(floor) * 1e3:.3f} ms")
    print(f"load {harness.load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
