"""SIGKILL in the middle of save and of memmap adds: what reloads is whole, never a mix.

The killing happens in tests/crash_worker.py, a fresh interpreter that forks one child per
kill (replaybuf is imported once, so dozens of kills fit in a few seconds). Each kill is
followed by a load that must return exactly one complete generation: the one before the
interrupted save or the one it was writing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills forked children (POSIX only)")

WORKER = os.path.join(os.path.dirname(__file__), "crash_worker.py")


def run_worker(mode, folder, seed, count, kind="uniform"):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, WORKER, mode, str(folder), str(seed), str(count), kind],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_kill_at_every_step_of_save_and_at_random_times(tmp_path):
    summary = run_worker("save", tmp_path / "ckpt", seed=0, count=8)
    # one kill before each fsync, rename, mkdir and rmtree of a save, then random kills
    assert summary["kill_points"] >= 8
    loaded = summary["loaded"]
    assert loaded == sorted(loaded)  # generations only move forward
    assert loaded[-1] > 1  # saves did complete between kills
    assert summary["mid_save_leftovers"] > 0  # some kills did land inside a save


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "episodes"])
def test_memmap_writer_killed_recovers_completed_adds(tmp_path, kind):
    # prioritized / episodes: the reopened buffer rebuilds its sum trees / episode index
    summary = run_worker("memmap", tmp_path / "rb", seed=1, count=8, kind=kind)
    assert len(summary["recovered"]) == 8
    ends = [end for _, end in summary["recovered"]]
    assert ends == sorted(ends) and ends[-1] > 64  # wrapped around at least once
