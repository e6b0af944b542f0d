"""Proportional prioritized sampling (Schaul et al. 2016), optionally episode-aware.

Item i is drawn with probability ``P(i) = (p_i + epsilon) ** alpha / sum_k (p_k + epsilon) ** alpha``
over the valid starts; its importance weight is ``w_i = (N * P(i)) ** -beta`` divided by the
largest weight any stored item can have, i.e. ``(P(i) / P_min) ** -beta`` (the min tree
gives P_min). New items get the largest priority given so far (1.0 at first).

A window of ``num_steps`` items has the priority of its first item; windows that would
pass the write head (or, with an episode index and no padding, cross an episode's end) are
never drawn, and probabilities are renormalised over the windows that can be.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError
from replaybuf.refusals import bad_priorities, empty, no_episode_window, unknown_ids
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeIndex, pad_windows
from replaybuf.samplers.sequences import SequenceRule, eligible
from replaybuf.samplers.sumtree import (
    MAX_MASS,
    MIN_MASS,
    MinTree,
    SumTree,
    kernel_array,
    priority_mass,
    priority_masses,
)
from replaybuf.samplers.uniform import window_start_count

__all__ = [
    "PrioritizedSampler",
    "check_beta",
    "check_new_priorities",
    "check_priority_state",
    "new_item_priorities",
    "priorities_of_add",
    "priority_update",
]

_WINDOW_TREES = 4  # window lengths whose episode-aware sum trees are kept (least recently used dropped)
_REDRAWS = 64  # rounds of redraws (rounding onto a zero slot, a window into the head) before giving up


def is_number(value: Any) -> bool:
    """A real number given as a number (bools are not: ``alpha=True`` is a mistake)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_exponents(alpha: Any, epsilon: Any) -> tuple[float, float]:
    """``(alpha, epsilon)`` as floats. Every buffer with priorities checks them here.

    Raises:
        ArgumentError: either is not a finite number >= 0.
    """
    for name, value in (("alpha", alpha), ("epsilon", epsilon)):
        if not (is_number(value) and np.isfinite(value) and value >= 0):
            raise ArgumentError(f"{name}: expected a finite float >= 0, got {value!r}")
    return float(alpha), float(epsilon)


def check_priority_values(ids: np.ndarray, priorities: np.ndarray, head: int) -> None:
    """Raise ``PriorityError`` unless every priority is finite and > 0 and every id was
    added (``0 <= id < head``): the two refusals of an update, worded once for every buffer."""
    bad = ~(np.isfinite(priorities) & (priorities > 0))
    if bad.any():
        raise bad_priorities(priorities, bad)
    never = (ids < 0) | (ids >= head)
    if never.any():
        raise unknown_ids(ids, never, head)


