"""Hostile states: every refused ``load_state_dict`` raises CheckpointError naming the key and
leaves the buffer equal to an untouched twin (issue 18, classes 1-3: loads that were not
atomic, values no valid buffer holds, malformed metadata raising other exceptions).

Each edit below breaks one key of a real ``state_dict()`` (a buffer of the same kind with
other content); it runs on every buffer kind it applies to (tests/hostile_buffers.py).
"""

from __future__ import annotations

import numpy as np
import optree
import pytest

from conformance_data import fields_for_ids, step_batch
from hostile_buffers import KINDS, assert_twins, source_state, twins
from replaybuf.errors import CheckpointError, ReplayBufferError
from replaybuf.samplers.sumtree import MAX_MASS, MIN_MASS

ALL = tuple(KINDS)
MINDSPORE = ("mindspore",)
STREAMS = tuple(k for k in ALL if k not in MINDSPORE)
TORCH = ("torch", "torch-py", "mindspore")
NUMPY = tuple(k for k in ALL if k not in TORCH)
PRIORITIZED = ("prioritized", "episodes")
EPISODES = ("episodes", "uniform-episodes")


def _item_key(state):
    return sorted(state["items"])[0]


def _retype_item(state, dtype):
    key = _item_key(state)
    leaf = state["items"][key]
    if hasattr(leaf, "numpy"):  # a tensor: keep it a tensor
        import torch

        state["items"][key] = leaf.to({"float64": torch.float64, "int8": torch.int8}[dtype])
    else:
        state["items"][key] = leaf.astype(dtype)


def _object_item(state):
    key = _item_key(state)
    leaf = np.asarray(state["items"][key].cpu() if hasattr(state["items"][key], "cpu") else state["items"][key])
    state["items"][key] = leaf.astype(object)


def _sparse_item(state):
    key = _item_key(state)
    state["items"][key] = state["items"][key].to_sparse()


def _set(*path, value):
    def edit(state):
        node = state
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value(node[path[-1]]) if callable(value) else value

    return edit


def _pop(*path):
    def edit(state):
        node = state
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1])

    return edit


def _whole(value):
    return lambda state: value


def _mass(value):
    def edit(state):
        state["priorities"]["mass"][1] = value

    return edit


def _torch_rng(change):
    def edit(state):
        import torch

        state["rng"] = change(state["rng"].clone(), torch)

    return edit


def _flat_rng(state, torch):
    rng = state.clone()
    rng.fill_(255)
    return rng


def _position(change):
    def edit(state):
        position = state["episodes"]["position"]
        stored = np.flatnonzero(position)  # a slot of a stored item past its episode's start
        change(position, int(stored[-1]))

    return edit


def _fewer_steps(state):
    """One step fewer than the stored items need (a first step below 0)."""
    count = len(state["items"][_item_key(state)])
    state["steps"] = count // state.get("batch_size", 1) - 1


def _frames_pointer_out_of_pool(state):
    frames = state["frames"]
    key = sorted(frames["pointers"])[0]
    frames["pointers"][key][0, 0] = 10**6


def _frames_floor_above(state):
    state["frames"]["floors"][-1] = 10**6


