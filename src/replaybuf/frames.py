"""Buffers for stacked-frame image observations that store each frame once (docs/images.md).

``FrameStackReplayBuffer`` is ``UniformReplayBuffer`` and ``PrioritizedFrameStackReplayBuffer``
is ``PrioritizedReplayBuffer`` over a ``FrameStorage``: same API, same samples (ids,
probabilities, windows, episodes), and every read returns exactly the stacks that were
added, while an 84x84x4 observation plus its next observation costs one new 84x84 frame
per transition instead of eight.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf import checkpoint
from replaybuf.errors import ArgumentError
from replaybuf.frames_storage import FrameStorage, StackedLeaf
from replaybuf.nest import FlatSpec
from replaybuf.prioritized import PrioritizedReplayBuffer
from replaybuf.ring import StreamRing
from replaybuf.state import require
from replaybuf.uniform import UniformReplayBuffer

__all__ = ["FrameStackReplayBuffer", "PrioritizedFrameStackReplayBuffer", "stacked_leaves"]

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


class _FrameStackMixin:
    """Swaps the item storage of a NumPy buffer for a ``FrameStorage``."""

    _flat: FlatSpec
    _stacked: list[StackedLeaf]
    _storage: FrameStorage

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        stacked_fields: Sequence[str] | None = None,
        stack_axis: int = 0,
        **kwargs: Any,
    ):
        self._stack_options = (stacked_fields, stack_axis)  # read by _open_storage, below
        super().__init__(data_spec, batch_size, max_length, **kwargs)  # type: ignore[call-arg]

    def _open_storage(self, storage: str, path: Any, batch_size: int, max_length: int) -> tuple:
        self._stacked = stacked_leaves(self._flat, *self._stack_options)
        if storage != "memory" or path is not None:
            raise ArgumentError(f"storage: expected 'memory' (frame stacks are not memory-mapped yet), got {storage!r}")
        frames = FrameStorage(self._flat.leaves, self._stacked, batch_size, max_length)
        return StreamRing(batch_size, max_length), frames

    def clear(self) -> None:
        with self._lock:  # type: ignore[attr-defined]
            super().clear()  # type: ignore[misc]
            self._storage.clear()

    # -- checkpoints (docs/persistence.md, docs/images.md) ----------------------------------------
    def state_dict(self) -> dict:
        """The parent's state, with ``items`` holding the small leaves only and ``frames``
        the stacked ones, each distinct frame once (see ``FrameStorage.state``)."""
        with self._lock:  # type: ignore[attr-defined]
            state = super().state_dict()  # type: ignore[misc]
            ring = self._ring  # type: ignore[attr-defined]
            first = ring.first_valid_step()
            start = (first % ring.max_length) * ring.batch_size
            count = (ring.steps - first) * ring.batch_size
            saving = getattr(self, "_saving", False)  # save(): the pool streamed from views, no copy
            state["items"], state["frames"] = self._storage.state(start, count, views=saving)
            return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()``: later samples equal the original's for the same calls.

        Raises:
            CheckpointError: as for the parent class, or ``frames`` that do not fit this
                buffer's stacked fields; the buffer is left unchanged.
        """
        items = require(state, "items", dict)  # files read lazily (StoredArray) are read here
        items = {
            key: value.read() if isinstance(value, checkpoint.StoredArray) else value for key, value in items.items()
        }
        count = self._storage.check_state(state.get("frames"))
        full = dict(items)
        for leaf in self._stacked:  # the parent checks and writes placeholders (no memory)
            spec = self._flat.leaves[leaf.index]
            full[str(leaf.index)] = np.broadcast_to(np.zeros((), spec.dtype), (count, *spec.shape))
        with self._lock:  # type: ignore[attr-defined]
            with self._storage.restoring():
                super().load_state_dict(dict(state, items=full))  # type: ignore[misc]
            ring = self._ring  # type: ignore[attr-defined]
            first = ring.steps - count // ring.batch_size
            start = (first % ring.max_length) * ring.batch_size
            self._storage.load_state(start, items, state["frames"], ring.steps)

    def load(self, path: str | os.PathLike) -> None:
        """Replace this buffer's state with the checkpoint at ``path``, every file verified first.

        Raises:
            CheckpointError: no checkpoint there, a missing, truncated, corrupt or malformed
                file, or a state this buffer cannot take; the buffer is left unchanged.
        """
        self.load_state_dict(checkpoint.read_state(path))


class FrameStackReplayBuffer(_FrameStackMixin, UniformReplayBuffer):
    """``UniformReplayBuffer`` whose stacked-frame fields store each distinct frame once.

    Args:
        data_spec, batch_size, max_length, seed, respect_episodes, pad_episode_ends,
            episode_end_field, dataset_drop_remainder, dataset_window_shift: as for
            UniformReplayBuffer.
        stacked_fields: field paths of the stacked observations (default: ``observation``
            and ``next_observation``, those present). Their frames must share shape and dtype.
        stack_axis: the axis of the stack inside each such field: 0 for Gymnasium's
            FrameStackObservation (``[k, *frame]``), -1 for ``[84, 84, 4]``.

    Raises:
        ArgumentError: as ``stacked_leaves``; a storage other than ``"memory"``.
    """

    _name = "FrameStackReplayBuffer"


class PrioritizedFrameStackReplayBuffer(_FrameStackMixin, PrioritizedReplayBuffer):
    """``PrioritizedReplayBuffer`` whose stacked-frame fields store each distinct frame once.

    Takes PrioritizedReplayBuffer's arguments plus ``stacked_fields`` and ``stack_axis``
    (see FrameStackReplayBuffer).
    """

    _name = "PrioritizedFrameStackReplayBuffer"
