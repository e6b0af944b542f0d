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
from typing import Any

import numpy as np

from replaybuf.storages.threads import idle_threads, run_split

__all__ = ["PARALLEL_BYTES", "read_rows"]

PARALLEL_BYTES = 4 << 20


@cache
def _memcpy() -> Any:
    """The C library's ``memcpy`` as numba calls it, or None without numba or a C library exporting it."""
    try:
        import numba  # noqa: F401

        memcpy = ctypes.CDLL(None).memcpy
    except (ImportError, OSError, AttributeError):
        return None
    memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcpy.restype = ctypes.c_void_p
    return memcpy


@cache
def _copy_rows() -> Callable[..., None] | None:
    """``copy(source, row_bytes, slots, destination, start, stop)``: rows ``slots[start:stop]``
    of the records at address ``source`` into rows ``start:stop`` at ``destination``; None
    without numba or a C library exporting ``memcpy``. Compiled once per process."""
    memcpy = _memcpy()
    if memcpy is None:
        return None
    import numba

    @numba.njit(nogil=True)
    def copy(source, row_bytes, slots, destination, start, stop):  # pragma: no cover - compiled
        for i in range(start, stop):
            memcpy(destination + np.uint64(i * row_bytes), source + np.uint64(slots[i] * row_bytes), row_bytes)

    return copy


# Windows prefetched ahead of the one being copied: the windows of a sample start at random
# in a ring far larger than the caches, and each run's memcpy waits on its first lines
# otherwise (figures: bench/analysis/88-sequences.md).
PREFETCH_AHEAD = 8


@cache
def _copy_runs() -> Callable[..., None] | None:
    """``copy(source, row_bytes, capacity, ids, destination, length)``: the records at
    ``ids`` (windows of ``length`` ids, flat; slot = id % capacity) of the ``capacity``
    records at address ``source`` into ``destination``, each run of consecutive ids inside
    a window (not passing the last slot) by one ``memcpy``, the lines of the window
    ``PREFETCH_AHEAD`` on asked for first (the plain loop where this numba cannot compile
    the prefetch); None as for ``_copy_rows``. Compiled once per process."""
    memcpy = _memcpy()
    if memcpy is None:
        return None
    records = np.arange(12, dtype=np.int32).reshape(6, 2)  # a check that the compiled loop copies
    ids = np.array([4, 5, 0, 0, 3, 4, 5, 6], np.int64)
    for prefetching in (True, False):
        try:
            copy = _build_copy_runs(memcpy, prefetching)
            rows = np.zeros((8, 2), np.int32)
            copy(records.ctypes.data, 8, 6, ids, rows.ctypes.data, 4)
        except Exception:  # noqa: BLE001 - a numba/LLVM that cannot lower the prefetch
            continue
        if rows.tobytes() == records[ids % 6].tobytes():
            return copy
    return None


def _build_copy_runs(memcpy: Any, prefetching: bool) -> Callable[..., None]:
    """``copy`` (see ``_copy_runs``), prefetching ``PREFETCH_AHEAD`` windows ahead or not."""
    import numba

    from replaybuf.storages.prefetch import prefetch_intrinsic

    prefetch = prefetch_intrinsic() if prefetching else None
    ahead = PREFETCH_AHEAD if prefetching else 0

    @numba.njit(nogil=True)
    def fetch(source, row_bytes, capacity, ids, length, window):  # pragma: no cover - compiled
        """Ask for the lines of window ``window``: all of them when its slots are one span
        no longer than the window (no wrap), else its first and last rows'."""
        if prefetch is not None:
            first = (ids[window * length] % capacity) * row_bytes
            last = (ids[window * length + length - 1] % capacity) * row_bytes
            if 0 <= last - first < length * row_bytes:
                for offset in range(first - first % 64, last + row_bytes, 64):
                    prefetch(source + np.uint64(offset))
            else:
                prefetch(source + np.uint64(first))
                prefetch(source + np.uint64(last))

    @numba.njit(nogil=True)
    def copy(source, row_bytes, capacity, ids, destination, length):  # pragma: no cover - compiled
        windows = ids.shape[0] // length
        for window in range(min(ahead, windows)):
            fetch(source, row_bytes, capacity, ids, length, window)
        for window in range(windows):
            if window + ahead < windows:
                fetch(source, row_bytes, capacity, ids, length, window + ahead)
            i, end = window * length, (window + 1) * length
            while i < end:
                slot, stop = ids[i] % capacity, i + 1
                if stop < end and ids[stop] == ids[i]:  # a clamped id repeated: its row once per step
                    while stop < end and ids[stop] == ids[i]:
                        stop += 1
                    for row in range(i, stop):
                        memcpy(
                            destination + np.uint64(row * row_bytes), source + np.uint64(slot * row_bytes), row_bytes
                        )
                    i = stop
                    continue
                while stop < end and ids[stop] == ids[stop - 1] + 1 and slot + (stop - i) < capacity:
                    stop += 1
                size = (stop - i) * row_bytes
                memcpy(destination + np.uint64(i * row_bytes), source + np.uint64(slot * row_bytes), size)
                i = stop

    return copy


RUN_STEPS = 16  # windows at least this long are copied by runs (a memcpy call costs ~ several rows of take)


def _runs(ids: np.ndarray) -> bool:
    """Whether ``ids`` look like windows of consecutive ids (``[..., T]``, T >= ``RUN_STEPS``, the
    first window's first two ids consecutive or equal: one stream's, maybe clamped)."""
    return ids.ndim > 1 and ids.shape[-1] >= RUN_STEPS and ids.size > 0 and 0 <= int(ids.flat[1] - ids.flat[0]) <= 1


def read_rows(records: np.ndarray, ids: np.ndarray, threads: int) -> np.ndarray:
    """The records at ``ids`` (slot = id % len(records)) of a 1-D C-contiguous ``records``: one
    ``take``, split over up to ``threads`` threads (the idle cores' worth) when it copies at
    least ``PARALLEL_BYTES``; long windows of one stream below that (``_runs``), by runs of
    consecutive ids (``_copy_runs``: one ``memcpy`` a run, where ``take`` copies row by row;
    the windows ahead prefetched).
    (Ids wrap by ``%``: ``take(mode="wrap")`` subtracts the length once per lap, so an id of a
    long-lived buffer would cost its number of laps.)"""
    row_bytes = records.dtype.itemsize
    small = threads <= 1 or ids.size * row_bytes < PARALLEL_BYTES
    if small and _runs(ids) and records.flags.c_contiguous:
        copy = _copy_runs()
        if copy is not None:
            flat = np.ascontiguousarray(ids, np.int64).reshape(-1)
            rows = np.empty(ids.shape, records.dtype)
            copy(records.ctypes.data, row_bytes, records.shape[0], flat, rows.ctypes.data, ids.shape[-1])
            return rows
    slots = ids % records.shape[0]
    if small or not records.flags.c_contiguous:
        return records.take(slots)
    threads = idle_threads(threads)
    copy = _copy_rows()
    if threads <= 1 or copy is None:
        return records.take(slots)
    flat = np.ascontiguousarray(slots, np.int64).reshape(-1)
    rows = np.empty(slots.shape, records.dtype)
    run_split(partial(copy, records.ctypes.data, row_bytes, flat, rows.ctypes.data), flat.size, threads)
    return rows
