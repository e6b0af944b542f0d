"""The one timing harness of bench/: workloads, interleaved repetitions, medians, the machine's load.

NumPy and the standard library only: it is imported inside every peer's own virtual
environment (bench/.venvs/) as well as the main one. A suite declares each thing it times as
a ``Workload``; ``measure`` times every implementation of one workload in this process,
repetition by repetition in turn (A B C A B C ...), so load from other processes on a
shared machine falls on all of them alike, and emits one record per implementation: the
median over the repetitions, with the machine's load while they ran. A record is one line
``BENCH {json}`` on stdout, which the runner (bench/runner.py) collects from its
subprocesses into the results file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable

#: a record line on stdout starts with this
PREFIX = "BENCH "


@dataclasses.dataclass(frozen=True)
class Workload:
    """One timed operation of a suite, declared once.

    ``per_call`` is what one call moves in ``unit`` (items, batches, MB); ``references`` are
    the labels of plain implementations of the same work timed in the same process (the
    first is the main one); ``peers`` the other libraries it runs beside. The goal is
    ``replaybuf / goal_vs >= goal_ratio``, goal_vs a label or "best peer".
    """

    key: str
    title: str
    unit: str
    per_call: float = 1.0
    references: tuple[str, ...] = ()
    peers: tuple[str, ...] = ()
    goal_vs: str = ""
    goal_ratio: float = 0.0
    higher_is_better: bool = True
    readme: str = ""  # its wording in the README's table and plot ("": the suite's name and the title)


@dataclasses.dataclass(frozen=True)
class Timing:
    """How hard to time: repetitions, seconds per repetition, warm-up seconds.

    ``rep_seconds=0``: one call per repetition, after one untimed call (for calls that last
    seconds, such as loading a dataset or saving a checkpoint)."""

    reps: int = 7
    rep_seconds: float = 0.25
    warmup_seconds: float = 0.1


#: the timing of each size a suite runs at: ``full`` (make bench), ``quick``, ``tiny`` (the smoke tests)
TIMINGS = {"full": Timing(), "quick": Timing(3, 0.08, 0.03), "tiny": Timing(2, 0.005, 0.0)}


def load() -> tuple[float, int]:
    """The machine's 1-minute load average and its runnable threads right now (Linux; (nan, -1) elsewhere)."""
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
        return float(fields[0]), int(fields[3].split("/")[0])
    except OSError:
        return float("nan"), -1


def emit(**record: object) -> None:
    """Print one record for the runner."""
    print(PREFIX + json.dumps(record), flush=True)


def records_in(text: str) -> list[dict]:
    """The records a process printed (the other lines are its own output)."""
    return [json.loads(line[len(PREFIX) :]) for line in text.splitlines() if line.startswith(PREFIX)]


