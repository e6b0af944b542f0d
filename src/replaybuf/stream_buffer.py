"""``StreamBuffer``: what every buffer of ``batch_size`` streams shares, wherever its bytes live.

The NumPy buffers (``replaybuf.uniform``) and the PyTorch buffers (``replaybuf.torch``)
keep the same ids, window rules, datasets and bookkeeping; they differ only in how items
are validated, written, drawn and read. This base holds the shared part: the flattened
spec, the ring, the lock, the shape properties, ``as_dataset``, ``gather_all``, ``clear``
and ``num_frames``. A subclass creates ``self._ring`` and ``self._storage`` and implements
``add_batch``, ``get_next`` and ``_read_ids``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from replaybuf.buffer import BufferInfo, ReplayBuffer, check_positive
from replaybuf.dataset import DeterministicPass, RandomDataset, plan_deterministic_pass
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing

__all__ = ["StreamBuffer"]


class StreamBuffer(ReplayBuffer):
    """The shared part of the segmented buffers; see the module docstring."""

    _ring: StreamRing

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int,
        dataset_drop_remainder: bool,
        dataset_window_shift: int | None,
    ):
        check_positive("batch_size", batch_size, allow_none=False)
        check_positive("max_length", max_length, allow_none=False)
        check_positive("dataset_window_shift", dataset_window_shift)
        self._flat = FlatSpec(data_spec)
        self._lock = threading.RLock()
        self._drop_remainder = bool(dataset_drop_remainder)
        self._window_shift = dataset_window_shift

    @property
    def data_spec(self) -> Any:
        return self._flat.data_spec

    @property
    def capacity(self) -> int:
        return self._ring.capacity

    @property
    def batch_size(self) -> int:
        return self._ring.batch_size

    @property
    def max_length(self) -> int:
        return self._ring.max_length

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> Any:
        """An iterable of ``(items, BufferInfo)``.

        Random mode (default) is endless and sees later adds; ``num_parallel_calls`` > 0
        samples in a background thread with that many batches queued. With
        ``single_deterministic_pass=True`` every stored item is yielded once, stream by
        stream (``sample_batch_size`` streams at a time) in time order, cut into windows
        of ``num_steps``; ids are fixed when the iterator is created.

        Raises:
            ArgumentError: a non-positive argument; in a deterministic pass,
                sample_batch_size > batch_size or num_steps > max_length.
        """
        check_positive("sample_batch_size", sample_batch_size)
        check_positive("num_steps", num_steps)
        check_positive("num_parallel_calls", num_parallel_calls)
        if single_deterministic_pass:

            def plan() -> list[np.ndarray]:
                with self._lock:
                    return plan_deterministic_pass(
                        self._ring, sample_batch_size, num_steps, self._window_shift, self._drop_remainder
                    )

            return self._wrap_dataset(DeterministicPass(plan, self._read_ids))
        return self._wrap_dataset(
            RandomDataset(lambda: self.get_next(sample_batch_size, num_steps), num_parallel_calls)
        )

    def gather_all(self) -> Any:
        """Every stored item, ``[batch_size, n, ...]`` oldest first (valid items only)."""
        with self._lock:
            items, _ = self._read_ids(self._ring.stream_ids())
        return items

    def clear(self) -> None:
        with self._lock:
            self._ring.steps = 0

    def num_frames(self) -> int:
        return self._ring.num_valid_steps() * self._ring.batch_size

    # -- what a subclass provides ----------------------------------------------------------
    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        """The items stored under ``ids`` (NumPy int64) and ``BufferInfo(ids, ())``."""
        raise NotImplementedError

    def _wrap_dataset(self, dataset: RandomDataset | DeterministicPass) -> Any:
        """The dataset as this backend hands it out (a torch IterableDataset, ...)."""
        return dataset
