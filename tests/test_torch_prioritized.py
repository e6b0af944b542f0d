"""``replaybuf.torch.TorchPrioritizedReplayBuffer``: the NumPy prioritized buffer's draws, with
tensors on the device (host trees, docs/gpu.md)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from scipy import stats

import replaybuf
from replaybuf.errors import ArgumentError, PriorityError

torch = pytest.importorskip("torch")
from replaybuf.torch import TorchPrioritizedReplayBuffer  # noqa: E402

SPEC = {"x": replaybuf.ArraySpec((3,), np.float32), "id": replaybuf.ArraySpec((), np.int64)}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def device_of(name):
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.device(name)


def step(t, streams=2):
    ids = t * streams + np.arange(streams)
    return {"x": np.stack([ids, ids + 0.5, -ids], -1).astype(np.float32), "id": ids}


def host(value):
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_steps", [None, 3])
def test_draws_equal_the_numpy_buffers_for_the_same_seed_adds_and_updates(device, num_steps):
    device = device_of(device)
    numpy_rb = replaybuf.PrioritizedReplayBuffer(SPEC, 2, 8, alpha=0.7, beta=0.5, seed=4)
    torch_rb = TorchPrioritizedReplayBuffer(SPEC, 2, 8, alpha=0.7, beta=0.5, seed=4, device=device, tree_device="host")
    for t in range(13):
        given = np.array([t + 1.0, 0.25 * t + 0.1]) if t % 3 == 0 else None
        numpy_rb.add_batch(step(t), priorities=given)
        torch_rb.add_batch(step(t), priorities=None if given is None else torch.tensor(given, device=device))
    for _ in range(4):
        a, a_info = numpy_rb.get_next(32, num_steps)
        b, b_info = torch_rb.get_next(32, num_steps)
        for key in ("ids", "probabilities", "weights"):
            value = getattr(b_info, key)
            assert isinstance(value, torch.Tensor) and value.device == device, key
            np.testing.assert_array_equal(host(value), getattr(a_info, key), err_msg=key)
        np.testing.assert_array_equal(host(b["x"]), a["x"])
        new = np.abs(np.sin(a_info.ids[..., 0] if num_steps else a_info.ids)) + 0.01
        numpy_rb.update_priorities(a_info.ids, new)
        torch_rb.update_priorities(b_info.ids, torch.as_tensor(new, device=device))
    assert torch_rb.mass(num_steps) == numpy_rb.mass(num_steps)


@pytest.mark.parametrize("device", DEVICES)
def test_sampled_frequencies_follow_the_reported_probabilities(device):
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 10, alpha=0.8, seed=0, device=device_of(device), tree_device="host")
    for t in range(10):
        rb.add_batch(step(t), priorities=torch.tensor([t + 1.0, 3.0]))
    _, info = rb.get_next(20000)
    ids, probabilities = host(info.ids), host(info.probabilities)
    masses = {i: (float(i // 2 + 1 if i % 2 == 0 else 3.0) + 1e-6) ** 0.8 for i in range(20)}
    total = sum(masses.values())
    for i, p in zip(ids[:50].tolist(), probabilities[:50].tolist(), strict=True):
        assert p == pytest.approx(masses[i] / total, rel=1e-5)
    observed = np.bincount(ids, minlength=20)
    expected = np.array([masses[i] / total for i in range(20)]) * ids.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_episode_windows_and_padding_follow_the_numpy_buffer():
    spec = {**SPEC, "done": replaybuf.ArraySpec((), np.bool_)}
    options = dict(alpha=0.6, seed=9, respect_episodes=True, episode_end_field="done", pad_episode_ends=True)
    numpy_rb = replaybuf.PrioritizedReplayBuffer(spec, 2, 12, **options)
    torch_rb = TorchPrioritizedReplayBuffer(spec, 2, 12, **options)
    for t in range(20):
        item = {**step(t), "done": np.array([t % 4 == 3, t % 5 == 4])}
        numpy_rb.add_batch(item)
        torch_rb.add_batch(item)
    a_items, a_info = numpy_rb.get_next(16, 4)
    b_items, b_info = torch_rb.get_next(16, 4)
    np.testing.assert_array_equal(host(b_info.ids), a_info.ids)
    np.testing.assert_array_equal(host(b_info.mask), a_info.mask)
    np.testing.assert_array_equal(host(b_items["id"]), a_items["id"])


def test_checkpoints_round_trip_through_torch_save_and_the_numpy_buffer(tmp_path):
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 4, alpha=0.5, seed=1)
    for t in range(7):
        rb.add_batch(step(t))
    rb.update_priorities(torch.tensor([8, 10]), torch.tensor([4.0, 0.5]))
    buffer = io.BytesIO()
    torch.save(rb.state_dict(), buffer)
    buffer.seek(0)
    twin = TorchPrioritizedReplayBuffer(SPEC, 2, 4, alpha=0.5, seed=2)
    twin.load_state_dict(torch.load(buffer, weights_only=True))
    np.testing.assert_array_equal(host(twin.get_next(8)[1].ids), host(rb.get_next(8)[1].ids))
    rb.save(tmp_path / "ckpt")
    numpy_rb = replaybuf.PrioritizedReplayBuffer(SPEC, 2, 4, alpha=0.5, seed=3)
    numpy_rb.load(tmp_path / "ckpt")
    np.testing.assert_array_equal(numpy_rb.get_next(8)[1].ids, host(rb.get_next(8)[1].ids))
    np.testing.assert_allclose(numpy_rb.state_dict()["priorities"]["mass"], rb.state_dict()["priorities"]["mass"])


def test_bad_priorities_at_insert_write_nothing():
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 4, seed=0)
    rb.add_batch(step(0))
    before = rb.state_dict()
    for bad, error in [([1.0], ArgumentError), (torch.tensor([1.0, float("nan")]), PriorityError)]:
        with pytest.raises(error, match="priorities: expected"):
            rb.add_batch(step(1), priorities=bad)
    after = rb.state_dict()
    assert after["steps"] == before["steps"] == 1
    torch.testing.assert_close(after["priorities"]["mass"], before["priorities"]["mass"])
