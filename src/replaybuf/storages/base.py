"""The storage protocol: where the bytes of items live. Storages know slots, never how ids were chosen.

A buffer holds its lock around every call; slot ``s`` holds the item of id ``i`` with
``i % capacity == s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from replaybuf.nest import FlatSpec

__all__ = ["Storage"]


@runtime_checkable
class Storage(Protocol):
    """What every storage does; buffers, samples and checkpoints go through these only."""

    #: the state keys that ``load`` may hand over as files read straight into the storage
    lazy_keys: tuple[str, ...]
    #: whether it survives a crash, keeping a floor below which items were lost (memmap)
    crash_safe: bool

    @property
    def fields(self) -> Sequence[np.ndarray]:
        """The stored leaves by slot (what a reopened storage's items are read from)."""

    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """Rows ``arrays[k][i]`` (flat leaves) to slot ``(start + i) % capacity``,
        completing ``steps`` of the ring's steps."""

    def commit(self, steps: int) -> None:
        """The ring now counts ``steps`` (a crash-safe storage records it)."""

    def read(self, ids: np.ndarray) -> list[np.ndarray]:
        """The items at ``ids`` (any non-negative ints: slot = id % capacity, so a sample's
        ids need no wrapping of their own): fresh arrays ``ids.shape + leaf.shape``, one per leaf."""

    def clear(self) -> None:
        """Forget what later writes would match against (frames)."""

    def state(self, start: int, count: int, views: bool = False) -> dict:
        """The checkpoint keys (``items``; ``frames`` for frame stacks) of ``count`` slots
        from ``start``; with ``views`` the arrays may be views streamed by ``save`` under the lock."""

    def check_state(self, flat: FlatSpec, state: dict) -> tuple[int, Any]:
        """Validate the checkpoint keys (``CheckpointError``) before anything changes;
        returns ``(count, checked)``."""

    def load_state(self, start: int, checked: Any) -> None:
        """Write what ``check_state`` returned from slot ``start`` on."""
