"""TFUniformReplayBuffer beyond the conformance suite: graphs, tf.data, checkpoints, errors."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import replaybuf  # noqa: E402
from conformance_data import SPEC, assert_items_match_ids, fields_for_ids, step_batch  # noqa: E402
from replaybuf.dataset import plan_deterministic_pass  # noqa: E402
from replaybuf.ring import StreamRing  # noqa: E402
from replaybuf.tf import TFUniformReplayBuffer  # noqa: E402

EMPTY = "TFUniformReplayBuffer is empty. Make sure to add items before sampling the buffer."


def numpy_nest(nest):
    return tf.nest.map_structure(lambda t: t.numpy(), nest)


def make(batch_size=2, max_length=5, **kwargs):
    return TFUniformReplayBuffer(SPEC, batch_size, max_length, seed=1, **kwargs)


def fill(buffer, steps, start=0):
    for t in range(start, start + steps):
        buffer.add_batch(step_batch(t, buffer.batch_size))


def tf_batch(step, batch_size):
    return tf.nest.map_structure(tf.constant, step_batch(step, batch_size))


def test_add_and_sample_inside_tf_function_with_a_while_loop_driver():
    buffer = make(batch_size=3, max_length=4)

    @tf.function
    def collect_and_sample(num_steps):
        for t in tf.range(num_steps, dtype=tf.int64):  # autograph: a tf.while_loop
            ids = t * 3 + tf.range(3, dtype=tf.int64)
            position = tf.stack(
                [
                    tf.cast(ids, tf.float32),
                    tf.cast(ids, tf.float32) + 0.5,
                    -tf.cast(ids, tf.float32),
                ],
                -1,
            )
            camera = tf.cast(
                (ids[:, None, None] + tf.reshape(tf.range(4, dtype=tf.int64), (2, 2))) % 251,
                tf.uint8,
            )
            buffer.add_batch(
                {
                    "id": ids,
                    "observation": {"position": position, "camera": camera},
                    "flag": ids % 2 == 0,
                }
            )
        return buffer.get_next(6, 2), buffer.get_next(4, 2, time_stacked=False), buffer.num_frames()

    (items, info), (steps, info_unstacked), frames = collect_and_sample(tf.constant(7, tf.int64))
    assert int(frames) == 12
    assert_items_match_ids(numpy_nest(items), info.ids.numpy())
    assert info.ids.shape == (6, 2) and info.ids.numpy().min() >= (7 - 4) * 3
    np.testing.assert_allclose(info.probabilities.numpy(), 1 / (3 * 3))
    assert info.probabilities.dtype == tf.float32
    assert isinstance(steps, tuple) and len(steps) == 2
    for t, item in enumerate(steps):
        assert_items_match_ids(numpy_nest(item), info_unstacked.ids.numpy()[:, t])
    gathered = numpy_nest(buffer.gather_all())
    assert_items_match_ids(gathered, np.arange(3, 7)[None, :] * 3 + np.arange(3)[:, None])


def test_numpy_and_tf_batches_of_the_same_items_store_the_same_bytes():
    from_numpy, from_tf = make(), make()
    for t in range(3):
        from_numpy.add_batch(step_batch(t, 2))
        from_tf.add_batch(tf_batch(t, 2))
    a, b = numpy_nest(from_numpy.gather_all()), numpy_nest(from_tf.gather_all())
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    assert_items_match_ids(a, np.arange(3)[None, :] * 2 + np.arange(2)[:, None])


def test_data_spec_of_tf_tensor_specs_as_tf_agents_users_write_it():
    spec = (tf.TensorSpec([3], tf.float32, "action"), (tf.TensorSpec([5], tf.int32, "lidar"),))
    buffer = TFUniformReplayBuffer(spec, batch_size=2, max_length=3)
    assert buffer.data_spec == (
        replaybuf.ArraySpec((3,), np.float32, "action"),
        (replaybuf.ArraySpec((5,), np.int32, "lidar"),),
    )
    assert [v.shape for v in buffer.variables if v.shape.rank > 1] == [(6, 3), (6, 5)]
    assert all("CPU" in v.device for v in buffer.variables)


def test_checkpoint_round_trip_restores_contents_and_counters(tmp_path):
    buffer = make(batch_size=2, max_length=4)
    fill(buffer, 6)  # wrapped
    path = tf.train.Checkpoint(rb=buffer).save(str(tmp_path / "ckpt"))
    before = numpy_nest(buffer.gather_all())

    restored = make(batch_size=2, max_length=4)
    tf.train.Checkpoint(rb=restored).restore(path).assert_consumed()
    assert int(restored.num_frames()) == 8
    tf.nest.map_structure(np.testing.assert_array_equal, numpy_nest(restored.gather_all()), before)
    restored.add_batch(step_batch(6, 2))  # continues where the saved buffer stopped
    assert_items_match_ids(numpy_nest(restored.gather_all()), np.arange(3, 7)[None, :] * 2 + np.arange(2)[:, None])


def _pass_ids(dataset):
    return [info.ids.numpy() for _, info in dataset]


@pytest.mark.parametrize(
    "batch_size, shift, drop, sample_batch_size, num_steps",
    [
        (3, None, False, None, None),
        (3, None, False, 2, 3),
        (3, 1, True, 2, 3),
        (2, 2, False, None, 3),
        (3, None, True, 2, None),
    ],
)
def test_deterministic_pass_after_wraparound_matches_the_core_plan(
    batch_size, shift, drop, sample_batch_size, num_steps
):
    buffer = make(batch_size=batch_size, max_length=5, dataset_window_shift=shift, dataset_drop_remainder=drop)
    fill(buffer, 12)  # wrapped twice: streams must stay apart
    ring = StreamRing(batch_size, 5)
    ring.steps = 12
    expected = plan_deterministic_pass(ring, sample_batch_size, num_steps, shift, drop)
    got = []
    for items, info in buffer.as_dataset(sample_batch_size, num_steps, single_deterministic_pass=True):
        ids = info.ids.numpy()
        assert_items_match_ids(numpy_nest(items), ids)
        assert info.probabilities == ()
        got.append(ids)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_deterministic_pass_is_planned_per_iterator_and_sees_adds_between_passes():
    buffer = make(batch_size=2, max_length=5)
    fill(buffer, 2)
    dataset = buffer.as_dataset(single_deterministic_pass=True)
    assert [int(i) for i in _pass_ids(dataset)] == [0, 2, 1, 3]
    fill(buffer, 1, start=2)
    assert [int(i) for i in _pass_ids(dataset)] == [0, 2, 4, 1, 3, 5]


def test_element_shapes_are_static():
    buffer = make(batch_size=4, max_length=6, dataset_drop_remainder=True)
    random = buffer.as_dataset(8, 2)
    items, info = random.element_spec
    assert items["observation"]["camera"].shape == (8, 2, 2, 2)
    assert info.ids.shape == (8, 2) and info.probabilities.shape == (8,)
    single = buffer.as_dataset().element_spec
    assert single[0]["id"].shape == () and single[1].probabilities.shape == ()
    passes = buffer.as_dataset(2, 3, single_deterministic_pass=True).element_spec
    assert passes[0]["observation"]["position"].shape == (2, 3, 3)


@pytest.mark.parametrize("draw_ahead", [1, 3, 8])
@pytest.mark.parametrize("sample_batch_size, num_steps", [(8, 2), (None, None)])
@pytest.mark.parametrize("plain", [False, True])
def test_random_dataset_is_exact_every_element_sees_every_earlier_add_and_clear(
    draw_ahead, sample_batch_size, num_steps, plain
):
    """After any number of reads without adds (which let the eager iterator draw ahead),
    the first element after an add or a clear reflects it. ``plain``: through
    ``with_options`` (TF-Agents' probability test), i.e. tf.data's own iteration."""
    buffer = make(batch_size=2, max_length=4, dataset_draw_ahead=draw_ahead)
    fill(buffer, 2)  # steps 0, 1
    dataset = buffer.as_dataset(sample_batch_size, num_steps)
    if plain:
        dataset = dataset.with_options(tf.data.Options())
    iterator = iter(dataset)

    def take(count):
        ids = []
        for _ in range(count):
            items, info = next(iterator)
            assert_items_match_ids(numpy_nest(items), info.ids.numpy())  # never torn
            ids.append(info.ids.numpy())
        return ids

    assert all(ids.max() < 2 * 2 for ids in take(13))  # reads enough to draw groups ahead
    fill(buffer, 10, start=2)  # every item drawn before is overwritten: steps 8..11 stored
    assert all(ids.min() >= 8 * 2 for ids in take(13))
    buffer.clear()
    fill(buffer, 2)  # the counter restarted: only steps 0, 1 (ids 0..3) are stored
    assert all(ids.max() < 2 * 2 for ids in take(5))
    for step in range(2, 12):  # the DQN loop: one add between reads
        fill(buffer, 1, start=step)
        (ids,) = take(1)
        assert ids.min() >= max(step - 3, 0) * 2


def test_random_dataset_draws_ahead_only_while_nothing_is_added():
    """Eager iteration draws groups (2, 4, 8, 16: the default dataset_draw_ahead) while reads
    come without adds; with an add between every two reads it draws one element at a time,
    so nothing is drawn in vain."""
    buffer = make(batch_size=2, max_length=50)
    fill(buffer, 50)
    iterator = iter(buffer.as_dataset(4, 2))
    for _ in range(40):
        next(iterator)
    assert sorted(iterator._group_iterators) == [2, 4, 8, 16]

    iterator = iter(buffer.as_dataset(4, 2))
    for step in range(50, 70):
        fill(buffer, 1, start=step)
        next(iterator)
    assert iterator._group_iterators == {}

    iterator = iter(buffer.as_dataset(4, 2))  # four reads per add
    for step in range(70, 76):
        fill(buffer, 1, start=step)
        for _ in range(4):
            next(iterator)
        # from the second stretch on it knows a stretch is four reads: nothing left undrawn
        assert step == 70 or iterator._pending == []
    assert sorted(iterator._group_iterators) == [2, 4]  # reads 2-3 and 4 of the first stretch


def test_while_every_read_follows_an_add_the_iterator_draws_fresh_without_checking():
    """The DQN loop (an add in a tf.function, then one read): after two reads that each
    followed an add, the iterator stops reading the write version for SKIPPED_CHECKS reads,
    and each of those reads still sees the add before it; reads without adds bring the
    groups back."""
    from replaybuf.tf.iteration import SKIPPED_CHECKS

    buffer = make(batch_size=2, max_length=1)  # every add replaces everything stored
    add = tf.function(buffer.add_batch)
    checks = []
    version = buffer._write_version
    buffer._write_version = lambda: checks.append(1) or version()
    iterator = iter(buffer.as_dataset(4))
    reads = 4 * (SKIPPED_CHECKS + 2)
    for step in range(reads):
        add(tf_batch(step, 2))
        _, info = next(iterator)
        np.testing.assert_array_equal(info.ids.numpy() // 2, step)  # only the latest step
    assert len(checks) == 4 * 2  # two checks (this read follows an add, so did the one before) per cycle
    assert iterator._group_iterators == {}

    for _ in range(SKIPPED_CHECKS + 8):  # no more adds
        _, info = next(iterator)
        np.testing.assert_array_equal(info.ids.numpy() // 2, reads - 1)
    assert 2 in iterator._group_iterators


def _maps_reading_storage(dataset):
    """The map nodes of ``dataset``'s graph whose function (or one it calls) gathers rows."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    functions = {f.signature.name: f for f in graph.library.function}

    def gathers(name):
        for node in functions[name].node_def:
            called = [a.func.name for a in node.attr.values() if a.func.name in functions]
            if node.op == "ResourceGather" or any(gathers(f) for f in called):
                return True
        return False

    return [n for n in graph.node if "MapDataset" in n.op and gathers(n.attr["f"].func.name)]


@pytest.mark.parametrize("group", [None, 4])
def test_random_draws_run_their_ops_on_the_asking_thread(group):
    """Handing a draw's few dozen small ops to the inter-op pool cost more than the ops."""
    buffer = make()
    buffer.add_batch(step_batch(0, 2))
    dataset = buffer.as_dataset(2, num_steps=1)
    dataset = dataset if group is None else dataset.groups(group)
    maps = _maps_reading_storage(dataset)
    assert len(maps) == 1
    assert maps[0].attr["use_inter_op_parallelism"].b is False


def test_dataset_draws_without_the_inline_map_class_use_tf_data_map(monkeypatch):
    from replaybuf.tf import datasets

    monkeypatch.setattr(datasets, "_INLINE_MAP", None)
    buffer = make()
    buffer.add_batch(step_batch(0, 2))
    dataset = buffer.as_dataset(2, num_steps=1)
    assert _maps_reading_storage(dataset)[0].attr["use_inter_op_parallelism"].b is True
    items, info = next(iter(dataset))
    np.testing.assert_array_equal(items["id"].numpy(), info.ids.numpy())


def test_random_dataset_is_exact_after_adds_and_clears_traced_in_graphs():
    """Adds and clears inside tf.function (a driver) bump no Python counter: the eager
    iterator then reads the step and clear counters before handing out an early draw."""
    buffer = make(batch_size=2, max_length=4)

    @tf.function
    def add(step):
        ids = step * 2 + tf.range(2, dtype=tf.int64)
        batch = tf.nest.map_structure(tf.constant, step_batch(0, 2))
        batch["id"] = ids
        batch["observation"]["position"] = tf.stack(
            [tf.cast(ids, tf.float32), tf.cast(ids, tf.float32) + 0.5, -tf.cast(ids, tf.float32)], -1
        )
        batch["observation"]["camera"] = tf.cast(
            (ids[:, None, None] + tf.reshape(tf.range(4, dtype=tf.int64), (2, 2))) % 251, tf.uint8
        )
        batch["flag"] = ids % 2 == 0
        buffer.add_batch(batch)

    @tf.function
    def clear():
        buffer.clear()

    for step in range(2):
        add(tf.constant(step, tf.int64))
    iterator = iter(buffer.as_dataset(8))
    for _ in range(13):
        items, info = next(iterator)
        assert info.ids.numpy().max() < 4
    for step in range(2, 12):
        add(tf.constant(step, tf.int64))
    items, info = next(iterator)
    assert_items_match_ids(numpy_nest(items), info.ids.numpy())
    assert info.ids.numpy().min() >= 16
    for _ in range(13):
        next(iterator)
    clear()
    for step in range(2):
        add(tf.constant(step, tf.int64))
    assert next(iterator)[1].ids.numpy().max() < 4


def test_random_dataset_with_parallel_calls_and_autotune():
    buffer = make(batch_size=2, max_length=5)
    fill(buffer, 4)
    for calls in (2, tf.data.AUTOTUNE):
        for items, info in buffer.as_dataset(3, 2, num_parallel_calls=calls).take(4):
            assert_items_match_ids(numpy_nest(items), info.ids.numpy())


def test_parallel_calls_draw_no_more_ahead_than_the_calls_in_flight():
    # One add per read (TF-Agents' DQN loop): an element drawn after the add of step r - 1
    # holds an id >= r - 8 almost surely (256 uniform draws among r <= 120 ids); drawing
    # 16 elements per call (as before) handed out elements drawn ~30 adds earlier.
    buffer = make(batch_size=1, max_length=1000, dataset_draw_ahead=16)
    fill(buffer, 1)
    iterator = iter(buffer.as_dataset(256, num_parallel_calls=2))
    newest = []
    for step in range(1, 120):
        _, info = next(iterator)
        newest.append(int(info.ids.numpy().max()))
        buffer.add_batch(step_batch(step, 1))
    lags = [step - 1 - drawn for step, drawn in enumerate(newest, start=1)]
    assert max(lags[40:]) <= 8, lags


def test_dataset_consumed_inside_tf_function():
    buffer = make(batch_size=2, max_length=5)
    fill(buffer, 5)
    dataset = buffer.as_dataset(4, 2)

    @tf.function
    def total_ids():
        total = tf.constant(0, tf.int64)
        for items, info in dataset.take(10):
            tf.debugging.assert_equal(items["id"], info.ids)
            total += tf.reduce_sum(info.ids)
        return total

    assert int(total_ids()) > 0


def test_clear_keeps_or_zeroes_the_variables():
    buffer = make()
    fill(buffer, 3)
    buffer.clear()
    assert int(buffer.num_frames()) == 0
    assert buffer._store.leaves[0].numpy().any()  # bytes still there, just forgotten
    fill(buffer, 1)
    buffer.clear(clear_all_variables=True)
    assert not any(v.numpy().any() for v in buffer._store.leaves)

    @tf.function
    def add_then_clear():
        buffer.add_batch(tf_batch(0, 2))
        buffer.clear()
        return buffer.num_frames()

    assert int(add_then_clear()) == 0


def test_sampling_an_empty_buffer_in_a_graph_raises_tf_invalid_argument():
    buffer = make()

    @tf.function
    def sample():
        return buffer.get_next(2)

    with pytest.raises(tf.errors.InvalidArgumentError, match=EMPTY):
        sample()
    with pytest.raises(tf.errors.InvalidArgumentError, match=EMPTY):
        next(iter(buffer.as_dataset(2)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=EMPTY):
        next(iter(buffer.as_dataset(single_deterministic_pass=True)))


def test_sampling_eagerly_raises_empty_buffer_error_which_is_a_value_error():
    """Also tf.errors.InvalidArgumentError: what TF-Agents raises eagerly (its testGetNextEmpty)."""
    buffer = make(max_length=4)
    with pytest.raises(ValueError, match=EMPTY):
        buffer.get_next()
    with pytest.raises(tf.errors.InvalidArgumentError, match=EMPTY) as caught:
        buffer.get_next(3)
    assert isinstance(caught.value, replaybuf.EmptyBufferError) and caught.value.message.endswith(EMPTY)
    fill(buffer, 2)
    with pytest.raises(replaybuf.EmptyBufferError, match="num_steps=3"):
        buffer.get_next(2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_steps=3"):
        buffer.get_next(2, 3)


def test_tf_agents_members_reached_by_its_tests_and_user_code():
    """``_get_next``, ``_capacity`` (an int64 tensor), ``_clear(clear_all_variables=True)``,
    ``_get_last_id`` (steps added - 1), ``num_frames()``/``_num_frames()`` as tensors."""
    buffer = make(batch_size=2, max_length=3)
    assert buffer._capacity.dtype == tf.int64 and int(buffer._capacity) == 6 and buffer.capacity == 6
    assert int(buffer._get_last_id()) == -1
    fill(buffer, 4)
    assert int(buffer._get_last_id()) == 3
    assert tf.is_tensor(buffer.num_frames()) and int(buffer._num_frames()) == 6
    items, info = buffer._get_next(3, num_steps=2, time_stacked=True)
    assert info.ids.shape == (3, 2)
    assert_items_match_ids(numpy_nest(items), info.ids.numpy())
    assert_items_match_ids(numpy_nest(buffer._gather_all()), np.arange(1, 4)[None, :] * 2 + np.arange(2)[:, None])
    leaf = buffer._store.leaves[0]
    assert np.any(leaf.numpy() != 0)
    assert int(buffer._clear(clear_all_variables=True)) == 0
    assert int(buffer._get_last_id()) == -1 and int(buffer.num_frames()) == 0
    assert not np.any(leaf.numpy())  # storage zeroed too
    assert all("Table" in v.name for v in buffer._store.leaves)  # TF-Agents' data-table name


@pytest.mark.parametrize("dataset", [False, True])
def test_global_seed_makes_two_runs_draw_identical_ids(dataset):
    """``tf.random.set_seed(s)`` before building the buffer fixes its draws, as it fixes
    TF-Agents' (whose draws are tf.random ops); another seed draws others."""

    def run(seed):
        tf.random.set_seed(seed)
        buffer = TFUniformReplayBuffer(SPEC, 2, 50)
        fill(buffer, 50)
        if dataset:
            iterator = iter(buffer.as_dataset(4, 2))
            return np.stack([next(iterator)[1].ids.numpy() for _ in range(12)])
        return np.stack([buffer.get_next(4, 2)[1].ids.numpy() for _ in range(12)])

    try:
        first, second, other = run(7), run(7), run(8)
    finally:
        tf.random.set_seed(None)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_without_any_seed_two_buffers_draw_differently():
    tf.random.set_seed(None)  # no global seed (earlier tests may have set one)
    a, b = TFUniformReplayBuffer(SPEC, 2, 50), TFUniformReplayBuffer(SPEC, 2, 50)
    fill(a, 50)
    fill(b, 50)
    assert not np.array_equal(a.get_next(64)[1].ids.numpy(), b.get_next(64)[1].ids.numpy())


def test_graph_add_with_a_wrong_static_shape_names_the_field_and_writes_nothing():
    buffer = make(batch_size=2)
    fill(buffer, 1)

    def add_with(autograph=False, **changes):
        def add():
            batch = tf_batch(1, 2)
            batch["observation"].update(changes)
            buffer.add_batch(batch)

        tf.function(add, autograph=autograph)()

    def add_with_autograph(**changes):
        add_with(autograph=True, **changes)

    with pytest.raises(replaybuf.SpecMismatchError, match=r"observation/camera: expected shape \(2, 2, 2\) uint8"):
        add_with(camera=tf.zeros((2, 2, 3), tf.uint8))
    # through autograph (tf.function's default) too: our type, our message, a ValueError
    with pytest.raises(
        replaybuf.SpecMismatchError, match=r"observation/camera: expected shape \(2, 2, 2\) uint8"
    ) as raised:
        add_with_autograph(camera=tf.zeros((2, 2, 3), tf.uint8))
    assert isinstance(raised.value, ValueError)
    with pytest.raises(
        replaybuf.SpecMismatchError,
        match="observation/position: expected dtype float32, got float64",
    ):
        add_with(position=tf.zeros((2, 3), tf.float64))
    with pytest.raises(replaybuf.SpecMismatchError, match="leading dimension"):
        add_with(camera=tf.zeros((2, 2), tf.uint8))
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        add_with(extra=tf.zeros((2,)))
    assert int(buffer.num_frames()) == 2
    assert_items_match_ids(numpy_nest(buffer.gather_all()), np.array([[0], [1]]))


def test_graph_add_safe_casts_and_checks_unknown_dims_when_run():
    buffer = make(batch_size=2)

    @tf.function(input_signature=[tf.TensorSpec([None, 2, 2], tf.uint8), tf.TensorSpec([None], tf.int32)])
    def add(camera, ids):
        batch = tf_batch(0, 2)
        batch["observation"]["camera"] = camera
        batch["id"] = ids  # int32 -> int64 is safe
        buffer.add_batch(batch)

    add(tf.constant(step_batch(0, 2)["observation"]["camera"]), tf.constant([0, 1], tf.int32))
    assert int(buffer.num_frames()) == 2
    with pytest.raises(tf.errors.InvalidArgumentError):
        add(tf.zeros((3, 2, 2), tf.uint8), tf.constant([0, 1, 2], tf.int32))
    assert int(buffer.num_frames()) == 2  # the rejected add changed nothing


def test_eager_tensor_batches_are_validated_like_numpy():
    buffer = make(batch_size=2)
    bad = tf_batch(0, 2)
    bad["observation"]["position"] = tf.zeros((2, 3), tf.float64)
    with pytest.raises(replaybuf.SpecMismatchError, match="observation/position"):
        buffer.add_batch(bad)
    with pytest.raises(replaybuf.SpecMismatchError, match=r"flag: expected shape .*got \(3,\) bool"):
        buffer.add_batch(tf_batch(0, 3))
    assert int(buffer.num_frames()) == 0


@pytest.mark.parametrize("drop", [False, True])
def test_deterministic_pass_arguments_that_would_drop_everything(drop):
    buffer = make(batch_size=2, max_length=5, dataset_drop_remainder=drop)
    with pytest.raises(replaybuf.ArgumentError, match=r"sample_batch_size \(3\) > batch_size \(2\)"):
        buffer.as_dataset(3, single_deterministic_pass=True)
    with pytest.raises(ValueError, match=r"num_steps \(6\) > max_length \(5\)"):
        buffer.as_dataset(num_steps=6, single_deterministic_pass=True)
    if drop:
        with pytest.raises(ValueError, match="ALL data will be dropped"):
            buffer.as_dataset(3, single_deterministic_pass=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_length": -1}, "max_length"),
        ({"dataset_window_shift": 0}, "dataset_window_shift"),
        ({"dataset_draw_ahead": 0}, "dataset_draw_ahead"),
        ({"dataset_draw_ahead": 2.0}, "dataset_draw_ahead"),
    ],
)
def test_constructor_arguments_are_checked(kwargs, match):
    arguments = {"batch_size": 2, "max_length": 3} | kwargs
    with pytest.raises(replaybuf.ArgumentError, match=match):
        TFUniformReplayBuffer(SPEC, **arguments)


def test_list_specs_are_structure_and_come_back_as_lists():
    """TF-Agents' own test spec: lists of specs. Items use lists where the spec does, and a
    list where the spec has a leaf is array data."""
    spec = [
        tf.TensorSpec([3], tf.float32, "action"),
        [tf.TensorSpec([5], tf.float32, "lidar"), tf.TensorSpec([2], tf.int32, "pair")],
    ]
    buffer = TFUniformReplayBuffer(spec, batch_size=2, max_length=3, seed=1)
    assert type(buffer.data_spec) is list and type(buffer.data_spec[1]) is list
    buffer.add_batch([np.ones((2, 3), np.float32), [np.full((2, 5), 2.0, np.float32), [[1, 2], [3, 4]]]])
    items, info = buffer.get_next(4, num_steps=1)
    assert type(items) is list and type(items[1]) is list
    assert items[1][1].shape == (4, 1, 2) and items[1][1].dtype == tf.int32
    gathered = buffer.gather_all()
    assert type(gathered) is list and type(gathered[1]) is list
    np.testing.assert_array_equal(gathered[1][1].numpy(), [[[1, 2]], [[3, 4]]])
    element, _ = next(iter(buffer.as_dataset(2)))  # tf.data cannot hold lists: tuples there
    assert type(element) is tuple and type(element[1]) is tuple and element[1][1].shape == (2, 2)
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        buffer.add_batch((np.ones((2, 3), np.float32), (np.ones((2, 5), np.float32), np.ones((2, 2), np.int32))))


def test_specs_and_items_through_tf_module_tracking_wrappers():
    """A spec kept as a tf.Module attribute comes back wrapped (_TupleWrapper, ListWrapper,
    _DictWrapper): as PPO's collect_data_spec does. Spec and items must read as the plain
    containers, and what comes back has the plain structure."""
    Step = collections.namedtuple("Step", ["observation", "extra"])
    holder = tf.Module()
    holder.spec = Step(
        {"position": tf.TensorSpec([3], tf.float32)},
        [tf.TensorSpec([], tf.int64), (tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.bool))],
    )
    holder.items = Step(
        {"position": np.ones((2, 3), np.float32)},
        [np.array([7, 8]), (np.zeros((2, 2), np.float32), np.array([True, False]))],
    )
    wrapped_spec, wrapped_items = holder.spec, holder.items
    assert type(wrapped_spec).__name__ == "_TupleWrapper"
    assert type(wrapped_items.observation).__name__ == "_DictWrapper"
    assert type(wrapped_items.extra).__name__ == "ListWrapper"
    buffer = TFUniformReplayBuffer(wrapped_spec, batch_size=2, max_length=3, seed=1)
    assert type(buffer.data_spec) is Step and type(buffer.data_spec.observation) is dict
    assert type(buffer.data_spec.extra) is list and type(buffer.data_spec.extra[1]) is tuple
    buffer.add_batch(wrapped_items)

    @tf.function
    def add_in_graph():
        buffer.add_batch(wrapped_items)

    add_in_graph()
    items, _ = buffer.get_next(3)
    assert type(items) is Step and type(items.observation) is dict and type(items.extra) is list
    np.testing.assert_array_equal(np.sort(np.unique(items.extra[0].numpy())), np.unique(items.extra[0].numpy()))
    assert set(np.unique(items.extra[0].numpy())) <= {7, 8}
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        buffer.add_batch(Step({"position": np.ones((2, 3), np.float32)}, [np.array([7, 8])]))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda b: b.get_next(0), "sample_batch_size"),
        (lambda b: b.get_next(2, num_steps=0), "num_steps"),
        (lambda b: b.as_dataset(2, num_parallel_calls=0), "num_parallel_calls"),
        (lambda b: b.as_dataset(-1), "sample_batch_size"),
    ],
)
def test_read_arguments_are_checked(call, match):
    buffer = make()
    fill(buffer, 2)
    with pytest.raises(replaybuf.ArgumentError, match=match):
        call(buffer)


