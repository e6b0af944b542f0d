"""Turning items into validated torch tensors on the buffer's device, before any write.

Torch leaves are checked on their metadata alone (dtype and shape), so a CUDA tensor is
never copied to the host to be validated; NumPy and Python leaves go through the core's
checks (``FlatSpec.flatten_batch``). Every leaf is validated before the first one is moved,
and each is moved (and, where a safe cast is needed, cast) in one ``Tensor.to`` call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from replaybuf.errors import SpecError, SpecMismatchError
from replaybuf.mismatch import batch_sizes_differ, unbatched, unsafe_cast, wrong_shape
from replaybuf.nest import FlatSpec
from replaybuf.specs import ArraySpec, as_numpy_dtype

__all__ = ["DeviceBatcher", "as_torch_dtype", "shared_tensor"]


def as_torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype for a NumPy, TensorFlow or PyTorch dtype, or a name ('float32').

    Raises:
        SpecError: the dtype has no PyTorch equivalent (a string or object dtype).
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    numpy_dtype = as_numpy_dtype(dtype)
    try:
        return torch.from_numpy(np.empty(0, numpy_dtype)).dtype
    except TypeError:
        raise SpecError(f"dtype {numpy_dtype} has no PyTorch equivalent") from None


class DeviceBatcher:
    """Validates batches against a data_spec and places them where a storage writes them.

    On the CPU the result is NumPy arrays (a CPU storage is written through NumPy views of
    its tensors: a slice assignment costs a fraction of a torch op's dispatch). On any other
    device, a batch of NumPy leaves stays NumPy (the storage packs it into host rows and
    copies them over at once); one with a tensor leaf becomes tensors on that device.
    """

    def __init__(self, flat: FlatSpec, device: torch.device):
        self.flat = flat
        self.device = device
        self.dtypes = [as_torch_dtype(spec.dtype) for spec in flat.leaves]
        self._on_cpu = device.type == "cpu"

    def batch(self, items: Any, batch_size: int | None) -> list[Any]:
        """Validated leaves of a batch: each ``[n] + spec.shape`` of the spec dtype.

        ``batch_size`` fixes n; None lets n be any size shared by every leaf.

        Raises:
            SpecMismatchError: the structure, a shape, a dtype or n does not match; nothing
                has been moved or written.
        """
        flat = self.flat
        leaves = flat.flatten(items)
        tensors = {
            i: _check_tensor(flat.paths[i], flat.leaves[i], leaf, batch_size)
            for i, leaf in enumerate(leaves)
            if isinstance(leaf, torch.Tensor)
        }
        if not tensors:
            arrays = flat.flatten_batch(items, batch_size)
        elif len(tensors) == len(leaves):
            arrays = list(leaves)
            if batch_size is None and len({t.shape[0] for t in leaves}) > 1:
                raise batch_sizes_differ(flat.paths, [t.shape[0] for t in leaves])
        else:  # validated tensors stand in as zero-copy arrays for the core's checks
            leaves = [_stand_in(flat.leaves[i], tensors[i]) if i in tensors else x for i, x in enumerate(leaves)]
            arrays = flat.flatten_batch(flat.unflatten(leaves), batch_size)
        if not tensors:
            return arrays
        if self._on_cpu:
            for i, tensor in tensors.items():
                arrays[i] = self._place(tensor, i).numpy()
            return arrays
        return [self._place(tensors[i] if i in tensors else shared_tensor(a), i) for i, a in enumerate(arrays)]

    def _place(self, tensor: torch.Tensor, index: int) -> torch.Tensor:
        """``tensor`` detached, on the device, of leaf ``index``'s dtype (no copy if it is)."""
        dtype = self.dtypes[index]
        if tensor.dtype != dtype or tensor.device != self.device:
            tensor = tensor.to(device=self.device, dtype=dtype)
        return tensor.detach()


def _check_tensor(path: str, spec: ArraySpec, tensor: torch.Tensor, batch_size: int | None) -> torch.Tensor:
    try:
        got = as_numpy_dtype(tensor.dtype)
    except SpecError:
        got = None
    if got is None or (got.kind == "V" and got != spec.dtype):
        # no NumPy dtype (torch.bfloat16 maps to one only once ml_dtypes is imported, by
        # TensorFlow or JAX): refused alike whatever was imported, as by the NumPy buffers
        raise SpecMismatchError(f"{path}: expected dtype {spec.dtype.name}, got {tensor.dtype}")
    if got != spec.dtype and not np.can_cast(got, spec.dtype, casting="safe"):
        raise unsafe_cast(path, spec, tensor.dtype)
    shape = tuple(tensor.shape)
    if shape == spec.shape:
        raise unbatched(path, spec, batch_size, shape, "x[None] or x.unsqueeze(0)")
    if (
        len(shape) != len(spec.shape) + 1
        or shape[1:] != spec.shape
        or (batch_size is not None and shape[0] != batch_size)
    ):
        raise wrong_shape(path, spec, batch_size, shape, tensor.dtype)
    return tensor


def _stand_in(spec: ArraySpec, tensor: torch.Tensor) -> np.ndarray:
    """A zero-stride array with the tensor's (already checked) shape and the spec dtype."""
    return np.broadcast_to(np.zeros((), spec.dtype), (tensor.shape[0],) + spec.shape)


def shared_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory where torch allows it, else of a copy."""
    if not array.flags.writeable or any(s < 0 for s in array.strides):
        array = np.array(array)
    return torch.from_numpy(array)
