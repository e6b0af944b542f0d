"""Sample-count rules on ShardedReplayBuffer on a local Ray (2 CPUs): one epoch over every shard,
consumption and staleness per item with Ray writers tagging versions, checkpoints, bad input.

Ray: the tests' one local session (tests/backends.py local_ray), shut down when they exit.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import numpy as np
import pytest

import replaybuf
from replaybuf.errors import ArgumentError, EmptyBufferError, RateLimiterTimeout

ray = pytest.importorskip("ray")
import replaybuf.ray as rb_ray  # noqa: E402
from backends import local_ray  # noqa: E402

ShardedReplayBuffer = rb_ray.ShardedReplayBuffer
pytestmark = pytest.mark.timeout(300)
SPEC = {"id": replaybuf.ArraySpec((), np.int64), "policy_version": replaybuf.ArraySpec((), np.int64)}


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    local_ray()  # the tests' one local session (shut down when they exit)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/


def add_steps(writer, first: int, count: int, per_version: int = 1000) -> None:
    """Steps of ``{"id", "policy_version"}`` through a shard's writer (ids unique per shard and step)."""
    for step in range(first, first + count):
        ids = step * 100 + writer.shard * 10 + np.arange(writer.batch_size)
        writer.add_batch({"id": ids, "policy_version": np.full(writer.batch_size, step // per_version)})
    writer.flush()


@ray.remote(num_cpus=0)
def ray_writer(writer, first: int, count: int, per_version: int) -> int:
    add_steps(writer, first, count, per_version)
    return count


def test_one_epoch_spans_unequal_shards_exactly_and_survives_a_checkpoint(tmp_path):
    buffer = ShardedReplayBuffer(SPEC, shards=2, batch_size=4, max_length=50, seed=2, replacement=False)
    try:
        writers = [buffer.writer(0), buffer.writer(1)]
        add_steps(writers[0], 0, 9)  # 18 items on shard 0
        add_steps(writers[1], 0, 3)  # 6 on shard 1
        stored = 24
        seen, epochs = [], set()
        for _ in range(2):
            items, info = buffer.get_next(5)
            seen += items["id"].tolist()
            epochs.add(info.epoch)
            assert np.all(info.probabilities == np.float32(1 / stored))
        buffer.save(tmp_path / "mid")
        add_steps(writers[1], 3, 2)  # added during the epoch: the next one's
        while len(seen) < stored:
            items, info = buffer.get_next(5)
            seen += items["id"].tolist()
            epochs.add(info.epoch)
        assert epochs == {1} and len(seen) == len(set(seen)) == stored  # the last batch short (4)
        second = []
        while len(second) < stored + 4:
            items, info = buffer.get_next(5)
            assert info.epoch == 2
            second += items["id"].tolist()
        assert sorted(second) == sorted(seen + [310, 311, 410, 411])

        buffer.load(tmp_path / "mid")  # back mid-epoch 1: the rest of it is what was left
        rest = []
        while len(rest) < stored - 10:
            items, info = buffer.get_next(4)
            assert info.epoch == 1
            rest += items["id"].tolist()
        assert sorted(rest) == sorted(seen[10:])
    finally:
        buffer.shutdown()


def test_drop_remainder_and_empty_epochs():
    buffer = ShardedReplayBuffer(
        SPEC, shards=2, batch_size=2, max_length=20, seed=4, replacement=False, drop_remainder=True
    )
    try:
        with pytest.raises(EmptyBufferError, match="epoch"):
            buffer.get_next(2)
        add_steps(buffer.writer(0), 0, 5)
        assert [buffer.get_next(2)[1].epoch for _ in range(3)] == [1, 1, 2]  # 5 items: 2 whole batches
        with pytest.raises(EmptyBufferError, match="no whole batch"):
            buffer.get_next(8)
    finally:
        buffer.shutdown()


def test_ray_writers_tag_versions_consume_twice_at_most_and_never_staler_than_the_bound():
    bound, times = 1, 2
    buffer = ShardedReplayBuffer(
        SPEC, shards=2, batch_size=4, max_length=400, seed=6, max_times_sampled=times, max_staleness=bound
    )
    try:
        done = [ray_writer.remote(buffer.writer(k), 0, 24, 4) for k in range(2)]
        drawn: Counter = Counter()
        while True:
            finished = len(ray.wait(done, num_returns=2, timeout=0)[0]) == 2
            try:
                items, info = buffer.get_next(6)
            except EmptyBufferError:
                if finished:
                    break
                time.sleep(0.05)  # leave the CPUs to the writers
                continue
            assert items["policy_version"].min() >= buffer.policy_version - bound
            assert len(set(info.ids.tolist())) == 6  # distinct within a batch
            np.testing.assert_array_equal(np.float32(info.probabilities), info.probabilities)
            drawn.update(items["id"].tolist())
            buffer.policy_version = max(buffer.policy_version, int(items["policy_version"].max()))
        assert ray.get(done) == [24, 24]
        assert max(drawn.values()) <= times
        assert buffer.num_eligible() < 6 and buffer.num_frames() == 96
    finally:
        buffer.shutdown()


@pytest.mark.parametrize(
    "options, match",
    [
        ({"max_times_sampled": 0}, "max_times_sampled"),
        ({"max_staleness": 2, "version_field": "id_"}, "version_field"),
        ({"drop_remainder": True}, "drop_remainder"),
        ({"sampler": "prioritized", "max_times_sampled": 1}, "buffer_class"),
        ({"buffer_options": {"replacement": False}}, "buffer_options"),
    ],
)
def test_bad_rules_are_refused_by_name(options, match):
    with pytest.raises(ArgumentError, match=match):
        ShardedReplayBuffer(SPEC, shards=1, max_length=4, **options)


def test_a_rate_limited_sample_waits_for_eligible_items_and_bad_calls_are_refused():
    buffer = ShardedReplayBuffer(
        SPEC, shards=1, max_length=4, max_staleness=0, rate_limiter=replaybuf.MinSize(1), rate_limiter_timeout=0.3
    )
    try:
        buffer.add_batch({"id": np.array([7]), "policy_version": np.array([0])})
        buffer.policy_version = 1  # the only item is stale now
        with pytest.raises(RateLimiterTimeout, match="eligible items"):
            buffer.get_next(1)
        assert buffer.rate_limiter_state()["samples"] == 0  # the grant was given back
        with pytest.raises(ArgumentError, match="policy_version"):
            buffer.policy_version = "3"
        with pytest.raises(ArgumentError, match="burn_in"):
            buffer.get_next(2, 2, burn_in=1)
        assert buffer.policy_version == 1
    finally:
        buffer.shutdown()
