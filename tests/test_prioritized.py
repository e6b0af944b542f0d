"""PrioritizedReplayBuffer: sampling frequencies, weights, priority updates, errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
import replaybuf.samplers.sumtree as sumtree
from compiled_kernels import compiled_tree_kernels
from replaybuf import ArgumentError, ArraySpec, EmptyBufferError, PrioritizedReplayBuffer, PriorityError, SampleInfo
from replaybuf.samplers.sumtree import MinTree, NumpyKernels, SumTree

SPEC = {"x": ArraySpec((), np.int64)}


@pytest.fixture(params=[False, None], ids=["numpy-kernels", "compiled-kernels"], autouse=True)
def compiled(request, monkeypatch):
    """Every buffer test runs on the NumPy kernels and on numba's (when installed)."""
    original = PrioritizedReplayBuffer.__init__

    def init(self, *args, **kwargs):
        kwargs.setdefault("compiled", request.param)
        original(self, *args, **kwargs)

    monkeypatch.setattr(PrioritizedReplayBuffer, "__init__", init)
    return request.param


def filled(batch_size=2, max_length=10, steps=10, **kwargs):
    buffer = PrioritizedReplayBuffer(SPEC, batch_size, max_length, seed=0, **kwargs)
    for t in range(steps):
        buffer.add_batch({"x": np.arange(batch_size) + t * batch_size})
    return buffer


def test_frequencies_match_priorities_chi_square():
    """Draw counts agree with p_i^alpha / sum (chi-square, 19 dof, fixed seed)."""
    alpha = 0.7
    buffer = filled(alpha=alpha, epsilon=0.0)
    priorities = np.arange(1.0, 21.0)
    buffer.update_priorities(np.arange(20), priorities)
    expected = priorities**alpha / (priorities**alpha).sum()
    counts = np.zeros(20)
    draws = 0
    for _ in range(100):
        items, info = buffer.get_next(256)
        np.testing.assert_array_equal(items["x"], info.ids)
        np.testing.assert_allclose(info.probabilities, expected[info.ids], rtol=1e-5)
        counts += np.bincount(info.ids, minlength=20)
        draws += 256
    chi2 = (((counts - draws * expected) ** 2) / (draws * expected)).sum()
    assert chi2 < 43.8  # 99.9th percentile of chi-square with 19 degrees of freedom


def test_importance_weights_direct_formula():
    beta = 0.5
    buffer = filled(alpha=0.6, beta=beta, epsilon=0.01)
    priorities = np.linspace(0.5, 3.0, 20)
    buffer.update_priorities(np.arange(20), priorities)
    _, info = buffer.get_next(50)
    mass = (priorities + 0.01) ** 0.6
    probability = mass / mass.sum()
    weights = (20 * probability[info.ids]) ** -beta / ((20 * probability.min()) ** -beta)
    assert isinstance(info, SampleInfo)
    np.testing.assert_allclose(info.weights, weights, rtol=1e-5)
    assert info.weights.max() <= 1.0


def test_beta_setter_and_schedule():
    buffer = filled(beta=0.0)
    buffer.update_priorities(np.arange(20), np.arange(1.0, 21.0))
    assert np.all(buffer.get_next(8)[1].weights == 1.0)
    schedule = iter([0.2, 1.0])
    buffer.beta = lambda: next(schedule)
    w02, w1 = buffer.get_next(8)[1].weights, buffer.get_next(8)[1].weights
    assert w02.min() > w1.min() or np.all(w1 == 1.0)
    buffer.beta = 0.7
    assert buffer.beta == 0.7
    with pytest.raises(ArgumentError):
        buffer.beta = 1.5


def test_new_items_get_max_priority():
    buffer = filled(max_length=20, steps=2, epsilon=0.0, alpha=1.0)
    buffer.update_priorities(np.array([0, 1]), np.array([5.0, 2.0]))
    buffer.add_batch({"x": np.array([4, 5])})
    _, info = buffer.get_next(30)
    total = 5 + 2 + 1 + 1 + 5 + 5
    for item_id, probability in zip(info.ids, info.probabilities, strict=True):
        expected = {0: 5, 1: 2, 2: 1, 3: 1, 4: 5, 5: 5}[int(item_id)] / total
        assert probability == pytest.approx(expected, rel=1e-5)


def test_stale_ids_are_ignored_never_applied_to_the_new_item():
    buffer = filled(batch_size=1, max_length=4, steps=4, alpha=1.0, epsilon=0.0)
    buffer.add_batch({"x": np.array([4])})  # overwrites id 0 (slot 0)
    buffer.update_priorities(np.array([0]), np.array([1000.0]))  # stale: ignored
    _, info = buffer.get_next(200)
    np.testing.assert_allclose(info.probabilities, 0.25, rtol=1e-5)
    assert 0 not in info.ids


