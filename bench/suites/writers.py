"""Many writer processes, one learner: add rows/s and the learner's batches/s meanwhile.

For each library, writer count W (0 = the learner alone) and rows per add R, W writer
processes (fork) add R rows per call as fast as they can for ``--seconds`` while the learner
samples 256 rows per call; the figures of a repetition are rows committed by all writers per
second and learner batches per second over the same interval, and the learner's rate while
the writers run divided by its rate over the half interval just before (writers started,
waiting): a ratio paired within one repetition, so load that changes between
configurations does not enter it. Medians of ``--reps``.

- replaybuf: ``SharedReplayBuffer(writers=W, batch_size=R)`` (one segment per writer), each
  writer an ``add_batch`` of R rows through its handle; ``staged`` rows add one row per call
  with ``flush_every=256`` (blocks of 256 committed at once).
- cpprb: ``MPReplayBuffer`` (one buffer in shared memory, writers serialised by its lock),
  ``add(**rows)``.
- torchrl: ``ReplayBuffer(storage=LazyMemmapStorage, shared=True)``, ``extend(TensorDict)``.

Rows are the 45-byte transitions of bench/common.py (obs f32[4], action i64, reward f32,
done bool, next_obs f32[4]); the ring holds 2**20 rows in every library, filled before
anything is timed: a learner reading only a small, cache-warm part of it alone would look
faster alone than beside writers that fill the rest. Peers run in their own virtual
environments (bench/venvs.py). Run:

    .venv/bin/python bench/suites/writers.py [--libs replaybuf,cpprb,torchrl] [--reps 3] [--seconds 1]

``--pace S`` makes each writer sleep S seconds after every add (an actor that also steps its
environments), which separates what writers cost the learner through the buffer from what
they cost it by taking CPU. ``--pin`` does the same the way a deployment does: the learner
keeps CPU 0 to itself and every writer runs on the other CPUs (on a 2-core machine all
writers share CPU 1), so what remains of the learner's slowdown is what the writers cost it
through the buffer and the memory system, not through the scheduler.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402

import harness  # noqa: E402
from common import small_pool, small_spec  # noqa: E402
from harness import Workload  # noqa: E402
from suites import Job  # noqa: E402

CAPACITY = 1 << 20  # rows of the ring (--capacity), filled before anything is timed
SAMPLE = 256
CHECK_EVERY = 64  # adds between two looks at the stop flag (the same for every library)
NAMES = ("obs", "action", "reward", "done", "next_obs")


# -- the libraries -----------------------------------------------------------------------------
class ReplaybufShared:
    label = "replaybuf"

    @staticmethod
    def spec() -> dict:
        return small_spec()

    def __init__(self, writers: int, rows: int, staged: bool):
        from replaybuf.shared import SharedReplayBuffer

        spec = self.spec()
        segments = max(writers, 1)
        streams = 1 if staged else rows
        self.buffer = SharedReplayBuffer(
            spec,
            writers=segments,
            batch_size=streams,
            max_length=CAPACITY // (segments * streams),
            flush_every=256 if staged else 1,
            context="fork",
        )
        pool = small_pool(max(CAPACITY, 4096))
        for w in range(segments):
            handle = self.buffer.writer(w, flush_every=1)
            per_writer = CAPACITY // segments // streams
            for step in range(per_writer):
                lo = (step * streams) % (len(pool["obs"]) - streams)
                handle.add_batch({k: v[lo : lo + streams] for k, v in pool.items()})
            handle.close()
        self.handles = [self.buffer.writer(w) for w in range(writers)]
        self.batches = [{k: v[i * rows : (i + 1) * rows] for k, v in pool.items()} for i in range(4)]
        if staged:
            self.batches = [{k: v[i : i + 1] for k, v in pool.items()} for i in range(4)]

    def adder(self, index: int):
        handle, batches = self.handles[index], self.batches

        def add(i: int) -> None:
            handle.add_batch(batches[i & 3])

        return add

    def sample(self) -> None:
        self.buffer.get_next(SAMPLE)

    def close(self) -> None:
        self.buffer.close()


class CpprbShared:
    label = "cpprb"

    def __init__(self, writers: int, rows: int, staged: bool):
        from cpprb import MPReplayBuffer

        env = {
            "obs": {"shape": (4,), "dtype": np.float32},
            "act": {"dtype": np.int64},
            "rew": {"dtype": np.float32},
            "done": {"dtype": np.bool_},
            "next_obs": {"shape": (4,), "dtype": np.float32},
        }
        self.buffer = MPReplayBuffer(CAPACITY, env, ctx=multiprocessing.get_context("fork"))
        pool = {("act" if k == "action" else "rew" if k == "reward" else k): v for k, v in small_pool(CAPACITY).items()}
        self.buffer.add(**pool)
        self.batches = [{k: v[i * rows : (i + 1) * rows] for k, v in pool.items()} for i in range(4)]

    def adder(self, index: int):
        buffer, batches = self.buffer, self.batches

        def add(i: int) -> None:
            buffer.add(**batches[i & 3])

        return add

    def sample(self) -> None:
        self.buffer.sample(SAMPLE)

    def close(self) -> None:
        pass


class TorchrlShared:
    label = "torchrl"

    def __init__(self, writers: int, rows: int, staged: bool):
        import tempfile

        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyMemmapStorage, ReplayBuffer

        torch.set_num_threads(1)
        self._dir = tempfile.TemporaryDirectory(prefix="bench-torchrl-")
        self.buffer = ReplayBuffer(
            storage=LazyMemmapStorage(CAPACITY, scratch_dir=self._dir.name), batch_size=SAMPLE, shared=True
        )
        pool = small_pool(CAPACITY)

        def td(lo: int, n: int):
            return TensorDict(
                {k: torch.from_numpy(np.ascontiguousarray(v[lo : lo + n])) for k, v in pool.items()}, batch_size=[n]
            )

        self.buffer.extend(td(0, CAPACITY))
        self.batches = [td(i * rows, rows) for i in range(4)]

    def adder(self, index: int):
        buffer, batches = self.buffer, self.batches

        def add(i: int) -> None:
            buffer.extend(batches[i & 3])

        return add

    def sample(self) -> None:
        self.buffer.sample()

    def close(self) -> None:
        self._dir.cleanup()


LIBS = {"replaybuf": ReplaybufShared, "cpprb": CpprbShared, "torchrl": TorchrlShared}


# -- one measurement ---------------------------------------------------------------------------
def _write(add, start, stop, counter, rows: int, pace: float, cpus: set[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    start.wait()
    calls = 0
    if pace:  # an actor that also steps its environments: one add, then a pause
        while not stop.is_set():
            add(calls)
            calls += 1
            time.sleep(pace)
    while not stop.is_set():
        for i in range(CHECK_EVERY):
            add(i)
        calls += CHECK_EVERY
    with counter.get_lock():
        counter.value += calls * rows


def _sample_for(bench, seconds: float) -> float:
    """Learner batches per second over ``seconds``."""
    batches, elapsed = harness.for_seconds(bench.sample, seconds)
    return batches / elapsed


def rates(
    lib: str, writers: int, rows: int, staged: bool, seconds: float, pace: float = 0.0, pin: bool = False
) -> dict:
    context = multiprocessing.get_context("fork")
    bench = LIBS[lib](writers, rows, staged)
    start, stop, counter = context.Event(), context.Event(), context.Value("q", 0)
    cpus = os.sched_getaffinity(0)
    writer_cpus = (cpus - {min(cpus)}) or cpus if pin else None
    procs = [
        context.Process(target=_write, args=(bench.adder(w), start, stop, counter, rows, pace, writer_cpus))
        for w in range(writers)
    ]
    try:
        if pin:
            os.sched_setaffinity(0, {min(cpus)})
        for proc in procs:
            proc.start()
        time.sleep(0.2)  # let them reach start.wait()
        for _ in range(20):
            bench.sample()  # warm
        alone = _sample_for(bench, seconds / 2)  # the writers wait: the learner alone, just before
        start.set()
        batches, elapsed = harness.for_seconds(bench.sample, seconds)
        stop.set()
        for proc in procs:
            proc.join(30)
        codes = [proc.exitcode for proc in procs]
        if codes != [0] * writers:
            raise RuntimeError(f"{lib}: writer exit codes {codes}")
        with_writers = batches / elapsed
        return {"rows_per_s": counter.value / elapsed, "batches_per_s": with_writers, "vs_alone": with_writers / alone}
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        bench.close()
        os.sched_setaffinity(0, cpus)


def worker(lib: str, configs: list[tuple[int, int, bool]], reps: int, seconds: float, pace: float, pin: bool) -> None:
    """Print one JSON line per configuration: medians over ``reps`` repetitions."""
    for writers, rows, staged in configs:
        if staged and lib != "replaybuf":
            continue
        runs = [rates(lib, writers, rows, staged, seconds, pace, pin) for _ in range(reps)]
        out = {key: statistics.median(r[key] for r in runs) for key in ("rows_per_s", "batches_per_s", "vs_alone")}
        out.update(lib=lib, writers=writers, rows=rows, staged=staged, runs=runs)
        print(json.dumps(out), flush=True)


# -- the rate limiter demo (docs/many_writers.md) ----------------------------------------------
def _paced_writer(handle, pause: float) -> None:
    """One item per add, ``pause`` seconds apart, until the buffer is closed."""
    from replaybuf.errors import BufferClosedError

    pool = small_pool(4096)
    rows = [{k: v[i : i + 1] for k, v in pool.items()} for i in range(64)]
    i = 0
    try:
        while True:
            handle.add_batch(rows[i & 63])
            i += 1
            time.sleep(pause)
    except BufferClosedError:
        handle.close()


def rate_limit_demo(seconds: float, spi: float = 8.0, min_size: int = 100, error_buffer: float = 64.0) -> dict:
    """A writer ~20x faster than the learner needs, held to ``spi`` by ``SampleToInsertRatio``.

    The writer adds one item, then sleeps 0.15 ms; the learner samples 32 items
    every 30 ms (~1000 samples/s, i.e. ~130 inserts/s at spi=8). Returns the counts with and
    without the limiter over the same time.
    """
    from replaybuf import SampleToInsertRatio
    from replaybuf.shared import SharedReplayBuffer

    spec = ReplaybufShared.spec()
    context = multiprocessing.get_context("fork")
    out = {}
    for limited in (False, True):
        limiter = SampleToInsertRatio(spi, min_size, error_buffer) if limited else None
        with SharedReplayBuffer(spec, max_length=1 << 16, rate_limiter=limiter, context="fork") as buffer:
            child = context.Process(target=_paced_writer, args=(buffer.writer(0), 0.00015))
            child.start()
            while buffer.num_frames() < min_size:
                time.sleep(0.001)
            calls, elapsed = harness.for_seconds(lambda buffer=buffer: (buffer.get_next(32), time.sleep(0.03)), seconds)
            samples = 32 * calls
            state = buffer.rate_limiter.state() if limited else None
            observed = buffer.rate_limiter.observed_range() if limited else None
            inserted = buffer.num_frames()
        child.join(10)
        if limited:
            diff = state["inserts"] * spi - state["samples"]
            low, high = spi * min_size - error_buffer, spi * min_size + error_buffer
            out["limited"] = {
                "inserts": state["inserts"],
                "samples": state["samples"],
                "seconds": elapsed,
                "diff": diff,
                "range": [low, high],
                "inside": low <= diff <= high,
                "observed_range": list(observed),
                "samples_per_insert_after_min_size": state["samples"] / max(1, state["inserts"] - min_size),
            }
        else:
            out["free"] = {
                "inserts": inserted,
                "samples": samples,
                "seconds": elapsed,
                "inserts_per_s": inserted / elapsed,
                "samples_per_s": samples / elapsed,
            }
    out["writer_speedup"] = out["free"]["inserts_per_s"] / (out["free"]["samples_per_s"] / spi)
    return out


# -- the driver --------------------------------------------------------------------------------
def python_for(lib: str) -> str:
    if lib == "replaybuf":
        return sys.executable
    import venvs

    return str(venvs.ensure(lib))


def main(argv: list[str]) -> int:
    global CAPACITY
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libs", default="replaybuf,cpprb,torchrl")
    parser.add_argument("--writers", default="0,1,2,4")
    parser.add_argument("--rows", default="1,256")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--capacity", type=int, default=CAPACITY, help="rows of the ring")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--pace", type=float, default=0.0, help="seconds each writer sleeps after an add (0: as fast as it can)"
    )
    parser.add_argument("--pin", action="store_true", help="the learner alone on CPU 0, the writers on the other CPUs")
    parser.add_argument("--no-staged", action="store_true", help="skip replaybuf's staged rows")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rate-limit-demo", action="store_true", help="run the docs' rate limiter example")
    args = parser.parse_args(argv)
    if args.rate_limit_demo:
        print(json.dumps(rate_limit_demo(args.seconds), indent=1))
        return 0
    writer_counts = [int(w) for w in args.writers.split(",")]
    row_counts = [int(r) for r in args.rows.split(",")]
    configs = [(w, r, False) for r in row_counts for w in writer_counts if w or r == row_counts[0]]
    if not args.no_staged:
        configs += [(w, 1, True) for w in writer_counts if w]
    if args.worker:
        CAPACITY = args.capacity
        worker(args.worker, configs, args.reps, args.seconds, args.pace, args.pin)
        return 0
    results = []
    for lib in args.libs.split(","):
        cmd = [
            python_for(lib),
            __file__,
            "--worker",
            lib,
            "--writers",
            args.writers,
            "--rows",
            args.rows,
            "--reps",
            str(args.reps),
            "--seconds",
            str(args.seconds),
            "--pace",
            str(args.pace),
            "--capacity",
            str(args.capacity),
        ]
        cmd += ["--no-staged"] * args.no_staged + ["--pin"] * args.pin
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BENCH.parent / "src"), str(BENCH)]))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            print(f"{lib}: FAILED\n{proc.stderr[-3000:]}", file=sys.stderr)
            continue
        results += [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(report(results))
    return 0


def report(results: list[dict]) -> str:
    """A markdown table: rows/s and batches/s per library, with replaybuf's ratios.

    "learner vs alone" is the median over repetitions of (batches/s while the writers run) /
    (batches/s in the half interval just before, the writers started but waiting)."""
    by = {(r["lib"], r["writers"], r["rows"], r["staged"]): r for r in results}
    lines = [
        "| writers | rows/add | library | add rows/s (all writers) | learner batches/s | learner vs alone (same rep) |"
        " replaybuf add / this |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in sorted(by, key=lambda k: (k[3], k[2], k[1], list(LIBS).index(k[0]))):
        lib, writers, rows, staged = key
        r = by[key]
        vs = f"{r['vs_alone']:.2f}x"
        ours = by.get(("replaybuf", writers, rows, False))
        ratio = f"{ours['rows_per_s'] / r['rows_per_s']:.2f}x" if ours and writers and lib != "replaybuf" else ""
        label = f"{rows} (staged 256)" if staged else str(rows)
        rate = f"{r['rows_per_s'] / 1e6:.2f}M" if r["rows_per_s"] >= 1e5 else f"{r['rows_per_s'] / 1e3:.1f}k"
        lines.append(f"| {writers} | {label} | {lib} | {rate} | {r['batches_per_s']:,.0f} | {vs} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# -- the suite (python -m bench writers) ---------------------------------------------------------
def _workloads() -> list[Workload]:
    peers = ("cpprb", "torchrl")
    out = [Workload("learner_alone", "the learner alone: get_next(256)", "batches/s", peers=peers)]
    for rows in (1, 256):
        for writers in (1, 2, 4):
            title = f"{writers} writer(s) x {rows} rows per add"
            readme = (
                "many writer processes, 256 rows per add, one learner sampling 256"
                if (rows, writers) == (256, 2)
                else ""
            )
            out.append(
                Workload(
                    f"add_{writers}w_{rows}r",
                    f"{title}: rows added",
                    "rows/s",
                    peers=peers,
                    goal_vs="best peer" if rows == 256 else "",
                    goal_ratio=1.0,
                    readme=readme,
                )
            )
            out.append(
                Workload(f"learner_{writers}w_{rows}r", f"{title}: the learner meanwhile", "batches/s", peers=peers)
            )
    return out


WORKLOADS = _workloads()
JOBS = [
    Job("replaybuf", None, ("replaybuf",)),
    Job("cpprb", "cpprb", ("cpprb",)),
    Job("torchrl", "torchrl", ("torchrl",)),
]
#: per size: (writer counts, rows per add, repetitions, seconds per repetition, ring rows)
EFFORT = {
    "full": ((0, 1, 2, 4), (1, 256), 3, 1.0, CAPACITY),
    "quick": ((0, 1, 2, 4), (1, 256), 1, 0.3, CAPACITY),
    "tiny": ((0, 1), (1,), 1, 0.05, 1 << 14),
}


def measure(job: Job, size: str, keys: list[str]) -> None:
    """The job's library in every configuration of ``size``: its add rate and the learner's, as figures."""
    global CAPACITY
    writer_counts, row_counts, reps, seconds, CAPACITY = EFFORT[size]
    harness.emit(lib=job.name, version=f"{job.name} {metadata.version(job.name)}")
    by_key = {w.key: w for w in WORKLOADS}
    for rows in row_counts:
        for writers in writer_counts:
            if not writers and rows != row_counts[0]:
                continue  # the learner alone: once
            pair = (f"add_{writers}w_{rows}r", f"learner_{writers}w_{rows}r") if writers else ("", "learner_alone")
            if keys and not set(pair) & set(keys):
                continue
            runs = [rates(job.name, writers, rows, False, seconds, 0.0, False) for _ in range(reps)]
            vs_alone = statistics.median(r["vs_alone"] for r in runs)
            for key, field in zip(pair, ("rows_per_s", "batches_per_s"), strict=True):
                if key in by_key:
                    note = f"the learner at {vs_alone:.2f}x its rate alone" if writers else ""
                    harness.figure(by_key[key], job.name, statistics.median(r[field] for r in runs), note, reps=reps)
