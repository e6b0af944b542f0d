"""Goal ids for hindsight relabelling: which stored item's achieved goal replaces a sampled goal.

``EpisodeEnds`` keeps, per slot, the step at which the item's episode ended (-1 while the
episode is still open, i.e. its end is the newest stored step of its stream), written once per
episode when it ends (amortised O(1) per add). With the episode index's positions (the
episode's start is ``step - position``) that bounds every sampled item's episode to the steps
that are stored: never a step of another episode, an overwritten one or one not yet written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeIndex

__all__ = ["STRATEGIES", "UNIT", "EpisodeEnds", "kernels", "threshold"]

STRATEGIES = ("future", "final", "episode")
UNIT = 2.0**-53  # a 53-bit draw times this is uniform in [0, 1)


class EpisodeEnds:
    """The end step of every stored item's episode, kept up to date on add."""

    def __init__(self, ring: StreamRing, index: EpisodeIndex):
        self.ring = ring
        self.index = index
        self.end = np.full(ring.capacity, -1, np.int64)
        self.finished = 0  # stored items whose episode has ended
        self.version = 0  # counts the changes of which items have a finished episode

    def cleared(self) -> None:
        self.end.fill(-1)
        self.finished = 0
        self.version += 1

    def added(self) -> None:
        """Account for the step the episode index has just recorded (``ring.steps - 1``)."""
        ring, step = self.ring, self.ring.steps - 1
        batch, first = ring.batch_size, ring.first_valid_step()
        new = slice(ring.slot(step), ring.slot(step) + batch)
        position = self.index.position[new]
        gone = int((self.end[new] >= 0).sum())  # finished items these slots held
        if gone:
            self.finished -= gone
            self.version += 1
        self.end[new] = -1
        if step > first:  # an episode begun by a start marker closes the one before it
            previous = ring.slot(step - 1)
            for stream in np.flatnonzero((position == 0) & (self.end[previous : previous + batch] < 0)):
                self._close(int(stream), step - 1, first)
        for stream in np.flatnonzero(self.index.ended):
            self._close(int(stream), step, first)

    def _close(self, stream: int, step: int, first: int) -> None:
        """Write ``step`` as the end of the stored items of ``stream``'s episode ending there."""
        ring = self.ring
        slot = ring.slot(step) + stream
        start = max(step - int(self.index.position[slot]), first)
        steps = np.arange(start, step + 1)
        self.end[(steps % ring.max_length) * ring.batch_size + stream] = step
        self.finished += steps.size
        self.version += 1

    def rebuild(self) -> None:
        """Derive the ends from the episode index (a loaded checkpoint, a reopened storage)."""
        ring = self.ring
        self.cleared()
        first, steps, batch = ring.first_valid_step(), ring.steps, ring.batch_size
        if steps == first:
            return
        t = np.arange(first, steps)
        slots = ((t % ring.max_length) * batch)[:, None] + np.arange(batch)
        position = self.index.position[slots]
        boundary = np.zeros_like(position, dtype=bool)  # the episode ends with this step
        boundary[:-1] = position[1:] == 0
        boundary[-1] = self.index.ended
        marked = np.where(boundary, t[:, None], np.iinfo(np.int64).max)
        following = np.minimum.accumulate(marked[::-1], axis=0)[::-1]  # the first end at or after each step
        self.end[slots] = np.where(following == np.iinfo(np.int64).max, -1, following)
        self.finished = int((self.end >= 0).sum())

    def arguments(self) -> tuple:
        """The compiled kernels' arguments after the coin threshold and the strategy's code:
        the ends, the positions and the ring's geometry."""
        ring = self.ring
        return self.end, self.index.position, ring.steps, ring.first_valid_step(), ring.batch_size, ring.capacity

    def pick(self, last_ids: np.ndarray, raw: np.ndarray, ratio: float, strategy: str) -> tuple[np.ndarray, np.ndarray]:
        """``(coins, goal_slots)`` for elements whose (last) steps have ids ``last_ids`` (1-D):
        ``coins[i]`` says whether element i is relabelled (``raw[i] >> 11 < ratio * 2**53``), and
        ``goal_slots`` holds the slots of the relabelled elements' goals, in order: a step of the
        element's episode chosen by ``strategy`` (``"future"``: at or after the element's step,
        ``"final"``: the episode's last stored step, ``"episode"``: any stored step of it;
        uniformly, as ``floor((raw[n + i] >> 11) * 2**-53 * span)``). ``raw``: ``2 n`` uint64 draws. The NumPy twin of
        the compiled ``_hindsight_kernels.pick`` (same draws)."""
        ring, n = self.ring, last_ids.shape[0]
        coins = (raw[:n] >> np.uint64(11)) < threshold(ratio)
        chosen, draws = last_ids[coins], raw[n:][coins]
        slots = chosen % ring.capacity
        step = chosen // ring.batch_size
        end = self.end[slots]
        end = np.where(end < 0, ring.steps - 1, end)  # -1: still open, it ends at the newest step
        if strategy == "final":
            goal = end
        else:
            low = (
                step if strategy == "future" else np.maximum(step - self.index.position[slots], ring.first_valid_step())
            )
            goal = low + ((draws >> np.uint64(11)).astype(np.float64) * UNIT * (end - low + 1)).astype(np.int64)
        return coins, (slots + (goal - step) * ring.batch_size) % ring.capacity


def threshold(ratio: float) -> np.uint64:
    """The coin threshold of ``ratio``: an element is relabelled when its draw ``>> 11`` is below it."""
    return np.uint64(min(int(ratio * 2**53), 2**53))


_compiled: Any = False  # not looked up yet; then the numba kernels module, or None without numba


def kernels(compiled: bool | None = None) -> Any:
    """The compiled kernels (``_hindsight_kernels``: ``pick``, ``relabel``) when ``compiled`` is
    None and numba is importable (compiled or loaded from the disk cache once), None (NumPy)
    when False; True insists on numba (ImportError without it)."""
    global _compiled
    if compiled is False:
        return None
    if _compiled is False:
        try:
            from replaybuf.samplers import _hindsight_kernels

            _hindsight_kernels.warm_up()
            _compiled = _hindsight_kernels
        except ImportError:
            _compiled = None
    if _compiled is None and compiled:
        raise ImportError("compiled=True: numba is not installed (pip install 'replaybuf[fast]')")
    return _compiled
