"""The learner's episode index over the writers' segments of a ``SharedReplayBuffer``.

Writers only write records; the learner keeps each stored step's position in its episode
(``position[w, t % L, s]``) and, before each draw, takes in the steps every writer committed
since the last one, reading their episode markers from the records. A writer that wrapped
past steps the learner never took in (or a step read while it was being overwritten)
restarts its positions at its oldest whole step, as ``EpisodeIndex.recover`` does: an
episode that began before it gets smaller positions, which changes no window's validity,
since no window starts before that step.

A window of ``T`` steps from step ``t`` lies inside one episode iff
``position[t + T - 1] - position[t] == T - 1``. The count of such windows per writer is kept
for every ``T`` asked for (computed once, then updated by each intake), so the uniform
probability ``1 / count`` needs no pass over the buffer.

Sequences (``burn_in``, ``period``) and padded windows compose replaybuf.samplers.sequences
and replaybuf.samplers.episodes on each writer's segment, seen as a ``StreamRing`` of its
taken-in steps. After a restart at step ``r > 0`` the positions of the episode each stream
was in at ``r`` are smaller than the true ones, so with ``period > 1`` its steps are no
learning starts (a learner that samples before a writer laps it never restarts).
"""

from __future__ import annotations

import numpy as np

from replaybuf.refusals import overwritten_while_read
from replaybuf.ring import StreamRing, WriterCursors
from replaybuf.samplers.episodes import Markers, episode_positions
from replaybuf.samplers.sequences import SequenceRule, eligible, sequence_windows

__all__ = ["SegmentEpisodes"]

_RETAKES = 100  # intakes of one writer torn by its own wrap before giving up


