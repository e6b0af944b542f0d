"""Smoke test of the benchmark runner (bench/run.py): replaybuf only, toy sizes, no peers.

Checks that the runner starts a worker subprocess, collects rows with positive finite
figures, and writes the Markdown table where it is told to. Speed itself is never
asserted here (that is what bench/ measures).
"""

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
ROWS = ["w1_add1", "w1_add256", "w1_sample256", "w2_sample32", "w2_rss", "w4_windows"]


@pytest.fixture(scope="module")
def run_module():
    sys.path.insert(0, str(BENCH))
    try:
        import run

        yield run
    finally:
        sys.path.remove(str(BENCH))


def test_runner_writes_rows_and_table(run_module, tmp_path):
    out, results = tmp_path / "bench.md", tmp_path / "results.json"
    args = [
        "--tiny",
        "--libs",
        "replaybuf,numpy",
        "--rows",
        ",".join(ROWS),
        "--out",
        str(out),
        "--png",
        "",
        "--results",
        str(results),
    ]
    assert run_module.main(args) == 0

    records = json.loads(results.read_text())["records"]
    figures = {(r["lib"], r["row"]): r["value"] for r in records if "value" in r}
    for row in ROWS:
        assert ("replaybuf", row) in figures, f"no replaybuf figure for {row}: {records}"
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    assert ("numpy-loop", "w1_add1") in figures

    table = out.read_text()
    assert "| W1a single add (45-byte transition) | replaybuf |" in table
    assert "--tiny" in table  # the command is recorded


def test_a_new_report_keeps_the_hand_written_sections(run_module, tmp_path):
    out = tmp_path / "bench.md"
    marker = run_module.report.HAND_WRITTEN
    out.write_text(f"# old generated report\n\n{marker}\n\n## Many writers\n\nmeasured by hand\n")
    args = [
        "--tiny",
        "--libs",
        "replaybuf",
        "--rows",
        "w1_add256",
        "--out",
        str(out),
        "--png",
        "",
        "--results",
        str(tmp_path / "results.json"),
    ]
    assert run_module.main(args) == 0
    text = out.read_text()
    assert "old generated report" not in text
    assert text.index("| W1b") < text.index(marker)  # the new tables, then the hand-written part
    assert text.endswith(f"{marker}\n\n## Many writers\n\nmeasured by hand\n")


def test_unknown_library_is_refused(run_module, tmp_path):
    with pytest.raises(SystemExit):
        run_module.main(["--tiny", "--libs", "nosuchlib", "--out", str(tmp_path / "x.md"), "--png", ""])


def test_crashing_worker_is_reported_not_raised(run_module, tmp_path):
    with open(tmp_path / "log.txt", "w") as log:
        records, failure = run_module.run_worker(sys.executable, "no_such_adapter", "tiny", [], 60, log)
    assert records == []
    assert "exited with 1" in failure and "no_such_adapter" in failure


def test_her_bench_quick_run_measures_every_contender():
    pytest.importorskip("stable_baselines3")
    sys.path.insert(0, str(BENCH))
    try:
        import her

        results = her.main(["--quick"])
    finally:
        sys.path.remove(str(BENCH))
    for name in (
        "replaybuf get_next(256) with her=",
        "replaybuf.sb3.HerReplayBuffer.sample",
        "SB3 HerReplayBuffer.sample",
    ):
        assert len(results[name]) == 2 and all(math.isfinite(r) and r > 0 for r in results[name])
