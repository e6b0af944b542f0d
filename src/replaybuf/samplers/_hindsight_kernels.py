"""The compiled twin of ``replaybuf.samplers.hindsight.EpisodeEnds.pick`` (numba: ``replaybuf[fast]``).

One pass over a sample's elements instead of some twenty NumPy calls: the relabel coin and
the goal step of each element, from the same raw 64-bit draws and by the same rules as the
NumPy version (see there). Compiled on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["pick", "warm_up"]


@njit(cache=True, nogil=True)
def pick(
    last_ids, raw, threshold, strategy, end, position, steps, first, batch, capacity
):  # pragma: no cover - compiled
    """``(coins, goal_slots, count)``: see ``EpisodeEnds.pick``; the first ``count`` goal slots are used."""
    n = last_ids.shape[0]
    coins = np.zeros(n, np.bool_)
    slots = np.empty(n, np.int64)
    count = 0
    for i in range(n):
        if (raw[i] >> np.uint64(11)) >= threshold:
            continue
        coins[i] = True
        last = last_ids[i]
        slot = last % capacity
        stream = last % batch
        step = last // batch
        stop = end[slot]
        if stop < 0:
            stop = steps - 1
        if strategy == 1:  # final
            goal = stop
        else:
            low = step if strategy == 0 else max(step - position[slot], first)
            goal = low + np.int64(raw[n + i] % np.uint64(stop - low + 1))
        slots[count] = (goal * batch + stream) % capacity
        count += 1
    return coins, slots, count


def warm_up() -> None:
    """Compile (or load from the disk cache) the kernel on a tiny episode."""
    one = np.zeros(1, np.int64)
    pick(one, np.zeros(2, np.uint64), np.uint64(1), 0, np.full(1, -1, np.int64), one, 1, 0, 1, 1)
