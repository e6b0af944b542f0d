"""Host storage: one preallocated NumPy array per leaf (a column), for small items.

An add of n items writes each leaf as one contiguous block (what a plain NumPy buffer
does), so batched adds cost n contiguous copies per leaf instead of strided writes into
records; a read gathers each column with one ``take``. ``FieldStorage`` is the part every
storage over per-leaf arrays shares (``RecordStorage`` too, whose fields are views of its
records): the checkpoint ``items`` (``state`` / ``check_state`` / ``load_state``),
``commit`` and ``clear``.

A buffer gets columns with ``storage="columns"`` (records are the default: see docs/design.md).
Memory comes from ``np.zeros`` (calloc): RSS follows what is stored, not the capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import ArrayRun, StoredArray
from replaybuf.persistence.state import check_items, read_run, ring_views
from replaybuf.specs import ArraySpec

__all__ = ["ColumnStorage", "FieldStorage", "straight_writer"]


class FieldStorage:
    """What storages over one array per leaf (``fields``, indexed by slot) share."""

    leaves: list[ArraySpec]
    capacity: int
    fields: list[np.ndarray]

    lazy_keys = ("items",)  # state keys load() may read straight into the storage (StoredArray)
    crash_safe = False  # whether it survives a crash, keeping a floor below which items were lost

    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        raise NotImplementedError

    def commit(self, steps: int) -> None:
        """The ring now counts ``steps`` steps (everything written is whole): nothing to do in RAM."""

    def clear(self) -> None:
        """Nothing to forget: slots are overwritten before they are read again."""

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, start: int, count: int, views: bool = False) -> dict:
        """``{"items": {"0": rows, ...}}``: ``count`` rows of each leaf from slot ``start`` in
        id order, copies (or, for ``save``, views streamed under the buffer's lock)."""
        if views:
            leaves: list = [ArrayRun(ring_views(field, start, count)) for field in self.fields]
        else:
            leaves = read_run(self.fields, start, count)
        return {"items": {str(i): leaf for i, leaf in enumerate(leaves)}}

    def check_state(self, flat: FlatSpec, state: dict) -> tuple[int, list]:
        """``(count, leaves)`` of a ``state()``'s items, checked against ``flat``'s leaves."""
        leaves = check_items(flat, state, range(len(flat.leaves)), (np.ndarray, StoredArray))
        return (leaves[0].shape[0] if leaves else 0), leaves

    def load_state(self, start: int, leaves: list) -> None:
        """Write checked ``leaves`` from slot ``start``, a stored file straight into the fields.

        Raises:
            CheckpointError: a stored file turned out truncated or corrupt; the rows written
                so far are garbage and the caller must discard them.
        """
        if all(isinstance(leaf, np.ndarray) for leaf in leaves):
            self.write(start, leaves)
            return
        for field, leaf in zip(self.fields, leaves, strict=True):
            views = ring_views(field, start, leaf.shape[0])
            if isinstance(leaf, StoredArray):
                leaf.read_into(ArrayRun(views))
            else:
                _assign(views, leaf)


class ColumnStorage(FieldStorage):
    """``capacity`` rows of each leaf in its own array, read and written by slot.

    ``write`` is a function generated for the leaves (``straight_writer``): one straight-line
    assignment per leaf, an integer index for one row and a slice for a run, no loop.
    """

    #: ``write(start, arrays, steps=1)``: rows ``arrays[k][i]`` to slot ``(start + i) %
    #: capacity``, n <= capacity; ``steps`` (how many of the ring's steps these rows
    #: complete) is unused in RAM.
    write: Callable[..., None]

    def __init__(self, leaves: Sequence[ArraySpec], capacity: int):
        self.leaves = list(leaves)
        self.capacity = capacity
        self.fields = [np.zeros((capacity, *spec.shape), spec.dtype) for spec in self.leaves]
        self.write = straight_writer(self.fields, [None] * len(self.fields), self.write_wrapping)

    def write_wrapping(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """``write`` for rows that pass the end of the storage: its tail, then its head."""
        split = self.capacity - start
        n = arrays[0].shape[0]
        for field, array in zip(self.fields, arrays, strict=True):
            field[start:] = array[:split]
            field[: n - split] = array[split:]

    def read(self, ids: np.ndarray) -> list[np.ndarray]:
        """Each leaf's rows at ``ids`` (slot = id % capacity; fresh arrays shaped ``ids.shape + leaf.shape``)."""
        slots = ids % self.capacity
        return [field.take(slots, axis=0) for field in self.fields]


def straight_writer(
    fields: list[np.ndarray], packed: Sequence[np.ndarray | None], wrapping: Callable[..., None]
) -> Callable[..., None]:
    """A storage's ``write(start, arrays, steps=1)`` generated for ``fields`` (as dataclasses
    generate methods): one straight-line assignment per leaf, an integer index for one row, a
    slice for a run, ``wrapping(start, arrays, steps)`` for a run that passes the end (a
    ``zip`` loop is slower per single-row add: docs/design.md, "Measured choices").

    ``packed[k]``, when given, is a ``[capacity, 1]`` void view of field k (a small 1-D field
    of a record): a run is written through it as one opaque element per row, unless the
    source's last axis is not contiguous (then element-wise into the field).
    """
    if not fields:
        return lambda start, arrays, steps=1: None
    count = len(fields)
    names = ", ".join(f"a{i}" for i in range(count))
    run = []
    for i, view in enumerate(packed):
        if view is None:
            run.append(f"    f{i}[start:end] = a{i}")
        else:
            run += [
                "    try:",
                f"        p{i}[start:end] = a{i}.view(V{i})",
                "    except ValueError:  # the last axis is not contiguous",
                f"        f{i}[start:end] = a{i}",
            ]
    source = "\n".join(
        [
            "def write(start, arrays, steps=1):",
            f"    {names}, = arrays",
            "    n = a0.shape[0]",
            "    if n == 1:  # one item: integer indexing is cheaper than a slice",
            *(f"        f{i}[start] = a{i}[0]" for i in range(count)),
            "        return",
            "    end = start + n",
            f"    if end > {len(fields[0])}:",
            "        return wrapping(start, arrays, steps)",
            *run,
        ]
    )
    env: dict[str, Any] = {f"f{i}": field for i, field in enumerate(fields)}
    env.update({f"p{i}": view for i, view in enumerate(packed) if view is not None})
    env.update({f"V{i}": view.dtype for i, view in enumerate(packed) if view is not None})
    env["wrapping"] = wrapping
    exec(compile(source, f"<replaybuf storage write of {count} leaves>", "exec"), env)  # noqa: S102
    function = env["write"]
    function.source = source
    return function


def _assign(views: list[np.ndarray], rows: Any) -> None:
    done = 0
    for view in views:
        view[...] = rows[done : done + len(view)]
        done += len(view)
