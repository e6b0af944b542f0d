"""``replaybuf.HindsightRelabel`` on the NumPy buffers: the relabelled fraction (a binomial
test), the spread of "future" goals, prioritized sampling, datasets, checkpoints, a reopened
memmap folder, and every argument error. The episode rules themselves are checked against a
model in test_hindsight_state_machine.py."""

from __future__ import annotations

import numpy as np
import pytest

import replaybuf
from replaybuf import ArraySpec

SPEC = {
    "observation": {"desired_goal": ArraySpec((2,), np.float32)},
    "achieved_goal": ArraySpec((2,), np.float32),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
}
EPISODES = {"respect_episodes": True, "episode_end_field": "done"}


def distance_reward(achieved, desired, info):
    return -(np.abs(achieved - desired).sum(axis=-1) > 0).astype(np.float32)


def relabel(**overrides):
    options = {
        "goal_field": "observation/desired_goal",
        "achieved_field": "achieved_goal",
        "compute_reward": distance_reward,
    }
    return replaybuf.HindsightRelabel(**{**options, **overrides})


def fill(buffer, steps, episode_length, batch_size=2, start=0, goal=False):
    """Adds of steps ``start`` to ``start + steps``: stream s's achieved goal at step t is [s, t];
    episodes end every ``episode_length`` steps. ``goal``: the items have a second goal field."""
    for t in range(start, start + steps):
        desired = np.full((batch_size, 2), -1, np.float32)
        buffer.add_batch(
            {
                "observation": {"desired_goal": desired},
                "achieved_goal": np.stack([np.arange(batch_size), np.full(batch_size, t)], axis=1).astype(np.float32),
                "reward": np.full(batch_size, -1, np.float32),
                "done": np.full(batch_size, t % episode_length == episode_length - 1),
                **({"goal": desired} if goal else {}),
            }
        )


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.8, 1.0])
def test_relabelled_fraction_matches_the_ratio(ratio):
    rb = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=50, seed=1, her=relabel(ratio=ratio), **EPISODES)
    fill(rb, 80, 7)
    draws = 20_000
    relabelled = np.concatenate([rb.get_next(1000)[1].relabelled for _ in range(draws // 1000)])
    sigma = np.sqrt(draws * ratio * (1 - ratio))
    assert abs(relabelled.sum() - draws * ratio) <= 5 * sigma  # binomial: fails by chance ~6e-7 of the time


def test_future_goals_are_uniform_over_the_rest_of_the_episode():
    rb = replaybuf.UniformReplayBuffer(SPEC, batch_size=1, max_length=4, seed=2, her=relabel(ratio=1.0), **EPISODES)
    fill(rb, 4, 4, batch_size=1)  # one episode of steps 0..3
    counts = np.zeros((4, 4))
    for _ in range(20):
        items, info = rb.get_next(1000)
        np.add.at(counts, (info.ids, items["observation"]["desired_goal"][:, 1].astype(int)), 1)
    assert not np.tril(counts, -1).any()  # never a goal from before the sampled step
    for t in range(4):
        row = counts[t, t:]
        expected = row.sum() / row.size
        assert (np.abs(row - expected) <= 5 * np.sqrt(expected)).all()


@pytest.mark.parametrize("strategy", ["final", "episode"])
def test_final_and_episode_goals(strategy):
    rb = replaybuf.UniformReplayBuffer(
        SPEC, batch_size=1, max_length=10, seed=3, her=relabel(ratio=1.0, strategy=strategy), **EPISODES
    )
    fill(rb, 10, 5, batch_size=1)  # episodes 0..4 and 5..9
    items, info = rb.get_next(2000)
    goal = items["observation"]["desired_goal"][:, 1]
    episode_start = info.ids // 5 * 5
    if strategy == "final":
        np.testing.assert_array_equal(goal, episode_start + 4)
    else:
        assert ((goal >= episode_start) & (goal <= episode_start + 4)).all()
        assert len(np.unique(goal[info.ids == 4])) == 5  # every step of the episode is drawn
    np.testing.assert_array_equal(
        items["reward"], distance_reward(items["achieved_goal"], items["observation"]["desired_goal"], None)
    )


@pytest.mark.parametrize("num_steps", [None, 2])
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_numba_and_numpy_draw_the_same_goals(strategy, num_steps):
    """NumPy on records, numba on records and numba on columns (goals gathered, then placed):
    the same relabelled elements and the same fields, goals, achieved goals and rewards."""
    pytest.importorskip("numba")
    samples = []
    for compiled, storage in ((False, "memory"), (True, "memory"), (True, "columns")):
        her = relabel(goal_field=("observation/desired_goal", "goal"), strategy=strategy, ratio=0.6, compiled=compiled)
        spec = {**SPEC, "goal": SPEC["achieved_goal"]}
        rb = replaybuf.UniformReplayBuffer(spec, 3, 9, seed=10, her=her, storage=storage, **EPISODES)
        fill(rb, 25, 4, batch_size=3, goal=True)  # wrapped around, episodes cut by it, the newest unfinished
        samples.append([rb.get_next(64, num_steps=num_steps) for _ in range(5)])
    for other in samples[1:]:
        for (a, ia), (b, ib) in zip(samples[0], other, strict=True):
            np.testing.assert_array_equal(ia.relabelled, ib.relabelled)
            for path in ("goal", "achieved_goal", "reward", "done"):
                np.testing.assert_array_equal(a[path], b[path], err_msg=path)
            np.testing.assert_array_equal(a["observation"]["desired_goal"], b["observation"]["desired_goal"])
            np.testing.assert_array_equal(a["goal"], a["observation"]["desired_goal"])
    assert 0 < ia.relabelled.mean() < 1


def test_prioritized_sampling_keeps_its_weights_and_updates():
    rb = replaybuf.PrioritizedReplayBuffer(SPEC, batch_size=2, max_length=20, seed=4, her=relabel(), **EPISODES)
    fill(rb, 20, 5)
    rb.update_priorities(np.arange(40), np.where(np.arange(40) == 13, 1e6, 1e-3))
    items, info = rb.get_next(64)
    assert (info.ids == 13).mean() > 0.9  # the prioritized draw, not a uniform one
    assert info.weights.shape == info.relabelled.shape == (64,)
    goal = items["observation"]["desired_goal"]
    assert set(goal[info.relabelled & (info.ids == 13), 1].tolist()) <= {6.0, 7.0, 8.0, 9.0}  # stream 1, steps 6..9
    assert (goal[~info.relabelled] == -1).all()


def test_unfinished_episode_draws_only_stored_steps():
    rb = replaybuf.UniformReplayBuffer(SPEC, batch_size=1, max_length=8, seed=5, her=relabel(ratio=1.0), **EPISODES)
    fill(rb, 3, 100, batch_size=1)  # steps 0..2 of an episode still running
    assert rb.get_next(500)[0]["observation"]["desired_goal"][:, 1].max() == 2
    fill(rb, 2, 100, batch_size=1, start=3)
    goal = rb.get_next(2000)[0]["observation"]["desired_goal"][:, 1]
    assert set(goal.tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}


def test_windows_carry_one_goal_and_rewards_for_each_step():
    rb = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=30, seed=6, her=relabel(ratio=1.0), **EPISODES)
    fill(rb, 30, 6)
    items, info = rb.get_next(300, num_steps=3)
    goal = items["observation"]["desired_goal"]
    assert (goal == goal[:, :1]).all()
    assert (goal[..., 1] >= info.ids[:, -1:] // 2).all()  # at or after the window's last step
    expected = distance_reward(items["achieved_goal"].reshape(-1, 2), goal.reshape(-1, 2), None).reshape(300, 3)
    np.testing.assert_array_equal(items["reward"], expected)
    assert (items["reward"][:, -1] == 0).any() and (items["reward"] == -1).any()


def test_random_datasets_relabel_and_the_deterministic_pass_does_not():
    rb = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=10, seed=7, her=relabel(ratio=1.0), **EPISODES)
    fill(rb, 10, 5)
    items, info = next(iter(rb.as_dataset(sample_batch_size=8)))
    assert info.relabelled.all() and (items["observation"]["desired_goal"] >= 0).all()
    for items, info in rb.as_dataset(sample_batch_size=2, num_steps=5, single_deterministic_pass=True):
        assert (items["observation"]["desired_goal"] == -1).all() and not hasattr(info, "relabelled")
    assert (rb.gather_all()["observation"]["desired_goal"] == -1).all()


def test_a_loaded_checkpoint_samples_as_the_original(tmp_path):
    make = lambda: replaybuf.PrioritizedReplayBuffer(  # noqa: E731
        SPEC, batch_size=2, max_length=9, seed=8, her=relabel(strategy="episode"), **EPISODES
    )
    rb = make()
    fill(rb, 23, 4)  # wrapped around, the newest episode unfinished
    rb.save(tmp_path / "ckpt")
    copy = make()
    copy.load(tmp_path / "ckpt")
    for _ in range(3):
        (a, ia), (b, ib) = rb.get_next(64, num_steps=2), copy.get_next(64, num_steps=2)
        np.testing.assert_array_equal(ia.relabelled, ib.relabelled)
        for x, y in zip(
            *(list(map(np.asarray, (a["observation"]["desired_goal"], a["reward"]))) for a in (a, b)), strict=True
        ):
            np.testing.assert_array_equal(x, y)


def test_a_reopened_memmap_folder_relabels_within_its_episodes(tmp_path):
    options = {"batch_size": 2, "max_length": 12, "storage": "memmap", "path": tmp_path / "rb", **EPISODES}
    rb = replaybuf.UniformReplayBuffer(SPEC, seed=9, **options)
    fill(rb, 20, 5)  # episodes end at steps 4, 9, 14, 19; steps 8..19 stored
    del rb
    reopened = replaybuf.UniformReplayBuffer(SPEC, seed=9, her=relabel(ratio=1.0, strategy="final"), **options)
    items, info = reopened.get_next(500)
    np.testing.assert_array_equal(items["observation"]["desired_goal"][:, 1], (info.ids // 2) // 5 * 5 + 4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"strategy": "last"}, "strategy: expected one of 'future', 'final', 'episode', got 'last'"),
        ({"ratio": 1.5}, "ratio: expected a number in [0, 1], got 1.5"),
        ({"ratio": True}, "ratio: expected a number in [0, 1], got True"),
        ({"compute_reward": 3}, "compute_reward: expected a callable, got 3"),
        ({"goal_field": ()}, "goal_field: expected a field path or a tuple of them, got ()"),
        ({"compiled": "yes"}, "compiled: expected None, True or False, got 'yes'"),
    ],
)
def test_bad_arguments_are_refused(overrides, message):
    with pytest.raises(replaybuf.ArgumentError) as caught:
        relabel(**overrides)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("her", "options", "message"),
    [
        (relabel(achieved_field="next"), EPISODES, "achieved_field: expected the path of a field of the data_spec"),
        (relabel(goal_field=("observation/desired_goal", "x")), EPISODES, "goal_field: expected the path"),
        (relabel(reward_field="r"), EPISODES, "reward_field: expected the path of a field of the data_spec"),
        (
            relabel(goal_field="reward"),
            EPISODES,
            "goal_field: expected reward shaped like achieved_goal, (2,) float32, got () float32",
        ),
        (relabel(), {}, "her: expected respect_episodes=True"),
        ("future", EPISODES, "her: expected a replaybuf.HindsightRelabel or None, got 'future'"),
    ],
)
def test_buffers_refuse_relabelling_they_cannot_do(her, options, message):
    for kind in (replaybuf.UniformReplayBuffer, replaybuf.PrioritizedReplayBuffer):
        with pytest.raises(replaybuf.ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
            kind(SPEC, batch_size=2, max_length=4, her=her, **options)


def test_compute_reward_returning_the_wrong_count_is_an_error():
    rb = replaybuf.UniformReplayBuffer(
        SPEC, batch_size=2, max_length=8, her=relabel(ratio=1.0, compute_reward=lambda a, d, i: np.zeros(3)), **EPISODES
    )
    fill(rb, 8, 4)
    with pytest.raises(
        replaybuf.ArgumentError, match=r"compute_reward: expected 5 rewards shaped \(\) .*got an array shaped \(3,\)"
    ):
        rb.get_next(5)


def test_goals_reach_a_sampled_leaf_that_no_view_can_reshape():
    from replaybuf.hindsight.relabeller import _rows

    leaves = [np.asfortranarray(np.zeros((4, 2, 3), np.float32))]  # [n, *goal_shape] with no [n, 1, 6] view
    _rows(leaves, 0, (4, 1, 6))[[1, 3]] = np.arange(6, dtype=np.float32).reshape(1, 1, 6)
    assert leaves[0].shape == (4, 2, 3)
    np.testing.assert_array_equal(leaves[0][[1, 3]].reshape(2, 6), np.tile(np.arange(6), (2, 1)))
    assert (leaves[0][[0, 2]] == 0).all()


def test_the_compiled_goal_writes_take_goal_fields_of_different_layouts():
    pytest.importorskip("numba")
    from replaybuf.samplers._hindsight_kernels import place

    records = np.zeros(4, dtype=[("goal", np.float32, (3,)), ("achieved", np.float32, (3,))])
    records["achieved"] = np.arange(12, dtype=np.float32).reshape(4, 3)
    strided, contiguous = records["goal"].reshape(4, 1, 3), np.zeros((4, 1, 3), np.float32)
    seen = place(
        (strided, contiguous), records["achieved"].reshape(4, 1, 3), np.array([1, 3]), np.ones((2, 3), np.float32)
    )
    for goals in (records["goal"], contiguous[:, 0]):
        np.testing.assert_array_equal(goals[:, 0], [0, 1, 0, 1])
    np.testing.assert_array_equal(seen[:, 0], records["achieved"][[1, 3]])
