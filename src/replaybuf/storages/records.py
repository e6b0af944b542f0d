"""Host storage: every item is one fixed-size record in one preallocated NumPy array.

All leaves of an item live side by side in one record (a structured dtype, each field
aligned), so sampling B items is one gather of B records instead of one gather per leaf,
and each returned leaf is a field view of that gather. The storage knows slots only: which
slots to read or write is decided by the buffer and its sampler. Its checkpoint part
(``state`` / ``check_state`` / ``load_state``) is the ``items`` of a buffer's state.

Memory is allocated with ``np.zeros`` (calloc), so pages are mapped when first written and
RSS follows what is stored, not the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import ArrayRun, StoredArray
from replaybuf.persistence.state import check_items, read_run, ring_views
from replaybuf.specs import ArraySpec

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


class RecordStorage:
    """``capacity`` records of ``record_dtype(leaves)``, read and written by slot."""

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int, records: np.ndarray | None = None):
        self.leaves = list(leaves)
        self.capacity = capacity
        self.dtype = record_dtype(self.leaves)
        self.records = np.zeros(capacity, self.dtype) if records is None else records
        self._names = list(self.dtype.names or ())
        self.fields = [self.records[name] for name in self._names]
        # Batched writes of a small multi-element field (e.g. obs float32[4]) go through a
        # view of it as one opaque n-byte element per record: NumPy then copies one element
        # per row instead of looping over the row's elements (~4x faster for 16 bytes).
        # ([capacity, 1] views, so a C-contiguous [n, 16-byte row] source viewed as void is
        # already [n, 1]: no reshape of either side per write)
        views = [_packed_view(self.records, name) for name in self._names]
        self._packed = [None if view is None else view[:, None] for view in views]

    lazy_keys = ("items",)  # state keys load() may read straight into the storage (StoredArray)
    crash_safe = False  # whether it survives a crash, keeping a floor below which items were lost

    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """Write rows ``arrays[k][i]`` to slot ``(start + i) % capacity``; n <= capacity.

        ``steps``: how many of the ring's steps these rows complete (what a crash-safe
        storage marks as pending before writing; see ``commit``).
        """
        n = arrays[0].shape[0] if arrays else 0
        if n == 0:
            return
        if n == 1:  # one item (batch_size 1): integer indexing is ~2x faster than a slice
            for field, array in zip(self.fields, arrays, strict=True):
                field[start] = array[0]
            return
        end = start + n
        if end > self.capacity:  # wraps: the tail of the storage, then its head
            split = self.capacity - start
            self._write_run(start, [array[:split] for array in arrays])
            self._write_run(0, [array[split:] for array in arrays])
            return
        self._write_run(start, arrays)

    def _write_run(self, start: int, arrays: Sequence[np.ndarray]) -> None:
        n = arrays[0].shape[0]
        end = start + n
        for field, packed, array in zip(self.fields, self._packed, arrays, strict=True):
            if packed is not None and array.flags.c_contiguous:
                rows = array if array.ndim == 2 else array.reshape(n, -1)
                packed[start:end] = rows.view(packed.dtype)
            else:
                field[start:end] = array

    def commit(self, steps: int) -> None:
        """The ring now counts ``steps`` steps (everything written is whole): nothing to do in RAM."""

    def clear(self) -> None:
        """Nothing to forget: slots are overwritten before they are read again."""

    def read(self, slots: np.ndarray) -> list[np.ndarray]:
        """The leaves of the records at ``slots``, each shaped ``slots.shape + leaf.shape``."""
        rows = self.records.take(slots)
        return [rows[name] for name in self._names]

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, start: int, count: int, views: bool = False) -> dict:
        """``{"items": {"0": rows, ...}}``: ``count`` rows of each leaf from slot ``start`` in
        id order, copies (or, for ``save``, views streamed under the buffer's lock)."""
        if views:
            leaves: list = [ArrayRun(ring_views(field, start, count)) for field in self.fields]
        else:
            leaves = read_run(self.fields, start, count)
        return {"items": {str(i): leaf for i, leaf in enumerate(leaves)}}

    def check_state(self, flat: FlatSpec, state: dict) -> tuple[int, list]:
        """``(count, leaves)`` of a ``state()``'s items, checked against ``flat``'s leaves."""
        leaves = check_items(flat, state, range(len(flat.leaves)), (np.ndarray, StoredArray))
        return (leaves[0].shape[0] if leaves else 0), leaves

    def load_state(self, start: int, leaves: list) -> None:
        """Write checked ``leaves`` from slot ``start``, a stored file straight into the fields.

        Raises:
            CheckpointError: a stored file turned out truncated or corrupt; the rows written
                so far are garbage and the caller must discard them.
        """
        if all(isinstance(leaf, np.ndarray) for leaf in leaves):
            self.write(start, leaves)
            return
        for field, leaf in zip(self.fields, leaves, strict=True):
            views = ring_views(field, start, leaf.shape[0])
            if isinstance(leaf, StoredArray):
                leaf.read_into(ArrayRun(views))
            else:
                _assign(views, leaf)


def _assign(views: list[np.ndarray], rows: Any) -> None:
    done = 0
    for view in views:
        view[...] = rows[done : done + len(view)]
        done += len(view)
