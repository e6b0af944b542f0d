"""Draw counts checked against the probabilities they were drawn with, cell by cell."""

from __future__ import annotations

import numpy as np


def assert_counts_follow(counts, probabilities, sigmas: float = 5.0) -> None:
    """Each cell's count of the ``sum(counts)`` draws is within ``sigmas`` of its own binomial
    standard deviation of ``n * p`` (plus one draw, for small counts), so a cell drawn too
    rarely, or never, fails however large the other cells are."""
    counts, p = np.asarray(counts, np.float64), np.asarray(probabilities, np.float64)
    expected = counts.sum() * p
    bound = sigmas * np.sqrt(expected * (1 - p)) + 1
    bad = np.abs(counts - expected) > bound
    assert not bad.any(), (
        f"cells {np.flatnonzero(bad).tolist()}: drawn {counts[bad].tolist()}, "
        f"expected {expected[bad].round(1).tolist()} +- {bound[bad].round(1).tolist()}"
    )
