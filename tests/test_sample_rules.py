"""Sample-count rules (epochs, max_times_sampled, fifo, staleness) against a plain model."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import replaybuf
from replaybuf import ArraySpec
from replaybuf.errors import ArgumentError, EmptyBufferError, RateLimiterTimeout

SPEC = {"id": ArraySpec((), np.int64), "policy_version": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}


def buffer_of(batch=2, length=8, **rules):
    return replaybuf.UniformReplayBuffer(SPEC, batch_size=batch, max_length=length, seed=0, **rules)


def add(buffer, step, version=0, batch=2):
    ids = step * batch + np.arange(batch)
    buffer.add_batch({"id": ids, "policy_version": np.full(batch, version), "done": np.zeros(batch, bool)})


def test_an_epoch_draws_every_item_once_and_new_items_join_the_next():
    buffer = buffer_of(replacement=False)
    for step in range(5):
        add(buffer, step)
    drawn, epochs = [], []
    for _ in range(4):  # 10 items in batches of 3: 3, 3, 3, then the epoch's last 1
        items, info = buffer.get_next(3)
        drawn.append(items["id"])
        epochs.append(info.epoch)
        np.testing.assert_allclose(info.probabilities, 0.1)
    assert epochs == [1, 1, 1, 1] and [len(d) for d in drawn] == [3, 3, 3, 1]
    assert sorted(np.concatenate(drawn).tolist()) == list(range(10))
    add(buffer, 5)  # joins the next epoch, which also has the ten before it
    second = np.concatenate([buffer.get_next(4)[0]["id"] for _ in range(3)])
    assert sorted(second.tolist()) == list(range(12))
    assert buffer.get_next(4)[1].epoch == 3


def test_items_added_during_an_epoch_wait_for_the_next_and_drop_remainder_drops_the_short_batch():
    buffer = buffer_of(replacement=False, drop_remainder=True)
    for step in range(4):
        add(buffer, step)
    first = buffer.get_next(3)[0]["id"]
    add(buffer, 4)
    second = buffer.get_next(3)[0]["id"]
    assert not set(second.tolist()) & {8, 9}  # not in the epoch that was running
    third = buffer.get_next(3)  # the epoch had 8: 3 + 3 + a short 2, dropped: a new epoch of 10
    assert third[1].epoch == 2 and len(third[0]["id"]) == 3
    assert len(set(first.tolist()) | set(second.tolist())) == 6


def test_an_overwritten_item_is_skipped_in_its_epoch():
    buffer = buffer_of(length=4, replacement=False)
    for step in range(4):
        add(buffer, step)
    seen = buffer.get_next(2)[0]["id"].tolist()
    add(buffer, 4)  # overwrites ids 0 and 1
    rest = []
    while True:
        items, info = buffer.get_next(2)
        if info.epoch != 1:
            break
        rest += items["id"].tolist()
    assert sorted(seen + rest) == sorted(set(seen) | set(range(2, 8)))  # less the overwritten not yet drawn
    assert not {8, 9} & set(rest)  # added during the epoch


def test_max_times_sampled_consumes_and_fifo_is_a_queue():
    queue = buffer_of(max_times_sampled=1, sampler="fifo")
    for step in range(4):
        add(queue, step)
    assert queue.get_next(3)[0]["id"].tolist() == [0, 1, 2]
    assert queue.num_eligible() == 5 and queue.num_frames() == 8
    assert queue.get_next(3)[0]["id"].tolist() == [3, 4, 5]
    with pytest.raises(EmptyBufferError, match="only 2 eligible items"):
        queue.get_next(3)
    twice = buffer_of(max_times_sampled=2)
    for step in range(3):
        add(twice, step)
    counts = np.bincount(np.concatenate([twice.get_next(2)[0]["id"] for _ in range(6)]), minlength=6)
    assert counts.tolist() == [2] * 6
    assert twice.num_eligible() == 0


def test_a_batch_under_max_times_sampled_holds_distinct_items_drawn_uniformly():
    buffer = buffer_of(batch=4, length=50, max_times_sampled=10**6)
    for step in range(50):
        add(buffer, step, batch=4)
    counts = np.zeros(200)
    for _ in range(400):
        items, info = buffer.get_next(50)
        assert len(set(items["id"].tolist())) == 50
        np.testing.assert_allclose(info.probabilities, 1 / 200)
        counts += np.bincount(items["id"], minlength=200)
    expected = 400 * 50 / 200
    assert (np.abs(counts - expected) < 5 * np.sqrt(expected)).all()


def test_staleness_bounds_the_versions_drawn():
    buffer = buffer_of(length=10, max_staleness=2)
    for step in range(8):
        add(buffer, step, version=step)
    buffer.policy_version = 6
    versions = buffer.get_next(500)[0]["policy_version"]
    assert set(versions.tolist()) == {4, 5, 6, 7}
    assert buffer.num_eligible() == 8
    add(buffer, 8, version=1)  # a lagging writer's items are stale on arrival
    assert 1 not in set(buffer.get_next(500)[0]["policy_version"].tolist())
    buffer.policy_version = 100
    with pytest.raises(EmptyBufferError):
        buffer.get_next(1)


def test_consume_once_with_staleness_for_async_ppo():
    buffer = buffer_of(length=20, max_times_sampled=1, max_staleness=1)
    for step in range(6):
        add(buffer, step, version=step // 2)
    buffer.policy_version = 2
    items, _ = buffer.get_next(6)
    ids = items["id"].tolist()
    assert set(ids) <= set(range(4, 12)) and len(set(ids)) == 6  # versions 1 and 2, each once
    assert buffer.num_eligible() == 2


def test_windows_and_sequences_follow_the_rules():
    spec = {**SPEC}
    buffer = replaybuf.UniformReplayBuffer(
        spec, batch_size=1, max_length=20, seed=1, replacement=False, respect_episodes=True, episode_end_field="done"
    )
    for step in range(12):
        buffer.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]})
    windows = np.concatenate([buffer.get_next(2, num_steps=2)[0]["id"] for _ in range(5)])
    firsts = sorted(windows[:, 0].tolist())
    assert firsts == [0, 1, 2, 4, 5, 6, 8, 9, 10]  # every start of a window inside an episode, once
    sequences = buffer.get_next(3, num_steps=2, burn_in=1, period=2)
    assert sequences[1].epoch >= 1 and (np.asarray(sequences[1].ids)[:, 1] % 2 == 0).all()


def test_an_epoch_saved_midway_continues_exactly(tmp_path):
    original = buffer_of(length=10, replacement=False, max_times_sampled=3)
    for step in range(7):
        add(original, step)
    original.get_next(4)
    original.save(tmp_path / "ckpt")
    loaded = buffer_of(length=10, replacement=False, max_times_sampled=3)
    loaded.load(tmp_path / "ckpt")
    for _ in range(8):
        a, a_info = original.get_next(4)
        b, b_info = loaded.get_next(4)
        np.testing.assert_array_equal(a["id"], b["id"])
        assert a_info.epoch == b_info.epoch
    assert original.num_eligible() == loaded.num_eligible()


def test_a_rate_limited_sample_waits_for_eligible_items_instead_of_raising():
    buffer = buffer_of(max_times_sampled=1, rate_limiter=replaybuf.MinSize(1), rate_limiter_timeout=10.0)
    add(buffer, 0)
    buffer.get_next(2)  # consumes both
    got = []
    waiter = threading.Thread(target=lambda: got.append(buffer.get_next(2)[0]["id"].tolist()))
    waiter.start()
    deadline = time.monotonic() + 10
    while buffer._waiters == 0 and time.monotonic() < deadline:  # the sample is waiting for an add
        time.sleep(0.01)
    assert buffer._waiters == 1 and not got
    add(buffer, 1)
    waiter.join(10)
    assert len(got) == 1 and sorted(got[0]) == [2, 3]
    quick = buffer_of(max_times_sampled=1, rate_limiter=replaybuf.MinSize(1), rate_limiter_timeout=0.05)
    add(quick, 0)
    quick.get_next(2)
    with pytest.raises(RateLimiterTimeout, match="eligible items"):
        quick.get_next(1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_times_sampled": 0}, "max_times_sampled: expected an int >= 1 or None, got 0"),
        ({"max_times_sampled": 1.5}, "max_times_sampled: expected an int >= 1 or None, got 1.5"),
        ({"max_staleness": -1}, "max_staleness: expected an int >= 0 or None, got -1"),
        ({"max_staleness": 1, "version_field": "nope"}, "version_field: expected the path of a scalar integer"),
        ({"max_staleness": 1, "version_field": "done"}, "version_field: expected the path of a scalar integer"),
        ({"replacement": "no"}, "replacement: expected True or False"),
        ({"sampler": "lifo"}, "sampler: expected None"),
        ({"sampler": "fifo", "replacement": False}, "sampler: expected None with replacement=False"),
        ({"drop_remainder": True}, "drop_remainder: only used with replacement=False"),
    ],
)
def test_bad_rules_are_refused(options, message):
    with pytest.raises(ArgumentError, match=message):
        buffer_of(**options)


def test_a_bad_policy_version_is_refused_and_changes_nothing():
    buffer = buffer_of(max_staleness=1)
    buffer.policy_version = 3
    with pytest.raises(ArgumentError, match="policy_version: expected an int, got 2.5"):
        buffer.policy_version = 2.5
    assert buffer.policy_version == 3


class RulesMachine(RuleBasedStateMachine):
    """Adds (with versions), wraps, clears, reloads, policy updates and samples against a model:
    no item past K draws, none stale, none not stored; each epoch draws its items once."""

    K, V, LENGTH, BATCH = 3, 2, 6, 2

    def __init__(self):
        super().__init__()
        self.buffer = self._new()
        self.steps, self.version, self.times, self.versions = 0, 0, {}, {}
        self.epoch, self.epoch_items, self.epoch_drawn = 0, set(), []

    def _new(self):
        return buffer_of(
            batch=self.BATCH, length=self.LENGTH, replacement=False, max_times_sampled=self.K, max_staleness=self.V
        )

    def _eligible(self):
        first = max(0, self.steps - self.LENGTH) * self.BATCH
        return {
            i
            for i in range(first, self.steps * self.BATCH)
            if self.times[i] < self.K and self.versions[i] >= self.version - self.V
        }

    @rule(version_lag=st.integers(0, 4))
    def add(self, version_lag):
        add(self.buffer, self.steps, version=self.version - version_lag, batch=self.BATCH)
        for i in range(self.steps * self.BATCH, (self.steps + 1) * self.BATCH):
            self.times[i], self.versions[i] = 0, self.version - version_lag
        self.steps += 1

    @rule(bump=st.integers(0, 2))
    def update_policy(self, bump):
        self.version += bump
        self.buffer.policy_version = self.version

    @rule()
    def clear(self):
        self.buffer.clear()
        self.steps, self.times, self.versions = 0, {}, {}
        self.epoch, self.epoch_items, self.epoch_drawn = 0, set(), []

    @rule()
    def reload(self):
        again = self._new()
        again.policy_version = self.version
        again.load_state_dict(self.buffer.state_dict())
        self.buffer = again

    @precondition(lambda self: self.steps > 0)
    @rule(size=st.integers(1, 5))
    def sample(self, size):
        eligible = self._eligible()
        try:
            items, info = self.buffer.get_next(size)
        except EmptyBufferError:
            assert not eligible
            return
        ids = items["id"].tolist()
        assert set(ids) <= eligible and len(ids) == len(set(ids))
        if info.epoch != self.epoch:  # a new epoch began with this batch: the last one was complete
            assert not (self.epoch_items & eligible) - set(self.epoch_drawn)
            self.epoch, self.epoch_items, self.epoch_drawn = info.epoch, set(eligible), []
        assert not set(ids) & set(self.epoch_drawn)
        self.epoch_drawn += ids
        for i in ids:
            self.times[i] += 1


TestRulesMachine = RulesMachine.TestCase
TestRulesMachine.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_frame_stacks_follow_the_rules():
    spec = {"observation": ArraySpec((2, 3), np.uint8), "policy_version": ArraySpec((), np.int64)}
    buffer = replaybuf.FrameStackReplayBuffer(spec, batch_size=1, max_length=10, seed=0, max_times_sampled=1)
    frames = [np.full(3, t, np.uint8) for t in range(7)]
    for t in range(6):
        buffer.add_batch({"observation": np.stack([frames[t], frames[t + 1]])[None], "policy_version": [0]})
    items, _ = buffer.get_next(6)
    assert sorted(items["observation"][:, 0, 0].tolist()) == list(range(6))
    np.testing.assert_array_equal(items["observation"][:, 1, 0], items["observation"][:, 0, 0] + 1)
    with pytest.raises(EmptyBufferError):
        buffer.get_next(1)


def test_checkpoints_load_across_buffers_with_and_without_rules():
    ruled = buffer_of(length=10, max_times_sampled=1, max_staleness=1)
    for step in range(5):
        add(ruled, step, version=step)
    ruled.policy_version = 4
    ruled.get_next(2)
    plain = buffer_of(length=10)
    plain.load_state_dict(ruled.state_dict())  # the items; the rules' bookkeeping is not its concern
    assert plain.num_frames() == 10 and plain.num_eligible() == 10
    fresh = buffer_of(length=10, max_times_sampled=1, max_staleness=1)
    fresh.policy_version = 4
    fresh.load_state_dict(plain.state_dict())  # no counts saved: every item uncounted, versions from the items
    assert fresh.num_eligible() == 4  # versions 3 and 4
    assert set(fresh.get_next(4)[0]["policy_version"].tolist()) == {3, 4}


@pytest.mark.parametrize(
    "rules", [{"max_staleness": 3}, {"max_times_sampled": 2}, {"max_times_sampled": 1, "sampler": "fifo"}]
)
def test_a_loaded_buffer_draws_what_the_saved_one_would_after_wraps(rules):
    original = buffer_of(length=8, **rules)
    for step in range(13):  # wrapped: removals have reordered the live set
        add(original, step, version=step)
    original.policy_version = 12
    original.get_next(3)
    loaded = buffer_of(length=8, **rules)
    loaded.load_state_dict(original.state_dict())
    for _ in range(3):
        np.testing.assert_array_equal(original.get_next(2)[0]["id"], loaded.get_next(2)[0]["id"])
    assert original.num_eligible() == loaded.num_eligible()


# -- the prioritized buffers ------------------------------------------------------------------------


def prioritized_of(batch=2, length=8, **rules):
    return replaybuf.PrioritizedReplayBuffer(SPEC, batch_size=batch, max_length=length, seed=0, **rules)


def add_prioritized(buffer, step, version=0, batch=2, priorities=None):
    ids = step * batch + np.arange(batch)
    given = None if priorities is None else np.asarray(priorities, float)
    buffer.add_batch(
        {"id": ids, "policy_version": np.full(batch, version), "done": np.zeros(batch, bool)}, priorities=given
    )


def eligible_masses(buffer, limit=None, staleness=None):
    """``{id: mass}`` of the eligible items, from the checkpoint's masses and counts (a model;
    a torch buffer's tensors read as arrays)."""
    state = buffer.state_dict()
    masses = np.asarray(state["priorities"]["mass"])
    head = state["steps"] * state["batch_size"]
    ids = np.arange(head - masses.shape[0], head)  # the items in id order
    keep = np.ones(ids.shape[0], bool)
    if limit is not None:
        keep &= np.asarray(state["sample_rules"]["times"]) < limit
    if staleness is not None:
        keep &= np.asarray(buffer.read_ids(ids)[0]["policy_version"]) >= buffer.policy_version - staleness
    return dict(zip(ids[keep].tolist(), masses[keep].tolist(), strict=True))


