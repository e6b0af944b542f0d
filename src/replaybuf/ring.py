"""Id arithmetic for ``batch_size`` parallel streams of ``max_length`` items each.

Step ``t`` of stream ``s`` has id ``t * batch_size + s`` and lives in slot
``id % capacity`` (capacity = batch_size * max_length), so one add of a step to every
stream writes one contiguous run of slots and ids never need wraparound logic: a window of
T steps starting at id ``i`` is ``i, i + B, ..., i + (T - 1) B``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from replaybuf.refusals import empty, window_too_long

__all__ = ["FLOOR", "STEPS", "WRITING", "Geometry", "StreamRing", "WriterCursors", "append_rows"]

STEPS, WRITING, FLOOR = range(3)  # the columns of a writer cursor (replaybuf.shared keeps more after them)


class Geometry(NamedTuple):
    """A buffer's shape as ``ReplayBuffer`` reports it: ``batch_size`` streams (per writer, in a
    shared buffer) of ``max_length`` steps, ``capacity`` items in all. A ``StreamRing`` has the
    same three attributes, so a buffer built on one reports the ring's."""

    batch_size: int
    max_length: int
    capacity: int


class StreamRing:
    """Counters of a segmented ring: how many steps each stream has received.

    ``name`` is the owning buffer's, for error messages. ``floor`` is the first step still
    intact after a storage recovered from a torn write (0 when none); it stops mattering once
    the ring has moved ``max_length`` steps past it.
    """

    def __init__(self, batch_size: int, max_length: int, name: str = "buffer"):
        self.batch_size = batch_size
        self.max_length = max_length
        self.capacity = batch_size * max_length
        self.name = name
        self.steps = 0  # steps added to every stream since the last clear
        self.floor = 0

    def reset(self, steps: int = 0, floor: int = 0) -> None:
        """Set the counters (clear, a load, a reopened storage)."""
        self.steps, self.floor = steps, floor

    def first_valid_step(self) -> int:
        return max(0, self.steps - self.max_length, self.floor)

    def num_valid_steps(self) -> int:
        return self.steps - self.first_valid_step()

    def slot(self, step: int) -> int:
        """The first slot of ``step`` (its stream 0)."""
        return (step % self.max_length) * self.batch_size

    def window_starts(self, num_steps: int) -> tuple[int, int]:
        """``[low, high)``: the steps at which a window of ``num_steps`` may start."""
        low, high = self.first_valid_step(), self.steps - num_steps + 1
        if high <= low:
            if self.steps == 0:
                raise empty(self.name)
            raise window_too_long(num_steps, self.num_valid_steps(), self.max_length)
        return low, high

    def window_ids(self, first_ids: np.ndarray, num_steps: int | None) -> np.ndarray:
        """Ids of windows starting at ``first_ids``: shape ``first_ids.shape + [num_steps]``."""
        if num_steps is None:
            return first_ids
        return first_ids[..., None] + np.arange(num_steps, dtype=np.int64) * self.batch_size

    def stream_ids(self) -> np.ndarray:
        """Ids of every stored item, ``[batch_size, num_valid_steps]``, oldest first."""
        steps = np.arange(self.first_valid_step(), self.steps, dtype=np.int64)
        return steps[None, :] * self.batch_size + np.arange(self.batch_size, dtype=np.int64)[:, None]


def append_rows(ring: StreamRing, storage: Any, rows: Sequence[Any]) -> None:
    """Append a batch of rows (NumPy arrays or tensors) to a single-stream ring, in order.

    Only the newest ``capacity`` rows survive a batch larger than the ring. The counter moves
    after the data is written (``storage.write`` then ``storage.commit``), so a reader (or a
    reopened memory-mapped file after a crash) never sees slots that were not written. The
    caller holds the buffer's lock.
    """
    count = rows[0].shape[0] if rows else 0
    skip = max(0, count - ring.capacity)
    if skip:
        rows = [leaf[skip:] for leaf in rows]
    if count:
        storage.write((ring.steps + skip) % ring.capacity, rows, steps=count)
        ring.steps += count
        storage.commit(ring.steps)


