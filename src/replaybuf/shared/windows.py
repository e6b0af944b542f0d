"""Draws of window and sequence starts in a ``SharedReplayBuffer``: a sum tree per rule.

A rule is a ``SequenceRule`` (replaybuf.samplers.sequences): sequences from learning starts at
episode positions that are multiples of ``period``; an episode-exact window of T steps is the
rule ``(num_steps=T, period=1, pad=False)``. For each rule asked for (the last four kept),
the learner keeps a sum tree over every record slot whose leaf is the slot's mass (its
priority mass; 1 when sampling uniformly) when the step is an eligible start of the rule as
the episode index took it in (``SegmentEpisodes.eligible``), else 0. Before a draw, the rows
whose eligibility came in or left since the tree last saw its writer are set again (a writer
that restarted, was cleared or loaded is set whole); a priority update sets the updated
slots. A draw descends that tree, so it never meets an ineligible start, and
``P(i) = mass_i / (mass of the eligible starts)``, as the NumPy buffers draw.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from replaybuf.errors import EmptyBufferError
from replaybuf.refusals import no_episode_window
from replaybuf.ring import WriterCursors
from replaybuf.samplers.sequences import SequenceRule
from replaybuf.samplers.sumtree import SumTree
from replaybuf.shared.episodes import SegmentEpisodes
from replaybuf.shared.priorities import SegmentPriorities, slot_steps

__all__ = ["SegmentWindows"]

_TREES = 4  # rules whose trees are kept (least recently used dropped)
_REDRAWS = 64  # rounds of redrawing a uniform target that rounded onto an empty slot


class SegmentWindows:
    """Sum trees of the masses of eligible starts, one per rule (see the module).

    ``priorities`` None: every eligible start has mass 1 (uniform draws).
    """

    def __init__(self, priorities: SegmentPriorities | None, episodes: SegmentEpisodes):
        self.priorities, self.episodes = priorities, episodes
        self.segment = episodes.max_length * episodes.batch_size
        self.trees: OrderedDict[tuple, tuple[SequenceRule, SumTree, list]] = OrderedDict()  # key -> (rule, tree, seen)

    def cleared(self) -> None:
        self.trees.clear()

    def take_in(self, cursors: WriterCursors, records: np.ndarray) -> tuple[list[int], list[int]]:
        """Bring the episode index and then the priorities to the writers' committed steps;
        returns the bounds both now hold (the trees follow them when drawn from)."""
        self.episodes.take_in(cursors, records)
        lows, highs = (list(bounds) for bounds in zip(*self.episodes.known, strict=True))
        if self.priorities is not None:
            self.priorities.take_in(lows, highs)
        return lows, highs

    def draw(
        self, rng: np.random.Generator, count: int, rule: SequenceRule, lows: list[int], highs: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``count`` eligible starts of ``rule`` by mass (after ``take_in``):
        ``(writer, step, stream, probabilities, weights)`` (weights None when uniform).

        Raises:
            EmptyBufferError: no stored step is an eligible start of ``rule``.
        """
        tree = self._tree(rule)
        total = tree.root()
        if total <= 0:
            if rule.period == 1 and not rule.pad:  # an episode-exact window (worded as before sequences)
                raise no_episode_window(rule.num_steps, padding=False)
            detail = f" from a position that is a multiple of period={rule.period}"
            raise no_episode_window(rule.num_steps, padding=not rule.pad, detail=detail)
        if self.priorities is not None:
            return self.priorities.draw(rng, count, 1 if rule.pad else rule.num_steps, lows, highs, windows=tree)
        slots = self._uniform_slots(rng, tree, count, total)
        writer, step, stream = slot_steps(slots, self.segment, self.episodes.batch_size, self.episodes.max_length, lows)
        return writer, step, stream, np.full(count, 1.0 / total, np.float32), None

    def updated(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray, masses: np.ndarray) -> None:
        """The priorities of these stored items were set to ``masses``: so are their leaves in
        every tree where the item is an eligible start."""
        slots = self._slot(writer, step, stream)
        for rule, tree, _ in self.trees.values():
            tree.update(slots, np.where(self.episodes.eligible(writer, step, stream, rule), masses, 0.0))

    def _uniform_slots(self, rng: np.random.Generator, tree: SumTree, count: int, total: float) -> np.ndarray:
        """``count`` slots with leaf 1, each equally likely: uniform targets in ``[0, total)``."""
        slots, todo = np.empty(count, np.int64), np.arange(count)
        for _ in range(_REDRAWS):
            found, mass = np.empty(todo.size, np.int64), np.empty(todo.size, np.float64)
            tree.kernels.find(tree.tree, tree.offsets, tree.arity, rng.random(todo.size) * total, found, mass)
            slots[todo] = found
            todo = todo[mass <= 0]  # rounding onto an empty slot
            if not todo.size:
                return slots
        raise EmptyBufferError(f"no eligible start found in {_REDRAWS} redraws")

    def _slot(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray) -> np.ndarray:
        return (writer * self.episodes.max_length + step % self.episodes.max_length) * self.episodes.batch_size + stream

    def _tree(self, rule: SequenceRule) -> SumTree:
        """The tree of ``rule``, brought up to the episode index's bounds."""
        entry = self.trees.get(rule.key)
        if entry is None:
            entry = self.trees[rule.key] = (
                rule,
                SumTree(self.episodes.writers * self.segment),
                [None] * self.episodes.writers,
            )
            if len(self.trees) > _TREES:
                self.trees.popitem(last=False)
        self.trees.move_to_end(rule.key)
        _, tree, seen = entry
        for w, bounds in enumerate(self.episodes.known):
            if seen[w] != bounds:
                self._follow(tree, w, seen[w], bounds, rule)
                seen[w] = bounds
        return tree

    def _follow(
        self, tree: SumTree, w: int, old: tuple[int, int] | None, new: tuple[int, int], rule: SequenceRule
    ) -> None:
        """Writer ``w``'s whole steps went from ``old`` to ``new``: empty the rows that left, set
        the rows whose eligibility may have come in (all of them when the writer started over)."""
        low, high = new
        if old is None or high < old[1] or low > old[1]:  # first sight, cleared or loaded, or steps missed
            tree.update_range(w * self.segment, (w + 1) * self.segment, 0.0)
            self._set(tree, w, low, high, rule)
            return
        old_low, old_high = old
        self._set(tree, w, old_low, min(low, old_high), rule, empty=True)  # steps that left
        self._set(tree, w, max(low, old_high - rule.num_steps + 1), high, rule)

    def _set(self, tree: SumTree, w: int, first: int, stop: int, rule: SequenceRule, empty: bool = False) -> None:
        """Set the leaves of writer ``w``'s steps ``[first, stop)``: the step's mass where it is an
        eligible start of ``rule`` (as the index took it in), else 0 (``empty``: all 0)."""
        if stop <= first:
            return
        batch = self.episodes.batch_size
        step = np.repeat(np.arange(first, stop), batch)
        stream = np.tile(np.arange(batch), stop - first)
        writer = np.full(step.size, w)
        slots = self._slot(writer, step, stream)
        if empty:
            tree.update(slots, np.zeros(slots.size))
            return
        masses = np.ones(slots.size) if self.priorities is None else self.priorities.sums.values(slots)
        tree.update(slots, np.where(self.episodes.eligible(writer, step, stream, rule), masses, 0.0))
