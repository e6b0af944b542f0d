"""Sum and min trees held as torch tensors on any device, updated and searched per batch.

The same k-ary layout and rules as ``replaybuf.samplers.sumtree`` (the NumPy/numba trees):
level 0 holds one value per slot, each level above one value per group of ``arity`` nodes,
up to a top level of ``arity`` nodes; every level lives in one float64 tensor. Here every
step is a tensor operation over the whole batch, one pass per level, and nothing is read
back to the host: on CUDA an update or a search queues kernels and returns without waiting
(``total`` and ``smallest`` are 0-d tensors for the same reason).

- ``update``: set leaves, duplicates resolved last-write-wins as NumPy's fancy assignment
  does. Torch leaves the winner of duplicate indices undefined on CUDA, so every write but
  the last of a slot is sent to a scratch element after the tree (a stable sort finds them,
  no host synchronisation); parents are then recomputed from their children, each parent
  written with one value however often it appears.
- ``find``: per target, the first child whose running sum exceeds it, never a child of
  value 0 (a target carried past the row's total by rounding is lowered below it), as the
  host kernels pick. The running sums are per row here, so a target within rounding of a
  boundary may land on the neighbouring slot; away from boundaries the slots are NumPy's.
"""

from __future__ import annotations

from typing import Any

import torch

from replaybuf.samplers.sumtree import level_offsets

__all__ = ["TorchMinTree", "TorchSumTree"]

_BELOW_ONE = 1.0 - 2.0**-50  # as replaybuf.samplers.sumtree: keeps a target below its row's sum


class _TorchTree:
    """Levels of a k-ary tree in one float64 tensor, plus one scratch element at the end."""

    _fill = 0.0

    def __init__(self, capacity: int, arity: int = 16, device: Any = "cpu"):
        self.capacity = int(capacity)
        self.arity = int(arity)
        self.device = torch.device(device)
        self.offsets = level_offsets(self.capacity, self.arity)
        self._scratch = self.offsets[-1]  # the index losing duplicate writes go to
        self.tree = torch.full((self._scratch + 1,), self._fill, dtype=torch.float64, device=self.device)
        self.levels = [self.tree[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]

    def _reduce(self, children: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def clear(self) -> None:
        self.tree.fill_(self._fill)

    def values(self, slots: torch.Tensor) -> torch.Tensor:
        """The leaf values at ``slots``."""
        return self.levels[0][slots]

    def update(self, slots: torch.Tensor, values: torch.Tensor | float, keep: torch.Tensor | None = None) -> None:
        """Set leaves ``slots`` to ``values`` (last write of a slot wins) and recompute their
        ancestors. ``keep`` (bool, like ``slots``): only those writes happen, decided on the
        device; the others change nothing and never supersede a kept write of their slot."""
        slots = torch.as_tensor(slots, dtype=torch.int64, device=self.device).reshape(-1)
        values = torch.as_tensor(values, dtype=torch.float64, device=self.device).expand(slots.shape)
        targets = slots if keep is None else torch.where(keep, slots, self._scratch)
        order = torch.sort(targets, stable=True).indices
        ordered = targets[order]
        superseded = torch.zeros_like(slots, dtype=torch.bool)
        superseded[order[:-1]] = ordered[:-1] == ordered[1:]  # a later write of the same slot follows
        self.tree[torch.where(superseded, self._scratch, targets)] = values
        parents = slots // self.arity
        for level, below in zip(self.offsets[1:-1], self.levels[:-1], strict=True):
            self.tree[level + parents] = self._reduce(below.view(-1, self.arity)[parents])
            parents = parents // self.arity

    def _top(self) -> torch.Tensor:
        return self.levels[-1]


class TorchSumTree(_TorchTree):
    """Sums of slot values; ``find`` maps targets in ``[0, total)`` to slots."""

    def _reduce(self, children: torch.Tensor) -> torch.Tensor:
        return children.sum(dim=1)

    def total(self) -> torch.Tensor:
        """The sum of every leaf, a 0-d tensor on the tree's device."""
        return self._top().sum()

    def find(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The slot each target falls in and its value, descending level by level for the whole batch."""
        residual = torch.as_tensor(targets, dtype=torch.float64, device=self.device).reshape(-1)
        node = torch.zeros(residual.shape, dtype=torch.int64, device=self.device)
        for level in reversed(self.levels):
            block = level.view(-1, self.arity)
            children = block[node.clamp_(max=block.shape[0] - 1)]  # a zero node picked by rounding may be padding
            running = children.cumsum(dim=1)
            target = torch.minimum(residual, running[:, -1] * _BELOW_ONE)
            chosen = (running <= target[:, None]).sum(dim=1).clamp_(max=self.arity - 1)
            before = running.gather(1, chosen[:, None]).squeeze(1) - children.gather(1, chosen[:, None]).squeeze(1)
            residual = target - before
            node = node * self.arity + chosen
        return node, self.levels[0][node]


class TorchMinTree(_TorchTree):
    """Minima of slot values (empty slots hold +inf); ``smallest`` is the smallest leaf."""

    _fill = float("inf")

    def _reduce(self, children: torch.Tensor) -> torch.Tensor:
        return children.amin(dim=1)

    def smallest(self) -> torch.Tensor:
        """The smallest leaf, a 0-d tensor on the tree's device."""
        return self._top().amin()
