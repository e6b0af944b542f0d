"""Smoke test of bench/suites/writers.py run as a script (replaybuf only, toy durations; speed is never asserted)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
pytestmark = pytest.mark.timeout(120)


def test_the_writer_benchmark_reports_positive_rates_for_every_configuration(tmp_path):
    out = tmp_path / "results.json"
    cmd = [
        sys.executable,
        str(BENCH / "suites" / "writers.py"),
        "--libs",
        "replaybuf",
        "--writers",
        "0,1",
        "--rows",
        "1,4",
        "--reps",
        "1",
        "--seconds",
        "0.05",
        "--capacity",
        "16384",
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    results = json.loads(out.read_text())
    configs = {(r["writers"], r["rows"], r["staged"]) for r in results}
    assert configs == {(0, 1, False), (1, 1, False), (1, 4, False), (1, 1, True)}
    for r in results:
        assert math.isfinite(r["batches_per_s"]) and r["batches_per_s"] > 0
        assert (r["rows_per_s"] > 0) == (r["writers"] > 0)
    assert "| 1 | 4 | replaybuf |" in proc.stdout


def test_the_rate_limiter_demo_keeps_the_ratio_inside_its_range():
    sys.path.insert(0, str(BENCH))
    try:
        from suites import writers

        result = writers.rate_limit_demo(0.3, spi=8.0, min_size=10, error_buffer=16.0)
    finally:
        sys.path.remove(str(BENCH))
    limited = result["limited"]
    assert limited["inside"] and limited["samples"] > 0
    highest, lowest = limited["observed_range"]
    assert highest <= limited["range"][1] and lowest >= limited["range"][0]
