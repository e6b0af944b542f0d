"""Frame-stack micro-benchmark (workload W2): FrameStackReplayBuffer beside a plain buffer.

W2: transitions of observation and next_observation uint8 [84, 84, 4] (stack on the last
axis), action int64, reward float32, done bool; capacity 100k (one stream), 50k stored as
episodes of 50 to 500 steps built like FrameStackObservation (the first frame repeated
before an episode's first step). Frames come from a pool of 4096 random 84x84 frames made
before the first RSS reading, so only the buffers' own memory is counted.

Rows:
  RSS/transition  (RSS after the adds - RSS before) / stored transitions, in KB (1000 B)
  add             microseconds per add_batch of one transition
  sample B        MB/s of returned bytes (every leaf) of get_next(B), best of --reps rounds
The plain buffer is UniformReplayBuffer storing both full stacks; both run in one process,
the frame buffer first. Run:
    .venv/bin/python bench/frames_micro.py [--layout hwc|chw] [--stored 50000] [--capacity 100000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from replaybuf import ArraySpec, UniformReplayBuffer
from replaybuf.frames import FrameStackReplayBuffer

K, FRAME = 4, (84, 84)
AXIS = {"hwc": -1, "chw": 0}  # --layout: [84, 84, 4] (W2) or Gymnasium's [4, 84, 84]


def spec(axis: int) -> dict:
    shape = (*FRAME, K) if axis == -1 else (K, *FRAME)
    return {
        "observation": ArraySpec(shape, np.uint8),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "next_observation": ArraySpec(shape, np.uint8),
        "done": ArraySpec((), np.bool_),
    }


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def transitions(count: int, axis: int, seed: int = 0):
    """``count`` W2 transitions, each a batch of one."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (4096, *FRAME), dtype=np.uint8)
    index, left, frames = 0, 0, []
    for _ in range(count):
        if left == 0:  # a new episode: FrameStackObservation's "reset" padding
            left = int(rng.integers(50, 501))
            frames = [pool[index % 4096]] * K
            index += 1
        following = frames[1:] + [pool[index % 4096]]
        index += 1
        left -= 1
        yield {
            "observation": np.stack(frames, axis=axis)[None],
            "action": np.zeros(1, np.int64),
            "reward": np.ones(1, np.float32),
            "next_observation": np.stack(following, axis=axis)[None],
            "done": np.asarray([left == 0]),
        }
        frames = following


def fill(buffer, stored: int, axis: int) -> tuple[float, float]:
    """(RSS KB per transition, add microseconds)."""
    items = transitions(stored, axis)
    before, elapsed = rss(), 0.0
    for item in items:
        start = time.perf_counter()
        buffer.add_batch(item)
        elapsed += time.perf_counter() - start
    return (rss() - before) / stored / 1000, elapsed / stored * 1e6


def sample_rate(buffer, size: int, reps: int) -> float:
    """Best MB/s of returned bytes over ``reps`` rounds of about 60 MB each."""
    items, _ = buffer.get_next(size)
    nbytes = sum(leaf.nbytes for leaf in items.values())
    calls = max(4, int(60e6 // nbytes))
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            buffer.get_next(size)
        best = max(best, calls * nbytes / (time.perf_counter() - start) / 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored", type=int, default=50_000)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--layout", choices=sorted(AXIS), default="hwc")
    args = parser.parse_args()
    axis = AXIS[args.layout]
    buffers = {
        "frames": FrameStackReplayBuffer(spec(axis), 1, args.capacity, seed=0, stack_axis=axis),
        "plain": UniformReplayBuffer(spec(axis), 1, args.capacity, seed=0),
    }
    rows = {}
    for name, buffer in buffers.items():
        rows[name] = fill(buffer, args.stored, axis)
    for name, buffer in buffers.items():
        rows[name] += tuple(sample_rate(buffer, size, args.reps) for size in (32, 256))
    print(f"W2 ({args.layout}): 4 stacked 84x84 uint8 frames, obs + next_obs, capacity {args.capacity}, {args.stored} stored")
    print(f"{'buffer':8} {'RSS KB/transition':>18} {'add us':>8} {'sample 32 MB/s':>15} {'sample 256 MB/s':>16}")
    for name, (kb, add, s32, s256) in rows.items():
        print(f"{name:8} {kb:18.2f} {add:8.1f} {s32:15.0f} {s256:16.0f}")
    f, p = rows["frames"], rows["plain"]
    print(f"ratio frames/plain: sample 32 {f[2] / p[2]:.0%}, sample 256 {f[3] / p[3]:.0%}")


if __name__ == "__main__":
    main()
