"""Captured sampling: the draw and gather of a full buffer recorded once, replayed per call.

Once every stream holds ``max_length`` items, the number of valid window starts no longer
changes: only where they begin moves. ``CapturedSampler`` then runs one fixed step per
sample shape, writing into outputs allocated once (static outputs): draw
``randint(0, count)`` with the buffer's generator, add the first valid id, add the window
offsets, reduce to slots, gather the byte rows. Two kinds of step:

- ``DeviceStep`` (a storage read with ``torch.index_select``, as on a GPU): the step is torch
  kernels, the first valid id a device scalar set before each call. On CUDA the kernels are
  recorded as a CUDA graph and replayed (one launch; the generator is registered with the
  graph, so each replay advances it as the eager kernels would); elsewhere (or on a torch
  without graph-safe generators, before 2.4) they run eagerly.
- ``HostStep`` (a CPU storage read through NumPy, the default there): the ids are drawn
  between the valid bounds straight into their static tensor, and NumPy calls write the
  slots and rows into arrays shared with the returned tensors, made once. A call then makes
  no tensor at all: it costs the draw and two NumPy calls (three with windows; docs/gpu.md,
  "CPU figures").

The draws equal the eager path's item for item: ``randint(low, high)`` is
``low + randint(0, high - low)`` on both torch generators. Every call returns the same
tensors, overwritten by the next call: clone what must outlive it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from replaybuf.ring import StreamRing
from replaybuf.torch.storage import TorchStorage

__all__ = ["CapturedSampler", "DeviceStep", "HostStep", "recorded"]


def recorded(kernels: Callable[[], None], rng: torch.Generator, device: torch.device) -> torch.cuda.CUDAGraph | None:
    """``kernels`` recorded as a CUDA graph on a CUDA ``device`` (None elsewhere, or on a torch
    without graph-safe generators, before 2.4: the caller then runs them eagerly). The warm-up's
    draws are given back to ``rng``; each replay advances it as the kernels would."""
    if device.type != "cuda" or not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return None
    state = rng.get_state()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        kernels()  # warm up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream(device).wait_stream(stream)
    rng.set_state(state)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(rng)
    with torch.cuda.graph(graph):
        kernels()
    return graph


class _Step:
    """What every step of one sample shape ``(sample_batch_size, num_steps)`` holds: the
    draw's static output, the ids, the probabilities and (made by each kind) the leaves."""

    leaves: list[torch.Tensor]

    def __init__(self, storage: TorchStorage, rng: torch.Generator, ring: StreamRing, shape: tuple, num_steps):
        device, batch = storage.device, ring.batch_size
        self.rng, self.capacity = rng, ring.capacity
        self.count = (ring.max_length - (num_steps or 1) + 1) * batch  # valid window starts of a full ring
        self.lead = shape if num_steps is None else (*shape, num_steps)
        self.first = torch.empty(shape, dtype=torch.int64, device=device)
        self.offsets = None if num_steps is None else torch.arange(num_steps, device=device) * batch
        self.ids = self.first if num_steps is None else torch.empty(self.lead, dtype=torch.int64, device=device)
        self.probabilities = torch.full(shape, 1.0 / self.count, dtype=torch.float32, device=device)


class DeviceStep(_Step):
    """Torch kernels into static tensors, recorded as a CUDA graph on CUDA (see the module)."""

    def __init__(self, storage: TorchStorage, rng: torch.Generator, ring: StreamRing, shape: tuple, num_steps):
        super().__init__(storage, rng, ring, shape, num_steps)
        self.rows = storage.rows
        self.base = torch.zeros((), dtype=torch.int64, device=storage.device)  # the first valid id
        self.slots = torch.empty(self.lead, dtype=torch.int64, device=storage.device)
        self.gathered = torch.empty(
            (math.prod(self.lead), storage.layout.row_bytes), dtype=torch.uint8, device=storage.device
        )
        self.leaves = storage.layout.views(self.gathered, self.lead)
        self.graph = recorded(self.kernels, rng, storage.device)

    def kernels(self) -> None:
        """Draw, offset, reduce and gather into the static tensors."""
        torch.randint(0, self.count, self.first.shape, generator=self.rng, out=self.first)
        self.first.add_(self.base)
        if self.offsets is not None:
            torch.add(self.first.unsqueeze(-1), self.offsets, out=self.ids)
        torch.remainder(self.ids, self.capacity, out=self.slots)
        torch.index_select(self.rows, 0, self.slots.view(-1), out=self.gathered)

    def __call__(self, first_id: int) -> None:
        self.base.fill_(first_id)
        if self.graph is None:
            self.kernels()
        else:
            self.graph.replay()


class HostStep(_Step):
    """The draw, then NumPy into arrays the returned tensors share (see the module)."""

    def __init__(self, storage: TorchStorage, rng: torch.Generator, ring: StreamRing, shape: tuple, num_steps):
        super().__init__(storage, rng, ring, shape, num_steps)
        self.host_rows = storage.host_rows
        self.first_np, self.ids_np = self.first.numpy(), self.ids.numpy()
        self.offsets_np = None if self.offsets is None else self.offsets.numpy()
        self.slots = np.empty(self.lead, np.int64)
        self.gathered = np.empty(self.lead, self.host_rows.dtype)
        self.leaves = storage.layout.host_views(self.gathered)

    def __call__(self, first_id: int) -> None:
        self.first.random_(first_id, first_id + self.count, generator=self.rng)  # = randint(low, high)
        if self.offsets_np is not None:
            np.add(self.first_np[..., None], self.offsets_np, out=self.ids_np)
        np.remainder(self.ids_np, self.capacity, out=self.slots)
        self.host_rows.take(self.slots, out=self.gathered, mode="clip")  # slots are in range: nothing clips


class CapturedSampler:
    """Uniform samples of a full ring through one recorded step per sample shape (see the module)."""

    def __init__(self, storage: TorchStorage, rng: torch.Generator):
        self._storage, self._rng = storage, rng
        self._make = DeviceStep if storage.host_rows is None else HostStep
        self._steps: dict[tuple, DeviceStep | HostStep] = {}

    def sample(
        self, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, dict] | None:
        """Static ``(leaves, ids, probabilities, extras)`` (no extras), or None while the ring is not full (or
        the windows are longer than a stream): the caller then samples eagerly."""
        if ring.steps < ring.max_length or ring.floor or (num_steps or 1) > ring.max_length:
            return None
        key = (sample_batch_size, num_steps)
        step = self._steps.get(key)
        if step is None:
            shape = () if sample_batch_size is None else (sample_batch_size,)
            step = self._steps[key] = self._make(self._storage, self._rng, ring, shape, num_steps)
        step((ring.steps - ring.max_length) * ring.batch_size)
        return step.leaves, step.ids, step.probabilities, {}
