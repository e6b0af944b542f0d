"""``prefetch(dataset, device=, depth=)``: batches of any dataset ready on the learner's device.

A background thread (``replaybuf.dataset.Prefetching``) takes each element of the dataset
(a nest of NumPy arrays or tensors: items and their info, ``SampleInfo``'s weights, mask,
learn and relabelled included) up to ``depth`` elements ahead and stages it for ``device``:

- CUDA: every array leaf is packed into one pinned host block (a ring of ``depth + 1``
  blocks), copied to the device in one non-blocking copy on a side stream, and an event is
  recorded after the copy. A block is refilled only once its copy's event has completed.
  ``next`` makes the caller's current stream wait on that event (no host synchronisation)
  and records the batch's memory as used by that stream, so the allocator never hands it
  out while the learner's kernels still read it.
- CPU: every array leaf becomes a tensor sharing its memory (``torch.from_numpy``): no
  pinning, no copy.

The thread holds no reference to the iterator: ``close()``, leaving a ``with`` block,
exhaustion of a finite dataset or collecting the iterator ends it; its errors are raised
by ``next`` in the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np
import optree
import torch

from replaybuf.buffer import SampleInfo
from replaybuf.dataset import Prefetching
from replaybuf.errors import ArgumentError
from replaybuf.torch.convert import as_torch_dtype, shared_tensor

__all__ = ["Prefetcher", "prefetch", "prefetch_device"]

ALIGN = 64  # bytes between the starts of two leaves in a staged block (any dtype's alignment)


def prefetch_device(device: Any) -> torch.device:
    """The device batches are staged for: ``device`` as a ``torch.device``; None is CUDA when
    there is one, else the CPU.

    Raises:
        ArgumentError: ``device`` is not a device name, names a CUDA device this process
            does not have (``"cuda"`` without CUDA, ``"cuda:7"`` on one GPU), or a kind of
            device other than the CPU and CUDA.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ArgumentError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r} ({err})") from None
    if chosen.type == "cpu":
        return chosen
    if chosen.type != "cuda":
        raise ArgumentError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ArgumentError(f"device: {device!r} needs CUDA, and this process sees no CUDA device; use 'cpu'")
    if chosen.index is not None and chosen.index >= count:
        raise ArgumentError(f"device: expected a CUDA device index below {count}, got {device!r}")
    return torch.device("cuda", torch.cuda.current_device() if chosen.index is None else chosen.index)


def prefetch(dataset: Iterable[Any], device: Any = None, depth: int = 2) -> Prefetcher:
    """An iterator over ``dataset``'s elements as tensors on ``device``, up to ``depth``
    elements gathered and copied ahead by a background thread (0: in the caller, on ``next``).

    Raises:
        ArgumentError: ``depth`` is not an int >= 0; as ``prefetch_device`` for ``device``.
            Nothing is started then (and ``dataset`` is not iterated).
    """
    if not isinstance(depth, (int, np.integer)) or isinstance(depth, bool) or depth < 0:
        raise ArgumentError(f"depth: expected an int >= 0 (0: no background thread), got {depth!r}")
    chosen = prefetch_device(device)
    return Prefetcher(iter(dataset), chosen, int(depth))


class Prefetcher:
    """The iterator ``prefetch`` returns; also a context manager that closes it."""

    def __init__(self, source: Iterator[Any], device: torch.device, depth: int):
        self.device = device
        stage: Callable[[Any], Any]
        if device.type == "cuda":
            stage = _CudaStage(device, depth + 1)
        else:
            stage = partial(_map_leaves, _host_tensor)
        pull = partial(_pull, source, stage)  # holds no reference to this iterator
        self._items: Iterator[Any] = Prefetching(pull, depth) if depth else iter(pull, _NEVER)
        self._cuda = device.type == "cuda"

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Any:
        staged = next(self._items)
        if not self._cuda:
            return staged
        nest, event, memory = staged
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(event)
        for tensor in memory:
            tensor.record_stream(stream)
        return nest

    def close(self) -> None:
        """Stop the background thread and wait for it to end (no-op with ``depth=0``)."""
        if isinstance(self._items, Prefetching):
            self._items.close()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_NEVER = object()  # iter(pull, _NEVER): pull on every next, forever (a StopIteration ends it)


def _pull(source: Iterator[Any], stage: Callable[[Any], Any]) -> Any:
    return stage(next(source))


