"""``replaybuf.samplers.bounded.BoundedIntegers`` draws what ``Generator.integers`` draws: the same
integers and the same generator state after (the episode sampler's saved streams depend on it),
for every bit generator, any range, after draws that leave half a 64-bit output buffered."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf.samplers import bounded
from replaybuf.samplers.bounded import BoundedIntegers

BIT_GENERATORS = [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64, np.random.MT19937]


def twins(kind, seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    return np.random.Generator(kind(seed)), np.random.Generator(kind(seed))


def same_state(a, b) -> bool:
    """Bit generator states (dicts of ints and arrays) equal."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[key], b[key]) for key in a)
    return np.array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(BIT_GENERATORS),
    seed=st.integers(0, 2**32),
    low=st.integers(-(2**40), 2**40),
    span=st.one_of(st.integers(0, 3), st.integers(0, 2**32 + 5)),
    size=st.one_of(st.just(()), st.integers(0, 300)),
    buffered=st.booleans(),
)
def test_the_same_integers_and_state_as_generator_integers(kind, seed, low, span, size, buffered):
    numpy_rng, ours = twins(kind, seed)
    if buffered:  # an odd number of 32-bit draws leaves half of a 64-bit output in the generator
        for rng in (numpy_rng, ours):
            rng.integers(0, 10, size=3, dtype=np.int32)
    expected = numpy_rng.integers(low, low + span + 1, size=size)
    got = BoundedIntegers()(ours, low, low + span + 1, size)
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    np.testing.assert_array_equal(got, expected)
    assert same_state(ours.bit_generator.state, numpy_rng.bit_generator.state)
    np.testing.assert_array_equal(ours.integers(0, 2**20, size=5), numpy_rng.integers(0, 2**20, size=5))


def test_a_span_that_rejects_often_still_matches():
    numpy_rng, ours = twins(np.random.PCG64, 7)
    high = 2**31 + 2**30  # 2**32 mod high is 2**30: a quarter of the outputs are redrawn
    np.testing.assert_array_equal(BoundedIntegers()(ours, 0, high, 10_000), numpy_rng.integers(0, high, size=10_000))


def test_generators_alternate_without_mixing_their_streams():
    first, second = twins(np.random.PCG64, 1)[0], np.random.default_rng(2)
    reference, draw = [np.random.default_rng(1), np.random.default_rng(2)], BoundedIntegers()
    for step in range(6):
        rng, twin = ((first, reference[0]), (second, reference[1]))[step % 2]
        np.testing.assert_array_equal(draw(rng, 5, 900, 17), twin.integers(5, 900, size=17))


def test_a_copy_looks_up_its_own_generator():
    draw, rng = BoundedIntegers(), np.random.default_rng(4)
    draw(rng, 0, 10, 3)
    copy, rng_copy = pickle.loads(pickle.dumps((draw, rng)))
    np.testing.assert_array_equal(copy(rng_copy, 0, 1000, 20), rng.integers(0, 1000, size=20))


def test_bad_bounds_raise_what_generator_integers_raises():
    with pytest.raises(ValueError, match="high <= 0|low >= high"):
        BoundedIntegers()(np.random.default_rng(0), 3, 3, 4)


def test_without_numba_it_is_generator_integers(monkeypatch):
    draw = BoundedIntegers()
    monkeypatch.setattr(bounded, "_fill", None)
    numpy_rng, ours = twins(np.random.PCG64, 3)
    np.testing.assert_array_equal(draw(ours, 0, 100, 50), numpy_rng.integers(0, 100, size=50))