def test_prioritized_consumption_draws_distinct_items_by_priority_and_takes_them_out():
    buffer = prioritized_of(batch=4, length=10, max_times_sampled=1)
    for step in range(5):
        add_prioritized(buffer, step, batch=4, priorities=[1.0, 2.0, 4.0, 8.0])
    seen = []
    while buffer.num_eligible() >= 3:
        masses = eligible_masses(buffer, limit=1)
        items, info = buffer.get_next(3)
        ids = items["id"].tolist()
        assert len(set(ids)) == 3 and set(ids) <= set(masses) and not set(ids) & set(seen)
        total = sum(masses.values())
        np.testing.assert_allclose(info.probabilities, [masses[i] / total for i in ids], rtol=1e-6)
        smallest = min(masses.values())
        np.testing.assert_allclose(info.weights, [(masses[i] / smallest) ** -0.4 for i in ids], rtol=1e-5)
        seen += ids
    assert buffer.num_eligible() == 20 - len(seen) == 2 and buffer.num_frames() == 20
    with pytest.raises(EmptyBufferError, match="only 2 eligible items"):
        buffer.get_next(3)
    assert buffer.mass()[0] == pytest.approx(sum(eligible_masses(buffer, limit=1).values()))


def test_prioritized_draws_follow_the_probabilities_with_consumed_and_stale_items_excluded():
    buffer = prioritized_of(batch=4, length=10, max_times_sampled=1000, max_staleness=1)
    rng = np.random.default_rng(5)
    for step in range(10):
        add_prioritized(buffer, step, version=step // 3, batch=4, priorities=rng.uniform(0.5, 4.0, 4))
    state = buffer.state_dict()
    state["sample_rules"]["times"][[30, 33, 37]] = 1000  # a checkpoint of three consumed items
    buffer.load_state_dict(state)
    buffer.policy_version = 3  # versions 0 and 1 (steps 0-5) are stale
    masses = eligible_masses(buffer, limit=1000, staleness=1)
    assert set(masses) == set(range(24, 40)) - {30, 33, 37}
    total = sum(masses.values())
    draws = 4000  # single draws: a batch's items are distinct, so a batch is not 4000 independent draws
    counts = np.zeros(40)
    for _ in range(draws):
        item, info = buffer.get_next()
        counts[int(item["id"])] += 1
        assert info.probabilities == pytest.approx(masses[int(item["id"])] / total, rel=1e-6)
    expected = np.array([masses.get(i, 0.0) / total * draws for i in range(40)])
    assert counts[expected == 0].sum() == 0
    assert (np.abs(counts - expected) < 5 * np.sqrt(expected) + 1).all()


def test_prioritized_updates_of_consumed_items_are_kept_for_checkpoints_not_drawn():
    buffer = prioritized_of(length=10, max_times_sampled=1)
    for step in range(4):
        add_prioritized(buffer, step)
    items, info = buffer.get_next(3)
    buffer.update_priorities(info.ids, np.full(3, 9.0))  # the usual update after training on them
    assert buffer.num_eligible() == 5
    rest = buffer.get_next(5)[0]["id"].tolist()
    assert not set(rest) & set(items["id"].tolist())
    plain = replaybuf.PrioritizedReplayBuffer(SPEC, batch_size=2, max_length=10, seed=0)
    plain.load_state_dict(buffer.state_dict())  # without rules every item is drawable, with its priority
    state = plain.state_dict()
    updated = np.isin(np.arange(8), items["id"])
    np.testing.assert_allclose(state["priorities"]["mass"][updated], (9.0 + 1e-6) ** 0.6)
    np.testing.assert_allclose(state["priorities"]["mass"][~updated], (1.0 + 1e-6) ** 0.6)
    assert plain.num_eligible() == 8


def test_prioritized_checkpoints_continue_exactly():
    original = prioritized_of(length=6, max_times_sampled=2, max_staleness=2)
    for step in range(9):
        add_prioritized(original, step, version=step, priorities=[1.0 + step, 2.0])
    original.policy_version = 8
    original.get_next(2)
    loaded = prioritized_of(length=6, max_times_sampled=2, max_staleness=2)
    loaded.load_state_dict(original.state_dict())
    assert loaded.num_eligible() == original.num_eligible() and loaded.mass() == original.mass()
    for _ in range(2):
        a, a_info = original.get_next(2)
        b, b_info = loaded.get_next(2)
        np.testing.assert_array_equal(a["id"], b["id"])
        np.testing.assert_array_equal(a_info.probabilities, b_info.probabilities)


def test_prioritized_windows_and_sequences_count_their_starts():
    buffer = replaybuf.PrioritizedReplayBuffer(
        SPEC, batch_size=1, max_length=20, seed=2, max_times_sampled=1, respect_episodes=True, episode_end_field="done"
    )
    for step in range(12):
        buffer.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]}, priorities=[1.0 + step])
    windows = buffer.get_next(7, num_steps=2)[0]["id"]
    with pytest.raises(EmptyBufferError, match="only 2 eligible starts have priority mass"):
        buffer.get_next(3, num_steps=2)  # refused, nothing changed: the two are still there
    windows = np.concatenate([windows, buffer.get_next(2, num_steps=2)[0]["id"]])
    assert sorted(windows[:, 0].tolist()) == [0, 1, 2, 4, 5, 6, 8, 9, 10]  # each window start once
    with pytest.raises(EmptyBufferError):
        buffer.get_next(1, num_steps=2)
    sequences = replaybuf.PrioritizedReplayBuffer(
        SPEC, batch_size=1, max_length=20, seed=2, max_times_sampled=1, respect_episodes=True, episode_end_field="done"
    )
    for step in range(12):
        sequences.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]})
    learn = []
    for _ in range(3):
        items, info = sequences.get_next(2, num_steps=2, burn_in=1, period=2)
        learn += items["id"][info.learn].reshape(2, 2)[:, 0].tolist()
    assert sorted(learn) == [0, 2, 4, 6, 8, 10]  # every learning start at an even position, once


