"""Adapters: one module per environment, each mapping library labels to row factories.

Helpers shared by the adapters: ``Missing`` (a row the library cannot run, with the
reason) and ``shared`` (one filled buffer reused by the rows of one workload).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_CACHE: dict[str, Any] = {}
#: notes an adapter attaches to the row being measured (e.g. "not episode-aware"); the worker empties it.
NOTES: list[str] = []


class Missing(Exception):
    """The library has no such operation, or the part of replaybuf is not written yet."""


def shared(name: str, build: Callable[[], Any]) -> Any:
    """Build ``name`` once; a new name drops the previous buffers (one workload's memory at a time)."""
    if name not in _CACHE:
        _CACHE.clear()
        _CACHE[name] = build()
    return _CACHE[name]
