"""The compiled draws of ``replaybuf.samplers.rules`` (numba: ``replaybuf[fast]``).

Each function does in one call what ``replaybuf.samplers.rule_draws.NumpyDraws`` does in a
dozen small NumPy passes, with the same arguments (the generator as the addresses of its
``next_raw`` and state) and the same results: the raw 64-bit draws are the ones
``Generator.bit_generator.random_raw`` returns, in the same order, reduced modulo the range as
``uniform_integers`` does. Slots come from ids by a subtraction from ``origin`` (the id stored
in slot 0 on the pass that holds the oldest id), sparing a 64-bit division per id. Compiled on
first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from replaybuf.samplers._bounded_kernels import next_raw

__all__ = ["count", "pick", "pick_counted", "take", "warm_up"]


@njit(cache=True, nogil=True, inline="always")
def _slot(item_id, origin, capacity):  # pragma: no cover - compiled
    slot = item_id - origin
    return slot - capacity if slot >= capacity else slot


_ONE = np.uint64(1)
_LOW6 = np.int64(63)


@njit(cache=True, nogil=True, inline="always")
def _held(bits, key):  # pragma: no cover - compiled
    """Whether ``key``'s bit was already set in ``bits``; sets it."""
    word = key >> 6
    bit = _ONE << np.uint64(key & _LOW6)
    held = bits[word]
    if held & bit:
        return True
    bits[word] = held | bit
    return False


@njit(cache=True, nogil=True)
def _distinct(function, state, count, picks, bits):  # pragma: no cover - compiled
    """``picks`` (indices below ``count``) made distinct as ``NumpyDraws.distinct`` makes them,
    with a bit per index of the pool in ``bits`` (all 0 before and after: 25 kB for 200k
    indices, in cache; a hash set cost a multiply and a probe per pick)."""
    n = picks.shape[0]
    repeats = np.empty(n, np.int64)  # positions to draw again, the last first
    found = 0
    for i in range(n - 1, -1, -1):
        if _held(bits, picks[i]):
            repeats[found] = i
            found += 1
    span = np.uint64(count)
    while found:
        for k in range(found - 1, -1, -1):  # drawn again in position order
            picks[repeats[k]] = np.int64(next_raw(function, state) % span)
        scanned, found = found, 0
        for k in range(scanned):  # the last first: a repeat of a kept pick or of a later one
            if _held(bits, picks[repeats[k]]):
                repeats[found] = repeats[k]
                found += 1
    for i in range(n):
        bits[picks[i] >> 6] = 0


@njit(cache=True, nogil=True)
def pick(function, state, pool, low, count, distinct, out, bits):  # pragma: no cover - compiled
    """``out[i] = pool[u_i]`` (``low + u_i`` when ``pool`` is empty), ``u_i`` uniform below
    ``count`` (distinct when asked: ``bits`` as ``_distinct`` takes it)."""
    n = out.shape[0]
    picks = np.empty(n, np.int64)
    span = np.uint64(count)
    for i in range(n):
        picks[i] = np.int64(next_raw(function, state) % span)
    if distinct:
        _distinct(function, state, count, picks, bits)
    if pool.shape[0] == 0:
        for i in range(n):
            out[i] = low + picks[i]
        return
    for i in range(n):
        out[i] = pool[picks[i]]


@njit(cache=True, nogil=True, inline="always")
def _taken(order, place, taken, i):  # pragma: no cover - compiled
    """Take ``order[place]`` as draw ``i`` and mark the place taken (-1); False when it was."""
    item = order[place]
    if item < 0:
        return False
    taken[i] = item
    order[place] = -1
    return True


