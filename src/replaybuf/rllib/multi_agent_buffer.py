"""``MultiAgentEpisodeReplayBuffer``: RLlib's multi-agent episode buffer with each module's
agent steps in its own replaybuf :class:`EpisodeStore`.

RLlib keeps ``MultiAgentEpisode`` objects in a deque and one index list per module; here a
multi-agent episode is a small record (its id, env steps, and per agent the module, the
agent episode's id and the env step -> agent step map) and its agents' steps live in their
modules' stores, so chunks joined by id, eviction of whole multi-agent episodes and both
replay modes (``independent``: each module draws its own agent steps; ``synchronized``:
env steps drawn, every agent with a whole transition there) read columns, not episode objects.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.utils import force_list
from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
    MultiAgentEpisodeReplayBuffer as _RLlibMultiAgentEpisodeReplayBuffer,
)

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError
from replaybuf.rllib._episodes import discounted
from replaybuf.rllib._store import MAX_RESAMPLES, EpisodeStore, StoredEpisode, checked_beta, n_step_draws
from replaybuf.rllib.episode_buffer import EpisodeReplayBuffer, _copied

__all__ = ["MultiAgentEpisodeReplayBuffer"]

_STATE_FORMAT = "replaybuf.rllib.multi_agent/1"
_MODES = ("independent", "synchronized")
_COUNTERS = (
    "_num_timesteps",
    "_num_timesteps_added",
    "_num_episodes_evicted",
    "_num_agent_timesteps",
    "_num_agent_timesteps_added",
    "sampled_timesteps",
)
_MODULE_COUNTERS = ("_num_module_timesteps_added", "_num_module_episodes_evicted", "sampled_timesteps_per_module")


@dataclass(eq=False)
class _MultiAgentRecord:
    """A stored multi-agent episode: its agents' steps are in the module stores."""

    id_: Any
    length: int  # env steps
    t_started: int
    terminated: bool = False
    truncated: bool = False
    modules: dict = field(default_factory=dict)  # agent id -> module id
    agent_episodes: dict = field(default_factory=dict)  # agent id -> its SingleAgentEpisode's id
    env_to_agent: dict = field(default_factory=dict)  # agent id -> [agent step or -1 per env step 0..length]