def test_window_priority_is_first_item_and_head_excluded():
    buffer = filled(batch_size=1, max_length=10, steps=10, alpha=1.0, epsilon=0.0)
    buffer.update_priorities(np.arange(10), np.arange(1.0, 11.0))
    _, info = buffer.get_next(500, 3)
    assert info.ids[:, 0].max() <= 7  # windows never pass the write head
    valid = np.arange(1.0, 9.0)
    np.testing.assert_allclose(info.probabilities, valid[info.ids[:, 0]] / valid.sum(), rtol=1e-5)
    buffer.update_priorities(info.ids, np.ones(500))  # [B, T] ids: the first of each window


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_bad_priorities_raise_and_change_nothing(bad):
    buffer = filled(alpha=1.0, epsilon=0.0)
    before = buffer.get_next(4)[1].probabilities
    with pytest.raises(PriorityError, match="priorities"):
        buffer.update_priorities(np.array([0, 1]), np.array([1.0, bad]))
    np.testing.assert_allclose(buffer.get_next(4)[1].probabilities, before)


def test_ids_never_added_and_shape_mismatch():
    buffer = filled()
    with pytest.raises(PriorityError, match="ids"):
        buffer.update_priorities(np.array([20]), np.array([1.0]))
    with pytest.raises(PriorityError, match="ids"):
        buffer.update_priorities(np.array([-1]), np.array([1.0]))
    with pytest.raises(ArgumentError, match="shaped like"):
        buffer.update_priorities(np.array([1, 2]), np.array([1.0]))


def test_bad_constructor_arguments_and_empty():
    with pytest.raises(ArgumentError, match="alpha"):
        PrioritizedReplayBuffer(SPEC, alpha=-1.0)
    with pytest.raises(ArgumentError, match="beta"):
        PrioritizedReplayBuffer(SPEC, beta=2.0)
    with pytest.raises(ArgumentError, match="compiled"):
        PrioritizedReplayBuffer(SPEC, compiled="yes")
    with pytest.raises(EmptyBufferError):
        PrioritizedReplayBuffer(SPEC).get_next(2)


def test_clear_and_state_dict_round_trip():
    buffer = filled(alpha=1.0, epsilon=0.0)
    buffer.update_priorities(np.arange(20), np.arange(1.0, 21.0))
    copy = PrioritizedReplayBuffer(SPEC, 2, 10, alpha=1.0, epsilon=0.0)
    copy.load_state_dict(buffer.state_dict())
    a, b = buffer.get_next(16), copy.get_next(16)
    np.testing.assert_array_equal(a[1].ids, b[1].ids)
    np.testing.assert_allclose(a[1].probabilities, b[1].probabilities)
    buffer.clear()
    with pytest.raises(EmptyBufferError):
        buffer.get_next(1)


def test_episode_windows_with_priorities():
    spec = {"x": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
    buffer = PrioritizedReplayBuffer(spec, 1, 12, seed=1, respect_episodes=True, episode_end_field="done")
    for t in range(12):
        buffer.add_batch({"x": np.array([t]), "done": np.array([t % 4 == 3])})
    items, info = buffer.get_next(200, 3)
    assert np.all(items["x"][:, 0] % 4 <= 1)  # windows of 3 start at offsets 0 or 1 of each episode
    np.testing.assert_allclose(info.probabilities, 1.0 / 6, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=300),
    arity=st.sampled_from([2, 4, 16, 32]),
    compiled=st.sampled_from([False, None]),  # the NumPy path, and numba's when installed
    data=st.data(),
)
def test_trees_against_numpy(values, arity, compiled, data):
    values = np.array(values)
    sums, mins = SumTree(len(values), arity, compiled), MinTree(len(values), arity, compiled)
    sums.update(np.arange(len(values)), values)
    mins.update(np.arange(len(values)), np.where(values > 0, values, np.inf))
    assert sums.root() == pytest.approx(values.sum())
    assert mins.root() == (values[values > 0].min() if (values > 0).any() else np.inf)
    if values.sum() > 0:
        targets = np.array(data.draw(st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=20)))
        slots, found = np.empty(targets.shape[0], np.int64), np.empty(targets.shape[0])
        sums.kernels.find(sums.tree, sums.offsets, sums.arity, targets * values.sum(), slots, found)
        running = np.cumsum(values)
        expected = np.searchsorted(running, targets * values.sum(), side="right")
        # a target within rounding of a boundary may land on a zero slot (callers redraw)
        clear = np.abs(targets[:, None] * values.sum() - running[None, :]).min(axis=1) > 1e-9 * values.sum()
        ok = (found > 0) | ~clear
        assert np.all(ok)
        found_ok = found > 0
        np.testing.assert_array_equal(values[slots[found_ok]], found[found_ok])
        np.testing.assert_array_equal(slots[found_ok & clear], expected[found_ok & clear])


