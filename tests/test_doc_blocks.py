"""The docs-as-tests machinery (tests/doc_blocks.py): a broken block fails, skips show their reason,
printed outputs are compared, hidden setups run, script blocks run alone with ``python``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from doc_blocks import expected_prints

PAGE = """# A page

<!-- invisible-code-block: python
hidden = 41
-->
```python
print(hidden + 1)  # 42
```

```python
print("a", "b")  # a c
```

<!-- skip: next "needs a cluster" -->
```python
raise RuntimeError("never run")
```

```python
open("written.txt", "w").write("x")
undefined_name
```

```python
import sys

if __name__ == "__main__":
    print("script", file=sys.stderr if len(sys.argv) > 1 else sys.stdout)
```

```python
if __name__ == "__main__":
    raise SystemExit(3)
```
"""


def test_expected_prints_reads_the_comment_of_one_line_prints_only():
    source = "print(1)  # 1\nx = 2  # not a print\nprint(\n  3)  # multi-line: not compared\nprint(4)\n"
    assert expected_prints(source) == {1: "1"}


def test_page_outcomes(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(PAGE)
    (tmp_path / "README.md").write_text("```python\nprint(1 + 1)  # 2\n```\n")
    (tmp_path / "other.md").write_text("```python\nraise RuntimeError\n```\n")  # not a docs page: not collected
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\nfrom doc_blocks import collect_docs, pytest_runtest_makereport  # noqa: F401\n"
        "pytest_collect_file = collect_docs(Path(__file__).resolve().parent)\n"
    )
    tests = os.path.dirname(__file__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, *sys.path]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    out = run.stdout
    assert run.returncode == 1, out
    assert "3 failed, 5 passed, 1 skipped" in out, out
    assert "SKIPPED [1] docs/page.md:15: needs a cluster" in out, out
    assert "printed 'a b', its comment says 'a c'" in out, out
    assert "NameError: name 'undefined_name' is not defined" in out, out
    assert "the block run as a script exited 3" in out, out
    assert not (tmp_path / "written.txt").exists()  # blocks run in a temporary directory
    assert "other.md" not in out
