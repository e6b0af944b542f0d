"""The bytes of a shared buffer: one ``multiprocessing.shared_memory`` block, one segment per writer.

::

    [ block header: 64 B ][ writer 0 cursor: 64 B ] ... [ writer W-1 cursor: 64 B ][ pad to 64 ]
    [ segment 0: max_length x batch_size records ] ... [ segment W-1: ... ]

Each writer owns one segment (its ``batch_size`` streams) and one cursor on its own cache
line; no two processes ever write the same bytes, so there is no lock on the add path.
A cursor is four int64: ``steps`` (committed steps), ``writing`` (the end of the block being
written; equal to ``steps`` when idle), ``floor`` (the first step still whole after a
writer died mid-write) and ``owner`` (the pid holding the writer handle, 0 when free).

Commit protocol of a block of ``k`` steps: ``writing = steps + k``; copy the records;
``steps += k``. Readers take ``steps`` before they read and ``writing`` after: a step ``t``
is whole only if ``t >= writing - max_length`` (a write of step ``u`` overwrites the slot of
step ``u - max_length``), so a read that raced a writer is detected and drawn again. The
stores and loads are ordered on x86-64 (total store order); see docs/many_writers.md.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from replaybuf.nest import FlatSpec
from replaybuf.storages.records import record_dtype

__all__ = ["FLOOR", "OWNER", "STEPS", "WRITING", "Layout", "pid_alive"]

STEPS, WRITING, FLOOR, OWNER = range(4)
_LINE = 64  # bytes: one cursor per cache line
_MAGIC = 0x72656275_66736862  # "rebufshb"
_HEADER_MAGIC, _HEADER_CLOSED = 0, 1


class Layout:
    """Geometry and offsets of a shared block; ``views(buf)`` maps it as NumPy arrays."""

    def __init__(self, flat: FlatSpec, writers: int, batch_size: int, max_length: int):
        self.writers, self.batch_size, self.max_length = writers, batch_size, max_length
        self.dtype = record_dtype(flat.leaves)
        self.records_offset = _LINE * (1 + writers)
        self.segment_records = max_length * batch_size
        self.size = self.records_offset + max(1, writers * self.segment_records * self.dtype.itemsize)

    def views(self, buf: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(header int64[8], cursors int64[W, 8], records [W * L * B])`` over ``buf``."""
        header = np.ndarray((_LINE // 8,), np.int64, buf, 0)
        cursors = np.ndarray((self.writers, _LINE // 8), np.int64, buf, _LINE)
        records = np.ndarray((self.writers * self.segment_records,), self.dtype, buf, self.records_offset)
        return header, cursors, records

    @staticmethod
    def initialise(header: np.ndarray) -> None:
        header[_HEADER_MAGIC] = _MAGIC

    @staticmethod
    def closed(header: np.ndarray) -> bool:
        return bool(header[_HEADER_CLOSED])

    @staticmethod
    def mark_closed(header: np.ndarray) -> None:
        header[_HEADER_CLOSED] = 1


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts until its parent reaps it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
