"""Uniform sampling: a step uniformly over the valid window starts and a stream uniformly."""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.ring import StreamRing

__all__ = ["UniformSampler", "filled_probabilities", "uniform_integers"]

_INT64 = np.dtype(np.int64)  # a dtype object: .view(np.int64) would resolve the type per call


def uniform_integers(rng: np.random.Generator, low: int, high: int, size: int | None) -> np.ndarray:
    """Integers drawn uniformly from ``[low, high)``: ``size`` of them, or one 0-d array.

    Raw 64-bit draws reduced modulo the range: ~3x cheaper than ``rng.integers`` for a
    batch (its per-call argument handling dominates at a few hundred draws), and the
    modulo bias is below ``(high - low) / 2**64`` (under 1e-9 for ranges up to 2**34).
    """
    raw = rng.bit_generator.random_raw(size if size is not None else 1)
    draws = (raw % np.uint64(high - low)).view(_INT64)
    draws += low
    return draws if size is not None else draws.reshape(())


def window_start_count(ring: StreamRing, num_steps: int | None) -> int:
    """How many windows of ``num_steps`` may start now, over every stream (0 when none)."""
    steps = ring.steps - (num_steps or 1) + 1 - ring.first_valid_step()
    return max(steps, 0) * ring.batch_size


def filled_probabilities(probability: float, size: int | None) -> np.ndarray:
    """float32 probabilities shaped like a sample of ``size`` (``[size]``, or ``[]`` for None)."""
    out = np.empty(() if size is None else (size,), np.float32)
    out.fill(probability)
    return out


class UniformSampler:
    """TF-Agents' rule: every valid window start of every stream equally likely.

    Ids of valid starts form the contiguous run ``[low * B, high * B)``, so one draw of
    integers gives both the step and the stream; every element has probability
    ``1 / (valid starts * batch_size)``. It keeps no state of its own.
    """

    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        low, high = ring.window_starts(num_steps or 1)
        batch = ring.batch_size
        first_ids = uniform_integers(rng, low * batch, high * batch, sample_batch_size)
        probabilities = filled_probabilities(1.0 / ((high - low) * batch), sample_batch_size)
        return ring.window_ids(first_ids, num_steps), probabilities, {}

    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        return float(window_start_count(ring, num_steps)), 1.0

    def added(self, ring: StreamRing, arrays: Any, priorities: Any = None) -> None:
        """Nothing to track."""

    def cleared(self) -> None:
        """Nothing to forget."""

    def reopened(self, ring: StreamRing, fields: Any) -> None:
        """Nothing to derive from a reopened storage."""

    def state(self, ring: StreamRing) -> dict:
        return {}

    def check_state(self, ring: StreamRing, state: dict, count: int) -> Any:
        return None

    def load_state(self, ring: StreamRing, checked: Any) -> None:
        """Nothing to restore."""
