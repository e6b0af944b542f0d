"""Frame codecs of the compressed frame storage (``compression=`` of the frame-stack buffers).

A codec turns one frame's bytes into one blob and back: ``"lz4"`` (the ``lz4`` package,
LZ4 block format) and ``"zstd"`` (the ``zstandard`` package), both in the ``compress``
extra (``pip install replaybuf[compress]``). Each distinct frame is compressed once, when
it is added; a sample decodes the frames it uses, each once, split over threads when there
are many: lz4 frames in one compiled loop over LZ4's own C function (with numba), zstd
frames in one Python call each (zstandard has no call that decodes many blocks into one
array; it releases the GIL while decoding).

Levels: ``lz4`` level 0 is LZ4's fast mode, 1 to 12 LZ4-HC; the default is HC level 3:
on Atari frames HC blobs are a fifth smaller and decode a third faster than fast mode's
(fewer, longer matches), for ~3x the compress time (docs/images.md). ``zstd`` levels run
from -7 (fastest) to 22 (default 1: on Atari frames level 3 and above gain under 2% in size
for twice the time).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from functools import cache, partial
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError, ReplayBufferError
from replaybuf.storages.blobs import BlobRing
from replaybuf.storages.prefetch import prefetch_intrinsic
from replaybuf.storages.threads import run_split

__all__ = ["CODECS", "Codec", "decode_frames", "make_codec"]

CODECS = ("lz4", "zstd")
_LEVELS = {"lz4": (0, 12), "zstd": (-7, 22)}
DEFAULT_LEVELS = {"lz4": 3, "zstd": 1}  # compression_level=None
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
        effective = DEFAULT_LEVELS[name] if level is None else level
        self._local = threading.local()  # zstandard's (de)compressor objects are per thread
        # ``decode_many(addresses, lengths, rows, out, out_rows, frame_bytes, start, stop)``:
        # the blobs of pool rows ``rows[start:stop]`` (by ``addresses`` and ``lengths`` per
        # pool row) decoded straight into rows ``out_rows`` of ``out`` in one compiled call
        # without the GIL; returns how many did not decode to one frame. None where the codec
        # or numba cannot (then: one ``decompress`` and a copy per frame)
        self.decode_many: Callable[..., int] | None = None
        if name == "lz4":
            import lz4.block

            block = lz4.block
            if effective == 0:
                self._compress = lambda frame: block.compress(frame, store_size=False)
            else:
                self._compress = lambda frame: block.compress(
                    frame, mode="high_compression", compression=effective, store_size=False
                )
            self._lz4_decompress = partial(block.decompress, uncompressed_size=frame_bytes)
            self.decode_many = _lz4_decode_many()
            self._errors: tuple[type[BaseException], ...] = (lz4.block.LZ4BlockError, ValueError)
        else:
            import zstandard

            self._compress = zstandard.ZstdCompressor(level=effective).compress
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
        """``frame``'s blob (short-lived: the storage copies it into its ``BlobRing``)."""
        return self._compress(frame)

    @property
    def largest_blob(self) -> int:
        """An upper bound on one frame's blob (LZ4's and zstd's worst case, with room)."""
        return self.frame_bytes + self.frame_bytes // 64 + 1024

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


@cache
def lz4_decompress_safe() -> Callable[[int, int, int, int], int] | None:
    """LZ4's own ``LZ4_decompress_safe(src, dst, compressed_size, dst_capacity)`` (bounds-checked)
    from the liblz4 the lz4 package bundles, addresses as ints; None without the lz4
    package or where its extension does not export it."""
    try:
        import lz4.block

        library = ctypes.CDLL(lz4.block._block.__file__)
        library.LZ4_decompress_safe  # noqa: B018 - raises AttributeError when not exported
    except (ImportError, AttributeError, OSError):
        return None
    address, count = ctypes.c_uint64, ctypes.c_int  # pointers passed as 64-bit addresses
    return ctypes.CFUNCTYPE(count, address, address, count, count)(("LZ4_decompress_safe", library))


# Blobs prefetched ahead of the one being decoded: a sample's blobs lie at random in a pool
# far larger than the caches, and the decoder waits on each blob's first lines otherwise
# (figures: docs/design.md, "Measured choices").
PREFETCH_AHEAD = 4


