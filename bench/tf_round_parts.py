"""Where the time of TF-Agents' DQN round goes (one add in a ``tf.function``, then one
``next()``), for TF-Agents' buffer and replaybuf's in ONE process on one TensorFlow:

    .venv-tf-agents/bin/python bench/tf_round_parts.py

Per buffer (64 streams, bench/libs/tf_common.py's transition, ``as_dataset(256, num_steps=2)``):
the add call, the ``next()`` after it, the whole round, ``next()`` with no adds between
reads, and the cost of calling an empty ``tf.function`` that takes the same dict (the
floor of the add). Microseconds, median of 5 runs of 200.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "libs"))

import tensorflow as tf  # noqa: E402
import tf_common  # noqa: E402
from tf_agents.replay_buffers import tf_uniform_replay_buffer as theirs  # noqa: E402

from replaybuf.tf_agents import tf_uniform_replay_buffer as ours  # noqa: E402

STREAMS, ROUNDS = 64, 200


def median_us(run) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(ROUNDS):
            run()
        times.append((time.perf_counter() - start) / ROUNDS * 1e6)
    return statistics.median(times)


def parts(module) -> dict[str, float]:
    buffer = module.TFUniformReplayBuffer(tf_common.spec(tf), STREAMS, 200_000 // STREAMS)

    @tf.function
    def add(items):
        buffer.add_batch(items)

    @tf.function
    def empty(items):
        return items["obs"][0, 0]

    step = {k: tf.constant(v) for k, v in tf_common.small_pool(STREAMS).items()}
    for _ in range(200):
        add(step)
    iterator = iter(buffer.as_dataset(sample_batch_size=256, num_steps=2))
    empty(step)
    timed = {"add": 0.0, "next after add": 0.0}

    def round_() -> None:
        a = time.perf_counter()
        add(step)
        b = time.perf_counter()
        next(iterator)
        timed["add"] += b - a
        timed["next after add"] += time.perf_counter() - b

    for _ in range(50):
        round_()
    timed = dict.fromkeys(timed, 0.0)
    out = {"round": median_us(round_)}
    out.update({k: v / (5 * ROUNDS) * 1e6 for k, v in timed.items()})
    out["next, no adds"] = median_us(lambda: next(iterator))
    out["empty tf.function call"] = median_us(lambda: empty(step))
    return out


if __name__ == "__main__":
    print(f"TensorFlow {tf.__version__}; us per call, median of 5 x {ROUNDS}")
    for name, module in (("tf-agents", theirs), ("replaybuf", ours)):
        print(name, {k: round(v) for k, v in parts(module).items()})
