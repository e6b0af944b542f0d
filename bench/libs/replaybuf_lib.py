"""replaybuf's rows (run in the main .venv): the NumPy buffers, prioritized replay, replaybuf.tf.

Parts still being written by other engineers are detected at run time: a missing class
or option makes its row missing (or noted), never a crash of the run.
"""

from __future__ import annotations

import inspect

import numpy as np

import replaybuf
from common import BATCH, IMAGE_SHAPE, OBS_SHAPE, WINDOW, chunks, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import NOTES, Missing, shared, tf_common
from replaybuf import ArraySpec, PyUniformReplayBuffer, UniformReplayBuffer


def version(lib: str) -> str:
    return f"replaybuf {replaybuf.__version__}, numpy {np.__version__}"


SMALL_SPEC = {
    "obs": ArraySpec(OBS_SHAPE, np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
    "next_obs": ArraySpec(OBS_SHAPE, np.float32),
}
IMAGE_SPEC = {
    "obs": ArraySpec(IMAGE_SHAPE, np.uint8),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
}


def _fill(buffer, pool, total):
    for _, batch in chunks(pool, total, 4096):
        buffer.add_batch(batch)
    return buffer


def _filled_small(sizes):
    return shared(
        "small",
        lambda: _fill(
            PyUniformReplayBuffer(SMALL_SPEC, sizes.capacity, seed=1), small_pool(sizes.stored), sizes.stored
        ),
    )


def add1(sizes):
    buffer = PyUniformReplayBuffer(SMALL_SPEC, sizes.capacity)
    rows = single_rows(small_pool(4096))
    add = buffer.add_batch

    def run(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add({"obs": o[None], "action": a[None], "reward": r[None], "done": d[None], "next_obs": no[None]})

    return run


def add256(sizes):
    buffer = PyUniformReplayBuffer(SMALL_SPEC, sizes.capacity)
    pool = small_pool(BATCH * 16)
    batches = [{k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()} for b in range(16)]

    def run(n):
        for j in range(n):
            buffer.add_batch(batches[j & 15])

    return run


def sample(batch_size, num_steps=None, build=_filled_small):
    def factory(sizes):
        buffer = build(sizes)

        return repeat(buffer.get_next, batch_size, num_steps)

    return factory


def _filled_images(sizes):
    def fill(pool):
        return _fill(PyUniformReplayBuffer(IMAGE_SPEC, sizes.image_capacity, seed=1), pool, sizes.image_stored)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def image_rss(sizes):
    return _filled_images(sizes)[1]


def _fill_streams(buffer, pool, total):
    """Fill a buffer of BATCH streams: each add_batch writes one step of every stream."""
    for _, batch in chunks(pool, total - total % BATCH, BATCH):
        buffer.add_batch(batch)
    return buffer


def _streams(cls, sizes, **kwargs):
    """``cls`` with BATCH streams (one per environment copy) holding ``sizes.stored`` items."""
    buffer = cls(SMALL_SPEC, batch_size=BATCH, max_length=sizes.capacity // BATCH, seed=1, **kwargs)
    return _fill_streams(buffer, small_pool(sizes.stored), sizes.stored)


def _episode_windows_buffer(sizes):
    """Windows that never cross an episode end (respect_episodes), when replaybuf has the option."""
    if "respect_episodes" not in inspect.signature(UniformReplayBuffer).parameters:
        NOTES.append("not episode-aware: UniformReplayBuffer has no respect_episodes yet")
        return _filled_small(sizes)
    NOTES.append("episode-aware (UniformReplayBuffer, 256 streams, respect_episodes=True)")
    return shared(
        "episodes", lambda: _streams(UniformReplayBuffer, sizes, respect_episodes=True, episode_end_field="done")
    )


def per(sizes):
    cls = getattr(replaybuf, "PrioritizedReplayBuffer", None)
    if cls is None:
        try:
            from replaybuf import PrioritizedReplayBuffer as cls
        except ImportError as exc:
            raise Missing(f"replaybuf.PrioritizedReplayBuffer not available yet ({exc})") from None
    NOTES.append("256 streams")
    buffer = shared("per", lambda: _streams(cls, sizes))
    rng = np.random.default_rng(1)

    def run(n):
        for _ in range(n):
            _, info = buffer.get_next(BATCH)
            buffer.update_priorities(info.ids, rng.random(BATCH) + 0.01)

    return run


def _tf_buffer(spec, batch_size, max_length):
    try:
        from replaybuf.tf import TFUniformReplayBuffer
    except ImportError as exc:
        raise Missing(f"replaybuf.tf.TFUniformReplayBuffer not available yet ({exc})") from None
    return TFUniformReplayBuffer(spec, batch_size=batch_size, max_length=max_length)


LIBS = {
    "replaybuf": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample(BATCH),
        "w4_windows": sample(BATCH, WINDOW, _episode_windows_buffer),
        "w3_per": per,
        "w2_sample32": sample(32, build=lambda s: _filled_images(s)[0]),
        "w2_sample256": sample(BATCH, build=lambda s: _filled_images(s)[0]),
        "w2_rss": image_rss,
        "tf_add": tf_common.tf_add(_tf_buffer),
        "tf_dataset": tf_common.tf_dataset(_tf_buffer),
        "tf_dataset_add": tf_common.tf_dataset_add(_tf_buffer),
    },
}
