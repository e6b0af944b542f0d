"""Which leaves of a spec are frame stacks, and the frame each is split into (``stacked_fields``, ``stack_axis``).

The frame-stack presets name their stacked leaves by field path (by default whichever of
``observation`` and ``next_observation`` the spec has); a ``FrameStorage`` keeps the frames
of all of them in one pool, so they must share a frame shape and dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replaybuf.errors import ArgumentError
from replaybuf.nest import FlatSpec

__all__ = ["StackedLeaf", "stacked_leaves"]


@dataclass(frozen=True)
class StackedLeaf:
    """Leaf ``index`` of the flat spec is a stack of ``length`` frames along ``axis``."""

    index: int
    axis: int
    length: int
    frame_shape: tuple[int, ...]


DEFAULT_FIELDS = ("observation", "next_observation")


def stacked_leaves(flat: FlatSpec, stacked_fields: Sequence[str] | None, stack_axis: int) -> list[StackedLeaf]:
    """The stacked leaves named by ``stacked_fields`` (default: whichever of observation and
    next_observation the spec has), each split into frames along ``stack_axis``.

    Raises:
        ArgumentError: a named field is not a leaf of the data_spec, none is found,
            ``stack_axis`` is outside a leaf's dims, or the leaves' frames differ in shape or dtype.
    """
    names = list(DEFAULT_FIELDS if stacked_fields is None else stacked_fields)
    if isinstance(stacked_fields, str):
        raise ArgumentError(f"stacked_fields: expected a sequence of field paths, got the string {stacked_fields!r}")
    found = []
    for name in names:
        if name in flat.paths:
            found.append(flat.paths.index(name))
        elif stacked_fields is not None:
            raise ArgumentError(f"stacked_fields: expected field paths of the data_spec ({flat.paths}), got {name!r}")
    if not found:
        raise ArgumentError(
            f"stacked_fields: expected an observation or next_observation field in the data_spec, or "
            f"stacked_fields naming the stacked ones (fields: {flat.paths}), got neither"
        )
    out = []
    for index in found:
        spec, path = flat.leaves[index], flat.paths[index]
        is_int = isinstance(stack_axis, int) and not isinstance(stack_axis, bool)
        if not is_int or not -len(spec.shape) <= stack_axis < len(spec.shape):
            raise ArgumentError(f"stack_axis: expected an axis of {path} shaped {spec.shape}, got {stack_axis!r}")
        axis = stack_axis % len(spec.shape)
        frame = spec.shape[:axis] + spec.shape[axis + 1 :]
        out.append(StackedLeaf(index, axis, spec.shape[axis], frame))
    first = flat.leaves[out[0].index]
    for leaf in out[1:]:
        spec = flat.leaves[leaf.index]
        if leaf.frame_shape != out[0].frame_shape or spec.dtype != first.dtype:
            raise ArgumentError(
                f"stacked_fields: expected frames shaped like {flat.paths[out[0].index]}'s {out[0].frame_shape} "
                f"{first.dtype}, got {flat.paths[leaf.index]} frames {leaf.frame_shape} {spec.dtype}"
            )
    return out
