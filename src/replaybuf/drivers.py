"""Drivers: step a Gymnasium env with a policy and hand each batched Trajectory to observers.

``StepDriver(env, policy, observers, num_steps).run()`` and
``EpisodeDriver(env, policy, observers, num_episodes).run()`` work on a single Gymnasium
env (given a batch dimension of 1) or a ``gymnasium.vector`` env (one stream per sub-env).
Every step calls each observer, in list order, with a Trajectory whose leaves are shaped
``[num_envs, ...]``, so ``observers=[buffer.add_batch]`` (buffer batch_size = num_envs)
is all the wiring a replay buffer needs.

Episodes follow TF-Agents: when an episode ends, the next step of that stream is a
*boundary* item (step_type LAST, the final observation, next_step_type FIRST, reward 0,
discount 1) while the env resets; it is stored, and learners mask it. This is exactly what
a Gymnasium 1.x vector env does in its default next-step autoreset mode, and what the
driver does itself for a single env. Termination gives discount 0, truncation (a time
limit) discount 1, so bootstrapping stays right at time limits.

A policy is a callable from a batch of observations to a batch of actions, or to a
``PolicyStep(action, info)`` when it also records policy_info. Drivers keep the env's
current step between ``run()`` calls, as TF-Agents drivers do. Gymnasium is never
imported here: envs are recognised by their attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import optree

from replaybuf.buffer import check_positive
from replaybuf.errors import ArgumentError
from replaybuf.nest import to_numpy
from replaybuf.trajectory import StepType, Trajectory

__all__ = ["EpisodeDriver", "EpisodeReturns", "PolicyStep", "StepDriver"]


class PolicyStep(NamedTuple):
    """What a policy may return: a batch of actions and its policy_info nest."""

    action: Any
    info: Any = ()


def _is_vector_env(env: Any) -> bool:
    return hasattr(env, "num_envs") and hasattr(env, "single_action_space")


class _BatchedEnv:
    """A single or vector Gymnasium env seen as a batch with next-step autoreset."""

    def __init__(self, env: Any):
        self.env = env
        self.vector = _is_vector_env(env)
        if self.vector:
            mode = env.metadata.get("autoreset_mode")
            if mode is not None and getattr(mode, "value", mode) != "NextStep":
                raise ArgumentError(
                    f"env: expected a vector env with autoreset_mode NEXT_STEP (Gymnasium's "
                    f"default), got {mode}; the driver stores the LAST -> FIRST boundary step, "
                    "which only next-step autoreset provides"
                )
            self.batch_size = int(env.num_envs)
        else:
            self.batch_size = 1
        self._needs_reset = False

    def reset(self, seed: int | None) -> Any:
        observation, _ = self.env.reset(seed=seed)
        return observation if self.vector else _add_batch_dim(observation)

    def step(self, action: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        if self.vector:
            observation, reward, terminated, truncated, _ = self.env.step(action)
            return observation, np.asarray(reward), np.asarray(terminated), np.asarray(truncated)
        if self._needs_reset:  # the boundary step: reset instead of acting
            self._needs_reset = False
            observation, _ = self.env.reset()
            reward, terminated, truncated = 0.0, False, False
        else:
            single = optree.tree_map(lambda a: a[0], action)
            observation, reward, terminated, truncated, _ = self.env.step(single)
            self._needs_reset = bool(terminated or truncated)
        return (
            _add_batch_dim(observation),
            np.array([reward]),
            np.array([terminated]),
            np.array([truncated]),
        )


def _add_batch_dim(nest: Any) -> Any:
    return optree.tree_map(lambda x: np.asarray(x)[None], nest)


class _Driver:
    """The stepping loop shared by StepDriver and EpisodeDriver."""

    def __init__(
        self,
        env: Any,
        policy: Callable[[Any], Any],
        observers: Sequence[Callable],
        seed: int | None,
    ):
        if not callable(policy):
            raise ArgumentError(f"policy: expected a callable from observations to actions, got {policy!r}")
        observers = list(observers or ())
        for index, observer in enumerate(observers):
            if not callable(observer):
                raise ArgumentError(f"observers/{index}: expected a callable, got {observer!r}")
        self._env = _BatchedEnv(env)
        self._policy = policy
        self._observers = observers
        self._seed = seed
        self._observation: Any = None
        self._step_type: np.ndarray | None = None

    @property
    def batch_size(self) -> int:
        """The number of parallel streams (sub-envs)."""
        return self._env.batch_size

    def run(self) -> int:
        """Step until the driver's target (steps or episodes) is reached; returns the count."""
        done = 0
        while done < self._target():
            done += self._progress(self._step())
        return done

    def _progress(self, trajectory: Trajectory) -> int:
        """What one step adds towards the target."""
        raise NotImplementedError

    def _target(self) -> int:
        raise NotImplementedError

    def _step(self) -> Trajectory:
        """Act once in every stream, call the observers, and return the Trajectory."""
        if self._observation is None:
            self._observation = self._env.reset(self._seed)
            self._step_type = np.full(self.batch_size, StepType.FIRST, np.int32)
        action, info = self._act(self._observation)
        observation, reward, terminated, truncated = self._env.step(action)
        boundary = self._step_type == StepType.LAST
        next_step_type = np.where(
            boundary, StepType.FIRST, np.where(terminated | truncated, StepType.LAST, StepType.MID)
        ).astype(np.int32)
        trajectory = Trajectory(
            step_type=self._step_type,
            observation=self._observation,
            action=action,
            policy_info=info,
            next_step_type=next_step_type,
            reward=np.where(boundary, 0.0, reward).astype(np.float32),
            discount=np.where(terminated & ~boundary, 0.0, 1.0).astype(np.float32),
        )
        for observer in self._observers:
            observer(trajectory)
        self._observation, self._step_type = observation, next_step_type
        return trajectory

    def _act(self, observation: Any) -> tuple[Any, Any]:
        out = self._policy(observation)
        action, info = (out.action, out.info) if isinstance(out, PolicyStep) else (out, ())
        action = optree.tree_map(lambda a: np.asarray(to_numpy(a)), action)
        for leaf in optree.tree_leaves(action):
            if leaf.ndim == 0 or leaf.shape[0] != self.batch_size:
                raise ArgumentError(
                    f"policy: expected actions with a leading batch dimension of {self.batch_size} "
                    f"(one per sub-env), got shape {leaf.shape}"
                )
        return action, optree.tree_map(lambda a: np.asarray(to_numpy(a)), info)


