"""``SharedWriter``: the handle an actor process adds through (one segment, no lock).

A handle is small and pickles into a child process (spawn, forkserver or fork) as a
``Process`` argument; it maps the shared block on its first use there. Steps are staged in
process-local records and copied into the segment in blocks of ``flush_every`` steps (and
at an episode's end, on ``flush()`` and on ``close()``), each block committed at once: the
learner sees whole steps only, never part of one.
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
    ):
        self._name, self._data_spec, self._episode_end_field = name, data_spec, episode_end_field
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
        self._layout = Layout(self._flat, writers, batch_size, max_length)
        try:
            self._shm = shared_memory.SharedMemory(name=self._name)
        except FileNotFoundError:
            raise BufferClosedError(f"writer {self.index}: the shared buffer {self._name} was closed") from None
        self._header, cursors, records = self._layout.views(self._shm.buf)
        self._cursor = cursors[self.index]
        self._commits = WriterCursors(self._cursor, self._geometry[2])
        segment = self._layout.segment_records
        self._segment = records[self.index * segment : (self.index + 1) * segment]
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

    def add_batch(self, items: Any) -> None:
        """Stage one step of this writer's streams; flushes every ``flush_every`` steps.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match; nothing is
                staged.
            RateLimiterTimeout: the flush this step completed waited longer than the
                buffer's ``rate_limiter_timeout``: this step is not added (nothing written or
                counted); steps staged by earlier calls stay staged for the next flush.
            BufferClosedError: the buffer was closed.
        """
        self._attach()
        if self._staged == self.flush_every:  # a flush that timed out before: retry it first
            self.flush()
        batch_size = self._geometry[1]
        arrays = self._flat.flatten_batch(items, batch_size)
        if self._stage is None:
            self._commit(1, arrays)
            return
        self._stage.write(self._staged * batch_size, arrays)
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
        self._commit(count, None)
        self._staged = 0

    def _commit(self, count: int, arrays: Any) -> None:
        """Write ``count`` steps (``arrays``, or the staged block when None) with the commit protocol."""
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
        else:  # one copy of whole records, in two runs when it wraps
            block = self._stage.records[: count * batch_size]
            first = min(block.shape[0], self._segment.shape[0] - start)
            self._segment[start : start + first] = block[:first]
            self._segment[: block.shape[0] - first] = block[first:]
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
        self._header = self._cursor = self._commits = self._segment = None  # views must go before the mapping
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
