"""The MindSpore RL ``ReplayBuffer`` API on PyTorch device storage.

A FIFO ring of ``capacity`` rows, one tensor per column (``shapes[i]``, ``types[i]``), that
stays on the device (a GPU when there is one), so ``insert`` and ``sample`` never copy
between host and device. Two cursors describe it, as in MindSpore: ``count`` (valid rows)
and ``head`` (the slot of the oldest row, which moves once rows are overwritten)::

    capacity 6: insert 2 rows -> head 0, count 2; insert 4 -> head 0, count 6 (full);
    insert 2 more -> the oldest two are overwritten, head 2, count 6

It is made of the parts of ``replaybuf.torch.TorchPyUniformReplayBuffer`` (the ring of
ids, the device storage, the validation that writes nothing on bad input, a generator on
the device, the checkpoints of ``replaybuf.torch.state``), assembled here without its
TF-Agents-shaped surface. With ``prioritized=True`` rows are drawn by priority through the
torch prioritized buffer's sampler (host trees, ``replaybuf.torch.prioritized``) and
``sample()`` returns ``(ids, weights, *columns)`` as MindSpore RL's ``PriorityReplayBuffer``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.buffer import check_positive
from replaybuf.buffers.stream import check_capacity, reject_unused
from replaybuf.dataset import MAX_SAMPLE_ITEMS
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.header import check_header
from replaybuf.persistence.state import require
from replaybuf.ring import StreamRing, append_rows
from replaybuf.specs import ArraySpec
from replaybuf.torch.convert import DeviceBatcher
from replaybuf.torch.priority_samplers import TorchPrioritizedSampler
from replaybuf.torch.state import TorchCheckpoints
from replaybuf.torch.storage import TorchStorage
from replaybuf.torch.uniform import as_device, make_generator

__all__ = ["ReplayBuffer"]

_CONFIG_KEYS = ("capacity", "data_shape", "data_type", "sample_size")
_IGNORED_CONFIG_KEYS = ("number", "type")  # MindSpore's algorithm config names the class and count


class ReplayBuffer(TorchCheckpoints):
    """MindSpore RL's ReplayBuffer: a device-side FIFO of rows, sampled ``batch_size`` at a time.

    Args:
        batch_size: rows returned by ``sample()``.
        capacity: rows kept; inserting into a full buffer overwrites the oldest rows.
        shapes: the shape of one row of each column, e.g. ``[(4,), (1,), (1,), (4,)]``.
        types: the dtype of each column: NumPy dtypes, torch dtypes or names ('float32').
        device: where the rows live; default CUDA when available, else the CPU.
        ordered: ``sample()`` draws row positions in age order and remaps them through
            ``head``; the default draws raw slots (the same distribution, one op fewer).
        seed: seed of the sampling generator.
        prioritized: draw rows in proportion to ``(priority + epsilon) ** alpha``:
            ``sample()`` returns ``(ids, weights, *columns)`` (the rows' logical ids and
            importance weights, tensors on the device), ``update_priorities(ids, priorities)``
            sets priorities, ``insert(exp, priorities=...)`` gives the new rows theirs.
        alpha, beta, epsilon: the prioritisation (as ``replaybuf.PrioritizedReplayBuffer``);
            only with ``prioritized=True``.

    Checkpoints: ``state_dict()`` (tensors on the device) / ``load_state_dict(state)``,
    ``save(path)`` / ``load(path)`` (the folders of docs/persistence.md). The state holds
    the rows, ``capacity``, ``steps`` (rows inserted since ``reset()``) with the ``head``
    and ``count`` they give, and the generator; ``batch_size``, ``ordered`` and ``device``
    come from the receiving buffer.

    Raises:
        ArgumentError: batch_size or capacity is not a positive int, batch_size is above
            2**31 - 1, the rows would take more than 2**62 bytes, shapes or types is not a
            list, or they differ in length; prioritized not a bool; alpha, beta or epsilon
            without prioritized=True, or bad (as for PrioritizedReplayBuffer).
        SpecError: a shape or dtype cannot be used (a dtype without a PyTorch equivalent).
    """

    def __init__(
        self,
        batch_size: int,
        capacity: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        *,
        device: Any = None,
        ordered: bool = False,
        seed: int | None = None,
        prioritized: bool = False,
        alpha: float | None = None,
        beta: float | Callable[[], float] | None = None,
        epsilon: float | None = None,
    ):
        check_positive("batch_size", batch_size, allow_none=False)
        if prioritized.__class__ is not bool:
            raise ArgumentError(f"prioritized: expected True or False, got {prioritized!r:.80}")
        if not prioritized:
            why = "only used with prioritized=True"
            reject_unused(alpha=(alpha, None, why), beta=(beta, None, why), epsilon=(epsilon, None, why))
        if batch_size > MAX_SAMPLE_ITEMS:
            raise ArgumentError(
                f"batch_size: expected a positive int <= {MAX_SAMPLE_ITEMS} (2**31 - 1), got {batch_size}"
            )
        check_positive("capacity", capacity, allow_none=False)
        shapes, types = _column_list("shapes", shapes), _column_list("types", types)
        if len(shapes) != len(types):
            raise ArgumentError(
                f"shapes and types: expected one dtype per shape, got {len(shapes)} shapes and {len(types)} types"
            )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._batch_size = int(batch_size)
        self._ordered = bool(ordered)
        self._flat = FlatSpec(tuple(ArraySpec(shape, dtype) for shape, dtype in zip(shapes, types, strict=True)))
        check_capacity(self._flat, 1, int(capacity), "capacity")
        self._device = as_device(device)
        self._batcher = DeviceBatcher(self._flat, self._device)
        self._ring = StreamRing(1, int(capacity))
        self._storage = TorchStorage(self._flat.leaves, int(capacity), self._device)
        self._rng = make_generator(self._device, seed)
        self._lock = threading.RLock()
        self._sampler: TorchPrioritizedSampler | None = None
        if prioritized:
            options = {"alpha": alpha, "beta": beta, "epsilon": epsilon}
            self._sampler = TorchPrioritizedSampler(
                int(capacity),
                device=self._device,
                seed=seed,
                storage=lambda: self._storage,
                **{key: value for key, value in options.items() if value is not None},
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **kwargs: Any) -> ReplayBuffer:
        """Build from MindSpore's config form: ``capacity``, ``data_shape``, ``data_type``,
        ``sample_size`` (``number`` and ``type`` are accepted and ignored); keyword
        arguments (device, ordered, seed) are passed on.

        Raises:
            ArgumentError: ``config`` is not a mapping, a required key is missing or an
                unknown key is present; the constructor's errors (``data_shape`` for shapes,
                ``data_type`` for types, ``sample_size`` for batch_size).
        """
        if not isinstance(config, Mapping):
            raise ArgumentError(
                f"config: expected a mapping with the keys {list(_CONFIG_KEYS)}, got {type(config).__name__}"
            )
        missing = [key for key in _CONFIG_KEYS if key not in config]
        unknown = [key for key in config if key not in _CONFIG_KEYS + _IGNORED_CONFIG_KEYS]
        if missing or unknown:
            raise ArgumentError(f"config: expected the keys {list(_CONFIG_KEYS)}, missing {missing}, unknown {unknown}")
        names = {"shapes": "data_shape", "types": "data_type", "batch_size": "sample_size"}
        try:
            return cls(config["sample_size"], config["capacity"], config["data_shape"], config["data_type"], **kwargs)
        except ArgumentError as err:  # name the config's key, not the constructor's argument
            message = str(err)
            for argument, key in names.items():
                if message.startswith(f"{argument}:"):
                    raise ArgumentError(f"config[{key!r}]{message[len(argument) :]}") from None
            raise

    # -- properties ------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def capacity(self) -> int:
        return self._ring.capacity

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [spec.shape for spec in self._flat.leaves]

    @property
    def types(self) -> list[torch.dtype]:
        return list(self._batcher.dtypes)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def ordered(self) -> bool:
        return self._ordered

    @property
    def prioritized(self) -> bool:
        return self._sampler is not None

    @property
    def head(self) -> int:
        """The slot of the oldest valid row."""
        return self._ring.first_valid_step() % self._ring.capacity

    @property
    def count(self) -> int:
        """How many valid rows are stored."""
        return self._ring.num_valid_steps()

    # -- the MindSpore API -------------------------------------------------------------------
    def insert(self, exp: Sequence[Any], priorities: Any = None) -> None:
        """Insert one row (each tensor shaped as declared) or a batch of rows (one more
        leading dimension, the same on every tensor); the oldest rows are overwritten once
        full. Tensors may be torch tensors on any device, NumPy arrays or lists.
        ``priorities`` (``prioritized=True``): one per row inserted (``[n]``, ``[1]`` for one
        row); absent, the rows get the largest priority so far.

        Raises:
            SpecMismatchError: not one tensor per column, or a shape or dtype that does not
                match; nothing is written.
            ArgumentError: ``priorities`` without ``prioritized=True`` or not one number per
                row; PriorityError: one that is not finite and > 0. Nothing is written.
        """
        columns = self._as_batch(exp)
        try:
            batch = self._batcher.batch(columns, None)
        except SpecMismatchError as err:
            raise SpecMismatchError(f"insert: tensor {err}") from None
        rows = batch[0].shape[0] if batch else 0
        given = None
        if priorities is not None:
            if self._sampler is None:
                raise ArgumentError(f"priorities: expected None without prioritized=True, got {priorities!r:.80}")
            given = self._sampler.new_priorities(priorities, rows)
        with self._lock:
            append_rows(self._ring, self._storage, batch)
            if self._sampler is not None:
                self._sampler.appended(self._ring, rows, given)

    def get_item(self, index: Any) -> tuple[torch.Tensor, ...]:
        """The ``index``-th oldest valid row (0 is the oldest), one tensor per column.

        Raises:
            ArgumentError: index is not an int in ``[0, size())``.
        """
        if isinstance(index, torch.Tensor) and index.dim() == 0 and not index.is_floating_point():
            index = int(index)
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise ArgumentError(f"get_item: expected an int index, got {index!r}")
        with self._lock:
            count = self.count
            if not 0 <= index < count:
                raise ArgumentError(
                    f"get_item: index {int(index)} is out of range; the buffer holds {count} rows "
                    f"(valid indices 0..{count - 1})"
                )
            slot = (self.head + int(index)) % self._ring.capacity
            return tuple(column[slot].clone() for column in self._storage.tensors)

    def sample(self) -> tuple[torch.Tensor, ...]:
        """``batch_size`` rows drawn uniformly at random (with replacement), on the device;
        with ``prioritized=True`` drawn by priority and returned as ``(ids, weights, *columns)``.

        Raises:
            EmptyBufferError: nothing is stored.
        """
        with self._lock:
            count = self.count
            if count == 0:
                raise EmptyBufferError(
                    "The ReplayBuffer is empty. Make sure to insert rows before sampling the buffer."
                )
            if self._sampler is not None:
                ids, _, extras = self._sampler.draw(None, self._ring, self._batch_size, None)
                return (ids, extras["weights"], *self._storage.read(ids))
            shape = (self._batch_size,)
            slots = torch.randint(0, count, shape, generator=self._rng, device=self._device)
            if self._ordered:  # positions in age order -> slots
                slots = torch.remainder(slots + self.head, self._ring.capacity)
            return tuple(self._storage.read(slots))

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Set the priorities of the rows ``ids`` (the first of ``sample()``'s results; tensors or
        arrays) as ``PrioritizedReplayBuffer.update_priorities`` does (overwritten rows ignored).

        Raises:
            ArgumentError: without ``prioritized=True``; priorities not numbers shaped like ``ids``.
            PriorityError: a priority that is not finite and > 0, or an id never inserted;
                nothing is changed.
        """
        if self._sampler is None:
            raise ArgumentError("update_priorities: this ReplayBuffer was made without prioritized=True")
        with self._lock:
            self._sampler.update_priorities(self._ring, ids, priorities)

    def reset(self) -> None:
        """Forget every row; the storage stays allocated."""
        with self._lock:
            self._ring.reset()
            if self._sampler is not None:
                self._sampler.cleared()

    def size(self) -> int:
        """How many valid rows are stored."""
        return self.count

    def full(self) -> bool:
        """Whether the next insert overwrites the oldest rows."""
        return self.count == self._ring.capacity

    # -- checkpoints (replaybuf.torch.state) --------------------------------------------------
    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()``: the same rows, head, count and later samples.

        Raises:
            CheckpointError: a state of another class, shapes, types or capacity, or
                malformed (``head`` or ``count`` disagreeing with ``steps`` included); the
                buffer is left unchanged.
        """
        capacity = self._ring.capacity
        if isinstance(state, dict) and "capacity" in state and require(state, "capacity", int) != capacity:
            raise CheckpointError(f"state['capacity']: saved {state['capacity']}, this buffer has {capacity}")
        steps = check_header(state, self._holds(), self._flat, self._geometry_state()).steps
        for key, mine in (("head", max(0, steps - capacity) % capacity), ("count", min(max(0, steps), capacity))):
            if key in state and require(state, key, int) != mine:  # (another backend's state has neither)
                raise CheckpointError(f"state[{key!r}]: expected {mine} (from steps={steps}), got {state[key]}")
        super().load_state_dict(state)

    def _host_rng(self) -> np.random.Generator | None:
        """A prioritized buffer draws on the host (``replaybuf.torch.prioritized``)."""
        return None if self._sampler is None else self._sampler.host_rng

    def _state(self, export: Any) -> dict:
        """The stream buffers' state (one stream of ``capacity``) and MindSpore's counters."""
        return {**super()._state(export), "capacity": self._ring.capacity, "head": self.head, "count": self.count}

    # -- internals ---------------------------------------------------------------------------
    def _as_batch(self, exp: Sequence[Any]) -> tuple[Any, ...]:
        """``exp`` as a tuple of batches: one row gets a leading dimension of 1."""
        leaves = self._flat.leaves
        if not isinstance(exp, (list, tuple)) or len(exp) != len(leaves):
            got = f"{len(exp)} tensors" if isinstance(exp, (list, tuple)) else type(exp).__name__
            raise SpecMismatchError(f"insert: expected a list of {len(leaves)} tensors (one per column), got {got}")
        ndims = [_ndim(i, x, spec) for i, (x, spec) in enumerate(zip(exp, leaves, strict=True))]
        rows = [ndim == len(spec.shape) for ndim, spec in zip(ndims, leaves, strict=True)]
        if all(rows):
            for i, (x, spec) in enumerate(zip(exp, leaves, strict=True)):
                if tuple(x.shape if isinstance(x, torch.Tensor) else np.shape(x)) != spec.shape:
                    raise SpecMismatchError(
                        f"insert: tensor {i}: expected one row of shape {spec.shape} (or a batch of "
                        f"rows, (n,) + {spec.shape}), got shape {tuple(np.shape(x))}"
                    )
            return tuple(_one_row_batch(x) for x in exp)
        if any(rows):
            kinds = ", ".join(f"tensor {i}: {'one row' if row else 'a batch'}" for i, row in enumerate(rows))
            raise SpecMismatchError(
                f"insert: expected every tensor to be one row or every tensor a batch of rows, got {kinds}"
            )
        sizes = [
            x.shape[0] if isinstance(x, torch.Tensor) else np.shape(x)[0] if n else None
            for x, n in zip(exp, ndims, strict=True)
        ]
        if len(set(sizes)) > 1:
            detail = ", ".join(f"tensor {i}: {n}" for i, n in enumerate(sizes))
            raise SpecMismatchError(f"insert: every tensor needs the same number of rows, got {detail}")
        return tuple(exp)


def _column_list(name: str, value: Any) -> list:
    """``shapes`` or ``types`` as a list, one entry per column; ArgumentError otherwise."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ArgumentError(f"{name}: expected a list with one entry per column, got {value!r:.80}")
    return list(value)


def _ndim(index: int, value: Any, spec: ArraySpec) -> int:
    """The number of dimensions of column ``index``'s ``value``; SpecMismatchError for a ragged
    nest of lists (rows of different lengths), which is no tensor at all."""
    if isinstance(value, torch.Tensor):
        return value.dim()
    try:
        return np.ndim(value)
    except ValueError:  # NumPy refuses an inhomogeneous (ragged) nest of sequences
        raise SpecMismatchError(
            f"insert: tensor {index}: expected one row of shape {spec.shape} (or a batch of rows, "
            f"(n,) + {spec.shape}), got ragged lists (rows of different lengths)"
        ) from None


def _one_row_batch(row: Any) -> Any:
    """``row`` with a leading dimension of 1; Python numbers and lists stay weakly typed."""
    if isinstance(row, torch.Tensor):
        return row.unsqueeze(0)
    if hasattr(row, "dtype"):
        return np.asarray(row)[None]
    return [row]
