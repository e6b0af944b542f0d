"""Items whose every field is derived from their id, so any read can be checked exactly."""

from __future__ import annotations

import numpy as np
import optree

from replaybuf import ArraySpec

SPEC = {
    "id": ArraySpec((), np.int64, "id"),
    "observation": {"position": ArraySpec((3,), np.float32), "camera": ArraySpec((2, 2), np.uint8)},
    "flag": ArraySpec((), np.bool_),
}


def fields_for_ids(ids: np.ndarray) -> dict:
    """The item (or batch of items) stored under ``ids``: each field a function of the id."""
    ids = np.asarray(ids, np.int64)
    position = np.stack([ids, ids + 0.5, -ids], axis=-1).astype(np.float32)
    camera = (ids[..., None, None] + np.arange(4).reshape(2, 2)) % 251
    return {
        "id": ids,
        "observation": {"position": position, "camera": camera.astype(np.uint8)},
        "flag": ids % 2 == 0,
    }


def step_batch(step: int, batch_size: int) -> dict:
    """One step of every stream: stream s of step t gets id t * batch_size + s."""
    return fields_for_ids(step * batch_size + np.arange(batch_size))


def as_numpy(items, to_numpy) -> dict:
    return optree.tree_map(lambda x: np.asarray(to_numpy(x)), items)


def assert_items_match_ids(items: dict, ids: np.ndarray) -> None:
    """Every field of every returned item is the one stored under its id (no torn reads)."""
    ids = np.asarray(ids)
    np.testing.assert_array_equal(items["id"], ids)
    expected = fields_for_ids(ids)
    for path, got, want in zip(*_flat_pairs(items, expected), strict=True):
        np.testing.assert_array_equal(got, want, err_msg=path)


def _flat_pairs(a: dict, b: dict):
    paths, got = optree.tree_flatten_with_path(a)[:2]
    want = optree.tree_leaves(b)
    return ["/".join(map(str, p)) for p in paths], got, want
