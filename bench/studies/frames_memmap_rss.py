"""Study: what do a frame-stack buffer on disk (``storage="memmap"``) and its samples cost in
resident memory and time, beside the same buffer in RAM? Answer: docs/persistence.md.

Both buffers get the same adds: ``--streams`` streams x ``--steps`` adds of 4-frame stacks of
160x160 uint8 frames (one new 25.6 KB frame per stream and add), then ``--samples`` calls of
``get_next(--batch)`` (32 by default). Printed per buffer: MB of frames written, the
process's RSS growth (MB) after the adds and after the samples, ms per add and per sample
(wall, then process CPU time: all threads, system time included), RSS bytes per stored item
after the adds, and the folder's disk blocks (MB; 0 in RAM); then the first sample's CPU
time (memmap: the faults that map the frames it reads), the median sample's, and the growth
of anonymous and file-backed RSS after the samples (memmap reads through the file's mapping:
its frames' pages are file-backed page cache). The memmap folder is in
``--dir`` (default: a temporary folder); its frames stay in the page cache (warm reads).
``--compression lz4`` / ``zstd``: both buffers keep their frames compressed (the frames
here are flat, so they compress to almost nothing).
Run:
    PYTHONPATH=src .venv/bin/python bench/studies/frames_memmap_rss.py [--steps 1000] [--streams 16]
        [--compression lz4] [--batch 256]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from replaybuf import ArraySpec, FrameStackReplayBuffer

FRAME = (160, 160)
SPEC = {"observation": ArraySpec((4, *FRAME), np.uint8), "action": ArraySpec((), np.int64)}


def run(streams: int, steps: int, samples: int, batch: int = 32, **storage: object) -> dict:
    process = psutil.Process()
    rb = FrameStackReplayBuffer(SPEC, streams, steps, seed=0, **storage)
    gc.collect()
    before = process.memory_info().rss  # after the buffer is built (the first one loads numba's kernels)
    first = _status()
    window = np.zeros((streams, 4, *FRAME), np.uint8)
    start, cpu = time.perf_counter(), time.process_time()
    for t in range(steps):
        window[:, :3] = window[:, 1:]
        window[:, 3] = ((t * streams + np.arange(streams)) % 250 + 1)[:, None, None]
        rb.add_batch({"observation": window, "action": t * streams + np.arange(streams)})
    add_ms, add_cpu = 1e3 * (time.perf_counter() - start) / steps, 1e3 * (time.process_time() - cpu) / steps
    after_adds = process.memory_info().rss - before
    start, cpus = time.perf_counter(), []
    for _ in range(samples):
        cpu = time.process_time()
        rb.get_next(batch)
        cpus.append(1e3 * (time.process_time() - cpu))
    sample_ms, sample_cpu = 1e3 * (time.perf_counter() - start) / samples, sum(cpus) / samples
    status = _status()
    return {
        "written MB": rb.storage.pool.counter * FRAME[0] * FRAME[1] / 1e6,
        "RSS after adds MB": after_adds / 1e6,
        "RSS after samples MB": (process.memory_info().rss - before) / 1e6,
        "ms per add": add_ms,
        "ms per sample": sample_ms,
        "CPU ms per add": add_cpu,
        "CPU ms per sample": sample_cpu,
        "CPU ms first sample": cpus[0],
        "median CPU ms per sample": float(np.median(cpus)),
        "RssAnon growth MB": (status["RssAnon"] - first["RssAnon"]) / 1e6,
        "RssFile growth MB": (status["RssFile"] - first["RssFile"]) / 1e6,
        "RSS B per item": after_adds / (streams * steps),
        "disk MB": sum(f.stat().st_blocks * 512 for f in Path(storage["path"]).iterdir()) / 1e6  # type: ignore[arg-type]
        if "path" in storage
        else 0.0,
    }


def _status() -> dict[str, int]:
    """This process's anonymous and file-backed resident bytes (/proc/self/status; the
    file-backed ones are the frame file's mapped pages: page cache)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("RssAnon", "RssFile")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--compression", default=None, choices=("lz4", "zstd"))
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    codec = {"compression": args.compression, "batch": args.batch}
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        mapped = run(args.streams, args.steps, args.samples, storage="memmap", path=Path(scratch) / "rb", **codec)
        memory = run(args.streams, args.steps, args.samples, **codec)
    print("| buffer | " + " | ".join(mapped) + " |")
    print("| --- |" + " ---: |" * len(mapped))
    for name, row in (("memmap", mapped), ("memory", memory)):
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in row.values()) + " |")


if __name__ == "__main__":
    main()
