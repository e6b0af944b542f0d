"""The torch buffers' byte-row storage (replaybuf.torch.storage): every leaf of a slot in one
row, written leaf by leaf (CPU), packed on the host or concatenated on the device (the GPU's
paths, run here on the CPU), and read back with one gather as views of the gathered rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArraySpec
from replaybuf.ring import StreamRing

torch = pytest.importorskip("torch")
from replaybuf.torch.storage import ROW_ALIGNMENT, RowLayout, TorchStorage  # noqa: E402

LEAVES = [
    ArraySpec((), np.bool_),
    ArraySpec((3,), np.float32),
    ArraySpec((), np.int64),
    ArraySpec((2, 2), np.float16),
    ArraySpec((0,), np.float64),  # no bytes at all
    ArraySpec((2,), np.complex64),
    ArraySpec((5,), np.uint8),
]


def rows_of(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """``n`` random items of every leaf in LEAVES, in the spec dtypes."""
    out = []
    for spec in LEAVES:
        shape = (n, *spec.shape)
        if spec.dtype == np.bool_:
            out.append(rng.random(shape) < 0.5)
        elif spec.dtype.kind == "c":
            out.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(spec.dtype))
        else:
            out.append((rng.standard_normal(shape) * 100).astype(spec.dtype))
    return out


def test_every_leaf_is_aligned_for_its_dtype_and_rows_for_every_dtype():
    layout = RowLayout(LEAVES)
    assert layout.row_bytes % ROW_ALIGNMENT == 0
    ends = []
    for spec, offset in zip(LEAVES, layout.byte_offsets, strict=True):
        assert offset % spec.dtype.itemsize == 0
        ends.append((offset, offset + spec.dtype.itemsize * int(np.prod(spec.shape))))
    ends.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ends, ends[1:], strict=False))  # no overlap
    assert ends[-1][1] <= layout.row_bytes
    assert RowLayout([ArraySpec((0,), np.float32)]).row_bytes == ROW_ALIGNMENT  # never a zero-width row


@pytest.mark.parametrize("path", ["numpy views", "host rows", "device concatenation"])
@settings(max_examples=15, deadline=None)
@given(capacity=st.integers(1, 9), adds=st.lists(st.integers(1, 12), min_size=1, max_size=5), seed=st.integers(0, 99))
def test_each_write_path_stores_what_was_written_and_reads_it_back(path, capacity, adds, seed):
    storage = TorchStorage(LEAVES, capacity, torch.device("cpu"), through_numpy=path == "numpy views")
    rng = np.random.default_rng(seed)
    expected = [np.zeros((capacity, *spec.shape), spec.dtype) for spec in LEAVES]
    position = 0
    for n in adds:
        batch = [leaf[-capacity:] for leaf in rows_of(rng, n)]  # a batch never exceeds the capacity
        n = len(batch[0])
        for target, leaf in zip(expected, batch, strict=True):
            for i in range(n):
                target[(position + i) % capacity] = leaf[i]
        storage.write(
            position % capacity, batch if path != "device concatenation" else [torch.from_numpy(x) for x in batch]
        )
        position += n
    written = min(position, capacity)
    slots = rng.integers(0, written, (4, 3))
    ids = torch.as_tensor(slots + capacity * rng.integers(0, 2**40, slots.shape))  # ids of a long-lived ring
    leaves = storage.read(ids)
    for spec, leaf, want in zip(LEAVES, leaves, expected, strict=True):
        assert leaf.dtype == torch.from_numpy(want).dtype and tuple(leaf.shape) == (4, 3, *spec.shape)
        np.testing.assert_array_equal(leaf.numpy(), want[slots])
    for tensor, want in zip(storage.tensors, expected, strict=True):  # the per-leaf views of the storage
        np.testing.assert_array_equal(tensor[:written].numpy(), want[:written])


@pytest.mark.parametrize("through_numpy", [True, False])
def test_a_read_is_one_gather_whose_leaves_are_views_of_it(through_numpy):
    storage = TorchStorage(LEAVES, 8, torch.device("cpu"), through_numpy)
    storage.write(0, rows_of(np.random.default_rng(0), 8))
    leaves = [leaf for leaf in storage.read(torch.tensor([3, 1, 11])) if leaf.numel()]  # an empty one has no address
    first = min(leaf.data_ptr() for leaf in leaves)
    block = range(first, first + 3 * storage.layout.row_bytes)  # one new block of three rows, a copy
    assert all(leaf.data_ptr() in block for leaf in leaves)
    rows = storage.rows.data_ptr()
    assert first not in range(rows, rows + storage.rows.numel())
    one = storage.read(torch.tensor(5))  # a single slot: leaves shaped as the spec
    assert [tuple(leaf.shape) for leaf in one] == [spec.shape for spec in LEAVES]


def test_a_ring_storage_reads_ids_as_slots_until_the_ring_wraps_and_wraps_them_after():
    """With its buffer's ring, a CPU storage reads stored ids straight (skipping ``% capacity``)
    while no id has reached the capacity, and wraps them once the ring has; the same rows as a
    storage without the ring either way."""
    ring = StreamRing(2, 4)
    with_ring = TorchStorage(LEAVES, ring.capacity, torch.device("cpu"), ring=ring)
    plain = TorchStorage(LEAVES, ring.capacity, torch.device("cpu"))
    rng = np.random.default_rng(3)
    for _ in range(7):
        batch = rows_of(rng, 2)
        for storage in (with_ring, plain):
            storage.write(ring.slot(ring.steps), batch)
        ring.steps += 1
        ids = torch.as_tensor(rng.integers(ring.first_valid_step() * 2, ring.steps * 2, (3, 2)))
        for got, want in zip(with_ring.read(ids), plain.read(ids), strict=True):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert ring.steps * ring.batch_size > ring.capacity  # the last reads were of a wrapped ring


@pytest.mark.parametrize("path", ["host rows", "device concatenation"])
def test_leaves_whose_size_one_axes_have_odd_strides_are_written(path):
    """NumPy's ``x[:, None]`` gives its new axis stride 0, and torch.as_tensor keeps it (the
    MindSpore-style buffer's rows are built so): found on a GPU, where every write takes these paths."""
    storage = TorchStorage([ArraySpec((1,), np.int64), ArraySpec((4,), np.float32)], 8, torch.device("cpu"), False)
    actions = np.arange(3, dtype=np.int64)[:, None]
    batch = [actions, np.ones((3, 4), np.float32)]
    storage.write(2, batch if path == "host rows" else [torch.as_tensor(x) for x in batch])
    np.testing.assert_array_equal(storage.tensors[0][2:5].numpy(), actions)
    np.testing.assert_array_equal(storage.tensors[1][2:5].numpy(), batch[1])
