"""Ray plumbing shared by the driver, the writers and the shards: calls, errors, the limiter actor."""

from __future__ import annotations

import time
import warnings
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError

from replaybuf.errors import ReplayBufferError
from replaybuf.rate_limiters import RateLimiter

__all__ = [
    "SHARD_DOWN",
    "Limiter",
    "ResendRequested",
    "ShardUnavailableError",
    "call",
    "get",
    "limiter_config",
    "reconstructed",
]


class ShardUnavailableError(ReplayBufferError, TimeoutError):
    """A shard (or the limiter) stayed unreachable past the deadline; the call was not made."""


class ResendRequested(ReplayBufferError):
    """A restarted shard got an add past a gap from a writer it has not heard since: the
    writer must resend from its first unacknowledged add (under a new epoch), because only
    the writer knows whether the adds in the gap were acknowledged (then lost with the
    shard) or are still to come. Handled by ``ShardWriter``; users never see it."""


# what a call to a shard that is dead, restarting or on a removed node raises
SHARD_DOWN = (RayActorError, GetTimeoutError, ObjectLostError)


def reconstructed() -> bool:
    """Whether this actor is a restart (Ray's flag, read without its deprecation warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` that re-raises a replaybuf error raised inside an actor as itself."""
    try:
        return ray.get(refs, timeout=timeout)
    except RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, ReplayBufferError):
            raise cause from None
        raise


def call(method: Any, *args: Any, retry_timeout: float | None = 120.0) -> Any:
    """``method.remote(*args)`` and its result, sent again while its actor is down
    (restarting: the limiter rebuilds its counts when it is back), up to ``retry_timeout``.

    Raises:
        ShardUnavailableError: the actor stayed down past ``retry_timeout``.
    """
    deadline = None
    while True:
        try:
            return get(method.remote(*args))
        except (RayActorError, ObjectLostError) as err:
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + (retry_timeout or 0.0)
            if now >= deadline:
                raise ShardUnavailableError(
                    f"an actor stayed unreachable for {retry_timeout} s ({type(err).__name__})"
                ) from None
            time.sleep(0.2)


def limiter_config(limiter: RateLimiter) -> dict:
    """The rules and counters of ``limiter`` as plain numbers (what the limiter actor is built from)."""
    return limiter.state()


class Limiter:
    """The cluster's rate limiter: one actor holding a ``RateLimiter`` with the user's rules.

    Shards wait here before an add and count their evictions here; the driver waits here
    before a sample. Calls block inside the actor (it runs many threads), with the caller's
    timeout. A restarted limiter (``max_restarts``) rebuilds its counters from the shards'
    own counts (inserts, samples served, evictions).
    """

    def __init__(self, config: dict, shard_names: list[str], namespace: str | None):
        self.rules = RateLimiter(
            config["samples_per_insert"], config["min_size_to_sample"], config["min_diff"], config["max_diff"]
        )
        self.rules.load_state(config)
        self.shard_names, self.namespace = shard_names, namespace
        self.rebuilt = False
        self._next_check = 0.0  # when shards_gone may next ask Ray
        if reconstructed():
            self.rebuild()

    def rebuild(self) -> dict:
        """Set the counters to the sums of the shards' counts; returns the new state."""
        shards = [ray.get_actor(name, namespace=self.namespace) for name in self.shard_names]
        infos = get([shard.info.remote() for shard in shards], timeout=60)
        state = self.rules.state()
        for key in ("inserts", "samples", "deletes"):
            state[key] = sum(info[key] for info in infos)
        state["deletes"] = min(state["deletes"], state["inserts"])
        self.rules.load_state(state)
        self.rebuilt = True
        return self.rules.state()

    def await_insert(self, n: int, timeout: float | None) -> None:
        self.rules.await_insert(n, timeout)

    def await_sample(self, n: int, timeout: float | None) -> None:
        self.rules.await_sample(n, timeout, self.shards_gone)

    def shards_gone(self) -> str | None:
        """Why no insert can come any more (every shard actor is dead for good: killed without
        restart, or out of restarts), else None. Asks Ray at most once a second."""
        now = time.monotonic()
        if now < self._next_check:
            return None
        self._next_check = now + 1.0
        for name in self.shard_names:
            try:
                ray.get_actor(name, namespace=self.namespace)
                return None  # alive, or restarting
            except ValueError:  # Ray no longer knows the actor: dead for good
                continue
        return f"no shard is alive (the actors {', '.join(self.shard_names)} are dead)"

    def undo_sample(self, n: int) -> None:
        self.rules.undo_sample(n)

    def delete(self, n: int) -> None:
        self.rules.delete(n)

    def reset(self) -> None:
        self.rules.reset()

    def close(self) -> None:
        self.rules.close()

    def state(self) -> dict:
        return self.rules.state()

    def check_state(self, state: Any) -> dict:
        return self.rules.check_state(state)

    def load_state(self, state: dict) -> None:
        self.rules.load_state(state)

    def observed_range(self) -> tuple[float, float]:
        return self.rules.observed_range()
