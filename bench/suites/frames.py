"""Frame stacks (W2's transitions): FrameStackReplayBuffer beside the plain buffer storing both stacks.

Transitions of observation and next_observation uint8 [84, 84, 4] (stack on the last axis),
action int64, reward float32, done bool; capacity 100k (one stream), 50k stored as episodes
of 50 to 500 steps built like FrameStackObservation (the first frame repeated before an
episode's first step). Frames come from a pool of 4096 random 84x84 frames made before the
first RSS reading, so only the buffers' own memory is counted. Both buffers live in one
process and take turns: each transition is added to both (RSS growth during the adds per
stored transition, and the add's rate), then their samples are timed by the harness,
interleaved (MB/s of returned bytes, every leaf). The reference, ``plain``, is
UniformReplayBuffer. Gymnasium's [4, 84, 84] layout and the NumPy path (no numba):

    PYTHONPATH=src python bench/suites/frames.py --layout chw [--numpy]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from harness import Workload  # noqa: E402
from replaybuf import ArraySpec, FrameStackReplayBuffer, UniformReplayBuffer  # noqa: E402
from suites import Job  # noqa: E402

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


def fill(buffers: dict, items) -> dict:
    """Add each of ``items`` to every buffer, interleaved; {name: (RSS KB per transition, add us)}."""
    elapsed = dict.fromkeys(buffers, 0.0)
    grown = dict.fromkeys(buffers, 0)
    stored = 0
    for item in items:
        for name, buffer in buffers.items():
            start_rss = rss()
            start = time.perf_counter()
            buffer.add_batch(item)
            elapsed[name] += time.perf_counter() - start
            grown[name] += rss() - start_rss
        stored += 1
    return {name: (grown[name] / stored / 1000, elapsed[name] / stored * 1e6) for name in buffers}


ITEM_BYTES = 2 * 84 * 84 * K + 8 + 4 + 1
WORKLOADS = [
    Workload("frames_rss", "RSS per stored transition", "bytes", references=("plain",), higher_is_better=False),
    Workload("frames_add", "add_batch of one transition", "items/s", references=("plain",)),
    *(
        Workload(
            f"frames_sample{size}",
            f"get_next({size})",
            "MB/s",
            size * ITEM_BYTES / 1e6,
            references=("plain",),
            goal_vs="plain",
            goal_ratio=0.9,
        )
        for size in (32, 256)
    ),
]
JOBS = [Job("replaybuf", None, ("replaybuf", "plain"))]
#: per size: (capacity, stored)
SIZES = {"full": (100_000, 50_000), "quick": (20_000, 10_000), "tiny": (512, 300)}


def run(size: str, layout: str = "hwc", numpy_path: bool = False, keys: list[str] | None = None) -> None:
    """Fill both buffers, then emit every workload's figures (``keys`` only, when given)."""
    capacity, stored = SIZES[size]
    axis = AXIS[layout]
    buffers = {
        "replaybuf": FrameStackReplayBuffer(spec(axis), 1, capacity, seed=0, stack_axis=axis),
        "plain": UniformReplayBuffer(spec(axis), 1, capacity, seed=0),
    }
    if numpy_path:
        buffers["replaybuf"]._storage.kernels = None
    note = f"layout {layout}, numba kernels: {buffers['replaybuf']._storage.kernels is not None}"
    filled = fill(buffers, transitions(stored, axis))
    figures([w for w in WORKLOADS if not keys or w.key in keys], buffers, filled, size, {"replaybuf": note})


def figures(workloads: list, buffers: dict, filled: dict, size: str, notes: dict, rss=None) -> None:
    """Emit the figures of frame-buffer workloads: ``*_rss`` (``rss(name)`` bytes per transition
    when given, else what ``fill`` saw), ``*_add`` (``fill``'s rate) and samples (``get_next``
    of the batch the workload's ``per_call`` moves, timed by the harness, interleaved)."""
    for workload in workloads:
        if workload.key.endswith("_rss"):
            for name in buffers:
                value = rss(name) if rss else filled[name][0] * 1000
                harness.figure(workload, name, value, notes.get(name, ""))
        elif workload.key.endswith("_add"):
            for name in buffers:
                harness.figure(workload, name, 1e6 / filled[name][1], notes.get(name, ""))
        else:
            batch = round(workload.per_call * 1e6 / ITEM_BYTES)
            runs = {name: harness.repeat(buffer.get_next, batch) for name, buffer in buffers.items()}
            harness.measure(workload, runs, harness.TIMINGS[size], notes)


def emit_version() -> None:
    """Emit the versions the frame suites run on."""
    import replaybuf

    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}, numpy {np.__version__}")


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Both buffers at ``size``, W2's layout."""
    emit_version()
    run(size, keys=keys)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--layout", choices=sorted(AXIS), default="hwc")
    parser.add_argument("--numpy", action="store_true", help="the NumPy path (as without numba installed)")
    args = parser.parse_args(argv)
    run(args.size, args.layout, args.numpy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