@cache
def _lz4_decode_many() -> Callable[..., int] | None:
    """A compiled loop (numba, no GIL) calling ``lz4_decompress_safe`` per blob, prefetching
    the blobs ahead (the plain loop where this numba cannot compile the prefetch); None
    without numba or that function. Faster than ``lz4.block.decompress`` plus a copy per
    frame, and it scales over threads, which a Python loop of per-frame calls does not (its
    threads meet at the GIL between frames; figures: docs/design.md, "Measured choices").
    Compiled once per process, on the first lz4 buffer."""
    decompress = lz4_decompress_safe()
    if decompress is None:
        return None
    try:
        import lz4.block
        import numba  # noqa: F401
    except ImportError:
        return None
    frame = bytes(range(64)) * 4  # a check that the compiled loop decodes
    blob = np.frombuffer(lz4.block.compress(frame, store_size=False), np.uint8)
    one = np.zeros(1, np.int64)
    for prefetching in (True, False):
        try:
            decode_many = _build_decode_many(decompress, prefetching)
            out = np.zeros((1, len(frame)), np.uint8)
            lengths = np.array([blob.size], np.int64)
            failed = decode_many(np.array([blob.ctypes.data], np.uint64), lengths, one, out, one, len(frame), 0, 1)
        except Exception:  # noqa: BLE001 - a numba/LLVM that cannot lower the prefetch
            continue
        if failed == 0 and out.tobytes() == frame:
            return decode_many
    return None


def _build_decode_many(decompress: Callable[..., int], prefetching: bool) -> Callable[..., int]:
    """``decode_many`` (see ``Codec``), prefetching ``PREFETCH_AHEAD`` blobs ahead or not."""
    import numba

    prefetch = prefetch_intrinsic() if prefetching else None
    ahead = PREFETCH_AHEAD if prefetching else 0

    @numba.njit(nogil=True)
    def fetch(addresses, lengths, row):  # pragma: no cover - compiled
        if prefetch is not None:
            for offset in range(0, lengths[row], 64):  # every cache line of the blob
                prefetch(addresses[row] + np.uint64(offset))

    @numba.njit(nogil=True)
    def decode_many(addresses, lengths, rows, out, out_rows, frame_bytes, start, stop):  # pragma: no cover - compiled
        failed, out_address = 0, out.ctypes.data
        for i in range(start, min(stop, start + ahead)):
            fetch(addresses, lengths, rows[i])
        for i in range(start, stop):
            if i + ahead < stop:
                fetch(addresses, lengths, rows[i + ahead])
            row = rows[i]
            target = out_address + out_rows[i] * frame_bytes
            if decompress(addresses[row], target, lengths[row], frame_bytes) != frame_bytes:
                failed += 1
        return failed

    return decode_many


def decode_frames(
    codec: Codec, ring: BlobRing, rows: np.ndarray, out: np.ndarray, out_rows: np.ndarray, threads: int = 1
) -> None:
    """Decode the blobs of pool rows ``rows`` (of ``ring``) into rows ``out_rows`` of ``out``
    (C-contiguous ``[m, frame_bytes]`` uint8), with up to ``threads`` threads when there are
    at least ``PARALLEL_FRAMES`` blobs."""
    n = len(rows)
    if codec.decode_many is not None:
        run: Callable[..., Any] = partial(_decode_many, codec, ring.addresses, ring.lengths, rows, out, out_rows)
    else:
        run = partial(_decode_run, codec, [ring.blob(row) for row in rows.tolist()], out, np.asarray(out_rows).tolist())
    run_split(run, n, threads if n >= PARALLEL_FRAMES else 1)


def _decode_many(codec: Codec, addresses, lengths, rows, out, out_rows, start: int, stop: int) -> None:  # noqa: ANN001
    failed = codec.decode_many(addresses, lengths, rows, out, out_rows, codec.frame_bytes, start, stop)  # type: ignore[misc]
    if failed:
        raise ReplayBufferError(f"frame pool: {failed} {codec.name} blob(s) did not decode to one frame")


def _decode_run(
    codec: Codec, blobs: Sequence[Any], out: np.ndarray, rows: Sequence[int], start: int, stop: int
) -> None:
    """Blobs ``start:stop``: each decoded, then copied into its row through a memoryview (a
    plain memcpy)."""
    size = codec.frame_bytes
    decompress = codec.decoder()
    view = memoryview(out.reshape(-1))
    for blob, row in zip(blobs[start:stop], rows[start:stop], strict=True):
        view[row * size : (row + 1) * size] = decompress(blob)