def test_properties_and_seeded_sampling():
    a, b = make(batch_size=2, max_length=5), make(batch_size=2, max_length=5)
    assert (a.capacity, a.batch_size, a.max_length, a.device, a.stateful_dataset, a.dataset_draw_ahead) == (
        10,
        2,
        5,
        "cpu:*",
        False,
        16,
    )
    fill(a, 4)
    fill(b, 4)
    np.testing.assert_array_equal(a.get_next(16)[1].ids.numpy(), b.get_next(16)[1].ids.numpy())
    single, info = a.get_next()
    assert info.ids.shape == () and info.probabilities.shape == ()
    assert_items_match_ids(numpy_nest(single), info.ids.numpy())
    assert fields_for_ids(np.int64(3))["flag"] == np.False_


@pytest.mark.parametrize("num_parallel_calls, draw_ahead", [(3, 8), (None, 8), (None, 1)])
def test_dataset_reads_never_tear_while_an_add_loop_wraps_the_buffer(num_parallel_calls, draw_ahead):
    buffer = make(batch_size=2, max_length=3, dataset_draw_ahead=draw_ahead)  # tiny: every add overwrites
    fill(buffer, 3)
    done = threading.Event()

    def writer():
        for t in range(3, 300):
            buffer.add_batch(step_batch(t, 2))
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    iterator = iter(buffer.as_dataset(8, 2, num_parallel_calls=num_parallel_calls))
    reads = 0
    while not done.is_set() or reads < 20:
        items, info = next(iterator)
        assert_items_match_ids(numpy_nest(items), info.ids.numpy())
        reads += 1
    thread.join()


