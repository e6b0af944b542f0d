"""Compressed frames on disk: the frame pool of a ``storage="memmap"`` frame folder with a codec.

One file, ``blobs.bin``, holds the pool's ring of ``rows`` blobs (one compressed frame each,
by ``counter % rows``) and their bytes::

    header   32 bytes: b"RBBLOBS1", rows, data_bytes (int64, little-endian), 8 zero bytes
    index    [rows, 2] int64: each row's blob as (offset into the data, length)
    data     data_bytes: the blobs, written in counter order end to end around a byte ring

Frames die in counter order, so the live blobs (counters from the oldest stored item's
floor to the newest) lie in one run of the byte ring, from the oldest live blob's offset to
the write head; a blob that does not fit before the ring's end starts again at offset 0.
An append writes its blobs, then their index rows, with ``os.pwrite`` (before the records
are committed), and only over bytes and rows of frames older than the oldest floor after
it: a crash leaves every committed item's blobs whole, as for raw frames
(``storages.frame_memmap``). When the live blobs would not fit, or the ring of rows is
short, the live blobs are copied into a larger file (data at least doubled) renamed over
this one: the file follows the compressed bytes, not the raw frames' size.

A read takes the index rows of its distinct frames and decodes their blobs where they lie
in a read-only shared mapping of the file (it sees the written bytes; the file is small,
about the compressed bytes, so its mapped pages cost little RSS). The
write head is not stored: reopening derives it from the newest frame's index row.
"""

from __future__ import annotations

import mmap
import os
import weakref
from pathlib import Path

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.storages.codecs import Codec
from replaybuf.storages.frame_pool import FramePool

__all__ = ["BlobFilePool", "BLOBS"]

BLOBS = "blobs.bin"
MAGIC = b"RBBLOBS1"
HEADER = 32
ROW = 16  # one index row: offset, length (int64)


