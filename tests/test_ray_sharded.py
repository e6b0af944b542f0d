"""ShardedReplayBuffer on a local Ray (2 CPUs): sampling across unequal shards, writers in Ray
actors, the cluster rate limiter, whole-buffer checkpoints, argument errors.

Ray: the tests' one local session (tests/backends.py local_ray), shut down when they exit.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, assert_items_match_ids, fields_for_ids, step_batch

ray = pytest.importorskip("ray")
import replaybuf.ray as rb_ray  # noqa: E402
from backends import local_ray  # noqa: E402

ShardedReplayBuffer = rb_ray.ShardedReplayBuffer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    local_ray()  # the tests' one local session (shut down when they exit)
    # Ray workers cannot import the modules beside the tests: ship them by value
    for name in ("conformance_data", __name__):
        ray.cloudpickle.register_pickle_by_value(sys.modules[name])


def chi_square_p(observed: np.ndarray, expected: np.ndarray) -> float:
    """Upper-tail p of Pearson's statistic (Wilson-Hilferty: accurate for the df used here, >= 20)."""
    stat = float(((observed - expected) ** 2 / expected).sum())
    k = observed.size - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def shard_batch(ids: np.ndarray) -> dict:
    return fields_for_ids(ids)


def fill_unequal(buffer, steps_per_shard):
    """Writers add different numbers of steps to each shard; returns every stored global id."""
    for k, steps in enumerate(steps_per_shard):
        writer = buffer.writer(k)
        for t in range(steps):
            local = t * writer.batch_size + np.arange(writer.batch_size)
            ids = buffer._global(k, local)
            writer.add_batch(shard_batch(ids))
        writer.flush()
    stored = [
        buffer._global(k, np.arange(min(s, buffer.max_length) * c) + max(0, s - buffer.max_length) * c)
        for k, (s, c) in enumerate(zip(steps_per_shard, buffer._stream_counts, strict=True))
    ]
    return np.concatenate(stored)


def test_import_replaybuf_imports_no_ray():
    code = "import sys, replaybuf; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_uniform_split_over_unequal_shards_is_exact():
    # shards of 2, 1 and 1 streams holding 12, 3 and 30 (-> 20 kept) steps
    buffer = ShardedReplayBuffer(SPEC, shards=3, batch_size=4, max_length=20, seed=1)
    stored = fill_unequal(buffer, [12, 3, 30])
    assert buffer.num_frames() == stored.size == 12 * 2 + 3 + 20
    counts = dict.fromkeys(stored.tolist(), 0)
    draws = 0
    for _ in range(120):
        items, info = buffer.get_next(64)
        assert_items_match_ids(items, info.ids)
        np.testing.assert_allclose(info.probabilities, 1.0 / stored.size, rtol=1e-5)
        for i in info.ids.tolist():
            counts[i] += 1  # KeyError: an id that is not stored
        draws += 64
    observed = np.array(list(counts.values()), float)
    p = chi_square_p(observed, np.full(observed.size, draws / stored.size))
    assert p > 0.01, p
    # the same counts are far from what an equal split over the shards would give
    per_shard = {k: (stored % 4) % 3 == k for k in range(3)}
    equal = np.concatenate([np.full(m.sum(), draws / 3 / m.sum()) for m in per_shard.values()])
    order = np.concatenate([stored[m] for m in per_shard.values()])
    assert chi_square_p(np.array([counts[i] for i in order.tolist()], float), equal) < 1e-6


def test_items_from_writers_are_drawn_after_an_empty_draw():
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=8, seed=4)
    with pytest.raises(replaybuf.EmptyBufferError, match="is empty"):
        buffer.get_next(4)  # the shards reported no mass
    writer = buffer.writer(1)
    writer.add_batch(shard_batch(np.array([1])))
    writer.flush()
    items, info = buffer.get_next(4)  # the driver's masses are stale: the shards' answers say more
    np.testing.assert_array_equal(info.ids, [1, 1, 1, 1])
    np.testing.assert_allclose(info.probabilities, 1.0)
    assert_items_match_ids(items, info.ids)


