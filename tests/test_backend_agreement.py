"""Where the backends once disagreed, they now share one rule: the episode marker's path, the
priority update's shape check, the checkpointed priority masses and the exponent checks.
Each rule runs over every backend that has it (NumPy, shared memory, JAX class and core)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

import replaybuf  # noqa: E402
import replaybuf.jax as jax_buffers  # noqa: E402
import replaybuf.shared  # noqa: E402

NESTED = {"obs": replaybuf.ArraySpec((2,), np.float32), "info": {"done": replaybuf.ArraySpec((), bool)}}
FLAT = {"obs": replaybuf.ArraySpec((2,), np.float32), "reward": replaybuf.ArraySpec((), np.float32)}


def _numpy(spec, **options):
    return replaybuf.UniformReplayBuffer(spec, batch_size=2, max_length=8, **options)


def _numpy_prioritized(spec, **options):
    return replaybuf.PrioritizedReplayBuffer(spec, batch_size=2, max_length=8, **options)


def _shared(spec, **options):
    return replaybuf.shared.SharedReplayBuffer(spec, writers=1, batch_size=2, max_length=8, **options)


def _shared_prioritized(spec, **options):
    return _shared(spec, sampler="prioritized", **options)


def _jax(spec, **options):
    return jax_buffers.JaxReplayBuffer(spec, batch_size=2, max_length=8, **options)


def _jax_prioritized(spec, **options):
    return _jax(spec, sampler="prioritized", **options)


def _jax_core(spec, **options):
    return jax_buffers.make_buffer(spec, 2, 8, **options)


EPISODE_BACKENDS = {"numpy": _numpy, "shared": _shared, "jax": _jax, "jax-core": _jax_core}
PRIORITIZED = {"numpy": _numpy_prioritized, "shared": _shared_prioritized, "jax": _jax_prioritized}


def _closed(buffer):
    if hasattr(buffer, "close"):
        buffer.close()


@pytest.mark.parametrize("backend", sorted(EPISODE_BACKENDS))
def test_a_nested_episode_marker_is_named_by_its_whole_path(backend):
    make = EPISODE_BACKENDS[backend]
    _closed(make(NESTED, respect_episodes=True, episode_end_field="info/done"))
    with pytest.raises(replaybuf.ArgumentError, match=r"episode_end_field: expected the path of a scalar field"):
        make(NESTED, respect_episodes=True, episode_end_field="done")  # the last component alone names nothing


@pytest.mark.parametrize("backend", sorted(EPISODE_BACKENDS))
def test_a_step_type_marker_is_a_top_level_field(backend):
    nested_step_type = {"obs": replaybuf.ArraySpec((2,), np.float32), "info": {"step_type": NESTED["info"]["done"]}}
    with pytest.raises(replaybuf.ArgumentError, match="expected a step_type or next_step_type field"):
        EPISODE_BACKENDS[backend](nested_step_type, respect_episodes=True)


@pytest.mark.parametrize("backend", sorted(PRIORITIZED))
@pytest.mark.parametrize("alpha", [True, np.bool_(False), -0.5, float("nan"), "0.6"])
def test_the_exponents_are_checked_alike(backend, alpha):
    with pytest.raises(replaybuf.ArgumentError, match=r"alpha: expected a finite float >= 0"):
        PRIORITIZED[backend](FLAT, alpha=alpha)


def _filled(backend):
    buffer = PRIORITIZED[backend](FLAT)
    for t in range(3):
        buffer.add_batch({"obs": np.full((2, 2), t, np.float32), "reward": np.ones(2, np.float32)})
    return buffer


@pytest.mark.parametrize("backend", sorted(PRIORITIZED))
def test_a_priority_update_of_another_shape_is_an_argument_error_and_changes_nothing(backend):
    buffer = _filled(backend)
    before = buffer.state_dict()["priorities"]["mass"].copy()
    with pytest.raises(replaybuf.ArgumentError, match=r"expected integer ids shaped like priorities \(2,\)"):
        buffer.update_priorities(np.array([0, 1, 2]), np.array([1.0, 2.0]))
    with pytest.raises(replaybuf.PriorityError, match=r"ids: expected ids of added items"):
        buffer.update_priorities(np.array([0, 6]), np.array([1.0, 2.0]))
    with pytest.raises(replaybuf.PriorityError, match=r"priorities: expected finite values > 0"):
        buffer.update_priorities(np.array([0, 1]), np.array([1.0, np.nan]))
    np.testing.assert_array_equal(buffer.state_dict()["priorities"]["mass"], before)
    buffer.update_priorities(np.array([[0, 2], [1, 3]]), np.array([4.0, 5.0]))  # windows count by their first id
    assert not np.array_equal(buffer.state_dict()["priorities"]["mass"], before)
    _closed(buffer)


@pytest.mark.parametrize("backend", sorted(PRIORITIZED))
@pytest.mark.parametrize(
    ("masses", "message"),
    [
        (np.full(6, np.inf), r"expected masses in \["),
        (np.zeros(6), r"expected masses in \["),
        (np.ones(5), r"expected 6 masses \(one per item\), got 5"),
        (np.ones(6, np.int64), r"expected a 1-d float array"),
    ],
)
def test_saved_masses_every_buffer_refuses(backend, masses, message):
    state = _filled(backend).state_dict()  # each buffer's own state, its masses replaced
    state["priorities"] = {"mass": masses, "max_priority": 1.0}
    target = _filled(backend)
    before = target.state_dict()["priorities"]["mass"].copy()
    with pytest.raises(replaybuf.CheckpointError, match=message):
        target.load_state_dict(state)
    np.testing.assert_array_equal(target.state_dict()["priorities"]["mass"], before)
    _closed(target)


def test_masses_beyond_float32_are_refused_by_the_jax_buffer_by_name():
    state = _filled("numpy").state_dict()
    state["priorities"] = {"mass": np.full(6, 1e200), "max_priority": 1.0}
    _filled("numpy").load_state_dict(state)  # a float64 tree holds it
    with pytest.raises(replaybuf.CheckpointError, match="expected masses a float32 tree can hold"):
        _filled("jax").load_state_dict(state)


EPISODE_READERS = {
    **{name: make for name, make in EPISODE_BACKENDS.items() if name != "jax-core"},
    **{f"{name}-prioritized": make for name, make in PRIORITIZED.items()},
}
READERS = dict(EPISODE_READERS)
try:
    import replaybuf.torch

    READERS["torch"] = lambda spec: replaybuf.torch.TorchUniformReplayBuffer(spec, batch_size=2, max_length=8)
except ImportError:  # the torch extra is not installed
    pass
SHORTER = "add more steps or ask for shorter windows"


@pytest.mark.parametrize("backend", sorted(READERS))
def test_a_refused_read_is_worded_alike(backend):
    buffer = READERS[backend](FLAT)
    with pytest.raises(replaybuf.EmptyBufferError) as empty:
        buffer.get_next(2)
    assert (
        str(empty.value) == f"The {type(buffer).__name__} is empty. Make sure to add items before sampling the buffer."
    )
    for t in range(2):
        buffer.add_batch({"obs": np.full((2, 2), t, np.float32), "reward": np.ones(2, np.float32)})
    with pytest.raises(replaybuf.EmptyBufferError) as too_long:
        buffer.get_next(2, num_steps=5)
    assert str(too_long.value) == f"num_steps=5: each stream holds only 2 steps (max_length=8); {SHORTER}"
    _closed(buffer)


@pytest.mark.parametrize("backend", sorted(EPISODE_READERS))
def test_no_window_inside_an_episode_is_worded_alike(backend):
    buffer = EPISODE_READERS[backend](NESTED, respect_episodes=True, episode_end_field="info/done")
    for t in range(4):  # episodes of one step each
        buffer.add_batch({"obs": np.full((2, 2), t, np.float32), "info": {"done": np.ones(2, bool)}})
    with pytest.raises(replaybuf.EmptyBufferError, match=r"^num_steps=3: no stored episode holds 3 steps"):
        buffer.get_next(2, num_steps=3)
    _closed(buffer)


SAMPLER_CHOOSERS = {"shared": _shared, "jax": _jax, "jax-core": _jax_core}


def _by_priority(buffer) -> bool:
    if isinstance(buffer, jax_buffers.Buffer):
        return buffer.priorities is not None
    buffer.add_batch({"obs": np.zeros((2, 2), np.float32), "reward": np.ones(2, np.float32)})
    _, info = buffer.get_next(2)
    _closed(buffer)
    return getattr(info, "weights", None) is not None


@pytest.mark.parametrize("backend", sorted(SAMPLER_CHOOSERS))
def test_the_sampler_is_chosen_by_one_keyword_and_checked_alike(backend):
    make = SAMPLER_CHOOSERS[backend]
    assert not _by_priority(make(FLAT, sampler="uniform"))
    assert _by_priority(make(FLAT, sampler="prioritized", alpha=0.5))
    for wrong in ("Prioritized", "per", None, True):
        with pytest.raises(replaybuf.ArgumentError, match=r"^sampler: expected 'uniform' or 'prioritized', got "):
            make(FLAT, sampler=wrong)


@pytest.mark.parametrize("backend", ["jax", "jax-core"])
def test_the_old_prioritized_flag_still_chooses_with_a_deprecation_warning(backend):
    with pytest.warns(DeprecationWarning, match="pass sampler='prioritized'"):
        buffer = SAMPLER_CHOOSERS[backend](FLAT, prioritized=True)
    assert _by_priority(buffer)
    with pytest.raises(replaybuf.ArgumentError, match="prioritized: expected True or False, got 1"):
        SAMPLER_CHOOSERS[backend](FLAT, prioritized=1)