class SegmentEpisodes:
    """Positions in episodes of the steps of ``writers`` segments of ``max_length x batch_size``."""

    def __init__(self, markers: Markers, names: list[str], writers: int, batch_size: int, max_length: int):
        self.markers, self.names = markers, names
        self.writers, self.batch_size, self.max_length = writers, batch_size, max_length
        self.position = np.zeros((writers, max_length, batch_size), np.int64)
        self.cleared()

    def cleared(self) -> None:
        """Forget everything (the buffer was cleared or loaded): the next intake starts over."""
        self.known = [(0, 0)] * self.writers  # per writer, the steps [low, high) whose positions are kept
        self.last = np.full((self.writers, self.batch_size), -1, np.int64)  # each stream's newest position
        self.ended = np.ones((self.writers, self.batch_size), bool)  # its episode ended there
        self.counts: dict[int, np.ndarray] = {}  # T -> per writer, the windows of T inside one episode
        self.restarted = np.zeros(self.writers, np.int64)  # the step each writer's positions count from

    # -- intake -----------------------------------------------------------------------------
    def take_in(self, cursors: WriterCursors, records: np.ndarray) -> None:
        """Take in the steps each writer committed since the last intake (``cursors`` and
        ``records``: the shared block's views)."""
        for w in range(self.writers):
            for _ in range(_RETAKES):
                lows, highs = cursors.bound_lists()
                if self._take_in(w, lows[w], highs[w], cursors, records):
                    break
            else:
                raise overwritten_while_read(f"writer {w}: steps", _RETAKES)

    def _take_in(self, w: int, low: int, high: int, cursors: WriterCursors, records: np.ndarray) -> bool:
        """Writer ``w``'s whole steps are now ``[low, high)``: read the new ones' markers, update
        positions and counts. False when the read raced the writer's wrap (nothing changed)."""
        old_low, old_high = self.known[w]
        if (low, high) == (old_low, old_high):
            return True
        restart = high < old_high or low > old_high  # cleared or loaded under us, or steps missed
        first = low if restart else old_high
        markers = self._read_markers(w, first, high, records)
        if first < cursors.overwritten_below()[w]:  # overwritten while read: again
            return False
        starts, ends = markers
        if restart:
            new = episode_positions(starts, ends, np.full(self.batch_size, -1), np.ones(self.batch_size, bool))
            self.restarted[w] = low
        else:
            new = episode_positions(starts, ends, self.last[w], self.ended[w])
        for size, counts in self.counts.items():
            if restart:
                counts[w] = 0
            else:  # windows that started below the new low leave (read before their slots are reused)
                counts[w] -= self._inside(w, old_low + size - 1, min(low + size - 1, old_high), size)
        if high > first:
            rows = np.arange(first, high) % self.max_length
            self.position[w, rows] = new
            self.last[w], self.ended[w] = new[-1], ends[-1]
        for size, counts in self.counts.items():  # windows whose last step came in (and start at low or later)
            counts[w] += self._inside(w, max(first, low + size - 1), high, size)
        self.known[w] = (low, high)
        return True

    def _read_markers(self, w: int, first: int, stop: int, records: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """``(starts or None, ends)`` bool ``[stop - first, batch_size]`` of writer ``w``'s steps."""
        rows = np.arange(first, stop) % self.max_length
        slots = ((w * self.max_length + rows) * self.batch_size)[:, None] + np.arange(self.batch_size)
        starts, ends = self.markers(_Fields(records[slots], self.names))
        return starts, np.asarray(ends, bool)

    def _inside(self, w: int, first_end: int, stop_end: int, size: int) -> int:
        """How many windows of ``size`` ending at writer ``w``'s steps ``[first_end, stop_end)``
        lie inside one episode."""
        if stop_end <= first_end:
            return 0
        rows = np.arange(first_end, stop_end) % self.max_length
        return int((self.position[w, rows] >= size - 1).sum())

    # -- draws ------------------------------------------------------------------------------
    def count(self, size: int) -> int:
        """Windows of ``size`` steps inside one episode, over every writer (after ``take_in``)."""
        counts = self.counts.get(size)
        if counts is None:
            counts = self.counts[size] = np.array(
                [self._inside(w, low + size - 1, high, size) for w, (low, high) in enumerate(self.known)], np.int64
            )
        return int(counts.sum())

    def inside(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray, size: int) -> np.ndarray:
        """Whether each window of ``size`` from ``step`` of ``(writer, stream)`` is one the index
        counts: stored from the last intake's low up to its high, inside one episode."""
        lows, highs = np.array(self.known, np.int64).T
        end = step + size - 1
        counted = (step >= lows[writer]) & (end < highs[writer])
        length = self.max_length
        span = self.position[writer, end % length, stream] - self.position[writer, step % length, stream]
        return counted & (span == size - 1)

    def real(self, ids: np.ndarray) -> np.ndarray:
        """For windows of ids ``[..., T]`` (taken in): which steps belong to the first step's
        episode (what ``replaybuf.samplers.episodes.pad_windows`` asks an index)."""
        step, column = np.divmod(ids, self.writers * self.batch_size)
        writer, stream = np.divmod(column, self.batch_size)
        position = self.position[writer, step % self.max_length, stream]
        return position == position[..., :1] + np.arange(ids.shape[-1])

    # -- sequences (replaybuf.samplers.sequences on each writer's segment) -------------------
    def eligible(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray, rule: SequenceRule) -> np.ndarray:
        """Whether each (writer, step, stream) is an eligible learning start of ``rule`` among
        the steps taken in (with ``period > 1``, of a known position: see the module)."""
        found = np.zeros(step.shape, bool)
        for w in np.unique(writer).tolist():
            mine = writer == w
            ring, at, streams = self._ring(w), step[mine], stream[mine]
            ok = (at >= ring.first_valid_step()) & (at < ring.steps)
            ok &= eligible(self.position[w].reshape(-1), ring, at * self.batch_size + streams, rule)
            if rule.period > 1 and self.restarted[w]:
                ok &= self.position[w, at % self.max_length, streams] < at - self.restarted[w]
            found[mine] = ok
        return found

    def sequences(
        self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray, rule: SequenceRule
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, mask, learn)`` ``[N, burn_in + num_steps]`` of the sequences from the learning
        starts (writer, step, stream) ``[N]``; ids are the buffer's."""
        length, streams = rule.burn_in + rule.num_steps, self.writers * self.batch_size
        ids, mask = np.empty((step.size, length), np.int64), np.empty((step.size, length), bool)
        learn = np.empty_like(mask)
        for w in np.unique(writer).tolist():
            mine = writer == w
            local = step[mine] * self.batch_size + stream[mine]
            window, mask[mine], learn[mine] = sequence_windows(
                self.position[w].reshape(-1), self._ring(w), local, rule.burn_in, rule.num_steps
            )
            at, column = np.divmod(window, self.batch_size)
            ids[mine] = at * streams + w * self.batch_size + column
        return ids, mask, learn

    def _ring(self, w: int) -> StreamRing:
        """Writer ``w``'s segment as a ring holding the steps taken in (its ids: ``step * batch_size + stream``)."""
        low, high = self.known[w]
        ring = StreamRing(self.batch_size, self.max_length)
        ring.reset(high, low)
        return ring


class _Fields:
    """The records of some steps seen as the flat leaves ``markers`` reads (by leaf index)."""

    def __init__(self, records: np.ndarray, names: list[str]):
        self._records, self._names = records, names

    def __getitem__(self, index: int) -> np.ndarray:
        return self._records[self._names[index]]

    def __len__(self) -> int:
        return len(self._names)
