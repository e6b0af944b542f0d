"""The pieces of the ``state_dict()`` / ``load_state_dict()`` protocol that buffers share.

A state is plain (dicts with string keys, lists, NumPy arrays, JSON scalars) so that
:mod:`replaybuf.persistence.folder` maps it onto a folder of ``.npy`` files and a JSON
manifest. Loading validates everything first and raises
:class:`~replaybuf.errors.CheckpointError` before anything changes, so a rejected state
leaves the buffer as it was. The NumPy, torch and MindSpore-style buffers validate their
common keys (``class``, ``spec``, geometry, ``steps``, ``items``) here, with one set of rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec

__all__ = [
    "check_header", "check_items", "check_rng_state", "check_spec_state", "first_stored_step", "read_run",
    "require", "ring_views", "spec_state",
]

_MAX_ID = 2**63 - 1  # ids are int64


def require(state: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    """``state[key]``, which must be of ``kind``; CheckpointError naming the key otherwise."""
    if not isinstance(state, dict):
        raise CheckpointError(f"state: expected a dict, got {type(state).__name__}")
    if key not in state:
        raise CheckpointError(f"state: missing key {key!r}")
    value = state[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(f"state[{key!r}]: expected {kind}, got {type(value).__name__}")
    return value


def check_header(state: Any, class_name: str, flat: FlatSpec, geometry: dict[str, int]) -> int:
    """The ``steps`` of a state saved by a ``class_name`` buffer of ``flat``'s spec and this
    ``geometry`` (key -> size, e.g. batch_size and max_length); CheckpointError otherwise."""
    if require(state, "class", str) != class_name:
        raise CheckpointError(f"state: saved from a {state['class']}, cannot load into a {class_name}")
    check_spec_state(flat, require(state, "spec", dict))
    for key, mine in geometry.items():
        if require(state, key, int) != mine:
            raise CheckpointError(f"state[{key!r}]: saved {state[key]}, this buffer has {mine}")
    steps = require(state, "steps", int)
    largest = _MAX_ID // max(geometry.values(), default=1)  # every id (steps x streams) stays an int64
    if not 0 <= steps <= largest:
        raise CheckpointError(f"state['steps']: expected an int in [0, {largest}] (ids are int64), got {steps}")
    return steps


def check_items(
    flat: FlatSpec, state: Any, indices: Sequence[int], kinds: tuple[type, ...], dtypes: Any = None
) -> list:
    """The leaves ``state['items'][str(i)]`` for ``i`` in ``indices``: each one of ``kinds``,
    shaped ``(count, *spec.shape)`` with one count for all, of the spec's dtype (or one of
    ``dtypes(spec)``, e.g. its torch twin); CheckpointError naming the field otherwise."""
    items = require(state, "items", dict)
    leaves = [items.get(str(i)) for i in indices]
    count = leaves[0].shape[0] if leaves and isinstance(leaves[0], kinds) and len(leaves[0].shape) else 0
    for leaf, index in zip(leaves, indices, strict=True):
        spec, path = flat.leaves[index], flat.paths[index]
        allowed = (spec.dtype,) if dtypes is None else dtypes(spec)
        if not isinstance(leaf, kinds) or tuple(leaf.shape) != (count, *spec.shape) or leaf.dtype not in allowed:
            got = f"{tuple(leaf.shape)} {leaf.dtype}" if isinstance(leaf, kinds) else type(leaf).__name__
            raise CheckpointError(f"state['items'] {path}: expected ({count}, *{spec.shape}) {spec.dtype}, got {got}")
    return leaves


def first_stored_step(steps: int, count: int, batch_size: int, max_length: int, crash_safe: bool) -> int:
    """The first step of ``count`` stored items when ``steps`` were added to ``batch_size``
    streams of ``max_length``. It may be above the oldest step a full ring keeps (the oldest
    items were lost in a crash) only for a ``crash_safe`` storage, which keeps that floor.
    CheckpointError when the count does not fit."""
    first = steps - count // batch_size
    oldest = max(0, steps - max_length)
    if count % batch_size or not oldest <= first <= steps:
        raise CheckpointError(f"state: {count} items do not fit steps={steps} of this buffer's streams")
    if first > oldest and not crash_safe:
        raise CheckpointError(
            f"state: its oldest items were lost in a crash ({count} items for steps={steps}); "
            "load it into storage='memmap'"
        )
    return first


def spec_state(flat: FlatSpec) -> dict:
    """The data_spec as plain values: nest structure, field paths, shapes, dtypes, names."""
    return {
        "structure": str(flat.treespec),
        "paths": list(flat.paths),
        "shapes": [list(leaf.shape) for leaf in flat.leaves],
        "dtypes": [leaf.dtype.str for leaf in flat.leaves],
        "names": [leaf.name for leaf in flat.leaves],
    }


def check_spec_state(flat: FlatSpec, state: Any) -> None:
    """Raise CheckpointError unless ``state`` (from spec_state) describes ``flat``'s spec."""
    mine = spec_state(flat)
    if not isinstance(state, dict) or any(state.get(k) != mine[k] for k in ("structure", "shapes", "dtypes")):
        raise CheckpointError(
            f"the checkpoint holds items of another data_spec: saved {_describe(state)}, "
            f"this buffer has {_describe(mine)}"
        )


def check_rng_state(rng: np.random.Generator, state: Any) -> None:
    """Raise CheckpointError unless ``state`` is a valid state of ``rng``'s bit generator."""
    try:
        type(rng.bit_generator)().state = state
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"state['rng']: not a {type(rng.bit_generator).__name__} state ({err})") from None


def read_run(fields: Sequence[np.ndarray], start: int, count: int) -> list[np.ndarray]:
    """Contiguous copies of ``count`` rows of each field from slot ``start``, wrapping once."""
    capacity = len(fields[0]) if fields else 0
    end = start + count
    if end <= capacity:
        return [np.array(field[start:end]) for field in fields]
    return [np.concatenate([field[start:], field[: end - capacity]]) for field in fields]


def ring_views(field: np.ndarray, start: int, count: int) -> list[np.ndarray]:
    """The views of ``count`` rows of ``field`` from slot ``start``, wrapping once (1 or 2)."""
    end = start + count
    if end <= len(field):
        return [field[start:end]]
    return [field[start:], field[: end - len(field)]]


def _describe(spec: Any) -> str:
    if not isinstance(spec, dict):
        return repr(spec)
    columns = zip(spec.get("paths", []), spec.get("shapes", []), spec.get("dtypes", []), strict=False)
    leaves = ", ".join(f"{p}: {tuple(s)} {np.dtype(d).name}" for p, s, d in columns)
    return f"{spec.get('structure')} [{leaves}]"
