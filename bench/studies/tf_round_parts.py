"""Study: Where does the time of TF-Agents' DQN round (add, then next()) go, and what are its floors?
Answer: docs/benchmarks.md, "TF-Agents drop-in: the exact TF dataset"; docs/tensorflow.md.

Where the time of TF-Agents' DQN round goes (one add in a ``tf.function``, then one
``next()``), for TF-Agents' buffer and replaybuf's in ONE process on one TensorFlow:

    .venv-tf-agents/bin/python bench/studies/tf_round_parts.py

Per buffer (64 streams, bench/libs/tf_common.py's transition, the sizes of the peers / tf suites (bench/suites/)'s
tf_dataset_add row: capacity 1M, 200k stored; ``as_dataset(256, num_steps=2)``): the whole
round, the add call alone, ``next()`` with no adds between reads, and the cost of calling an
empty ``tf.function`` that takes the same dict (the floor of the add); "round - add" is the
share of the ``next()`` after an add. Then floors of the round, replaybuf's add followed by
a ``next()`` on: a dataset of zeros of the element (no draw at all), a bare draw (random
windows and one gather per leaf, no checks) of rows among the first 1,000 items
(cache-resident), and the same bare draw over all 200k stored items. Microseconds per call,
median of 5 repetitions of about 50 ms, every row of a buffer interleaved by the harness
(bench/harness.py).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tf_agents.replay_buffers import tf_uniform_replay_buffer as theirs  # noqa: E402

import harness  # noqa: E402
from libs import tf_common  # noqa: E402
from replaybuf.tf import datasets  # noqa: E402
from replaybuf.tf.iteration import fast_iteration  # noqa: E402
from replaybuf.tf_agents import tf_uniform_replay_buffer as ours  # noqa: E402

STREAMS, CAPACITY, STORED, BATCH = 64, 1_000_000, 200_000, 256
TIMING = harness.Timing(5, 0.05, 0.01)  # short repetitions: every add grows the stored items


def parts(module) -> dict[str, float]:
    """Microseconds per call of each row (the floors' rows for replaybuf's buffer only)."""
    buffer = module.TFUniformReplayBuffer(tf_common.spec(tf), STREAMS, CAPACITY // STREAMS)

    @tf.function
    def add(items):
        buffer.add_batch(items)

    @tf.function
    def empty(items):
        return items["obs"][0, 0]

    step = {k: tf.constant(v) for k, v in tf_common.small_pool(STREAMS).items()}
    for _ in range(STORED // STREAMS):
        add(step)
    iterator = iter(buffer.as_dataset(sample_batch_size=BATCH, num_steps=2))
    runs = {
        "round": harness.repeat(lambda: (add(step), next(iterator))),
        "add": harness.repeat(add, step),
        "next, no adds": harness.repeat(next, iterator),
        "empty tf.function call": harness.repeat(empty, step),
    }
    if module is ours:
        for name, dataset in floor_datasets(buffer).items():
            floor_iterator = iter(fast_iteration(datasets.when_asked(dataset)))
            runs[name] = harness.repeat(lambda it=floor_iterator: (add(step), next(it)))
    times, _ = harness.interleave(runs, TIMING)
    for name, failed in [(n, t) for n, t in times.items() if isinstance(t, Exception)]:
        print(f"{name} failed: {failed}", file=sys.stderr)
    out = {name: statistics.median(t) * 1e6 for name, t in times.items() if isinstance(t, list)}
    out["round - add"] = out["round"] - out["add"]
    return out


def floor_datasets(buffer) -> dict[str, tf.data.Dataset]:
    """Datasets whose ``next()`` does less than replaybuf's draw (see the module docstring)."""
    leaves, calls = buffer._store.leaves, tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()
    rng = tf.random.Generator.from_seed(1)

    def zeros(_):
        return [tf.zeros((BATCH, 2) + tuple(leaf.shape[1:]), leaf.dtype) for leaf in leaves]

    def bare_draw(items: int):
        def draw(_):
            first = rng.uniform([BATCH], 0, items - STREAMS, tf.int64)
            ids = first[:, None] + np.arange(2) * STREAMS
            return [tf.gather(leaf, ids) for leaf in leaves]

        return draw

    return {
        "add + next of zeros": datasets.inline_map(calls, zeros),
        "add + bare draw of cache-resident rows": datasets.inline_map(calls, bare_draw(1_000)),
        "add + bare draw over all stored": datasets.inline_map(calls, bare_draw(STORED)),
    }


if __name__ == "__main__":
    print(f"TensorFlow {tf.__version__}; us per call, median of {TIMING.reps} repetitions")
    for name, module in (("tf-agents", theirs), ("replaybuf", ours)):
        print(name, {k: round(v) for k, v in parts(module).items()})
