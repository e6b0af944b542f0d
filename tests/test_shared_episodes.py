"""SharedReplayBuffer(respect_episodes=True): windows inside one episode, against brute force,
as writers add, wrap past the learner, stage, clear and load; and with real writer processes."""
# ruff: noqa: F811  (pytest fixtures imported from shared_workers are parameters here)

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest

from replaybuf import ArraySpec, UniformReplayBuffer
from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.shared import SharedReplayBuffer
from shared_workers import (  # noqa: F401
    Episodes,
    buffers,
    episode_done,
    no_leaked_segments,
    shm_blocks,
    write_episodes_until_closed,
)

pytestmark = pytest.mark.timeout(120)

SPEC = {"id": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}


def assert_draws_match(buffer, episodes, size, draws=60):
    expected = episodes.valid(size)
    seen = set()
    for _ in range(draws):
        items, info = buffer.get_next(32, size)
        ids = np.asarray(info.ids)
        np.testing.assert_array_equal(items["id"], ids)  # the records read are the windows drawn
        np.testing.assert_allclose(info.probabilities, 1 / len(expected))
        seen.update(ids[:, 0].tolist())
        assert set(ids[:, 0].tolist()) <= expected
    assert seen == expected


@pytest.mark.parametrize("size", [1, 2, 3])
def test_windows_match_brute_force_as_writers_add_and_wrap(buffers, size):
    buffer = buffers(
        SPEC, writers=2, batch_size=2, max_length=6, seed=1, respect_episodes=True, episode_end_field="done"
    )
    episodes = Episodes(buffer, seed=size)
    episodes.add(0, 4)
    episodes.add(1, 2)
    assert_draws_match(buffer, episodes, size)
    episodes.add(0, 3)  # writer 0 wraps (7 steps in a ring of 6); the index takes the new steps in
    episodes.add(1, 1)
    assert_draws_match(buffer, episodes, size)
    episodes.add(1, 20)  # writer 1 wraps twice between two draws: its positions start over
    assert_draws_match(buffer, episodes, size)
    episodes.add(0, 6)  # exactly one ring: every old step leaves, the episodes go on
    assert_draws_match(buffer, episodes, size)
    episodes.close()


def test_probabilities_match_the_single_process_episode_buffer(buffers):
    shared = buffers(
        SPEC, writers=1, batch_size=3, max_length=8, seed=0, respect_episodes=True, episode_end_field="done"
    )
    local = UniformReplayBuffer(
        SPEC, batch_size=3, max_length=8, seed=0, respect_episodes=True, episode_end_field="done"
    )
    rng = np.random.default_rng(3)
    writer = shared.writer(0)
    for t in range(13):
        batch = {"id": writer.ids(t), "done": rng.random(3) < 0.3}
        writer.add_batch(batch)
        local.add_batch(batch)
        for size in (1, 2, 4):
            try:
                want = local.get_next(4, size)[1].probabilities
            except EmptyBufferError:
                with pytest.raises(EmptyBufferError, match="no stored episode holds"):
                    shared.get_next(4, size)
                continue
            np.testing.assert_allclose(shared.get_next(4, size)[1].probabilities, want)
    writer.close()


def test_staged_steps_count_once_committed(buffers):
    buffer = buffers(SPEC, batch_size=1, max_length=16, respect_episodes=True, episode_end_field="done")
    writer = buffer.writer(0, flush_every=4)
    for t, done in enumerate([False, False, False, False, False, True]):  # one episode of 6 steps
        writer.add_batch({"id": writer.ids(t), "done": np.array([done])})
        if t == 2:
            with pytest.raises(EmptyBufferError, match="is empty"):
                buffer.get_next(1, 2)  # nothing committed yet
    # the first block of 4 and the end's flush (steps 4 and 5) are committed: windows of 6 fit
    _, info = buffer.get_next(8, 6)
    np.testing.assert_array_equal(info.ids[:, 0], 0)
    writer.close()


def test_no_window_inside_an_episode_raises_and_clear_and_load_start_over(buffers, tmp_path):
    buffer = buffers(
        SPEC, writers=2, batch_size=1, max_length=8, seed=2, respect_episodes=True, episode_end_field="done"
    )
    episodes = Episodes(buffer, seed=5)
    episodes.add(0, 5, p_end=1.0)  # episodes of one step: no window of 2
    with pytest.raises(EmptyBufferError, match="num_steps=2: no stored episode holds 2 steps; .* shorter windows$"):
        buffer.get_next(4, 2)
    episodes.add(1, 6, p_end=0.3)
    buffer.save(tmp_path / "ckpt")
    assert_draws_match(buffer, episodes, 2)
    buffer.clear()
    with pytest.raises(EmptyBufferError, match="is empty"):
        buffer.get_next(1)
    buffer.load(tmp_path / "ckpt")  # the positions are read again from the loaded records
    assert_draws_match(buffer, episodes, 2)
    episodes.close()


def test_episode_arguments_are_checked_and_create_nothing():
    before = shm_blocks()
    with pytest.raises(ArgumentError, match="episode_end_field: only used with respect_episodes=True"):
        SharedReplayBuffer(SPEC, episode_end_field="done")
    with pytest.raises(ArgumentError, match="episode_end_field: expected the path of a scalar field"):
        SharedReplayBuffer(SPEC, respect_episodes=True, episode_end_field="nope")
    with pytest.raises(ArgumentError, match="expected a step_type or next_step_type field"):
        SharedReplayBuffer(SPEC, respect_episodes=True)
    assert shm_blocks() == before


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_windows_drawn_while_writer_processes_wrap_never_cross_an_end(sampler):
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    writers, batch_size, max_length = 2, 2, 32
    with SharedReplayBuffer(
        SPEC,
        writers=writers,
        batch_size=batch_size,
        max_length=max_length,
        seed=4,
        respect_episodes=True,
        episode_end_field="done",
        sampler=sampler,
    ) as buffer:
        processes = [
            context.Process(target=write_episodes_until_closed, args=(buffer.writer(w, flush_every=4),), daemon=True)
            for w in range(writers)
        ]
        for process in processes:
            process.start()
        try:
            deadline = time.monotonic() + 120
            while buffer.num_frames() < writers * batch_size * max_length:
                assert time.monotonic() < deadline, "the writers did not fill their rings"
                time.sleep(0.01)
            for _ in range(200):  # the writers keep wrapping their rings all along
                items, info = buffer.get_next(64, 3)
                ids = np.asarray(info.ids)
                np.testing.assert_array_equal(items["id"], ids)  # whole records
                np.testing.assert_array_equal(items["done"], episode_done(ids))
                assert not items["done"][:, :-1].any()  # no end before a window's last step
                if sampler == "prioritized":  # priorities set while the writers wrap
                    buffer.update_priorities(ids, 1.0 + (ids[:, 0] % 7).astype(np.float64))
            assert all(p.is_alive() for p in processes)
        finally:
            buffer.close()  # ends the writers
            for process in processes:
                process.join(30)
                if process.is_alive():
                    process.kill()
                    process.join(10)
        assert [p.exitcode for p in processes] == [0] * writers