# (name, kinds, edit, what the message must name)
EDITS = [
    # class 1 and 3: malformed types and metadata
    ("not a dict", ALL, _whole([1, 2]), r"state: expected a dict"),
    ("header missing", ALL, _pop("checkpoint"), r"missing key 'checkpoint'"),
    ("header a list", ALL, _set("checkpoint", value=[2]), r"state\['checkpoint'\]"),
    ("header of a newer version", ALL, _set("checkpoint", "version", value=3), r"state\['checkpoint'\]\['version'\]"),
    ("header version a bool", ALL, _set("checkpoint", "version", value=True), r"state\['checkpoint'\]"),
    ("header extra key", ALL, _set("checkpoint", "class", value="X"), r"state\['checkpoint'\]"),
    ("header saved_by an int", ALL, _set("checkpoint", "saved_by", value=1), r"state\['checkpoint'\]"),
    ("header rng unknown", ALL, _set("checkpoint", "rng", value="MT19937"), r"state\['checkpoint'\]\['rng'\]"),
    ("header part a str", ALL, _set("checkpoint", "frames", value="no"), r"state\['checkpoint'\]\['frames'\]"),
    ("header flips the limiter", ALL, _set("checkpoint", "rate_limiter", value=lambda v: not v), r"'rate_limiter'"),
    ("items a list", ALL, _set("items", value=lambda items: list(items.values())), r"state\['items'\]"),
    ("items missing", ALL, _pop("items"), r"'items'"),
    ("item dtype", ALL, lambda s: _retype_item(s, "float64"), r"state\['items'\]"),
    ("item of objects", ALL, _object_item, r"state\['items'\]"),
    ("item rows cut", ALL, _set("items", value=lambda items: {k: v[:-1] for k, v in items.items()}), r"items"),
    ("sparse item tensor", TORCH, _sparse_item, r"state\['items'\].*dense"),
    ("spec dtypes zz", ALL, _set("spec", "dtypes", value=lambda d: ["zz"] * len(d)), r"state\['spec'\].*not a dtype"),
    ("spec shapes [7]", ALL, _set("spec", "shapes", value=lambda s: [7] * len(s)), r"state\['spec'\].*not a shape"),
    ("spec shapes array", ALL, _set("spec", "shapes", value=lambda s: np.arange(len(s))), r"state\['spec'\]"),
    ("spec structure array", ALL, _set("spec", "structure", value=np.arange(3)), r"state\['spec'\]"),
    ("spec a string", ALL, _set("spec", value="spec"), r"state\['spec'\]"),
    ("spec missing", ALL, _pop("spec"), r"missing key 'spec'"),
    ("rng missing", NUMPY, _pop("rng"), r"missing key 'rng'"),
    ("rng a string", NUMPY, _set("rng", value="PCG64"), r"state\['rng'\]"),
    ("rng another generator", NUMPY, _set("rng", "bit_generator", value="MT19937"), r"state\['rng'\]"),
    ("rng state -1", NUMPY, _set("rng", "state", "state", value=-1), r"state\['rng'\]\['state'\]\['state'\]"),
    ("rng inc 2**200", NUMPY, _set("rng", "state", "inc", value=2**200), r"state\['rng'\]\['state'\]\['inc'\]"),
    ("rng inc even", NUMPY, _set("rng", "state", "inc", value=2), r"state\['rng'\]\['state'\]\['inc'\].*odd"),
    ("rng state float", NUMPY, _set("rng", "state", "state", value=1.5), r"state\['rng'\]\['state'\]\['state'\]"),
    ("rng has_uint32 -1", NUMPY, _set("rng", "has_uint32", value=-1), r"state\['rng'\]\['has_uint32'\]"),
    ("rng has_uint32 2**200", NUMPY, _set("rng", "has_uint32", value=2**200), r"state\['rng'\]\['has_uint32'\]"),
    ("rng uinteger 2**32", NUMPY, _set("rng", "uinteger", value=2**32), r"state\['rng'\]\['uinteger'\]"),
    ("rng uinteger -1", NUMPY, _set("rng", "uinteger", value=-1), r"state\['rng'\]\['uinteger'\]"),
    ("torch rng cut", TORCH, _torch_rng(lambda rng, torch: rng[:-1]), r"state\['rng'\]"),
    ("torch rng float", TORCH, _torch_rng(lambda rng, torch: rng.float()), r"state\['rng'\]"),
    ("torch rng invalid", TORCH, _torch_rng(_flat_rng), r"state\['rng'\]"),
    ("torch rng a dict", TORCH, _set("rng", value={"state": 1}), r"state\['rng'\]"),
    ("torch rng objects", TORCH, _set("rng", value=lambda rng: rng.numpy().astype(object)), r"state\['rng'\]"),
    ("torch rng read-only", TORCH, _torch_rng(lambda rng, torch: rng[:-1].numpy().copy()), r"state\['rng'\]"),
    (
        "priorities missing",
        PRIORITIZED,
        _pop("priorities"),
        r"state\[.checkpoint.\]\[.priorities.\]: says True, but the state has no .priorities.",
    ),
    ("priorities a list", PRIORITIZED, _set("priorities", value=[1.0]), r"state\['priorities'\]"),
    ("mass strings", PRIORITIZED, _set("priorities", "mass", value=lambda m: m.astype("U8")), r"\['mass'\]"),
    ("mass complex", PRIORITIZED, _set("priorities", "mass", value=lambda m: m.astype(complex)), r"\['mass'\]"),
    ("mass objects", PRIORITIZED, _set("priorities", "mass", value=lambda m: m.astype(object)), r"\['mass'\]"),
    ("mass a list", PRIORITIZED, _set("priorities", "mass", value=lambda m: m.tolist()), r"\['mass'\]"),
    ("mass 2-d", PRIORITIZED, _set("priorities", "mass", value=lambda m: m[:, None]), r"\['mass'\]"),
    ("mass one short", PRIORITIZED, _set("priorities", "mass", value=lambda m: m[1:]), r"\['mass'\]"),
    ("episodes missing", EPISODES, _pop("episodes"), r"\[.episodes.\]: says True, but the state has no .episodes."),
    ("ended objects", EPISODES, _set("episodes", "ended", value=lambda e: e.astype(object)), r"\['ended'\]"),
    ("position floats", EPISODES, _set("episodes", "position", value=lambda p: p.astype(float)), r"\['position'\]"),
    ("last missing", EPISODES, _pop("episodes", "last"), r"state\['episodes'\]"),
    ("episodes extra key", EPISODES, _set("episodes", "extra", value=np.zeros(2)), r"state\['episodes'\]"),
    ("frames missing", ("frames",), _pop("frames"), r"\[.frames.\]: says True, but the state has no .frames."),
    ("frames pool dtype", ("frames",), _set("frames", "pool", value=lambda p: p.astype(np.int16)), r"\['pool'\]"),
    ("frames axes array", ("frames",), _set("frames", "axes", value=lambda a: np.array(a * 2)), r"\['axes'\]"),
    ("frames pointer keys", ("frames",), _set("frames", "pointers", value=lambda p: {1: 2, "x": 3}), r"\['pointers'\]"),
    (
        "limiter missing",
        ("limited",),
        _pop("rate_limiter"),
        r"\[.rate_limiter.\]: says True, but the state has no .rate_limiter.",
    ),
    ("limiter config", ("limited",), _set("rate_limiter", "samples_per_insert", value="1"), r"samples_per_insert"),
    # class 2: values no valid buffer could have produced
    ("steps 2**70", ALL, _set("steps", value=2**70), r"state\['steps'\]"),
    ("steps 2**62 + 1", ALL, _set("steps", value=2**62 + 1), r"state\['steps'\]"),
    ("steps -1", ALL, _set("steps", value=-1), r"state\['steps'\]"),
    ("steps True", ALL, _set("steps", value=True), r"state\['steps'\]"),
    ("steps a float", ALL, _set("steps", value=4.0), r"state\['steps'\]"),
    ("steps below the items", ALL, lambda s: _fewer_steps(s), r"steps"),
    ("geometry", STREAMS, _set("max_length", value=lambda n: n + 1), r"state\['max_length'\]"),
    ("geometry", MINDSPORE, _set("capacity", value=lambda n: n + 1), r"state\['capacity'\]"),
    ("head off", MINDSPORE, _set("head", value=lambda n: n + 1), r"state\['head'\]"),
    ("count off", MINDSPORE, _set("count", value=lambda n: n - 1), r"state\['count'\]"),
    ("mass nan", PRIORITIZED, _mass(np.nan), r"\['mass'\].*finite"),
    ("mass negative", PRIORITIZED, _mass(-1.0), r"\['mass'\]"),
    ("mass zero", PRIORITIZED, _mass(0.0), r"\['mass'\]"),
    ("mass inf", PRIORITIZED, _mass(np.inf), r"\['mass'\]"),
    ("mass below the range", PRIORITIZED, _mass(MIN_MASS / 4), r"\['mass'\]"),
    ("mass above the range", PRIORITIZED, _mass(MAX_MASS * 4), r"\['mass'\]"),
    ("max_priority nan", PRIORITIZED, _set("priorities", "max_priority", value=np.nan), r"\['max_priority'\]"),
    ("max_priority negative", PRIORITIZED, _set("priorities", "max_priority", value=-2.0), r"\['max_priority'\]"),
    ("max_priority zero", PRIORITIZED, _set("priorities", "max_priority", value=0.0), r"\['max_priority'\]"),
    ("max_priority inf", PRIORITIZED, _set("priorities", "max_priority", value=np.inf), r"\['max_priority'\]"),
    ("max_priority True", PRIORITIZED, _set("priorities", "max_priority", value=True), r"\['max_priority'\]"),
    ("max_priority a string", PRIORITIZED, _set("priorities", "max_priority", value="1.0"), r"\['max_priority'\]"),
    ("position negative", EPISODES, _position(lambda p, i: p.__setitem__(i, -1)), r"\['position'\]"),
    ("position jumps", EPISODES, _position(lambda p, i: p.__setitem__(i, 3)), r"\['position'\]"),
    (
        "position 2**64 - 1",
        EPISODES,
        _set("episodes", "position", value=lambda p: np.full(p.shape, 2**64 - 1, np.uint64)),
        r"\['position'\]",
    ),
    ("last off", EPISODES, _set("episodes", "last", value=lambda last: last + 1), r"\['last'\]"),
    ("frames pointer outside the pool", ("frames",), _frames_pointer_out_of_pool, r"\['pointers'\]"),
    ("frames floor above a frame", ("frames",), _frames_floor_above, r"\['floors'\]"),
    ("limiter inserts 2**70", ("limited",), _set("rate_limiter", "inserts", value=2**70), r"'inserts'"),
    ("limiter inserts -1", ("limited",), _set("rate_limiter", "inserts", value=-1), r"'inserts'"),
    ("limiter deletes > inserts", ("limited",), _set("rate_limiter", "deletes", value=10**6), r"deletes"),
]

