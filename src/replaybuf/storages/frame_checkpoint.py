"""The ``frames`` key of a ``FrameStorage`` checkpoint: built from the items' pointers, and checked.

A checkpoint holds the frames its items use once, from the oldest one still used (the
smallest floor) to the newest, and the pointers rebased onto them (docs/images.md). Either
form of the pool (raw or compressed) loads into a storage of either kind; ``check_frames``
refuses what does not fit before anything changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.persistence.state import plain_equal
from replaybuf.storages.frame_leaves import StackedLeaf
from replaybuf.storages.frame_pool import ZERO, FramePool

__all__ = ["check_frames", "frames_state"]


def frames_state(
    pool: FramePool, stacked: Sequence[StackedLeaf], pointers: Sequence[np.ndarray], floors: np.ndarray, views: bool
) -> dict:
    """The ``frames`` of items with ``pointers`` (per stacked leaf, ``[count, k]`` counters)
    and ``floors`` (``[count]``): the pool's ``state`` from the oldest frame used (``codec``
    and ``pool``, or ``blobs`` and ``sizes``), then ``pointers`` (``{flat index: [count, k]}``
    rows of the saved frames, -1 for the zero frame), ``floors`` (each item's oldest saved
    row) and ``axes`` (each stacked leaf's stack axis)."""
    base = int(floors.min()) if floors.size else pool.counter
    rebased = {
        str(leaf.index): np.where(rows >= 0, rows - base, ZERO) for leaf, rows in zip(stacked, pointers, strict=True)
    }
    return pool.state(base, views) | {
        "pointers": rebased,
        "floors": floors - base,
        "axes": [leaf.axis for leaf in stacked],
    }


def check_frames(frames: object, stacked: Sequence[StackedLeaf], pool: FramePool) -> int:
    """The item count of a checkpoint's ``frames``; CheckpointError when it is not a
    ``frames_state`` for ``stacked`` leaves whose frames fit ``pool`` (axes, the saved frames,
    pointers inside them, floors not above a frame an item uses)."""
    if not isinstance(frames, dict):
        raise CheckpointError(f"state['frames']: expected a dict, got {type(frames).__name__}")
    pointers, floors = frames.get("pointers"), frames.get("floors")
    m = pool.check_state(frames)
    if not plain_equal(frames.get("axes"), [leaf.axis for leaf in stacked]):
        raise CheckpointError(
            f"state['frames']['axes']: saved stack axes {frames.get('axes')!r:.80}, this buffer has "
            f"{[leaf.axis for leaf in stacked]}"
        )
    if not isinstance(floors, np.ndarray) or floors.ndim != 1 or floors.dtype != np.int64:
        raise CheckpointError("state['frames']['floors']: expected a 1-d int64 array")
    count = floors.shape[0]
    keys = sorted(str(leaf.index) for leaf in stacked)
    if not isinstance(pointers, dict) or set(pointers) != set(keys):
        raise CheckpointError(f"state['frames']['pointers']: expected arrays for leaves {keys}")
    oldest = np.full(count, m, np.int64)
    for leaf in stacked:
        rows = pointers[str(leaf.index)]
        if not isinstance(rows, np.ndarray) or rows.shape != (count, leaf.length) or rows.dtype != np.int64:
            raise CheckpointError(
                f"state['frames']['pointers'][{str(leaf.index)!r}]: expected ({count}, {leaf.length}) int64"
            )
        if count and (rows.min() < ZERO or rows.max() >= m):
            raise CheckpointError(f"state['frames']['pointers']: rows outside the pool of {m} frames")
        oldest = np.minimum(oldest, np.where(rows >= 0, rows, m).min(axis=1, initial=m))
    if count and (floors.min() < 0 or (floors > oldest).any()):
        raise CheckpointError("state['frames']['floors']: an item's floor is above a frame it uses")
    return count
