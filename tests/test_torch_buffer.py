"""What the PyTorch buffers add to the common contract (the conformance suite covers the rest):
tensors in and out, on the device; validation of torch tensors without a host copy; the
IterableDataset; device-side sampling without host synchronisation (on CUDA)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
from replaybuf import ArraySpec, SpecError, SpecMismatchError

torch = pytest.importorskip("torch")
from cuda_sync import host_sync_forbidden  # noqa: E402
from replaybuf.torch import (  # noqa: E402
    TorchDataset,
    TorchPyUniformReplayBuffer,
    TorchUniformReplayBuffer,
    as_torch_dtype,
)

SPEC = {"obs": ArraySpec((2, 3), np.float32), "action": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def step(t: int, batch_size: int, *, as_torch: bool = False) -> dict:
    """Step ``t`` of every stream; the action is the item's id."""
    ids = t * batch_size + np.arange(batch_size)
    items = {
        "obs": np.broadcast_to(ids[:, None, None], (batch_size, 2, 3)).astype(np.float32),
        "action": ids.astype(np.int64),
        "done": ids % 2 == 0,
    }
    return {k: torch.from_numpy(v) for k, v in items.items()} if as_torch else items


def filled(batch_size: int = 2, max_length: int = 5, steps: int = 3, seed: int = 0) -> TorchUniformReplayBuffer:
    buffer = TorchUniformReplayBuffer(SPEC, batch_size, max_length, seed=seed)
    for t in range(steps):
        buffer.add_batch(step(t, batch_size))
    return buffer


def test_importing_replaybuf_does_not_import_torch():
    code = "import sys, replaybuf; assert 'torch' not in sys.modules, 'replaybuf imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_outputs_are_tensors_on_the_device_with_spec_dtypes():
    buffer = filled()
    items, info = buffer.get_next(4, 2)
    assert buffer.device == torch.device("cpu")
    assert items["obs"].dtype == torch.float32 and items["obs"].shape == (4, 2, 2, 3)
    assert items["action"].dtype == torch.int64 and items["done"].dtype == torch.bool
    assert info.ids.dtype == torch.int64 and info.ids.shape == (4, 2)
    assert info.probabilities.dtype == torch.float32 and info.probabilities.shape == (4,)
    for tensor in (*items.values(), *info):
        assert isinstance(tensor, torch.Tensor) and tensor.device == buffer.device
    torch.testing.assert_close(items["action"], info.ids)
    gathered = buffer.gather_all()
    assert isinstance(gathered["obs"], torch.Tensor)
    torch.testing.assert_close(gathered["action"], torch.tensor([[0, 2, 4], [1, 3, 5]]))


def test_probabilities_are_shared_read_only_so_no_caller_can_change_another_samples():
    buffer = filled(batch_size=2, max_length=5, steps=3)  # 6 items
    first = buffer.get_next(4)[1].probabilities
    with pytest.raises(RuntimeError, match="single memory location"):
        first.mul_(2.0)  # one value expanded over the sample: in-place writes refuse
    torch.testing.assert_close(buffer.get_next(4)[1].probabilities, torch.full((4,), 1 / 6))
    one = buffer.get_next(1)[1].probabilities  # a single element would be writable: its own tensor
    one.mul_(2.0)
    torch.testing.assert_close(buffer.get_next(1)[1].probabilities, torch.full((1,), 1 / 6))
    buffer.add_batch(step(3, 2))  # the count of valid ids changed: so did the value
    torch.testing.assert_close(buffer.get_next(4)[1].probabilities, torch.full((4,), 1 / 8))


def test_torch_numpy_and_mixed_inputs_store_the_same_items():
    buffers = [TorchUniformReplayBuffer(SPEC, 2, 4) for _ in range(3)]
    for t in range(3):
        buffers[0].add_batch(step(t, 2))
        buffers[1].add_batch(step(t, 2, as_torch=True))
        mixed = step(t, 2)
        mixed["obs"] = torch.from_numpy(mixed["obs"])
        buffers[2].add_batch(mixed)
    first = buffers[0].gather_all()
    for other in buffers[1:]:
        for key, value in other.gather_all().items():
            torch.testing.assert_close(value, first[key])


def test_stored_items_are_copies_and_gradients_are_dropped():
    obs = torch.zeros(1, 2, 3, requires_grad=True)
    buffer = TorchUniformReplayBuffer(SPEC, 1, 3)
    buffer.add_batch({"obs": obs, "action": torch.tensor([7]), "done": torch.tensor([True])})
    with torch.no_grad():
        obs += 1
    stored = buffer.gather_all()["obs"]
    assert not stored.requires_grad
    assert stored.sum().item() == 0


