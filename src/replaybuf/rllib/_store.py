"""One module's episodes in replaybuf columns: what RLlib's episode buffers keep as lists of
``SingleAgentEpisode`` objects.

An episode of length L owns L + 1 rows of a :class:`ColumnStorage` (observation leaves,
action leaves, reward): row t holds obs[t] and, for t < L, action[t] and reward[t] (the
reward after action t). Rows come from a free list, so chunks of one episode added far
apart (RLlib joins them by id) are written where they land, and an evicted episode's rows
serve the next ones: an add costs the same at any capacity. A sum tree over the rows holds
each step's priority ** alpha (0 on an episode's last row, which is no step), a min tree
the smallest (weights); a prioritized buffer's store alone has them. Uniform draws pick
among the step rows (``is_step``).
``infos`` and ``extra_model_outputs``, of any structure, stay Python objects beside the rows
(an empty info dict is not kept). A multi-agent buffer holds one store per module.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optree

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.samplers.sumtree import MinTree, SumTree
from replaybuf.specs import ArraySpec
from replaybuf.storages.columns import ColumnStorage

__all__ = ["Chunk", "EpisodeStore", "StoredEpisode"]

_REWARD = ArraySpec((), np.float64)
#: row indices (per-row step t, the free stack, an episode's rows): int32 halves their bytes a step;
#: a store of more than 2**31 - 1 rows is refused
ROW = np.int32
# what a state keeps of each episode beside its rows, in StoredEpisode's field order after rows and length
_RECORD = (
    "id_",
    "t_started",
    "terminated",
    "truncated",
    "agent_id",
    "module_id",
    "multi_agent_episode_id",
    "infos",
    "extras",
)


@dataclass(eq=False, slots=True)
class StoredEpisode:
    """An episode's bookkeeping: its rows (``rows[t]`` for t = 0..length; the array has room to
    grow, doubled when full, so 1-step chunks of a long episode cost O(1) each) and what has no fixed spec."""

    id_: Any
    ordinal: int
    rows: np.ndarray
    length: int
    t_started: int = 0
    terminated: bool = False
    truncated: bool = False
    agent_id: Any = None
    module_id: Any = None
    multi_agent_episode_id: Any = None
    infos: dict[int, Any] = field(default_factory=dict)  # t -> info, only the non-empty ones
    extras: dict[str, list] = field(default_factory=dict)  # key -> one value per step


@dataclass(eq=False)
class Chunk:
    """An incoming episode (or chunk of one), checked and flattened, not yet written."""

    episode: Any  # the SingleAgentEpisode it came from
    length: int
    observations: list[np.ndarray]  # leaves, [length + 1, ...]
    actions: list[np.ndarray]  # leaves, [length, ...]
    rewards: np.ndarray  # [length] float64
    infos: dict[int, Any]
    extras: dict[str, list]


def _is_empty_info(info: Any) -> bool:
    return info is None or (isinstance(info, dict) and not info)


def _spec_from_value(value: Any) -> Any:
    return optree.tree_map(lambda x: ArraySpec(np.shape(x), np.asarray(x).dtype), value)


class EpisodeStore:
    """Episodes by id (oldest first) over rows of columns; the priority trees over the rows."""

    def __init__(self, rows: int = 1024, prioritized: bool = False):
        self.prioritized = prioritized
        self.observation_space: Any = None
        self.action_space: Any = None
        self.obs_flat: FlatSpec | None = None
        self.act_flat: FlatSpec | None = None
        self.columns: ColumnStorage | None = None
        self.size = 0
        # int64 ordinals (they grow with every episode ever added); rows and steps as ROW (int32)
        self.row_owner = np.zeros(0, np.int64)  # the episode ordinal owning a row, -1 when free
        self.row_t = np.zeros(0, ROW)
        self.is_step = np.zeros(0, bool)  # a row holding a step (t < length) of a stored episode
        self.free = np.zeros(0, ROW)  # a stack of free rows: free[:n_free]
        self.n_free = 0
        self.sums = SumTree(1) if prioritized else None
        self.mins = MinTree(1) if prioritized else None
        self.episodes: dict[int, StoredEpisode] = {}  # ordinal -> episode, oldest first
        self.ordinals: dict[Any, int] = {}  # episode id -> ordinal
        self.next_ordinal = 0
        self.steps = 0
        self._equal_spaces: dict[tuple[int, int], tuple] = {}
        self.space_structs: tuple | None = None  # the spaces' RLlib structs (_episodes.one_step_episode)
        self._grow(max(int(rows), 16))

    # -- rows ----------------------------------------------------------------------------------
    def _grow(self, size: int) -> None:
        if size > np.iinfo(ROW).max:
            most = np.iinfo(ROW).max
            raise ArgumentError(f"capacity: a store holds at most {most} rows (steps + episodes), got {size}")
        old = self.size
        self.row_owner = np.concatenate([self.row_owner, np.full(size - old, -1, np.int64)])
        self.row_t = np.concatenate([self.row_t, np.zeros(size - old, ROW)])
        self.is_step = np.concatenate([self.is_step, np.zeros(size - old, bool)])
        free = np.zeros(size, ROW)  # the new rows below the old free ones: those go first
        free[: size - old] = np.arange(size - 1, old - 1, -1)
        free[size - old : size - old + self.n_free] = self.free[: self.n_free]
        self.free, self.n_free = free, self.n_free + size - old
        if self.prioritized:
            sums, mins = SumTree(size), MinTree(size)
            for new, now in ((sums, self.sums), (mins, self.mins)):
                new.levels[0][:old] = now.levels[0][:old]
                new.rebuild()
            self.sums, self.mins = sums, mins
        if self.columns is not None:
            columns = ColumnStorage(self.columns.leaves, size)
            for new, now in zip(columns.fields, self.columns.fields, strict=True):
                new[:old] = now
            self.columns = columns
        self.size = size

    def _alloc(self, n: int) -> np.ndarray:
        if n > self.n_free:
            self._grow(max(self.size + self.size // 8, self.size + n - self.n_free))  # 1.125x: rows cost memory
        self.n_free -= n
        return self.free[self.n_free : self.n_free + n][::-1].copy()

    def set_mass(self, rows: np.ndarray, mass: float | np.ndarray) -> None:
        """Sampling masses of step rows (0: not drawable), prioritized stores only."""
        if self.prioritized and len(rows):
            rows = np.asarray(rows, np.int64)  # the tree kernels' index type
            if np.ndim(mass) == 0:
                self.sums.update(rows, mass)  # the kernels broadcast one mass
                self.mins.update(rows, mass if mass > 0 else np.inf)
            else:
                self.sums.update(rows, mass)
                self.mins.update(rows, np.where(mass > 0, mass, np.inf))

    def _same_spaces(self, space: Any, stored: Any) -> bool:
        """``space == stored``, remembered per space object (a Box compares its bounds with
        allclose: too slow for every add of an env runner's episodes, which share their spaces)."""
        key = (id(space), id(stored))
        if key not in self._equal_spaces:
            if space != stored:
                return False
            self._equal_spaces[key] = (space, stored)  # held, so the ids stay theirs
        return True

    # -- adding --------------------------------------------------------------------------------
    def prepare(self, episodes: list, path: str = "episodes") -> list[Chunk]:
        """Check and flatten ``episodes`` (nothing is written): their spaces must match the
        stored ones (or the first episode's), a chunk of a stored episode must start where it ends."""
        obs_space, act_space = self.observation_space, self.action_space
        obs_flat, act_flat = self.obs_flat, self.act_flat
        ends: dict[Any, tuple[int, list]] = {}  # id -> (t, last observation leaves) of earlier chunks
        same = self._same_spaces
        done: dict[Any, bool] = {}
        chunks = []
        for i, eps in enumerate(episodes):
            where = f"{path}[{i}]"
            if not hasattr(eps, "get_observations") or not hasattr(eps, "concat_episode"):
                raise ArgumentError(f"{where}: expected a SingleAgentEpisode, got {type(eps).__name__}")
            for name, space, have in (
                ("observation_space", eps.observation_space, obs_space),
                ("action_space", eps.action_space, act_space),
            ):
                if space is not None and have is not None and space is not have and not same(space, have):
                    raise SpecMismatchError(f"{where}.{name}: expected {have} (the stored episodes'), got {space}")
            length = len(eps)
            observations = eps.get_observations(slice(0, None))
            actions = eps.get_actions(slice(0, None)) if length else []
            if obs_flat is None:
                obs_space = eps.observation_space
                first = (
                    observations[0] if isinstance(observations, list) else optree.tree_map(lambda x: x[0], observations)
                )
                obs_flat = FlatSpec(obs_space if obs_space is not None else _spec_from_value(first))
            if act_flat is None:
                act_space = eps.action_space
                if act_space is None and not length:
                    raise ArgumentError(f"{where}: the first episode needs an action_space or a step")
                first = (
                    None
                    if act_space is not None
                    else actions[0]
                    if isinstance(actions, list)
                    else optree.tree_map(lambda x: x[0], actions)
                )
                act_flat = FlatSpec(act_space if act_space is not None else _spec_from_value(first))
            obs_leaves = _leaves(obs_flat, observations, length + 1, f"{where}.observations")
            act_leaves = _leaves(act_flat, actions, length, f"{where}.actions")
            rewards = np.asarray(eps.get_rewards(slice(0, None)) if length else [], np.float64).reshape(-1)
            if rewards.shape != (length,) or not np.isfinite(rewards).all():
                raise SpecMismatchError(f"{where}.rewards: expected {length} finite numbers, got {rewards!r}")
            start = ends.get(eps.id_)
            if start is None and eps.id_ in self.ordinals:
                stored = self.episodes[self.ordinals[eps.id_]]
                if stored.terminated or stored.truncated:
                    raise ArgumentError(f"{where}: episode {eps.id_!r} is stored as done; no chunk can follow it")
                row = stored.rows[stored.length]
                start = (
                    stored.t_started + stored.length,
                    [f[row] for f in self.columns.fields[: len(obs_flat.leaves)]],
                )
            if start is not None:
                t, last = start
                if eps.t_started != t:
                    raise ArgumentError(
                        f"{where}: a chunk of episode {eps.id_!r} must start at t={t}, got t_started={eps.t_started}"
                    )
                if not all(np.array_equal(a, b[0]) for a, b in zip(last, obs_leaves, strict=True)):
                    raise ArgumentError(
                        f"{where}.observations[0]: a chunk of episode {eps.id_!r} must start with its last observation"
                    )
            if start is not None and done.get(eps.id_):
                raise ArgumentError(
                    f"{where}: an earlier chunk of episode {eps.id_!r} ended it; no chunk can follow it"
                )
            ends[eps.id_] = (eps.t_started + length, [leaf[-1] for leaf in obs_leaves])
            done[eps.id_] = eps.is_terminated or eps.is_truncated
            infos = {t: info for t, info in enumerate(eps.get_infos(slice(0, None))) if not _is_empty_info(info)}
            extras = (
                {k: list(eps.get_extra_model_outputs(k, slice(0, None))) for k in eps.extra_model_outputs}
                if length
                else {}
            )
            chunks.append(Chunk(eps, length, obs_leaves, act_leaves, rewards, infos, extras))
        if obs_flat is not None and self.obs_flat is None:  # the first episodes fix the specs
            self.observation_space, self.obs_flat = obs_space, obs_flat
        if act_flat is not None and self.act_flat is None:
            self.action_space, self.act_flat = act_space, act_flat
        return chunks

    def _ensure_columns(self) -> None:
        if self.columns is None:
            self.columns = ColumnStorage([*self.obs_flat.leaves, *self.act_flat.leaves, _REWARD], self.size)

    def append(self, chunk: Chunk, mass: float) -> tuple[StoredEpisode, bool, np.ndarray]:
        """Write a chunk (a new episode or the rest of a stored one); returns the episode,
        whether it is new, and the rows of its new steps (given ``mass``)."""
        self._ensure_columns()
        eps, n = chunk.episode, chunk.length
        nobs, nact = len(self.obs_flat.leaves), len(chunk.actions)
        ordinal = self.ordinals.get(eps.id_)
        new = ordinal is None
        if new:
            ordinal = self.next_ordinal
            self.next_ordinal += 1
            rows = self._alloc(n + 1)
            stored = StoredEpisode(
                eps.id_, ordinal, rows, n, eps.t_started, eps.is_terminated, eps.is_truncated,
                eps.agent_id, eps.module_id, getattr(eps, "multi_agent_episode_id", None), chunk.infos, chunk.extras,
            )  # fmt: skip
            self.episodes[ordinal] = stored
            self.ordinals[eps.id_] = ordinal
            obs_rows, step_rows, first_t = rows, rows[:n], 0
        else:
            stored = self.episodes[ordinal]
            added = self._alloc(n)
            first_t = stored.length
            if len(stored.rows) < first_t + 1 + n:
                grown = np.zeros(max(2 * len(stored.rows), first_t + 1 + n), ROW)
                grown[: first_t + 1] = stored.rows[: first_t + 1]
                stored.rows = grown
            stored.rows[first_t + 1 : first_t + 1 + n] = added
            obs_rows, step_rows = added, stored.rows[first_t : first_t + n]
            chunk.observations = [leaf[1:] for leaf in chunk.observations]
            stored.infos.pop(first_t, None)  # the chunk's first info replaces the stored last one
            for t, info in chunk.infos.items():
                stored.infos[first_t + t] = info
            for key, values in chunk.extras.items():
                stored.extras.setdefault(key, [None] * first_t).extend(values)
            stored.length += n
            stored.terminated, stored.truncated = eps.is_terminated, eps.is_truncated
        fields = self.columns.fields  # after _alloc, which may have grown the columns
        for leaf, values in zip(fields[:nobs], chunk.observations, strict=True):
            leaf[obs_rows] = values
        for leaf, values in zip(fields[nobs : nobs + nact], chunk.actions, strict=True):
            leaf[step_rows] = values
        fields[-1][step_rows] = chunk.rewards
        self.row_owner[obs_rows] = ordinal
        self.row_t[obs_rows] = np.arange(len(obs_rows)) + (first_t + 1 if not new else 0)
        self.is_step[step_rows] = True
        self.set_mass(step_rows, mass)  # a new last row is a free one: mass 0 already
        self.steps += n
        return stored, new, step_rows

    def evict_oldest(self) -> StoredEpisode:
        """Drop the oldest episode, freeing its rows."""
        return self.remove(next(iter(self.episodes)))

    def remove(self, ordinal: int) -> StoredEpisode:
        """Drop one episode (a multi-agent buffer evicts a module's episodes by id), freeing its rows."""
        stored = self.episodes.pop(ordinal)
        del self.ordinals[stored.id_]
        rows = stored.rows[: stored.length + 1]
        self.set_mass(rows, 0.0)
        self.is_step[rows] = False
        self.row_owner[rows] = -1
        self.free[self.n_free : self.n_free + len(rows)] = rows[::-1]
        self.n_free += len(rows)
        self.steps -= stored.length
        return stored

    # -- reading -------------------------------------------------------------------------------
    def total(self) -> float:
        return self.sums.root()

    def draw_uniform(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` step rows, each step equally likely (drawn with replacement)."""
        if self.steps == 0:
            raise EmptyBufferError("sample: the buffer holds no timestep to sample")
        if 4 * self.steps < self.size:  # few rows hold steps: pick among them
            return np.flatnonzero(self.is_step)[rng.integers(self.steps, size=n)]
        out = np.empty(0, np.int64)
        while len(out) < n:  # rows drawn uniformly, those holding no step drawn again
            rows = rng.integers(self.size, size=2 * (n - len(out)) + 8)
            out = np.concatenate([out, rows[self.is_step[rows]]])
        return out[:n]

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` step rows drawn in proportion to their mass, and those masses."""
        total = self.sums.root()
        if not total > 0:
            raise EmptyBufferError("sample: the buffer holds no timestep to sample")
        slots, mass = np.empty(n, np.int64), np.empty(n)
        targets = rng.random(n) * total
        self.sums.kernels.find(self.sums.tree, self.sums.offsets, self.sums.arity, targets, slots, mass)
        return slots, mass

    def read(self, rows: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Observation leaves, action leaves and rewards at ``rows``."""
        leaves = self.columns.read(np.asarray(rows, np.int64))
        nobs = len(self.obs_flat.leaves)
        return leaves[:nobs], leaves[nobs:-1], leaves[-1]

    def observation(self, leaves: list[np.ndarray], i: Any) -> Any:
        return self.obs_flat.unflatten([leaf[i] for leaf in leaves])

    def action(self, leaves: list[np.ndarray], i: Any) -> Any:
        return self.act_flat.unflatten([leaf[i] for leaf in leaves])

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict:
        """Plain state (arrays, numbers, one pickled blob for what has no fixed spec). Rows,
        ordinals and the free list are kept as they are, so a restored buffer draws what this one would."""
        episodes = list(self.episodes.values())
        rows = np.concatenate([e.rows[: e.length + 1] for e in episodes]) if episodes else np.zeros(0, np.int64)
        columns = self.columns.read(rows) if self.columns is not None else []
        objects = {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "obs_spec": self.obs_flat.data_spec if self.obs_flat is not None else None,
            "act_spec": self.act_flat.data_spec if self.act_flat is not None else None,
            "episodes": [tuple(getattr(e, name) for name in _RECORD) for e in episodes],
        }
        return {
            "size": self.size,
            "next_ordinal": self.next_ordinal,
            "ordinals": np.array([e.ordinal for e in episodes], np.int64),
            "lengths": np.array([e.length for e in episodes], np.int64),
            "rows": rows,
            "free": self.free[: self.n_free].copy(),
            "columns": {str(i): leaf for i, leaf in enumerate(columns)},
            "mass": self.sums.values(rows).copy() if self.prioritized else np.zeros(0),
            "objects": np.frombuffer(pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL), np.uint8).copy(),
        }

    def load(self, state: dict) -> None:
        """Replace everything with a ``state()``'s episodes (checked first: CheckpointError, nothing changed)."""
        try:
            objects = pickle.loads(np.asarray(state["objects"], np.uint8).tobytes())
            size, next_ordinal = int(state["size"]), int(state["next_ordinal"])
            ordinals, lengths, rows, free = (
                np.asarray(state[k], np.int64) for k in ("ordinals", "lengths", "rows", "free")
            )
            columns = [np.asarray(state["columns"][str(i)]) for i in range(len(state["columns"]))]
            mass = np.asarray(state["mass"], np.float64)
            records = objects["episodes"]
        except (KeyError, TypeError, ValueError, pickle.UnpicklingError) as err:
            raise CheckpointError(f"state: not a replaybuf.rllib buffer state ({err!r})") from None
        total = int((lengths + 1).sum())
        every = np.concatenate([rows, free])
        if (
            len(records) != len(lengths) != len(ordinals)
            or rows.shape != (total,)
            or mass.shape != ((total,) if self.prioritized else (0,))
            or any(c.shape[0] != total for c in columns)
            or every.shape != (size,)
            or not np.array_equal(np.sort(every), np.arange(size))
            or len(set(ordinals.tolist())) != len(ordinals)
            or (len(ordinals) and (ordinals.min() < 0 or ordinals.max() >= next_ordinal))
        ):
            raise CheckpointError(f"state: {len(lengths)} episodes of {total} rows in {size}, but the arrays disagree")
        fresh = EpisodeStore(size, self.prioritized)
        fresh.observation_space, fresh.action_space = objects["observation_space"], objects["action_space"]
        if objects["obs_spec"] is not None:
            fresh.obs_flat = FlatSpec(objects["obs_spec"])
            fresh.act_flat = FlatSpec(objects["act_spec"])
            fresh._ensure_columns()
            for leaf, values in zip(fresh.columns.fields, columns, strict=True):
                leaf[rows] = values
        fresh.free[: len(free)], fresh.n_free = free, len(free)
        fresh.next_ordinal = next_ordinal
        start = 0
        for ordinal, length, record in zip(ordinals.tolist(), lengths.tolist(), records, strict=True):
            own = rows[start : start + length + 1].astype(ROW)
            stored = StoredEpisode(None, ordinal, own, length)
            for name, value in zip(_RECORD, record, strict=True):
                setattr(stored, name, value)
            fresh.episodes[ordinal] = stored
            fresh.ordinals[stored.id_] = ordinal
            fresh.row_owner[own] = ordinal
            fresh.row_t[own] = np.arange(length + 1)
            fresh.is_step[own[:-1]] = True
            fresh.steps += length
            start += length + 1
        fresh.set_mass(rows, mass)
        self.__dict__.update(fresh.__dict__)


def _leaves(flat: FlatSpec, values: Any, n: int, path: str) -> list[np.ndarray]:
    """The leaves of ``n`` values (a list of nests, or one nest of arrays batched along axis 0),
    checked against ``flat``."""
    if n == 0:
        return [np.zeros((0, *spec.shape), spec.dtype) for spec in flat.leaves]
    try:
        if isinstance(values, list):
            if len(values) != n:
                raise SpecMismatchError(f"expected {n} values, got {len(values)}")
            per_item = [flat.flatten(v) for v in values]
            stacked = [np.stack([np.asarray(x) for x in column]) for column in zip(*per_item, strict=True)]
            return flat.checked_batch(flat.unflatten(stacked), n)
        return flat.checked_batch(values, n)
    except SpecMismatchError as err:
        raise SpecMismatchError(f"{path}: {err}") from None
    except ValueError as err:  # np.stack of differing shapes
        raise SpecMismatchError(f"{path}: values of differing shapes ({err})") from None
