"""``TorchPrioritizedReplayBuffer(tree_device="device")``: priorities, single-step draws and
updates on the device (replaybuf.torch.device_draws, device_priorities), and ``capture=True``
over them (replaybuf.torch.captured_priorities). Run on CPU tensors here; the CUDA tests
(no host synchronisation) skip without a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import replaybuf
from replaybuf.errors import ArgumentError, EmptyBufferError, PriorityError

torch = pytest.importorskip("torch")
from cuda_sync import host_sync_forbidden  # noqa: E402
from replaybuf.torch import TorchPrioritizedReplayBuffer  # noqa: E402
from replaybuf.torch.prioritized import trees_on  # noqa: E402

SPEC = {"x": replaybuf.ArraySpec((), np.float32)}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def filled(tree_device, steps=13, **options):
    """Two streams of 8 steps, wrapped; every third add with its own priorities."""
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 8, alpha=0.7, beta=0.5, seed=4, tree_device=tree_device, **options)
    for t in range(steps):
        add(rb, t)
    return rb


def add(rb, t):
    given = torch.tensor([t + 1.0, 0.25 * t + 0.1]) if t % 3 == 0 else None
    rb.add_batch({"x": np.array([2 * t, 2 * t + 1], np.float32)}, priorities=given)


def device_leaves(rb):
    return [leaves[:16] for leaves in rb._sampler.on_device.leaves()]


def host_leaves(rb):
    return [rb._sampler.sums.levels[0][:16], rb._sampler.mins.levels[0][:16]]


def assert_same_priorities(device_rb, host_rb):
    for got, want in zip(device_leaves(device_rb), host_leaves(host_rb), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert device_rb._sampler.on_device.max_priority.item() == host_rb._sampler.max_priority


def update_both(device_rb, host_rb, ids):
    """The same update on both: duplicates (last wins) and an overwritten id (ignored) included."""
    ids = np.concatenate([ids, ids[:3], [2]])  # id 2 was overwritten long ago
    new = np.abs(np.sin(ids)) * 3 + 0.01 + np.arange(ids.size) * 0.01
    device_rb.update_priorities(torch.as_tensor(ids), torch.as_tensor(new))
    host_rb.update_priorities(ids, new)


def test_draws_report_the_host_buffers_probabilities_and_weights_after_adds_and_updates():
    device_rb, host_rb = filled("device"), filled("host")
    for t in range(13, 16):
        items, info = device_rb.get_next(64)
        ids = info.ids.numpy()
        np.testing.assert_array_equal(items["x"].numpy(), ids.astype(np.float32))  # item id i holds x = i
        lowest = 2 * (t - 8)
        assert ((ids >= lowest) & (ids < 2 * t)).all()  # the 16 stored ids
        # the same leaves, so each drawn id's probability and weight are the host buffer's formula
        mass = host_rb._sampler.sums.levels[0][ids % 16]
        total, smallest = host_rb.mass(None)
        np.testing.assert_allclose(info.probabilities.numpy(), mass / total, rtol=1e-6)
        np.testing.assert_allclose(info.weights.numpy(), (mass / smallest) ** -0.5, rtol=1e-6)
        update_both(device_rb, host_rb, ids)
        assert_same_priorities(device_rb, host_rb)
        for rb in (device_rb, host_rb):  # new items get the running maximum, raised on the device
            add(rb, t)
        assert_same_priorities(device_rb, host_rb)
    assert device_rb.mass(None) == pytest.approx(host_rb.mass(None), rel=1e-12)


def test_updates_run_on_the_device_and_the_host_trees_follow_when_read():
    device_rb, host_rb = filled("device"), filled("host")
    before = [leaves.copy() for leaves in host_leaves(device_rb)]
    update_both(device_rb, host_rb, np.arange(10, 26))
    for untouched, now in zip(before, host_leaves(device_rb), strict=True):
        np.testing.assert_array_equal(untouched, now)  # the update never reached the host trees
    assert_same_priorities(device_rb, host_rb)
    assert device_rb.mass(2) == pytest.approx(host_rb.mass(2), rel=1e-12)  # a read brings them over
    for got, want in zip(host_leaves(device_rb), host_leaves(host_rb), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_windows_after_device_updates_draw_from_the_updated_priorities():
    device_rb, host_rb = filled("device"), filled("host")
    for round_ in range(3):
        _, drawn = device_rb.get_next(32)  # device draws leave the host generator alone
        update_both(device_rb, host_rb, drawn.ids.numpy())
        _, a = device_rb.get_next(16, 3)
        _, b = host_rb.get_next(16, 3)
        np.testing.assert_array_equal(a.ids.numpy(), b.ids.numpy())  # one host generator, seeded alike
        np.testing.assert_allclose(a.probabilities.numpy(), b.probabilities.numpy(), rtol=1e-6)
        add(device_rb, 13 + round_)
        add(host_rb, 13 + round_)


def test_a_bad_update_writes_nothing_and_names_what_was_wrong():
    rb = filled("device")
    before = device_leaves(rb)
    largest = rb._sampler.on_device.max_priority.item()
    cases = [
        (torch.tensor([12, 13]), torch.tensor([1.0, float("nan")]), r"priorities: expected finite values > 0"),
        (torch.tensor([12, 13]), torch.tensor([1.0, -2.0]), r"priorities: expected finite values > 0"),
        (torch.tensor([12, 26]), torch.tensor([50.0, 2.0]), r"ids: expected ids of added items \(0 <= id < 26\)"),
    ]
    for ids, priorities, message in cases:
        with pytest.raises(PriorityError, match=message):
            rb.update_priorities(ids, priorities)
        for untouched, now in zip(before, device_leaves(rb), strict=True):
            np.testing.assert_array_equal(untouched, now)
        assert rb._sampler.on_device.max_priority.item() == largest
    with pytest.raises(ArgumentError, match=r"update_priorities: expected integer ids shaped like priorities \(3,\)"):
        rb.update_priorities(torch.tensor([12, 13]), torch.tensor([1.0, 2.0, 3.0]))
    loss_part = torch.tensor([50.0], requires_grad=True) * 1.0  # straight from a loss: not kept in autograd
    rb.update_priorities(torch.tensor([12]), loss_part)  # a later good update applies
    assert device_leaves(rb)[0][12] == pytest.approx((50.0 + 1e-6) ** 0.7)
    assert not rb._sampler.on_device.sums.tree.requires_grad


def test_a_fault_the_device_reports_late_names_its_call(monkeypatch):
    """As on a GPU still running the bad update when its call (and the next) returned."""
    rb = filled("device")
    fault = rb._sampler.on_device.fault
    busy = [True]
    real = type(fault).raise_if_any
    monkeypatch.setattr(type(fault), "raise_if_any", lambda self, wait=False: None if busy[0] else real(self, wait))
    before = device_leaves(rb)
    rb.update_priorities(torch.tensor([12]), torch.tensor([float("inf")]))  # the first update since filling
    rb.update_priorities(torch.tensor([13]), torch.tensor([3.0]))  # applied: a good update after it
    busy[0] = False
    with pytest.raises(PriorityError, match=r"update_priorities call 1 of this buffer held a priority that is not"):
        rb.get_next(4)
    after = device_leaves(rb)
    assert after[0][12] == before[0][12] and after[0][13] == pytest.approx((3.0 + 1e-6) ** 0.7)
    rb.get_next(4)  # reported once


def test_sampled_frequencies_follow_the_reported_probabilities():
    for capture in (False, True):
        rb = TorchPrioritizedReplayBuffer(SPEC, 2, 10, alpha=0.8, seed=0, tree_device="device", capture=capture)
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
    items, windows = a.get_next(5, 1)  # windows of one step keep their time axis
    assert windows.ids.shape == (5, 1) and items["x"].shape == (5, 1) and windows.weights.shape == (5,)


def test_clear_and_a_loaded_checkpoint_set_the_device_trees():
    rb, source = filled("device"), filled("host", steps=5)
    rb.clear()
    assert rb._sampler.on_device.sums.total().item() == 0
    rb.load_state_dict(source.state_dict())
    assert_same_priorities(rb, source)
    assert (rb.get_next(64)[1].ids.numpy() < 10).all()


def test_checkpoints_after_device_updates_hold_the_updated_priorities(tmp_path):
    device_rb, host_rb = filled("device"), filled("host")
    update_both(device_rb, host_rb, np.arange(10, 26))
    device_rb.save(tmp_path / "ckpt")
    numpy_rb = replaybuf.PrioritizedReplayBuffer(SPEC, 2, 8, alpha=0.7, beta=0.5)
    numpy_rb.load(tmp_path / "ckpt")
    assert numpy_rb.mass(None) == pytest.approx(host_rb.mass(None), rel=1e-12)
    np.testing.assert_allclose(numpy_rb._sampler.sums.levels[0][:16], host_leaves(host_rb)[0], rtol=1e-12)
    assert numpy_rb._sampler.max_priority == host_rb._sampler.max_priority


# -- capture=True -----------------------------------------------------------------------------


def test_captured_samples_are_the_eager_device_draws():
    eager, captured = (filled(None, capture=capture) if capture else filled("device") for capture in (False, True))
    for t in range(13, 17):
        for sample_batch_size, num_steps in ((32, None), (None, None), (6, 1), (4, 3)):
            a_items, a = eager.get_next(sample_batch_size, num_steps)
            b_items, b = captured.get_next(sample_batch_size, num_steps)
            for want, got in ((a_items["x"], b_items["x"]), (a.ids, b.ids), (a.probabilities, b.probabilities)):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
            torch.testing.assert_close(b.weights, a.weights, rtol=0, atol=0)
        update_both(eager, captured, a.ids.numpy().ravel())
        add(eager, t)
        add(captured, t)


def test_a_captured_prioritized_sample_is_overwritten_by_the_next_one():
    rb = filled(None, capture=True)
    items, info = rb.get_next(64)
    kept = info.ids.clone()
    again, info_again = rb.get_next(64)
    assert info_again.ids is info.ids and again["x"] is items["x"] and info_again.weights is info.weights
    assert not torch.equal(kept, info.ids)
    torch.testing.assert_close(items["x"], info.ids.float())
    assert rb.get_next(8)[1].ids is not info.ids  # another size: another step


def test_capture_draws_from_the_first_add_and_refuses_an_empty_buffer():
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 8, seed=0, capture=True)
    assert rb.capture and rb._sampler.on_device is not None  # tree_device chosen as "device"
    with pytest.raises(EmptyBufferError):
        rb.get_next(4)
    rb.add_batch({"x": np.array([0.0, 1.0], np.float32)})
    assert set(rb.get_next(64)[1].ids.tolist()) == {0, 1}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"tree_device": "cuda"}, r"tree_device: expected 'host' or 'device', got 'cuda'"),
        ({"tree_device": "device", "max_times_sampled": 2}, "tree_device: expected 'host' with the sample-count"),
        ({"tree_device": "host", "capture": True}, r"tree_device: expected 'device' \(or None\) with capture=True"),
        ({"capture": True, "max_times_sampled": 2}, "max_times_sampled: expected None with capture=True"),
        ({"capture": True, "respect_episodes": True}, "respect_episodes: expected False with capture=True"),
        ({"capture": True, "rate_limiter": replaybuf.MinSize(1)}, "rate_limiter: expected None with capture=True"),
        ({"capture": "yes"}, "capture: expected True or False"),
    ],
)
def test_bad_tree_device_and_capture_options_are_refused(options, named):
    with pytest.raises(ArgumentError, match=named):
        TorchPrioritizedReplayBuffer(SPEC, 1, 8, **options)


def test_the_trees_go_to_the_device_by_default_on_cuda_and_with_capture_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert trees_on(None, False, cpu, False) == "host" and trees_on(None, True, cpu, False) == "device"
    assert trees_on(None, False, cuda, False) == "device" and trees_on(None, False, cuda, True) == "host"
    assert trees_on("host", False, cuda, False) == "host"
    assert TorchPrioritizedReplayBuffer(SPEC, 1, 8)._tree_device == "host"


def test_a_captured_dataset_samples_in_the_callers_thread_only():
    rb = filled(None, capture=True)
    items, info = next(iter(rb.as_dataset(sample_batch_size=4)))
    torch.testing.assert_close(items["x"], info.ids.float())
    with pytest.raises(ArgumentError, match=r"num_parallel_calls: expected None with capture=True"):
        rb.as_dataset(sample_batch_size=4, num_parallel_calls=2)


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("capture", [False, True])
def test_cuda_samples_and_updates_never_synchronise(capture):
    rb = TorchPrioritizedReplayBuffer(SPEC, 2, 64, seed=0, device="cuda", tree_device="device", capture=capture)
    for t in range(40):
        rb.add_batch({"x": torch.tensor([2.0 * t, 2.0 * t + 1], device="cuda")})
    rb.get_next(256)  # records the graph (capturing may synchronise)
    with host_sync_forbidden():
        for _ in range(3):
            items, info = rb.get_next(256)
            td_errors = (items["x"] - 40.0).abs() + 0.5
            rb.update_priorities(info.ids, td_errors)
    assert info.ids.is_cuda and info.weights.is_cuda
    torch.testing.assert_close(items["x"], info.ids.float())
    with pytest.raises(PriorityError):  # a bad update is reported once the device ran it
        rb.update_priorities(info.ids, torch.full((256,), float("nan"), device="cuda"))
        torch.cuda.synchronize()
        rb.get_next(4)
