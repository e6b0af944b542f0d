"""SharedReplayBuffer(sampler="prioritized"): the learner's priorities over the writers' segments."""
# ruff: noqa: F811  (pytest fixtures imported from shared_workers are parameters here)

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest

from conformance_data import SPEC, assert_items_match_ids, fields_for_ids
from draw_counts import assert_counts_follow
from replaybuf import SampleInfo
from replaybuf.errors import ArgumentError, CheckpointError, PriorityError
from replaybuf.shared import SharedReplayBuffer
from shared_workers import (  # noqa: F401 (fixtures)
    buffers,
    no_leaked_segments,
    write,
    write_prioritized_steps,
    write_steps,
)

pytestmark = pytest.mark.timeout(300)  # generous: a loaded 2-core machine starts spawn children slowly


def test_without_updates_every_item_is_equally_likely_with_weight_one(buffers):
    buffer = buffers(SPEC, writers=2, batch_size=2, max_length=8, sampler="prioritized", seed=0)
    write(buffer.writer(0), range(5))
    write(buffer.writer(1), range(3))
    items, info = buffer.get_next(64)
    assert isinstance(info, SampleInfo)
    assert_items_match_ids(items, info.ids)
    np.testing.assert_allclose(info.probabilities, 1 / 16, rtol=1e-6)
    np.testing.assert_allclose(info.weights, 1.0)
    seen = set()
    for _ in range(30):
        seen.update(buffer.get_next(64)[1].ids.tolist())
    assert seen == {t * 4 + s for t in range(5) for s in (0, 1)} | {t * 4 + 2 + s for t in range(3) for s in (0, 1)}


def test_updated_priorities_set_probabilities_and_weights(buffers):
    buffer = buffers(
        SPEC, writers=2, batch_size=1, max_length=8, sampler="prioritized", alpha=1.0, beta=1.0, epsilon=0.0, seed=1
    )
    write(buffer.writer(0), range(3))  # ids 0, 2, 4
    write(buffer.writer(1), range(1))  # id 1
    buffer.update_priorities(np.array([0, 2, 4, 1]), np.array([1.0, 1.0, 1.0, 7.0]))
    items, info = buffer.get_next(2000)
    assert_items_match_ids(items, info.ids)
    assert_counts_follow([np.sum(info.ids == i) for i in (0, 1, 2, 4)], [0.1, 0.7, 0.1, 0.1])  # 7 of 10 for id 1
    np.testing.assert_allclose(info.probabilities[info.ids == 1], 0.7, rtol=1e-6)
    np.testing.assert_allclose(info.probabilities[info.ids == 0], 0.1, rtol=1e-6)
    np.testing.assert_allclose(info.weights[info.ids == 1], 1 / 7, rtol=1e-5)  # (P / P_min) ** -1
    write(buffer.writer(1), [1])  # a new item gets the largest priority so far (7)
    _, info = buffer.get_next(10)
    np.testing.assert_allclose(info.probabilities[info.ids == 3], 7 / 17, rtol=1e-6)


def test_stale_ids_are_ignored_and_bad_updates_change_nothing(buffers):
    buffer = buffers(SPEC, writers=1, batch_size=1, max_length=4, sampler="prioritized", alpha=1.0, epsilon=0.0)
    writer = buffer.writer(0)
    write(writer, range(4))
    write(writer, range(4, 6))  # ids 0 and 1 overwritten
    buffer.update_priorities(np.array([0, 1, 5]), np.array([50.0, 50.0, 3.0]))  # 0, 1 stale: ignored
    _, info = buffer.get_next(10)
    np.testing.assert_allclose(info.probabilities[info.ids == 5], 3 / 6, rtol=1e-6)
    before = buffer.get_next(1)[1]
    with pytest.raises(PriorityError, match="expected finite values > 0, got \\[0.0\\] at positions \\[1\\]"):
        buffer.update_priorities(np.array([4, 5]), np.array([2.0, 0.0]))
    with pytest.raises(PriorityError, match="ids: expected ids of added items, got \\[6\\]"):
        buffer.update_priorities(np.array([4, 6]), np.array([2.0, 2.0]))
    with pytest.raises(ArgumentError, match="priorities: expected numbers"):
        buffer.update_priorities(np.array([4, 5]), ["high", "low"])
    with pytest.raises(ArgumentError, match="expected integer ids shaped like priorities \\(3,\\)"):
        buffer.update_priorities(np.array([4, 5]), np.array([2.0, 2.0, 2.0]))
    _, info = buffer.get_next(10)
    np.testing.assert_allclose(info.probabilities[info.ids == 5], 3 / 6, rtol=1e-6)  # unchanged
    assert before.ids in (2, 3, 4, 5)


