"""``PrioritizedEpisodeReplayBuffer``: RLlib's prioritized episode buffer (DQN's, SAC's,
TQC's and CQL's default) over replaybuf columns and a sum/min tree over the stored steps."""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils import force_list
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer as _RLlibPrioritizedEpisodeReplayBuffer,
)

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, PriorityError
from replaybuf.rllib._store import checked_beta, n_step_draws
from replaybuf.rllib.episode_buffer import EpisodeReplayBuffer, _AddCounts, _copied

__all__ = ["PrioritizedEpisodeReplayBuffer"]


class PrioritizedEpisodeReplayBuffer(EpisodeReplayBuffer, _RLlibPrioritizedEpisodeReplayBuffer):
    """RLlib's ``PrioritizedEpisodeReplayBuffer``: steps drawn in proportion to
    ``priority ** alpha`` with importance weights ``(N * P) ** -beta`` over their largest,
    ``update_priorities`` on the last sample, eviction of whole episodes before an add."""

    _prioritized = True

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        alpha: float = 1.0,
        metrics_num_episodes_for_smoothing: int = 100,
        seed: int | None = None,
        **kwargs: Any,
    ):
        if not (isinstance(alpha, (int, float, np.floating)) and np.isfinite(alpha) and alpha >= 0):
            raise ArgumentError(f"alpha: expected a finite number >= 0, got {alpha!r}")
        super().__init__(
            capacity,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
            seed=seed,
        )
        self._alpha = float(alpha)
        self._max_priority = 1.0
        self._last_rows = np.zeros(0, np.int64)  # the last sample's rows and their owners then
        self._last_owners = np.zeros(0, np.int64)

    @property
    def _last_sampled_indices(self) -> list[int]:
        """The last sample's rows (RLlib's name for what ``update_priorities`` reads)."""
        return self._last_rows.tolist()

    # -- adding --------------------------------------------------------------------------------
    def add(self, episodes: Any, weight: float | None = None) -> None:
        """Evict the oldest episodes first (while the stored and incoming steps exceed
        ``capacity`` and more than one episode would remain; an incoming chunk of an evicted
        episode is dropped), then append; new steps get ``weight`` (the largest priority so
        far by default) ** alpha."""
        if weight is None:
            weight = self._max_priority
        elif not (isinstance(weight, (int, float, np.floating)) and np.isfinite(weight) and weight > 0):
            raise PriorityError(f"weight: expected a finite priority > 0, got {weight!r}")
        episodes = force_list(episodes)
        chunks = self._store.prepare(episodes)
        incoming = [c.episode.id_ for c in chunks]
        self._num_timesteps += sum(c.length for c in chunks)
        self._num_timesteps_added += sum(c.length for c in chunks)
        counts = _AddCounts()
        evicted_ids: set = set()
        arriving = set(incoming)
        while self._num_timesteps > self.capacity and self._store.episodes:
            # the episodes that would remain: the stored ones and the new ones not evicted
            stored = self._store.ordinals
            if len(stored) + sum(1 for i in arriving if i not in stored and i not in evicted_ids) == 1:
                break
            evicted = self._evict()
            evicted_ids.add(evicted.id_)
            counts.evicted(evicted.length)
            if evicted.id_ in incoming:  # its incoming chunk goes with it (RLlib counts the first)
                dropped = chunks[incoming.index(evicted.id_)].length
                self._num_timesteps -= dropped
                self._num_timesteps_added -= dropped
        mass = float(weight) ** self._alpha
        for chunk in chunks:
            if chunk.episode.id_ in evicted_ids:
                continue
            _, new, _ = self._store.append(_copied(chunk), mass)
            counts.added(chunk.length, new)
        # one add of more than capacity steps emptied the store above (RLlib's raises IndexError
        # there): the oldest incoming episodes go until it fits, one episode staying
        while self._num_timesteps > self.capacity and len(self._store.episodes) > 1:
            counts.evicted(self._evict().length)
        self._added(counts)

    # -- sampling ------------------------------------------------------------------------------
    def sample(
        self,
        num_items: int | None = None,
        *,
        batch_size_B: int | None = None,
        batch_length_T: int | None = None,
        n_step: int | tuple | None = None,
        beta: float = 0.0,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        to_numpy: bool = False,
        **kwargs: Any,
    ) -> list:
        """``num_items`` n-step transitions as one-step episodes, drawn by priority; a draw
        whose n-step passes its episode's stored end is drawn again (``num_resamples``)."""
        beta = checked_beta(beta)
        B = self._batch_size(num_items, batch_size_B)
        n_step_draws(self.rng, n_step, 0)  # checks n_step before anything is drawn
        store = self._store
        total = store.sums.root()
        if store.steps == 0 or not total > 0:
            raise EmptyBufferError("sample: the buffer holds no timestep to sample")
        N = store.steps
        max_weight = (store.mins.root() / total * N) ** -beta
        rows, masses, ns, rejected = store.draw_fitting(self.rng, B, n_step, prioritized=True)
        resamples = len(rejected)
        weights = ((masses / total * N) ** -beta / max_weight).tolist()
        episodes, ts = self._store.locate(rows)
        draws = list(zip(episodes, ts, ns.tolist(), strict=True))
        sampled = self._transitions(draws, gamma, include_infos, include_extra_model_outputs, weights)
        if to_numpy:
            for episode in sampled:
                episode.to_numpy()
        self._last_rows, self._last_owners = rows, store.row_owner[rows]
        self.sampled_timesteps += B
        self._sample_metrics(
            B, len({e.ordinal for e in episodes}), len(set(rows.tolist())), float(ns.sum()) / B, resamples
        )
        return sampled

    def update_priorities(self, priorities: Any, module_id: Any = None) -> None:
        """New priorities for the last sample's steps, in its order (floored at 1e-12 as
        RLlib does); steps evicted since are skipped. Checked before anything changes."""
        if module_id not in (None, DEFAULT_MODULE_ID) and module_id not in self._module_ids():
            raise ArgumentError(
                f"module_id: expected None or {DEFAULT_MODULE_ID!r} (a single-agent buffer), got {module_id!r}"
            )
        values = np.asarray(priorities, np.float64).reshape(-1)
        if values.shape[0] != self._last_rows.shape[0]:
            raise PriorityError(
                f"priorities: expected {self._last_rows.shape[0]} (one per item of the last sample), "
                f"got {values.shape[0]}"
            )
        largest = self._store.reprioritize(self._last_rows, self._last_owners, values, self._alpha)
        self._max_priority = max(self._max_priority, largest)
        self._last_rows, self._last_owners = np.zeros(0, np.int64), np.zeros(0, np.int64)

    def priority(self, episode_id: Any, t: int) -> float:
        """The priority of step ``t`` of a stored episode (its mass ** (1 / alpha))."""
        stored = self._stored(episode_id)
        if not 0 <= t < stored.length:
            raise ArgumentError(f"t: expected a step of episode {episode_id!r} in [0, {stored.length}), got {t!r}")
        mass = float(self._store.sums.values(stored.rows[t : t + 1])[0])
        return mass ** (1.0 / self._alpha) if self._alpha else 1.0

    def _module_ids(self) -> set:
        return {e.module_id for e in self._store.episodes.values() if e.module_id is not None}

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state.update(
            {
                "_max_priority": self._max_priority,
                "_last_rows": self._last_rows.copy(),
                "_last_owners": self._last_owners.copy(),
            }
        )
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            max_priority = float(state["_max_priority"])
            rows, owners = (np.asarray(state[k], np.int64).reshape(-1) for k in ("_last_rows", "_last_owners"))
            size = int(state["store"]["size"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"state: not a PrioritizedEpisodeReplayBuffer state ({err!r})") from None
        if rows.shape != owners.shape or ((rows < 0) | (rows >= size)).any():
            raise CheckpointError(f"state: _last_rows must be {len(owners)} rows below {size}")
        super().set_state(state)
        self._max_priority, self._last_rows, self._last_owners = max_priority, rows, owners
