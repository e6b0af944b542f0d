"""Rate limiters: Reverb's rules, blocking with timeouts, close, checkpoints, threads and processes."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time

import pytest

from conformance_data import SPEC, assert_items_match_ids, step_batch
from replaybuf import errors
from replaybuf.rate_limiters import MinSize, RateLimiter, SampleToInsertRatio
from shared_workers import limiter_inserts

pytestmark = pytest.mark.timeout(300)  # generous: bounded, and a loaded machine is slow


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
    blocked: set[int] = set()  # the threads that reached the limiter's wait (called only when blocked)
    wait_on = limiter._cond.wait

    def counted_wait(timeout=None):
        blocked.add(threading.get_ident())
        return wait_on(timeout)

    limiter._cond.wait = counted_wait

    def wait() -> None:
        try:
            limiter.await_sample(1)
        except BaseException as err:  # recorded for the assertion below
            woken.append(err)

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(blocked) < 3:  # every waiter inside the wait: close must wake it there
        assert time.monotonic() < deadline, f"{len(blocked)} of 3 waiters blocked"
        time.sleep(0.01)
    assert not woken  # really blocked
    limiter.close()
    for thread in threads:
        thread.join(timeout=30)
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
    threads[1].join(timeout=120)
    stop.set()
    threads[0].join(timeout=30)
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
        pytest.skip(f"{method} is not available on {sys.platform} (POSIX only)")
    context = multiprocessing.get_context(method)
    limiter = SampleToInsertRatio(1.0, 2, 1.0).shared(context)  # range [1, 3]
    done = context.Value("q", 0)
    child = context.Process(target=limiter_inserts, args=(limiter, 10, done))
    child.start()
    try:
        deadline = time.monotonic() + 90  # a spawn child starts slowly on a loaded machine
        while limiter.state()["inserts"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert limiter.state()["inserts"] == 3  # (3 + 1) * 1 - 0 > 3: the child waits
        for _ in range(7):
            limiter.await_sample(1, timeout=90)  # each sample lets one more insert through
        child.join(timeout=90)
        assert child.exitcode == 0 and done.value == 10
        assert counts(limiter) == (10, 7, 0)
    finally:
        limiter.close()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()


# -- rate_limiter= on the NumPy buffers --------------------------------------------------------
def _numpy_buffers():
    from replaybuf import FrameStackReplayBuffer, PrioritizedReplayBuffer, PyUniformReplayBuffer, UniformReplayBuffer

    return {
        "uniform": lambda **kw: UniformReplayBuffer(SPEC, batch_size=2, max_length=4, seed=0, **kw),
        "py-uniform": lambda **kw: PyUniformReplayBuffer(SPEC, capacity=8, seed=0, **kw),
        "prioritized": lambda **kw: PrioritizedReplayBuffer(SPEC, batch_size=2, max_length=4, seed=0, **kw),
        "frames": lambda **kw: FrameStackReplayBuffer(
            SPEC, batch_size=2, max_length=4, seed=0, stacked_fields=["observation/camera"], **kw
        ),
        "torch": lambda **kw: _torch().TorchUniformReplayBuffer(SPEC, batch_size=2, max_length=4, seed=0, **kw),
        "torch-py-uniform": lambda **kw: _torch().TorchPyUniformReplayBuffer(SPEC, capacity=8, seed=0, **kw),
        "torch-prioritized": lambda **kw: _torch().TorchPrioritizedReplayBuffer(
            SPEC, batch_size=2, max_length=4, seed=0, **kw
        ),
    }


def _torch():
    pytest.importorskip("torch")
    import replaybuf.torch

    return replaybuf.torch


# the StreamBuffer family: the NumPy buffers and the torch ones, which take the same options
NUMPY_KINDS = ["uniform", "py-uniform", "prioritized", "frames", "torch", "torch-py-uniform", "torch-prioritized"]


def _add(buffer, step):
    buffer.add_batch(step_batch(step, 2))


@pytest.mark.parametrize("kind", NUMPY_KINDS)
def test_numpy_buffers_rate_limit_adds_and_samples_counting_nothing_on_timeout(kind):
    make = _numpy_buffers()[kind]
    with pytest.raises(errors.ArgumentError, match="rate_limiter: expected a MinSize or SampleToInsertRatio, got str"):
        make(rate_limiter="min")
    with pytest.raises(errors.ArgumentError, match="rate_limiter_timeout: expected None or a number of seconds"):
        make(rate_limiter=MinSize(1), rate_limiter_timeout=-2)
    buffer = make(rate_limiter=SampleToInsertRatio(1.0, 2, 2.0), rate_limiter_timeout=0.02)  # range [0, 4]
    with pytest.raises(errors.RateLimiterTimeout, match="sample of 3 items"):
        buffer.get_next(3)  # fewer than min_size_to_sample stored
    _add(buffer, 0)
    _add(buffer, 1)  # 4 items: (4 + 2) * 1 - 0 > 4 blocks the next add
    with pytest.raises(errors.RateLimiterTimeout, match="insert of 2 items"):
        _add(buffer, 2)
    assert buffer.num_frames() == 4
    assert counts(buffer._limiter) == (4, 0, 0)
    items, info = buffer.get_next(2)
    assert_items_match_ids(items, info.ids)
    _add(buffer, 2)  # two samples made room for one more add
    assert counts(buffer._limiter)[:2] == (6, 2)
    with pytest.raises(errors.EmptyBufferError):
        buffer.get_next(2, num_steps=10)  # granted, then the draw failed: uncounted
    assert counts(buffer._limiter)[:2] == (6, 2)
    buffer.clear()
    assert counts(buffer._limiter) == (0, 0, 0)


def test_numpy_buffer_counts_evictions_as_deletes():
    buffer = _numpy_buffers()["uniform"](rate_limiter=MinSize(1))
    for step in range(6):
        _add(buffer, step)
    assert counts(buffer._limiter) == (12, 0, 4)  # max_length 4: steps 0 and 1 evicted
    single = _numpy_buffers()["py-uniform"](rate_limiter=MinSize(1))
    single.add_batch(step_batch(0, 11))  # capacity 8: 3 never stay
    assert counts(single._limiter) == (11, 0, 3)


def test_numpy_buffer_close_wakes_a_blocked_sample():
    buffer = _numpy_buffers()["uniform"](rate_limiter=MinSize(100))
    woken: list[BaseException] = []

    def sample() -> None:
        try:
            buffer.get_next(1)
        except BaseException as err:  # recorded for the assertion
            woken.append(err)

    thread = threading.Thread(target=sample)
    thread.start()
    time.sleep(0.1)
    assert not woken
    buffer.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and isinstance(woken[0], errors.BufferClosedError)
    with pytest.raises(errors.BufferClosedError):
        _add(buffer, 0)
    assert buffer.num_frames() == 0


@pytest.mark.parametrize("kind", ["uniform", "torch", "torch-prioritized"])
def test_numpy_buffer_checkpoints_carry_the_counters(tmp_path, kind):
    make = _numpy_buffers()[kind]
    buffer = make(rate_limiter=MinSize(1))
    for step in range(5):
        _add(buffer, step)
    buffer.get_next(3)
    buffer.save(tmp_path / "ckpt")
    restored = make(rate_limiter=MinSize(1))
    restored.load(tmp_path / "ckpt")
    assert counts(restored._limiter) == (10, 3, 2)
    with pytest.raises(errors.CheckpointError, match=r"state\['rate_limiter'\]: the checkpoint holds no"):
        make(rate_limiter=MinSize(1)).load_state_dict(make().state_dict())
    assert "rate_limiter" not in make().state_dict()


def test_a_torch_buffer_refuses_a_rate_limiter_with_capture():
    with pytest.raises(errors.ArgumentError, match=r"rate_limiter: expected None with capture=True"):
        _numpy_buffers()["torch"](rate_limiter=MinSize(1), capture=True)


def test_numpy_buffer_fast_writer_slow_learner_holds_the_ratio():
    from replaybuf import UniformReplayBuffer

    spi, min_size, error_buffer = 8.0, 16, 32.0
    buffer = UniformReplayBuffer(
        SPEC, batch_size=1, max_length=64, seed=0, rate_limiter=SampleToInsertRatio(spi, min_size, error_buffer)
    )
    stop = threading.Event()

    def writer() -> None:
        step = 0
        while not stop.is_set():
            try:
                buffer.add_batch(step_batch(step, 1))
                step += 1
            except errors.BufferClosedError:
                return

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(200):
            items, info = buffer.get_next(4)
            assert_items_match_ids(items, info.ids)
            time.sleep(0.0005)
    finally:
        stop.set()
        buffer.close()
        thread.join(timeout=30)
    assert not thread.is_alive()
    limiter = buffer._limiter
    highest, lowest = limiter.observed_range()
    assert highest <= limiter.max_diff and lowest >= limiter.min_diff
    inserts, samples, _ = counts(limiter)
    assert samples == 800 and abs(inserts * spi - samples - spi * min_size) <= error_buffer
