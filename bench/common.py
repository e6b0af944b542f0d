"""What every benchmark worker shares: the rows, the sizes, the data and the timer.

This module imports only NumPy and the standard library, because it is loaded inside
every peer's own virtual environment. Every library gets the same data: the pools below
come from one seeded generator and are regenerated identically in each process.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
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
    """Capacities, fill levels and timing effort; ``--quick`` and the smoke test shrink them."""

    capacity: int = 1_000_000
    stored: int = 200_000
    image_capacity: int = 100_000
    image_stored: int = 50_000
    reps: int = 7
    rep_seconds: float = 0.25
    warmup_seconds: float = 0.1


FULL = Sizes()
QUICK = Sizes(
    capacity=200_000,
    stored=50_000,
    image_capacity=20_000,
    image_stored=10_000,
    reps=3,
    rep_seconds=0.08,
    warmup_seconds=0.03,
)
TINY = Sizes(
    capacity=4096, stored=2048, image_capacity=512, image_stored=300, reps=2, rep_seconds=0.005, warmup_seconds=0.0
)
SIZES = {"full": FULL, "quick": QUICK, "tiny": TINY}


@dataclasses.dataclass(frozen=True)
class Row:
    """One benchmarked operation: ``per_call`` turns one call of the timed function into the unit.

    The target is ``replaybuf / target_vs >= target_ratio`` where target_vs is "reference"
    (the row's NumPy reference), "best peer", or one library label.
    """

    key: str
    title: str
    unit: str
    per_call: float  # units produced by one operation (items, batches, or MB)
    reference: str  # the NumPy reference library this row is compared with ("" for none)
    target_vs: str = ""
    target_ratio: float = 0.0
    higher_is_better: bool = True


IMAGE_ITEM_BYTES = int(np.prod(IMAGE_SHAPE)) + 8 + 4 + 1  # obs + action + reward + done
MB = 1e6
TF_AGENTS = "tf-agents TFUniform"

ROWS = [
    Row("w1_add1", "W1a single add (45-byte transition)", "items/s", 1, "numpy-loop", "best peer", 1.0),
    Row("w1_add256", "W1b add 256 at once", "items/s", BATCH, "numpy-slice", "best peer", 1.0),
    Row("w1_sample256", "W1c sample 256 of 200k stored", "batches/s", 1, "numpy-fancy", "reference", 1.5),
    Row(
        "w2_sample32",
        "W2 sample 32 x 84x84x4 uint8",
        "MB/s",
        32 * IMAGE_ITEM_BYTES / MB,
        "numpy-memcpy",
        "reference",
        0.75,
    ),
    Row(
        "w2_sample256",
        "W2 sample 256 x 84x84x4 uint8",
        "MB/s",
        BATCH * IMAGE_ITEM_BYTES / MB,
        "numpy-memcpy",
        "reference",
        0.75,
    ),
    Row("w2_rss", "W2 RSS per stored 84x84x4 transition", "bytes", 1, "numpy-take", higher_is_better=False),
    Row("w3_per", "W3 PER sample 256 + update priorities", "rounds/s", 1, "numpy-per", "best peer", 2),
    Row("w4_windows", "W4 sample 256 windows of 8 steps", "batches/s", 1, "numpy-fancy", "flashbax", 2),
    Row("tf_add", "TF add_batch (batch 1), 64 per tf.function call", "items/s", 64, "", TF_AGENTS, 5),
    Row("tf_dataset", "TF as_dataset(256, num_steps=2) iteration", "batches/s", 1, "", TF_AGENTS, 3),
    Row("tf_dataset_add", "TF add one step, then next() on as_dataset(256, 2)", "rounds/s", 1, "", TF_AGENTS, 1.5),
]
ROW_BY_KEY = {row.key: row for row in ROWS}


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


# -- measurement -------------------------------------------------------------------------------
def calibrate(run: Callable[[int], object], sizes: Sizes) -> int:
    """The n for which one repetition ``run(n)`` (n operations) lasts about ``sizes.rep_seconds``."""
    run(1)
    n = 1
    while True:
        start = time.perf_counter()
        run(n)
        spent = time.perf_counter() - start
        if spent >= sizes.rep_seconds / 4 or n >= 1 << 22:
            break
        n *= 2
    return max(1, int(n * sizes.rep_seconds / max(spent, 1e-9)))


def repeat(call: Callable[..., object], *args: object) -> Callable[[int], None]:
    """A row's ``run(n)`` that makes the same call n times (``call(*args)``)."""

    def run(n: int) -> None:
        for _ in range(n):
            call(*args)

    return run


def warm_up(run: Callable[[int], object], n: int, sizes: Sizes) -> None:
    deadline = time.perf_counter() + sizes.warmup_seconds
    while time.perf_counter() < deadline:
        run(max(1, n // 4))


def time_rep(run: Callable[[int], object], n: int) -> float:
    """Seconds per operation of one repetition."""
    start = time.perf_counter()
    run(n)
    return (time.perf_counter() - start) / n


def median(values: list[float]) -> float:
    return statistics.median(values)


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