def seconds(run: Callable[[int], object], n: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per operation of one ``run(n)`` on ``clock``."""
    start = clock()
    run(n)
    return (clock() - start) / n


def for_seconds(call: Callable[[], object], seconds_: float) -> tuple[int, float]:
    """(calls made, seconds elapsed) calling ``call()`` over and over for about ``seconds_``: for a
    rate that must span a fixed time, such as a learner's beside concurrent writer processes."""
    calls, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds_:
        call()
        calls += 1
    return calls, time.perf_counter() - began


def calibrate(run: Callable[[int], object], timing: Timing) -> int:
    """The n for which one repetition ``run(n)`` (n operations) lasts about ``timing.rep_seconds``."""
    run(1)
    if timing.rep_seconds <= 0:
        return 1
    n = 1
    while True:
        spent = seconds(run, n) * n
        if spent >= timing.rep_seconds / 4 or n >= 1 << 22:
            break
        n *= 2
    return max(1, int(n * timing.rep_seconds / max(spent, 1e-9)))


def repeat(call: Callable[..., object], *args: object) -> Callable[[int], None]:
    """A ``run(n)`` that makes the same call n times (``call(*args)``)."""

    def run(n: int) -> None:
        for _ in range(n):
            call(*args)

    return run


def interleave(
    runs: dict[str, Callable[[int], object]],
    timing: Timing,
    clock: Callable[[], float] = time.perf_counter,
    before: dict[str, Callable[[], object]] | None = None,
    rotate: bool = False,
) -> tuple[dict[str, list[float] | Exception], list[int]]:
    """Seconds per operation of every repetition of every ``run(n)``, taken in turn, and the
    runnable threads seen at each round. A run that raises keeps its exception instead of
    times and leaves the others going. ``clock`` may be ``time.thread_time`` (CPU time).
    ``before[label]()`` runs untimed before each of that label's repetitions (e.g. evicting
    its files from the page cache); ``rotate`` starts each round one label later, so what a
    run leaves behind (disk write-back, freed blocks) falls on a different one each round."""
    sizes: dict[str, int] = {}
    times: dict[str, list[float] | Exception] = {}
    for label, run in runs.items():
        try:
            sizes[label] = calibrate(run, timing)
            times[label] = []
        except Exception as exc:  # one failing implementation must not stop the others
            times[label] = exc
    for label, n in sizes.items():
        deadline = time.perf_counter() + timing.warmup_seconds
        while time.perf_counter() < deadline:
            runs[label](max(1, n // 4))
    labels, runnable = list(sizes), []
    for round_ in range(timing.reps):
        runnable.append(load()[1])
        shift = round_ % len(labels) if rotate and labels else 0
        for label in labels[shift:] + labels[:shift]:
            if isinstance(times[label], Exception):
                continue
            try:
                if before and label in before:
                    before[label]()
                times[label].append(seconds(runs[label], sizes[label], clock))
            except Exception as exc:
                times[label] = exc
    return times, runnable


def medians(
    runs: dict[str, Callable[[int], object]], timing: Timing, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Median seconds per operation of each ``run(n)``, timed by ``interleave``, for a script that
    prints its own table; a run that raised raises here (a table has no cell for a reason)."""
    times, _ = interleave(runs, timing, clock)
    for got in times.values():
        if isinstance(got, Exception):
            raise got
    return {label: statistics.median(got) for label, got in times.items()}


def measure(
    workload: Workload,
    runs: dict[str, Callable[[int], object]],
    timing: Timing,
    notes: dict[str, str] | None = None,
    before: dict[str, Callable[[], object]] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **extra: object,
) -> list[dict]:
    """Time ``runs`` (label -> ``run(n)``) interleaved and emit each one's figure in ``workload.unit``:
    ``per_call`` over the median seconds per call, with the load beside it (``before``, ``clock``:
    see ``interleave``)."""
    times, runnable = interleave(runs, timing, clock, before)
    load1 = load()[0]
    out = []
    for label, got in times.items():
        if isinstance(got, Exception):
            record = {"workload": workload.key, "lib": label, "missing": f"{type(got).__name__}: {got}"[:300]}
        else:
            record = {
                "workload": workload.key,
                "lib": label,
                "value": workload.per_call / statistics.median(got),
                "reps": len(got),
                "spread": round(max(got) / min(got), 3),
                "load1": load1,
                "runnable": max(runnable),
            }
            if notes and notes.get(label):
                record["note"] = notes[label]
        record.update(extra)
        emit(**record)
        out.append(record)
    return out


def figure(workload: Workload, label: str, value: float, note: str = "", **extra: object) -> dict:
    """Emit a figure measured otherwise (e.g. RSS per item), with the load beside it."""
    load1, runnable = load()
    record = {"workload": workload.key, "lib": label, "value": value, "load1": load1, "runnable": runnable, **extra}
    if note:
        record["note"] = note
    emit(**record)
    return record


def missing(workload_keys: Iterable[str], label: str, reason: str) -> None:
    """Emit that ``label`` has no figure for these workloads, and why."""
    for key in workload_keys:
        emit(workload=key, lib=label, missing=reason)


def machine() -> str:
    """CPU model, cores, OS and Python, in one line."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )
