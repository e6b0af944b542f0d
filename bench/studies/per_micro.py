"""Study: What bounds W3's prioritized round, against Tianshou's buffer and bare segment tree in CPU time?
Answer: docs/prioritized.md and docs/benchmarks.md, "What bounds the rows that fall short" (W3).

Prioritized sampling and episode-aware windows, against references, in one run.

PER: sample 256 + update of those 256 priorities at capacity 1M with 200k stored, as
(a) replaybuf's PrioritizedReplayBuffer (get_next with the items, weights, update_priorities),
(b) replaybuf's trees alone (SumTree/MinTree find + update), (c) a plain-NumPy binary sum
tree written here (the algorithm Tianshou's SegmentTree uses) and (d) Tianshou's
PrioritizedReplayBuffer (the W3 row's loop) and its bare SegmentTree, run in
bench/.venvs/tianshou when it exists (a persistent subprocess timed one round at a time, so
its rounds interleave with ours under the same machine load; filling it takes ~30 s).
Episodes: 256 windows of 8 inside episodes (lengths 20-400) from UniformReplayBuffer with
respect_episodes=True (excluded and padded) and from PrioritizedReplayBuffer (excluded),
beside plain windows that ignore episodes.

Timed by the harness (bench/harness.py): repetitions interleaved between contenders, the
median reported, in iterations per second of CPU time (this process's, plus Tianshou's
process's while it runs a repetition), so that time the scheduler gives to other jobs on a
shared machine does not count; cache contention still does.
    .venv/bin/python bench/studies/per_micro.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
from replaybuf import ArraySpec, PrioritizedReplayBuffer, UniformReplayBuffer  # noqa: E402
from replaybuf.samplers.sumtree import MinTree, SumTree  # noqa: E402

B, WINDOW, STREAMS = 256, 8, 8
SPEC = {
    "observation": ArraySpec((4,), np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
}


class BinarySumTree:
    """Reference: a binary sum tree in plain NumPy, descended one level per NumPy call."""

    def __init__(self, capacity: int):
        self.size = 1 << (capacity - 1).bit_length()
        self.tree = np.zeros(2 * self.size)

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        node = index + self.size
        self.tree[node] = value
        while node[0] > 1:
            node = node // 2
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def find(self, target: np.ndarray) -> np.ndarray:
        node = np.ones(target.shape[0], np.int64)
        while node[0] < self.size:
            node = node * 2
            left = self.tree[node]
            right = target >= left
            target = target - left * right
            node = node + right
        return node - self.size


def fill(buffer, stored: int, rng: np.random.Generator) -> None:
    lengths = rng.integers(20, 400, size=(stored, STREAMS))
    left = lengths[0].copy()
    for t in range(stored // STREAMS):
        left -= 1
        done = left == 0
        left[done] = lengths[t, done]
        buffer.add_batch(
            {
                "observation": rng.random((STREAMS, 4), np.float32),
                "action": np.full(STREAMS, t),
                "reward": np.ones(STREAMS, np.float32),
                "done": done,
            }
        )


def per_contenders(capacity: int, stored: int) -> dict:
    """{label: run(n)}: PER rounds of the buffer, of its trees alone, and of the NumPy reference tree."""
    rng = np.random.default_rng(0)
    buffer = PrioritizedReplayBuffer(SPEC, STREAMS, capacity // STREAMS, seed=0)
    fill(buffer, stored, rng)

    def replaybuf_buffer() -> None:
        _, info = buffer.get_next(B)
        buffer.update_priorities(info.ids, rng.random(B) + 0.01)

    sums, mins = SumTree(capacity), MinTree(capacity)
    mass = rng.random(stored) + 0.01
    sums.update(np.arange(stored), mass)
    mins.update(np.arange(stored), mass)

    slots, values = np.empty(B, np.int64), np.empty(B)

    def replaybuf_trees() -> None:
        total = sums.root()
        targets = (np.arange(B) + rng.random(B)) * (total / B)
        sums.kernels.find(sums.tree, sums.offsets, sums.arity, targets, slots, values)
        _ = (values / mins.root()) ** -0.4
        new = (rng.random(B) + 0.01) ** 0.6
        sums.update(slots, new)
        mins.update(slots, new)

    reference = BinarySumTree(capacity)
    reference.update(np.arange(stored), mass)
    min_priority = [float(mass.min())]

    def numpy_binary_tree() -> None:
        slots = reference.find(rng.random(B) * reference.tree[1])
        _ = (reference.tree[slots + reference.size] / min_priority[0]) ** -0.4
        new = (rng.random(B) + 0.01) ** 0.6
        reference.update(slots, new)
        min_priority[0] = min(min_priority[0], float(new.min()))

    return {
        "replaybuf PrioritizedReplayBuffer get_next+update": harness.repeat(replaybuf_buffer),
        "replaybuf SumTree+MinTree find+update": harness.repeat(replaybuf_trees),
        "NumPy binary sum tree (reference)": harness.repeat(numpy_binary_tree),
    }


def episode_contenders(capacity: int, stored: int) -> dict:
    """{label: run(n)}: windows inside episodes (excluded, padded, PER) and windows ignoring them."""
    contenders = {}
    for name, kwargs in (
        ("replaybuf windows inside episodes (excluded)", {"respect_episodes": True}),
        ("replaybuf windows inside episodes (padded, mask)", {"respect_episodes": True, "pad_episode_ends": True}),
        ("replaybuf windows ignoring episodes", {}),
    ):
        buffer = UniformReplayBuffer(
            SPEC, STREAMS, capacity // STREAMS, seed=0, episode_end_field="done" if kwargs else None, **kwargs
        )
        fill(buffer, stored, np.random.default_rng(0))
        contenders[name] = harness.repeat(buffer.get_next, B, WINDOW)
    per = PrioritizedReplayBuffer(
        SPEC, STREAMS, capacity // STREAMS, seed=0, respect_episodes=True, episode_end_field="done"
    )
    fill(per, stored, np.random.default_rng(0))
    rng = np.random.default_rng(1)

    def per_windows() -> None:
        _, info = per.get_next(B, WINDOW)
        per.update_priorities(info.ids, rng.random(B) + 0.01)

    contenders["replaybuf PER windows inside episodes (excluded) get_next+update"] = harness.repeat(per_windows)
    return contenders


TIANSHOU = """
import time, numpy as np, json, sys
import torch
from tianshou.data import Batch, PrioritizedReplayBuffer
from tianshou.data.utils.segtree import SegmentTree
torch.set_num_threads(1)
capacity, stored = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
tree = SegmentTree(capacity)
tree[np.arange(stored)] = rng.random(stored) + 0.01
min_priority = 0.01
def tree_step():
    global min_priority
    idx = tree.get_prefix_sum_idx(rng.random(256) * tree.reduce())
    _ = (tree[idx] / min_priority) ** -0.4
    new = (rng.random(256) + 0.01) ** 0.6
    tree[idx] = new
    min_priority = min(min_priority, float(new.min()))
