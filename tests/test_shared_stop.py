"""How a shared buffer's processes stop: actors end quietly when the learner closes the buffer, and a
learner blocked by the rate limiter raises WritersGoneError, naming them, once every writer is gone."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from conformance_data import SPEC, fields_for_ids
from replaybuf.errors import (
    BufferClosedError,
    RateLimiterTimeout,
    ReplayBufferError,
    SpecMismatchError,
    WritersGoneError,
)
from replaybuf.rate_limiters import MinSize, SampleToInsertRatio
from replaybuf.shared import SharedReplayBuffer
from replaybuf.shared.layout import pid_alive
from shared_workers import write_in_a_with_block, write_steps, write_then_hold

pytestmark = pytest.mark.timeout(300)  # a loaded 2-core machine starts spawn children slowly


@pytest.fixture
def spawn():
    """Start spawn children; every one is killed (if still running) and joined at the end."""
    context, started = multiprocessing.get_context("spawn"), []

    def start(target, *args):
        process = context.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(30)


def wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def catch(call, *args):
    """What ``call(*args)`` raised (None if nothing)."""
    try:
        call(*args)
    except Exception as error:
        return error
    return None


def test_killing_every_writer_while_the_learner_waits_raises_writers_gone(spawn):
    buffer = SharedReplayBuffer(SPEC, writers=2, batch_size=2, max_length=64, rate_limiter=MinSize(1000))
    try:
        actors = [spawn(write_then_hold, buffer.writer(i), 3) for i in range(2)]
        wait_for(lambda: buffer.num_frames() == 12, "both actors to add 3 steps")
        killer = threading.Timer(0.5, lambda: [actor.kill() for actor in actors])  # not joined: zombies
        killer.start()
        with pytest.raises(WritersGoneError) as raised:
            buffer.get_next(4)  # MinSize(1000) holds it: only the actors could let it through
        killer.join()
        message = str(raised.value)
        for index, actor in enumerate(actors):
            assert f"writer {index} (pid {actor.pid}) died" in message
        assert "a sample of 4 items waits for inserts" in message and "nothing was sampled" in message
        assert buffer.rate_limiter.state()["samples"] == 0  # nothing counted
        buffer.writer(0)  # a new handle, for a restarted actor that may be starting: wait for it
        ended = []
        learner = threading.Thread(target=lambda: ended.append(catch(buffer.get_next, 4)))
        learner.start()
        learner.join(0.5)
        assert learner.is_alive()
        buffer.close()  # wakes it with BufferClosedError
        learner.join(30)
        assert len(ended) == 1 and isinstance(ended[0], BufferClosedError)
    finally:
        buffer.close()


def test_writers_that_finished_also_end_the_wait_until_a_new_handle_is_made(spawn):
    buffer = SharedReplayBuffer(
        SPEC, writers=2, batch_size=2, max_length=64, rate_limiter=MinSize(1000), rate_limiter_timeout=0.5
    )
    try:
        actors = [spawn(write_steps, buffer.writer(i), 0, 2) for i in range(2)]
        for actor in actors:
            actor.join(120)
        with pytest.raises(WritersGoneError, match=f"writer 1 was closed by pid {actors[1].pid}"):
            buffer.get_next(4)
        buffer.writer(1)  # for a new actor, which may be starting: wait for it
        with pytest.raises(RateLimiterTimeout):
            buffer.get_next(4)
    finally:
        buffer.close()


def test_a_writer_no_process_has_taken_yet_keeps_the_learner_waiting(spawn):
    buffer = SharedReplayBuffer(
        SPEC, writers=2, batch_size=2, max_length=64, rate_limiter=MinSize(1000), rate_limiter_timeout=0.5
    )
    try:
        actor = spawn(write_then_hold, buffer.writer(0), 3)
        wait_for(lambda: buffer.num_frames() == 6, "the actor to add 3 steps")
        actor.kill()
        actor.join(30)
        with pytest.raises(RateLimiterTimeout, match="a sample of 4 items was still blocked"):
            buffer.get_next(4)  # writer 1's actor may still be starting: wait, up to the timeout
    finally:
        buffer.close()


def test_the_learners_own_writer_keeps_it_waiting():
    buffer = SharedReplayBuffer(SPEC, writers=1, batch_size=2, rate_limiter=MinSize(10), rate_limiter_timeout=0.3)
    try:
        buffer.add_batch(fields_for_ids(np.arange(2)))
        with pytest.raises(RateLimiterTimeout):
            buffer.get_next(1)
    finally:
        buffer.close()


def test_close_ends_an_actors_with_block_quietly(spawn):
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=4, error_buffer=8)
    buffer = SharedReplayBuffer(SPEC, writers=2, batch_size=2, max_length=64, rate_limiter=limiter)
    actors = [spawn(write_in_a_with_block, buffer.writer(i)) for i in range(2)]
    wait_for(lambda: buffer.num_frames() >= 8, "the actors to add")
    buffer.get_next(2)
    buffer.close()  # the actors are blocked by the rate limiter or adding: both end the with block
    for actor in actors:
        actor.join(60)
    assert [actor.exitcode for actor in actors] == [0, 0]  # returned normally: no uncaught error


def test_a_with_block_lets_every_other_error_through():
    buffer = SharedReplayBuffer(SPEC, writers=1, batch_size=2)
    try:
        writer = buffer.writer(0)
        with pytest.raises(SpecMismatchError):
            with writer:
                writer.add_batch({"wrong": np.zeros(2)})
        with writer:  # given up by the block above: usable again
            writer.add_batch(fields_for_ids(writer.ids(0)))
        buffer.close()
        with writer:  # the buffer is closed: the block ends quietly
            writer.add_batch(fields_for_ids(writer.ids(1)))
            raise AssertionError("not reached")
        with pytest.raises(BufferClosedError):  # outside a with block it raises
            writer.add_batch(fields_for_ids(writer.ids(1)))
    finally:
        buffer.close()


def test_a_zombie_is_not_alive():
    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    wait_for(lambda: not pid_alive(process.pid), "the child to exit")
    assert os.path.exists(f"/proc/{process.pid}")  # exited, not yet reaped: a zombie
    process.join()
    assert not pid_alive(process.pid) and pid_alive(os.getpid())


def test_a_timed_out_insert_says_inserted():
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1, error_buffer=2)
    limiter.await_insert(3)
    with pytest.raises(RateLimiterTimeout, match=r"an insert of 1 items was still blocked .*nothing was inserted$"):
        limiter.await_insert(1, timeout=0.01)
    with pytest.raises(RateLimiterTimeout, match=r"^rate limiter: a sample of 9 items .*nothing was sampled$"):
        limiter.await_sample(9, timeout=0.01)


def test_writers_gone_is_a_runtime_error_of_the_tree():
    assert issubclass(WritersGoneError, ReplayBufferError) and issubclass(WritersGoneError, RuntimeError)
    assert not issubclass(WritersGoneError, ValueError)  # no bad input: the processes are gone