def test_prioritized_frame_stacks_follow_the_rules():
    spec = {"observation": ArraySpec((2, 3), np.uint8), "policy_version": ArraySpec((), np.int64)}
    buffer = replaybuf.PrioritizedFrameStackReplayBuffer(
        spec, batch_size=1, max_length=10, seed=0, max_times_sampled=1, max_staleness=0
    )
    frames = [np.full(3, t, np.uint8) for t in range(7)]
    for t in range(6):
        buffer.add_batch({"observation": np.stack([frames[t], frames[t + 1]])[None], "policy_version": [t // 3]})
    buffer.policy_version = 1  # the first three are stale
    items, _ = buffer.get_next(3)
    assert sorted(items["observation"][:, 0, 0].tolist()) == [3, 4, 5]
    with pytest.raises(EmptyBufferError):
        buffer.get_next(1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"replacement": False}, "replacement: expected True on a prioritized buffer"),
        ({"drop_remainder": True}, "drop_remainder: only used with replacement=False"),
        ({"max_times_sampled": 0}, "max_times_sampled: expected an int >= 1 or None, got 0"),
        ({"max_staleness": 1, "version_field": "id2"}, "version_field: expected the path of a scalar integer"),
    ],
)
def test_bad_prioritized_rules_are_refused(options, message):
    with pytest.raises(ArgumentError, match=message):
        prioritized_of(**options)
    with pytest.raises(ArgumentError, match=message):
        replaybuf.PrioritizedFrameStackReplayBuffer(
            {"observation": ArraySpec((2, 3), np.uint8), "id": ArraySpec((), np.int64)}, **options
        )


