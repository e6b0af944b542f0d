"""``ShardWriter``: a handle that adds to one shard of a ``ShardedReplayBuffer``, pipelined.

Get one from ``buffer.writer()``; it pickles into Ray tasks and actors (or any process that
is connected to the same Ray cluster). Every add is validated here, then sent without
waiting; at most ``max_in_flight`` adds are unacknowledged at a time (the next add waits for
the oldest). Adds carry ``(writer key, sequence number)``: the shard applies them in order
and ignores one it has already applied, so a resend after a failure never inserts twice.
When the shard dies, the writer waits for Ray to restart it and resends its unacknowledged
adds (a shard restarted from its last checkpoint has lost what came after it; those adds
are not resent). A restarted shard that gets an add past such a gap asks for that resend.
It gives up with ``ShardUnavailableError`` after ``retry_timeout``.
"""

from __future__ import annotations

import collections
import time
import uuid
from typing import Any

from ray.exceptions import GetTimeoutError

from replaybuf.buffer import check_positive
from replaybuf.nest import FlatSpec
from replaybuf.rate_limiters import check_timeout
from replaybuf.ray.remote import SHARD_DOWN, ResendRequested, ShardUnavailableError, get
from replaybuf.samplers.prioritized import priorities_of_add

__all__ = ["ShardWriter"]


class ShardWriter:
    """Adds steps of ``batch_size`` streams to shard ``shard`` (see the module docstring).

    ``add_batch(items, priorities=None)``: every leaf ``[batch_size] + spec.shape``, and for a
    prioritized buffer the step's ``[batch_size]`` priorities (checked here, sent with the
    items, resent with them after a failure); ``flush()`` waits until
    every add is applied (and raises the first error of one); ``close()`` flushes. A copy
    made by pickling is a new writer (its own key) with nothing in flight: flush before
    handing a writer over.
    """

    def __init__(
        self,
        actor: Any,
        shard: int,
        data_spec: Any,
        batch_size: int,
        *,
        max_in_flight: int = 8,
        call_timeout: float | None = 30.0,
        retry_timeout: float | None = 120.0,
        prioritized: bool = False,
    ):
        check_positive("max_in_flight", max_in_flight, allow_none=False)
        self._prioritized = prioritized
        self._actor, self._shard = actor, shard
        self._spec = data_spec
        self._flat = FlatSpec(data_spec)
        self._batch_size = batch_size
        self._max_in_flight = int(max_in_flight)
        self._call_timeout = check_timeout(call_timeout, "call_timeout")
        self._retry_timeout = check_timeout(retry_timeout, "retry_timeout")
        self._key = uuid.uuid4().hex
        self._seq = 0
        self._epoch = 0
        self._in_flight: collections.deque = collections.deque()  # [seq, leaves, ref, priorities]
        self.inserted = 0  # adds the shard applied (acknowledged as new)
        self.retried = 0  # adds sent again after a failure

    def __getstate__(self) -> dict:
        return {
            "actor": self._actor,
            "shard": self._shard,
            "spec": self._spec,
            "batch_size": self._batch_size,
            "options": (self._max_in_flight, self._call_timeout, self._retry_timeout, self._prioritized),
        }

    def __setstate__(self, state: dict) -> None:
        max_in_flight, call_timeout, retry_timeout, prioritized = state["options"]
        self.__init__(  # type: ignore[misc]
            state["actor"],
            state["shard"],
            state["spec"],
            state["batch_size"],
            max_in_flight=max_in_flight,
            call_timeout=call_timeout,
            retry_timeout=retry_timeout,
            prioritized=prioritized,
        )

    @property
    def shard(self) -> int:
        """The index of the shard this writer adds to."""
        return self._shard

    @property
    def batch_size(self) -> int:
        """The number of streams of that shard: the leading dimension of every add."""
        return self._batch_size

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Send one step of the shard's streams (and its priorities); waits only when
        ``max_in_flight`` are unacknowledged.

        Raises:
            SpecMismatchError: the items do not match the data_spec (or this writer's
                batch_size); nothing is sent.
            ArgumentError: ``priorities`` for a buffer without priorities, or not
                ``[batch_size]`` numbers; PriorityError: one not finite and > 0. Nothing is sent.
            RateLimiterTimeout, ShardUnavailableError: from an earlier add that failed.
        """
        without = None if self._prioritized else f"shard {self._shard} holds a buffer without priorities"
        given = priorities_of_add(priorities, self._batch_size, without)
        leaves = self._flat.flatten_batch(items, self._batch_size)
        self._seq += 1
        ref = self._actor.add.remote(leaves, self._key, self._seq, self._epoch, 1, given)
        self._in_flight.append([self._seq, leaves, ref, given])
        while len(self._in_flight) > self._max_in_flight:
            self._settle_oldest()

    def flush(self) -> None:
        """Wait until every add sent is applied by the shard."""
        while self._in_flight:
            self._settle_oldest()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _settle_oldest(self) -> None:
        deadline = None
        while True:
            entry = self._in_flight[0]
            try:
                inserted = get(entry[2], timeout=self._call_timeout)
            except (*SHARD_DOWN, ResendRequested) as err:
                if isinstance(err, GetTimeoutError) and self._alive():
                    continue  # slow (e.g. held by the rate limiter), not down: keep waiting
                now = time.monotonic()
                if deadline is None and self._retry_timeout is not None:
                    deadline = now + self._retry_timeout
                if deadline is not None and now >= deadline:
                    raise ShardUnavailableError(
                        f"shard {self._shard}: unreachable for {self._retry_timeout} s "
                        f"({type(err).__name__}); {len(self._in_flight)} adds were not acknowledged"
                    ) from None
                if not isinstance(err, GetTimeoutError):
                    time.sleep(0.2)  # Ray is restarting it
                self._resend()
                continue
            except BaseException:
                self._in_flight.popleft()
                raise
            self._in_flight.popleft()
            self.inserted += bool(inserted)
            return

    def _alive(self) -> bool:
        """Whether the shard answers a ping within the call deadline."""
        try:
            get(self._actor.ping.remote(), timeout=self._call_timeout)
            return True
        except SHARD_DOWN:
            return False

    def _resend(self) -> None:
        """Send every unacknowledged add again, under a new epoch (the shard skips applied ones)."""
        self._epoch += 1
        start = self._in_flight[0][0]
        for entry in self._in_flight:
            entry[2] = self._actor.add.remote(entry[1], self._key, entry[0], self._epoch, start, entry[3])
            self.retried += 1

    def __repr__(self) -> str:
        return f"ShardWriter(shard={self._shard}, batch_size={self._batch_size}, in_flight={self.in_flight})"
