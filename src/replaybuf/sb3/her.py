"""SB3's ``HerReplayBuffer`` on replaybuf's episode bookkeeping and hindsight relabelling.

The transitions live in a ``replaybuf.UniformReplayBuffer`` with ``respect_episodes`` (an
episode ends at a stored ``done``) and ``her=replaybuf.HindsightRelabel``, whose episode ends
pick every new goal: no per-sample scan of the buffer (SB3 looks for the finished episodes
among all ``buffer_size x n_envs`` entries on every sample) and no episode arrays rewritten
on overwrite. The behaviour is SB3's: only transitions of finished episodes are sampled;
``int(her_ratio * batch_size)`` of them, the batch's last, get a goal drawn by
``goal_selection_strategy`` from ``next_observations["achieved_goal"]`` of the same episode
(``future`` includes the transition itself) and the reward ``env.compute_reward(next
achieved goal, new goal, infos)`` through ``env.env_method`` (so a ``SubprocVecEnv`` works).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.her.goal_selection_strategy import KEY_TO_GOAL_STRATEGY, GoalSelectionStrategy
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as _SB3HerReplayBuffer

from replaybuf.buffer import check_positive
from replaybuf.buffers import UniformReplayBuffer
from replaybuf.errors import ArgumentError
from replaybuf.hindsight import HindsightRelabel
from replaybuf.nest import FlatSpec
from replaybuf.sb3.buffers import DictReplayBuffer

__all__ = ["HerReplayBuffer"]

_ACHIEVED = "next_observation/achieved_goal"
_STRATEGY_NAMES = {
    GoalSelectionStrategy.FUTURE: "future",
    GoalSelectionStrategy.FINAL: "final",
    GoalSelectionStrategy.EPISODE: "episode",
}


def _strategy(value: Any) -> GoalSelectionStrategy:
    """SB3's strategy from its name (any case) or the enum; ArgumentError otherwise."""
    if isinstance(value, GoalSelectionStrategy):
        return value
    if isinstance(value, str) and value.lower() in KEY_TO_GOAL_STRATEGY:
        return KEY_TO_GOAL_STRATEGY[value.lower()]
    raise ArgumentError(
        f"goal_selection_strategy: expected one of {sorted(KEY_TO_GOAL_STRATEGY)} or a GoalSelectionStrategy, "
        f"got {value!r}"
    )


