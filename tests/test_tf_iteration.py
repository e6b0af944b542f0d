"""replaybuf.tf.iteration: eager iterators that hand out the same elements as tf.data's own."""

from __future__ import annotations

import collections

import numpy as np
import optree
import pytest

tf = pytest.importorskip("tensorflow")

from conformance_data import step_batch  # noqa: E402
from replaybuf.buffer import BufferInfo  # noqa: E402
from replaybuf.tf import TFUniformReplayBuffer  # noqa: E402
from replaybuf.tf.iteration import FastIterationDataset, fast_iteration  # noqa: E402
from test_tf_buffer import make  # noqa: E402

Pair = collections.namedtuple("Pair", ["left", "right"])


def structures(k):
    """Elements of every kind of nest an element spec can have, all built from ``k``."""
    x = tf.cast(k, tf.float32)
    return {
        "dict, unsorted keys": {"b": x, "a": [k, k + 1], "c": {"z": x * 2, "y": k}},
        "OrderedDict": collections.OrderedDict([("z", k), ("a", x)]),
        "namedtuple with an empty tuple": (Pair(k, ()), BufferInfo(k * 3, x)),
        "nested tuples and lists": ((x, (k, [x, x + 1])), [k]),
        "one tensor": x,
        "images": tf.fill([2, 3, 4], tf.cast(k % 255, tf.uint8)),
    }


def assert_same_element(fast, plain):
    """Same nest (node types, dict key order), dtypes, shapes and values."""
    fast_leaves, fast_spec = optree.tree_flatten(fast)
    plain_leaves, plain_spec = optree.tree_flatten(plain)
    assert fast_spec == plain_spec
    assert optree.tree_map(lambda x: type(x).__name__, fast) == optree.tree_map(lambda x: type(x).__name__, plain)
    for key_order_fast, key_order_plain in zip(_dict_key_orders(fast), _dict_key_orders(plain), strict=True):
        assert key_order_fast == key_order_plain
    for f, p in zip(fast_leaves, plain_leaves, strict=True):
        assert f.dtype == p.dtype and f.shape == p.shape
        np.testing.assert_array_equal(f.numpy(), p.numpy())


def _dict_key_orders(nest):
    if isinstance(nest, dict):
        yield list(nest)
        for value in nest.values():
            yield from _dict_key_orders(value)
    elif isinstance(nest, (list, tuple)):
        for value in nest:
            yield from _dict_key_orders(value)


@pytest.mark.parametrize("name", list(structures(tf.constant(0, tf.int64))))
def test_eager_iteration_matches_tf_data(name):
    plain = tf.data.Dataset.range(5).map(lambda k: structures(k)[name])
    fast = fast_iteration(plain)
    assert isinstance(fast, FastIterationDataset)
    assert fast.element_spec == plain.element_spec
    iterator = iter(fast)
    assert type(iterator).__name__ == "_FastIterator" and iterator._fast  # on the tested TensorFlows
    fast_elements = list(iterator)
    plain_elements = list(plain)
    assert len(fast_elements) == len(plain_elements) == 5  # and StopIteration at the end
    for f, p in zip(fast_elements, plain_elements, strict=True):
        assert_same_element(f, p)


def test_unknown_dimensions_and_ranks_iterate_alike():
    def unknown_rank(k):
        values = tf.numpy_function(lambda n: np.arange(n * 2).reshape(n, 2), [k], tf.int64)
        return {"rank?": values, "dim?": tf.range(k)}

    plain = tf.data.Dataset.range(1, 4).map(unknown_rank)
    assert plain.element_spec["rank?"].shape.rank is None
    assert plain.element_spec["dim?"].shape.as_list() == [None]
    for f, p in zip(fast_iteration(plain), plain, strict=True):
        assert_same_element(f, p)


def test_async_eager_execution_ends_the_pass_with_stop_iteration():
    plain = tf.data.Dataset.range(4).map(lambda k: {"k": k})
    tf.config.experimental.set_synchronous_execution(False)
    try:
        elements = [int(e["k"]) for e in fast_iteration(plain)]
    finally:
        tf.config.experimental.set_synchronous_execution(True)
    assert elements == [0, 1, 2, 3]


