"""Adapters: one module per environment, each mapping library labels to workload factories.

An adapter module has ``LIBS = {label: {workload key: factory}}`` and ``version(label)``. A
factory takes the suite's ``common.Sizes`` and returns either ``run(n)`` (n operations,
timed by the harness) or a number (a figure measured otherwise, such as RSS per item), or
raises ``Missing`` with the reason. ``measure`` runs the factories of every adapter in
this process, one workload at a time, their repetitions interleaved (bench/harness.py).

``shared`` keeps one filled buffer per library for the workloads of one group (w1, w2, ...);
they are all dropped when the group changes, so one group's memory at a time.
"""

from __future__ import annotations

import gc
import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import harness
from common import SIZES

_CACHE: dict[tuple[str, str], Any] = {}
_GROUP = [""]
#: notes an adapter attaches to the workload being measured (e.g. "not episode-aware"); emptied per factory.
NOTES: list[str] = []


class Missing(Exception):
    """The library has no such operation, or the part of replaybuf is not written yet."""


def shared(name: str, build: Callable[[], Any]) -> Any:
    """Build ``name`` once per calling adapter module within the current workload group."""
    key = (sys._getframe(1).f_globals["__name__"], name)
    if key not in _CACHE:
        _CACHE[key] = build()
    return _CACHE[key]


def _begin(key: str) -> None:
    group = key.split("_")[0]
    if group != _GROUP[0]:
        _CACHE.clear()
        _GROUP[0] = group


def _missing(workload: harness.Workload, label: str, exc: Exception) -> None:
    if not isinstance(exc, Missing):  # one failing workload must not stop the others
        traceback.print_exc()
    reason = str(exc) if isinstance(exc, Missing) else f"{type(exc).__name__}: {exc}"[:300]
    harness.missing([workload.key], label, reason)


def measure(workloads: Sequence[harness.Workload], adapters: Sequence[str], size: str, keys: Sequence[str]) -> None:
    """Time every adapter's factories for ``workloads`` (only ``keys`` when given) at ``size``."""
    sizes, timing = SIZES[size], harness.TIMINGS[size]
    libs = []
    for name in adapters:
        module = importlib.import_module(f"libs.{name}")
        for label, factories in module.LIBS.items():
            harness.emit(lib=label, version=module.version(label))
            libs.append((label, factories))
    for workload in workloads:
        if keys and workload.key not in keys:
            continue
        _begin(workload.key)
        runs, notes = {}, {}
        for label, factories in libs:
            if workload.key not in factories:
                continue
            NOTES.clear()
            try:
                made = factories[workload.key](sizes)
            except Exception as exc:
                _missing(workload, label, exc)
                continue
            if callable(made):
                runs[label], notes[label] = made, "; ".join(NOTES)
            else:
                harness.figure(workload, label, float(made), "; ".join(NOTES))
        if runs:
            harness.measure(workload, runs, timing, notes)
        runs = None
        gc.collect()
