"""``MultiAgentPrioritizedEpisodeReplayBuffer``: RLlib's prioritized multi-agent episode buffer
(multi-agent DQN's) with a sum/min tree per module over that module's stored agent steps."""

from __future__ import annotations

import pickle
from collections import defaultdict
from typing import Any

import numpy as np
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer as _RLlibMultiAgentPrioritizedEpisodeReplayBuffer,
)

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, PriorityError
from replaybuf.rllib._store import EpisodeStore
from replaybuf.rllib.multi_agent_buffer import MultiAgentEpisodeReplayBuffer

__all__ = ["MultiAgentPrioritizedEpisodeReplayBuffer"]


def _priority(value: Any, path: str) -> float:
    if isinstance(value, bool) or not (isinstance(value, (int, float, np.number)) and np.isfinite(value) and value > 0):
        raise PriorityError(f"{path}: expected a finite priority > 0, got {value!r}")
    return float(value)


class MultiAgentPrioritizedEpisodeReplayBuffer(
    MultiAgentEpisodeReplayBuffer, _RLlibMultiAgentPrioritizedEpisodeReplayBuffer
):
    """RLlib's ``MultiAgentPrioritizedEpisodeReplayBuffer``: in ``independent`` mode each
    module's agent steps drawn in proportion to ``priority ** alpha`` with weights
    ``(N * P) ** -beta`` over the module's largest; ``update_priorities(priorities, module_id)``
    on that module's draws since its last update (RLlib's bookkeeping); ``synchronized``
    mode draws uniformly, as RLlib's does."""

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
        if isinstance(alpha, bool) or not (
            isinstance(alpha, (int, float, np.floating)) and np.isfinite(alpha) and alpha >= 0
        ):
            raise ArgumentError(f"alpha: expected a finite number >= 0, got {alpha!r}")
        super().__init__(
            capacity,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
            seed=seed,
        )
        self._alpha = float(alpha)
        self._module_to_max_priority: dict[Any, float] = defaultdict(lambda: 1.0)
        self._last: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # module -> draws (rows, owners) since its update

    # -- adding --------------------------------------------------------------------------------
    def add(self, episodes: Any, weight: float | dict | None = None) -> None:
        """As the uniform buffer's ``add``; new steps get ``weight`` (a priority, or a dict
        module id -> priority) or else their module's largest priority so far, ** alpha."""
        super().add(episodes, weight)

    def _weights(self, weight: Any) -> Any:
        if isinstance(weight, dict):
            return {module_id: _priority(v, f"weight[{module_id!r}]") for module_id, v in weight.items()}
        return None if weight is None else _priority(weight, "weight")

    def _mass(self, module_id: Any, weight: Any) -> float:
        if weight is None or isinstance(weight, dict):
            weight = (weight or {}).get(module_id, self._module_to_max_priority[module_id])
        return weight**self._alpha

    # -- sampling ------------------------------------------------------------------------------
    def _draw(
        self, module_id: Any, store: EpisodeStore, B: int, n_step: Any, beta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        total = store.sums.root()
        if store.steps == 0 or not total > 0:
            raise EmptyBufferError(f"sample: module {module_id!r} holds no timestep to sample")
        N = store.steps
        max_weight = (store.mins.root() / total * N) ** -beta
        rows, masses, ns, rejected = store.draw_fitting(self.rng, B, n_step, True, f" of module {module_id!r}")
        last_rows, last_owners = self._last.get(module_id, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        self._last[module_id] = (
            np.concatenate([last_rows, rows]),
            np.concatenate([last_owners, store.row_owner[rows]]),
        )
        return rows, (masses / total * N) ** -beta / max_weight, ns, rejected

    def update_priorities(self, priorities: Any, module_id: Any) -> None:
        """New priorities for ``module_id``'s steps drawn since its last update, in their
        order (floored at 1e-12 as RLlib does); steps evicted since are skipped. Checked
        before anything changes."""
        if module_id not in self._stores:
            raise ArgumentError(
                f"module_id: expected a module stored in the buffer ({list(self._stores)}), got {module_id!r}"
            )
        rows, owners = self._last.get(module_id, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        values = np.asarray(priorities, np.float64).reshape(-1)
        if values.shape[0] != rows.shape[0]:
            raise PriorityError(
                f"priorities: expected {rows.shape[0]} for module {module_id!r} (one per item drawn for it since "
                f"its last update), got {values.shape[0]}"
            )
        largest = self._stores[module_id].reprioritize(rows, owners, values, self._alpha)
        self._module_to_max_priority[module_id] = max(self._module_to_max_priority[module_id], largest)
        self._last.pop(module_id, None)

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        last = {}  # module -> the draws as (episode position in its store, t); -1: evicted since
        for module_id, (rows, owners) in self._last.items():
            store = self._stores[module_id]
            position = {ordinal: i for i, ordinal in enumerate(store.episodes)}
            live = store.row_owner[rows] == owners
            last[module_id] = np.array(
                [
                    (position[o], t) if ok else (-1, -1)
                    for o, t, ok in zip(owners.tolist(), store.row_t[rows].tolist(), live.tolist(), strict=True)
                ],
                np.int64,
            ).reshape(-1, 2)
        extra = {"alpha": self._alpha, "max_priority": dict(self._module_to_max_priority), "last": last}
        state["prioritized"] = np.frombuffer(pickle.dumps(extra, protocol=pickle.HIGHEST_PROTOCOL), np.uint8).copy()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            extra = pickle.loads(np.asarray(state["prioritized"], np.uint8).tobytes())
            alpha, max_priority, last = float(extra["alpha"]), dict(extra["max_priority"]), dict(extra["last"])
        except (KeyError, TypeError, ValueError, pickle.UnpicklingError) as err:
            raise CheckpointError(f"state: not a {type(self).__name__} state ({err!r})") from None
        super().set_state(state)
        restored = {}
        for module_id, pairs in last.items():
            store = self._stores.get(module_id)
            episodes = list(store.episodes.values()) if store is not None else []
            pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
            if store is None or (pairs[:, 0] >= len(episodes)).any():
                raise CheckpointError(f"state: the last draws of module {module_id!r} name an episode the state lacks")
            rows = np.array([episodes[p].rows[t] if p >= 0 else 0 for p, t in pairs.tolist()], np.int64)
            owners = np.array([episodes[p].ordinal if p >= 0 else -2 for p, _ in pairs.tolist()], np.int64)
            restored[module_id] = (rows, owners)
        self._alpha, self._last = alpha, restored
        self._module_to_max_priority = defaultdict(lambda: 1.0, max_priority)
