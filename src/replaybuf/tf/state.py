"""``state_dict`` / ``load_state_dict`` (and so ``save`` / ``load``) for ``TFUniformReplayBuffer``.

The state is the backend-neutral one (docs/persistence.md): the valid items in id order as
NumPy arrays, ``steps``, and the ``tf.random.Generator`` state as ``rng`` (``algorithm`` and
the int64 ``state``), restored only into a TF buffer. Beside ``tf.train.Checkpoint``, which
keeps TF's own route; like ``clear``, a save or load must not run while another thread adds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from replaybuf.errors import CheckpointError
from replaybuf.persistence.front import Checkpoints
from replaybuf.persistence.header import Holds, check_header, header
from replaybuf.persistence.state import check_items, first_stored_step, spec_state

__all__ = ["TFCheckpoints"]

HOLDS = Holds(rng="tf")


class TFCheckpoints(Checkpoints):
    """Mixed into TFUniformReplayBuffer; uses its slot store, generator and geometry."""

    _flat: Any
    _store: Any
    _rng: tf.random.Generator
    _batch_size: int
    _max_length: int
    _compiled: Any

    def state_dict(self) -> dict:
        """A plain snapshot: the valid items (id order), counters and the generator state."""
        steps = int(self._store.steps.numpy())
        first = max(0, steps - self._max_length)
        slots = np.arange(first * self._batch_size, steps * self._batch_size) % (self._batch_size * self._max_length)
        return {
            "checkpoint": header(HOLDS, type(self).__name__),
            "spec": spec_state(self._flat),
            "batch_size": self._batch_size,
            "max_length": self._max_length,
            "steps": steps,
            "items": {str(i): tf.gather(var, slots).numpy() for i, var in enumerate(self._store.leaves)},
            "rng": {"algorithm": int(self._rng.algorithm), "state": self._rng.state.numpy()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` of any buffer of this spec and geometry that it can hold.

        Raises:
            CheckpointError: another spec or geometry, something a uniform TF buffer cannot
                hold (priorities, frame stacks, a rate limiter), or malformed; nothing changes.
        """
        geometry = {"batch_size": self._batch_size, "max_length": self._max_length}
        steps, same_rng, _ = check_header(state, HOLDS, self._flat, geometry)
        leaves = check_items(self._flat, state, range(len(self._flat.leaves)), (np.ndarray,))
        count = leaves[0].shape[0] if leaves else 0
        first = first_stored_step(steps, count, self._batch_size, self._max_length, crash_safe=False)
        rng = self._check_rng(state.get("rng")) if same_rng else None
        self.clear()
        store = self._store
        ids = np.arange(first * self._batch_size, steps * self._batch_size)
        for var, leaf in zip(store.leaves, leaves, strict=True):
            var.scatter_nd_update(ids[:, None] % store.capacity, leaf)
        stored = np.arange(first, steps)
        store.marks.scatter_nd_update(stored[:, None] % self._max_length, stored)
        store.steps.assign(steps)
        if rng is not None:
            self._rng.state.assign(rng)
        self._compiled.writes += 1  # datasets drop what they drew ahead

    def _check_rng(self, saved: Any) -> np.ndarray:
        """The saved generator state for this generator; CheckpointError when it is not one."""
        mine = self._rng.state
        if (
            not isinstance(saved, dict)
            or set(saved) != {"algorithm", "state"}
            or type(saved["algorithm"]) is not int
            or saved["algorithm"] != int(self._rng.algorithm)
            or not isinstance(saved["state"], np.ndarray)
            or saved["state"].dtype != np.int64
            or saved["state"].shape != tuple(mine.shape)
        ):
            raise CheckpointError(
                f"state['rng']: expected a tf.random.Generator state {{'algorithm': {int(self._rng.algorithm)}, "
                f"'state': int64 {tuple(mine.shape)}}}, got {saved!r:.120}"
            )
        return saved["state"]
