"""cpprb (C++/Cython ring buffers): ReplayBuffer and PrioritizedReplayBuffer."""

from __future__ import annotations

from importlib.metadata import version as dist_version

import numpy as np
from cpprb import PrioritizedReplayBuffer, ReplayBuffer

from common import BATCH, IMAGE_SHAPE, OBS_SHAPE, chunks, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import Missing, shared

SMALL = {
    "obs": {"shape": OBS_SHAPE, "dtype": np.float32},
    "act": {"dtype": np.int64},
    "rew": {"dtype": np.float32},
    "done": {"dtype": np.bool_},
    "next_obs": {"shape": OBS_SHAPE, "dtype": np.float32},
}
IMAGES = {
    "obs": {"shape": IMAGE_SHAPE, "dtype": np.uint8},
    "act": {"dtype": np.int64},
    "rew": {"dtype": np.float32},
    "done": {"dtype": np.bool_},
}
RENAME = {"action": "act", "reward": "rew"}


def version(lib: str) -> str:
    return f"cpprb {dist_version('cpprb')}, numpy {np.__version__}"


def _batch(batch):
    return {RENAME.get(k, k): v for k, v in batch.items()}


def _fill(buffer, pool, total):
    for _, batch in chunks(pool, total, 4096):
        buffer.add(**_batch(batch))
    return buffer


def add1(sizes):
    buffer = ReplayBuffer(sizes.capacity, SMALL)
    rows = single_rows(small_pool(4096))
    add = buffer.add

    def run(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add(obs=o, act=a, rew=r, done=d, next_obs=no)

    return run


def add256(sizes):
    buffer = ReplayBuffer(sizes.capacity, SMALL)
    pool = small_pool(BATCH * 16)
    batches = [_batch({k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()}) for b in range(16)]

    def run(n):
        for j in range(n):
            buffer.add(**batches[j & 15])

    return run


def sample(batch_size, images=False):
    def factory(sizes):
        if images:
            buffer = _images(sizes)[0]
        else:
            buffer = shared(
                "small", lambda: _fill(ReplayBuffer(sizes.capacity, SMALL), small_pool(sizes.stored), sizes.stored)
            )

        return repeat(buffer.sample, batch_size)

    return factory


def _images(sizes):
    def fill(pool):
        return _fill(ReplayBuffer(sizes.image_capacity, IMAGES), pool, sizes.image_stored)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def per(sizes):
    buffer = shared(
        "per",
        lambda: _fill(
            PrioritizedReplayBuffer(sizes.capacity, SMALL, alpha=0.6), small_pool(sizes.stored), sizes.stored
        ),
    )
    rng = np.random.default_rng(1)

    def run(n):
        for _ in range(n):
            batch = buffer.sample(BATCH, beta=0.4)
            buffer.update_priorities(batch["indexes"], rng.random(BATCH) + 0.01)

    return run


def windows(sizes):
    raise Missing("cpprb has no sequence/window sampling")


LIBS = {
    "cpprb": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample(BATCH),
        "w4_windows": windows,
        "w3_per": per,
        "w2_sample32": sample(32, images=True),
        "w2_sample256": sample(BATCH, images=True),
        "w2_rss": lambda sizes: _images(sizes)[1],
    }
}
