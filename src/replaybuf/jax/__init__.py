"""The JAX backend: a pure, jit-able buffer core and the TF-Agents-shaped class on top.

``make_buffer`` / ``Buffer`` / ``BufferState`` (``replaybuf.jax.core``): pure functions over a
state pytree for jitted training loops; ``JaxReplayBuffer``: the common API on top
(docs/jax.md); ``checked(fn)``: replaybuf's errors from a jitted function over a
``checked=True`` core. Deprecated old names, removed in 0.2.0: ``JaxUniformReplayBuffer``
(``JaxReplayBuffer``) and ``SampleInfo`` (the core's ``DrawInfo``; ``get_next`` returns
``replaybuf.SampleInfo``). Importing this package imports JAX; ``import replaybuf`` does not.
"""

import warnings
from typing import Any

from replaybuf.jax.buffer import JaxReplayBuffer, JaxUniformReplayBuffer
from replaybuf.jax.checked import checked
from replaybuf.jax.core import (
    Buffer,
    BufferState,
    DrawInfo,
    EpisodeOptions,
    EpisodeState,
    PriorityOptions,
    PriorityState,
    make_buffer,
)

__all__ = [
    "Buffer",
    "BufferState",
    "EpisodeOptions",
    "EpisodeState",
    "PriorityOptions",
    "PriorityState",
    "DrawInfo",
    "JaxReplayBuffer",
    "JaxUniformReplayBuffer",
    "checked",
    "make_buffer",
]


def __getattr__(name: str) -> Any:
    if name == "SampleInfo":  # the core's info, renamed: replaybuf.SampleInfo is get_next's
        warnings.warn(
            "replaybuf.jax.SampleInfo is deprecated and will be removed in 0.2.0: use replaybuf.jax.DrawInfo "
            "(what the pure core's sample returns; get_next returns replaybuf.SampleInfo)",
            DeprecationWarning,
            stacklevel=2,
        )
        return DrawInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
