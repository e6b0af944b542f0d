"""The docs as tests: every ```python block of README.md and docs/*.md runs under pytest (Sybil).

The conventions (docs/contributing.md): blocks of one page share a namespace and run in
order in a fresh temporary directory; ``<!-- skip: next "reason" -->`` skips the next block
(the reason is listed in pytest's summary); ``<!-- invisible-code-block: python ... -->`` is a
hidden setup; a one-line ``print(...)  # text`` must print exactly ``text``; a block with an
``if __name__ == "__main__":`` guard runs alone as a script (``python file.py``) and must exit
0 without a traceback.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import shutil
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.evaluators.python import PythonEvaluator, pad
from sybil.integration.pytest import SybilItem
from sybil.parsers.markdown import CodeBlockParser, SkipParser

MAIN_GUARD = 'if __name__ == "__main__":'
SCRIPT_TIMEOUT = 120  # seconds: a script block that hangs fails instead of stalling make test


def expected_prints(source: str) -> dict[int, str]:
    """``{line: text}`` for each one-line ``print(...)  # text`` statement of ``source``."""
    comments = {
        token.start[0]: token.string[1:].strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    expected = {}
    for node in ast.walk(ast.parse(source)):
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
            if node.lineno == node.end_lineno and node.lineno in comments:
                expected[node.lineno] = comments[node.lineno]
    return expected


class BlockEvaluator:
    """Runs one block: in the page's namespace comparing its prints, or alone as a script."""

    def __init__(self) -> None:
        self._python = PythonEvaluator()

    def __call__(self, example) -> None:
        if MAIN_GUARD in example.parsed:
            self._script(example)
            return
        expected = expected_prints(pad(example.parsed, example.line + example.parsed.line_offset))
        printed: dict[int, list[str]] = {}

        def recording_print(*args, sep=" ", end="\n", file=None, flush=False):
            caller = sys._getframe(1)
            if file is None and caller.f_code.co_filename == example.path:
                printed.setdefault(caller.f_lineno, []).append((sep or " ").join(map(str, args)))
            builtins.print(*args, sep=sep, end=end, file=file, flush=flush)

        example.namespace["print"] = recording_print
        try:
            self._python(example)
        finally:
            example.namespace.pop("print", None)
        for line, text in expected.items():
            got = printed.get(line)
            if got is None:
                raise AssertionError(f"{example.path}:{line}: this print never ran; its comment says {text!r}")
            if got[0] != text:
                raise AssertionError(f"{example.path}:{line}: printed {got[0]!r}, its comment says {text!r}")

    def _script(self, example) -> None:
        """Save the block as a file and run it with ``python`` in the page's temporary directory."""
        script = Path(f"{Path(example.path).stem}_line{example.line}.py")
        script.write_text(example.parsed)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
        if run.returncode != 0 or "Traceback" in run.stderr:
            raise AssertionError(
                f"{example.path}:{example.line}: the block run as a script exited {run.returncode}\n"
                f"stdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"
            )


def _enter_temporary_directory(namespace: dict) -> None:
    """Run the page in a fresh directory; relative PYTHONPATH entries (``PYTHONPATH=src``) are made
    absolute first, so the processes a page starts (scripts, spawn children, Ray workers) still
    import this checkout's replaybuf."""
    path = os.environ.get("PYTHONPATH")
    namespace["__doc_cwd__"] = (os.getcwd(), tempfile.mkdtemp(prefix="replaybuf-docs-"), path)
    if path:
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in path.split(os.pathsep) if p)
    os.chdir(namespace["__doc_cwd__"][1])


def _leave_temporary_directory(namespace: dict) -> None:
    previous, temporary, path = namespace.pop("__doc_cwd__")
    os.chdir(previous)
    if path is not None:
        os.environ["PYTHONPATH"] = path
    shutil.rmtree(temporary, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped block is reported at its own page and line (not at pytest's unittest shim)."""
    report = yield
    if isinstance(item, SybilItem) and report.skipped and isinstance(report.longrepr, tuple):
        report.longrepr = (item.path, item.example.line, report.longrepr[2])
    return report


def collect_docs(root: Path):
    """A ``pytest_collect_file`` hook that makes tests of ``root/README.md`` and ``root/docs/*.md``."""
    sybil = Sybil(
        parsers=[CodeBlockParser("python", BlockEvaluator()), SkipParser()],
        patterns=["*.md"],
        path=str(root),
        setup=_enter_temporary_directory,
        teardown=_leave_temporary_directory,
    )
    hook = sybil.pytest()
    pages = {root / "README.md", *(root / "docs").glob("*.md")}

    def pytest_collect_file(file_path: Path, parent):
        return hook(file_path, parent) if file_path in pages else None

    return pytest_collect_file
