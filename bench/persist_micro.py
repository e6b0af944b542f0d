"""Checkpoint and memmap micro-benchmark: replaybuf save/load beside plain np.save/np.load.

Buffers:
  small: 1M CartPole transitions (observation 4 f32, action i64, reward f32, discount f32,
         next_observation 4 f32: 48 bytes an item, 48 MB)
  image: 50k frames of 84x84x4 uint8 (1.41 GB)

Rows (MB/s of array bytes, best of --reps):
  save          buffer.save(path): state_dict() copy + .npy files + CRC-32 + fsync + renames
  np.save       np.save of the same state arrays into one folder (no fsync, no checksum)
  np.save+fsync the same, each file fsynced (the durable baseline)
  load          buffer.load(path): read + verify CRC-32 + load_state_dict
  np.load       np.load of the files np.save wrote
Loads are cold: every file is evicted from the page cache first (posix_fadvise DONTNEED,
our own files only), so they read from disk like a restart would.

memmap: get_next(256) items/s of the image buffer in RAM and in storage='memmap', with the
process RSS after filling each. Run:
    .venv/bin/python bench/persist_micro.py [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

from replaybuf import ArraySpec, PyUniformReplayBuffer, UniformReplayBuffer

SMALL_SPEC = {
    "observation": ArraySpec((4,), np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "discount": ArraySpec((), np.float32),
    "next_observation": ArraySpec((4,), np.float32),
}
IMAGE_SPEC = {"frame": ArraySpec((84, 84, 4), np.uint8), "action": ArraySpec((), np.int64)}


def fill(buffer: PyUniformReplayBuffer, spec: dict, count: int, chunk: int) -> None:
    rng = np.random.default_rng(0)
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        buffer.add_batch({
            k: (rng.integers(0, 255, (n, *s.shape), dtype=s.dtype) if s.dtype == np.uint8
                else rng.standard_normal((n, *s.shape)).astype(s.dtype))
            for k, s in spec.items()
        })


def evict(folder: Path) -> None:
    for file in folder.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def best(fn: Callable[[], object], reps: int, before: Callable[[], object] = lambda: None) -> float:
    times = []
    for _ in range(reps):
        before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def np_save(arrays: dict, folder: Path, fsync: bool) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, array in arrays.items():
        with open(folder / f"{name}.npy", "wb") as f:
            np.save(f, array)
            if fsync:
                f.flush()
                os.fsync(f.fileno())


def persist_rows(name: str, buffer: PyUniformReplayBuffer, spec: dict, root: Path, reps: int) -> None:
    state = buffer.state_dict()
    arrays = state["items"]
    mb = sum(a.nbytes for a in arrays.values()) / 1e6
    ours, plain = root / f"{name.split()[0]}-ckpt", root / f"{name.split()[0]}-npy"
    fresh = PyUniformReplayBuffer(spec, capacity=buffer.capacity)
    rows = {
        "save": best(lambda: buffer.save(ours), reps),
        "np.save": best(lambda: np_save(arrays, plain, fsync=False), reps),
        "np.save+fsync": best(lambda: np_save(arrays, plain, fsync=True), reps),
        "state_dict (copy only)": best(buffer.state_dict, reps),
        "load": best(lambda: fresh.load(ours), reps, lambda: evict(ours)),
        "np.load": best(lambda: [np.load(f) for f in sorted(plain.glob("*.npy"))], reps, lambda: evict(plain)),
    }
    print(f"\n{name}: {len(arrays)} arrays, {mb:.1f} MB")
    for row, seconds in rows.items():
        print(f"  {row:24s} {seconds * 1e3:9.1f} ms  {mb / seconds:8.0f} MB/s")
    shutil.rmtree(ours)
    shutil.rmtree(plain)


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def memmap_rows(frames: int, root: Path, reps: int) -> None:
    print(f"\nsample get_next(256), {frames} frames of 84x84x4 uint8:")
    for storage in ("memory", "memmap"):
        kwargs = {"storage": "memmap", "path": root / "mm"} if storage == "memmap" else {}
        before = rss_mb()
        buffer = UniformReplayBuffer(IMAGE_SPEC, batch_size=1, max_length=2 * frames, seed=0, **kwargs)
        created = rss_mb() - before
        frame = np.empty((1, 84, 84, 4), np.uint8)
        for i in range(frames):  # one step at a time, as a collecting agent adds them
            frame.fill(i % 251)
            buffer.add_batch({"frame": frame, "action": np.array([i])})
        filled = rss_mb() - before
        seconds = best(lambda b=buffer: [b.get_next(256) for _ in range(20)], reps) / 20
        print(
            f"  {storage:7s} capacity {2 * frames} frames ({2 * frames * 28224 / 1e9:.2f} GB): "
            f"RSS +{created:7.0f} MB after creating, +{filled:7.0f} MB after {frames} adds; "
            f"{256 / seconds:9.0f} items/s ({256 * 28224 / seconds / 1e6:6.0f} MB/s)"
        )
        del buffer
    shutil.rmtree(root / "mm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k transitions and 5k frames")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    small, frames = (100_000, 5_000) if args.quick else (1_000_000, 50_000)
    root = Path(tempfile.mkdtemp(prefix="persist-bench-", dir=args.dir))
    try:
        buffer = PyUniformReplayBuffer(SMALL_SPEC, capacity=small)
        fill(buffer, SMALL_SPEC, small, 100_000)
        persist_rows(f"small ({small} transitions)", buffer, SMALL_SPEC, root, args.reps)
        del buffer
        buffer = PyUniformReplayBuffer(IMAGE_SPEC, capacity=frames)
        fill(buffer, IMAGE_SPEC, frames, 2_000)
        persist_rows(f"image ({frames} frames)", buffer, IMAGE_SPEC, root, args.reps)
        del buffer
        memmap_rows(frames, root, args.reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
