"""TF-Agents' ``tf_uniform_replay_buffer`` module: ``TFUniformReplayBuffer`` on replaybuf.

The class is ``replaybuf.tf.TFUniformReplayBuffer`` with TF-Agents' constructor (every
argument positional as there) and the two members where replaybuf's own class follows
``tf.Module`` instead: ``variables()`` is a method returning a list, and ``data_spec`` is the
spec as it was given (TensorFlow's tracking wrappers taken off), not its replaybuf form.
"""

from __future__ import annotations

from typing import Any

from replaybuf.errors import ArgumentError
from replaybuf.specs import untracked_nest
from replaybuf.tf.buffer import TFUniformReplayBuffer as _Buffer

__all__ = ["TFUniformReplayBuffer"]


class _Given:
    """The data_spec as given, kept out of tf.Module's tracking (which would wrap it)."""

    def __init__(self, data_spec: Any) -> None:
        self.data_spec = data_spec


class TFUniformReplayBuffer(_Buffer):
    """TF-Agents' ``TFUniformReplayBuffer(data_spec, batch_size, max_length=1000,
    scope='TFUniformReplayBuffer', device='cpu:*', table_fn=..., dataset_drop_remainder=False,
    dataset_window_shift=None, stateful_dataset=False)`` on replaybuf's storage.

    ``table_fn`` (TF-Agents' storage class) cannot be honoured: only None (or leaving it
    out) is accepted. Keyword arguments of ``replaybuf.tf.TFUniformReplayBuffer`` (``seed``,
    ``dataset_draw_ahead``) pass through.

    Raises:
        ArgumentError: a ``table_fn`` was given; as ``replaybuf.tf.TFUniformReplayBuffer``.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int = 1000,
        scope: str = "TFUniformReplayBuffer",
        device: str = "cpu:*",
        table_fn: Any = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        stateful_dataset: bool = False,
        **kwargs: Any,
    ):
        if table_fn is not None:
            raise ArgumentError(
                f"table_fn: expected None (replaybuf keeps its own storage in tf.Variables), got {table_fn!r}"
            )
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            scope=scope,
            device=device,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            stateful_dataset=stateful_dataset,
            **kwargs,
        )
        self._given = _Given(untracked_nest(data_spec))

    @property
    def data_spec(self) -> Any:
        """The data_spec as given (TF-Agents' specs stay TF-Agents' specs)."""
        return self._given.data_spec

    def variables(self) -> list:  # TF-Agents: a method, where tf.Module has a property
        """Every variable of the buffer (storage, counters, the sampling generator's state)."""
        return list(super().variables)
