"""The distributed Ape-X example (examples/apex_cartpole.py) runs end to end, briefly: collector
actors add through their shards' writers, the learner samples and updates priorities."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")
import replaybuf.ray  # noqa: E402,F401  (an import error of ours fails, not skips)

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "apex_cartpole.py")


@pytest.mark.timeout(400)
def test_apex_example_runs_briefly():
    if ray.is_initialized():  # the example starts its own Ray; leave no other session beside it
        ray.shutdown()
    out = subprocess.run(
        [
            sys.executable,
            EXAMPLE,
            "--total-steps",
            "1024",
            "--learning-starts",
            "256",
            "--eval-every",
            "512",
            "--steps-per-round",
            "128",
            "--gradient-steps",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    progress = re.findall(r"step (\d+): loss (\S+), .* stored (\d+)", out.stdout)
    assert [int(step) for step, _, _ in progress] == [512, 1024], out.stdout
    assert all(math.isfinite(float(loss)) for _, loss, _ in progress), out.stdout
    assert int(progress[-1][2]) >= 1024  # every collected step reached the shards
    # the learner sent priorities (8 gradient steps a round from step 256) and the shards
    # applied them: new items come at the largest, so only applied updates make them unequal
    updates, spread = re.search(
        r"priority updates sent (\d+); a batch's probabilities max/min ([\d.]+)", out.stdout
    ).groups()
    assert int(updates) > 0 and int(updates) % 8 == 0, out.stdout
    assert float(spread) > 2, out.stdout
    assert re.search(r"mean greedy return over 20 fresh episodes: [\d.]+", out.stdout), out.stdout
