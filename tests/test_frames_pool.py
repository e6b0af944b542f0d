"""FramePool, the frames of a FrameStorage: a ring by frame counter that grows rather than
overwrite a frame still used, raw or compressed, and its part of a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf.errors import CheckpointError
from replaybuf.storages.codecs import make_codec
from replaybuf.storages.frame_pool import ZERO, FramePool

FRAME = (3, 5)
KINDS = [None, "lz4", "zstd"]


def pool(compression: str | None, size: int = 6) -> FramePool:
    return FramePool(FRAME, np.dtype(np.uint8), size, 2, make_codec(compression, None, 15))


def frames(first: int, count: int) -> np.ndarray:
    """Frames whose bytes name their counter."""
    return (np.arange(first, first + count, dtype=np.uint8)[:, None, None] * np.ones(FRAME, np.uint8)).copy()


def read(target: FramePool, counters: list[int]) -> np.ndarray:
    """The frames ``counters`` name (``ZERO``: the zero frame), through the pool's read path."""
    held, size, (renumbered,) = target.frames_for([np.asarray([counters], np.int64)], threads=1)
    return held[np.where(renumbered < 0, size, renumbered % size)][0]


@pytest.mark.parametrize("compression", KINDS)
def test_appends_wrap_over_unused_frames_and_grow_over_used_ones(compression):
    target = pool(compression)
    target.append(frames(0, 4), oldest=0)
    target.append(frames(4, 4), oldest=4)  # frames 0-3 unused: 4 and 5 overwrite rows 0 and 1
    assert target.size == 6 and target.counter == 8
    expected = np.stack([frames(7, 1)[0], frames(4, 1)[0], np.zeros(FRAME, np.uint8)])
    np.testing.assert_array_equal(read(target, [7, 4, ZERO]), expected)
    target.append(frames(8, 5), oldest=4)  # would overwrite frames 4-6, still used: grows first
    assert target.size >= 9 and target.counter == 13
    np.testing.assert_array_equal(read(target, list(range(4, 13))), frames(4, 9))


@pytest.mark.parametrize("source_kind", KINDS)
@pytest.mark.parametrize("target_kind", KINDS)
def test_the_checkpoint_form_loads_into_a_pool_of_either_kind(source_kind, target_kind):
    source = pool(source_kind)
    source.append(frames(0, 10), oldest=4)  # wraps: 0-3 overwritten
    state = source.state(base=5)
    target = pool(target_kind, size=3)  # smaller than the saved frames: load grows it
    assert target.check_state(state) == 5
    target.load(target.checked(state))
    assert target.counter == 5 and target.size >= 5
    np.testing.assert_array_equal(read(target, [0, 1, 2, 3, 4]), frames(5, 5))


def test_a_checkpoint_of_other_frames_is_refused():
    state = pool(None).state(base=0)
    with pytest.raises(CheckpointError, match=r"state\['frames'\]\['pool'\]: expected frames"):
        pool(None).check_state(dict(state, pool=np.zeros((2, 4, 5), np.uint8)))
    with pytest.raises(CheckpointError, match=r"state\['frames'\]\['codec'\]"):
        pool(None).check_state(dict(state, codec="gzip"))
