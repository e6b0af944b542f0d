"""Prioritized draws and priority updates on the buffer's device (``tree_device="device"``).

``DeviceTreeSampler`` is a ``TorchPrioritizedSampler`` whose priorities live on the device
(``replaybuf.torch.device_priorities``: sum and min trees, the running maximum). On the
device, queued without reading anything back, so a CUDA learner neither samples nor updates
in step with the GPU:

- single-step draws (``num_steps`` None or 1; the rules are refused here): uniforms
  from a torch generator seeded by ``seed``, the stratified targets, the descent, ids,
  probabilities and weights. Every stored item with mass is a valid single-step start, so no
  draw needs redrawing. These are not NumPy's draws: the same seed gives other ids than
  ``PrioritizedReplayBuffer``'s (the same distribution).
- ``update_priorities``: checks, masses, both trees and the running maximum; a bad update
  writes nothing and its ``PriorityError`` comes from ``DevicePriorities.fault``.
- adds: the new items' masses (the running maximum's, or the given priorities', checked on
  the host as every add's are).

The host trees (the NumPy sampler's) are a copy made when something needs them: windows,
sequences, ``mass``, checkpoints. While no update has run on the device since the last copy
they are kept current by the adds (a windowed learner pays nothing more); after one, the
next such call reads the device leaves back once (waiting for the device) and rebuilds them,
dropping the window and sequence trees, which are rebuilt when next asked for. Clear and
loads set both. The sample-count rules (``exclude``) are refused with ``tree_device="device"``;
``appended`` (the MindSpore-style buffer's) and ``reopened`` (memmap storage) do not reach
this sampler (the torch buffers take no memmap storage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.ring import StreamRing
from replaybuf.samplers.sequences import SequenceRule
from replaybuf.torch.device_priorities import DevicePriorities
from replaybuf.torch.episodes import HostLeaves
from replaybuf.torch.priority_samplers import TorchPrioritizedSampler

__all__ = ["DeviceTreeSampler"]


class DeviceTreeSampler(TorchPrioritizedSampler):
    """``TorchPrioritizedSampler`` whose priorities, single-step draws and updates are on ``device``."""

    def __init__(self, capacity: int, *, device: torch.device, seed: int | None, **options: Any):
        super().__init__(capacity, device=device, seed=seed, **options)
        self.on_device = DevicePriorities(capacity, self.sums.arity, device, alpha=self.alpha, epsilon=self.epsilon)
        self.device_rng = torch.Generator(device)
        self.device_rng.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
        self.host_current = True  # the host trees hold the device's masses

    def single_step(self, num_steps: int | None) -> bool:
        """Whether a draw of this shape is made on the device."""
        return (num_steps or 1) == 1

    def draw(self, rng: Any, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None) -> tuple:
        self.on_device.fault.raise_if_any()
        if not self.single_step(num_steps):
            self._host_trees()
            return super().draw(rng, ring, sample_batch_size, num_steps)
        ring.window_starts(1)  # EmptyBufferError when nothing is stored
        n = 1 if sample_batch_size is None else sample_batch_size
        _, ids, probabilities, weights = self.on_device.draw(
            n, ring.steps * ring.batch_size, self.beta(), self.device_rng
        )
        if sample_batch_size is None:
            ids, probabilities, weights = ids.reshape(()), probabilities.reshape(()), weights.reshape(())
        if num_steps is not None:  # windows of one step keep their time axis
            ids = ids.unsqueeze(-1)
        return ids, probabilities, {"weights": weights, "mask": None}

    def draw_sequences(self, rng: Any, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule) -> tuple:
        self._host_trees()
        return super().draw_sequences(rng, ring, sample_batch_size, rule)

    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        self._host_trees()
        return super().mass(ring, num_steps)

    def sequence_mass(self, ring: StreamRing, rule: SequenceRule) -> tuple[float, float]:
        self._host_trees()
        return super().sequence_mass(ring, rule)

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: np.ndarray | None = None) -> None:
        start = ring.slot(ring.steps - 1)
        if self.host_current:
            super().added(ring, arrays, priorities)
        elif self.episodes is not None:
            self.episodes.record(HostLeaves(arrays), ring.steps - 1)
        self.on_device.add(start, ring.batch_size, priorities)

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        self.on_device.fault.raise_if_any()
        batch = ring.batch_size
        self.on_device.update(ids, priorities, head=ring.steps * batch, oldest=ring.first_valid_step() * batch)
        self.host_current = False
        self.windows.clear()
        self.sequence_trees.clear()
        self.on_device.fault.raise_if_any()  # a bad update the device has already run (always, on a CPU)

    def cleared(self) -> None:
        super().cleared()
        self.on_device.clear()
        self.host_current = True

    def state(self, ring: StreamRing) -> dict:
        self._host_trees()
        return super().state(ring)

    def load_state(self, ring: StreamRing, checked: tuple) -> None:
        super().load_state(ring, checked)
        self.on_device.load(self.sums.levels[0], self.mins.levels[0], self.max_priority)
        self.on_device.fault.clear()
        self.host_current = True

    def _host_trees(self) -> None:
        """Bring the host trees to the device's masses (one read-back), if an update changed them."""
        self.on_device.fault.raise_if_any(wait=True)
        if self.host_current:
            return
        sums, mins = self.on_device.leaves()
        for tree, leaves in ((self.sums, sums), (self.mins, mins)):
            tree.levels[0][:] = leaves
            tree.rebuild()
        self.max_priority = float(self.on_device.max_priority)
        self.host_current = True
