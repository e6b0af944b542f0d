"""``WholeSample``: a relabelled sample of a record storage in one compiled call.

``get_next(n)`` of a ``UniformReplayBuffer(respect_episodes=True, her=...)`` draws and reads in
parts: the episode sampler's ids (``BoundedIntegers``), the record gather
(``RecordStorage.read``), the relabelling's raw draws, coins, goal slots and goal reads
(``Relabeller.draw``), the goal writes (``Relabeller.apply``). Here the same draws, in the same
order from the same generator, and the same copies are one numba call
(``_hindsight_kernels.sample_records``) whose random reads are prefetched ahead; Python keeps
``compute_reward`` and the reward writes (``Relabeller.apply``, given the achieved goals the
call gathered). The samples are the parts' (tests/test_hindsight_records.py); the time is
about 0.77x theirs (0.88x as first built, then 0.87x of that: bench/analysis/86-her.md). Used
for batched single transitions (``num_steps=None``) with numba installed, records in memory
whose size and goal fields are whole 32-bit words, and ranges the 32-bit draw covers; anything
else runs the parts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replaybuf.hindsight.relabeller import Drawn
from replaybuf.ring import StreamRing
from replaybuf.samplers.bounded import SPAN_LIMIT, pointers, raw_pointer
from replaybuf.samplers.hindsight import kernels
from replaybuf.samplers.uniform import filled_probabilities
from replaybuf.storages.records import RecordStorage
from replaybuf.storages.row_copy import PARALLEL_BYTES

__all__ = ["WholeSample"]

_WORD = 4  # bytes: the kernel copies records and goals as uint32 words


class WholeSample:
    """The one-call sample of a ``Relabeller`` (``relabeller``) whose buffer samples episodes
    uniformly; ``__call__`` returns None wherever the parts must run instead."""

    def __init__(self, relabeller: Any):
        self.relabeller = relabeller
        self._layout: tuple[Any, Any] = (None, None)  # (records, their word layout or None)
        self._generator: tuple[Any, int, int, int] = (None, 0, 0, 0)  # (bit generator, next_uint32, next_raw, state)

    def _words(self, storage: RecordStorage) -> Any:
        """``(records as words, goal word offsets, achieved word offset, goal dtype, goal elements)``
        of ``storage``, or None when its records are not whole words in memory."""
        records = storage.records
        if self._layout[0] is records:
            return self._layout[1]
        relabeller, fields = self.relabeller, storage.dtype.fields
        names = storage.dtype.names
        goal_dtype, achieved_at = fields[names[relabeller.achieved]][:2]
        offsets = [fields[names[i]][1] for i in relabeller.goals]
        whole = (
            type(records) is np.ndarray
            and records.flags.c_contiguous
            and storage.dtype.itemsize % _WORD == 0
            and goal_dtype.itemsize % _WORD == 0
            and all(offset % _WORD == 0 for offset in (*offsets, achieved_at))
        )
        layout = None
        if whole:
            words = records.view(np.uint32).reshape(records.shape[0], -1)
            goal_words = np.array(offsets, np.int64) // _WORD
            layout = (words, goal_words, achieved_at // _WORD, goal_dtype.base, math.prod(goal_dtype.shape))
        self._layout = (records, layout)
        return layout

    def __call__(self, rng: np.random.Generator, ring: StreamRing, storage: Any, size: int) -> tuple | None:
        """``(ids, probabilities, leaves, drawn)`` of a relabelled sample of ``size`` single items,
        the goals written (``drawn.seen`` set), or None.

        Raises:
            EmptyBufferError: nothing is stored (as the sampler raises).
        """
        relabeller = self.relabeller
        compiled = kernels(relabeller.her.compiled)
        if compiled is None or type(storage) is not RecordStorage or size * storage.dtype.itemsize >= PARALLEL_BYTES:
            return None
        layout = self._words(storage)
        if layout is None:
            return None
        low, high = ring.window_starts(1)
        batch = ring.batch_size
        starts = (high - low) * batch
        if starts - 1 >= SPAN_LIMIT:  # as BoundedIntegers: wider ranges are drawn by Generator.integers
            return None
        bit_generator = rng.bit_generator
        if self._generator[0] is not bit_generator:
            next32, state = pointers(bit_generator)
            self._generator = (bit_generator, next32, raw_pointer(bit_generator), state)
        _, next32, raw, state = self._generator
        words, offsets, achieved, goal, elements = layout
        out = np.empty((size, words.shape[1]), np.uint32)  # records as words: cheaper than a structured array
        ids, relabelled, rows = np.empty(size, np.int64), np.empty(size, np.bool_), np.empty(size, np.int64)
        found = np.empty((2, size, elements), goal)
        with bit_generator.lock:  # as Generator.integers and random_raw: other users of it wait
            count = compiled.sample_records(
                next32,
                raw,
                state,
                low * batch,
                starts - 1,
                words,
                out,
                ids,
                relabelled,
                rows,
                found,
                relabeller.threshold,
                relabeller.strategy,
                *relabeller.ends.arguments(),
                offsets,
                achieved,
            )
        goals, seen = found[:, :count]
        drawn = Drawn(relabelled, rows[:count], goals, 1, seen)
        records = np.frombuffer(out, storage.dtype)
        leaves = [records[name] for name in storage.dtype.names]
        return ids, filled_probabilities(1.0 / starts, size), leaves, drawn
