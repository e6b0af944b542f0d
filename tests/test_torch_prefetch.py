"""replaybuf.torch.prefetch: batches of any dataset staged ahead for a device (docs/gpu.md)."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import replaybuf  # noqa: E402
from replaybuf import ArraySpec  # noqa: E402
from replaybuf.buffer import SampleInfo  # noqa: E402
from replaybuf.torch import TorchUniformReplayBuffer, as_torch_dtype, prefetch  # noqa: E402
from replaybuf.torch.prefetch import _layout, _pack, _unpack  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SPEC = {"frame": ArraySpec((4, 3), np.uint8), "reward": ArraySpec((), np.float32), "done": ArraySpec((), bool)}


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "replaybuf-prefetch" and t.is_alive()}


@pytest.fixture(autouse=True)
def no_thread_left():
    gc.collect()
    before = _threads()
    yield
    gc.collect()
    for thread in _threads() - before:  # a collected iterator's thread ends within its 0.05 s put timeout
        thread.join(timeout=10)
    assert _threads() - before == set()


def _filled(cls=replaybuf.UniformReplayBuffer, steps=6, **options):
    rb = cls(SPEC, batch_size=2, max_length=8, seed=3, **options)
    for t in range(steps):
        rb.add_batch(
            {
                "frame": np.full((2, 4, 3), t, np.uint8),
                "reward": np.array([t, -t], np.float32),
                "done": np.array([t % 3 == 2] * 2),
            }
        )
    return rb


def _numpy(nest):
    return [np.asarray(x) for x in _leaves(nest)]


def _leaves(nest):
    """Every leaf of a dataset element, SampleInfo's extras included."""
    items, info = nest
    out = [items[k] for k in sorted(items)] + [info.ids]
    if not isinstance(info.probabilities, tuple):  # () in a deterministic pass
        out.append(info.probabilities)
    if isinstance(info, SampleInfo):
        out += [x for x in (info.weights, info.mask, info.learn, info.relabelled) if x is not None]
    return out


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetched_batches_are_the_datasets_own_as_cpu_tensors(depth):
    plain = iter(_filled().as_dataset(4, num_steps=2))
    expected = [_numpy(next(plain)) for _ in range(6)]
    with prefetch(_filled().as_dataset(4, num_steps=2), device="cpu", depth=depth) as batches:
        got = [next(batches) for _ in range(6)]
    for element, want in zip(got, expected, strict=True):
        assert all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in _leaves(element))
        assert not any(x.is_pinned() for x in _leaves(element))
        for x, y in zip(_leaves(element), want, strict=True):
            np.testing.assert_array_equal(x.numpy(), y)
    assert element[1].ids.dtype == torch.int64 and element[0]["done"].dtype == torch.bool


def test_the_default_device_is_cuda_when_there_is_one_else_the_cpu():
    with prefetch(_filled().as_dataset(2)) as batches:
        items, _ = next(batches)
        assert batches.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
        assert items["frame"].device.type == batches.device.type


def test_sample_info_extras_travel_with_the_batch():
    options = {"respect_episodes": True, "pad_episode_ends": True, "episode_end_field": "done"}
    rb = _filled(replaybuf.PrioritizedReplayBuffer, **options)
    plain = iter(_filled(replaybuf.PrioritizedReplayBuffer, **options).as_dataset(4, num_steps=2))
    want = next(plain)
    with prefetch(rb.as_dataset(4, num_steps=2), device="cpu") as batches:
        items, info = next(batches)
    assert isinstance(info, SampleInfo)
    np.testing.assert_array_equal(info.weights.numpy(), want[1].weights)
    np.testing.assert_array_equal(info.mask.numpy(), want[1].mask)
    assert info.learn is None and info.relabelled is None


def test_a_deterministic_pass_ends_and_its_thread_with_it():
    rb = _filled()
    expected = [_numpy(e) for e in rb.as_dataset(2, single_deterministic_pass=True)]
    batches = prefetch(rb.as_dataset(2, single_deterministic_pass=True), device="cpu", depth=2)
    got = list(batches)
    assert len(got) == len(expected) > 0
    for element, want in zip(got, expected, strict=True):
        for x, y in zip(_leaves(element), want, strict=True):
            np.testing.assert_array_equal(x.numpy(), y)
    with pytest.raises(StopIteration):  # and stays exhausted
        next(batches)
    for thread in _threads():
        thread.join(timeout=10)


def test_a_torch_buffers_dataset_prefetches_too():
    rb = _filled(TorchUniformReplayBuffer)
    with prefetch(rb.as_dataset(4), device="cpu") as batches:
        items, info = next(batches)
    assert items["frame"].shape == (4, 4, 3) and info.ids.shape == (4,)
    assert torch.all(items["frame"][:, 0, 0].to(torch.int64) == info.ids // 2)


def test_close_ends_the_thread():
    before = _threads()
    batches = prefetch(_filled().as_dataset(2), device="cpu", depth=2)
    assert _threads() == before  # nothing starts before the first next
    next(batches)
    assert len(_threads() - before) == 1
    batches.close()
    assert _threads() == before
    batches.close()  # twice is fine


def test_leaving_the_with_block_ends_the_thread():
    before = _threads()
    with prefetch(_filled().as_dataset(2), device="cpu", depth=4) as batches:
        next(batches)
    assert _threads() == before


def test_collecting_the_iterator_ends_the_thread():
    before = _threads()
    batches = prefetch(_filled().as_dataset(2), device="cpu", depth=2)
    next(batches)
    (mine,) = _threads() - before
    alive = weakref.ref(batches)
    del batches
    gc.collect()
    assert alive() is None
    mine.join(timeout=10)
    assert not mine.is_alive()


def test_an_error_in_the_thread_is_raised_in_the_caller():
    empty = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=8)
    before = _threads()
    with prefetch(empty.as_dataset(2), device="cpu", depth=2) as batches:
        with pytest.raises(replaybuf.EmptyBufferError):
            next(batches)
        with pytest.raises(replaybuf.EmptyBufferError):  # the thread has stopped: every later call
            next(batches)
    assert _threads() == before


