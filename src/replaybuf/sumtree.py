"""Sum and min trees over slot values, updated and searched for a whole batch at once.

A k-ary tree (``arity`` children per node, 16 by default): level 0 holds one value per slot,
each level above holds one value per group of ``arity`` nodes below, up to a top level of
at most ``arity`` nodes. A wide tree is shallow (four levels below the top for a million
slots), so a batch of B updates or searches costs a handful of NumPy calls per level on
``[B, arity]`` blocks instead of twenty calls per level of a binary tree; no Python loop
runs over the batch.

``SumTree.find(targets)`` descends all B targets level by level: in the ``[B, arity]``
block of children it picks, per row, the first child whose running sum exceeds the target
and subtracts the sums to its left.

When numba is installed (the ``fast`` extra), ``find`` and ``update`` run compiled loops
over the same arrays (replaybuf._tree_kernels), several times faster for batches of a few
hundred; ``compiled=False`` keeps the NumPy path. Both follow the same rules.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = ["MinTree", "SumTree"]

_BELOW_ONE = 1.0 - 2.0**-50  # keeps a target strictly below its group's sum despite rounding


_kernels: ModuleType | None | bool = False  # False: not looked up yet


def compiled_kernels() -> ModuleType | None:
    """replaybuf._tree_kernels when numba is importable, else None (looked up once)."""
    global _kernels
    if _kernels is False:
        try:
            from replaybuf import _tree_kernels

            _tree_kernels.warm_up()
            _kernels = _tree_kernels
        except ImportError:
            _kernels = None
    return _kernels  # type: ignore[return-value]


class _Tree:
    """Levels of a k-ary tree; ``_reduce`` combines the ``[n, arity]`` children of n nodes."""

    _fill = 0.0

    def __init__(self, capacity: int, arity: int = 16, compiled: bool | None = None):
        self.capacity = int(capacity)
        self.arity = int(arity)
        sizes = []
        size = self.capacity
        while True:
            padded = -(-size // self.arity) * self.arity
            sizes.append(padded)
            if padded == self.arity:
                break
            size = padded // self.arity
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.tree = np.full(int(self.offsets[-1]), self._fill, np.float64)  # every level, leaves first
        self.levels = [self.tree[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]
        self._kernels = compiled_kernels() if compiled is not False else None
        self._blocks = [level.reshape(-1, self.arity) for level in self.levels]

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clear(self) -> None:
        self.tree.fill(self._fill)

    def values(self, slots: np.ndarray) -> np.ndarray:
        """The leaf values at ``slots``."""
        return self.levels[0][slots]

    def update(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``slots`` to ``values`` and recompute their ancestors (duplicates: last wins)."""
        if self._kernels is not None:
            slots = np.ascontiguousarray(slots, np.int64)
            values = np.ascontiguousarray(values, np.float64)
            if values.shape != slots.shape:
                values = np.ascontiguousarray(np.broadcast_to(values, slots.shape))
            self._kernels.update(self.tree, self.offsets, self.arity, slots, values, self._fill != 0.0)
            return
        self.levels[0][slots] = values
        parents = slots // self.arity
        for level, below in zip(self.levels[1:], self._blocks[:-1]):
            level[parents] = self._reduce(below[parents])
            parents = parents // self.arity

    def update_range(self, start: int, stop: int, value: float) -> None:
        """Set the contiguous leaves ``[start, stop)`` to one value and fix their ancestors."""
        self.levels[0][start:stop] = value
        for level, below in zip(self.levels[1:], self._blocks[:-1]):
            start, stop = start // self.arity, -(-stop // self.arity)
            level[start:stop] = self._reduce(below[start:stop])

    def root(self) -> float:
        return float(self._reduce(self._blocks[-1])[0])


class SumTree(_Tree):
    """Sums of slot values; ``find`` maps targets in ``[0, total)`` to slots."""

    _fill = 0.0

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        return children.sum(axis=1)

    def total(self) -> float:
        return self.root()

    def prefix(self, stop: int) -> float:
        """The sum of the leaves ``[0, stop)``."""
        if stop >= self.capacity:
            return self.total()
        total = 0.0
        for level in self.levels:
            group = stop - stop % self.arity
            total += float(level[group:stop].sum())
            stop //= self.arity
        return total

    def find(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slot each target (``0 <= target < total``) falls in, and that slot's value.

        Slot ``i`` is found for targets in ``[prefix(i), prefix(i) + value_i)``. Per level,
        the ``[B, arity]`` children of the B current nodes are laid end to end and one
        ``searchsorted`` in their running sum finds every child at once. Rounding can push
        a target onto a zero-valued slot; such a slot comes back with value 0 and the
        caller draws again (``PrioritizedSampler`` does).
        """
        if self._kernels is not None:
            targets = np.ascontiguousarray(targets, np.float64)
            slots, values = np.empty(targets.shape[0], np.int64), np.empty(targets.shape[0])
            self._kernels.find(self.tree, self.offsets, self.arity, targets, slots, values)
            return slots, values
        residual = np.asarray(targets, dtype=np.float64)
        top = self.levels[-1]
        running = np.cumsum(top)
        node = np.minimum(np.searchsorted(running, residual, side="right"), self.arity - 1)
        residual = residual - (running[node] - top[node])
        row_starts = np.arange(residual.shape[0], dtype=np.int64) * self.arity
        row_ends = row_starts + (self.arity - 1)
        for block in reversed(self._blocks[:-1]):
            children = block[node].ravel()
            running = np.cumsum(children)
            wanted = residual + (running[row_starts] - children[row_starts])
            flat = np.searchsorted(running, wanted, side="right")
            np.clip(flat, row_starts, row_ends, out=flat)
            residual = wanted - (running[flat] - children[flat])
            node = node * self.arity + (flat - row_starts)
        return node, self.levels[0][node]


class MinTree(_Tree):
    """Minima of slot values (empty slots hold +inf); ``root`` is the smallest value."""

    _fill = np.inf

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        return children.min(axis=1)