def _map_leaves(fn: Callable[[Any], Any], nest: Any) -> Any:
    """``nest`` with ``fn`` applied to every leaf, ``SampleInfo``'s extras included (a plain
    tree map would drop them: they are attributes, not tuple fields)."""

    def visit(leaf: Any) -> Any:
        if not isinstance(leaf, SampleInfo):
            return fn(leaf)
        parts = (leaf.ids, leaf.probabilities, leaf.weights, leaf.mask, leaf.relabelled, leaf.learn)
        return SampleInfo(*(None if p is None else _map_leaves(fn, p) for p in parts))

    return optree.tree_map(visit, nest, is_leaf=lambda x: isinstance(x, SampleInfo))


def _host_tensor(leaf: Any) -> torch.Tensor:
    """A CPU tensor of ``leaf`` (an array, a tensor or a Python scalar), sharing its memory."""
    if isinstance(leaf, torch.Tensor):
        return leaf.detach().cpu()
    return shared_tensor(np.asarray(leaf))


class _CudaStage:
    """Stages an element for a CUDA ``device`` through a ring of ``blocks`` pinned blocks:
    returns ``(nest of device tensors, copy event, the device memory they use)``."""

    def __init__(self, device: torch.device, blocks: int):
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.pinned: list[torch.Tensor | None] = [None] * blocks
        self.events: list[torch.cuda.Event | None] = [None] * blocks
        self.turn = 0

    def __call__(self, nest: Any) -> tuple[Any, torch.cuda.Event, list[torch.Tensor]]:
        arrays: list[np.ndarray] = []
        tensors: list[torch.Tensor] = []  # leaves already on a CUDA device: moved on the stream
        index = _map_leaves(partial(_sort_leaf, arrays, tensors), nest)
        offsets, end = _layout(arrays)
        turn, self.turn = self.turn, (self.turn + 1) % len(self.pinned)
        if self.events[turn] is not None:
            self.events[turn].synchronize()  # the block's previous copy has finished reading it
        pinned = self.pinned[turn]
        if pinned is None or pinned.numel() < end:
            pinned = self.pinned[turn] = torch.empty(end, dtype=torch.uint8, pin_memory=True)
        _pack(pinned, arrays, offsets)
        producer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            self.stream.wait_stream(producer)  # tensors the dataset made on the device are ready
            block = torch.empty(end, dtype=torch.uint8, device=self.device)
            block.copy_(pinned[:end], non_blocking=True)
            moved = [t.to(self.device, non_blocking=True) for t in tensors]
            event = torch.cuda.Event()
            event.record(self.stream)
        self.events[turn] = event
        leaves = _unpack(block, arrays, offsets)
        return _map_leaves(partial(_staged, leaves, moved), index), event, [block, *moved]


def _layout(arrays: list[np.ndarray]) -> tuple[list[int], int]:
    """``(offsets, end)``: where each array's bytes start in a block (``ALIGN``-aligned), and
    the block's length (at least 1)."""
    offsets, end = [], 0
    for array in arrays:
        offsets.append(end)
        end += -(-array.nbytes // ALIGN) * ALIGN
    return offsets, max(end, 1)


def _pack(block: torch.Tensor, arrays: list[np.ndarray], offsets: list[int]) -> None:
    """Copy the contiguous ``arrays`` into the host uint8 tensor ``block`` at ``offsets``."""
    host = block.numpy()
    for array, at in zip(arrays, offsets, strict=True):
        host[at : at + array.nbytes] = array.reshape(-1).view(np.uint8)


def _unpack(block: torch.Tensor, arrays: list[np.ndarray], offsets: list[int]) -> list[torch.Tensor]:
    """Views of the uint8 tensor ``block`` (on any device) with the dtypes and shapes of ``arrays``."""
    return [
        block[at : at + a.nbytes].view(as_torch_dtype(a.dtype)).view(a.shape)
        for a, at in zip(arrays, offsets, strict=True)
    ]


def _sort_leaf(arrays: list[np.ndarray], tensors: list[torch.Tensor], leaf: Any) -> int:
    """Where ``leaf`` goes: ``-1 - i`` for a tensor already on a CUDA device (``tensors[i]``),
    else ``i`` with its bytes contiguous in ``arrays[i]``."""
    if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
        tensors.append(leaf.detach())
        return -len(tensors)
    array = leaf.detach().cpu().numpy() if isinstance(leaf, torch.Tensor) else np.asarray(leaf)
    arrays.append(np.ascontiguousarray(array))
    return len(arrays) - 1


def _staged(leaves: list[torch.Tensor], moved: list[torch.Tensor], where: int) -> torch.Tensor:
    return leaves[where] if where >= 0 else moved[-1 - where]
