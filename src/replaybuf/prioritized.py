"""Proportional prioritized replay (Schaul et al. 2016) over the NumPy segmented buffer.

Item i is drawn with probability ``P(i) = (p_i + epsilon) ** alpha / sum_k (p_k + epsilon) ** alpha``
over the valid starts; its importance weight is ``w_i = (N * P(i)) ** -beta`` divided by the
largest weight any stored item can have, i.e. ``(P(i) / P_min) ** -beta`` (the min tree
gives P_min). New items get the largest priority given so far (1.0 at first).

A window of ``num_steps`` items has the priority of its first item; windows that would
pass the write head (or, with ``respect_episodes``, cross an episode's end) are never
drawn, and probabilities are renormalised over the windows that can be.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, PriorityError
from replaybuf.ring import StreamRing
from replaybuf.sumtree import MinTree, SumTree
from replaybuf.uniform import UniformReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampler"]


class PrioritizedSampler:
    """Stratified draws from a sum tree of ``(priority + epsilon) ** alpha`` per slot.

    Targets ``(j + U_j) * total / B`` are found in the tree all at once; draws that land
    on an invalid start (near the head, across an episode end, or a zero slot by rounding)
    are drawn again with fresh uniform targets until every one is valid.
    """

    def __init__(self, capacity: int, beta: float | Callable[[], float], episodes: Any, pad: bool):
        self.sums = SumTree(capacity)
        self.mins = MinTree(capacity)
        self.beta_source = beta
        self.episodes = episodes
        self.pad = pad

    def beta(self) -> float:
        return float(self.beta_source() if callable(self.beta_source) else self.beta_source)

    def clear(self) -> None:
        self.sums.clear()
        self.mins.clear()

    def draw(
        self, rng: np.random.Generator, ring: StreamRing, size: int | None, num_steps: int | None, what: str
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        steps = num_steps or 1
        low, high = ring.window_starts(steps, what)
        total = self.sums.total()
        wanted = 1 if size is None else size
        valid_mass = total - self._excluded_mass(ring, low, high, steps)
        if not valid_mass > 0:
            raise EmptyBufferError(
                f"num_steps={num_steps}: no stored episode holds {num_steps} steps; add longer "
                "episodes, ask for shorter windows, or pass pad_episode_ends=True"
            )
        targets = (np.arange(wanted) + rng.random(wanted)) * (total / wanted)
        slots, mass = self.sums.find(targets)
        bad = ~self._valid(ring, slots, mass, low, high, steps)
        while bad.any():
            again, again_mass = self.sums.find(rng.random(int(bad.sum())) * total)
            slots[bad], mass[bad] = again, again_mass
            bad[bad] = ~self._valid(ring, again, again_mass, low, high, steps)
        first = _slot_to_id(ring, slots)
        probabilities = mass / valid_mass
        weights = (mass / self.mins.root()) ** -self.beta()
        if size is None:
            first, probabilities, weights = first[0], probabilities[0], weights[0]
        ids = ring.window_ids(np.asarray(first), num_steps)
        extras: dict = {"weights": np.asarray(weights, np.float32)}
        if self.pad and num_steps is not None:
            mask = self.episodes.real(ids)
            last_real = np.take_along_axis(ids, mask.sum(axis=-1, keepdims=True) - 1, axis=-1)
            ids, extras["mask"] = np.where(mask, ids, last_real), mask
        return ids, probabilities, extras

    def _valid(
        self, ring: StreamRing, slots: np.ndarray, mass: np.ndarray, low: int, high: int, steps: int
    ) -> np.ndarray:
        ids = _slot_to_id(ring, slots)
        ok = (mass > 0) & (ids >= low * ring.batch_size) & (ids < high * ring.batch_size)
        if self.episodes is not None and not self.pad and steps > 1:
            ok &= self.episodes.inside(ids, steps)
        return ok

    def _excluded_mass(self, ring: StreamRing, low: int, high: int, steps: int) -> float:
        """The mass of stored starts that cannot be drawn: those near the head and, when
        windows must stay inside episodes, those crossing an end (a pass over all stored
        starts: O(capacity))."""
        batch = ring.batch_size
        head = np.arange(high * batch, ring.steps * batch) % ring.capacity
        excluded = float(self.sums.values(head).sum())
        if self.episodes is not None and not self.pad and steps > 1:
            starts = np.arange(low * batch, high * batch)
            outside = starts[~self.episodes.inside(starts, steps)]
            excluded += float(self.sums.values(outside % ring.capacity).sum())
        return excluded


def _slot_to_id(ring: StreamRing, slots: np.ndarray) -> np.ndarray:
    """The id stored in each slot now (slots hold the newest item of their position)."""
    head = ring.steps * ring.batch_size  # the id the next add writes to slot head % capacity
    return head - 1 - ((head - 1 - slots) % ring.capacity)


class PrioritizedReplayBuffer(UniformReplayBuffer):
    """``UniformReplayBuffer`` drawing items in proportion to ``(priority + epsilon) ** alpha``.

    ``get_next`` returns ``(items, SampleInfo)``: ``info.ids``, ``info.probabilities`` (the
    real probability of each draw) and ``info.weights`` (importance weights, max-normalised;
    see the module docstring). After computing new priorities (e.g. ``|td_error|``) call
    ``update_priorities(info.ids, priorities)``.

    Args:
        data_spec, batch_size, max_length: as for UniformReplayBuffer.
        alpha: how much prioritisation is used (0: uniform).
        beta: importance-sampling exponent, a float or a zero-argument callable read at
            every sample (an annealing schedule); also settable through ``.beta``.
        epsilon: added to every priority before ``** alpha``.
        Other keywords go to UniformReplayBuffer (seed, respect_episodes, ...).
    """

    _name = "PrioritizedReplayBuffer"

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        alpha: float = 0.6,
        beta: float | Callable[[], float] = 0.4,
        epsilon: float = 1e-6,
        seed: int | None = None,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
    ):
        for name, value in (("alpha", alpha), ("epsilon", epsilon)):
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ArgumentError(f"{name}: expected a finite float >= 0, got {value!r}")
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            seed=seed,
            respect_episodes=respect_episodes,
            pad_episode_ends=pad_episode_ends,
            episode_end_field=episode_end_field,
            storage=storage,
            path=path,
        )
        self._alpha, self._epsilon = float(alpha), float(epsilon)
        self._max_priority = 1.0
        self._sampler = PrioritizedSampler(self._ring.capacity, beta, self._episodes, bool(pad_episode_ends))
        self.beta = beta

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def beta(self) -> float:
        """The importance-sampling exponent used by the next sample."""
        return self._sampler.beta()

    @beta.setter
    def beta(self, value: float | Callable[[], float]) -> None:
        if not callable(value) and not (isinstance(value, (int, float)) and 0 <= value <= 1):
            raise ArgumentError(f"beta: expected a float in [0, 1] or a callable, got {value!r}")
        self._sampler.beta_source = value

    def add_batch(self, items: Any) -> None:
        """Add one step to every stream; the new items get the largest priority so far.

        Raises:
            SpecMismatchError: as for UniformReplayBuffer; nothing is written.
        """
        with self._lock:
            super().add_batch(items)
            ring = self._ring
            start = ((ring.steps - 1) % ring.max_length) * ring.batch_size
            mass = (self._max_priority + self._epsilon) ** self._alpha
            self._sampler.sums.update_range(start, start + ring.batch_size, mass)
            self._sampler.mins.update_range(start, start + ring.batch_size, mass)

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Set the priorities of the items (or windows) with logical ``ids``.

        ``ids`` is ``info.ids`` of a sample: ``[B]``, or ``[B, T]`` for windows (only the
        first id of each window counts). Ids of items overwritten since they were sampled
        are ignored (their slots now hold other items); duplicates: the last one wins.

        Raises:
            ArgumentError: ``priorities`` is not shaped like ``ids`` (without the time axis).
            PriorityError: a priority that is zero, negative, NaN or infinite, or an id that
                was never added; nothing is changed.
        """
        ids = np.asarray(ids)
        priorities = np.asarray(priorities, dtype=np.float64)
        if ids.ndim == priorities.ndim + 1:
            ids = ids[..., 0]
        if ids.shape != priorities.shape or not np.issubdtype(ids.dtype, np.integer):
            raise ArgumentError(
                f"update_priorities: expected integer ids shaped like priorities {priorities.shape} "
                f"(or with one more time axis), got ids {ids.shape} {ids.dtype}"
            )
        bad = ~(np.isfinite(priorities) & (priorities > 0))
        if bad.any():
            raise PriorityError(
                f"priorities: expected finite values > 0, got {priorities[bad][:5].tolist()} "
                f"at positions {np.flatnonzero(bad)[:5].tolist()}"
            )
        with self._lock:
            ring = self._ring
            head = ring.steps * ring.batch_size
            never = (ids < 0) | (ids >= head)
            if never.any():
                raise PriorityError(
                    f"ids: expected ids of added items (0 <= id < {head}), got {ids[never][:5].tolist()}"
                )
            live = ids >= ring.first_valid_step() * ring.batch_size
            slots = (ids[live] % ring.capacity).ravel()
            mass = (priorities[live].ravel() + self._epsilon) ** self._alpha
            self._sampler.sums.update(slots, mass)
            self._sampler.mins.update(slots, mass)
            if priorities.size:
                self._max_priority = max(self._max_priority, float(priorities.max()))

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self._sampler.clear()
            self._max_priority = 1.0

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """UniformReplayBuffer's state plus every stored item's tree mass and the max priority."""
        with self._lock:
            state = super().state_dict()
            ids = self._ring.stream_ids().T.ravel()  # id order, like state["items"]
            state["priorities"] = {
                "mass": self._sampler.sums.values(ids % self._ring.capacity),
                "max_priority": self._max_priority,
            }
            return state

    def load_state_dict(self, state: dict) -> None:
        """Raises CheckpointError like UniformReplayBuffer, or when the masses do not fit."""
        saved = state.get("priorities") if isinstance(state, dict) else None
        mass = saved.get("mass") if isinstance(saved, dict) else None
        if not isinstance(mass, np.ndarray) or mass.ndim != 1 or not isinstance(saved.get("max_priority"), float):
            raise CheckpointError("state['priorities']: expected {'mass': 1-d array, 'max_priority': float}")
        first_leaf = state.get("items", {}).get("0")
        count = first_leaf.shape[0] if isinstance(first_leaf, np.ndarray) else 0
        if mass.shape != (count,):
            raise CheckpointError(f"state['priorities']['mass']: expected {count} masses, got shape {mass.shape}")
        with self._lock:
            super().load_state_dict(state)
            ids = self._ring.stream_ids().T.ravel()
            self._sampler.clear()
            self._sampler.sums.update(ids % self._ring.capacity, mass)
            self._sampler.mins.update(ids % self._ring.capacity, mass)
            self._max_priority = saved["max_priority"]
