"""The sample-count rules on the torch and JAX buffers: test_sample_rules.py's reference-model
tests run against them (its ``buffer_of`` swapped), the same draws as the NumPy buffer for
the same seed, checkpoints continued mid-epoch across backends, and their refusals."""
# ruff: noqa: F811  (the device fixture imported from test_her_torch is a parameter here)

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

import replaybuf
import test_sample_rules as rules_tests
from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.jax import JaxReplayBuffer
from replaybuf.torch import TorchPrioritizedReplayBuffer, TorchUniformReplayBuffer
from test_her_torch import SPEC as HER_SPEC
from test_her_torch import device, fill, relabel  # noqa: F401 (device: the fixture)
from test_sample_rules import SPEC, RulesMachine, add


def torch_buffer(batch=2, length=8, **rules):
    return TorchUniformReplayBuffer(SPEC, batch_size=batch, max_length=length, seed=0, **rules)


def jax_buffer(batch=2, length=8, **rules):
    return JaxReplayBuffer(SPEC, batch_size=batch, max_length=length, seed=0, **rules)


def torch_prioritized(batch=2, length=8, **rules):
    return TorchPrioritizedReplayBuffer(SPEC, batch_size=batch, max_length=length, seed=0, **rules)


BACKENDS = {"torch": torch_buffer, "jax": jax_buffer}
BOTH = [
    "test_an_epoch_draws_every_item_once_and_new_items_join_the_next",
    "test_items_added_during_an_epoch_wait_for_the_next_and_drop_remainder_drops_the_short_batch",
    "test_an_overwritten_item_is_skipped_in_its_epoch",
    "test_max_times_sampled_consumes_and_fifo_is_a_queue",
    "test_a_batch_under_max_times_sampled_holds_distinct_items_drawn_uniformly",
    "test_staleness_bounds_the_versions_drawn",
    "test_consume_once_with_staleness_for_async_ppo",
    "test_an_epoch_saved_midway_continues_exactly",
    "test_a_bad_policy_version_is_refused_and_changes_nothing",
    "test_checkpoints_load_across_buffers_with_and_without_rules",
]
TORCH_ONLY = ["test_a_rate_limited_sample_waits_for_eligible_items_instead_of_raising"]  # JAX: no rate limiter


@pytest.mark.parametrize(
    ("backend", "name"), [(b, n) for b in BACKENDS for n in BOTH] + [("torch", n) for n in TORCH_ONLY]
)
def test_the_numpy_rule_tests_hold(backend, name, monkeypatch, tmp_path):
    monkeypatch.setattr(rules_tests, "buffer_of", BACKENDS[backend])
    test = getattr(rules_tests, name)
    test(tmp_path) if "tmp_path" in inspect.signature(test).parameters else test()


BAD_RULES = [options for options, _ in rules_tests.test_bad_rules_are_refused.pytestmark[0].args[1]]
BAD_PRIORITIZED = [options for options, _ in rules_tests.test_bad_prioritized_rules_are_refused.pytestmark[0].args[1]]


@pytest.mark.parametrize(
    ("numpy_make", "torch_make", "options"),
    [(rules_tests.buffer_of, torch_buffer, options) for options in BAD_RULES]
    + [(rules_tests.prioritized_of, torch_prioritized, options) for options in BAD_PRIORITIZED],
)
def test_torch_refuses_the_bad_rules_as_numpy_does(numpy_make, torch_make, options):
    with pytest.raises(ArgumentError) as numpy_error:
        numpy_make(**options)
    with pytest.raises(ArgumentError) as torch_error:
        torch_make(**options)
    assert str(torch_error.value) == str(numpy_error.value)


class TorchRulesMachine(RulesMachine):
    def _new(self):
        return torch_buffer(
            batch=self.BATCH, length=self.LENGTH, replacement=False, max_times_sampled=self.K, max_staleness=self.V
        )


class JaxRulesMachine(RulesMachine):
    def _new(self):
        return jax_buffer(
            batch=self.BATCH, length=self.LENGTH, replacement=False, max_times_sampled=self.K, max_staleness=self.V
        )