CASES = [pytest.param(kind, edit, match, id=f"{kind}-{name}") for name, kinds, edit, match in EDITS for kind in kinds]


@pytest.mark.parametrize(("kind", "edit", "match"), CASES)
def test_a_hostile_state_is_refused_and_changes_nothing(kind, edit, match, tmp_path):
    if KINDS[kind].torch:
        pytest.importorskip("torch")
    buffer, twin = twins(kind, tmp_path)
    state = source_state(kind, tmp_path)
    state = edit(state) or state
    with pytest.raises(CheckpointError, match=match) as caught:
        buffer.load_state_dict(state)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ReplayBufferError)
    assert_twins(buffer, twin)


@pytest.mark.parametrize("kind", ALL)
def test_the_untouched_source_state_loads(kind, tmp_path):
    """The edits above start from a state that loads: each refusal is the edit's."""
    if KINDS[kind].torch:
        pytest.importorskip("torch")
    buffer, _ = twins(kind, tmp_path)
    source, expected = source_state(kind, tmp_path), None
    buffer.load_state_dict(source)
    expected = source_state(kind, tmp_path)
    from hostile_buffers import assert_equal_trees, plain

    assert_equal_trees(plain(buffer.state_dict()), plain(expected))


def test_the_priorities_are_not_applied_before_the_items_are_checked():
    """Issue 18's example: a mass array of strings was found after the items were replaced."""
    buffer, twin = twins("prioritized")
    state = source_state("prioritized")
    state["priorities"]["mass"] = np.array(["x"] * len(state["priorities"]["mass"]))
    with pytest.raises(CheckpointError, match=r"\['mass'\]"):
        buffer.load_state_dict(state)
    assert_twins(buffer, twin)
    buffer.get_next(4)  # still samples


