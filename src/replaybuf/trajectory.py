"""``Trajectory``: one time step of collected experience, as TF-Agents stores it.

A trajectory item at time ``t`` holds what the agent saw and did at ``t`` (``step_type``,
``observation``, ``action``, ``policy_info``) and what came back from the environment
(``next_step_type``, ``reward``, ``discount``). Episodes are stored back to back in a
stream; the item whose ``step_type`` is LAST is the *boundary* from one episode to the
next (its observation is the final one, its action was never applied and its
next_step_type is FIRST). A 2-step window ``(t, t + 1)`` is a transition
``(o_t, a_t, r, discount, o_{t+1})`` unless item ``t`` is a boundary.

``discount`` is 0 when the episode terminated (no value after it) and 1 otherwise, also
when it was truncated by a time limit: that keeps truncation from looking like a terminal
state to a learner.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import numpy as np

from replaybuf.specs import ArraySpec, as_data_spec

__all__ = ["StepType", "Trajectory", "collect_data_spec"]


class StepType(enum.IntEnum):
    """Where a time step lies in its episode."""

    FIRST = 0
    MID = 1
    LAST = 2


class Trajectory(NamedTuple):
    """One time step of experience (or a batch / window of them: every field shares the
    leading dimensions)."""

    step_type: Any
    observation: Any
    action: Any
    policy_info: Any
    next_step_type: Any
    reward: Any
    discount: Any

    def is_first(self) -> Any:
        """True where this step starts an episode."""
        return np.equal(self.step_type, StepType.FIRST)

    def is_last(self) -> Any:
        """True where the step after this one ends the episode."""
        return np.equal(self.next_step_type, StepType.LAST)

    def is_boundary(self) -> Any:
        """True where this step is the episode's final observation (LAST -> FIRST): a
        learner must not use it as the start of a transition."""
        return np.equal(self.step_type, StepType.LAST)

    def is_mid(self) -> Any:
        """True where this step and the next are both inside one episode."""
        return np.logical_and(np.equal(self.step_type, StepType.MID), np.equal(self.next_step_type, StepType.MID))


def collect_data_spec(env: Any, policy_info_spec: Any = ()) -> Trajectory:
    """The Trajectory spec of one item collected from a Gymnasium env.

    A ``gymnasium.vector`` env contributes the spaces of one sub-env
    (``single_observation_space``, ``single_action_space``): the buffer's batch_size
    holds the number of sub-envs. Step types are int32, reward and discount float32.

    Raises:
        SpecError: a space has no fixed-shape array spec (Text, Graph, Sequence, ...), or
            policy_info_spec is not a valid spec nest.
    """
    vector = hasattr(env, "single_observation_space")  # a gymnasium.vector env
    observation_space = env.single_observation_space if vector else env.observation_space
    action_space = env.single_action_space if vector else env.action_space
    step_type = ArraySpec((), np.int32, "step_type")
    return Trajectory(
        step_type=step_type,
        observation=as_data_spec(observation_space, "observation"),
        action=as_data_spec(action_space, "action"),
        policy_info=as_data_spec(policy_info_spec, "policy_info"),
        next_step_type=ArraySpec((), np.int32, "next_step_type"),
        reward=ArraySpec((), np.float32, "reward"),
        discount=ArraySpec((), np.float32, "discount"),
    )