TestTorchRulesMachine = TorchRulesMachine.TestCase
TestTorchRulesMachine.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestJaxRulesMachine = JaxRulesMachine.TestCase  # fewer: each reload builds a buffer and reads its state back
TestJaxRulesMachine.settings = settings(
    max_examples=6, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _ids(buffer, size, **kwargs):
    items, info = buffer.get_next(size, **kwargs)
    return np.asarray(items["id"]).tolist(), getattr(info, "epoch", None)


@pytest.mark.parametrize("rules", [{"replacement": False}, {"max_times_sampled": 2}, {"max_staleness": 1}])
def test_torch_and_jax_draw_the_ids_numpy_draws(rules):
    numpy_buffer = rules_tests.buffer_of(length=6, **rules)
    others = [torch_buffer(length=6, **rules), jax_buffer(length=6, **rules)]
    for step in range(9):  # wraps: ids 0-5 overwritten
        for buffer in (numpy_buffer, *others):
            add(buffer, step, version=step // 3)
            buffer.policy_version = step // 3
    for _ in range(5):
        want = _ids(numpy_buffer, 3)
        assert [_ids(buffer, 3) for buffer in others] == [want, want]


@pytest.mark.parametrize("saver", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("loader", ["numpy", "torch", "jax"])
def test_a_mid_epoch_checkpoint_continues_exactly_in_any_backend(saver, loader, tmp_path):
    make = {"numpy": rules_tests.buffer_of, **BACKENDS}
    rules = {"length": 10, "replacement": False, "max_times_sampled": 2, "max_staleness": 1}
    original = make[saver](**rules)
    for step in range(7):
        add(original, step, version=step // 2)
    original.policy_version = 3
    original.get_next(3)  # mid-epoch, some items counted
    original.save(tmp_path / "ckpt")
    loaded = make[loader](**rules)
    loaded.load(tmp_path / "ckpt")
    assert loaded.policy_version == 3 and loaded.num_eligible() == original.num_eligible()
    for _ in range(3):  # what is left: 6 items of versions 2 and 3, at most twice each
        assert _ids(loaded, 3) == _ids(original, 3)


def test_a_torch_state_dict_with_rules_round_trips_through_torch_save(tmp_path):
    original = torch_buffer(length=10, replacement=False, max_times_sampled=2)
    for step in range(5):
        add(original, step)
    original.get_next(3)
    state = original.state_dict()
    assert all(isinstance(state["sample_rules"][key], torch.Tensor) for key in ("times", "order"))
    torch.save(state, tmp_path / "state.pt")
    loaded = torch_buffer(length=10, replacement=False, max_times_sampled=2)
    loaded.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    for _ in range(4):
        assert _ids(loaded, 3) == _ids(original, 3)


def test_torch_windows_and_sequences_follow_the_rules_as_numpy_draws_them():
    made = [
        cls(
            SPEC,
            batch_size=1,
            max_length=20,
            seed=1,
            replacement=False,
            respect_episodes=True,
            episode_end_field="done",
        )
        for cls in (replaybuf.UniformReplayBuffer, TorchUniformReplayBuffer)
    ]
    for buffer in made:
        for step in range(12):
            buffer.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]})
    numpy_buffer, torch_buffer_ = made
    windows = [_ids(torch_buffer_, 2, num_steps=2) for _ in range(5)]
    assert windows == [_ids(numpy_buffer, 2, num_steps=2) for _ in range(5)]
    assert sorted(w[0] for ids, _ in windows for w in ids) == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    _, info = torch_buffer_.get_next(3, num_steps=2, burn_in=1, period=2)
    assert isinstance(info.epoch, int) and info.ids.device == torch_buffer_.device


@pytest.mark.parametrize("saver", [TorchUniformReplayBuffer, replaybuf.UniformReplayBuffer])
def test_a_torch_buffer_with_episodes_recovers_the_index_on_load_and_continues(saver, tmp_path):
    options = {"batch_size": 1, "max_length": 20, "seed": 1, "replacement": False, "respect_episodes": True}
    original = saver(SPEC, episode_end_field="done", **options)
    for step in range(12):
        original.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]})
    original.get_next(2, num_steps=2)
    original.save(tmp_path / "ckpt")
    loaded = TorchUniformReplayBuffer(SPEC, episode_end_field="done", **options)
    loaded.load(tmp_path / "ckpt")
    for _ in range(5):
        assert _ids(loaded, 2, num_steps=2) == _ids(original, 2, num_steps=2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capture": True, "max_times_sampled": 1}, "max_times_sampled: expected None with capture=True"),
        ({"capture": True, "replacement": False}, "replacement: expected True with capture=True"),
    ],
)
def test_torch_refuses_rules_it_cannot_keep(options, message):
    with pytest.raises(ArgumentError, match=message):
        torch_buffer(**options)


