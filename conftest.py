"""pytest at the repository root: README.md and docs/*.md are collected as tests (tests/doc_blocks.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))

from doc_blocks import collect_docs, pytest_runtest_makereport  # noqa: E402,F401 (pytest hooks)

pytest_collect_file = collect_docs(ROOT)
