"""The JAX rows of issue 33's GPU table: the ``jax_core`` cases (bench/suites/jax_core.py) at the
GPU table's capacity, on the accelerator JAX sees (the CPU here; the platform is in every
figure's note), beside flashbax where it is importable.

Each case is one jitted, donated ``lax.scan`` per repetition (after one that compiles);
figures are scanned iterations per second. The prioritized rows are timed beside
``uniform pairs``, our uniform sample of 256 pairs (J2b), because issue 33 bounds their
ratio: a prioritized sample + update at most 2x the time of a uniform sample (>= 0.5x its rate).

    PYTHONPATH=src .venv/bin/python -m bench jax_gpu [--here]
"""

from __future__ import annotations

from importlib.metadata import version

import harness
from harness import Workload
from suites import Job

UNIFORM, FLASHBAX = "uniform pairs", "flashbax"
#: jax_core case -> its row here; flashbax's prioritized buffer is not in this table
ROWS = {
    "j1": "J1 add 256",
    "j2": "J2 sample 256",
    "j2b": "J2b sample 256 pairs",
    "j5": "J5 add 256 + sample 256 pairs",
    "j3": "J3 prioritized sample 256 + update",
    "j3c": "J3c prioritized train step (add + sample + update)",
}
PRIORITIZED = ("j3", "j3c")
#: per size: (capacity, iterations per scan, repetitions)
SIZES = {"full": (262144, 50, 7), "quick": (65536, 50, 5), "tiny": (4096, 5, 2)}
WORKLOADS = [
    Workload(f"jg_{case}", title, "steps/s", SIZES["full"][1], references=(UNIFORM,), goal_vs=UNIFORM, goal_ratio=0.5)
    if case in PRIORITIZED
    else Workload(f"jg_{case}", title, "steps/s", SIZES["full"][1], peers=(FLASHBAX,))
    for case, title in ROWS.items()
]
JOBS = [Job("jax", "jax", ("replaybuf", UNIFORM, FLASHBAX), device=True)]


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Our cases and flashbax's (where importable) at ``size``, one scan a repetition."""
    import dataclasses

    import jax

    import replaybuf
    from suites.jax_core import flashbax_cases, ours_cases, pool

    capacity, steps, reps = SIZES[size]
    data = pool(4 if size == "tiny" else 64)
    where = f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind})"
    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}, jax {jax.__version__} on {where}")
    ours = ours_cases(capacity, steps, data)
    try:
        theirs = flashbax_cases(capacity, steps, data)
        harness.emit(lib=FLASHBAX, version=f"flashbax {version('flashbax')}, jax {jax.__version__}")
    except ImportError as exc:
        theirs = {}
        harness.missing([f"jg_{case}" for case in ROWS if case not in PRIORITIZED], FLASHBAX, f"not installed ({exc})")
    notes = dict.fromkeys(job.labels, where)
    for workload in WORKLOADS:
        if keys and workload.key not in keys:
            continue
        case = workload.key.removeprefix("jg_")
        runs = {"replaybuf": ours[case]().run}
        if case in PRIORITIZED:
            runs[UNIFORM] = ours["j2b"]().run
        elif case in theirs:
            runs[FLASHBAX] = theirs[case]().run
        workload = dataclasses.replace(workload, per_call=steps)
        harness.measure(workload, runs, harness.Timing(reps, 0.0, 0.0), notes=notes)