def test_sampling_skips_the_step_an_add_in_progress_is_overwriting():
    buffer = make(batch_size=2, max_length=4)
    fill(buffer, 6)  # full: steps 2..5 stored
    buffer._store.steps.assign(7)  # as if the add of step 6 had reserved its step (row 2)
    # one item per draw: a draw that hits step 2 is drawn again (a batch would wait for the add)
    firsts = {int(buffer.get_next()[1].ids) // 2 for _ in range(40)}
    assert firsts == {3, 4, 5}
    buffer._store.steps.assign(6)  # as if it had not started: step 2 is readable again
    _, info = buffer.get_next(64)
    assert 2 in (info.ids.numpy() // 2).tolist()


@pytest.mark.parametrize("draw_ahead", [1, 8])
def test_random_dataset_drops_draws_that_read_a_step_being_overwritten(draw_ahead):
    buffer = make(batch_size=2, max_length=4, dataset_draw_ahead=draw_ahead)
    fill(buffer, 6)  # full: steps 2..5 stored
    buffer._store.steps.assign(7)  # as if the add of step 6 had reserved its step (row 2)
    steps = {int(info.ids) // 2 for _, info in buffer.as_dataset().take(40)}
    assert steps == {3, 4, 5}


def test_sampling_skips_a_reserved_step_whose_write_is_not_complete():
    buffer = make(batch_size=2, max_length=4)
    fill(buffer, 2)
    buffer._store.steps.assign(3)  # step 2 reserved, its rows not written or marked yet
    ids = {int(buffer.get_next()[1].ids) // 2 for _ in range(40)}
    assert ids == {0, 1}
    assert [int(buffer.num_frames())] == [6]  # the head counts reserved steps


def test_concurrent_adds_from_threads_and_graph_loops_never_lose_or_mix_items():
    batch_size, per_thread = 2, 30
    buffer = make(batch_size=batch_size, max_length=200)
    starts = [0, 1000]  # each adder's items carry their own ids (the loop: 3000 on)
    pool = tf.nest.map_structure(
        tf.constant,
        fields_for_ids(3000 + np.arange(per_thread * batch_size).reshape(per_thread, batch_size)),
    )

    @tf.function
    def add_loop(items):
        for t in tf.range(per_thread):  # a driver's tf.while_loop
            buffer.add_batch(tf.nest.map_structure(lambda v, t=t: tf.gather(v, t), items))

    def eager_adder(start):
        for t in range(per_thread):
            buffer.add_batch(fields_for_ids(start + t * batch_size + np.arange(batch_size)))

    errors = []

    def reader():
        try:
            for _ in range(20):
                items, _ = buffer.get_next(8, 2)
                items = numpy_nest(items)
                assert_items_match_ids(items, items["id"])  # every item whole, never mixed
        except BaseException as err:  # surfaced below
            errors.append(err)

    fill(buffer, 2, start=2000)  # ids 4000-4003; readers ask for 2-step windows from the start
    threads = [threading.Thread(target=eager_adder, args=(s,)) for s in starts]
    threads += [threading.Thread(target=add_loop, args=(pool,)), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    stored = numpy_nest(buffer.gather_all())
    assert stored["id"].shape == (batch_size, 3 * per_thread + 2)
    assert_items_match_ids(stored, stored["id"])
    expected = np.concatenate(
        [s + np.arange(per_thread * batch_size) for s in (0, 1000, 3000)]
        + [2000 * batch_size + np.arange(2 * batch_size)]
    )
    np.testing.assert_array_equal(np.sort(stored["id"], axis=None), np.sort(expected))


def test_gather_all_leaves_out_a_step_whose_add_is_still_writing():
    buffer = make(batch_size=2, max_length=5)
    fill(buffer, 3)
    buffer._store.steps.assign(4)  # step 3 reserved, not written yet
    gathered = numpy_nest(buffer.gather_all())
    assert_items_match_ids(gathered, np.arange(3)[None, :] * 2 + np.arange(2)[:, None])
