"""Study: What bounds the TF rows, TF-Agents in the same process on TF 2.15, and the loop's floor?
Answer: docs/tensorflow.md, "What bounds each row".

Micro-benchmark of replaybuf.tf beside TF-Agents, in ONE process, on the rows of the peers / tf suites (bench/suites/).

The rows are bench/libs/tf_common.py's (the W1 transition: obs f32[4], action i64, reward
f32, done bool, next_obs f32[4]):

- add: 64 ``add_batch`` calls of batch 1 in a tf.while_loop inside one tf.function, items/s;
- dataset: ``next()`` on ``as_dataset(256, num_steps=2)`` as the tutorial writes it, batches/s;
- tuned: the same with ``num_parallel_calls=3`` and ``.prefetch(3)`` (TF-Agents' DQN tutorial);
- add+next: the DQN loop, one add of a step of all streams (a tf.function) then one ``next()``
  on the dataset row's dataset, rounds/s;
- call add: one ``tf.function`` call per ``add_batch`` of batch 1 (the item its argument), adds/s;
- eager add: ``add_batch`` of one NumPy item called eagerly, once per Python call, adds/s.

Implementations: replaybuf; tf-agents (when ``tf_agents`` imports: pass ``--tf-agents-site``
to borrow the bench environment's packages, which needs the same TensorFlow, 2.15); "plain",
bare tf.Variables with the same scatters and gathers and no checks; and "floor", no storage
at all (the loop fetches its items and drops them; the dataset maps to zeros): what the
loop, the tf.function call, tf.data and ``next()`` cost by themselves. "unbatch-floor"
(dataset rows only, ask for it with ``--impl``) is replaybuf's default dataset pipeline
with no storage: its whole element, zeros, 8 at a time through ``unbatch``, no prefetch. Repetitions are
interleaved, so load on the shared machine falls on every implementation alike:

    .venv-tf215/bin/python bench/studies/tf_micro.py \\
        --tf-agents-site bench/.venvs/tfagents/lib/python3.11/site-packages
    .venv/bin/python bench/studies/tf_micro.py --quick --impl replaybuf --impl floor

``--draw-ahead K`` (repeatable) adds replaybuf built with ``dataset_draw_ahead=K`` as
implementation ``replaybuf-kK``; ``--only dataset`` keeps to the dataset row.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from common import SIZES  # noqa: E402
from libs import tf_common  # noqa: E402
from replaybuf.tf.iteration import fast_iteration  # noqa: E402


class PlainVariables:
    """Bare tf.Variables with the buffer's layout: the cost of the bytes and the ops alone."""

    def __init__(self, data_spec, batch_size, max_length):
        self.batch_size, self.max_length = batch_size, max_length
        self.keys = sorted(data_spec)
        self.vars = [
            tf.Variable(tf.zeros([batch_size * max_length] + data_spec[k].shape.as_list(), data_spec[k].dtype))
            for k in self.keys
        ]
        self.steps = tf.Variable(0, dtype=tf.int64)

    def add_batch(self, items):
        start = (self.steps % self.max_length) * self.batch_size
        slots = start + tf.range(self.batch_size, dtype=tf.int64)
        for var, key in zip(self.vars, self.keys, strict=True):
            var.scatter_update(tf.IndexedSlices(items[key], slots))
        self.steps.assign_add(1)

    def as_dataset(self, sample_batch_size, num_steps, num_parallel_calls=None):
        def sample(_):
            high = tf.minimum(self.steps, self.max_length) * self.batch_size
            first = tf.random.uniform([sample_batch_size], 0, high - self.batch_size, dtype=tf.int64)
            slots = first[:, None] + tf.range(num_steps, dtype=tf.int64) * self.batch_size
            return {k: tf.gather(v, slots) for k, v in zip(self.keys, self.vars, strict=True)}

        dataset = tf.data.Dataset.from_tensors(0).repeat()
        return dataset.map(sample, num_parallel_calls=num_parallel_calls)


class Floor:
    """No storage: adds do nothing, the dataset maps to zeros of the element's shapes."""

    def __init__(self, data_spec, batch_size, max_length):
        self.data_spec = data_spec

    def add_batch(self, items):
        return None

    def as_dataset(self, sample_batch_size, num_steps, num_parallel_calls=None):
        zeros = {
            k: tf.zeros([sample_batch_size, num_steps] + s.shape.as_list(), s.dtype) for k, s in self.data_spec.items()
        }
        dataset = tf.data.Dataset.from_tensors(0).repeat()
        return fast_iteration(dataset.map(lambda _: zeros, num_parallel_calls=num_parallel_calls))