class WriterCursors:
    """The commit rule of segments written outside the reader's lock: by another process
    (``replaybuf.shared``) or by a write a crash may cut short (``storages.memmap``).

    ``counters`` is int64 ``[segments, k]`` or ``[k]`` (one segment) that this object reads and
    writes but does not own (shared memory, a mapped file); the columns are ``steps``
    (committed), ``writing`` (the end of the block being written; ``steps`` when idle) and,
    when ``k > 2``, ``floor`` (the first step still whole after a write died; else 0).
    A writer ``reserve``s its steps, writes their rows, then ``commit``s. Step ``t`` of a
    segment is whole iff ``max(floor, writing - max_length) <= t < steps``: a write of step
    ``u`` overwrites the slot of step ``u - max_length``. Readers take ``steps`` before
    they read and ``writing`` after (``torn``), so a read that raced a writer is detected.
    """

    def __init__(self, counters: np.ndarray, max_length: int):
        self.counters = counters
        self.max_length = max_length
        self._floor = counters.shape[-1] > FLOOR

    # -- the writer of one segment ----------------------------------------------------------
    def reserve(self, count: int) -> int:
        """Announce a write of ``count`` steps; returns the first of them (the steps committed)."""
        steps = int(self.counters[STEPS])
        self.counters[WRITING] = steps + count
        return steps

    def commit(self, steps: int) -> None:
        """Every step below ``steps`` is written: readers may take them (after the data)."""
        self.counters[STEPS] = steps
        self.counters[WRITING] = steps

    def recovered_floor(self) -> int:
        """The floor after the write in progress died: its steps were never committed and the
        old steps it may have half overwritten are no longer whole."""
        steps, writing = int(self.counters[STEPS]), int(self.counters[WRITING])
        floor = int(self.counters[FLOOR]) if self._floor else 0
        if writing <= steps:
            return floor
        return min(steps, max(floor, writing - self.max_length, 0))

    def recover(self) -> None:
        """Drop the write in progress (its writer died): move the floor, end the write."""
        self.counters[FLOOR] = self.recovered_floor()
        self.counters[WRITING] = self.counters[STEPS]

    def reset(self, steps: int = 0, floor: int = 0) -> None:
        """Set every given segment to hold whole steps ``[floor, steps)`` (a clear: 0, 0; a load)."""
        self.counters[..., STEPS] = steps
        self.counters[..., WRITING] = steps
        if self._floor:
            self.counters[..., FLOOR] = floor

    # -- readers of every segment -----------------------------------------------------------
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per segment ``[low, high)``: the steps whole now (committed and not being overwritten)."""
        counters = self.counters
        high = counters[..., STEPS].copy()
        writing = np.maximum(counters[..., WRITING], high)  # read after steps
        low = np.maximum(writing - self.max_length, 0)
        if self._floor:
            low = np.maximum(low, counters[..., FLOOR])
        return low, np.maximum(high, low)

    def bound_lists(self) -> tuple[list[int], list[int]]:
        """``bounds`` as Python ints from one read of the counters (cheaper than NumPy calls on a
        few segments, on a sampling path)."""
        rows = self.counters.reshape(-1, self.counters.shape[-1]).tolist()
        lows = [max(0, c[WRITING] - self.max_length, c[FLOOR] if self._floor else 0) for c in rows]
        return lows, [max(c[STEPS], low) for c, low in zip(rows, lows, strict=True)]

    def overwritten_below(self) -> list[int]:
        """Per segment, the step below which a write now in progress may have overwritten
        slots: read after copying rows, every row of a step below it is torn."""
        return [writing - self.max_length for writing in self.counters[..., WRITING].reshape(-1).tolist()]

    def torn(self, segment: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Which of these (segment, oldest step read) a writer may have overwritten during the read."""
        return step < self.counters[..., WRITING][segment] - self.max_length
