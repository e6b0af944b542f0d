"""The MindSpore RL ReplayBuffer API (replaybuf.mindspore_rl) on PyTorch device storage."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf import ArgumentError, EmptyBufferError, SpecError, SpecMismatchError

torch = pytest.importorskip("torch")
from cuda_sync import host_sync_forbidden  # noqa: E402
from replaybuf.mindspore_rl import ReplayBuffer  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SHAPES = [(4,), (1,), (1,), (4,)]
TYPES = [torch.float32, torch.int32, torch.float32, torch.float32]


def rows(first: int, n: int) -> list[torch.Tensor]:
    """``n`` rows numbered from ``first``: every column of row k holds k."""
    k = torch.arange(first, first + n)
    return [
        k[:, None].expand(n, 4).float(),
        k[:, None].int(),
        k[:, None].float(),
        -k[:, None].expand(n, 4).float(),
    ]


def row_numbers(columns) -> list[int]:
    """The row number stored in sampled columns, after checking every column agrees."""
    numbers = columns[1][..., 0].long()
    for column, sign in zip(columns, (1, 1, 1, -1), strict=True):
        torch.testing.assert_close(column * sign, numbers[..., None].to(column.dtype).expand_as(column))
    return numbers.tolist()


def test_the_seed_example_runs_with_only_the_import_and_tensor_constructors_changed():
    import torch as ms

    from replaybuf.mindspore_rl import ReplayBuffer

    sample_size = 2
    capacity = 100000
    shapes = [(4,), (1,), (1,), (4,)]
    types = [ms.float32, ms.int32, ms.float32, ms.float32]
    replaybuffer = ReplayBuffer(sample_size, capacity, shapes, types)

    state = ms.tensor([0.1, 0.2, 0.3, 0.4], dtype=ms.float32)
    action = ms.tensor([1], dtype=ms.int32)
    reward = ms.tensor([1], dtype=ms.float32)
    new_state = ms.tensor([0.4, 0.3, 0.2, 0.1], dtype=ms.float32)
    replaybuffer.insert([state, action, reward, new_state])
    replaybuffer.insert([state, action, reward, new_state])

    exp = replaybuffer.get_item(0)
    samples = replaybuffer.sample()
    assert replaybuffer.size() == 2 and not replaybuffer.full()
    for got, want in zip(exp, (state, action, reward, new_state), strict=True):
        torch.testing.assert_close(got.cpu(), want)
    for got, want in zip(samples, (state, action, reward, new_state), strict=True):
        torch.testing.assert_close(got.cpu(), want.expand(sample_size, *want.shape))

    replaybuffer.reset()

    size = replaybuffer.size()
    assert size == 0
    if replaybuffer.full():
        print("Full use of this buffer.")
    assert not replaybuffer.full()


def test_head_and_count_follow_the_seeds_insert_sequence():
    buffer = ReplayBuffer(3, 6, SHAPES, TYPES, device="cpu")
    assert (buffer.head, buffer.count) == (0, 0)
    assert buffer.insert(rows(0, 2)) is None
    assert (buffer.head, buffer.count, buffer.full()) == (0, 2, False)
    buffer.insert(rows(2, 4))
    assert (buffer.head, buffer.count, buffer.full()) == (0, 6, True)
    buffer.insert(rows(6, 2))  # overwrites rows 0 and 1
    assert (buffer.head, buffer.count, buffer.size()) == (2, 6, 6)
    assert [row_numbers([c[None] for c in buffer.get_item(i)])[0] for i in range(6)] == [2, 3, 4, 5, 6, 7]


def test_a_batch_larger_than_capacity_keeps_the_newest_rows():
    buffer = ReplayBuffer(2, 4, SHAPES, TYPES, device="cpu")
    buffer.insert(rows(0, 1))
    buffer.insert(rows(1, 9))
    assert buffer.count == 4
    assert [row_numbers([c[None] for c in buffer.get_item(i)])[0] for i in range(4)] == [6, 7, 8, 9]


def test_get_item_returns_copies_and_accepts_tensor_indices():
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    buffer.insert(rows(0, 3))
    item = buffer.get_item(torch.tensor(1))
    assert [tuple(c.shape) for c in item] == SHAPES
    assert [c.dtype for c in item] == TYPES
    buffer.insert(rows(10, 3))  # overwrites every slot
    assert item[1].item() == 1


@pytest.mark.parametrize("index", [2, -1, 100])
def test_get_item_out_of_range_is_an_error(index):
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    buffer.insert(rows(0, 2))
    with pytest.raises(ArgumentError, match=rf"index {index} is out of range; the buffer holds 2 rows"):
        buffer.get_item(index)


@pytest.mark.parametrize("index", [1.0, True, "0", torch.tensor([0])])
def test_get_item_needs_an_int(index):
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    buffer.insert(rows(0, 2))
    with pytest.raises(ArgumentError, match="expected an int index"):
        buffer.get_item(index)


def test_sample_returns_batch_size_valid_rows_on_the_device():
    buffer = ReplayBuffer(64, 6, SHAPES, TYPES, device="cpu", seed=0)
    buffer.insert(rows(0, 8))  # rows 2..7 remain
    samples = buffer.sample()
    assert [tuple(c.shape) for c in samples] == [(64,) + s for s in SHAPES]
    assert [c.dtype for c in samples] == TYPES and all(c.device == buffer.device for c in samples)
    assert set(row_numbers(samples)) == {2, 3, 4, 5, 6, 7}  # 64 draws reach all 6 rows


def test_ordered_sampling_remaps_the_same_draws_through_head():
    unordered = ReplayBuffer(16, 6, SHAPES, TYPES, device="cpu", seed=3)
    ordered = ReplayBuffer(16, 6, SHAPES, TYPES, device="cpu", seed=3, ordered=True)
    for buffer in (unordered, ordered):
        buffer.insert(rows(0, 8))  # head 2: slot s holds row s + 6 for s < 2, else row s
    draws = [number % 6 for number in row_numbers(unordered.sample())]  # unordered: draw = slot
    assert len(set(draws)) > 1
    # ordered: draw = position in age order, so the same draws give the rows 2 + draw
    assert row_numbers(ordered.sample()) == [2 + draw for draw in draws]


def test_sampling_an_empty_buffer_is_an_error():
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    with pytest.raises(EmptyBufferError, match="empty. Make sure to insert rows"):
        buffer.sample()
    buffer.insert(rows(0, 1))
    buffer.reset()
    assert (buffer.size(), buffer.full(), buffer.head) == (0, False, 0)
    with pytest.raises(EmptyBufferError):
        buffer.sample()
    with pytest.raises(ArgumentError):
        buffer.get_item(0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (rows(0, 2)[:3], r"expected a list of 4 tensors \(one per column\), got 3 tensors"),
        (torch.zeros(4), "expected a list of 4 tensors"),
        (
            [torch.zeros(4, dtype=torch.float64)] + [c[0] for c in rows(0, 1)[1:]],
            "tensor 0: expected dtype float32, got torch.float64",
        ),
        ([c[0] for c in rows(0, 1)[:3]] + [torch.zeros(3)], r"tensor 3: expected one row of shape \(4,\)"),
        (rows(0, 2)[:3] + [torch.zeros(3, 4)], "every tensor needs the same number of rows, got .*tensor 3: 3"),
        (rows(0, 2)[:3] + [torch.zeros(4)], "every tensor to be one row or every tensor a batch"),
        (rows(0, 2)[:3] + [torch.zeros(2, 5)], r"tensor 3: expected shape \(n, 4\) float32"),
        ([torch.zeros(4), torch.tensor([1.5]), torch.tensor([1.0]), torch.zeros(4)], "tensor 1: expected dtype int32"),
    ],
)
def test_bad_inserts_raise_and_write_nothing(bad, message):
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    buffer.insert(rows(0, 2))
    with pytest.raises(SpecMismatchError, match=message):
        buffer.insert(bad)
    assert (buffer.head, buffer.count) == (0, 2)
    assert [row_numbers([c[None] for c in buffer.get_item(i)])[0] for i in range(2)] == [0, 1]


def test_rows_may_be_numpy_arrays_and_python_lists():
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES, device="cpu")
    buffer.insert([np.full(4, 5, np.float32), [5], [5.0], [-5, -5, -5, -5]])
    buffer.insert(
        [
            np.full((2, 4), 6, np.float32),
            np.array([[6], [7]], np.int32),
            [[6.0], [7.0]],
            -np.full((2, 4), 6.0, np.float32),
        ]
    )
    assert row_numbers([c[None] for c in buffer.get_item(0)]) == [5]
    assert buffer.get_item(2)[1].item() == 7


@pytest.mark.parametrize(
    "types", [TYPES, [np.float32, np.int32, np.float32, np.float32], ["float32", "int32", "float32", "float32"]]
)
def test_types_accept_torch_numpy_and_names(types):
    buffer = ReplayBuffer(2, 3, SHAPES, types, device="cpu")
    assert buffer.types == TYPES and buffer.shapes == SHAPES


def test_constructor_arguments_are_checked():
    with pytest.raises(ArgumentError, match="one dtype per shape, got 4 shapes and 3 types"):
        ReplayBuffer(2, 3, SHAPES, TYPES[:3])
    with pytest.raises(ArgumentError, match="batch_size"):
        ReplayBuffer(0, 3, SHAPES, TYPES)
    with pytest.raises(ArgumentError, match="capacity"):
        ReplayBuffer(2, 0, SHAPES, TYPES)
    with pytest.raises(SpecError):
        ReplayBuffer(2, 3, [(4,)], ["not a dtype"])


def test_from_config_takes_the_seeds_config_form():
    config = {
        "number": 1,
        "type": ReplayBuffer,
        "capacity": 100000,
        "data_shape": [(4,), (1,), (1,), (4,)],
        "data_type": [torch.float32, torch.int32, torch.float32, torch.float32],
        "sample_size": 64,
    }
    buffer = ReplayBuffer.from_config(config, device="cpu", ordered=True)
    assert (buffer.batch_size, buffer.capacity, buffer.shapes, buffer.types) == (64, 100000, SHAPES, TYPES)
    assert buffer.ordered and buffer.device == torch.device("cpu")


@pytest.mark.parametrize(
    ("change", "message"),
    [({"sample_size": None}, r"missing \['sample_size'\]"), ({"sample_szie": 2}, r"unknown \['sample_szie'\]")],
)
def test_from_config_names_missing_and_unknown_keys(change, message):
    config = {"capacity": 10, "data_shape": SHAPES, "data_type": TYPES, "sample_size": 2}
    config.update(change)
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ArgumentError, match=message):
        ReplayBuffer.from_config(config)


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 7), batches=st.lists(st.integers(0, 9), max_size=8))
def test_rows_and_cursors_match_a_fifo_model(capacity, batches):
    buffer = ReplayBuffer(4, capacity, SHAPES, TYPES, device="cpu", seed=0)
    model: deque[int] = deque(maxlen=capacity)
    total = 0
    for n in batches:
        buffer.insert(rows(total, n))
        model.extend(range(total, total + n))
        total += n
    assert (buffer.count, buffer.full()) == (len(model), len(model) == capacity)
    assert buffer.head == (total - len(model)) % capacity
    assert [row_numbers([c[None] for c in buffer.get_item(i)])[0] for i in range(len(model))] == list(model)
    if model:
        assert set(row_numbers(buffer.sample())) <= set(model)


def test_default_device_is_cuda_when_available():
    buffer = ReplayBuffer(2, 3, SHAPES, TYPES)
    assert buffer.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


@CUDA
def test_cuda_insert_and_sample_never_synchronise_with_the_host():
    buffer = ReplayBuffer(256, 1000, SHAPES, TYPES, device="cuda", seed=0)
    device_rows = [c.cuda() for c in rows(0, 300)]
    buffer.insert(device_rows)
    buffer.sample()  # warm up: lazy CUDA initialisation may synchronise once
    with host_sync_forbidden():
        buffer.insert(device_rows)
        buffer.sample()
    assert torch.cuda.get_sync_debug_mode() == 0  # restored for the tests after this one
    assert all(c.is_cuda for c in buffer.sample())
