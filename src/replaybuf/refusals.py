"""The messages of a refused read or priority update, written once for every backend.

Beside ``mismatch`` (a rejected add): each function returns the error to raise, so the
NumPy, torch, TensorFlow, JAX, shared-memory and Ray buffers say the same thing in the
same words for the same mistake.
"""

from __future__ import annotations

import numpy as np

from replaybuf.errors import EmptyBufferError, PriorityError

__all__ = ["bad_priorities", "empty", "no_episode_window", "overwritten_while_read", "unknown_ids", "window_too_long"]

_SHORTER = "add more steps or ask for shorter windows"


def empty(name: str) -> EmptyBufferError:
    """Nothing is stored; TF-Agents' words (its users match on them)."""
    return EmptyBufferError(f"The {name} is empty. Make sure to add items before sampling the buffer.")


def window_too_long(
    num_steps: int, held: int | None = None, max_length: int | None = None, where: str = "stream", detail: str = ""
) -> EmptyBufferError:
    """Items are stored, but no ``where`` holds ``num_steps`` of them (``held``: the most one holds)."""
    if held is None:
        have = f"no {where} holds {num_steps} steps yet"
    else:
        have = f"each {where} holds only {held} steps (max_length={max_length})"
    return EmptyBufferError(f"num_steps={num_steps}: {have}{detail}; {_SHORTER}")


def no_episode_window(num_steps: int, padding: bool, detail: str = "") -> EmptyBufferError:
    """Windows must lie inside one episode and none does; ``padding``: the buffer offers
    ``pad_episode_ends=True``, so the message names it."""
    pad = ", or pass pad_episode_ends=True" if padding else ""
    return EmptyBufferError(
        f"num_steps={num_steps}: no stored episode holds {num_steps} steps{detail}; "
        f"add longer episodes or ask for shorter windows{pad}"
    )


def overwritten_while_read(what: str, tries: int) -> EmptyBufferError:
    """Writers in other processes overwrote what was being read ``tries`` times in a row."""
    return EmptyBufferError(f"{what} overwritten while read {tries} times in a row; writers wrap too fast")


def bad_priorities(priorities: np.ndarray, bad: np.ndarray) -> PriorityError:
    """Priorities (where ``bad`` is True) that are not finite and > 0."""
    return PriorityError(
        f"priorities: expected finite values > 0, got {priorities[bad][:5].tolist()} "
        f"at positions {np.flatnonzero(bad)[:5].tolist()}"
    )


def unknown_ids(ids: np.ndarray, never: np.ndarray, head: int | None = None) -> PriorityError:
    """Ids (where ``never`` is True) of no item ever added; ``head``: the next id to be added,
    when one counter numbers every item."""
    bounds = "" if head is None else f" (0 <= id < {head})"
    return PriorityError(f"ids: expected ids of added items{bounds}, got {ids[never][:5].tolist()}")
