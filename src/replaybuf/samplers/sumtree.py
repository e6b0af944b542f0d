"""Sum and min trees over slot values, updated and searched for a whole batch at once.

A k-ary tree (``arity`` children per node, 16 by default): level 0 holds one value per slot,
each level above holds one value per group of ``arity`` nodes below, up to a top level of
at most ``arity`` nodes. Every level lives in one float64 array (``offsets[level]`` is where
it starts). A wide tree is shallow (four levels below the top for a million slots), so a
batch of B updates or searches costs a handful of NumPy calls per level on ``[B, arity]``
blocks; no Python loop runs over the batch.

The work on the arrays is done by a *kernels* namespace: ``NumpyKernels`` here, or
``replaybuf.samplers._tree_kernels`` (the same functions compiled by numba, the ``fast`` extra),
several times faster for batches of a few hundred. ``kernels(compiled)`` picks one;
``compiled=False`` keeps NumPy. Both follow the same rules and are tested against each other.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "MAX_MASS",
    "MIN_MASS",
    "MIN_WEIGHT",
    "MinTree",
    "NumpyKernels",
    "SumTree",
    "kernel_array",
    "kernels",
    "level_offsets",
    "priority_mass",
    "priority_masses",
]

_BELOW_ONE = 1.0 - 2.0**-50  # keeps a target strictly below its group's sum despite rounding

# A slot's mass (priority + epsilon) ** alpha is kept in [MIN_MASS, MAX_MASS]: above 0, so
# every stored item can be drawn and the smallest mass divides the weights; at most 2**960,
# so the total of any tree (fewer than 2**63 slots) stays finite. Both kernels clamp alike.
MIN_MASS = float(np.finfo(np.float64).tiny)  # 2.2250738585072014e-308, the smallest normal float64
MAX_MASS = 2.0**960  # about 9.7e288
# Importance weights are float32 in (0, 1]: one too small for float32 reads as its smallest normal.
MIN_WEIGHT = float(np.finfo(np.float32).tiny)  # 1.1754944e-38


def priority_mass(priority: float, alpha: float, epsilon: float) -> float:
    """``(priority + epsilon) ** alpha`` clamped into ``[MIN_MASS, MAX_MASS]`` (as the kernels do),
    for one finite priority > 0: never an OverflowError, never 0 or inf."""
    try:
        mass = (priority + epsilon) ** alpha
    except OverflowError:  # Python's float power raises where NumPy's gives inf
        return MAX_MASS
    return min(max(mass, MIN_MASS), MAX_MASS)


def priority_masses(priorities: np.ndarray, alpha: float, epsilon: float) -> np.ndarray:
    """``priority_mass`` of every priority of an array (finite and > 0), as float64."""
    with np.errstate(over="ignore", under="ignore"):
        return np.clip((np.asarray(priorities, np.float64) + epsilon) ** alpha, MIN_MASS, MAX_MASS)


def kernel_array(values: object, dtype: type, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as a flat, C-contiguous, writable array of ``dtype`` (copied only when
    needed): numba compiles one version of a kernel per array layout and writability, so
    every caller hands over the same kind (a read-only broadcast would cost a second compile)."""
    array = np.asarray(values, dtype)
    if shape is not None and array.shape != shape:
        array = np.broadcast_to(array, shape)
    array = np.ascontiguousarray(array).reshape(-1)
    return array if array.flags.writeable else array.copy()


