"""The data of the peers and TF suites: shapes, sizes and the seeded transitions every library gets.

This module imports only NumPy and the standard library, because it is loaded inside
every peer's own virtual environment. Every library gets the same data: the pools below
come from one seeded generator and are regenerated identically in each process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

OBS_SHAPE = (4,)
IMAGE_SHAPE = (84, 84, 4)
BATCH = 256
WINDOW = 8
SEED = 0


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Capacities and fill levels; ``quick`` and ``tiny`` (the smoke test) shrink them."""

    capacity: int = 1_000_000
    stored: int = 200_000
    image_capacity: int = 100_000
    image_stored: int = 50_000


SIZES = {
    "full": Sizes(),
    "quick": Sizes(capacity=200_000, stored=50_000, image_capacity=20_000, image_stored=10_000),
    "tiny": Sizes(capacity=4096, stored=2048, image_capacity=512, image_stored=300),
}

IMAGE_ITEM_BYTES = int(np.prod(IMAGE_SHAPE)) + 8 + 4 + 1  # obs + action + reward + done


# -- data ------------------------------------------------------------------------------------
def small_pool(n: int) -> dict[str, np.ndarray]:
    """``n`` small transitions (obs f32[4], action i64, reward f32, done bool, next_obs f32[4]).

    Episodes end with probability 1/100 per step, so W4 windows cross episode ends.
    """
    rng = np.random.default_rng(SEED)
    obs = rng.standard_normal((n + 1, *OBS_SHAPE), dtype=np.float32)
    return {
        "obs": obs[:n].copy(),
        "action": rng.integers(0, 2, n, dtype=np.int64),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
        "next_obs": obs[1:].copy(),
    }


def small_spec() -> dict:
    """replaybuf's ArraySpecs of ``small_pool``'s transitions (replaybuf imported on call: a peer's
    environment may lack it)."""
    from replaybuf import ArraySpec

    return {
        "obs": ArraySpec(OBS_SHAPE, np.float32),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "done": ArraySpec((), np.bool_),
        "next_obs": ArraySpec(OBS_SHAPE, np.float32),
    }


def single_rows(pool: dict[str, np.ndarray], n: int = 4096) -> list[tuple]:
    """The first ``n`` transitions as per-row NumPy values (what an environment step hands over)."""
    return [tuple(pool[k][i] for k in ("obs", "action", "reward", "done", "next_obs")) for i in range(n)]


def image_pool(n: int = 512) -> dict[str, np.ndarray]:
    """``n`` distinct 84x84x4 uint8 transitions (random pixels: nothing compresses); added cyclically."""
    rng = np.random.default_rng(SEED + 1)
    return {
        "obs": rng.integers(0, 256, (n, *IMAGE_SHAPE), dtype=np.uint8),
        "action": rng.integers(0, 6, n, dtype=np.int64),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
    }


def chunks(pool: dict[str, np.ndarray], total: int, size: int = BATCH):
    """Yield ``(start, batch)`` dicts of up to ``size`` rows, cycling through ``pool``, ``total`` rows in all."""
    n = len(next(iter(pool.values())))
    done = 0
    while done < total:
        start = done % n
        take = min(size, total - done, n - start)
        yield done, {k: v[start : start + take] for k, v in pool.items()}
        done += take


# -- memory ------------------------------------------------------------------------------------
def filled_with_rss(fill: Callable[[dict[str, np.ndarray]], Any], stored: int) -> tuple[Any, float]:
    """``fill(image_pool())`` and the RSS it added per stored transition (the pool not counted)."""
    before = rss_bytes()
    pool = image_pool()
    pool_bytes = rss_bytes() - before
    buffer = fill(pool)
    return buffer, (rss_bytes() - before - pool_bytes) / stored


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; no psutil in the peers' environments)."""
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
