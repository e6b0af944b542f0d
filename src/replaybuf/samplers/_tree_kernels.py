"""Compiled loops for ``replaybuf.samplers.sumtree`` (used when numba is installed: ``replaybuf[fast]``).

The trees keep every level in one float64 array (``offsets[level]`` is where a level
starts, level 0 holds the slots). These kernels walk it with the same rules as the NumPy
twins in ``replaybuf.samplers.sumtree.NumpyKernels`` (same names, same arguments):

- ``find``: per target, the first child whose running sum exceeds it, never a child with
  value 0;
- ``update``: set leaves of one tree and recompute their ancestors;
- ``draw``: a whole prioritized sample in one call (targets, descent, ids, probabilities,
  importance weights);
- ``assign``: a whole ``update_priorities`` in one call (checks, masses, leaf writes in the
  sum and min trees, propagation to the top);
- ``assign_starts``: copy those masses into an episode-aware window tree (0 where a window
  of T steps from that start would cross an episode end or the head).

The descent runs level by level over the whole batch (not target by target), so the
loads of different targets overlap, and picks a child by counting running sums instead of
branching. Compiled on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["assign", "assign_starts", "draw", "find", "update", "warm_up"]

_BELOW_ONE = 1.0 - 2.0**-50
# as in replaybuf.samplers.sumtree: masses kept in [MIN_MASS, MAX_MASS], weights >= MIN_WEIGHT
MIN_MASS = float(np.finfo(np.float64).tiny)
MAX_MASS = 2.0**960
MIN_WEIGHT = float(np.finfo(np.float32).tiny)


@njit(cache=True, nogil=True)
def _descend(tree, offsets, arity, residual):  # pragma: no cover - compiled
    """The leaf each target in ``residual`` falls in (``residual`` is consumed).

    Level by level over the whole batch: the targets' loads at one level do not depend on
    each other, so the CPU overlaps their cache misses."""
    node = np.zeros(residual.shape[0], np.int64)
    for level in range(offsets.shape[0] - 2, -1, -1):
        start = offsets[level]
        groups = (offsets[level + 1] - start) // arity  # a zero node picked by rounding may be padding
        for i in range(residual.shape[0]):
            base = start + min(node[i], groups - 1) * arity
            if arity == 16:
                chosen, before, target = _pick16(tree, base, residual[i])
            else:
                chosen, before, target = _pick(tree, base, arity, residual[i])
            residual[i] = target - before
            node[i] = node[i] * arity + chosen
    return node


@njit(cache=True, nogil=True)
def _pick(tree, base, arity, target):  # pragma: no cover - compiled
    """The first child with a positive value whose running sum exceeds ``target``, the sum
    before it, and the target (lowered when rounding carried it past the last positive child)."""
    last, before = 0, 0.0
    for j in range(arity):
        value = tree[base + j]
        if value > 0.0:
            if target < before + value:
                return j, before, target
            last = j
            before += value
    before -= tree[base + last]
    return last, before, min(target, before + tree[base + last] * _BELOW_ONE)


@njit(cache=True, nogil=True)
def _pick16(tree, base, target):  # pragma: no cover - compiled
    """``_pick`` for 16 children without loop or branch: the quarter first (four sums of
    four, independent of each other), then the child inside it; the running sums left of
    the choice are added up by multiplying with the comparisons (adding 0.0 is exact)."""
    x = tree[base : base + 16]
    q0 = (x[0] + x[1]) + (x[2] + x[3])
    q1 = (x[4] + x[5]) + (x[6] + x[7])
    q2 = (x[8] + x[9]) + (x[10] + x[11])
    q3 = (x[12] + x[13]) + (x[14] + x[15])
    s1 = q0
    s2 = s1 + q1
    s3 = s2 + q2
    if not target < s3 + q3:  # rounding carried the target past the group's sum
        target = (s3 + q3) * _BELOW_ONE
    a1, a2, a3 = s1 <= target, s2 <= target, s3 <= target
    quarter = a1 + a2 + a3
    before = (q0 * a1 + q1 * a2) + q2 * a3
    y = x[4 * quarter : 4 * quarter + 4]
    c0 = before + y[0]
    c1 = c0 + y[1]
    b1, b2, b3 = c0 <= target, c1 <= target, c1 + y[2] <= target
    before = ((before + y[0] * b1) + y[1] * b2) + y[2] * b3
    return 4 * quarter + b1 + b2 + b3, before, target


@njit(cache=True, nogil=True)
def find(tree, offsets, arity, targets, slots, values):  # pragma: no cover - compiled
    node = _descend(tree, offsets, arity, targets.copy())
    for i in range(node.shape[0]):
        slots[i] = node[i]
        values[i] = tree[node[i]]


@njit(cache=True, nogil=True)
def _propagate(tree, offsets, arity, slots, count, use_min):  # pragma: no cover - compiled
    """Recompute the ancestors of ``slots[:count]`` level by level (sorted slots share them)."""
    scale = 1
    for level in range(1, offsets.shape[0] - 1):
        scale *= arity
        previous = -1
        for i in range(count):
            node = slots[i] // scale
            if node == previous:
                continue
            previous = node
            first = offsets[level - 1] + node * arity
            acc = tree[first]
            for j in range(1, arity):
                value = tree[first + j]
                acc = min(acc, value) if use_min else acc + value
            tree[offsets[level] + node] = acc


@njit(cache=True, nogil=True)
def _propagate16(sums, mins, offsets, slots, count):  # pragma: no cover - compiled
    """``_propagate`` of a sum and a min tree of arity 16 at once, reduced pairwise."""
    scale = 1
    for level in range(1, offsets.shape[0] - 1):
        scale *= 16
        previous, below, here = -1, offsets[level - 1], offsets[level]
        for i in range(count):
            node = slots[i] // scale
            if node == previous:
                continue
            previous = node
            s = sums[below + node * 16 : below + node * 16 + 16]
            m = mins[below + node * 16 : below + node * 16 + 16]
            sums[here + node] = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + (
                ((s[8] + s[9]) + (s[10] + s[11])) + ((s[12] + s[13]) + (s[14] + s[15]))
            )
            mins[here + node] = min(
                min(min(min(m[0], m[1]), min(m[2], m[3])), min(min(m[4], m[5]), min(m[6], m[7]))),
                min(min(min(m[8], m[9]), min(m[10], m[11])), min(min(m[12], m[13]), min(m[14], m[15]))),
            )


@njit(cache=True, nogil=True)
def update(tree, offsets, arity, slots, new_values, use_min):  # pragma: no cover - compiled
    for i in range(slots.shape[0]):
        tree[slots[i]] = new_values[i]
    _propagate(tree, offsets, arity, slots, slots.shape[0], use_min)


@njit(cache=True, nogil=True)
def draw(
    sums,
    mins,
    offsets,
    arity,
    capacity,
    uniforms,
    stratified,
    excluded,
    beta,
    low_id,
    high_id,
    head_id,
    ids,
    probabilities,
    weights,
):  # pragma: no cover - compiled
    top = offsets.shape[0] - 2
    total, smallest = 0.0, np.inf
    for k in range(offsets[top], offsets[top + 1]):
        total += sums[k]
        smallest = min(smallest, mins[k])
    valid = total - excluded
    if not valid > 0.0:
        return -1
    n = uniforms.shape[0]
    residual = np.empty(n)
    for i in range(n):
        residual[i] = (i + uniforms[i]) * (total / n) if stratified else uniforms[i] * total
    node = _descend(sums, offsets, arity, residual)
    bad, newest = 0, (head_id - 1) % capacity  # the slot of the newest item
    exponent = np.float32(-beta)
    for i in range(n):
        slot = node[i]
        mass = sums[slot]
        age = newest - slot
        ident = head_id - 1 - (age if age >= 0 else age + capacity)
        if mass > 0.0 and low_id <= ident < high_id:
            ids[i] = ident
            probabilities[i] = mass / valid
            ratio = mass / smallest
            # float32 pow is ~3x cheaper; float64 where the ratio would overflow float32 (and
            # the weight may fall below float32's range: it then reads as MIN_WEIGHT)
            weights[i] = np.float32(ratio) ** exponent if ratio < 1e30 else max(ratio**-beta, MIN_WEIGHT)
        else:
            ids[i] = -1
            bad += 1
    return bad


@njit(cache=True, nogil=True)
def assign(
    sums, mins, offsets, arity, capacity, ids, priorities, alpha, epsilon, oldest_id, head_id, slots
):  # pragma: no cover - compiled
    n = ids.shape[0]
    bad_priority, bad_id, largest = -1, -1, 0.0
    for i in range(n):
        priority = priorities[i]
        if not (priority > 0.0 and priority < np.inf):
            if bad_priority < 0:
                bad_priority = i
        elif priority > largest:
            largest = priority
        if (ids[i] < 0 or ids[i] >= head_id) and bad_id < 0:
            bad_id = i
    if bad_priority >= 0:
        return 1, largest, 0
    if bad_id >= 0:
        return 2, largest, 0
    count = 0
    for i in range(n):
        if ids[i] >= oldest_id:  # older ids were overwritten: ignored
            slot = ids[i] % capacity
            mass = min(max((priorities[i] + epsilon) ** alpha, MIN_MASS), MAX_MASS)
            sums[slot] = mass
            mins[slot] = mass
            slots[count] = slot
            count += 1
    if arity == 16:
        _propagate16(sums, mins, offsets, slots, count)
    else:
        _propagate(sums, offsets, arity, slots, count, False)
        _propagate(mins, offsets, arity, slots, count, True)
    return 0, largest, count


@njit(cache=True, nogil=True)
def assign_starts(
    tree, offsets, arity, capacity, leaves, position, ids, steps, batch, oldest_id, high_id, slots
):  # pragma: no cover - compiled
    count = 0
    for i in range(ids.shape[0]):
        ident = ids[i]
        if ident < oldest_id:
            continue
        slot = ident % capacity
        inside = ident < high_id and position[(ident + (steps - 1) * batch) % capacity] >= steps - 1
        tree[slot] = leaves[slot] if inside else 0.0
        slots[count] = slot
        count += 1
    _propagate(tree, offsets, arity, slots, count, False)


def warm_up() -> None:
    """Compile (or load from the disk cache) every kernel on a tiny tree."""
    sums, mins = np.zeros(6), np.full(6, np.inf)
    offsets = np.array([0, 4, 6], np.int64)
    one = np.array([1], np.int64)
    update(sums, offsets, 2, one, np.array([1.0]), False)
    find(sums, offsets, 2, np.array([0.5]), np.zeros(1, np.int64), np.zeros(1))
    assign(sums, mins, offsets, 2, 4, one, np.array([1.0]), 1.0, 0.0, 0, 2, np.zeros(1, np.int64))
    assign_starts(sums, offsets, 2, 4, sums, np.zeros(4, np.int64), one, 2, 1, 0, 2, np.zeros(1, np.int64))
    draw(
        sums,
        mins,
        offsets,
        2,
        4,
        np.array([0.5]),
        True,
        0.0,
        0.5,
        0,
        2,
        2,
        np.zeros(1, np.int64),
        np.zeros(1, np.float32),
        np.zeros(1, np.float32),
    )
