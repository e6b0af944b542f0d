"""Host storage: every item is one fixed-size record in one preallocated NumPy array.

All leaves of an item live side by side in one record (a structured dtype, each field
aligned), so sampling B items is one gather of B records instead of one gather per leaf,
and each returned leaf is a field view of that gather. The storage knows slots only: which
slots to read or write is decided by the buffer and its sampler.

Memory is allocated with ``np.zeros`` (calloc), so pages are mapped when first written and
RSS follows what is stored, not the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replaybuf.specs import ArraySpec

__all__ = ["RecordStorage", "record_dtype"]


def record_dtype(leaves: Sequence[ArraySpec]) -> np.dtype:
    """The aligned structured dtype holding one item whose leaves are ``leaves``."""
    return np.dtype([(f"f{i}", spec.dtype, spec.shape) for i, spec in enumerate(leaves)], align=True)


class RecordStorage:
    """``capacity`` records of ``record_dtype(leaves)``, read and written by slot."""

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int, records: np.ndarray | None = None):
        self.leaves = list(leaves)
        self.capacity = capacity
        self.dtype = record_dtype(self.leaves)
        self.records = np.zeros(capacity, self.dtype) if records is None else records
        self._names = list(self.dtype.names or ())
        self.fields = [self.records[name] for name in self._names]

    @property
    def nbytes(self) -> int:
        return self.records.nbytes

    def write(self, start: int, arrays: Sequence[np.ndarray]) -> None:
        """Write rows ``arrays[k][i]`` to slot ``(start + i) % capacity``; n <= capacity."""
        n = arrays[0].shape[0] if arrays else 0
        end = start + n
        if n == 1:  # one item (batch_size 1): integer indexing is ~2x faster than a slice
            for field, array in zip(self.fields, arrays):
                field[start] = array[0]
        elif end <= self.capacity:
            for field, array in zip(self.fields, arrays):
                field[start:end] = array
        else:
            split = self.capacity - start
            for field, array in zip(self.fields, arrays):
                field[start:] = array[:split]
                field[: end - self.capacity] = array[split:]

    def read(self, slots: np.ndarray) -> list[np.ndarray]:
        """The leaves of the records at ``slots``, each shaped ``slots.shape + leaf.shape``."""
        rows = self.records.take(slots)
        return [rows[name] for name in self._names]
