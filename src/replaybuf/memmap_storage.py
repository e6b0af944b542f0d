"""Disk-backed storage: the record array in a memory-mapped file, so capacity can exceed RAM.

``open_storage("memmap", path, ...)`` opens (or creates) a folder::

    path/
      meta.json      format, data_spec (paths, shapes, dtypes), batch_size, max_length
      records.npy    ``capacity`` records of the buffer's structured dtype (np.load(mmap_mode=))
      cursor.npy     int64[2]: [committed steps, steps being written]

Pages are mapped from the file when touched, so RSS follows what is read and written, not the
capacity (the file starts sparse). Every add first marks in the cursor the steps it is
about to write, then writes the records, then commits the new step count; all three are
plain stores into shared mappings, so a writer killed at any moment (SIGKILL included)
leaves a folder that reopens with every item whose add completed. The items the
interrupted add was overwriting (the oldest ones of a full buffer, as many as that add
held) may be torn and are dropped on reopen. Durability against a machine crash or power
loss is left to the kernel's write-back: nothing here calls msync on the add path.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.state import spec_state
from replaybuf.storage import RecordStorage, record_dtype

__all__ = ["CommittedRing", "MemmapStorage", "open_storage", "recovered_episode_state"]

FORMAT = "replaybuf-memmap"
FORMAT_VERSION = 1
META, RECORDS, CURSOR = "meta.json", "records.npy", "cursor.npy"


class CommittedRing(StreamRing):
    """A StreamRing whose ``steps`` is written through to a mapped cursor on every change.

    ``floor`` is the first step still intact after recovering from a torn write (0 when
    none); it stops mattering once the ring has moved ``max_length`` steps past it.
    """

    def __init__(self, batch_size: int, max_length: int, cursor: np.ndarray):
        self._cursor = None
        self._steps = 0
        self.floor = 0
        super().__init__(batch_size, max_length)
        committed, pending = int(cursor[0]), int(cursor[1])
        self._steps = committed
        self.floor = min(committed, max(0, pending - max_length)) if pending > committed else 0
        self._cursor = cursor

    @property
    def steps(self) -> int:  # type: ignore[override]
        return self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        if value < self._steps:
            self.floor = 0
        self._steps = value
        if self._cursor is not None:
            self._cursor[0] = value  # committed: after the data (the storage wrote it first)
            self._cursor[1] = value

    def first_valid_step(self) -> int:
        return max(0, self._steps - self.max_length, self.floor)

    def num_valid_steps(self) -> int:
        return self._steps - self.first_valid_step()


class MemmapStorage(RecordStorage):
    """RecordStorage over a mapped file that marks the steps it writes before writing them."""

    def __init__(self, flat: FlatSpec, capacity: int, records: np.ndarray, cursor: np.ndarray, batch_size: int):
        super().__init__(flat.leaves, capacity, records)
        self._cursor = cursor
        self._batch_size = batch_size

    def write(self, start: int, arrays: Any) -> None:
        n = arrays[0].shape[0] if arrays else 0
        self._cursor[1] = self._cursor[0] + n // self._batch_size  # pending: before the data
        super().write(start, arrays)


def open_storage(
    kind: str, path: str | os.PathLike | None, flat: FlatSpec, batch_size: int, max_length: int
) -> tuple[StreamRing, RecordStorage]:
    """The ring and storage a buffer uses: in RAM (``"memory"``) or a mapped folder (``"memmap"``).

    Raises:
        ArgumentError: an unknown ``kind``, ``"memmap"`` without a path, or a path with
            ``"memory"``.
        CheckpointError: ``path`` holds a buffer of another spec or geometry, or is a
            non-empty folder that is not a memmap buffer.
    """
    if kind == "memory":
        if path is not None:
            raise ArgumentError(f"path: only used with storage='memmap', got storage='memory' and path={path!r}")
        return StreamRing(batch_size, max_length), RecordStorage(flat.leaves, batch_size * max_length)
    if kind != "memmap":
        raise ArgumentError(f"storage: expected 'memory' or 'memmap', got {kind!r}")
    if path is None:
        raise ArgumentError("path: storage='memmap' needs a folder path for its files")
    folder = Path(path)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "spec": spec_state(flat),
        "batch_size": batch_size,
        "max_length": max_length,
    }
    if not (folder / META).is_file():
        _create(folder, meta, record_dtype(flat.leaves), batch_size * max_length)
    try:
        saved = json.loads((folder / META).read_bytes())
        records = np.load(folder / RECORDS, mmap_mode="r+")
        cursor = np.load(folder / CURSOR, mmap_mode="r+")
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{folder}: cannot open the memmap buffer ({err})") from None
    for key in ("format", "format_version", "spec", "batch_size", "max_length"):
        if saved.get(key) != meta[key]:
            raise CheckpointError(
                f"{folder}: holds a buffer with {key}={saved.get(key)!r}; this buffer needs "
                f"{key}={meta[key]!r} (open it with the same data_spec and geometry, or use a new folder)"
            )
    dtype = record_dtype(flat.leaves)
    if records.shape != (batch_size * max_length,) or records.dtype != dtype or cursor.shape != (2,):
        raise CheckpointError(f"{folder}: {RECORDS} or {CURSOR} does not match {META}; corrupt")
    ring = CommittedRing(batch_size, max_length, cursor)
    return ring, MemmapStorage(flat, batch_size * max_length, records, cursor, batch_size)


def _create(folder: Path, meta: dict, dtype: np.dtype, capacity: int) -> None:
    """Build the files in a temporary sibling and rename it into place (empty or absent)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CheckpointError(
            f"{folder}: exists and is not a memmap buffer folder (no {META}); use a new or empty folder"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    temp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir()
    np.lib.format.open_memmap(temp / RECORDS, mode="w+", dtype=dtype, shape=(capacity,)).flush()
    np.save(temp / CURSOR, np.zeros(2, np.int64))
    (temp / META).write_text(json.dumps(meta, indent=1))
    for name in (RECORDS, CURSOR, META):
        with open(temp / name, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(temp, folder)


class _StepLeaves(Sequence):
    """The stored leaves as ``[step, stream, ...]`` for the valid steps, each built on access."""

    def __init__(self, ring: StreamRing, fields: Sequence[np.ndarray]):
        self._fields, self._ring = fields, ring
        self._order = np.arange(ring.first_valid_step(), ring.steps) % ring.max_length

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        field = self._fields[index]
        return field.reshape(self._ring.max_length, self._ring.batch_size, *field.shape[1:])[self._order]

    def __len__(self) -> int:
        return len(self._fields)


def recovered_episode_state(ring: StreamRing, fields: Sequence[np.ndarray], markers: Any) -> dict:
    """An ``EpisodeIndex.state_dict()`` derived from the stored items (a reopened folder).

    Positions count from the oldest stored item of each stream (or its episode's start):
    smaller than the original's for an episode that began before the oldest item, which
    changes no window's validity, since no window starts before that item. Only the marker
    fields are read.
    """
    every = np.zeros(ring.capacity, np.int64)
    if ring.num_valid_steps() == 0:
        last, ended = np.full(ring.batch_size, -1, np.int64), np.ones(ring.batch_size, bool)
        return {"position": every, "last": last, "ended": ended}
    starts, ends = markers(_StepLeaves(ring, fields))
    ends = np.asarray(ends, bool)
    count = ends.shape[0]
    begins = np.zeros_like(ends)
    begins[0] = True
    begins[1:] = ends[:-1]
    if starts is not None:
        begins |= np.asarray(starts, bool)
    t = np.arange(count)[:, None]
    position = t - np.maximum.accumulate(np.where(begins, t, 0), axis=0)
    slots = (np.arange(ring.first_valid_step(), ring.steps) % ring.max_length)[:, None] * ring.batch_size
    every[slots + np.arange(ring.batch_size)] = position
    return {"position": every, "last": position[-1].copy(), "ended": ends[-1].copy()}