def test_a_state_at_the_largest_steps_loads_and_keeps_working():
    """``steps`` up to 2**62 // batch_size loads, and the buffer adds and samples on from there:
    every id drawn is one still stored, and its items are the ones stored under it."""
    buffer, _ = twins("uniform")
    state = source_state("uniform")
    largest = state["steps"] = 2**62 // 2
    buffer.load_state_dict(state)
    loaded = [state["items"][str(k)] for k in range(4)]  # flat leaves of ids (largest - 5) * 2 on
    for steps in range(largest + 1, largest + 4):
        buffer.add_batch(step_batch(0, 2))
        items, info = buffer.get_next(64, 2)
        ids = info.ids
        assert ids.dtype == np.int64 and ids.min() >= (steps - 5) * 2 and ids.max() <= steps * 2 - 1
        np.testing.assert_array_equal(ids[:, 1] - ids[:, 0], 2)
        new = ids >= largest * 2  # added here: step_batch(0, 2)'s items, by stream
        fresh = optree.tree_leaves(fields_for_ids(ids % 2))
        before = np.clip(ids - (largest - 5) * 2, 0, 9)
        for got, added, old in zip(optree.tree_leaves(items), fresh, loaded, strict=True):
            np.testing.assert_array_equal(
                got, np.where(new.reshape(new.shape + (1,) * (added.ndim - 2)), added, old[before])
            )


@pytest.mark.parametrize("kind", ["torch", "mindspore"])
def test_a_torch_state_with_a_read_only_generator_array_loads(kind):
    """The generator state as a NumPy array (as ``load`` reads it), even a read-only one."""
    pytest.importorskip("torch")
    buffer, _ = twins(kind)
    state = source_state(kind)
    rng = state["rng"].numpy().copy()
    rng.flags.writeable = False
    state["rng"] = rng
    buffer.load_state_dict(state)
    from hostile_buffers import assert_equal_trees, plain

    assert_equal_trees(plain(buffer.state_dict()), plain(source_state(kind)))
