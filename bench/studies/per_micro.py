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

Rounds alternate between contenders; the median of the rounds is reported (iterations per
second of process CPU time, so that time the scheduler gives to other jobs on a shared
machine does not count; cache contention still does).
    .venv/bin/python bench/studies/per_micro.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from replaybuf import ArraySpec, PrioritizedReplayBuffer, UniformReplayBuffer
from replaybuf.samplers.sumtree import MinTree, SumTree

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


def timed(step, seconds: float) -> float:
    """Iterations per second of ``step`` run for about ``seconds``."""
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        for _ in range(20):
            step()
        count += 20
    return count / (time.process_time() - start)


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

    def replaybuf_trees() -> None:
        total = sums.total()
        slots, value = sums.find((np.arange(B) + rng.random(B)) * (total / B))
        _ = (value / mins.root()) ** -0.4
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
        "replaybuf PrioritizedReplayBuffer get_next+update": replaybuf_buffer,
        "replaybuf SumTree+MinTree find+update": replaybuf_trees,
        "NumPy binary sum tree (reference)": numpy_binary_tree,
    }


def episode_contenders(capacity: int, stored: int) -> dict:
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
        contenders[name] = lambda buffer=buffer: buffer.get_next(B, WINDOW)
    per = PrioritizedReplayBuffer(
        SPEC, STREAMS, capacity // STREAMS, seed=0, respect_episodes=True, episode_end_field="done"
    )
    fill(per, stored, np.random.default_rng(0))
    rng = np.random.default_rng(1)

    def per_windows() -> None:
        _, info = per.get_next(B, WINDOW)
        per.update_priorities(info.ids, rng.random(B) + 0.01)

    contenders["replaybuf PER windows inside episodes (excluded) get_next+update"] = per_windows
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
steps = {"tree": tree_step, "buffer": buffer_step}
tree_step(); buffer_step()
print("ready", flush=True)
for line in sys.stdin:  # one timed round per request, so rounds interleave with the caller's
    name, seconds = line.split()
    step, seconds = steps[name], float(seconds)
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        for _ in range(20): step()
        n += 20
    print(json.dumps(n / (time.process_time() - start)), flush=True)
"""


class TianshouRounds:
    """Tianshou in its own venv, timed one round at a time on request: its bare SegmentTree
    loop ("tree") and its PrioritizedReplayBuffer sample + update_weight ("buffer")."""

    def __init__(self, capacity: int, stored: int):
        python = Path(__file__).resolve().parents[1] / ".venvs" / "tianshou" / "bin" / "python"
        self.process = None
        if python.exists():
            self.process = subprocess.Popen(
                [str(python), "-c", TIANSHOU, str(capacity), str(stored)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            if self.process.stdout.readline().strip() != "ready":
                print("tianshou failed to start", file=sys.stderr)
                self.process = None

    def round(self, name: str, seconds: float) -> float | None:
        if self.process is None:
            return None
        self.process.stdin.write(f"{name} {seconds}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and short rounds (smoke test)")
    args = parser.parse_args()
    capacity, stored, seconds, rounds = (1_000_000, 200_000, 1.0, 5) if not args.quick else (20_000, 8_000, 0.1, 2)
    results: dict[str, list[float]] = {}
    tianshou = TianshouRounds(capacity, stored)
    per_steps = per_contenders(capacity, stored)
    for _ in range(rounds):
        for name, step in per_steps.items():
            results.setdefault(name, []).append(timed(step, seconds))
        for name, label in (
            ("buffer", "Tianshou PrioritizedReplayBuffer sample+update_weight (W3's loop)"),
            ("tree", "Tianshou SegmentTree alone (numba; no Batch, no items)"),
        ):
            rate = tianshou.round(name, seconds)
            if rate is not None:
                results.setdefault(label, []).append(rate)
    tianshou.close()
    episode_steps = episode_contenders(capacity, stored)
    for _ in range(rounds):
        for name, step in episode_steps.items():
            results.setdefault(name, []).append(timed(step, seconds))
    print(f"capacity {capacity}, stored {stored}, batch {B}, windows of {WINDOW}; median of {rounds} rounds")
    for name, rates in results.items():
        print(f"{statistics.median(rates):10.0f} it/s  {name}  (rounds: {', '.join(f'{r:.0f}' for r in rates)})")
    ours = results["replaybuf PrioritizedReplayBuffer get_next+update"]
    for name in [n for n in results if n.startswith("Tianshou")]:
        ratios = [a / b for a, b in zip(ours, results[name], strict=True)]
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"replaybuf / {name}: median {statistics.median(ratios):.2f}x (rounds: {listed})")


if __name__ == "__main__":
    main()
