"""Study: how fast can the frames of a sample be read from a frame file in the page cache?
Answer: bench/analysis/89-torch-prioritized.md (the memmap part), docs/persistence.md.

Builds the study buffer of ``frames_memmap_rss.py`` on disk (16 streams x 1,000 adds of
160x160 uint8 frames, 410 MB), maps every page of its ``frames.npy`` once, then times (thread
CPU time, median of ``--batches``) three ways to copy 1,024 random frames into one block: a
numba loop calling libc ``pread`` once per frame (the system calls' floor, no Python in the
loop), ``np.take`` from the file's read-only mapping (what ``storage="memmap"`` does), and
``np.take`` from an in-RAM copy of the ring (what the in-RAM buffer does).
Run:
    PYTHONPATH=src .venv/bin/python bench/studies/frames_read_floor.py [--batches 30]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from frames_memmap_rss import FRAME, SPEC

from replaybuf import FrameStackReplayBuffer

_libc = ctypes.CDLL(None, use_errno=True)
_pread = _libc.pread
_pread.restype = ctypes.c_ssize_t
_pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]


@numba.njit(nogil=True)
def read_rows(fd: int, rows: np.ndarray, offset: int, width: int, out: int) -> int:
    """``pread`` file row ``rows[i]`` into row i of the block at address ``out``; the short reads."""
    short = 0
    for i in range(rows.size):
        if _pread(fd, out + i * width, width, offset + rows[i] * width) != width:
            short += 1
    return short


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    streams, steps = 16, 1000
    with tempfile.TemporaryDirectory() as scratch:
        rb = FrameStackReplayBuffer(SPEC, streams, steps, seed=0, storage="memmap", path=Path(scratch) / "rb")
        window = np.zeros((streams, 4, *FRAME), np.uint8)
        for t in range(steps):
            window[:, :3] = window[:, 1:]
            window[:, 3] = ((t * streams + np.arange(streams)) % 250 + 1)[:, None, None]
            rb.add_batch({"observation": window, "action": t * streams + np.arange(streams)})
        pool = rb.storage.pool
        mapped = pool.frames.reshape(pool.size + 1, -1)
        ram = np.array(mapped)
        out = np.empty((1024, pool.frame_bytes), np.uint8)
        np.take(mapped, np.arange(pool.counter), axis=0)  # every page mapped: the steady state
        fd = os.open(pool.path, os.O_RDONLY)
        try:
            read_rows(fd, np.arange(4), pool.offset, pool.frame_bytes, out.ctypes.data)  # compiled
            ways = {
                "numba pread loop": lambda rows: read_rows(fd, rows, pool.offset, pool.frame_bytes, out.ctypes.data),
                "np.take from the mapping": lambda rows: np.take(mapped, rows, axis=0, out=out, mode="clip"),
                "np.take from RAM": lambda rows: np.take(ram, rows, axis=0, out=out, mode="clip"),
            }
            times: dict = {name: [] for name in ways}
            rng = np.random.default_rng(0)
            for _ in range(args.batches):
                rows = rng.integers(0, pool.counter, 1024)
                for name, way in ways.items():
                    cpu = time.thread_time()
                    way(rows)
                    times[name].append(1e3 * (time.thread_time() - cpu))
        finally:
            os.close(fd)
    for name, values in times.items():
        print(f"| {name} | {np.median(values):.2f} ms per 1,024 frames |")


if __name__ == "__main__":
    main()
