"""Smoke test of bench/gpu.py (issue 33's GPU table) on the CPU at toy sizes: every section
runs and prints a figure in every column it has on this device. Speed is never asserted."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu.py"


@pytest.fixture
def gpu_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_table_runs_on_the_cpu(gpu_bench, capsys):
    assert gpu_bench.main(["--tiny", "--device", "cpu", "--sections", "frames,small,mindspore"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines() if line.startswith("| ")}
    for case in ("sample 32 frames", "sample 256 frames", "sample 256 small transitions"):
        replaybuf, bare = rows[case][0], rows[case][3]  # columns: replaybuf, captured, TorchRL, bare, kernel
        assert re.fullmatch(r" \d+\.\d \([\d,.]+ GB/s\) | \d+\.\d ", replaybuf) and float(bare.split()[0]) > 0
    assert float(rows["add 256 small transitions from host"][0]) > 0
    assert re.search(r"replaybuf / bare loop = \d+\.\d\dx", out)
    assert re.search(r"MindSpore-style insert 256 / sample 256 \| \d+\.\d / \d+\.\d", out)


def test_a_call_that_fails_stops_the_table_with_its_error(gpu_bench):
    """The harness times every call in turn; a failing one is raised, not left out of the row."""
    timing = gpu_bench.harness.Timing(2, 0.001, 0.0)
    figures = gpu_bench.us_per_call(gpu_bench.torch.device("cpu"), {"a": lambda: 1, "b": lambda: 2}, timing)
    assert set(figures) == {"a", "b"} and all(value > 0 for value in figures.values())

    def broken():
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        gpu_bench.us_per_call(gpu_bench.torch.device("cpu"), {"a": lambda: 1, "b": broken}, timing)
