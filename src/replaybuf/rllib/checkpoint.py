"""The buffer beside an RLlib checkpoint: RLlib's algorithm checkpoints do not hold the
replay buffer, so these write its state as a replaybuf checkpoint folder (docs/persistence.md)
in a subfolder of the algorithm's checkpoint and read it back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from replaybuf.errors import ArgumentError
from replaybuf.persistence import read_state, write_state

__all__ = ["BUFFER_FOLDER", "restore_algorithm", "restore_buffer", "save_algorithm", "save_buffer"]

BUFFER_FOLDER = "replaybuf_buffer"  # the subfolder of a checkpoint that holds the buffer


def save_buffer(buffer: Any, checkpoint_dir: str | os.PathLike) -> Path:
    """Write ``buffer.get_state()`` under ``checkpoint_dir/replaybuf_buffer``; returns that folder."""
    if not hasattr(buffer, "get_state"):
        raise ArgumentError(f"buffer: expected a replaybuf.rllib buffer, got {type(buffer).__name__}")
    folder = Path(checkpoint_dir) / BUFFER_FOLDER
    write_state(folder, buffer.get_state())
    return folder


def restore_buffer(buffer: Any, checkpoint_dir: str | os.PathLike) -> None:
    """Load the state ``save_buffer`` wrote under ``checkpoint_dir`` into ``buffer`` (checked
    first: a missing or corrupt folder raises CheckpointError and changes nothing)."""
    buffer.set_state(read_state(Path(checkpoint_dir) / BUFFER_FOLDER))


def _buffer_of(algorithm: Any) -> Any:
    buffer = getattr(algorithm, "local_replay_buffer", None)
    if buffer is None:
        raise ArgumentError(f"algorithm: {type(algorithm).__name__} has no local replay buffer to save")
    return buffer


def save_algorithm(algorithm: Any, path: str | os.PathLike | None = None) -> Path:
    """``algorithm.save_to_path(path)`` and its replay buffer beside it; returns the checkpoint path."""
    buffer = _buffer_of(algorithm)
    # RLlib's pyarrow filesystem takes absolute paths or URIs only
    checkpoint = Path(algorithm.save_to_path(None if path is None else Path(path).resolve()))
    save_buffer(buffer, checkpoint)
    return checkpoint


def restore_algorithm(algorithm: Any, path: str | os.PathLike) -> None:
    """``algorithm.restore_from_path(path)`` and its replay buffer from beside it."""
    buffer = _buffer_of(algorithm)
    path = Path(path).resolve()
    algorithm.restore_from_path(path)
    restore_buffer(buffer, path)
