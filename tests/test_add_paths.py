"""The add hot path: the generated ``FlatSpec.flatten_batch`` agrees with the checked slow
path on every kind of item, the single-stream add's inlined append agrees with
``append_rows`` (runs, wraps, oversized and empty batches) in both layouts, and
concurrent adds lose nothing."""

from __future__ import annotations

import collections
import pickle
import threading

import numpy as np
import pytest

import replaybuf
from replaybuf import ArraySpec
from replaybuf.errors import SpecMismatchError
from replaybuf.nest import FlatSpec

Pair = collections.namedtuple("Pair", "position velocity")
DICT_SPEC = {"obs": ArraySpec((3,), np.float32), "action": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
TUPLE_SPEC = Pair(ArraySpec((2,), np.float64), ArraySpec((), np.float32))
NESTED_SPEC = (ArraySpec((2,), np.int32), {"inner": ArraySpec((), np.uint8)})
LEAF_SPEC = ArraySpec((4,), np.float32)


def _dict_items(n, **changes):
    items = {
        "obs": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
        "action": np.arange(n, dtype=np.int64),
        "done": np.zeros(n, np.bool_),
    }
    items.update(changes)
    return items


CASES = [
    (DICT_SPEC, _dict_items(2), 2),
    (DICT_SPEC, _dict_items(3), None),
    (DICT_SPEC, collections.OrderedDict(_dict_items(2)), 2),  # another mapping type: slow path
    (DICT_SPEC, _dict_items(2, extra=np.zeros(2)), 2),  # an extra key
    (DICT_SPEC, {k: v for k, v in _dict_items(2).items() if k != "done"}, 2),  # a missing key
    (DICT_SPEC, _dict_items(2, action=[1, 2]), 2),  # a Python list: converted
    (DICT_SPEC, _dict_items(2, action=np.arange(2, dtype=np.int32)), 2),  # a safe cast
    (DICT_SPEC, _dict_items(2, action=np.arange(2, dtype=np.float64)), 2),  # an unsafe cast
    (DICT_SPEC, _dict_items(2, obs=np.zeros((2, 3), np.dtype(np.float32, metadata={"m": 1}))), 2),  # equal dtype
    (DICT_SPEC, _dict_items(2, obs=np.zeros((2, 4), np.float32)), 2),  # a wrong shape
    (DICT_SPEC, _dict_items(2), 3),  # a wrong batch size
    (DICT_SPEC, _dict_items(2, action=np.arange(3)), None),  # leaves disagree on n
    (DICT_SPEC, _dict_items(1, obs=np.zeros(3, np.float32)), None),  # unbatched
    (DICT_SPEC, _dict_items(1, obs=np.float32(1.0)), None),  # a 0-d first leaf
    (DICT_SPEC, _dict_items(2, obs=np.ma.zeros((2, 3), np.float32)), 2),  # an ndarray subclass
    (DICT_SPEC, _dict_items(0), None),  # an empty batch
    (TUPLE_SPEC, Pair(np.zeros((2, 2)), np.zeros(2, np.float32)), 2),
    (TUPLE_SPEC, (np.zeros((2, 2)), np.zeros(2, np.float32)), 2),  # a plain tuple for a namedtuple
    (TUPLE_SPEC, Pair(np.zeros((2, 2)), np.zeros(2, np.float64)), 2),  # float64 into float32: unsafe
    (NESTED_SPEC, (np.zeros((2, 2), np.int32), {"inner": np.zeros(2, np.uint8)}), None),
    (NESTED_SPEC, (np.zeros((2, 2), np.int32), {"inner": np.zeros(2, np.int64)}), None),
    (NESTED_SPEC, [np.zeros((2, 2), np.int32)], None),  # a wrong structure
    (LEAF_SPEC, np.ones((3, 4), np.float32), None),
    (LEAF_SPEC, np.ones((3, 5), np.float32), None),
]


@pytest.mark.parametrize(("spec", "items", "batch_size"), CASES)
def test_the_generated_fast_path_agrees_with_the_checked_path(spec, items, batch_size):
    flat = FlatSpec(spec)
    try:
        expected = flat.checked_batch(items, batch_size)
    except SpecMismatchError as err:
        with pytest.raises(SpecMismatchError) as got:
            flat.flatten_batch(items, batch_size)
        assert str(got.value) == str(err)
        return
    leaves = flat.flatten_batch(items, batch_size)
    assert len(leaves) == len(expected)
    for leaf, want, leaf_spec in zip(leaves, expected, flat.leaves, strict=True):
        assert type(leaf) is np.ndarray and leaf.dtype == leaf_spec.dtype
        np.testing.assert_array_equal(leaf, want)


def test_matching_arrays_pass_as_the_callers_own_arrays():
    """The fast path neither copies nor flattens: the leaves are the caller's arrays."""
    flat = FlatSpec(DICT_SPEC)
    items = _dict_items(4)
    leaves = flat.flatten_batch(items, None)
    assert [id(leaf) for leaf in leaves] == [id(items[k]) for k in ("action", "done", "obs")]
    pair = Pair(np.zeros((4, 2)), np.zeros(4, np.float32))
    assert FlatSpec(TUPLE_SPEC).flatten_batch(pair, 4)[1] is pair.velocity


def _ids_batch(ids):
    ids = np.asarray(ids, np.int64)
    return {"obs": np.stack([ids, ids, ids], axis=-1).astype(np.float32), "action": ids, "done": ids % 2 == 0}


@pytest.mark.parametrize("storage", ["memory", "columns"])
def test_single_stream_appends_in_order_through_every_path(storage):
    buffer = replaybuf.PyUniformReplayBuffer(DICT_SPEC, capacity=5, storage=storage)
    added = []
    for n in (1, 3, 0, 4, 7, 5, 2):  # single rows, runs, wraps, nothing, more than capacity
        ids = np.arange(len(added), len(added) + n)
        buffer.add_batch(_ids_batch(ids))
        added += ids.tolist()
        items = buffer.gather_all()
        keep = added[-5:]
        np.testing.assert_array_equal(items["action"], [keep])
        np.testing.assert_array_equal(items["obs"][..., 2], [keep])
        np.testing.assert_array_equal(items["done"], [np.asarray(keep) % 2 == 0])
        assert buffer.num_frames() == len(keep)


@pytest.mark.parametrize("storage", ["memory", "columns"])
def test_a_rejected_add_writes_nothing(storage):
    buffer = replaybuf.PyUniformReplayBuffer(DICT_SPEC, capacity=4, storage=storage)
    buffer.add_batch(_ids_batch([0, 1]))
    bad = dict(_ids_batch([2, 3]), obs=np.zeros((2, 3), np.float64))  # float64 into float32
    with pytest.raises(SpecMismatchError, match="obs"):
        buffer.add_batch(bad)
    np.testing.assert_array_equal(buffer.gather_all()["action"], [[0, 1]])


@pytest.mark.parametrize("storage", ["memory", "columns"])
def test_concurrent_single_adds_lose_nothing(storage):
    buffer = replaybuf.PyUniformReplayBuffer(DICT_SPEC, capacity=4000, storage=storage)
    per_thread = 500

    def writer(first):
        for i in range(first, first + per_thread):
            buffer.add_batch(_ids_batch([i]))

    threads = [threading.Thread(target=writer, args=(k * per_thread,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    items = buffer.gather_all()
    assert sorted(items["action"][0].tolist()) == list(range(4 * per_thread))
    np.testing.assert_array_equal(items["obs"][0, :, 1], items["action"][0])  # no torn items


@pytest.mark.parametrize(("saved", "loaded"), [("memory", "columns"), ("columns", "memory")])
def test_a_checkpoint_of_one_layout_loads_into_the_other(tmp_path, saved, loaded):
    """The checkpoint's items are per leaf whatever the layout: a folder saved by a buffer of
    records loads into one of columns and back, and both then sample the same."""
    source = replaybuf.UniformReplayBuffer(DICT_SPEC, batch_size=2, max_length=3, seed=7, storage=saved)
    for step in range(5):  # wraps: the oldest steps are overwritten
        source.add_batch(_ids_batch([2 * step, 2 * step + 1]))
    source.save(tmp_path / "ckpt")
    target = replaybuf.UniformReplayBuffer(DICT_SPEC, batch_size=2, max_length=3, seed=0, storage=loaded)
    target.load(tmp_path / "ckpt")
    np.testing.assert_array_equal(target.gather_all()["action"], source.gather_all()["action"])
    got, info = target.get_next(8, num_steps=2)
    want, want_info = source.get_next(8, num_steps=2)
    np.testing.assert_array_equal(info.ids, want_info.ids)
    for key in DICT_SPEC:
        np.testing.assert_array_equal(got[key], want[key])


def test_a_flat_spec_pickles_and_its_generated_fast_path_works_after():
    flat = pickle.loads(pickle.dumps(FlatSpec(DICT_SPEC)))
    items = _dict_items(3)
    assert [id(leaf) for leaf in flat.flatten_batch(items, 3)] == [id(items[k]) for k in ("action", "done", "obs")]
    with pytest.raises(SpecMismatchError, match="obs"):
        flat.flatten_batch(_dict_items(3, obs=np.zeros((3, 2), np.float32)), 3)
