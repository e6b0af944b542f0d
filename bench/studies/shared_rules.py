"""Study: what do the sample-count rules cost the shared learner's sample? (docs/many_writers.md)

``get_next(256)`` on a ``SharedReplayBuffer`` of ``W`` writers x 250 streams x 200 steps of small
transitions (4 float32, an int64 policy version), without rules and with each rule, interleaved
round by round in one process and timed by the thread's CPU clock (this machine is shared).
"idle": nothing added between samples; "adding": every writer commits one step before each
sample (its add not timed), so each sample also takes in W steps. The writers are handles used
in this process (the intake reads the same shared records as from actor processes).

    PYTHONPATH=src python bench/studies/shared_rules.py [--writers 1,4] [--rounds 5] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import replaybuf

SPEC = {"observation": replaybuf.ArraySpec((4,), np.float32), "policy_version": replaybuf.ArraySpec((), np.int64)}
STREAMS, STEPS = 250, 200

RULES = {
    "plain": {},
    "replacement=False": {"replacement": False},
    "max_times_sampled": {"max_times_sampled": 10**9},  # counted, never consumed: the cost of the count
    "max_staleness": {"max_staleness": 5},
}


def filled(writers: int, **rules) -> tuple[replaybuf.SharedReplayBuffer, list, dict]:
    buffer = replaybuf.SharedReplayBuffer(
        SPEC, writers=writers, batch_size=STREAMS, max_length=STEPS, seed=0, flush_every=1, **rules
    )
    handles = [buffer.writer(w) for w in range(writers)]
    step = {"observation": np.zeros((STREAMS, 4), np.float32), "policy_version": np.zeros(STREAMS, np.int64)}
    for _ in range(STEPS):
        for handle in handles:
            handle.add_batch(step)
    return buffer, handles, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="1,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    for writers in [int(w) for w in args.writers.split(",")]:
        built = {name: filled(writers, **rules) for name, rules in RULES.items()}
        for mode in ("idle", "adding"):
            times: dict[str, list[float]] = {name: [] for name in RULES}
            for _ in range(args.rounds):
                for name, (buffer, handles, step) in built.items():
                    spent = 0.0
                    for _ in range(args.calls):
                        if mode == "adding":
                            for handle in handles:
                                handle.add_batch(step)
                        start = time.thread_time()
                        buffer.get_next(256)
                        spent += time.thread_time() - start
                    times[name].append(spent / args.calls)
            plain = statistics.median(times["plain"])
            for name, spans in times.items():
                median = statistics.median(spans)
                print(
                    f"W={writers} {mode:6s} {name:18s} {median * 1e6:7.1f} us  "
                    f"{plain / median:5.2f}x the plain sample's throughput"
                )
        for buffer, handles, _ in built.values():
            for handle in handles:
                handle.close()
            buffer.close()


if __name__ == "__main__":
    main()
