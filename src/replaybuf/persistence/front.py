"""``save(path)`` / ``load(path)``: the one front half every buffer's checkpoints go through.

A buffer supplies its state for writing (``_saved_state``: views of its storage where it
can, under whatever lock ``_saving`` holds), the top-level keys ``load`` may hand over as
unread file handles (``_lazy_keys``) and ``load_state_dict``, which takes the state through
``replaybuf.persistence.header.check_header``; the folder format, its atomic replacement and
verification are ``replaybuf.persistence.folder``'s (docs/persistence.md).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from replaybuf.persistence.folder import read_state, write_state

__all__ = ["Checkpoints"]


class Checkpoints:
    """Mixed into every buffer class: ``save`` / ``load`` over its own state."""

    _lazy_keys: tuple[str, ...] = ()
    state_dict: Any
    load_state_dict: Any

    def save(self, path: str | os.PathLike) -> None:
        """Write the buffer's state to the checkpoint folder ``path`` atomically (a new version).

        Raises:
            CheckpointError: ``path`` exists and is not a checkpoint folder.
        """
        with self._saving():
            write_state(path, self._saved_state())

    def load(self, path: str | os.PathLike) -> None:
        """Replace this buffer's state with the checkpoint at ``path``, written by any buffer of
        the same spec and geometry whose contents this one can hold (docs/persistence.md).

        Raises:
            CheckpointError: no checkpoint there, a missing, truncated or malformed file, or
                a state this buffer cannot take: the buffer is left unchanged. An item file
                whose checksum fails while it is read into the storage: the buffer is left empty.
        """
        self.load_state_dict(read_state(path, lazy=self._lazy_keys))

    def _saving(self) -> Any:
        """Held while the state is taken and written (the buffer's lock, where the state is views)."""
        return contextlib.nullcontext()

    def _saved_state(self) -> dict:
        """The state ``save`` writes: ``state_dict()`` unless the buffer has a cheaper one."""
        return self.state_dict()
