"""One module's episodes in replaybuf columns: what RLlib's episode buffers keep as lists of
``SingleAgentEpisode`` objects.

An episode of length L owns L + 1 rows of a :class:`ColumnStorage` (observation leaves,
action leaves, reward): row t holds obs[t] and, for t < L, action[t] and reward[t] (the
reward after action t). Rows come from a free list, so chunks of one episode added far
apart (RLlib joins them by id) are written where they land, and an evicted episode's rows
serve the next ones: an add costs the same at any capacity. A sum tree over the rows holds
each step's priority ** alpha (0 on an episode's last row, which is no step), a min tree
over blocks of its leaves the smallest (weights); a prioritized buffer's store alone has
them. Uniform draws pick among the step rows (``is_step``).
``infos`` and ``extra_model_outputs``, of any structure, stay Python objects beside the rows
(an empty info dict is not kept; an episode without any shares one empty mapping). A
multi-agent buffer holds one store per module.

Memory (docs/rllib.md, "Measured"): a row costs its columns (integer leaves narrowed:
``_columns.py``) plus 17 bytes of bookkeeping (int32 owner and step, a bool, the float64 sum
tree's leaf) and ~0.6 of min tree; rows never used yet are free without a stack entry
(``fresh``: every row from there on), so the free stack holds only the rows evicted episodes
gave back.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import optree

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, PriorityError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.rllib._columns import Columns
from replaybuf.samplers.sumtree import MinTree, SumTree
from replaybuf.specs import ArraySpec

__all__ = ["MAX_RESAMPLES", "Chunk", "EpisodeStore", "StoredEpisode", "n_step_draws"]

MAX_RESAMPLES = 1000  # draws in a row that cannot cover their n-step before sample gives up
MIN_PRIORITY = 1e-12  # RLlib's floor for a priority given to update_priorities

_REWARD = ArraySpec((), np.float64)
#: row indices (per-row step t, the free stack, an episode's rows) and episode ordinals (the
#: row owners): int32 halves their bytes a step; a store of more than 2**31 - 1 rows is refused,
#: ordinals wrap past LAST_ORDINAL (skipping any still stored)
ROW = np.int32
LAST_ORDINAL = int(np.iinfo(ROW).max)
#: the min tree keeps one minimum per block of this many rows (the sum tree's leaves hold the
#: masses themselves): a row costs 1/16 of a float64 there instead of a leaf of its own
_MIN_BLOCK = 16
#: ``infos`` / ``extras`` of an episode without any (one shared mapping instead of two dicts each)
_EMPTY: Any = MappingProxyType({})
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
    """An episode's bookkeeping: its rows (``row(t)``, ``rows[t]`` for t = 0..length) and what
    has no fixed spec. While its rows are consecutive (most are: rows are taken in a ring's
    order) it keeps the first alone, else ``spread`` holds them (room to grow, doubled when
    full, so 1-step chunks of a long episode cost O(1) each)."""

    id_: Any
    ordinal: int
    first: int  # its first row (row(t) = first + t while spread is None)
    length: int
    t_started: int = 0
    terminated: bool = False
    truncated: bool = False
    agent_id: Any = None
    module_id: Any = None
    multi_agent_episode_id: Any = None
    infos: Any = field(default_factory=lambda: _EMPTY)  # t -> info, only the non-empty ones (a dict once there is one)
    extras: Any = field(default_factory=lambda: _EMPTY)  # key -> one value per step (a dict once there is one)
    spread: Any = None  # its rows (ROW array) once they are not consecutive

    @property
    def rows(self) -> np.ndarray:
        """Its rows, ``rows[t]`` for t = 0..length (to read; a spread array may be longer)."""
        if self.spread is None:
            return np.arange(self.first, self.first + self.length + 1, dtype=ROW)
        return self.spread

    def row(self, t: int) -> int:
        """The row of step ``t``."""
        return self.first + t if self.spread is None else int(self.spread[t])


@dataclass(eq=False)
class Chunk:
    """An incoming episode (or chunk of one), checked and flattened, not yet written."""

    episode: Any  # the SingleAgentEpisode it came from
    length: int
    observations: list[np.ndarray]  # leaves, [length + 1, ...]
    actions: list[np.ndarray]  # leaves, [length, ...]
    rewards: np.ndarray  # [length] float64
    infos: Any  # dict[int, Any] or _EMPTY
    extras: Any  # dict[str, list] or _EMPTY


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
        self.columns: Columns | None = None
        self.size = 0
        # ordinals, rows and steps as ROW (int32)
        self.row_owner = np.zeros(0, ROW)  # the episode ordinal owning a row, -1 when free
        self.row_t = np.zeros(0, ROW)
        self.is_step = np.zeros(0, bool)  # a row holding a step (t < length) of a stored episode
        # free rows, taken in this order: a queue of those evicted episodes gave back
        # (free[head:tail], first given back first taken: a ring's order, so an episode added
        # step by step gets consecutive rows), then every row from ``fresh`` on (never used)
        self.free = np.zeros(16, ROW)
        self.head = self.tail = 0
        self.fresh = 0
        self.sums = SumTree(1) if prioritized else None
        self.mins = MinTree(1) if prioritized else None  # per _MIN_BLOCK rows of the sum tree's leaves
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
        self.row_owner = np.concatenate([self.row_owner, np.full(size - old, -1, ROW)])
        self.row_t = np.concatenate([self.row_t, np.zeros(size - old, ROW)])
        self.is_step = np.concatenate([self.is_step, np.zeros(size - old, bool)])
        if self.prioritized:
            sums = SumTree(size)
            sums.levels[0][:old] = self.sums.levels[0][:old]
            sums.rebuild()
            blocks = sums.levels[0].reshape(-1, _MIN_BLOCK)  # a view: leaves come padded to the tree's arity, 16
            mins = MinTree(len(blocks))
            mins.levels[0][: len(blocks)] = _block_minima(blocks)
            mins.rebuild()
            self.sums, self.mins = sums, mins
        if self.columns is not None:
            self.columns = self.columns.grown(size)
        self.size = size

    def _alloc(self, n: int) -> np.ndarray:
        queued = self.tail - self.head
        short = n - queued - (self.size - self.fresh)
        if short > 0:
            self._grow(max(self.size + self.size // 8, self.size + short))  # 1.125x: rows cost memory
        take = min(n, queued)
        rows = np.empty(n, ROW)
        rows[:take] = self.free[self.head : self.head + take]
        self.head += take
        rows[take:] = np.arange(self.fresh, self.fresh + n - take)
        self.fresh += n - take
        return rows

    def _release(self, rows: np.ndarray) -> None:
        """Queue freed rows (``rows[0]`` taken first of them, after those queued before)."""
        queued = self.tail - self.head
        if self.tail + len(rows) > len(self.free):  # to the front, and grown if still short
            free = np.zeros(max(len(self.free), 2 * (queued + len(rows))), ROW)
            free[:queued] = self.free[self.head : self.tail]
            self.free, self.head, self.tail = free, 0, queued
        self.free[self.tail : self.tail + len(rows)] = rows
        self.tail += len(rows)

    def _load_free(self, free: np.ndarray, fresh: int | None) -> None:
        """Take a ``free_rows()`` stack whose bottom ``size - fresh`` rows are the fresh ones (a
        state saved before ``fresh`` was kept: its whole bottom run size - 1, size - 2, ...)."""
        if fresh is None:
            differs = np.flatnonzero(free != np.arange(self.size - 1, self.size - 1 - len(free), -1))
            fresh = self.size - (int(differs[0]) if len(differs) else len(free))
        bottom = self.size - fresh
        self.fresh = fresh
        self.head = self.tail = 0
        self._release(np.asarray(free[bottom:][::-1], ROW))

    def free_rows(self) -> np.ndarray:
        """Every free row as one stack in the checkpoint's form (bottom first; the top is taken first)."""
        fresh = np.arange(self.size - 1, self.fresh - 1, -1, dtype=ROW)
        return np.concatenate([fresh, self.free[self.head : self.tail][::-1]])

    def set_mass(self, rows: np.ndarray, mass: float | np.ndarray) -> None:
        """Sampling masses of step rows (0: not drawable), prioritized stores only."""
        if self.prioritized and len(rows):
            rows = np.asarray(rows, np.int64)  # the tree kernels' index type
            self.sums.update(rows, mass)  # the kernels broadcast one mass
            blocks = rows // _MIN_BLOCK
            if len(blocks) > 1:
                blocks = np.unique(blocks)
            self.mins.update(blocks, _block_minima(self.sums.levels[0].reshape(-1, _MIN_BLOCK)[blocks]))

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
                row = stored.row(stored.length)
                start = (
                    stored.t_started + stored.length,
                    [self.columns.row(i, row) for i in range(len(obs_flat.leaves))],
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
            chunks.append(Chunk(eps, length, obs_leaves, act_leaves, rewards, infos or _EMPTY, extras or _EMPTY))
        if obs_flat is not None and self.obs_flat is None:  # the first episodes fix the specs
            self.observation_space, self.obs_flat = obs_space, obs_flat
        if act_flat is not None and self.act_flat is None:
            self.action_space, self.act_flat = act_space, act_flat
        return chunks

    def _ensure_columns(self) -> None:
        if self.columns is None:
            self.columns = Columns([*self.obs_flat.leaves, *self.act_flat.leaves, _REWARD], self.size)

    def append(self, chunk: Chunk, mass: float) -> tuple[StoredEpisode, bool, np.ndarray]:
        """Write a chunk (a new episode or the rest of a stored one); returns the episode,
        whether it is new, and the rows of its new steps (given ``mass``)."""
        self._ensure_columns()
        eps, n = chunk.episode, chunk.length
        nobs, nact = len(self.obs_flat.leaves), len(chunk.actions)
        ordinal = self.ordinals.get(eps.id_)
        new = ordinal is None
        if new:
            ordinal = self._new_ordinal()
            rows = self._alloc(n + 1)
            stored = StoredEpisode(
                eps.id_, ordinal, int(rows[0]), n, eps.t_started, eps.is_terminated, eps.is_truncated,
                eps.agent_id, eps.module_id, getattr(eps, "multi_agent_episode_id", None), chunk.infos, chunk.extras,
                None if _consecutive(rows) else rows,
            )  # fmt: skip
            self.episodes[ordinal] = stored
            self.ordinals[eps.id_] = ordinal
            obs_rows, step_rows, first_t = rows, rows[:n], 0
        else:
            stored = self.episodes[ordinal]
            added = self._alloc(n)
            first_t = stored.length
            if n and (stored.spread is not None or added[0] != stored.first + first_t + 1 or not _consecutive(added)):
                if stored.spread is None or len(stored.spread) < first_t + 1 + n:
                    grown = np.zeros(max(2 * (first_t + 1), first_t + 1 + n), ROW)
                    grown[: first_t + 1] = stored.rows[: first_t + 1]
                    stored.spread = grown
                stored.spread[first_t + 1 : first_t + 1 + n] = added
            stored.length += n
            obs_rows, step_rows = added, stored.rows[first_t : first_t + n]
            chunk.observations = [leaf[1:] for leaf in chunk.observations]
            if first_t in stored.infos or chunk.infos:
                if stored.infos is _EMPTY:
                    stored.infos = {}
                stored.infos.pop(first_t, None)  # the chunk's first info replaces the stored last one
                for t, info in chunk.infos.items():
                    stored.infos[first_t + t] = info
            if chunk.extras:
                if stored.extras is _EMPTY:
                    stored.extras = {}
                for key, values in chunk.extras.items():
                    stored.extras.setdefault(key, [None] * first_t).extend(values)
            stored.terminated, stored.truncated = eps.is_terminated, eps.is_truncated
        columns = self.columns  # after _alloc, which may have grown them
        for i, values in enumerate(chunk.observations):
            columns.write(i, obs_rows, values)
        for i, values in enumerate(chunk.actions, nobs):
            columns.write(i, step_rows, values)
        columns.write(nobs + nact, step_rows, chunk.rewards)
        self.row_owner[obs_rows] = ordinal
        self.row_t[obs_rows] = np.arange(len(obs_rows)) + (first_t + 1 if not new else 0)
        self.is_step[step_rows] = True
        self.set_mass(step_rows, mass)  # a new last row is a free one: mass 0 already
        self.steps += n
        return stored, new, step_rows

    def _new_ordinal(self) -> int:
        """The next ordinal not held by a stored episode (they wrap past LAST_ORDINAL)."""
        ordinal = self.next_ordinal
        while ordinal in self.episodes:
            ordinal = ordinal + 1 if ordinal < LAST_ORDINAL else 0
        self.next_ordinal = ordinal + 1 if ordinal < LAST_ORDINAL else 0
        return ordinal

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
        self._release(rows)
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

    def draw_fitting(
        self, rng: np.random.Generator, count: int, n_step: Any, prioritized: bool, who: str = ""
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``count`` step rows whose episode holds their n-step after them (drawn by mass, or
        uniformly), their masses (1 when uniform), n-steps, and the rows drawn that did not fit
        (drawn again, as RLlib does; EmptyBufferError past MAX_RESAMPLES a row)."""
        rows, masses, ns, rejected = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64)
        while len(rows) < count:
            want = count - len(rows)
            drawn, mass = self.draw(rng, want) if prioritized else (self.draw_uniform(rng, want), np.ones(want))
            n = n_step_draws(rng, n_step, want)
            fits = self.fits(drawn, n)
            rejected = np.concatenate([rejected, drawn[~fits]])
            if len(rejected) > MAX_RESAMPLES * count:
                raise EmptyBufferError(
                    f"sample: no stored timestep{who} is followed by n_step={n_step!r} steps of its episode"
                )
            rows, masses, ns = (np.concatenate([a, b[fits]]) for a, b in ((rows, drawn), (masses, mass), (ns, n)))
        return rows, masses, ns, rejected

    def reprioritize(self, rows: np.ndarray, owners: np.ndarray, priorities: np.ndarray, alpha: float) -> float:
        """Masses ``priorities ** alpha`` (floored at MIN_PRIORITY, as RLlib does) for drawn
        ``rows`` still held by the episodes that held them (``owners``), the others skipped;
        the largest priority (0.0: none). Non-finite ones: PriorityError, nothing changed."""
        if not np.isfinite(priorities).all():
            bad = priorities[~np.isfinite(priorities)][:3].tolist()
            raise PriorityError(f"priorities: expected finite numbers, got {bad}")
        values = np.maximum(priorities, MIN_PRIORITY)
        live = self.row_owner[rows] == owners
        self.set_mass(rows[live], values[live] ** alpha)
        return float(values.max()) if values.size else 0.0

    def fits(self, rows: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Whether each row's episode holds ``n`` steps from it on."""
        episodes = self.episodes
        lengths = np.array([episodes[o].length for o in self.row_owner[rows].tolist()], np.int64)
        return self.row_t[rows] + n <= lengths

    def locate(self, rows: np.ndarray) -> tuple[list[StoredEpisode], list[int]]:
        """The episode and step of each row."""
        episodes = self.episodes
        return [episodes[o] for o in self.row_owner[rows].tolist()], self.row_t[rows].tolist()

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
            "episodes": [_record(e) for e in episodes],
        }
        return {
            "size": self.size,
            "next_ordinal": self.next_ordinal,
            "ordinals": np.array([e.ordinal for e in episodes], np.int64),
            "lengths": np.array([e.length for e in episodes], np.int64),
            "rows": rows,
            "free": self.free_rows(),
            "fresh": self.fresh,
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
            fresh = int(state["fresh"]) if "fresh" in state else None  # absent before 2026-11-29
            records = objects["episodes"]
        except (KeyError, TypeError, ValueError, pickle.UnpicklingError) as err:
            raise CheckpointError(f"state: not a replaybuf.rllib buffer state ({err!r})") from None
        total = int((lengths + 1).sum())
        every = np.concatenate([rows, free])
        if (
            not len(records) == len(lengths) == len(ordinals)
            or rows.shape != (total,)
            or mass.shape != ((total,) if self.prioritized else (0,))
            or any(c.shape[0] != total for c in columns)
            or every.shape != (size,)
            or not np.array_equal(np.sort(every), np.arange(size))
            or len(set(ordinals.tolist())) != len(ordinals)
            or (len(ordinals) and (ordinals.min() < 0 or ordinals.max() > LAST_ORDINAL))
            or not 0 <= next_ordinal <= LAST_ORDINAL
            or (fresh is not None and not 0 <= fresh <= size)
            or (fresh is not None and not np.array_equal(free[: size - fresh], np.arange(size - 1, fresh - 1, -1)))
        ):
            raise CheckpointError(f"state: {len(lengths)} episodes of {total} rows in {size}, but the arrays disagree")
        store = EpisodeStore(size, self.prioritized)
        store.observation_space, store.action_space = objects["observation_space"], objects["action_space"]
        if objects["obs_spec"] is not None:
            store.obs_flat = FlatSpec(objects["obs_spec"])
            store.act_flat = FlatSpec(objects["act_spec"])
            store._ensure_columns()
            if len(columns) != len(store.columns.fields):
                raise CheckpointError(
                    f"state: {len(columns)} columns, but its specs have {len(store.columns.fields)} leaves"
                )
            for i, values in enumerate(columns):
                store.columns.write(i, rows, values)
        store._load_free(free, fresh)
        store.next_ordinal = next_ordinal
        start = 0
        for ordinal, length, record in zip(ordinals.tolist(), lengths.tolist(), records, strict=True):
            own = rows[start : start + length + 1].astype(ROW)
            stored = StoredEpisode(None, ordinal, int(own[0]), length, spread=None if _consecutive(own) else own)
            for name, value in zip(_RECORD, record, strict=True):
                setattr(stored, name, _EMPTY if name in ("infos", "extras") and not value else value)
            store.episodes[ordinal] = stored
            store.ordinals[stored.id_] = ordinal
            store.row_owner[own] = ordinal
            store.row_t[own] = np.arange(length + 1)
            store.is_step[own[:-1]] = True
            store.steps += length
            start += length + 1
        store.set_mass(rows, mass)
        self.__dict__.update(store.__dict__)


def checked_beta(beta: Any) -> float:
    """``sample``'s ``beta`` (None: 0.0), a number >= 0 (else ArgumentError)."""
    if beta is None:
        return 0.0
    if not (isinstance(beta, (int, float, np.floating)) and beta >= 0):
        raise ArgumentError(f"beta: expected a number >= 0, got {beta!r}")
    return float(beta)


def n_step_draws(rng: np.random.Generator, n_step: Any, count: int) -> np.ndarray:
    """``count`` n-steps: ``n_step`` itself (an int, None for 1), or drawn from ``[low, high)``
    when it is a tuple (RLlib's range convention: the high end is never drawn)."""
    if isinstance(n_step, (tuple, list)):
        if len(n_step) != 2 or not 1 <= int(n_step[0]) < int(n_step[1]):
            raise ArgumentError(
                f"n_step: expected an int >= 1 or a range (low, high) with 1 <= low < high, got {n_step!r}"
            )
        return rng.integers(int(n_step[0]), int(n_step[1]), size=count)
    n = 1 if n_step is None else n_step
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ArgumentError(f"n_step: expected an int >= 1 or a range (low, high), got {n_step!r}")
    return np.full(count, int(n), np.int64)


def _consecutive(rows: np.ndarray) -> bool:
    """Whether ``rows`` run one by one upward."""
    return int(rows[-1]) - int(rows[0]) == len(rows) - 1 and (len(rows) < 3 or bool((np.diff(rows) == 1).all()))


def _record(stored: StoredEpisode) -> tuple:
    """What a state keeps of an episode beside its rows (the shared empty mapping as a dict)."""
    return tuple(dict(v) if v is _EMPTY else v for v in (getattr(stored, name) for name in _RECORD))


def _block_minima(blocks: np.ndarray) -> np.ndarray:
    """The smallest positive mass of each ``[n, _MIN_BLOCK]`` block of sum tree leaves (inf: none)."""
    return np.where(blocks > 0, blocks, np.inf).min(axis=1)


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
