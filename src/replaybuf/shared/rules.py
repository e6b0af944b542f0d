"""The learner's sample-count rules over a ``SharedReplayBuffer``'s writer segments.

Each writer's segment is a ``StreamRing`` of its steps the learner has taken in, with its own
``RuledSampler`` (replaybuf.samplers.rules: counts, versions, its share of the epoch) over
local ids ``step * batch_size + stream``; ``replaybuf.samplers.parts`` splits every batch over
the segments so that it is what one ``RuledSampler`` over all the items would draw. Before
each draw the learner takes in the steps each writer committed since the last one (their
version field is read from the records: a writer tags its adds) and drops the starts of steps
a writer is overwriting now. A writer that lapped the learner (or a clear or load under it)
restarts its segment at its oldest whole step; the items it overwrote unseen were never
eligible. ``sampler="fifo"`` takes the oldest starts by step (each writer's t-th step is as
old as the others' t-th), in id order within a step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.ring import StreamRing, WriterCursors
from replaybuf.samplers.parts import EpochSplit, split_counts
from replaybuf.samplers.rules import RuledSampler, SampleRules
from replaybuf.samplers.uniform import UniformSampler

__all__ = ["SegmentRules"]


class SegmentRules:
    """``rules`` over ``writers`` segments of ``max_length`` steps x ``batch_size`` streams."""

    def __init__(self, rules: SampleRules, names: list[str], writers: int, batch_size: int, max_length: int, name: str):
        self.rules, self.names = rules, names
        self.writers, self.batch_size, self.max_length = writers, batch_size, max_length
        self.streams = writers * batch_size
        part = SampleRules(  # an epoch's last batch is the split's to drop, not a part's
            rules.replacement, rules.max_times_sampled, rules.fifo, rules.max_staleness, rules.version, False
        )
        self.rings = [StreamRing(batch_size, max_length, name) for _ in range(writers)]
        self.parts = [RuledSampler(UniformSampler(), part, ring) for ring in self.rings]
        self.epochs = EpochSplit(writers)
        self.policy_version = 0

    # -- intake -----------------------------------------------------------------------------
    def take_in(self, commits: WriterCursors, records: np.ndarray) -> None:
        """Take in every writer's steps committed since the last intake; drop the starts of
        steps being overwritten now."""
        lows, highs = commits.bound_lists()
        for w, (part, ring) in enumerate(zip(self.parts, self.rings, strict=True)):
            low, high = lows[w], highs[w]
            if high < ring.steps or low > ring.steps:  # cleared or loaded under us, or lapped
                part.cleared()
                self.epochs.left[w] = 0
                ring.reset(low, low)
            if high > ring.steps:
                self._add_steps(w, ring.steps, high, records)
            stale = np.arange(ring.first_valid_step(), max(low, ring.first_valid_step()))
            if stale.size:
                part.live.remove((stale[:, None] * self.batch_size + np.arange(self.batch_size)).ravel())

    def _add_steps(self, w: int, first: int, stop: int, records: np.ndarray) -> None:
        """Steps ``[first, stop)`` of writer ``w`` into its part, one step at a time (as adds)."""
        part, ring, version = self.parts[w], self.rings[w], self.rules.version
        arrays: list[Any] = [None] * len(self.names)
        versions = None
        if version is not None:
            rows = (w * self.max_length + np.arange(first, stop) % self.max_length) * self.batch_size
            versions = records[self.names[version]][rows[:, None] + np.arange(self.batch_size)]
        for i, step in enumerate(range(first, stop)):
            ring.steps = step + 1
            if versions is not None:
                arrays[version] = versions[i]
            part.added(ring, arrays)

    def cleared(self) -> None:
        for part, ring in zip(self.parts, self.rings, strict=True):
            part.cleared()
            ring.reset()
        self.epochs.cleared()

    # -- draws ------------------------------------------------------------------------------
    def draw(self, rng: np.random.Generator, count: int, num_steps: int | None) -> tuple[np.ndarray, float, Any]:
        """``count`` starts under the rules: ``(ids [count] or [count, T], probability, epoch or
        None)`` with the buffer's ids (fewer at an epoch's end)."""
        if not self.rules.replacement:
            return self._epoch_draw(rng, count, num_steps)
        eligible = np.array([self._eligible(part, ring, num_steps) for part, ring in self._pairs()], np.int64)
        distinct = self.rules.max_times_sampled is not None or self.rules.fifo
        if self.rules.fifo:
            counts = self._oldest(count, num_steps, eligible)
        else:
            counts = split_counts(rng, count, eligible, distinct)
        ids = self._take(rng, counts, num_steps)
        if self.rules.fifo:  # oldest first
            ids = ids[np.argsort(ids if num_steps is None else ids[:, 0], kind="stable")]
        elif np.count_nonzero(counts) > 1:  # writer by writer: mixed, so each position is any writer's
            ids = ids[rng.permutation(ids.shape[0])]
        return ids, 1.0 / int(eligible.sum()), None

    def _eligible(self, part: RuledSampler, ring: StreamRing, num_steps: int | None) -> int:
        """The part's eligible starts of windows of ``num_steps``: its eligible items less those
        of its newest ``num_steps - 1`` steps (no window fits there), without a pass over them all."""
        count = part.num_eligible()
        if num_steps is not None and num_steps > 1:
            first = max(ring.steps - num_steps + 1, ring.first_valid_step())
            count -= int(
                np.count_nonzero(part.live.contains(np.arange(first * self.batch_size, ring.steps * self.batch_size)))
            )
        return count

    def _epoch_draw(self, rng: np.random.Generator, count: int, num_steps: int | None) -> tuple:
        def begin() -> list[int]:
            return [part.begin_epoch(rng, ring, num_steps) for part, ring in self._pairs()]

        def take(counts: np.ndarray) -> tuple[np.ndarray, int, list[int]]:
            ids = self._take(rng, counts, num_steps)
            return ids, ids.shape[0], [part.epoch_left() for part in self.parts]

        found, size, epoch = self.epochs.batch(rng, count, begin, take, self.rules.drop_remainder)
        ids = np.concatenate(found)
        if self.writers > 1:  # writer by writer: mixed, so each position is any writer's
            ids = ids[rng.permutation(ids.shape[0])]
        return ids, 1.0 / size, epoch

    def _take(self, rng: np.random.Generator, counts: np.ndarray, num_steps: int | None) -> np.ndarray:
        """Each part's draw of ``counts[w]`` starts, as the buffer's ids, writer by writer."""
        found = []
        for w, (part, ring) in enumerate(self._pairs()):
            if counts[w]:
                local, _, _ = part.draw(rng, ring, int(counts[w]), num_steps)
                found.append(self.global_ids(w, local))
        shape = (0,) if num_steps is None else (0, num_steps)
        return np.concatenate(found) if found else np.zeros(shape, np.int64)

    def _oldest(self, count: int, num_steps: int | None, eligible: np.ndarray) -> np.ndarray:
        """How many of the ``count`` oldest eligible starts (by step, then id) each writer holds."""
        split_counts(np.random.default_rng(0), count, eligible, True)  # too few: EmptyBufferError
        fitting = []
        for w, (part, ring) in enumerate(self._pairs()):
            live = part.live.ids()
            live = live[live < (ring.steps - (num_steps or 1) + 1) * self.batch_size]
            fitting.append(np.sort(self.global_ids(w, live))[:count])
        oldest = np.sort(np.concatenate(fitting))[:count]
        return np.bincount((oldest % self.streams) // self.batch_size, minlength=self.writers)

    def forget(self, ids: np.ndarray) -> None:
        """Drop starts (the buffer's ids) a writer overwrote while they were read."""
        step, column = np.divmod(ids, self.streams)
        writer, stream = np.divmod(column, self.batch_size)
        for w in np.unique(writer).tolist():
            mine = writer == w
            self.parts[w].live.remove(np.unique(step[mine] * self.batch_size + stream[mine]))

    def global_ids(self, w: int, local: np.ndarray) -> np.ndarray:
        step, stream = np.divmod(local, self.batch_size)
        return step * self.streams + w * self.batch_size + stream

    def _pairs(self) -> list[tuple[RuledSampler, StreamRing]]:
        return list(zip(self.parts, self.rings, strict=True))

    # -- versions, counts -------------------------------------------------------------------
    def set_policy_version(self, version: int) -> None:
        self.policy_version = version
        for part in self.parts:
            part.set_policy_version(version)

    def num_eligible(self) -> int:
        return sum(part.num_eligible() for part in self.parts)

    # -- checkpoints (replaybuf.shared.checkpoint) ------------------------------------------
    def writer_state(self, w: int, first: int, stop: int) -> dict:
        """Writer ``w``'s rules over its saved steps ``[first, stop)``, as a ``RuledSampler``'s
        ``sample_rules`` over local ids (steps it took in later count as unsampled)."""
        part, ring = self.parts[w], self.rings[w]
        ids = (np.arange(first, stop)[:, None] * self.batch_size + np.arange(self.batch_size)).ravel()
        times = np.where(ids < ring.steps * self.batch_size, part.times[ids % ring.capacity], 0).astype(np.int64)
        order, cursor = part.order, part.cursor
        kept = (order >= first * self.batch_size) & (order < stop * self.batch_size)
        return {
            "times": times,
            "policy_version": self.policy_version,
            "epoch": self.epochs.epoch,
            "order": order[kept],
            "cursor": int(kept[:cursor].sum()),
        }

    def joined(self, per_writer: list[dict]) -> dict:
        """Writers' ``writer_state``s over the same steps as one ring's ``sample_rules`` (the
        buffer's ids): times step-major, the epoch's order every writer's drawn part first."""
        times = np.stack([s["times"].reshape(-1, self.batch_size) for s in per_writer], axis=1).ravel()
        drawn = [self.global_ids(w, s["order"][: s["cursor"]]) for w, s in enumerate(per_writer)]
        left = [self.global_ids(w, s["order"][s["cursor"] :]) for w, s in enumerate(per_writer)]
        order = np.concatenate(drawn + left).astype(np.int64)
        return {**per_writer[0], "times": times, "order": order, "cursor": sum(d.size for d in drawn)}

    def split(self, rules: dict) -> list[dict]:
        """One ring's ``sample_rules`` (the buffer's ids) as each writer's (``joined`` undone)."""
        times = rules["times"].reshape(-1, self.writers, self.batch_size)
        order, cursor = rules["order"], int(rules["cursor"])
        step, column = np.divmod(order, self.streams)
        writer, stream = np.divmod(column, self.batch_size)
        local = step * self.batch_size + stream
        drawn = np.arange(order.size) < cursor
        return [  # (a NumPy buffer's "live", the order of its live ids, has no meaning per writer)
            {
                "times": times[:, w].ravel(),
                "policy_version": rules["policy_version"],
                "epoch": rules["epoch"],
                "order": local[writer == w],
                "cursor": int((drawn & (writer == w)).sum()),
            }
            for w in range(self.writers)
        ]

    def check_state(self, per_writer: list[dict | None], segments: list[tuple[int, int]]) -> list:
        """Each writer's checked rules for its loaded ``(steps, count)`` (None: saved without
        rules, its items uncounted); CheckpointError naming the key when malformed."""
        checked = []
        for w, (steps, count) in enumerate(segments):
            ring = StreamRing(self.batch_size, self.max_length)
            ring.reset(steps, steps - count)
            state = {"steps": steps, **({} if per_writer[w] is None else {"sample_rules": per_writer[w]})}
            checked.append(self.parts[w].check_state(ring, state, count * self.batch_size))
        return checked

    def load_state(self, checked: list, segments: list[tuple[int, int]], records: np.ndarray) -> None:
        """Restore checked rules over the loaded records (each writer's ``(steps, count)``)."""
        self.cleared()
        for w, (steps, count) in enumerate(segments):
            part, ring = self.parts[w], self.rings[w]
            ring.reset(steps, steps - count)
            part.load_state(ring, checked[w])
            part.loaded(ring, _SegmentFields(records, self.names, w, self.max_length, self.batch_size))
        saved = [rules for _, rules in checked if rules is not None]
        if saved:
            self.policy_version = int(saved[0]["policy_version"])
            sizes = sum(part.order.shape[0] for part in self.parts)
            self.epochs.restore(saved[0]["epoch"], sizes, [part.epoch_left() for part in self.parts])
        self.set_policy_version(self.policy_version)


class _SegmentFields:
    """Writer ``w``'s records as the flat fields a ``RuledSampler`` reads after a load (by leaf
    index, one row per local slot ``step % max_length * batch_size + stream``)."""

    def __init__(self, records: np.ndarray, names: list[str], w: int, max_length: int, batch_size: int):
        self._records, self._names = records, names
        self._rows = slice(w * max_length * batch_size, (w + 1) * max_length * batch_size)

    def __getitem__(self, index: int) -> np.ndarray:
        return self._records[self._names[index]][self._rows]
