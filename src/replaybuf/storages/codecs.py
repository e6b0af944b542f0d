"""Frame codecs of the compressed frame storage (``compression=`` of the frame-stack buffers).

A codec turns one frame's bytes into one blob and back: ``"lz4"`` (the ``lz4`` package,
LZ4 block format) and ``"zstd"`` (the ``zstandard`` package), both in the ``compress``
extra (``pip install replaybuf[compress]``). Each distinct frame is compressed once, when
it is added; a sample decodes the frames it uses, each once, in as few Python calls as the
packages allow (one call per frame: neither has a call that decodes many blocks into one
array), split over threads when there are many (both release the GIL while decoding).

Levels: ``lz4`` without a level is LZ4's fast mode; levels 1 to 12 are LZ4-HC (smaller,
slower to compress, decoded as fast). ``zstd`` levels run from -7 (fastest) to 22
(default 1: on Atari frames level 3 and above gain under 2% in size for twice the time,
docs/images.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError

__all__ = ["CODECS", "Codec", "decode_frames", "make_codec"]

CODECS = ("lz4", "zstd")
_LEVELS = {"lz4": (1, 12), "zstd": (-7, 22)}
_PACKAGES = {"lz4": "lz4", "zstd": "zstandard"}

# A batch of at least this many distinct frames is decoded by several threads.
PARALLEL_FRAMES = 256


class Codec:
    """One codec at one level: ``compress(frame) -> bytes``, ``decompress(blob) -> bytes``.

    ``frame_bytes`` is the size of every frame; a blob that does not decode to exactly that
    many bytes raises ``CheckpointError`` (only checkpoints can hand over foreign blobs).
    """

    def __init__(self, name: str, level: int | None, frame_bytes: int):
        self.name, self.level, self.frame_bytes = name, level, frame_bytes
        self._local = threading.local()  # zstandard's (de)compressor objects are per thread
        if name == "lz4":
            import lz4.block

            block = lz4.block
            if level is None:
                self._compress = lambda frame: block.compress(frame, store_size=False)
            else:
                self._compress = lambda frame: block.compress(
                    frame, mode="high_compression", compression=level, store_size=False
                )
            self._lz4_decompress = partial(block.decompress, uncompressed_size=frame_bytes)
            self._errors: tuple[type[BaseException], ...] = (lz4.block.LZ4BlockError, ValueError)
        else:
            import zstandard

            self._compress = zstandard.ZstdCompressor(level=1 if level is None else level).compress
            self._zstd = zstandard
            self._errors = (zstandard.ZstdError, ValueError)

    def decoder(self) -> Callable[[Any], bytes]:
        """``decompress`` for the calling thread, as a C-level callable (no Python frame per
        blob): zstandard's decompressor objects must not be shared between threads."""
        if self.name == "lz4":
            return self._lz4_decompress
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            decompressor = self._zstd.ZstdDecompressor()
            decoder = self._local.decoder = partial(decompressor.decompress, max_output_size=self.frame_bytes)
        return decoder

    def compress(self, frame: Any) -> bytes:
        """``frame``'s blob, in a bytes object of its own size: the codecs allocate the worst
        case and shrink it in place, which leaves the allocator a hole per frame (measured:
        zstd blobs of 1.2 KB held 5 KB of RSS each, 1.26 KB once copied)."""
        return bytes(memoryview(self._compress(frame)))

    def decompress(self, blob: Any) -> bytes:
        return self.decoder()(blob)

    def checked(self, blob: Any, where: str) -> bytes:
        """``blob`` decoded; CheckpointError naming ``where`` when it is not one frame's bytes."""
        try:
            data = self.decompress(blob)
        except self._errors as err:
            raise CheckpointError(f"{where}: not a {self.name} frame ({err})") from None
        if len(data) != self.frame_bytes:
            raise CheckpointError(f"{where}: decodes to {len(data)} bytes, a frame has {self.frame_bytes}")
        return data


def make_codec(compression: Any, level: Any, frame_bytes: int) -> Codec | None:
    """The codec named by ``compression`` (None: no compression) at ``level``.

    Raises:
        ArgumentError: an unknown ``compression``, a ``compression_level`` outside the
            codec's range or given without a codec, or the codec's package is not installed.
    """
    if compression is None:
        if level is not None:
            raise ArgumentError(f"compression_level: only used with a compression codec {CODECS}, got {level!r}")
        return None
    if not isinstance(compression, str) or compression not in CODECS:
        raise ArgumentError(f"compression: expected one of {CODECS} or None, got {compression!r}")
    low, high = _LEVELS[compression]
    if level is not None and (level.__class__ is not int or not low <= level <= high):
        raise ArgumentError(
            f"compression_level: expected None or an int from {low} to {high} for {compression!r}, got {level!r}"
        )
    try:
        return Codec(compression, level, frame_bytes)
    except ImportError:
        raise ArgumentError(
            f"compression: {compression!r} needs the {_PACKAGES[compression]} package "
            f"(pip install 'replaybuf[compress]'), which is not installed"
        ) from None


_pool: tuple[int, ThreadPoolExecutor] | None = None  # (workers, executor)
_pool_lock = threading.Lock()


def decode_threads() -> int:
    """How many threads decode a large batch: the usable cores, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def _executor(threads: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] < threads:
            _pool = (threads, ThreadPoolExecutor(max_workers=threads, thread_name_prefix="replaybuf-decode"))
        return _pool[1]


def decode_frames(codec: Codec, blobs: Sequence[Any], out: np.ndarray, threads: int = 1) -> None:
    """Decode ``blobs[i]`` into row ``i`` of ``out`` (``[n, frame_bytes]`` uint8), with up to
    ``threads`` threads when there are at least ``PARALLEL_FRAMES`` blobs."""
    n = len(blobs)
    if threads <= 1 or n < PARALLEL_FRAMES:
        _decode_run(codec, blobs, out, 0, n)
        return
    cuts = np.linspace(0, n, threads + 1).astype(int).tolist()
    pool = _executor(threads)
    runs = [pool.submit(_decode_run, codec, blobs, out, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    for run in runs:
        run.result()


def _decode_run(codec: Codec, blobs: Sequence[Any], out: np.ndarray, start: int, stop: int) -> None:
    """Rows ``start:stop``: each blob decoded and copied into its row through a memoryview
    (a plain memcpy; joining the bytes first would touch a fresh buffer of the whole run)."""
    decompress, size = codec.decoder(), codec.frame_bytes
    view = memoryview(out.reshape(-1))
    offset = start * size
    for blob in blobs[start:stop]:
        view[offset : offset + size] = decompress(blob)
        offset += size
