"""examples/r2d2_cartpole.py runs end to end, briefly (a fixed seed, a small budget): the
recurrent learner samples sequences, updates their priorities and learns."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "r2d2_cartpole.py"
SHORT = "--total-steps 10000 --learning-starts 1000 --eval-every 5000 --exploration-steps 3000 "
SHORT += "--batch-size 16 --seq-len 10 --burn-in 5 --learning-rate 3e-3 --target-every 100"
PROGRESS = re.compile(
    r"step (\d+): updates (\d+), loss ([-\d.naif]+), mean Q ([-\d.naif]+), training return [-\d.naif]+, "
    r"greedy return ([\d.]+), priorities ([\d.]+)\.\.([\d.]+)"
)


@pytest.mark.timeout(900)  # ~25 s on a quiet machine; generous for a loaded one
def test_r2d2_example_learns_briefly():
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src")}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), *SHORT.split()], capture_output=True, text=True, env=env, timeout=840
    )
    assert out.returncode == 0, out.stderr[-3000:]
    progress = [m.groups() for m in PROGRESS.finditer(out.stdout)]
    assert [int(p[0]) for p in progress] == [5000, 10000], out.stdout
    step, updates, loss, mean_q, greedy, low, high = progress[-1]
    assert int(updates) == (10000 - 1000) // 8 + 1  # one update per batched step of the 8 envs
    assert math.isfinite(float(loss)) and float(loss) >= 0
    # the priorities sent back are the sequences' |TD errors|, spread, not the initial 1.0
    assert float(high) > 1.0 and float(high) > 2 * float(low), out.stdout
    # the values learned: a fresh network's Q is about 0, CartPole's discounted returns are positive
    assert float(mean_q) > 2.0, out.stdout
    # the greedy policy beats a random one (mean return about 22; an untrained greedy one about 9.5)
    final = float(re.search(r"mean greedy return over 20 fresh episodes: ([\d.]+)", out.stdout).group(1))
    assert min(final, float(greedy)) > 25.0, out.stdout
