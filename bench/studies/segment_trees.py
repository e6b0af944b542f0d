"""Study: would per-segment priority trees cost the many-writers learner more than 10%?
Answer: docs/many_writers.md, "What stays shared-specific and why" (issue 37).

The prioritized ``SharedReplayBuffer`` keeps ONE sum tree (and min tree) over every slot of
every writer's segment (``shared/priorities.py``). Folding it back into ``samplers/`` would
give each segment an ordinary ``PrioritizedReplayBuffer``'s sampler and split the batch over
the segments by their masses (``samplers.split.MassSplit``, as the Ray shards do). This
times the learner's step, a sample of 256 and the priority update of what it drew, both
ways over the same items and priorities:

- ``one-tree``: ``SharedReplayBuffer(sampler="prioritized", writers=W, batch_size=R)`` as shipped;
- ``per-segment``: W ``PrioritizedReplayBuffer(batch_size=R)`` (the ordinary parts), the
  batch split by ``MassSplit.counts`` over their ``mass()``, each part's ``get_next``, the
  results joined with probabilities and weights over all parts; the update routed by id.

Every figure is CPU time of this thread per step (``time.thread_time``: the machine is
shared), the median of ``--reps`` repetitions of ``--steps`` steps, the two interleaved.
Nothing is added while timing (the writers' intake costs both ways the same per step).

    PYTHONPATH=src .venv/bin/python bench/studies/segment_trees.py [--capacity 262144] [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import replaybuf
from replaybuf.samplers.split import MassSplit
from replaybuf.shared import SharedReplayBuffer

SPEC = {
    "obs": replaybuf.ArraySpec((4,), np.float32),
    "action": replaybuf.ArraySpec((), np.int64),
    "reward": replaybuf.ArraySpec((), np.float32),
    "done": replaybuf.ArraySpec((), bool),
    "next_obs": replaybuf.ArraySpec((4,), np.float32),
}
SAMPLE = 256


def _rows(n: int, step: int) -> dict:
    return {
        "obs": np.full((n, 4), step, np.float32),
        "action": np.full(n, step, np.int64),
        "reward": np.ones(n, np.float32),
        "done": np.zeros(n, bool),
        "next_obs": np.full((n, 4), step + 1, np.float32),
    }


class PerSegment:
    """W ordinary prioritized buffers sampled as one (see the module)."""

    def __init__(self, writers: int, rows: int, max_length: int):
        self.parts = [
            replaybuf.PrioritizedReplayBuffer(SPEC, batch_size=rows, max_length=max_length, seed=k)
            for k in range(writers)
        ]
        self.rows, self.streams = rows, writers * rows
        self.rng = np.random.default_rng(0)

    def sample(self) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
        """``(items, ids, probabilities, weights)`` of one batch over every part."""
        reported = [part.mass() for part in self.parts]
        split = MassSplit([mass for mass, _ in reported])
        ids, probabilities, leaves = [], [], []
        for k, count in enumerate(split.counts(self.rng, SAMPLE)):
            if count:
                items, info = self.parts[k].get_next(int(count))
                step, stream = np.divmod(info.ids, self.rows)
                ids.append(step * self.streams + k * self.rows + stream)
                probabilities.append(split.probabilities(k, info.probabilities))
                leaves.append(items)
        probabilities = np.concatenate(probabilities)
        smallest = split.smallest({k: mass for k, mass in enumerate(reported)})
        weights = split.weights(probabilities, smallest, self.parts[0].beta)
        items = {key: np.concatenate([part[key] for part in leaves]) for key in SPEC}
        return items, np.concatenate(ids), probabilities, weights

    def update(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        step, column = np.divmod(ids, self.streams)
        part, stream = np.divmod(column, self.rows)
        for k in np.unique(part):
            mine = part == k
            self.parts[k].update_priorities(step[mine] * self.rows + stream[mine], priorities[mine])


def _fill(writers: int, rows: int, max_length: int) -> tuple[SharedReplayBuffer, PerSegment]:
    shared = SharedReplayBuffer(SPEC, writers=writers, batch_size=rows, max_length=max_length, sampler="prioritized")
    per = PerSegment(writers, rows, max_length)
    handles = [shared.writer(k, flush_every=1) for k in range(writers)]
    for step in range(max_length):
        items = _rows(rows, step)
        for k in range(writers):
            handles[k].add_batch(items)
            per.parts[k].add_batch(items)
    for handle in handles:
        handle.close()
    ids = np.arange(writers * rows * max_length, dtype=np.int64)
    priorities = np.random.default_rng(1).uniform(0.1, 10.0, ids.size)
    shared.update_priorities(ids, priorities)
    per.update(ids, priorities)
    return shared, per


def _time(step, steps: int) -> float:
    start = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1 << 18, help="rows over all writers")
    parser.add_argument("--writers", default="1,2,4")
    parser.add_argument("--rows", default="1,256", help="rows per add (each writer's streams)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(2)
    print("writers rows  one-tree us  per-segment us  ratio")
    for rows in map(int, args.rows.split(",")):
        for writers in map(int, args.writers.split(",")):
            shared, per = _fill(writers, rows, args.capacity // (writers * rows))

            def one_tree(shared=shared):
                _, info = shared.get_next(SAMPLE)
                shared.update_priorities(info.ids, rng.uniform(0.1, 10.0, SAMPLE))

            def per_segment(per=per):
                _, ids, _, _ = per.sample()
                per.update(ids, rng.uniform(0.1, 10.0, SAMPLE))

            figures = {"one": [], "per": []}
            for _ in range(args.reps):
                figures["one"].append(_time(one_tree, args.steps))
                figures["per"].append(_time(per_segment, args.steps))
            one, seg = statistics.median(figures["one"]), statistics.median(figures["per"])
            print(f"{writers:7d} {rows:4d} {one:12.1f} {seg:15.1f} {seg / one:6.2f}")
            shared.close()


if __name__ == "__main__":
    main()
