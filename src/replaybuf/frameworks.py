"""Arrays of one framework (NumPy, PyTorch, JAX, TensorFlow), for code that joins rows read
from buffers of different backends (``replaybuf.MixedReplayBuffer``).

A ``Framework`` converts any array or tensor into its own kind, joins them along the first
axis, reorders rows and wraps an iterable of samples as its buffers wrap their datasets.
Frameworks are found in ``sys.modules``, never imported: a value of a framework exists only
once that framework was imported.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from replaybuf.nest import to_numpy

__all__ = ["Framework", "framework_of", "framework_of_value"]


class Framework:
    """NumPy arrays; the subclasses below are the other frameworks'."""

    name = "numpy"

    def convert(self, value: Any) -> Any:
        return np.asarray(to_numpy(value))

    def concat(self, values: list) -> Any:
        return np.concatenate(values)

    def take(self, value: Any, order: np.ndarray) -> Any:
        return value[order]

    def dataset(self, samples: Any) -> Any:
        """An iterable of samples as this framework's buffers hand out datasets."""
        return samples


class _Torch(Framework):
    name = "torch"

    def __init__(self, device: Any):
        self.torch = sys.modules["torch"]
        self.device = device

    def convert(self, value: Any) -> Any:
        if isinstance(value, self.torch.Tensor):
            return value.to(self.device)
        return self.torch.as_tensor(np.asarray(to_numpy(value)), device=self.device)

    def concat(self, values: list) -> Any:
        return self.torch.cat(values)

    def take(self, value: Any, order: np.ndarray) -> Any:
        return value.index_select(0, self.torch.as_tensor(order, device=value.device))

    def dataset(self, samples: Any) -> Any:
        """A ``torch.utils.data.IterableDataset`` (``replaybuf.torch``'s, loaded with the torch buffers)."""
        module = sys.modules.get("replaybuf.torch.dataset")
        return samples if module is None else module.TorchDataset(samples)


class _Jax(Framework):
    name = "jax"

    def __init__(self) -> None:
        self.jnp = sys.modules["jax.numpy"]

    def convert(self, value: Any) -> Any:
        return self.jnp.asarray(to_numpy(value))

    def concat(self, values: list) -> Any:
        return self.jnp.concatenate(values)


class _TensorFlow(Framework):
    name = "tensorflow"

    def __init__(self) -> None:
        self.tf = sys.modules["tensorflow"]

    def convert(self, value: Any) -> Any:
        return self.tf.convert_to_tensor(to_numpy(value))

    def concat(self, values: list) -> Any:
        return self.tf.concat(values, 0)

    def take(self, value: Any, order: np.ndarray) -> Any:
        return self.tf.gather(value, order)


def framework_of_value(value: Any) -> Framework:
    """The framework ``value`` (an array or tensor) belongs to; NumPy for anything else."""
    home = type(value).__module__.split(".")[0]
    if home == "torch":
        return _Torch(value.device)
    if home in ("jax", "jaxlib"):
        return _Jax()
    if home == "tensorflow":
        return _TensorFlow()
    return Framework()


def framework_of(buffer: Any) -> Framework:
    """The framework ``buffer``'s samples come in: what its ``read_ids`` returns for no ids
    (the NumPy and torch buffers, on their device), else its backend package's
    (``replaybuf.jax``: JAX, ``replaybuf.tf``: TensorFlow; the shared and Ray buffers: NumPy)."""
    read_ids = getattr(buffer, "read_ids", None)
    if read_ids is not None:
        return framework_of_value(read_ids(np.zeros(0, np.int64))[1].ids)
    package = type(buffer).__module__
    if package.startswith("replaybuf.jax"):
        return _Jax()
    if package.startswith("replaybuf.tf"):
        return _TensorFlow()
    return Framework()