class MultiAgentEpisodeReplayBuffer(EpisodeReplayBuffer, _RLlibMultiAgentEpisodeReplayBuffer):
    """RLlib's ``MultiAgentEpisodeReplayBuffer`` (same constructor, ``add``, ``sample``,
    counters and metrics) over one replaybuf episode store per module; ``seed`` seeds its
    draws. docs/rllib.md says where it differs."""

    _prioritized = False

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        metrics_num_episodes_for_smoothing: int = 100,
        seed: int | None = None,
        **kwargs: Any,
    ):
        self._setup(capacity, batch_size_B, batch_length_T, metrics_num_episodes_for_smoothing, seed)
        self._stores: dict[Any, EpisodeStore] = {}  # module id -> its agents' episodes
        self._records: dict[Any, _MultiAgentRecord] = {}  # multi-agent episode id -> record, oldest first
        for name in _COUNTERS:
            setattr(self, name, 0)
        for name in _MODULE_COUNTERS:
            setattr(self, name, defaultdict(int))

    # -- adding --------------------------------------------------------------------------------
    def add(self, episodes: Any, weight: Any = None) -> None:
        """Append multi-agent episodes (or chunks of stored ones, joined by id). First the
        oldest episodes are evicted while the stored and incoming env steps exceed ``capacity``
        and more than one episode would remain (an incoming chunk of an evicted episode goes
        with it). Everything is checked before anything changes."""
        weights = self._weights(weight)
        episodes = force_list(episodes)
        chunks = self._prepare(episodes)
        incoming = [eps.id_ for eps, _ in chunks]
        steps = sum(len(eps) for eps, _ in chunks)
        self._num_timesteps += steps
        self._num_timesteps_added += steps
        counts = _Counts()
        evicted_ids: set = set()
        while self._num_timesteps > self.capacity and self._records:
            if len((set(self._records) | set(incoming)) - evicted_ids) == 1:
                break
            record = self._evict(counts)
            evicted_ids.add(record.id_)
            if record.id_ in incoming:  # its first incoming chunk goes with it (RLlib drops that one)
                i = incoming.index(record.id_)
                dropped, _ = chunks.pop(i)
                incoming.pop(i)
                self._num_timesteps -= len(dropped)
                self._num_timesteps_added -= len(dropped)
        for eps, agent_chunks in chunks:
            self._append(eps, agent_chunks, weights, counts)
        # one add of more than capacity env steps into an empty buffer (RLlib's raises IndexError
        # there): the oldest incoming episodes go until it fits, one episode staying
        while self._num_timesteps > self.capacity and len(self._records) > 1:
            self._evict(counts)
        self._update_add_metrics(**counts.add_metrics())

    def _weights(self, weight: Any) -> Any:
        """The checked ``weight`` (a prioritized buffer's: the priority of new steps)."""
        if weight is not None:
            raise ArgumentError(f"weight: a uniform buffer takes no priority, got {weight!r}")
        return None

    def _prepare(self, episodes: list) -> list[tuple[Any, dict]]:
        """Check every multi-agent episode and flatten its agents' episodes per module
        (nothing is written: new modules' stores are kept only once all passed)."""
        stores = dict(self._stores)
        ends: dict[Any, tuple[int, bool]] = {}  # id -> (env t where earlier chunks end, done)
        per_module: dict[Any, list] = defaultdict(list)  # module -> [(i, agent id, episode)]
        for i, eps in enumerate(episodes):
            where = f"episodes[{i}]"
            if not hasattr(eps, "agent_episodes") or not hasattr(eps, "env_t_to_agent_t"):
                raise ArgumentError(f"{where}: expected a MultiAgentEpisode, got {type(eps).__name__}")
            record = self._records.get(eps.id_)
            end = ends.get(eps.id_) or (
                (record.t_started + record.length, record.terminated or record.truncated) if record else None
            )
            if end is not None:
                if end[1]:
                    raise ArgumentError(f"{where}: episode {eps.id_!r} is stored as done; no chunk can follow it")
                if eps.env_t_started != end[0]:
                    raise ArgumentError(
                        f"{where}: a chunk of episode {eps.id_!r} must start at env t={end[0]}, "
                        f"got env_t_started={eps.env_t_started}"
                    )
            ends[eps.id_] = (eps.env_t_started + len(eps), bool(eps.is_terminated or eps.is_truncated))
            for agent_id, agent_eps in eps.agent_episodes.items():
                module_id = eps.module_for(agent_id)
                known = record.agent_episodes.get(agent_id) if record else None
                if known is not None and (agent_eps.id_ != known or record.modules[agent_id] != module_id):
                    raise ArgumentError(
                        f"{where}.agent_episodes[{agent_id!r}]: expected the stored agent episode {known!r} "
                        f"of module {record.modules[agent_id]!r}, got {agent_eps.id_!r} of module {module_id!r}"
                    )
                per_module[module_id].append((i, agent_id, agent_eps))
        prepared: list[dict] = [{} for _ in episodes]
        for module_id, items in per_module.items():
            store = stores.setdefault(module_id, EpisodeStore(prioritized=self._prioritized))
            path = f"episodes (module {module_id!r})"
            for (i, agent_id, _), chunk in zip(items, store.prepare([e for *_, e in items], path), strict=True):
                prepared[i][agent_id] = (module_id, chunk)
        self._stores = stores
        return list(zip(episodes, prepared, strict=True))

    def _append(self, eps: Any, agent_chunks: dict, weight: Any, counts: _Counts) -> None:
        record = self._records.get(eps.id_)
        new = record is None
        if new:
            record = _MultiAgentRecord(eps.id_, 0, eps.env_t_started)
            self._records[eps.id_] = record
        for agent_id, (module_id, chunk) in agent_chunks.items():
            stored, _, _ = self._stores[module_id].append(_copied(chunk), self._mass(module_id, weight))
            stored.multi_agent_episode_id = eps.id_
            record.modules[agent_id], record.agent_episodes[agent_id] = module_id, stored.id_
            counts.added(agent_id, module_id, chunk.length, new)
            self._num_agent_timesteps += chunk.length
            self._num_agent_timesteps_added += chunk.length
            self._num_module_timesteps_added[module_id] += chunk.length
        maps = _env_to_agent(eps)
        for agent_id in record.modules:
            steps = record.env_to_agent.setdefault(agent_id, [-1] * (record.length + 1))
            chunk_steps = maps.get(agent_id) or [-1] * (len(eps) + 1)
            if steps[-1] < 0:
                steps[-1] = chunk_steps[0]
            steps.extend(chunk_steps[1:])
        record.length += len(eps)
        record.terminated, record.truncated = bool(eps.is_terminated), bool(eps.is_truncated)
        counts.episode(len(eps), new)

    def _mass(self, module_id: Any, weight: Any) -> float:
        """The sampling mass of a module's new steps (a prioritized buffer's)."""
        return 1.0

    def _evict(self, counts: _Counts) -> _MultiAgentRecord:
        """Drop the oldest multi-agent episode and its agents' episodes from their modules."""
        record = self._records.pop(next(iter(self._records)))
        evicted_steps = {}
        for agent_id, module_id in record.modules.items():
            store = self._stores[module_id]
            stored = store.remove(store.ordinals[record.agent_episodes[agent_id]])
            evicted_steps[agent_id] = stored.length
            self._num_agent_timesteps -= stored.length
            self._num_module_episodes_evicted[module_id] += 1
        self._num_timesteps -= record.length
        self._num_episodes_evicted += 1
        counts.evicted(record, evicted_steps)
        return record

    # -- sampling ------------------------------------------------------------------------------
    def sample(
        self,
        num_items: int | None = None,
        *,
        batch_size_B: int | None = None,
        batch_length_T: int | None = None,
        n_step: int | tuple | None = 1,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        replay_mode: str = "independent",
        modules_to_sample: list | None = None,
        beta: float | None = 0.0,
        to_numpy: bool = False,
        **kwargs: Any,  # what DQN passes for single-agent buffers (sample_episodes, lookback, ...)
    ) -> Any:
        """``independent`` (RLlib's default): ``B`` n-step transitions per module, drawn among
        that module's agent steps, as one-step ``SingleAgentEpisode`` objects. ``synchronized``:
        ``B`` env steps drawn, a dict module id -> columns of every agent with a whole
        transition there."""
        B = self._batch_size(num_items, batch_size_B)
        if replay_mode not in _MODES:
            raise ArgumentError(f"replay_mode: expected one of {_MODES}, got {replay_mode!r}")
        beta = checked_beta(beta)
        n_step_draws(self.rng, n_step, 0)  # checks n_step before anything is drawn
        modules = self._modules_to_sample(modules_to_sample)
        if replay_mode == "synchronized":
            return self._sample_synchronized(B, n_step, gamma, include_infos, include_extra_model_outputs, modules)
        metrics = _SampleMetrics()
        sampled = []
        for module_id in modules:
            store = self._stores[module_id]
            rows, weights, ns, rejected = self._draw(module_id, store, B, n_step, float(beta))
            episodes, ts = store.locate(rows)
            draws = list(zip(episodes, ts, ns.tolist(), strict=True))
            items = self._transitions(
                draws, gamma, include_infos, include_extra_model_outputs, weights.tolist(), store=store
            )
            for item, stored in zip(items, episodes, strict=True):
                item.multi_agent_episode_id = stored.multi_agent_episode_id
                if to_numpy:
                    item.to_numpy()
            sampled.extend(items)
            self.sampled_timesteps_per_module[module_id] += B
            metrics.module(module_id, draws, store.locate(rejected)[0], self._records)
        self.sampled_timesteps += B
        self._update_sample_metrics(**metrics.result(B))
        return sampled

    def _modules_to_sample(self, modules_to_sample: Any) -> list:
        if not modules_to_sample:
            modules = list(self._stores)
            if not modules:
                raise EmptyBufferError("sample: the buffer holds no timestep to sample")
            return modules
        modules = list(modules_to_sample)
        unknown = [m for m in modules if m not in self._stores]
        if unknown:
            raise ArgumentError(
                f"modules_to_sample: expected module ids stored in the buffer ({list(self._stores)}), got {unknown}"
            )
        return modules

    def _draw(
        self, module_id: Any, store: EpisodeStore, B: int, n_step: Any, beta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``B`` rows of ``store`` whose episode holds their n-step, their weights, n-steps and
        the rows drawn that did not fit (drawn again, as RLlib does)."""
        if store.steps == 0:
            raise EmptyBufferError(f"sample: module {module_id!r} holds no timestep to sample")
        return store.draw_fitting(self.rng, B, n_step, False, f" of module {module_id!r}")

    def _sample_synchronized(
        self, B: int, n_step: Any, gamma: float, infos: bool, extras: bool, modules: list
    ) -> dict[Any, dict[str, Any]]:
        """RLlib's ``synchronized`` mode: env steps ``t`` drawn uniformly (the transition
        ``t - n -> t``), each agent with observations at both ends and an action at ``t - n``
        giving a row to its module; columns per module."""
        records = list(self._records.values())
        lengths = np.array([r.length for r in records], np.int64)
        if not lengths.sum():
            raise EmptyBufferError("sample: the buffer holds no timestep to sample")
        starts = np.concatenate([[0], np.cumsum(lengths)])
        rows: dict[Any, list] = defaultdict(list)  # module -> [(store row at t - n, n, end row, done)]
        counted, tries = 0, 0
        wanted = set(modules)
        while counted < B:
            tries += 1
            _check_resamples(tries - counted - 1, B, "(synchronized)", n_step)
            step = int(self.rng.integers(starts[-1]))
            n = int(n_step_draws(self.rng, n_step, 1)[0])
            at = int(np.searchsorted(starts, step, side="right")) - 1
            record, t = records[at], step - int(starts[at])
            if t - n < 0:
                continue
            picked = []
            for agent_id, steps in record.env_to_agent.items():
                store = self._stores[record.modules[agent_id]]
                stored = store.episodes[store.ordinals[record.agent_episodes[agent_id]]]
                if steps[t - n] < 0 or steps[t] < 0:
                    continue
                first, last = steps[t - n] - stored.t_started, steps[t] - stored.t_started  # the map holds agent t
                if first < 0 or first >= stored.length:
                    continue
                picked.append((record.modules[agent_id], stored, first, last))
            if not picked:
                continue
            for module_id, stored, first, last in picked:
                if module_id in wanted:
                    rows[module_id].append((stored, first, last))
                    self.sampled_timesteps_per_module[module_id] += 1
            counted += 1
        self.sampled_timesteps += B
        return {m: self._columns(m, rows[m], gamma, infos, extras) for m in modules if rows[m]}

    def _columns(self, module_id: Any, items: list, gamma: float, infos: bool, extras: bool) -> dict[str, Any]:
        store = self._stores[module_id]
        starts = np.array([s.rows[first] for s, first, _ in items], np.int64)
        ends = np.array([s.rows[last] for s, _, last in items], np.int64)
        ks = np.array([last - first for _, first, last in items], np.int64)
        kmax = int(ks.max())
        reward_rows = np.array(
            [np.pad(s.rows[first:last], (0, kmax - (last - first))) for s, first, last in items]
        ).reshape(len(items), kmax)
        obs, actions, _ = store.read(starts)
        next_obs, _, _ = store.read(ends)
        done = np.array([last == s.length for s, _, last in items])
        out = {
            Columns.OBS: store.obs_flat.unflatten(obs),
            Columns.ACTIONS: store.act_flat.unflatten(actions),
            Columns.REWARDS: discounted(store.read(reward_rows)[2], ks, gamma),
            Columns.NEXT_OBS: store.obs_flat.unflatten(next_obs),
            Columns.TERMINATEDS: done & np.array([s.terminated for s, *_ in items]),
            Columns.TRUNCATEDS: done & np.array([s.truncated and not s.terminated for s, *_ in items]),
            "weights": np.ones(len(items)),
            "n_step": ks,
        }
        if infos:
            out[Columns.INFOS] = [s.infos.get(last, {}) for s, _, last in items]
        if extras:
            for key in items[0][0].extras:
                out[key] = [s.extras[key][first] for s, first, _ in items]
        return out

    # -- counters ------------------------------------------------------------------------------
    def get_module_ids(self) -> list:
        return list(self._stores)

    def get_num_agent_timesteps(self) -> int:
        return self._num_agent_timesteps

    def get_added_agent_timesteps(self) -> int:
        return self._num_agent_timesteps_added

    def get_num_episodes(self, module_id: Any = None) -> int:
        if module_id is None:
            return len(self._records)
        return len(self._stores[module_id].episodes) if module_id in self._stores else 0

    def get_num_episodes_evicted(self, module_id: Any = None) -> int:
        return self._num_episodes_evicted if module_id is None else self._num_module_episodes_evicted[module_id]

    def get_num_timesteps(self, module_id: Any = None) -> int:
        if module_id is None:
            return self._num_timesteps
        return self._stores[module_id].steps if module_id in self._stores else 0

    def get_sampled_timesteps(self, module_id: Any = None) -> int:
        return self.sampled_timesteps if module_id is None else self.sampled_timesteps_per_module[module_id]

    def get_added_timesteps(self, module_id: Any = None) -> int:
        return self._num_timesteps_added if module_id is None else self._num_module_timesteps_added[module_id]

    def episode_ids(self) -> list:
        """The stored multi-agent episodes' ids, oldest (next to be evicted) first."""
        return list(self._records)

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """A plain state (arrays, numbers, one pickled blob of ids and records)."""
        modules = list(self._stores)
        objects = {
            "modules": modules,
            "records": list(self._records.values()),
            **{name: dict(getattr(self, name)) for name in _MODULE_COUNTERS},
        }
        return {
            "format": _STATE_FORMAT,
            "stores": {str(i): self._stores[m].state() for i, m in enumerate(modules)},
            "objects": np.frombuffer(pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL), np.uint8).copy(),
            **{name: getattr(self, name) for name in _COUNTERS},
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
            counters = {name: int(state[name]) for name in _COUNTERS}
            objects = pickle.loads(np.asarray(state["objects"], np.uint8).tobytes())
            modules, records = list(objects["modules"]), list(objects["records"])
            module_counters = {name: defaultdict(int, objects[name]) for name in _MODULE_COUNTERS}
            store_states = [state["stores"][str(i)] for i in range(len(modules))]
        except (KeyError, TypeError, ValueError, pickle.UnpicklingError) as err:
            raise CheckpointError(f"state: not a {type(self).__name__} state ({err!r})") from None
        stores = {}
        for module_id, store_state in zip(modules, store_states, strict=True):
            stores[module_id] = EpisodeStore(prioritized=self._prioritized)
            stores[module_id].load(store_state)
        for record in records:
            for agent_id, module_id in record.modules.items():
                if module_id not in stores or record.agent_episodes[agent_id] not in stores[module_id].ordinals:
                    raise CheckpointError(f"state: episode {record.id_!r} names an agent episode the state lacks")
        self._stores, self._records = stores, {r.id_: r for r in records}
        for name, value in {**counters, **module_counters}.items():
            setattr(self, name, value)  # not __dict__: RLlib's classes may hold some as slots
        self.rng = rng


