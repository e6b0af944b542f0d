"""RecordStorage against a dict of plain arrays: every write path (single row, packed small
fields, wraparound, non-contiguous sources) stores exactly the bytes it was given."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArraySpec
from replaybuf.storages import RecordStorage

SHAPES = st.sampled_from([(), (1,), (4,), (2, 3), (17,), (3, 1, 2)])
DTYPES = st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_, np.int16])


@settings(max_examples=60, deadline=None)
@given(
    leaves=st.lists(st.tuples(SHAPES, DTYPES), min_size=1, max_size=4),
    capacity=st.integers(1, 9),
    writes=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 9), st.booleans()), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_writes_match_a_plain_array_model(leaves, capacity, writes, seed):
    specs = [ArraySpec(shape, dtype) for shape, dtype in leaves]
    storage = RecordStorage(specs, capacity)
    model = [np.zeros((capacity, *s.shape), s.dtype) for s in specs]
    rng = np.random.default_rng(seed)
    for start, n, strided in writes:
        start, n = start % capacity, min(n, capacity)
        arrays = []
        for s in specs:
            full = (rng.random((2 * n, *s.shape)) * 100).astype(s.dtype)
            arrays.append(full[::2] if strided else full[:n])  # strided: not C-contiguous
        storage.write(start, arrays)
        for m, a in zip(model, arrays, strict=True):
            m[(start + np.arange(n)) % capacity] = a
    got = storage.read(np.arange(capacity))
    for m, g in zip(model, got, strict=True):
        np.testing.assert_array_equal(g, m)
