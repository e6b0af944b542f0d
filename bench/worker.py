"""One process of a suite: ``python bench/worker.py SUITE JOB SIZE [WORKLOAD ...]``.

The runner starts it in the job's environment (a peer's bench/.venvs/ENV, or the main
one); it calls the suite's ``measure`` for that job, which prints one ``BENCH`` record per
figure (bench/harness.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suites  # noqa: E402


def main(argv: list[str]) -> int:
    suite_name, job_name, size, *keys = argv
    suite = suites.load(suite_name)
    jobs = {job.name: job for job in suite.JOBS}
    if job_name not in jobs:
        raise SystemExit(f"suite {suite_name!r} has no job {job_name!r}; its jobs: {sorted(jobs)}")
    job = jobs[job_name]
    suite.measure(job, size, keys)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
