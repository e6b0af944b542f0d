"""RecordStorage against a dict of plain arrays: every write path (single row, packed small
fields, wraparound, non-contiguous sources) stores exactly the bytes it was given."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArraySpec
from replaybuf.storages import ColumnStorage, RecordStorage

SHAPES = st.sampled_from([(), (1,), (4,), (2, 3), (17,), (3, 1, 2)])
DTYPES = st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_, np.int16])
WRITES = {  # leaves of a storage, its capacity, and writes (start, n, strided source) into it
    "leaves": st.lists(st.tuples(SHAPES, DTYPES), min_size=1, max_size=4),
    "capacity": st.integers(1, 9),
    "writes": st.lists(st.tuples(st.integers(0, 8), st.integers(0, 9), st.booleans()), max_size=6),
    "seed": st.integers(0, 2**16),
}


@settings(max_examples=60, deadline=None)
@given(**WRITES)
def test_writes_match_a_plain_array_model(leaves, capacity, writes, seed):
    _writes_match_a_plain_array_model(RecordStorage, leaves, capacity, writes, seed)


def _writes_match_a_plain_array_model(cls, leaves, capacity, writes, seed):
    specs = [ArraySpec(shape, dtype) for shape, dtype in leaves]
    storage = cls(specs, capacity)
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
    return storage, model, got


@settings(max_examples=60, deadline=None)
@given(**WRITES)
def test_column_writes_match_a_plain_array_model(leaves, capacity, writes, seed):
    """ColumnStorage's generated write (one row, a run, a wrapping run; strided sources)."""
    storage, model, got = _writes_match_a_plain_array_model(ColumnStorage, leaves, capacity, writes, seed)
    for m, g, field in zip(model, got, storage.fields, strict=True):
        np.testing.assert_array_equal(field, m)
        assert g.flags.c_contiguous and not np.shares_memory(g, field)


def test_record_runs_whose_last_axis_is_not_contiguous_are_written_element_wise():
    """The packed (void) path cannot view a source whose last axis is strided: the
    generated write falls back to the field, and both layouts store the same values."""
    specs = [ArraySpec((4,), np.float32), ArraySpec((), np.int64)]
    source = np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2]  # [4, 4], last axis strided
    ids = np.arange(4, dtype=np.int64)
    for storage in (RecordStorage(specs, 6), ColumnStorage(specs, 6)):
        storage.write(1, [source, ids])
        obs, got_ids = storage.read(np.arange(1, 5))
        np.testing.assert_array_equal(obs, source)
        np.testing.assert_array_equal(got_ids, ids)