class HerReplayBuffer(DictReplayBuffer, _SB3HerReplayBuffer):
    """SB3's ``HerReplayBuffer`` (same constructor, attributes and behaviour); see the module.

    A subclass of SB3's, so SB3's off-policy algorithms hand it their env
    (``replay_buffer_class=replaybuf.sb3.HerReplayBuffer``) and ``load_replay_buffer`` calls
    ``set_env`` and ``truncate_last_trajectory`` on it. ``ep_start``, ``ep_length`` and
    ``_current_ep_start`` are derived from the episode index when read. Observations (images
    too) are stored as plain records.

    Raises:
        ArgumentError: ``n_sampled_goal`` not an int >= 0, an unknown ``goal_selection_strategy``,
            an observation space without ``achieved_goal`` and ``desired_goal`` keys of one shape;
            DictReplayBuffer's argument errors.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: Any,
        action_space: Any,
        env: Any,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        n_sampled_goal: int = 4,
        goal_selection_strategy: GoalSelectionStrategy | str = "future",
        copy_info_dict: bool = False,
    ):
        if isinstance(n_sampled_goal, bool) or not isinstance(n_sampled_goal, (int, np.integer)) or n_sampled_goal < 0:
            raise ArgumentError(f"n_sampled_goal: expected an int >= 0, got {n_sampled_goal!r}")
        self.goal_selection_strategy = _strategy(goal_selection_strategy)
        keys = set(getattr(observation_space, "spaces", {}))
        if not {"achieved_goal", "desired_goal"} <= keys:
            raise ArgumentError(
                "observation_space: expected a Dict space with 'achieved_goal' and 'desired_goal' keys, "
                f"got {observation_space}"
            )
        self.n_sampled_goal = int(n_sampled_goal)
        self.her_ratio = 1 - (1.0 / (self.n_sampled_goal + 1))
        self.env = env
        self.copy_info_dict = copy_info_dict
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device=device,
            n_envs=n_envs,
            optimize_memory_usage=optimize_memory_usage,
            handle_timeout_termination=handle_timeout_termination,
            frames=False,
        )
        self.infos = (
            np.array([[{} for _ in range(self.n_envs)] for _ in range(self.buffer_size)]) if copy_info_dict else None
        )

    # -- storage -------------------------------------------------------------------------------
    def _open(self) -> None:
        """The native buffer: episodes end at ``done``; relabelling draws from the next achieved goal."""
        her = HindsightRelabel(
            goal_field=("observation/desired_goal", "next_observation/desired_goal"),
            achieved_field=_ACHIEVED,
            compute_reward=self._compute_reward,
            strategy=_STRATEGY_NAMES[self.goal_selection_strategy],
            ratio=self.her_ratio,
        )
        self._native = UniformReplayBuffer(
            self._spec,
            self.n_envs,
            self.buffer_size,
            respect_episodes=True,
            episode_end_field="done",
            her=her,
        )
        flat = FlatSpec(self._spec)
        self._achieved = flat.paths.index(_ACHIEVED)
        self._valid, self._valid_version = np.zeros(0, np.int64), -1
        views = [
            field.reshape(self.buffer_size, self.n_envs, *leaf.shape)
            for field, leaf in zip(self._native.storage.fields, flat.leaves, strict=True)
        ]
        fields = flat.unflatten(views)
        self.observations, self.next_observations = fields["observation"], fields["next_observation"]
        self.actions, self.rewards = fields["action"], fields["reward"]
        self.dones, self.timeouts = fields["done"], fields["timeout"]

    def __getstate__(self) -> dict:
        """As DictReplayBuffer's, without ``env`` (an env may not pickle; SB3's ``set_env`` restores it)."""
        state = super().__getstate__()
        for key in ("env", "_valid", "_valid_version"):  # the env; a cache rebuilt on load
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.env = None

    # -- SB3's API ---------------------------------------------------------------------------
    def add(
        self,
        obs: dict[str, np.ndarray],
        next_obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """DictReplayBuffer's add; with ``copy_info_dict`` the infos are kept for ``compute_reward``."""
        position = self.pos
        super().add(obs, next_obs, action, reward, done, infos)
        if self.infos is not None:
            self.infos[position] = infos

    def sample(self, batch_size: int, env: Any = None) -> Any:
        """``batch_size`` transitions of finished episodes (uniformly), the last
        ``int(her_ratio * batch_size)`` relabelled: SB3's rules and SB3's draws from NumPy's
        global generator (same calls in the same order), so a seeded run trains as with SB3's.

        Raises:
            ArgumentError: ``batch_size`` is not a positive int; no ``env`` to compute rewards
                with (a buffer unpickled without ``set_env``).
            RuntimeError: no episode has ended yet (SB3's error and message).
        """
        check_positive("batch_size", batch_size, allow_none=False)
        valid = self._finished_slots()
        if not valid.size:
            raise RuntimeError(
                "Unable to sample before the end of the first episode. We recommend choosing a value "
                "for learning_starts that is greater than the maximum number of timesteps in the environment."
            )
        virtual = int(self.her_ratio * batch_size)
        if virtual and self.env is None:
            raise ArgumentError(
                "env: expected a VecEnv to compute the relabelled rewards with; call set_env(env) "
                "after unpickling the buffer, got None"
            )
        sampled = np.random.choice(valid, size=batch_size, replace=True)
        slots = np.concatenate([sampled[virtual:], sampled[:virtual]])  # real first, as SB3's
        items, _ = self._native.read_ids(slots)
        obs, next_obs, rewards = items["observation"], items["next_observation"], items["reward"]
        if virtual:
            goals = self._goals(sampled[:virtual])
            obs["desired_goal"][batch_size - virtual :] = goals
            next_obs["desired_goal"][batch_size - virtual :] = goals
            rewards[batch_size - virtual :] = self._env_rewards(
                next_obs["achieved_goal"][batch_size - virtual :], goals, sampled[:virtual]
            )
        return self._samples(
            obs,
            items["action"],
            next_obs,
            (items["done"] * (1 - items["timeout"])).reshape(-1, 1),
            self._normalize_reward(rewards.reshape(-1, 1), env),
            env,
        )

    def truncate_last_trajectory(self) -> None:
        """End every unfinished episode at the newest step (``done``, and ``timeout`` with
        ``handle_timeout_termination`` so it bootstraps), as SB3's, with SB3's warning."""
        open_envs = np.flatnonzero(self._current_ep_start != self.pos)
        if not open_envs.size:
            return
        warnings.warn(
            "The last trajectory in the replay buffer will be truncated.\n"
            "If you are in the same episode as when the replay buffer was saved,\n"
            "you should use `truncate_last_trajectory=False` to avoid that issue.",
            stacklevel=2,
        )
        self.dones[self.pos - 1, open_envs] = True
        if self.handle_timeout_termination:
            self.timeouts[self.pos - 1, open_envs] = True  # not an actual timeout, but it allows bootstrapping
        self._native.reindex()

    # -- SB3's episode arrays, derived -------------------------------------------------------------
    @property
    def _current_ep_start(self) -> np.ndarray:
        """Where each env's current episode started (``pos`` when its last one ended)."""
        index = self._native.relabel.ends.index
        ring = self._native.ring
        if ring.steps == 0:
            return np.zeros(self.n_envs, np.int64)
        newest = index.position[ring.slot(ring.steps - 1) : ring.slot(ring.steps - 1) + self.n_envs]
        length = np.where(index.ended, 0, newest + 1)
        return (self.pos - length) % self.buffer_size

    @property
    def ep_start(self) -> np.ndarray:
        """``[buffer_size, n_envs]``: the position of each stored transition's episode start."""
        index, ring = self._native.relabel.ends.index, self._native.ring
        step = np.arange(self.buffer_size * self.n_envs) // self.n_envs
        step = step + (ring.steps - 1 - step) // self.buffer_size * self.buffer_size  # the newest step in each slot
        return ((step - index.position) % self.buffer_size).reshape(self.buffer_size, self.n_envs)

    @property
    def ep_length(self) -> np.ndarray:
        """``[buffer_size, n_envs]``: the length of each stored transition's finished episode, 0
        while it is unfinished or for slots never written."""
        ends, ring = self._native.relabel.ends, self._native.ring
        step = np.arange(self.buffer_size * self.n_envs) // self.n_envs
        step = step + (ring.steps - 1 - step) // self.buffer_size * self.buffer_size
        length = np.where((ends.end >= 0) & (step >= 0), ends.end - step + ends.index.position + 1, 0)
        return length.reshape(self.buffer_size, self.n_envs)

    # -- internals ----------------------------------------------------------------------------
    def _finished_slots(self) -> np.ndarray:
        """Slots (``pos * n_envs + env``, SB3's order) of the transitions of finished episodes;
        found again only after an episode ended or a finished transition was overwritten."""
        ends = self._native.relabel.ends
        if self._valid_version != ends.version:
            self._valid = np.flatnonzero(ends.end >= 0)
            self._valid_version = ends.version
        return self._valid

    def _goals(self, slots: np.ndarray) -> np.ndarray:
        """New goals for the transitions at ``slots``, drawn as SB3's ``_sample_goals`` draws them."""
        ring, ends = self._native.ring, self._native.relabel.ends
        length = ring.max_length
        position = slots // self.n_envs
        step = position + (ring.steps - 1 - position) // length * length  # the transition stored there
        start = np.maximum(step - ends.index.position[slots], ring.first_valid_step())
        episode_length = ends.end[slots] - start + 1
        if self.goal_selection_strategy == GoalSelectionStrategy.FINAL:
            chosen = episode_length - 1
        elif self.goal_selection_strategy == GoalSelectionStrategy.FUTURE:
            chosen = np.random.randint(step - start, episode_length)
        else:
            chosen = np.random.randint(0, episode_length)
        goal_slots = (start + chosen) % length * self.n_envs + slots % self.n_envs
        return self._native.storage.fields[self._achieved][goal_slots]

    def _env_rewards(self, achieved: np.ndarray, goals: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if self.infos is not None:
            ring = self._native.ring
            infos = copy.deepcopy(self.infos[(ids // ring.batch_size) % self.buffer_size, ids % ring.batch_size])
        else:
            infos = [{} for _ in range(len(ids))]
        return self._compute_reward(achieved, goals, infos)

    def _compute_reward(self, achieved: np.ndarray, desired: np.ndarray, infos: Any) -> np.ndarray:
        """The env's ``compute_reward`` (of its first copy, through ``env_method``), as float32."""
        if infos is None:
            infos = [{} for _ in range(len(achieved))]
        rewards = self.env.env_method("compute_reward", achieved, desired, infos, indices=[0])
        return np.asarray(rewards[0], np.float32)
