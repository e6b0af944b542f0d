"""Sampled items as the ``SingleAgentEpisode`` objects RLlib's learner connectors read, and the
n-step return they carry."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import _REWARDS_BOX_SPACE, SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space

from replaybuf.rllib._store import EpisodeStore, StoredEpisode

__all__ = ["discounted", "one_step_episode", "sequence_episode", "tag"]


def discounted(rewards: np.ndarray, lengths: np.ndarray, gamma: float) -> np.ndarray:
    """Per row of ``rewards`` ([B, n]), the sum of ``gamma ** k * r_k`` over its first
    ``lengths`` entries, computed back to front as RLlib's ``lfilter`` does (same rounding)."""
    total = np.zeros(rewards.shape[0])
    for k in range(rewards.shape[1] - 1, -1, -1):
        total = np.where(k < lengths, rewards[:, k] + gamma * total, total)
    return total


def tag(episode: SingleAgentEpisode, n_step: int, weight: float, lookback: int = 0) -> None:
    """The ``n_step`` and ``weights`` columns RLlib's learners read from a sampled episode."""
    size = len(episode) + lookback
    episode.extra_model_outputs["n_step"] = InfiniteLookbackBuffer(np.full((size,), n_step), lookback=lookback)
    episode.extra_model_outputs["weights"] = InfiniteLookbackBuffer(np.full((size,), weight), lookback=lookback)


def _identity(store: EpisodeStore, stored: StoredEpisode) -> dict[str, Any]:
    """What a sampled episode takes from the stored one: its ids and the spaces."""
    return {
        "id_": stored.id_,
        "agent_id": stored.agent_id,
        "module_id": stored.module_id,
        "observation_space": store.observation_space,
        "action_space": store.action_space,
    }


def _info(stored: StoredEpisode, t: int) -> Any:
    return stored.infos.get(t, {})


def _buffer(data: list, space: Any = None, struct: Any = None) -> InfiniteLookbackBuffer:
    """``InfiniteLookbackBuffer(data, lookback=0, space=space)`` with the space's struct given
    (RLlib's setter derives it per buffer: most of a sampled episode's cost)."""
    buffer = object.__new__(InfiniteLookbackBuffer)
    buffer.data, buffer.lookback, buffer.finalized = data, 0, False
    buffer._space, buffer._space_struct = space, struct
    return buffer


def _structs(store: EpisodeStore) -> tuple:
    """The store's spaces and their RLlib structs, derived once per pair of spaces."""
    key = (store.observation_space, store.action_space)
    cached = store.space_structs
    if cached is None or cached[0][0] is not key[0] or cached[0][1] is not key[1]:
        cached = (key, tuple(get_base_struct_from_space(space) for space in (*key, _REWARDS_BOX_SPACE, None)))
        store.space_structs = cached
    return cached[1]


def one_step_episode(
    store: EpisodeStore,
    stored: StoredEpisode,
    t: int,
    n: int,
    observations: tuple[Any, Any],
    action: Any,
    reward: float,
    done: bool,
    infos: bool,
    extras: dict[str, Any],
) -> SingleAgentEpisode:
    """The transition ``(o_t, a_t, n-step return, o_(t+n))`` as a one-step episode: the object
    ``SingleAgentEpisode(id_=..., observations=[o_t, o_(t+n)], actions=[a_t], rewards=[R],
    infos=..., extra_model_outputs=extras, t_started=t, len_lookback_buffer=0, ...)`` builds,
    attribute for attribute (tests/test_rllib_buffers.py compares them), set directly: RLlib's
    constructor derives each buffer's space struct anew, 3/4 of a DQN sample's time."""
    obs_struct, act_struct, reward_struct, none_struct = _structs(store)
    episode = object.__new__(SingleAgentEpisode)
    episode.id_ = stored.id_ or uuid.uuid4().hex  # as the constructor treats a falsy id
    episode.agent_id, episode.module_id = stored.agent_id, stored.module_id
    episode.multi_agent_episode_id = None
    episode.observations = _buffer(list(observations), store.observation_space, obs_struct)
    episode._observation_space = store.observation_space
    episode.infos = _buffer([_info(stored, t), _info(stored, t + n)] if infos else [{}, {}], None, none_struct)
    episode.actions = _buffer([action], store.action_space, act_struct)
    episode._action_space = store.action_space
    episode.rewards = _buffer([reward], _REWARDS_BOX_SPACE, reward_struct)
    episode.is_terminated = stored.terminated and done
    episode.is_truncated = stored.truncated and done
    episode.extra_model_outputs = {key: _buffer(values, None, none_struct) for key, values in extras.items()}
    episode.t_started = t
    episode.t = t + 1
    episode._custom_data = {}
    episode._start_time = episode._last_step_time = None
    episode._last_added_observation = episode._last_added_infos = None
    return episode


def sequence_episode(
    store: EpisodeStore, stored: StoredEpisode, start: int, stop: int, lookback: int
) -> SingleAgentEpisode:
    """Steps ``[start, stop)`` of a stored episode with up to ``lookback`` steps before them
    (RLlib's ``episode.slice(slice(start, stop), len_lookback_buffer=lookback)``)."""
    lookback = min(lookback, start)
    first = start - lookback
    rows = stored.rows[first : stop + 1]
    obs, actions, rewards = store.read(rows)
    steps = stop - first
    done = stop == stored.length
    return SingleAgentEpisode(
        **_identity(store, stored),
        observations=[store.observation(obs, i) for i in range(steps + 1)],
        actions=[store.action(actions, i) for i in range(steps)],
        rewards=rewards[:steps].tolist(),
        infos=[_info(stored, t) for t in range(first, stop + 1)],
        terminated=stored.terminated and done,
        truncated=stored.truncated and done,
        extra_model_outputs={key: values[first:stop] for key, values in stored.extras.items()},
        t_started=stored.t_started + start,
        len_lookback_buffer=lookback,
    )