def test_a_tensorflow_without_the_internals_iterates_as_usual(monkeypatch):
    from replaybuf.tf import iteration

    plain = tf.data.Dataset.range(3).map(lambda k: {"k": k})
    monkeypatch.setattr(iteration, "_ITERATOR_STATE", iteration._ITERATOR_STATE + ("_renamed_in_a_later_tf",))
    iterator = iter(fast_iteration(plain))
    assert not iterator._fast
    assert [int(e["k"]) for e in iterator] == [0, 1, 2]
    monkeypatch.setattr(iteration, "UnaryUnchangedStructureDataset", None)
    assert fast_iteration(plain) is plain


def test_composite_components_keep_tf_data_iteration():
    ragged = tf.data.Dataset.range(3).map(lambda k: {"r": tf.RaggedTensor.from_row_lengths(tf.range(k), [k])})
    assert fast_iteration(ragged) is ragged
    sparse = tf.data.Dataset.from_tensors(tf.sparse.from_dense(tf.eye(2)))
    assert fast_iteration(sparse) is sparse


def test_tf_function_transformations_prefetch_and_checkpoints_behave_as_on_the_input(tmp_path):
    fast = fast_iteration(tf.data.Dataset.range(10).map(lambda k: {"k": k, "sq": k * k}))

    @tf.function
    def total(dataset):
        iterator = iter(dataset)  # a graph iterator: tf.data's own
        first = next(iterator)
        second = next(iterator)
        return first["sq"] + second["sq"] + dataset.reduce(tf.constant(0, tf.int64), lambda s, e: s + e["k"])

    assert int(total(fast)) == 0 + 1 + 45

    @tf.function
    def captured():  # the dataset object itself, not a traced argument
        iterator = iter(fast)
        first = next(iterator)["k"]
        summed = tf.constant(0, tf.int64)
        for element in fast:  # autograph: a dataset loop
            summed += element["sq"]
        return first, summed

    first, summed = captured()
    assert int(first) == 0 and int(summed) == sum(k * k for k in range(10))

    prefetched = fast.prefetch(3)
    assert isinstance(prefetched, FastIterationDataset)
    assert [int(e["sq"]) for e in prefetched] == [k * k for k in range(10)]
    mapped = fast.map(lambda e: e["k"] + 100)
    assert [int(e) for e in mapped] == list(range(100, 110))
    assert fast.options().experimental_optimization.inject_prefetch is None

    iterator = iter(fast)
    next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "it"))
    assert int(next(iterator)["k"]) == 1 and int(next(iterator)["k"]) == 2
    checkpoint.read(path).assert_consumed()
    assert int(next(iterator)["k"]) == 1


@pytest.mark.parametrize("deterministic", [False, True])
def test_buffer_datasets_iterate_fast_and_hand_out_what_tf_data_would(deterministic):
    buffer = make(batch_size=2, max_length=5)
    for t in range(7):
        buffer.add_batch(step_batch(t, 2))
    dataset = buffer.as_dataset(2, num_steps=2, single_deterministic_pass=deterministic)
    assert isinstance(dataset, FastIterationDataset)
    if deterministic:
        fast = list(dataset)
        plain = list(dataset._input_dataset)
        assert len(fast) == len(plain) > 0
        for f, p in zip(fast, plain, strict=True):
            assert_same_element(f, p)
    else:
        items, info = next(iter(dataset))
        assert isinstance(info, BufferInfo)
        assert info.ids.shape == (2, 2) and info.probabilities.shape == (2,)
        np.testing.assert_array_equal(items["id"].numpy(), info.ids.numpy())


def test_empty_buffer_error_comes_through_the_fast_iterator():
    dataset = TFUniformReplayBuffer(tf.TensorSpec([], tf.float32), 1, 4).as_dataset(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="TFUniformReplayBuffer is empty"):
        next(iter(dataset))
