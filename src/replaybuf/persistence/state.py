"""The pieces of the ``state_dict()`` / ``load_state_dict()`` protocol that buffers share.

A state is plain (dicts with string keys, lists, NumPy arrays, JSON scalars) so that
:mod:`replaybuf.persistence.folder` maps it onto a folder of ``.npy`` files and a JSON
manifest. Loading validates everything first and raises
:class:`~replaybuf.errors.CheckpointError` before anything changes, so a rejected state
leaves the buffer as it was. The NumPy, torch and MindSpore-style buffers validate their
common keys (``spec``, geometry, ``steps``, ``items``) here, with one set of rules; the header
(what a state holds, and whether a buffer can hold it) is :mod:`replaybuf.persistence.header`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec

__all__ = [
    "ID_ROOM",
    "MAX_ID",
    "SPEC_KEYS",
    "check_items",
    "check_rng_state",
    "check_spec_state",
    "first_stored_step",
    "max_steps",
    "plain_equal",
    "read_run",
    "require",
    "ring_views",
    "spec_state",
]

MAX_ID = 2**63 - 1  # ids are int64
ID_ROOM = 2**62  # a loaded or reopened buffer's ids stay below this: room for 2**62 more


def max_steps(streams: int) -> int:
    """The most ``steps`` a loaded or reopened buffer of ``streams`` streams may hold: its ids
    (steps x streams) stay below 2**62, so 2**62 more ids fit in int64 before any overflow."""
    return ID_ROOM // max(1, streams)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def plain_equal(value: Any, expected: Any) -> bool:
    """Whether ``value`` (from a state: anything) equals the plain ``expected`` (dicts, lists,
    JSON scalars): the same types all the way down, so an array or an object with an odd
    ``__eq__`` compares unequal instead of raising, and ``True`` is not ``1``."""
    if isinstance(expected, dict):
        return (
            isinstance(value, dict)
            and value.keys() == expected.keys()
            and all(plain_equal(value[k], v) for k, v in expected.items())
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(expected)
            and all(plain_equal(a, b) for a, b in zip(value, expected, strict=True))
        )
    if isinstance(expected, bool) or isinstance(value, bool):
        return type(value) is type(expected) and value == expected
    if isinstance(expected, (int, float, str)) or expected is None:
        return type(value) in (int, float, str, type(None)) and type(value) is type(expected) and value == expected
    return False


def require(state: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    """``state[key]``, which must be of ``kind``; CheckpointError naming the key otherwise."""
    if not isinstance(state, dict):
        raise CheckpointError(f"state: expected a dict, got {type(state).__name__}")
    if key not in state:
        raise CheckpointError(f"state: missing key {key!r}")
    value = state[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(f"state[{key!r}]: expected {_kind_name(kind)}, got {type(value).__name__}")
    return value


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


SPEC_KEYS = ("structure", "shapes", "dtypes")  # what must match; paths and names are for people


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
    if not isinstance(state, dict) or not all(plain_equal(state.get(k), mine[k]) for k in SPEC_KEYS):
        raise CheckpointError(
            f"state['spec']: the checkpoint holds items of another data_spec: saved {_describe(state)}, "
            f"this buffer has {_describe(mine)}"
        )


def check_rng_state(rng: np.random.Generator, state: Any) -> dict:
    """``state`` as a state of ``rng``'s bit generator that its setter takes as is (plain
    ints); CheckpointError unless it is one that generator could have produced.

    PCG64 (every NumPy buffer's generator) is checked value by value: ``state`` and ``inc``
    in [0, 2**128) with ``inc`` odd, ``has_uint32`` 0 or 1, ``uinteger`` in [0, 2**32).
    Another bit generator's state must be taken by its own setter and read back equal.
    """
    name = type(rng.bit_generator).__name__
    if not isinstance(state, dict):
        raise CheckpointError(f"state['rng']: expected a {name} state (a dict), got {type(state).__name__}")
    if name == "PCG64":
        return _check_pcg64(state)
    clean = _plain_ints(state)
    try:
        probe = type(rng.bit_generator)()
        probe.state = clean
        same = plain_equal(probe.state, clean)
    except Exception as err:  # the bit generator's own setter: any refusal is a corrupt state
        raise CheckpointError(f"state['rng']: not a {name} state ({err})") from None
    if not same:
        raise CheckpointError(f"state['rng']: not a {name} state (a value is out of its range)")
    return clean


_PCG64_FIELDS = {"state": 2**128, "inc": 2**128}


def _check_pcg64(state: dict) -> dict:
    def integer(where: str, value: Any, end: int) -> int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < end:
            raise CheckpointError(f"state['rng']{where}: expected an int in [0, {end}), got {value!r:.60}")
        return int(value)

    keys = {"bit_generator", "state", "has_uint32", "uinteger"}
    if set(state) != keys or not plain_equal(state["bit_generator"], "PCG64"):
        raise CheckpointError(
            "state['rng']: expected a PCG64 state {'bit_generator': 'PCG64', 'state': {'state', 'inc'}, "
            f"'has_uint32', 'uinteger'}}, got keys {sorted(map(str, state))} ({state.get('bit_generator')!r:.40})"
        )
    inner = state["state"]
    if not isinstance(inner, dict) or set(inner) != set(_PCG64_FIELDS):
        raise CheckpointError(f"state['rng']['state']: expected {{'state', 'inc'}}, got {inner!r:.80}")
    values = {key: integer(f"['state'][{key!r}]", inner[key], end) for key, end in _PCG64_FIELDS.items()}
    if not values["inc"] % 2:
        raise CheckpointError(
            f"state['rng']['state']['inc']: expected an odd int (PCG64's increment), got {values['inc']}"
        )
    return {
        "bit_generator": "PCG64",
        "state": values,
        "has_uint32": integer("['has_uint32']", state["has_uint32"], 2),
        "uinteger": integer("['uinteger']", state["uinteger"], 2**32),
    }


def _plain_ints(value: Any) -> Any:
    """``value`` with NumPy integers as Python ints (what the bit generators' setters take)."""
    if isinstance(value, dict):
        return {k: _plain_ints(v) for k, v in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


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
    """A data_spec state in words, whatever it holds (never raises: it names a bad one)."""
    if not isinstance(spec, dict):
        return f"{spec!r:.120}"
    columns = [spec.get(key) for key in ("paths", "shapes", "dtypes")]
    if not all(isinstance(column, list) for column in columns):
        return f"{spec!r:.200}"
    leaves = ", ".join(f"{p}: {_describe_shape(s)} {_describe_dtype(d)}" for p, s, d in zip(*columns, strict=False))
    return f"{spec.get('structure')!s:.200} [{leaves}]"


def _describe_shape(shape: Any) -> str:
    if isinstance(shape, list) and all(isinstance(n, int) for n in shape):
        return str(tuple(shape))
    return f"{shape!r:.40} (not a shape)"


def _describe_dtype(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name if isinstance(dtype, str) else f"{dtype!r:.40} (not a dtype)"
    except Exception:  # NumPy's parser of dtype strings: anything it refuses is not a dtype
        return f"{dtype!r:.40} (not a dtype)"
