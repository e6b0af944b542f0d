"""Captured sampling (``capture=True``, replaybuf.torch.captured): item for item the eager
path's samples under the same seed, through static outputs; on the CPU through NumPy (the
host step) and through the torch kernels a GPU records (the device step, run eagerly), on
CUDA as a CUDA graph (those tests are skipped without one)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, fields_for_ids, step_batch

torch = pytest.importorskip("torch")
import replaybuf.torch.uniform  # noqa: E402
from cuda_sync import host_sync_forbidden  # noqa: E402
from replaybuf.torch import TorchPyUniformReplayBuffer, TorchUniformReplayBuffer  # noqa: E402
from replaybuf.torch.storage import TorchStorage  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SHAPES = [(5, None, True), (5, 3, True), (None, None, True), (None, 2, True), (4, 2, False), (5, None, True)]


def pair(device: str, seed: int = 3, batch_size: int = 2, max_length: int = 6):
    return [
        TorchUniformReplayBuffer(SPEC, batch_size, max_length, device=device, seed=seed, capture=capture)
        for capture in (False, True)
    ]


def flat(sample):
    """The sample's tensors, cloned (a captured sample is overwritten by the next call)."""
    items, info = sample
    leaves = replaybuf.nest.FlatSpec(SPEC).flatten(items) if isinstance(items, dict) else items
    if isinstance(items, tuple):  # time_stacked=False: one nest per step
        leaves = [leaf for step in items for leaf in replaybuf.nest.FlatSpec(SPEC).flatten(step)]
    return [t.clone() for t in (*leaves, info.ids, info.probabilities)]


def assert_same_samples(eager, captured, rounds: int = 3):
    for _ in range(rounds):
        for sample_batch_size, num_steps, stacked in SHAPES:
            want = flat(eager.get_next(sample_batch_size, num_steps, stacked))
            got = flat(captured.get_next(sample_batch_size, num_steps, stacked))
            assert len(got) == len(want)
            for a, b in zip(got, want, strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape
                torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.fixture(params=["cpu", "cpu, device kernels", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])])
def device(request, monkeypatch):
    """The device buffers are made on; "cpu, device kernels": CPU storage read with
    ``index_select``, as on a GPU, so captured buffers take the device step."""
    if request.param == "cpu, device kernels":
        kernels = functools.partial(TorchStorage, through_numpy=False)
        monkeypatch.setattr(replaybuf.torch.uniform, "TorchStorage", kernels)
        return "cpu"
    return request.param


def test_captured_samples_are_the_eager_ones_item_for_item(device):
    eager, captured = pair(device)
    for t in range(4):  # not full yet: both sample eagerly
        for buffer in (eager, captured):
            buffer.add_batch(step_batch(t, 2))
    assert_same_samples(eager, captured, rounds=1)
    for t in range(4, 15):  # full, wrapped, moving on: the recorded steps run
        for buffer in (eager, captured):
            buffer.add_batch(step_batch(t, 2))
        assert_same_samples(eager, captured, rounds=1)
    for buffer in (eager, captured):  # cleared: eager again until full, then the same steps
        buffer.clear()
    for t in range(20, 27):
        for buffer in (eager, captured):
            buffer.add_batch(step_batch(t, 2))
        if t >= 22:  # windows of 3 fit
            assert_same_samples(eager, captured, rounds=1)
    captured.load_state_dict(eager.state_dict())  # the generator moved: replays follow it
    assert_same_samples(eager, captured)


def test_a_single_stream_buffer_captures_too(device):
    eager, captured = (
        TorchPyUniformReplayBuffer(SPEC, capacity=7, device=device, seed=1, capture=capture)
        for capture in (False, True)
    )
    added = 0
    for n in (3, 5, 2, 9):
        for buffer in (eager, captured):
            buffer.add_batch(fields_for_ids(np.arange(added, added + n)))
        added += n
        assert_same_samples(eager, captured, rounds=1)


def full(device: str = "cpu", **options):
    buffer = TorchUniformReplayBuffer(SPEC, 2, 4, device=device, seed=0, capture=True, **options)
    for t in range(5):
        buffer.add_batch(step_batch(t, 2))
    return buffer


def test_a_captured_sample_is_overwritten_by_the_next_one():
    buffer = TorchUniformReplayBuffer(SPEC, 2, 4, seed=0, capture=True)
    buffer.add_batch(step_batch(0, 2))
    first, second = buffer.get_next(8)[1].ids, buffer.get_next(8)[1].ids
    assert first is not second  # not full: eager, new tensors
    for t in range(1, 5):
        buffer.add_batch(step_batch(t, 2))
    items, info = buffer.get_next(64)
    kept = info.ids.clone()
    again, info_again = buffer.get_next(64)
    assert info_again.ids is info.ids and again["id"] is items["id"]  # the recorded step's own tensors
    assert not torch.equal(kept, info.ids)  # overwritten in place by the second draw
    torch.testing.assert_close(items["id"], info.ids)  # items and ids of the same (latest) draw
    assert buffer.get_next(8)[1].ids is not info.ids  # another shape: another step


def test_captured_datasets_sample_in_the_callers_thread_only():
    buffer = full()
    items, info = next(iter(buffer.as_dataset(sample_batch_size=4, num_steps=2)))
    torch.testing.assert_close(items["id"], info.ids)
    with pytest.raises(replaybuf.ArgumentError, match=r"num_parallel_calls: expected None with capture=True.*got 2"):
        buffer.as_dataset(sample_batch_size=4, num_parallel_calls=2)
    passed = [int(items["id"]) for items, _ in buffer.as_dataset(single_deterministic_pass=True)]
    assert passed == [2, 4, 6, 8, 3, 5, 7, 9]  # a deterministic pass reads as always


def test_capture_must_be_a_bool():
    with pytest.raises(replaybuf.ArgumentError, match=r"capture: expected True or False, got 'yes'"):
        TorchUniformReplayBuffer(SPEC, capture="yes")
    assert full().capture and not TorchUniformReplayBuffer(SPEC).capture


@CUDA
@pytest.mark.cuda
def test_captured_cuda_sampling_is_one_replay_that_never_synchronises():
    buffer = full("cuda")
    buffer.get_next(256, 2)  # records the graph (capturing may synchronise)
    with host_sync_forbidden():
        for _ in range(3):
            items, info = buffer.get_next(256, 2)
    torch.testing.assert_close(items["id"], info.ids)
    assert items["id"].is_cuda and info.probabilities.is_cuda
