"""The sampler protocols: which ids a read returns. Samplers never know where the bytes live.

A buffer holds its lock around every call. ``ring`` is the buffer's ``StreamRing`` (its
counters and id arithmetic); ids are logical ids (they grow across wraparound).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from replaybuf.ring import StreamRing

__all__ = ["PrioritySampler", "Sampler"]


@runtime_checkable
class Sampler(Protocol):
    """What every sampler does; the buffer's ``get_next``, datasets, Ray shards and
    checkpoints go through these calls only."""

    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(ids, probabilities, extras)``: ``ids`` int64 shaped ``[B, T]``, ``[B]``, ``[T]``
        or ``[]`` like the sample; ``probabilities`` float32, one per drawn element (``[B]``
        or ``[]``); ``extras`` the ``SampleInfo`` attributes that apply (``weights``,
        ``mask``). Raises ``EmptyBufferError`` when nothing can be drawn."""

    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        """``(mass, smallest)`` for windows of ``num_steps``: ``mass`` is what a draw
        normalises by, so ``P(element) = its mass / mass`` (uniform: 1 per valid start);
        ``smallest`` is the smallest priority mass stored (1.0 without priorities). 0 mass:
        no window of that length can be drawn. What splits a batch over shards by mass."""

    def added(self, ring: StreamRing, arrays: Any, priorities: Any = None) -> None:
        """One step was written to every stream (``arrays``: its flat leaves,
        ``[batch_size, ...]``); ``ring.steps`` already counts it. ``priorities``: the add's
        (checked by a prioritized sampler's ``new_priorities``), None when none were given;
        a sampler without priorities is only ever given None."""

    def cleared(self) -> None:
        """The buffer forgot every item."""

    def reopened(self, ring: StreamRing, fields: Any) -> None:
        """A storage reopened with items (a memmap folder): derive what the sampler keeps
        from the stored leaves ``fields`` (indexed by slot)."""

    def state(self, ring: StreamRing) -> dict:
        """The sampler's checkpoint keys, merged into the buffer's state."""

    def check_state(self, ring: StreamRing, state: dict, count: int) -> Any:
        """Validate the checkpoint keys for ``count`` stored items before anything changes
        (``CheckpointError``); returns what ``load_state`` applies."""

    def load_state(self, ring: StreamRing, checked: Any) -> None:
        """Apply what ``check_state`` returned, once the ring holds the loaded counters."""


@runtime_checkable
class PrioritySampler(Sampler, Protocol):
    """A sampler that draws by priority: users update priorities of drawn ids."""

    alpha: float

    def beta(self) -> float:
        """The importance-weight exponent of the next draw."""

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        """Set the priorities of stored ``ids`` (``PriorityError`` for ids not stored or
        priorities that are not finite and >= 0; nothing changes then)."""