# the same buffer and loop as bench/libs/tianshou_lib.py's w3_per row
buffer = PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4)
obs = rng.standard_normal((4097, 4), dtype=np.float32)
for i in range(stored):
    j = i % 4096
    buffer.add(Batch(obs=obs[j], act=j % 2, rew=1.0, terminated=False, truncated=False, obs_next=obs[j + 1]))
def buffer_step():
    _, index = buffer.sample(256)
    buffer.update_weight(index, rng.random(256) + 0.01)
sys.path.insert(0, sys.argv[3])  # bench/: the harness is NumPy and the standard library only
import harness
runs = {"tree": harness.repeat(tree_step), "buffer": harness.repeat(buffer_step)}
print("ready", flush=True)
for line in sys.stdin:  # one run(n) per request, so its repetitions interleave with the caller's
    name, n = line.split()
    start = time.process_time()
    runs[name](int(n))
    print(json.dumps(time.process_time() - start), flush=True)
"""


class Tianshou:
    """Tianshou in its own venv, serving ``run(n)`` on request: its bare SegmentTree loop
    ("tree") and its PrioritizedReplayBuffer sample + update_weight ("buffer"). ``clock`` is
    this process's CPU time plus the CPU time Tianshou's process spent in those runs."""

    def __init__(self, capacity: int, stored: int):
        python = BENCH / ".venvs" / "tianshou" / "bin" / "python"
        self.process, self.cpu = None, 0.0
        if python.exists():
            self.process = subprocess.Popen(
                [str(python), "-c", TIANSHOU, str(capacity), str(stored), str(Path(harness.__file__).parent)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            if self.process.stdout.readline().strip() != "ready":
                print("tianshou failed to start", file=sys.stderr)
                self.process = None

    def runs(self) -> dict:
        """{label: run(n)} of its two loops (none when it did not start)."""
        if self.process is None:
            return {}

        def serve(name: str):
            def run(n: int) -> None:
                self.process.stdin.write(f"{name} {n}\n")
                self.process.stdin.flush()
                self.cpu += json.loads(self.process.stdout.readline())

            return run

        return {
            "Tianshou PrioritizedReplayBuffer sample+update_weight (W3's loop)": serve("buffer"),
            "Tianshou SegmentTree alone (numba; no Batch, no items)": serve("tree"),
        }

    def clock(self) -> float:
        return time.process_time() + self.cpu

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and short repetitions (smoke test)")
    args = parser.parse_args()
    capacity, stored = (1_000_000, 200_000) if not args.quick else (20_000, 8_000)
    timing = harness.Timing(5, 1.0, 0.1) if not args.quick else harness.Timing(2, 0.1, 0.0)
    tianshou = Tianshou(capacity, stored)
    try:
        results, _ = harness.interleave(
            {**per_contenders(capacity, stored), **tianshou.runs()}, timing, clock=tianshou.clock
        )
    finally:
        tianshou.close()
    episodes, _ = harness.interleave(episode_contenders(capacity, stored), timing, clock=time.process_time)
    results.update(episodes)
    print(f"capacity {capacity}, stored {stored}, batch {B}, windows of {WINDOW}; median of {timing.reps} repetitions")
    for name, seconds in results.items():
        if isinstance(seconds, Exception):
            print(f"{'failed':>10}        {name}: {seconds}")
            continue
        listed = ", ".join(f"{1 / s:.0f}" for s in seconds)
        print(f"{1 / statistics.median(seconds):10.0f} it/s  {name}  (repetitions: {listed})")
    ours = results["replaybuf PrioritizedReplayBuffer get_next+update"]
    for name in [n for n in results if n.startswith("Tianshou") and isinstance(results[n], list)]:
        ratios = [theirs / mine for mine, theirs in zip(ours, results[name], strict=True)]
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"replaybuf / {name}: median {statistics.median(ratios):.2f}x (repetitions: {listed})")


if __name__ == "__main__":
    main()
