"""pytest at the repository root: README.md and docs/*.md are collected as tests (tests/doc_blocks.py);
with REPLAYBUF_STRICT_SKIPS=1 a skip for a reason not allowed fails the run (tests/skip_gate.py);
SB3's default log folders go to one temporary folder (tests/sb3_logs.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))

from doc_blocks import collect_docs, pytest_runtest_makereport  # noqa: E402,F401 (pytest hooks)
from sb3_logs import sb3_logs_in_one_folder  # noqa: E402,F401 (fixture: no /tmp/SB3-* left behind)
from skip_gate import pytest_configure  # noqa: E402,F401 (pytest hook: REPLAYBUF_STRICT_SKIPS=1)

pytest_collect_file = collect_docs(ROOT)
