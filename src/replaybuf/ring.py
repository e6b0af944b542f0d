"""Id arithmetic for ``batch_size`` parallel streams of ``max_length`` items each.

Step ``t`` of stream ``s`` has id ``t * batch_size + s`` and lives in slot
``id % capacity`` (capacity = batch_size * max_length), so one add of a step to every
stream writes one contiguous run of slots and ids never need wraparound logic: a window of
T steps starting at id ``i`` is ``i, i + B, ..., i + (T - 1) B``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.refusals import empty, window_too_long

__all__ = ["StreamRing", "append_rows"]


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
