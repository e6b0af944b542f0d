"""Frame-stack micro-benchmark (workload W2): FrameStackReplayBuffer beside a plain buffer.

W2: transitions of observation and next_observation uint8 [84, 84, 4] (stack on the last
axis), action int64, reward float32, done bool; capacity 100k (one stream), 50k stored as
episodes of 50 to 500 steps built like FrameStackObservation (the first frame repeated
before an episode's first step). Frames come from a pool of 4096 random 84x84 frames made
before the first RSS reading, so only the buffers' own memory is counted.

Rows:
  RSS/transition  RSS growth during the buffer's adds / stored transitions, in KB (1000 B)
  add             microseconds per add_batch of one transition
  sample B        MB/s of returned bytes (every leaf) of get_next(B), best of --reps rounds
The plain buffer is UniformReplayBuffer storing both full stacks. Both buffers live in one
process and take turns (each transition is added to both; sampling rounds alternate), and
the last line gives the frame buffer's ratios to the plain one. Layouts run one after the
other (the default, both: [4, 84, 84] then [84, 84, 4]). Run:
    .venv/bin/python bench/frames_micro.py [--layout hwc|chw|both] [--stored 50000] [--capacity 100000]
        [--reps 7] [--numpy]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from replaybuf import ArraySpec, FrameStackReplayBuffer, UniformReplayBuffer

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


def fill(buffers: dict, stored: int, axis: int) -> dict:
    """Add the same transitions to every buffer, interleaved; {name: (RSS KB per transition, add us)}."""
    elapsed = dict.fromkeys(buffers, 0.0)
    grown = dict.fromkeys(buffers, 0)
    for item in transitions(stored, axis):
        for name, buffer in buffers.items():
            start_rss = rss()
            start = time.perf_counter()
            buffer.add_batch(item)
            elapsed[name] += time.perf_counter() - start
            grown[name] += rss() - start_rss
    return {name: (grown[name] / stored / 1000, elapsed[name] / stored * 1e6) for name in buffers}


def sample_rates(buffers: dict, size: int, reps: int) -> dict:
    """{name: best MB/s of returned bytes}: rounds of about 120 MB per buffer, the buffers
    taking turns within each of ``reps`` repetitions (so load changes hit both alike)."""
    best = dict.fromkeys(buffers, 0.0)
    nbytes = {}
    for name, buffer in buffers.items():
        items, _ = buffer.get_next(size)
        nbytes[name] = sum(leaf.nbytes for leaf in items.values())
    calls = max(8, int(120e6 // max(nbytes.values())))
    for _ in range(reps):
        for name, buffer in buffers.items():
            start = time.perf_counter()
            for _ in range(calls):
                buffer.get_next(size)
            best[name] = max(best[name], calls * nbytes[name] / (time.perf_counter() - start) / 1e6)
    return best


def run_layout(layout: str, args: argparse.Namespace) -> None:
    axis = AXIS[layout]
    buffers = {
        "frames": FrameStackReplayBuffer(spec(axis), 1, args.capacity, seed=0, stack_axis=axis),
        "plain": UniformReplayBuffer(spec(axis), 1, args.capacity, seed=0),
    }
    if args.numpy:
        buffers["frames"]._storage.kernels = None
    filled = fill(buffers, args.stored, axis)
    rates = {size: sample_rates(buffers, size, args.reps) for size in (32, 256)}
    compiled = buffers["frames"]._storage.kernels is not None
    print(
        f"\nW2 {layout} {list(buffers['plain'].data_spec['observation'].shape)}: obs + next_obs, "
        f"capacity {args.capacity}, {args.stored} stored, numba kernels: {compiled}"
    )
    print(f"{'buffer':8} {'RSS KB/transition':>18} {'add us':>8} {'sample 32 MB/s':>15} {'sample 256 MB/s':>16}")
    for name in buffers:
        kb, add = filled[name]
        print(f"{name:8} {kb:18.2f} {add:8.1f} {rates[32][name]:15.0f} {rates[256][name]:16.0f}")
    f, p = filled["frames"], filled["plain"]
    print(
        f"frames/plain: sample 32 {rates[32]['frames'] / rates[32]['plain']:.0%}, "
        f"sample 256 {rates[256]['frames'] / rates[256]['plain']:.0%}, add time {f[1] / p[1]:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored", type=int, default=50_000)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--layout", choices=[*sorted(AXIS), "both"], default="both")
    parser.add_argument("--numpy", action="store_true", help="the NumPy path (as without numba installed)")
    args = parser.parse_args()
    for layout in sorted(AXIS) if args.layout == "both" else [args.layout]:
        run_layout(layout, args)


if __name__ == "__main__":
    main()
