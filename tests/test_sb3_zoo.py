"""rl-zoo3 trains SB3's DQN with replaybuf.sb3's ReplayBuffer named in its hyperparameter
file, through its own training entry (``python -m rl_zoo3.train``). Runs in .venv-zoo
(Makefile: rl-zoo3 2.9.2's pins beside the main venv's); skipped in every other venv."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if Path(sys.prefix).name != ".venv-zoo":  # there rl_zoo3 must import: a missing one fails
    pytest.skip("rl-zoo3 runs in .venv-zoo (make test)", allow_module_level=True)
import rl_zoo3  # noqa: E402,F401
from stable_baselines3.common.save_util import load_from_pkl  # noqa: E402

import replaybuf.sb3  # noqa: E402

# rl-zoo3 evaluates a string replay_buffer_class in its own module, where replaybuf is not
# imported: the hyperparameter file names the class through an import expression
YAML = """\
CartPole-v1:
  n_timesteps: 300
  policy: MlpPolicy
  learning_starts: 100
  buffer_size: 1000
  train_freq: 4
  replay_buffer_class: __import__("replaybuf.sb3").sb3.ReplayBuffer
"""
PYTHON = """\
import replaybuf.sb3

hyperparams = {
    "CartPole-v1": dict(
        n_timesteps=300, policy="MlpPolicy", learning_starts=100, buffer_size=1000, train_freq=4,
        replay_buffer_class=replaybuf.sb3.ReplayBuffer,
    )
}
"""


@pytest.mark.parametrize(("name", "text"), [("dqn.yml", YAML), ("dqn.py", PYTHON)])
def test_rl_zoo3_trains_dqn_on_cartpole_with_our_buffer(tmp_path, name, text):
    conf = tmp_path / name
    conf.write_text(textwrap.dedent(text))
    src = str(Path(replaybuf.sb3.__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "rl_zoo3.train", "--algo", "dqn", "--env", "CartPole-v1"]
    command += ["--conf-file", str(conf), "-f", str(tmp_path / "logs"), "--seed", "0", "--eval-freq", "-1"]
    command += ["--save-replay-buffer", "--device", "cpu", "--verbose", "0"]
    subprocess.run(command, check=True, cwd=tmp_path, env=env, timeout=300, capture_output=True)
    (saved,) = (tmp_path / "logs").rglob("replay_buffer.pkl")
    buffer = load_from_pkl(saved)
    assert type(buffer) is replaybuf.sb3.ReplayBuffer
    assert buffer.size() == 300 and buffer.native.num_frames() == 300