def test_uniform_windows_over_unequal_shards():
    buffer = ShardedReplayBuffer(SPEC, shards=2, batch_size=3, max_length=10, seed=2)
    fill_unequal(buffer, [4, 9])  # shard 0: 2 streams x 4 steps, shard 1: 1 stream x 9 steps
    starts = 2 * (4 - 3 + 1) + 1 * (9 - 3 + 1)
    seen = set()
    for _ in range(40):
        items, info = buffer.get_next(16, 3)
        assert_items_match_ids(items, info.ids)
        np.testing.assert_array_equal(np.diff(info.ids, axis=1), 3)
        np.testing.assert_allclose(info.probabilities, 1.0 / starts, rtol=1e-5)
        seen.update(info.ids[:, 0].tolist())
    assert len(seen) == starts


def test_episode_aware_shards_split_by_windows_inside_episodes():
    spec = {"step_type": replaybuf.ArraySpec((), np.int32), "tag": replaybuf.ArraySpec((), np.int64)}
    buffer = ShardedReplayBuffer(spec, shards=2, max_length=40, seed=6, buffer_options={"respect_episodes": True})
    windows = 0
    for k, lengths in enumerate([[3, 5, 2], [10, 4]]):  # episodes of these lengths, one writer per shard
        writer, tag = buffer.writer(k), 0
        for length in lengths:
            windows += max(0, length - 3 + 1)
            for t in range(length):
                step_type = 0 if t == 0 else (2 if t == length - 1 else 1)
                writer.add_batch({"step_type": np.array([step_type], np.int32), "tag": np.array([k * 100 + tag])})
                tag += 1
        writer.flush()
    episode_of = {}
    for k, lengths in enumerate([[3, 5, 2], [10, 4]]):
        tag = 0
        for e, length in enumerate(lengths):
            for _ in range(length):
                episode_of[k * 100 + tag] = (k, e)
                tag += 1
    for _ in range(20):
        items, info = buffer.get_next(32, 3)
        np.testing.assert_allclose(info.probabilities, 1.0 / windows, rtol=1e-5)  # 1 + 3 + 8 + 2 windows
        for row in items["tag"]:
            assert len({episode_of[int(t)] for t in row}) == 1, row  # never across an episode end


def test_prioritized_split_is_exact_and_weights_global():
    buffer = ShardedReplayBuffer(
        SPEC,
        shards=3,
        batch_size=3,
        max_length=50,
        seed=3,
        buffer_class=replaybuf.PrioritizedReplayBuffer,
        buffer_options={"alpha": 1.0, "epsilon": 0.0, "beta": 0.5},
    )
    stored = fill_unequal(buffer, [40, 10, 25])
    priority = 1.0 + (stored % 7)  # shards get different priority totals
    buffer.update_priorities(stored, priority)
    p_true = dict(zip(stored.tolist(), (priority / priority.sum()).tolist(), strict=True))
    p_min = min(p_true.values())
    counts = dict.fromkeys(stored.tolist(), 0)
    draws = 0
    for _ in range(100):
        items, info = buffer.get_next(64)
        assert_items_match_ids(items, info.ids)
        expected = np.array([p_true[i] for i in info.ids.tolist()])
        np.testing.assert_allclose(info.probabilities, expected, rtol=1e-4)
        np.testing.assert_allclose(info.weights, (expected / p_min) ** -0.5, rtol=1e-4)
        for i in info.ids.tolist():
            counts[i] += 1
        draws += 64
    observed = np.array([counts[i] for i in stored.tolist()], float)
    p = chi_square_p(observed, draws * priority / priority.sum())
    assert p > 0.01, p


