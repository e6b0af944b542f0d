"""The bytes of a shared buffer: one ``multiprocessing.shared_memory`` block, one segment per writer.

::

    [ block header: 64 B ][ writer 0 cursor: 64 B ] ... [ writer W-1 cursor: 64 B ][ pad to 64 ]
    [ segment 0: max_length x batch_size records ] ... [ segment W-1: ... ]
    [ prioritized buffers: one float64 per record slot, the priority given at insert (0: none) ]

Each writer owns one segment (its ``batch_size`` streams) and one cursor on its own cache
line; no two processes ever write the same bytes, so there is no lock on the add path.
A cursor is five int64: ``steps`` (committed steps), ``writing`` (the end of the block being
written; equal to ``steps`` when idle), ``floor`` (the first step still whole after a
writer died mid-write), ``owner`` (the pid holding the writer handle, 0 when free) and
``held`` (the last pid that held it, kept after it is given up; 0 if none ever did).
The learner reads the last two to tell live writers from gone ones.

A writer writes the priority column of its slots (what ``add_batch(..., priorities=)`` gave,
or 0) with their records, before the commit; the learner reads it for the steps it takes in
(``replaybuf.shared.priorities``).

The first three are ``replaybuf.ring.WriterCursors``' counters, and its commit rule is the
protocol: a block of ``k`` steps sets ``writing = steps + k``, copies the records, then
``steps += k``; readers take ``steps`` before they read and ``writing`` after, so a read
that raced a writer is detected and drawn again. The stores and loads are ordered on x86-64
(total store order); see docs/many_writers.md.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from replaybuf.nest import FlatSpec
from replaybuf.ring import STEPS
from replaybuf.storages.records import record_dtype

__all__ = ["HELD", "OWNER", "Layout", "pid_alive"]

OWNER, HELD = range(STEPS + 3, STEPS + 5)  # after the commit counters of replaybuf.ring.WriterCursors
_LINE = 64  # bytes: one cursor per cache line
_MAGIC = 0x72656275_66736862  # "rebufshb"
_HEADER_MAGIC, _HEADER_CLOSED = 0, 1


class Layout:
    """Geometry and offsets of a shared block; ``views(buf)`` maps it as NumPy arrays."""

    def __init__(self, flat: FlatSpec, writers: int, batch_size: int, max_length: int, priorities: bool = False):
        self.writers, self.batch_size, self.max_length = writers, batch_size, max_length
        self.dtype = record_dtype(flat.leaves)
        self.records_offset = _LINE * (1 + writers)
        self.segment_records = max_length * batch_size
        records_end = self.records_offset + max(1, writers * self.segment_records * self.dtype.itemsize)
        self.priorities_offset = -(-records_end // 8) * 8 if priorities else None
        self.size = records_end if not priorities else self.priorities_offset + writers * self.segment_records * 8

    def priority_column(self, buf: Any) -> np.ndarray | None:
        """The priorities given at insert, float64 ``[W * L * B]`` by record slot (None without)."""
        if self.priorities_offset is None:
            return None
        return np.ndarray((self.writers * self.segment_records,), np.float64, buf, self.priorities_offset)

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
    """Whether process ``pid`` runs: it exists and is no zombie (a dead child not yet reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: the state follows the command name, which may itself hold ") "
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b") ")[2][:1] not in (b"Z", b"X")
    except OSError:  # no /proc (macOS) or the process just went: trust kill's answer
        return True
