"""``TorchUniformSampler``: the uniform rule of ``replaybuf.samplers`` drawn on the device."""

from __future__ import annotations

import torch

from replaybuf.ring import StreamRing
from replaybuf.samplers.uniform import UniformSampler

__all__ = ["TorchUniformSampler"]


class TorchUniformSampler(UniformSampler):
    """Draws ids with a ``torch.Generator`` on ``device``: sampling a CUDA buffer launches
    kernels and never waits for the GPU (the ring's counters are Python ints).

    One kernel draws the ids (windows add the step offsets in one more). The probabilities
    are one value broadcast over the sample: a device scalar made once per value and shape,
    returned expanded (no kernel; in-place writes to an expanded tensor raise, so callers
    cannot change the cached value). The window offsets are made once per sample shape.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._offsets: dict[tuple[int, int], torch.Tensor] = {}  # (num_steps, batch_size) -> step offsets
        self._probabilities: dict[tuple[tuple, int], torch.Tensor] = {}  # (shape, window starts) -> expanded

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
        return ids, self._probability(shape, (high - low) * batch), {}

    def _probability(self, shape: tuple, count: int) -> torch.Tensor:
        """``1 / count`` of float32 shaped ``shape``: cached expanded for a sample of several
        items (read-only), a new tensor for one (a single element would be writable)."""
        if not shape or shape[0] == 1:
            return torch.full(shape, 1.0 / count, dtype=torch.float32, device=self.device)
        probabilities = self._probabilities.get((shape, count))
        if probabilities is None:
            if len(self._probabilities) >= 64:  # the count changes while the ring fills: keep a few
                self._probabilities.clear()
            scalar = torch.full((), 1.0 / count, dtype=torch.float32, device=self.device)  # a kernel, not a copy
            probabilities = self._probabilities[shape, count] = scalar.expand(shape)
        return probabilities
