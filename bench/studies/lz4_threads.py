"""Study: Below which batch does splitting lz4 decoding over threads stop paying?
Answer: docs/images.md (the compressed frames' threads).

What splitting lz4 decoding over threads buys at small batches, on real Atari frames.

The compressed frame buffer decodes a batch's distinct frames in one compiled loop per
thread (replaybuf.storages.codecs), and splits only batches of at least
``PARALLEL_FRAMES`` frames over threads: below that the hand-over costs more than it saves.
This script gives the evidence, on one batch of ``--frames`` distinct MsPacman frames
(160: what ``get_next(32)`` of ``[4, 84, 84]`` observation + next observation decodes;
1280: ``get_next(256)``), microseconds per batch, median of ``--reps`` repetitions of about
``--seconds`` each, the three ways interleaved by the harness (bench/harness.py):

  serial           replaybuf's loop in this thread (what a batch of 32 uses)
  executor 2       the same loop split in two, the second half handed to a
                   ThreadPoolExecutor thread (what batches of >= PARALLEL_FRAMES use)
  numba prange     the same loop as ``numba.njit(parallel=True)``, in the threading layer
                   numba picks (NUMBA_THREADING_LAYER=workqueue|omp to choose)

Run (one layer per process: numba fixes it at the first parallel call):

    NUMBA_THREADING_LAYER=omp .venv/bin/python bench/studies/lz4_threads.py
    NUMBA_THREADING_LAYER=workqueue .venv/bin/python bench/studies/lz4_threads.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from suites.frames_compressed import FRAME, game_frames  # noqa: E402

FRAME_BYTES = FRAME[0] * FRAME[1]


def kernels():
    import numba

    from replaybuf.storages.codecs import _lz4_decode_many, lz4_decompress_safe

    serial, decompress = _lz4_decode_many(), lz4_decompress_safe()

    @numba.njit(nogil=True, parallel=True)
    def parallel(addresses, lengths, rows, out, out_rows, frame_bytes, start, stop):  # pragma: no cover - compiled
        failed, out_address = 0, out.ctypes.data
        for i in numba.prange(start, stop):
            row = rows[i]
            target = out_address + out_rows[i] * frame_bytes
            if decompress(addresses[row], target, lengths[row], frame_bytes) != frame_bytes:
                failed += 1
        return failed

    return serial, parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", default="160,1280")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.1, help="seconds per repetition")
    args = parser.parse_args()
    import lz4.block
    import numba

    frames, _ = game_frames("MsPacman", 6100)
    blobs = [lz4.block.compress(frame.tobytes(), store_size=False) for frame in frames]
    sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
    joined = np.frombuffer(b"".join(blobs), np.uint8)  # end to end, as the buffer's BlobRing holds them
    starts = joined.ctypes.data + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
    serial, parallel = kernels()
    pool = ThreadPoolExecutor(1)
    rng = np.random.default_rng(0)
    for n in [int(x) for x in args.frames.split(",")]:
        out = np.empty((n, FRAME_BYTES), np.uint8)
        picked = rng.choice(len(blobs), n, replace=False)
        call = (starts, sizes, picked, out, np.arange(n, dtype=np.int64), FRAME_BYTES)

        def split(call=call, n=n):
            second = pool.submit(serial, *call, n // 2, n)
            serial(*call, 0, n // 2)
            second.result()

        ways = {
            "serial": harness.repeat(serial, *call, 0, n),
            "executor 2": harness.repeat(split),
            "numba prange": harness.repeat(parallel, *call, 0, n),
        }
        times, _ = harness.interleave(ways, harness.Timing(args.reps, args.seconds, 0.0))
        medians = {name: round(statistics.median(values) * 1e6, 1) for name, values in times.items()}
        print(f"{n} frames, us per batch (numba layer {numba.threading_layer()}): {medians}")


if __name__ == "__main__":
    main()
