"""One batch drawn over several parts (writer segments, Ray shards), exactly.

Each part samples with its own sampler and reports its mass (``Sampler.mass(ring, T)``:
what its draws are normalised by). An element that part ``k`` draws with probability
``p`` within the part is then drawn with probability ``mass_k / total * p`` over all parts,
provided the batch is split in proportion to the masses: ``counts`` does it by draw counts
(parts that sample elsewhere: shards), ``locate`` by integer positions in the parts' joint
range (parts sampled here: the shared buffer's segments, one uniform draw each).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from itertools import accumulate

import numpy as np

__all__ = ["MassSplit"]


class MassSplit:
    """The parts' masses at one draw; see the module. A part that cannot draw (down, or
    holding no window of the length asked) has mass 0 and gets nothing."""

    def __init__(self, masses: Sequence[float] | np.ndarray):
        self.masses = masses  # as given: a few Python ints cost less than NumPy calls on a draw path

    @cached_property
    def total(self) -> float:
        return float(np.sum(self.masses))

    def counts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """How many of ``n`` draws each part makes: multinomial over the masses (zeros when no
        part can draw)."""
        if not self.total > 0:
            return np.zeros(len(self.masses), np.int64)
        return rng.multinomial(n, np.asarray(self.masses) / self.total)

    def locate(self, positions: np.ndarray, bases: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(part, position - part's first position + bases[part])`` for integer masses and
        ``positions`` drawn uniformly in ``[0, total)``: each part receives its share of them.
        (Two small tables from Python ints and one lookup each: the fewest NumPy calls.)"""
        firsts = list(accumulate(self.masses, initial=0))
        part = np.array(firsts[1:-1], np.int64).searchsorted(positions, side="right")
        shifts = np.array([base - first for base, first in zip(bases, firsts, strict=False)], np.int64)
        return part, positions + shifts.take(part)

    def probabilities(self, part: int, within: np.ndarray) -> np.ndarray:
        """Probabilities over all parts of elements that ``part`` drew with ``within``."""
        return self.masses[part] / self.total * within

    def smallest(self, parts: dict[int, tuple[float, float]]) -> float:
        """The smallest probability over all parts, from each part's ``(mass, smallest)``
        (``Sampler.mass``): what prioritized weights are normalised by."""
        return min(self.masses[k] / self.total * small / mass for k, (mass, small) in parts.items() if mass > 0)

    @staticmethod
    def weights(probabilities: np.ndarray, smallest: float, beta: float) -> np.ndarray:
        """Importance weights ``(P(i) / P_min) ** -beta`` over all parts, float32."""
        with np.errstate(divide="ignore"):
            return ((probabilities.astype(np.float64) / smallest) ** -beta).astype(np.float32)
