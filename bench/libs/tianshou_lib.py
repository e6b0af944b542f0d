"""Tianshou's ReplayBuffer, VectorReplayBuffer (adds of 256) and PrioritizedReplayBuffer.

Windows follow ``buffer.next`` (which stops at episode ends), as Tianshou's n-step return
computation does; the image buffer sets ignore_obs_next=True (each frame stored once).
"""

from __future__ import annotations

from importlib.metadata import version as dist_version

import numpy as np
import torch
from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer, VectorReplayBuffer

from common import BATCH, WINDOW, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import NOTES, shared

torch.set_num_threads(1)


def version(lib: str) -> str:
    return f"tianshou {dist_version('tianshou')}, torch {torch.__version__}, numpy {np.__version__}"


def _fill_single(buffer, pool, total, obs_next=True):
    n = len(pool["obs"])
    for i in range(total):
        j = i % n
        fields = dict(
            obs=pool["obs"][j],
            act=pool["action"][j],
            rew=pool["reward"][j],
            terminated=pool["done"][j],
            truncated=False,
        )
        if obs_next:
            fields["obs_next"] = pool["next_obs"][j]
        buffer.add(Batch(**fields))
    return buffer


def add1(sizes):
    buffer = ReplayBuffer(sizes.capacity)
    rows = single_rows(small_pool(4096))
    add = buffer.add

    def run(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add(Batch(obs=o, act=a, rew=r, terminated=d, truncated=False, obs_next=no))

    return run


def add256(sizes):
    buffer = VectorReplayBuffer(sizes.capacity, BATCH)
    pool = small_pool(BATCH * 16)
    batches = [
        Batch(
            obs=pool["obs"][s],
            act=pool["action"][s],
            rew=pool["reward"][s],
            terminated=pool["done"][s],
            truncated=np.zeros(BATCH, bool),
            obs_next=pool["next_obs"][s],
        )
        for s in (slice(b * BATCH, (b + 1) * BATCH) for b in range(16))
    ]
    ids = np.arange(BATCH)

    def run(n):
        for j in range(n):
            buffer.add(batches[j & 15], buffer_ids=ids)

    return run


def _small(sizes):
    return shared("small", lambda: _fill_single(ReplayBuffer(sizes.capacity), small_pool(sizes.stored), sizes.stored))


def sample(batch_size, images=False):
    def factory(sizes):
        buffer = _images(sizes)[0] if images else _small(sizes)

        return repeat(buffer.sample, batch_size)

    return factory


def windows(sizes):
    buffer = _small(sizes)
    NOTES.append("episode-aware (buffer.next stops at episode ends)")

    def run(n):
        for _ in range(n):
            index = buffer.sample_indices(BATCH)
            steps = [index]
            for _ in range(WINDOW - 1):
                index = buffer.next(index)
                steps.append(index)
            buffer[np.stack(steps, 1).reshape(-1)]

    return run


def _images(sizes):
    def fill(pool):
        buffer = ReplayBuffer(sizes.image_capacity, ignore_obs_next=True)
        return _fill_single(buffer, pool, sizes.image_stored, obs_next=False)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def per(sizes):
    buffer = shared(
        "per",
        lambda: _fill_single(
            PrioritizedReplayBuffer(sizes.capacity, alpha=0.6, beta=0.4), small_pool(sizes.stored), sizes.stored
        ),
    )
    rng = np.random.default_rng(1)

    def run(n):
        for _ in range(n):
            _, index = buffer.sample(BATCH)
            buffer.update_weight(index, rng.random(BATCH) + 0.01)

    return run


LIBS = {
    "tianshou": {
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
