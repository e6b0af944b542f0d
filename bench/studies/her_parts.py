"""Study: where does a relabelled sample's time go when it runs among the her suite's other
contenders? Answer: bench/analysis/86-her.md.

The her suite's data (BitFlipping, 15 bits, 50k transitions in buffers of 1M), one
``get_next(256)`` per call on ``UniformReplayBuffer(respect_episodes=True)``, interleaved by
the harness with SB3's ``HerReplayBuffer.sample(256)`` between them as in the suite (its
buffers of 1M and its scan of ``ep_length`` leave the caches as the suite does; ``--alone``
drops it), timed by the thread's CPU clock:

- ``floor``: no ``her=`` (the episode-aware draw, the record read, the nest);
- ``ratio 0``: ``her=`` with ``ratio=0`` (the relabelling's draws and calls, nothing relabelled);
- ``constant reward``: ``ratio=0.8``, ``compute_reward`` returning zeros (the goals drawn, read
  and written, the rewards written);
- ``relabelled``: the suite's ``replaybuf`` row (``compute_reward`` is BitFlipping's rule,
  ``sparse_reward``, which cpprb calls when an episode ends and we call per sample).

    PYTHONPATH=src python bench/studies/her_parts.py [--reps 15] [--alone]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
import replaybuf  # noqa: E402
from suites import her  # noqa: E402

CAPACITY, STORED = her.SIZES["full"][:2]


def constant_reward(achieved: np.ndarray, desired: np.ndarray, info: object) -> np.ndarray:
    return np.zeros(achieved.shape[0], np.float32)


def relabelling(data: dict[str, np.ndarray], ratio: float | None, reward=her.sparse_reward):
    """``get_next(256)`` of a buffer holding ``data``, with ``her=`` at ``ratio`` (None: without)."""
    spec, relabel = her.native_parts(reward)
    if ratio is not None:
        relabel = replaybuf.HindsightRelabel(
            goal_field=relabel.goal_fields, achieved_field=relabel.achieved_field, compute_reward=reward, ratio=ratio
        )
    buffer = replaybuf.UniformReplayBuffer(
        spec,
        1,
        CAPACITY,
        seed=0,
        respect_episodes=True,
        episode_end_field="done",
        her=None if ratio is None else relabel,
    )
    her.fill_native(buffer, data)
    return lambda: buffer.get_next(her.B)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--alone", action="store_true", help="without SB3's buffer between the calls")
    args = parser.parse_args(argv)
    data = her.episodes(STORED)
    calls = {
        "floor": relabelling(data, None),
        "ratio 0": relabelling(data, 0.0),
        "constant reward": relabelling(data, 0.8, constant_reward),
        "relabelled": relabelling(data, 0.8),
    }
    if not args.alone:
        calls["SB3 HerReplayBuffer"] = her.sb3_contenders(CAPACITY, data)[her.SB3]
    runs = {name: harness.repeat(call) for name, call in calls.items()}
    seconds = harness.medians(runs, harness.Timing(args.reps, 0.1, 0.2), clock=time.thread_time)
    print(f"replaybuf {replaybuf.__version__}, numpy {np.__version__}, load {harness.load()[0]:.1f}")
    print("| call | us (thread CPU time) | above the row before |\n| --- | ---: | ---: |")
    before = None
    for name, value in seconds.items():
        step = "" if before is None or name.startswith("SB3") else f"{(value - before) * 1e6:+.1f}"
        print(f"| {name} | {value * 1e6:.1f} | {step} |")
        before = value
    return 0


if __name__ == "__main__":
    sys.exit(main())
