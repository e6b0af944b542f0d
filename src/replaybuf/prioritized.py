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
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf.buffer import check_positive
from replaybuf.checkpoint import StoredArray
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, PriorityError
from replaybuf.info import SampleInfo
from replaybuf.ring import StreamRing
from replaybuf.sumtree import MinTree, SumTree, kernel_array
from replaybuf.uniform import UniformReplayBuffer, _unstack_time

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampler"]

_WINDOW_TREES = 4  # window lengths whose episode-aware sum trees are kept (least recently used dropped)
_REDRAWS = 64  # rounds of redraws (rounding onto a zero slot, a window into the head) before giving up


class PrioritizedSampler:
    """Stratified draws from a sum tree of ``(priority + epsilon) ** alpha`` per slot.

    Targets ``(j + U_j) * total / B`` are found in the tree all at once (one kernel call:
    descent, ids, probabilities, weights); draws that land on an invalid start (a window
    into the head, or a zero slot by rounding) are drawn again with fresh uniform targets.

    With ``respect_episodes`` (not padded), windows of T steps are drawn from a second sum
    tree per T whose leaf is the slot's mass when a window of T starting there lies inside
    one episode and before the head, else 0: built once when T is first asked for, then
    kept up to date by every add (the starts that become decided) and every priority
    update, so a sample never scans the buffer.
    """

    def __init__(
        self, capacity: int, beta: float | Callable[[], float], episodes: Any, pad: bool, compiled: bool | None
    ):
        self.sums = SumTree(capacity, compiled=compiled)
        self.mins = MinTree(capacity, compiled=compiled)
        self.kernels = self.sums.kernels
        self.compiled = compiled
        self.beta_source = beta
        self.episodes = episodes
        self.pad = pad
        self.windows: OrderedDict[int, SumTree] = OrderedDict()  # T -> masses of valid starts

    def beta(self) -> float:
        return float(self.beta_source() if callable(self.beta_source) else self.beta_source)

    def clear(self) -> None:
        self.sums.clear()
        self.mins.clear()
        self.windows.clear()

    def sample(
        self, rng: np.random.Generator, ring: StreamRing, size: int | None, num_steps: int | None, what: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``(ids, probabilities, weights, mask)`` of ``size`` draws (one, 0-d, for None)."""
        steps = num_steps or 1
        low, high = ring.window_starts(steps, what)
        batch, head = ring.batch_size, ring.steps * ring.batch_size
        tree, excluded = self.sums, 0.0
        if steps > 1:
            if self.episodes is not None and not self.pad:
                tree = self._window_tree(ring, steps)
            else:
                excluded = self._head_mass(ring, high)
        n = 1 if size is None else size
        ids, probabilities, weights = np.empty(n, np.int64), np.empty(n, np.float32), np.empty(n, np.float32)
        args = (tree.tree, self.mins.tree, tree.offsets, tree.arity, ring.capacity)
        limits = (excluded, self.beta(), low * batch, high * batch, head)
        bad = self.kernels.draw(*args, rng.random(n), True, *limits, ids, probabilities, weights)
        for _ in range(_REDRAWS):
            if bad <= 0:
                break
            redo = np.flatnonzero(ids < 0)
            again = (
                np.empty(redo.shape[0], np.int64),
                np.empty(redo.shape[0], np.float32),
                np.empty(redo.shape[0], np.float32),
            )
            bad = self.kernels.draw(*args, rng.random(redo.shape[0]), False, *limits, *again)
            ids[redo], probabilities[redo], weights[redo] = again
        if bad:
            raise EmptyBufferError(
                f"num_steps={num_steps}: no stored episode holds {num_steps} steps (or their priority mass is 0); "
                "add longer episodes, ask for shorter windows, or pass pad_episode_ends=True"
            )
        if size is None:
            ids, probabilities, weights = ids.reshape(()), probabilities.reshape(()), weights.reshape(())
        ids = ring.window_ids(ids, num_steps)
        mask = None
        if self.pad and num_steps is not None:
            mask = self.episodes.real(ids)
            last_real = np.take_along_axis(ids, mask.sum(axis=-1, keepdims=True) - 1, axis=-1)
            ids = np.where(mask, ids, last_real)
        return ids, probabilities, weights, mask

    def _head_mass(self, ring: StreamRing, high: int) -> float:
        """The mass of the starts whose windows would pass the head: (T - 1) steps of slots."""
        start, stop = (high * ring.batch_size) % ring.capacity, (ring.steps * ring.batch_size) % ring.capacity
        leaves = self.sums.levels[0]
        if start < stop:
            return float(leaves[start:stop].sum())
        return float(leaves[start : ring.capacity].sum() + leaves[:stop].sum())

    # -- episode-aware window trees ---------------------------------------------------------------
    def _valid_starts(self, ring: StreamRing, ids: np.ndarray, steps: int) -> np.ndarray:
        """Whether windows of ``steps`` starting at stored ``ids`` lie inside one episode, before the head."""
        return (ids < (ring.steps - steps + 1) * ring.batch_size) & self.episodes.inside(ids, steps)

    def _window_tree(self, ring: StreamRing, steps: int) -> SumTree:
        tree = self.windows.get(steps)
        if tree is None:  # built once per window length: O(capacity)
            if len(self.windows) >= _WINDOW_TREES:
                self.windows.popitem(last=False)
            tree = self.windows[steps] = SumTree(ring.capacity, compiled=self.compiled)
            ids = ring.stream_ids().ravel()
            slots = ids % ring.capacity
            tree.levels[0][slots] = np.where(self._valid_starts(ring, ids, steps), self.sums.levels[0][slots], 0.0)
            tree.rebuild()
        self.windows.move_to_end(steps)
        return tree

    def added(self, ring: StreamRing) -> None:
        """After an add: the new step's slots are no window start yet; the starts whose
        windows now end at the new step are decided (valid: their mass; else 0)."""
        step, batch = ring.steps - 1, ring.batch_size
        new = (step % ring.max_length) * batch
        for steps, tree in self.windows.items():
            tree.update_range(new, new + batch, 0.0)
            first = step - steps + 1
            if first >= 0:
                start = (first % ring.max_length) * batch
                inside = self.episodes.position[new : new + batch] >= steps - 1
                tree.update_range(
                    start, start + batch, np.where(inside, self.sums.levels[0][start : start + batch], 0.0)
                )

    def assigned(self, ring: StreamRing, ids: np.ndarray) -> None:
        """After new priorities of ``ids``: copy the live ones' masses into the window trees."""
        oldest, batch = ring.first_valid_step() * ring.batch_size, ring.batch_size
        slots, leaves = np.empty(ids.shape[0], np.int64), self.sums.levels[0]
        for steps, tree in self.windows.items():
            high = (ring.steps - steps + 1) * batch
            self.kernels.assign_starts(
                tree.tree,
                tree.offsets,
                tree.arity,
                ring.capacity,
                leaves,
                self.episodes.position,
                ids,
                steps,
                batch,
                oldest,
                high,
                slots,
            )


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
        compiled: None (default) uses numba's compiled tree kernels when numba is
            installed (the ``fast`` extra), False the NumPy ones, True insists on numba.
        Other keywords go to UniformReplayBuffer (seed, respect_episodes, ...).

    Raises:
        ArgumentError: alpha or epsilon not a finite float >= 0, beta outside [0, 1],
            compiled not None/True/False.
        ImportError: compiled=True without numba installed.
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
        compiled: bool | None = None,
    ):
        for name, value in (("alpha", alpha), ("epsilon", epsilon)):
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ArgumentError(f"{name}: expected a finite float >= 0, got {value!r}")
        if compiled not in (None, True, False):
            raise ArgumentError(f"compiled: expected None, True or False, got {compiled!r}")
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
        self._sampler = PrioritizedSampler(self._ring.capacity, beta, self._episodes, bool(pad_episode_ends), compiled)
        self.beta = beta
        self._rebuild_priorities()

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
            ring, sampler = self._ring, self._sampler
            start = ((ring.steps - 1) % ring.max_length) * ring.batch_size
            mass = (self._max_priority + self._epsilon) ** self._alpha
            sampler.sums.update_range(start, start + ring.batch_size, mass)
            sampler.mins.update_range(start, start + ring.batch_size, mass)
            if sampler.windows:
                sampler.added(ring)

    def get_next(
        self, sample_batch_size: int | None = None, num_steps: int | None = None, time_stacked: bool = True
    ) -> tuple[Any, SampleInfo]:
        """Sample in proportion to the priorities; shapes as for UniformReplayBuffer.

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` items
                (inside one episode, with ``respect_episodes``).
            ArgumentError: sample_batch_size or num_steps is not a positive int.
        """
        if sample_batch_size is not None and (sample_batch_size.__class__ is not int or sample_batch_size < 1):
            check_positive("sample_batch_size", sample_batch_size)
        if num_steps is not None:
            check_positive("num_steps", num_steps)
        with self._lock:
            ids, probabilities, weights, mask = self._sampler.sample(
                self._rng, self._ring, sample_batch_size, num_steps, self._name
            )
            leaves = self._storage.read(ids % self._ring.capacity)
        if time_stacked or num_steps is None:
            items = self._flat.unflatten(leaves)
        else:
            items = _unstack_time(self._flat, leaves, num_steps, batched=sample_batch_size is not None)
        return items, SampleInfo(ids, probabilities, weights, mask)

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
        if ids.shape != priorities.shape or ids.dtype.kind not in "iu":
            raise ArgumentError(
                f"update_priorities: expected integer ids shaped like priorities {priorities.shape} "
                f"(or with one more time axis), got ids {ids.shape} {ids.dtype}"
            )
        ids, priorities = kernel_array(ids, np.int64), kernel_array(priorities, np.float64)
        with self._lock:
            ring, sampler = self._ring, self._sampler
            head = ring.steps * ring.batch_size
            oldest = ring.first_valid_step() * ring.batch_size
            sums = sampler.sums
            code, largest, _ = sampler.kernels.assign(
                sums.tree,
                sampler.mins.tree,
                sums.offsets,
                sums.arity,
                ring.capacity,
                ids,
                priorities,
                self._alpha,
                self._epsilon,
                oldest,
                head,
                np.empty(ids.shape[0], np.int64),
            )
            if code == 1:
                bad = ~(np.isfinite(priorities) & (priorities > 0))
                raise PriorityError(
                    f"priorities: expected finite values > 0, got {priorities[bad][:5].tolist()} "
                    f"at positions {np.flatnonzero(bad)[:5].tolist()}"
                )
            if code == 2:
                never = (ids < 0) | (ids >= head)
                raise PriorityError(
                    f"ids: expected ids of added items (0 <= id < {head}), got {ids[never][:5].tolist()}"
                )
            if sampler.windows:
                sampler.assigned(ring, ids)
            if largest > self._max_priority:
                self._max_priority = largest

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self._sampler.clear()
            self._max_priority = 1.0

    # -- checkpoints ----------------------------------------------------------------------------
    def _rebuild_priorities(self) -> None:
        """A reopened memmap folder holds items, not priorities: each gets a new item's mass."""
        ids = self._ring.stream_ids().ravel()
        if ids.size:
            mass = np.full(ids.size, (self._max_priority + self._epsilon) ** self._alpha)
            self._sampler.sums.update(ids % self._ring.capacity, mass)
            self._sampler.mins.update(ids % self._ring.capacity, mass)

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
        count = first_leaf.shape[0] if isinstance(first_leaf, (np.ndarray, StoredArray)) else 0
        if mass.shape != (count,):
            raise CheckpointError(f"state['priorities']['mass']: expected {count} masses, got shape {mass.shape}")
        with self._lock:
            super().load_state_dict(state)
            ids = self._ring.stream_ids().T.ravel()
            self._sampler.clear()
            self._sampler.sums.update(ids % self._ring.capacity, mass)
            self._sampler.mins.update(ids % self._ring.capacity, mass)
            self._max_priority = saved["max_priority"]
