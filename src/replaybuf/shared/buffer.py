"""``SharedReplayBuffer``: many actor processes write, one learner samples (docs/many_writers.md)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
import weakref
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from replaybuf.buffer import BufferInfo, ReplayBuffer, SampleInfo, check_positive
from replaybuf.buffers.stream import reject_unused
from replaybuf.dataset import (
    DeterministicPass,
    RandomDataset,
    check_sample_arguments,
    plan_deterministic_pass,
    plan_sequence_pass,
)
from replaybuf.errors import ArgumentError, BufferClosedError, EmptyBufferError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.front import Checkpoints
from replaybuf.rate_limiters import RateLimiter, check_rate_limiter, check_timeout, wait_for_eligible
from replaybuf.refusals import empty, no_episode_window, overwritten_while_read, window_too_long
from replaybuf.ring import STEPS, Geometry, WriterCursors
from replaybuf.samplers.choice import check_sampler
from replaybuf.samplers.episodes import episode_markers, pad_windows
from replaybuf.samplers.prioritized import priority_update
from replaybuf.samplers.rules import check_policy_version, check_sample_rules
from replaybuf.samplers.sequences import SequenceRule, check_sequence_arguments
from replaybuf.samplers.split import MassSplit
from replaybuf.shared import checkpoint
from replaybuf.shared.episodes import SegmentEpisodes
from replaybuf.shared.layout import HELD, OWNER, Layout, pid_alive
from replaybuf.shared.priorities import SegmentPriorities
from replaybuf.shared.rules import SegmentRules
from replaybuf.shared.windows import SegmentWindows
from replaybuf.shared.writer import SharedWriter
from replaybuf.storages.row_copy import read_rows
from replaybuf.storages.threads import usable_threads

__all__ = ["SharedReplayBuffer"]

_INT64 = np.dtype(np.int64)
_MAX_REDRAWS = 100
_MAX_EPISODE_REDRAWS = 1000  # rounds of redrawing the windows that crossed an episode's end


class SharedReplayBuffer(Checkpoints, ReplayBuffer):
    """``writers`` segments of ``batch_size`` streams x ``max_length`` steps in shared memory.

    Each actor process adds through its own ``writer(i)`` handle (no lock between writers);
    this object is the learner's side: ``get_next``, ``as_dataset``, ``gather_all``,
    ``num_frames``, ``clear``, ``save``/``load``. Its own ``add_batch`` writes through writer
    0 (so a single process can use it like any buffer).

    Ids: step ``t`` of stream ``s`` of writer ``w`` has id ``t * S + w * batch_size + s``
    with ``S = writers * batch_size`` streams in all, so ids are unique across writers and a
    window (``num_steps`` consecutive steps of one stream) never mixes writers. Sampling is
    uniform over every valid window start of every stream; each writer's streams hold the
    steps it committed, whatever the others did.

    Args:
        data_spec: a nest of ArraySpec (or tf/torch/Gymnasium specs) for one item.
        writers: how many writer handles (segments) there are.
        batch_size: streams per writer (the leading dimension of a writer's ``add_batch``).
        max_length: steps kept per stream.
        seed: seed of the learner's random generator.
        rate_limiter: a ``MinSize`` / ``SampleToInsertRatio``: writers' flushes wait for it
            (counting ``k * batch_size`` items per block of ``k`` steps), ``get_next`` waits
            for it (counting ``sample_batch_size`` items). It is copied into shared memory.
        rate_limiter_timeout: seconds a blocked add or sample waits before
            ``RateLimiterTimeout``; None waits until the buffer is closed.
        flush_every: default staging size of writer handles (steps per committed block).
        sampler: ``"uniform"`` (default) or ``"prioritized"``: proportional prioritized
            replay kept by the learner (new items get the largest priority so far;
            ``update_priorities``; ``info`` is a ``SampleInfo`` with ``weights``).
        alpha, beta, epsilon: the prioritized sampler's exponent, importance-sampling
            exponent (a float in [0, 1] or a callable) and offset, as in PrioritizedReplayBuffer.
        context: the ``multiprocessing`` context (or start method name) that makes the rate
            limiter's lock; "spawn" by default; its handles also work in fork children.
        respect_episodes: windows never cross an episode's end (ends from
            ``episode_end_field``, else a ``step_type`` or ``next_step_type`` field): uniform
            over the windows inside one episode (shared/episodes.py), or by priority over
            them with ``sampler="prioritized"`` (shared/windows.py); and sequences
            (``get_next(burn_in=, period=)``).
        pad_episode_ends: with respect_episodes, windows are drawn as without episodes and
            steps past the first step's episode repeat its last real step, ``info.mask`` True
            on real steps (as the NumPy buffers); sequences draw padded starts too.
        replacement, drop_remainder, max_times_sampled, max_staleness, version_field: the
            learner's sample-count rules (docs/sample_rules.md, "Many writers"): epochs over every
            writer's items, consumption, staleness against ``buffer.policy_version`` (writers
            tag their adds in ``version_field``); ``sampler="fifo"``: the oldest items first
            (by step). Uniform draws without episodes only.

    The shared memory is released by ``close()`` (or a ``with`` block), or when this
    object is collected or its process exits.
    """

    def __init__(
        self,
        data_spec: Any,
        writers: int = 1,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        seed: int | None = None,
        rate_limiter: RateLimiter | None = None,
        rate_limiter_timeout: float | None = None,
        flush_every: int = 1,
        sampler: str = "uniform",
        alpha: float = 0.6,
        beta: float | Callable[[], float] = 0.4,
        epsilon: float = 1e-6,
        context: Any = "spawn",
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
    ):
        for name, value in (("writers", writers), ("batch_size", batch_size), ("max_length", max_length)):
            check_positive(name, value, allow_none=False)
        check_positive("flush_every", flush_every, allow_none=False)
        check_positive("dataset_window_shift", dataset_window_shift)
        if flush_every > max_length:
            raise ArgumentError(f"flush_every: expected at most max_length ({max_length}), got {flush_every}")
        check_rate_limiter(rate_limiter)
        self._timeout = check_timeout(rate_limiter_timeout, "rate_limiter_timeout")
        fifo = sampler == "fifo"
        sampler = "uniform" if fifo else check_sampler(sampler)
        flat = FlatSpec(data_spec)
        rules = check_sample_rules(
            flat, replacement, max_times_sampled, "fifo" if fifo else None, max_staleness, version_field, drop_remainder
        )
        if rules.active and (sampler == "prioritized" or respect_episodes):
            raise ArgumentError(
                "replacement / max_times_sampled / max_staleness / sampler='fifo': the shared learner's rules "
                "draw uniformly over items and windows; expected sampler='uniform' without respect_episodes, got "
                f"sampler={sampler!r}, respect_episodes={respect_episodes!r}"
            )
        if sampler == "uniform":
            why = "only used with sampler='prioritized'"
            reject_unused(alpha=(alpha, 0.6, why), beta=(beta, 0.4, why), epsilon=(epsilon, 1e-6, why))
        if not respect_episodes:
            why = "only used with respect_episodes=True"
            reject_unused(
                pad_episode_ends=(pad_episode_ends, False, why), episode_end_field=(episode_end_field, None, why)
            )
        if isinstance(context, str):
            if context not in multiprocessing.get_all_start_methods():
                raise ArgumentError(
                    f"context: expected one of {multiprocessing.get_all_start_methods()}, got {context!r}"
                )
            context = multiprocessing.get_context(context)
        self._flat = flat
        self._writers, self._batch_size, self._max_length = int(writers), int(batch_size), int(max_length)
        self._streams = self._writers * self._batch_size
        self._geometry = Geometry(self._batch_size, self._max_length, self._streams * self._max_length)
        self._layout = Layout(
            self._flat, self._writers, self._batch_size, self._max_length, priorities=sampler == "prioritized"
        )
        self._flush_every = int(flush_every)
        self._drop_remainder, self._window_shift = bool(dataset_drop_remainder), dataset_window_shift
        self._priorities = (
            SegmentPriorities(self._writers, self._batch_size, self._max_length, alpha, beta, epsilon)
            if sampler == "prioritized"
            else None
        )
        self._limiter = None if rate_limiter is None else rate_limiter.shared(context)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        self._own_writer: SharedWriter | None = None
        self.torn_redraws = 0  # elements drawn again because a writer overwrote them mid-read
        self._read_threads = usable_threads()
        self._shm = shared_memory.SharedMemory(
            name=f"replaybuf-{os.getpid()}-{uuid.uuid4().hex[:12]}", create=True, size=self._layout.size
        )
        self._finalizer = weakref.finalize(self, _release, self._shm, self._limiter)
        self._header, self._cursors, self._records = self._layout.views(self._shm.buf)
        if self._priorities is not None:
            self._priorities.given = self._layout.priority_column(self._shm.buf)
        self._commits = WriterCursors(self._cursors, max_length)
        self._names = list(self._layout.dtype.names or ())
        Layout.initialise(self._header)
        self._episodes, self._episode_end_field, self._pad = None, episode_end_field, bool(pad_episode_ends)
        if respect_episodes:
            markers = episode_markers(self._flat, episode_end_field)  # raises ArgumentError
            self._episodes = SegmentEpisodes(markers, self._names, self._writers, self._batch_size, self._max_length)
        self._windows = None if self._episodes is None else SegmentWindows(self._priorities, self._episodes)
        self._rules = None
        if rules.active:
            self._rules = SegmentRules(
                rules, self._names, self._writers, self._batch_size, self._max_length, type(self).__name__
            )
        self._policy_version = 0

    # -- properties -------------------------------------------------------------------------
    @property
    def writers(self) -> int:
        return self._writers

    @property
    def name(self) -> str:
        """The shared-memory block's name (under /dev/shm on Linux)."""
        return self._shm.name

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The shared copy of the rate limiter this buffer waits on (its counters are live)."""
        return self._limiter

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    # -- writers ----------------------------------------------------------------------------
    def writer(self, index: int, flush_every: int | None = None) -> SharedWriter:
        """The handle of writer ``index``: pass it to a child process and ``add_batch`` there.

        A writer whose last process gave it up or died counts as not taken again once a new
        handle is made, so a learner waiting on the rate limiter waits for the new process.

        Raises:
            ArgumentError: ``index`` not in ``[0, writers)``, or a bad ``flush_every``.
            BufferClosedError: the buffer was closed.
        """
        self._check_open()
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self._writers:
            raise ArgumentError(f"index: expected an int in [0, {self._writers}), got {index!r}")
        flush_every = self._flush_every if flush_every is None else flush_every
        check_positive("flush_every", flush_every, allow_none=False)
        if flush_every > self._max_length:
            raise ArgumentError(f"flush_every: expected at most max_length ({self._max_length}), got {flush_every}")
        owner = int(self._cursors[index, OWNER])
        if not (owner and pid_alive(owner)):
            self._cursors[index, HELD] = 0
        return SharedWriter(
            self._shm.name,
            self._flat.data_spec,
            self._writers,
            self._batch_size,
            self._max_length,
            int(index),
            int(flush_every),
            self._limiter,
            self._timeout,
            self._episode_end_field,
            self._priorities is not None,
        )

    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Add one step to writer 0's streams from this process (committed at once);
        ``priorities``: as for a writer's ``add_batch``.

        Raises:
            SpecMismatchError: the items do not match the data_spec; nothing is written.
            ArgumentError: writer 0 is held by another live process; bad ``priorities`` (as
                for a writer's ``add_batch``).
            PriorityError: a priority that is not finite and > 0; nothing is written.
            RateLimiterTimeout: the rate limiter held the add back past the timeout.
            BufferClosedError: the buffer was closed.
        """
        self._check_open()
        with self._lock:
            if self._own_writer is None:
                self._own_writer = self.writer(0, flush_every=1)
            self._own_writer.add_batch(items, priorities)

    # -- the learner's intake ---------------------------------------------------------------
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per writer, ``[low, high)``: the steps whole now (committed and not being overwritten)."""
        return self._commits.bounds()

    def _slots(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray) -> np.ndarray:
        return (writer * self._max_length + step % self._max_length) * self._batch_size + stream

    def _split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        step, column = np.divmod(ids, self._streams)
        writer, stream = np.divmod(column, self._batch_size)
        return writer, step, stream

    # -- sampling ---------------------------------------------------------------------------
    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, BufferInfo]:
        """Sample windows uniformly (or by priority) over every writer's streams (shapes as
        every buffer's). With ``pad_episode_ends``: ``info.mask``, as NumPy buffers.

        With ``burn_in`` or ``period`` (``respect_episodes=True``): sequences of ``burn_in +
        num_steps`` steps from learning starts at episode positions that are multiples of
        ``period``, with ``info.mask`` and ``info.learn`` (replaybuf.samplers.sequences).

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` steps
                (inside one episode with ``respect_episodes``), or no eligible learning start.
            ArgumentError: sample_batch_size or num_steps is not a positive int; ``burn_in`` /
                ``period`` without ``respect_episodes``, without ``num_steps``, or asking more
                steps than a stream holds.
            RateLimiterTimeout: the rate limiter held the sample back past the timeout.
            BufferClosedError: the buffer was closed (also while waiting).
            WritersGoneError: the rate limiter holds the sample back and every writer's
                process died or gave its writer up: no insert can come (named in the message).
        """
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        rule = self._sequence_rule(burn_in, period, num_steps)
        self._check_open()
        count = sample_batch_size or 1
        if self._limiter is not None:
            self._limiter.await_sample(count, self._timeout, self._writers_gone)
        extras: dict = {}
        try:
            with self._lock:
                if self._rules is not None:
                    ids, probabilities, rows, extras = self._draw_ruled(count, num_steps)
                elif rule is not None:
                    ids, probabilities, rows, extras = self._draw_sequences(count, rule)
                    num_steps = rule.burn_in + rule.num_steps
                elif self._priorities is not None:
                    ids, probabilities, rows, extras["weights"] = self._draw_prioritized(count, num_steps)
                elif self._pad:
                    ids, probabilities, rows = self._draw(count, num_steps, held=self._episode_bounds)
                elif self._episodes is not None:
                    ids, probabilities, rows = self._draw_episodes(count, num_steps)
                else:
                    ids, probabilities, rows = self._draw(count, num_steps)
                if self._pad and rule is None and num_steps is not None:
                    ids, rows, extras["mask"] = self._padded(ids, rows)
        except BaseException:
            if self._limiter is not None:
                self._limiter.undo_sample(count)
            raise
        if sample_batch_size is None:
            ids, rows = ids[0], rows[0]
            probabilities = probabilities.reshape(())
            extras = {key: _first(value) for key, value in extras.items()}
        leaves = [rows[name] for name in self._names]
        if not time_stacked and num_steps is not None:
            lead = (slice(None),) if sample_batch_size is not None else ()
            items = tuple(self._flat.unflatten([leaf[(*lead, t)] for leaf in leaves]) for t in range(num_steps))
        else:
            items = self._flat.unflatten(leaves)
        if extras:
            return items, SampleInfo(ids, probabilities, **extras)
        return items, BufferInfo(ids, probabilities)

    def _draw_ruled(self, count: int, num_steps: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        """``_draw`` under the sample-count rules (replaybuf.shared.rules), with ``{"epoch"}`` for
        epochs. Too few eligible items: EmptyBufferError, or with a rate limiter a wait for
        writers' adds (up to ``rate_limiter_timeout``: RateLimiterTimeout). The lock is let go
        while it waits."""
        if self._limiter is None:
            return self._draw_rules_once(count, num_steps)
        return wait_for_eligible(
            lambda: self._draw_rules_once(count, num_steps),
            self._limiter,
            self._timeout,
            self._wait_unlocked,
            self._writers_gone,
        )

    def _wait_unlocked(self, timeout: float | None) -> None:
        """Let go of the lock while the limiter's counts may change (an add), up to ``timeout``."""
        self._lock.release()
        try:
            self._limiter.wait_change(0.1 if timeout is None else timeout)
        finally:
            self._lock.acquire()

    def _draw_rules_once(self, count: int, num_steps: int | None, tries: int = 0) -> tuple:
        rules = self._rules
        rules.take_in(self._commits, self._records)
        ids, probability, epoch = rules.draw(self._rng, count, num_steps)
        writer, step, stream = self._split(ids)
        rows = read_rows(self._records, self._slots(writer, step, stream), self._read_threads)
        first = ids if num_steps is None else ids[:, 0]
        if num_steps is not None:
            writer, step = writer[:, 0], step[:, 0]
        torn = self._commits.torn(writer, step)  # read after the copy
        if torn.any():  # a writer overwrote them while they were read: they are gone, draw others
            if tries == _MAX_REDRAWS:
                raise overwritten_while_read("draws", _MAX_REDRAWS)
            self.torn_redraws += int(torn.sum())
            rules.forget(first[torn])
            keep = ~torn
            again, _, more, _ = self._draw_rules_once(int(torn.sum()), num_steps, tries + 1)
            ids, rows = np.concatenate([ids[keep], again]), np.concatenate([rows[keep], more])
        probabilities = np.full(ids.shape[0], probability, np.float32)
        return ids, probabilities, rows, ({} if epoch is None else {"epoch": epoch})

    @property
    def policy_version(self) -> int:
        """The learner's policy version (``max_staleness``: docs/sample_rules.md); set it after
        each policy update (ArgumentError for a non-int)."""
        return self._policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        version = check_policy_version(version)
        with self._lock:
            self._policy_version = version
            if self._rules is not None:
                self._rules.set_policy_version(self._policy_version)

    def num_eligible(self) -> int:
        """Stored items a sample may still draw: ``num_frames()`` less the items consumed
        (``max_times_sampled``) or stale (``max_staleness``); docs/sample_rules.md."""
        self._check_open()
        if self._rules is None:
            return self.num_frames()
        with self._lock:
            self._rules.take_in(self._commits, self._records)
            return self._rules.num_eligible()

    def _sequence_rule(self, burn_in: Any, period: Any, num_steps: Any) -> SequenceRule | None:
        """The checked ``SequenceRule`` of a sample with ``burn_in`` or ``period``; None without
        (ArgumentError: see ``get_next``)."""
        if burn_in is None and period is None:
            return None
        return check_sequence_arguments(
            burn_in, period, num_steps, self._max_length, self._episodes is not None, self._pad
        )

    def _draw_sequences(self, count: int, rule: SequenceRule, tries: int = 0) -> tuple[Any, Any, Any, dict]:
        """``count`` sequences of ``rule``: ids ``[count, burn_in + num_steps]``, probabilities,
        the records read and ``{"mask", "learn"}`` (and ``"weights"`` by priority); sequences a
        writer overwrote while they were read are drawn again."""
        lows, highs = self._windows.take_in(self._commits, self._records)
        if not any(highs):
            raise empty(type(self).__name__)
        writer, step, stream, probabilities, weights = self._windows.draw(self._rng, count, rule, lows, highs)
        ids, mask, learn = self._episodes.sequences(writer, step, stream, rule)
        rows = read_rows(self._records, self._slots(*self._split(ids)), self._read_threads)
        extras = {"mask": mask, "learn": learn, **({} if weights is None else {"weights": weights})}
        torn = self._commits.torn(writer, ids[:, 0] // self._streams)  # read after the copy
        if torn.any():
            if tries == _MAX_REDRAWS:
                raise overwritten_while_read("sequences", _MAX_REDRAWS)
            self.torn_redraws += int(torn.sum())
            again = np.flatnonzero(torn)
            ids[again], probabilities[again], rows[again], redrawn = self._draw_sequences(again.size, rule, tries + 1)
            for key, value in extras.items():
                value[again] = redrawn[key]
        return ids, probabilities, rows, extras

    def _episode_bounds(self) -> tuple[list[int], list[int]]:
        """Each writer's steps the episode index holds, after taking in what was committed."""
        self._episodes.take_in(self._commits, self._records)
        lows, highs = zip(*self._episodes.known, strict=True)
        return list(lows), list(highs)

    def _padded(self, ids: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows ``[N, T]`` drawn as without episodes, padded past the first step's episode
        (replaybuf.samplers.episodes.pad_windows): ``(ids, rows, mask)``."""
        padded, mask = pad_windows(self._episodes, ids)
        steps = (padded - ids[:, :1]) // self._streams  # each step's offset in its window
        return padded, np.take_along_axis(rows, steps, axis=1), mask

    def _writers_gone(self) -> str | None:
        """Why no writer can insert any more (each one's process died or gave it up), or None
        while one is held by a live process or not taken since its handle was made (its actor
        may be starting)."""
        cursors = self._cursors
        if cursors is None:  # closed meanwhile: the limiter wakes the wait with BufferClosedError
            return None
        gone = []
        for index, (owner, held) in enumerate(cursors[:, [OWNER, HELD]].tolist()):
            if (owner and pid_alive(owner)) or not held:
                return None
            gone.append(f"writer {index} (pid {owner}) died" if owner else f"writer {index} was closed by pid {held}")
        return "every writer is gone: " + ", ".join(gone)

    def _priority_bounds(self) -> tuple[list[int], list[int]]:
        """Each writer's whole steps ``(lows, highs)``; with episodes, the bounds the episode
        index and the priorities have both taken in (what the window trees follow)."""
        if self._episodes is None:
            return self._commits.bound_lists()
        return self._windows.take_in(self._commits, self._records)

    def _draw_prioritized(
        self, count: int, num_steps: int | None, tries: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``_draw`` by priority: also returns the importance weights. With episodes, windows are
        drawn from the tree of those inside one episode (replaybuf.shared.windows)."""
        length, batch_size, max_length = num_steps or 1, self._batch_size, self._max_length
        lows, highs = self._priority_bounds()
        if not any(highs):
            self._raise_empty(length, np.zeros(1, np.int64))
        if self._windows is None or self._pad:  # padded windows are drawn as without episodes
            drawn = self._priorities.draw(self._rng, count, length, lows, highs)
        else:
            drawn = self._windows.draw(self._rng, count, SequenceRule(0, length, 1, False), lows, highs)
        writer, step, stream, probabilities, weights = drawn
        column = writer * batch_size + stream
        steps = step if num_steps is None else step[:, None] + np.arange(num_steps)
        ids = steps * self._streams + (column if num_steps is None else column[:, None])
        segment_of = writer if num_steps is None else writer[:, None]
        stream_of = stream if num_steps is None else stream[:, None]
        rows = read_rows(
            self._records, (segment_of * max_length + steps % max_length) * batch_size + stream_of, self._read_threads
        )
        torn = self._commits.torn(writer, step)  # read after the copy
        if torn.any():
            if tries == _MAX_REDRAWS:
                raise overwritten_while_read("draws", _MAX_REDRAWS)
            self.torn_redraws += int(torn.sum())
            again = np.flatnonzero(torn)
            ids[again], probabilities[again], rows[again], weights[again] = self._draw_prioritized(
                again.size, num_steps, tries + 1
            )
        return ids, probabilities, rows, weights

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Set the priorities of sampled items (or windows: their first id counts).

        Ids overwritten since they were sampled are ignored.

        Raises:
            ArgumentError: the buffer samples uniformly, or ``priorities`` is not numbers
                shaped like ``ids`` (without the time axis).
            PriorityError: a priority that is zero, negative, NaN or infinite, or an id never
                added; nothing is changed.
        """
        if self._priorities is None:
            raise ArgumentError("update_priorities: this buffer samples uniformly; build it with sampler='prioritized'")
        ids, priorities = priority_update(ids, priorities)
        step, column = np.divmod(ids, self._streams)
        writer, stream = np.divmod(column, self._batch_size)
        with self._lock:
            lows, highs = self._priority_bounds()
            live, masses = self._priorities.update(writer, step, stream, priorities, lows, highs, ids)
            if self._episodes is not None:
                self._windows.updated(writer[live], step[live], stream[live], masses)

    def _draw(
        self, count: int, num_steps: int | None, tries: int = 0, held: Callable | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` draws: ids ``[count]`` (or ``[count, T]`` windows), probabilities ``[count]``
        and the records read. Draws a writer overwrote while they were read are drawn again.
        ``held``: returns the writers' steps to draw from (default: the committed ones)."""
        length, batch_size, max_length = num_steps or 1, self._batch_size, self._max_length
        # any order of these reads is safe because the torn check below rereads WRITING
        lows, highs = (held or self._commits.bound_lists)()
        starts = [max(0, high - (length - 1) - low) * batch_size for low, high in zip(lows, highs, strict=True)]
        total = sum(starts)
        if total == 0:
            self._raise_empty(length, np.array(highs) - np.array(lows))
        local = (self._rng.bit_generator.random_raw(count) % np.uint64(total)).view(_INT64)
        # local = step * batch_size + stream inside writer w's segment: no division on this path
        # (slot = w * L * B + local % (L * B); step < bound <=> local < bound * B)
        segment_size = max_length * batch_size
        writer = None
        if self._writers == 1:
            local += lows[0] * batch_size
            column_ids = local
        else:
            # draw d belongs to the writer whose share of [0, total) holds it (split by starts)
            writer, local = MassSplit(starts).locate(local, [low * batch_size for low in lows])
            # id = step * S + w * B + stream = local + step * (S - B) + w * B
            column_ids = local + (local // batch_size) * (self._streams - batch_size) + writer * batch_size
        if num_steps is None:
            ids = column_ids
            slots = local % segment_size
        else:
            offsets = np.arange(num_steps) * batch_size
            ids = column_ids[:, None] + offsets * (self._streams // batch_size)
            slots = (local[:, None] + offsets) % segment_size
        if writer is not None:
            slots += (writer * segment_size).reshape((count,) + (1,) * (slots.ndim - 1))
        rows = read_rows(self._records, slots, self._read_threads)
        probabilities = np.empty(count, np.float32)
        probabilities.fill(1.0 / total)
        # read after the copy: only a writer that moved past its low while we read can have
        # overwritten a draw
        bounds = [below * batch_size for below in self._commits.overwritten_below()]
        if all(bound <= lo * batch_size for bound, lo in zip(bounds, lows, strict=True)):
            return ids, probabilities, rows
        if writer is None:
            torn = local < bounds[0]
        else:
            torn = local < np.array(bounds, _INT64).take(writer)
        if not torn.any():
            return ids, probabilities, rows
        if tries == _MAX_REDRAWS:
            raise overwritten_while_read("draws", _MAX_REDRAWS)
        self.torn_redraws += int(torn.sum())
        again = np.flatnonzero(torn)
        ids[again], probabilities[again], rows[again] = self._draw(again.size, num_steps, tries + 1, held)
        return ids, probabilities, rows

    def _draw_episodes(self, count: int, num_steps: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_draw`` of windows inside one episode: uniform draws, those that cross an end (or
        that the episode index has not taken in) drawn again after a new intake (writers that
        wrap fast move the stored windows on); probability ``1 / count`` at the last intake."""
        size, episodes = num_steps or 1, self._episodes
        ids = rows = None
        pending = np.arange(count)
        for _ in range(_MAX_EPISODE_REDRAWS):
            episodes.take_in(self._commits, self._records)
            total = episodes.count(size)
            if total == 0:
                if not self._cursors[:, STEPS].any():
                    self._raise_empty(size, np.zeros(1, np.int64))
                raise no_episode_window(size, padding=False)
            if ids is None:
                ids, _, rows = self._draw(count, num_steps)
            else:
                ids[pending], _, rows[pending] = self._draw(pending.size, num_steps)
            first = ids[pending] if num_steps is None else ids[pending, 0]
            writer, step, stream = self._split(first)
            pending = pending[~episodes.inside(writer, step, stream, size)]
            if not pending.size:
                return ids, np.full(count, 1.0 / total, np.float32), rows
        raise EmptyBufferError(
            f"num_steps={size}: {pending.size} draws crossed an episode's end {_MAX_EPISODE_REDRAWS} times in a row "
            f"({total} windows of {size} lie inside one episode)"
        )

    def _raise_empty(self, num_steps: int, held: np.ndarray) -> None:
        if not self._cursors[:, STEPS].any():
            raise empty(type(self).__name__)
        raise window_too_long(num_steps, int(held.max()), self._max_length)

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        writer, step, stream = self._split(ids)
        with self._lock:
            rows = self._records.take(self._slots(writer, step, stream))
        return self._flat.unflatten([rows[name] for name in self._names]), BufferInfo(ids, ())

    # -- the rest of the common API ---------------------------------------------------------
    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> Any:
        """Random mode: endless ``get_next`` calls (``num_parallel_calls`` > 0: in a thread).

        A deterministic pass visits writer 0's streams, then writer 1's, ... (groups of
        ``sample_batch_size`` streams never mix writers), each stream in time order, cut
        into windows of ``num_steps``; ids are fixed when the iterator is created. With
        ``burn_in`` / ``period``: sequences as ``get_next`` samples them; a deterministic pass
        yields every eligible sequence once, ``sample_batch_size`` at a time, ordered by
        writer, stream, then learning start.

        Raises:
            ArgumentError: a non-positive argument; in a deterministic pass,
                sample_batch_size > batch_size or num_steps > max_length; bad sequence
                arguments (``get_next``).
        """
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        check_positive("num_parallel_calls", num_parallel_calls)
        rule = self._sequence_rule(burn_in, period, num_steps)
        if single_deterministic_pass and rule is not None:
            plan = lambda: self._plan_sequences(sample_batch_size, rule)  # noqa: E731
            return DeterministicPass(plan, lambda starts: self._read_sequences(starts, rule))
        if single_deterministic_pass:
            return DeterministicPass(lambda: self._plan(sample_batch_size, num_steps), self._read_ids)
        sample = lambda: self.get_next(sample_batch_size, num_steps, burn_in=burn_in, period=period)  # noqa: E731
        return RandomDataset(sample, num_parallel_calls)

    def _plan_sequences(self, sample_batch_size: int | None, rule: SequenceRule) -> list[np.ndarray]:
        """The learning starts of every eligible sequence now, by writer, stream, then step, cut
        into groups of ``sample_batch_size`` (one start each when None)."""
        with self._lock:
            self._episodes.take_in(self._commits, self._records)
            parts = []
            for w, (low, high) in enumerate(self._episodes.known):
                stream, step = np.divmod(np.arange((high - low) * self._batch_size), high - low)
                step += low
                writer = np.full(step.size, w)
                found = self._episodes.eligible(writer, step, stream, rule)
                parts.append(step[found] * self._streams + w * self._batch_size + stream[found])
        starts = np.concatenate(parts)
        if starts.size == 0:
            raise no_episode_window(rule.num_steps, padding=not rule.pad)
        return plan_sequence_pass(starts, sample_batch_size, self._drop_remainder)

    def _read_sequences(self, starts: np.ndarray, rule: SequenceRule) -> tuple[Any, BufferInfo]:
        """The sequences from learning ``starts`` (ids) with their mask and learn."""
        with self._lock:
            flat = np.atleast_1d(starts)
            ids, mask, learn = self._episodes.sequences(*self._split(flat), rule)
            shape = (*np.shape(starts), rule.burn_in + rule.num_steps)
            items, info = self._read_ids(ids.reshape(shape))
        return items, SampleInfo(info.ids, (), mask=mask.reshape(shape), learn=learn.reshape(shape))

    def _plan(self, sample_batch_size: int | None, num_steps: int | None) -> list[np.ndarray]:
        low, high = self._bounds()
        plan: list[np.ndarray] = []
        barren = 0  # segments holding nothing
        for w in range(self._writers):
            ring = _SegmentRing(self._batch_size, self._max_length, int(low[w]), int(high[w]), type(self).__name__)
            try:
                local = plan_deterministic_pass(
                    ring, sample_batch_size, num_steps, self._window_shift, self._drop_remainder
                )
            except EmptyBufferError:
                barren += 1
                continue
            for ids in local:
                step, stream = np.divmod(ids, self._batch_size)
                plan.append(step * self._streams + w * self._batch_size + stream)
        if barren == self._writers:
            raise empty(type(self).__name__)
        return plan

    def gather_all(self) -> Any:
        """Every writer's newest ``n`` steps, ``[writers * batch_size, n, ...]`` oldest first.

        ``n`` is the fewest whole steps any writer holds (writers run at their own pace).
        """
        self._check_open()
        with self._lock:
            for _ in range(_MAX_REDRAWS):
                low, high = self._bounds()
                n = int((high - low).min())
                steps = high[:, None] - n + np.arange(n)  # [W, n]
                ids = (
                    steps[:, None, :] * self._streams
                    + (np.arange(self._writers)[:, None] * self._batch_size + np.arange(self._batch_size))[..., None]
                ).reshape(self._streams, n)
                items, _ = self._read_ids(ids)
                if not self._commits.torn(np.arange(self._writers), high - n).any():
                    return items
                self.torn_redraws += 1
        raise overwritten_while_read("gather_all: items", _MAX_REDRAWS)

    def num_frames(self) -> int:
        low, high = self._bounds()
        return int((high - low).sum()) * self._batch_size

    def clear(self) -> None:
        """Forget every item (and the rate limiter's counts); writers must not be adding."""
        self._check_open()
        with self._lock:
            self._commits.reset()
            if self._limiter is not None:
                self._limiter.reset()
            if self._priorities is not None:
                self._priorities.cleared()
            if self._episodes is not None:
                self._episodes.cleared()
            if self._windows is not None:
                self._windows.cleared()
            if self._rules is not None:
                self._rules.cleared()

    # -- checkpoints (replaybuf.shared.checkpoint) ----------------------------------------
    def state_dict(self) -> dict:
        """A consistent copy in the backend-neutral format: one ring of ``writers x batch_size``
        streams while every writer holds the same steps, else one segment per writer."""
        self._check_open()
        with self._lock:
            return checkpoint.state_of(self._checkpoint_parts())

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` of this or any buffer of ``writers x batch_size`` streams of
        ``max_length`` (docs/persistence.md, "Across backends"); writers must not be adding meanwhile.

        Raises:
            CheckpointError: a state of another spec or geometry, holding what this buffer
                cannot, or malformed; the buffer is left unchanged.
        """
        self._check_open()
        parts = self._checkpoint_parts()
        plan = checkpoint.check_state(parts, state)
        with self._lock:
            checkpoint.load_state(parts, plan)
            if self._rules is not None:
                self._policy_version = self._rules.policy_version

    def _checkpoint_parts(self) -> checkpoint.SharedParts:
        return checkpoint.SharedParts(
            saved_by=type(self).__name__,
            flat=self._flat,
            writers=self._writers,
            batch_size=self._batch_size,
            streams=self._streams,
            max_length=self._max_length,
            names=self._names,
            records=self._records,
            cursors=self._cursors,
            commits=self._commits,
            priorities=self._priorities,
            episodes=self._episodes,
            windows=self._windows,
            rules=self._rules,
            limiter=self._limiter,
            rng=self._rng,
            bounds=self._bounds,
            slots=self._slots,
        )

    # -- life -------------------------------------------------------------------------------
    def close(self) -> None:
        """Wake every waiter with ``BufferClosedError`` and release the shared memory.

        Writer processes still mapped keep their mapping until they close or exit; their
        next flush raises ``BufferClosedError``.
        """
        with self._lock:
            if self._own_writer is not None:
                self._own_writer.close()
                self._own_writer = None
            if self._finalizer.alive:
                Layout.mark_closed(self._header)
                self._header = self._cursors = self._commits = self._records = None
                if self._priorities is not None:
                    self._priorities.given = None
                self._finalizer()

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise BufferClosedError(f"the {type(self).__name__} was closed")

    def __enter__(self) -> SharedReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a SharedReplayBuffer stays in the learner's process; pass buffer.writer(i) to an actor process instead"
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"num_frames={self.num_frames()}"
        return (
            f"SharedReplayBuffer(writers={self._writers}, batch_size={self._batch_size}, "
            f"max_length={self._max_length}, {state})"
        )


class _SegmentRing:
    """What ``plan_deterministic_pass`` reads of a ring: one writer's whole steps ``[low, steps)``."""

    def __init__(self, batch_size: int, max_length: int, low: int, steps: int, name: str):
        self.batch_size, self.max_length, self.low, self.steps = batch_size, max_length, low, steps
        self.name = name  # the buffer's, for error messages

    def first_valid_step(self) -> int:
        return self.low


def _first(value: Any) -> Any:
    """An extra of a one-element sample without its batch axis (``epoch``, an int, as it is)."""
    if not isinstance(value, np.ndarray):
        return value
    return value[0] if value.ndim > 1 else value.reshape(())


def _release(shm: shared_memory.SharedMemory, limiter: RateLimiter | None) -> None:
    """Close the rate limiter and unlink the block (close(), collection or interpreter exit)."""
    if limiter is not None:
        limiter.close()
    try:
        shm.close()
    except BufferError:  # a view is still exported somewhere in this process: unlink anyway
        pass
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