def test_compiled_kernels_are_used_when_asked(compiled):
    buffer = filled()
    if compiled is None and compiled_tree_kernels() is None:
        pytest.skip("numba is not installed")
    assert buffer._sampler.kernels is (NumpyKernels if compiled is False else compiled_tree_kernels())


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(st.floats(0.01, 100.0), min_size=20, max_size=200),
    picks=st.lists(st.integers(0, 199), min_size=1, max_size=40),
    data=st.data(),
)
def test_assign_and_draw_kernels_agree(values, picks, data):
    """The NumPy and the compiled kernels leave the same trees and draw the same items."""
    chosen = compiled_tree_kernels()
    if chosen is None:
        pytest.skip("numba is not installed")
    n = len(values)
    ids = np.array([p % n for p in picks], np.int64)
    priorities = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(ids), max_size=len(ids))))
    results = []
    for k in (NumpyKernels, chosen):
        sums, mins = (
            SumTree(n, compiled=k is not NumpyKernels and None),
            MinTree(n, compiled=k is not NumpyKernels and None),
        )
        sums.update(np.arange(n), np.array(values))
        mins.update(np.arange(n), np.array(values))
        code = k.assign(
            sums.tree, mins.tree, sums.offsets, 16, n, ids, priorities, 0.7, 0.01, 0, n, np.empty(len(ids), np.int64)
        )
        out = np.empty(64, np.int64), np.empty(64, np.float32), np.empty(64, np.float32)
        bad = k.draw(
            sums.tree, mins.tree, sums.offsets, 16, n, np.linspace(0.01, 0.99, 64), True, 0.0, 0.5, 0, n, n, *out
        )
        results.append((code, sums.tree.copy(), mins.tree.copy(), bad, out))
    (code_a, sums_a, mins_a, bad_a, out_a), (code_b, sums_b, mins_b, bad_b, out_b) = results
    assert code_a[0] == code_b[0] == 0 and code_a[1:] == pytest.approx(code_b[1:])
    np.testing.assert_allclose(sums_a, sums_b, rtol=1e-12)
    np.testing.assert_allclose(mins_a, mins_b, rtol=1e-12)
    assert bad_a == bad_b == 0
    np.testing.assert_array_equal(out_a[0], out_b[0])
    np.testing.assert_allclose(out_a[1], out_b[1], rtol=1e-6)
    np.testing.assert_allclose(out_a[2], out_b[2], rtol=1e-6)


def test_without_numba_the_numpy_kernels_are_used(monkeypatch):
    monkeypatch.setattr(sumtree, "_compiled", False)  # not looked up yet
    monkeypatch.delattr(replaybuf.samplers, "_tree_kernels", raising=False)
    monkeypatch.setitem(sys.modules, "replaybuf.samplers._tree_kernels", None)  # importing it fails
    assert sumtree.kernels(None) is NumpyKernels
    with pytest.raises(ImportError, match="numba"):
        sumtree.kernels(True)
    buffer = PrioritizedReplayBuffer(SPEC, 2, 10, seed=0)
    assert buffer._sampler.kernels is NumpyKernels


def test_weights_of_extreme_priority_ratios(compiled):
    """A ratio beyond float32's range still gives the formula's (tiny, nonzero) weight."""
    buffer = filled(batch_size=1, max_length=2, steps=2, alpha=1.0, beta=0.4, epsilon=0.0)
    buffer.update_priorities(np.array([0, 1]), np.array([1e-10, 1e35]))
    _, info = buffer.get_next(8)
    np.testing.assert_array_equal(info.ids, 1)
    np.testing.assert_allclose(info.weights, np.float32(1e45**-0.4), rtol=1e-5)


def test_read_only_inputs_are_accepted(compiled):
    buffer = filled(alpha=1.0, epsilon=0.0)
    ids, priorities = np.arange(20), np.broadcast_to(np.float64(2.0), (20,))  # read-only
    ids.flags.writeable = False
    buffer.update_priorities(ids, priorities)
    np.testing.assert_allclose(buffer.get_next(8)[1].probabilities, 1 / 20, rtol=1e-6)
    sums = SumTree(8, compiled=compiled)
    sums.update(ids[:8], priorities[:8])
    assert sums.root() == 16.0


def test_compiled_true_without_numba_raises(monkeypatch):
    monkeypatch.setattr(sumtree, "_compiled", None)  # looked up: numba missing
    with pytest.raises(ImportError, match="numba"):
        PrioritizedReplayBuffer(SPEC, compiled=True)
