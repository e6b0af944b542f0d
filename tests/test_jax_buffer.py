"""JaxReplayBuffer beyond the conformance suite: its prioritized and episode options,
the state hand-off, 32-bit storage of 64-bit leaves, and checkpoints shared with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import replaybuf  # noqa: E402
from conformance_data import SPEC, as_numpy, assert_items_match_ids, step_batch  # noqa: E402
from replaybuf import ArraySpec  # noqa: E402
from replaybuf.jax import JaxReplayBuffer  # noqa: E402

DONE_SPEC = {"x": ArraySpec((), np.int32), "done": ArraySpec((), np.bool_)}


def fill(buffer, steps, start=0):
    for t in range(start, start + steps):
        buffer.add_batch(step_batch(t, buffer.batch_size))


def test_prioritized_update_and_its_errors_change_nothing():
    rb = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, sampler="prioritized", alpha=1.0, epsilon=0.0, seed=0)
    fill(rb, 6)
    _, info = rb.get_next(8)
    assert isinstance(info, replaybuf.SampleInfo) and np.asarray(info.weights).shape == (8,)
    rb.update_priorities(np.array([4, 5]), np.array([3.0, 1.0]))
    before = np.asarray(rb.state.priorities.trees.sums[0])
    with pytest.raises(replaybuf.PriorityError, match=r"ids: expected ids of added items \(0 <= id < 12\), got \[12\]"):
        rb.update_priorities(np.array([4, 12]), np.array([1.0, 1.0]))
    with pytest.raises(replaybuf.PriorityError, match="finite values > 0, got \\[nan\\]"):
        rb.update_priorities(np.array([4]), np.array([np.nan]))
    with pytest.raises(replaybuf.ArgumentError, match=r"expected integer ids shaped like priorities \(1,\)"):
        rb.update_priorities(np.array([4, 5]), np.array([1.0]))
    np.testing.assert_array_equal(np.asarray(rb.state.priorities.trees.sums[0]), before)
    rb.update_priorities(np.array([0]), np.array([50.0]))  # stale (overwritten): ignored
    np.testing.assert_array_equal(np.asarray(rb.state.priorities.trees.sums[0]), before)
    _, info = rb.get_next(4000)
    ids = np.asarray(info.ids)
    total = 3.0 + 1.0 + 6  # ids 4, 5 and six more of priority 1
    assert abs(np.mean(ids == 4) - 3.0 / total) < 0.03
    with pytest.raises(replaybuf.ArgumentError, match="prioritized"):
        JaxReplayBuffer(SPEC, batch_size=1, max_length=4).update_priorities([0], [1.0])


def test_episode_windows_never_cross_an_end_and_errors_when_none_fits():
    rb = JaxReplayBuffer(
        DONE_SPEC,
        batch_size=1,
        max_length=8,
        respect_episodes=True,
        episode_end_field="done",
        episode_num_steps=3,
        seed=0,
    )
    for t, done in enumerate([0, 1, 0, 0, 1]):  # episodes [0 1] [2 3 4]
        rb.add_batch({"x": np.array([t], np.int32), "done": np.array([bool(done)])})
    items, info = rb.get_next(64, 3)
    np.testing.assert_array_equal(np.asarray(items["x"]), np.tile([2, 3, 4], (64, 1)))
    np.testing.assert_allclose(np.asarray(info.probabilities), 1.0)
    with pytest.raises(replaybuf.EmptyBufferError, match="no stored episode holds"):
        rb.get_next(4, 4)


def test_state_hand_off_to_a_user_loop():
    rb = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, seed=0)
    fill(rb, 2)
    core = rb.core
    add = jax.jit(core.add, donate_argnums=0)
    state = rb.state
    for t in range(2, 5):
        state = add(state, step_batch(t, 2))
    rb.state = state
    assert rb.num_frames() == 8
    assert_items_match_ids(as_numpy(rb.gather_all(), np.asarray), np.arange(1, 5)[None, :] * 2 + np.arange(2)[:, None])
    with pytest.raises(replaybuf.ArgumentError, match="state"):
        rb.state = JaxReplayBuffer(SPEC, batch_size=2, max_length=5).state


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="64-bit leaves are stored as such under x64")
def test_64_bit_integers_that_do_not_fit_32_bit_storage_are_rejected():
    rb = JaxReplayBuffer(SPEC, batch_size=1, max_length=4)
    bad = step_batch(0, 1)
    bad["id"] = np.array([2**40], np.int64)
    with pytest.raises(replaybuf.SpecMismatchError, match="id.*do not fit the int32 storage"):
        rb.add_batch(bad)
    assert rb.num_frames() == 0


@pytest.mark.parametrize("prioritized", [False, True])
def test_checkpoints_load_across_numpy_and_jax(tmp_path, prioritized):
    numpy_class = replaybuf.PrioritizedReplayBuffer if prioritized else replaybuf.UniformReplayBuffer
    numpy_rb = numpy_class(SPEC, batch_size=3, max_length=5, seed=1)
    fill(numpy_rb, 8)
    if prioritized:
        numpy_rb.update_priorities(np.array([12, 13]), np.array([4.0, 0.5]))
    numpy_rb.save(tmp_path / "from-numpy")
    jax_rb = JaxReplayBuffer(
        SPEC, batch_size=3, max_length=5, sampler="prioritized" if prioritized else "uniform", seed=2
    )
    jax_rb.load(tmp_path / "from-numpy")
    assert jax_rb.num_frames() == 15
    expected_ids = np.arange(3, 8)[None, :] * 3 + np.arange(3)[:, None]
    assert_items_match_ids(as_numpy(jax_rb.gather_all(), np.asarray), expected_ids)
    if prioritized:  # the same masses and largest priority, in id order
        mine, theirs = jax_rb.state_dict()["priorities"], numpy_rb.state_dict()["priorities"]
        np.testing.assert_allclose(mine["mass"], theirs["mass"], rtol=1e-6)
        assert mine["max_priority"] == theirs["max_priority"] == 4.0
        assert np.unique(mine["mass"]).size == 3  # 4.0, 0.5 and the initial priority
    fill(jax_rb, 2, start=8)
    jax_rb.save(tmp_path / "from-jax")
    back = numpy_class(SPEC, batch_size=3, max_length=5, seed=3)
    back.load(tmp_path / "from-jax")
    assert back.num_frames() == 15
    assert_items_match_ids(back.gather_all(), np.arange(5, 10)[None, :] * 3 + np.arange(3)[:, None])
    if prioritized:
        mine = jax_rb.state_dict()["priorities"]["mass"]
        np.testing.assert_allclose(back.state_dict()["priorities"]["mass"], mine, rtol=1e-6)
        assert back.state_dict()["priorities"]["max_priority"] == 4.0


def add_done_steps(buffers, dones, start):
    for t, row in enumerate(dones, start):
        for buffer in buffers:
            buffer.add_batch({"x": np.array([10 * t, 10 * t + 1], np.int32), "done": np.array(row, bool)})


def valid_window_starts(dones, steps, max_length, size):
    """Brute force: the ids of stored windows of ``size`` steps with no end before their last."""
    low = max(steps - max_length, 0)
    return {
        t * 2 + s
        for t in range(low, steps - size + 1)
        for s in range(2)
        if not any(dones[u][s] for u in range(t, t + size - 1))
    }


def test_episode_checkpoints_load_across_numpy_and_jax(tmp_path):
    rng = np.random.default_rng(4)
    dones = (rng.random((14, 2)) < 0.3).tolist()
    options = dict(batch_size=2, max_length=6, respect_episodes=True, episode_end_field="done")
    numpy_rb = replaybuf.UniformReplayBuffer(DONE_SPEC, seed=1, **options)
    add_done_steps([numpy_rb], dones[:9], 0)
    numpy_rb.save(tmp_path / "from-numpy")
    jax_rb = JaxReplayBuffer(DONE_SPEC, seed=2, episode_num_steps=3, **options)
    jax_rb.load(tmp_path / "from-numpy")
    for key, want in numpy_rb.state_dict()["episodes"].items():
        np.testing.assert_array_equal(jax_rb.state_dict()["episodes"][key], want, err_msg=key)
    for steps, more in ((9, 0), (14, 5)):  # right after the load, then after adds to both
        add_done_steps([numpy_rb, jax_rb], dones[steps - more : steps], steps - more)
        expected = valid_window_starts(dones, steps, 6, 3)
        _, info = jax_rb.get_next(400, num_steps=3)
        drawn = np.asarray(info.ids)[:, 0]
        assert set(drawn.tolist()) == expected  # every valid start reachable, nothing else
        np.testing.assert_allclose(np.asarray(info.probabilities), 1 / len(expected), rtol=1e-6)
        np.testing.assert_allclose(numpy_rb.get_next(4, num_steps=3)[1].probabilities, 1 / len(expected))
    jax_rb.save(tmp_path / "from-jax")
    back = replaybuf.UniformReplayBuffer(DONE_SPEC, seed=3, **options)
    back.load(tmp_path / "from-jax")
    for key, want in numpy_rb.state_dict()["episodes"].items():
        np.testing.assert_array_equal(back.state_dict()["episodes"][key], want, err_msg=key)


def test_prioritized_episode_checkpoints_load_across_numpy_and_jax(tmp_path):
    rng = np.random.default_rng(8)
    dones = (rng.random((11, 2)) < 0.3).tolist()
    options = dict(batch_size=2, max_length=6, respect_episodes=True, episode_end_field="done", alpha=1.0, epsilon=0.0)
    numpy_rb = replaybuf.PrioritizedReplayBuffer(DONE_SPEC, seed=1, **options)
    add_done_steps([numpy_rb], dones, 0)
    numpy_rb.update_priorities(np.arange(10, 22), rng.uniform(0.5, 4.0, 12))
    numpy_rb.save(tmp_path / "from-numpy")
    jax_rb = JaxReplayBuffer(DONE_SPEC, seed=2, sampler="prioritized", episode_num_steps=3, **options)
    jax_rb.load(tmp_path / "from-numpy")
    saved = numpy_rb.state_dict()
    mass = dict(zip(range(10, 22), saved["priorities"]["mass"], strict=True))  # id order
    expected = valid_window_starts(dones, 11, 6, 3)
    total = sum(mass[i] for i in expected)
    _, info = jax_rb.get_next(500, num_steps=3)
    drawn = np.asarray(info.ids)[:, 0]
    assert set(drawn.tolist()) == expected
    np.testing.assert_allclose(np.asarray(info.probabilities), [mass[i] / total for i in drawn], rtol=1e-5)
    _, theirs = numpy_rb.get_next(50, num_steps=3)
    np.testing.assert_allclose(theirs.probabilities, [mass[i] / total for i in theirs.ids[:, 0]], rtol=1e-5)
    jax_rb.save(tmp_path / "from-jax")
    back = replaybuf.PrioritizedReplayBuffer(DONE_SPEC, seed=3, **options)
    back.load(tmp_path / "from-jax")
    np.testing.assert_allclose(back.state_dict()["priorities"]["mass"], saved["priorities"]["mass"], rtol=1e-6)
    for key, want in saved["episodes"].items():
        np.testing.assert_array_equal(back.state_dict()["episodes"][key], want, err_msg=key)


def test_padded_windows_match_the_numpy_buffer(tmp_path):
    rng = np.random.default_rng(11)
    dones = (rng.random((10, 2)) < 0.35).tolist()
    options = dict(batch_size=2, max_length=6, respect_episodes=True, episode_end_field="done", pad_episode_ends=True)
    numpy_rb = replaybuf.UniformReplayBuffer(DONE_SPEC, seed=1, **options)
    jax_rb = JaxReplayBuffer(DONE_SPEC, seed=2, **options)
    add_done_steps([numpy_rb, jax_rb], dones, 0)
    windows = {}
    for buffer in (numpy_rb, jax_rb):
        items, info = buffer.get_next(300, num_steps=4)
        ids, mask = np.asarray(info.ids), np.asarray(info.mask)
        np.testing.assert_array_equal(np.asarray(items["x"]), 10 * (ids // 2) + ids % 2)  # items follow the padded ids
        assert info.probabilities.shape == (300,)
        for row in range(ids.shape[0]):
            windows.setdefault(int(ids[row, 0]), set()).add((tuple(ids[row].tolist()), tuple(mask[row].tolist())))
    assert len(windows) == (6 - 4 + 1) * 2  # every start drawn by the two buffers
    assert all(len(seen) == 1 for seen in windows.values())  # the same padding from both
    _, single = jax_rb.get_next(num_steps=4)
    assert np.asarray(single.mask).shape == (4,)


def test_episode_checkpoint_without_or_with_broken_positions_is_refused(tmp_path):
    plain = replaybuf.UniformReplayBuffer(DONE_SPEC, batch_size=2, max_length=6, seed=0)
    add_done_steps([plain], [[0, 1], [1, 0], [0, 0]], 0)
    plain.save(tmp_path / "plain")
    target = JaxReplayBuffer(
        DONE_SPEC, batch_size=2, max_length=6, respect_episodes=True, episode_end_field="done", seed=0
    )
    add_done_steps([target], [[0, 0]], 0)
    before = target.state_dict()
    with pytest.raises(replaybuf.CheckpointError, match=r"state\[.episodes.\]: the checkpoint holds no episode index"):
        target.load(tmp_path / "plain")
    source = JaxReplayBuffer(
        DONE_SPEC, batch_size=2, max_length=6, respect_episodes=True, episode_end_field="done", seed=0
    )
    add_done_steps([source], [[0, 1], [1, 0], [0, 0]], 0)
    broken = source.state_dict()
    broken["episodes"]["position"][2 * 2] = 5  # step 2, stream 0: position 5 after position 1
    with pytest.raises(replaybuf.CheckpointError, match="positions of step 2 .* do not follow"):
        target.load_state_dict(broken)
    after = target.state_dict()
    assert target.num_frames() == 2 and after["steps"] == before["steps"] == 1
    for key, want in before["episodes"].items():
        np.testing.assert_array_equal(after["episodes"][key], want)


def test_checkpoint_of_another_geometry_is_refused_and_changes_nothing(tmp_path):
    source = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, seed=0)
    fill(source, 3)
    source.save(tmp_path / "ckpt")
    target = JaxReplayBuffer(SPEC, batch_size=2, max_length=5, seed=0)
    fill(target, 1)
    with pytest.raises(replaybuf.CheckpointError, match="max_length.*saved 4, this buffer has 5"):
        target.load(tmp_path / "ckpt")
    assert target.num_frames() == 2
    prioritized = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, sampler="prioritized", alpha=0.5)
    prioritized.load(tmp_path / "ckpt")  # no priorities saved: every item gets a new item's (priority 1.0)
    np.testing.assert_allclose(prioritized.state_dict()["priorities"]["mass"], np.full(6, (1 + 1e-6) ** 0.5), rtol=1e-6)


def test_same_seed_same_samples_and_restored_rng(tmp_path):
    a = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, seed=7)
    fill(a, 5)
    a.save(tmp_path / "a")
    b = JaxReplayBuffer(SPEC, batch_size=2, max_length=4, seed=99)
    b.load(tmp_path / "a")
    np.testing.assert_array_equal(np.asarray(a.get_next(16, 2)[1].ids), np.asarray(b.get_next(16, 2)[1].ids))
    assert isinstance(jnp.asarray(a.get_next(2)[0]["id"]), jax.Array)


def test_the_old_names_warn_and_are_the_new_ones():
    import replaybuf.jax

    with pytest.warns(DeprecationWarning, match="use replaybuf.jax.JaxReplayBuffer"):
        old = replaybuf.jax.JaxUniformReplayBuffer(DONE_SPEC, batch_size=2, max_length=4, sampler="prioritized")
    assert isinstance(old, JaxReplayBuffer) and hasattr(old, "update_priorities")
    with pytest.warns(DeprecationWarning, match="use replaybuf.jax.DrawInfo"):
        assert replaybuf.jax.SampleInfo is replaybuf.jax.DrawInfo
    with pytest.raises(AttributeError):
        replaybuf.jax.NoSuchName  # noqa: B018
