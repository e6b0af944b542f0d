"""``as_dataset`` for host buffers: endless random samples, or one ordered pass.

Random mode calls ``get_next`` on every step, so it sees items added after the dataset
was made; ``num_parallel_calls`` moves sampling to a background thread that keeps a
bounded queue of ready batches. The deterministic pass plans its ids when the iterator is
created (streams kept apart, also after wraparound) and reads them as it goes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.ring import StreamRing

__all__ = ["DeterministicPass", "RandomDataset", "check_pass_arguments", "plan_deterministic_pass"]


class RandomDataset:
    """An endless iterable of ``sample()`` results, optionally prefetched by a thread."""

    def __init__(self, sample: Callable[[], Any], prefetch: int | None = None):
        self._sample = sample
        self._prefetch = prefetch

    def __iter__(self) -> Iterator[Any]:
        if not self._prefetch:
            return _call_forever(self._sample)
        return _prefetched(self._sample, self._prefetch)


def _call_forever(sample: Callable[[], Any]) -> Iterator[Any]:
    while True:
        yield sample()


def _prefetched(sample: Callable[[], Any], depth: int) -> Iterator[Any]:
    """Items from a daemon thread started at the first ``next``; it stops when this iterator
    is closed or collected (an iterator never advanced starts no thread)."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            try:
                item: Any = (True, sample())
            except Exception as err:  # handed to the consumer, raised there
                item = (False, err)
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if not item[0]:
                return

    try:
        threading.Thread(target=produce, name="replaybuf-prefetch", daemon=True).start()
        while True:
            ok, value = ready.get()
            if not ok:
                raise value
            yield value
    finally:
        stop.set()


def check_pass_arguments(
    batch_size: int, max_length: int, sample_batch_size: int | None, num_steps: int | None, drop_remainder: bool
) -> None:
    """TF-Agents' errors (as ArgumentError) for a deterministic pass that cannot yield whole
    elements: more streams per element than the buffer has, or windows longer than a stream."""
    dropped = " and dataset_drop_remainder is True; ALL data will be dropped" if drop_remainder else ""
    if sample_batch_size is not None and sample_batch_size > batch_size:
        raise ArgumentError(
            f"sample_batch_size ({sample_batch_size}) > batch_size ({batch_size}){dropped}: a "
            "deterministic pass groups streams, so there are not enough streams; decrease sample_batch_size"
        )
    if num_steps is not None and num_steps > max_length:
        raise ArgumentError(
            f"num_steps ({num_steps}) > max_length ({max_length}){dropped}: no window fits in a "
            "stream; decrease num_steps or increase max_length"
        )


def plan_deterministic_pass(
    ring: StreamRing,
    sample_batch_size: int | None,
    num_steps: int | None,
    window_shift: int | None,
    drop_remainder: bool,
) -> list[np.ndarray]:
    """The ids of every element of one ordered pass, in the order they are yielded.

    Streams are visited in order (groups of ``sample_batch_size`` streams when given), each
    in time order, cut into windows of ``num_steps`` that start every ``window_shift``
    steps (default: ``num_steps``, so windows do not overlap). A window or group shorter
    than asked for is yielded short, or dropped when ``drop_remainder``.
    """
    check_pass_arguments(ring.batch_size, ring.max_length, sample_batch_size, num_steps, drop_remainder)
    if ring.steps == 0:
        raise EmptyBufferError("The buffer is empty. Make sure to add items before reading the buffer.")
    size = num_steps or 1
    shift = window_shift or size
    first, end = ring.first_valid_step(), ring.steps
    windows = []
    for start in range(first, end, shift):
        steps = np.arange(start, min(start + size, end), dtype=np.int64)
        if drop_remainder and steps.size < size:
            break
        windows.append(steps)
    group = sample_batch_size or 1
    plan = []
    for low in range(0, ring.batch_size, group):
        streams = np.arange(low, min(low + group, ring.batch_size), dtype=np.int64)
        if drop_remainder and streams.size < group:
            break
        for steps in windows:
            ids = streams[:, None] + steps[None, :] * ring.batch_size
            if num_steps is None:
                ids = ids[:, 0]
            if sample_batch_size is None:
                ids = ids[0]
            plan.append(ids)
    return plan


class DeterministicPass:
    """An iterable that, each time it is iterated, plans one pass and reads it in order."""

    def __init__(self, plan: Callable[[], list[np.ndarray]], read: Callable[[np.ndarray], Any]):
        self._plan = plan
        self._read = read

    def __iter__(self) -> Iterator[Any]:
        plan = self._plan()  # fixed now, when the iterator is created
        return (self._read(ids) for ids in plan)
