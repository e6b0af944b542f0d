"""The compiled goal draws and writes of ``replaybuf.hindsight`` (numba: ``replaybuf[fast]``).

One pass over a sample's elements instead of some twenty NumPy calls: the relabel coin and
the goal step of each element, from the same raw 64-bit draws and by the same rules as the
NumPy version (``EpisodeEnds.pick``), then the goals read from the stored achieved goals.
Both reads are random (an episode end per element, a goal per relabelled one) and miss in
cache in a large buffer: each loop prefetches the element ``AHEAD`` places on, so that the
misses overlap instead of queueing (0.93-0.94x a relabelled sample's time, analysis 86).
``sample_records`` is a whole relabelled sample of single records (``hindsight.records``): the
draws, then one pass that copies each record and writes its goal, both prefetched. Slots come
from ids by a subtraction (``_slot``) and copies index with unsigned ints, which spares a 64-bit
division per id and the negative-index checks. Compiled on first use and cached on disk
(``cache=True``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import literal_unroll, njit, types
from numba.extending import intrinsic

from replaybuf.samplers._bounded_kernels import fill, next_raw
from replaybuf.samplers.hindsight import UNIT

__all__ = ["pick", "place", "relabel", "sample_records", "warm_up"]

AHEAD = 8  # elements ahead whose episode end (pick) or goal (relabel) is prefetched


@intrinsic
def _prefetch(typingctx, address):  # pragma: no cover - compiled
    """Ask the CPU to bring the cache line at ``address`` in for a read (LLVM's prefetch: no
    fault, no wait), so that the random reads of later elements overlap this one's."""

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        word = ir.IntType(32)
        prefetch = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [pointer.type, word, word, word])
        )
        builder.call(prefetch, [pointer, ir.Constant(word, 0), ir.Constant(word, 3), ir.Constant(word, 1)])
        return context.get_dummy_value()

    return types.void(types.uintp), codegen


@njit(cache=True, nogil=True, inline="always")
def _origin(lowest, capacity):  # pragma: no cover - compiled
    """The id stored in slot 0 on the ring's pass that holds ``lowest`` (the oldest valid id):
    valid ids span at most ``capacity``, so each id's slot is ``_slot(id, origin, capacity)``,
    one subtraction and one comparison instead of a 64-bit division per id."""
    return lowest - lowest % capacity


@njit(cache=True, nogil=True, inline="always")
def _slot(item_id, origin, capacity):  # pragma: no cover - compiled
    """``item_id % capacity`` for a valid id (see ``_origin``)."""
    slot = item_id - origin
    return slot - capacity if slot >= capacity else slot


@njit(cache=True, nogil=True)
def pick(
    last_ids, raw, threshold, strategy, end, position, steps, first, batch, capacity
):  # pragma: no cover - compiled
    """``(coins, rows, slots)``: which elements are relabelled, the indices of those that are and
    their goals' slots; the arguments as for ``EpisodeEnds.pick`` and ``EpisodeEnds.arguments``."""
    n = last_ids.shape[0]
    coins = np.zeros(n, np.bool_)
    rows = np.empty(n, np.int64)
    slots = np.empty(n, np.int64)
    count = 0
    origin = _origin(first * batch, capacity)
    ends, stride = end.ctypes.data, end.strides[0]
    for i in range(min(AHEAD, n)):
        _prefetch(ends + _slot(last_ids[i], origin, capacity) * stride)
    for i in range(n):
        if i + AHEAD < n:
            _prefetch(ends + _slot(last_ids[i + AHEAD], origin, capacity) * stride)
        if (raw[i] >> np.uint64(11)) >= threshold:
            continue
        coins[i] = True
        last = last_ids[i]
        slot = _slot(last, origin, capacity)
        step = last if batch == 1 else last // batch
        stop = end[slot]
        if stop < 0:
            stop = steps - 1
        if strategy == 1:  # final
            goal = stop
        else:
            low = step if strategy == 0 else max(step - position[slot], first)
            goal = low + np.int64(np.float64(raw[n + i] >> np.uint64(11)) * UNIT * np.float64(stop - low + 1))
        goal_slot = slot + (goal - step) * batch  # the same stream, within one ring length of the slot
        if goal_slot >= capacity:
            goal_slot -= capacity
        elif goal_slot < 0:
            goal_slot += capacity
        rows[count] = i
        slots[count] = goal_slot
        count += 1
    return coins, rows[:count], slots[:count]


@njit(cache=True, nogil=True)
def relabel(
    last_ids, raw, threshold, strategy, end, position, steps, first, batch, capacity, source
):  # pragma: no cover - compiled
    """``(coins, rows, goals)``: ``pick``, then the goals ``[count, G]`` read from ``source`` (the
    stored achieved goals, ``[capacity, G]``)."""
    coins, rows, slots = pick(last_ids, raw, threshold, strategy, end, position, steps, first, batch, capacity)
    count = rows.shape[0]
    width = source.shape[1]
    goals = np.empty((count, width), source.dtype)
    base, row, last = source.ctypes.data, source.strides[0], (width - 1) * source.strides[1]
    for j in range(min(AHEAD, count)):
        _prefetch(base + slots[j] * row)
        _prefetch(base + slots[j] * row + last)
    for j in range(count):  # each goal's first and last element first: a tight loop whose cache misses overlap
        if j + AHEAD < count:
            _prefetch(base + slots[j + AHEAD] * row)
            _prefetch(base + slots[j + AHEAD] * row + last)
        goals[j, 0] = source[slots[j], 0]
        goals[j, width - 1] = source[slots[j], width - 1]
    for j in range(count):  # then the rest, from cache
        for g in range(1, width - 1):
            goals[j, g] = source[slots[j], g]
    return coins, rows, goals


