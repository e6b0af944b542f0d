"""The one spelling of a buffer's sampler choice: ``sampler="uniform"`` or ``sampler="prioritized"``.

Every buffer that offers both (the shared-memory, Ray and JAX buffers, the JAX core) takes
this keyword and checks it here, so the choice and its error read the same everywhere. The
NumPy presets are the choice made by class (``UniformReplayBuffer``,
``PrioritizedReplayBuffer``); the JAX ``prioritized=`` flag is its deprecated old spelling.
"""

from __future__ import annotations

import warnings
from typing import Any

from replaybuf.errors import ArgumentError

__all__ = ["SAMPLERS", "check_sampler"]

SAMPLERS = ("uniform", "prioritized")


def check_sampler(sampler: Any, prioritized: bool | None = None) -> str:
    """``sampler`` checked; ``prioritized`` (True/False, the deprecated flag) overrides it with a
    DeprecationWarning. ArgumentError for any other value of either."""
    if prioritized is not None:
        if not isinstance(prioritized, bool):
            raise ArgumentError(f"prioritized: expected True or False, got {prioritized!r}")
        warnings.warn(
            "prioritized= is deprecated and will be removed in 0.2.0: pass sampler='prioritized' (or 'uniform')",
            DeprecationWarning,
            stacklevel=3,
        )
        sampler = "prioritized" if prioritized else "uniform"
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise ArgumentError(f"sampler: expected 'uniform' or 'prioritized', got {sampler!r}")
    return sampler
