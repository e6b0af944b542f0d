"""ShardedReplayBuffer on Ray: per-call costs through the shards beside the same calls in-process.

Workloads per shard count (and with a rate limiter whose range never blocks, so that what
is measured is its round trips): add rows/s through pipelined writers driven from this
process (one writer per shard, 64 rows per add) and through writers in their own Ray
actors; get_next(256)/s, synchronous and through ``as_dataset`` (4 fan-outs in flight). The
reference, ``in-process``, is the same calls on a ``UniformReplayBuffer`` in this process
(the fan-out's overhead). Transitions are CartPole-sized (observation float32[4] twice,
action, reward, discount). One local Ray, loopback. On a real cluster:

    PYTHONPATH=src python bench/suites/ray_shards.py --address auto --spread --shards 1,2,4,8
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from harness import Timing, Workload  # noqa: E402
from suites import Job  # noqa: E402

ROWS, SAMPLE, MAX_LENGTH = 64, 256, 2_000
KINDS = {
    "add": ("add, writers in this process", "rows/s"),
    "add_actors": ("add, writers in Ray actors", "rows/s"),
    "get_next": (f"get_next({SAMPLE})", "batches/s"),
    "dataset": (f"as_dataset({SAMPLE}), 4 in flight", "batches/s"),
}
#: per size: shard counts, adds per writer per timing, the timing of the per-call rows
EFFORT = {
    "full": ((1, 2, 4), 400, Timing(5, 0.5, 0.1)),
    "quick": ((1, 2), 50, Timing(3, 0.2, 0.05)),
    "tiny": ((1,), 5, harness.TIMINGS["tiny"]),
}


def _key(kind: str, shards: int, limited: bool) -> str:
    return f"{kind}_{shards}s" + ("_limited" * limited)


WORKLOADS = [
    Workload(
        _key(kind, shards, limited),
        f"{shards} shard(s){' + limiter' * limited}: {title}",
        unit,
        per_call=ROWS * shards if kind.startswith("add") else 1,
        references=("in-process",) if kind in ("add", "get_next") else (),
    )
    for shards in (1, 2, 4)
    for limited in (False, True)
    for kind, (title, unit) in KINDS.items()
]
JOBS = [Job("replaybuf", None, ("replaybuf", "in-process"))]


def _spec() -> dict:
    from replaybuf import ArraySpec

    return {
        "observation": ArraySpec((4,), np.float32),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "discount": ArraySpec((), np.float32),
        "next_observation": ArraySpec((4,), np.float32),
    }


def batch(rows: int, rng: np.random.Generator) -> dict:
    return {
        "observation": rng.random((rows, 4), np.float32),
        "action": rng.integers(0, 2, rows),
        "reward": np.ones(rows, np.float32),
        "discount": np.ones(rows, np.float32),
        "next_observation": rng.random((rows, 4), np.float32),
    }


def _writer_actor(spread: bool):
    import ray

    @ray.remote(num_cpus=0)
    class WriterActor:
        def __init__(self, writer):
            self.writer = writer
            self.items = batch(writer.batch_size, np.random.default_rng(0))

        def run(self, adds: int) -> None:
            for _ in range(adds):
                self.writer.add_batch(self.items)
            self.writer.flush()

    return WriterActor.options(scheduling_strategy="SPREAD") if spread else WriterActor


def _rows_per_s(run, rows: int) -> float:
    return rows / harness.seconds(lambda _: run(), 1)


def shards_figures(shards: int, limited: bool, adds: int, timing: Timing, spread: bool, in_process: dict) -> None:
    """Emit the four workloads of ``shards`` shards (``limited``: with a limiter that never blocks)."""
    import ray

    import replaybuf
    from replaybuf.ray import ShardedReplayBuffer

    limiter = replaybuf.SampleToInsertRatio(1.0, 1, (-1e12, 1e12)) if limited else None
    buffer = ShardedReplayBuffer(
        _spec(),
        shards=shards,
        batch_size=ROWS * shards,
        max_length=MAX_LENGTH,
        seed=0,
        rate_limiter=limiter,
        max_in_flight=8,
        actor_options={"scheduling_strategy": "SPREAD"} if spread else None,
    )
    try:
        writers, items = [buffer.writer(k) for k in range(shards)], batch(ROWS, np.random.default_rng(0))

        def drive(n: int) -> None:
            for _ in range(n):
                for w in writers:
                    w.add_batch(items)
            for w in writers:
                w.flush()

        drive(4)  # actors started, first pages touched
        figures = {"add": _rows_per_s(lambda: drive(adds), adds * shards * ROWS)}
        actors = [_writer_actor(spread).remote(buffer.writer(k)) for k in range(shards)]
        ray.get([a.run.remote(4) for a in actors])
        figures["add_actors"] = _rows_per_s(lambda: ray.get([a.run.remote(adds) for a in actors]), adds * shards * ROWS)
        for kind, value in figures.items():
            harness.figure(_workload(kind, shards, limited), "replaybuf", value)
        buffer.get_next(SAMPLE)
        iterator = iter(buffer.as_dataset(SAMPLE, num_parallel_calls=4))
        runs = {"replaybuf": harness.repeat(buffer.get_next, SAMPLE)}
        harness.measure(_workload("get_next", shards, limited), dict(runs, **in_process), timing)
        harness.measure(_workload("dataset", shards, limited), {"replaybuf": harness.repeat(next, iterator)}, timing)
        iterator.close()
    finally:
        buffer.shutdown()


def _workload(kind: str, shards: int, limited: bool) -> Workload:
    return next(w for w in WORKLOADS if w.key == _key(kind, shards, limited))


def in_process_runs(adds: int) -> tuple[dict, float]:
    """The reference's get_next run, and its add rows/s."""
    import replaybuf

    buffer = replaybuf.UniformReplayBuffer(_spec(), batch_size=ROWS, max_length=MAX_LENGTH, seed=0)
    items = batch(ROWS, np.random.default_rng(0))

    def add(n: int) -> None:
        for _ in range(n):
            buffer.add_batch(items)

    add(8)
    return {"in-process": harness.repeat(buffer.get_next, SAMPLE)}, _rows_per_s(lambda: add(adds), adds * ROWS)


def run(shard_counts, adds: int, timing: Timing, spread: bool = False, address: str | None = None) -> None:
    """Every workload of ``shard_counts`` on one Ray (started here, or the cluster at ``address``)."""
    import ray

    harness.emit(lib="replaybuf", version=f"replaybuf {metadata.version('replaybuf')}, ray {ray.__version__}")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        in_process, add_rate = in_process_runs(adds)
        for shards in shard_counts:
            for limited in (False, True):
                harness.figure(_workload("add", shards, limited), "in-process", add_rate)
                shards_figures(shards, limited, adds, timing, spread, in_process)
    finally:
        ray.shutdown()


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This suite at ``size`` (every workload: one Ray start serves them all)."""
    shard_counts, adds, timing = EFFORT[size]
    run(shard_counts, adds, timing)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: start one here)")
    parser.add_argument("--spread", action="store_true", help="spread shards and writer actors over the nodes")
    args = parser.parse_args(argv)
    _, adds, timing = EFFORT["full"]
    run([int(n) for n in args.shards.split(",")], adds, timing, args.spread, args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
