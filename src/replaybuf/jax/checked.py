"""Checked mode: replaybuf's own errors from a jitted function over a ``checked=True`` core.

Inside jit nothing can raise on values, so a ``make_buffer(..., checked=True)`` core states
its two value faults (a sample with no valid window, bad ``update_priorities`` entries) as
``jax.experimental.checkify`` checks. ``checked(fn)`` jits ``checkify.checkify(fn)`` and, after
each call, raises the first failed check as the replaybuf error it names
(``EmptyBufferError``, ``PriorityError``). The step has run by then (a donated state is gone),
so the error carries the step's results as ``error.outputs``; the core's defined results
hold there (an invalid sample is marked, bad priority entries were dropped and counted).

Reading the error is one device sync per call: use checked mode while debugging, or on
calls that are rare.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.experimental import checkify

from replaybuf import errors

__all__ = ["checked"]

_RAISED = {"EmptyBufferError": errors.EmptyBufferError, "PriorityError": errors.PriorityError}
_SUFFIX = " (`check` failed)"  # what checkify appends to a failed check's message


def checked(fn: Callable, **jit_options: Any) -> Callable:
    """``fn`` jitted with its checkify checks (``jit_options`` go to ``jax.jit``, e.g.
    ``donate_argnums``); each call returns ``fn``'s results or raises the replaybuf error of
    the first failed check, with those results as its ``outputs`` attribute."""
    compiled = jax.jit(checkify.checkify(fn, errors=checkify.user_checks), **jit_options)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        error, outputs = compiled(*args, **kwargs)
        message = error.get()
        if message is None:
            return outputs
        name, _, text = message.removesuffix(_SUFFIX).partition(": ")
        raised = _RAISED.get(name)
        if raised is None:  # a user's own check in fn: checkify's message, checkify's error
            error.throw()
        failure = raised(text)
        failure.outputs = outputs
        raise failure

    return call