def _env_to_agent(eps: Any) -> dict[Any, list[int]]:
    """Per agent of a chunk, its agent step at each env step of the chunk (-1: none)."""
    maps = {}
    for agent_id, buffer in eps.env_t_to_agent_t.items():
        data = buffer.data[buffer.lookback :] if buffer.lookback else buffer.data
        steps = [int(x) if isinstance(x, (int, np.integer)) else -1 for x in data]
        maps[agent_id] = [-1] * (len(eps) + 1 - len(steps)) + steps[: len(eps) + 1]  # a late agent: -1 before
    return maps


def _check_resamples(resamples: int, B: int, module_id: Any, n_step: Any) -> None:
    if resamples > MAX_RESAMPLES * B:
        raise EmptyBufferError(
            f"sample: no stored timestep of module {module_id!r} is followed by n_step={n_step!r} steps of its episode"
        )


class _Counts:
    """What one ``add`` added and evicted, per agent and module, for RLlib's add metrics."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(("episodes", "steps", "evicted_episodes", "evicted_steps"), 0)
        self.per = {k: defaultdict(int) for k in ("a_eps", "a_steps", "m_eps", "m_steps", "a_ev", "a_ev_steps")}
        self.per.update({k: defaultdict(int) for k in ("m_ev", "m_ev_steps")})

    def added(self, agent_id: Any, module_id: Any, steps: int, new: bool) -> None:
        self.per["a_steps"][agent_id] += steps
        self.per["m_steps"][module_id] += steps
        if new:
            self.per["a_eps"][agent_id] += 1
            self.per["m_eps"][module_id] += 1

    def episode(self, steps: int, new: bool) -> None:
        self.totals["steps"] += steps
        self.totals["episodes"] += int(new)

    def evicted(self, record: _MultiAgentRecord, steps: dict) -> None:
        self.totals["evicted_episodes"] += 1
        self.totals["evicted_steps"] += record.length
        for agent_id, module_id in record.modules.items():
            self.per["a_ev"][agent_id] += 1
            self.per["m_ev"][module_id] += 1
            self.per["a_ev_steps"][agent_id] += steps[agent_id]
            self.per["m_ev_steps"][module_id] += steps[agent_id]

    def add_metrics(self) -> dict[str, Any]:
        p = self.per
        return {
            "num_episodes_added": self.totals["episodes"],
            "num_env_steps_added": self.totals["steps"],
            "num_episodes_evicted": self.totals["evicted_episodes"],
            "num_env_steps_evicted": self.totals["evicted_steps"],
            "agent_to_num_episodes_added": p["a_eps"],
            "agent_to_num_steps_added": p["a_steps"],
            "agent_to_num_episodes_evicted": p["a_ev"],
            "agent_to_num_steps_evicted": p["a_ev_steps"],
            "module_to_num_episodes_added": p["m_eps"],
            "module_to_num_steps_added": p["m_steps"],
            "module_to_num_episodes_evicted": p["m_ev"],
            "module_to_num_steps_evicted": p["m_ev_steps"],
        }


class _SampleMetrics:
    """What one independent ``sample`` drew, per agent and module, for RLlib's sample metrics."""

    def __init__(self) -> None:
        self.episodes: set = set()
        self.env_steps: set = set()
        self.n_steps: list[int] = []
        self.resamples = 0
        self.by = {
            k: {
                "steps": defaultdict(int),
                "episodes": defaultdict(set),
                "unique": defaultdict(set),
                "n": defaultdict(list),
            }
            for k in ("agent", "module")
        }
        self.resamples_by = {"agent": defaultdict(int), "module": defaultdict(int)}

    def module(self, module_id: Any, draws: list, rejected: list[StoredEpisode], records: dict) -> None:
        self.resamples += len(rejected)
        self.resamples_by["module"][module_id] += len(rejected)
        for stored in rejected:
            self.resamples_by["agent"][stored.agent_id] += 1
        for stored, t, n in draws:
            record = records[stored.multi_agent_episode_id]
            steps = record.env_to_agent[stored.agent_id]
            env_t = steps.index(stored.t_started + t) if stored.t_started + t in steps else -1
            self.episodes.add(record.id_)
            self.env_steps.add((record.id_, env_t))
            self.n_steps.append(n)
            for kind, key in (("agent", stored.agent_id), ("module", module_id)):
                by = self.by[kind]
                by["steps"][key] += 1
                by["episodes"][key].add(stored.id_)
                by["unique"][key].add((stored.id_, t))
                by["n"][key].append(n)

    def result(self, B: int) -> dict[str, Any]:
        out = {
            "num_env_steps_sampled": sum(self.by["module"]["steps"].values()),
            "num_episodes_per_sample": len(self.episodes),
            "num_env_steps_per_sample": len(self.env_steps),
            "sampled_n_step": sum(self.n_steps) / B,
            "num_resamples": self.resamples,
        }
        for kind, by in self.by.items():
            out[f"{kind}_to_num_steps_sampled"] = dict(by["steps"])
            out[f"{kind}_to_num_episodes_per_sample"] = {k: len(v) for k, v in by["episodes"].items()}
            out[f"{kind}_to_num_steps_per_sample"] = {k: len(v) for k, v in by["unique"].items()}
            out[f"{kind}_to_sampled_n_step"] = {k: sum(v) / len(v) for k, v in by["n"].items()}
            out[f"{kind}_to_num_resamples"] = {k: self.resamples_by[kind][k] for k in by["steps"]}
        return out
