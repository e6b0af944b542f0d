"""Host storage: every item is one fixed-size record in one preallocated NumPy array.

All leaves of an item live side by side in one record (a structured dtype, each field
aligned), so sampling B items is one gather of B records instead of one gather per leaf,
and each returned leaf is a field view of that gather (a gather of several MB, images, is
split across the cores: ``row_copy``). Adds write each field strided into
the records, which costs more than contiguous columns (``ColumnStorage``) for small items.
The storage knows slots only: which slots to read or write is decided by the buffer and
its sampler. Its checkpoint part (``state`` / ``check_state`` / ``load_state``, from
``FieldStorage``) is the ``items`` of a buffer's state, the same for both layouts.

Memory is allocated with ``np.zeros`` (calloc), so pages are mapped when first written and
RSS follows what is stored, not the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replaybuf.specs import ArraySpec
from replaybuf.storages.columns import FieldStorage, straight_writer
from replaybuf.storages.row_copy import read_rows
from replaybuf.storages.threads import usable_threads

__all__ = ["RecordStorage", "record_dtype"]


def record_dtype(leaves: Sequence[ArraySpec]) -> np.dtype:
    """The aligned structured dtype holding one item whose leaves are ``leaves``."""
    return np.dtype([(f"f{i}", spec.dtype, spec.shape) for i, spec in enumerate(leaves)], align=True)


_PACKED_MAX_BYTES = 64  # larger rows are copied efficiently element-wise already


def _packed_view(records: np.ndarray, name: str) -> np.ndarray | None:
    """Field ``name`` as one ``void`` element per record, for small multi-element fields."""
    dtype, offset = records.dtype.fields[name][:2]
    if dtype.shape == () or dtype.itemsize > _PACKED_MAX_BYTES:
        return None
    return records.getfield(np.dtype((np.void, dtype.itemsize)), offset)


class RecordStorage(FieldStorage):
    """``capacity`` records of ``record_dtype(leaves)``, read and written by slot."""

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int, records: np.ndarray | None = None):
        self.leaves = list(leaves)
        self.capacity = capacity
        self.dtype = record_dtype(self.leaves)
        self.records = np.zeros(capacity, self.dtype) if records is None else records
        self._names = list(self.dtype.names or ())
        self.fields = [self.records[name] for name in self._names]
        self.read_threads = usable_threads()
        # Batched writes of a small multi-element field (e.g. obs float32[4]) go through a
        # view of it as one opaque n-byte element per record: NumPy then copies one element
        # per row instead of looping over the row's elements (~4x faster for 16 bytes).
        # ([capacity, 1] views, so a C-contiguous [n, 16-byte row] source viewed as void is
        # already [n, 1]: no reshape of either side per write)
        views = [_packed_view(self.records, name) for name in self._names]
        self._packed = [None if view is None else view[:, None] for view in views]
        # Single rows and runs that do not wrap: straight-line code generated for the leaves
        # (the packed views for 1-D fields; a [n, 4] float32 source viewed as void is [n, 1]).
        one_dim = [view if len(spec.shape) == 1 else None for view, spec in zip(self._packed, self.leaves, strict=True)]
        self._write = straight_writer(self.fields, one_dim, self._write_wrapping)

    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """Write rows ``arrays[k][i]`` to slot ``(start + i) % capacity``; n <= capacity.

        ``steps``: how many of the ring's steps these rows complete (what a crash-safe
        storage marks as pending before writing; see ``commit``).
        """
        self._write(start, arrays, steps)

    def _write_wrapping(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """A run that passes the end: the tail of the storage, then its head."""
        split = self.capacity - start
        self._write_run(start, [array[:split] for array in arrays])
        self._write_run(0, [array[split:] for array in arrays])

    def _write_run(self, start: int, arrays: Sequence[np.ndarray]) -> None:
        n = arrays[0].shape[0]
        end = start + n
        for field, packed, array in zip(self.fields, self._packed, arrays, strict=True):
            if packed is not None and array.flags.c_contiguous:
                rows = array if array.ndim == 2 else array.reshape(n, -1)
                packed[start:end] = rows.view(packed.dtype)
            else:
                field[start:end] = array

    def read(self, ids: np.ndarray) -> list[np.ndarray]:
        """The leaves of the records at ``ids`` (slot = id % capacity), each shaped ``ids.shape + leaf.shape``."""
        rows = read_rows(self.records, ids, self.read_threads)
        return [rows[name] for name in self._names]
