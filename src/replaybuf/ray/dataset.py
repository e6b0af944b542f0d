"""``as_dataset`` of a ``ShardedReplayBuffer``: endless samples with several fan-outs in flight."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ShardedRandomDataset"]


class ShardedRandomDataset:
    """Iterating gives ``(items, info)`` forever; ``depth`` fan-outs are kept in flight.

    A fan-out is started (limiter grant, split, one call per live shard) ``depth`` batches
    ahead of the one handed out, so the shards sample the next batches while the consumer
    works on this one. Each element is a sample as of when its fan-out started: at most
    ``depth - 1`` elements older than a synchronous ``get_next`` would be.
    """

    def __init__(
        self,
        submit: Callable[[int | None, int | None], dict],
        collect: Callable[[dict], Any],
        undo: Callable[[dict], None],
        sample_batch_size: int | None,
        num_steps: int | None,
        depth: int,
    ):
        self._submit, self._collect, self._undo = submit, collect, undo
        self._args = (sample_batch_size, num_steps)
        self._depth = depth

    def __iter__(self) -> Iterator[Any]:
        depth = self._depth
        pending: collections.deque = collections.deque()
        try:
            while True:
                while len(pending) < depth:
                    pending.append(self._submit(*self._args))
                yield self._collect(pending.popleft())
        finally:
            for started in pending:  # granted by the limiter but never handed out
                self._undo(started)
