"""tests/skip_gate.py: with REPLAYBUF_STRICT_SKIPS=1 a skip whose reason is not allowed fails
the run (a planted test file, run by pytest in a subprocess), an allowed one does not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

PLANTED = """
import pytest

def test_passes():
    pass

def test_skipped():
    pytest.skip({reason!r})
"""

# the reasons the suites really give (tests, docs, TF-Agents' and SB3's own tests)
ALLOWED_REASONS = [
    "needs a CUDA device",
    "CUDA not available",
    "CleanRL runs in .venv-gym029 (make test)",
    "rl-zoo3 runs in .venv-zoo (make test)",
    "kills forked children (POSIX only)",
    "forkserver is not available on win32 (POSIX only)",
    "64-bit leaves are stored as such under x64",
    "the CPU's lowering (bits.py)",
    "runs for minutes: trains DQN on Atari on a CPU (downloads nothing)",
    "b/123880556",
    'Tests that have the name "test_session" are automatically skipped by TensorFlow test fixture, as the name '
    "is reserved for creating sessions within tests. Please rename your test if you have a test with this name.",
]


def _run(tmp_path: Path, files: dict[str, str], strict: bool = True) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": str(TESTS), "REPLAYBUF_STRICT_SKIPS": "1" if strict else "0"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the installed plugins only slow the planted run
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "skip_gate", "--rootdir", tmp_path],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_for_a_missing_package_fails_the_run_and_is_named(tmp_path):
    run = _run(
        tmp_path,
        {
            "test_planted.py": PLANTED.format(reason="could not import 'torch': No module named 'torch'"),
            "test_module_skip.py": "import pytest\npytest.importorskip('no_such_package_here')\n",
        },
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "test_planted.py::test_skipped: could not import 'torch'" in run.stdout
    assert "test_module_skip.py: could not import 'no_such_package_here'" in run.stdout
    assert "1 passed, 2 skipped" in run.stdout


def test_the_allowed_skips_pass(tmp_path):
    tests = "".join(
        f"\ndef test_skipped_{i}():\n    pytest.skip({reason!r})\n" for i, reason in enumerate(ALLOWED_REASONS)
    )
    run = _run(tmp_path, {"test_planted.py": "import pytest\n" + tests})
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(ALLOWED_REASONS)} skipped" in run.stdout


def test_the_gate_is_off_without_the_variable(tmp_path):
    run = _run(tmp_path, {"test_planted.py": PLANTED.format(reason="could not import 'torch'")}, strict=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_failing_run_keeps_its_exit_status(tmp_path):
    planted = PLANTED.format(reason="could not import 'torch'") + "\ndef test_fails():\n    assert False\n"
    run = _run(tmp_path, {"test_planted.py": planted})
    assert run.returncode == 1 and "1 failed" in run.stdout
    assert "test_planted.py::test_skipped: could not import 'torch'" in run.stdout
