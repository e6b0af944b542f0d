"""``EpisodeReplayBuffer``: RLlib's uniform episode buffer with its steps in replaybuf columns."""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

import numpy as np
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.utils import force_list
from ray.rllib.utils.metrics import NUM_ENV_STEPS_STORED, NUM_EPISODES_STORED
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer as _RLlibEpisodeReplayBuffer

from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.rllib._episodes import discounted, one_step_episode, sequence_episode, tag
from replaybuf.rllib._metrics import DeferredMetrics
from replaybuf.rllib._store import EpisodeStore, StoredEpisode, n_step_draws

__all__ = ["EpisodeReplayBuffer"]

_STATE_FORMAT = "replaybuf.rllib/1"


class EpisodeReplayBuffer(_RLlibEpisodeReplayBuffer):
    """RLlib's ``EpisodeReplayBuffer`` (same constructor, ``add``, ``sample``, counters and
    metrics) whose steps live in a replaybuf :class:`EpisodeStore` instead of a deque of
    episode objects; ``seed`` seeds its draws (docs/rllib.md says where it differs)."""

    _prioritized = False

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 64,
        metrics_num_episodes_for_smoothing: int = 100,
        seed: int | None = None,
        **kwargs: Any,  # what algorithms put in replay_buffer_config for other buffers (beta, ...)
    ):
        self._setup(capacity, batch_size_B, batch_length_T, metrics_num_episodes_for_smoothing, seed)
        # rows: one per step and one per episode (its last observation); more come when needed
        self._store = EpisodeStore(self.capacity + self.capacity // 16 + 16, prioritized=self._prioritized)
        self._num_episodes_evicted = 0
        self._num_timesteps = 0  # RLlib's running count, which drives eviction
        self._num_timesteps_added = 0
        self.sampled_timesteps = 0
        self.metrics.before_flush = self._flush_add_metrics
        self._pending_adds = _AddCounts()  # the adds since the metrics were last read, summed
        self._stored_history: deque = deque(maxlen=_window(metrics_num_episodes_for_smoothing))

    def _setup(self, capacity, batch_size_B, batch_length_T, metrics_num_episodes_for_smoothing, seed) -> None:
        """What every replaybuf.rllib buffer (the multi-agent ones too) sets first: capacity, sizes, rng, metrics."""
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ArgumentError(f"capacity: expected a number of timesteps >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.batch_size_B = batch_size_B
        self.batch_length_T = batch_length_T
        self.rng = np.random.default_rng(seed)
        self.metrics = DeferredMetrics(MetricsLogger(root=False))  # logged when read (_metrics.py)
        self._metrics_num_episodes_for_smoothing = metrics_num_episodes_for_smoothing

    # -- adding --------------------------------------------------------------------------------
    def add(self, episodes: Any) -> None:
        """Append episodes (or chunks of stored ones, joined by id); after each, evict the
        oldest episodes while more than ``capacity`` steps are stored and more than one episode."""
        chunks = self._store.prepare(force_list(episodes))
        counts = _AddCounts()
        for chunk in chunks:
            stored, new, _ = self._store.append(_copied(chunk), 1.0)
            self._num_timesteps += chunk.length
            self._num_timesteps_added += chunk.length
            counts.added(chunk.length, new)
            while self._num_timesteps > self.capacity and len(self._store.episodes) > 1:
                evicted = self._evict()
                counts.evicted(evicted.length)
        self._added(counts)

    def _added(self, counts: _AddCounts) -> None:
        """One add's metrics, kept until the metrics are read (``_flush_add_metrics``)."""
        self._pending_adds.merge(counts)
        self._stored_history.append((len(self._store.episodes), self._store.steps))

    def _flush_add_metrics(self) -> None:
        """RLlib's add metrics of every add since the last read, as if logged one by one: its
        sums once with the totals, its windowed means of the stored counts with each add's."""
        if not self._stored_history:
            return
        counts, history = self._pending_adds, list(self._stored_history)
        self._pending_adds, self._stored_history = _AddCounts(), deque(maxlen=self._stored_history.maxlen)
        self.metrics.dropped = frozenset((NUM_EPISODES_STORED, NUM_ENV_STEPS_STORED))
        try:
            self._update_add_metrics(**counts.metrics())
        finally:
            self.metrics.dropped = frozenset()
        window = self._metrics_num_episodes_for_smoothing
        for episodes, steps in history:
            self.metrics.log_value(NUM_EPISODES_STORED, episodes, reduce="mean", window=window)
            self.metrics.log_value(NUM_ENV_STEPS_STORED, steps, reduce="mean", window=window)

    def _evict(self) -> StoredEpisode:
        evicted = self._store.evict_oldest()
        self._num_timesteps -= evicted.length
        self._num_episodes_evicted += 1
        return evicted

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
        sample_episodes: bool | None = False,
        to_numpy: bool = False,
        lookback: int = 0,
        min_batch_length_T: int = 0,
        **kwargs: Any,
    ) -> Any:
        """RLlib's ``sample``: a ``[B, T]`` dict of arrays, or with ``sample_episodes=True``
        a list of episodes (n-step transitions, or sequences when ``batch_length_T``)."""
        if sample_episodes:
            return self._sample_episodes(
                num_items=num_items,
                batch_size_B=batch_size_B,
                batch_length_T=batch_length_T,
                n_step=n_step,
                gamma=gamma,
                include_infos=include_infos,
                include_extra_model_outputs=include_extra_model_outputs,
                to_numpy=to_numpy,
                lookback=lookback,
                min_batch_length_T=min_batch_length_T,
            )
        return self._sample_batch(num_items=num_items, batch_size_B=batch_size_B, batch_length_T=batch_length_T)

    def _batch_size(self, num_items: int | None, batch_size_B: int | None) -> int:
        if num_items is not None and batch_size_B is not None:
            raise ArgumentError("sample: pass num_items or batch_size_B, not both")
        size = num_items if num_items is not None else batch_size_B or self.batch_size_B
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ArgumentError(f"sample: expected a batch size >= 1, got {size!r}")
        return int(size)

    def _sample_batch(self, num_items=None, *, batch_size_B=None, batch_length_T=None) -> dict:
        """Rows of T consecutive timesteps; an episode ending inside a row is followed by
        another drawn episode from its start (RLlib's ``[B, T]`` path that DreamerV3 reads)."""
        B = self._batch_size(num_items, batch_size_B)
        T = batch_length_T or self.batch_length_T
        store = self._store
        obs_rows = np.zeros((B, T), np.int64)
        act_rows = np.zeros((B, T), np.int64)
        reward_rows = np.full((B, T), -1, np.int64)  # -1: a 0.0 reward (an episode's first step)
        flags = {k: np.zeros((B, T), bool) for k in ("is_first", "is_last", "is_terminated", "is_truncated")}
        episodes_seen, steps_seen = set(), set()
        for b in range(B):
            filled = 0
            while filled < T:
                (stored,), (t,) = self._store.locate(store.draw_uniform(self.rng, 1))
                flags["is_first"][b, filled] = True
                if filled:
                    t = 0
                rows = stored.rows[t : stored.length + 1]
                rewards = np.concatenate([[stored.rows[t - 1] if t else -1], stored.rows[t : stored.length]])
                actions = np.concatenate([rows[:-1], rows[-2:-1]])  # the last action again on the last row
                take = min(len(rows), T - filled)
                obs_rows[b, filled : filled + take] = rows[:take]
                act_rows[b, filled : filled + take] = actions[:take]
                reward_rows[b, filled : filled + take] = rewards[:take]
                filled += take
                flags["is_last"][b, filled - 1] = True
                if take == len(rows) and (stored.terminated or stored.truncated):
                    flags["is_terminated" if stored.terminated else "is_truncated"][b, filled - 1] = True
                episodes_seen.add(stored.ordinal)
                steps_seen.add((stored.ordinal, t))
        obs, actions, _ = store.read(obs_rows)
        _, action_leaves, _ = store.read(act_rows)
        rewards = np.where(reward_rows >= 0, store.read(np.maximum(reward_rows, 0))[2], 0.0)
        self.sampled_timesteps += B * T
        self._sample_metrics(B * T, len(episodes_seen), len(steps_seen), None, 0)
        return {
            "obs": store.obs_flat.unflatten(obs),
            "actions": store.act_flat.unflatten(action_leaves),
            "rewards": rewards,
            **flags,
        }

    def _sample_episodes(
        self,
        num_items=None,
        *,
        batch_size_B=None,
        batch_length_T=None,
        n_step=None,
        gamma=0.99,
        include_infos=False,
        include_extra_model_outputs=False,
        to_numpy=False,
        lookback=1,
        min_batch_length_T=0,
        **kwargs,
    ) -> list:
        """Uniformly drawn n-step transitions (one-step episodes), or sequences of up to
        ``batch_length_T`` steps; ``B`` counts what RLlib counts."""
        B = self._batch_size(num_items, batch_size_B)
        if n_step is None:
            raise ArgumentError("sample: sample_episodes=True needs n_step (an int or a range)")
        if batch_length_T and n_step != 1:
            raise ArgumentError(f"sample: sequences (batch_length_T={batch_length_T}) need n_step=1, got {n_step!r}")
        store = self._store
        draws: list[tuple[StoredEpisode, int, int, int]] = []  # (episode, t, n, end of the steps kept)
        counted = 0
        while counted < B:  # draws in blocks; a sequence counts its steps + 1, as RLlib's B does
            rows = store.draw_uniform(self.rng, B - counted)
            ns = n_step_draws(self.rng, n_step, len(rows)).tolist()
            for stored, t, n in zip(*self._store.locate(rows), ns, strict=True):
                if min_batch_length_T > 0 and t + min_batch_length_T >= stored.length:
                    continue
                end = min(t + (batch_length_T or 0) + n - 1, stored.length)
                draws.append((stored, t, n, end))
                counted += max(end - t - (n - 1) + 1, 1)
                if counted >= B:
                    break
        if batch_length_T:
            sampled = [sequence_episode(store, s, t, end, lookback) for s, t, _, end in draws]
            for episode in sampled:
                tag(episode, 1, 1.0, lookback)
        else:
            sampled = self._transitions(draws, gamma, True, include_extra_model_outputs, [1.0] * len(draws))
        if to_numpy:
            for episode in sampled:
                episode.to_numpy()
        self.sampled_timesteps += B
        ns = [n for _, _, n, _ in draws]
        self._sample_metrics(
            B, len({s.ordinal for s, *_ in draws}), len({(s.ordinal, t) for s, t, *_ in draws}), sum(ns) / B, 0
        )
        return sampled

    def _transitions(
        self,
        draws: list,
        gamma: float,
        infos: bool,
        extras: bool,
        weights: list[float],
        store: EpisodeStore | None = None,
    ) -> list:
        """One-step episodes ``(o_t, a_t, R, o_(t+k))`` of draws ``(episode, t, n, ...)`` from
        ``store`` (this buffer's; a multi-agent buffer passes a module's); k is n cut at the
        episode's stored end (a uniform buffer's clipped n-step)."""
        store = self._store if store is None else store
        ks = np.array([min(n, s.length - t) for s, t, n, *_ in draws], np.int64)
        kmax = int(ks.max())
        first = np.array([s.row(t) for s, t, *_ in draws], np.int64)
        last = np.array([s.row(t + k) for (s, t, *_), k in zip(draws, ks.tolist(), strict=True)], np.int64)
        reward_rows = np.zeros((len(draws), kmax), np.int64)  # rows past k: any row, not summed
        for i, ((s, t, *_), k) in enumerate(zip(draws, ks.tolist(), strict=True)):
            reward_rows[i, :k] = s.rows[t : t + k]
        obs0, action_leaves, _ = store.read(first)
        obs1, _, _ = store.read(last)
        returns = discounted(store.read(reward_rows)[2], ks, gamma).tolist()
        sampled = []
        for i, ((stored, t, n, *_), k) in enumerate(zip(draws, ks.tolist(), strict=True)):
            outputs = {key: [values[t]] for key, values in stored.extras.items()} if extras else {}
            outputs["weights"], outputs["n_step"] = [weights[i]], [n]
            episode = one_step_episode(
                store,
                stored,
                t,
                k,
                (store.observation(obs0, i), store.observation(obs1, i)),
                store.action(action_leaves, i),
                returns[i],
                t + k == stored.length,
                infos,
                outputs,
            )
            sampled.append(episode)
        return sampled

    def _sample_metrics(self, sampled: int, episodes: int, steps: int, n_step: float | None, resamples: int) -> None:
        per = {
            "num_env_steps_sampled": sampled,
            "num_episodes_per_sample": episodes,
            "num_env_steps_per_sample": steps,
            "num_resamples": resamples,
        }
        self._update_sample_metrics(
            **per,
            sampled_n_step=n_step,
            agent_to_num_steps_sampled={DEFAULT_AGENT_ID: sampled},
            agent_to_num_episodes_per_sample={DEFAULT_AGENT_ID: episodes},
            agent_to_num_steps_per_sample={DEFAULT_AGENT_ID: steps},
            agent_to_sampled_n_step={DEFAULT_AGENT_ID: n_step} if n_step else None,
            agent_to_num_resamples={DEFAULT_AGENT_ID: resamples},
            module_to_num_steps_sampled={DEFAULT_MODULE_ID: sampled},
            module_to_num_episodes_per_sample={DEFAULT_MODULE_ID: episodes},
            module_to_num_steps_per_sample={DEFAULT_MODULE_ID: steps},
            module_to_sampled_n_step={DEFAULT_MODULE_ID: n_step} if n_step else None,
            module_to_num_resamples={DEFAULT_MODULE_ID: resamples},
        )

    # -- counters ------------------------------------------------------------------------------
    def get_num_episodes(self, module_id: Any = None) -> int:
        return len(self._store.episodes)

    def get_num_episodes_evicted(self, module_id: Any = None) -> int:
        return self._num_episodes_evicted

    def get_num_timesteps(self, module_id: Any = None) -> int:
        return self._store.steps

    def get_sampled_timesteps(self, module_id: Any = None) -> int:
        return self.sampled_timesteps

    def get_added_timesteps(self, module_id: Any = None) -> int:
        return self._num_timesteps_added

    def episode_ids(self) -> list:
        """The stored episodes' ids, oldest (next to be evicted) first."""
        return [e.id_ for e in self._store.episodes.values()]

    def episode_length(self, episode_id: Any) -> int:
        """The stored length (timesteps) of an episode."""
        return self._stored(episode_id).length

    def _stored(self, episode_id: Any) -> StoredEpisode:
        ordinal = self._store.ordinals.get(episode_id)
        if ordinal is None:
            raise ArgumentError(f"episode_id: no stored episode has id {episode_id!r}")
        return self._store.episodes[ordinal]

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """A plain state (arrays, numbers; ``replaybuf.persistence.write_state`` saves it)."""
        return {
            "format": _STATE_FORMAT,
            "store": self._store.state(),
            "_num_episodes_evicted": self._num_episodes_evicted,
            "_num_timesteps": self._num_timesteps,
            "_num_timesteps_added": self._num_timesteps_added,
            "sampled_timesteps": self.sampled_timesteps,
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a ``get_state()`` (checked before anything changes)."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(
                f"state: expected a {type(self).__name__} state of format {_STATE_FORMAT!r}, got {got!r}"
            )
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state["rng"]
            counters = [
                int(state[k])
                for k in ("_num_episodes_evicted", "_num_timesteps", "_num_timesteps_added", "sampled_timesteps")
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"state: a counter or the rng state is missing or bad ({err!r})") from None
        self._store.load(state["store"])
        self._num_episodes_evicted, self._num_timesteps, self._num_timesteps_added, self.sampled_timesteps = counters
        self.rng = rng


def _window(window: Any) -> int | None:
    return int(window) if isinstance(window, int) and window > 0 else None


class _AddCounts:
    """What one ``add`` added and evicted, for RLlib's add metrics."""

    def __init__(self) -> None:
        self.steps = self.episodes = self.evicted_steps = self.evicted_episodes = 0

    def added(self, steps: int, new: bool) -> None:
        self.steps += steps
        self.episodes += int(new)

    def merge(self, other: _AddCounts) -> None:
        self.steps += other.steps
        self.episodes += other.episodes
        self.evicted_steps += other.evicted_steps
        self.evicted_episodes += other.evicted_episodes

    def evicted(self, steps: int) -> None:
        self.evicted_steps += steps
        self.evicted_episodes += 1

    def metrics(self) -> dict[str, Any]:
        a, m = DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
        return {
            "num_episodes_added": self.episodes,
            "num_env_steps_added": self.steps,
            "num_episodes_evicted": self.evicted_episodes,
            "num_env_steps_evicted": self.evicted_steps,
            "agent_to_num_episodes_added": {a: self.episodes},
            "agent_to_num_steps_added": {a: self.steps},
            "agent_to_num_episodes_evicted": {a: self.evicted_episodes},
            "agent_to_num_steps_evicted": {a: self.evicted_steps},
            "module_to_num_episodes_added": {m: self.episodes},
            "module_to_num_steps_added": {m: self.steps},
            "module_to_num_episodes_evicted": {m: self.evicted_episodes},
            "module_to_num_steps_evicted": {m: self.evicted_steps},
        }


def _copied(chunk):
    """The chunk with its infos and extra model outputs copied (the caller keeps its episode)."""
    if chunk.infos:
        chunk.infos = copy.deepcopy(chunk.infos)
    if chunk.extras:
        chunk.extras = {k: copy.deepcopy(v) for k, v in chunk.extras.items()}
    return chunk
