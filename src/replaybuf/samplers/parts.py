"""Sample-count rules over several parts (a shared buffer's writer segments, Ray shards), exactly.

Each part keeps the rules of its own items (a ``RuledSampler``: counts, versions, its share of
the epoch); this module decides how many starts each part draws, so that a batch is what one
``RuledSampler`` over all the parts' items would draw (docs/sample_rules.md, "Many writers"):

- with replacement, uniform over every eligible start: a multinomial split over the parts'
  eligible counts, or, when a batch's starts must be distinct (``max_times_sampled``), a
  multivariate hypergeometric one (a uniformly random subset of them all, by part);
- epochs (``replacement=False``): every part begins its epoch at the same call, and each batch
  is split hypergeometrically over the starts each part has left, so the batches walk one
  uniformly random permutation of all the parts' starts: each exactly once per epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf.errors import EmptyBufferError

__all__ = ["EpochSplit", "split_counts"]


def split_counts(rng: np.random.Generator, n: int, eligible: np.ndarray, distinct: bool) -> np.ndarray:
    """How many of ``n`` uniform draws over every eligible start each part makes.

    Raises:
        EmptyBufferError: no eligible start, or fewer than ``n`` when they must be distinct.
    """
    eligible = np.asarray(eligible, np.int64)
    total = int(eligible.sum())
    if total == 0 or (distinct and total < n):
        raise EmptyBufferError(
            f"sample_batch_size={n}: only {total} eligible items (not yet consumed, not stale) fit the sample; "
            "add more items"
            + (" or sample fewer (a batch's items are distinct under max_times_sampled)" if distinct else "")
        )
    if eligible.size == 1:
        return np.array([n], np.int64)
    if distinct:
        return rng.multivariate_hypergeometric(eligible, n)
    return rng.multinomial(n, eligible / total)


class EpochSplit:
    """The epoch of ``parts`` parts: how many starts each has left, the epoch's size and number."""

    def __init__(self, parts: int):
        self.left = np.zeros(parts, np.int64)
        self.size = self.epoch = 0

    def cleared(self) -> None:
        self.left[:] = 0
        self.size = self.epoch = 0

    def restore(self, epoch: int, size: int, left: np.ndarray) -> None:
        """The parts' epoch after a load: its number, size and each part's starts left."""
        self.epoch, self.size, self.left = int(epoch), int(size), np.asarray(left, np.int64).copy()

    def batch(
        self,
        rng: np.random.Generator,
        n: int,
        begin: Callable[[], Any],
        take: Callable[[np.ndarray], tuple[Any, int, Any]],
        drop_remainder: bool,
    ) -> tuple[list, int, int]:
        """The next ``n`` starts of the epoch (fewer at its end, unless ``drop_remainder``), a new
        epoch begun when this one is spent: ``(takes, epoch size, epoch)``.

        ``begin()`` begins every part's epoch and returns each one's size; ``take(counts)`` draws
        ``counts[k]`` (at most what part k has left) from each part and returns ``(result,
        starts drawn, each part's starts left)``. A part comes short only when starts of its
        epoch stopped being eligible; the rest of the batch is then split again.

        Raises:
            EmptyBufferError: no eligible start for a new epoch, or (``drop_remainder``) fewer
                than ``n``.
        """
        found: list = []
        got = 0
        while got < n:
            if not self.left.any():
                if got:  # the epoch ended short of a whole batch
                    if not drop_remainder:
                        break
                    found, got = [], 0
                sizes = np.asarray(begin(), np.int64)
                size = int(sizes.sum())
                if size == 0:
                    raise EmptyBufferError(f"sample_batch_size={n}: no eligible item for a new epoch; add more items")
                if drop_remainder and size < n:
                    raise EmptyBufferError(
                        f"sample_batch_size={n}: an epoch of {size} items has no whole batch "
                        "(drop_remainder=True); add more items or sample fewer"
                    )
                self.left, self.size, self.epoch = sizes, size, self.epoch + 1
            counts = rng.multivariate_hypergeometric(self.left, min(n - got, int(self.left.sum())))
            result, took, left = take(counts)
            self.left = np.asarray(left, np.int64)
            found.append(result)
            got += took
        return found, self.size, self.epoch