def test_a_rate_limited_prioritized_sample_waits_for_eligible_items():
    buffer = prioritized_of(max_times_sampled=1, rate_limiter=replaybuf.MinSize(1), rate_limiter_timeout=0.05)
    add_prioritized(buffer, 0)
    buffer.get_next(2)
    with pytest.raises(RateLimiterTimeout, match="eligible items"):
        buffer.get_next(1)


class PrioritizedRulesMachine(RulesMachine):
    """The rules machine on the prioritized buffer (no epochs): draws stay among the eligible
    items, distinct, with each one's single-draw probability; priority updates go anywhere."""

    def _new(self):
        return prioritized_of(batch=self.BATCH, length=self.LENGTH, max_times_sampled=self.K, max_staleness=self.V)

    @precondition(lambda self: self.steps > 0)
    @rule(size=st.integers(1, 5))
    def sample(self, size):
        eligible = self._eligible()
        masses = eligible_masses(self.buffer, self.K, self.V)
        assert set(masses) == eligible
        try:
            items, info = self.buffer.get_next(size)
        except EmptyBufferError:
            assert len(eligible) < size
            return
        ids = items["id"].tolist()
        assert set(ids) <= eligible and len(ids) == len(set(ids))
        total = sum(masses.values())
        np.testing.assert_allclose(info.probabilities, [masses[i] / total for i in ids], rtol=1e-5)
        for i in ids:
            self.times[i] += 1

    def times_stored(self):
        first = max(0, self.steps - self.LENGTH) * self.BATCH
        return range(first, self.steps * self.BATCH)

    @precondition(lambda self: self.steps > 0)
    @rule(data=st.data())
    def update(self, data):
        ids = list(self.times_stored())
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3))
        priorities = data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(chosen), max_size=len(chosen)))
        self.buffer.update_priorities(np.array(chosen), np.array(priorities))
        assert self.buffer.num_eligible() == len(self._eligible())


TestPrioritizedRulesMachine = PrioritizedRulesMachine.TestCase
TestPrioritizedRulesMachine.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_a_checkpoint_without_the_live_order_loads_and_a_bad_one_is_refused():
    buffer = buffer_of(length=10, max_times_sampled=2)
    for step in range(4):
        add(buffer, step)
    buffer.get_next(3)
    state = buffer.state_dict()
    older = {**state, "sample_rules": {k: v for k, v in state["sample_rules"].items() if k != "live"}}
    loaded = buffer_of(length=10, max_times_sampled=2)
    loaded.load_state_dict(older)  # saved before the order was kept: the eligible items in id order
    assert loaded.num_eligible() == buffer.num_eligible() == 8
    repeated = {**state, "sample_rules": {**state["sample_rules"], "live": np.array([1, 1])}}
    with pytest.raises(replaybuf.CheckpointError, match=r"\['live'\]: expected distinct ids"):
        loaded.load_state_dict(repeated)
