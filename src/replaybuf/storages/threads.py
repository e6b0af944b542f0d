"""Splitting one large read (frame decodes, row copies) across the usable cores.

One process-wide pool of worker threads, made on first use and made again in a forked
child (a ``ThreadPoolExecutor`` copied by ``fork`` has no threads left and would never run
what it is given). The work must release the GIL (compiled loops, C decoders) to gain
anything.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["usable_threads", "idle_threads", "run_split"]

LOADAVG = "/proc/loadavg"  # its fourth field: runnable threads / all threads
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (process id, workers, executor)
_pool_lock = threading.Lock()


def usable_threads() -> int:
    """How many threads one large read uses: the usable cores, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def idle_threads(threads: int) -> int:
    """``threads``, cut to this thread plus the cores no other runnable thread waits for right now
    (Linux's /proc/loadavg counts the runnable threads, this one included); ``threads`` where
    that count cannot be read. A part handed to a thread that waits for a core finishes after
    the whole read would have in one thread (docs/design.md, "Measured choices")."""
    try:
        fd = os.open(LOADAVG, os.O_RDONLY)
        try:
            runnable = int(os.read(fd, 128).split()[3].split(b"/")[0])
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return threads
    return max(1, min(threads, (os.cpu_count() or 1) - runnable + 1))


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid() or _pool[1] < workers:
            _pool = (os.getpid(), workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="replaybuf-read"))
        return _pool[2]


def run_split(run: Callable[[int, int], Any], n: int, threads: int) -> None:
    """``run(start, stop)`` over ``[0, n)`` cut into ``threads`` parts, the first in this thread."""
    if threads <= 1 or n < 2:
        run(0, n)
        return
    cuts = np.linspace(0, n, min(threads, n) + 1).astype(int).tolist()
    pool = _executor(len(cuts) - 2)
    parts = [pool.submit(run, a, b) for a, b in zip(cuts[1:-1], cuts[2:], strict=True)]
    run(0, cuts[1])  # one hand-over less
    for part in parts:
        part.result()