@njit(cache=True, nogil=True)
def sample_records(
    next32,
    raw32,
    state,
    low,
    span,
    records,
    out,
    ids,
    relabelled,
    rows,
    found,
    threshold,
    strategy,
    end,
    position,
    steps,
    first,
    batch,
    capacity,
    goal_offsets,
    achieved_offset,
):  # pragma: no cover - compiled
    """A whole relabelled sample of single records, drawn in the order the parts draw: ``len(out)``
    ids (``_bounded_kernels.fill`` from ``low``, ``span``, into ``ids``), ``2 n`` raw draws
    (``next_raw`` at ``raw32``, as ``random_raw``) and ``pick``; then one pass copies each record
    into ``out`` (both viewed as 32-bit words, ``[rows, words]``) and, where it is relabelled,
    writes its goal fields (word offsets ``goal_offsets``) with the achieved goal (at
    ``achieved_offset``) of its goal slot, prefetching the record and the goal ``AHEAD``
    elements on (one stream of overlapping misses). Fills ``relabelled`` (``[n]``), the first
    ``count`` of ``rows`` (``[n]``) and of ``found`` (``[2, n, goal elements]`` in the goals'
    dtype: the goals, then the sampled records' achieved goals) and returns ``count``; the caller
    allocates every output, as boxing returned arrays costs more."""
    n = out.shape[0]
    fill(next32, state, low, span, ids)
    raw = np.empty(2 * n, np.uint64)
    for i in range(2 * n):
        raw[i] = next_raw(raw32, state)
    coins, chosen, slots = pick(ids, raw, threshold, strategy, end, position, steps, first, batch, capacity)
    relabelled[:] = coins
    count = chosen.shape[0]
    rows[:count] = chosen
    origin = _origin(low, capacity)
    base, row, words = records.ctypes.data, records.strides[0], np.uintp(records.shape[1])
    found = found.view(np.uint32)  # the goals (any dtype of whole words) as words
    width, achieved = np.uintp(found.shape[2]), np.uintp(achieved_offset)
    goal_lines = (achieved * 4, (achieved + width - 1) * 4)  # the first and last byte of a goal
    read = np.empty(n, np.uintp)  # the records' slots; indices are unsigned: no negative-index checks
    for i in range(n):
        read[i] = _slot(ids[i], origin, capacity)
    ahead = j = 0  # relabelled elements before the one prefetched, before the one copied
    for i in range(-AHEAD, n):  # prefetch element i + AHEAD (its record and goal), copy element i
        k = i + AHEAD
        if k < n:
            for line in range(0, row, 64):
                _prefetch(base + read[k] * row + line)
            if coins[k]:
                for line in goal_lines:
                    _prefetch(base + slots[ahead] * row + line)
                ahead += 1
        if i < 0:
            continue
        at, i_ = read[i], np.uintp(i)
        for w in range(words):
            out[i_, w] = records[at, w]
        if coins[i]:  # its goal: the achieved goal at its goal slot, into each goal field
            goal_at, j_ = np.uintp(slots[j]), np.uintp(j)
            for w in range(width):
                found[0, j_, w] = records[goal_at, achieved + w]
                found[1, j_, w] = out[i_, achieved + w]
            for offset in goal_offsets:
                to = np.uintp(offset)
                for w in range(width):
                    out[i_, to + w] = found[0, j_, w]
            j += 1
    return count


@njit(cache=True, nogil=True)
def place(outs, achieved, rows, goals):  # pragma: no cover - compiled
    """Write ``goals`` (``[len(rows), W]``) into rows ``rows`` of every ``[n, T, W]`` array of
    ``outs`` (every step), then return those rows of ``achieved`` (``[n, T, W]``), as a new array."""
    window, width = achieved.shape[1], achieved.shape[2]
    seen = np.empty((rows.shape[0], window, width), achieved.dtype)
    for j in range(rows.shape[0]):
        row = rows[j]
        for out in literal_unroll(outs):  # the goal fields' views may differ in layout
            for t in range(window):
                for g in range(width):
                    out[row, t, g] = goals[j, g]
        for t in range(window):
            for g in range(width):
                seen[j, t, g] = achieved[row, t, g]
    return seen


def warm_up() -> None:
    """Compile (or load from the disk cache) the kernel on a tiny episode."""
    one = np.zeros(1, np.int64)
    relabel(one, np.zeros(2, np.uint64), np.uint64(1), 0, np.full(1, -1, np.int64), one, 1, 0, 1, 1, np.zeros((1, 1)))