def test_windows_never_pass_the_head_and_are_renormalised(buffers):
    buffer = buffers(SPEC, writers=2, batch_size=1, max_length=8, sampler="prioritized", seed=2)
    write(buffer.writer(0), range(6))
    write(buffer.writer(1), range(3))
    for _ in range(20):
        items, info = buffer.get_next(32, 3)
        assert_items_match_ids(items, info.ids)
        steps, columns = np.divmod(info.ids, 2)
        assert (steps[:, -1] < np.where(columns[:, 0] == 0, 6, 3)).all()
        np.testing.assert_allclose(info.probabilities, 1 / (4 + 1), rtol=1e-6)  # starts 0-3 and 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sampler": "rank"}, "sampler: expected 'uniform' or 'prioritized', got 'rank'"),
        ({"alpha": 0.5}, "alpha: only used with sampler='prioritized', got alpha=0.5"),
        ({"sampler": "prioritized", "alpha": -1}, "alpha: expected a finite float >= 0, got -1"),
        ({"sampler": "prioritized", "beta": 2}, "beta: expected a float in \\[0, 1\\] or a callable, got 2"),
    ],
)
def test_bad_sampler_arguments_are_rejected(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        SharedReplayBuffer(SPEC, **kwargs)


def test_a_uniform_buffer_has_no_priorities_to_update(buffers):
    buffer = buffers(SPEC)
    buffer.add_batch(fields_for_ids(np.array([0])))
    with pytest.raises(ArgumentError, match="samples uniformly; build it with sampler='prioritized'"):
        buffer.update_priorities(np.array([0]), np.array([1.0]))


def test_prioritized_sampling_while_writer_processes_wrap(buffers):
    buffer = buffers(SPEC, writers=3, batch_size=2, max_length=32, sampler="prioritized", seed=4)
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=write_steps, args=(buffer.writer(w, flush_every=4), 0, 1500)) for w in range(3)]
    for proc in procs:
        proc.start()
    try:
        deadline = time.monotonic() + 120
        while buffer.num_frames() < 3 * 2 * 8:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        rounds = 0
        while any(p.is_alive() for p in procs) and rounds < 2000:
            items, info = buffer.get_next(64, 2)
            assert_items_match_ids(items, info.ids)
            buffer.update_priorities(info.ids, np.abs(info.ids[:, 0] % 7) + 0.5)
            rounds += 1
        for proc in procs:
            proc.join(120)
        assert [p.exitcode for p in procs] == [0, 0, 0] and rounds > 0
        items, info = buffer.get_next(256, 2)
        assert_items_match_ids(items, info.ids)
        assert (info.ids // 6 >= 1500 - 32).all()  # only the last 32 steps of each stream are left
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(10)


def _prioritized(buffers, seed: int = 3, **kwargs):
    return buffers(
        SPEC, writers=2, batch_size=2, max_length=6, sampler="prioritized", alpha=1.0, epsilon=0.0, seed=seed, **kwargs
    )


def _filled_with_priorities(buffers):
    buffer = _prioritized(buffers)
    write(buffer.writer(0), range(9))  # wrapped: steps 3-8 held
    write(buffer.writer(1), range(4))
    _, info = buffer.get_next(16)
    buffer.update_priorities(info.ids, np.arange(1, 17, dtype=np.float64))
    write(buffer.writer(1), [4])  # committed after the last draw: taken in at the max priority on save
    return buffer


def test_a_checkpoint_keeps_the_priorities(buffers, tmp_path):
    original = _filled_with_priorities(buffers)
    original.save(tmp_path / "ckpt")
    restored = _prioritized(buffers, seed=99)
    restored.load(tmp_path / "ckpt")
    for _ in range(3):  # the same draws, probabilities and weights: the masses and the RNG came back
        (_, info_a), (b, info_b) = original.get_next(32), restored.get_next(32)
        np.testing.assert_array_equal(info_a.ids, info_b.ids)
        np.testing.assert_array_equal(info_a.probabilities, info_b.probabilities)
        np.testing.assert_array_equal(info_a.weights, info_b.weights)
        assert_items_match_ids(b, info_b.ids)
    state = original.state_dict()
    assert state["priorities"]["max_priority"] == 16.0
    probabilities = {}
    for _ in range(20):
        _, info = restored.get_next(64)
        probabilities.update(zip(info.ids.tolist(), info.probabilities.tolist(), strict=True))
    assert max(probabilities.values()) / min(probabilities.values()) > 2  # not all equal: priorities were kept
    newest = 4 * 4 + 2  # writer 1's step 4, stream 0: added after the draw, at the max priority
    assert probabilities[newest] == pytest.approx(16.0 / state["priorities"]["mass"].sum(), rel=1e-6)


def test_bad_saved_priorities_are_refused_and_change_nothing(buffers):
    state = _filled_with_priorities(buffers).state_dict()
    target = _prioritized(buffers)
    write(target.writer(0), range(2))
    before = target.state_dict()
    for change, match in (
        (lambda s: s["priorities"]["mass"].__setitem__(0, np.nan), r"state\['priorities'\]\['mass'\]: expected masses"),
        (lambda s: s["priorities"].__setitem__("mass", s["priorities"]["mass"][:-1]), "one per item"),
        (lambda s: s["priorities"].__setitem__("max_priority", -1.0), r"\['max_priority'\]: expected a finite"),
    ):
        bad = {**state, "priorities": dict(state["priorities"], mass=state["priorities"]["mass"].copy())}
        change(bad)
        with pytest.raises(CheckpointError, match=match):
            target.load_state_dict(bad)
        after = target.state_dict()
        np.testing.assert_array_equal(after["priorities"]["mass"], before["priorities"]["mass"])
        assert after["segments"]["0"]["steps"] == 2 and after["segments"]["1"]["steps"] == 0


def test_a_uniform_buffers_checkpoint_loads_with_every_priority_one(buffers):
    uniform = buffers(SPEC, writers=2, batch_size=2, max_length=6, seed=3)
    write(uniform.writer(0), range(3))
    state = uniform.state_dict()
    assert "priorities" not in state
    prioritized = _filled_with_priorities(buffers)
    prioritized.load_state_dict(state)
    _, info = prioritized.get_next(64)
    np.testing.assert_allclose(info.probabilities, 1 / 6, rtol=1e-6)


@pytest.mark.parametrize("flush_every", [1, 3])
def test_priorities_given_by_a_writer_process_reach_the_learners_trees(buffers, flush_every):
    """A writer's ``add_batch(items, priorities=)`` in another process: through the shared priority
    column, the learner gives those items their priorities and the largest to the others."""
    buffer = buffers(SPEC, writers=2, batch_size=2, max_length=8, sampler="prioritized", alpha=1.0, epsilon=0.0)
    context = multiprocessing.get_context("spawn")
    proc = context.Process(target=write_prioritized_steps, args=(buffer.writer(1, flush_every=flush_every), 6))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    for step in range(6):  # writer 0, from this process: no priorities given
        buffer.add_batch(fields_for_ids(step * 4 + np.arange(2)))
    # one intake takes every step in: the given ones (writer 1's even steps: id + 1) raise the
    # largest priority to 4 * 4 + 3 + 1 = 20 first, which every other item gets
    priority = {uid: 20.0 for uid in range(24)}
    priority.update({uid: uid + 1.0 for step in (0, 2, 4) for uid in (step * 4 + 2, step * 4 + 3)})
    _, info = buffer.get_next(2000)
    total = sum(priority.values())
    for uid, probability in zip(info.ids.tolist(), info.probabilities.tolist(), strict=True):
        assert probability == pytest.approx(priority[uid] / total, rel=1e-5), uid
    assert set(info.ids.tolist()) == set(priority)
    assert buffer.state_dict()["priorities"]["max_priority"] == 20.0
    with pytest.raises(PriorityError, match="priorities: expected finite values > 0"):
        buffer.add_batch(fields_for_ids(np.arange(2)), priorities=[1.0, -2.0])
    assert buffer.num_frames() == 24
