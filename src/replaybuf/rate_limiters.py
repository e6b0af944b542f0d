"""Rate limiters: how far inserts and samples may run ahead of each other (Reverb's rules).

A limiter counts ``I`` items inserted, ``S`` items sampled and ``D`` items deleted (evicted
by overwrites) and, with ``spi = samples_per_insert``:

- an insert of ``n`` items may proceed while ``I + n - D <= min_size_to_sample`` (the buffer
  is still filling), else only if ``(I + n) * spi - S <= max_diff``;
- a sample of ``n`` items may proceed only if ``I - D >= min_size_to_sample`` and
  ``I * spi - S - n >= min_diff``.

A call that may not proceed waits (optionally up to a timeout, then ``RateLimiterTimeout``
is raised having counted nothing); ``close()`` wakes every waiter with
``BufferClosedError``. A sample may also be given a check that ends its wait with
``WritersGoneError`` once no insert can come (a shared buffer whose writers all died).
The counters are part of a buffer's checkpoint (``state()`` / ``load_state()``).

One limiter serves threads of one process; ``shared(context)`` makes a copy whose
counters and condition live in ``multiprocessing`` shared memory, so writer processes and
the learner of a ``SharedReplayBuffer`` wait on the same counts. Such a copy travels to a
child process as an argument of ``Process`` (inheritance), like any multiprocessing lock.

``wait_for_eligible``: a sample under sample-count rules that finds too few eligible items
waits for adds, with the limiter's timeout, rather than raising ``EmptyBufferError``.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from replaybuf.errors import (
    ArgumentError,
    BufferClosedError,
    CheckpointError,
    EmptyBufferError,
    RateLimiterTimeout,
    WritersGoneError,
)

__all__ = ["MinSize", "RateLimiter", "SampleToInsertRatio", "check_rate_limiter", "check_timeout", "wait_for_eligible"]

_INSERTS, _SAMPLES, _DELETES, _CLOSED = range(4)
_STATE_KEYS = ("inserts", "samples", "deletes")


def _number(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ArgumentError(f"{name}: expected a number, got {value!r}")
    if positive and not value > 0:
        raise ArgumentError(f"{name}: expected a positive number, got {value!r}")
    return float(value)


def _min_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"min_size_to_sample: expected a positive int, got {value!r}")
    return int(value)


def check_timeout(value: Any, name: str = "timeout") -> float | None:
    """None (wait forever) or a non-negative number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ArgumentError(f"{name}: expected None or a number of seconds >= 0, got {value!r}")
    return float(value)


def check_rate_limiter(value: Any) -> RateLimiter | None:
    """None or a rate limiter (``MinSize``, ``SampleToInsertRatio``); ArgumentError otherwise."""
    if value is not None and not isinstance(value, RateLimiter):
        raise ArgumentError(f"rate_limiter: expected a MinSize or SampleToInsertRatio, got {type(value).__name__}")
    return value


