"""The learner's prioritized sampling over the writers' segments of a ``SharedReplayBuffer``.

The learner keeps a sum tree and a min tree of ``(priority + epsilon) ** alpha`` per record
slot (``w * L * B + (t % L) * B + s``) and, before each draw, takes in what every writer
committed since the last one and empties the slots of steps that stopped being whole
(overwritten, being overwritten, or lost in a crash). A new step's items get the priority
their writer gave with them (``given``: the shared priority column, replaybuf.shared.layout;
each raises the largest priority) or, where it gave none (0), the largest priority given so
far. ``update_priorities`` ignores ids overwritten since they were sampled.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from replaybuf.errors import EmptyBufferError
from replaybuf.refusals import bad_priorities, unknown_ids, window_too_long
from replaybuf.samplers.prioritized import check_beta, check_exponents
from replaybuf.samplers.sumtree import MIN_WEIGHT, MinTree, SumTree, priority_mass, priority_masses

__all__ = ["SegmentPriorities", "slot_steps"]

_REDRAWS = 64


class SegmentPriorities:
    """Proportional prioritized draws over ``writers`` segments of ``max_length x batch_size`` slots."""

    def __init__(
        self,
        writers: int,
        batch_size: int,
        max_length: int,
        alpha: float,
        beta: float | Callable[[], float],
        epsilon: float,
    ):
        self.alpha, self.epsilon = check_exponents(alpha, epsilon)
        check_beta(beta)
        self.beta_source = beta
        self.writers, self.batch_size, self.max_length = writers, batch_size, max_length
        self.segment = max_length * batch_size
        self.sums = SumTree(writers * self.segment)
        self.mins = MinTree(writers * self.segment)
        self.held = [(0, 0)] * writers  # per writer, the steps [low, high) whose slots hold mass
        self.max_priority = 1.0
        self.given: np.ndarray | None = None  # the shared priority column, set once it is mapped

    def beta(self) -> float:
        return float(self.beta_source() if callable(self.beta_source) else self.beta_source)

    def cleared(self) -> None:
        self.sums.clear()
        self.mins.clear()
        self.held = [(0, 0)] * self.writers
        self.max_priority = 1.0

    # -- intake -----------------------------------------------------------------------------
    def take_in(self, lows: list[int], highs: list[int]) -> None:
        """Give every newly committed step the priorities its writer gave, or the largest so far;
        empty the slots of steps that are no longer whole. ``[lows[w], highs[w])``: writer w's
        whole steps now."""
        new = []
        for w, (low, high) in enumerate(zip(lows, highs, strict=True)):
            old_low, old_high = self.held[w]
            if (low, high) == (old_low, old_high):
                continue
            if high < old_high:  # the buffer was cleared or loaded under us: start again
                old_low = old_high = low
            new.append((w, old_low, old_high, low, high))
        slots = [self._slots(w, max(old_high, low, high - self.max_length), high) for w, _, old_high, low, high in new]
        given = [None if self.given is None else self.given[s] for s in slots]  # a copy: read once
        largest = max((float(values.max(initial=0.0)) for values in given if values is not None), default=0.0)
        self.max_priority = max(self.max_priority, largest)
        mass = priority_mass(self.max_priority, self.alpha, self.epsilon)
        for i, (w, old_low, old_high, low, high) in enumerate(new):
            values = given[i]
            if values is not None and (values > 0).any():
                masses, chosen = np.full(values.shape, mass), values > 0
                masses[chosen] = priority_masses(values[chosen], self.alpha, self.epsilon)
                self.sums.update(slots[i], masses)
                self.mins.update(slots[i], masses)
            else:
                first = max(old_high, low, high - self.max_length)
                self._fill(w, first, high, mass, mass)
            # a step u below the new low whose slot no new step took (u + L >= high) is empty now
            self._fill(w, max(old_low, high - self.max_length), min(low, old_high), 0.0, np.inf)
            self.held[w] = (low, high)

    def _fill(self, w: int, first: int, stop: int, value: float, minimum: float) -> None:
        """Set the slots of writer ``w``'s steps ``[first, stop)`` (at most max_length of them)."""
        if stop <= first:
            return
        start = w * self.segment + (first % self.max_length) * self.batch_size
        end_of_segment = (w + 1) * self.segment
        stop_slot = start + (stop - first) * self.batch_size
        wrapped = max(0, stop_slot - end_of_segment)
        for a, b in ((start, min(stop_slot, end_of_segment)), (w * self.segment, w * self.segment + wrapped)):
            if b > a:
                self.sums.update_range(a, b, value)
                self.mins.update_range(a, b, minimum)

    # -- draws ------------------------------------------------------------------------------
    def draw(
        self,
        rng: np.random.Generator,
        count: int,
        num_steps: int,
        lows: list[int],
        highs: list[int],
        windows: SumTree | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``count`` window starts by priority: ``(writer, step, stream, probabilities, weights)``.

        Starts whose window of ``num_steps`` would pass its writer's head are never drawn
        (their mass is left out of the probabilities). ``windows``: descend that tree instead
        (the masses of the valid starts only, already taken in: replaybuf.shared.windows).
        """
        if windows is None:
            self.take_in(lows, highs)
            tree, total = self.sums, self.sums.root()
            excluded_slots = self._head_slots(num_steps, lows, highs)
            excluded = float(self.sums.values(excluded_slots).sum()) if excluded_slots.size else 0.0
        else:
            tree, total, excluded = windows, windows.root(), 0.0
        if total - excluded <= 0:
            held = max(high - low for low, high in zip(lows, highs, strict=True))
            raise window_too_long(num_steps, held, self.max_length)
        low_of, high_of = np.asarray(lows), np.asarray(highs)
        slots, values = np.empty(count, np.int64), np.empty(count, np.float64)
        targets = (np.arange(count) + rng.random(count)) * (total / count)
        todo = np.arange(count)
        for _ in range(_REDRAWS):
            found, mass = np.empty(todo.size, np.int64), np.empty(todo.size, np.float64)
            tree.kernels.find(tree.tree, tree.offsets, tree.arity, targets, found, mass)
            slots[todo], values[todo] = found, mass
            writer, step, stream = slot_steps(found, self.segment, self.batch_size, self.max_length, low_of)
            bad = (mass <= 0) | (step > high_of[writer] - num_steps)
            if not bad.any():
                break
            todo = todo[bad]
            targets = rng.random(todo.size) * total  # rounding onto an empty slot or a start into the head
        else:
            raise EmptyBufferError(f"no start of a {num_steps}-step window found in {_REDRAWS} redraws")
        writer, step, stream = slot_steps(slots, self.segment, self.batch_size, self.max_length, low_of)
        probabilities = values / (total - excluded)
        smallest = self.mins.root()
        weights = np.maximum((values / smallest) ** -self.beta(), MIN_WEIGHT) if np.isfinite(smallest) else values
        return writer, step, stream, probabilities.astype(np.float32), weights.astype(np.float32)

    def _head_slots(self, num_steps: int, lows: list[int], highs: list[int]) -> np.ndarray:
        """Slots of starts whose window would pass the head: each writer's newest T - 1 steps."""
        if num_steps == 1:
            return np.empty(0, np.int64)
        parts = []
        for w, (low, high) in enumerate(zip(lows, highs, strict=True)):
            steps = np.arange(max(low, high - num_steps + 1), high)
            rows = (steps % self.max_length)[:, None] * self.batch_size + np.arange(self.batch_size)
            parts.append((w * self.segment + rows).ravel())
        return np.concatenate(parts)

    # -- checkpoints ------------------------------------------------------------------------
    def masses(self, w: int, first: int, stop: int) -> np.ndarray:
        """The tree masses of writer ``w``'s steps ``[first, stop)``, ``[(stop - first) * batch_size]``
        (step-major); the caller has taken in the current bounds."""
        return self.sums.values(self._slots(w, first, stop))

    def load(self, bounds: list[tuple[int, int]], masses: list[np.ndarray], max_priority: float) -> None:
        """Start over from checked masses: writer ``w``'s steps ``bounds[w]`` get ``masses[w]``."""
        self.cleared()
        for w, ((first, stop), mass) in enumerate(zip(bounds, masses, strict=True)):
            slots = self._slots(w, first, stop)
            self.sums.update(slots, mass)
            self.mins.update(slots, mass)
            self.held[w] = (first, stop)
        self.max_priority = max_priority

    def _slots(self, w: int, first: int, stop: int) -> np.ndarray:
        rows = (np.arange(first, stop) % self.max_length)[:, None] * self.batch_size + np.arange(self.batch_size)
        return (w * self.segment + rows).ravel()

    # -- priorities -------------------------------------------------------------------------
    def update(
        self,
        writer: np.ndarray,
        step: np.ndarray,
        stream: np.ndarray,
        priorities: np.ndarray,
        lows: list[int],
        highs: list[int],
        ids: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Set priorities of (writer, step, stream) items; stale ones (overwritten) are skipped.
        Returns which items were live and the masses they got.

        Raises:
            PriorityError: a priority that is not finite and > 0, or an id never added;
                nothing is changed.
        """
        bad = ~(np.isfinite(priorities) & (priorities > 0))
        if bad.any():
            raise bad_priorities(priorities, bad)
        low_of, high_of = np.asarray(lows), np.asarray(highs)
        never = (ids < 0) | (step >= high_of[writer])
        if never.any():
            raise unknown_ids(ids, never)
        self.take_in(lows, highs)
        live = step >= low_of[writer]
        slots = (writer * self.segment + (step % self.max_length) * self.batch_size + stream)[live]
        masses = np.array([priority_mass(p, self.alpha, self.epsilon) for p in priorities[live].tolist()])
        if slots.size:
            self.sums.update(slots, masses)
            self.mins.update(slots, masses)
            self.max_priority = max(self.max_priority, float(priorities[live].max()))
        return live, masses


def slot_steps(
    slots: np.ndarray, segment: int, batch_size: int, max_length: int, lows: list[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(writer, step, stream)`` of record ``slots`` holding steps at or above each writer's ``lows``."""
    writer, inner = np.divmod(slots, segment)
    row, stream = np.divmod(inner, batch_size)
    low_of = np.asarray(lows)[writer]
    return writer, low_of + (row - low_of) % max_length, stream