class ReadBlobs:
    """The blobs of one read, at ``starts`` in ``data`` (the file's mapping): ``addresses``
    and ``lengths`` per blob (what ``codecs.decode_frames`` takes from a ``BlobRing``) and
    ``blob(i)``."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        self._data, self._starts = data, starts
        self.addresses = (starts + data.ctypes.data).astype(np.uint64)
        self.lengths = lengths

    def blob(self, row: int) -> np.ndarray:
        start = int(self._starts[row])
        return self._data[start : start + int(self.lengths[row])]


class BlobFilePool(FramePool):
    """A compressed ``FramePool`` whose blobs and their index are the file ``path`` (made
    sparse when absent, ``rows`` rows and room for about a frame in 8 raw)."""

    def __init__(
        self, path: Path, frame_shape: tuple[int, ...], frame_dtype: np.dtype, rows: int, batch_size: int, codec: Codec
    ):
        super().__init__(frame_shape, frame_dtype, 0, batch_size, None)
        self.path, self.codec = path, codec
        if not path.is_file():
            data = max(4 * codec.largest_blob, rows * self.frame_bytes // 8)
            os.replace(self._create(path, rows, data), path)
        self._open()
        self.head = 0

    # -- the file ----------------------------------------------------------------------------
    @staticmethod
    def _create(path: Path, rows: int, data: int) -> Path:
        """A sparse file of ``rows`` index rows and ``data`` bytes at a temporary name, returned."""
        temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(temp, "wb") as f:
            f.write(MAGIC + np.array([rows, data, 0], "<i8").tobytes())
            f.truncate(HEADER + rows * ROW + data)
        return temp

    def _open(self) -> None:
        """Open and map the index; CheckpointError when the file is not a blob ring."""
        try:
            with open(self.path, "rb") as f:
                header, size = f.read(HEADER), os.fstat(f.fileno()).st_size
        except OSError as err:
            raise CheckpointError(f"{self.path.parent}: cannot open {BLOBS} ({err}); corrupt") from None
        rows, data = (int(v) for v in np.frombuffer(header[8:24], "<i8")) if len(header) == HEADER else (0, 0)
        if header[:8] != MAGIC or rows < 1 or data < 1 or HEADER + rows * ROW + data != size:
            raise CheckpointError(
                f"{self.path.parent}: {BLOBS} is not a ring of compressed frames ({size} bytes, header "
                f"{header[:24]!r}); truncated or corrupt"
            )
        self.size, self.data_bytes = rows, data
        self._fd = os.open(self.path, os.O_RDWR)  # for os.pwrite
        self._close = weakref.finalize(self, os.close, self._fd)
        self._mapped = np.frombuffer(mmap.mmap(self._fd, size, prot=mmap.PROT_READ), np.uint8)  # MAP_SHARED
        self.index = self._mapped[HEADER : HEADER + rows * ROW].view("<i8").reshape(rows, 2)

    def reopen(self, counter: int) -> None:
        """Continue after the frame ``counter - 1`` (derived from the stored items): the head
        follows its blob. CheckpointError when its index row is impossible."""
        self.counter = counter
        if counter == 0:
            self.head = 0
            return
        row = (self.counter - 1) % self.size
        self._check_rows(np.array([row]), self.index[row : row + 1])
        self.head = int(self.index[row].sum())

    def _check_rows(self, rows: np.ndarray, entries: np.ndarray) -> None:
        """CheckpointError naming the first of index ``rows`` (``entries``: their ``[n, 2]``
        offsets and lengths) whose blob is not inside the data (read through the mapping, a
        blob past the file's end would crash the process)."""
        offsets, lengths = entries[:, 0], entries[:, 1]
        bad = (
            (offsets < 0) | (lengths < 1) | (lengths > self.codec.largest_blob) | (offsets > self.data_bytes - lengths)
        )
        if bad.any():
            k = int(np.argmax(bad))
            raise CheckpointError(
                f"{self.path.parent}: {BLOBS} row {int(rows.reshape(-1)[k])} holds a blob at {int(offsets[k])} of "
                f"{int(lengths[k])} bytes, outside its {self.data_bytes} data bytes; corrupt"
            )

    def clear(self) -> None:
        self.counter, self.head = 0, 0

    # -- writing -----------------------------------------------------------------------------
    def append(self, new_frames: np.ndarray, oldest: int) -> None:
        """As ``FramePool.append``: the frames compressed, their blobs and index rows written."""
        self._append([self.codec.compress(frame) for frame in new_frames], oldest)

    def _append(self, blobs: list[bytes], oldest: int) -> None:
        """Write ``blobs`` as the next counters (growing the file first when they do not fit)."""
        end = self.counter + len(blobs)
        places = None if end - self.size > oldest else self._place(blobs, oldest)
        if places is None:
            self._grow(oldest, end - oldest, sum(map(len, blobs)))
            places = self._place(blobs, oldest)
        data = HEADER + self.size * ROW
        for blob, at in zip(blobs, places, strict=True):  # type: ignore[arg-type]
            _pwrite_all(self._fd, blob, data + at)
        rows = np.empty((len(blobs), 2), "<i8")
        rows[:, 0], rows[:, 1] = places, [len(blob) for blob in blobs]
        self._write_rows(self.counter, rows)
        if blobs:
            self.head = places[-1] + len(blobs[-1])  # type: ignore[index]
        self.counter = end

    def _place(self, blobs: list[bytes], oldest: int) -> list[int] | None:
        """Each blob's data offset from the head on, over no live blob (counters from
        ``oldest``) nor another of ``blobs``; None when they do not all fit. The head never
        reaches the live run's start from below, so ``first == head`` only when none is live."""
        first = int(self.index[oldest % self.size, 0]) if oldest < self.counter else None
        head, places = self.head, []
        for blob in blobs:
            n = len(blob)
            at = head if head + n <= self.data_bytes else 0
            if first is None:
                first = at
            elif first <= head:  # live run [first, head): free after the head and before first
                if at != head and n >= first:
                    return None
            elif at != head or head + n >= first:  # the live run wraps: free only [head, first)
                return None
            places.append(at)
            head = at + n
        return places

    def _write_rows(self, counter: int, rows: np.ndarray) -> None:
        """Index rows ``rows`` for counters ``counter, counter + 1, ...`` (one or two runs)."""
        row = counter % self.size
        first = min(len(rows), self.size - row)
        for at, part in ((row, rows[:first]), (0, rows[first:])):
            if len(part):
                _pwrite_all(self._fd, part.tobytes(), HEADER + at * ROW)

    def _grow(self, oldest: int, frames: int, new_bytes: int) -> None:
        """A larger file holding the live blobs (counters ``oldest`` to the newest) packed
        from offset 0, renamed over this one: ``frames`` more rows and ``new_bytes`` more
        data must fit."""
        live = np.arange(min(oldest, self.counter), self.counter)
        lengths = self.index[live % self.size, 1].astype(np.int64) if live.size else np.zeros(0, np.int64)
        rows = self.size if frames <= self.size else max(2 * self.size, frames + self.batch_size)
        data = max(2 * self.data_bytes, int(lengths.sum()) + new_bytes + 2 * self.codec.largest_blob)
        temp = self._create(self.path, rows, data)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if live.size else lengths
        with open(temp, "r+b", buffering=0) as new:
            for counter, start, length in zip(live.tolist(), starts.tolist(), lengths.tolist(), strict=True):
                blob = self._read_blob(counter % self.size, length)
                _pwrite_all(new.fileno(), blob, HEADER + rows * ROW + start)
                row = np.array([start, length], "<i8").tobytes()
                _pwrite_all(new.fileno(), row, HEADER + (counter % rows) * ROW)
        os.replace(temp, self.path)
        self._close()
        self._open()
        self.head = int(lengths.sum())

    def _read_blob(self, row: int, length: int) -> bytes:
        return os.pread(self._fd, length, HEADER + self.size * ROW + int(self.index[row, 0]))

    # -- reading -----------------------------------------------------------------------------
    def source(self, rows: np.ndarray) -> tuple[ReadBlobs, np.ndarray]:
        """The blobs of pool rows ``rows`` where they lie in the file's read-only mapping, and
        their rows there; CheckpointError when an index row points outside the data."""
        entries = np.asarray(self.index[rows]).reshape(-1, 2)
        self._check_rows(rows, entries)
        offsets, lengths = entries[:, 0], np.ascontiguousarray(entries[:, 1])
        return ReadBlobs(self._mapped, offsets + (HEADER + self.size * ROW), lengths), np.arange(len(lengths))

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, base: int, views: bool = False) -> dict:
        """As ``FramePool.state`` for compressed frames: the blobs read from the file."""
        rows = np.arange(base, self.counter) % self.size
        lengths = self.index[rows, 1].astype(np.int64)
        blobs = [
            np.frombuffer(self._read_blob(row, n), np.uint8)
            for row, n in zip(rows.tolist(), lengths.tolist(), strict=True)
        ]
        joined = np.concatenate(blobs) if blobs else np.zeros(0, np.uint8)
        return {"codec": self.codec.name, "blobs": joined, "sizes": lengths}

    def load(self, frames: np.ndarray | list[bytes]) -> None:
        """As ``FramePool.load``: the checked blobs written as counters ``0 .. m - 1``."""
        self.clear()
        self._append(list(frames), 0)  # type: ignore[arg-type]


def _pwrite_all(fd: int, data: bytes | np.ndarray, position: int) -> None:
    """Write the bytes ``data`` at ``position`` of ``fd`` (``os.pwrite`` may write less than asked)."""
    view = memoryview(data).cast("B")
    while view:
        done = os.pwrite(fd, view, position)
        view, position = view[done:], position + done
