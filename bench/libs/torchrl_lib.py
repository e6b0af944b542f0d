"""TorchRL (+tensordict): TensorDictReplayBuffer on LazyTensorStorage, prioritized and slice samplers.

Inputs are TensorDicts built from the same NumPy rows outside the timed loops (what a
TorchRL collector hands over). The prioritized sampler needs TorchRL's C++ extension,
rebuilt against torch 2.13.0 by bench/build_torchrl_ext.py. Windows come from
SliceSampler with end_key="done" (episode-aware).
"""

from __future__ import annotations

from importlib.metadata import version as dist_version

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.samplers import SliceSampler

from common import BATCH, WINDOW, chunks, filled_with_rss, single_rows, small_pool
from harness import repeat
from libs import NOTES, shared

torch.set_num_threads(1)
NAMES = ("obs", "action", "reward", "done", "next_obs")


def version(lib: str) -> str:
    return (
        f"torchrl {dist_version('torchrl')}, tensordict {dist_version('tensordict')}, torch {torch.__version__}, "
        f"numpy {np.__version__}"
    )


def _td(batch):
    n = len(next(iter(batch.values())))
    return TensorDict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}, batch_size=[n])


def _fill(buffer, pool, total):
    for _, batch in chunks(pool, total, 4096):
        buffer.extend(_td(batch))
    return buffer


def add1(sizes):
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(sizes.capacity))
    rows = [
        TensorDict({k: torch.as_tensor(v) for k, v in zip(NAMES, row, strict=True)}, batch_size=[])
        for row in single_rows(small_pool(1024), 1024)
    ]
    NOTES.append("TensorDicts built outside the timed loop")

    def run(n):
        for j in range(n):
            buffer.add(rows[j & 1023])

    return run


def add256(sizes):
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(sizes.capacity))
    pool = small_pool(BATCH * 16)
    batches = [_td({k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()}) for b in range(16)]
    NOTES.append("TensorDicts built outside the timed loop")

    def run(n):
        for j in range(n):
            buffer.extend(batches[j & 15])

    return run


def _sampler(buffer):
    return repeat(buffer.sample)


def sample256(sizes):
    return _sampler(
        shared(
            "small",
            lambda: _fill(
                TensorDictReplayBuffer(storage=LazyTensorStorage(sizes.capacity), batch_size=BATCH),
                small_pool(sizes.stored),
                sizes.stored,
            ),
        )
    )


def windows(sizes):
    NOTES.append("episode-aware (SliceSampler, end_key='done')")
    return _sampler(
        shared(
            "windows",
            lambda: _fill(
                TensorDictReplayBuffer(
                    storage=LazyTensorStorage(sizes.capacity),
                    batch_size=BATCH * WINDOW,
                    sampler=SliceSampler(slice_len=WINDOW, end_key="done"),
                ),
                small_pool(sizes.stored),
                sizes.stored,
            ),
        )
    )


def images(batch_size):
    def factory(sizes):
        buffer = _images(sizes)[0]

        return repeat(buffer.sample, batch_size)

    return factory


def _images(sizes):
    def fill(pool):
        buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(sizes.image_capacity))
        return _fill(buffer, pool, sizes.image_stored)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def per(sizes):
    buffer = shared(
        "per",
        lambda: _fill(
            TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=LazyTensorStorage(sizes.capacity), batch_size=BATCH
            ),
            small_pool(sizes.stored),
            sizes.stored,
        ),
    )
    priorities = [torch.rand(BATCH, generator=torch.Generator().manual_seed(i)) + 0.01 for i in range(16)]

    def run(n):
        for j in range(n):
            sample = buffer.sample()
            buffer.update_priority(sample["index"], priorities[j & 15])

    return run


LIBS = {
    "torchrl": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample256,
        "w4_windows": windows,
        "w3_per": per,
        "w2_sample32": images(32),
        "w2_sample256": images(BATCH),
        "w2_rss": lambda sizes: _images(sizes)[1],
    }
}
