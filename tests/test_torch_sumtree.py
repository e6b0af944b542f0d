"""The torch sum and min trees (replaybuf.torch.sumtree) against the NumPy trees, on CPU tensors.

Both hold float64: after the same batches of updates (duplicates included) the leaves are
equal exactly and every level above within float64 rounding; the same targets find the
same slots when they lie away from a boundary between slots (leaf midpoints), and for
uniform targets wherever the two differ the target is within rounding of a boundary.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf.samplers.sumtree import MinTree, SumTree
from replaybuf.torch.sumtree import TorchMinTree, TorchSumTree

masses = st.one_of(st.just(0.0), st.floats(1e-3, 1e3))


@st.composite
def updates(draw):
    capacity = draw(st.integers(1, 300))
    arity = draw(st.sampled_from([2, 4, 16]))
    batches = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, capacity - 1), masses), min_size=1, max_size=40), min_size=1, max_size=5
        )
    )
    return capacity, arity, batches


def apply(batches, *trees):
    for batch in batches:
        slots = np.array([slot for slot, _ in batch], np.int64)
        values = np.array([value for _, value in batch])
        for tree in trees:
            if isinstance(tree, (TorchSumTree, TorchMinTree)):
                tree.update(torch.from_numpy(slots), torch.from_numpy(values))
            else:
                tree.update(slots, values)


@settings(max_examples=60, deadline=None)
@given(updates())
def test_updates_leave_the_numpy_trees_levels_last_write_winning(case):
    capacity, arity, batches = case
    sums, mins = SumTree(capacity, arity, compiled=False), MinTree(capacity, arity, compiled=False)
    torch_sums, torch_mins = TorchSumTree(capacity, arity), TorchMinTree(capacity, arity)
    apply(batches, sums, mins, torch_sums, torch_mins)
    np.testing.assert_array_equal(torch_sums.levels[0].numpy(), sums.levels[0])
    np.testing.assert_array_equal(torch_mins.levels[0].numpy(), mins.levels[0])
    for numpy_level, torch_level in zip(sums.levels, torch_sums.levels, strict=True):
        np.testing.assert_allclose(torch_level.numpy(), numpy_level, rtol=1e-12)
    for numpy_level, torch_level in zip(mins.levels, torch_mins.levels, strict=True):
        np.testing.assert_array_equal(torch_level.numpy(), numpy_level)  # a minimum has no rounding
    assert torch_sums.total().item() == pytest.approx(sums.root(), rel=1e-12)
    assert torch_mins.smallest().item() == mins.root()


@settings(max_examples=60, deadline=None)
@given(updates(), st.integers(0, 2**32 - 1))
def test_find_picks_the_numpy_slots_for_the_same_targets(case, seed):
    capacity, arity, batches = case
    sums, torch_sums = SumTree(capacity, arity, compiled=False), TorchSumTree(capacity, arity)
    apply(batches, sums, torch_sums)
    leaves = sums.levels[0][:capacity]
    total = sums.root()
    if total == 0:
        return
    starts = np.cumsum(leaves) - leaves
    positive = np.flatnonzero(leaves > 0)
    midpoints = starts[positive] + leaves[positive] / 2  # away from every boundary
    slots, values = torch_sums.find(torch.from_numpy(midpoints))
    np.testing.assert_array_equal(slots.numpy(), positive)
    np.testing.assert_array_equal(values.numpy(), leaves[positive])

    targets = np.random.default_rng(seed).random(256) * total
    expected, expected_values = np.empty(256, np.int64), np.empty(256)
    sums.kernels.find(sums.tree, sums.offsets, arity, targets, expected, expected_values)
    found, found_values = torch_sums.find(torch.from_numpy(targets))
    found = found.numpy()
    assert (found_values.numpy() > 0).all()  # never a slot without mass
    differ = found != expected
    nearest = np.abs(targets[differ, None] - np.append(starts, total)[None, :]).min(axis=1)
    assert (nearest <= 1e-9 * total).all()  # only within rounding of a boundary


def test_duplicates_in_one_update_keep_the_last_write():
    tree = TorchSumTree(40, 4)
    tree.update(torch.tensor([3, 7, 3, 3, 7]), torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0]))
    assert tree.values(torch.tensor([3, 7])).tolist() == [8.0, 16.0]
    assert tree.total().item() == 24.0


def test_a_target_at_the_total_lands_on_the_last_slot_with_mass():
    tree = TorchSumTree(64, 4)
    tree.update(torch.tensor([5, 9, 60]), torch.tensor([1.0, 2.0, 0.0]))
    slots, _ = tree.find(torch.tensor([0.0, 1.0, 3.0, 10.0]))
    assert slots.tolist() == [5, 9, 9, 9]


def test_writes_not_kept_change_nothing_and_never_supersede_a_kept_one():
    tree = TorchSumTree(40, 4)
    tree.update(torch.tensor([3, 7]), torch.tensor([1.0, 2.0]))
    slots = torch.tensor([3, 7, 3, 9, 7])
    keep = torch.tensor([True, False, False, False, True])
    tree.update(slots, torch.tensor([5.0, 100.0, 200.0, 300.0, 6.0]), keep)
    assert tree.values(torch.tensor([3, 7, 9])).tolist() == [5.0, 6.0, 0.0]  # slot 3's later write was dropped
    assert tree.total().item() == 11.0
    mins = TorchMinTree(40, 4)
    mins.update(torch.tensor([1, 2]), torch.tensor([4.0, 8.0]), torch.tensor([False, True]))
    assert mins.smallest().item() == 8.0
