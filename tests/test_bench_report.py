"""The report step of ``make bench`` (``python -m bench --report-only``), run twice on copies of the
repository's own results, analysis, docs/benchmarks.md and README: the hand-written analysis must
come through both runs whole, once each, and the second run must change nothing. The plots are
left out here (half a minute each run on this machine); tests/test_bench_plots.py draws them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import report
    import runner

    return runner, report


@pytest.fixture
def copies(tmp_path, bench, monkeypatch):
    """Copies of the results, the analysis, docs/benchmarks.md and README.md; the report reads the analysis
    copy and draws no plots."""
    _, report = bench
    shutil.copytree(BENCH / "results", tmp_path / "results")
    shutil.copytree(BENCH / "analysis", tmp_path / "analysis")
    shutil.copy(ROOT / "docs" / "benchmarks.md", tmp_path / "benchmarks.md")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(report, "ANALYSIS", tmp_path / "analysis")
    monkeypatch.setattr(report.plots, "summary", lambda found, folder: [])
    monkeypatch.setattr(report.plots, "by_family", lambda found, folder: {})
    return tmp_path


def _report_only(runner, where: Path) -> None:
    argv = ["--report-only", "--results", str(where / "results"), "--out", str(where / "benchmarks.md")]
    assert runner.main(argv + ["--readme", str(where / "README.md")]) == 0


def _twice_keeps_the_analysis(runner, report, where: Path) -> None:
    """Run the report step twice; assert the hand-written analysis came through whole, once, in order."""
    analysis = {path.name: path.read_text() for path in sorted((BENCH / "analysis").glob("*.md"))}
    assert analysis, "bench/analysis/ holds the hand-written analysis"

    _report_only(runner, where)
    first, first_readme = (where / "benchmarks.md").read_text(), (where / "README.md").read_text()
    _report_only(runner, where)

    assert (where / "benchmarks.md").read_text() == first
    assert (where / "README.md").read_text() == first_readme
    # the committed report held no hand-written text outside the generated and included parts
    assert sorted(path.name for path in (where / "analysis").glob("*.md")) == sorted(analysis)
    for name, text in analysis.items():
        assert (where / "analysis" / name).read_text() == text, f"{name} was rewritten"
        marker = report.INCLUDED.format(name)
        assert first.count(marker) == 1, f"{name} is not included once"
        included = first.split(marker, 1)[1].split(report.END_INCLUDED, 1)[0]
        assert included.strip() == text.strip(), f"{name} came through changed"
    markers = [first.index(report.INCLUDED.format(name)) for name in analysis]
    assert markers == sorted(markers), "the analysis files appear in the order of their names"


def test_the_report_step_twice_keeps_every_analysis_file_whole(bench, copies):
    _twice_keeps_the_analysis(*bench, copies)


def test_the_check_fails_when_the_generator_drops_an_analysis_file(bench, copies, monkeypatch):
    """The check above is not vacuous: a generator that skips a file is caught."""
    _, report = bench
    files = report._analysis_files()
    monkeypatch.setattr(report, "_analysis_files", lambda: files[1:])
    with pytest.raises(AssertionError, match=f"{files[0].name} is not included once"):
        _twice_keeps_the_analysis(*bench, copies)
