"""Sample-count rules over the prioritized sampler: consumption and staleness by priority.

``RuledPrioritizedSampler`` keeps ``RuledSampler``'s bookkeeping (draw counts, versions, the
live set of eligible starts, checkpoints) and draws with the ``PrioritizedSampler`` it wraps.
A start that stops being eligible (drawn ``max_times_sampled`` times, or older than
``policy_version - max_staleness``) leaves every tree of that sampler: its mass becomes 0 in
the sum trees and it leaves the min tree, so the draws' probabilities and importance weights
are over the eligible starts exactly. Its priority is kept aside (``kept``) for checkpoints
and for a buffer that loads them with looser rules. Under ``max_times_sampled`` a batch's
starts are distinct (``PrioritizedSampler.distinct``). Epochs and FIFO order are uniform
notions, refused on a prioritized buffer (``check_sample_rules``; docs/sample_rules.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.refusals import empty
from replaybuf.ring import StreamRing
from replaybuf.samplers.prioritized import PrioritizedSampler, priority_update
from replaybuf.samplers.rules import RuledSampler, SampleRules
from replaybuf.samplers.sequences import SequenceRule

__all__ = ["RuledPrioritizedSampler"]


class RuledPrioritizedSampler(RuledSampler):
    """A ``PrioritizedSampler`` (``base``) whose draws follow ``rules`` (no epochs, no fifo)."""

    def __init__(self, base: PrioritizedSampler, rules: SampleRules, ring: StreamRing):
        super().__init__(base, rules, ring, compiled=base.compiled)
        self.kept = np.zeros(ring.capacity)  # the masses of stored starts out of the trees
        base.distinct = rules.max_times_sampled is not None

    # -- what the prioritized buffers read of their sampler ----------------------------------------
    @property
    def alpha(self) -> float:
        return self.base.alpha

    @property
    def epsilon(self) -> float:
        return self.base.epsilon

    @property
    def beta_source(self) -> Any:
        return self.base.beta_source

    @beta_source.setter
    def beta_source(self, value: Any) -> None:
        self.base.beta_source = value

    def beta(self) -> float:
        return self.base.beta()

    def new_priorities(self, priorities: Any, count: int) -> np.ndarray:
        return self.base.new_priorities(priorities, count)

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        """``PrioritizedSampler.update_priorities``; stored starts that are not eligible take
        the new priority (kept for checkpoints) but stay out of the trees."""
        self.base.update_priorities(ring, ids, priorities)
        ids = priority_update(ids, priorities)[0]
        stored = ids[(ids >= ring.first_valid_step() * ring.batch_size) & (ids < ring.steps * ring.batch_size)]
        out = np.unique(stored[~self.live.contains(stored)])
        if out.shape[0]:
            self._left(out)

    # -- draws ----------------------------------------------------------------------------------
    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        self._check_eligible(ring, sample_batch_size)
        ids, probabilities, extras = self.base.draw(rng, ring, sample_batch_size, num_steps)
        self._counted(ring)
        return ids, probabilities, extras

    def draw_sequences(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        self._check_eligible(ring, sample_batch_size)
        ids, probabilities, extras = self.base.draw_sequences(rng, ring, sample_batch_size, rule)
        self._counted(ring)
        return ids, probabilities, extras

    def _check_eligible(self, ring: StreamRing, size: int | None) -> None:
        """EmptyBufferError when nothing is stored, or too few eligible starts (EmptyBufferError
        under a rate limiter makes the sample wait for adds: ``StreamBuffer._drawn``)."""
        if ring.steps == 0:
            raise empty(ring.name)
        wanted = 1 if size is None else size
        if self.live.size == 0 or (self.rules.max_times_sampled is not None and self.live.size < wanted):
            raise self._too_few(wanted, self.live.size)

    def _counted(self, ring: StreamRing) -> None:
        """Count the draw of the base's last starts; the consumed leave the trees."""
        limit = self.rules.max_times_sampled
        if limit is None:
            return
        starts = self.base.drawn
        self._sampled(ring, starts)
        consumed = starts[self.times[starts % ring.capacity] >= limit]
        if consumed.shape[0]:
            self._left(consumed)

    def _left(self, ids: np.ndarray) -> None:
        """``ids`` stopped being eligible: their masses are kept aside and leave the trees."""
        slots = ids % self.ring.capacity
        self.kept[slots] = self.base.sums.values(slots)
        self.base.exclude(slots)

    # -- the rest of the protocol -------------------------------------------------------------------
    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        return self._eligible_mass(self.base.mass(ring, num_steps))

    def sequence_mass(self, ring: StreamRing, rule: SequenceRule) -> tuple[float, float]:
        return self._eligible_mass(self.base.sequence_mass(ring, rule))

    @staticmethod
    def _eligible_mass(found: tuple[float, float]) -> tuple[float, float]:
        """``(mass, smallest)`` of the eligible starts; ``smallest`` 1.0 when none is (the min
        tree is then empty), as the protocol says of a buffer without priorities."""
        mass, smallest = found
        return (mass, smallest) if np.isfinite(smallest) else (mass, 1.0)

    def _base_added(self, ring: StreamRing, arrays: Any, priorities: Any) -> None:
        self.base.added(ring, arrays, priorities)

    def state(self, ring: StreamRing) -> dict:
        """As ``RuledSampler.state``, the masses of the starts out of the trees from ``kept``."""
        state = super().state(ring)
        ids = ring.stream_ids().T.ravel()
        out = ~self.live.contains(ids)
        state["priorities"]["mass"][out] = self.kept[ids[out] % ring.capacity]
        return state
