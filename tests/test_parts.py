"""Every storage and sampler a buffer is built from satisfies its protocol, and a sampler's
``mass`` is what its draws normalise by (the Ray shards split batches by it)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import replaybuf
from replaybuf.samplers import PrioritySampler, Sampler
from replaybuf.storages import Storage

SPEC = {"observation": replaybuf.ArraySpec((4,), np.uint8), "done": replaybuf.ArraySpec((), bool)}
BATCH, LENGTH = 2, 12


def _buffers(tmp_path):
    common = {"batch_size": BATCH, "max_length": LENGTH, "seed": 1}
    episodes = {"respect_episodes": True, "episode_end_field": "done"}
    return {
        "uniform": replaybuf.UniformReplayBuffer(SPEC, **common),
        "columns": replaybuf.UniformReplayBuffer(SPEC, storage="columns", **common),
        "memmap": replaybuf.UniformReplayBuffer(SPEC, storage="memmap", path=tmp_path / "m", **common),
        "episodes": replaybuf.UniformReplayBuffer(SPEC, **episodes, **common),
        "episodes-padded": replaybuf.UniformReplayBuffer(SPEC, pad_episode_ends=True, **episodes, **common),
        "prioritized": replaybuf.PrioritizedReplayBuffer(SPEC, **common),
        "prioritized-episodes": replaybuf.PrioritizedReplayBuffer(SPEC, **episodes, **common),
        "frames": replaybuf.FrameStackReplayBuffer(SPEC, stacked_fields=["observation"], **common),
        "frames-lz4": replaybuf.FrameStackReplayBuffer(
            SPEC, stacked_fields=["observation"], compression="lz4", **common
        ),
        "prioritized-frames": replaybuf.PrioritizedFrameStackReplayBuffer(
            SPEC, stacked_fields=["observation"], **common
        ),
        "ruled": replaybuf.UniformReplayBuffer(SPEC, replacement=False, **common),
        "prioritized-ruled": replaybuf.PrioritizedReplayBuffer(SPEC, max_times_sampled=2, **episodes, **common),
    }


def _protocol_methods(protocol) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if callable(member) and not name.startswith("_")
    }


def _shape(signature: inspect.Signature) -> list[tuple[bool, object]]:
    """Per parameter (self left out): whether it has a default, and the default; names may differ."""
    return [(p.default is not p.empty, p.default) for name, p in signature.parameters.items() if name != "self"]


def _assert_satisfies(part, protocol) -> None:
    assert isinstance(part, protocol), f"{type(part).__name__} lacks a member of {protocol.__name__}"
    for name, signature in _protocol_methods(protocol).items():
        own = _shape(inspect.signature(getattr(part, name)))
        assert own == _shape(signature), f"{type(part).__name__}.{name}: {own} differs from the protocol's"


@pytest.mark.parametrize(
    "kind",
    [
        "uniform",
        "columns",
        "memmap",
        "episodes",
        "episodes-padded",
        "prioritized",
        "prioritized-episodes",
        "frames",
        "frames-lz4",
        "prioritized-frames",
        "ruled",
        "prioritized-ruled",
    ],
)
def test_every_part_satisfies_its_protocol(kind, tmp_path):
    buffer = _buffers(tmp_path)[kind]
    _assert_satisfies(buffer._storage, Storage)
    _assert_satisfies(buffer._sampler, Sampler)
    if kind.startswith("prioritized"):
        _assert_satisfies(buffer._sampler, PrioritySampler)
    else:
        assert not isinstance(buffer._sampler, PrioritySampler)


def test_an_object_missing_a_member_is_not_a_part():
    class NoMass:
        def draw(self, rng, ring, sample_batch_size, num_steps): ...

    assert not isinstance(NoMass(), Sampler)
    assert not isinstance(object(), Storage)


def _fill(buffer, steps: int, rng: np.random.Generator) -> None:
    for t in range(steps):
        buffer.add_batch({"observation": np.full((BATCH, 4), t, np.uint8), "done": rng.random(BATCH) < 0.25})


@pytest.mark.parametrize("kind", ["uniform", "episodes", "episodes-padded", "prioritized", "prioritized-episodes"])
@pytest.mark.parametrize("steps_added", [3, 20])  # before and after the ring wraps
@pytest.mark.parametrize("num_steps", [None, 1, 3])
def test_mass_is_what_the_draws_normalise_by(kind, steps_added, num_steps, tmp_path):
    buffer = _buffers(tmp_path)[kind]
    rng = np.random.default_rng(7)
    _fill(buffer, steps_added, rng)
    prioritized = kind.startswith("prioritized")
    if prioritized:  # distinct masses, so a wrong normaliser shows
        ids = np.arange(max(0, steps_added - LENGTH) * BATCH, steps_added * BATCH)  # the stored ones
        priorities = rng.uniform(0.5, 3.0, ids.shape)  # every item was added at the max so far, 1.0
        buffer.update_priorities(ids, priorities)
        masses = dict(zip(ids.tolist(), (priorities + 1e-6) ** 0.6, strict=True))  # the default epsilon, alpha
    mass, smallest = buffer.mass(num_steps)
    _, info = buffer.get_next(sample_batch_size=64, num_steps=num_steps)
    first = info.ids if num_steps is None else info.ids[:, 0]
    if prioritized:
        element = np.array([masses[i] for i in first.tolist()])
        assert smallest == pytest.approx(min(masses.values()))
    else:
        element = np.ones(first.shape)
        assert smallest == 1.0
    np.testing.assert_allclose(info.probabilities * mass, element, rtol=1e-5)


@pytest.mark.parametrize("kind", ["uniform", "episodes", "prioritized", "prioritized-episodes"])
def test_mass_is_zero_when_no_window_fits(kind, tmp_path):
    buffer = _buffers(tmp_path)[kind]
    assert buffer.mass(None) == (0.0, 1.0)
    _fill(buffer, 2, np.random.default_rng(0))
    assert buffer.mass(3) == (0.0, 1.0)
    assert buffer.mass(2)[0] > 0 or kind.endswith("episodes")
