"""Reading records at scattered slots: one ``take``, or for large reads a compiled row copy
split across the usable cores.

A sample of image records copies scattered rows of tens of KB. NumPy's ``take`` does it in
one thread (and holds the GIL for structured records); from ``PARALLEL_BYTES`` on, the rows
are copied by a compiled loop of ``memcpy`` calls (numba, no GIL), the slots cut between
the threads. Below the threshold (bench W2's 32 image rows) a second thread's hand-over
costs what it saves, and so does a split while the other cores are busy: a read splits
only over the cores idle at that moment (figures: docs/design.md, "Measured choices").
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache, partial

import numpy as np

from replaybuf.storages.threads import idle_threads, run_split

__all__ = ["PARALLEL_BYTES", "read_rows"]

PARALLEL_BYTES = 4 << 20


@cache
def _copy_rows() -> Callable[..., None] | None:
    """``copy(source, row_bytes, slots, destination, start, stop)``: rows ``slots[start:stop]``
    of the records at address ``source`` into rows ``start:stop`` at ``destination``; None
    without numba or a C library exporting ``memcpy``. Compiled once per process."""
    try:
        import numba

        memcpy = ctypes.CDLL(None).memcpy
    except (ImportError, OSError, AttributeError):
        return None
    memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcpy.restype = ctypes.c_void_p

    @numba.njit(nogil=True)
    def copy(source, row_bytes, slots, destination, start, stop):  # pragma: no cover - compiled
        for i in range(start, stop):
            memcpy(destination + np.uint64(i * row_bytes), source + np.uint64(slots[i] * row_bytes), row_bytes)

    return copy


def read_rows(records: np.ndarray, ids: np.ndarray, threads: int) -> np.ndarray:
    """The records at ``ids`` (slot = id % len(records)) of a 1-D C-contiguous ``records``: one
    ``take``, split over up to ``threads`` threads (the idle cores' worth) when it copies at
    least ``PARALLEL_BYTES``. (Ids wrap by ``%``: ``take(mode="wrap")`` subtracts the length
    once per lap, so an id of a long-lived buffer would cost its number of laps.)"""
    slots = ids % records.shape[0]
    row_bytes = records.dtype.itemsize
    if threads <= 1 or slots.size * row_bytes < PARALLEL_BYTES or not records.flags.c_contiguous:
        return records.take(slots)
    threads = idle_threads(threads)
    copy = _copy_rows()
    if threads <= 1 or copy is None:
        return records.take(slots)
    flat = np.ascontiguousarray(slots, np.int64).reshape(-1)
    rows = np.empty(slots.shape, records.dtype)
    run_split(partial(copy, records.ctypes.data, row_bytes, flat, rows.ctypes.data), flat.size, threads)
    return rows