@njit(cache=True, nogil=True)
def take(function, state, order, cursor, size, alive, check, oldest, out):  # pragma: no cover - compiled
    """The next ``size`` items of an epoch: ``size`` distinct positions drawn uniformly in
    ``order[cursor:]`` (made distinct as ``NumpyDraws.distinct`` makes them) are moved to
    ``order[cursor:cursor + size]`` (the picked positions past it, in draw order, take the
    front's unpicked items, in position order); returns how many of them are live (``alive``
    read only with ``check``; ids below ``oldest`` are not), written to ``out`` in draw order.
    A repeated position is found by the mark (-1) its first read left in ``order`` (ids are
    >= 0), which the moves then overwrite. The ring's capacity is ``alive``'s length."""
    capacity = alive.shape[0]
    origin = oldest - oldest % capacity
    span = np.uint64(order.shape[0] - cursor)
    picks = np.empty(size, np.int64)
    for i in range(size):
        picks[i] = np.int64(next_raw(function, state) % span)
    taken = np.empty(size, np.int64)
    repeats = np.empty(size, np.int64)  # positions to draw again, the last first
    found = 0
    for i in range(size - 1, -1, -1):
        if not _taken(order, cursor + picks[i], taken, i):
            repeats[found] = i
            found += 1
    while found:
        for k in range(found - 1, -1, -1):  # drawn again in position order
            picks[repeats[k]] = np.int64(next_raw(function, state) % span)
        scanned, found = found, 0
        for k in range(scanned):  # the last first: a repeat of a kept pick or of a later one
            i = repeats[k]
            if not _taken(order, cursor + picks[i], taken, i):
                repeats[found] = i
                found += 1
    front = cursor  # the picks past the front, in draw order, take the front's unpicked items, in position order
    for i in range(size):
        if picks[i] >= size:
            while order[front] < 0:  # picked: its item is in ``taken``
                front += 1
            order[cursor + picks[i]] = order[front]
            front += 1
    found = 0
    for i in range(size):
        item = taken[i]
        order[cursor + i] = item
        if item >= oldest and (not check or alive[_slot(item, origin, capacity)]):  # stored, and live
            out[found] = item
            found += 1
    return found


@njit(cache=True, nogil=True)
def pick_counted(
    function, state, pool, low, count_, out, bits, times, limit, dense, where, alive, size, origin, capacity
):  # pragma: no cover - compiled
    """``pick`` (distinct) then ``count`` of the picked ids, in one call; returns the new size."""
    pick(function, state, pool, low, count_, True, out, bits)
    return count(out, times, limit, dense, where, alive, size, origin, capacity)


@njit(cache=True, nogil=True)
def count(ids, times, limit, dense, where, alive, size, origin, capacity):  # pragma: no cover - compiled
    """Count a draw of the live, distinct ``ids``; those drawn ``limit`` times leave the live set
    ``(dense, where, size)`` as ``LiveSet.remove`` takes them out. Returns the new size."""
    n = ids.shape[0]
    holes = np.empty(n, np.int64)
    gone = 0
    for i in range(n):
        slot = _slot(ids[i], origin, capacity)
        times[slot] += 1
        if times[slot] >= limit:
            holes[gone] = where[slot]
            where[slot] = -1
            alive[slot] = 0
            gone += 1
    if gone == 0:
        return size
    keep = size - gone
    hole = 0
    for k in range(keep, size):  # the tail's ids that stay live fill the holes below keep, in order
        mover = dense[k]
        slot = _slot(mover, origin, capacity)
        if where[slot] < 0:
            continue
        while holes[hole] >= keep:
            hole += 1
        dense[holes[hole]] = mover
        where[slot] = holes[hole]
        hole += 1
    return keep


def warm_up() -> None:
    """Compile (or load from the disk cache) every kernel with a generator of its own."""
    from replaybuf.samplers.bounded import raw_pointer  # (a cycle at import time otherwise)

    bit_generator = np.random.default_rng(0).bit_generator  # alive while the kernels use its addresses
    function, state = raw_pointer(bit_generator), bit_generator.ctypes.state_address
    pool, out, bits = np.arange(4, dtype=np.int64), np.empty(2, np.int64), np.zeros(1, np.uint64)
    pick(function, state, pool, 0, 4, True, out, bits)
    take(function, state, pool.copy(), 0, 2, np.ones(4, np.uint8), True, 0, out)
    for counts in (np.int32, np.int64):  # the samplers' counts: int32 unless the limit needs more
        count(np.array([1, 2], np.int64), np.zeros(4, counts), 1, *_live_ids(4), 4, 0, 4)
        dense, where, alive = _live_ids(4)
        pick_counted(function, state, dense, 0, 4, out, bits, np.zeros(4, counts), 1, dense, where, alive, 4, 0, 4)


def _live_ids(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dense, where, alive)`` of a live set holding the ids ``0 .. size - 1`` (for ``warm_up``)."""
    return np.arange(size, dtype=np.int64), np.arange(size, dtype=np.int64), np.ones(size, np.uint8)
