"""Prioritized draws of episode-exact windows in a ``SharedReplayBuffer``: a sum tree per length.

For each window length T asked for (the last four kept), the learner keeps a sum tree over
every record slot whose leaf is the slot's priority mass when the window of T starting
there lies inside one episode and the episode index took it in whole (from the writer's
oldest whole step, ending below its newest), else 0. Before a draw, the rows whose windows
came in or left since the tree last saw its writer are set again (a writer that restarted,
was cleared or loaded is set whole); a priority update sets the updated slots. A draw
descends that tree, so it never meets a window that crosses an end, and
``P(i) = mass_i / (mass of the valid starts)``, as ``PrioritizedReplayBuffer(respect_episodes=True)``.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from replaybuf.refusals import no_episode_window
from replaybuf.ring import WriterCursors
from replaybuf.samplers.sumtree import SumTree
from replaybuf.shared.episodes import SegmentEpisodes
from replaybuf.shared.priorities import SegmentPriorities

__all__ = ["SegmentWindows"]

_TREES = 4  # window lengths whose trees are kept (least recently used dropped)


class SegmentWindows:
    """Sum trees of the masses of episode-exact window starts, one per window length."""

    def __init__(self, priorities: SegmentPriorities, episodes: SegmentEpisodes):
        self.priorities, self.episodes = priorities, episodes
        self.trees: OrderedDict[int, tuple[SumTree, list]] = OrderedDict()  # T -> (tree, bounds seen per writer)

    def cleared(self) -> None:
        self.trees.clear()

    def take_in(self, cursors: WriterCursors, records: np.ndarray) -> tuple[list[int], list[int]]:
        """Bring the episode index and then the priorities to the writers' committed steps;
        returns the bounds both now hold (the trees follow them when drawn from)."""
        self.episodes.take_in(cursors, records)
        lows, highs = (list(bounds) for bounds in zip(*self.episodes.known, strict=True))
        self.priorities.take_in(lows, highs)
        return lows, highs

    def draw(
        self, rng: np.random.Generator, count: int, size: int, lows: list[int], highs: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``count`` starts of windows of ``size`` by priority (after ``take_in``):
        ``(writer, step, stream, probabilities, weights)``.

        Raises:
            EmptyBufferError: no stored window of ``size`` lies inside one episode.
        """
        tree = self._tree(size)
        total = tree.root()
        if total <= 0:
            raise no_episode_window(size, padding=False)
        return self.priorities.draw(rng, count, size, lows, highs, windows=tree)

    def updated(self, writer: np.ndarray, step: np.ndarray, stream: np.ndarray, masses: np.ndarray) -> None:
        """The priorities of these stored items were set to ``masses``: so are the leaves of the
        windows they start, in every tree, where the window lies inside one episode."""
        slots = (writer * self.priorities.max_length + step % self.priorities.max_length) * self.priorities.batch_size
        slots += stream
        for size, (tree, _) in self.trees.items():
            tree.update(slots, np.where(self.episodes.inside(writer, step, stream, size), masses, 0.0))

    def _tree(self, size: int) -> SumTree:
        """The tree of windows of ``size``, brought up to the episode index's bounds."""
        entry = self.trees.get(size)
        if entry is None:
            entry = self.trees[size] = (SumTree(self.priorities.sums.capacity), [None] * self.priorities.writers)
            if len(self.trees) > _TREES:
                self.trees.popitem(last=False)
        self.trees.move_to_end(size)
        tree, seen = entry
        for w, bounds in enumerate(self.episodes.known):
            if seen[w] != bounds:
                self._follow(tree, w, seen[w], bounds, size)
                seen[w] = bounds
        return tree

    def _follow(self, tree: SumTree, w: int, old: tuple[int, int] | None, new: tuple[int, int], size: int) -> None:
        """Writer ``w``'s whole steps went from ``old`` to ``new``: empty the rows that left, set
        the rows whose windows may have come in (all of them when the writer started over)."""
        low, high = new
        segment = self.priorities.segment
        if old is None or high < old[1] or low > old[1]:  # first sight, cleared or loaded, or steps missed
            tree.update_range(w * segment, (w + 1) * segment, 0.0)
            self._set(tree, w, low, high, size)
            return
        old_low, old_high = old
        self._set(tree, w, old_low, min(low, old_high), size, empty=True)  # steps that left
        self._set(tree, w, max(low, old_high - size + 1), high, size)

    def _set(self, tree: SumTree, w: int, first: int, stop: int, size: int, empty: bool = False) -> None:
        """Set the leaves of writer ``w``'s steps ``[first, stop)``: the start's mass where its
        window lies inside one episode (as the index counts it), else 0 (``empty``: all 0)."""
        if stop <= first:
            return
        priorities = self.priorities
        batch = priorities.batch_size
        step = np.repeat(np.arange(first, stop), batch)
        stream = np.tile(np.arange(batch), stop - first)
        writer = np.full(step.size, w)
        slots = (w * priorities.max_length + step % priorities.max_length) * batch + stream
        if empty:
            tree.update(slots, np.zeros(slots.size))
            return
        inside = self.episodes.inside(writer, step, stream, size)
        tree.update(slots, np.where(inside, priorities.sums.values(slots), 0.0))
