"""Checked mode: a ``checked=True`` core's value faults raised as replaybuf's errors by
``replaybuf.jax.checked`` (under jit, in ``lax.scan`` and ``vmap``), with the step's
results on the error; valid calls return exactly what the unchecked core returns."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from conformance_data import SPEC, step_batch  # noqa: E402
from replaybuf import ArgumentError, ArraySpec, EmptyBufferError, PriorityError  # noqa: E402
from replaybuf.jax import checked, make_buffer  # noqa: E402

EPISODES = {"obs": ArraySpec((2,), np.float32), "done": ArraySpec((), np.bool_)}


def add_steps(buffer, state, steps):
    for t in range(steps):
        state = buffer.add(state, step_batch(t, buffer.batch_size))
    return state


def test_sample_with_nothing_stored_raises_empty_buffer_error_naming_num_steps():
    buffer = make_buffer(SPEC, 2, 4, checked=True)
    sample = checked(buffer.sample, static_argnums=(2, 3))
    with pytest.raises(EmptyBufferError, match=r"num_steps=1, got none \(0 steps added .* max_length=4") as caught:
        sample(buffer.init(), jax.random.key(0), 4, None)
    _, info = caught.value.outputs
    assert not np.asarray(info.valid).any()  # the core's defined result is what came back
    state = add_steps(buffer, buffer.init(), 2)
    with pytest.raises(EmptyBufferError, match=r"num_steps=3, got none \(2 steps added"):
        sample(state, jax.random.key(0), 4, 3)


def test_valid_calls_return_what_the_unchecked_core_returns():
    plain, strict = make_buffer(SPEC, 2, 4), make_buffer(SPEC, 2, 4, checked=True)
    state = add_steps(plain, plain.init(), 6)
    want_items, want_info = jax.jit(plain.sample, static_argnums=(2, 3))(state, jax.random.key(3), 8, 2)
    items, info = checked(strict.sample, static_argnums=(2, 3))(state, jax.random.key(3), 8, 2)
    got, want = jax.tree_util.tree_leaves((items, info)), jax.tree_util.tree_leaves((want_items, want_info))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_episode_buffer_with_no_window_inside_an_episode_raises():
    buffer = make_buffer(EPISODES, 1, 8, respect_episodes=True, episode_end_field="done", checked=True)
    state = buffer.init()
    for t in range(4):  # every episode is one step long: no window of 2 inside one
        state = buffer.add(state, {"obs": np.full((1, 2), t, np.float32), "done": np.ones(1, bool)})
    sample = checked(buffer.sample, static_argnums=(2, 3))
    with pytest.raises(EmptyBufferError, match="num_steps=2, inside one episode"):
        sample(state, jax.random.key(0), 3, 2)
    _, info = sample(state, jax.random.key(0), 3, 1)  # single steps: fine
    assert np.asarray(info.valid).all()


def test_bad_priorities_raise_priority_error_with_the_entries_dropped_and_counted():
    buffer = make_buffer(SPEC, 2, 4, sampler="prioritized", alpha=0.5, epsilon=0.25, checked=True)
    state = add_steps(buffer, buffer.init(), 3)  # ids 0..5 added
    update = checked(buffer.update_priorities, donate_argnums=0)
    before = np.asarray(state.priorities.trees.sums[-1]).copy()
    with pytest.raises(PriorityError, match=r"below 6\) .* got 1 bad of 2 \(the first: id 1, priority nan\)") as caught:
        update(state, jnp.array([0, 1]), jnp.array([5.0, np.nan]))
    new = caught.value.outputs  # the state passed in was donated: the result travels on the error
    assert int(new.priorities.dropped) == 1
    leaves = np.asarray(new.priorities.trees.sums[-1])
    # the good entry applied, as (5 + epsilon) ** alpha; the bad one dropped, the others untouched
    assert leaves[0] == pytest.approx((5.0 + 0.25) ** 0.5, rel=1e-6)
    np.testing.assert_array_equal(leaves[1:], before[1:])
    with pytest.raises(PriorityError, match=r"got 2 bad of 3 \(the first: id 9, priority 1.0\)"):
        update(new, jnp.array([9, 2, -1]), jnp.array([1.0, 2.0, 3.0]))


def test_checks_hold_inside_scan_and_vmap():
    buffer = make_buffer(SPEC, 2, 4, checked=True)

    def run(state, keys):
        def step(state, key):
            state, _, info = buffer.add_and_sample(state, step_batch(0, 2), key, 4, 3)
            return state, info.valid

        return jax.lax.scan(step, state, keys)

    scanned = checked(run)
    with pytest.raises(EmptyBufferError, match="num_steps=3"):  # the first two steps hold too few
        scanned(buffer.init(), jax.random.split(jax.random.key(0), 4))
    state = add_steps(buffer, buffer.init(), 2)
    _, valid = scanned(state, jax.random.split(jax.random.key(0), 4))
    assert np.asarray(valid).all()
    states = jax.vmap(lambda _: buffer.init())(jnp.arange(3))
    per_seed = checked(jax.vmap(lambda s, k: buffer.sample(s, k, 2)))
    with pytest.raises(EmptyBufferError):
        per_seed(states, jax.random.split(jax.random.key(1), 3))


def test_an_unchecked_core_emits_no_checks_and_a_users_own_check_keeps_checkifys_error():
    buffer = make_buffer(SPEC, 2, 4)
    _, info = checked(buffer.sample, static_argnums=(2, 3))(buffer.init(), jax.random.key(0), 4, None)
    assert not np.asarray(info.valid).any()

    def own(x):
        jax.experimental.checkify.check(x > 0, "mine: {x}", x=x)
        return x

    with pytest.raises(jax.experimental.checkify.JaxRuntimeError, match="mine: -1"):
        checked(own)(jnp.int32(-1))


def test_checked_must_be_a_bool():
    with pytest.raises(ArgumentError, match="checked: expected a bool, got 'yes'"):
        make_buffer(SPEC, 2, 4, checked="yes")


def test_a_checked_core_under_plain_jit_refuses_to_trace():
    buffer = make_buffer(SPEC, 2, 4, checked=True)
    with pytest.raises(ValueError, match="not functionalized"):
        jax.jit(buffer.sample, static_argnums=(2, 3))(buffer.init(), jax.random.key(0), 4, None)
