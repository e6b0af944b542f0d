"""Study: Which codec should compressed frame storage use, on real Atari frames?
Answer: docs/images.md, "Codecs measured on real frames"; the buffers themselves: the frames_compressed suite.

Every codec on the same frames (bench/suites/frames_compressed.py's recorded ALE frames, 84x84
grayscale): mean compressed size, compress microseconds per frame, and decode microseconds
per frame for a batch of 1280 random frames (what a 256-sample draw of [4, 84, 84] obs + next
obs needs) in one thread; every codec's compress and decode interleaved by the harness
(bench/harness.py), median of ``--reps``. blosc2 rows appear when blosc2 is installed (not
a replaybuf dependency). The buffers (RSS, add, sample beside the uncompressed one) are
the ``frames_compressed`` suite: ``python -m bench frames_compressed``.

    PYTHONPATH=src .venv/bin/python bench/studies/frames_compressed.py [--game MsPacman] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from suites.frames_compressed import FRAME, SIZES, game_frames  # noqa: E402

FRAME_BYTES = FRAME[0] * FRAME[1]
DECODED = 1280  # frames a get_next(256) of obs + next obs decodes


def codecs() -> dict:
    """{name: (compress, decompress)} of every codec installed."""
    import lz4.block
    import zstandard

    found: dict = {
        "lz4 fast (0)": (
            lambda b: lz4.block.compress(b, store_size=False),
            lambda b: lz4.block.decompress(b, uncompressed_size=FRAME_BYTES),
        ),
    }
    for level in (3, 9):  # 3: replaybuf's default for "lz4"
        found[f"lz4-hc {level}"] = (
            lambda b, level=level: lz4.block.compress(b, mode="high_compression", compression=level, store_size=False),
            lambda b: lz4.block.decompress(b, uncompressed_size=FRAME_BYTES),
        )
    decompressor = zstandard.ZstdDecompressor()
    for level in (1, 3, 9):
        found[f"zstd {level}"] = (zstandard.ZstdCompressor(level=level).compress, decompressor.decompress)
    try:
        import blosc2

        for name, codec in (("lz4", blosc2.Codec.LZ4), ("zstd", blosc2.Codec.ZSTD)):
            found[f"blosc2 {name} 5"] = (
                lambda b, c=codec: blosc2.compress2(b, codec=c, clevel=5, typesize=1, nthreads=1),
                blosc2.decompress2,
            )
    except ImportError:
        pass
    return found


def codec_table(frames: np.ndarray, reps: int) -> list[tuple[str, float, float, float]]:
    """(codec, bytes per frame, compress us per frame, decode us per frame) of every codec."""
    rng = np.random.default_rng(0)
    sample = frames[rng.choice(len(frames), min(len(frames), 5000), replace=False)]
    runs, sizes = {}, {}
    for name, (compress, decompress) in codecs().items():
        blobs = [compress(frame) for frame in sample]
        sizes[name] = sum(map(len, blobs)) / len(blobs)
        batches = [rng.integers(0, len(blobs), DECODED).tolist() for _ in range(8)]

        def compress_run(n: int, compress=compress) -> None:
            for i in range(n):
                compress(sample[i % len(sample)])

        def decode_run(n: int, decompress=decompress, blobs=blobs, batches=batches) -> None:
            for i in range(n):
                out = np.frombuffer(b"".join([decompress(blobs[j]) for j in batches[i % 8]]), np.uint8)
                assert out.size == DECODED * FRAME_BYTES

        runs[f"{name} compress"], runs[f"{name} decode"] = compress_run, decode_run
    times, _ = harness.interleave(runs, harness.Timing(reps, 0.1, 0.0))
    us = {key: statistics.median(t) * 1e6 for key, t in times.items()}
    return [(name, size, us[f"{name} compress"], us[f"{name} decode"] / DECODED) for name, size in sizes.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="MsPacman")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    frames, starts = game_frames(args.game, SIZES["full"][0])
    print(
        f"{args.game}: {len(frames)} frames 84x84 uint8 ({int(starts.sum())} episodes), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"\ncodec       bytes/frame  ratio  compress us/frame  decode us/frame ({DECODED} a batch, {args.reps} reps)")
    for name, size, compress_us, decode_us in codec_table(frames, args.reps):
        print(f"{name:14} {size:9.0f} {FRAME_BYTES / size:6.1f} {compress_us:18.1f} {decode_us:16.2f}")


if __name__ == "__main__":
    main()