def wait_for_eligible(
    draw: Callable[[], Any],
    limiter: Any,
    timeout: float | None,
    wait: Callable[[float | None], None],
    gone: Callable[[], str | None] | None = None,
) -> Any:
    """``draw()`` until it finds enough eligible items: each ``EmptyBufferError`` (too few
    eligible under the sample-count rules) waits for adds with ``wait(seconds left, or None)``,
    up to ``timeout`` seconds in all (a buffer's ``rate_limiter_timeout``).

    Raises:
        BufferClosedError: ``limiter`` was closed meanwhile.
        RateLimiterTimeout: still too few after ``timeout`` seconds.
        WritersGoneError: ``gone()`` said why no add can come (a shared buffer's writers).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return draw()
        except EmptyBufferError as err:
            left = None if deadline is None else deadline - time.monotonic()
            if limiter.closed:
                raise BufferClosedError("the buffer was closed while a sample waited for eligible items") from err
            if left is not None and left <= 0:
                raise RateLimiterTimeout(
                    f"get_next waited {timeout} s for eligible items (rate_limiter_timeout): {err}"
                ) from err
            why = None if gone is None else gone()
            if why is not None:
                raise WritersGoneError(f"get_next waits for eligible items, but {why}") from err
            wait(left)


class RateLimiter:
    """Reverb's rate limiter (see the module docstring for the rules).

    Args:
        samples_per_insert: how many times, on average, each item should be sampled.
        min_size_to_sample: samples wait until this many items are stored.
        min_diff, max_diff: the range ``I * spi - S`` is kept in once the buffer holds
            ``min_size_to_sample`` items.

    Use ``MinSize`` or ``SampleToInsertRatio`` rather than this class directly.
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float):
        self.samples_per_insert = _number("samples_per_insert", samples_per_insert, positive=True)
        self.min_size_to_sample = _min_size(min_size_to_sample)
        self.min_diff = _number("min_diff", min_diff)
        self.max_diff = _number("max_diff", max_diff)
        if self.min_diff > self.max_diff:
            raise ArgumentError(f"min_diff ({min_diff}) > max_diff ({max_diff}): no state satisfies both")
        self._cond: Any = threading.Condition()
        self._counts: Any = array("q", [0, 0, 0, 0])
        self._extremes: Any = array("d", [-math.inf, math.inf])

    # -- the rules --------------------------------------------------------------------------
    def can_insert(self, n: int) -> bool:
        """Whether an insert of ``n`` items may proceed now (Reverb's ``CanInsert``)."""
        inserts, samples, deletes = self._counts[_INSERTS], self._counts[_SAMPLES], self._counts[_DELETES]
        if inserts + n - deletes <= self.min_size_to_sample:
            return True
        return (inserts + n) * self.samples_per_insert - samples <= self.max_diff

    def can_sample(self, n: int) -> bool:
        """Whether a sample of ``n`` items may proceed now (Reverb's ``CanSample``)."""
        inserts, samples, deletes = self._counts[_INSERTS], self._counts[_SAMPLES], self._counts[_DELETES]
        if inserts - deletes < self.min_size_to_sample:
            return False
        return inserts * self.samples_per_insert - samples - n >= self.min_diff

    # -- waiting ----------------------------------------------------------------------------
    def await_insert(self, n: int, timeout: float | None = None, deletes: int = 0) -> None:
        """Wait until ``n`` items may be inserted, then count them (and ``deletes`` evictions).

        Raises:
            RateLimiterTimeout: still blocked after ``timeout`` seconds; nothing counted.
            BufferClosedError: the limiter was closed (before or while waiting).
        """
        self._await("insert", n, timeout, lambda: self.can_insert(n), ((_INSERTS, n), (_DELETES, deletes)))

    def await_sample(
        self, n: int, timeout: float | None = None, writers_gone: Callable[[], str | None] | None = None
    ) -> None:
        """Wait until ``n`` items may be sampled, then count them.

        ``writers_gone``, asked while the sample is blocked, returns why no insert can come
        any more (say, every writer process died), or None while one still may.

        Raises:
            RateLimiterTimeout: still blocked after ``timeout`` seconds; nothing counted.
            BufferClosedError: the limiter was closed (before or while waiting).
            WritersGoneError: blocked while ``writers_gone`` names a reason; nothing counted.
        """
        self._await("sample", n, timeout, lambda: self.can_sample(n), ((_SAMPLES, n),), writers_gone)

    def _await(
        self,
        what: str,
        n: int,
        timeout: float | None,
        allowed: Callable[[], bool],
        counts: tuple,
        writers_gone: Callable[[], str | None] | None = None,
    ) -> None:
        timeout = check_timeout(timeout)
        call, done = ("an insert", "inserted") if what == "insert" else ("a sample", "sampled")
        with self._cond:
            if not (self._counts[_CLOSED] or allowed()):
                deadline = None if timeout is None else time.monotonic() + timeout
                while not (self._counts[_CLOSED] or allowed()):
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise RateLimiterTimeout(
                            f"rate limiter: {call} of {n} items was still blocked after {timeout} s "
                            f"({self._describe()}); nothing was {done}"
                        )
                    gone = None if writers_gone is None else writers_gone()
                    if gone is not None:
                        raise WritersGoneError(
                            f"rate limiter: {call} of {n} items waits for inserts, but {gone}; it would wait "
                            f"forever ({self._describe()}); nothing was {done}"
                        )
                    # bounded waits: a multiprocessing condition's wait cannot be interrupted
                    self._cond.wait(0.1 if left is None else min(left, 0.1))
            if self._counts[_CLOSED]:
                raise BufferClosedError(f"rate limiter: closed; the {what} of {n} items was not made")
            for index, amount in counts:
                self._counts[index] += amount
            diff = self._counts[_INSERTS] * self.samples_per_insert - self._counts[_SAMPLES]
            if what == "insert":
                self._extremes[0] = max(self._extremes[0], diff)
            else:
                self._extremes[1] = min(self._extremes[1], diff)
            self._cond.notify_all()

    def wait_change(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds (at most 0.1: a multiprocessing condition's wait cannot
        be interrupted) for the counts to change: an insert, a delete, a reset or ``close``. What
        a sample waiting for eligible items (sample-count rules) blocks on between looks."""
        with self._cond:
            if not self._counts[_CLOSED]:
                self._cond.wait(max(0.0, min(timeout, 0.1)))

    def undo_sample(self, n: int) -> None:
        """Uncount a granted sample of ``n`` items whose read then failed."""
        self._add(_SAMPLES, -n)

    def delete(self, n: int) -> None:
        """Count ``n`` items evicted outside an insert (they may unblock inserts)."""
        self._add(_DELETES, n)

    def _add(self, index: int, amount: int) -> None:
        with self._cond:
            self._counts[index] += amount
            self._cond.notify_all()

    def reset(self) -> None:
        """Forget the counts (the buffer was cleared), as Reverb's table reset does."""
        with self._cond:
            for index in (_INSERTS, _SAMPLES, _DELETES):
                self._counts[index] = 0
            self._extremes[0], self._extremes[1] = -math.inf, math.inf
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter with ``BufferClosedError``; later waits raise it at once."""
        with self._cond:
            self._counts[_CLOSED] = 1
            self._cond.notify_all()

    def observed_range(self) -> tuple[float, float]:
        """``(highest I * spi - S right after an insert, lowest right after a sample)`` so far.

        With the rules kept, the first is at most ``max_diff`` and the second at least
        ``min_diff`` (``-inf`` / ``inf`` before any insert / sample): a check of a run.
        """
        with self._cond:
            return self._extremes[0], self._extremes[1]

    @property
    def closed(self) -> bool:
        return bool(self._counts[_CLOSED])

    # -- checkpoints ------------------------------------------------------------------------
    def state(self) -> dict:
        """The counters and the configuration, as plain ints and floats."""
        with self._cond:
            counts = {key: int(self._counts[i]) for i, key in enumerate(_STATE_KEYS)}
        return {**counts, **self._config()}

    def check_state(self, state: Any) -> dict:
        """Validate a ``state()`` for this limiter; returns it. Raises ``CheckpointError``."""
        if not isinstance(state, dict):
            raise CheckpointError(f"rate limiter state: expected a dict, got {type(state).__name__}")
        for key in _STATE_KEYS:
            value = state.get(key)
            # counters live in int64 slots: 2**62 leaves them room to count on
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
                raise CheckpointError(
                    f"rate limiter state[{key!r}]: expected an int >= 0, got {value!r:.60} (counters stay <= 2**62)"
                )
        if state["deletes"] > state["inserts"]:
            raise CheckpointError(f"rate limiter state: {state['deletes']} deletes > {state['inserts']} inserts")
        for key, value in self._config().items():
            saved = state.get(key)
            if isinstance(saved, bool) or not isinstance(saved, (int, float)) or saved != value:
                raise CheckpointError(f"rate limiter state[{key!r}]: saved {saved!r:.60}, this limiter has {value!r}")
        return state

    def load_state(self, state: dict) -> None:
        """Restore counters from ``state()`` (validated by ``check_state`` first)."""
        self.check_state(state)
        with self._cond:
            for i, key in enumerate(_STATE_KEYS):
                self._counts[i] = state[key]
            self._cond.notify_all()

    def _config(self) -> dict:
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "min_diff": self.min_diff,
            "max_diff": self.max_diff,
        }

    # -- processes --------------------------------------------------------------------------
    def shared(self, context: Any) -> RateLimiter:
        """A copy (same rules and counts) whose state lives in shared memory of ``context``.

        ``context`` is a ``multiprocessing`` context (``get_context("spawn")``, ...). The copy
        pickles into a child process only as a ``Process`` argument.
        """
        copy = object.__new__(type(self))
        copy.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_cond", "_counts", "_extremes")})
        copy._counts = context.RawArray("q", list(self._counts))
        copy._extremes = context.RawArray("d", list(self._extremes))
        copy._cond = context.Condition(context.Lock())
        return copy

    def _describe(self) -> str:
        c = self._counts
        return (
            f"inserts={c[_INSERTS]}, samples={c[_SAMPLES]}, deletes={c[_DELETES]}, "
            f"samples_per_insert={self.samples_per_insert:g}, min_size_to_sample={self.min_size_to_sample}, "
            f"diff range [{self.min_diff:g}, {self.max_diff:g}]"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()})"


class MinSize(RateLimiter):
    """Samples wait until ``min_size_to_sample`` items are stored; inserts never wait."""

    def __init__(self, min_size_to_sample: int):
        super().__init__(1.0, min_size_to_sample, -sys.float_info.max, sys.float_info.max)


class SampleToInsertRatio(RateLimiter):
    """Keeps samples per insert near ``samples_per_insert`` once ``min_size_to_sample`` are stored.

    ``error_buffer`` a number ``eb`` gives the range
    ``[spi * min_size_to_sample - eb, spi * min_size_to_sample + eb]`` for ``I * spi - S``;
    a pair ``(min_diff, max_diff)`` is used as it is. Inserts wait above the range and samples
    below it, so the achieved ratio stays within ``error_buffer`` of the target.

    Raises:
        ArgumentError: ``samples_per_insert`` not positive, ``min_size_to_sample`` not a
            positive int, a negative ``error_buffer``, a range narrower than
            ``2 * max(1, samples_per_insert)`` (inserts or samples could block for good), or a
            range whose low end is above ``samples_per_insert * min_size_to_sample`` (a
            deadlock as soon as ``min_size_to_sample`` items are stored).
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int, error_buffer: Any):
        spi = _number("samples_per_insert", samples_per_insert, positive=True)
        min_size = _min_size(min_size_to_sample)
        if isinstance(error_buffer, (tuple, list)) and len(error_buffer) == 2:
            min_diff = _number("error_buffer[0]", error_buffer[0])
            max_diff = _number("error_buffer[1]", error_buffer[1])
        else:
            if isinstance(error_buffer, (tuple, list)):
                raise ArgumentError(
                    f"error_buffer: expected a number or a (min_diff, max_diff) pair, got {error_buffer!r}"
                )
            eb = _number("error_buffer", error_buffer)
            if eb < 0:
                raise ArgumentError(f"error_buffer: expected a number >= 0, got {error_buffer!r}")
            min_diff, max_diff = spi * min_size - eb, spi * min_size + eb
        if max_diff - min_diff < 2 * max(1.0, spi):
            raise ArgumentError(
                f"error_buffer: the range [{min_diff:g}, {max_diff:g}] is narrower than "
                f"2 * max(1, samples_per_insert) = {2 * max(1.0, spi):g}; so small a range could block "
                "inserts or samples for good: widen error_buffer"
            )
        if min_diff > spi * min_size:
            raise ArgumentError(
                f"error_buffer: the range [{min_diff:g}, {max_diff:g}] starts above samples_per_insert * "
                f"min_size_to_sample = {spi * min_size:g}; this deadlocks as soon as min_size_to_sample "
                "items are stored: lower its low end"
            )
        super().__init__(spi, min_size, min_diff, max_diff)
