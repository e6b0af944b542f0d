"""An episode store's columns (one array per leaf, indexed by row), integer leaves kept narrow.

An integer leaf (a Discrete action or observation, int64 as RLlib's episodes hold it) is
stored in the narrowest integer type of its kind that has held every value written so far
(int8 first), widened in place when a value does not fit, and read back as its spec's dtype:
a CartPole action costs 1 byte a row instead of 8, what is read is unchanged. Other leaves
are stored as their spec says.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from replaybuf.specs import ArraySpec

__all__ = ["Columns"]


def _narrowest(dtype: np.dtype) -> np.dtype:
    """Where an integer leaf of ``dtype`` starts (itself for any other kind)."""
    return np.dtype(np.int8 if dtype.kind == "i" else np.uint8) if dtype.kind in "iu" else dtype


@cache
def _bounds(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _holding(low: int, high: int, now: np.dtype, spec: np.dtype) -> np.dtype:
    """The narrowest integer type from ``now`` up to ``spec`` that holds ``[low, high]``."""
    dtype = now
    while dtype != spec and not _bounds(dtype)[0] <= low <= high <= _bounds(dtype)[1]:
        dtype = np.dtype(f"{dtype.kind}{2 * dtype.itemsize}")
    return dtype


class Columns:
    """``size`` rows of each leaf of ``leaves``; ``write`` widens a narrow integer column first."""

    def __init__(self, leaves: Sequence[ArraySpec], size: int):
        self.leaves = list(leaves)
        self.fields = [np.zeros((size, *s.shape), _narrowest(np.dtype(s.dtype))) for s in self.leaves]

    def grown(self, size: int) -> Columns:
        """A copy with ``size`` rows (the first rows as here, narrow types kept)."""
        new = Columns([], 0)
        new.leaves = self.leaves
        for field in self.fields:
            wider = np.zeros((size, *field.shape[1:]), field.dtype)
            wider[: len(field)] = field
            new.fields.append(wider)
        return new

    def write(self, i: int, rows: np.ndarray, values: np.ndarray) -> None:
        """``values`` into column ``i`` at ``rows``, the column widened first if they need it."""
        field, spec = self.fields[i], np.dtype(self.leaves[i].dtype)
        if field.dtype != spec and np.size(values):
            if np.size(values) == 1:  # one step's value: no reductions
                low = high = int(np.ravel(values)[0])
            else:
                low, high = int(np.min(values)), int(np.max(values))
            smallest, largest = _bounds(field.dtype)
            if not smallest <= low <= high <= largest:
                field = self.fields[i] = field.astype(_holding(low, high, field.dtype, spec))
        field[rows] = values

    def row(self, i: int, row: int) -> np.ndarray:
        """Column ``i`` at one row, as its spec's dtype."""
        return np.asarray(self.fields[i][row], self.leaves[i].dtype)

    def read(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each leaf's values at ``rows`` as its spec's dtype (fresh arrays)."""
        return [
            field.take(rows, axis=0).astype(spec.dtype, copy=False)
            for field, spec in zip(self.fields, self.leaves, strict=True)
        ]
