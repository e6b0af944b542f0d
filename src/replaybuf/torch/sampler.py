"""``TorchUniformSampler``: the uniform rule of ``replaybuf.samplers`` drawn on the device."""

from __future__ import annotations

import torch

from replaybuf.ring import StreamRing
from replaybuf.samplers.uniform import UniformSampler

__all__ = ["TorchUniformSampler"]


class TorchUniformSampler(UniformSampler):
    """Draws ids with a ``torch.Generator`` on ``device``: sampling a CUDA buffer launches
    kernels and never waits for the GPU (the ring's counters are Python ints).

    One kernel draws the ids (windows add the step offsets in one more), one fills the
    probabilities; the shapes and window offsets are made once per sample shape.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._offsets: dict[tuple[int, int], torch.Tensor] = {}  # (num_steps, batch_size) -> step offsets

    def draw(
        self, rng: torch.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        low, high = ring.window_starts(num_steps or 1)
        batch = ring.batch_size
        shape = () if sample_batch_size is None else (sample_batch_size,)
        ids = torch.randint(low * batch, high * batch, shape, generator=rng, device=self.device)
        if num_steps is not None:
            offsets = self._offsets.get((num_steps, batch))
            if offsets is None:
                offsets = torch.arange(num_steps, device=self.device) * batch
                self._offsets[num_steps, batch] = offsets
            ids = ids[..., None] + offsets
        probability = 1.0 / ((high - low) * batch)
        return ids, torch.full(shape, probability, dtype=torch.float32, device=self.device), {}
