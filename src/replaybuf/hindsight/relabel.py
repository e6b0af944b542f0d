"""``HindsightRelabel``: what a user asks for, checked against the spec; ``relabel_part`` binds it to a buffer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError
from replaybuf.hindsight.records import WholeSample
from replaybuf.hindsight.relabeller import Relabeller
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeSampler
from replaybuf.samplers.hindsight import STRATEGIES

__all__ = ["HindsightRelabel", "relabel_part"]


class HindsightRelabel:
    """Relabel sampled goals with achieved ones (HER); pass it as ``her=`` to a NumPy buffer
    built with ``respect_episodes=True``.

    Args:
        goal_field: the path (``"observation/desired_goal"``) of the desired goal, or a tuple of
            paths that all receive the same new goal (e.g. the observation's and the next one's).
        achieved_field: the path of the goal achieved by the item's step (e.g.
            ``"next_observation/achieved_goal"``); goals are drawn from it, and it is what
            ``compute_reward`` compares with the new goal. Same shape as each goal field.
        compute_reward: ``fn(achieved_goal, desired_goal, info) -> rewards``, called once per
            sample with ``[n, *goal_shape]`` arrays and ``info=None`` (``GoalEnv.compute_reward``
            fits); it returns ``n`` rewards (each shaped like ``reward_field``).
        strategy: ``"future"`` (default), ``"final"`` or ``"episode"``.
        ratio: the probability that a sampled element (window) is relabelled, in [0, 1].
        reward_field: the path of the reward to recompute.
        compiled: None (default) draws the goals with a numba kernel when numba is installed
            (the ``fast`` extra), False with NumPy (the same draws), True insists on numba.

    Raises:
        ArgumentError: a strategy, ratio, compute_reward or compiled outside the above; a field that
            names no leaf of the buffer's data_spec, or a goal of another shape or dtype than
            the achieved goal (when the buffer is built).
    """

    def __init__(
        self,
        *,
        goal_field: str | Sequence[str],
        achieved_field: str,
        compute_reward: Callable[[np.ndarray, np.ndarray, Any], Any],
        strategy: str = "future",
        ratio: float = 0.8,
        reward_field: str = "reward",
        compiled: bool | None = None,
    ):
        if strategy not in STRATEGIES:
            raise ArgumentError(f"strategy: expected one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ArgumentError(f"ratio: expected a number in [0, 1], got {ratio!r}")
        if not callable(compute_reward):
            raise ArgumentError(f"compute_reward: expected a callable, got {compute_reward!r}")
        if compiled not in (None, True, False):
            raise ArgumentError(f"compiled: expected None, True or False, got {compiled!r}")
        goals = (goal_field,) if isinstance(goal_field, str) else tuple(goal_field)
        if not goals or not all(isinstance(g, str) for g in goals):
            raise ArgumentError(f"goal_field: expected a field path or a tuple of them, got {goal_field!r}")
        self.goal_fields = goals
        self.achieved_field = achieved_field
        self.compute_reward = compute_reward
        self.strategy = strategy
        self.ratio = float(ratio)
        self.reward_field = reward_field
        self.compiled = compiled

    def __repr__(self) -> str:
        return (
            f"HindsightRelabel(goal_field={self.goal_fields!r}, achieved_field={self.achieved_field!r}, "
            f"strategy={self.strategy!r}, ratio={self.ratio})"
        )

    def bind(self, flat: FlatSpec, ring: StreamRing, sampler: Any) -> Relabeller:
        """The relabelling of one buffer (its spec, ring and the sampler's episode index); a
        uniform episode sampler's gets the one-call sample (``hindsight.records``) too."""
        relabeller = Relabeller(self, flat, ring, sampler.episodes)
        if type(sampler) is EpisodeSampler:
            relabeller.whole = WholeSample(relabeller)
        return relabeller


def relabel_part(her: HindsightRelabel | None, respect_episodes: bool) -> Callable[..., Relabeller] | None:
    """The buffer's relabelling part (None without ``her``).

    Raises:
        ArgumentError: ``her`` is not a HindsightRelabel, or comes without ``respect_episodes``.
    """
    if her is None:
        return None
    if not isinstance(her, HindsightRelabel):
        raise ArgumentError(f"her: expected a replaybuf.HindsightRelabel or None, got {her!r}")
    if not respect_episodes:
        raise ArgumentError(
            "her: expected respect_episodes=True (goals are drawn from the sampled item's episode), "
            "got respect_episodes=False"
        )
    return her.bind
