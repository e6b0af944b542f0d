"""replaybuf.tf_agents: TF-Agents' module names and classes, where our own classes differ."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import replaybuf  # noqa: E402
from replaybuf.tf_agents import py_uniform_replay_buffer, tf_uniform_replay_buffer  # noqa: E402

Step = collections.namedtuple("Step", ["observation", "action"])
SPEC = Step(tf.TensorSpec([2], tf.float32, "observation"), tf.TensorSpec([], tf.int32, "action"))


def step(i, n=1):
    return Step(np.full((n, 2), i, np.float32), np.full((n,), i, np.int32))


def test_tf_class_is_ours_with_tf_agents_constructor_and_members():
    rb = tf_uniform_replay_buffer.TFUniformReplayBuffer(SPEC, 2, 5, "my_scope")  # scope positional
    assert isinstance(rb, replaybuf.tf.TFUniformReplayBuffer)
    assert rb.data_spec is not None and rb.data_spec.action == tf.TensorSpec([], tf.int32, "action")
    variables = rb.variables()  # a method there, a property on tf.Module
    assert isinstance(variables, list) and all(isinstance(v, tf.Variable) for v in variables)
    assert [v.name for v in variables if "Table" in v.name] == [
        "my_scope/store/Table/leaf_0:0",
        "my_scope/store/Table/leaf_1:0",
    ]
    with pytest.raises(replaybuf.ArgumentError, match="table_fn: expected None"):
        tf_uniform_replay_buffer.TFUniformReplayBuffer(SPEC, 2, table_fn=object)


def make_py(capacity=4, seed=None):
    return py_uniform_replay_buffer.PyUniformReplayBuffer(SPEC, capacity, seed=seed)


def test_py_get_next_returns_items_alone_and_size_counts():
    rb = make_py()
    assert rb.size == 0 and isinstance(rb.size, np.int64)
    for i in range(6):
        rb.add_batch(step(i))
    assert rb.size == 4 and rb.capacity == 4 and rb.num_frames() == 4
    items = rb.get_next(8)
    assert type(items) is Step and items.observation.shape == (8, 2)
    assert set(items.action.tolist()) <= {2, 3, 4, 5}
    first, second = rb.get_next(num_steps=2, time_stacked=False)
    assert second.action == first.action + 1
    np.testing.assert_array_equal(rb.gather_all().action, [[2, 3, 4, 5]])
    rb.clear()
    assert rb.size == 0


def test_py_empty_get_next_raises_but_the_dataset_yields_zeros():
    rb = make_py()
    with pytest.raises(replaybuf.EmptyBufferError):
        rb.get_next()
    element = next(iter(rb.as_dataset(3, 2)))
    assert type(element) is Step and element.observation.shape == (3, 2, 2)
    assert not np.any(element.observation.numpy()) and not np.any(element.action.numpy())


def test_py_int64_into_int32_field_is_cast_when_values_fit():
    rb = make_py()
    rb.add_batch(Step(np.zeros((1, 2)), np.array([7])))  # float64 and int64, as np.array makes them
    assert rb.get_next().action.dtype == np.int32 and int(rb.get_next().action) == 7
    with pytest.raises(replaybuf.SpecMismatchError, match="action.*do not fit in int32"):
        rb.add_batch(Step(np.zeros((1, 2), np.float32), np.array([2**40])))
    with pytest.raises(replaybuf.SpecMismatchError, match="action"):
        rb.add_batch(Step(np.zeros((1, 2), np.float32), np.array([1.5])))  # float into int: no
    assert rb.size == 1  # the rejected adds changed nothing


def test_py_dataset_is_a_tf_dataset_of_items_that_sees_later_adds():
    rb = make_py(capacity=3)
    rb.add_batch(step(0))
    dataset = rb.as_dataset(sample_batch_size=4)
    assert isinstance(dataset, tf.data.Dataset)
    assert dataset.element_spec.observation.shape == (4, 2)
    iterator = iter(dataset)
    assert next(iterator).action.numpy().tolist() == [0, 0, 0, 0]
    for i in range(1, 4):
        rb.add_batch(step(i))
    assert set(next(iterator).action.numpy().tolist()) <= {1, 2, 3}
    for name, kwargs in [
        ("num_parallel_calls", {"num_parallel_calls": 2}),
        ("single_deterministic_pass", {"single_deterministic_pass": True}),
        ("sample_batch_size", {"sample_batch_size": 0}),
    ]:
        with pytest.raises(replaybuf.ArgumentError, match=name):
            rb.as_dataset(**kwargs)


def test_py_checkpoint_round_trip_through_tf_train_checkpoint(tmp_path):
    rb = make_py(seed=3)
    for i in range(6):
        rb.add_batch(step(i))
    path = tf.train.Checkpoint(rb=rb).save(str(tmp_path / "ckpt"))
    restored = make_py(seed=99)
    tf.train.Checkpoint(rb=restored).restore(path).assert_consumed()
    assert restored.size == 4
    np.testing.assert_array_equal(restored.gather_all().action, rb.gather_all().action)
    np.testing.assert_array_equal(restored.get_next(16).action, rb.get_next(16).action)  # generator too
    other = py_uniform_replay_buffer.PyUniformReplayBuffer(Step(SPEC.observation, tf.TensorSpec([], tf.int64)), 4)
    with pytest.raises(replaybuf.CheckpointError):
        tf.train.Checkpoint(rb=other).restore(path)
    assert other.size == 0


def test_py_numpy_global_seed_fixes_the_draws_as_in_tf_agents():
    def draws():
        np.random.seed(5)
        rb = make_py(capacity=50)
        for i in range(50):
            rb.add_batch(step(i))
        return rb.get_next(32).action

    np.testing.assert_array_equal(draws(), draws())