@pytest.mark.parametrize("rules", [{"replacement": False}, {"max_times_sampled": 1}])
def test_torch_relabels_ruled_draws_as_numpy_does_and_an_epoch_continues_from_a_checkpoint(rules, device):
    options = {"seed": 3, "respect_episodes": True, "episode_end_field": "done", **rules}
    numpy_buffer = replaybuf.UniformReplayBuffer(HER_SPEC, 3, 9, her=relabel(ratio=0.6), **options)
    torch_buffer_ = TorchUniformReplayBuffer(HER_SPEC, 3, 9, device=device, her=relabel(ratio=0.6), **options)
    fill([numpy_buffer, torch_buffer_], 25, 4, 3)

    def same(a, b):
        (items, info), (want, want_info) = a.get_next(6, 2), b.get_next(6, 2)
        np.testing.assert_array_equal(info.ids.cpu().numpy(), np.asarray(want_info.ids))
        np.testing.assert_array_equal(info.relabelled.cpu().numpy(), np.asarray(want_info.relabelled))
        for key in ("reward", "achieved_goal"):
            np.testing.assert_array_equal(np.asarray(items[key].cpu()), np.asarray(want[key]))
        return info

    relabelled = [same(torch_buffer_, numpy_buffer).relabelled for _ in range(2)]
    assert torch.cat(relabelled).any()
    if "replacement" in rules:  # mid-epoch: the epoch's order is saved, so the draws continue exactly
        loaded = TorchUniformReplayBuffer(HER_SPEC, 3, 9, device=device, her=relabel(ratio=0.6), **options)
        loaded.load_state_dict(torch_buffer_.state_dict())
        for _ in range(2):
            same(loaded, torch_buffer_)


# -- TorchPrioritizedReplayBuffer: the NumPy prioritized buffer's rules, on the host trees ------------


PRIORITIZED = [
    "test_prioritized_consumption_draws_distinct_items_by_priority_and_takes_them_out",
    "test_prioritized_draws_follow_the_probabilities_with_consumed_and_stale_items_excluded",
    "test_prioritized_checkpoints_continue_exactly",
    "test_a_rate_limited_prioritized_sample_waits_for_eligible_items",
]


@pytest.mark.parametrize("name", PRIORITIZED)
def test_the_numpy_prioritized_rule_tests_hold_on_torch(name, monkeypatch):
    monkeypatch.setattr(rules_tests, "prioritized_of", torch_prioritized)
    getattr(rules_tests, name)()


