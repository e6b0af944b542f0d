"""Micro-benchmark of replaybuf.tf beside TF-Agents and a plain tf.Variable of the same bytes.

Two rows, shaped as bench/libs/tf_common.py measures them (the W1 transition: obs f32[4],
action i64, reward f32, done bool, next_obs f32[4]):

- add: 64 ``add_batch`` calls of batch 1 in a loop inside one tf.function, items/s;
- dataset: ``as_dataset(256, num_steps=2)`` iterated eagerly with ``next()``, batches/s,
  as the tutorial writes it (no extra arguments) and as TF-Agents users tune it
  (``num_parallel_calls=3`` and ``.prefetch(3)``).

"plain" is the floor: the same slice-assigns and gathers on bare tf.Variables with no
checks, no lock and no counter logic. Run each implementation in its own process:

    .venv/bin/python bench/tf_micro.py                       # replaybuf and plain
    bench/.venvs/tfagents/bin/python bench/tf_micro.py --impl tf-agents
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ADDS_PER_CALL = 64
SAMPLE_BATCH = 256
STREAMS = 64


def spec():
    return {
        "obs": tf.TensorSpec([4], tf.float32, "obs"),
        "action": tf.TensorSpec([], tf.int64, "action"),
        "reward": tf.TensorSpec([], tf.float32, "reward"),
        "done": tf.TensorSpec([], tf.bool, "done"),
        "next_obs": tf.TensorSpec([4], tf.float32, "next_obs"),
    }


def pool(n):
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((n, 4), dtype=np.float32),
        "action": rng.integers(0, 2, n, dtype=np.int64),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
        "next_obs": rng.standard_normal((n, 4), dtype=np.float32),
    }


class PlainVariables:
    """Bare tf.Variables with the buffer's layout: the cost of the bytes and the ops alone."""

    def __init__(self, data_spec, batch_size, max_length):
        self.batch_size, self.capacity = batch_size, batch_size * max_length
        self.keys = sorted(data_spec)
        self.vars = [
            tf.Variable(
                tf.zeros([self.capacity] + data_spec[k].shape.as_list(), data_spec[k].dtype)
            )
            for k in self.keys
        ]
        self.steps = tf.Variable(0, dtype=tf.int64)

    def add_batch(self, items):
        start = (self.steps % (self.capacity // self.batch_size)) * self.batch_size
        slots = start + tf.range(self.batch_size, dtype=tf.int64)
        for var, key in zip(self.vars, self.keys, strict=True):
            var.scatter_update(tf.IndexedSlices(items[key], slots))
        self.steps.assign_add(1)

    def as_dataset(self, sample_batch_size, num_steps, num_parallel_calls=None):
        def sample(_):
            high = tf.minimum(self.steps, self.capacity // self.batch_size) * self.batch_size
            first = tf.random.uniform(
                [sample_batch_size], 0, high - self.batch_size, dtype=tf.int64
            )
            slots = (
                first[:, None] + tf.range(num_steps, dtype=tf.int64) * self.batch_size
            ) % self.capacity
            return {
                k: tf.gather(v, slots) for k, v in zip(self.keys, self.vars, strict=True)
            }, slots

        return (
            tf.data.Dataset.from_tensors(0)
            .repeat()
            .map(sample, num_parallel_calls=num_parallel_calls)
        )


class Floor:
    """No storage at all: the add loop only slices its items, the dataset maps to zeros.

    What the loop, the tf.function call, tf.data and the eager ``next()`` cost by themselves.
    """

    def __init__(self, data_spec, batch_size, max_length):
        self.data_spec = data_spec

    def add_batch(self, items):
        return None

    def as_dataset(self, sample_batch_size, num_steps, num_parallel_calls=None):
        shapes = {
            k: tf.zeros([sample_batch_size, num_steps] + s.shape.as_list(), s.dtype)
            for k, s in self.data_spec.items()
        }
        return (
            tf.data.Dataset.from_tensors(0)
            .repeat()
            .map(lambda _: shapes, num_parallel_calls=num_parallel_calls)
        )


def make(impl, data_spec, batch_size, max_length):
    if impl == "replaybuf":
        from replaybuf.tf import TFUniformReplayBuffer

        return TFUniformReplayBuffer(data_spec, batch_size, max_length)
    if impl == "tf-agents":
        from tf_agents.replay_buffers import tf_uniform_replay_buffer

        return tf_uniform_replay_buffer.TFUniformReplayBuffer(data_spec, batch_size, max_length)
    if impl == "floor":
        return Floor(data_spec, batch_size, max_length)
    return PlainVariables(data_spec, batch_size, max_length)


def timed(run, seconds):
    """Calls of ``run`` per second over a stretch of about ``seconds``."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        calls += 1
    return calls / (time.perf_counter() - start)


def setup_add(impl, capacity):
    buffer = make(impl, spec(), 1, capacity)
    items = {k: tf.constant(v) for k, v in pool(ADDS_PER_CALL).items()}

    @tf.function
    def add_many(items):
        for i in tf.range(ADDS_PER_CALL):
            buffer.add_batch({k: v[i : i + 1] for k, v in items.items()})

    return lambda: add_many(items)


def setup_dataset(impl, stored, tuned):
    buffer = make(impl, spec(), STREAMS, 2 * stored // STREAMS)

    @tf.function
    def add(items):
        buffer.add_batch(items)  # TF-Agents returns an Operation, which a tf.function cannot return

    data = pool(stored)
    if impl != "floor":
        for start in range(0, stored - STREAMS + 1, STREAMS):
            add({k: tf.constant(v[start : start + STREAMS]) for k, v in data.items()})
    if tuned:
        dataset = buffer.as_dataset(SAMPLE_BATCH, num_steps=2, num_parallel_calls=3).prefetch(3)
    else:
        dataset = buffer.as_dataset(SAMPLE_BATCH, num_steps=2)
    iterator = iter(dataset)
    return lambda: next(iterator)


ROWS = {
    "add items/s": (lambda impl, size: setup_add(impl, size[0]), ADDS_PER_CALL),
    "dataset b/s": (lambda impl, size: setup_dataset(impl, size[1], False), 1),
    "tuned b/s": (lambda impl, size: setup_dataset(impl, size[1], True), 1),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--impl", action="append", choices=["replaybuf", "plain", "floor", "tf-agents"]
    )
    parser.add_argument("--quick", action="store_true", help="smaller buffers, shorter timing")
    parser.add_argument("--only", choices=["add", "dataset"], help="run one row")
    args = parser.parse_args(argv)
    impls = args.impl or ["replaybuf", "plain", "floor"]
    size, seconds, reps = (
        ((100_000, 20_000), 0.3, 5) if args.quick else ((1_000_000, 200_000), 0.5, 9)
    )
    rows = {name: row for name, row in ROWS.items() if not args.only or name.startswith(args.only)}
    print(
        f"TensorFlow {tf.__version__}, NumPy {np.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs; median of {reps} interleaved rounds"
    )
    print(f"{'implementation':<12}" + "".join(f"{name:>14}" for name in rows))
    results = {impl: {} for impl in impls}
    for name, (setup, per_call) in rows.items():
        runs = {impl: setup(impl, size) for impl in impls}
        for run in runs.values():
            run(), run()  # warm up: trace, first pages
        samples = {impl: [] for impl in impls}
        for _ in range(reps):  # interleaved, so load on a shared machine hits every impl alike
            for impl, run in runs.items():
                samples[impl].append(timed(run, seconds) * per_call)
        for impl in impls:
            results[impl][name] = statistics.median(samples[impl])
    for impl in impls:
        print(
            f"{impl:<12}" + "".join(f"{results[impl][name]:>14,.0f}" for name in rows), flush=True
        )


if __name__ == "__main__":
    main()
