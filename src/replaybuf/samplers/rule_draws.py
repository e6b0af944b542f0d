"""The draws of the sample-count rules (``replaybuf.samplers.rules``), in NumPy or compiled.

Three steps make every ruled sample: ``pick`` (uniform draws from the live ids, distinct
under ``max_times_sampled``), ``take`` (an epoch's next items) and ``count`` (a draw counted,
the items drawn ``max_times_sampled`` times taken out of the live set). ``NumpyDraws`` does
each in NumPy passes; ``CompiledDraws`` calls ``replaybuf.samplers._rules_kernels`` (numba,
the ``fast`` extra), one call a step, with the same results: same raw draws from the same
generator, same order of the live ids after. ``rule_draws(compiled)`` picks one.

An epoch is drawn lazily, a batch at a time: ``size`` distinct positions of the epoch's
undrawn rest are drawn uniformly and moved to its front, so the epoch's order is a uniformly
random permutation without shuffling every item when the epoch begins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.samplers.bounded import raw_pointer
from replaybuf.samplers.live_set import LiveSet
from replaybuf.samplers.uniform import uniform_integers

__all__ = ["CompiledDraws", "NumpyDraws", "rule_draws"]


class NumpyDraws:
    """The steps in NumPy (see the module), for a ring of ``capacity`` slots."""

    def __init__(self, capacity: int):
        self._stamps = np.zeros(capacity, np.int64)  # scratch of ``distinct``, by index into a pool

    def distinct(self, rng: np.random.Generator, picks: np.ndarray, count: int) -> np.ndarray:
        """``picks`` (indices below ``count``) made distinct: every repeat but the last drawn
        again, a round at a time, until none is repeated. The procedure treats every index
        alike, so the picked set is a uniformly random subset in a uniformly random order."""
        ordered = np.sort(picks)
        if not (ordered[1:] == ordered[:-1]).any():  # the common case: nothing repeated
            return picks
        order, stamps = np.arange(picks.shape[0]), self._stamps
        while True:
            stamps[picks] = order  # a repeated index keeps the last position written
            repeats = np.flatnonzero(stamps[picks] != order)
            if not repeats.shape[0]:
                return picks
            picks[repeats] = uniform_integers(rng, 0, count, repeats.shape[0])

    def pick(self, rng: np.random.Generator, pool: np.ndarray, count: int, size: int, distinct: bool) -> np.ndarray:
        """``size`` ids of ``pool[:count]`` drawn uniformly (distinct when asked: ``count >= size``)."""
        picks = uniform_integers(rng, 0, count, size)
        if distinct:
            picks = self.distinct(rng, picks, count)
        return pool[picks]

    def pick_counted(
        self, rng: np.random.Generator, pool: np.ndarray, count: int, size: int, counts: tuple
    ) -> np.ndarray:
        """``pick`` (distinct) then ``count(ids, *counts)``; ``counts``: ``(times, limit, live, origin)``."""
        ids = self.pick(rng, pool, count, size, True)
        self.count(ids, *counts)
        return ids

    def take(
        self, rng: np.random.Generator, order: np.ndarray, cursor: int, size: int, live: LiveSet, oldest: int
    ) -> np.ndarray:
        """The live ids among the epoch's next ``size`` (``order[cursor:]`` holds at least
        ``size``), in draw order; ``order[cursor:cursor + size]`` then holds all ``size``."""
        rest = order[cursor:]
        picks = self.distinct(rng, uniform_integers(rng, 0, rest.shape[0], size), rest.shape[0])
        taken = rest[picks]
        inside = np.zeros(size, bool)
        inside[picks[picks < size]] = True
        rest[picks[picks >= size]] = rest[np.flatnonzero(~inside)]  # the front's unpicked items move out
        rest[:size] = taken
        return taken[(taken >= oldest) & live.contains(taken)]

    @staticmethod
    def count(ids: np.ndarray, times: np.ndarray, limit: int, live: LiveSet, origin: int) -> None:
        """Count a draw of the live, distinct ``ids``; those drawn ``limit`` times leave ``live``."""
        slots = ids % live.capacity
        times[slots] += 1
        consumed = times[slots] >= limit
        if consumed.any():
            live.remove(ids[consumed])


class CompiledDraws:
    """The steps in one compiled call each (``replaybuf.samplers._rules_kernels``)."""

    def __init__(self, kernels: Any):
        self.kernels = kernels
        self._last: tuple[Any, int, int] = (None, 0, 0)  # (bit generator, its next_raw, its state)

    def _generator(self, rng: np.random.Generator) -> tuple[Any, int, int]:
        """The addresses of ``rng``'s ``next_raw`` and state (kept for the last generator seen)."""
        last = self._last
        if last[0] is not rng.bit_generator:
            bit_generator = rng.bit_generator
            last = self._last = (bit_generator, raw_pointer(bit_generator), bit_generator.ctypes.state_address)
        return last

    def pick(self, rng: np.random.Generator, pool: np.ndarray, count: int, size: int, distinct: bool) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        with bit_generator.lock:
            self.kernels.pick(function, state, pool, count, distinct, out)
        return out

    def pick_counted(
        self, rng: np.random.Generator, pool: np.ndarray, count: int, size: int, counts: tuple
    ) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        times, limit, live, origin = counts
        with bit_generator.lock:
            live.size = self.kernels.pick_counted(
                function, state, pool, count, out, times, limit, live.dense, live.where, live.alive, live.size,
                origin, live.capacity,
            )  # fmt: skip
        return out

    def take(
        self, rng: np.random.Generator, order: np.ndarray, cursor: int, size: int, live: LiveSet, oldest: int
    ) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        capacity = live.capacity
        with bit_generator.lock:
            found = self.kernels.take(
                function, state, order, cursor, size, live.alive, oldest, oldest - oldest % capacity, capacity, out
            )
        return out[:found]

    def count(self, ids: np.ndarray, times: np.ndarray, limit: int, live: LiveSet, origin: int) -> None:
        live.size = self.kernels.count(
            ids, times, limit, live.dense, live.where, live.alive, live.size, origin, live.capacity
        )


_compiled: Any = False  # not looked up yet; then the kernels module, or None without numba


def rule_draws(capacity: int, compiled: bool | None = None) -> Any:
    """A new ``CompiledDraws`` when ``compiled`` is None and numba is importable (compiled or
    loaded from the disk cache once), ``NumpyDraws`` when False; True insists on numba (ImportError)."""
    global _compiled
    if compiled is False:
        return NumpyDraws(capacity)
    if _compiled is False:
        try:
            from replaybuf.samplers import _rules_kernels

            _rules_kernels.warm_up()
            _compiled = _rules_kernels
        except ImportError:
            _compiled = None
    if _compiled is None:
        if compiled:
            raise ImportError("compiled=True: numba is not installed (pip install 'replaybuf[fast]')")
        return NumpyDraws(capacity)
    return CompiledDraws(_compiled)
