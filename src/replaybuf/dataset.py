"""``as_dataset`` for host buffers: endless random samples, or one ordered pass.

Random mode calls ``get_next`` on every step, so it sees items added after the dataset
was made; ``num_parallel_calls`` moves sampling to a background thread that keeps a
bounded queue of ready batches. The deterministic pass plans its ids when the iterator is
created (streams kept apart, also after wraparound) and reads them as it goes.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from replaybuf.buffer import check_positive
from replaybuf.errors import ArgumentError
from replaybuf.refusals import empty
from replaybuf.ring import StreamRing

__all__ = [
    "MAX_SAMPLE_ITEMS",
    "DeterministicPass",
    "Prefetching",
    "RandomDataset",
    "check_pass_arguments",
    "check_sample_arguments",
    "plan_deterministic_pass",
    "plan_sequence_pass",
]

MAX_SAMPLE_ITEMS = 2**31 - 1  # items in one sample (sample_batch_size x num_steps): TF's int32 shapes


def check_sample_arguments(sample_batch_size: int | None, num_steps: int | None) -> None:
    """ArgumentError unless ``sample_batch_size`` and ``num_steps`` are positive ints or None
    and one sample holds at most ``MAX_SAMPLE_ITEMS`` (2**31 - 1) items in all: a larger one
    could not be allocated (NumPy, torch) or shaped (TensorFlow's int32 shapes) anyway."""
    check_positive("sample_batch_size", sample_batch_size)
    check_positive("num_steps", num_steps)
    for name, value in (("sample_batch_size", sample_batch_size), ("num_steps", num_steps)):
        if value is not None and value > MAX_SAMPLE_ITEMS:
            raise ArgumentError(
                f"{name}: expected a positive int <= {MAX_SAMPLE_ITEMS} (2**31 - 1) or None, got {value}"
            )
    if (sample_batch_size or 1) * (num_steps or 1) > MAX_SAMPLE_ITEMS:
        raise ArgumentError(
            f"sample_batch_size x num_steps: expected at most {MAX_SAMPLE_ITEMS} (2**31 - 1) items in one sample, "
            f"got {sample_batch_size} x {num_steps}"
        )


class RandomDataset:
    """An endless iterable of ``sample()`` results, optionally prefetched by a thread.

    Its iterators may be shared between threads (as TF's are): each ``next`` hands one
    sample to one caller. ``sample`` must be thread-safe itself (a buffer's ``get_next`` is).
    """

    def __init__(self, sample: Callable[[], Any], prefetch: int | None = None):
        self._sample = sample
        self._prefetch = prefetch

    def __iter__(self) -> Iterator[Any]:
        if not self._prefetch:
            return _Sampling(self._sample)
        return Prefetching(self._sample, self._prefetch)


class _Sampling:
    """``sample()`` on every ``next``, from any number of threads at once."""

    def __init__(self, sample: Callable[[], Any]):
        self._sample = sample

    def __iter__(self) -> _Sampling:
        return self

    def __next__(self) -> Any:
        return self._sample()


class Prefetching:
    """Items from a daemon thread started at the first ``next``; it stops when this iterator
    is closed or collected (an iterator never advanced starts no thread).

    Thread-safe: the queue hands each item to one caller. An error of ``sample`` is raised
    to the caller that meets it and to every later ``next`` (the thread has stopped).
    """

    def __init__(self, sample: Callable[[], Any], depth: int):
        self._sample = sample
        self._ready: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._start = threading.Lock()
        self._started = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        weakref.finalize(self, self._stop.set)  # the thread holds no reference to the iterator

    def __iter__(self) -> Prefetching:
        return self

    def __next__(self) -> Any:
        if not self._started:
            with self._start:
                if not self._started:
                    args = (self._sample, self._ready, self._stop)
                    thread = threading.Thread(target=_produce, args=args, name="replaybuf-prefetch", daemon=True)
                    thread.start()
                    self._thread, self._started = thread, True
        if self._error is not None:
            raise self._error
        ok, value = self._ready.get()
        if not ok:
            self._error = value
            self._ready.put((False, value))  # wakes any other caller waiting for an item
            raise value
        return value

    def close(self) -> None:
        """Stop the prefetching thread and wait for it to end (it finishes the ``sample`` call
        it is in); collecting the iterator stops it too, without waiting."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _produce(sample: Callable[[], Any], ready: queue.Queue, stop: threading.Event) -> None:
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


def by_stream(starts: np.ndarray, batch_size: int) -> np.ndarray:
    """Ids of ``batch_size`` streams ordered by stream, then step (a deterministic pass's order)."""
    return starts[np.lexsort((starts, starts % batch_size))]


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
        raise empty(ring.name)
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
    """An iterable that, each time it is iterated, plans one pass and reads it in order.

    Its iterators may be shared between threads: each element goes to one caller.
    """

    def __init__(self, plan: Callable[[], list[np.ndarray]], read: Callable[[np.ndarray], Any]):
        self._plan = plan
        self._read = read

    def __iter__(self) -> Iterator[Any]:
        return _Planned(self._plan(), self._read)  # the plan is fixed now, when the iterator is created


class _Planned:
    """The reads of a planned pass in order; the next plan entry is taken under a lock."""

    def __init__(self, plan: list[np.ndarray], read: Callable[[np.ndarray], Any]):
        self._plan, self._read = plan, read
        self._next = 0
        self._lock = threading.Lock()

    def __iter__(self) -> _Planned:
        return self

    def __next__(self) -> Any:
        with self._lock:
            index = self._next
            if index >= len(self._plan):
                raise StopIteration
            self._next = index + 1
        return self._read(self._plan[index])


def plan_sequence_pass(ordered: np.ndarray, sample_batch_size: int | None, drop_remainder: bool) -> list:
    """A deterministic pass over sequences: the learning starts ``ordered`` (in the order they
    are yielded) in groups of ``sample_batch_size`` (one start each when None; a short last
    group dropped when ``drop_remainder``)."""
    size = sample_batch_size or 1
    plan = [ordered[i : i + size] for i in range(0, ordered.size, size)]
    if drop_remainder and plan and plan[-1].size < size:
        plan.pop()
    return plan if sample_batch_size is not None else [part[0] for part in plan]
