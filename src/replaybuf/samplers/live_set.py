"""``LiveSet``: the stored ids a sampler may still draw, with O(1) draws and removals.

A dense array holds the live ids in no particular order and ``where[slot]`` each one's place
in it (-1: not live), so a uniform draw is an index into the dense prefix and a removal
moves the last live id into the hole. ``alive[slot]`` says whether the slot's id is live in
one byte a slot (an eighth of ``where``'s memory: it stays in cache where the compiled epoch
draw checks it). Every operation takes a batch of ids at once. ``removals`` counts the ids
removed other than by overwriting, so that an epoch's draw knows when its ids that are still
stored are all live without reading ``alive`` (a cache miss per item at 200k items).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LiveSet"]


class LiveSet:
    """Live ids of a ring of ``capacity`` slots (an id lives in slot ``id % capacity``)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.dense = np.empty(capacity, np.int64)
        self.where = np.full(capacity, -1, np.int64)
        self.alive = np.zeros(capacity, np.uint8)
        self.size = 0
        self.removals = 0  # ids removed other than as overwritten (only ever grows)

    def clear(self) -> None:
        self.where.fill(-1)
        self.alive.fill(0)
        self.size = 0

    def ids(self) -> np.ndarray:
        """The live ids (a view, in no particular order)."""
        return self.dense[: self.size]

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id is live (its slot holds it)."""
        places = self.where[ids % self.capacity]
        return (places >= 0) & (self.dense[np.maximum(places, 0)] == ids)

    def add(self, ids: np.ndarray) -> None:
        """Make ``ids`` (distinct, of empty slots) live."""
        count = ids.shape[0]
        self.dense[self.size : self.size + count] = ids
        slots = ids % self.capacity
        self.where[slots] = np.arange(self.size, self.size + count)
        self.alive[slots] = 1
        self.size += count

    def remove(self, ids: np.ndarray, overwritten: bool = False) -> None:
        """Make the live ones among ``ids`` (distinct) no longer live; ``overwritten``: ids
        whose slots now hold newer ids (not counted in ``removals``)."""
        ids = ids[self.contains(ids)]
        count = ids.shape[0]
        if not count:
            return
        if not overwritten:
            self.removals += count
        slots = ids % self.capacity
        holes = self.where[slots]
        self.where[slots] = -1
        self.alive[slots] = 0
        keep = self.size - count
        tail = self.dense[keep : self.size]
        movers = tail[self.where[tail % self.capacity] >= 0]  # tail ids that stay live
        holes = holes[holes < keep]  # holes in the kept prefix: as many as movers
        self.dense[holes] = movers
        self.where[movers % self.capacity] = holes
        self.size = keep
