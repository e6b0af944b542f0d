"""SharedReplayBuffer in one process: arguments, staging, torn reads, rate limits, close, checkpoints."""
# ruff: noqa: F811  (pytest fixtures imported from shared_workers are parameters here)

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from conformance_data import SPEC, assert_items_match_ids, fields_for_ids, step_batch
from replaybuf import ArraySpec
from replaybuf.errors import (
    ArgumentError,
    BufferClosedError,
    CheckpointError,
    EmptyBufferError,
    RateLimiterTimeout,
    SpecMismatchError,
)
from replaybuf.rate_limiters import MinSize, SampleToInsertRatio
from replaybuf.shared import SharedReplayBuffer
from shared_workers import buffers, no_leaked_segments, shm_blocks, write  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(60)


# -- arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"writers": 0}, "writers: expected a positive int, got 0"),
        ({"batch_size": -1}, "batch_size: expected a positive int, got -1"),
        ({"max_length": 2.5}, "max_length: expected a positive int, got 2.5"),
        ({"max_length": 4, "flush_every": 5}, "flush_every: expected at most max_length \\(4\\), got 5"),
        ({"rate_limiter": 3}, "rate_limiter: expected a MinSize or SampleToInsertRatio, got int"),
        ({"rate_limiter_timeout": -1}, "rate_limiter_timeout: expected None or a number of seconds >= 0, got -1"),
        ({"context": "threads"}, "context: expected one of .*, got 'threads'"),
    ],
)
def test_bad_arguments_are_rejected_and_create_nothing(kwargs, match):
    before = shm_blocks()
    with pytest.raises(ArgumentError, match=match):
        SharedReplayBuffer(SPEC, **kwargs)
    assert shm_blocks() == before


def test_writer_index_and_flush_every_are_checked(buffers):
    buffer = buffers(SPEC, writers=2, max_length=8)
    with pytest.raises(ArgumentError, match="index: expected an int in \\[0, 2\\), got 2"):
        buffer.writer(2)
    with pytest.raises(ArgumentError, match="flush_every: expected at most max_length \\(8\\), got 9"):
        buffer.writer(0, flush_every=9)


def test_the_buffer_itself_does_not_pickle_but_its_writers_do(buffers):
    buffer = buffers(SPEC, writers=2)
    with pytest.raises(TypeError, match="pass buffer.writer\\(i\\) to an actor process"):
        pickle.dumps(buffer)
    handle = pickle.loads(pickle.dumps(buffer.writer(1)))
    write(handle, range(3))
    handle.close()
    assert buffer.num_frames() == 3


