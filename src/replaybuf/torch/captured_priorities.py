"""Captured prioritized sampling: ``TorchPrioritizedReplayBuffer(capture=True)``.

A single-step prioritized draw from the device trees (``DevicePriorities.draw``) and the
gather of its rows are torch kernels whose shapes depend on the sample size only, so one
step per sample size is recorded once (a CUDA graph on a GPU, as the uniform buffer's
``DeviceStep``; eager kernels elsewhere) and replayed per call: the write head and ``beta``
are 0-d device tensors refilled before each replay, the trees are read where they are
(updates write them in place), and the results land in static tensors allocated once.
Unlike the uniform capture it needs no full ring: empty slots have no mass, so the same
step serves from the first add on. Windows (``num_steps`` > 1) are drawn eagerly on the
host trees. The draws equal the eager device draws' for the same generator state; every
call returns the same tensors, overwritten by the next call: clone what must outlive it.
"""

from __future__ import annotations

import math

import torch

from replaybuf.ring import StreamRing
from replaybuf.torch.captured import recorded
from replaybuf.torch.device_draws import DeviceTreeSampler
from replaybuf.torch.storage import TorchStorage

__all__ = ["CapturedPrioritizedSampler", "PrioritizedStep"]


class PrioritizedStep:
    """Draw ``shape`` single steps from the device trees and gather their rows into static
    tensors (``lead``: ``shape``, or ``(*shape, 1)`` for windows of one step)."""

    def __init__(self, storage: TorchStorage, sampler: DeviceTreeSampler, shape: tuple, lead: tuple):
        device = storage.device
        self.count = math.prod(shape)
        self.priorities, self.rng, self.rows = sampler.on_device, sampler.device_rng, storage.rows
        self.head = torch.zeros((), dtype=torch.int64, device=device)
        self.beta = torch.zeros((), dtype=torch.float64, device=device)
        self.ids = torch.empty(lead, dtype=torch.int64, device=device)
        self.probabilities = torch.empty(shape, dtype=torch.float32, device=device)
        self.weights = torch.empty(shape, dtype=torch.float32, device=device)
        self.slots = torch.empty(self.count, dtype=torch.int64, device=device)
        self.gathered = torch.empty((self.count, storage.layout.row_bytes), dtype=torch.uint8, device=device)
        self.leaves = storage.layout.views(self.gathered, lead)
        self.graph = recorded(self.kernels, self.rng, device)

    def kernels(self) -> None:
        """Draw, then gather, into the static tensors."""
        slots, ids, probabilities, weights = self.priorities.draw(self.count, self.head, self.beta, self.rng)
        self.slots.copy_(slots)
        self.ids.view(-1).copy_(ids)
        self.probabilities.view(-1).copy_(probabilities)
        self.weights.view(-1).copy_(weights)
        torch.index_select(self.rows, 0, self.slots, out=self.gathered)

    def __call__(self, head: int, beta: float) -> None:
        self.head.fill_(head)
        self.beta.fill_(beta)
        if self.graph is None:
            self.kernels()
        else:
            self.graph.replay()


class CapturedPrioritizedSampler:
    """Single-step prioritized samples through one recorded step per sample size (see the module)."""

    def __init__(self, storage: TorchStorage, sampler: DeviceTreeSampler):
        self._storage, self._sampler = storage, sampler
        self._steps: dict[tuple, PrioritizedStep] = {}

    def sample(
        self, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, dict] | None:
        """Static ``(leaves, ids, probabilities, {"weights", "mask"})``, or None for windows
        (the caller then samples eagerly)."""
        sampler = self._sampler
        if not sampler.single_step(num_steps):
            return None
        sampler.on_device.fault.raise_if_any()
        ring.window_starts(1)  # EmptyBufferError when nothing is stored
        key = (sample_batch_size, num_steps)
        step = self._steps.get(key)
        if step is None:
            shape = () if sample_batch_size is None else (sample_batch_size,)
            lead = shape if num_steps is None else (*shape, 1)
            step = self._steps[key] = PrioritizedStep(self._storage, sampler, shape, lead)
        step(ring.steps * ring.batch_size, sampler.beta())
        return step.leaves, step.ids, step.probabilities, {"weights": step.weights, "mask": None}
