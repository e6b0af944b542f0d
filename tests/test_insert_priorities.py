"""``add_batch(items, priorities=...)`` (issue 51): the new items' priorities given at insert,
on every prioritized buffer; refused by name, with nothing written, everywhere else."""

from __future__ import annotations

import numpy as np
import pytest

import replaybuf
from replaybuf.errors import ArgumentError, PriorityError

SPEC = {"x": replaybuf.ArraySpec((2,), np.float32), "id": replaybuf.ArraySpec((), np.int32)}
ALPHA, EPSILON = 0.5, 1e-6


def step(t, streams=2):
    ids = (t * streams + np.arange(streams)).astype(np.int32)
    return {"x": np.stack([ids, -ids], -1).astype(np.float32), "id": ids}


def _torch(prioritized):
    pytest.importorskip("torch")
    from replaybuf.torch import TorchPrioritizedReplayBuffer, TorchUniformReplayBuffer

    return TorchPrioritizedReplayBuffer if prioritized else TorchUniformReplayBuffer


def _jax(**options):
    pytest.importorskip("jax")
    from replaybuf.jax import JaxReplayBuffer

    return lambda *args, **kw: JaxReplayBuffer(*args, **options, **kw)


PRIORITIZED = {
    "numpy": lambda: replaybuf.PrioritizedReplayBuffer,
    "frames": lambda: lambda *a, **kw: replaybuf.PrioritizedFrameStackReplayBuffer(*a, stacked_fields=["x"], **kw),
    "torch": lambda: _torch(True),
    "jax": lambda: _jax(sampler="prioritized"),
    "shared": lambda: (
        lambda spec, b, length, **kw: replaybuf.SharedReplayBuffer(spec, 1, b, length, sampler="prioritized", **kw)
    ),
}
UNIFORM = {
    "numpy": lambda: replaybuf.UniformReplayBuffer,
    "frames": lambda: lambda *a, **kw: replaybuf.FrameStackReplayBuffer(*a, stacked_fields=["x"], **kw),
    "torch": lambda: _torch(False),
    "jax": lambda: _jax(),
    "shared": lambda: lambda spec, b, length, **kw: replaybuf.SharedReplayBuffer(spec, 1, b, length, **kw),
}


def masses(rb):
    mass = rb.state_dict()["priorities"]["mass"]
    return np.asarray(mass.cpu() if hasattr(mass, "cpu") else mass, np.float64)


def expected(priorities):
    return (np.asarray(priorities, np.float64) + EPSILON) ** ALPHA


@pytest.mark.parametrize("name", PRIORITIZED)
def test_given_priorities_set_the_new_items_and_raise_the_running_max(name):
    rb = PRIORITIZED[name]()(SPEC, 2, 4, alpha=ALPHA, epsilon=EPSILON, seed=0)
    # (a snapshot after each add: a shared buffer's learner takes steps in at its next read)
    rb.add_batch(step(0))  # the running max: 1.0
    masses(rb)
    rb.add_batch(step(1), priorities=np.array([0.5, 4.0]))
    masses(rb)
    rb.add_batch(step(2))  # the new running max: 4.0
    masses(rb)
    rb.add_batch(step(3), priorities=[2.0, 0.25])
    np.testing.assert_allclose(masses(rb), expected([1, 1, 0.5, 4, 4, 4, 2, 0.25]), rtol=1e-6)
    assert rb.state_dict()["priorities"]["max_priority"] == 4.0


@pytest.mark.parametrize("name", PRIORITIZED)
@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ([1.0], ArgumentError, r"priorities: expected shape \(2,\) \(one per item added\), got \(1,\)"),
        ([[1.0, 2.0]], ArgumentError, r"priorities: expected shape \(2,\)"),
        (["a", "b"], ArgumentError, "priorities: expected 2 numbers"),
        ([1.0, -1.0], PriorityError, r"priorities: expected finite values > 0, got \[-1.0\] at positions \[1\]"),
        ([np.nan, 1.0], PriorityError, "priorities: expected finite values > 0, got \\[nan\\]"),
        ([1.0, np.inf], PriorityError, "priorities: expected finite values > 0, got \\[inf\\]"),
        ([0.0, 1.0], PriorityError, "priorities: expected finite values > 0"),
    ],
)
def test_bad_priorities_are_refused_by_name_and_nothing_is_written(name, bad, error, message):
    rb = PRIORITIZED[name]()(SPEC, 2, 4, alpha=ALPHA, epsilon=EPSILON, seed=0)
    rb.add_batch(step(0), priorities=[3.0, 2.0])
    with pytest.raises(error, match=message):
        rb.add_batch(step(1), priorities=bad)
    assert rb.num_frames() == 2
    np.testing.assert_allclose(masses(rb), expected([3, 2]), rtol=1e-6)
    assert rb.state_dict()["priorities"]["max_priority"] == 3.0


@pytest.mark.parametrize("name", UNIFORM)
def test_a_buffer_without_priorities_refuses_them_by_name(name):
    rb = UNIFORM[name]()(SPEC, 2, 4, seed=0)
    with pytest.raises(ArgumentError, match="priorities: expected None, .*prioritized"):
        rb.add_batch(step(0), priorities=[1.0, 1.0])
    assert rb.num_frames() == 0


def test_a_single_stream_buffer_refuses_priorities():
    rb = replaybuf.PyUniformReplayBuffer(SPEC, 4)
    with pytest.raises(ArgumentError, match="priorities: expected None, PyUniformReplayBuffer keeps no priorities"):
        rb.add_batch(step(0), priorities=[1.0, 1.0])
    assert rb.num_frames() == 0


def test_the_jax_core_inside_jit_replaces_and_counts_bad_priorities_and_checked_mode_raises():
    pytest.importorskip("jax")
    import jax

    from replaybuf.jax import checked, make_buffer

    core = make_buffer(SPEC, 2, 4, sampler="prioritized", alpha=ALPHA, epsilon=EPSILON)
    add = jax.jit(core.add)
    state = add(core.init(), step(0), np.array([2.0, 5.0], np.float32))
    state = add(state, step(1), np.array([np.nan, 0.5], np.float32))
    assert int(state.priorities.dropped) == 1 and float(state.priorities.max_priority) == 5.0
    leaves = np.asarray(state.priorities.trees.sums[-1][:4])
    np.testing.assert_allclose(leaves, expected([2, 5, 5, 0.5]), rtol=1e-5)
    strict = make_buffer(SPEC, 2, 4, sampler="prioritized", checked=True)
    with pytest.raises(PriorityError, match="priorities: expected finite values > 0, got nan at position 0") as info:
        checked(strict.add)(strict.init(), step(0), np.array([np.nan, 1.0], np.float32))
    assert int(info.value.outputs.priorities.dropped) == 1
    with pytest.raises(ArgumentError, match=r"priorities: expected shape \(2,\)"):
        core.add(core.init(), step(0), np.ones(3, np.float32))