# -- staging and ids ---------------------------------------------------------------------------
def test_a_writer_stages_steps_and_commits_whole_blocks(buffers):
    buffer = buffers(SPEC, writers=2, batch_size=3, max_length=16)
    writer = buffer.writer(1, flush_every=4)
    write(writer, range(3))
    assert buffer.num_frames() == 0  # staged, not committed
    write(writer, [3])
    assert buffer.num_frames() == 4 * 3
    write(writer, [4])
    writer.flush()
    assert buffer.num_frames() == 5 * 3
    write(writer, [5])
    writer.close()  # close flushes
    assert buffer.num_frames() == 6 * 3
    items, info = buffer.get_next(50, 2)
    assert_items_match_ids(items, info.ids)
    assert set((info.ids % 6 // 3).ravel().tolist()) == {1}  # only writer 1's streams hold steps
    np.testing.assert_allclose(info.probabilities, 1 / ((6 - 2 + 1) * 3))


def test_a_rejected_add_stages_nothing(buffers):
    buffer = buffers(SPEC, batch_size=2, max_length=8)
    writer = buffer.writer(0, flush_every=2)
    write(writer, [0])
    bad = fields_for_ids(writer.ids(1))
    bad["flag"] = np.zeros(3, bool)
    with pytest.raises(SpecMismatchError, match="flag"):
        writer.add_batch(bad)
    write(writer, [1])
    assert buffer.num_frames() == 4
    assert_items_match_ids(buffer.gather_all(), np.array([[0, 2], [1, 3]]))


def test_an_episode_end_flushes_the_staged_steps(buffers):
    spec = {"step_type": ArraySpec((), np.int32), "id": ArraySpec((), np.int64)}
    buffer = buffers(spec, batch_size=2, max_length=16)
    writer = buffer.writer(0, flush_every=8)
    writer.add_batch({"step_type": np.array([0, 0], np.int32), "id": np.array([0, 1])})
    writer.add_batch({"step_type": np.array([1, 1], np.int32), "id": np.array([2, 3])})
    assert buffer.num_frames() == 0
    writer.add_batch({"step_type": np.array([1, 2], np.int32), "id": np.array([4, 5])})  # stream 1 ends
    assert buffer.num_frames() == 6
    writer.close()


def test_gather_all_gives_every_writers_newest_common_steps(buffers):
    buffer = buffers(SPEC, writers=2, batch_size=1, max_length=8)
    write(buffer.writer(0), range(5))
    write(buffer.writer(1), range(3))
    items = buffer.gather_all()
    assert_items_match_ids(items, np.array([[4, 6, 8], [1, 3, 5]]))
    assert buffer.num_frames() == 8


# -- torn reads --------------------------------------------------------------------------------
class RacingRecords:
    """The records array, with a writer adding ``steps`` right after the learner's read copy."""

    def __init__(self, records, writer, steps):
        self.records, self.writer, self.steps = records, writer, list(steps)
        self.dtype, self.shape = records.dtype, records.shape  # the reads here are small: they stay on take

    def take(self, slots):
        rows = self.records.take(slots)
        if self.steps:
            write(self.writer, self.steps)
            self.steps = []
        return rows


def test_a_read_that_a_writer_overwrote_is_detected_and_drawn_again(buffers):
    buffer = buffers(SPEC, batch_size=4, max_length=8, seed=5)
    writer = buffer.writer(0, flush_every=1)
    write(writer, range(8))
    buffer._records = RacingRecords(buffer._records, writer, range(8, 14))  # overwrites steps 0..5
    items, info = buffer.get_next(64)
    assert_items_match_ids(items, info.ids)
    assert buffer.torn_redraws > 0  # with 64 draws over 8 steps some read steps 0..5
    assert info.ids.min() >= 6 * 4


@pytest.mark.parametrize("num_steps", [None, 2])
def test_with_several_writers_only_draws_of_the_racing_writer_are_drawn_again(buffers, num_steps):
    """Writer 1 wraps past its oldest steps while the learner reads; writers 0 and 2 stay still."""
    buffer = buffers(SPEC, writers=3, batch_size=2, max_length=8, seed=7)
    handles = [buffer.writer(w, flush_every=1) for w in range(3)]
    for handle in handles:
        write(handle, range(8))
    buffer._records = RacingRecords(buffer._records, handles[1], range(8, 13))  # overwrites steps 0..4
    items, info = buffer.get_next(300, num_steps)
    assert_items_match_ids(items, info.ids)
    assert buffer.torn_redraws > 0
    first = info.ids if num_steps is None else info.ids[:, 0]
    step, column = np.divmod(first, 3 * 2)
    writer = column // 2
    assert set(writer.tolist()) == {0, 1, 2}
    assert step[writer == 1].min() >= 5  # writer 1's steps 0..4 were overwritten
    assert step[writer != 1].min() == 0  # the others' oldest steps are still drawn
    np.testing.assert_allclose(info.probabilities, 1 / (3 * 2 * (8 - (num_steps or 1) + 1)))


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_step_being_written_is_never_drawn(buffers, sampler):
    buffer = buffers(SPEC, batch_size=2, max_length=4, seed=6, sampler=sampler)
    writer = buffer.writer(0, flush_every=2)
    write(writer, range(4))
    seen = []

    def sample_mid_write(handle) -> None:  # steps 4-5 are copied (over steps 0-1), not committed
        items, info = buffer.get_next(200)
        assert_items_match_ids(items, info.ids)
        seen.extend((info.ids // 2).tolist())

    writer._after_write = sample_mid_write
    write(writer, [4, 5])
    assert set(seen) == {2, 3}
    _, info = buffer.get_next(400)
    assert set((info.ids // 2).tolist()) == {2, 3, 4, 5}


def test_a_writer_held_by_a_live_process_is_refused(buffers):
    buffer = buffers(SPEC, writers=1)
    buffer._cursors[0, 3] = os.getppid()  # OWNER: a live process that is not this one
    with pytest.raises(ArgumentError, match=f"writer 0: held by the live process {os.getppid()}"):
        buffer.writer(0).add_batch(step_batch(0, 1))
    assert buffer.num_frames() == 0


# -- rate limits -------------------------------------------------------------------------------
def test_a_blocked_sample_times_out_with_nothing_counted(buffers):
    buffer = buffers(SPEC, max_length=8, rate_limiter=MinSize(3), rate_limiter_timeout=0.05)
    buffer.add_batch(step_batch(0, 1))
    with pytest.raises(RateLimiterTimeout, match="sample of 2 items"):
        buffer.get_next(2)
    assert buffer.rate_limiter.state()["samples"] == 0
    buffer.add_batch(step_batch(1, 1))
    buffer.add_batch(step_batch(2, 1))
    items, info = buffer.get_next(2)
    assert_items_match_ids(items, info.ids)
    assert buffer.rate_limiter.state()["samples"] == 2


def test_a_blocked_add_times_out_with_nothing_written_or_counted(buffers):
    limiter = SampleToInsertRatio(1.0, 2, 1.0)  # range [1, 3]
    buffer = buffers(SPEC, max_length=8, rate_limiter=limiter, rate_limiter_timeout=0.05)
    for t in range(3):
        buffer.add_batch(step_batch(t, 1))
    with pytest.raises(RateLimiterTimeout, match="insert of 1 items"):
        buffer.add_batch(step_batch(3, 1))
    assert buffer.num_frames() == 3 and buffer.rate_limiter.state()["inserts"] == 3
    buffer.get_next(1)  # one sample lets one insert through
    buffer.add_batch(step_batch(3, 1))  # the retried add is step 3, not a leftover plus it
    assert_items_match_ids(buffer.gather_all(), np.arange(4)[None])


def test_a_failed_read_uncounts_its_sample_and_clear_resets_the_counts(buffers):
    buffer = buffers(SPEC, max_length=8, rate_limiter=MinSize(1))
    buffer.add_batch(step_batch(0, 1))
    with pytest.raises(EmptyBufferError, match="num_steps=3"):
        buffer.get_next(4, num_steps=3)
    assert buffer.rate_limiter.state()["samples"] == 0
    buffer.get_next(4)
    buffer.clear()
    state = buffer.rate_limiter.state()
    assert (state["inserts"], state["samples"], buffer.num_frames()) == (0, 0, 0)


def test_deletes_are_counted_when_a_stream_wraps(buffers):
    buffer = buffers(SPEC, batch_size=2, max_length=4, rate_limiter=MinSize(1))
    writer = buffer.writer(0, flush_every=3)
    write(writer, range(6))
    state = buffer.rate_limiter.state()
    assert (state["inserts"], state["deletes"]) == (12, 4)  # steps 0-1 of 2 streams evicted
    writer.close()


# -- close -------------------------------------------------------------------------------------
def test_close_releases_the_block_and_every_later_call_says_so():
    buffer = SharedReplayBuffer(SPEC, writers=2, rate_limiter=MinSize(1))
    name = buffer.name
    handle = buffer.writer(1)
    write(handle, [0])  # mapped in this process before the close
    late = buffer.writer(0)  # not mapped yet
    buffer.close()
    buffer.close()  # twice is fine
    assert buffer.closed and not os.path.exists(f"/dev/shm/{name}")
    for call in (lambda: buffer.get_next(1), lambda: buffer.add_batch(step_batch(0, 1)), lambda: buffer.writer(0)):
        with pytest.raises(BufferClosedError, match="SharedReplayBuffer was closed"):
            call()
    with pytest.raises(BufferClosedError, match="writer 1: the shared buffer was closed"):
        write(handle, [1])
    with pytest.raises(BufferClosedError, match="writer 0: the shared buffer .* was closed"):
        write(late, [0])
    handle.close()
    assert repr(buffer).endswith("closed)")


# -- checkpoints -------------------------------------------------------------------------------
def test_save_and_load_restore_items_counters_and_draws(buffers, tmp_path):
    limiter = SampleToInsertRatio(2.0, 4, 100.0)
    buffer = buffers(SPEC, writers=2, batch_size=2, max_length=6, seed=7, rate_limiter=limiter)
    write(buffer.writer(0), range(9))
    write(buffer.writer(1), range(4))
    buffer.get_next(8)
    buffer.save(tmp_path / "ckpt")
    restored = buffers(SPEC, writers=2, batch_size=2, max_length=6, seed=99, rate_limiter=limiter)
    restored.load(tmp_path / "ckpt")
    assert restored.num_frames() == buffer.num_frames() == (6 + 4) * 2
    assert restored.rate_limiter.state() == buffer.rate_limiter.state()
    for _ in range(3):
        (_, info_a), (b, info_b) = buffer.get_next(5, 2), restored.get_next(5, 2)
        np.testing.assert_array_equal(info_a.ids, info_b.ids)
        assert_items_match_ids(b, info_b.ids)
    write(restored.writer(1), [4])  # writers go on from the loaded steps
    assert restored.num_frames() == (6 + 5) * 2


def test_a_state_of_another_geometry_or_a_malformed_one_loads_nothing(buffers):
    buffer = buffers(SPEC, writers=2, batch_size=2, max_length=6)
    write(buffer.writer(0), range(3))
    state = buffer.state_dict()
    other = buffers(SPEC, writers=2, batch_size=3, max_length=6)
    with pytest.raises(CheckpointError, match="state\\['batch_size'\\]: saved 2, this buffer has 3"):
        other.load_state_dict(state)
    broken = {**state, "segments": {**state["segments"], "0": {**state["segments"]["0"], "steps": 1}}}
    with pytest.raises(CheckpointError, match="3 steps do not fit steps=1"):
        buffer.load_state_dict(broken)
    items = dict(state["segments"]["1"]["items"])
    items["0"] = np.zeros((0, 2), np.int32)
    broken = {**state, "segments": {**state["segments"], "1": {"steps": 0, "items": items}}}
    with pytest.raises(CheckpointError, match="flag: expected \\(0, 2\\) bool, got \\(0, 2\\) int32"):
        buffer.load_state_dict(broken)
    with pytest.raises(CheckpointError, match=r"state\[.rate_limiter.\]: saved none, this buffer has one"):
        buffers(SPEC, writers=2, batch_size=2, max_length=6, rate_limiter=MinSize(1)).load_state_dict(state)
    assert buffer.num_frames() == 6 and other.num_frames() == 0


class AlwaysRacingRecords:
    """Every read copy is followed by a whole ring of new steps: every draw is torn."""

    def __init__(self, records, writer, max_length):
        self.records, self.writer, self.max_length, self.next = records, writer, max_length, writer.steps
        self.dtype, self.shape = records.dtype, records.shape  # the reads here are small: they stay on take

    def take(self, slots):
        rows = self.records.take(slots)
        write(self.writer, range(self.next, self.next + self.max_length))
        self.next += self.max_length
        return rows


def test_draws_overwritten_every_time_give_up_with_a_clear_error(buffers):
    buffer = buffers(SPEC, batch_size=1, max_length=4, seed=8)
    writer = buffer.writer(0)
    write(writer, range(4))
    buffer._records = AlwaysRacingRecords(buffer._records, writer, 4)
    with pytest.raises(EmptyBufferError, match="overwritten while read 100 times in a row; writers wrap too fast"):
        buffer.get_next(2)
