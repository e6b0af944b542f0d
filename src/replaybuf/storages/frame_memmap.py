"""Frame stacks on disk: a ``FrameStorage`` whose records and frames live in a folder.

``MemmapFrameStorage.open(path, ...)`` opens (or creates) a folder::

    path/
      meta.json      as a memmap folder's (``storages.memmap``), format
                     ``replaybuf-memmap-frames``, plus ``frames``: the buffer's own spec,
                     the stacked leaves and their axes
      records.npy    the item records: small leaves, frame pointers, floors (mapped)
      cursor.npy     the commit protocol of ``storages.memmap``
      frames.npy     the raw frame ring, ``[size + 1, *frame]`` (row ``size``: the zero frame)
      blobs.bin      instead, with a codec: the compressed frames (``storages.frame_blob_file``)

Frames are written with ``os.pwrite`` and read through a read-only shared mapping of the
file (it sees the written bytes: one page cache), gathered into the batch as the in-RAM
ring is (``FrameStorage._stacks``): no system call per frame. The pages a read touches
stay mapped, so the process's file-backed RSS grows with the frames sampled (rounded up to
the kernel's fault-around window, 64 KB), up to the file's size: clean page cache the kernel
reclaims under pressure; anonymous memory holds the records and a read's batch, never the
frames. A write appends its new
frames after reserving and writing its records and before committing (``FrameStorage.write``),
so a crash leaves every committed item's frames whole: the only frames an append
overwrites are those of items older than the oldest stored after it, which are the items
the interrupted add was overwriting and which the reopen drops (``storages.memmap``). A
ring that must grow is written whole into a new file that is then renamed over the old.

Reopening derives what was not stored: the frame counter (one past the largest pointer of
the stored items: the frames after it belonged to no item) and what later adds are matched
against (the newest step's frames: ``FrameStorage.resume``).
"""

from __future__ import annotations

import mmap
import os
import weakref
from math import prod
from pathlib import Path

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import read_npy_header
from replaybuf.persistence.state import spec_state
from replaybuf.ring import StreamRing
from replaybuf.specs import ArraySpec
from replaybuf.storages.codecs import Codec
from replaybuf.storages.frame_blob_file import BLOBS, BlobFilePool
from replaybuf.storages.frame_leaves import StackedLeaf
from replaybuf.storages.frame_pool import FramePool
from replaybuf.storages.frames import FrameStorage
from replaybuf.storages.memmap import MemmapStorage
from replaybuf.storages.records import RecordStorage

__all__ = ["MappedFramePool", "MemmapFrameStorage"]

FORMAT = "replaybuf-memmap-frames"
FRAMES = "frames.npy"


class MemmapFrameStorage(FrameStorage):
    """A ``FrameStorage`` over the folder ``path`` (see the module); crash-safe."""

    crash_safe = True

    def __init__(
        self,
        path: str | os.PathLike,
        flat: FlatSpec,
        ring: StreamRing,
        stacked: list[StackedLeaf],
        compiled: bool | None = None,
        codec: Codec | None = None,
    ):
        self.path, self.flat, self.ring = Path(path), flat, ring
        frames: dict = {"spec": spec_state(flat), "stacked": [[s.index, s.axis] for s in stacked]}
        if codec is not None:  # raw folders keep the meta.json they had before codecs
            frames["codec"] = codec.name
        self.kind = {"format": FORMAT, "frames": frames}
        super().__init__(flat.leaves, stacked, ring.batch_size, ring.max_length, compiled, codec)

    def open_records(self, specs: list[ArraySpec]) -> RecordStorage:
        """The records of the folder (created when absent or empty); sets the ring to its steps.

        Raises:
            CheckpointError: as ``MemmapStorage.open``.
        """
        return MemmapStorage.open(self.path, FlatSpec(tuple(specs)), self.ring, self.kind)

    def open_pool(self, frame_shape: tuple[int, ...], size: int, codec: Codec | None) -> FramePool:
        if codec is not None:
            return BlobFilePool(self.path / BLOBS, frame_shape, self.frame_dtype, size, self.batch_size, codec)
        return MappedFramePool(self.path / FRAMES, frame_shape, self.frame_dtype, size, self.batch_size)

    def start(self) -> None:
        """Continue from the items the folder holds (or begin empty)."""
        steps = self.ring.steps
        ids = self.ring.stream_ids()  # [batch_size, steps]: the whole items, oldest first
        if ids.size == 0:  # nothing to match against; floors are read only where written since
            self.pool.clear()
            self._previous, self._last_raw = None, None
            self.written = steps
            return
        self.written = steps
        slots = ids.reshape(-1) % self.capacity
        rows = self.records.records[slots]
        largest = max(int(rows[name].max()) for name in self._pointer_names)
        self.pool.reopen(largest + 1)  # ZERO (-1) everywhere: no frame held, counter 0
        self.resume(ids[:, -1] % self.capacity)

    def commit(self, steps: int) -> None:
        """The ring counts ``steps``: committed in the folder (after the records and frames)."""
        super().commit(steps)
        self.records.commit(steps)


