"""Rate limiters: Reverb's rules, blocking with timeouts, close, checkpoints, threads and processes."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time

import pytest

from replaybuf import errors
from replaybuf.rate_limiters import MinSize, RateLimiter, SampleToInsertRatio
from shared_workers import limiter_inserts

pytestmark = pytest.mark.timeout(60)


class RecordingCounts(list):
    """Counters that remember ``(inserts, samples, deletes)`` after every change (under the lock)."""

    def __init__(self):
        super().__init__([0, 0, 0, 0])
        self.history: list[tuple[int, int, int]] = []

    def __setitem__(self, index, value):
        super().__setitem__(index, value)
        self.history.append((self[0], self[1], self[2]))


def counts(limiter) -> tuple[int, int, int]:
    state = limiter.state()
    return state["inserts"], state["samples"], state["deletes"]


# -- construction ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 10, 5.0), "samples_per_insert: expected a positive number, got 0"),
        ((-1.0, 10, 5.0), "samples_per_insert: expected a positive number, got -1.0"),
        ((float("nan"), 10, 5.0), "samples_per_insert: expected a number"),
        ((2.0, 0, 5.0), "min_size_to_sample: expected a positive int, got 0"),
        ((2.0, 1.5, 5.0), "min_size_to_sample: expected a positive int, got 1.5"),
        ((2.0, 10, -1.0), "error_buffer: expected a number >= 0, got -1.0"),
        ((2.0, 10, "wide"), "error_buffer: expected a number, got 'wide'"),
        ((2.0, 10, (1, 2, 3)), "error_buffer: expected a number or a \\(min_diff, max_diff\\) pair"),
        ((8.0, 10, 7.9), "narrower than 2 \\* max\\(1, samples_per_insert\\) = 16"),
        ((0.5, 10, 0.9), "narrower than 2 \\* max\\(1, samples_per_insert\\) = 2"),
        ((2.0, 10, (21.0, 40.0)), "starts above samples_per_insert \\* min_size_to_sample = 20"),
    ],
)
def test_sample_to_insert_ratio_rejects_bad_arguments(args, match):
    with pytest.raises(errors.ArgumentError, match=match):
        SampleToInsertRatio(*args)


def test_construction_accepts_the_edges_and_derives_the_range():
    limiter = SampleToInsertRatio(8.0, 10, 8.0)  # exactly 2 * spi wide
    assert (limiter.min_diff, limiter.max_diff) == (72.0, 88.0)
    assert SampleToInsertRatio(2.0, 10, (20.0, 24.0)).min_diff == 20.0  # starts at spi * min_size
    with pytest.raises(errors.ArgumentError, match="min_size_to_sample: expected a positive int, got 0"):
        MinSize(0)
    with pytest.raises(errors.ArgumentError, match="min_diff \\(2\\) > max_diff \\(1\\)"):
        RateLimiter(1.0, 1, 2, 1)


# -- the rules ---------------------------------------------------------------------------------
def test_min_size_blocks_samples_until_enough_items_and_never_inserts():
    limiter = MinSize(3)
    assert not limiter.can_sample(1)
    limiter.await_insert(2)
    assert not limiter.can_sample(1)
    limiter.await_insert(1)
    assert limiter.can_sample(1_000_000)
    limiter.await_insert(10**9)  # inserts never wait
    limiter.delete(10**9 + 1)  # back below min size
    assert not limiter.can_sample(1)


def test_sample_to_insert_ratio_follows_reverbs_formulas():
    # spi=2, min_size=3, error_buffer=4 -> diff range [2, 10]
    limiter = SampleToInsertRatio(2.0, 3, 4.0)
    assert (limiter.min_diff, limiter.max_diff) == (2.0, 10.0)
    # filling: I + n - D <= 3 is always allowed; beyond, (I + n) * 2 - S <= 10
    assert limiter.can_insert(3)
    assert limiter.can_insert(5)  # (0 + 5) * 2 - 0 = 10 <= 10
    assert not limiter.can_insert(6)  # 12 > 10 and 6 > min size
    limiter.await_insert(5)
    assert not limiter.can_insert(1)  # 12 > 10
    # sampling: I - D >= 3 and I * 2 - S - n >= 2
    assert limiter.can_sample(8)  # 10 - 8 = 2
    assert not limiter.can_sample(9)
    limiter.await_sample(8)
    assert not limiter.can_sample(1)
    assert limiter.can_insert(4)  # (5 + 4) * 2 - 8 = 10
    assert not limiter.can_insert(5)
    # deletes bring the buffer back under min size: inserts flow, samples stop
    limiter.delete(4)  # I - D = 1
    assert not limiter.can_sample(1) and limiter.can_insert(2)  # 5 + 2 - 4 = 3 <= min size


# -- blocking ----------------------------------------------------------------------------------
def test_a_blocked_sample_times_out_having_counted_nothing():
    limiter = MinSize(2)
    limiter.await_insert(1)
    started = time.monotonic()
    with pytest.raises(errors.RateLimiterTimeout, match="sample of 4 items was still blocked after 0.05 s"):
        limiter.await_sample(4, timeout=0.05)
    assert time.monotonic() - started >= 0.05
    assert counts(limiter) == (1, 0, 0)


def test_a_blocked_insert_times_out_having_counted_nothing():
    limiter = SampleToInsertRatio(1.0, 1, 1.0)  # range [0, 2]
    limiter.await_insert(2)
    with pytest.raises(errors.RateLimiterTimeout, match="insert of 1 items"):
        limiter.await_insert(1, timeout=0, deletes=1)
    assert counts(limiter) == (2, 0, 0)
    assert isinstance(errors.RateLimiterTimeout("x"), TimeoutError)


@pytest.mark.parametrize("bad", [-1, float("nan"), "1", True])
def test_bad_timeouts_are_rejected(bad):
    with pytest.raises(errors.ArgumentError, match="timeout: expected None or a number of seconds >= 0"):
        MinSize(1).await_insert(1, timeout=bad)


def test_close_wakes_every_waiter_and_later_calls_raise():
    limiter = MinSize(5)
    woken: list[BaseException] = []

    def wait() -> None:
        try:
            limiter.await_sample(1)
        except BaseException as err:  # recorded for the assertion below
            woken.append(err)

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    assert not woken  # really blocked
    limiter.close()
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    assert len(woken) == 3 and all(isinstance(err, errors.BufferClosedError) for err in woken)
    with pytest.raises(errors.BufferClosedError, match="closed"):
        limiter.await_insert(1)
    assert limiter.closed and counts(limiter) == (0, 0, 0)


def test_undo_and_reset():
    limiter = MinSize(1)
    limiter.await_insert(3)
    limiter.await_sample(2)
    limiter.undo_sample(2)
    assert counts(limiter) == (3, 0, 0)
    assert limiter.observed_range() == (3.0, 1.0)  # after the insert; after the sample
    limiter.reset()
    assert counts(limiter) == (0, 0, 0) and not limiter.can_sample(1)
    assert limiter.observed_range() == (float("-inf"), float("inf"))


# -- checkpoints -------------------------------------------------------------------------------
def test_state_round_trips_and_is_validated():
    limiter = SampleToInsertRatio(2.0, 3, 4.0)
    limiter.await_insert(5)
    limiter.await_sample(6)
    limiter.delete(1)
    state = limiter.state()
    assert state["inserts"] == 5 and state["samples"] == 6 and state["deletes"] == 1
    other = SampleToInsertRatio(2.0, 3, 4.0)
    other.load_state(state)
    assert counts(other) == (5, 6, 1)
    assert other.can_sample(2) and not other.can_sample(3)
    with pytest.raises(errors.CheckpointError, match="samples_per_insert.*saved 2.0, this limiter has 3.0"):
        SampleToInsertRatio(3.0, 3, 6.0).load_state(state)
    with pytest.raises(errors.CheckpointError, match="'inserts'.*expected an int >= 0, got -1"):
        other.load_state({**state, "inserts": -1})
    with pytest.raises(errors.CheckpointError, match="7 deletes > 5 inserts"):
        other.load_state({**state, "deletes": 7})
    with pytest.raises(errors.CheckpointError, match="expected a dict"):
        other.load_state([1, 2])
    assert counts(other) == (5, 6, 1)  # refused loads changed nothing


# -- threads -----------------------------------------------------------------------------------
def test_fast_writer_and_slow_learner_stay_inside_the_error_buffer_at_every_grant():
    spi, min_size, error_buffer = 8.0, 20, 16.0
    limiter = SampleToInsertRatio(spi, min_size, error_buffer)
    recorded = RecordingCounts()
    limiter._counts = recorded  # every change is recorded under the limiter's lock
    stop = threading.Event()
    inserted = [0]

    def writer() -> None:  # as fast as it can go: one item per insert
        while not stop.is_set():
            try:
                limiter.await_insert(1, timeout=0.05)
                inserted[0] += 1
            except errors.RateLimiterTimeout:
                continue

    def learner() -> None:  # slow: a batch of 4, then a pause
        for _ in range(150):
            limiter.await_sample(4, timeout=10)
            time.sleep(0.001)

    threads = [threading.Thread(target=writer), threading.Thread(target=learner)]
    for thread in threads:
        thread.start()
    threads[1].join(timeout=30)
    stop.set()
    threads[0].join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    inserts, samples, _ = recorded.history[-1]
    assert samples == 600
    assert inserts == inserted[0]
    first_sample = next(i for i, (_, s, _) in enumerate(recorded.history) if s)
    for i, (ins, smp, _) in enumerate(recorded.history):
        diff = ins * spi - smp
        assert diff <= limiter.max_diff, (i, ins, smp)
        if i >= first_sample:
            assert diff >= limiter.min_diff, (i, ins, smp)
    highest, lowest = limiter.observed_range()
    assert highest <= limiter.max_diff and lowest >= limiter.min_diff
    assert highest == max(i * spi - s for i, s, _ in recorded.history)
    # the writer was held back: the achieved ratio is the target within the error buffer
    assert abs(inserts * spi - samples - spi * min_size) <= error_buffer
    assert inserts < 100  # unlimited, it would have inserted thousands meanwhile


# -- processes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_a_shared_limiter_blocks_a_child_process(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available on {sys.platform}")
    context = multiprocessing.get_context(method)
    limiter = SampleToInsertRatio(1.0, 2, 1.0).shared(context)  # range [1, 3]
    done = context.Value("q", 0)
    child = context.Process(target=limiter_inserts, args=(limiter, 10, done))
    child.start()
    try:
        deadline = time.monotonic() + 20
        while limiter.state()["inserts"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert limiter.state()["inserts"] == 3  # (3 + 1) * 1 - 0 > 3: the child waits
        for _ in range(7):
            limiter.await_sample(1, timeout=10)  # each sample lets one more insert through
        child.join(timeout=20)
        assert child.exitcode == 0 and done.value == 10
        assert counts(limiter) == (10, 7, 0)
    finally:
        limiter.close()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()
