"""Specs and their conversions from NumPy, TensorFlow, PyTorch and Gymnasium."""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
import torch

import replaybuf
from replaybuf.specs import as_numpy_dtype


def test_array_spec_normalises_shape_and_dtype():
    spec = replaybuf.ArraySpec([3, 2], "float32", "camera")
    assert spec.shape == (3, 2) and spec.dtype == np.float32 and spec.name == "camera"
    assert spec == replaybuf.ArraySpec((3, 2), np.float32, "camera")
    assert replaybuf.TensorSpec is replaybuf.ArraySpec


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.int32, np.int32),
        ("uint8", np.uint8),
        (tf.float16, np.float16),
        (torch.int64, np.int64),
        (torch.bool, np.bool_),
        (tf.bool, np.bool_),
    ],
)
def test_dtype_conversions(dtype, expected):
    assert as_numpy_dtype(dtype) == np.dtype(expected)


def test_bad_dtype_and_shape_are_spec_errors():
    with pytest.raises(replaybuf.SpecError, match="no NumPy equivalent"):
        as_numpy_dtype(torch.qint32)
    with pytest.raises(replaybuf.SpecError, match="fully defined shape"):
        replaybuf.ArraySpec((None, 3), np.float32)
    with pytest.raises(replaybuf.SpecError, match="fully defined shape"):
        replaybuf.ArraySpec((-1,), np.float32)
    with pytest.raises(replaybuf.SpecError, match="expected a dtype"):
        replaybuf.ArraySpec((1,), object())


def test_bounded_spec_broadcasts_bounds():
    spec = replaybuf.BoundedArraySpec((2,), np.int64, "a", 0, [3, 4])
    np.testing.assert_array_equal(spec.minimum, [0, 0])
    np.testing.assert_array_equal(spec.maximum, [3, 4])
    assert spec == replaybuf.BoundedArraySpec((2,), np.int64, "a", [0, 0], [3, 4])
    with pytest.raises(replaybuf.SpecError, match="maximum"):
        replaybuf.BoundedArraySpec((2,), np.int64, "a", 0, [1, 2, 3])


def test_tf_tensor_specs_convert():
    spec = replaybuf.as_data_spec((tf.TensorSpec([3], tf.float32, "action"), {"b": tf.TensorSpec([], tf.int32)}))
    assert spec == (replaybuf.ArraySpec((3,), np.float32, "action"), {"b": replaybuf.ArraySpec((), np.int32, None)})


def test_gymnasium_spaces_convert():
    space = gym.spaces.Dict(
        {
            "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "discrete": gym.spaces.Discrete(4, start=1),
            "multi": gym.spaces.MultiDiscrete([2, 3]),
            "binary": gym.spaces.MultiBinary(3),
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 255, (2, 2), np.uint8))),
        }
    )
    spec = replaybuf.as_data_spec(space)
    assert spec["box"].shape == (2,) and spec["box"].dtype == np.float32
    assert (spec["discrete"].minimum, spec["discrete"].maximum) == (1, 4)
    np.testing.assert_array_equal(spec["multi"].maximum, [1, 2])
    assert spec["binary"].shape == (3,) and int(spec["binary"].maximum[0]) == 1
    assert isinstance(spec["pair"], tuple) and spec["pair"][1].dtype == np.uint8
    with pytest.raises(replaybuf.SpecError, match="Text"):
        replaybuf.as_data_spec(gym.spaces.Text(5))


def test_lists_in_specs_are_structure_kept_in_what_comes_back():
    """As in TF-Agents: a list in a spec is structure; where the spec has a leaf, a list in
    the items is array data."""
    buffer = replaybuf.UniformReplayBuffer((replaybuf.ArraySpec((), np.int32), [replaybuf.ArraySpec((2,), np.int32)]))
    assert type(buffer.data_spec[1]) is list
    buffer.add_batch((np.array([1], np.int32), [[[5, 6]]]))
    items, _ = buffer.get_next(2)
    assert type(items) is tuple and type(items[1]) is list and items[1][0].shape == (2, 2)
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        buffer.add_batch((np.array([1], np.int32), (np.array([[5, 6]], np.int32),)))


def test_namedtuple_specs_keep_their_type():
    Pair = collections.namedtuple("Pair", "a b")
    spec = replaybuf.as_data_spec(Pair(replaybuf.ArraySpec((), np.int32), tf.TensorSpec([2], tf.float32)))
    assert type(spec) is Pair and spec.b.shape == (2,)
    buffer = replaybuf.UniformReplayBuffer(spec, batch_size=2)
    buffer.add_batch(Pair(np.array([1, 2], np.int32), np.zeros((2, 2), np.float32)))
    items, _ = buffer.get_next(3)
    assert type(items) is Pair and items.b.shape == (3, 2)


def test_unknown_leaf_is_rejected():
    with pytest.raises(replaybuf.SpecError, match="data_spec/x"):
        replaybuf.as_data_spec({"x": 3})