class _Counted:
    """A dataset that records whether it was iterated."""

    def __init__(self):
        self.iterated = False

    def __iter__(self):
        self.iterated = True
        return iter([])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"depth": -1}, r"depth: expected an int >= 0 \(0: no background thread\), got -1"),
        ({"depth": 1.5}, "depth: expected an int >= 0 .*, got 1.5"),
        ({"depth": True}, "depth: expected an int >= 0 .*, got True"),
        ({"depth": "2"}, "depth: expected an int >= 0 .*, got '2'"),
        ({"device": "tpu:0"}, "device: expected 'cpu', 'cuda' or 'cuda:N', got 'tpu:0'"),
        ({"device": "meta"}, "device: expected 'cpu', 'cuda' or 'cuda:N', got 'meta'"),
        ({"device": 3.5}, "device: expected 'cpu', 'cuda' or 'cuda:N', got 3.5"),
        ({"device": "cuda:7"}, "device: "),
    ],
)
def test_bad_arguments_start_nothing(options, message):
    dataset, before = _Counted(), _threads()
    with pytest.raises(replaybuf.ArgumentError, match=message):
        prefetch(dataset, **options)
    assert not dataset.iterated and _threads() == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of CUDA where there is none")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(
        replaybuf.ArgumentError, match="device: 'cuda' needs CUDA, and this process sees no CUDA device"
    ):
        prefetch(_Counted(), device="cuda")


def test_the_staged_block_holds_every_leaf_with_its_dtype_and_shape():
    """The packing of the CUDA path (one block, one view per leaf), run on a CPU block."""
    arrays = [
        np.arange(12, dtype=np.float64).reshape(3, 4),
        np.array([True, False, True]),
        np.array(7, np.int32),  # a 0-d leaf
        np.zeros((0, 5), np.float32),  # an empty one
        np.arange(5, dtype=np.uint8),
        np.arange(6, dtype=np.int64).reshape(2, 3),
    ]
    offsets, end = _layout(arrays)
    assert all(at % 64 == 0 for at in offsets) and end >= sum(a.nbytes for a in arrays)
    block = torch.empty(end, dtype=torch.uint8)
    _pack(block, arrays, offsets)
    for leaf, array in zip(_unpack(block, arrays, offsets), arrays, strict=True):
        assert leaf.dtype == as_torch_dtype(array.dtype) and tuple(leaf.shape) == array.shape
        np.testing.assert_array_equal(leaf.numpy(), array)
    assert _layout([]) == ([], 1)


@CUDA
def test_cuda_index_past_the_devices_is_refused():
    count = torch.cuda.device_count()
    with pytest.raises(replaybuf.ArgumentError, match=f"device: expected a CUDA device index below {count}"):
        prefetch(_Counted(), device=f"cuda:{count}")


@CUDA
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_cuda_batches_are_the_datasets_own_on_the_device(depth):
    plain = iter(_filled(replaybuf.PrioritizedReplayBuffer).as_dataset(4, num_steps=2))
    expected = [_numpy(next(plain)) for _ in range(20)]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the learner on a stream of its own: it waits on each copy
        with prefetch(_filled(replaybuf.PrioritizedReplayBuffer).as_dataset(4, num_steps=2), "cuda", depth) as batches:
            got = []
            for _ in range(20):  # more elements than pinned blocks: each block is refilled
                element = next(batches)
                got.append([x.float().sum() * 1 for x in _leaves(element)])  # kernels on the learner's stream
                assert all(x.is_cuda for x in _leaves(element))
                assert [x.dtype for x in _leaves(element)][-1] == torch.float32
                copies = [x.clone() for x in _leaves(element)]
                for x, y in zip(copies, expected[len(got) - 1], strict=True):
                    np.testing.assert_array_equal(x.cpu().numpy(), y)
    torch.cuda.synchronize()
    for sums, want in zip(got, expected, strict=True):
        assert [float(s) for s in sums] == pytest.approx([float(np.sum(w, dtype=np.float64)) for w in want])


@CUDA
def test_cuda_tensors_of_a_cuda_buffer_pass_through():
    rb = _filled(TorchUniformReplayBuffer, device="cuda")
    with prefetch(rb.as_dataset(4), device="cuda") as batches:
        items, info = next(batches)
    assert items["frame"].is_cuda and info.ids.is_cuda
    assert torch.all(items["frame"][:, 0, 0].to(torch.int64) == info.ids // 2)
