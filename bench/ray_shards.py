"""Per-call costs of ShardedReplayBuffer on this machine (one local Ray, loopback).

    .venv/bin/python bench/ray_shards.py            # 1, 2, 4 shards, with and without a limiter
    .venv/bin/python bench/ray_shards.py --quick    # fewer calls (a smoke run)
    python bench/ray_shards.py --address auto --spread --shards 1,2,4,8   # on a real cluster

Rows: add rows/s through pipelined writers driven from this process (one writer per shard,
``rows`` rows per add) and through writers in their own Ray actors (one process each);
get_next/s of ``sample_batch_size`` transitions, synchronous and through ``as_dataset``
(fan-outs in flight); the same calls on an in-process ``UniformReplayBuffer`` beside them
(the fan-out overhead). Transitions are CartPole-sized (observation float32[4] twice,
action, reward, discount). Prints a Markdown table; ``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import ray

import replaybuf
from replaybuf import ArraySpec
from replaybuf.ray import ShardedReplayBuffer

SPEC = {
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


@ray.remote(num_cpus=0)
class WriterActor:
    def __init__(self, writer):
        self.writer = writer
        self.items = batch(writer.batch_size, np.random.default_rng(0))

    def run(self, adds: int) -> float:
        start = time.perf_counter()
        for _ in range(adds):
            self.writer.add_batch(self.items)
        self.writer.flush()
        return time.perf_counter() - start


def timed(call, repeats: int) -> float:
    """Seconds per call (median of 3 rounds of ``repeats`` calls)."""
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        rounds.append((time.perf_counter() - start) / repeats)
    return float(np.median(rounds))


def limiter(on: bool):
    # a ratio wide enough never to block: what is measured is the limiter's round trips
    return replaybuf.SampleToInsertRatio(1.0, 1, (-1e12, 1e12)) if on else None


def measure(shards: int, with_limiter: bool, args) -> dict:
    rows, rng = args.rows, np.random.default_rng(0)
    buffer = ShardedReplayBuffer(
        SPEC,
        shards=shards,
        batch_size=rows * shards,
        max_length=args.max_length,
        seed=0,
        rate_limiter=limiter(with_limiter),
        max_in_flight=8,
        actor_options={"scheduling_strategy": "SPREAD"} if args.spread else None,
    )
    writers = [buffer.writer(k) for k in range(shards)]
    items = batch(rows, rng)
    for w in writers:  # warm up (actors started, first pages touched)
        for _ in range(4):
            w.add_batch(items)
        w.flush()
    start = time.perf_counter()
    for _ in range(args.adds):
        for w in writers:
            w.add_batch(items)
    for w in writers:
        w.flush()
    driver_rows = args.adds * shards * rows / (time.perf_counter() - start)
    spread = {"scheduling_strategy": "SPREAD"} if args.spread else {}
    actors = [WriterActor.options(**spread).remote(buffer.writer(k)) for k in range(shards)]
    ray.get([a.run.remote(4) for a in actors])
    start = time.perf_counter()
    ray.get([a.run.remote(args.adds) for a in actors])
    actor_rows = args.adds * shards * rows / (time.perf_counter() - start)
    buffer.get_next(args.sample)
    get_next = timed(lambda: buffer.get_next(args.sample), args.samples)
    iterator = iter(buffer.as_dataset(args.sample, num_parallel_calls=4))
    dataset = timed(lambda: next(iterator), args.samples)
    iterator.close()
    buffer.shutdown()
    return {
        "shards": shards,
        "limiter": with_limiter,
        "add_rows_per_s_driver": driver_rows,
        "add_rows_per_s_actors": actor_rows,
        "get_next_per_s": 1 / get_next,
        "dataset_per_s": 1 / dataset,
    }


def in_process(args) -> dict:
    rng = np.random.default_rng(0)
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=args.rows, max_length=args.max_length, seed=0)
    items = batch(args.rows, rng)
    for _ in range(8):
        buffer.add_batch(items)
    add = timed(lambda: buffer.add_batch(items), args.adds)
    get_next = timed(lambda: buffer.get_next(args.sample), args.samples)
    return {"add_rows_per_s": args.rows / add, "get_next_per_s": 1 / get_next}


def round_trip(args) -> float:
    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self) -> int:
            return 0

    echo = Echo.remote()
    ray.get(echo.ping.remote())
    return timed(lambda: ray.get(echo.ping.remote()), args.samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--rows", type=int, default=64, help="rows per add (streams per shard)")
    parser.add_argument("--sample", type=int, default=256, help="sample_batch_size")
    parser.add_argument("--max-length", type=int, default=2_000)
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--json", default=None)
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: start one here)")
    parser.add_argument("--spread", action="store_true", help="spread shards and writer actors over the nodes")
    args = parser.parse_args()
    args.adds, args.samples = (50, 30) if args.quick else (400, 200)
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        rtt = round_trip(args)
        local = in_process(args)
        rows = [measure(int(n), lim, args) for n in args.shards.split(",") for lim in (False, True)]
    finally:
        ray.shutdown()
    print(f"machine: {os.cpu_count()} cores; Ray {ray.__version__}; empty actor round trip {rtt * 1e3:.2f} ms")
    print(
        f"in-process UniformReplayBuffer: add {local['add_rows_per_s']:,.0f} rows/s ({args.rows} rows per add), "
        f"get_next({args.sample}) {local['get_next_per_s']:,.0f}/s"
    )
    print()
    print(
        "| shards | limiter | add rows/s (writers in this process) | add rows/s (writer actors) "
        f"| get_next({args.sample})/s | as_dataset/s (4 in flight) | fan-out vs in-process get_next |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['shards']} | {'yes' if r['limiter'] else 'no'} | {r['add_rows_per_s_driver']:,.0f} "
            f"| {r['add_rows_per_s_actors']:,.0f} | {r['get_next_per_s']:,.0f} | {r['dataset_per_s']:,.0f} "
            f"| {local['get_next_per_s'] / r['get_next_per_s']:.0f}x slower |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"round_trip_s": rtt, "in_process": local, "rows": rows, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
