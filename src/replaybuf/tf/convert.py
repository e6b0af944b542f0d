"""Validating an ``add_batch`` argument into one tensor (or array) per leaf.

Eagerly every leaf, tensor or not, goes through ``FlatSpec.flatten_batch`` (NumPy rules:
safe casts only, Python numbers weakly typed). Inside a graph a leaf is a symbolic tensor
whose values are unknown, so only its static dtype and shape can be checked here; a dimension
left unknown at trace time is pinned with ``tf.ensure_shape``, which fails before anything
is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from replaybuf.errors import SpecMismatchError
from replaybuf.mismatch import unbatched, unsafe_cast, wrong_shape
from replaybuf.nest import FlatSpec

__all__ = ["convert_batch"]


def convert_batch(flat: FlatSpec, items: Any, batch_size: int) -> list[Any]:
    """The leaves of ``items``, each ``[batch_size] + spec.shape`` of the spec's dtype.

    Raises SpecMismatchError naming the field before anything is written.
    """
    if not tf.inside_function():
        return flat.flatten_batch(items, batch_size)
    leaves = flat.flatten(items)
    return [_graph_leaf(flat, i, leaf, batch_size) for i, leaf in enumerate(leaves)]


def _graph_leaf(flat: FlatSpec, index: int, value: Any, batch_size: int) -> tf.Tensor:
    spec, path = flat.leaves[index], flat.paths[index]
    want = tf.as_dtype(spec.dtype)
    if not tf.is_tensor(value):
        try:
            value = tf.convert_to_tensor(value, dtype_hint=want)
        except Exception as err:  # TF's or the source framework's conversion (torch.bfloat16, ragged lists)
            got = getattr(value, "dtype", None)
            if got is not None:
                raise SpecMismatchError(
                    f"{path}: expected dtype {spec.dtype.name}, got {got} (no TensorFlow equivalent)"
                ) from None
            raise SpecMismatchError(
                f"{path}: expected a batch [{batch_size}] + {spec.describe()}, got {value!r:.80} "
                f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
            ) from None
    got = value.dtype
    if got != want:
        if not np.can_cast(got.as_numpy_dtype, spec.dtype, casting="safe"):
            raise unsafe_cast(path, spec, got.name)
        value = tf.cast(value, want)
    expected = tf.TensorShape((batch_size,) + spec.shape)
    shape = value.shape
    if shape.rank == len(spec.shape) and shape.is_compatible_with(spec.shape):
        raise unbatched(path, spec, batch_size, shape.as_list(), "tf.expand_dims(x, 0)")
    if not shape.is_compatible_with(expected):
        got_shape = tuple(shape.as_list()) if shape.rank is not None else "unknown rank"
        raise wrong_shape(path, spec, batch_size, got_shape, got.name)
    if not shape.is_fully_defined():
        value = tf.ensure_shape(value, expected, name=f"check_{index}")
    return value
