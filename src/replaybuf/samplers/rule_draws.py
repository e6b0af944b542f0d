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
        """``picks`` (indices below ``count``) made distinct: every repeat but the last is drawn
        again, in position order; the redrawn that repeat a kept pick, or a later redrawn one,
        are drawn again, a round at a time, until none repeats. The procedure treats every
        index alike, so the picked set is a uniformly random subset in a uniformly random order."""
        ordered = np.sort(picks)
        if not (ordered[1:] == ordered[:-1]).any():  # the common case: nothing repeated
            return picks
        positions, stamps = np.arange(picks.shape[0]), self._stamps
        stamps[picks] = positions  # a repeated index keeps the last position written
        repeats = np.flatnonzero(stamps[picks] != positions)
        while repeats.shape[0]:
            picks[repeats] = uniform_integers(rng, 0, count, repeats.shape[0])
            kept = np.ones(picks.shape[0], bool)
            kept[repeats] = False
            stamps[picks[repeats]] = repeats  # the last redrawn keeps an index ...
            stamps[picks[kept]] = positions[kept]  # ... that no kept pick holds
            repeats = repeats[stamps[picks[repeats]] != repeats]
        return picks

    def pick(
        self, rng: np.random.Generator, pool: np.ndarray | int, count: int, size: int, distinct: bool
    ) -> np.ndarray:
        """``size`` ids of ``pool[:count]`` drawn uniformly (distinct when asked: ``count >= size``);
        an int ``pool``: the ids ``pool .. pool + count - 1``."""
        picks = uniform_integers(rng, 0, count, size)
        if distinct:
            picks = self.distinct(rng, picks, count)
        if isinstance(pool, np.ndarray):
            return pool[picks]
        picks += pool
        return picks

    def pick_counted(
        self, rng: np.random.Generator, pool: np.ndarray | int, count: int, size: int, counts: tuple
    ) -> np.ndarray:
        """``pick`` (distinct) then ``count(ids, *counts)``; ``counts``: ``(times, limit, live, origin)``."""
        ids = self.pick(rng, pool, count, size, True)
        self.count(ids, *counts)
        return ids

    def take(
        self,
        rng: np.random.Generator,
        order: np.ndarray,
        cursor: int,
        size: int,
        live: LiveSet,
        oldest: int,
        check: bool = True,
    ) -> np.ndarray:
        """The live ids among the epoch's next ``size`` (``order[cursor:]`` holds at least
        ``size``), in draw order; ``order[cursor:cursor + size]`` then holds all ``size``.
        ``check=False``: every id of ``order`` from ``oldest`` on is known live (not read)."""
        rest = order[cursor:]
        picks = self.distinct(rng, uniform_integers(rng, 0, rest.shape[0], size), rest.shape[0])
        taken = rest[picks]
        inside = np.zeros(size, bool)
        inside[picks[picks < size]] = True
        rest[picks[picks >= size]] = rest[np.flatnonzero(~inside)]  # the front's unpicked items move out
        rest[:size] = taken
        stored = taken >= oldest
        return taken[stored & live.contains(taken)] if check else taken[stored]

    @staticmethod
    def count(ids: np.ndarray, times: np.ndarray, limit: int, live: LiveSet, origin: int) -> None:
        """Count a draw of the live, distinct ``ids``; those drawn ``limit`` times leave ``live``."""
        slots = ids % live.capacity
        times[slots] += 1
        consumed = times[slots] >= limit
        if consumed.any():
            live.remove(ids[consumed])


_NO_POOL = np.zeros(0, np.int64)  # a kernel's pool when the ids are a range


class CompiledDraws:
    """The steps in one compiled call each (``replaybuf.samplers._rules_kernels``)."""

    def __init__(self, kernels: Any, capacity: int):
        self.kernels = kernels
        self._last: tuple[Any, int, int] = (None, 0, 0)  # (bit generator, its next_raw, its state)
        # scratch of the distinct picks: a bit per index of a pool (the live ids: at most capacity)
        self._bits = np.zeros(capacity // 64 + 1, np.uint64)

    def _generator(self, rng: np.random.Generator) -> tuple[Any, int, int]:
        """The addresses of ``rng``'s ``next_raw`` and state (kept for the last generator seen)."""
        last = self._last
        if last[0] is not rng.bit_generator:
            bit_generator = rng.bit_generator
            last = self._last = (bit_generator, raw_pointer(bit_generator), bit_generator.ctypes.state_address)
        return last

    def pick(
        self, rng: np.random.Generator, pool: np.ndarray | int, count: int, size: int, distinct: bool
    ) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        pool, low = (pool, 0) if isinstance(pool, np.ndarray) else (_NO_POOL, pool)
        with bit_generator.lock:
            self.kernels.pick(function, state, pool, low, count, distinct, out, self._bits)
        return out

    def pick_counted(
        self, rng: np.random.Generator, pool: np.ndarray | int, count: int, size: int, counts: tuple
    ) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        times, limit, live, origin = counts
        pool, low = (pool, 0) if isinstance(pool, np.ndarray) else (_NO_POOL, pool)
        with bit_generator.lock:
            size = self.kernels.pick_counted(
                function, state, pool, low, count, out, self._bits, times, limit, live.dense, live.where,
                live.alive, live.size, origin, live.capacity,
            )  # fmt: skip
        live.removals += live.size - size
        live.size = size
        return out

    def take(
        self,
        rng: np.random.Generator,
        order: np.ndarray,
        cursor: int,
        size: int,
        live: LiveSet,
        oldest: int,
        check: bool = True,
    ) -> np.ndarray:
        out = np.empty(size, np.int64)
        bit_generator, function, state = self._generator(rng)
        with bit_generator.lock:
            found = self.kernels.take(function, state, order, cursor, size, live.alive, check, oldest, out)
        return out if found == size else out[:found]

    def count(self, ids: np.ndarray, times: np.ndarray, limit: int, live: LiveSet, origin: int) -> None:
        size = self.kernels.count(
            ids, times, limit, live.dense, live.where, live.alive, live.size, origin, live.capacity
        )
        live.removals += live.size - size
        live.size = size


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
    return CompiledDraws(_compiled, capacity)
