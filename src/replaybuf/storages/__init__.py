"""Storages: where the bytes of items live. They know slots, never how ids were chosen.

Every storage satisfies ``replaybuf.storages.base.Storage`` (``write`` / ``commit``, ``read``,
``fields``, ``clear``, ``state`` / ``check_state`` / ``load_state``, ``lazy_keys``, ``crash_safe``).

``RecordStorage`` (one structured record per item, in RAM), ``ColumnStorage`` (one array
per leaf, in RAM), ``MemmapStorage`` (the same records in a memory-mapped folder),
``FrameStorage`` (stacked frames stored once, in a ``FramePool``) and
``storages.frame_memmap.MemmapFrameStorage`` (a frame storage in a folder).
"""

from __future__ import annotations

import os

from replaybuf.errors import ArgumentError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.storages.base import Storage
from replaybuf.storages.columns import ColumnStorage, FieldStorage
from replaybuf.storages.frame_leaves import StackedLeaf, stacked_leaves
from replaybuf.storages.frames import FrameStorage
from replaybuf.storages.memmap import MemmapStorage
from replaybuf.storages.records import RecordStorage

__all__ = [
    "ColumnStorage",
    "FieldStorage",
    "FrameStorage",
    "MemmapStorage",
    "RecordStorage",
    "StackedLeaf",
    "Storage",
    "open_storage",
    "stacked_leaves",
]


def open_storage(kind: str, path: str | os.PathLike | None, flat: FlatSpec, ring: StreamRing) -> FieldStorage:
    """The storage of a buffer: records in RAM (``"memory"``, the default: one-gather samples),
    columns in RAM (``"columns"``: faster batched adds of small items, slower samples; see
    docs/design.md, Storage) or records in a mapped folder (``"memmap"``, which sets ``ring``
    to the steps the folder holds).

    Raises:
        ArgumentError: an unknown ``kind``, ``"memmap"`` without a path, or a path with
            a storage in RAM.
        CheckpointError: ``path`` holds a buffer of another spec or geometry, or is a
            non-empty folder that is not a memmap buffer.
    """
    if kind in ("memory", "columns"):
        if path is not None:
            raise ArgumentError(f"path: only used with storage='memmap', got storage={kind!r} and path={path!r}")
        cls = RecordStorage if kind == "memory" else ColumnStorage
        return cls(flat.leaves, ring.capacity)
    if kind != "memmap":
        raise ArgumentError(f"storage: expected 'memory', 'columns' or 'memmap', got {kind!r}")
    if path is None:
        raise ArgumentError("path: storage='memmap' needs a folder path for its files")
    return MemmapStorage.open(path, flat, ring)
