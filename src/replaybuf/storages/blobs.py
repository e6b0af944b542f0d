"""The compressed frames of a frame pool, end to end in large chunks of memory.

``FrameStorage`` with a codec keeps one compressed blob per pool row. Kept as one Python
``bytes`` object each, every blob cost an object header and an allocator slot (~50 bytes
on 1.8 KB blobs), and every read one Python step per frame to find its bytes. Here the
blobs are copied end to end into chunks of ``chunk_bytes``; per row the ring keeps the
blob's address and length in NumPy arrays, so a read finds all its blobs with two takes
and hands the addresses to the compiled decoder (``codecs.decode_frames``).

Frames are appended in counter order and die in the same order (a row's blob is dead once
its counter is more than the pool's size behind the newest), so a chunk whose newest blob
is dead is reused whole: no fragmentation, and the chunks in use follow the live frames.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["BlobRing"]

CHUNK_BYTES = 1 << 20


class BlobRing:
    """Blobs by pool row (``rows`` of them): ``addresses[row]``, ``lengths[row]``, ``blob(row)``.

    ``chunk_bytes`` must hold the largest blob (the codec's bound on one frame).
    """

    def __init__(self, rows: int, largest_blob: int):
        self.chunk_bytes = max(CHUNK_BYTES, largest_blob)
        self.addresses = np.zeros(rows, np.uint64)
        self.lengths = np.zeros(rows, np.int64)
        self._chunk_of = np.zeros(rows, np.int32)
        self._chunks: list[np.ndarray] = []  # every chunk ever made (reused, never freed)
        self._bases: list[int] = []  # each chunk's address
        self._in_use: deque[list[int]] = deque()  # [chunk id, newest counter], oldest first
        self._free: list[int] = []
        self._fill = self.chunk_bytes  # bytes used of the newest chunk in use

    @property
    def rows(self) -> int:
        return self.addresses.shape[0]

    def clear(self) -> None:
        """Every chunk free (their memory kept for the next blobs)."""
        self._free.extend(chunk for chunk, _ in self._in_use)
        self._in_use.clear()
        self._fill = self.chunk_bytes

    def append(self, counter: int, blob: bytes, dead_below: int) -> None:
        """``blob`` as the frame ``counter`` (row ``counter % rows``); frames below
        ``dead_below`` are no longer referenced, so their chunks may be reused."""
        size = len(blob)
        if self._fill + size > self.chunk_bytes:
            self._next_chunk(dead_below)
        chunk, row = self._in_use[-1], counter % self.rows
        start = self._fill
        self._chunks[chunk[0]][start : start + size] = np.frombuffer(blob, np.uint8)
        self.addresses[row] = self._bases[chunk[0]] + start
        self.lengths[row] = size
        self._chunk_of[row] = chunk[0]
        chunk[1] = counter
        self._fill = start + size

    def _next_chunk(self, dead_below: int) -> None:
        while self._in_use and self._in_use[0][1] < dead_below:
            self._free.append(self._in_use.popleft()[0])
        if self._free:
            chunk = self._free.pop()
        else:
            chunk = len(self._chunks)
            self._chunks.append(np.empty(self.chunk_bytes, np.uint8))  # pages touched as written
            self._bases.append(self._chunks[-1].ctypes.data)
        self._in_use.append([chunk, -1])
        self._fill = 0

    def blob(self, row: int) -> np.ndarray:
        """The bytes of row ``row``'s blob (a view, valid until its chunk is reused)."""
        chunk = int(self._chunk_of[row])
        start = int(self.addresses[row]) - self._bases[chunk]
        return self._chunks[chunk][start : start + int(self.lengths[row])]

    def resize(self, rows: int, live: np.ndarray) -> None:
        """``rows`` rows, the ``live`` counters' blobs moved to their new rows."""
        old, new = live % self.rows, live % rows
        addresses, lengths, chunk_of = np.zeros(rows, np.uint64), np.zeros(rows, np.int64), np.zeros(rows, np.int32)
        addresses[new], lengths[new], chunk_of[new] = self.addresses[old], self.lengths[old], self._chunk_of[old]
        self.addresses, self.lengths, self._chunk_of = addresses, lengths, chunk_of
