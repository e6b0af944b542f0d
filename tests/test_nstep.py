"""n-step transitions: a shared table of input steps and expected outputs."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf.errors import ArgumentError
from replaybuf.nstep import n_step, n_step_transitions, trajectory_flags

G = 0.5
# (rewards, terminated, truncated, n) -> per start t: (return, discount, last index)
TABLE = [
    # no end: full n-step sums, bootstrap g^k; at the data's end fewer steps
    (
        [1, 2, 4, 8],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        2,
        [(1 + G * 2, G**2, 1), (2 + G * 4, G**2, 2), (4 + G * 8, G**2, 3), (8, G, 3)],
    ),
    # termination at step 1: no bootstrap for starts 0 and 1
    ([1, 2, 4, 8], [0, 1, 0, 0], [0, 0, 0, 0], 3, [(1 + G * 2, 0.0, 1), (2, 0.0, 1), (4 + G * 8, G**2, 3), (8, G, 3)]),
    # truncation at step 1: same sums, but bootstrap from next_observation[1]
    ([1, 2, 4, 8], [0, 0, 0, 0], [0, 1, 0, 0], 3, [(1 + G * 2, G**2, 1), (2, G, 1), (4 + G * 8, G**2, 3), (8, G, 3)]),
    # n = 1 is the one-step transition
    ([3, 5], [0, 1], [0, 0], 1, [(3, G, 0), (5, 0.0, 1)]),
    # termination on the first step
    ([7, 1, 1], [1, 0, 0], [0, 0, 0], 3, [(7, 0.0, 0), (1 + G, G**2, 2), (1, G, 2)]),
]


@pytest.mark.parametrize("rewards, terminated, truncated, n, expected", TABLE)
def test_table(rewards, terminated, truncated, n, expected):
    out = n_step(rewards, terminated, truncated, gamma=G, n=n)
    np.testing.assert_allclose(out.returns, [e[0] for e in expected])
    np.testing.assert_allclose(out.discounts, [e[1] for e in expected])
    np.testing.assert_array_equal(out.last, [e[2] for e in expected])


@pytest.mark.parametrize("position", range(5))
def test_truncation_at_every_position(position):
    """Truncation stops the sum like termination does but always bootstraps."""
    rewards = np.arange(1.0, 6.0)
    trunc = np.zeros(5, bool)
    trunc[position] = True
    term = np.zeros(5, bool)
    out_trunc = n_step(rewards, term, trunc, gamma=G, n=5)
    out_term = n_step(rewards, trunc, term, gamma=G, n=5)
    np.testing.assert_allclose(out_trunc.returns, out_term.returns)
    for t in range(5):
        k = (position - t + 1) if t <= position else 5 - t
        assert out_trunc.steps[t] == k
        assert out_trunc.discounts[t] == pytest.approx(G**k)
        assert out_term.discounts[t] == (0.0 if t <= position else pytest.approx(G**k))
        assert out_trunc.last[t] == t + k - 1


def test_batched_windows_and_mask():
    window = {
        "observation": np.arange(6).reshape(2, 3),
        "action": np.arange(6).reshape(2, 3) * 10,
        "reward": np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]]),
        "terminated": np.array([[0, 0, 0], [0, 0, 0]], bool),
        "truncated": np.zeros((2, 3), bool),
        "next_observation": (np.arange(6).reshape(2, 3) + 1)[..., None] * np.ones(2),
    }
    mask = np.array([[True, True, True], [True, False, False]])
    out = n_step_transitions(window, gamma=G, mask=mask)
    np.testing.assert_allclose(out["return"], [1 + G * 2 + G * G * 4, 1.0])
    np.testing.assert_allclose(out["discount"], [G**3, G])
    np.testing.assert_array_equal(out["observation"], [0, 3])
    np.testing.assert_array_equal(out["action"], [0, 30])
    np.testing.assert_array_equal(out["next_observation"], [[3, 3], [4, 4]])


def test_trajectory_flags():
    term, trunc = trajectory_flags(np.array([1, 2, 2, 0]), np.array([1.0, 0.0, 1.0, 1.0]))
    np.testing.assert_array_equal(term, [False, True, False, False])
    np.testing.assert_array_equal(trunc, [False, False, True, False])


@pytest.mark.parametrize(
    "kwargs",
    [dict(n=0, gamma=0.9), dict(n=2, gamma=1.5)],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ArgumentError):
        n_step([1.0], [False], [False], **kwargs)


def test_shape_mismatch_and_missing_keys():
    with pytest.raises(ArgumentError, match="one shape"):
        n_step([1.0, 2.0], [False], [False, False], gamma=0.9, n=1)
    with pytest.raises(ArgumentError, match="missing"):
        n_step_transitions({"reward": np.zeros(2)}, gamma=0.9)
