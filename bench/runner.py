"""The runner: ``python -m bench SUITE [SUITE ...]`` (``make bench``: every suite; ``make bench-quick``).

Each of a suite's jobs runs in its own subprocess (bench/worker.py) in its environment:
the main one, or a peer's under bench/.venvs/, built on first use (bench/venvs.py). A job
that cannot be built, crashes or times out becomes missing figures with the reason; the
rest go on. Each run merges its records into bench/results/SUITE.json (a workload measured
again replaces that workload's figures, all libraries at once, so that the ratios of a
workload always come from one run), then bench/report.py regenerates docs/benchmarks.md, its
plots and the README's table and plot from the results of every suite.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import harness
import report
import results
import suites
import venvs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}
#: what keeps a job off the accelerators (all but a ``Job(device=True)``'s)
CPU_ONLY_ENV = {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
TIMEOUTS = {"full": 1200, "quick": 400, "tiny": 300}


def run_job(python: str, argv: list[str], timeout: float, log, device: bool = False) -> tuple[list[dict], str | None]:
    """The records a worker printed, and why it stopped early (None when it finished); ``device``:
    the worker may see the accelerators."""
    env = dict(os.environ, **QUIET_ENV, **({} if device else CPU_ONLY_ENV))
    env["PYTHONPATH"] = str(ROOT / "src")  # replaybuf from this checkout, in every environment
    cmd = [python, str(HERE / "worker.py"), *argv]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        stdout, stderr = proc.stdout, proc.stderr
        failure = None if proc.returncode == 0 else f"worker exited with {proc.returncode}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        failure = f"worker timed out after {timeout:.0f} s"
    log.write(f"\n=== {' '.join(cmd)}\n{stdout}\n--- stderr\n{stderr}\n")
    if failure:
        last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or [""]
        failure = f"{failure}: {last[0][:200]}"
    return harness.records_in(stdout), failure


def run_suite(name: str, args: argparse.Namespace, size: str) -> dict:
    """Run suite ``name``'s jobs (``--libs`` only) for ``--rounds``; the run's results."""
    suite = suites.load(name)
    wanted = [w.key for w in suite.WORKLOADS if not args.workloads or w.key in args.workloads]
    jobs = [job for job in suite.JOBS if not args.libs or job.name in args.libs]
    run = {
        "command": "python -m bench " + " ".join(args.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": harness.machine(),
        "size": size,
        "rounds": args.rounds,
        "load_start": harness.load(),
    }
    records: list[dict] = []
    (HERE / ".cache").mkdir(exist_ok=True)
    with open(HERE / ".cache" / f"{name}.log", "w") as log:
        for round_ in range(args.rounds):
            for job in jobs:
                keys = [key for key in wanted if not job.workloads or key in job.workloads]
                if not keys:
                    continue
                start = time.time()
                try:
                    python = str(venvs.ensure(job.env)) if job.env and not args.here else sys.executable
                except venvs.VenvError as exc:
                    failure = f"environment not built: {exc}"
                    got = []
                else:
                    timeout = args.timeout or (job.timeout if size == "full" and job.timeout else TIMEOUTS[size])
                    got, failure = run_job(python, [name, job.name, size, *keys], timeout, log, job.device)
                if failure:
                    got += [{"workload": k, "lib": label, "missing": failure} for k in keys for label in job.labels]
                records += [dict(r, round=round_) for r in got]
                figures = sum("value" in r for r in got)
                print(
                    f"{name} round {round_ + 1}/{args.rounds} {job.name}: {figures} figures in "
                    f"{time.time() - start:.0f} s" + (f" ({failure})" if failure else ""),
                    flush=True,
                )
    run["load_end"] = harness.load()
    return {"run": run, "records": records}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help=f"suites to run (default all: {', '.join(suites.SUITES)})")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the smoke tests)")
    parser.add_argument("--libs", type=_names, default=[], help="comma-separated job names (default all)")
    parser.add_argument("--workloads", type=_names, default=[], help="comma-separated workload keys (default all)")
    parser.add_argument("--rounds", type=int, default=None, help="times every job runs (each figure: its best round's)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per job (default by size)")
    parser.add_argument("--results", type=Path, default=results.DIR, help="results folder (one JSON per suite)")
    parser.add_argument("--out", type=Path, default=report.DOC, help="the generated report ('' for none)")
    parser.add_argument("--readme", type=Path, default=report.README, help="README whose table is regenerated")
    parser.add_argument(
        "--here",
        action="store_true",
        help="run every job in this interpreter, no peer environment built (what it lacks becomes missing figures)",
    )
    parser.add_argument("--report-only", action="store_true", help="regenerate the report from --results")
    args = parser.parse_args(argv)
    args.argv = argv
    unknown = [s for s in args.suites if s not in suites.SUITES]
    if unknown:
        parser.error(f"unknown suites {unknown}; choose from {list(suites.SUITES)}")
    names = args.suites or list(suites.SUITES)
    jobs = {job.name for name in names for job in suites.load(name).JOBS}
    if set(args.libs) - jobs:
        parser.error(f"unknown jobs {sorted(set(args.libs) - jobs)}; the suites' jobs: {sorted(jobs)}")
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    args.rounds = args.rounds or (2 if size == "full" else 1)
    if not args.report_only:
        for name in names:
            if args.libs and not {job.name for job in suites.load(name).JOBS} & set(args.libs):
                continue
            results.merge(args.results / f"{name}.json", run_suite(name, args, size))
    if str(args.out) not in ("", "."):
        report.generate(args.results, args.out, args.readme)
        print(f"wrote {args.out}")
    return 0


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]