class MappedFramePool(FramePool):
    """A raw ``FramePool`` whose ring is the file ``path`` (created sparse when absent):
    written with ``os.pwrite``, read through ``frames``, the file's read-only mapping."""

    def __init__(self, path: Path, frame_shape: tuple[int, ...], frame_dtype: np.dtype, size: int, batch_size: int):
        super().__init__(frame_shape, frame_dtype, 0, batch_size, None)
        self.path = path
        if not path.is_file():
            self._create(path, size)
        self._map()

    def _create(self, path: Path, size: int) -> None:
        """A sparse ``.npy`` ring of ``size`` frames and the zero row, renamed into place."""
        temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shape = (size + 1, *self.frame_shape)
        np.lib.format.open_memmap(temp, mode="w+", dtype=self.frame_dtype, shape=shape).flush()
        os.replace(temp, path)

    def _map(self) -> None:
        """Map the file; CheckpointError when it is not a ring of this pool's frames."""
        try:
            with open(self.path, "rb") as f:
                shape, fortran, dtype = read_npy_header(f, self.path)
                offset, size = f.tell(), os.fstat(f.fileno()).st_size
        except OSError as err:
            raise CheckpointError(f"{self.path.parent}: cannot open {FRAMES} ({err}); corrupt") from None
        if (
            fortran
            or len(shape) != 1 + len(self.frame_shape)
            or tuple(shape[1:]) != self.frame_shape
            or dtype != self.frame_dtype
            or shape[0] < 2
            or offset + prod(shape) * dtype.itemsize != size
        ):
            raise CheckpointError(
                f"{self.path.parent}: {FRAMES} holds {shape} {dtype.str} in {size} bytes, expected "
                f"[size + 1, *{self.frame_shape}] {self.frame_dtype.str}; truncated or corrupt"
            )
        self.offset, self.size = offset, shape[0] - 1
        self._fd = os.open(self.path, os.O_RDWR)  # for os.pwrite; closed with the pool or when remapped
        self._close = weakref.finalize(self, os.close, self._fd)
        mapping = mmap.mmap(self._fd, size, prot=mmap.PROT_READ)  # MAP_SHARED: sees the pwrites
        self.frames = np.frombuffer(mapping, self.frame_dtype, prod(shape), offset).reshape(shape)

    def reopen(self, counter: int) -> None:
        """Continue after the frame ``counter - 1`` (derived from the stored items)."""
        self.counter = counter

    def append(self, new_frames: np.ndarray, oldest: int) -> None:
        """As ``FramePool.append``, the frames written into the file."""
        end = self.counter + len(new_frames)
        if end - self.size > oldest:
            self._grow(end - oldest)
        self._write(self.counter, np.ascontiguousarray(new_frames))
        self.counter = end

    def _write(self, counter: int, frames: np.ndarray) -> None:
        """Frames ``[m, *frame]`` as counters ``counter, counter + 1, ...`` (one or two runs)."""
        row = counter % self.size
        first = min(len(frames), self.size - row)
        for at, part in ((row, frames[:first]), (0, frames[first:])):
            if len(part):
                _pwrite_all(self._fd, part.reshape(-1).view(np.uint8), self.offset + at * self.frame_bytes)

    def _grow(self, needed: int) -> None:
        """A ring of at least ``needed`` frames plus slack: the live frames copied into a new
        file (read with ``os.pread``, not through the mapping) renamed over this one."""
        size = max(2 * self.size, needed + self.batch_size)
        temp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        np.lib.format.open_memmap(temp, mode="w+", dtype=self.frame_dtype, shape=(size + 1, *self.frame_shape)).flush()
        offset = _data_offset(temp)
        old, old_size, width = self._fd, self.size, self.frame_bytes
        with open(temp, "r+b", buffering=0) as new:
            for counter in range(max(0, self.counter - old_size), self.counter):
                frame = os.pread(old, width, self.offset + (counter % old_size) * width)
                _pwrite_all(new.fileno(), np.frombuffer(frame, np.uint8), offset + (counter % size) * width)
        os.replace(temp, self.path)
        self._close()
        self._map()

    def load(self, frames: np.ndarray | list[bytes]) -> None:
        """As ``FramePool.load``: a new file when the frames do not fit, then written in."""
        self.clear()
        m = len(frames)
        if m > self.size:
            self._close()
            self._create(self.path, m + self.batch_size)
            self._map()
        self._write(0, np.ascontiguousarray(frames))
        self.counter = m


def _data_offset(path: Path) -> int:
    """Where the data of the ``.npy`` file ``path`` starts."""
    with open(path, "rb") as f:
        read_npy_header(f, path)
        return f.tell()


def _pwrite_all(fd: int, data: np.ndarray, position: int) -> None:
    """Write the bytes ``data`` at ``position`` of ``fd`` (``os.pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, position)
        view, position = view[done:], position + done