def test_update_priorities_errors_change_nothing():
    uniform = ShardedReplayBuffer(SPEC, shards=2, max_length=8)
    with pytest.raises(replaybuf.ArgumentError, match="update_priorities: expected shards of a prioritized"):
        uniform.update_priorities(np.array([0]), np.array([1.0]))
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=8, sampler="prioritized")  # the one spelling
    for t in range(3):
        buffer.add_batch(step_batch(t, 2))
    with pytest.raises(replaybuf.PriorityError, match=r"priorities: expected finite values > 0, got \[-1.0\]"):
        buffer.update_priorities(np.array([0, 1]), np.array([2.0, -1.0]))
    with pytest.raises(replaybuf.PriorityError, match="ids: expected ids of added items"):
        buffer.update_priorities(np.array([7]), np.array([2.0]))
    with pytest.raises(replaybuf.ArgumentError, match="expected integer ids shaped like priorities"):
        buffer.update_priorities(np.array([0, 1]), np.array([2.0]))
    _, info = buffer.get_next(200)
    np.testing.assert_allclose(info.probabilities, 1 / 6, rtol=1e-5)  # all still equal


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shards": 0}, "shards: expected a positive int, got 0"),
        ({"shards": 3, "batch_size": 2}, r"batch_size: expected an int >= shards \(3\).*got 2"),
        ({"buffer_options": {"seed": 1}}, r"buffer_options: 'seed' is set by ShardedReplayBuffer"),
        ({"checkpoint_every": 5}, "checkpoint_every: needs checkpoint_dir, got checkpoint_every=5"),
        ({"buffer_class": dict}, "buffer_class: expected a replaybuf NumPy buffer class"),
        ({"buffer_options": {"alpha": 0.5}}, "alpha"),  # UniformReplayBuffer takes no alpha
        ({"max_restarts": -2}, "max_restarts: expected an int >= -1, got -2"),
        ({"sampler": "per"}, "sampler: expected 'uniform' or 'prioritized', got 'per'"),
        ({"sampler": "uniform", "buffer_class": replaybuf.PrioritizedReplayBuffer}, "sampler: the shards' buffer"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises((replaybuf.ArgumentError, TypeError), match=message):
        ShardedReplayBuffer(SPEC, **kwargs)


def test_writer_errors():
    buffer = ShardedReplayBuffer(SPEC, shards=2, batch_size=3, max_length=8)
    with pytest.raises(replaybuf.ArgumentError, match=r"shard: expected an int in \[0, 2\), got 2"):
        buffer.writer(2)
    writer = buffer.writer(0)
    assert writer.batch_size == 2
    with pytest.raises(replaybuf.SpecMismatchError):
        writer.add_batch(step_batch(0, 3))  # shard 0 holds 2 streams
    assert buffer.num_frames() == 0
    episodes = ShardedReplayBuffer(
        {"step_type": replaybuf.ArraySpec((), np.int32), "x": replaybuf.ArraySpec((), np.float32)},
        shards=2,
        max_length=8,
        buffer_options={"respect_episodes": True},
    )
    episodes.writer(0)
    with pytest.raises(replaybuf.ArgumentError, match="each writer needs its own shard"):
        episodes.writer(0)


def test_memmap_shards_get_a_folder_each(tmp_path):
    buffer = ShardedReplayBuffer(
        SPEC, shards=2, batch_size=2, max_length=8, buffer_options={"storage": "memmap", "path": str(tmp_path / "rb")}
    )
    for t in range(3):
        buffer.add_batch(step_batch(t, 2))
    assert sorted(p.name for p in (tmp_path / "rb").iterdir()) == ["shard-000", "shard-001"]
    items, info = buffer.get_next(8)
    assert_items_match_ids(items, info.ids)


def test_retried_add_never_inserts_twice():
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=8)
    shard = buffer.actors[0]
    leaves = [np.asarray(x) for x in buffer._flat.flatten(step_batch(0, 1))]
    assert ray.get(shard.add.remote(leaves, "w", 1)) is True
    assert ray.get(shard.add.remote(leaves, "w", 1)) is False  # the same key and number: a retry
    assert ray.get(shard.add.remote(leaves, "w", 1, 5, 1)) is False  # resent under a new epoch
    assert buffer.num_frames() == 1
    # out of order delivery: 3 waits for 2
    three = shard.add.remote(leaves, "w", 3)
    deadline = time.monotonic() + 60
    while buffer.shard_info()[0]["waiting"] < 1:  # first add 3 reaches the shard and waits there
        assert time.monotonic() < deadline and not ray.wait([three], timeout=0)[0], "add 3 did not wait for 2"
        time.sleep(0.01)
    assert ray.wait([three], timeout=0.2)[0] == []  # and it is held
    assert ray.get(shard.add.remote(leaves, "w", 2)) is True
    assert ray.get(three) is True
    assert buffer.num_frames() == 3


