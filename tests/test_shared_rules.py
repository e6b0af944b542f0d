"""Sample-count rules on SharedReplayBuffer with real writer processes (docs/sample_rules.md)."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter

import numpy as np
import pytest

import replaybuf
from replaybuf.errors import ArgumentError, EmptyBufferError, RateLimiterTimeout, WritersGoneError
from replaybuf.shared import SharedReplayBuffer
from shared_workers import write_versioned

pytestmark = pytest.mark.timeout(120)
SPEC = {"id": replaybuf.ArraySpec((), np.int64), "policy_version": replaybuf.ArraySpec((), np.int64)}
CONTEXT = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def run_writers(buffer, start: int, count: int, per_version: int = 1000) -> None:
    processes = [
        CONTEXT.Process(target=write_versioned, args=(buffer.writer(w), start, count, per_version), daemon=True)
        for w in range(buffer.writers)
    ]
    for process in processes:
        process.start()
    return processes


def join(processes) -> None:
    for process in processes:
        process.join(60)
        if process.is_alive():
            process.kill()
            process.join(5)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def test_consume_once_and_staleness_under_writer_processes_and_a_rate_limiter():
    """Three writers whose policy moves every 5 steps; the learner follows the newest version it
    saw. No item is returned twice (K=1), none older than policy_version - 1, and a sample
    finding too few eligible items waits for the writers' adds (WritersGoneError once they end)."""
    writers, batch_size, steps, bound = 3, 2, 60, 1
    buffer = SharedReplayBuffer(
        SPEC, writers=writers, batch_size=batch_size, max_length=steps, seed=3, context=CONTEXT,
        max_times_sampled=1, max_staleness=bound,
        rate_limiter=replaybuf.MinSize(1), rate_limiter_timeout=1.0,
    )  # fmt: skip
    name = buffer.name
    with buffer:
        processes = run_writers(buffer, 0, steps, per_version=5)
        drawn: Counter = Counter()
        stale_seen = 0
        while True:
            try:
                items, info = buffer.get_next(4)
            except WritersGoneError:  # every writer finished: no eligible item can come
                break
            except RateLimiterTimeout:
                continue
            stale_seen = max(stale_seen, buffer.policy_version - int(items["policy_version"].min()))
            drawn.update(info.ids.tolist())
            buffer.policy_version = max(buffer.policy_version, int(items["policy_version"].max()))
        join(processes)
        assert max(drawn.values()) == 1  # each item drawn once
        assert stale_seen <= bound
        assert buffer.num_eligible() < 4  # the rest was consumed or is stale
        assert buffer.num_frames() == writers * batch_size * steps
        # every item drawn or stale: the versions the learner never drew are the old ones
        never = set(range(writers * batch_size * steps)) - set(drawn)
        versions = (np.array(sorted(never), np.int64) // (writers * batch_size)) // 5
        assert (versions < buffer.policy_version - bound).sum() >= len(never) - 3
    assert not os.path.exists(f"/dev/shm/{name}")


def test_epochs_over_writer_processes_see_each_item_once_and_later_adds_join_the_next():
    writers, batch_size = 2, 3
    with SharedReplayBuffer(
        SPEC, writers=writers, batch_size=batch_size, max_length=40, seed=5, context=CONTEXT, replacement=False
    ) as buffer:
        join(run_writers(buffer, 0, 10))
        first = writers * batch_size * 10
        seen, epochs = [], set()
        for _ in range(3):  # part of the first epoch
            items, info = buffer.get_next(7)
            seen += info.ids.tolist()
            epochs.add(info.epoch)
            assert np.all(info.probabilities == np.float32(1 / first))
        state = buffer.state_dict()
        join(run_writers(buffer, 10, 5))  # added during the epoch: the next one's
        while len(seen) < first:
            items, info = buffer.get_next(7)
            np.testing.assert_array_equal(items["id"], info.ids)
            seen += info.ids.tolist()
            epochs.add(info.epoch)
        assert epochs == {1} and sorted(seen) == list(range(first))  # the last batch was short
        second = []
        while len(second) < first + writers * batch_size * 5:
            items, info = buffer.get_next(7)
            assert info.epoch == 2
            second += info.ids.tolist()
        assert sorted(second) == list(range(first + writers * batch_size * 5))

        # a checkpoint mid-epoch continues the epoch exactly
        with SharedReplayBuffer(
            SPEC, writers=writers, batch_size=batch_size, max_length=40, seed=9, replacement=False
        ) as copy:
            copy.load_state_dict(state)
            buffer.load_state_dict(state)
            for _ in range(4):
                info_a, info_b = buffer.get_next(5)[1], copy.get_next(5)[1]
                np.testing.assert_array_equal(info_a.ids, info_b.ids)
                assert info_a.epoch == info_b.epoch
            # one ring's rules: a NumPy buffer with the same rules continues it too
            numpy_buffer = replaybuf.UniformReplayBuffer(
                SPEC, batch_size=writers * batch_size, max_length=40, replacement=False
            )
            numpy_buffer.load_state_dict(state)
            rest = sorted(numpy_buffer.get_next(first)[0]["id"].tolist())
            assert rest == sorted(set(range(first)) - set(seen[:21]))


def test_fifo_drains_the_oldest_steps_first_and_drop_remainder():
    with SharedReplayBuffer(SPEC, writers=2, batch_size=1, max_length=10, sampler="fifo", max_times_sampled=1) as rb:
        join(run_writers(rb, 0, 4))  # step t of writer w: id 2 * t + w
        assert rb.get_next(3)[1].ids.tolist() == [0, 1, 2]
        assert rb.get_next(2, num_steps=2)[1].ids.tolist() == [[3, 5], [4, 6]]
        with pytest.raises(EmptyBufferError, match="distinct"):
            rb.get_next(2, num_steps=2)  # one window start left (id 5)
    with SharedReplayBuffer(SPEC, writers=2, batch_size=1, max_length=10, replacement=False, drop_remainder=True) as rb:
        join(run_writers(rb, 0, 5))
        sizes = [rb.get_next(4)[1].ids.size for _ in range(3)]
        assert sizes == [4, 4, 4]  # 10 items: two whole batches, then a new epoch


@pytest.mark.parametrize(
    "options, match",
    [
        ({"max_times_sampled": 0}, "max_times_sampled"),
        ({"max_staleness": -1}, "max_staleness"),
        ({"max_staleness": 1, "version_field": "missing"}, "version_field"),
        ({"replacement": "no"}, "replacement"),
        ({"drop_remainder": True}, "drop_remainder"),
        ({"sampler": "fifo", "replacement": False}, "sampler"),
        ({"sampler": "prioritized", "max_times_sampled": 1}, "sampler='uniform'"),
        ({"respect_episodes": True, "episode_end_field": "id", "replacement": False}, "respect_episodes"),
        ({"sampler": "lifo"}, "sampler"),
    ],
)
def test_bad_rules_are_refused_by_name(options, match):
    with pytest.raises(ArgumentError, match=match):
        SharedReplayBuffer(SPEC, writers=1, max_length=4, **options)


def test_a_bad_policy_version_is_refused():
    with SharedReplayBuffer(SPEC, writers=1, max_length=4, max_staleness=0) as rb:
        with pytest.raises(ArgumentError, match="policy_version"):
            rb.policy_version = 1.5
        assert rb.policy_version == 0


@pytest.mark.parametrize("options", [{"max_staleness": 50}, {"max_times_sampled": 10**9}])
def test_draws_over_unequal_writers_are_uniform_over_every_eligible_window(options):
    """Writer 0 holds 13 steps, writer 1 holds 3 (one stale): windows of 2 from the 13 eligible
    starts of 11 + 2 (or 12 + 2) are equally likely (a multinomial split, or a hypergeometric
    one for distinct batches); chi-square against uniform at p = 1e-3."""
    with SharedReplayBuffer(SPEC, writers=2, batch_size=1, max_length=20, seed=11, **options) as rb:
        fast, slow = rb.writer(0), rb.writer(1)
        for step in range(13):
            fast.add_batch({"id": fast.ids(step), "policy_version": np.full(1, 50 if step else 0)})
        for step in range(3):
            slow.add_batch({"id": slow.ids(step), "policy_version": np.full(1, 50)})
        rb.policy_version = 50 + options.get("max_staleness", 0)  # writer 0's step 0 is stale with staleness
        starts = Counter()
        for _ in range(600):
            items, info = rb.get_next(5, num_steps=2)
            np.testing.assert_array_equal(info.ids[:, 1] - info.ids[:, 0], 2)  # one stream's next step
            assert np.all(info.probabilities == info.probabilities[0])
            starts.update(info.ids[:, 0].tolist())
        eligible = rb.num_eligible() - 2  # every item but each writer's newest step starts a window
        assert len(starts) == eligible == (13 if "max_staleness" in options else 14)
        assert np.float32(1 / eligible) == info.probabilities[0]
        observed = np.array(list(starts.values()), float)
        expected = observed.sum() / eligible
        critical = {12: 32.9, 13: 34.5}[eligible - 1]  # chi-square at p = 1e-3 by degrees of freedom
        assert ((observed - expected) ** 2 / expected).sum() < critical
        fast.close()
        slow.close()


def test_epochs_of_windows_and_a_writer_that_laps_the_learner():
    """Writer 0 wraps its 4 steps twice before the learner looks (restarted at its oldest whole
    step), writer 1 holds 3 steps: an epoch of windows of 2 draws every start that fits once
    (3 + 2), and items added after it (overwriting two of its starts) join the next one."""
    with SharedReplayBuffer(SPEC, writers=2, batch_size=1, max_length=4, seed=1, replacement=False) as rb:
        fast, slow = rb.writer(0), rb.writer(1)
        for step in range(10):
            fast.add_batch({"id": fast.ids(step), "policy_version": np.zeros(1, np.int64)})
        for step in range(3):
            slow.add_batch({"id": slow.ids(step), "policy_version": np.zeros(1, np.int64)})
        starts = []
        for _ in range(2):
            _, info = rb.get_next(3, num_steps=2)
            starts += info.ids[:, 0].tolist()
        assert info.epoch == 1 and sorted(starts) == [1, 3, 12, 14, 16]  # writer 0: steps 6-8; writer 1: 0-1
        for step in range(10, 12):  # steps 10, 11 overwrite 6, 7
            fast.add_batch({"id": fast.ids(step), "policy_version": np.zeros(1, np.int64)})
        _, info = rb.get_next(8, num_steps=2)
        assert info.epoch == 2 and sorted(info.ids[:, 0].tolist()) == [1, 3, 16, 18, 20]
        fast.close()
        slow.close()
