"""Episode-aware windows: never across an episode's end nor the write head, after many wraps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArgumentError, ArraySpec, EmptyBufferError, PrioritizedReplayBuffer, UniformReplayBuffer

SPEC = {"id": ArraySpec((), np.int64), "episode": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
TRAJECTORY_SPEC = {"step_type": ArraySpec((), np.int32), "id": ArraySpec((), np.int64)}


def episode_steps(batch_size, lengths, steps, episode_of):
    """Yield the add of each of ``steps`` steps; stream s cycles through episode lengths
    ``lengths``. Fills ``episode_of`` with the episode number of every id (a model)."""
    counters = [[0, 0, 0] for _ in range(batch_size)]  # [episode, step in episode, length index]
    for t in range(steps):
        done = np.zeros(batch_size, bool)
        episodes = np.zeros(batch_size, np.int64)
        for s, c in enumerate(counters):
            episodes[s] = c[0] * batch_size + s
            episode_of[t * batch_size + s] = episodes[s]
            c[1] += 1
            if c[1] == lengths[(c[2] + s) % len(lengths)]:
                done[s], c[0], c[1], c[2] = True, c[0] + 1, 0, c[2] + 1
        yield {"id": np.arange(batch_size) + t * batch_size, "episode": episodes, "done": done}


def run_episodes(buffer, batch_size, lengths, steps):
    """Add ``steps`` steps per stream (see ``episode_steps``); returns the episode of every id."""
    episode_of = {}
    for items in episode_steps(batch_size, lengths, steps, episode_of):
        buffer.add_batch(items)
    return episode_of


def valid_windows(episode_of, batch_size, max_length, steps, num_steps):
    """Brute force: the first ids of windows inside one episode and before the head."""
    first = max(0, steps - max_length)
    starts = []
    for t in range(first, steps - num_steps + 1):
        for s in range(batch_size):
            ids = [(t + k) * batch_size + s for k in range(num_steps)]
            if len({episode_of[i] for i in ids}) == 1:
                starts.append(ids[0])
    return starts


@settings(max_examples=40, deadline=None)
@given(
    batch_size=st.integers(1, 3),
    max_length=st.integers(3, 12),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    wraps=st.integers(0, 6),
    extra=st.integers(0, 11),
    num_steps=st.integers(2, 4),
    pad=st.booleans(),
    prioritized=st.booleans(),
)
def test_windows_respect_episodes_and_head(batch_size, max_length, lengths, wraps, extra, num_steps, pad, prioritized):
    cls = PrioritizedReplayBuffer if prioritized else UniformReplayBuffer
    buffer = cls(
        SPEC, batch_size, max_length, seed=0, respect_episodes=True, pad_episode_ends=pad, episode_end_field="done"
    )
    steps = max_length * wraps + extra + 1
    episode_of = run_episodes(buffer, batch_size, lengths, steps)
    oldest, head = max(0, steps - max_length) * batch_size, steps * batch_size
    expected = valid_windows(episode_of, batch_size, max_length, steps, num_steps)
    if num_steps > min(steps, max_length) or (not pad and not expected):
        with pytest.raises(EmptyBufferError):
            buffer.get_next(8, num_steps)
        return
    items, info = buffer.get_next(64, num_steps)
    ids = info.ids
    np.testing.assert_array_equal(items["id"], ids)  # the items are the ones named by ids
    assert ids.min() >= oldest and ids.max() < head
    episodes = np.vectorize(episode_of.get)(ids)
    if pad:
        mask = info.mask
        assert mask[:, 0].all()
        assert np.all(mask[:, 1:] <= mask[:, :-1])  # real steps form a prefix
        real_same = episodes == episodes[:, :1]
        np.testing.assert_array_equal(real_same, True)  # padding repeats the last real item
        raw = ids[:, :1] + np.arange(num_steps) * batch_size  # what an unpadded window would read
        np.testing.assert_array_equal(mask, np.vectorize(episode_of.get)(np.minimum(raw, head - 1)) == episodes[:, :1])
        assert raw.max() < head
    else:
        assert np.all(episodes == episodes[:, :1]), "a window crossed an episode end"
        assert set(ids[:, 0].tolist()) <= set(expected)
        if not prioritized:  # every valid window equally likely, and the count is exact
            np.testing.assert_allclose(info.probabilities, 1.0 / len(expected), rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    batch_size=st.integers(1, 3),
    max_length=st.integers(3, 10),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    steps=st.integers(1, 40),
    num_steps=st.integers(2, 4),
    sample_every=st.integers(1, 7),
    compiled=st.sampled_from([False, None]),  # NumPy kernels, and numba's when installed
    seed=st.integers(0, 2**16),
)
def test_prioritized_windows_follow_episodes_through_adds_and_updates(
    batch_size, max_length, lengths, steps, num_steps, sample_every, compiled, seed
):
    """Under PER, windows stay inside episodes and before the head while adds, wraps and
    priority updates interleave with samples (the window sum tree is kept up to date
    incrementally), and each probability is its start's mass over the valid starts' mass."""
    buffer = PrioritizedReplayBuffer(
        SPEC,
        batch_size,
        max_length,
        seed=seed,
        respect_episodes=True,
        episode_end_field="done",
        alpha=0.5,
        epsilon=0.0,
        compiled=compiled,
    )
    rng = np.random.default_rng(seed)
    episode_of, priority, largest = {}, {}, 1.0
    for t, items in enumerate(episode_steps(batch_size, lengths, steps, episode_of)):
        buffer.add_batch(items)
        priority.update({int(i): largest for i in items["id"]})
        if t % sample_every:
            continue
        expected = valid_windows(episode_of, batch_size, max_length, t + 1, num_steps)
        if not expected:
            with pytest.raises(EmptyBufferError):
                buffer.get_next(4, num_steps)
            continue
        items_out, info = buffer.get_next(16, num_steps)
        ids = info.ids
        np.testing.assert_array_equal(items_out["id"], ids)
        assert ids.max() < (t + 1) * batch_size
        assert np.all(np.vectorize(episode_of.get)(ids) == np.vectorize(episode_of.get)(ids[:, :1]))
        mass = {i: priority[i] ** 0.5 for i in expected}
        total = sum(mass.values())
        np.testing.assert_allclose(info.probabilities, [mass[int(i)] / total for i in ids[:, 0]], rtol=1e-5)
        # the sampled windows, and any stored items (starts of windows that cross an end too)
        oldest, head = max(0, t + 1 - max_length) * batch_size, (t + 1) * batch_size
        targets = np.concatenate([ids[:, 0], rng.integers(oldest, head, size=4)])
        new = rng.uniform(0.1, 5.0, size=targets.shape[0])
        buffer.update_priorities(targets, new)
        for i, p in zip(targets.tolist(), new.tolist(), strict=True):
            priority[i] = p  # duplicates: the last one wins
        largest = max(largest, float(new.max()))


def test_every_valid_window_is_reachable():
    buffer = UniformReplayBuffer(SPEC, 2, 9, seed=3, respect_episodes=True, episode_end_field="done")
    episode_of = run_episodes(buffer, 2, [2, 5, 3], 40)
    expected = set(valid_windows(episode_of, 2, 9, 40, 3))
    _, info = buffer.get_next(2000, 3)
    assert set(info.ids[:, 0].tolist()) == expected


def test_step_type_field_marks_episodes():
    buffer = UniformReplayBuffer(TRAJECTORY_SPEC, 1, 20, seed=0, respect_episodes=True)
    step_types = [0, 1, 1, 2, 0, 1, 2, 0, 1, 1, 1]  # the LAST item is its episode's boundary
    for t, kind in enumerate(step_types):
        buffer.add_batch({"step_type": np.array([kind], np.int32), "id": np.array([t])})
    _, info = buffer.get_next(500, 4)
    assert set(info.ids[:, 0].tolist()) == {0, 7}


def test_state_dict_keeps_episode_bookkeeping():
    buffer = UniformReplayBuffer(SPEC, 2, 6, seed=0, respect_episodes=True, episode_end_field="done")
    run_episodes(buffer, 2, [3, 2], 13)
    copy = UniformReplayBuffer(SPEC, 2, 6, seed=0, respect_episodes=True, episode_end_field="done")
    copy.load_state_dict(buffer.state_dict())
    a, b = buffer.get_next(32, 2), copy.get_next(32, 2)
    np.testing.assert_array_equal(a[1].ids, b[1].ids)
    np.testing.assert_allclose(a[1].probabilities, b[1].probabilities)


def test_clear_forgets_episodes():
    buffer = UniformReplayBuffer(SPEC, 1, 6, seed=0, respect_episodes=True, episode_end_field="done")
    run_episodes(buffer, 1, [1], 6)  # every episode one step long
    with pytest.raises(EmptyBufferError, match="no stored episode"):
        buffer.get_next(2, 2)
    buffer.clear()
    run_episodes(buffer, 1, [6], 6)
    assert buffer.get_next(2, 2)[1].probabilities[0] == pytest.approx(1 / 5)


def test_bad_episode_options():
    with pytest.raises(ArgumentError, match="episode_end_field"):
        UniformReplayBuffer(SPEC, respect_episodes=True, episode_end_field="nope")
    with pytest.raises(ArgumentError, match="step_type"):
        UniformReplayBuffer({"x": ArraySpec((), np.int64)}, respect_episodes=True)


def test_one_streams_window_counts_caught_up_late_equal_a_recount():
    """A single stream's window counts take in the adds many at a time (EpisodeIndex._catch_up):
    at any moment they equal counting the stored windows again, for windows of 1 to longer
    than the ring, through wraps."""
    from replaybuf.ring import StreamRing
    from replaybuf.samplers.episodes import EpisodeIndex

    rng = np.random.default_rng(0)
    for _ in range(150):
        length = int(rng.integers(1, 30))
        ring = StreamRing(1, length)
        index = EpisodeIndex(ring, lambda leaves: (None, np.asarray(leaves[0]) != 0))
        sizes = rng.integers(1, length + 3, 3).tolist()
        end = rng.choice([0.0, 0.1, 0.5])
        for _ in range(int(rng.integers(1, 5 * length + 10))):
            ring.steps += 1
            index.record([np.array([rng.random() < end])], ring.steps - 1)
            if rng.random() < 0.15:
                index.count(sizes[rng.integers(3)])
                fresh = EpisodeIndex(ring, index.markers)
                fresh.position = index.position
                assert {size: index.count(size) for size in index._counts} == {
                    size: fresh.count(size) for size in index._counts
                }
