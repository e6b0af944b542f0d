"""Packed rows of the JAX core (replaybuf.jax.rows): every leaf comes back bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf.jax.rows import pack, row_layout, unpack

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.float16,
    ml_dtypes.bfloat16,
    np.int32,
    np.uint32,
    np.float32,
    np.complex64,
]
SHAPES = [(), (1,), (3,), (4,), (0,), (2, 3), (5, 2)]


def random_leaf(rng: np.random.Generator, lead: tuple, shape: tuple, dtype) -> np.ndarray:
    """Any bit pattern of the dtype (NaN payloads, -0.0, infinities); bool as 0/1."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random((*lead, *shape)) < 0.5
    raw = rng.integers(0, 256, (*lead, *shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(*lead, *shape)


def bits(array) -> np.ndarray:
    array = np.asarray(array)
    return array if array.dtype == np.bool_ else array.view(np.uint8)


@settings(max_examples=40, deadline=None)
@given(
    fields=st.lists(st.tuples(st.sampled_from(SHAPES), st.sampled_from(DTYPES)), min_size=1, max_size=6),
    lead=st.sampled_from([(3,), (2, 4), (0,), (0, 2)]),  # no items too (an empty checkpoint)
    seed=st.integers(0, 2**16),
)
def test_unpack_returns_every_bit_that_was_packed(fields, lead, seed):
    rng = np.random.default_rng(seed)
    shapes, dtypes = [f[0] for f in fields], [np.dtype(f[1]) for f in fields]
    layout = row_layout(shapes, dtypes)
    leaves = [random_leaf(rng, lead, shape, dtype) for shape, dtype in fields]
    rows = jax.jit(lambda xs: pack(layout, xs))(leaves)
    assert rows.dtype == jnp.uint32 and rows.shape == (*lead, layout.words)
    back = jax.jit(lambda r: unpack(layout, r))(rows)
    for leaf, got, dtype in zip(leaves, back, dtypes, strict=True):
        assert got.dtype == dtype and got.shape == leaf.shape
        np.testing.assert_array_equal(bits(got), bits(leaf))


def test_whole_word_leaves_take_their_bytes_and_small_ones_share_the_tail():
    layout = row_layout([(4,), (), (), (3,), (2,)], [np.float32, np.bool_, np.int32, np.uint8, np.float16])
    # float32[4]: 4 words, int32: 1 word, float16[2]: 1 word; bool and uint8[3] share one tail word
    assert layout.words == 7 and layout.tail == 6
    assert [(f.start, f.size, f.in_tail) for f in layout.fields] == [
        (0, 4, False),
        (0, 1, True),
        (4, 1, False),
        (1, 3, True),
        (5, 1, False),
    ]


def test_a_row_gather_reads_the_same_items_as_per_leaf_gathers():
    rng = np.random.default_rng(0)
    fields = [((4,), np.float32), ((), np.int32), ((), np.bool_), ((84, 84), np.uint8)]
    layout = row_layout([f[0] for f in fields], [np.dtype(f[1]) for f in fields])
    leaves = [random_leaf(rng, (50,), shape, dtype) for shape, dtype in fields]
    slots = rng.integers(0, 50, (16, 2))
    got = unpack(layout, pack(layout, leaves)[slots])
    for leaf, read in zip(leaves, got, strict=True):
        np.testing.assert_array_equal(bits(read), bits(leaf[slots]))


def test_64_bit_leaves_round_trip_under_x64():
    """float64, int64 and complex128 exist only with jax_enable_x64 (a process-wide switch,
    so a child process)."""
    code = textwrap.dedent(
        """
        import jax, numpy as np
        from replaybuf.jax.rows import pack, row_layout, unpack
        rng = np.random.default_rng(1)
        dtypes = [np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.complex128), np.dtype(np.bool_)]
        leaves = [rng.integers(0, 256, (5, 3, d.itemsize), dtype=np.uint8).view(d).reshape(5, 3) for d in dtypes[:3]]
        leaves.append(rng.random((5, 3)) < 0.5)
        layout = row_layout([(3,)] * 4, dtypes)
        back = unpack(layout, pack(layout, leaves))
        assert layout.words == 6 + 6 + 12 + 1, layout.words
        for leaf, got in zip(leaves, back):
            assert got.dtype == leaf.dtype, (got.dtype, leaf.dtype)
            a, b = np.asarray(got), leaf
            assert (a == b).all() if a.dtype == bool else (a.view(np.uint8) == b.view(np.uint8)).all()
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
