"""Goal ids for hindsight relabelling: which stored item's achieved goal replaces a sampled goal.

``EpisodeEnds`` keeps, per slot, the step at which the item's episode ended (-1 while the
episode is still open, i.e. its end is the newest stored step of its stream), written once per
episode when it ends (amortised O(1) per add). With the episode index's positions (the
episode's start is ``step - position``) that bounds every sampled item's episode to the steps
that are stored: never a step of another episode, an overwritten one or one not yet written.
"""

from __future__ import annotations

import numpy as np

from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeIndex

__all__ = ["STRATEGIES", "EpisodeEnds"]

STRATEGIES = ("future", "final", "episode")


class EpisodeEnds:
    """The end step of every stored item's episode, kept up to date on add."""

    def __init__(self, ring: StreamRing, index: EpisodeIndex):
        self.ring = ring
        self.index = index
        self.end = np.full(ring.capacity, -1, np.int64)

    def cleared(self) -> None:
        self.end.fill(-1)

    def added(self) -> None:
        """Account for the step the episode index has just recorded (``ring.steps - 1``)."""
        ring, step = self.ring, self.ring.steps - 1
        batch, first = ring.batch_size, ring.first_valid_step()
        new = slice(ring.slot(step), ring.slot(step) + batch)
        position = self.index.position[new]
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

    def rebuild(self) -> None:
        """Derive the ends from the episode index (a loaded checkpoint, a reopened storage)."""
        ring = self.ring
        self.end.fill(-1)
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

    def goal_ids(self, rng: np.random.Generator, last_ids: np.ndarray, strategy: str) -> np.ndarray:
        """Ids of the goals for windows ending at ``last_ids`` (each inside one episode):
        ``"future"`` a step of the episode at or after the window's last step, ``"final"`` its
        last stored step, ``"episode"`` any of its stored steps; drawn uniformly."""
        ring = self.ring
        batch = ring.batch_size
        slots = last_ids % ring.capacity
        stream, step = last_ids % batch, last_ids // batch
        end = self.end[slots]
        end = np.where(end < 0, ring.steps - 1, end)
        if strategy == "final":
            return end * batch + stream
        if strategy == "future":
            low = step
        else:
            low = np.maximum(step - self.index.position[slots], ring.first_valid_step())
        span = (end - low + 1).astype(np.uint64)
        draws = rng.bit_generator.random_raw(span.size).reshape(span.shape) % span
        return (low + draws.astype(np.int64)) * batch + stream
