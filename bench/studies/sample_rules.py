"""Study: what do the sample-count rules cost a uniform sample? (issue 49's ratio, docs/sample_rules.md)

``get_next(256)`` on 200k small transitions (4 float32, an int64 action, a float32 reward, an
int64 policy version) in a ``UniformReplayBuffer`` of 1000 streams, without rules and with each
rule, interleaved round by round in one process and timed by the thread's CPU clock (this
machine is shared). Prints each rule's median time and its ratio to the plain sample's
throughput (the goal: >= 0.8x). The rows "(1k stale)" add ``max_staleness=5`` and make the
first step's 1000 items stale after the fill: the epoch then checks that each drawn item is
still live, and the count draws from the live set rather than from the range of stored ids
(the paths a buffer takes once items were consumed or went stale).

    PYTHONPATH=src python bench/studies/sample_rules.py [--rounds 7] [--calls 500]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import replaybuf

SPEC = {
    "observation": replaybuf.ArraySpec((4,), np.float32),
    "action": replaybuf.ArraySpec((), np.int64),
    "reward": replaybuf.ArraySpec((), np.float32),
    "policy_version": replaybuf.ArraySpec((), np.int64),
}
STREAMS, STEPS = 1000, 200

RULES = {
    "plain": {},
    "replacement=False": {"replacement": False},
    "max_times_sampled": {"max_times_sampled": 10**9},  # counted, never consumed: the cost of the count
    "max_staleness": {"max_staleness": 5},
    "replacement=False (1k stale)": {"replacement": False, "max_staleness": 5},
    "max_times_sampled (1k stale)": {"max_times_sampled": 10**9, "max_staleness": 5},
}


def filled(**rules) -> replaybuf.UniformReplayBuffer:
    """A full buffer; with ``max_staleness`` its first step (version 0) is stale at version 10."""
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=STREAMS, max_length=STEPS, seed=0, **rules)
    stale = rules.get("max_staleness") is not None and len(rules) > 1
    for t in range(STEPS):
        buffer.add_batch(
            {
                "observation": np.zeros((STREAMS, 4), np.float32),
                "action": np.zeros(STREAMS, np.int64),
                "reward": np.zeros(STREAMS, np.float32),
                "policy_version": np.full(STREAMS, 10 if stale and t else 0, np.int64),
            }
        )
    if stale:
        buffer.policy_version = 10
    return buffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    buffers = {name: filled(**rules) for name, rules in RULES.items()}
    times: dict[str, list[float]] = {name: [] for name in RULES}
    for _ in range(args.rounds):
        for name, buffer in buffers.items():
            start = time.thread_time()
            for _ in range(args.calls):
                buffer.get_next(256)
            times[name].append((time.thread_time() - start) / args.calls)
    plain = statistics.median(times["plain"])
    for name, spans in times.items():
        median = statistics.median(spans)
        print(f"{name:30s} {median * 1e6:7.1f} us  {plain / median:5.2f}x the plain sample's throughput")


if __name__ == "__main__":
    main()
