"""flashbax (JAX, functional buffers on jax CPU arrays), each call jitted with the state donated.

Inputs are the same NumPy rows as everyone's (transferred on each call); samples are
waited for (block_until_ready) before the next one. Trajectory windows are not
episode-aware in flashbax.
"""

from __future__ import annotations

from importlib.metadata import version as dist_version

import flashbax as fbx
import jax
import numpy as np

from common import BATCH, WINDOW, filled_with_rss, single_rows, small_pool
from libs import NOTES, shared


def version(lib: str) -> str:
    return f"flashbax {dist_version('flashbax')}, jax {jax.__version__}, numpy {np.__version__}"


def _rows(pool, start, stop):
    return {k: v[start:stop] for k, v in pool.items()}


def _filled(buffer, pool, total, chunk=BATCH, sequences=False):
    """Init from the first row and add ``total`` rows in chunks (a [1, chunk] sequence when ``sequences``)."""
    state = buffer.init({k: v[0] for k, v in pool.items()})
    add = jax.jit(buffer.add, donate_argnums=0)
    n = len(pool["obs"])
    for start in range(0, total - chunk + 1, chunk):
        s = start % n
        if s + chunk > n:
            s = 0
        rows = _rows(pool, s, s + chunk)
        state = add(state, {k: v[None] for k, v in rows.items()} if sequences else rows)
    return jax.block_until_ready(state)


def _keys(n=1024):
    return list(jax.random.split(jax.random.PRNGKey(1), n))


def add1(sizes):
    buffer = fbx.make_flat_buffer(sizes.capacity, 2, BATCH)
    rows = single_rows(small_pool(4096))
    names = ("obs", "action", "reward", "done", "next_obs")
    state = [buffer.init(dict(zip(names, rows[0], strict=True)))]
    add = jax.jit(buffer.add, donate_argnums=0)

    def run(n):
        s = state[0]
        for j in range(n):
            s = add(s, dict(zip(names, rows[j & 4095], strict=True)))
        state[0] = jax.block_until_ready(s)

    return run


def add256(sizes):
    buffer = fbx.make_flat_buffer(sizes.capacity, 2, BATCH, add_batch_size=BATCH)
    pool = small_pool(BATCH * 16)
    batches = [_rows(pool, b * BATCH, (b + 1) * BATCH) for b in range(16)]
    state = [buffer.init({k: v[0] for k, v in pool.items()})]
    add = jax.jit(buffer.add, donate_argnums=0)

    def run(n):
        s = state[0]
        for j in range(n):
            s = add(s, batches[j & 15])
        state[0] = jax.block_until_ready(s)

    return run


def _sampler(buffer, state):
    sample = jax.jit(buffer.sample)
    keys = _keys()

    def run(n):
        for j in range(n):
            jax.block_until_ready(sample(state, keys[j & 1023]))

    return run


def sample256(sizes):
    def build():
        buffer = fbx.make_flat_buffer(sizes.capacity, 2, BATCH, add_batch_size=BATCH)
        return buffer, _filled(buffer, small_pool(sizes.stored), sizes.stored)

    return _sampler(*shared("small", build))


def images(batch_size):
    def factory(sizes):
        state = _images(sizes)[0]
        # flashbax fixes the sample size when a buffer is made; the state is a plain pytree,
        # so a second buffer of the same layout samples the one filled state.
        return _sampler(fbx.make_flat_buffer(sizes.image_capacity, 2, batch_size, add_batch_size=BATCH), state)

    return factory


def _images(sizes):
    def fill(pool):
        buffer = fbx.make_flat_buffer(sizes.image_capacity, 2, BATCH, add_batch_size=BATCH)
        return _filled(buffer, pool, sizes.image_stored)

    return shared("images", lambda: filled_with_rss(fill, sizes.image_stored))


def windows(sizes):
    def build():
        chunk = min(4096, sizes.stored)
        buffer = fbx.make_trajectory_buffer(
            add_batch_size=1,
            sample_batch_size=BATCH,
            sample_sequence_length=WINDOW,
            period=1,
            min_length_time_axis=WINDOW,
            max_size=sizes.capacity,
        )
        return buffer, _filled(buffer, small_pool(sizes.stored), sizes.stored, chunk, sequences=True)

    NOTES.append("not episode-aware (flashbax sequences ignore episode ends)")
    return _sampler(*shared("windows", build))


def per(sizes):
    def build():
        buffer = fbx.make_prioritised_flat_buffer(sizes.capacity, 2, BATCH, add_batch_size=BATCH, priority_exponent=0.6)
        return buffer, _filled(buffer, small_pool(sizes.stored), sizes.stored)

    buffer, state0 = shared("per", build)
    sample = jax.jit(buffer.sample)
    set_priorities = jax.jit(buffer.set_priorities, donate_argnums=0)
    keys = _keys()
    priorities = [np.random.default_rng(i).random(BATCH).astype(np.float32) + 0.01 for i in range(16)]
    state = [state0]

    def run(n):
        s = state[0]
        for j in range(n):
            batch = sample(s, keys[j & 1023])
            s = jax.block_until_ready(set_priorities(s, batch.indices, priorities[j & 15]))
        state[0] = s

    return run


LIBS = {
    "flashbax": {
        "w1_add1": add1,
        "w1_add256": add256,
        "w1_sample256": sample256,
        "w4_windows": windows,
        "w3_per": per,
        "w2_sample32": images(32),
        "w2_sample256": images(BATCH),
        "w2_rss": lambda sizes: _images(sizes)[1],
    }
}
