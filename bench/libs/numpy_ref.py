"""The plain NumPy references: what the same bytes cost without any buffer library.

- numpy-loop: a Python loop of NumPy row writes of the five fields (single add).
- numpy-slice: one slice assignment per field (add 256).
- numpy-fancy: random integers + fancy index of each field (sample; windows of 8).
- numpy-take: np.take of each field into preallocated arrays (images), and RSS per item.
- numpy-memcpy: contiguous copies of as many rows from the same store (images).
- numpy-per: a naive proportional sampler (cumsum + searchsorted) and a priority write.
"""

from __future__ import annotations

import numpy as np

from common import BATCH, WINDOW, chunks, filled_with_rss, single_rows, small_pool
from libs import shared

FIELDS = ("obs", "action", "reward", "done", "next_obs")


def version(lib: str) -> str:
    return f"numpy {np.__version__}"


def _small_storage(capacity: int) -> dict[str, np.ndarray]:
    pool = small_pool(1)
    return {k: np.zeros((capacity, *v.shape[1:]), v.dtype) for k, v in pool.items()}


def _filled_small(sizes):
    def build():
        store = _small_storage(sizes.capacity)
        for start, batch in chunks(small_pool(sizes.stored), sizes.stored, 4096):
            for k, v in batch.items():
                store[k][start : start + len(v)] = v
        return store

    return shared("small", build)


def add1(sizes):
    store = _small_storage(sizes.capacity)
    rows = single_rows(small_pool(4096))
    obs, action, reward, done, next_obs = (store[k] for k in FIELDS)
    capacity = sizes.capacity
    state = [0]

    def run(n):
        i = state[0]
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            obs[i] = o
            action[i] = a
            reward[i] = r
            done[i] = d
            next_obs[i] = no
            i += 1
            if i == capacity:
                i = 0
        state[0] = i

    return run


def add256(sizes):
    store = _small_storage(sizes.capacity)
    pool = small_pool(BATCH * 16)
    batches = [{k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()} for b in range(16)]
    capacity = sizes.capacity
    state = [0]

    def run(n):
        i = state[0]
        for j in range(n):
            batch = batches[j & 15]
            for k in FIELDS:
                store[k][i : i + BATCH] = batch[k]
            i += BATCH
            if i + BATCH > capacity:
                i = 0
        state[0] = i

    return run


def sample256(sizes):
    store = _filled_small(sizes)
    rng = np.random.default_rng(1)
    stored = sizes.stored

    def run(n):
        for _ in range(n):
            idx = rng.integers(0, stored, BATCH)
            [store[k][idx] for k in FIELDS]

    return run


def windows(sizes):
    store = _filled_small(sizes)
    rng = np.random.default_rng(1)
    stored = sizes.stored
    offsets = np.arange(WINDOW)

    def run(n):
        for _ in range(n):
            idx = rng.integers(0, stored - WINDOW + 1, BATCH)[:, None] + offsets
            [store[k][idx] for k in FIELDS]

    return run


def _filled_images(sizes):
    def fill(pool):
        store = {k: np.zeros((sizes.image_capacity, *v.shape[1:]), v.dtype) for k, v in pool.items()}
        for start, batch in chunks(pool, sizes.image_stored):
            for k, v in batch.items():
                store[k][start : start + len(v)] = v
        return store

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def take(batch_size):
    def factory(sizes):
        store, _ = _filled_images(sizes)
        rng = np.random.default_rng(1)
        out = {k: np.empty((batch_size, *v.shape[1:]), v.dtype) for k, v in store.items()}

        def run(n):
            for _ in range(n):
                idx = rng.integers(0, sizes.image_stored, batch_size)
                for k, v in store.items():
                    np.take(v, idx, axis=0, out=out[k])

        return run

    return factory


def memcpy(batch_size):
    """Contiguous copies of ``batch_size`` rows from a random place of the same filled store."""

    def factory(sizes):
        store, _ = _filled_images(sizes)
        rng = np.random.default_rng(1)
        out = {k: np.empty((batch_size, *v.shape[1:]), v.dtype) for k, v in store.items()}

        def run(n):
            for _ in range(n):
                start = int(rng.integers(0, sizes.image_stored - batch_size + 1))
                for k, v in store.items():
                    np.copyto(out[k], v[start : start + batch_size])

        return run

    return factory


def image_rss(sizes):
    return _filled_images(sizes)[1]


def per(sizes):
    store = _filled_small(sizes)
    rng = np.random.default_rng(1)
    stored = sizes.stored
    priorities = np.ones(sizes.capacity, np.float64)
    priorities[:stored] = rng.random(stored) + 0.01

    def run(n):
        for _ in range(n):
            cumulative = np.cumsum(priorities[:stored])
            idx = np.searchsorted(cumulative, rng.random(BATCH) * cumulative[-1], side="right")
            [store[k][idx] for k in FIELDS]
            priorities[idx] = rng.random(BATCH) + 0.01

    return run


LIBS = {
    "numpy-loop": {"w1_add1": add1},
    "numpy-slice": {"w1_add256": add256},
    "numpy-fancy": {"w1_sample256": sample256, "w4_windows": windows},
    "numpy-per": {"w3_per": per},
    "numpy-take": {"w2_sample32": take(32), "w2_sample256": take(BATCH), "w2_rss": image_rss},
    "numpy-memcpy": {"w2_sample32": memcpy(32), "w2_sample256": memcpy(BATCH)},
}
