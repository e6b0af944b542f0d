"""A/B of the hot NumPy-buffer calls between source trees, robust to a shared machine's noise.

    python bench/ab.py --src /tmp/old/src src          # e.g. a git worktree of the old commit
    python bench/ab.py --src src --rounds 5

Each round runs every tree in its own subprocess, alternating, and each subprocess times
every row with ``timeit.repeat``, keeping the *minimum* over its repeats (the run least
disturbed by other processes: a change in the minimum is a change in the code). Printed:
microseconds per call per tree, the median over rounds, and each tree's ratio to the first.
Rows: a single add (batch 1), an add of 256, a sample of 256, a PER sample of 256 plus its
priority update (NumPy kernels), 256 episode-aware windows of 8.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import json, sys, timeit
import numpy as np
import replaybuf

spec = {"obs": replaybuf.ArraySpec((4,), np.float32), "action": replaybuf.ArraySpec((), np.int64),
        "reward": replaybuf.ArraySpec((), np.float32), "done": replaybuf.ArraySpec((), np.bool_)}

def batch(n, done=False):
    return {"obs": np.ones((n, 4), np.float32), "action": np.zeros(n, np.int64),
            "reward": np.zeros(n, np.float32), "done": np.full(n, done)}

full, one = batch(256), batch(1)
single = replaybuf.UniformReplayBuffer(spec, 1, 2000, seed=0)
segmented = replaybuf.UniformReplayBuffer(spec, 256, 40, seed=0)
per = replaybuf.PrioritizedReplayBuffer(spec, 256, 40, seed=0, compiled=False)
windows = replaybuf.UniformReplayBuffer(spec, 256, 40, seed=0, respect_episodes=True, episode_end_field="done")
for t in range(40):
    segmented.add_batch(full)
    per.add_batch(full)
    windows.add_batch(batch(256, done=t % 9 == 8))
priorities = np.random.default_rng(0).random(256) + 0.1

def per_round():
    _, info = per.get_next(256)
    per.update_priorities(info.ids, priorities)

rows = {
    "add1": lambda: single.add_batch(one),
    "add256": lambda: segmented.add_batch(full),
    "sample256": lambda: segmented.get_next(256),
    "per256": per_round,
    "windows8": lambda: windows.get_next(256, 8),
}
number = int(sys.argv[1])
best = {name: min(timeit.repeat(call, number=number, repeat=30)) / number * 1e6 for name, call in rows.items()}
print(json.dumps(best))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", nargs="+", default=[str(Path(__file__).resolve().parents[1] / "src")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--number", type=int, default=100, help="calls per timed repeat")
    args = parser.parse_args()
    trees = [str(Path(s).resolve()) for s in args.src]
    runs: dict[str, list[dict]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=tree)
            command = [sys.executable, "-c", WORKER, str(args.number)]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{tree}: the worker failed\n{done.stderr}")
            runs[tree].append(json.loads(done.stdout))
    rows = list(runs[trees[0]][0])
    medians = {tree: {row: statistics.median(run[row] for run in runs[tree]) for row in rows} for tree in trees}
    print("| row | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for row in rows:
        first = medians[trees[0]][row]
        cells = [f"{medians[t][row]:.2f} us ({medians[t][row] / first:.2f}x)" for t in trees]
        print(f"| {row} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
