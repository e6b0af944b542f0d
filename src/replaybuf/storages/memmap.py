"""Disk-backed storage: the record array in a memory-mapped file, so capacity can exceed RAM.

``MemmapStorage.open(path, flat, ring)`` opens (or creates) a folder::

    path/
      meta.json      format, data_spec (paths, shapes, dtypes), batch_size, max_length
      records.npy    ``capacity`` records of the buffer's structured dtype (np.load(mmap_mode=))
      cursor.npy     int64[2]: [committed steps, steps being written]

Pages are mapped from the file when touched, so RSS follows what is read and written, not the
capacity (the file starts sparse). Every write follows one commit protocol (the shared
buffer's too: ``replaybuf.ring.WriterCursors``, whose ``floor`` is kept in the ring here):
``write`` first reserves in the cursor the steps it is about to write (pending), then writes
the records (both halves of a wrapping write under one reservation), and ``commit`` then
stores the new step count. All three are plain stores into shared mappings, so a writer
killed at any moment (SIGKILL included) leaves a folder that reopens with every item whose
add completed. The items the interrupted add was overwriting (the oldest ones of a full
buffer, as many as that add held) may be torn and are dropped on reopen (the ring's
``floor``). Durability against a machine crash or power loss is left to the kernel's
write-back: nothing here calls msync on the add path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import read_npy_header
from replaybuf.persistence.state import SPEC_KEYS, max_steps, plain_equal, spec_state
from replaybuf.ring import StreamRing, WriterCursors
from replaybuf.specs import ArraySpec
from replaybuf.storages.records import RecordStorage, record_dtype

__all__ = ["MemmapStorage"]

FORMAT = "replaybuf-memmap"
FORMAT_VERSION = 1
META, RECORDS, CURSOR = "meta.json", "records.npy", "cursor.npy"


class MemmapStorage(RecordStorage):
    """RecordStorage over a mapped file whose cursor follows the commit protocol above."""

    crash_safe = True

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int, records: np.ndarray, commits: WriterCursors):
        super().__init__(leaves, capacity, records)
        self._commits = commits  # over the mapped cursor file

    @classmethod
    def open(cls, path: str | os.PathLike, flat: FlatSpec, ring: StreamRing, kind: dict | None = None) -> MemmapStorage:
        """The storage of the folder ``path`` (created when absent or empty); ``ring`` is set
        to the steps it holds, whole items only. ``kind``: more of ``meta.json`` that must
        match (a frame-stack buffer's spec and frames, ``storages.frame_memmap``).

        Raises:
            CheckpointError: ``path`` holds a buffer of another spec or geometry, is a
                non-empty folder that is not a memmap buffer, or its files are damaged.
        """
        folder = Path(path)
        capacity = ring.capacity
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "spec": spec_state(flat),
            "batch_size": ring.batch_size,
            "max_length": ring.max_length,
            **(kind or {}),
        }
        if not (folder / META).is_file():
            _create(folder, meta, record_dtype(flat.leaves), capacity)
        try:
            saved = json.loads((folder / META).read_bytes())
        except (OSError, ValueError, RecursionError) as err:
            raise CheckpointError(f"{folder}: cannot read {META} ({err}); corrupt") from None
        if not isinstance(saved, dict):
            raise CheckpointError(f"{folder}: {META} holds {type(saved).__name__}, expected an object; corrupt")
        for key in ("format", "format_version", "batch_size", "max_length", *(kind or {})):
            if not plain_equal(saved.get(key), meta[key]):
                raise CheckpointError(
                    f"{folder}: holds a buffer with {key}={saved.get(key)!r:.80}; this buffer needs "
                    f"{key}={meta[key]!r} (open it with the same data_spec and geometry, or use a new folder)"
                )
        spec = saved.get("spec")
        if not isinstance(spec, dict) or not all(plain_equal(spec.get(k), meta["spec"][k]) for k in SPEC_KEYS):
            raise CheckpointError(
                f"{folder}: holds a buffer with spec={spec!r:.300}; this buffer needs spec={meta['spec']!r} "
                "(open it with the same data_spec and geometry, or use a new folder)"
            )
        records, cursor = _map(folder / RECORDS), _map(folder / CURSOR)
        if records.shape != (capacity,) or records.dtype != record_dtype(flat.leaves):
            raise CheckpointError(
                f"{folder}: {RECORDS} holds {records.shape} {records.dtype}, {META} needs ({capacity},) "
                f"{record_dtype(flat.leaves)}; corrupt"
            )
        if cursor.shape != (2,) or cursor.dtype != np.int64:
            raise CheckpointError(
                f"{folder}: {CURSOR} holds {cursor.shape} {cursor.dtype.str}, expected int64 "
                "[committed, pending]; corrupt"
            )
        committed, pending = (int(v) for v in cursor)
        largest = max_steps(ring.batch_size)  # as for a loaded state: ids stay below 2**62
        if not 0 <= committed <= pending <= largest:
            raise CheckpointError(
                f"{folder}: {CURSOR} holds [committed, pending] = [{committed}, {pending}], expected "
                f"0 <= committed <= pending <= {largest}; corrupt"
            )
        commits = WriterCursors(cursor, ring.max_length)
        ring.reset(committed, commits.recovered_floor())
        return cls(flat.leaves, capacity, records, commits)

    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """Reserve ``steps`` steps in the cursor (pending), then write the rows."""
        self._commits.reserve(steps)
        super().write(start, arrays, steps)

    def commit(self, steps: int) -> None:
        """Everything up to ``steps`` is written: commit it (after the data)."""
        self._commits.commit(steps)

    def load_state(self, start: int, leaves: list) -> None:
        """As RecordStorage's; the folder reads as empty until the loaded state is committed."""
        self.commit(0)
        super().load_state(start, leaves)


def _map(path: Path) -> np.memmap:
    """The ``.npy`` file at ``path`` mapped read-write; CheckpointError when it is missing, its
    header is damaged (NumPy's parser raises ValueError, SyntaxError, TokenError, ... then) or
    its size is not what the header says (``np.load`` would silently extend a cut file)."""
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f, path)
            offset, size = f.tell(), os.fstat(f.fileno()).st_size
    except OSError as err:
        raise CheckpointError(f"{path.parent}: cannot open {path.name} ({err}); corrupt") from None
    if fortran or offset + math.prod(shape) * dtype.itemsize != size:
        raise CheckpointError(
            f"{path.parent}: {path.name} holds {size} bytes, its header says {shape} {dtype.str}; truncated or corrupt"
        )
    try:
        return np.memmap(path, dtype=dtype, mode="r+", offset=offset, shape=shape)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path.parent}: cannot map {path.name} ({err}); corrupt") from None


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
    try:
        np.lib.format.open_memmap(temp / RECORDS, mode="w+", dtype=dtype, shape=(capacity,)).flush()
        np.save(temp / CURSOR, np.zeros(2, np.int64))
        (temp / META).write_text(json.dumps(meta, indent=1))
        for name in (RECORDS, CURSOR, META):
            with open(temp / name, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(temp, folder)
    except BaseException:  # a full disk, an interrupt: leave no half-built sibling behind
        shutil.rmtree(temp, ignore_errors=True)
        raise
