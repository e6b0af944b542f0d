"""The results files: bench/results/SUITE.json, the latest figure of every workload of a suite.

A file holds ``runs`` (command, date, machine, size, rounds, the load at its start and end:
1-minute load average and runnable threads) and ``records``: versions (``lib``, ``version``)
and figures (``workload``, ``lib``, ``value`` or ``missing``, the repetitions, their
spread, the load beside them, ``round``, ``run``). A new run replaces every record of each
workload it measured, so a workload's figures always come from one run; the others keep
theirs. The report (bench/report.py) is generated from these files alone.
"""

from __future__ import annotations

import json
from pathlib import Path

DIR = Path(__file__).resolve().parent / "results"


def read(path: Path) -> dict:
    """A results file, or an empty one."""
    return json.loads(path.read_text()) if path.exists() else {"runs": [], "records": []}


def merge(path: Path, new: dict) -> dict:
    """Merge one run (``{"run": ..., "records": [...]}``) into the results file at ``path``; the merged results."""
    old = read(path)
    measured = {r["workload"] for r in new["records"] if "workload" in r}
    run_id = max((run["id"] for run in old["runs"]), default=0) + 1
    fresh_libs = {r["lib"] for r in new["records"] if "version" in r}
    kept = [
        r
        for r in old["records"]
        if ("workload" in r and r["workload"] not in measured) or ("version" in r and r["lib"] not in fresh_libs)
    ]
    records = kept + [dict(r, run=run_id) for r in new["records"]]
    used = {r["run"] for r in records}
    runs = [run for run in old["runs"] if run["id"] in used] + [dict(new["run"], id=run_id)]
    merged = {"runs": runs, "records": records}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return merged
