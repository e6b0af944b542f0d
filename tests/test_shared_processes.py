"""SharedReplayBuffer with real writer processes: integrity, torn reads, SIGKILL, rate limits, leaks."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

from conformance_data import SPEC, assert_items_match_ids
from replaybuf.errors import BufferClosedError
from replaybuf.rate_limiters import SampleToInsertRatio
from replaybuf.shared import SharedReplayBuffer
from shared_workers import (
    own_a_buffer_and_exit,
    pause_mid_write,
    take_over_and_write,
    write_steps,
    write_until_closed,
)

pytestmark = pytest.mark.timeout(300)  # generous: a loaded 2-core machine starts spawn children slowly
METHODS = [m for m in ("spawn", "forkserver", "fork") if m in multiprocessing.get_all_start_methods()]


class Children:
    """Child processes that are always reaped: joined with a timeout, killed if still alive."""

    def __init__(self, method: str):
        self.context = multiprocessing.get_context(method)
        self.processes: list = []

    def start(self, target, *args):
        process = self.context.Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)
        return process

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.1, deadline - time.monotonic()))
        alive = [p for p in self.processes if p.is_alive()]
        assert not alive, f"{len(alive)} child processes did not finish in {timeout} s"
        codes = [p.exitcode for p in self.processes]
        assert codes == [0] * len(codes), codes

    def reap(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join(10)


@pytest.fixture
def children(request):
    made = []

    def make(method):
        made.append(Children(method))
        return made[-1]

    yield make
    for group in made:
        group.reap()


def wait_for(predicate, timeout: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("method", METHODS)
def test_four_writer_processes_lose_and_duplicate_nothing(method, children):
    writers, batch_size, steps = 4, 2, 300
    procs = children(method)
    with SharedReplayBuffer(SPEC, writers=writers, batch_size=batch_size, max_length=steps, seed=1) as buffer:
        for w in range(writers):
            procs.start(write_steps, buffer.writer(w, flush_every=7), 0, steps)
        samples = 0
        while samples < 50 or any(p.is_alive() for p in procs.processes):
            if buffer.num_frames() >= 3 * batch_size * writers:
                items, info = buffer.get_next(64, 3)
                assert_items_match_ids(items, info.ids)  # every item whole, every field of its id
                np.testing.assert_array_equal(np.diff(info.ids, axis=1), writers * batch_size)
                samples += 1
            if samples > 5000:
                break
        procs.join()
        assert buffer.num_frames() == writers * batch_size * steps
        seen = []
        for items, info in buffer.as_dataset(single_deterministic_pass=True):
            assert_items_match_ids(items, info.ids)
            seen.append(int(info.ids))
        assert len(seen) == len(set(seen)) == writers * batch_size * steps
        assert set(seen) == set(range(writers * batch_size * steps))  # no id lost or duplicated


def test_reads_racing_wrapping_writers_are_whole(children):
    writers, batch_size, max_length = 4, 4, 32
    procs = children("fork" if "fork" in METHODS else "spawn")
    with SharedReplayBuffer(SPEC, writers=writers, batch_size=batch_size, max_length=max_length, seed=2) as buffer:
        for w in range(writers):
            procs.start(write_until_closed, buffer.writer(w, flush_every=4), 0)  # until the close below
        wait_for(lambda: buffer.num_frames() == writers * batch_size * max_length, what="every ring full")
        for _ in range(300):  # the writers keep wrapping their 32-step rings all along
            items, info = buffer.get_next(128, 4)
            assert_items_match_ids(items, info.ids)
        assert all(p.is_alive() for p in procs.processes)
    procs.join()  # close() ended the writers


@pytest.mark.parametrize("method", METHODS)
def test_sigkill_mid_add_loses_only_that_block_and_the_writer_can_be_taken_over(method, children, tmp_path):
    writers, batch_size, max_length, flush_every = 2, 2, 16, 4
    procs = children(method)
    marker = str(tmp_path / "paused")
    with SharedReplayBuffer(SPEC, writers=writers, batch_size=batch_size, max_length=max_length, seed=3) as buffer:
        victim_handle = buffer.writer(0, flush_every=flush_every)
        victim_handle._after_write = functools.partial(pause_mid_write, marker, 20)
        victim = procs.start(write_steps, victim_handle, 0, 100)
        other = procs.start(write_steps, buffer.writer(1, flush_every=flush_every), 0, 200, 0.002)
        wait_for(lambda: os.path.exists(marker) and os.path.getsize(marker) > 0, what="the paused write")
        os.kill(victim.pid, signal.SIGKILL)  # steps 20..23 are copied but not committed
        victim.join(10)
        assert victim.exitcode == -signal.SIGKILL
        # the block overwrote the slots of steps 4..7: only steps 8..19 of writer 0 are whole
        items, _ = buffer.get_next(256)
        assert_items_match_ids(items, _.ids)
        writer0 = _.ids[(_.ids % (writers * batch_size)) < batch_size] // (writers * batch_size)
        assert writer0.min() >= 8 and writer0.max() <= 19
        # a new process takes the writer over at its last whole step and goes on
        start = multiprocessing.get_context(method).Value("q", -1)
        clean_handle = buffer.writer(0, flush_every=flush_every)
        successor = procs.start(take_over_and_write, clean_handle, 8, start)
        successor.join(120)
        assert successor.exitcode == 0 and start.value == 20
        other.join(120)
        assert other.exitcode == 0  # the other writer went on meanwhile
        seen = {}
        for items, info in buffer.as_dataset(single_deterministic_pass=True):
            assert_items_match_ids(items, info.ids)
            step, column = divmod(int(info.ids), writers * batch_size)
            seen.setdefault(column // batch_size, []).append(step)
        assert sorted(set(seen[0])) == list(range(12, 28))  # 20 + 8 steps, the newest 16 kept
        assert sorted(set(seen[1])) == list(range(200 - max_length, 200))


def test_a_rate_limited_run_stays_inside_the_error_buffer(children):
    spi, min_size, error_buffer = 2.0, 64, 32.0
    limiter = SampleToInsertRatio(spi, min_size, error_buffer)
    procs = children("spawn")
    with SharedReplayBuffer(
        SPEC, writers=2, batch_size=2, max_length=64, seed=4, rate_limiter=limiter, rate_limiter_timeout=120
    ) as buffer:
        shared = buffer.rate_limiter
        for w in range(2):
            procs.start(write_until_closed, buffer.writer(w, flush_every=2), 0)
        for _ in range(200):
            items, info = buffer.get_next(8)
            assert_items_match_ids(items, info.ids)
        state = shared.state()
        highest, lowest = shared.observed_range()
        assert highest <= shared.max_diff and lowest >= shared.min_diff
        diff = state["inserts"] * spi - state["samples"]
        assert shared.min_diff <= diff <= shared.max_diff
        assert state["samples"] == 1600
        # writers are free-running: without the limiter they would have added far more
        assert state["inserts"] <= (1600 + shared.max_diff) / spi
    procs.join()  # close() woke the blocked writers with BufferClosedError: they returned


def test_close_wakes_a_writer_blocked_by_the_rate_limiter(children):
    limiter = SampleToInsertRatio(1.0, 4, 2.0)
    procs = children("spawn")
    buffer = SharedReplayBuffer(SPEC, writers=1, batch_size=1, max_length=64, rate_limiter=limiter)
    try:
        child = procs.start(write_until_closed, buffer.writer(0), 0)
        wait_for(lambda: buffer.rate_limiter.state()["inserts"] == 6, what="the writer to block")
        time.sleep(0.2)
        assert buffer.rate_limiter.state()["inserts"] == 6 and child.is_alive()
    finally:
        buffer.close()
    procs.join(30)
    with pytest.raises(BufferClosedError):
        buffer.get_next(1)


@pytest.mark.parametrize("method", METHODS)
def test_an_owner_that_exits_without_close_leaves_no_segment(method, children):
    procs = children(method)
    names = procs.context.Queue()
    procs.start(own_a_buffer_and_exit, names)
    name = names.get(timeout=60)
    procs.join()
    assert name.startswith("replaybuf-")
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_save_of_a_running_buffer_is_consistent(children, tmp_path):
    writers, batch_size, max_length = 3, 2, 32
    procs = children("spawn")
    with SharedReplayBuffer(SPEC, writers=writers, batch_size=batch_size, max_length=max_length) as buffer:
        for w in range(writers):
            procs.start(write_steps, buffer.writer(w, flush_every=3), 0, 2000)
        wait_for(lambda: buffer.num_frames() >= writers * batch_size * 8, what="the first steps")
        buffer.save(tmp_path / "ckpt")
        procs.join()
    with SharedReplayBuffer(SPEC, writers=writers, batch_size=batch_size, max_length=max_length) as restored:
        restored.load(tmp_path / "ckpt")
        assert restored.num_frames() > 0
        per_writer: dict[int, list[int]] = {}
        for items, info in restored.as_dataset(sample_batch_size=batch_size, single_deterministic_pass=True):
            assert_items_match_ids(items, info.ids)  # nothing torn was saved
            steps, columns = np.divmod(info.ids, writers * batch_size)
            assert len(set(steps.tolist())) == 1
            per_writer.setdefault(int(columns[0] // batch_size), []).append(int(steps[0]))
        for steps in per_writer.values():  # each segment cut at one committed step, no gap
            assert steps == list(range(steps[0], steps[0] + len(steps)))
