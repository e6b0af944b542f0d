"""n-step transitions: a shared table of input steps and expected outputs."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf.errors import ArgumentError
from replaybuf.nstep import n_step, n_step_transitions, sequence_priority, trajectory_flags

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


# sequence_priority: R2D2's eta * max + (1 - eta) * mean of |td| over the learning steps
def test_sequence_priority_hand_computed():
    td = np.array([[9.0, -1.0, 3.0, -2.0], [5.0, 0.5, np.nan, 7.0]])
    learn = np.array([[False, True, True, True], [True, True, False, False]])
    # row 0: |td| over steps 1..3 = 1, 3, 2 -> max 3, mean 2; step 0 (burn-in, 9) ignored
    # row 1: 5, 0.5 -> max 5, mean 2.75; the NaN and the 7 are not learning steps
    np.testing.assert_allclose(sequence_priority(td, learn), [0.9 * 3 + 0.1 * 2, 0.9 * 5 + 0.1 * 2.75])
    np.testing.assert_allclose(sequence_priority(td, learn, eta=1.0), [3.0, 5.0])
    np.testing.assert_allclose(sequence_priority(td, learn, eta=0.0), [2.0, 2.75])
    np.testing.assert_allclose(sequence_priority(td[0], learn[0], eta=0.5), 0.5 * 3 + 0.5 * 2)


def test_sequence_priority_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    td = np.array([[9.0, -1.0, 3.0, -2.0], [5.0, 0.5, 4.0, 7.0]], np.float32)
    learn = np.array([[False, True, True, True], [True, True, False, False]])
    out = sequence_priority(torch.as_tensor(td), torch.as_tensor(learn), eta=0.9)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), sequence_priority(td, learn), rtol=1e-6)
    np.testing.assert_allclose(sequence_priority(torch.as_tensor(td), learn).numpy(), out.numpy())  # NumPy mask


@pytest.mark.parametrize(
    "td, learn, eta, match",
    [
        (np.ones((2, 3)), np.ones((2, 3), bool), 1.5, "eta: expected a float in \\[0, 1\\], got 1.5"),
        (np.ones((2, 3)), np.ones((2, 3), bool), -0.1, "eta:"),
        (np.ones((2, 3)), np.ones((2, 3), bool), "0.9", "eta:"),
        (np.float64(1.0), np.bool_(True), 0.9, "td_errors: expected \\[..., L\\]"),
        (np.ones((2, 0)), np.ones((2, 0), bool), 0.9, "td_errors: expected \\[..., L\\]"),
        (np.ones((2, 3)), np.ones((2, 4), bool), 0.9, "learn: expected a mask of td_errors' shape \\(2, 3\\)"),
        (np.ones((2, 3)), np.array([[1, 0, 0], [0, 0, 0]], bool), 0.9, "row \\(1,\\) has none"),
    ],
)
def test_sequence_priority_refuses(td, learn, eta, match):
    with pytest.raises(ArgumentError, match=match):
        sequence_priority(td, learn, eta=eta)


def test_sequence_priority_of_a_sampled_sequence():
    """The helper takes ``info.learn`` of a prioritized sequence sample and its result goes
    back through ``update_priorities(info.ids[:, burn_in], ...)``."""
    from replaybuf import ArraySpec, PrioritizedReplayBuffer

    spec = {"x": ArraySpec((), np.float32), "done": ArraySpec((), np.bool_)}
    rb = PrioritizedReplayBuffer(
        spec,
        batch_size=1,
        max_length=64,
        respect_episodes=True,
        pad_episode_ends=True,
        episode_end_field="done",
        seed=0,
    )
    for t in range(30):
        rb.add_batch({"x": np.array([t], np.float32), "done": np.array([t % 10 == 9])})
    items, info = rb.get_next(sample_batch_size=16, num_steps=4, burn_in=2, period=2)
    priority = sequence_priority(items["x"], info.learn)  # any per-step values
    x = np.where(info.learn, items["x"], np.nan)
    np.testing.assert_allclose(priority, 0.9 * np.nanmax(x, 1) + 0.1 * np.nanmean(x, 1), rtol=1e-6)
    rb.update_priorities(info.ids[:, 2], priority + 1.0)
