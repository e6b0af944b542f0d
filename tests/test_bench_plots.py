"""The report's plots (bench/plots.py) drawn from a small hand-built results file, nothing timed:
each family's plot and the summary exist as a real PNG and an SVG that names every workload it
draws, and the report step writes them, the README's table and its plot, the same bytes twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN = {
    "id": 1,
    "command": "python -m bench --tiny",
    "date": "2026-11-28 12:00 UTC",
    "machine": "a test machine",
    "size": "tiny",
    "rounds": 1,
    "load_start": [1.5, 2],
    "load_end": [0.5, 1],
}
#: suite -> workload -> library -> figure (one round)
FIGURES = {
    "peers": {
        "w1_sample256": {"replaybuf": 300.0, "cpprb": 100.0, "numpy-fancy": 150.0},
        "w3_per": {"replaybuf": 50.0, "tianshou": 40.0, "cpprb": 10.0},
    },
    "tf": {"tf_add": {"replaybuf": 20.0, "tf-agents TFUniform": 10.0}},
}


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """bench/'s modules, the report reading an empty analysis folder, and the results files in tmp_path/results."""
    monkeypatch.syspath_prepend(str(BENCH))
    import plots
    import report
    import runner

    monkeypatch.setattr(report, "ANALYSIS", tmp_path / "analysis")
    (tmp_path / "results").mkdir()
    for suite, workloads in FIGURES.items():
        records = [{"lib": "replaybuf", "version": "replaybuf 0.1.0"}]
        records += [
            {"workload": key, "lib": lib, "value": value, "load1": 1.2, "runnable": 2, "round": 0, "run": 1}
            for key, figures in workloads.items()
            for lib, value in figures.items()
        ]
        (tmp_path / "results" / f"{suite}.json").write_text(json.dumps({"runs": [RUN], "records": records}))
    return runner, report, plots


def _check(paths: list[Path], names: list[str]) -> None:
    png, svg = paths
    assert png.read_bytes().startswith(PNG_MAGIC)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text
    for name in names:
        assert name in text, f"{svg.name} does not name {name!r}"
    assert RUN["date"] in text and "load 1.5 at the start, 0.5 at the end" in text


def test_each_family_plot_and_the_summary_name_every_workload_they_draw(bench, tmp_path):
    _, report, plots = bench
    found = report._suites(tmp_path / "results")
    drawn = plots.by_family(found, tmp_path / "plots")

    titles = {suite.name: {w.key: w.title for w in suite.workloads} for suite in found}
    expected: dict[str, list[str]] = {}  # family -> the workloads' headings and the libraries beside them
    for suite, workloads in FIGURES.items():
        for key, figures in workloads.items():
            others = [lib for lib in figures if lib != "replaybuf"]
            expected.setdefault(plots.family_of(suite, key).name, []).extend(
                [f"{suite}: {titles[suite][key]}", *others]
            )
    assert {family.name: paths for family, paths in drawn.items()} == {
        name: [tmp_path / "plots" / f"{name}.png", tmp_path / "plots" / f"{name}.svg"] for name in expected
    }
    for family, paths in drawn.items():
        _check(paths, expected[family.name])

    summary = plots.summary(found, tmp_path / "plots")
    wordings = [plots.wording(suite, workload) for _, suite, workload, *_ in plots.goals(found)]
    assert len(wordings) == 3
    _check(summary, wordings)


def test_the_report_step_writes_the_readme_table_and_plot_the_same_twice(bench, tmp_path):
    runner, report, _ = bench
    start, end = report.README_TABLE
    readme, doc = tmp_path / "README.md", tmp_path / "docs" / "benchmarks.md"
    readme.write_text(f"# replaybuf\n\n## Measured\n\n{start}\n{end}\n\nAfter the table.\n")
    argv = ["--report-only", "--results", str(tmp_path / "results"), "--out", str(doc), "--readme", str(readme)]

    assert runner.main(argv) == 0
    written = {path: path.read_bytes() for path in sorted(tmp_path.rglob("*")) if path.is_file()}
    text = readme.read_text()
    assert "![replaybuf against each goal's peer](docs/plots/summary.png)" in text
    for row in (
        "| Uniform samples | sample 256 small transitions of 200k | 300 batches/s | "
        "2.00x numpy-fancy (goal 1.5x); 3.00x cpprb | 1.2 / 2 | 2026-11-28 12:00 UTC |",
        "| Prioritized replay | prioritized sample 256 + update of those 256 (1M capacity) | 50 rounds/s | "
        "1.25x best peer (tianshou) (goal 2x) |",
        "| Adds | TF add_batch (batch 1) in a tf.function | 20 items/s | 2.00x tf-agents TFUniform (goal 5x) |",
    ):
        assert row in text
    assert text.endswith(f"{end}\n\nAfter the table.\n")
    for name in ("summary", "samples", "prioritized", "adds"):
        assert (doc.parent / "plots" / f"{name}.png") in written and (doc.parent / "plots" / f"{name}.svg") in written
        assert f"](plots/{name}.png)" in doc.read_text()

    assert runner.main(argv) == 0
    assert {path: path.read_bytes() for path in sorted(tmp_path.rglob("*")) if path.is_file()} == written
