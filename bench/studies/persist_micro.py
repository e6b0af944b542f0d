"""Study: What does a checkpoint's save / load cost beside np.save / np.load, and memmap sampling?
Answer: docs/persistence.md.

Checkpoint and memmap micro-benchmark: replaybuf save/load beside plain np.save/np.load.

Buffers:
  small: 1M CartPole transitions (observation 4 f32, action i64, reward f32, discount f32,
         next_observation 4 f32: 48 bytes an item, 48 MB)
  image: 50k frames of 84x84x4 uint8 (1.41 GB)

Rows (MB/s of array bytes; every row runs once per repetition, interleaved by the harness
(bench/harness.py) in an order rotated each round, median kept):
  save            buffer.save(path): items streamed from the storage + CRC-32 + fsync + renames
  np.save         np.save of the same arrays (the state_dict() leaves) into a folder, no fsync
  np.save+fsync   the same, each file fsynced (the durable baseline; it deletes the previous
                  files first, so its new blocks can reuse theirs)
  np.save+fsync, versioned   the same into a new folder, renamed into place, and only then
                  the previous one deleted (save's order: the old copy stays until the new
                  one is durable, so both exist at once)
  state_dict      the snapshot copy alone (what save no longer does)
  load (cold)     a new buffer, then buffer.load(path): read into the storage + verify CRC-32
  np.load (cold)  np.load of the files np.save wrote
Cold: every file is evicted from the page cache first (posix_fadvise DONTNEED, our own
files only), so loads read from disk like a restart would.

memmap: get_next(256) items/s of the image buffer in RAM, in storage='memmap', and in the
memmap folder reopened with its file evicted from the page cache (pages come from disk), with
the process RSS growth after creating, filling and sampling. Run:
    .venv/bin/python bench/studies/persist_micro.py [--quick] [--reps N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from replaybuf import ArraySpec, PyUniformReplayBuffer, UniformReplayBuffer  # noqa: E402

SMALL_SPEC = {
    "observation": ArraySpec((4,), np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "discount": ArraySpec((), np.float32),
    "next_observation": ArraySpec((4,), np.float32),
}
IMAGE_SPEC = {"frame": ArraySpec((84, 84, 4), np.uint8), "action": ArraySpec((), np.int64)}
FRAME_BYTES = 84 * 84 * 4


def fill(buffer: PyUniformReplayBuffer, spec: dict, count: int, chunk: int) -> None:
    rng = np.random.default_rng(0)
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        buffer.add_batch(
            {
                k: (
                    rng.integers(0, 255, (n, *s.shape), dtype=s.dtype)
                    if s.dtype == np.uint8
                    else rng.standard_normal((n, *s.shape)).astype(s.dtype)
                )
                for k, s in spec.items()
            }
        )


def evict(folder: Path) -> None:
    for file in folder.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def interleaved(
    rows: dict[str, tuple[Callable[[], object], Callable[[], object]]], timing: harness.Timing
) -> dict[str, float]:
    """Median seconds of each row's fn (its ``before`` run untimed first, then a garbage
    collection), the rows interleaved in an order rotated each round (what a row leaves
    behind, such as disk write-back or freed blocks, then falls on a different row each time)."""

    def prepare(before: Callable[[], object]) -> Callable[[], None]:
        return lambda: (before(), gc.collect())

    runs = {name: harness.repeat(fn) for name, (fn, _) in rows.items()}
    befores = {name: prepare(before) for name, (_, before) in rows.items()}
    times, _ = harness.interleave(runs, timing, before=befores, rotate=True)
    return {name: statistics.median(t) for name, t in times.items()}


def np_save(arrays: dict, folder: Path, fsync: bool) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, array in arrays.items():
        with open(folder / f"{name}.npy", "wb") as f:
            np.save(f, array)
            if fsync:
                f.flush()
                os.fsync(f.fileno())


def np_save_versioned(arrays: dict, root: Path) -> None:
    """np.save+fsync into a new folder, renamed into place, then the old one deleted: the
    same keep-the-previous-copy-until-the-new-one-is-durable order as save()."""
    root.mkdir(exist_ok=True)
    old = sorted(root.iterdir())
    new = root / f"v{len(old) and int(old[-1].name[1:]) + 1:06d}"
    temp = root / ".tmp"
    np_save(arrays, temp, fsync=True)
    fd = os.open(temp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.replace(temp, new)
    for folder in old:
        shutil.rmtree(folder)


def nothing() -> None:
    return None


def persist_rows(name: str, buffer: PyUniformReplayBuffer, spec: dict, root: Path, reps: int) -> None:
    arrays = buffer.state_dict()["items"]
    mb = sum(a.nbytes for a in arrays.values()) / 1e6
    ours, plain = root / f"{name.split()[0]}-ckpt", root / f"{name.split()[0]}-npy"
    versioned = root / f"{name.split()[0]}-npy-versions"
    buffer.save(ours)
    np_save(arrays, plain, fsync=True)

    def load() -> None:
        PyUniformReplayBuffer(spec, capacity=buffer.capacity).load(ours)

    rows = {
        "save": (lambda: buffer.save(ours), nothing),
        "np.save": (lambda: np_save(arrays, plain, fsync=False), nothing),
        "np.save+fsync": (lambda: np_save(arrays, plain, fsync=True), nothing),
        "np.save+fsync, versioned": (lambda: np_save_versioned(arrays, versioned), nothing),
        "state_dict (copy only)": (buffer.state_dict, nothing),
        "load (cold)": (load, lambda: evict(ours)),
        "np.load (cold)": (lambda: [np.load(f) for f in sorted(plain.glob("*.npy"))], lambda: evict(plain)),
    }
    print(f"\n{name}: {len(arrays)} arrays, {mb:.1f} MB (median of {reps}, interleaved)")
    for row, seconds in interleaved(rows, harness.Timing(reps, 0.0, 0.0)).items():
        print(f"  {row:24s} {seconds * 1e3:9.1f} ms  {mb / seconds:8.0f} MB/s")
    shutil.rmtree(ours)
    shutil.rmtree(plain)
    shutil.rmtree(versioned)


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def memmap_rows(frames: int, root: Path, reps: int) -> None:
    print(
        f"\nsample get_next(256), {frames} frames of 84x84x4 uint8 in a capacity of {2 * frames} "
        f"({2 * frames * FRAME_BYTES / 1e9:.2f} GB); RSS growth of the process at each stage:"
    )
    buffers, rss = {}, {}
    frame = np.empty((1, 84, 84, 4), np.uint8)
    for storage in ("memory", "memmap"):
        kwargs = {"storage": "memmap", "path": root / "mm"} if storage == "memmap" else {}
        before = rss_mb()
        buffer = UniformReplayBuffer(IMAGE_SPEC, batch_size=1, max_length=2 * frames, seed=0, **kwargs)
        created = rss_mb()
        for i in range(frames):  # one step at a time, as a collecting agent adds them
            frame.fill(i % 251)
            buffer.add_batch({"frame": frame, "action": np.array([i])})
        buffers[storage] = buffer
        rss[storage] = [created - before, rss_mb() - created]
    del buffers["memmap"], buffer  # unmapped, so its pages can be evicted
    gc.collect()
    evict(root / "mm")
    before = rss_mb()
    buffers["memmap reopened cold"] = UniformReplayBuffer(
        IMAGE_SPEC, batch_size=1, max_length=2 * frames, seed=0, storage="memmap", path=root / "mm"
    )
    rss["memmap reopened cold"] = [rss_mb() - before, None]
    first = {}
    for name, buffer in buffers.items():  # the first pass: a cold memmap reads its pages from disk
        before = rss_mb()
        first[name] = harness.seconds(harness.repeat(buffer.get_next, 256), 20)
        rss[name].append(rss_mb() - before)
    runs = {name: harness.repeat(b.get_next, 256) for name, b in buffers.items()}
    times, _ = harness.interleave(runs, harness.Timing(reps, 0.1, 0.0))
    seconds = {name: statistics.median(t) for name, t in times.items()}
    created, filled = rss["memmap"]
    print(f"  {'memmap (filling)':20s} RSS +{created:.0f} MB created, +{filled:.0f} MB after {frames} adds")
    for name in buffers:
        per_call = seconds[name]
        created, filled, sampled = rss[name]
        adds = "" if filled is None else f"+{filled:.0f} MB after {frames} adds, "
        print(
            f"  {name:20s} {256 / per_call:8.0f} items/s ({256 * FRAME_BYTES / per_call / 1e6:5.0f} MB/s), "
            f"first 20 calls {256 / first[name]:8.0f} items/s; RSS +{created:.0f} MB created, "
            f"{adds}+{sampled:.0f} MB after the first 20 calls"
        )
    del buffers
    shutil.rmtree(root / "mm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k transitions and 5k frames")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--reps", type=int, default=5)
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
