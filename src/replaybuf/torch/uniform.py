"""The PyTorch buffers: ``TorchUniformReplayBuffer`` (segmented) and ``TorchPyUniformReplayBuffer``.

They keep the ids, window rules and deterministic pass of the NumPy buffers
(``replaybuf.uniform``) and store every leaf in one preallocated tensor on ``device``.
Sampling keeps its bookkeeping in Python ints (the ring's counters) and does its index
and random-number work on the device with a ``torch.Generator``, so sampling a CUDA
buffer launches kernels and never waits for the GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from replaybuf.buffer import BufferInfo, check_positive
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing, append_rows
from replaybuf.stream_buffer import StreamBuffer
from replaybuf.torch.convert import DeviceBatcher
from replaybuf.torch.dataset import TorchDataset
from replaybuf.torch.state import TorchCheckpoints
from replaybuf.torch.storage import TorchStorage

__all__ = ["TorchPyUniformReplayBuffer", "TorchUniformReplayBuffer", "as_device", "make_generator"]


def as_device(device: Any) -> torch.device:
    """``device`` as a torch.device; a bare 'cuda' becomes the current CUDA device."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    """A random generator on ``device``, seeded with ``seed`` (from the OS when None)."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


class TorchUniformReplayBuffer(TorchCheckpoints, StreamBuffer):
    """``batch_size`` streams of ``max_length`` items as torch tensors on ``device``.

    The same contract as ``replaybuf.UniformReplayBuffer``: ``add_batch`` writes one step
    to every stream, ``get_next`` draws a step and a stream uniformly and returns windows
    that never pass the write head. Items may be torch tensors on any device (moved once)
    or NumPy arrays; everything returned (items, ids, probabilities) is a torch tensor on
    ``device``. Thread-safe: adds and reads hold one lock. ``as_dataset`` returns a
    ``torch.utils.data.IterableDataset``: give it to a ``DataLoader`` with
    ``batch_size=None`` and ``num_workers=0`` (the buffer lives in this process).

    Args:
        data_spec: a nest (tuple, namedtuple, dict) of ArraySpec, tf.TensorSpec or
            Gymnasium spaces describing one item.
        batch_size: the number of parallel streams (one per environment copy).
        max_length: items kept per stream; capacity is batch_size * max_length.
        device: where storage lives and results are returned ('cpu', 'cuda', 'cuda:1').
        seed: seed of the sampling generator (on ``device``).
        dataset_drop_remainder: in a deterministic pass, drop short windows and groups.
        dataset_window_shift: in a deterministic pass, the step between window starts.

    Checkpoints: ``state_dict()`` (tensors) / ``load_state_dict(state)``, ``save(path)`` /
    ``load(path)`` (replaybuf.torch.state, docs/persistence.md).

    Raises:
        ArgumentError: batch_size, max_length or dataset_window_shift is not a positive int.
        SpecError: the data_spec cannot be built, or a dtype has no PyTorch equivalent.
    """

    _name = "TorchUniformReplayBuffer"

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        device: Any = "cpu",
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
    ):
        super().__init__(data_spec, batch_size, max_length, dataset_drop_remainder, dataset_window_shift)
        self._device = as_device(device)
        self._ring = StreamRing(int(batch_size), int(max_length))
        self._storage = TorchStorage(self._flat.leaves, self._ring.capacity, self._device)
        self._batcher = DeviceBatcher(self._flat, self._device)
        self._generator = make_generator(self._device, seed)

    # -- the common API (the rest is StreamBuffer's) ------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    def add_batch(self, items: Any) -> None:
        """Add one step to every stream: each leaf shaped ``[batch_size] + spec.shape``.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match the
                data_spec; nothing is written.
        """
        batch = self._batcher.batch(items, self._ring.batch_size)
        with self._lock:
            ring = self._ring
            self._storage.write((ring.steps % ring.max_length) * ring.batch_size, batch)
            ring.steps += 1

    def get_next(
        self, sample_batch_size: int | None = None, num_steps: int | None = None, time_stacked: bool = True
    ) -> tuple[Any, BufferInfo]:
        """Sample uniformly; shapes as in ``replaybuf.buffer``, all tensors on ``device``.

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` items.
            ArgumentError: sample_batch_size or num_steps is not a positive int.
        """
        check_positive("sample_batch_size", sample_batch_size)
        check_positive("num_steps", num_steps)
        shape = () if sample_batch_size is None else (sample_batch_size,)
        with self._lock:
            ring = self._ring
            low, high = ring.window_starts(num_steps or 1, self._name)
            batch = ring.batch_size
            ids = torch.randint(
                low * batch, high * batch, shape, generator=self._generator, device=self._device
            )
            if num_steps is not None:
                ids = ids[..., None] + torch.arange(num_steps, device=self._device) * batch
            leaves = self._storage.read(torch.remainder(ids, ring.capacity))
        probability = 1.0 / ((high - low) * batch)
        probabilities = torch.full(shape, probability, dtype=torch.float32, device=self._device)
        if not time_stacked and num_steps is not None:
            return _unstack_time(self._flat, leaves, num_steps, sample_batch_size is not None), BufferInfo(
                ids, probabilities
            )
        return self._flat.unflatten(leaves), BufferInfo(ids, probabilities)

    # -- internals ---------------------------------------------------------------------------
    def _wrap_dataset(self, dataset: Any) -> TorchDataset:
        return TorchDataset(dataset)

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        device_ids = torch.as_tensor(ids, device=self._device)
        with self._lock:
            leaves = self._storage.read(torch.remainder(device_ids, self._ring.capacity))
        return self._flat.unflatten(leaves), BufferInfo(device_ids, ())


def _unstack_time(flat: FlatSpec, leaves: list[torch.Tensor], num_steps: int, batched: bool) -> tuple:
    axis = 1 if batched else 0
    return tuple(flat.unflatten([leaf.select(axis, t) for leaf in leaves]) for t in range(num_steps))


class TorchPyUniformReplayBuffer(TorchUniformReplayBuffer):
    """One FIFO stream of ``capacity`` items as tensors on ``device`` (PyUniform on PyTorch).

    ``add_batch`` takes a batch of any size and appends its items in order; an unbatched
    item is an error that says how to add one.
    """

    _name = "TorchPyUniformReplayBuffer"

    def __init__(self, data_spec: Any, capacity: int, *, device: Any = "cpu", seed: int | None = None):
        super().__init__(data_spec, batch_size=1, max_length=capacity, device=device, seed=seed)

    def add_batch(self, items: Any) -> None:
        """Append ``n`` items (each leaf shaped ``[n] + spec.shape``, n >= 0) in order.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match, or the
                leaves disagree on n; nothing is written.
        """
        batch = self._batcher.batch(items, None)
        with self._lock:
            append_rows(self._ring, self._storage, batch)