def priority_update(ids: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ``(ids, priorities)`` of an ``update_priorities`` call as flat, contiguous int64
    and float64 arrays; ids of windows (``[B, T]``) count by their first id. Every buffer with
    priorities (this sampler's, the shared and the Ray ones) checks them here.

    Raises:
        ArgumentError: priorities that are not numbers, or ids that are not integers shaped
            like them (or with one more time axis).
    """
    ids = np.asarray(ids)
    try:
        priorities = np.asarray(priorities, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"priorities: expected numbers, got {priorities!r:.80} ({err})") from None
    ids = first_ids_of(ids, priorities)
    return kernel_array(ids, np.int64), kernel_array(priorities, np.float64)


def first_ids_of(ids: Any, priorities: Any) -> Any:
    """``ids`` (a NumPy or JAX array, or a torch tensor) as one id per priority: windows
    ``[..., T]`` count by their first id. Raises ArgumentError unless they are integers shaped
    like ``priorities``."""
    if ids.ndim == priorities.ndim + 1:
        ids = ids[..., 0]
    if ids.shape != priorities.shape or not _integer_dtype(ids.dtype):
        raise ArgumentError(
            f"update_priorities: expected integer ids shaped like priorities {tuple(priorities.shape)} "
            f"(or with one more time axis), got ids {tuple(ids.shape)} {ids.dtype}"
        )
    return ids


def _integer_dtype(dtype: Any) -> bool:
    """Whether a NumPy/JAX dtype or a torch dtype (read by its flags: NumPy cannot) holds integers."""
    if hasattr(dtype, "is_floating_point"):  # torch.dtype
        return not (dtype.is_floating_point or dtype.is_complex or str(dtype) == "torch.bool")
    return np.dtype(dtype).kind in "iu"


def check_new_priorities(priorities: Any, count: int) -> np.ndarray:
    """The ``priorities`` given to ``add_batch`` (one per stream of the step, or per row) as
    float64 ``[count]``; every buffer with priorities checks them here, before writing.

    Raises:
        ArgumentError: not numbers shaped ``[count]``.
        PriorityError: a priority that is not finite and > 0.
    """
    try:
        given = np.asarray(priorities, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"priorities: expected {count} numbers, got {priorities!r:.80} ({err})") from None
    if given.shape != (count,):
        raise ArgumentError(f"priorities: expected shape ({count},) (one per item added), got {given.shape}")
    bad = ~(np.isfinite(given) & (given > 0))
    if bad.any():
        raise bad_priorities(given, bad)
    return given


def priorities_of_add(priorities: Any, count: int, without: str | None) -> np.ndarray | None:
    """An add's ``priorities`` checked (``check_new_priorities``), None when none are given;
    ``without``: why the buffer keeps no priorities (None when it does).

    Raises:
        ArgumentError: ``priorities`` given to a buffer ``without`` them (the message says why).
    """
    if priorities is None:
        return None
    if without is not None:
        raise ArgumentError(f"priorities: expected None, {without}, got {priorities!r:.80}")
    return check_new_priorities(priorities, count)


def new_item_priorities(state: dict, alpha: float, epsilon: float, count: int) -> dict:
    """``state`` with every one of its ``count`` items given a new item's priority (1.0): how a
    prioritized buffer loads a checkpoint without priorities (docs/persistence.md)."""
    mass = priority_mass(1.0, alpha, epsilon)
    return {**state, "priorities": {"mass": np.full(count, mass), "max_priority": 1.0}}


def check_beta(value: Any) -> None:
    """Raise ArgumentError unless ``value`` is a float in [0, 1] or a zero-argument callable."""
    if not callable(value) and not (is_number(value) and 0 <= value <= 1):
        raise ArgumentError(f"beta: expected a float in [0, 1] or a callable, got {value!r}")


def check_priority_state(saved: Any, count: int) -> tuple[np.ndarray, float]:
    """``(masses, max_priority)`` of a saved ``{"mass": [count] floats, "max_priority": float}``:
    one mass per item in ``[MIN_MASS, MAX_MASS]`` (what ``(p + epsilon) ** alpha`` is kept in)
    and a finite ``max_priority`` > 0; CheckpointError naming the key otherwise."""
    if not isinstance(saved, dict) or set(saved) != {"mass", "max_priority"}:
        got = sorted(map(str, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"state['priorities']: expected {{'mass': array, 'max_priority': float}}, got {got}")
    mass, largest = saved["mass"], saved["max_priority"]
    if not isinstance(mass, np.ndarray) or mass.ndim != 1 or mass.dtype.kind != "f":
        got = f"{mass.shape} {mass.dtype}" if isinstance(mass, np.ndarray) else type(mass).__name__
        raise CheckpointError(f"state['priorities']['mass']: expected a 1-d float array, got {got}")
    if mass.shape != (count,):
        raise CheckpointError(
            f"state['priorities']['mass']: expected {count} masses (one per item), got {mass.shape[0]}"
        )
    with np.errstate(over="ignore", invalid="ignore"):  # a longdouble beyond float64: inf, refused below
        mass = mass.astype(np.float64)
    bad = ~((mass >= MIN_MASS) & (mass <= MAX_MASS))  # NaN fails both
    if bad.any():
        raise CheckpointError(
            f"state['priorities']['mass']: expected masses in [{MIN_MASS}, {MAX_MASS}] (finite, > 0), got "
            f"{mass[bad][:3].tolist()} at rows {np.flatnonzero(bad)[:3].tolist()}"
        )
    if not isinstance(largest, float) or not (np.isfinite(largest) and largest > 0):
        raise CheckpointError(f"state['priorities']['max_priority']: expected a finite float > 0, got {largest!r:.60}")
    return mass, float(largest)


class PrioritizedSampler:
    """Stratified draws from a sum tree of ``(priority + epsilon) ** alpha`` per slot.

    Targets ``(j + U_j) * total / B`` are found in the tree all at once (one kernel call:
    descent, ids, probabilities, weights); draws that land on an invalid start (a window
    into the head, or a zero slot by rounding) are drawn again with fresh uniform targets.

    With an ``episodes`` index (not padded), windows of T steps are drawn from a second sum
    tree per T whose leaf is the slot's mass when a window of T starting there lies inside
    one episode and before the head, else 0: built once when T is first asked for, then
    kept up to date by every add (the starts that become decided) and every priority
    update, so a sample never scans the buffer. Padded (``pad=True``): windows are drawn as
    without episodes and steps past the episode's end repeat its last real item.

    Raises:
        ArgumentError: alpha or epsilon not a finite number >= 0, beta outside [0, 1],
            compiled not None/True/False.
        ImportError: compiled=True without numba installed.
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float | Callable[[], float] = 0.4,
        epsilon: float = 1e-6,
        episodes: EpisodeIndex | None = None,
        pad: bool = False,
        compiled: bool | None = None,
    ):
        self.alpha, self.epsilon = check_exponents(alpha, epsilon)
        if compiled not in (None, True, False):
            raise ArgumentError(f"compiled: expected None, True or False, got {compiled!r}")
        check_beta(beta)
        self.beta_source = beta
        self.sums = SumTree(capacity, compiled=compiled)
        self.mins = MinTree(capacity, compiled=compiled)
        self.kernels = self.sums.kernels
        self.compiled = compiled
        self.episodes = episodes
        self.pad = pad
        self.max_priority = 1.0
        self.windows: OrderedDict[int, SumTree] = OrderedDict()  # T -> masses of valid starts
        self.sequence_trees: OrderedDict[tuple, tuple[SequenceRule, SumTree]] = OrderedDict()  # sparse starts
        self.distinct = False  # a batch's starts distinct (samplers.rules: max_times_sampled)
        self.drawn = np.zeros(0, np.int64)  # the starts of the last draw (what the rules count)

    def beta(self) -> float:
        """The exponent of the next sample: the float given, or what the callable returns now.

        Raises:
            ArgumentError: the callable returned something other than a number in [0, 1].
        """
        if not callable(self.beta_source):
            return float(self.beta_source)
        value = self.beta_source()
        if not (is_number(value) and 0 <= value <= 1):
            raise ArgumentError(f"beta: expected the callable to return a float in [0, 1], got {value!r:.80}")
        return float(value)

    # -- the sampler protocol (replaybuf.samplers) ------------------------------------------------
    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(ids, probabilities, {"weights", "mask"})`` of ``sample_batch_size`` draws (one, 0-d, for None)."""
        size, steps = sample_batch_size, num_steps or 1
        low, high = ring.window_starts(steps)
        tree, excluded = self.sums, 0.0
        if steps > 1:
            if self.episodes is not None and not self.pad:
                tree = self._window_tree(ring, steps)
            else:
                excluded = self._head_mass(ring, high)
        ids, probabilities, weights = self._draw_starts(rng, ring, tree, excluded, low, high, size, num_steps)
        ids = ring.window_ids(ids, num_steps)
        mask = None
        if self.pad and num_steps is not None:
            ids, mask = pad_windows(self.episodes, ids)  # type: ignore[arg-type]
        return ids, probabilities, {"weights": weights, "mask": mask}

    def draw_sequences(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(ids, probabilities, {"weights", "mask", "learn"})`` of sequences
        (replaybuf.samplers.sequences) whose learning starts are drawn by their priority."""
        if ring.steps == 0:
            raise empty(ring.name)
        if rule.period == 1 and not rule.pad:
            ring.window_starts(rule.num_steps)  # EmptyBufferError when no stream holds num_steps
        tree, low, high = self._sequence_starts(ring, rule)
        if tree.root() <= 0:
            raise no_episode_window(
                rule.num_steps,
                padding=not rule.pad,
                detail=f" from a position that is a multiple of period={rule.period}",
            )
        starts, probabilities, weights = self._draw_starts(
            rng, ring, tree, 0.0, low, high, sample_batch_size, rule.num_steps
        )
        ids, extras = self.episodes.sequences(starts, rule)  # type: ignore[union-attr]
        return ids, probabilities, {"weights": weights, **extras}

    def sequence_mass(self, ring: StreamRing, rule: SequenceRule) -> tuple[float, float]:
        """``(mass, smallest)`` of ``rule``'s eligible learning starts (what ``draw_sequences``
        normalises by; 0 when none) and the smallest stored mass, as ``mass`` for windows."""
        if ring.steps == 0 or (rule.period == 1 and not rule.pad and window_start_count(ring, rule.num_steps) == 0):
            return 0.0, 1.0
        return self._sequence_starts(ring, rule)[0].root(), self.mins.root()

    def _sequence_starts(self, ring: StreamRing, rule: SequenceRule) -> tuple[SumTree, int, int]:
        """``(tree, low, high)``: the tree holding the masses of ``rule``'s eligible starts (0
        elsewhere) and the steps ``[low, high)`` they lie in."""
        if rule.period == 1 and not rule.pad:  # the starts of windows of num_steps inside one episode
            low, high = ring.first_valid_step(), ring.steps - rule.num_steps + 1
            return self._window_tree(ring, rule.num_steps), low, high
        # every stored step (period 1, padded), or the listed sparse starts
        tree = self.sums if rule.period == 1 else self._sequence_tree(ring, rule)
        return tree, ring.first_valid_step(), ring.steps

    def _draw_starts(
        self,
        rng: np.random.Generator,
        ring: StreamRing,
        tree: SumTree,
        excluded: float,
        low: int,
        high: int,
        size: int | None,
        num_steps: int | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(first ids, probabilities, weights)`` of ``size`` stratified draws from ``tree``
        (``excluded``: mass of starts it holds that may not be drawn) among ids in
        ``[low, high)`` steps, drawn again where one lands on a start that may not be."""
        batch, head = ring.batch_size, ring.steps * ring.batch_size
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
            raise no_episode_window(num_steps, padding=True, detail=" (or their priority mass is 0)")
        if self.distinct and n > 1:
            self._redraw_repeats(rng, ring, tree, excluded, low, high, num_steps, ids, probabilities, weights)
        self.drawn = ids
        if size is None:
            return ids.reshape(()), probabilities.reshape(()), weights.reshape(())
        return ids, probabilities, weights

    def _redraw_repeats(
        self,
        rng: np.random.Generator,
        ring: StreamRing,
        tree: SumTree,
        excluded: float,
        low: int,
        high: int,
        num_steps: int | None,
        ids: np.ndarray,
        probabilities: np.ndarray,
        weights: np.ndarray,
    ) -> None:
        """Make the drawn ``ids`` distinct in place: every repeat of an earlier start is drawn
        again from the mass of the starts not yet in the batch (the batch's own leave ``tree``
        meanwhile), a round at a time. Each element keeps its single-draw probability and
        weight: its mass over the whole drawable mass, as a first-round draw reports them.

        Raises:
            EmptyBufferError: fewer starts with mass than the batch (nothing changed in ``tree``).
        """
        valid = tree.root() - excluded
        taken: list[tuple[np.ndarray, np.ndarray]] = []  # slots and masses out of the tree until the end
        self.distinct = False  # the redraws below may repeat each other: the next round sees to it
        try:
            while True:
                _, first = np.unique(ids, return_index=True)
                repeats = np.setdiff1d(np.arange(ids.shape[0]), first, assume_unique=True)
                if not repeats.shape[0]:
                    return
                slots = ids[first] % ring.capacity
                slots = slots[tree.levels[0][slots] > 0]  # those not taken out in an earlier round
                taken.append((slots, tree.levels[0][slots]))
                tree.update(slots, np.zeros(slots.shape[0]))
                if not tree.root() - excluded > 0:
                    raise EmptyBufferError(
                        f"sample_batch_size={ids.shape[0]}: only {first.shape[0]} eligible starts have priority "
                        "mass (a batch's items are distinct under max_times_sampled); add more items or sample fewer"
                    )
                again, _, weights[repeats] = self._draw_starts(
                    rng, ring, tree, excluded, low, high, repeats.shape[0], num_steps
                )
                ids[repeats] = again
                probabilities[repeats] = self.sums.levels[0][again % ring.capacity] / valid
        finally:
            self.distinct = True
            for slots, masses in reversed(taken):
                tree.update(slots, masses)

    def exclude(self, slots: np.ndarray) -> None:
        """Take the items in ``slots`` out of every draw (mass 0 in the sum trees, none in the
        min tree) while they stay stored: consumed or stale items (samplers.rules)."""
        slots = np.unique(slots)
        zeros = np.zeros(slots.shape[0])
        self.sums.update(slots, zeros)
        self.mins.update(slots, np.full(slots.shape[0], np.inf))
        for tree in (*self.windows.values(), *(tree for _, tree in self.sequence_trees.values())):
            tree.update(slots, zeros)

    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        steps = num_steps or 1
        if window_start_count(ring, steps) == 0:
            return 0.0, 1.0
        smallest = self.mins.root()
        if steps == 1:
            return self.sums.root(), smallest
        if self.episodes is not None and not self.pad:
            return self._window_tree(ring, steps).root(), smallest
        return self.sums.root() - self._head_mass(ring, ring.steps - steps + 1), smallest

    def new_priorities(self, priorities: Any, count: int) -> np.ndarray:
        """``check_new_priorities``: what ``added`` takes as the priorities of an add."""
        return check_new_priorities(priorities, count)

    def added(self, ring: StreamRing, arrays: Sequence[np.ndarray], priorities: np.ndarray | None = None) -> None:
        """The new step's items get ``priorities`` (checked by ``new_priorities``; each raises
        the largest priority so far) or, without, the largest so far; window trees follow."""
        if self.episodes is not None:
            self.episodes.record(arrays, ring.steps - 1)
        start = ring.slot(ring.steps - 1)
        if priorities is None:
            mass: Any = priority_mass(self.max_priority, self.alpha, self.epsilon)
        else:
            mass = priority_masses(priorities, self.alpha, self.epsilon)
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self.sums.update_range(start, start + ring.batch_size, mass)
        self.mins.update_range(start, start + ring.batch_size, mass)
        if self.windows:
            self._decide_starts(ring)
        for rule, tree in self.sequence_trees.values():
            self._decide_sequence_starts(ring, rule, tree)

    def appended(self, ring: StreamRing, count: int, priorities: np.ndarray | None = None) -> None:
        """A single-stream append of ``count`` rows (``ring.steps`` counts them; no episode index):
        the stored ones get ``priorities`` (checked by ``new_priorities``) or the largest so far."""
        kept = min(count, ring.capacity)
        slots = np.arange(ring.steps - kept, ring.steps, dtype=np.int64) % ring.capacity
        if priorities is None:
            masses = np.full(kept, priority_mass(self.max_priority, self.alpha, self.epsilon))
        else:
            masses = priority_masses(priorities[count - kept :], self.alpha, self.epsilon)
            self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        self.sums.update(slots, masses)
        self.mins.update(slots, masses)

    def cleared(self) -> None:
        self.sums.clear()
        self.mins.clear()
        self.windows.clear()
        self.sequence_trees.clear()
        self.max_priority = 1.0
        if self.episodes is not None:
            self.episodes.clear()

    def reopened(self, ring: StreamRing, fields: Sequence[np.ndarray]) -> None:
        """A reopened memmap folder holds items, not priorities: each gets a new item's mass."""
        if self.episodes is not None:
            self.episodes.recover(fields)
        self.windows.clear()
        self.sequence_trees.clear()
        slots = ring.stream_ids().ravel() % ring.capacity
        if slots.size:
            mass = np.full(slots.size, priority_mass(self.max_priority, self.alpha, self.epsilon))
            self.sums.update(slots, mass)
            self.mins.update(slots, mass)

    def state(self, ring: StreamRing) -> dict:
        """Every stored item's tree mass (id order, like ``items``) and the max priority."""
        ids = ring.stream_ids().T.ravel()
        state: dict = {"priorities": {"mass": self.sums.values(ids % ring.capacity), "max_priority": self.max_priority}}
        if self.episodes is not None:
            state["episodes"] = self.episodes.state_dict()
        return state

    def check_state(self, ring: StreamRing, state: dict, count: int) -> tuple[np.ndarray, float, Any]:
        """``(masses, max_priority, episodes)`` of a ``state()`` holding ``count`` items (see
        ``check_priority_state``); CheckpointError naming the key otherwise."""
        mass, largest = check_priority_state(state.get("priorities"), count)
        episodes = None
        if self.episodes is not None:
            episodes = self.episodes.check_state(state.get("episodes"), state["steps"], count)
        return mass, largest, episodes

    def load_state(self, ring: StreamRing, checked: tuple[np.ndarray, float, Any]) -> None:
        mass, largest, episodes = checked
        self.cleared()
        if episodes is not None:
            self.episodes.load_state_dict(episodes)  # type: ignore[union-attr]
        slots = ring.stream_ids().T.ravel() % ring.capacity
        self.sums.update(slots, mass)
        self.mins.update(slots, mass)
        self.max_priority = largest

    # -- priorities ---------------------------------------------------------------------------
    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        """Set the priorities of the items (or windows) with logical ``ids``; see
        ``PrioritizedReplayBuffer.update_priorities``. The caller holds the buffer's lock."""
        ids, priorities = priority_update(ids, priorities)
        head = ring.steps * ring.batch_size
        oldest = ring.first_valid_step() * ring.batch_size
        sums = self.sums
        code, largest, _ = self.kernels.assign(
            sums.tree,
            self.mins.tree,
            sums.offsets,
            sums.arity,
            ring.capacity,
            ids,
            priorities,
            self.alpha,
            self.epsilon,
            oldest,
            head,
            np.empty(ids.shape[0], np.int64),
        )
        if code:  # the kernel stopped at a bad priority (1) or an id never added (2): nothing changed
            check_priority_values(ids, priorities, head)
        if self.windows:
            self._assigned(ring, ids)
        for rule, tree in self.sequence_trees.values():
            live = ids[(ids >= oldest) & (ids < head)]
            starts = live[eligible(self.episodes.position, ring, live, rule)]  # type: ignore[union-attr]
            slots = starts % ring.capacity
            tree.update(slots, self.sums.levels[0][slots])
        self.max_priority = max(self.max_priority, largest)

    # -- internals ----------------------------------------------------------------------------
    def _head_mass(self, ring: StreamRing, high: int) -> float:
        """The mass of the starts whose windows would pass the head: (T - 1) steps of slots."""
        start, stop = (high * ring.batch_size) % ring.capacity, (ring.steps * ring.batch_size) % ring.capacity
        leaves = self.sums.levels[0]
        if start < stop:
            return float(leaves[start:stop].sum())
        return float(leaves[start : ring.capacity].sum() + leaves[:stop].sum())

    def _window_tree(self, ring: StreamRing, steps: int) -> SumTree:
        tree = self.windows.get(steps)
        if tree is None:  # built once per window length: O(capacity)
            if len(self.windows) >= _WINDOW_TREES:
                self.windows.popitem(last=False)
            tree = self.windows[steps] = SumTree(ring.capacity, compiled=self.compiled)
            ids = ring.stream_ids().ravel()
            slots = ids % ring.capacity
            valid = (ids < (ring.steps - steps + 1) * ring.batch_size) & self.episodes.inside(ids, steps)  # type: ignore[union-attr]
            tree.levels[0][slots] = np.where(valid, self.sums.levels[0][slots], 0.0)
            tree.rebuild()
        self.windows.move_to_end(steps)
        return tree

    def _sequence_tree(self, ring: StreamRing, rule: SequenceRule) -> SumTree:
        """The masses of ``rule``'s eligible learning starts (0 elsewhere): built once (O(capacity)),
        then kept by adds and priority updates."""
        found = self.sequence_trees.pop(rule.key, None)
        if found is None:
            if len(self.sequence_trees) >= _WINDOW_TREES:
                self.sequence_trees.popitem(last=False)
            tree = SumTree(ring.capacity, compiled=self.compiled)
            ids = ring.stream_ids().ravel()
            slots = ids % ring.capacity
            valid = eligible(self.episodes.position, ring, ids, rule)  # type: ignore[union-attr]
            tree.levels[0][slots] = np.where(valid, self.sums.levels[0][slots], 0.0)
            tree.rebuild()
            found = (rule, tree)
        self.sequence_trees[rule.key] = found
        return found[1]

    def _decide_sequence_starts(self, ring: StreamRing, rule: SequenceRule, tree: SumTree) -> None:
        """After an add: the new step's slots leave ``tree``; the starts this add decided join it
        with their mass when eligible (the new step's own when padded)."""
        batch, new = ring.batch_size, ring.slot(ring.steps - 1)
        tree.update_range(new, new + batch, 0.0)
        step = ring.steps - 1 if rule.pad else ring.steps - rule.num_steps
        if step >= ring.first_valid_step():
            start = ring.slot(step)
            ids = step * batch + np.arange(batch, dtype=np.int64)
            valid = eligible(self.episodes.position, ring, ids, rule)  # type: ignore[union-attr]
            tree.update_range(start, start + batch, np.where(valid, self.sums.levels[0][start : start + batch], 0.0))

    def _decide_starts(self, ring: StreamRing) -> None:
        """After an add: the new step's slots are no window start yet; the starts whose
        windows now end at the new step are decided (valid: their mass; else 0)."""
        step, batch = ring.steps - 1, ring.batch_size
        new = ring.slot(step)
        position = self.episodes.position  # type: ignore[union-attr]
        for steps, tree in self.windows.items():
            tree.update_range(new, new + batch, 0.0)
            first = step - steps + 1
            if first >= 0:
                start = ring.slot(first)
                inside = position[new : new + batch] >= steps - 1
                masses = np.where(inside, self.sums.levels[0][start : start + batch], 0.0)
                tree.update_range(start, start + batch, masses)

    def _assigned(self, ring: StreamRing, ids: np.ndarray) -> None:
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
                self.episodes.position,  # type: ignore[union-attr]
                ids,
                steps,
                batch,
                oldest,
                high,
                slots,
            )
