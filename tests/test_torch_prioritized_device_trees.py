"""``TorchPrioritizedReplayBuffer(tree_device="device")``: single-step draws from the trees
mirrored on the device (replaybuf.torch.device_draws), run here on CPU tensors only."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import replaybuf
from replaybuf.errors import ArgumentError

torch = pytest.importorskip("torch")
from replaybuf.torch import TorchPrioritizedReplayBuffer  # noqa: E402

SPEC = {"x": replaybuf.ArraySpec((), np.float32)}


def filled(tree_device, steps=13, **options):
    """Two streams of 8 steps, wrapped; every third add with its own priorities."""
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 8, alpha=0.7, beta=0.5, seed=4, tree_device=tree_device, **options)
    for t in range(steps):
        given = torch.tensor([t + 1.0, 0.25 * t + 0.1]) if t % 3 == 0 else None
        rb.add_batch({"x": np.array([2 * t, 2 * t + 1], np.float32)}, priorities=given)
    return rb


def assert_mirrored(rb):
    sampler = rb._sampler
    np.testing.assert_array_equal(sampler.device_sums.levels[0].numpy(), sampler.sums.levels[0])
    np.testing.assert_array_equal(sampler.device_mins.levels[0].numpy(), sampler.mins.levels[0])


def test_draws_report_the_host_buffers_probabilities_and_weights_after_adds_and_updates():
    device_rb, host_rb = filled("device"), filled("host")
    for _ in range(3):
        items, info = device_rb.get_next(64)
        ids = info.ids.numpy()
        np.testing.assert_array_equal(items["x"].numpy(), ids.astype(np.float32))  # item id i holds x = i
        assert ((ids >= 10) & (ids < 26)).all()  # the 16 stored ids after 13 steps of 2
        # the same leaves, so each drawn id's probability and weight are the host buffer's formula
        mass = host_rb._sampler.sums.levels[0][ids % 16]
        total, smallest = host_rb.mass(None)
        np.testing.assert_allclose(info.probabilities.numpy(), mass / total, rtol=1e-6)
        np.testing.assert_allclose(info.weights.numpy(), (mass / smallest) ** -0.5, rtol=1e-6)
        new = np.abs(np.sin(ids)) + 0.01
        device_rb.update_priorities(info.ids, torch.as_tensor(new))
        host_rb.update_priorities(ids, new)
        assert_mirrored(device_rb)
    assert device_rb.mass(None) == host_rb.mass(None)


def test_sampled_frequencies_follow_the_reported_probabilities():
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 10, alpha=0.8, seed=0, tree_device="device")
    for t in range(10):
        rb.add_batch({"x": np.zeros(2, np.float32)}, priorities=torch.tensor([t + 1.0, 3.0]))
    _, info = rb.get_next(20000)
    ids, probabilities = info.ids.numpy(), info.probabilities.numpy()
    masses = np.array([((i // 2 + 1.0 if i % 2 == 0 else 3.0) + 1e-6) ** 0.8 for i in range(20)])
    np.testing.assert_allclose(probabilities, masses[ids] / masses.sum(), rtol=1e-5)
    observed = np.bincount(ids, minlength=20)
    assert stats.chisquare(observed, masses / masses.sum() * ids.size).pvalue > 1e-4


def test_one_draw_is_0d_and_the_same_seed_draws_the_same_ids():
    a, b = filled("device"), filled("device")
    _, one = a.get_next()
    assert one.ids.shape == () and one.weights.shape == ()
    b.get_next()
    np.testing.assert_array_equal(a.get_next(32)[1].ids.numpy(), b.get_next(32)[1].ids.numpy())


def test_windows_fall_back_to_the_host_draw():
    device_rb, host_rb = filled("device"), filled("host")
    for _ in range(2):
        _, a = device_rb.get_next(16, 3)
        _, b = host_rb.get_next(16, 3)
        np.testing.assert_array_equal(a.ids.numpy(), b.ids.numpy())  # one host generator, seeded alike


def test_clear_and_a_loaded_checkpoint_refresh_the_device_trees():
    rb, source = filled("device"), filled("host", steps=5)
    rb.clear()
    assert rb._sampler.device_sums.total().item() == 0
    rb.load_state_dict(source.state_dict())
    assert_mirrored(rb)
    assert (rb.get_next(64)[1].ids.numpy() < 10).all()


@pytest.mark.parametrize(
    ("options", "named"),
    [({"tree_device": "cuda"}, "tree_device"), ({"tree_device": "device", "max_times_sampled": 2}, "sample-count")],
)
def test_bad_tree_device_is_refused(options, named):
    with pytest.raises(ArgumentError, match=named):
        TorchPrioritizedReplayBuffer(SPEC, 1, 8, **options)
