"""The JAX backend: a pure, jit-able buffer core and the TF-Agents-shaped class on top.

``make_buffer`` / ``Buffer`` / ``BufferState`` (``replaybuf.jax.core``): pure functions over a
state pytree for jitted training loops; ``JaxUniformReplayBuffer``: the common API on top
(docs/jax.md); ``checked(fn)``: replaybuf's errors from a jitted function over a
``checked=True`` core. Importing this package imports JAX; ``import replaybuf`` does not.
"""

from replaybuf.jax.buffer import JaxUniformReplayBuffer
from replaybuf.jax.checked import checked
from replaybuf.jax.core import (
    Buffer,
    BufferState,
    EpisodeOptions,
    EpisodeState,
    PriorityOptions,
    PriorityState,
    SampleInfo,
    make_buffer,
)

__all__ = [
    "Buffer",
    "BufferState",
    "EpisodeOptions",
    "EpisodeState",
    "PriorityOptions",
    "PriorityState",
    "SampleInfo",
    "JaxUniformReplayBuffer",
    "checked",
    "make_buffer",
]