def test_safe_casts_are_taken_and_unsafe_ones_name_the_field():
    buffer = TorchUniformReplayBuffer(SPEC, 2, 3)
    ok = step(0, 2, as_torch=True)
    ok["action"] = ok["action"].to(torch.int32)  # int32 -> int64 loses nothing
    ok["obs"] = ok["obs"].to(torch.float16)  # float16 -> float32 loses nothing
    buffer.add_batch(ok)
    assert buffer.gather_all()["action"].dtype == torch.int64
    bad = step(1, 2, as_torch=True)
    bad["obs"] = bad["obs"].to(torch.float64)
    with pytest.raises(SpecMismatchError, match=r"obs: expected dtype float32, got torch.float64"):
        buffer.add_batch(bad)
    bad["obs"] = bad["obs"].to(torch.int64)  # int64 -> float32 can lose digits
    with pytest.raises(SpecMismatchError, match=r"obs: expected dtype float32, got torch.int64"):
        buffer.add_batch(bad)
    assert buffer.num_frames() == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("obs", torch.zeros(2, 3, 2), r"obs: expected shape \(2, 2, 3\) float32.*got \(2, 3, 2\)"),
        ("obs", torch.zeros(3, 2, 3), r"obs: expected shape \(2, 2, 3\) float32.*got \(3, 2, 3\)"),
        ("obs", torch.zeros(2, 2, 3, 1), r"obs: expected shape \(2, 2, 3\) float32.*got \(2, 2, 3, 1\)"),
        ("action", torch.tensor(3), r"action: expected a batch \[2\] \+ \(\) int64, got one unbatched item"),
    ],
)
def test_bad_tensor_shapes_are_rejected_before_anything_is_written(field, value, message):
    buffer = filled(steps=1)
    before = buffer.gather_all()
    bad = step(1, 2, as_torch=True)
    bad[field] = value
    with pytest.raises(SpecMismatchError, match=message):
        buffer.add_batch(bad)
    after = buffer.gather_all()
    assert buffer.num_frames() == 2
    for key in before:
        torch.testing.assert_close(after[key], before[key])


def test_a_bad_numpy_leaf_beside_good_tensors_writes_nothing():
    buffer = filled(steps=1)
    bad = step(1, 2, as_torch=True)
    bad["done"] = np.array([1.5, 2.5])
    with pytest.raises(SpecMismatchError, match="done: expected dtype bool"):
        buffer.add_batch(bad)
    assert buffer.num_frames() == 2


def test_py_uniform_tensors_must_agree_on_batch_size():
    buffer = TorchPyUniformReplayBuffer(SPEC, capacity=4)
    items = step(0, 3, as_torch=True)
    items["action"] = items["action"][:2]
    with pytest.raises(SpecMismatchError, match="every field needs the same batch size"):
        buffer.add_batch(items)
    buffer.add_batch(step(0, 6, as_torch=True))  # more than capacity: the newest 4 stay
    torch.testing.assert_close(buffer.gather_all()["action"], torch.tensor([[2, 3, 4, 5]]))


def test_read_only_and_reversed_numpy_arrays_are_accepted():
    items = step(0, 2)
    items["obs"] = items["obs"][::-1]  # negative strides
    items["action"] = np.broadcast_to(np.int64(5), (2,))  # read-only
    buffer = TorchUniformReplayBuffer(SPEC, 2, 2)
    buffer.add_batch(items)  # warnings are errors here: no "not writable" warning either
    torch.testing.assert_close(buffer.gather_all()["action"], torch.tensor([[5], [5]]))
    torch.testing.assert_close(buffer.gather_all()["obs"][:, 0], torch.from_numpy(items["obs"].copy()))


def test_the_same_seed_draws_the_same_samples():
    a, b, c = filled(), filled(), filled(seed=1)
    ids = [buffer.get_next(16)[1].ids for buffer in (a, b, c)]
    torch.testing.assert_close(ids[0], ids[1])
    assert not torch.equal(ids[0], ids[2])


def test_dtypes_convert_from_numpy_torch_and_names():
    assert as_torch_dtype(np.uint8) is torch.uint8
    assert as_torch_dtype("float32") is torch.float32
    assert as_torch_dtype(torch.int16) is torch.int16
    assert as_torch_dtype(np.dtype(np.bool_)) is torch.bool


def test_a_spec_dtype_without_a_torch_equivalent_is_a_spec_error():
    with pytest.raises(SpecError, match="no PyTorch equivalent"):
        TorchUniformReplayBuffer({"name": ArraySpec((), "U3")})


