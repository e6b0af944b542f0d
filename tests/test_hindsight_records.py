"""``hindsight_records.WholeSample``: a relabelled sample of records in one compiled call draws
and returns what the parts (sampler, record read, relabelling) do, item for item, and leaves
the generator where they leave it; samples it does not cover run the parts."""

from __future__ import annotations

import numpy as np
import pytest

import replaybuf
from replaybuf import ArraySpec
from test_hindsight import EPISODES, SPEC, fill, relabel

pytest.importorskip("numba")

TWO_GOALS = {**SPEC, "goal": SPEC["achieved_goal"]}


class Counted:
    """A buffer's ``WholeSample`` that counts the samples it made (not None)."""

    def __init__(self, whole):
        self.whole, self.made = whole, 0

    def __call__(self, *args):
        got = self.whole(*args)
        self.made += got is not None
        return got


def pair(spec=TWO_GOALS, goal_field=("observation/desired_goal", "goal"), **options):
    """Two buffers alike, filled alike; the first samples in one call (counted), the second by parts."""
    buffers = []
    for _ in range(2):
        her = relabel(goal_field=goal_field, **options)
        buffer = replaybuf.UniformReplayBuffer(spec, 3, 9, seed=10, her=her, **EPISODES)
        fill(buffer, 25, 4, batch_size=3, goal="goal" in spec)  # wrapped around, the newest episode unfinished
        buffers.append(buffer)
    buffers[0].relabel.whole = Counted(buffers[0].relabel.whole)
    buffers[1].relabel.whole = None
    return buffers


def assert_same(got, want):
    (items, info), (expected, expected_info) = got, want
    for name in ("ids", "probabilities", "relabelled"):
        np.testing.assert_array_equal(getattr(info, name), getattr(expected_info, name), err_msg=name)
    for path in items:
        if isinstance(items[path], dict):
            for key in items[path]:
                np.testing.assert_array_equal(items[path][key], expected[path][key], err_msg=f"{path}/{key}")
        else:
            np.testing.assert_array_equal(items[path], expected[path], err_msg=path)


@pytest.mark.parametrize("ratio", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_one_call_samples_what_the_parts_sample(strategy, ratio):
    whole, parts = pair(strategy=strategy, ratio=ratio)
    for size in (1, 64, 7):
        assert_same(whole.get_next(size), parts.get_next(size))
    assert whole.relabel.whole.made == 3
    assert_same(whole.get_next(16, num_steps=2), parts.get_next(16, num_steps=2))  # windows: the parts
    assert_same(whole.get_next(), parts.get_next())  # unbatched: the parts
    assert whole.relabel.whole.made == 3
    assert_same(whole.get_next(32), parts.get_next(32))  # and the generators stayed together


@pytest.mark.parametrize(
    "dtype, shape", [(np.float64, (2,)), (np.int16, (4,)), (np.int32, ()), (np.uint8, (2, 4))], ids=str
)
def test_goals_of_any_whole_word_dtype_are_sampled_in_one_call(dtype, shape):
    """The kernel copies goals as words and views them in their own dtype: 8-byte elements,
    several elements to a word, scalar and 2-D goals. The episode ends come last in the record
    (fields are laid out by name), so that every goal starts on a word."""
    goal = ArraySpec(shape, dtype)
    spec = {
        "observation": {"desired_goal": goal},
        "achieved_goal": goal,
        "reward": SPEC["reward"],
        "terminal": SPEC["done"],
    }
    buffers = []
    for whole in (True, False):
        her = relabel(compute_reward=lambda a, d, i: -(a != d).reshape(len(a), -1).any(-1).astype(np.float32))
        buffer = replaybuf.UniformReplayBuffer(
            spec, 2, 8, seed=4, her=her, respect_episodes=True, episode_end_field="terminal"
        )
        for t in range(13):  # wrapped around, the newest episodes unfinished
            achieved = (np.arange(2 * int(np.prod(shape))).reshape(2, *shape) + 7 * t).astype(dtype)
            buffer.add_batch(
                {
                    "observation": {"desired_goal": np.zeros((2, *shape), dtype)},
                    "achieved_goal": achieved,
                    "reward": np.zeros(2, np.float32),
                    "terminal": np.array([t % 3 == 2, t % 4 == 3]),
                }
            )
        buffer.relabel.whole = Counted(buffer.relabel.whole) if whole else None
        buffers.append(buffer)
    for size in (5, 64):
        got, want = buffers[0].get_next(size), buffers[1].get_next(size)
        assert_same(got, want)
        assert got[0]["observation"]["desired_goal"].dtype == dtype
    assert buffers[0].relabel.whole.made == 2


def test_records_that_are_not_whole_words_are_sampled_by_parts():
    goal = ArraySpec((3,), np.uint8)  # 3-byte goals: no word layout
    spec = {"observation": {"desired_goal": goal}, "achieved_goal": goal, **{k: SPEC[k] for k in ("reward", "done")}}
    buffers = []
    for whole in (True, False):
        her = relabel(compute_reward=lambda a, d, i: -(np.abs(a.astype(int) - d).sum(-1) > 0).astype(np.float32))
        buffer = replaybuf.UniformReplayBuffer(spec, 1, 8, seed=1, her=her, **EPISODES)
        for t in range(10):
            buffer.add_batch(
                {
                    "observation": {"desired_goal": np.zeros((1, 3), np.uint8)},
                    "achieved_goal": np.full((1, 3), t, np.uint8),
                    "reward": np.zeros(1, np.float32),
                    "done": np.array([t % 3 == 2]),
                }
            )
        buffer.relabel.whole = Counted(buffer.relabel.whole) if whole else None
        buffers.append(buffer)
    assert_same(buffers[0].get_next(32), buffers[1].get_next(32))
    assert buffers[0].relabel.whole.made == 0


def test_an_empty_buffer_raises_what_the_parts_raise():
    buffer = replaybuf.UniformReplayBuffer(SPEC, 2, 4, seed=0, her=relabel(), **EPISODES)
    with pytest.raises(replaybuf.EmptyBufferError):
        buffer.get_next(8)


def test_columns_and_prioritized_buffers_have_no_one_call_sample():
    columns = replaybuf.UniformReplayBuffer(SPEC, 2, 4, her=relabel(), storage="columns", **EPISODES)
    fill(columns, 6, 3)
    columns.relabel.whole = Counted(columns.relabel.whole)
    assert columns.get_next(8)[1].relabelled.shape == (8,)
    assert columns.relabel.whole.made == 0  # the parts
    prioritized = replaybuf.PrioritizedReplayBuffer(SPEC, 2, 4, her=relabel(), **EPISODES)
    assert prioritized.relabel.whole is None
