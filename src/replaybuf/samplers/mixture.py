"""How many rows of a sample each source of a mixture gives: exact counts, a schedule's shares.

Weights are a share per source (any non-negative numbers, normalised to sum to 1), or a
schedule: a callable of the number of rows drawn so far that returns such weights. A sample
of ``N`` rows gives source ``k`` exactly ``n_k`` rows, by a deterministic rounding of the
cumulative targets (docs/design.md, "Mixtures"):

    owed_k = exact_k + N * share_k - given_k       (exact_k: the sum of every earlier call's
                                                    N * share_k; given_k: rows given so far)
    n_k    = max(0, floor(owed_k)), then the rows still missing go one each to the sources
             with the largest owed_k - n_k (ties: the earlier source); rows over N (a share
             that fell, three sources or more) come off the sources given most beyond owed_k.

With fixed weights, and with a schedule over two sources, every ``given_k`` stays within one
row of ``exact_k`` after every call; the probability of an element is ``n_k / N`` times its
probability within its source.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError

__all__ = ["RowAllocator", "Weights", "check_weights", "linear_schedule"]

Weights = Mapping[str, float] | Callable[[int], Mapping[str, float]]


def check_weights(weights: Any, names: Sequence[str], where: str = "weights") -> np.ndarray:
    """The shares (float64, summing to 1) of ``weights``, a mapping with a number >= 0 for every
    name in ``names`` and a positive sum; ArgumentError naming the source otherwise."""
    if not isinstance(weights, Mapping):
        raise ArgumentError(f"{where}: expected a dict of source name -> share, got {weights!r:.80}")
    unknown = [key for key in weights if key not in names]
    if unknown:
        raise ArgumentError(f"{where}: expected shares of the sources {list(names)}, got unknown names {unknown}")
    missing = [name for name in names if name not in weights]
    if missing:
        raise ArgumentError(f"{where}: expected a share for every source {list(names)}, missing {missing}")
    values = []
    for name in names:
        value = weights[name]
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
            raise ArgumentError(f"{where}[{name!r}]: expected a finite number >= 0, got {value!r:.80}")
        values.append(float(value))
    total = math.fsum(values)
    if not total > 0:
        raise ArgumentError(f"{where}: expected at least one share > 0, got {dict(weights)}")
    return np.array(values, np.float64) / total


def linear_schedule(start: Mapping[str, float], end: Mapping[str, float], rows: int) -> Callable[[int], dict]:
    """A schedule moving every share linearly from ``start``'s to ``end``'s (each normalised) over
    the first ``rows`` rows drawn, then staying at ``end`` (the offline share annealed to 0: ``end={"offline": 0,
    "online": 1}``).

    Raises:
        ArgumentError: ``start`` and ``end`` of different names, a share that is not a finite
            number >= 0, or ``rows`` not a positive int.
    """
    names = list(start)
    first, last = check_weights(start, names, "start"), check_weights(end, names, "end")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ArgumentError(f"rows: expected a positive int, got {rows!r}")

    def schedule(drawn: int) -> dict:
        f = min(1.0, drawn / rows)
        return dict(zip(names, ((1.0 - f) * first + f * last).tolist(), strict=True))

    return schedule


class RowAllocator:
    """The rows each of ``names`` gives to a sample, and what has been given so far (the
    schedule's position). ``counts`` computes, ``commit`` records once the rows were drawn, so
    a failed sample changes nothing."""

    def __init__(self, names: Sequence[str], weights: Weights):
        self.names = tuple(names)
        self.weights = weights
        self.drawn = 0
        self.exact = np.zeros(len(self.names), np.float64)
        self.given = np.zeros(len(self.names), np.int64)
        self.shares()  # a schedule is checked at 0 rows drawn, before any sample

    def shares(self) -> np.ndarray:
        """The shares at this point of the schedule (ArgumentError for bad weights)."""
        if callable(self.weights):
            return check_weights(self.weights(self.drawn), self.names, "weights(drawn)")
        return check_weights(self.weights, self.names)

    def counts(self, shares: np.ndarray, n: int) -> np.ndarray:
        """Rows each source gives to a sample of ``n`` (int64, summing to ``n``); see the module."""
        owed = self.exact + n * shares - self.given
        counts = np.maximum(0.0, np.floor(owed)).astype(np.int64)
        short = n - int(counts.sum())
        if short > 0:  # fewer than K rows: one each to the largest remainders
            counts[np.argsort(counts - owed, kind="stable")[:short]] += 1
        for _ in range(-short):  # a fallen share left rows over: off the source given most beyond its due
            counts[np.argmax(np.where(counts > 0, counts - owed, -np.inf))] -= 1
        return counts

    def commit(self, shares: np.ndarray, counts: np.ndarray) -> None:
        """Record a sample drawn with ``shares`` and ``counts``."""
        n = int(counts.sum())
        self.exact = self.exact + n * shares
        self.given = self.given + counts
        self.drawn += n

    def state(self) -> dict:
        """The schedule's position: rows drawn, each source's exact target and rows given."""
        return {
            "sources": list(self.names),
            "drawn": self.drawn,
            "exact": self.exact.copy(),
            "given": self.given.copy(),
        }

    def load_state(self, drawn: int, exact: np.ndarray, given: np.ndarray) -> None:
        """Continue from a checked ``state()``: its rows drawn, exact targets and rows given."""
        self.drawn, self.exact, self.given = drawn, exact.copy(), given.copy()
