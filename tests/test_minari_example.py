"""examples/offline_dqn_cartpole.py runs end to end (tiny budgets): record, load, train offline."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("minari")
pytest.importorskip("torch")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "offline_dqn_cartpole.py"


def test_offline_example_loads_the_recorded_dataset_and_trains(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src")}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    episodes, steps = map(int, re.search(r"dataset: (\d+) episodes, (\d+) steps", out.stdout).groups())
    assert episodes == 2
    assert f"buffer: {steps + episodes} items (PyUniformReplayBuffer), one per step and per episode end" in out.stdout
    assert re.search(r"offline agent \(100 gradient steps, last loss [\d.]+\), greedy return: [\d.]+", out.stdout)
    assert (tmp_path / "replaybuf" / "cartpole-dqn-v0" / "data" / "metadata.json").exists()