@pytest.mark.parametrize("rules", [{"max_times_sampled": 1}, {"max_times_sampled": 2}, {"max_staleness": 1}])
def test_torch_prioritized_draws_what_numpy_draws(rules, device):
    numpy_buffer = rules_tests.prioritized_of(length=6, **rules)
    torch_buffer_ = TorchPrioritizedReplayBuffer(SPEC, batch_size=2, max_length=6, seed=0, device=device, **rules)
    for step in range(9):  # wraps: ids 0-5 overwritten
        for buffer in (numpy_buffer, torch_buffer_):
            rules_tests.add_prioritized(buffer, step, version=step // 3, priorities=[1.0 + step, 2.0])
            buffer.policy_version = step // 3
    for draw in range(3):
        (want, want_info), (items, info) = numpy_buffer.get_next(3), torch_buffer_.get_next(3)
        assert items["id"].device == info.ids.device == torch_buffer_.device
        np.testing.assert_array_equal(items["id"].cpu().numpy(), want["id"])
        for key in ("probabilities", "weights"):
            np.testing.assert_allclose(getattr(info, key).cpu().numpy(), getattr(want_info, key), rtol=1e-6)
        assert torch_buffer_.num_eligible() == numpy_buffer.num_eligible()
        new = np.array([3.0, 0.5, 7.0]) * (draw + 1)  # updates as tensors on the device, and arrays
        torch_buffer_.update_priorities(info.ids, torch.as_tensor(new, device=torch_buffer_.device))
        numpy_buffer.update_priorities(want_info.ids, new)


@pytest.mark.parametrize("saver", ["numpy", "torch"])
@pytest.mark.parametrize("loader", ["numpy", "torch"])
def test_a_prioritized_checkpoint_with_rules_continues_exactly_in_either_backend(saver, loader, tmp_path):
    make = {"numpy": rules_tests.prioritized_of, "torch": torch_prioritized}
    rules = {"length": 10, "max_times_sampled": 2, "max_staleness": 1}
    original = make[saver](**rules)
    for step in range(7):
        rules_tests.add_prioritized(original, step, version=step // 2, priorities=[1.0 + step, 0.5])
    original.policy_version = 3
    for _ in range(2):  # some items counted, some consumed
        _, info = original.get_next(3)
        original.update_priorities(info.ids, np.full(3, 4.0))
    original.save(tmp_path / "ckpt")
    loaded = make[loader](**rules)
    loaded.load(tmp_path / "ckpt")
    assert loaded.policy_version == 3 and loaded.num_eligible() == original.num_eligible() < 6
    assert loaded.mass() == pytest.approx(original.mass())
    for _ in range(2):  # what is left of the 6 items of versions 2 and 3, at most twice each
        (a, a_info), (b, b_info) = original.get_next(2), loaded.get_next(2)
        np.testing.assert_array_equal(np.asarray(a["id"]), np.asarray(b["id"]))
        np.testing.assert_allclose(np.asarray(a_info.probabilities), np.asarray(b_info.probabilities), rtol=1e-6)


def test_a_torch_prioritized_state_dict_with_rules_round_trips_through_torch_save(tmp_path):
    original = torch_prioritized(length=10, max_times_sampled=1)
    for step in range(5):
        rules_tests.add_prioritized(original, step, priorities=[1.0 + step, 2.0])
    original.get_next(3)
    state = original.state_dict()
    assert isinstance(state["sample_rules"]["times"], torch.Tensor) and int(state["sample_rules"]["times"].sum()) == 3
    torch.save(state, tmp_path / "state.pt")
    loaded = torch_prioritized(length=10, max_times_sampled=1)
    loaded.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert loaded.num_eligible() == original.num_eligible() == 7
    for _ in range(2):
        assert _ids(loaded, 3) == _ids(original, 3)


@pytest.mark.parametrize("saver", [TorchPrioritizedReplayBuffer, replaybuf.PrioritizedReplayBuffer])
def test_torch_prioritized_windows_follow_the_rules_and_recover_the_episodes_on_load(saver, tmp_path):
    options = {"batch_size": 1, "max_length": 20, "seed": 2, "max_times_sampled": 1, "respect_episodes": True}
    made = [cls(SPEC, episode_end_field="done", **options) for cls in (saver, TorchPrioritizedReplayBuffer)]
    for buffer in made:
        for step in range(12):
            buffer.add_batch({"id": [step], "policy_version": [0], "done": [step % 4 == 3]}, priorities=[1.0 + step])
    original, other = made
    assert _ids(other, 3, num_steps=2) == _ids(original, 3, num_steps=2)  # torch draws what the saver does
    original.save(tmp_path / "ckpt")
    loaded = TorchPrioritizedReplayBuffer(SPEC, episode_end_field="done", **options)
    loaded.load(tmp_path / "ckpt")
    windows = [_ids(loaded, 2, num_steps=2) for _ in range(3)]
    assert windows == [_ids(original, 2, num_steps=2) for _ in range(3)]
    starts = [w[0] for ids, _ in windows for w in ids] + [w[0] for w in _ids(other, 3, num_steps=2)[0]]
    assert len(set(starts)) == 6 and not {3, 7, 11} & set(starts)  # distinct, inside episodes
    with pytest.raises(EmptyBufferError):
        loaded.get_next(1, num_steps=2)


@pytest.mark.parametrize(
    ("rules", "named"), [({"max_times_sampled": 1}, "max_times_sampled"), ({"max_staleness": 0}, "max_staleness")]
)
def test_torch_prioritized_refuses_capture_with_the_rules(rules, named):
    with pytest.raises(ArgumentError, match=rf"{named}: expected None with capture=True"):
        TorchPrioritizedReplayBuffer(SPEC, capture=True, **rules)


class TorchPrioritizedRulesMachine(rules_tests.PrioritizedRulesMachine):
    def _new(self):
        return torch_prioritized(batch=self.BATCH, length=self.LENGTH, max_times_sampled=self.K, max_staleness=self.V)


TestTorchPrioritizedRulesMachine = TorchPrioritizedRulesMachine.TestCase
TestTorchPrioritizedRulesMachine.settings = settings(
    max_examples=10, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"sampler": "prioritized", "max_times_sampled": 1},
            "max_times_sampled: expected None with sampler='prioritized'",
        ),
        (
            {"respect_episodes": True, "episode_end_field": "done", "sampler": "fifo"},
            "sampler: expected 'uniform' with respect_episodes",
        ),
        ({"max_times_sampled": 0}, "max_times_sampled: expected an int >= 1 or None, got 0"),
        ({"max_staleness": 1, "version_field": "done"}, "version_field: expected the path of a scalar integer"),
        ({"drop_remainder": True}, "drop_remainder: only used with replacement=False"),
        ({"sampler": "lifo"}, "sampler: expected 'uniform' or 'prioritized', got 'lifo'"),
    ],
)
def test_jax_refuses_bad_rules_and_rules_it_cannot_keep(options, message):
    with pytest.raises(ArgumentError, match=message):
        jax_buffer(**options)


def test_a_jax_buffer_with_rules_refuses_a_state_from_outside_and_empties():
    buffer = jax_buffer(max_times_sampled=1)
    add(buffer, 0)
    with pytest.raises(ArgumentError, match="state: a buffer with sample-count rules"):
        buffer.state = buffer.state
    buffer.get_next(2)
    assert buffer.num_eligible() == 0 and buffer.num_frames() == 2
    with pytest.raises(EmptyBufferError, match="only 0 eligible items"):
        buffer.get_next(1)
    buffer.clear()
    add(buffer, 1)
    assert sorted(_ids(buffer, 2)[0]) == [2, 3]
