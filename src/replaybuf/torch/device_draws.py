"""Prioritized draws from sum and min trees held on the buffer's device (``tree_device="device"``).

``DeviceTreeSampler`` is a ``TorchPrioritizedSampler`` whose host trees stay the record
(priority updates, windows, sequences, the sample-count rules and checkpoints keep using
them) and whose leaves are mirrored into ``replaybuf.torch.sumtree`` trees on the device
after every change. A single-step draw (``num_steps`` None or 1, no rule asking for distinct
items) is then made on the device: uniforms from a torch generator seeded by ``seed``, the
stratified targets, the descent, ids, probabilities and weights, all queued without
reading anything back, so a CUDA learner's sample does not wait for the GPU. Every stored
item with mass is a valid single-step start, so no draw needs redrawing. Windows, sequences
and distinct draws fall back to the host draw. The device draws are not NumPy's: the same
seed gives other ids than ``PrioritizedReplayBuffer``'s (the same distribution).

The mirror follows what changes the leaves in ``TorchPrioritizedReplayBuffer``: adds,
priority updates, clear and loads. The other writers of the host trees do not reach this
sampler: ``exclude`` (the sample-count rules, refused with ``tree_device="device"``),
``appended`` (the MindSpore-style buffer's) and ``reopened`` (memmap storage, which the torch
buffers do not take).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.ring import StreamRing
from replaybuf.samplers.sumtree import MIN_WEIGHT
from replaybuf.torch.episodes import to_host
from replaybuf.torch.prioritized import TorchPrioritizedSampler
from replaybuf.torch.sumtree import TorchMinTree, TorchSumTree

__all__ = ["DeviceTreeSampler"]


class DeviceTreeSampler(TorchPrioritizedSampler):
    """``TorchPrioritizedSampler`` drawing single steps from mirrors of its trees on ``device``."""

    def __init__(self, capacity: int, *, device: torch.device, seed: int | None, **options: Any):
        super().__init__(capacity, device=device, seed=seed, **options)
        self.device_sums = TorchSumTree(capacity, self.sums.arity, device)
        self.device_mins = TorchMinTree(capacity, self.mins.arity, device)
        self.device_rng = torch.Generator(device)
        self.device_rng.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))

    def _mirror(self, slots: np.ndarray | None = None) -> None:
        """Copy the host leaves at ``slots`` (every slot for None) into the device trees."""
        if slots is None:
            slots = np.arange(self.sums.capacity, dtype=np.int64)
        slots = np.ascontiguousarray(slots, np.int64).ravel()
        on = torch.from_numpy(slots).to(self.device, non_blocking=True)
        for host, mirror in ((self.sums, self.device_sums), (self.mins, self.device_mins)):
            mirror.update(on, torch.from_numpy(host.values(slots)).to(self.device, non_blocking=True))

    def draw(self, rng: Any, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None) -> tuple:
        if (num_steps or 1) > 1 or self.distinct:
            return super().draw(rng, ring, sample_batch_size, num_steps)
        ring.window_starts(1)  # EmptyBufferError when nothing is stored
        n = 1 if sample_batch_size is None else sample_batch_size
        uniforms = torch.rand(n, generator=self.device_rng, device=self.device, dtype=torch.float64)
        total = self.device_sums.total()
        targets = (torch.arange(n, device=self.device, dtype=torch.float64) + uniforms) * (total / n)
        slots, mass = self.device_sums.find(targets)
        head = ring.steps * ring.batch_size
        ids = head - 1 - (head - 1 - slots) % ring.capacity
        probabilities = (mass / total).float()
        ratio = mass / self.device_mins.smallest()
        weights = ratio.pow(-self.beta()).clamp(min=MIN_WEIGHT).float()
        if sample_batch_size is None:
            ids, probabilities, weights = ids.reshape(()), probabilities.reshape(()), weights.reshape(())
        return ids, probabilities, {"weights": weights, "mask": None}

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: np.ndarray | None = None) -> None:
        super().added(ring, arrays, priorities)
        start = ring.slot(ring.steps - 1)
        self._mirror(np.arange(start, start + ring.batch_size))

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        ids = np.asarray(to_host(ids), np.int64)
        super().update_priorities(ring, ids, priorities)  # raises before any change on a bad id
        self._mirror(ids % ring.capacity)

    def cleared(self) -> None:
        super().cleared()
        self.device_sums.clear()
        self.device_mins.clear()

    def load_state(self, ring: StreamRing, checked: tuple) -> None:
        super().load_state(ring, checked)
        self._mirror()