@ray.remote(num_cpus=0)
def _write_steps(writer, first_id: int, steps: int) -> int:
    for t in range(steps):
        ids = first_id + t * writer.batch_size + np.arange(writer.batch_size)
        writer.add_batch(fields_for_ids(ids))
    writer.flush()
    return writer.inserted


@ray.remote(num_cpus=0)
class _WriterActor:
    def __init__(self, writer):
        self.writer = writer

    def run(self, first_id: int, steps: int) -> int:
        for t in range(steps):
            ids = first_id + t * self.writer.batch_size + np.arange(self.writer.batch_size)
            self.writer.add_batch(fields_for_ids(ids))
        self.writer.flush()
        return self.writer.inserted


def test_writers_in_ray_actors_and_tasks():
    buffer = ShardedReplayBuffer(SPEC, shards=2, batch_size=4, max_length=100, max_in_flight=4)
    actors = [_WriterActor.remote(buffer.writer(k)) for k in range(2)]
    task = _write_steps.remote(buffer.writer(0), 10_000, 20)
    done = ray.get([a.run.remote(1_000 * (k + 1), 30) for k, a in enumerate(actors)] + [task], timeout=120)
    assert done == [30, 30, 20]
    assert buffer.num_frames() == (30 + 30 + 20) * 2
    stored = np.concatenate([part["id"].ravel() for part in buffer.gather_shards()])
    assert np.unique(stored).size == stored.size  # no step twice
    expected = {1000 + i for i in range(60)} | {2000 + i for i in range(60)} | {10_000 + i for i in range(40)}
    assert set(stored.tolist()) == expected
    items, info = buffer.get_next(32)
    assert (np.isin(items["id"], list(expected))).all()


def test_rate_limiter_holds_a_fast_writer_to_a_slow_learner():
    limiter = replaybuf.SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=20, error_buffer=40.0)
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=500, rate_limiter=limiter, rate_limiter_timeout=30)
    writer_actor = _WriterActor.remote(buffer.writer(0))
    run = writer_actor.run.remote(0, 400)  # as fast as it can: would finish in well under a second unheld
    cap = (80 + 40) // 4  # I * spi - S <= max_diff with S = 0: 30 inserts, then the writer waits
    deadline = time.monotonic() + 60
    while buffer.rate_limiter_state()["inserts"] < cap:  # first the writer reaches the cap
        assert time.monotonic() < deadline and not ray.wait([run], timeout=0)[0], buffer.rate_limiter_state()
        time.sleep(0.05)
    time.sleep(0.5)  # then it is held there
    assert buffer.rate_limiter_state()["inserts"] == cap and not ray.wait([run], timeout=0)[0]
    for _ in range(60):
        items, info = buffer.get_next(8)
        time.sleep(0.01)
    state = buffer.rate_limiter_state()
    low, high = buffer.rate_limiter_range()
    assert high <= 80 + 40 and low >= 80 - 40
    assert state["samples"] == 480
    assert state["inserts"] * 4 - state["samples"] <= 120
    assert not ray.wait([run], timeout=0)[0], "the writer should still be held back"
    buffer.close()  # wakes the blocked add: its writer fails with BufferClosedError
    with pytest.raises(replaybuf.BufferClosedError):
        ray.get(run, timeout=60)


def test_rate_limited_sample_times_out_counting_nothing():
    buffer = ShardedReplayBuffer(
        SPEC, shards=2, max_length=50, rate_limiter=replaybuf.MinSize(10), rate_limiter_timeout=0.3
    )
    buffer.add_batch(step_batch(0, 2))
    with pytest.raises(replaybuf.RateLimiterTimeout, match="sample of 4 items"):
        buffer.get_next(4)
    assert buffer.rate_limiter_state()["samples"] == 0
    for t in range(1, 5):
        buffer.add_batch(step_batch(t, 2))
    buffer.get_next(4)
    assert buffer.rate_limiter_state()["samples"] == 4


