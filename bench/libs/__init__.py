"""Adapters: one module per environment, each mapping library labels to row factories.

Helpers shared by the adapters: ``Missing`` (a row the library cannot run, with the
reason) and ``shared`` (one filled buffer per library reused by the rows of one workload;
the worker drops them all when the workload changes, so one workload's memory at a time).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

_CACHE: dict[tuple[str, str], Any] = {}
_WORKLOAD = [""]
#: notes an adapter attaches to the row being measured (e.g. "not episode-aware"); the worker empties it.
NOTES: list[str] = []


class Missing(Exception):
    """The library has no such operation, or the part of replaybuf is not written yet."""


def begin_row(key: str) -> None:
    """Called by the worker before each row: a new workload (w1, w2, ...) drops the shared buffers."""
    workload = key.split("_")[0]
    if workload != _WORKLOAD[0]:
        _CACHE.clear()
        _WORKLOAD[0] = workload


def shared(name: str, build: Callable[[], Any]) -> Any:
    """Build ``name`` once per calling adapter module within the current workload."""
    key = (sys._getframe(1).f_globals["__name__"], name)
    if key not in _CACHE:
        _CACHE[key] = build()
    return _CACHE[key]
