"""``SharedWriter``: the handle an actor process adds through (one segment, no lock).

A handle is small and pickles into a child process (spawn, forkserver or fork) as a
``Process`` argument; it maps the shared block on its first use there. Steps are staged in
process-local records and copied into the segment in blocks of ``flush_every`` steps (and
at an episode's end, on ``flush()`` and on ``close()``), each block committed at once: the
learner sees whole steps only, never part of one. A prioritized buffer's writer also writes
the priority column of its slots (``add_batch(items, priorities=...)``, or 0: none given),
which the learner folds into its trees when it takes the committed steps in
(``replaybuf.shared.priorities``).
"""

from __future__ import annotations

import os
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, BufferClosedError, RateLimiterTimeout
from replaybuf.nest import FlatSpec
from replaybuf.ring import STEPS, WriterCursors
from replaybuf.samplers.episodes import episode_markers
from replaybuf.samplers.prioritized import priorities_of_add
from replaybuf.shared.layout import HELD, OWNER, Layout, pid_alive
from replaybuf.storages.records import RecordStorage

__all__ = ["SharedWriter"]


class SharedWriter:
    """Adds steps to writer ``index``'s segment of a ``SharedReplayBuffer``; get it from ``buffer.writer(i)``.

    ``add_batch(items)`` takes one step of this writer's ``batch_size`` streams (every leaf
    ``[batch_size] + spec.shape``). Only one process may hold a writer at a time; when that
    process died (e.g. SIGKILL), the next one to use the handle takes the segment over at
    its last whole step. An actor's ``with writer:`` block ends quietly when the learner
    closes the buffer (the ``BufferClosedError`` it raises there is the signal to stop).
    """

    def __init__(
        self,
        name: str,
        data_spec: Any,
        writers: int,
        batch_size: int,
        max_length: int,
        index: int,
        flush_every: int,
        rate_limiter: Any,
        timeout: float | None,
        episode_end_field: str | None = None,
        prioritized: bool = False,
    ):
        self._name, self._data_spec, self._episode_end_field = name, data_spec, episode_end_field
        self._prioritized = prioritized
        self._geometry = (writers, batch_size, max_length)
        self.index, self.flush_every = index, flush_every
        self._limiter, self._timeout = rate_limiter, timeout
        self._after_write: Any = None  # tests: called between the copy and the commit
        self._attached = False

    # -- pickling: the handle travels, the mapping does not ------------------------------------
    def __getstate__(self) -> dict:
        keep = (
            "_name",
            "_data_spec",
            "_episode_end_field",
            "_prioritized",
            "_geometry",
            "index",
            "flush_every",
            "_limiter",
            "_timeout",
            "_after_write",
        )
        return {key: self.__dict__[key] for key in keep}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._attached = False

    def _attach(self) -> None:
        if self._attached:
            return
        writers, batch_size, max_length = self._geometry
        self._flat = FlatSpec(self._data_spec)
        self._layout = Layout(self._flat, writers, batch_size, max_length, priorities=self._prioritized)
        try:
            self._shm = shared_memory.SharedMemory(name=self._name)
        except FileNotFoundError:
            raise BufferClosedError(f"writer {self.index}: the shared buffer {self._name} was closed") from None
        self._header, cursors, records = self._layout.views(self._shm.buf)
        self._cursor = cursors[self.index]
        self._commits = WriterCursors(self._cursor, self._geometry[2])
        segment = self._layout.segment_records
        self._segment = records[self.index * segment : (self.index + 1) * segment]
        column = self._layout.priority_column(self._shm.buf)
        self._given = None if column is None else column[self.index * segment : (self.index + 1) * segment]
        owner = int(self._cursor[OWNER])
        if owner not in (0, os.getpid()) and pid_alive(owner):
            self._release_mapping()
            raise ArgumentError(f"writer {self.index}: held by the live process {owner}; one process per writer")
        self._cursor[OWNER] = self._cursor[HELD] = os.getpid()
        self._recover()
        # writes go through the house's record storage (packed views for small fields): straight
        # into the segment when every step commits alone, else into a local block of steps
        self._storage = RecordStorage(self._flat.leaves, segment, records=self._segment)
        self._stage = RecordStorage(self._flat.leaves, self.flush_every * batch_size) if self.flush_every > 1 else None
        staged_priorities = self._given is not None and self._stage is not None
        self._stage_given = np.zeros(self.flush_every * batch_size) if staged_priorities else None
        self._staged = 0
        try:  # the episode ends the buffer's episode index reads (a done field, LAST step types)
            self._episode_ends: Any = episode_markers(self._flat, self._episode_end_field)
        except ArgumentError:  # a spec without them: blocks are flushed by size only
            self._episode_ends = None
        self._attached = True

    def _recover(self) -> None:
        """A block whose writer died mid-copy: its steps are dropped, and so are the old steps
        it may have half overwritten (the floor moves past them)."""
        self._commits.recover()

    # -- adding -----------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """This writer's streams: the leading dimension of its ``add_batch``."""
        return self._geometry[1]

    def ids(self, step: int) -> np.ndarray:
        """The ids the items of ``step`` get, one per stream of this writer."""
        writers, batch_size, _ = self._geometry
        return step * writers * batch_size + self.index * batch_size + np.arange(batch_size, dtype=np.int64)

    @property
    def steps(self) -> int:
        """Steps this writer has committed (staged ones not yet counted)."""
        self._attach()
        return int(self._cursor[STEPS])

    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Stage one step of this writer's streams; flushes every ``flush_every`` steps.
        ``priorities`` (a prioritized buffer): the step's ``[batch_size]`` priorities, which
        the learner gives these items when it takes them in (each raising its largest
        priority); absent, they get the largest priority the learner knows then.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match; nothing is
                staged.
            ArgumentError: ``priorities`` for a buffer without priorities, or not
                ``[batch_size]`` numbers; PriorityError: one that is not finite and > 0.
                Nothing is staged.
            RateLimiterTimeout: the flush this step completed waited longer than the
                buffer's ``rate_limiter_timeout``: this step is not added (nothing written or
                counted); steps staged by earlier calls stay staged for the next flush.
            BufferClosedError: the buffer was closed.
        """
        self._attach()
        if self._staged == self.flush_every:  # a flush that timed out before: retry it first
            self.flush()
        batch_size = self._geometry[1]
        given = self._check_priorities(priorities)
        arrays = self._flat.flatten_batch(items, batch_size)
        if self._stage is None:
            self._commit(1, arrays, given)
            return
        self._stage.write(self._staged * batch_size, arrays)
        if self._stage_given is not None:
            self._stage_given[self._staged * batch_size : (self._staged + 1) * batch_size] = given
        self._staged += 1
        episode_end = self._episode_ends is not None and bool(np.any(self._episode_ends(arrays)[1]))
        if self._staged == self.flush_every or episode_end:
            try:
                self.flush()
            except RateLimiterTimeout:
                self._staged -= 1  # this step was not added; earlier staged ones stay for the next flush
                raise

    def flush(self) -> None:
        """Copy the staged steps into the segment and commit them as one block.

        Raises:
            RateLimiterTimeout: the rate limiter held the block back past the timeout; it
                stays staged.
            BufferClosedError: the buffer was closed; the staged steps are dropped.
        """
        self._attach()
        count = self._staged
        if not count:
            return
        if Layout.closed(self._header):
            self._staged = 0
        self._commit(count, None, None)
        self._staged = 0

    def _check_priorities(self, priorities: Any) -> Any:
        """An add's checked priorities (0 where none are given; None for a uniform buffer)."""
        if priorities is None:
            return None if self._given is None else 0.0
        without = None
        if self._given is None:
            without = f"the buffer of writer {self.index} samples uniformly (build it with sampler='prioritized')"
        return priorities_of_add(priorities, self._geometry[1], without)

    def _commit(self, count: int, arrays: Any, given: Any) -> None:
        """Write ``count`` steps (``arrays`` and their priorities ``given``, or the staged block
        when None) with the commit protocol."""
        if Layout.closed(self._header):
            raise BufferClosedError(f"writer {self.index}: the shared buffer was closed; {count} steps dropped")
        writers, batch_size, max_length = self._geometry
        steps = int(self._cursor[STEPS])
        if self._limiter is not None:
            evicted = max(0, steps + count - max_length) - max(0, steps - max_length)
            self._limiter.await_insert(count * batch_size, self._timeout, deletes=evicted * batch_size)
        self._commits.reserve(count)
        start = (steps % max_length) * batch_size
        if arrays is not None:
            self._storage.write(start, arrays)
            if self._given is not None:
                self._given[start : start + batch_size] = given
        else:  # one copy of whole records, in two runs when it wraps
            _copy_wrapped(self._segment, start, self._stage.records[: count * batch_size])
            if self._given is not None:
                _copy_wrapped(self._given, start, self._stage_given[: count * batch_size])
        if self._after_write is not None:
            self._after_write(self)
        self._commits.commit(steps + count)

    def close(self) -> None:
        """Flush what is staged, give the writer up (another process may take it) and unmap."""
        if not self._attached:
            return
        try:
            if not Layout.closed(self._header):
                self.flush()
        finally:
            if self._attached and int(self._cursor[OWNER]) == os.getpid():
                self._cursor[OWNER] = 0
            self._release_mapping()

    def _release_mapping(self) -> None:
        self._header = self._cursor = self._commits = self._segment = self._given = None  # views go before the mapping
        self._attached = False
        self._shm.close()

    def __enter__(self) -> SharedWriter:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        """Close; a ``BufferClosedError`` raised in the block ends it quietly: the learner closed
        the buffer, which is how an actor's loop is told to stop."""
        self.close()
        return kind is not None and issubclass(kind, BufferClosedError)

    def __repr__(self) -> str:
        return f"SharedWriter(index={self.index}, buffer={self._name!r}, flush_every={self.flush_every})"


def _copy_wrapped(segment: np.ndarray, start: int, block: np.ndarray) -> None:
    """Copy ``block`` into ``segment`` from ``start``, in two runs when it wraps."""
    first = min(block.shape[0], segment.shape[0] - start)
    segment[start : start + first] = block[:first]
    segment[: block.shape[0] - first] = block[first:]
