"""Runs TF-Agents' own tests with replaybuf's classes in place of TF-Agents'.

Used only with this folder's pytest.ini (``make test`` runs it in the TF 2.15.1 +
tf-agents 0.19.0 venv): TF-Agents' modules then name replaybuf's classes, assigned before
any test module is imported, so TF-Agents' test files run unmodified against them. Under
any other configuration (the main suite) nothing here is collected.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).parents[1]))  # last: tests/skip_gate.py, shadowing nothing

import skip_gate  # noqa: E402

_INI = Path(__file__).with_name("pytest.ini")


def _ours(config) -> bool:
    return config.inipath is not None and Path(config.inipath) == _INI


def pytest_ignore_collect(collection_path, config):
    if not _ours(config):
        return True
    return None


def pytest_configure(config):
    if not _ours(config):
        return
    skip_gate.pytest_configure(config)
    early = [name for name in sys.modules if name.startswith("tf_agents.") and name.endswith("_test")]
    if early:  # a test module imported before the swap would keep TF-Agents' classes
        raise RuntimeError(f"TF-Agents test modules imported before the swap: {early}")
    import tf_agents.replay_buffers as replay_buffers
    from tf_agents.replay_buffers import py_hashed_replay_buffer, tf_uniform_replay_buffer  # noqa: F401

    from replaybuf.tf_agents import py_uniform_replay_buffer as our_py
    from replaybuf.tf_agents import tf_uniform_replay_buffer as our_tf

    # TF-Agents' test utilities and tests name the class through the module at call time
    tf_uniform_replay_buffer.TFUniformReplayBuffer = our_tf.TFUniformReplayBuffer
    # py_replay_buffers_test binds the class when it is imported, through the package's
    # attribute: that becomes our module (the one-line switch), while TF-Agents' own module
    # stays whole for its PyHashedReplayBuffer, a subclass imported above
    replay_buffers.py_uniform_replay_buffer = our_py
