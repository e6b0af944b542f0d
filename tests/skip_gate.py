"""The strict skip gate: with ``REPLAYBUF_STRICT_SKIPS=1`` (``make test`` sets it) a run fails
when a test is skipped for a reason outside ``ALLOWED``, so a missing extra or an import
error inside replaybuf can never pass as skips. The root conftest.py and the TF-Agents and
SB3 suites' conftests load these hooks; docs/contributing.md says how to add a reason.
"""

from __future__ import annotations

import os
import re

import pytest

# Every reason a skip may give, each matched whole against the reason (pytest's "Skipped: " cut)
ALLOWED = {
    "no CUDA device": r"needs a CUDA device|CUDA not available",  # ours and docs; SB3's test_device_buffer
    "runs in the other venv": r".* runs in \.venv-[\w-]+ \(make test\)",  # CleanRL, rl-zoo3
    "POSIX-only": r".*\(POSIX only\)",  # fork, forked children
    "x64 mode": r".* under x64",  # test_jax_buffer: JAX's default 32-bit mode only
    "CPU-only (a GPU run)": r"the CPU's lowering \(bits\.py\)",  # test_jax_bits on a JAX GPU backend
    "runs for minutes": r"runs for minutes: .*",  # a docs block that trains; an example or test runs it
    # the other projects' tests that tests/tf_agents_suite runs unmodified skip these themselves
    "TF-Agents' own skip": r"b/123880556",  # its driver tests, when executing eagerly
    "SB3's own skip": r"Only SAC has gSDE support",  # its test_her.py, for the other algorithms
    # TensorFlow's reserved test_session (2.21's words, then 2.15's, which TF-Agents' venv runs)
    "TensorFlow's own skip": r'Tests that have the name "test_session" are automatically skipped .*|Not a test\.',
}
_ALLOWED = re.compile("|".join(f"(?:{pattern})" for pattern in ALLOWED.values()), re.DOTALL)


def skip_reason(report) -> str | None:
    """The reason of a skipped (not xfailed) test or collector, else None."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_configure(config):
    """Installs the gate when ``REPLAYBUF_STRICT_SKIPS=1`` (once per run)."""
    if os.environ.get("REPLAYBUF_STRICT_SKIPS") == "1" and not config.pluginmanager.has_plugin(_NAME):
        config.pluginmanager.register(_SkipGate(), _NAME)


_NAME = "replaybuf-skip-gate"


class _SkipGate:
    def __init__(self):
        self.refused: list[tuple[str, str]] = []  # (test or file, reason)

    def _record(self, report) -> None:
        reason = skip_reason(report)
        if reason is not None and not _ALLOWED.fullmatch(reason):
            self.refused.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report):
        self._record(report)

    def pytest_collectreport(self, report):
        self._record(report)

    def pytest_sessionfinish(self, session):
        if self.refused and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.refused:
            return
        terminalreporter.section("skips not allowed (REPLAYBUF_STRICT_SKIPS=1)", red=True)
        for nodeid, reason in self.refused:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(self.refused)} skipped for a reason outside tests/skip_gate.py's ALLOWED: "
            "install what is missing, or fix the import (docs/contributing.md)",
            red=True,
        )
