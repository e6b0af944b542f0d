"""Random bits from a JAX key: Threefry-2x32 written out, one kernel of its own on CPU.

On CPU, ``jax.random`` lowers Threefry as a rolled loop of five steps (short compile
times), which XLA runs as a loop of small kernels, a share of every sample's time. Written
out round by round, the hash is one kernel, a few times faster (docs/jax.md).
The bits are ``jax.random.bits``' own, bit for bit, in either counter layout
(``jax_threefry_partitionable`` on or off), so a key draws what it drew before. Other
platforms (whose lowering is unrolled already), keys of another implementation (``rbg``),
empty shapes and checked buffers (``checkify`` refuses the loop below under ``vmap``) go
through ``jax.random``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["random_bits", "random_uniform"]

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2,
# 3", SC 2011): the rotation of each round, and the key schedule's parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _threefry(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The 20-round hash of the counter pairs ``(x0, x1)`` under the key ``(k0, k1)``."""
    schedule = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + schedule[0], x1 + schedule[1]
    for injection in range(1, 6):  # four rounds, then the key schedule's next words
        for r in _ROTATIONS[(injection - 1) % 2]:
            x0 = x0 + x1
            x1 = x0 ^ ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r)))
        x0 = x0 + schedule[injection % 3]
        x1 = x1 + schedule[(injection + 1) % 3] + np.uint32(injection)
    return x0, x1


def _threefry_key(key: jax.Array) -> jax.Array | None:
    """The key's two words when it is a Threefry key (typed, or a raw ``uint32[2]`` of the
    default implementation), else None."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key) if str(jax.random.key_impl(key)) == "threefry2x32" else None
    threefry_default = jax.config.jax_default_prng_impl == "threefry2x32"
    return key if threefry_default and key.dtype == jnp.uint32 and key.shape == (2,) else None


def random_bits(key: jax.Array, shape: tuple[int, ...], checked: bool = False) -> jax.Array:
    """``jax.random.bits(key, shape, jnp.uint32)``: uint32 ``shape``. ``checked``: the caller
    runs under ``checkify`` (jax.random's own lowering)."""
    words = None if checked else _threefry_key(key)
    size = int(np.prod(shape))
    if words is None or not 0 < size < 2**32:
        return jax.random.bits(key, shape, jnp.uint32)
    return jax.lax.platform_dependent(
        key,
        words,
        cpu=lambda _, words: _unrolled_bits(words, shape, jax.config.jax_threefry_partitionable),
        default=lambda key, _: jax.random.bits(key, shape, jnp.uint32),
    )


def _unrolled_bits(words: jax.Array, shape: tuple[int, ...], partitionable: bool) -> jax.Array:
    size = int(np.prod(shape))

    def hashed(_: tuple) -> tuple[jax.Array, jax.Array]:
        if partitionable:  # element i hashes the 64-bit counter i
            counters = jnp.arange(size, dtype=jnp.uint32)
            high, low = _threefry(words[0], words[1], jnp.zeros_like(counters), counters)
            bits = high ^ low
        else:  # counters 0..size-1 (and a 0 when size is odd) paired as (i, i + half)
            half = -(-size // 2)
            counters = jnp.arange(2 * half, dtype=jnp.uint32) % np.uint32(size)
            first, second = _threefry(words[0], words[1], counters[:half], counters[half:])
            bits = jnp.concatenate([first, second])[:size]
        return (bits[0] | np.uint32(1)) != 0, bits.reshape(shape)  # always true: one pass

    # One pass of a loop XLA cannot count (its end depends on the bits): XLA fuses nothing
    # across a loop's edge, so the rounds stay one kernel of their own. Fused into their
    # readers, they were run again by each (a row gather ran them once per word of a row).
    init = (jnp.zeros((), bool), jnp.zeros(shape, jnp.uint32))
    return jax.lax.while_loop(lambda carry: ~carry[0], hashed, init)[1]


def random_uniform(key: jax.Array, shape: tuple[int, ...], checked: bool = False) -> jax.Array:
    """``jax.random.uniform(key, shape)``: float32 in ``[0, 1)`` from the top 23 bits."""
    mantissa = random_bits(key, shape, checked) >> np.uint32(32 - 23)
    return jax.lax.bitcast_convert_type(mantissa | np.uint32(0x3F800000), jnp.float32) - 1.0
