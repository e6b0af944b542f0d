"""The compiled ``sequence_windows`` of ``replaybuf.samplers.sequences`` (numba: ``replaybuf[fast]``).

One pass per sequence instead of a NumPy pass per step of the computation (~8 over the
whole ``[N, burn_in + num_steps]`` batch): the burn-in's real steps back from the start,
the learning steps' real run forward (its last step first: the whole run is real when that
one is), then the row of ids, mask and learn. Same rules as the NumPy twin there.
Compiled on first use and cached on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["accept", "warm_up", "windows"]


@njit(cache=True, nogil=True)
def windows(position, capacity, batch, first_step, steps, starts, burn_in, ids, mask, learn):  # pragma: no cover
    """Fill ``ids``, ``mask``, ``learn`` ``[N, burn_in + num_steps]`` for the learning ``starts``
    ``[N]`` (stored ids) of a ring of ``capacity`` slots, ``batch`` streams, stored steps
    ``[first_step, steps)``; ``position`` by slot.

    Two passes: the real steps of every sequence first (its loads of ``position``, cache
    misses in a large buffer, independent of each other, so they overlap), then the rows."""
    count, length = starts.shape[0], ids.shape[1]
    num_steps = length - burn_in
    end_id = steps * batch
    back, ahead = np.empty(count, np.int64), np.empty(count, np.int64)
    for i in range(count):
        start = starts[i]
        end = start + (num_steps - 1) * batch
        # a whole run when the last learning step is stored at position >= num_steps - 1 (no
        # episode starts after the start): the start's position is then its less num_steps - 1
        here = position[end % capacity] - (num_steps - 1) if end < end_id else -1
        last = num_steps - 1
        if here < 0:
            here, last, at = position[start % capacity], 0, start + batch
            while last + 1 < num_steps and at < end_id and position[at % capacity] == here + last + 1:
                last += 1
                at += batch
        back[i], ahead[i] = min(here, start // batch - first_step, burn_in), last
    for i in range(count):
        start, first, last = starts[i], back[i], ahead[i]
        for j in range(length):
            offset = j - burn_in
            clipped = min(max(offset, -first), last)
            ids[i, j] = start + clipped * batch
            real = clipped == offset
            mask[i, j] = real
            learn[i, j] = real and offset >= 0


@njit(cache=True, nogil=True)
def accept(position, capacity, batch, candidates, steps, found, count):  # pragma: no cover
    """Append to ``found[count:]``, in order, the ``candidates`` (stored ids) whose window of
    ``steps`` lies inside one episode (its last step at position >= ``steps - 1``) until
    ``found`` is full; return how many ``found`` holds. The unpadded draw's acceptance test
    in one pass (NumPy: a gather, a compare, a mask and a slice per round)."""
    need, offset = found.shape[0], (steps - 1) * batch
    for candidate in candidates:
        if count == need:
            break
        if position[(candidate + offset) % capacity] >= steps - 1:
            found[count] = candidate
            count += 1
    return count


def warm_up() -> None:
    """Compile (or load from the disk cache) the kernel for the arrays samplers pass."""
    mask, learn = np.empty((1, 2), bool), np.empty((1, 2), bool)
    windows(np.zeros(4, np.int64), 4, 1, 0, 2, np.zeros(1, np.int64), 1, np.empty((1, 2), np.int64), mask, learn)
    accept(np.zeros(4, np.int64), 4, 1, np.zeros(2, np.int64), 1, np.empty(1, np.int64), 0)
