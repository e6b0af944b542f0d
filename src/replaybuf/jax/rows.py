"""Packed rows: all the leaves of one item side by side, as uint32 words in one row.

The JAX core stores its items in one array ``[max_length, batch_size, words]`` instead of
one array per leaf: a sample reads items at random slots, and with one array per leaf each
leaf is its own gather with its own cache misses, where one row holds the whole item (half
the read time for five small leaves on CPU: docs/jax.md).
An add is still one contiguous write, now one for all leaves.

A leaf whose bytes fill whole words takes ``nbytes / 4`` words of the row (in spec order);
the leaves whose bytes do not (a bool, three uint8) share the row's last words as bytes.
Packing is a bit cast, never a conversion: every value comes back bit for bit (NaN
payloads, -0.0). bool is stored as one byte 0/1, complex as its real and imaginary parts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["RowLayout", "pack", "row_layout", "unpack"]

_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


@dataclasses.dataclass(frozen=True)
class Field:
    """Where one leaf lies in a row: ``start`` and ``size`` in words, or in bytes of the
    byte tail when ``in_tail``. ``unit``: the bytes of one stored number (a complex number
    is two)."""

    shape: tuple
    dtype: np.dtype
    unit: int
    start: int
    size: int
    in_tail: bool

    @property
    def count(self) -> int:
        """How many numbers of ``unit`` bytes the leaf stores (explicit sizes in every reshape:
        a ``-1`` cannot be inferred when there are no items)."""
        return (self.size if self.in_tail else 4 * self.size) // self.unit


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """The fields of a row of ``words`` uint32 words; the byte tail starts at word ``tail``."""

    fields: tuple[Field, ...]
    words: int
    tail: int


def row_layout(shapes: Sequence[tuple], dtypes: Sequence[np.dtype]) -> RowLayout:
    """The packed row of items with leaves of these shapes and (storage) dtypes."""
    fields: list[tuple] = []
    word = tail_bytes = 0
    for shape, dtype in zip(shapes, dtypes, strict=True):
        dtype = np.dtype(dtype)
        unit = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes % 4 == 0:
            fields.append((tuple(shape), dtype, unit, word, nbytes // 4, False))
            word += nbytes // 4
        else:
            fields.append((tuple(shape), dtype, unit, tail_bytes, nbytes, True))
            tail_bytes += nbytes
    return RowLayout(tuple(Field(*f) for f in fields), word + -(-tail_bytes // 4), word)


def _units(leaf: jax.Array, field: Field, lead: tuple) -> jax.Array:
    """``leaf`` ``[*lead, *shape]`` as unsigned ints of ``field.unit`` bytes, ``[*lead, n]``."""
    if field.dtype == np.bool_:
        leaf = leaf.astype(jnp.uint8)
    elif field.dtype.kind == "c":
        leaf = jnp.stack([jnp.real(leaf), jnp.imag(leaf)], axis=-1)
    if field.dtype != np.bool_:
        leaf = lax.bitcast_convert_type(leaf, _UNSIGNED[field.unit])
    return leaf.reshape(*lead, field.count)


def _leaf(units: jax.Array, field: Field, lead: tuple) -> jax.Array:
    """The inverse of ``_units``: ``[*lead, n]`` unsigned ints back to ``[*lead, *shape]``."""
    if field.dtype == np.bool_:
        return (units != 0).reshape(*lead, *field.shape)
    if field.dtype.kind == "c":
        parts = lax.bitcast_convert_type(units.reshape(*lead, *field.shape, 2), np.dtype(f"f{field.unit}"))
        return lax.complex(parts[..., 0], parts[..., 1])
    return lax.bitcast_convert_type(units, field.dtype).reshape(*lead, *field.shape)


def _to_words(units: jax.Array, field: Field, lead: tuple) -> jax.Array:
    if field.unit == 4:
        return units
    if field.unit == 8:  # [..., n] -> [..., n, 2] -> [..., 2n]
        return lax.bitcast_convert_type(units, jnp.uint32).reshape(*lead, field.size)
    return lax.bitcast_convert_type(units.reshape(*lead, field.size, 4 // field.unit), jnp.uint32)


def _from_words(words: jax.Array, field: Field, lead: tuple) -> jax.Array:
    if field.unit == 4:
        return words
    if field.unit == 8:
        return lax.bitcast_convert_type(words.reshape(*lead, field.count, 2), jnp.uint64)
    return lax.bitcast_convert_type(words, _UNSIGNED[field.unit]).reshape(*lead, field.count)


def _bytes(units: jax.Array, field: Field, lead: tuple) -> jax.Array:
    return units if field.unit == 1 else lax.bitcast_convert_type(units, jnp.uint8).reshape(*lead, field.size)


def pack(layout: RowLayout, leaves: Sequence[jax.Array]) -> jax.Array:
    """Leaves ``[*lead, *shape]`` (one per field, same ``lead``) as rows ``[*lead, words]`` uint32."""
    pieces = pieces_of(layout, leaves)
    if not pieces:
        return jnp.zeros((*_lead(layout, leaves), 0), jnp.uint32)
    return jnp.concatenate([words for _, words in pieces], axis=-1)


def _lead(layout: RowLayout, leaves: Sequence[jax.Array]) -> tuple:
    if not layout.fields:
        return ()
    return tuple(leaves[0].shape[: np.ndim(leaves[0]) - len(layout.fields[0].shape)])


def pieces_of(layout: RowLayout, leaves: Sequence[jax.Array]) -> list[tuple[int, jax.Array]]:
    """``pack`` in pieces: ``(first word, words [*lead, n])`` per whole-word leaf, then the
    byte tail, in row order (an add writes each piece in place: no concatenated copy)."""
    lead = _lead(layout, leaves)
    pieces, tail = [], []
    for leaf, field in zip(leaves, layout.fields, strict=True):
        units = _units(jnp.asarray(leaf, field.dtype), field, lead)
        if field.in_tail:
            tail.append(_bytes(units, field, lead))
        elif field.size:
            pieces.append((field.start, _to_words(units, field, lead)))
    if tail:
        data = jnp.concatenate(tail, axis=-1)
        padding = (layout.words - layout.tail) * 4 - data.shape[-1]
        data = jnp.pad(data, [(0, 0)] * len(lead) + [(0, padding)])
        words = lax.bitcast_convert_type(data.reshape(*lead, layout.words - layout.tail, 4), jnp.uint32)
        pieces.append((layout.tail, words))
    return pieces


def unpack(layout: RowLayout, rows: jax.Array) -> list[jax.Array]:
    """Rows ``[*lead, words]`` back to one leaf ``[*lead, *shape]`` per field."""
    lead = tuple(rows.shape[:-1])
    tail = None
    if layout.tail < layout.words:
        tail_bytes = 4 * (layout.words - layout.tail)
        tail = lax.bitcast_convert_type(rows[..., layout.tail :], jnp.uint8).reshape(*lead, tail_bytes)
    out = []
    for field in layout.fields:
        if field.in_tail:
            data = tail[..., field.start : field.start + field.size]
            units = (
                data
                if field.unit == 1
                else lax.bitcast_convert_type(data.reshape(*lead, field.count, field.unit), _UNSIGNED[field.unit])
            )
        else:
            units = _from_words(rows[..., field.start : field.start + field.size], field, lead)
        out.append(_leaf(units, field, lead))
    return out
