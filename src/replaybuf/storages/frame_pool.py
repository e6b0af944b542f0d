"""The frame pool of a ``FrameStorage``: the frames its items point to, each held once.

The pool is a ring of ``size`` frames addressed by ``counter % size`` (``counter``: the
frames appended so far, the pointer the next frame gets). Raw, ``frames`` holds them and
row ``size`` is the all-zero frame (pointer ``ZERO``); RSS follows the frames written (the
ring is calloc'ed). With a codec each frame is one compressed blob, compressed once when
appended, end to end in a ``BlobRing`` addressed by pool row.

Items never use a frame older than the oldest stored item's floor, which the storage hands
to ``append``: an append that would overwrite a frame still used grows the ring first
(doubling, a copy of the live frames), which only happens when episodes are much shorter
than expected.

A read of compressed frames decodes each distinct frame it uses once: into a scratch pool
reused between reads (``frames_for``: a fresh array per read would fault in new pages,
about as slow as the decoding), or straight into the places of the batch (``decode_batch``,
for frames that lie whole in their stacks; ``fill``). A pool whose raw frames live in a file
maps it as ``frames`` (``storages.frame_memmap``). The pool's part of a checkpoint
(``state``, ``check_state``, ``checked``, ``load``) is its live frames once: raw, or the
blobs as they are with the codec's name (docs/images.md).
"""

from __future__ import annotations

from math import prod
from types import ModuleType

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.persistence.folder import ArrayRun
from replaybuf.persistence.state import ring_views
from replaybuf.storages.blobs import BlobRing
from replaybuf.storages.codecs import CODECS, Codec, decode_frames, make_codec

__all__ = ["ZERO", "FramePool", "pool_rows"]

ZERO = -1  # the pointer of the all-zero frame


def pool_rows(pointers: np.ndarray, size: int) -> np.ndarray:
    """The rows of a pool of ``size`` frames (row ``size``: the zero frame) that ``pointers`` name."""
    return np.where(pointers < 0, size, pointers % size)