def level_offsets(capacity: int, arity: int) -> list[int]:
    """Where each level starts in the one array of a k-ary tree over ``capacity`` slots (leaves
    first, each level padded to a multiple of ``arity``, up to a top level of ``arity`` nodes),
    and its total length last."""
    offsets, size = [0], capacity
    while True:
        padded = -(-size // arity) * arity
        offsets.append(offsets[-1] + padded)
        if padded == arity:
            return offsets
        size = padded // arity


def _blocks(tree: np.ndarray, offsets: np.ndarray, arity: int) -> list[np.ndarray]:
    """Each level as ``[nodes / arity, arity]`` groups of siblings, leaves first."""
    return [tree[a:b].reshape(-1, arity) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]


class NumpyKernels:
    """The tree kernels in plain NumPy (vectorised over the batch, one pass per level).

    Same functions and arguments as ``replaybuf.samplers._tree_kernels``; see there for what each does.
    """

    @staticmethod
    def find(tree, offsets, arity, targets, slots, values) -> None:
        """Per level, the ``[B, arity]`` children of the B current nodes are laid end to end
        and one ``searchsorted`` in their running sum picks every child at once."""
        blocks = _blocks(tree, offsets, arity)
        residual = np.asarray(targets, dtype=np.float64)
        row_starts = np.arange(residual.shape[0], dtype=np.int64) * arity
        row_ends = row_starts + (arity - 1)
        node = np.zeros(residual.shape[0], np.int64)
        for block in reversed(blocks):
            np.minimum(node, block.shape[0] - 1, out=node)  # a zero node picked by rounding may be padding
            children = block[node].ravel()
            running = np.cumsum(children)
            before_row = running[row_starts] - children[row_starts]
            # rounding must not carry a target past its row's last positive child
            wanted = before_row + np.minimum(residual, (running[row_ends] - before_row) * _BELOW_ONE)
            flat = np.searchsorted(running, wanted, side="right")
            np.clip(flat, row_starts, row_ends, out=flat)
            residual = wanted - (running[flat] - children[flat])
            node = node * arity + (flat - row_starts)
        slots[:] = node
        values[:] = tree[node]

    @staticmethod
    def update(tree, offsets, arity, slots, new_values, use_min) -> None:
        blocks = _blocks(tree, offsets, arity)
        tree[slots] = new_values
        parents = slots // arity
        for level, below in zip(offsets[1:-1].tolist(), blocks[:-1], strict=True):
            children = below[parents]
            tree[level + parents] = children.min(axis=1) if use_min else children.sum(axis=1)
            parents = parents // arity

    @staticmethod
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
    ) -> int:
        top = sums[offsets[-2] :]
        total, smallest = float(top.sum()), float(mins[offsets[-2] :].min())
        valid = total - excluded
        if not valid > 0:
            return -1
        n = uniforms.shape[0]
        targets = (np.arange(n) + uniforms) * (total / n) if stratified else uniforms * total
        slots, mass = np.empty(n, np.int64), np.empty(n)
        NumpyKernels.find(sums, offsets, arity, targets, slots, mass)
        found = head_id - 1 - (head_id - 1 - slots) % capacity
        ok = (mass > 0) & (found >= low_id) & (found < high_id)
        ids[:] = np.where(ok, found, -1)
        probabilities[:] = mass / valid
        with np.errstate(divide="ignore", over="ignore", under="ignore"):
            weights[:] = np.maximum((mass / smallest) ** -beta, MIN_WEIGHT)
        return int(n - ok.sum())

    @staticmethod
    def assign(
        sums, mins, offsets, arity, capacity, ids, priorities, alpha, epsilon, oldest_id, head_id, slots
    ) -> tuple[int, float, int]:
        good = np.isfinite(priorities) & (priorities > 0)
        largest = float(priorities[good].max()) if good.any() else 0.0
        if not good.all():
            return 1, largest, 0
        if ((ids < 0) | (ids >= head_id)).any():
            return 2, largest, 0
        live = ids >= oldest_id
        count = int(live.sum())
        slots[:count] = ids[live] % capacity
        mass = priority_masses(priorities[live], alpha, epsilon)
        NumpyKernels.update(sums, offsets, arity, slots[:count], mass, False)
        NumpyKernels.update(mins, offsets, arity, slots[:count], mass, True)
        return 0, largest, count

    @staticmethod
    def assign_starts(tree, offsets, arity, capacity, leaves, position, ids, steps, batch, oldest_id, high_id, slots):
        ids = ids[ids >= oldest_id]
        inside = (ids < high_id) & (position[(ids + (steps - 1) * batch) % capacity] >= steps - 1)
        slots = ids % capacity
        NumpyKernels.update(tree, offsets, arity, slots, np.where(inside, leaves[slots], 0.0), False)


_compiled: ModuleType | None | bool = False  # False: not looked up yet


def kernels(compiled: bool | None = None) -> Any:
    """The kernels to use: numba's when ``compiled`` is None and numba is importable (looked
    up and compiled or loaded from the disk cache once), NumPy's when False; ``True``
    insists on numba (ImportError without it)."""
    global _compiled
    if compiled is False:
        return NumpyKernels
    if _compiled is False:
        try:
            from replaybuf.samplers import _tree_kernels

            _tree_kernels.warm_up()
            _compiled = _tree_kernels
        except ImportError:
            _compiled = None
    if _compiled is None:
        if compiled:
            raise ImportError("compiled=True: numba is not installed (pip install 'replaybuf[fast]')")
        return NumpyKernels
    return _compiled


class _Tree:
    """Levels of a k-ary tree; ``_reduce`` combines the ``[n, arity]`` children of n nodes."""

    _fill = 0.0
    _use_min = False

    def __init__(self, capacity: int, arity: int = 16, compiled: bool | None = None):
        self.capacity = int(capacity)
        self.arity = int(arity)
        self.offsets = np.array(level_offsets(self.capacity, self.arity), np.int64)
        self.tree = np.full(int(self.offsets[-1]), self._fill, np.float64)  # every level, leaves first
        self.levels = [self.tree[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]
        self._blocks = [level.reshape(-1, self.arity) for level in self.levels]
        self.kernels = kernels(compiled)

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clear(self) -> None:
        self.tree.fill(self._fill)

    def values(self, slots: np.ndarray) -> np.ndarray:
        """The leaf values at ``slots``."""
        return self.levels[0][slots]

    def update(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``slots`` to ``values`` and recompute their ancestors (duplicates: last wins)."""
        slots = kernel_array(slots, np.int64)
        values = kernel_array(values, np.float64, slots.shape)
        self.kernels.update(self.tree, self.offsets, self.arity, slots, values, self._use_min)

    def update_range(self, start: int, stop: int, values: float | np.ndarray) -> None:
        """Set the contiguous leaves ``[start, stop)`` to ``values`` and fix their ancestors."""
        self.levels[0][start:stop] = values
        for level, below in zip(self.levels[1:], self._blocks[:-1], strict=True):
            start, stop = start // self.arity, -(-stop // self.arity)
            level[start:stop] = self._reduce(below[start:stop])

    def rebuild(self) -> None:
        """Recompute every level above the leaves (after writing ``levels[0]`` directly)."""
        for level, below in zip(self.levels[1:], self._blocks[:-1], strict=True):
            level[: below.shape[0]] = self._reduce(below)

    def root(self) -> float:
        return float(self._reduce(self._blocks[-1])[0])


class SumTree(_Tree):
    """Sums of slot values; the kernels' ``draw`` maps targets in ``[0, root)`` to slots."""

    _fill = 0.0

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        return children.sum(axis=1)


class MinTree(_Tree):
    """Minima of slot values (empty slots hold +inf); ``root`` is the smallest value."""

    _fill = np.inf
    _use_min = True

    def _reduce(self, children: np.ndarray) -> np.ndarray:
        return children.min(axis=1)
