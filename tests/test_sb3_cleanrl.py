"""CleanRL 1.2.0's scripts, with the one-line switch to replaybuf.sb3, under gymnasium 0.29.1.

CleanRL pins gymnasium 0.29.1, so ``make test`` runs this file in ``.venv-gym029`` (that
gymnasium, CleanRL's package, and everything else from ``.venv``); elsewhere it is skipped.
Each script is read from the installed cleanrl package, its import of SB3's ReplayBuffer is
replaced by ``from replaybuf.sb3 import ReplayBuffer`` (the switch a user makes), and it
runs a short training in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

if Path(sys.prefix).name != ".venv-gym029":  # there CleanRL must import: a missing one fails
    pytest.skip("CleanRL runs in .venv-gym029 (make test)", allow_module_level=True)
cleanrl = importlib.util.find_spec("cleanrl")
assert cleanrl is not None, "CleanRL is not installed in .venv-gym029: make test installs it"

SRC = Path(__file__).resolve().parents[1] / "src"
SWITCH = ("from stable_baselines3.common.buffers import ReplayBuffer", "from replaybuf.sb3 import ReplayBuffer")
SHORT = ["--total-timesteps", "400", "--learning-starts", "200", "--cuda", "False", "--seed", "1"]


def _switched(script: str, folder: Path) -> Path:
    text = (Path(cleanrl.submodule_search_locations[0]) / script).read_text()
    assert text.count(SWITCH[0]) == 1
    out = folder / script
    out.write_text(text.replace(SWITCH[0], SWITCH[1]))
    return out


def test_runs_under_gymnasium_0_29():
    import gymnasium

    assert gymnasium.__version__ == "0.29.1"


# ale-py's v4 Atari ids (BreakoutNoFrameskip-v4): ale-py 0.12 registers them when asked
# (gymnasium 0.29 has no register_envs and ale-py 0.12 no plugin entry point), so the script
# runs after that call; CleanRL's own extra would install ale-py 0.7.4 and download ROMs
ATARI = "import ale_py.registration, runpy, sys; ale_py.registration.register_v0_v4_envs(); "
ATARI += "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


# CleanRL 1.2.0's sac_continuous_action.py still imports the old ``gym`` package (docs/sb3.md)
@pytest.mark.parametrize(
    ("script", "extra", "prefix"),
    [
        ("dqn.py", ["--train-frequency", "2"], []),
        ("dqn_atari.py", ["--buffer-size", "1000", "--train-frequency", "4"], ["-c", ATARI]),
    ],
)
def test_cleanrl_script_trains_with_replaybuf(script, extra, prefix, tmp_path):
    path = _switched(script, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, *prefix, str(path), *SHORT, *extra],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SPS:" in result.stdout + result.stderr  # the training loop ran past learning_starts
    assert any((tmp_path / "runs").iterdir())  # its TensorBoard logs