def test_a_sample_waiting_while_every_shard_is_dead_raises_writers_gone():
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=50, rate_limiter=replaybuf.MinSize(100))
    buffer.add_batch(step_batch(0, 2))
    for actor in buffer.actors:  # dead for good: no shard is left to insert what MinSize waits for
        ray.kill(actor, no_restart=True)
    with pytest.raises(replaybuf.WritersGoneError, match="of 4 items waits for inserts, but no shard is alive"):
        buffer.get_next(4)
    assert buffer.rate_limiter_state()["samples"] == 0
    buffer.shutdown()


def test_restarted_limiter_rebuilds_its_counts_from_the_shards():
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=4, rate_limiter=replaybuf.MinSize(2))
    for t in range(6):  # 12 inserted, 4 evicted per shard
        buffer.add_batch(step_batch(t, 2))
    buffer.get_next(5)
    before = buffer.rate_limiter_state()
    assert (before["inserts"], before["samples"], before["deletes"]) == (12, 5, 4)
    limiter = buffer.rate_limiter_actor()

    def pid_and_rebuilt():
        try:
            ask = limiter.__ray_call__.remote(lambda self: (__import__("os").getpid(), self.rebuilt))
            return ray.get(ask, timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return None  # down or restarting

    pid, rebuilt = pid_and_rebuilt()
    assert not rebuilt
    ray.kill(limiter, no_restart=False)
    deadline = time.monotonic() + 120
    while (now := pid_and_rebuilt()) is None or now[0] == pid:
        assert time.monotonic() < deadline, "the limiter did not restart"
        time.sleep(0.2)
    assert now[1], "the restarted limiter did not rebuild"
    after = buffer.rate_limiter_state()
    assert (after["inserts"], after["samples"], after["deletes"]) == (12, 5, 4)
    buffer.add_batch(step_batch(6, 2))
    buffer.get_next(3)
    assert buffer.rate_limiter_state()["samples"] == 8


def test_save_and_load_the_whole_buffer(tmp_path):
    def make():
        return ShardedReplayBuffer(
            SPEC,
            shards=2,
            batch_size=3,
            max_length=6,
            seed=5,
            buffer_class=replaybuf.PrioritizedReplayBuffer,
            rate_limiter=replaybuf.MinSize(2),
        )

    buffer = make()
    for t in range(9):  # wrapped
        buffer.add_batch(step_batch(t, 3))
    _, info = buffer.get_next(5)
    buffer.update_priorities(info.ids, np.arange(1.0, 6.0))
    buffer.save(tmp_path / "ckpt")
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert manifest["shards"] == 2 and manifest["rate_limiter"]["samples"] == 5
    expected = buffer.gather_all()
    _, before = buffer.get_next(50)

    other = make()
    other.load(tmp_path / "ckpt")
    assert other.num_frames() == 18
    np.testing.assert_array_equal(other.gather_all()["id"], expected["id"])
    assert other.rate_limiter_state()["samples"] == 5 and other.rate_limiter_state()["inserts"] == 27
    _, after = other.get_next(50)
    probabilities = dict(zip(before.ids.tolist(), before.probabilities.tolist(), strict=True))
    for i, p in zip(after.ids.tolist(), after.probabilities.tolist(), strict=True):
        if i in probabilities:
            assert p == pytest.approx(probabilities[i], rel=1e-5)  # priorities came back

    with pytest.raises(replaybuf.CheckpointError, match="expected a sharded checkpoint with manifest.json"):
        other.load(tmp_path / "nothing")
    (tmp_path / "ckpt" / "manifest.json").write_text(json.dumps({**manifest, "shards": 3}))
    with pytest.raises(replaybuf.CheckpointError, match=r"\['shards'\]: expected 2, got 3"):
        other.load(tmp_path / "ckpt")


def test_checkpoint_and_restore_are_deprecated_names_of_save_and_load(tmp_path):
    buffer = ShardedReplayBuffer(SPEC, shards=2, max_length=4)
    buffer.add_batch(step_batch(0, 2))
    with pytest.warns(DeprecationWarning, match="use save"):
        buffer.checkpoint(tmp_path / "ckpt")
    other = ShardedReplayBuffer(SPEC, shards=2, max_length=4)
    with pytest.warns(DeprecationWarning, match="use load"):
        other.restore(tmp_path / "ckpt")
    np.testing.assert_array_equal(other.gather_all()["id"], buffer.gather_all()["id"])


def test_a_new_buffer_resumes_from_the_shards_periodic_checkpoints(tmp_path):
    first = ShardedReplayBuffer(SPEC, shards=2, max_length=50, checkpoint_dir=tmp_path, checkpoint_every=4)
    for t in range(10):  # checkpoints after adds 4 and 8 of each shard
        first.add_batch(step_batch(t, 2))
    first.shutdown()
    second = ShardedReplayBuffer(SPEC, shards=2, max_length=50, checkpoint_dir=tmp_path, checkpoint_every=4)
    assert [info["restored"] for info in second.shard_info()] == [True, True]
    assert second.num_frames() == 16
    items, info = second.get_next(16)
    assert_items_match_ids(items, info.ids)
    assert info.ids.max() < 16


def test_dataset_keeps_fan_outs_in_flight_and_deterministic_pass_reads_all():
    buffer = ShardedReplayBuffer(SPEC, shards=2, batch_size=2, max_length=10, seed=7)
    for t in range(6):
        buffer.add_batch(step_batch(t, 2))
    iterator = iter(buffer.as_dataset(8, num_steps=2, num_parallel_calls=3))
    for _ in range(5):
        items, info = next(iterator)
        assert_items_match_ids(items, info.ids)
    iterator.close()
    ids = [int(info.ids) for _, info in buffer.as_dataset(single_deterministic_pass=True)]
    assert ids == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]


