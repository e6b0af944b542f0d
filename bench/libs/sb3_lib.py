"""Stable-Baselines3's ReplayBuffer (NumPy storage, samples returned as torch tensors).

Configured for speed: handle_timeout_termination=False; the image buffer uses
optimize_memory_usage=True (observations stored once; samples include next_obs).
Multi-row adds use n_envs=256 (SB3 adds one step of every environment per call).
"""

from __future__ import annotations

from importlib.metadata import version as dist_version

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from common import BATCH, IMAGE_SHAPE, OBS_SHAPE, chunks, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import Missing, shared

torch.set_num_threads(1)
SMALL_SPACE = spaces.Box(-np.inf, np.inf, OBS_SHAPE, np.float32)
IMAGE_SPACE = spaces.Box(0, 255, IMAGE_SHAPE, np.uint8)
ACTIONS = spaces.Discrete(6)


def version(lib: str) -> str:
    return f"stable-baselines3 {dist_version('stable-baselines3')}, torch {torch.__version__}, numpy {np.__version__}"


def _buffer(capacity, space=SMALL_SPACE, n_envs=1, images=False):
    return ReplayBuffer(
        capacity,
        space,
        ACTIONS,
        device="cpu",
        n_envs=n_envs,
        optimize_memory_usage=images,
        handle_timeout_termination=False,
    )


def _fill(buffer, pool, total, images=False):
    infos = [{}] * BATCH
    for _, b in chunks(pool, total, BATCH):
        if len(b["obs"]) == BATCH:
            buffer.add(b["obs"], b["obs"] if images else b["next_obs"], b["action"], b["reward"], b["done"], infos)
    return buffer


def add1(sizes):
    buffer = _buffer(sizes.capacity)
    rows = single_rows(small_pool(4096))
    add = buffer.add
    infos = [{}]

    def run(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add(o[None], no[None], np.asarray(a)[None], np.asarray(r)[None], np.asarray(d)[None], infos)

    return run


def add256(sizes):
    buffer = _buffer(sizes.capacity, n_envs=BATCH)
    pool = small_pool(BATCH * 16)
    batches = [{k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()} for b in range(16)]
    infos = [{}] * BATCH

    def run(n):
        for j in range(n):
            b = batches[j & 15]
            buffer.add(b["obs"], b["next_obs"], b["action"], b["reward"], b["done"], infos)

    return run


def sample(batch_size, images=False):
    def factory(sizes):
        if images:
            buffer = _images(sizes)[0]
        else:
            buffer = shared(
                "small", lambda: _fill(_buffer(sizes.capacity, n_envs=BATCH), small_pool(sizes.stored), sizes.stored)
            )

        return repeat(buffer.sample, batch_size)

    return factory


def _images(sizes):
    def fill(pool):
        buffer = _buffer(sizes.image_capacity, IMAGE_SPACE, BATCH, images=True)
        return _fill(buffer, pool, sizes.image_stored, images=True)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def unsupported(what):
    def factory(sizes):
        raise Missing(f"Stable-Baselines3 has no {what}")

    return factory


LIBS = {
    "stable-baselines3": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample(BATCH),
        "w4_windows": unsupported("window sampling"),
        "w3_per": unsupported("prioritized replay buffer"),
        "w2_sample32": sample(32, images=True),
        "w2_sample256": sample(BATCH, images=True),
        "w2_rss": lambda sizes: _images(sizes)[1],
    }
}
