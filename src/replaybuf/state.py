"""The pieces of the ``state_dict()`` / ``load_state_dict()`` protocol that buffers share.

A state is plain (dicts with string keys, lists, NumPy arrays, JSON scalars) so that
:mod:`replaybuf.checkpoint` maps it onto a folder of ``.npy`` files and a JSON manifest.
Loading validates everything first and raises :class:`~replaybuf.errors.CheckpointError`
before anything changes, so a rejected state leaves the buffer as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.checkpoint import ArrayRun, StoredArray
from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec

__all__ = [
    "check_rng_state", "check_spec_state", "read_run", "require", "ring_views", "spec_state", "view_run", "write_run",
]


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


def view_run(fields: Sequence[np.ndarray], start: int, count: int) -> list[ArrayRun]:
    """Like ``read_run`` but without copying: what ``save`` streams to disk under the lock."""
    return [ArrayRun(ring_views(field, start, count)) for field in fields]


def write_run(storage: Any, start: int, leaves: Sequence[np.ndarray | StoredArray]) -> None:
    """Write ``leaves`` (rows in id order) to ``storage`` from slot ``start``, wrapping once.

    Arrays go through ``storage.write``; a :class:`StoredArray` (a lazily loaded checkpoint
    file) is read straight into views of the storage's fields, verified while reading.

    Raises:
        CheckpointError: a stored file turned out truncated or corrupt; the rows written
            so far are garbage and the caller must discard them.
    """
    if all(isinstance(leaf, np.ndarray) for leaf in leaves):
        storage.write(start, leaves)
        return
    for field, leaf in zip(storage.fields, leaves, strict=True):
        views = ring_views(field, start, leaf.shape[0])
        if isinstance(leaf, StoredArray):
            leaf.read_into(ArrayRun(views))
        else:
            _assign(views, leaf)


def _assign(views: list[np.ndarray], rows: np.ndarray) -> None:
    done = 0
    for view in views:
        view[...] = rows[done : done + len(view)]
        done += len(view)


def _describe(spec: Any) -> str:
    if not isinstance(spec, dict):
        return repr(spec)
    columns = zip(spec.get("paths", []), spec.get("shapes", []), spec.get("dtypes", []), strict=False)
    leaves = ", ".join(f"{p}: {tuple(s)} {np.dtype(d).name}" for p, s, d in columns)
    return f"{spec.get('structure')} [{leaves}]"
