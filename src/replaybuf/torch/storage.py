"""Device storage: one preallocated torch tensor per leaf, read and written by slot.

Reads gather with ``torch.index_select`` (on uint8 images about 8x faster than ``x[idx]``
on CPU) and keep the slot tensor on the device, so a read never synchronises with the
host. Tensors are allocated with ``torch.empty``: pages are mapped when first written, and
only slots that were written are ever read (the buffer's ids guarantee it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
            torch.empty((capacity,) + spec.shape, dtype=as_torch_dtype(spec.dtype), device=device) for spec in leaves
        ]
        # a CPU storage is written through NumPy views of the same memory (see DeviceBatcher)
        self._views = [t.numpy() for t in self.tensors] if device.type == "cpu" else None

    def write(self, start: int, batch: Sequence[Any], steps: int = 1) -> None:
        """Write rows ``batch[k][i]`` to slot ``(start + i) % capacity``; n <= capacity.

        ``batch`` holds NumPy arrays for a CPU storage, tensors on the device otherwise.
        """
        n = batch[0].shape[0] if batch else 0
        end = start + n
        if self._views is not None:
            targets: Sequence[Any] = self._views
            if end <= self.capacity:
                for target, rows in zip(targets, batch, strict=True):
                    target[start:end] = rows
                return
        else:
            targets = self.tensors
            if end <= self.capacity:
                for target, rows in zip(targets, batch, strict=True):
                    target[start:end].copy_(rows)
                return
        split = self.capacity - start
        for target, rows in zip(targets, batch, strict=True):
            target[start:] = rows[:split]
            target[: end - self.capacity] = rows[split:]

    def commit(self, steps: int) -> None:
        """Nothing to record: the storage is not crash-safe (see replaybuf.storages)."""

    def clear(self) -> None:
        """Nothing to forget: slots are overwritten before they are read again."""

    def read(self, slots: torch.Tensor) -> list[torch.Tensor]:
        """The leaves at ``slots`` (int64 on the device), each ``slots.shape + leaf.shape``."""
        flat = slots.reshape(-1)
        return [torch.index_select(storage, 0, flat).view(slots.shape + storage.shape[1:]) for storage in self.tensors]
