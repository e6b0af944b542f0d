"""One test per documented error of the core (docs/errors.md)."""

from __future__ import annotations

import numpy as np
import pytest

import replaybuf
from replaybuf import ArraySpec

SPEC = {"observation": {"camera": ArraySpec((3, 2), np.float32)}, "action": ArraySpec((), np.int32)}


def batch(n: int, camera_shape=(3, 2), camera_dtype=np.float32, action=None):
    return {
        "observation": {"camera": np.zeros((n,) + camera_shape, camera_dtype)},
        "action": np.zeros(n, np.int32) if action is None else action,
    }


def test_error_tree():
    for error in (
        replaybuf.SpecError,
        replaybuf.SpecMismatchError,
        replaybuf.EmptyBufferError,
        replaybuf.ArgumentError,
        replaybuf.PriorityError,
    ):
        assert issubclass(error, replaybuf.ReplayBufferError)
        assert issubclass(error, ValueError)


def test_shape_mismatch_names_field_expected_and_got():
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2)
    with pytest.raises(replaybuf.SpecMismatchError) as info:
        buffer.add_batch(batch(2, camera_shape=(3, 3)))
    message = str(info.value)
    assert message.startswith("observation/camera:")
    assert "(2, 3, 2) float32" in message and "got (2, 3, 3) float32" in message


def test_batch_size_mismatch():
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2)
    with pytest.raises(replaybuf.SpecMismatchError, match=r"action: expected shape \(2\) int32.*got \(3,\)"):
        buffer.add_batch(batch(2) | {"action": np.zeros(3, np.int32)})
    assert buffer.num_frames() == 0


def test_unsafe_cast_is_rejected_and_safe_cast_accepted():
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2)
    with pytest.raises(replaybuf.SpecMismatchError, match="action: expected dtype int32, got int64"):
        buffer.add_batch(batch(2, action=np.zeros(2, np.int64)))
    with pytest.raises(replaybuf.SpecMismatchError, match="action: expected dtype int32, got float64"):
        buffer.add_batch(batch(2, action=[0.5, 1.5]))
    with pytest.raises(replaybuf.SpecMismatchError, match="do not fit in int32"):
        buffer.add_batch(batch(2, action=[2**40, 0]))
    buffer.add_batch(batch(2, action=np.zeros(2, np.int16)))  # int16 -> int32 is safe
    buffer.add_batch(batch(2, action=[1, 2]))  # Python ints
    assert buffer.num_frames() == 4
    items, _ = buffer.gather_all(), None
    np.testing.assert_array_equal(items["action"][:, 1], [1, 2])


def test_string_and_object_data_are_rejected():
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2)
    with pytest.raises(replaybuf.SpecMismatchError, match="action: expected dtype int32, got <U1"):
        buffer.add_batch(batch(2, action=np.array(["a", "b"])))


def test_py_uniform_leaves_must_agree_on_batch_size():
    buffer = replaybuf.PyUniformReplayBuffer(SPEC, capacity=10)
    with pytest.raises(replaybuf.SpecMismatchError, match="same batch size, got action: 2, observation/camera: 3"):
        buffer.add_batch({"observation": {"camera": np.zeros((3, 3, 2), np.float32)}, "action": np.zeros(2, np.int32)})
    assert buffer.num_frames() == 0


def test_py_uniform_unbatched_item_says_how_to_add_one():
    buffer = replaybuf.PyUniformReplayBuffer(SPEC, capacity=10)
    with pytest.raises(replaybuf.SpecMismatchError, match=r"unbatched item.*x\[None\]"):
        buffer.add_batch({"observation": {"camera": np.zeros((3, 2), np.float32)}, "action": np.zeros(1, np.int32)})


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_length": -1}, "max_length"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"dataset_window_shift": 0}, "dataset_window_shift"),
    ],
)
def test_constructor_arguments(kwargs, field):
    with pytest.raises(replaybuf.ArgumentError, match=f"{field}: expected a positive int"):
        replaybuf.UniformReplayBuffer(SPEC, **kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"sample_batch_size": 0}, "sample_batch_size"),
        ({"num_steps": True}, "num_steps"),
    ],
)
def test_read_arguments(kwargs, field):
    buffer = replaybuf.UniformReplayBuffer(SPEC)
    buffer.add_batch(batch(1))
    with pytest.raises(replaybuf.ArgumentError, match=field):
        buffer.get_next(**kwargs)
    with pytest.raises(replaybuf.ArgumentError, match=field):
        buffer.as_dataset(**kwargs)
    with pytest.raises(replaybuf.ArgumentError, match="num_parallel_calls"):
        buffer.as_dataset(num_parallel_calls=-2)


def test_deterministic_pass_errors_where_all_data_would_be_dropped():
    buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=4)
    with pytest.raises(replaybuf.EmptyBufferError, match="empty"):
        iter(buffer.as_dataset(single_deterministic_pass=True))
    buffer.add_batch(batch(2))
    with pytest.raises(replaybuf.ArgumentError, match=r"sample_batch_size \(3\) > batch_size \(2\)"):
        iter(buffer.as_dataset(sample_batch_size=3, single_deterministic_pass=True))
    with pytest.raises(replaybuf.ArgumentError, match=r"num_steps \(5\) > max_length \(4\)"):
        iter(buffer.as_dataset(num_steps=5, single_deterministic_pass=True))


def test_empty_buffer_error_reads_like_tf_agents():
    buffer = replaybuf.UniformReplayBuffer(SPEC)
    with pytest.raises(replaybuf.EmptyBufferError, match="Make sure to add items before sampling the buffer"):
        buffer.get_next()


def test_prefetch_thread_passes_errors_to_the_consumer():
    buffer = replaybuf.UniformReplayBuffer(SPEC)
    iterator = iter(buffer.as_dataset(sample_batch_size=2, num_parallel_calls=2))
    with pytest.raises(replaybuf.EmptyBufferError):
        next(iterator)
