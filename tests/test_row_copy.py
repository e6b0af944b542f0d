"""Large record reads split across threads (replaybuf.storages.row_copy / threads): the same
bytes as ``take``, the same errors, and a pool that works again in a forked child."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from replaybuf import ArraySpec, UniformReplayBuffer
from replaybuf.storages import row_copy, threads
from replaybuf.storages.records import record_dtype

pytestmark = pytest.mark.timeout(120)

DTYPE = record_dtype([ArraySpec((3, 5), np.uint8), ArraySpec((), np.int64), ArraySpec((2,), np.float32)])


def records(n=1000, seed=0):
    raw = np.random.default_rng(seed).integers(0, 256, n * DTYPE.itemsize, dtype=np.uint8)
    return raw.view(DTYPE)


@pytest.fixture
def split_everything(monkeypatch):
    """Every read is large enough to split, and the cores are idle."""
    monkeypatch.setattr(row_copy, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(row_copy, "idle_threads", lambda threads: threads)


def test_the_compiled_copy_is_there_where_numba_is():
    pytest.importorskip("numba")
    assert row_copy._copy_rows() is not None  # else every read would quietly stay on take


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64, 255])
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_a_split_read_is_take_byte_for_byte(split_everything, count, workers):
    store = records()
    slots = np.random.default_rng(count).integers(0, len(store), (count, 2))  # any shape of slots
    got = row_copy.read_rows(store, slots + len(store), workers)  # ids one lap on: the same slots
    assert got.shape == slots.shape and got.dtype == DTYPE
    assert got.tobytes() == store.take(slots).tobytes()


def test_ids_wrap_onto_slots_as_take_wraps_them(split_everything):
    store = records(10)
    ids = np.array([0, 10, 23, 9, 2**62 + 3])  # a sample's ids run past the capacity: slot = id % capacity
    assert row_copy.read_rows(store, ids, 2).tobytes() == store.take([0, 0, 3, 9, (2**62 + 3) % 10]).tobytes()


def test_a_window_read_copies_runs_byte_for_byte_as_take(monkeypatch):
    pytest.importorskip("numba")
    assert row_copy._copy_runs() is not None  # else window reads would quietly stay on take
    copy, copied = row_copy._copy_runs(), []
    monkeypatch.setattr(row_copy, "_copy_runs", lambda: lambda *args: copied.append(args) or copy(*args))
    monkeypatch.setattr(row_copy, "RUN_STEPS", 2)  # short windows too, to see wraps and repeats
    rng = np.random.default_rng(1)
    for capacity in (1, 2, 7, 100):
        store = records(capacity, seed=capacity)
        for lap in (0, 2**40):  # ids many laps on: the same slots
            starts = rng.integers(0, 3 * capacity, (5, 1)) + lap * capacity
            steps = np.clip(np.arange(9) - rng.integers(0, 4, (5, 1)), 0, 6)  # clamped: repeats at both ends
            for ids in (starts + steps, starts + 3 * steps, (starts + steps)[:, ::-1]):  # runs, strides, backwards
                got = row_copy.read_rows(store, ids, 1)
                assert got.shape == ids.shape and got.tobytes() == store.take(ids % capacity).tobytes()
    assert len(copied) >= 4 * 2  # every window of consecutive ids went by runs (others too, when clamped first)


def test_short_or_strided_windows_stay_on_take(monkeypatch):
    monkeypatch.setattr(row_copy, "_copy_runs", lambda: pytest.fail("copied by runs"))
    store = records()
    for ids in (np.arange(20).reshape(2, 10), np.arange(0, 80, 2).reshape(2, 20), np.empty((0, 20), np.int64)):
        assert row_copy.read_rows(store, ids, 1).tobytes() == store.take(ids).tobytes()


def test_small_reads_and_one_thread_stay_on_take(monkeypatch):
    calls = []
    monkeypatch.setattr(row_copy, "run_split", lambda *args: calls.append(args))
    store = records()
    row_copy.read_rows(store, np.arange(4), 4)  # 4 records: far below PARALLEL_BYTES
    monkeypatch.setattr(row_copy, "PARALLEL_BYTES", 1)
    row_copy.read_rows(store, np.arange(4), 1)
    assert calls == []


def test_a_large_read_stays_on_take_while_the_other_cores_are_busy(monkeypatch):
    calls = []
    monkeypatch.setattr(row_copy, "run_split", lambda *args: calls.append(args))
    monkeypatch.setattr(row_copy, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(row_copy, "idle_threads", lambda threads: 1)
    store = records()
    assert row_copy.read_rows(store, np.arange(4), 4).tobytes() == store.take(np.arange(4)).tobytes()
    assert calls == []


@pytest.mark.parametrize(
    ("loadavg", "asked", "expected"),
    [
        ("0.50 0.40 0.30 1/300 4242\n", 4, 4),  # this thread alone: every core idle (8 of them)
        ("6.10 6.00 4.20 3/300 4242\n", 4, 4),  # 2 others runnable, 6 cores idle
        ("6.10 6.00 4.20 6/300 4242\n", 4, 3),  # 5 others: 3 cores idle
        ("6.10 6.00 4.20 9/300 4242\n", 4, 1),  # more runnable than cores: this thread alone
        ("garbled\n", 4, 4),  # unreadable: as asked
    ],
)
def test_idle_threads_counts_the_cores_no_runnable_thread_waits_for(tmp_path, monkeypatch, loadavg, asked, expected):
    (tmp_path / "loadavg").write_text(loadavg)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(threads, "LOADAVG", str(tmp_path / "loadavg"))
    assert threads.idle_threads(asked) == expected


def test_idle_threads_without_a_loadavg_file_keeps_the_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "LOADAVG", str(tmp_path / "none"))
    assert threads.idle_threads(3) == 3


def test_run_split_covers_every_item_once_in_order_of_parts():
    seen = []
    threads.run_split(lambda a, b: seen.append((a, b)), 10, 3)
    assert sorted(seen) == [(0, 3), (3, 6), (6, 10)]
    seen.clear()
    threads.run_split(lambda a, b: seen.append((a, b)), 2, 4)  # more threads than items
    assert sorted(seen) == [(0, 1), (1, 2)]


def test_an_error_in_a_worker_part_reaches_the_caller():
    def run(a, b):
        if a > 0:
            raise ValueError(f"part {a}")

    with pytest.raises(ValueError, match="part"):
        threads.run_split(run, 8, 2)


def _read_in_child(store, queue):
    slots = np.arange(len(store))[::-1]
    queue.put(row_copy.read_rows(store, slots, 2).tobytes() == store.take(slots).tobytes())


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork (POSIX only)")
def test_a_forked_child_reads_split_with_a_pool_of_its_own(split_everything):
    store = records(64)
    row_copy.read_rows(store, np.arange(64), 2)  # the parent's pool exists before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(store, queue))
    child.start()
    try:
        assert queue.get(timeout=60) is True  # a copied pool has no threads: it would hang
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == 0


def test_an_image_buffer_samples_the_same_items_split_or_not(monkeypatch):
    spec = {"obs": ArraySpec((84, 84, 4), np.uint8), "action": ArraySpec((), np.int64)}
    obs = np.random.default_rng(0).integers(0, 256, (64, 84, 84, 4), dtype=np.uint8)
    monkeypatch.setattr(row_copy, "idle_threads", lambda threads: threads)
    made = []
    for parallel_bytes in (1 << 62, 1):
        monkeypatch.setattr(row_copy, "PARALLEL_BYTES", parallel_bytes)
        buffer = UniformReplayBuffer(spec, batch_size=64, max_length=4, seed=3)
        for t in range(4):
            buffer.add_batch({"obs": obs + t, "action": np.arange(64) + 64 * t})
        buffer._storage.read_threads = 2
        made.append(buffer.get_next(128, 2))
    (items_take, info_take), (items_split, info_split) = made
    np.testing.assert_array_equal(info_take.ids, info_split.ids)
    np.testing.assert_array_equal(items_take["obs"], items_split["obs"])
    np.testing.assert_array_equal(items_split["action"], info_split.ids)
