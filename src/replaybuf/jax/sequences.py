"""Sequences with a burn-in in the pure JAX core: the twin of ``replaybuf.samplers.sequences``.

The rule is the NumPy one (that module's docstring): a learning start at an episode position
that is a multiple of ``period``, ``burn_in`` steps before it and ``num_steps`` from it, each
step real or padded with the nearest real one. Shapes are fixed under jit, so the eligible
starts are a mask over every slot, recomputed from the positions at each sample, and a start
is drawn from that mask exactly: uniformly (the k-th eligible slot, k uniform below their
count) or by priority (a descent over the masked masses, summed afresh). Each sample
therefore costs O(capacity) on the device, where the NumPy buffers keep their starts listed
across adds; in exchange nothing is kept between samples and every ``(num_steps, period)``
costs the same.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["sequence_windows"]


def sequence_windows(
    position: jax.Array, steps: jax.Array, starts: jax.Array, burn_in: int, num_steps: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(ids, mask, learn)`` of the sequences from the learning ``starts`` (ids ``[N]``), each
    ``[N, burn_in + num_steps]``, for a buffer of ``position`` ``[max_length, batch_size]``
    after ``steps`` adds: real steps are one run around the start (the burn-in back to the
    episode's first step or the oldest stored one; the learning steps up to the episode's
    last or the head), every other step repeats the nearest real id."""
    max_length, batch = position.shape
    capacity = max_length * batch
    flat = position.reshape(-1)
    step = starts // batch
    here = flat[(starts % capacity).astype(jnp.int32)]
    oldest = jnp.maximum(steps - max_length, 0)
    back = jnp.minimum(jnp.minimum(here, (step - oldest).astype(here.dtype)), burn_in)
    offsets = jnp.arange(-burn_in, num_steps, dtype=jnp.int32)
    ahead = starts[:, None] + offsets[burn_in:].astype(starts.dtype) * batch
    slots = (ahead % capacity).astype(jnp.int32)
    ahead_real = (ahead < steps * batch) & (flat[slots] == here[:, None] + offsets[burn_in:])
    last = jnp.sum(ahead_real, axis=-1, dtype=jnp.int32) - 1  # real learning steps: a run from the start
    clipped = jnp.clip(offsets, -back[:, None], last[:, None])
    ids = starts[:, None] + clipped.astype(starts.dtype) * batch
    mask = clipped == offsets
    return ids, mask, mask & (offsets >= 0)
