"""TF-Agents 0.19 (TensorFlow 2.15): PyUniformReplayBuffer and TFUniformReplayBuffer.

TF-Agents' PyUniformReplayBuffer takes one item per add_batch (batch size 1 only), so
"add 256 at once" is 256 such calls; its windows are not episode-aware.
"""

from __future__ import annotations

from importlib.metadata import version as dist_version

import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers.py_uniform_replay_buffer import PyUniformReplayBuffer
from tf_agents.replay_buffers.tf_uniform_replay_buffer import TFUniformReplayBuffer
from tf_agents.specs import array_spec

from common import BATCH, IMAGE_SHAPE, OBS_SHAPE, WINDOW, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import NOTES, shared, tf_common

SMALL = {
    "obs": array_spec.ArraySpec(OBS_SHAPE, np.float32),
    "action": array_spec.ArraySpec((), np.int64),
    "reward": array_spec.ArraySpec((), np.float32),
    "done": array_spec.ArraySpec((), np.bool_),
    "next_obs": array_spec.ArraySpec(OBS_SHAPE, np.float32),
}
IMAGES = {
    "obs": array_spec.ArraySpec(IMAGE_SHAPE, np.uint8),
    "action": array_spec.ArraySpec((), np.int64),
    "reward": array_spec.ArraySpec((), np.float32),
    "done": array_spec.ArraySpec((), np.bool_),
}
NAMES = ("obs", "action", "reward", "done", "next_obs")


def version(lib: str) -> str:
    return f"tf-agents {dist_version('tf-agents')}, tensorflow {tf.__version__}, numpy {np.__version__}"


def _fill(buffer, pool, total):
    n = len(pool["obs"])
    for i in range(total):
        buffer.add_batch({k: v[i % n : i % n + 1] for k, v in pool.items()})
    return buffer


def add1(sizes):
    buffer = PyUniformReplayBuffer(SMALL, sizes.capacity)
    rows = single_rows(small_pool(4096))

    def run(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            buffer.add_batch(
                {"obs": o[None], "action": a[None], "reward": r[None], "done": d[None], "next_obs": no[None]}
            )

    return run


def add256(sizes):
    buffer = PyUniformReplayBuffer(SMALL, sizes.capacity)
    pool = small_pool(BATCH * 16)
    NOTES.append("256 add_batch calls of 1 (PyUniformReplayBuffer takes batch size 1 only)")

    def run(n):
        for j in range(n):
            base = (j & 15) * BATCH
            for i in range(base, base + BATCH):
                buffer.add_batch({k: v[i : i + 1] for k, v in pool.items()})

    return run


def _small(sizes):
    return shared(
        "small", lambda: _fill(PyUniformReplayBuffer(SMALL, sizes.capacity), small_pool(sizes.stored), sizes.stored)
    )


def sample(batch_size, num_steps=None, images=False):
    def factory(sizes):
        buffer = _images(sizes)[0] if images else _small(sizes)
        if num_steps:
            NOTES.append("not episode-aware")

        return repeat(buffer.get_next, batch_size, num_steps)

    return factory


def _images(sizes):
    def fill(pool):
        return _fill(PyUniformReplayBuffer(IMAGES, sizes.image_capacity), pool, sizes.image_stored)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def _tf_buffer(spec, batch_size, max_length):
    return TFUniformReplayBuffer(spec, batch_size=batch_size, max_length=max_length)


LIBS = {
    "tf-agents PyUniform": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample(BATCH),
        "w4_windows": sample(BATCH, WINDOW),
        "w2_sample32": sample(32, images=True),
        "w2_sample256": sample(BATCH, images=True),
        "w2_rss": lambda sizes: _images(sizes)[1],
    },
    "tf-agents TFUniform": {
        "tf_add": tf_common.tf_add(_tf_buffer),
        "tf_dataset": tf_common.tf_dataset(_tf_buffer),
        "tf_dataset_add": tf_common.tf_dataset_add(_tf_buffer),
    },
}