class UnbatchFloor(Floor):
    """replaybuf's default pipeline with no storage: zeros of its whole element (items, ids,
    probabilities) made 8 at a time, handed out by ``unbatch``, no prefetch."""

    def as_dataset(self, sample_batch_size, num_steps, num_parallel_calls=None):
        lead = [8, sample_batch_size, num_steps]
        items = {k: tf.zeros(lead + s.shape.as_list(), s.dtype) for k, s in self.data_spec.items()}
        info = (tf.zeros(lead, tf.int64), tf.zeros(lead[:2], tf.float32))
        dataset = tf.data.Dataset.from_tensors(0).repeat()
        dataset = dataset.map(lambda _: (items, info), num_parallel_calls=num_parallel_calls).unbatch()
        if num_parallel_calls is not None:
            return fast_iteration(dataset)
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return fast_iteration(dataset.with_options(options))


def maker(impl):
    if impl.startswith("replaybuf"):
        from replaybuf.tf import TFUniformReplayBuffer

        if impl == "replaybuf":
            return TFUniformReplayBuffer
        draw_ahead = int(impl.removeprefix("replaybuf-k"))
        return functools.partial(TFUniformReplayBuffer, dataset_draw_ahead=draw_ahead)
    if impl == "tf-agents":
        from tf_agents.replay_buffers import tf_uniform_replay_buffer

        return tf_uniform_replay_buffer.TFUniformReplayBuffer
    return {"plain": PlainVariables, "floor": Floor, "unbatch-floor": UnbatchFloor}[impl]


ROWS = {
    "add items/s": (tf_common.tf_add, tf_common.ADDS_PER_CALL),
    "dataset b/s": (tf_common.tf_dataset, 1),
    "tuned b/s": (lambda make: tf_common.tf_dataset(make, tuned=True), 1),
    "add+next r/s": (tf_common.tf_dataset_add, 1),
    "call add/s": (tf_common.call_add, 1),
    "eager add/s": (tf_common.eager_add, 1),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--impl", action="append", choices=["replaybuf", "tf-agents", "plain", "floor", "unbatch-floor"]
    )
    parser.add_argument(
        "--draw-ahead",
        type=int,
        action="append",
        default=[],
        help="also run replaybuf with dataset_draw_ahead=K (as 'replaybuf-kK'); repeat for several K",
    )
    parser.add_argument("--tf-agents-site", help="a site-packages folder holding tf_agents")
    parser.add_argument("--quick", action="store_true", help="smaller buffers, shorter timing")
    parser.add_argument(
        "--only",
        action="append",
        choices=["add", "dataset", "tuned", "add+next", "call", "eager"],
        help="run this row (repeat)",
    )
    args = parser.parse_args(argv)
    if args.tf_agents_site:
        sys.path.append(os.path.abspath(args.tf_agents_site))  # after our own packages
    impls = args.impl or ["replaybuf", "tf-agents", "plain", "floor"]
    impls += [f"replaybuf-k{k}" for k in args.draw_ahead]
    if "tf-agents" in impls:
        try:
            maker("tf-agents")
        except ImportError as exc:
            print(f"tf-agents left out: {exc}")
            impls.remove("tf-agents")
    sizes = SIZES["quick" if args.quick else "full"]
    seconds, reps = (0.3, 5) if args.quick else (0.5, 9)
    rows = {name: row for name, row in ROWS.items() if not args.only or name.split()[0] in args.only}
    print(
        f"TensorFlow {tf.__version__}, NumPy {np.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs; median of {reps} interleaved rounds"
    )
    print(f"{'implementation':<12}" + "".join(f"{name:>14}" for name in rows))
    results = {impl: {} for impl in impls}
    for name, (row, per_call) in rows.items():
        runs = {impl: row(lambda *a, impl=impl: maker(impl)(*a))(sizes) for impl in impls}
        times, _ = harness.interleave(runs, harness.Timing(reps, seconds, 0.2))
        for impl, got in times.items():
            results[impl][name] = per_call / statistics.median(got) if isinstance(got, list) else float("nan")
    for impl in impls:
        print(f"{impl:<12}" + "".join(f"{results[impl][name]:>14,.0f}" for name in rows), flush=True)
    if "tf-agents" in impls:
        for impl in impls:
            if impl.startswith("replaybuf"):
                ratios = {name: results[impl][name] / results["tf-agents"][name] for name in rows}
                print(f"{impl} / tf-agents: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
