"""The next observations that are not the next step's observation, each stored once.

``replaybuf.sb3.ReplayBuffer`` stores a vector observation once: the next observation of
step t is the observation of step t+1 of the same environment, except after an episode
end (the true final observation, before the reset) or wherever the two differ. Those few
are kept here, one row each, addressed by a counter that only grows (row ``counter % rows``).
A row is live while the transition it belongs to is stored; when the next rows to write
are still live the array doubles (a copy of the live rows), so memory follows the episode
ends stored, not the capacity.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FinalObservations"]


class FinalObservations:
    """Rows of one observation shape, each owned by a step of the buffer (its SB3 step counter)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, rows: int = 16):
        self.rows = np.zeros((rows, *shape), dtype)
        self.owners = np.full(rows, -1, np.int64)  # the step each row belongs to (-1: never written)
        self.count = 0  # rows written so far: the next row's counter

    def append(self, values: np.ndarray, owner: int, oldest: int) -> np.ndarray:
        """Store ``values`` (k rows) for step ``owner``; their counters. Rows of steps older
        than ``oldest`` (no longer stored) may be overwritten."""
        k, oldest = len(values), max(oldest, 0)  # owners of rows never written are -1
        while k > len(self.rows) or self.owners[(self.count + k - 1) % len(self.rows)] >= oldest:
            self._grow()
        counters = np.arange(self.count, self.count + k)
        self.rows[counters % len(self.rows)] = values
        self.owners[counters % len(self.rows)] = owner
        self.count += k
        return counters

    def read(self, counters: np.ndarray) -> np.ndarray:
        """The rows under ``counters`` (as returned by ``append``)."""
        return self.rows[counters % len(self.rows)]

    def _grow(self) -> None:
        size = len(self.rows)
        live = np.arange(max(0, self.count - size), self.count)
        rows = np.zeros((2 * size, *self.rows.shape[1:]), self.rows.dtype)
        owners = np.full(2 * size, -1, np.int64)
        rows[live % (2 * size)] = self.rows[live % size]
        owners[live % (2 * size)] = self.owners[live % size]
        self.rows, self.owners = rows, owners

    def state(self) -> dict:
        """The rows that can still be live, as plain arrays (a checkpoint's part)."""
        live = np.arange(max(0, self.count - len(self.rows)), self.count)
        return {
            "count": self.count,
            "rows": self.rows[live % len(self.rows)],
            "owners": self.owners[live % len(self.rows)],
        }

    def load_state(self, state: dict) -> None:
        """Replace the rows with ``state()``'s."""
        count, rows, owners = int(state["count"]), np.asarray(state["rows"]), np.asarray(state["owners"])
        size = 16
        while size < len(rows):
            size *= 2
        self.rows = np.zeros((size, *self.rows.shape[1:]), self.rows.dtype)
        self.owners = np.full(size, -1, np.int64)
        live = np.arange(count - len(rows), count)
        self.rows[live % size], self.owners[live % size] = rows, owners
        self.count = count
