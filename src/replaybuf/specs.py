"""Specs: the shape and dtype of every leaf of an item, and conversions into them.

A data_spec is a nest (tuple, namedtuple, list or dict) of ``ArraySpec`` leaves. Specs from
TensorFlow (``tf.TensorSpec``, ``tf.BoundedTensorSpec``) and Gymnasium spaces are converted
with :func:`as_data_spec`; dtypes may be NumPy, TensorFlow or PyTorch dtypes or names.
Nothing here imports a framework: foreign objects are recognised by their attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybuf.errors import SpecError

__all__ = [
    "ArraySpec",
    "BoundedArraySpec",
    "TensorSpec",
    "as_data_spec",
    "as_numpy_dtype",
    "untracked",
    "untracked_nest",
]

# TensorFlow's tracking wrappers (tf.Module / Keras attributes): a tuple, list or dict inside
_TRACKING_WRAPPERS = ("_TupleWrapper", "ListWrapper", "_DictWrapper")


def untracked(node: Any) -> Any:
    """The tuple, list or dict that a TensorFlow tracking wrapper wraps; anything else as given.

    A nest stored as a ``tf.Module`` attribute comes back wrapped (``_TupleWrapper``,
    ``ListWrapper``, ``_DictWrapper``); the wrapper stands for the plain container.
    """
    cls = type(node)
    if cls.__name__ not in _TRACKING_WRAPPERS or not cls.__module__.startswith("tensorflow."):
        return node
    return list(node) if cls.__name__ == "ListWrapper" else node.__wrapped__


def untracked_nest(items: Any) -> Any:
    """``items`` with every TensorFlow tracking wrapper replaced by the container it wraps
    (``items`` itself when there is none)."""
    node = untracked(items)
    if isinstance(node, (tuple, list)):
        children = [untracked_nest(child) for child in node]
        if node is items and all(new is old for new, old in zip(children, node, strict=True)):
            return items
        if isinstance(node, list):
            return children
        return type(node)(*children) if hasattr(node, "_fields") else tuple(children)
    if isinstance(node, dict):
        values = {key: untracked_nest(value) for key, value in node.items()}
        if node is items and all(values[key] is value for key, value in node.items()):
            return items
        return type(node)(values)
    return node


def as_numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype for a NumPy, TensorFlow or PyTorch dtype, a type, or a name."""
    numpy_dtype = getattr(dtype, "as_numpy_dtype", None)  # tf.DType
    if numpy_dtype is not None:
        return np.dtype(numpy_dtype)
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        name = str(dtype).removeprefix("torch.")
        try:
            return np.dtype(name)
        except TypeError:
            raise SpecError(f"torch dtype {dtype} has no NumPy equivalent") from None
    try:
        return np.dtype(dtype)
    except TypeError:
        raise SpecError(f"expected a dtype (NumPy, TensorFlow, PyTorch or a name), got {dtype!r}") from None


def _as_shape(shape: Any) -> tuple[int, ...]:
    as_list = getattr(shape, "as_list", None)  # tf.TensorShape
    if as_list is not None:
        shape = as_list()
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise SpecError(f"expected a shape (a tuple of ints), got {shape!r}") from None
    for dim in dims:
        if dim is None or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise SpecError(f"expected a fully defined shape of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """The shape and dtype (and an optional name) of one leaf of an item."""

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _as_shape(self.shape))
        object.__setattr__(self, "dtype", as_numpy_dtype(self.dtype))

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype.name}{name})"

    def describe(self) -> str:
        """``(3, 2) float32``: the form error messages use."""
        return f"{self.shape} {self.dtype.name}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class BoundedArraySpec(ArraySpec):
    """An ArraySpec with inclusive bounds, as TF-Agents' BoundedArraySpec."""

    minimum: Any = None
    maximum: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for bound in ("minimum", "maximum"):
            value = getattr(self, bound)
            if value is None:
                raise SpecError(f"BoundedArraySpec needs a {bound}")
            try:
                array = np.broadcast_to(np.asarray(value, self.dtype), self.shape).copy()
            except ValueError:
                raise SpecError(
                    f"BoundedArraySpec {bound}: expected a value broadcastable to {self.shape}, "
                    f"got shape {np.shape(value)}"
                ) from None
            array.flags.writeable = False
            object.__setattr__(self, bound, array)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and (self.shape, self.dtype, self.name) == (other.shape, other.dtype, other.name)
            and np.array_equal(self.minimum, other.minimum)
            and np.array_equal(self.maximum, other.maximum)
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self) -> str:
        return (
            f"BoundedArraySpec(shape={self.shape}, dtype={self.dtype.name}, name={self.name!r}, "
            f"minimum={self.minimum.tolist()}, maximum={self.maximum.tolist()})"
        )


TensorSpec = ArraySpec
"""The framework-neutral name TF-Agents users know; the same class as ArraySpec."""


def as_data_spec(spec: Any, _path: str = "data_spec") -> Any:
    """Convert a nest of specs (ours, ``tf.TensorSpec``, Gymnasium spaces) to ArraySpecs.

    Tuples, namedtuples, lists and dicts are kept as they are (a list in a spec is
    structure, as in TF-Agents: the spec tells structure from array data in items);
    TensorFlow's tracking wrappers become the containers they wrap. A Gymnasium ``Dict``
    space becomes a dict and a ``Tuple`` space a tuple.
    """
    spec = untracked(spec)
    if isinstance(spec, list):
        return [as_data_spec(child, f"{_path}/{i}") for i, child in enumerate(spec)]
    if isinstance(spec, ArraySpec):
        return spec
    if _is_gym_space(spec):
        return _from_gym_space(spec, _path)
    if isinstance(spec, tuple):
        children = [as_data_spec(child, f"{_path}/{i}") for i, child in enumerate(spec)]
        return type(spec)(*children) if hasattr(spec, "_fields") else tuple(children)
    if isinstance(spec, Mapping):
        return type(spec)((key, as_data_spec(value, f"{_path}/{key}")) for key, value in spec.items())
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):  # tf.TensorSpec and friends
        name = getattr(spec, "name", None)
        if hasattr(spec, "minimum") and hasattr(spec, "maximum"):
            return BoundedArraySpec(spec.shape, spec.dtype, name, spec.minimum, spec.maximum)
        return ArraySpec(spec.shape, spec.dtype, name)
    raise SpecError(f"{_path}: expected an ArraySpec, a tf.TensorSpec or a Gymnasium space, got {spec!r}")


def _is_gym_space(obj: Any) -> bool:
    return any(cls.__module__.startswith("gymnasium.spaces") for cls in type(obj).__mro__)


def _from_gym_space(space: Any, path: str) -> Any:
    kind = type(space).__name__
    if kind == "Box":
        return BoundedArraySpec(space.shape, space.dtype, None, space.low, space.high)
    if kind == "Discrete":
        low = int(space.start)
        return BoundedArraySpec((), space.dtype, None, low, low + int(space.n) - 1)
    if kind == "MultiDiscrete":
        return BoundedArraySpec(space.shape, space.dtype, None, space.start, space.start + space.nvec - 1)
    if kind == "MultiBinary":
        return BoundedArraySpec(space.shape, space.dtype, None, 0, 1)
    if kind == "Dict":
        return {key: _from_gym_space(sub, f"{path}/{key}") for key, sub in space.spaces.items()}
    if kind == "Tuple":
        return tuple(_from_gym_space(sub, f"{path}/{i}") for i, sub in enumerate(space.spaces))
    raise SpecError(f"{path}: Gymnasium space {kind} has no fixed-shape array spec")
