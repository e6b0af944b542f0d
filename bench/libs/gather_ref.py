"""W2's random-gather floor: the fastest copy of randomly drawn rows this host allows.

The store holds the same 84x84x4 transitions as replaybuf's default layout, one packed
record per item (obs, action, reward, done: 28,237 bytes). A sample draws ``batch`` slots
as the NumPy references do (``Generator.integers``) and copies each record with one
``memcpy``, in a loop compiled by numba that releases the GIL, the slots split between this
thread and one other (the fastest of the gathers measured on the 2-core host:
docs/benchmarks.md, "W2 against its floor"). No checks, no output dict: what any buffer
returning random rows has to pay at least. A contiguous copy (numpy-memcpy) is faster
still, but random rows cannot reach it. gather-1thread is the same loop in one thread;
gather-fresh the floor copying into a new output each call (what a buffer returning new
arrays pays on top of the copy).
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from common import IMAGE_SHAPE, chunks, image_pool
from libs import Missing, shared

RECORD = np.dtype([("obs", np.uint8, IMAGE_SHAPE), ("action", np.int64), ("reward", np.float32), ("done", np.bool_)])


def version(lib: str) -> str:
    import numba

    return f"numpy {np.__version__}, numba {numba.__version__}"


def _copier():
    """``copy(dst, src, row_bytes, slots, lo, hi)``: record ``slots[i]`` of ``src`` to row ``i`` of ``dst``."""
    try:
        import numba
    except ImportError as exc:
        raise Missing(f"numba not installed ({exc})") from None
    libc_memcpy = ctypes.CDLL(None).memcpy
    libc_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    libc_memcpy.restype = ctypes.c_void_p

    @numba.njit(nogil=True, cache=False)
    def copy(dst, src, row_bytes, slots, lo, hi):  # pragma: no cover - compiled
        for i in range(lo, hi):
            libc_memcpy(dst + np.uint64(i) * row_bytes, src + np.uint64(slots[i]) * row_bytes, row_bytes)

    return copy


def _records(sizes) -> np.ndarray:
    def build():
        store = np.zeros(sizes.image_capacity, RECORD)
        for start, batch in chunks(image_pool(), sizes.image_stored):
            rows = store[start : start + len(batch["obs"])]
            for name, values in batch.items():
                rows[name] = values
        return store

    return shared("records", build)


def gather(batch_size: int, split: bool = True, fresh: bool = False):
    """The floor of W2 at ``batch_size``: compiled row copies of random slots, split over two threads
    (``split=False``: all in this thread, which tells the second core's share from the loop's), into
    one output reused by every call (``fresh``: a new output each call, as a buffer returns)."""

    def factory(sizes):
        store = _records(sizes)
        copy = shared("copy", _copier)
        pool = shared("pool", lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="gather-floor"))
        rng = np.random.default_rng(1)
        out = np.empty(batch_size, RECORD)
        row_bytes = np.uint64(RECORD.itemsize)
        half = batch_size // 2 if split else batch_size

        def run(n):
            for _ in range(n):
                slots = rng.integers(0, sizes.image_stored, batch_size)
                target = np.empty(batch_size, RECORD) if fresh else out  # alive until both halves are copied
                src, dst = store.ctypes.data, target.ctypes.data
                other = pool.submit(copy, dst, src, row_bytes, slots, half, batch_size) if split else None
                copy(dst, src, row_bytes, slots, 0, half)
                if other is not None:
                    other.result()

        return run

    return factory


LIBS = {
    "gather-floor": {"w2_sample32": gather(32), "w2_sample256": gather(256)},
    "gather-1thread": {"w2_sample32": gather(32, split=False), "w2_sample256": gather(256, split=False)},
    "gather-fresh": {"w2_sample32": gather(32, fresh=True), "w2_sample256": gather(256, fresh=True)},
}