class StepDriver(_Driver):
    """Runs ``num_steps`` environment steps per ``run()`` (summed over streams).

    Boundary steps (an env resetting) do not count, as in TF-Agents' DynamicStepDriver;
    a vector env steps every sub-env together, so a run may overshoot to the next
    multiple of num_envs. ``run()`` returns how many steps were taken.

    Raises:
        ArgumentError: num_steps is not a positive int, policy or an observer is not
            callable, or a vector env does not use next-step autoreset.
    """

    def __init__(
        self,
        env: Any,
        policy: Callable[[Any], Any],
        observers: Sequence[Callable] = (),
        num_steps: int = 1,
        *,
        seed: int | None = None,
    ):
        check_positive("num_steps", num_steps, allow_none=False)
        super().__init__(env, policy, observers, seed)
        self.num_steps = int(num_steps)

    def _progress(self, trajectory: Trajectory) -> int:
        return int(np.count_nonzero(~trajectory.is_boundary()))

    def _target(self) -> int:
        return self.num_steps


class EpisodeDriver(_Driver):
    """Runs until ``num_episodes`` episodes end per ``run()`` (summed over streams).

    ``run()`` returns how many episodes ended.

    Raises:
        ArgumentError: num_episodes is not a positive int, policy or an observer is not
            callable, or a vector env does not use next-step autoreset.
    """

    def __init__(
        self,
        env: Any,
        policy: Callable[[Any], Any],
        observers: Sequence[Callable] = (),
        num_episodes: int = 1,
        *,
        seed: int | None = None,
    ):
        check_positive("num_episodes", num_episodes, allow_none=False)
        super().__init__(env, policy, observers, seed)
        self.num_episodes = int(num_episodes)

    def _progress(self, trajectory: Trajectory) -> int:
        return int(np.count_nonzero(trajectory.is_last()))

    def _target(self) -> int:
        return self.num_episodes


class EpisodeReturns:
    """An observer that records the return and length of every finished episode.

    ``returns`` and ``lengths`` list finished episodes in the order they ended (streams
    in index order within one step).
    """

    def __init__(self) -> None:
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self._running: np.ndarray | None = None
        self._steps: np.ndarray | None = None

    def __call__(self, trajectory: Trajectory) -> None:
        reward = np.asarray(trajectory.reward, np.float64)
        if self._running is None:
            self._running = np.zeros_like(reward)
            self._steps = np.zeros(reward.shape, np.int64)
        self._running += reward
        self._steps += ~trajectory.is_boundary()
        for stream in np.flatnonzero(trajectory.is_last()):
            self.returns.append(float(self._running[stream]))
            self.lengths.append(int(self._steps[stream]))
            self._running[stream] = 0.0
            self._steps[stream] = 0
