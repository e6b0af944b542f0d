"""Compiled loops for ``replaybuf.sumtree`` (used when numba is installed: ``replaybuf[fast]``).

The trees keep every level in one float64 array (``offsets[level]`` is where a level
starts, level 0 holds the slots). These kernels walk it with the same rules as the NumPy
path: ``find`` picks the first child whose running sum exceeds the target and never a
child with value 0; ``update`` sets leaves and recomputes their ancestors.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["find", "update"]


@njit(cache=True, nogil=True)
def find(tree, offsets, arity, targets, slots, values):  # pragma: no cover - compiled
    top = offsets.shape[0] - 2
    for i in range(targets.shape[0]):
        target = targets[i]
        node = 0
        for level in range(top, -1, -1):
            base = offsets[level] + node * arity
            chosen, last, before = -1, 0, 0.0
            for j in range(arity):
                value = tree[base + j]
                if value > 0.0:
                    last = j
                    if target < before + value:
                        chosen = j
                        break
                    before += value
            if chosen < 0:  # rounding carried the target past the last positive child
                chosen = last
                before -= tree[base + last]
                target = min(target, before + tree[base + last] * (1.0 - 2.0**-50))
            target -= before
            node = node * arity + chosen
        slots[i] = node
        values[i] = tree[node]


@njit(cache=True, nogil=True)
def update(tree, offsets, arity, slots, new_values, use_min):  # pragma: no cover - compiled
    for i in range(slots.shape[0]):
        tree[slots[i]] = new_values[i]
    scale = 1
    for level in range(1, offsets.shape[0] - 1):
        scale *= arity
        previous = -1
        for i in range(slots.shape[0]):
            node = slots[i] // scale
            if node == previous:  # sorted slots share ancestors: recompute each once
                continue
            previous = node
            first = offsets[level - 1] + node * arity
            acc = tree[first]
            for j in range(1, arity):
                value = tree[first + j]
                acc = min(acc, value) if use_min else acc + value
            tree[offsets[level] + node] = acc


def warm_up() -> None:
    """Compile (or load from the cache) both kernels on a tiny tree."""
    tree = np.zeros(6)
    offsets = np.array([0, 4, 6], np.int64)
    update(tree, offsets, 2, np.array([1], np.int64), np.array([1.0]), False)
    find(tree, offsets, 2, np.array([0.5]), np.zeros(1, np.int64), np.zeros(1))
