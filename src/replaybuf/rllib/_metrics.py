"""RLlib's buffer metrics, logged when they are read.

RLlib's buffers log about 26 values into a ``MetricsLogger`` on every ``add`` and 18 on every
``sample``, each a few microseconds to a millisecond: more than the buffer's own work for small
adds. :class:`DeferredMetrics` takes the same calls and hands them to the logger on the next
read (``reduce``, which ``get_metrics`` calls, or any other attribute): values logged with
``reduce="sum"`` or ``"lifetime_sum"`` are added up per key first, values of a windowed stat
keep only their last ``window`` (the ones such a stat keeps). The logger then holds what it
would have held had every call gone straight to it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["DeferredMetrics"]

_SUMS = ("sum", "lifetime_sum")


class DeferredMetrics:
    """A ``MetricsLogger`` front whose ``log_value`` calls wait for the next read."""

    def __init__(self, logger: Any):
        self.logger = logger
        self.before_flush: Any = None  # called first by flush (the buffer's pending add metrics)
        self.dropped: frozenset = frozenset()  # keys whose values log_value ignores meanwhile
        self._sums: dict[Any, list] = {}  # key -> [value, reduce]
        self._series: dict[Any, tuple[dict, deque]] = {}  # key -> (options, values)

    def log_value(self, key: Any, value: Any, *, reduce: str | None = None, window: Any = None, **options: Any) -> None:
        if key in self.dropped:
            return
        if reduce in _SUMS and window is None and not options:
            entry = self._sums.get(key)
            if entry is None:
                self._sums[key] = [value, reduce]
            else:
                entry[0] += value
            return
        entry = self._series.get(key)
        if entry is None:
            size = int(window) if isinstance(window, int) and window > 0 else None
            entry = self._series[key] = ({"reduce": reduce, "window": window, **options}, deque(maxlen=size))
        entry[1].append(value)

    def flush(self) -> None:
        """Hand every waiting value to the logger."""
        if self.before_flush is not None:
            self.before_flush()
        sums, series = self._sums, self._series
        self._sums, self._series = {}, {}
        for key, (value, reduce) in sums.items():
            self.logger.log_value(key, value, reduce=reduce)
        for key, (options, values) in series.items():
            for value in values:
                self.logger.log_value(key, value, **options)

    def reduce(self, *args: Any, **kwargs: Any) -> Any:
        self.flush()
        return self.logger.reduce(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # peek, stats, ...: the logger's, up to date
        if name.startswith("_") or name in ("logger", "flush", "before_flush", "dropped"):
            raise AttributeError(name)
        self.flush()
        return getattr(self.logger, name)