@ray.remote(num_cpus=0)
def _write_with_priorities(writer, priorities: np.ndarray, global_ids: np.ndarray) -> int:
    writer.add_batch(fields_for_ids(global_ids), priorities=priorities)
    writer.flush()
    return writer.inserted


def test_priorities_given_at_insert_by_the_driver_and_a_writer_task():
    buffer = ShardedReplayBuffer(
        SPEC,
        shards=2,
        batch_size=4,
        max_length=8,
        seed=0,
        buffer_class=replaybuf.PrioritizedReplayBuffer,
        buffer_options={"alpha": 1.0, "epsilon": 0.0},
    )
    buffer.add_batch(fields_for_ids(np.arange(4)), priorities=[1.0, 2.0, 3.0, 4.0])  # split by stream
    writer = buffer.writer(1)
    local = 1 * writer.batch_size + np.arange(writer.batch_size)  # shard 1's second step
    global_ids = buffer._global(1, local)
    assert ray.get(_write_with_priorities.remote(writer, np.array([5.0, 6.0]), global_ids), timeout=120) == 1
    priority = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, int(global_ids[0]): 5.0, int(global_ids[1]): 6.0}
    _, info = buffer.get_next(256)
    for uid, probability in zip(info.ids.tolist(), info.probabilities.tolist(), strict=True):
        assert probability == pytest.approx(priority[uid] / 21.0, rel=1e-5), uid
    with pytest.raises(replaybuf.ArgumentError, match=r"priorities: expected shape \(4,\)"):
        buffer.add_batch(fields_for_ids(np.arange(4)), priorities=[1.0])
    with pytest.raises(replaybuf.PriorityError, match="priorities: expected finite values > 0"):
        writer.add_batch(fields_for_ids(global_ids), priorities=[np.nan, 1.0])
    assert buffer.num_frames() == 6
    uniform = ShardedReplayBuffer(SPEC, shards=2, batch_size=2, max_length=8)
    with pytest.raises(replaybuf.ArgumentError, match="priorities: expected None, the shards hold UniformReplayBuffer"):
        uniform.add_batch(fields_for_ids(np.arange(2)), priorities=[1.0, 1.0])
    with pytest.raises(replaybuf.ArgumentError, match="priorities: expected None, shard 0 holds a buffer without"):
        uniform.writer(0).add_batch(fields_for_ids(np.arange(1)), priorities=[1.0])
    assert uniform.num_frames() == 0
