"""Run every library's workloads, each in its own subprocess, and write the report and plot.

    python bench/run.py            # full sizes (make bench)
    python bench/run.py --quick    # smaller sizes, fewer repetitions (make bench-quick)
    python bench/run.py --libs replaybuf,numpy --out /tmp/b.md --png ''

Peers run in their own virtual environments under bench/.venvs/, built on first use from
bench/requirements/ (see venvs.py). A peer that cannot be installed, crashes or times out
becomes missing rows with the reason; the rest go on. replaybuf and the NumPy references
run in the interpreter that runs this script (the main .venv).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import venvs  # noqa: E402
from common import SIZES  # noqa: E402

#: short name -> (adapter module in bench/libs, environment or None for this interpreter, labels)
LIBRARIES = {
    "numpy": (
        "numpy_ref",
        None,
        ["numpy-loop", "numpy-slice", "numpy-fancy", "numpy-per", "numpy-take", "numpy-memcpy"],
    ),
    "replaybuf": ("replaybuf_lib", None, ["replaybuf"]),
    "cpprb": ("cpprb_lib", "cpprb", ["cpprb"]),
    "sb3": ("sb3_lib", "sb3", ["stable-baselines3"]),
    "torchrl": ("torchrl_lib", "torchrl", ["torchrl"]),
    "tianshou": ("tianshou_lib", "tianshou", ["tianshou"]),
    "flashbax": ("flashbax_lib", "flashbax", ["flashbax"]),
    "tfagents": ("tfagents_lib", "tfagents", ["tf-agents PyUniform", "tf-agents TFUniform"]),
}
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "JAX_PLATFORMS": "cpu",
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONWARNINGS": "ignore",
}


def run_worker(
    python: str, adapter: str, size: str, rows: list[str], timeout: float, log
) -> tuple[list[dict], str | None]:
    """The records a worker printed, and why it stopped early (None when it finished)."""
    env = dict(os.environ, **QUIET_ENV)
    env.pop("PYTHONPATH", None)
    cmd = [python, str(HERE / "worker.py"), adapter, size, *rows]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
        failure = None if code == 0 else f"worker exited with {code}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        failure = f"worker timed out after {timeout:.0f} s"
    log.write(f"\n=== {' '.join(cmd)}\n{stdout}\n--- stderr\n{stderr}\n")
    if failure:
        last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or [""]
        failure = f"{failure}: {last[0][:200]}"
    records = [json.loads(line[6:]) for line in stdout.splitlines() if line.startswith("BENCH ")]
    return records, failure


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the smoke test)")
    parser.add_argument("--libs", default=",".join(LIBRARIES), help="comma-separated subset of " + ",".join(LIBRARIES))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="Markdown report path")
    parser.add_argument("--png", default=str(ROOT / "docs" / "benchmarks.png"), help="plot path ('' for none)")
    parser.add_argument("--results", default=str(HERE / ".cache" / "results.json"), help="raw records (JSON)")
    parser.add_argument("--rows", default="", help="comma-separated subset of row keys (default all)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="re-render the report and plot from --results without running anything",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="times every library runs, in turn; the best round counts (default 2, quick/tiny 1)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds per library (default by size)")
    args = parser.parse_args(argv)
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    timeout = args.timeout or {"full": 1200, "quick": 400, "tiny": 300}[size]
    names = [n.strip() for n in args.libs.split(",") if n.strip()]
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [n for n in names if n not in LIBRARIES]
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {list(LIBRARIES)}")

    results_path = Path(args.results)
    if args.report_only:
        saved = json.loads(results_path.read_text())
        write_report(saved["records"], saved["meta"], args)
        return 0
    results_path.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    rounds = args.rounds or (2 if size == "full" else 1)
    jobs = []  # (names, adapters, environment); this interpreter's libraries share one interleaved worker
    local = [n for n in names if LIBRARIES[n][1] is None]
    if local:
        jobs.append((local, ",".join(LIBRARIES[n][0] for n in local), None))
    jobs += [([n], LIBRARIES[n][0], LIBRARIES[n][1]) for n in names if LIBRARIES[n][1] is not None]
    with open(results_path.with_suffix(".log"), "w") as log:
        for round_ in range(rounds):
            for job_names, adapters, env_name in jobs:
                labels = [label for n in job_names for label in LIBRARIES[n][2]]
                start = time.time()
                try:
                    python = str(venvs.ensure(env_name)) if env_name else sys.executable
                except venvs.VenvError as exc:
                    records += [
                        {"lib": label, "row": "*", "missing": f"environment not built: {exc}"} for label in labels
                    ]
                    print(f"{'+'.join(job_names)}: environment failed: {exc}", flush=True)
                    continue
                got, failure = run_worker(python, adapters, size, rows, timeout, log)
                records += got
                if failure:
                    records += [{"lib": label, "row": "*", "missing": failure} for label in labels]
                print(
                    f"round {round_ + 1}/{rounds} {'+'.join(job_names)}: {sum('value' in r for r in got)} figures "
                    f"in {time.time() - start:.0f} s" + (f" ({failure})" if failure else ""),
                    flush=True,
                )
    meta = {
        "command": "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "sizes": f"{size}: {SIZES[size]}, {rounds} round(s)",
    }
    results_path.write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    write_report(records, meta, args)
    return 0


def write_report(records: list[dict], meta: dict, args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = out.read_text() if out.exists() else ""
    out.write_text(report.with_hand_written(report.markdown(records, meta), previous))
    if args.png:
        report.plot(records, Path(args.png))
    print(f"wrote {out}" + (f" and {args.png}" if args.png else ""))


if __name__ == "__main__":
    sys.exit(main())
