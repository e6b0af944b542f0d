"""The segment parts: ``ring.WriterCursors`` (the commit rule of segments written outside the
reader's lock) and ``samplers.split.MassSplit`` (one batch over parts, exact probabilities)."""

from __future__ import annotations

import numpy as np
import pytest

from draw_counts import assert_counts_follow
from replaybuf.ring import FLOOR, STEPS, WRITING, WriterCursors
from replaybuf.samplers.split import MassSplit


def test_a_write_is_reserved_then_committed_and_readers_see_whole_steps_only():
    counters = np.zeros((2, 5), np.int64)  # two segments, two spare columns (the shared layout's)
    cursors = WriterCursors(counters, max_length=4)
    one = WriterCursors(counters[1], max_length=4)
    assert one.reserve(3) == 0 and counters[1, WRITING] == 3 and counters[1, STEPS] == 0
    low, high = cursors.bounds()
    assert low.tolist() == [0, 0] and high.tolist() == [0, 0]  # nothing committed yet
    one.commit(3)
    one.reserve(2)  # steps 3 and 4: step 4 overwrites step 0's slot
    assert [b.tolist() for b in cursors.bounds()] == [[0, 1], [0, 3]]
    assert cursors.bound_lists() == ([0, 1], [0, 3])
    assert cursors.overwritten_below() == [-4, 1]
    assert cursors.torn(np.array([1, 1, 0]), np.array([0, 1, 0])).tolist() == [True, False, False]
    one.commit(5)
    assert cursors.bound_lists() == ([0, 1], [0, 5])


def test_a_write_cut_short_moves_the_floor_past_what_it_may_have_torn():
    counters = np.zeros(3, np.int64)
    cursors = WriterCursors(counters, max_length=4)
    cursors.reserve(4)
    cursors.commit(4)
    cursors.reserve(2)  # the writer dies here: steps 4, 5 never committed, 0 and 1 maybe torn
    assert cursors.recovered_floor() == 2
    cursors.recover()
    assert counters.tolist() == [4, 4, 2] and cursors.bound_lists() == ([2], [4])
    cursors.recover()  # idempotent: nothing in progress any more
    assert counters[FLOOR] == 2


def test_a_cursor_without_a_floor_column_derives_it_without_writing():
    counters = np.array([6, 8], np.int64)  # a memmap folder's cursor: [committed, pending]
    cursors = WriterCursors(counters, max_length=4)
    assert cursors.recovered_floor() == 4
    assert counters.tolist() == [6, 8]  # read only: a second reopen finds the same floor
    cursors.reset(3, floor=1)
    assert counters.tolist() == [3, 3] and cursors.recovered_floor() == 0


def test_reset_sets_every_segment():
    counters = np.arange(10, dtype=np.int64).reshape(2, 5)
    WriterCursors(counters, max_length=4).reset()
    assert counters[:, :3].tolist() == [[0, 0, 0], [0, 0, 0]] and counters[:, 3:].tolist() == [[3, 4], [8, 9]]


def test_positions_are_located_in_their_parts_share():
    split = MassSplit([3, 0, 2])
    part, local = split.locate(np.arange(5), [10, 20, 30])
    assert part.tolist() == [0, 0, 0, 2, 2] and local.tolist() == [10, 11, 12, 30, 31]


def test_counts_follow_the_masses_and_skip_parts_without_mass():
    rng = np.random.default_rng(0)
    counts = MassSplit([1.0, 0.0, 3.0]).counts(rng, 4000)
    assert counts.sum() == 4000 and counts[1] == 0
    assert_counts_follow(counts, [0.25, 0.0, 0.75])
    assert MassSplit([0.0, 0.0]).counts(rng, 5).tolist() == [0, 0]


def test_probabilities_and_weights_are_those_of_one_buffer_over_all_parts():
    split = MassSplit([2.0, 6.0])
    np.testing.assert_allclose(split.probabilities(1, np.array([0.5, 1 / 6])), [0.375, 0.125])
    smallest = split.smallest({0: (2.0, 0.5), 1: (6.0, 1.0), 2: (0.0, 1.0)})
    assert smallest == pytest.approx(2 / 8 * 0.5 / 2)
    np.testing.assert_allclose(split.weights(np.array([0.0625, 0.25]), smallest, 1.0), [1.0, 0.25])
    assert split.weights(np.array([0.0625]), smallest, 0.0).dtype == np.float32