def _decode_plan(every: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """NumPy's ``_frame_kernels.decode_plan`` (same arrays)."""
    counters, first, inverse = np.unique(every, return_index=True, return_inverse=True)
    live = counters >= 0
    source = first[inverse]
    zero = every < 0
    targets = np.flatnonzero((source != np.arange(every.size)) & ~zero)
    return counters[live] % size, first[live], targets, source[targets], np.flatnonzero(zero)


class FramePool:
    """``size`` frames of ``frame_shape`` and ``frame_dtype`` by ``counter % size``, raw or
    compressed with ``codec``; ``batch_size`` (the buffer's streams) is the slack kept when
    the ring grows."""

    def __init__(
        self, frame_shape: tuple[int, ...], frame_dtype: np.dtype, size: int, batch_size: int, codec: Codec | None
    ):
        self.frame_shape, self.frame_dtype = frame_shape, np.dtype(frame_dtype)
        self.size, self.batch_size, self.codec = size, batch_size, codec
        # Raw: the frame ring (row size is the zero frame). Compressed: one blob per row.
        self.frames = np.zeros((1 if codec else size + 1, *frame_shape), self.frame_dtype)
        self.blobs = BlobRing(size, codec.largest_blob) if codec else None
        self.frame_bytes = prod(frame_shape) * self.frame_dtype.itemsize
        self._held = np.empty((0, self.frame_bytes), np.uint8)  # the distinct frames of a read
        self.clear()

    def clear(self) -> None:
        """No frame appended (the memory kept for the next ones)."""
        self.counter = 0
        if self.blobs is not None:
            self.blobs.clear()

    # -- writing ---------------------------------------------------------------------------------
    def append(self, new_frames: np.ndarray, oldest: int) -> None:
        """Append ``new_frames`` (``[m, *frame]``) as counters ``counter, counter + 1, ...``;
        ``oldest`` is the smallest counter any item will still use, so the ring grows rather
        than overwrite it."""
        end = self.counter + len(new_frames)
        if end - self.size > oldest:
            self._grow(end - oldest)
        if self.blobs is not None:
            compress, append, dead = self.codec.compress, self.blobs.append, end - self.size  # type: ignore[union-attr]
            for counter, frame in enumerate(new_frames, self.counter):
                append(counter, compress(frame), dead)
        elif end - self.counter == 1:
            self.frames[self.counter % self.size] = new_frames[0]
        else:
            self.frames[np.arange(self.counter, end) % self.size] = new_frames
        self.counter = end

    def _grow(self, needed: int) -> None:
        size = max(2 * self.size, needed + self.batch_size)
        live = np.arange(max(0, self.counter - self.size), self.counter)
        if self.blobs is not None:
            self.blobs.resize(size, live)
            self.size = size
            return
        frames = np.zeros((size + 1, *self.frame_shape), self.frame_dtype)
        frames[live % size] = self.frames[live % self.size]
        self.frames, self.size = frames, size

    # -- reading ---------------------------------------------------------------------------------
    def frames_for(self, pointers: list[np.ndarray], threads: int) -> tuple[np.ndarray, int, list[np.ndarray]]:
        """``(frames, size, pointers)``: a pool holding every frame ``pointers`` name (row
        ``size`` the zero frame) and the pointers into it. Raw: the frame ring itself.
        Compressed: each distinct frame decoded once (by up to
        ``threads`` threads) into the scratch pool, pointers renumbered."""
        if self.codec is None:
            return self.frames, self.size, pointers
        counters, held, renumbered = self.distinct(pointers)
        self.fill(counters % self.size, held, np.arange(counters.size), threads)
        size = held.shape[0] - 1
        return held.view(self.frame_dtype).reshape(size + 1, *self.frame_shape), size, renumbered

    def fill(self, rows: np.ndarray, block: np.ndarray, places: np.ndarray, threads: int) -> None:
        """Put the frame of pool row ``rows[i]`` into ``block[places[i]]`` (``block``:
        C-contiguous ``[m, frame_bytes]`` uint8): compressed, decoded by up to ``threads`` threads."""
        blobs, rows = self.source(rows)
        decode_frames(self.codec, blobs, rows, block, places, threads)  # type: ignore[arg-type]

    def source(self, rows: np.ndarray) -> tuple[BlobRing, np.ndarray]:
        """Where the blobs of pool ``rows`` are read from, and their rows there: the ring itself
        (``storages.frame_blob_file``'s pool reads them from its file first)."""
        return self.blobs, rows  # type: ignore[return-value]

    def distinct(self, pointers: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(counters, held, renumbered)``: the distinct frame counters ``pointers`` name
        (sorted), a scratch block ``[max(n, 1) + 1, frame_bytes]`` uint8 for their frames (rows
        from ``n`` on zero: the last is the zero frame), and the pointers renumbered into it."""
        every = pointers[0].reshape(-1) if len(pointers) == 1 else np.concatenate([p.reshape(-1) for p in pointers])
        counters = np.unique(every[every >= 0])
        n = counters.size
        size = max(n, 1)
        if self._held.shape[0] < size + 1:  # reused between reads (all under the buffer's lock)
            self._held = np.empty((max(size + 1, 2 * self._held.shape[0]), self.frame_bytes), np.uint8)
        held = self._held[: size + 1]
        held[n:] = 0
        renumbered = [np.where(p >= 0, np.searchsorted(counters, p), ZERO) for p in pointers]
        return counters, held, renumbered

    def decode_batch(self, every: np.ndarray, kernels: ModuleType | None, threads: int) -> np.ndarray:
        """``[every.size, frame_bytes]`` uint8: the frame of each pointer in ``every``, each
        distinct frame decoded once (by up to ``threads`` threads) into its first place and
        copied to its other places (with the compiled ``kernels`` when given): no scratch
        pool to gather from, a third less copying than ``frames_for``. Compressed pools only."""
        block = np.empty((every.size, self.frame_bytes), np.uint8)
        plan = kernels.decode_plan if kernels is not None else _decode_plan
        rows, first, targets, sources, zeros = plan(every, self.size)
        self.fill(rows, block, first, threads)
        if zeros.size:
            block[zeros] = 0
        if kernels is not None:
            kernels.copy_rows(block, targets, sources)
        else:
            block[targets] = block[sources]
        return block

    # -- checkpoints -----------------------------------------------------------------------------
    def state(self, base: int, views: bool = False) -> dict:
        """The frames from counter ``base`` to the newest: ``codec`` (None, or the codec's
        name), then raw as ``pool`` (``[m, *frame]``), or compressed as ``blobs`` (uint8, the
        m blobs end to end, never recompressed) and ``sizes`` (``[m]`` int64). With ``views``
        (for ``save``, under the buffer's lock) ``pool`` is an ``ArrayRun`` of views of the ring."""
        state: dict = {"codec": None if self.codec is None else self.codec.name}
        if self.blobs is not None:  # the blobs as they are: joined (one copy)
            rows = np.arange(base, self.counter) % self.size
            blobs = [self.blobs.blob(row) for row in rows.tolist()]
            state["blobs"] = np.concatenate(blobs) if blobs else np.zeros(0, np.uint8)
            state["sizes"] = self.blobs.lengths[rows]
        elif views:
            state["pool"] = ArrayRun(ring_views(self.frames[: self.size], base % self.size, self.counter - base))
        else:
            state["pool"] = self.frames[np.arange(base, self.counter) % self.size]
        return state

    def check_state(self, frames: dict) -> int:
        """The frame count of a ``state()``'s raw ``pool`` or compressed ``blobs`` and ``sizes``;
        CheckpointError when they do not fit this pool's frames."""
        codec = frames.get("codec")
        shape = self.frame_shape
        if codec is None:
            pool = frames.get("pool")
            if not isinstance(pool, np.ndarray) or pool.shape[1:] != shape or pool.dtype != self.frame_dtype:
                raise CheckpointError(f"state['frames']['pool']: expected frames [m, *{shape}] {self.frame_dtype}")
            return pool.shape[0]
        if not isinstance(codec, str) or codec not in CODECS:
            raise CheckpointError(f"state['frames']['codec']: expected None or one of {CODECS}, got {codec!r}")
        blobs, sizes = frames.get("blobs"), frames.get("sizes")
        if not isinstance(blobs, np.ndarray) or blobs.ndim != 1 or blobs.dtype != np.uint8:
            raise CheckpointError("state['frames']['blobs']: expected a 1-d uint8 array (the compressed frames)")
        if not isinstance(sizes, np.ndarray) or sizes.ndim != 1 or sizes.dtype != np.int64:
            raise CheckpointError("state['frames']['sizes']: expected a 1-d int64 array (one size per frame)")
        if sizes.size and (sizes.min() < 1 or int(sizes.sum()) != blobs.size):
            raise CheckpointError(
                f"state['frames']['sizes']: expected positive sizes adding up to the {blobs.size} bytes of blobs"
            )
        if not sizes.size and blobs.size:
            raise CheckpointError(f"state['frames']['sizes']: no frames, but blobs holds {blobs.size} bytes")
        return sizes.shape[0]

    def checked(self, frames: dict) -> np.ndarray | list[bytes]:
        """The frames of a ``state()`` that passed ``check_state``, in this pool's form: raw
        ``[m, *frame]``, or one blob per frame of this codec (the saved ones as they are when
        the codec is the same, each verified to decode to one frame). CheckpointError when a
        blob does not."""
        saved = frames.get("codec")
        if saved is None and self.codec is None:
            return frames["pool"]
        frame_bytes = prod(self.frame_shape) * self.frame_dtype.itemsize
        if saved is None:  # raw frames into a compressed pool
            raw = np.ascontiguousarray(frames["pool"]).reshape(-1, frame_bytes)
            return [self.codec.compress(frame) for frame in raw]  # type: ignore[union-attr]
        try:
            codec = make_codec(saved, None, frame_bytes)
        except ArgumentError as err:
            raise CheckpointError(f"state['frames']['codec']: cannot decode {saved!r} frames: {err}") from None
        data = frames["blobs"].tobytes()
        ends = np.cumsum(frames["sizes"]).tolist()
        blobs = [data[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        decoded = [codec.checked(blob, f"state['frames']['blobs'][{i}]") for i, blob in enumerate(blobs)]  # type: ignore[union-attr]
        if self.codec is not None and self.codec.name == saved:
            largest = max(map(len, blobs), default=0)
            if largest > self.codec.largest_blob:  # kept as they are: each must fit a chunk of the ring
                raise CheckpointError(
                    f"state['frames']['sizes']: expected blobs of at most {self.codec.largest_blob} bytes "
                    f"(the {self.codec.name} bound for a frame of {frame_bytes} bytes), got one of {largest}"
                )
            return blobs
        if self.codec is not None:
            return [self.codec.compress(frame) for frame in decoded]
        pool = np.frombuffer(bytearray().join(decoded), np.uint8)
        return pool.view(self.frame_dtype).reshape(len(blobs), *self.frame_shape)

    def load(self, frames: np.ndarray | list[bytes]) -> None:
        """Hold the ``checked`` frames as counters ``0 .. m - 1`` (growing the ring to fit them)."""
        self.clear()
        m = len(frames)
        if m > self.size:
            if self.blobs is None:
                self.frames = np.zeros((m + self.batch_size + 1, *self.frame_shape), self.frame_dtype)
            else:
                self.blobs.resize(m + self.batch_size, np.zeros(0, np.int64))
            self.size = m + self.batch_size
        if self.blobs is None:
            self.frames[:m] = frames
        else:
            for counter, blob in enumerate(frames):
                self.blobs.append(counter, blob, 0)
        self.counter = m
