"""replaybuf.jax.bits: jax.random's Threefry bits, bit for bit, as one kernel on CPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from replaybuf import ArraySpec  # noqa: E402
from replaybuf.jax import make_buffer  # noqa: E402
from replaybuf.jax.bits import random_bits, random_uniform  # noqa: E402

SHAPES = [(), (1,), (7,), (3, 5), (256,), (0,)]
# The unrolled Threefry is the CPU's lowering by design (other platforms unroll jax.random's
# own): the bits are the same everywhere, the shape of the compiled program is the CPU's only.
CPU_ONLY = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's lowering (bits.py)")
KEYS = {
    "typed threefry": lambda: jax.random.key(3),
    "raw uint32[2]": lambda: jax.random.PRNGKey(5),
    "rbg (through jax.random)": lambda: jax.random.key(2, impl="rbg"),
}


@pytest.fixture(params=[True, False], ids=["partitionable", "original layout"])
def counter_layout(request):
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param)
    yield request.param
    jax.config.update("jax_threefry_partitionable", before)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", list(KEYS))
def test_bits_and_uniforms_are_jax_randoms_own(counter_layout, kind, shape):
    key = KEYS[kind]()
    bits = jax.jit(random_bits, static_argnums=1)(key, shape)
    expected = jax.random.bits(key, shape, jnp.uint32)
    assert bits.dtype == jnp.uint32 and bits.shape == expected.shape
    np.testing.assert_array_equal(bits, expected)
    np.testing.assert_array_equal(jax.jit(random_uniform, static_argnums=1)(key, shape), jax.random.uniform(key, shape))


def test_checked_callers_get_the_same_bits():  # on every platform
    key = jax.random.key(11)
    np.testing.assert_array_equal(random_bits(key, (5,), checked=True), random_bits(key, (5,)))


@CPU_ONLY
def test_checked_callers_get_the_same_bits_without_a_loop():
    key = jax.random.key(11)
    text = jax.jit(lambda k: random_bits(k, (5,), checked=True)).lower(key).compile().as_text()
    assert not any(f.count(" xor(") >= 20 for f in _fusions(text))  # jax.random's rolled loop


def test_bits_under_vmap_are_each_keys_own(counter_layout):
    keys = jax.random.split(jax.random.key(0), 4)
    ours = jax.jit(jax.vmap(lambda k: random_bits(k, (9,))))(keys)
    np.testing.assert_array_equal(ours, jax.vmap(lambda k: jax.random.bits(k, (9,), jnp.uint32))(keys))
    assert len({tuple(row) for row in np.asarray(ours)}) == 4


def _fusions(compiled_text: str) -> list[str]:
    return [c for c in re.split(r"\n(?=\S)", compiled_text) if c.startswith("%fused")]


@CPU_ONLY
def test_a_sample_hashes_once_in_a_kernel_of_its_own():
    """Fused into the row gather that reads them, the 20 rounds ran once per word of each
    row read (a uniform sample of 256 took longer than with jax.random's rolled loop)."""
    buffer = make_buffer({"obs": ArraySpec((4,), np.float32), "done": ArraySpec((), np.bool_)}, 8, 100)
    text = jax.jit(lambda s, k: buffer.sample(s, k, 32)[0]).lower(buffer.init(), jax.random.key(0)).compile().as_text()
    hashing = [f for f in _fusions(text) if f.count(" xor(") >= 20]
    assert len(hashing) == 1
    assert " gather(" not in hashing[0]
