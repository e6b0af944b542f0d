"""Device storage: every leaf of a slot side by side in one byte row, read with one gather.

The storage is one uint8 tensor ``[capacity, row_bytes]``; each leaf owns an aligned run of
bytes in every row (leaves ordered by item size, widest first, the row padded to 8 bytes).
A read gathers whole rows with one ``torch.index_select`` (one kernel on a GPU, whatever
the number of leaves; on CPU uint8 rows gather about 8x faster than ``x[idx]``) and hands
back each leaf as a strided view of the gathered rows (rows are gathered as the dtype of
most leaves; a dtype view per other dtype and an ``as_strided`` per leaf: metadata only,
no copy, no kernel). On the CPU the same is done through NumPy views of the rows: one
``take`` of whole rows (at the ids' slots, ``ids % capacity`` in NumPy; the ids themselves
while the buffer's ring has not wrapped) and one
``torch.from_numpy`` per leaf, since a NumPy call costs a fraction of a torch op's dispatch
and a sample's host time is a handful of such calls (docs/gpu.md). ``tensors`` are the same
views of the storage itself, ``[capacity] + leaf.shape`` each, through which checkpoints
read and write leaf by leaf, in the per-leaf format every torch buffer has always saved.

Returned leaves are views: their rows are ``row_bytes`` apart, so ``x.view(-1)`` on a leaf
needs ``x.reshape(-1)`` (or ``x.contiguous()``) instead. Tensors are allocated with
``torch.empty`` (on the CPU with ``np.empty``, shared: NumPy asks for transparent huge pages
on large blocks, which scattered reads gain from): pages are mapped when first written, and
only written slots are read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.specs import ArraySpec
from replaybuf.torch.convert import as_torch_dtype

__all__ = ["RowLayout", "TorchStorage"]

ROW_ALIGNMENT = 8  # bytes: the widest item size a row is padded to, so every dtype view fits


class RowLayout:
    """Where each leaf lives in a byte row: its dtype, shape and element offset; and how to
    view rows of bytes back as leaves."""

    def __init__(self, leaves: Sequence[ArraySpec]):
        self.dtypes = [as_torch_dtype(spec.dtype) for spec in leaves]
        self.shapes = [tuple(spec.shape) for spec in leaves]
        sizes = [dtype.itemsize for dtype in self.dtypes]
        offsets = [0] * len(leaves)
        position = 0
        for i in sorted(range(len(leaves)), key=lambda i: -sizes[i]):  # widest first: each offset aligned
            offsets[i] = position
            position += sizes[i] * math.prod(self.shapes[i])
        self.row_bytes = max(ROW_ALIGNMENT, -(-position // ROW_ALIGNMENT) * ROW_ALIGNMENT)
        self.byte_offsets = offsets
        self.distinct = list(dict.fromkeys(self.dtypes))  # the dtype views one read makes
        # the dtype rows are gathered as: that of most leaves, so one dtype view fewer per read
        self.gather_dtype = max(self.distinct, key=lambda d: (self.dtypes.count(d), d.itemsize), default=torch.uint8)
        self._plans: dict[tuple[int, ...], list[tuple]] = {}
        self.host_dtype = np.dtype(
            {
                "names": [f"leaf{i}" for i in range(len(leaves))],
                "formats": [(spec.dtype, spec.shape) if spec.shape else spec.dtype for spec in leaves],
                "offsets": offsets,
                "itemsize": self.row_bytes,
            }
        )

    def views(self, rows: torch.Tensor, lead: tuple[int, ...]) -> list[torch.Tensor]:
        """The leaves of ``rows`` (contiguous rows of ``row_bytes`` bytes, ``prod(lead)`` of
        them, of any dtype), each ``lead + leaf.shape``: views sharing the rows' memory."""
        plan = self._plans.get(lead)
        if plan is None:
            plan = self._plans[lead] = self._plan(tuple(lead))
        typed = [rows if dtype == rows.dtype else rows.view(dtype) for dtype in self.distinct]
        return [typed[group].as_strided(size, stride, offset) for group, size, stride, offset in plan]

    def host_views(self, rows: np.ndarray) -> list[torch.Tensor]:
        """As ``views`` for NumPy ``rows`` of ``row_bytes``-byte void elements, shaped as the
        sample: each leaf a field of the rows read as one structured dtype, shared with torch
        through ``torch.from_numpy`` (a field costs a tenth of a dtype view or ``as_strided``)."""
        fields = rows.view(self.host_dtype)
        if rows.ndim:
            return [torch.from_numpy(fields[name]) for name in self.host_dtype.names]
        # a single item: a 0-d structured array's field is a NumPy scalar, so read it as one row
        return [torch.from_numpy(fields.reshape(1)[name][0, ...]) for name in self.host_dtype.names]

    def _plan(self, lead: tuple[int, ...]) -> list[tuple]:
        """Per leaf: its dtype view's index and the size, strides and offset (in elements)."""
        plan = []
        for dtype, shape, byte_offset in zip(self.dtypes, self.shapes, self.byte_offsets, strict=True):
            itemsize = dtype.itemsize
            inner = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
            outer = [self.row_bytes // itemsize * math.prod(lead[k + 1 :]) for k in range(len(lead))]
            plan.append((self.distinct.index(dtype), lead + shape, tuple(outer + inner), byte_offset // itemsize))
        return plan

    def pack(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        """Host rows ``[n, row_bytes]`` holding the NumPy leaves ``batch`` (padding zeroed)."""
        n = batch[0].shape[0]
        rows = np.zeros((n, self.row_bytes), np.uint8)
        for leaf, shape, offset in zip(batch, self.shapes, self.byte_offsets, strict=True):
            nbytes = leaf.dtype.itemsize * math.prod(shape)
            rows[:, offset : offset + nbytes].view(leaf.dtype).reshape((n,) + shape)[...] = leaf
        return rows

    def byte_columns(self, batch: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The tensor leaves ``batch`` as uint8 ``[n, bytes]`` blocks in row order, with the
        padding, for one ``torch.cat`` into a block of rows."""
        n = batch[0].shape[0]
        order = sorted(range(len(batch)), key=lambda i: self.byte_offsets[i])
        blocks = []
        for i in order:
            leaf = batch[i].reshape(n, -1)
            if leaf.shape[1] == 0:
                continue
            if leaf.stride(1) != 1:
                # a size-1 axis may carry any stride (NumPy's x[:, None] has 0): contiguous() keeps it,
                # but a dtype view wants 1, which for such a tensor is the same memory
                leaf = leaf.as_strided(leaf.shape, (leaf.shape[1], 1)) if leaf.is_contiguous() else leaf.contiguous()
            blocks.append(leaf.view(torch.uint8))
        used = sum(block.shape[1] for block in blocks)
        if used < self.row_bytes:
            blocks.append(torch.zeros((n, self.row_bytes - used), dtype=torch.uint8, device=batch[0].device))
        return blocks


class TorchStorage:
    """``capacity`` byte rows on ``device`` holding every leaf of ``leaves`` (see the module).

    ``through_numpy``: write NumPy leaves through NumPy views of the rows, leaf by leaf, and
    read with one NumPy ``take`` of rows (the default on the CPU, where a NumPy call costs a
    fraction of a torch op); False packs writes into host rows copied over at once and reads
    with ``torch.index_select``, as on a GPU (which tests use on the CPU).
    """

    def __init__(
        self,
        leaves: Sequence[ArraySpec],
        capacity: int,
        device: torch.device,
        through_numpy: bool | None = None,
        ring: Any = None,
    ):
        self.capacity = capacity
        #: the buffer's ``StreamRing`` when reads are of its stored ids only: until it wraps they
        #: are below the capacity, so a host read skips the ``% capacity`` (None: always wrapped)
        self._ring = ring
        #: ``(tensor, array)``: ids a host draw made as ``torch.from_numpy(array)``; a read of that
        #: tensor takes the array (no ``Tensor.numpy()``)
        self.drawn_ids: tuple[torch.Tensor, np.ndarray] | None = None
        self.device = device
        self.layout = RowLayout(leaves)
        if through_numpy is None:
            through_numpy = device.type == "cpu"
        if device.type == "cpu":
            # NumPy's allocation: it asks for transparent huge pages on large blocks (torch's
            # does not), so a sample's scattered rows cost fewer TLB misses, as NumPy's buffers'
            self.rows = torch.from_numpy(np.empty((capacity, self.layout.row_bytes), np.uint8))
        else:
            self.rows = torch.empty((capacity, self.layout.row_bytes), dtype=torch.uint8, device=device)
        self._gather_rows = self.rows.view(self.layout.gather_dtype)
        self.tensors = self.layout.views(self.rows, (capacity,))
        #: NumPy views of ``tensors`` (slot-indexed, as a NumPy storage's ``fields``) when reads
        #: and writes go through NumPy; None otherwise
        self.fields = [t.numpy() for t in self.tensors] if through_numpy else None
        #: the rows as NumPy void elements, one per row (``take`` copies whole rows without an
        #: axis loop), when reads go through NumPy; None otherwise
        self.host_rows = self.rows.numpy().view(f"V{self.layout.row_bytes}")[:, 0] if through_numpy else None

    def write(self, start: int, batch: Sequence[Any], steps: int = 1) -> None:
        """Write rows ``batch[k][i]`` to slot ``(start + i) % capacity``; n <= capacity.

        ``batch`` holds NumPy arrays for a CPU storage; for another device, NumPy arrays
        (packed into host rows, then one copy to the device) or tensors on the device (one
        ``torch.cat`` into the rows), never a mix.
        """
        n = batch[0].shape[0] if batch else 0
        if n == 0:
            return
        end = start + n
        if self.fields is not None:
            split = min(n, self.capacity - start)
            for target, rows in zip(self.fields, batch, strict=True):
                target[start : start + split] = rows[:split]
                if split < n:
                    target[: end - self.capacity] = rows[split:]
            return
        if isinstance(batch[0], np.ndarray):
            block = torch.from_numpy(self.layout.pack(batch))
        else:
            block = None
        split = min(n, self.capacity - start)
        for lo, hi, at in ((0, split, start), (split, n, 0)):
            if lo == hi:
                continue
            target = self.rows[at : at + hi - lo]
            if block is not None:
                target.copy_(block[lo:hi])
            else:
                torch.cat(self.layout.byte_columns([leaf[lo:hi] for leaf in batch]), dim=1, out=target)

    def commit(self, steps: int) -> None:
        """Nothing to record: the storage is not crash-safe (see replaybuf.storages)."""

    def clear(self) -> None:
        """Nothing to forget: slots are overwritten before they are read again."""

    def read(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """The leaves of the items at ``ids`` (int64 on the device, slot = id % capacity),
        each ``ids.shape + leaf.shape``."""
        if self.host_rows is not None:
            drawn = self.drawn_ids
            host = drawn[1] if drawn is not None and ids is drawn[0] else ids.numpy()
            ring = self._ring
            if ring is not None and ring.steps * ring.batch_size <= self.capacity:  # not wrapped: ids are slots
                return self.layout.host_views(self.host_rows.take(host))
            return self.layout.host_views(self.host_rows.take(host % self.capacity))
        slots = torch.remainder(ids if ids.dim() == 1 else ids.reshape(-1), self.capacity)
        return self.layout.views(torch.index_select(self._gather_rows, 0, slots), ids.shape)