def test_as_dataset_is_an_iterable_dataset_for_a_data_loader():
    buffer = filled(batch_size=2, max_length=5, steps=4)
    dataset = buffer.as_dataset(sample_batch_size=3, num_steps=2)
    assert isinstance(dataset, torch.utils.data.IterableDataset) and isinstance(dataset, TorchDataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    for _, (items, info) in zip(range(3), loader, strict=False):
        assert isinstance(items["obs"], torch.Tensor) and items["obs"].shape == (3, 2, 2, 3)
        torch.testing.assert_close(items["action"], info.ids)
        assert info.ids.max() < 8 and info.probabilities.shape == (3,)


def test_deterministic_pass_through_a_data_loader_yields_every_item_once():
    buffer = filled(batch_size=2, max_length=3, steps=5)  # wrapped: steps 2..4 remain
    dataset = buffer.as_dataset(single_deterministic_pass=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    seen = [int(items["action"]) for items, _ in loader]
    assert seen == [4, 6, 8, 5, 7, 9]  # stream 0 in time order, then stream 1


def test_prefetched_dataset_yields_tensors():
    buffer = filled()
    iterator = iter(buffer.as_dataset(sample_batch_size=2, num_parallel_calls=2))
    items, info = next(iterator)
    torch.testing.assert_close(items["action"], info.ids)
    iterator.close()


@settings(max_examples=30, deadline=None)
@given(
    batch_size=st.integers(1, 3),
    max_length=st.integers(1, 5),
    steps=st.integers(1, 12),
)
def test_torch_buffer_stores_what_the_numpy_buffer_stores(batch_size, max_length, steps):
    ours = TorchUniformReplayBuffer(SPEC, batch_size, max_length)
    reference = replaybuf.UniformReplayBuffer(SPEC, batch_size, max_length)
    for t in range(steps):
        ours.add_batch(step(t, batch_size, as_torch=t % 2 == 0))
        reference.add_batch(step(t, batch_size))
    assert ours.num_frames() == reference.num_frames()
    got, want = ours.gather_all(), reference.gather_all()
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key])


# -- on a GPU (skipped without one) ------------------------------------------------------------
@CUDA
def test_cuda_buffer_takes_host_and_device_inputs_and_returns_device_tensors():
    buffer = TorchUniformReplayBuffer(SPEC, 2, 4, device="cuda", seed=0)
    buffer.add_batch(step(0, 2))
    buffer.add_batch({k: v.cuda() for k, v in step(1, 2, as_torch=True).items()})
    items, info = buffer.get_next(8, 2)
    assert items["obs"].is_cuda and info.ids.is_cuda and info.probabilities.is_cuda
    torch.testing.assert_close(items["action"], info.ids)
    host = TorchUniformReplayBuffer(SPEC, 2, 4)  # a CUDA tensor into a CPU buffer is moved once
    host.add_batch({k: v.cuda() for k, v in step(0, 2, as_torch=True).items()})
    assert not host.gather_all()["obs"].is_cuda


@CUDA
def test_cuda_sampling_never_synchronises_with_the_host():
    buffer = TorchUniformReplayBuffer({"frame": ArraySpec((84, 84, 4), np.uint8)}, 4, 64, device="cuda", seed=0)
    frames = torch.randint(0, 255, (4, 84, 84, 4), dtype=torch.uint8, device="cuda")
    for _ in range(8):
        buffer.add_batch({"frame": frames})
    buffer.get_next(256, 3)  # warm up: lazy CUDA initialisation may synchronise once
    with host_sync_forbidden():
        for sample_batch_size, num_steps in ((256, None), (256, 3), (None, None)):
            buffer.get_next(sample_batch_size, num_steps)
    assert torch.cuda.get_sync_debug_mode() == 0  # restored for the tests after this one


@CUDA
def test_a_failed_check_for_host_synchronisation_restores_the_mode():
    with pytest.raises(RuntimeError, match="synchroniz"), host_sync_forbidden():
        torch.ones(1, device="cuda").item()  # a device-to-host copy waits for the GPU
    assert torch.cuda.get_sync_debug_mode() == 0
    torch.ones(1, device="cuda").item()  # and later calls may synchronise again


def test_arguments_are_checked():
    with pytest.raises(replaybuf.ArgumentError, match="batch_size"):
        TorchUniformReplayBuffer(SPEC, batch_size=0)
    with pytest.raises(replaybuf.ArgumentError, match="max_length"):
        TorchUniformReplayBuffer(SPEC, max_length=-1)
    with pytest.raises(replaybuf.ArgumentError, match="dataset_window_shift"):
        TorchUniformReplayBuffer(SPEC, dataset_window_shift=0)
    buffer = filled(batch_size=2, max_length=3)
    with pytest.raises(replaybuf.ArgumentError, match="sample_batch_size"):
        buffer.get_next(0)
    with pytest.raises(replaybuf.ArgumentError, match=r"sample_batch_size \(3\) > batch_size \(2\)"):
        iter(buffer.as_dataset(sample_batch_size=3, single_deterministic_pass=True))
    with pytest.raises(replaybuf.EmptyBufferError, match="holds only 3 steps"):
        buffer.get_next(4, num_steps=4)
