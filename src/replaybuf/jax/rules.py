"""Sample-count rules on ``JaxReplayBuffer``: ``RuledSampler`` on the host, the read on the device.

The class already keeps its ring's counters and the generator that keys every sample on the
host, so the rules (epochs, consumption, staleness: docs/sample_rules.md) run there as on the
NumPy buffers: ``RuledSampler`` picks the ids from the host generator (the same ids as a
``UniformReplayBuffer`` with the same rules, seed and adds) and one jitted gather reads them.
An add's version field is read from its host arrays (already validated there). The pure core
(``replaybuf.jax.core``) is untouched: a user's jitted loop over ``buffer.state`` samples
without the rules, which is why such a buffer refuses a state set from outside.

Refused with the rules: ``sampler="prioritized"`` (a consumed or stale item would have to
leave the device sum trees; the NumPy prioritized buffers decide the meaning first) and
``respect_episodes`` (the episode positions live in the device state, and the rules need
them on the host for each draw's fit: a gap, not built).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers import UniformSampler
from replaybuf.samplers.rules import RuledSampler, check_sample_rules

__all__ = ["StoredFields", "jax_rules"]


def jax_rules(
    flat: FlatSpec, ring: StreamRing, sampler: str, respect_episodes: bool, **rules: Any
) -> RuledSampler | None:
    """The host ``RuledSampler`` of a JAX buffer's rule keywords (None without rules);
    ``sampler`` is the checked core choice, ``"fifo"`` meaning uniform with oldest-first draws.

    Raises:
        ArgumentError: the rules' errors (``check_sample_rules``); a rule with
            ``sampler="prioritized"`` or ``respect_episodes`` (named, see the module).
    """
    checked = check_sample_rules(flat, sampler="fifo" if sampler == "fifo" else None, **rules)
    if not checked.active:
        return None
    defaults = {"replacement": True, "max_times_sampled": None, "max_staleness": None}
    name = next((key for key, default in defaults.items() if rules[key] != default), "sampler")
    expected, got = ("'uniform'", "'fifo'") if name == "sampler" else (defaults[name], repr(rules[name]))
    if sampler == "prioritized":
        raise ArgumentError(
            f"{name}: expected {expected} with sampler='prioritized' on JaxReplayBuffer (a consumed or "
            f"stale item would have to leave the device sum trees; docs/sample_rules.md), got {got}"
        )
    if respect_episodes:
        raise ArgumentError(
            f"{name}: expected {expected} with respect_episodes=True on JaxReplayBuffer (the episode "
            f"positions live in the device state; docs/sample_rules.md), got {got}"
        )
    return RuledSampler(UniformSampler(), checked, ring)


class StoredFields(Sequence):
    """Every slot's value of each leaf as host arrays ``[capacity, *shape]`` (slot-indexed, as
    a NumPy storage's ``fields``), read from ``stored`` (the core's ``[max_length,
    batch_size, *shape]`` leaves) when asked: one device sync per leaf read."""

    def __init__(self, stored: Sequence[Any], capacity: int):
        self._stored, self._capacity = stored, capacity

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        leaf = np.asarray(self._stored[index])
        return leaf.reshape(self._capacity, *leaf.shape[2:])

    def __len__(self) -> int:
        return len(self._stored)
