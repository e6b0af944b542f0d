"""Device storage: one preallocated torch tensor per leaf, read and written by slot.

Reads gather with ``torch.index_select`` (on uint8 images about 8x faster than ``x[idx]``
on CPU) and keep the slot tensor on the device, so a read never synchronises with the
host. Tensors are allocated with ``torch.empty``: pages are mapped when first written, and
only slots that were written are ever read (the buffer's ids guarantee it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from replaybuf.specs import ArraySpec
from replaybuf.torch.convert import as_torch_dtype

__all__ = ["TorchStorage"]


class TorchStorage:
    """``capacity`` slots of every leaf in ``leaves``, as tensors on ``device``."""

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int, device: torch.device):
        self.capacity = capacity
        self.device = device
        self.tensors = [
            torch.empty((capacity,) + spec.shape, dtype=as_torch_dtype(spec.dtype), device=device)
            for spec in leaves
        ]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def write(self, start: int, tensors: Sequence[torch.Tensor]) -> None:
        """Write rows ``tensors[k][i]`` to slot ``(start + i) % capacity``; n <= capacity."""
        n = tensors[0].shape[0] if tensors else 0
        end = start + n
        if end <= self.capacity:
            for storage, rows in zip(self.tensors, tensors):
                storage[start:end].copy_(rows)
        else:
            split = self.capacity - start
            for storage, rows in zip(self.tensors, tensors):
                storage[start:].copy_(rows[:split])
                storage[: end - self.capacity].copy_(rows[split:])

    def read(self, slots: torch.Tensor) -> list[torch.Tensor]:
        """The leaves at ``slots`` (int64 on the device), each ``slots.shape + leaf.shape``."""
        flat = slots.reshape(-1)
        return [
            torch.index_select(storage, 0, flat).view(slots.shape + storage.shape[1:])
            for storage in self.tensors
        ]
