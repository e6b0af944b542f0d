"""The functional core: a frozen buffer description and pure functions over a state pytree.

``make_buffer(data_spec, batch_size, max_length, ...)`` returns a ``Buffer``: frozen and
hashable (so it is a static argument of ``jax.jit``), with ``init()``, ``add(state, batch)``,
``sample(state, key, sample_batch_size, num_steps)``, ``add_and_sample``,
``update_priorities(state, ids, priorities)`` and ``can_sample(state, num_steps)``. The state
is a ``BufferState`` NamedTuple; every function works under ``jax.jit``, ``jax.vmap`` (one
buffer per seed) and inside ``lax.scan``.

Layout and ids (as every replaybuf backend): step ``t`` of stream ``s`` has id
``t * batch_size + s`` and lives in slot ``id % capacity``; storage is time-major,
``[max_length, batch_size, words]``: each item's leaves packed side by side in one row of
uint32 words (``replaybuf.jax.rows``), so one add is one contiguous write and a sample one
row gather for all leaves. ``Buffer.stored(state)`` unpacks it into one array per leaf.

Inside jit nothing can raise on values, so bad values have defined results:
- a sample from a buffer with no valid window returns ``info.valid == False`` (items are
  whatever the slots hold, probabilities 0);
- ``update_priorities`` drops ids never added (or negative) and non-finite or non-positive
  priorities and counts them in ``state.priorities.dropped``; ids already overwritten are
  ignored (a stale id names nothing), as in the NumPy buffer.
Errors found while tracing (structure, shapes, dtypes) raise replaybuf's own exceptions.
With ``checked=True`` the two value faults above are also ``checkify`` checks, and
``replaybuf.jax.checked(fn)`` raises them as replaybuf's errors outside jit (checked.py).

Donation (docs/jax.md): jit ``add`` / ``add_and_sample`` / a training step with the state
donated (``donate_argnums``), and write before you read in one step; otherwise XLA copies
the whole storage on every add.
"""

from __future__ import annotations

import dataclasses
import functools
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import checkify

from replaybuf.buffers.stream import reject_unused
from replaybuf.errors import ArgumentError, SpecMismatchError
from replaybuf.jax.bits import random_bits, random_uniform
from replaybuf.jax.rows import RowLayout, pieces_of, row_layout, unpack
from replaybuf.jax.sequences import sequence_windows
from replaybuf.jax.sumtree import Trees, masked_descend, per_platform, tree_descend, tree_init, tree_update
from replaybuf.nest import FlatSpec
from replaybuf.samplers.choice import check_sampler
from replaybuf.samplers.episodes import episode_marker
from replaybuf.samplers.prioritized import check_exponents, first_ids_of, is_number
from replaybuf.samplers.sequences import check_sequence_arguments

__all__ = [
    "Buffer",
    "BufferState",
    "EpisodeOptions",
    "EpisodeState",
    "PriorityOptions",
    "PriorityState",
    "DrawInfo",
    "make_buffer",
]

_FIRST, _LAST = 0, 2  # StepType


class EpisodeState(NamedTuple):
    position: jax.Array  # int32 [max_length, batch_size]: each stored step's position in its episode
    next_position: jax.Array  # int32 [batch_size]: the position the next added step gets
    valid_starts: jax.Array  # int32 []: stored windows of EpisodeOptions.num_steps inside one episode


class PriorityState(NamedTuple):
    trees: Trees  # sum and min trees of (priority + epsilon) ** alpha per slot
    max_priority: jax.Array  # float32 []: what new items get
    dropped: jax.Array  # int32 []: update_priorities (and add) entries dropped as invalid
    # with episodes (episode_num_steps > 1): a sum tree whose leaf is the slot's mass when a
    # window of episode_num_steps starting there is stored inside one episode, else 0
    windows: Trees | None = None


class BufferState(NamedTuple):
    rows: jax.Array  # uint32 [max_length, batch_size, words]: each item's leaves packed (rows.py)
    steps: jax.Array  # steps added to every stream since init (id dtype: int64 under x64, else int32)
    episodes: EpisodeState | None
    priorities: PriorityState | None


class DrawInfo(NamedTuple):
    """What the pure core's ``sample`` returns beside the items (a pytree: every field an
    array, ``valid`` included, so it passes through ``jit``; the class on top turns it into
    ``replaybuf.SampleInfo``, the one info type of every buffer's ``get_next``).

    ids: ``[B, T]`` (``[B]`` without num_steps). probabilities: ``[B]``, the probability with
    which each element was drawn. weights: prioritized importance weights
    ``(P(i) / P_min) ** -beta`` ``[B]`` (None otherwise). valid: bool ``[B]``, False where
    nothing could be drawn (nothing stored, or no window of num_steps fits). mask: with
    ``pad_episode_ends`` and num_steps, bool ``[B, T]``: True where the step is real, False
    where it pads past the episode's end (its id and item repeat the last real one).
    Sequences (``sample_sequences``): ids and mask ``[B, burn_in + T]`` (the mask False also
    where the burn-in pads before the episode) and learn, bool like mask: the real learning steps.
    """

    ids: jax.Array
    probabilities: jax.Array
    weights: jax.Array | None
    valid: jax.Array
    mask: jax.Array | None = None
    learn: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class EpisodeOptions:
    """Episode-exact windows: ``marker`` is the index of the leaf that marks episode ends
    (``kind`` ``"done"``: nonzero ends; ``"step_type"``: LAST ends and FIRST starts;
    ``"next_step_type"``: LAST ends). ``num_steps``: the window length whose count of valid
    starts is kept on every add (other lengths count with one pass over the buffer per sample).
    ``candidates``: starts drawn per row and round. ``pad``: windows are drawn as without
    episodes and padded past the first step's episode end (``DrawInfo.mask``)."""

    marker: int
    kind: str
    num_steps: int = 1
    candidates: int = 4
    pad: bool = False


@dataclasses.dataclass(frozen=True)
class PriorityOptions:
    """Prioritized sampling: ``P(i) ~ (p_i + epsilon) ** alpha``, weights with ``beta``; a
    ``branching``-ary sum tree."""

    alpha: float = 0.6
    beta: float = 0.4
    epsilon: float = 1e-6
    branching: int = 8


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A buffer description (hashable); the functions over its state are its methods."""

    treedef: Any
    paths: tuple
    shapes: tuple
    dtypes: tuple  # storage dtypes: the spec's, through JAX's canonical dtypes (x64 off: 32-bit)
    batch_size: int
    max_length: int
    episodes: EpisodeOptions | None = None
    priorities: PriorityOptions | None = None
    checked: bool = False  # emit checkify checks for the value faults (see checked.py)

    @functools.cached_property
    def layout(self) -> RowLayout:
        """How an item's leaves lie in its row of ``BufferState.rows``."""
        return row_layout(self.shapes, self.dtypes)

    @property
    def capacity(self) -> int:
        return self.batch_size * self.max_length

    # -- init and add --------------------------------------------------------------------------
    def init(self) -> BufferState:
        """An empty state (storage zero-filled)."""
        rows = jnp.zeros((self.max_length, self.batch_size, self.layout.words), jnp.uint32)
        episodes = priorities = None
        if self.episodes is not None:
            episodes = EpisodeState(
                jnp.zeros((self.max_length, self.batch_size), jnp.int32),
                jnp.zeros((self.batch_size,), jnp.int32),
                jnp.zeros((), jnp.int32),
            )
        if self.priorities is not None:
            branching = self.priorities.branching
            windows = tree_init(self.capacity, branching, with_mins=False) if self._window_tree else None
            priorities = PriorityState(
                tree_init(self.capacity, branching), jnp.ones((), jnp.float32), jnp.zeros((), jnp.int32), windows
            )
        return BufferState(rows, jnp.zeros((), _id_dtype()), episodes, priorities)

    def add(self, state: BufferState, batch: Any, priorities: Any = None) -> BufferState:
        """Add one step to every stream: each leaf of ``batch`` shaped ``[batch_size, *shape]``.

        ``priorities`` (prioritized sampling): ``[batch_size]`` priorities of the new items;
        each raises ``max_priority``, which items added without get. Inside jit a priority
        that is NaN, infinite, zero or negative is replaced by ``max_priority`` and counted in
        ``state.priorities.dropped`` (checked mode: a ``PriorityError``).

        Raises (while tracing, nothing written): SpecMismatchError naming the field when the
        structure, a shape or a dtype does not match (only casts NumPy calls safe are taken);
        ArgumentError for ``priorities`` without prioritized sampling or not ``[batch_size]``.
        """
        leaves = self._check_batch(batch)
        given = None if priorities is None else self._check_added_priorities(priorities)
        t = state.steps
        row = (t % self.max_length).astype(jnp.int32)
        rows = state.rows
        for start, words in pieces_of(self.layout, leaves):  # each leaf's words written in place
            rows = lax.dynamic_update_slice(rows, words[None], (row, jnp.int32(0), jnp.int32(start)))
        episodes = state.episodes if self.episodes is None else self._add_episodes(state, leaves, row)
        priorities = state.priorities
        if priorities is not None:
            options = self.priorities
            values = jnp.full((self.batch_size,), priorities.max_priority)
            if given is not None:
                bad = ~jnp.isfinite(given) | (given <= 0)
                values = jnp.where(bad, values, given)
                priorities = priorities._replace(
                    max_priority=jnp.maximum(priorities.max_priority, jnp.max(values)),
                    dropped=priorities.dropped + jnp.sum(bad, dtype=jnp.int32),
                )
            slots = row * self.batch_size + jnp.arange(self.batch_size, dtype=jnp.int32)
            trees = tree_update(priorities.trees, slots, (values + options.epsilon) ** options.alpha)
            priorities = priorities._replace(trees=trees)
            if self._window_tree:
                priorities = priorities._replace(windows=self._decide_starts(priorities, episodes, t, slots))
        return BufferState(rows, t + 1, episodes, priorities)

    @property
    def _window_tree(self) -> bool:
        """Whether the state keeps a window tree (episodes, priorities, windows longer than 1)."""
        return self.priorities is not None and self._exact_episodes and self.episodes.num_steps > 1

    @property
    def _exact_episodes(self) -> bool:
        """Whether windows crossing an episode end are excluded (episodes, not padded)."""
        return self.episodes is not None and not self.episodes.pad

    def _decide_starts(self, priorities: PriorityState, episodes: EpisodeState, t: jax.Array, new: jax.Array):
        """The window tree after adding step ``t`` (slots ``new``): the new slots are no start
        yet (0); the starts whose window ends at step ``t`` are decided (their mass when the
        window lies inside one episode, else 0)."""
        span = self.episodes.num_steps - 1
        first = t - span
        row = (first % self.max_length).astype(jnp.int32) * self.batch_size
        starts = row + jnp.arange(self.batch_size)
        inside = lax.dynamic_index_in_dim(episodes.position, (t % self.max_length).astype(jnp.int32), 0, False) >= span
        masses = jnp.where(inside, lax.dynamic_slice_in_dim(priorities.trees.sums[-1], row, self.batch_size), 0.0)
        outside = priorities.trees.sums[-1].shape[0]  # an out-of-range slot: the update drops it
        # one update for both rows (distinct: 0 < span < max_length); two in a row made XLA copy
        # the levels, to keep the first update's reads apart from the second one's writes
        slots = jnp.concatenate([new, jnp.where(first >= 0, starts, outside)])
        return tree_update(priorities.windows, slots, jnp.concatenate([jnp.zeros_like(masses), masses]))

    def rebuild(self, state: BufferState) -> BufferState:
        """``state`` with what adds keep derived from the positions and priorities recomputed
        in one pass over the buffer (after a checkpoint is loaded): the count of valid starts
        of ``episode_num_steps`` and the window tree. Unchanged without episodes."""
        if self.episodes is None:
            return state
        mask = self._start_mask(state, self.episodes.num_steps)
        state = state._replace(episodes=state.episodes._replace(valid_starts=jnp.sum(mask, dtype=jnp.int32)))
        if not self._window_tree:
            return state
        leaves = state.priorities.trees.sums[-1][: self.capacity]
        empty = tree_init(self.capacity, self.priorities.branching, with_mins=False)
        slots = jnp.arange(self.capacity, dtype=jnp.int32)
        windows = tree_update(empty, slots, jnp.where(mask.ravel(), leaves, 0.0))
        return state._replace(priorities=state.priorities._replace(windows=windows))

    def _add_episodes(self, state: BufferState, leaves: list, row: jax.Array) -> EpisodeState:
        options, episodes, t = self.episodes, state.episodes, state.steps
        marker = leaves[options.marker]
        if options.kind == "step_type":
            starts, ends = marker == _FIRST, marker == _LAST
        elif options.kind == "next_step_type":
            starts, ends = jnp.zeros(marker.shape, bool), marker == _LAST
        else:
            starts, ends = jnp.zeros(marker.shape, bool), marker != 0
        position = jnp.where(starts, 0, episodes.next_position)
        span = options.num_steps - 1
        positions = lax.dynamic_update_index_in_dim(episodes.position, position, row, axis=0)
        # The window ending at the dropped end (step t - L + span) leaves the count when the ring
        # is full. Its row is read from the written array (another row when span > 0; a read of
        # the old array would make XLA copy the whole array to keep both); span == 0: every
        # dropped step was a window of one.
        if span == 0:
            dropping = jnp.int32(self.batch_size)
        else:
            dropped_row = ((t - self.max_length + span) % self.max_length).astype(jnp.int32)
            dropped = lax.dynamic_index_in_dim(positions, dropped_row, axis=0, keepdims=False)
            dropping = jnp.sum(dropped >= span, dtype=jnp.int32)
        leaving = jnp.where(t >= self.max_length, dropping, 0)
        entering = jnp.sum(position >= span, dtype=jnp.int32)
        return EpisodeState(positions, jnp.where(ends, 0, position + 1), episodes.valid_starts + entering - leaving)

    def _check_added_priorities(self, priorities: Any) -> jax.Array:
        """An add's ``priorities`` as float32 ``[batch_size]``: ArgumentError (tracing) without
        prioritized sampling or of another shape; checked mode: a PriorityError check of the values."""
        if self.priorities is None:
            raise ArgumentError("priorities: expected None, this buffer was made without sampler='prioritized'")
        given = jnp.asarray(priorities)
        if given.shape != (self.batch_size,):
            raise ArgumentError(
                f"priorities: expected shape ({self.batch_size},) (one per item added), got {tuple(given.shape)}"
            )
        given = given.astype(jnp.float32)
        if self.checked:
            bad = ~jnp.isfinite(given) | (given <= 0)
            checkify.check(
                ~jnp.any(bad),
                "PriorityError: priorities: expected finite values > 0, got {value} at position {position}",
                value=given[jnp.argmax(bad)],
                position=jnp.argmax(bad),
            )
        return given

    def _check_batch(self, batch: Any) -> list:
        leaves, treedef = jax.tree_util.tree_flatten(batch)
        if treedef != self.treedef:
            raise SpecMismatchError(f"items: expected the structure of the data_spec {self.treedef}, got {treedef}")
        out = []
        for path, shape, dtype, leaf in zip(self.paths, self.shapes, self.dtypes, leaves, strict=True):
            # JAX's own convention: with x64 off, a 64-bit input is its 32-bit canonical dtype
            given = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
            leaf_dtype = np.dtype(jax.dtypes.canonicalize_dtype(given))
            want = (self.batch_size, *shape)
            if tuple(np.shape(leaf)) != want:
                raise SpecMismatchError(
                    f"{path}: expected shape {want} {dtype.name} ([batch_size] + spec shape), "
                    f"got {tuple(np.shape(leaf))} {leaf_dtype.name}"
                )
            if leaf_dtype != dtype and not np.can_cast(leaf_dtype, dtype, casting="safe"):
                raise SpecMismatchError(f"{path}: expected dtype {dtype.name}, got {leaf_dtype.name} (unsafe cast)")
            out.append(jnp.asarray(leaf, dtype))
        return out

    # -- reads ---------------------------------------------------------------------------------
    def sample(
        self, state: BufferState, key: jax.Array, sample_batch_size: int, num_steps: int | None = None
    ) -> tuple[Any, DrawInfo]:
        """``sample_batch_size`` windows of ``num_steps`` steps (single items when None):
        items ``[B, T, *shape]`` (``[B, *shape]``) and a ``DrawInfo``. The state is only
        read (a read never needs to return it, so nothing invites XLA to copy it)."""
        size, steps_wanted = _check_sizes(sample_batch_size, num_steps, self.max_length)
        if self.priorities is not None:
            first, probabilities, weights, valid = self._draw_prioritized(state, key, size, steps_wanted)
        elif self._exact_episodes:
            first, probabilities, valid = self._draw_episodes(state, key, size, steps_wanted)
            weights = None
        else:
            first, probabilities, valid = self._draw_uniform(state, key, size, steps_wanted)
            weights = None
        if self.checked:
            where = ", inside one episode" if self._exact_episodes else ""
            checkify.check(
                jnp.all(valid),
                f"EmptyBufferError: sample: expected a stored window of num_steps={steps_wanted}{where}, got none "
                f"({{steps}} steps added to each stream, at most max_length={self.max_length} kept)",
                steps=state.steps,
            )
        ids, mask = first, None
        if num_steps is not None:
            ids = first[:, None] + jnp.arange(steps_wanted, dtype=first.dtype) * self.batch_size
            if self.episodes is not None and self.episodes.pad:
                ids, mask = self._pad(state, ids)
        return self.read(state, ids), DrawInfo(ids, probabilities, weights, valid, mask)

    def sample_sequences(
        self,
        state: BufferState,
        key: jax.Array,
        sample_batch_size: int,
        num_steps: int,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, DrawInfo]:
        """``sample_batch_size`` sequences of ``burn_in`` + ``num_steps`` steps from learning
        starts at episode positions that are multiples of ``period`` (None: 0 and 1), as the
        NumPy buffers draw them (replaybuf.samplers.sequences): items ``[B, burn_in + T, *shape]``
        and a ``DrawInfo`` with ``mask`` and ``learn``. Starts are uniform over the eligible
        ones, or drawn by their priority; probabilities are exact. O(capacity) per sample
        (replaybuf.jax.sequences). No eligible start: ``valid`` False (a checkify check with
        ``checked=True``).

        Raises (while tracing): ArgumentError as ``check_sequence_arguments`` (a buffer without
        ``respect_episodes``, a bad ``burn_in`` / ``period``, more steps than ``max_length``)
        or a sample_batch_size / num_steps that is not a positive int.
        """
        size, _ = _check_sizes(sample_batch_size, num_steps, self.max_length)
        episodes = self.episodes is not None
        rule = check_sequence_arguments(
            burn_in, period, num_steps, self.max_length, episodes, episodes and self.episodes.pad
        )
        starts = self._start_mask(state, 1 if rule.pad else rule.num_steps)
        starts = (starts & (state.episodes.position % rule.period == 0)).ravel()
        if self.priorities is None:
            first, count = self._kth_starts(state, key, starts, size)
            valid = jnp.broadcast_to(count > 0, (size,))
            probabilities = jnp.where(valid, 1.0 / jnp.maximum(count, 1).astype(jnp.float32), 0.0)
            weights = None
        else:
            first, probabilities, weights, valid = self._masked_priorities(state, key, starts, size)
        if self.checked:
            checkify.check(
                jnp.all(valid),
                f"EmptyBufferError: sample_sequences: expected a stored learning start of num_steps={rule.num_steps} "
                f"at an episode position that is a multiple of period={rule.period}, got none",
            )
        ids, mask, learn = sequence_windows(state.episodes.position, state.steps, first, rule.burn_in, rule.num_steps)
        return self.read(state, ids), DrawInfo(ids, probabilities, weights, valid, mask, learn)

    def _pad(self, state: BufferState, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Windows ``[B, T]`` padded past their first step's episode: ``(ids, mask)``, a step
        real iff its position is the first step's + its offset (positions restart at 0 after
        an end, so the real steps are a prefix); padding repeats the last real id."""
        position = state.episodes.position.reshape(-1)[(ids % self.capacity).astype(jnp.int32)]
        mask = position == position[:, :1] + jnp.arange(ids.shape[1], dtype=position.dtype)
        last_real = jnp.take_along_axis(ids, jnp.sum(mask, axis=1, keepdims=True) - 1, axis=1)
        return jnp.where(mask, ids, last_real), mask

    def add_and_sample(
        self, state: BufferState, batch: Any, key: jax.Array, sample_batch_size: int, num_steps: int | None = None
    ) -> tuple[BufferState, Any, DrawInfo]:
        """``add`` then ``sample`` from the new state: the write comes before the read, the
        order in which a donated state is updated in place (a read first made XLA copy it)."""
        state = self.add(state, batch)
        items, info = self.sample(state, key, sample_batch_size, num_steps)
        return state, items, info

    def read(self, state: BufferState, ids: jax.Array) -> Any:
        """The items stored under ``ids`` (any shape): leaves ``ids.shape + shape``."""
        # slot id % capacity of the [max_length * batch_size, words] view: one index per item
        # (a free reshape; XLA's one-index gather beats the two-index one on CPU)
        slots = (ids % self.capacity).astype(jnp.int32)
        return self.treedef.unflatten(unpack(self.layout, state.rows.reshape(self.capacity, self.layout.words)[slots]))

    def stored(self, state: BufferState) -> list[jax.Array]:
        """Every slot's item, one array per spec leaf: ``[max_length, batch_size, *shape]``."""
        return unpack(self.layout, state.rows)

    def can_sample(self, state: BufferState, num_steps: int | None = None) -> jax.Array:
        """bool []: a window of ``num_steps`` (1 when None) can be drawn now."""
        _, steps_wanted = _check_sizes(1, num_steps, self.max_length)
        low, high = self._starts(state, steps_wanted)
        if self._exact_episodes:
            return self._valid_starts(state, steps_wanted) > 0
        return high > low

    def _starts(self, state: BufferState, num_steps: int) -> tuple[jax.Array, jax.Array]:
        """``[low, high)``: the steps a window of num_steps may start at (high <= low: none)."""
        steps = state.steps
        return jnp.maximum(steps - self.max_length, 0), steps - num_steps + 1

    def _draw_uniform(self, state, key, size, num_steps):
        low, high = self._starts(state, num_steps)
        count = jnp.maximum(high - low, 0) * self.batch_size
        offsets = _uniform_below(key, (size,), count, self.checked)
        first = low * self.batch_size + offsets.astype(low.dtype)
        probability = jnp.where(count > 0, 1.0 / jnp.maximum(count, 1).astype(jnp.float32), 0.0)
        return first, jnp.broadcast_to(probability, (size,)), jnp.broadcast_to(count > 0, (size,))

    # -- episode-exact windows ----------------------------------------------------------------------
    def _valid_starts(self, state: BufferState, num_steps: int) -> jax.Array:
        """How many stored windows of ``num_steps`` lie inside one episode and before the head:
        kept on add for EpisodeOptions.num_steps, else counted in one pass over the positions."""
        if num_steps == self.episodes.num_steps:
            return state.episodes.valid_starts
        return jnp.sum(self._start_mask(state, num_steps), dtype=jnp.int32)

    def _row_steps(self, state: BufferState, rows: jax.Array) -> jax.Array:
        """The step each row holds: the newest step ``s`` with ``s % max_length == row``
        (negative: none yet)."""
        last = state.steps - 1
        return last - ((last - rows.astype(last.dtype)) % self.max_length)

    def _start_mask(self, state: BufferState, num_steps: int) -> jax.Array:
        """bool ``[max_length, batch_size]``: the slots where a stored window of ``num_steps``
        starts inside one episode and before the head (one pass over the positions)."""
        step = self._row_steps(state, jnp.arange(self.max_length))
        low, high = self._starts(state, num_steps)
        position = state.episodes.position
        tail = jnp.roll(position, -(num_steps - 1), axis=0)  # row r: the position of row r + T - 1
        return ((step >= low) & (step < high))[:, None] & (tail - position == num_steps - 1)

    def _window_fits(self, state: BufferState, starts: jax.Array, num_steps: int) -> jax.Array:
        """Whether the window of num_steps from each start id stays inside one episode."""
        position = state.episodes.position
        step, stream = starts // self.batch_size, (starts % self.batch_size).astype(jnp.int32)
        head = position[(step % self.max_length).astype(jnp.int32), stream]
        tail = position[((step + num_steps - 1) % self.max_length).astype(jnp.int32), stream]
        return tail - head == num_steps - 1

    def _draw_episodes(self, state, key, size, num_steps):
        low, high = self._starts(state, num_steps)
        count = jnp.maximum(high - low, 0) * self.batch_size
        valid_starts = jnp.where(count > 0, self._valid_starts(state, num_steps), 0)
        candidates = self.episodes.candidates

        def rejecting(key):
            """The CPU's draw: candidates uniform over all starts, the first that fits kept."""

            def draw(round_key):
                offsets = _uniform_below(round_key, (size, candidates), count, self.checked)
                starts = low * self.batch_size + offsets.astype(low.dtype)
                fits = self._window_fits(state, starts, num_steps)
                pick = jnp.argmax(fits, axis=-1)
                return jnp.take_along_axis(starts, pick[:, None], axis=-1)[:, 0], jnp.any(fits, axis=-1)

            first, found = draw(key)  # the key itself for the first round (a fold_in costs a threefry call)

            # Rows whose candidates all crossed an end draw again (each candidate is uniform over all
            # starts, so the first valid one is uniform over valid starts); only when one exists.
            def more(carry):
                return jnp.any(~carry[1]) & (valid_starts > 0)

            def again(carry):
                first, found, round_ = carry
                new_first, new_found = draw(jax.random.fold_in(key, round_))
                return jnp.where(found, first, new_first), found | new_found, round_ + 1

            first, found, _ = lax.while_loop(more, again, (first, found, jnp.ones((), jnp.int32)))
            return first, found

        def masking(key):
            """Every other platform's draw, with no loop (as ``_draw_prioritized``'s)."""
            first, count = self._kth_starts(state, key, self._start_mask(state, num_steps).ravel(), size)
            return first, jnp.broadcast_to(count > 0, (size,))

        first, found = per_platform((key,), cpu=rejecting, default=masking)
        valid = found & (valid_starts > 0)
        probability = jnp.where(valid_starts > 0, 1.0 / jnp.maximum(valid_starts, 1).astype(jnp.float32), 0.0)
        return first, jnp.broadcast_to(probability, (size,)), valid

    def _kth_starts(self, state: BufferState, key: jax.Array, starts: jax.Array, size: int):
        """``(ids, count)``: ``size`` uniform draws among the slots where ``starts`` (bool
        ``[capacity]``) is True, and how many there are: the k-th such slot, k uniform below
        their count (a prefix count and an unrolled binary search; no loop)."""
        prefix = jnp.cumsum(starts, dtype=jnp.int32)
        k = _uniform_below(key, (size,), prefix[-1], self.checked).astype(jnp.int32)
        slots = jnp.searchsorted(prefix, k, side="right", method="scan_unrolled")
        return self._slot_ids(state, jnp.minimum(slots, self.capacity - 1)), prefix[-1]

    # -- prioritized ---------------------------------------------------------------------------
    def _slot_ids(self, state: BufferState, slots: jax.Array) -> jax.Array:
        """The id now stored in each slot (the newest step whose row it is)."""
        step = self._row_steps(state, slots // self.batch_size)
        return step * self.batch_size + (slots % self.batch_size).astype(step.dtype)

    def _draw_prioritized(self, state, key, size, num_steps):
        options, trees = self.priorities, state.priorities.trees
        low, high = self._starts(state, num_steps)
        sums, total = trees.sums, trees.sums[0][0]  # the tree descended and its root
        fits = None  # with episodes: whether a drawn start's window stays inside one episode
        starts = None  # bool [capacity]: the slots a window may start at (the masked draw's mask)
        if self._exact_episodes and num_steps > 1 and num_steps == self.episodes.num_steps:
            sums = state.priorities.windows.sums  # only valid starts have mass there
            total = mass = sums[0][0]
        elif self._exact_episodes and num_steps > 1:  # another length: one pass (the mask), then reject or mask
            starts = self._start_mask(state, num_steps).ravel()
            mass = jnp.sum(jnp.where(starts, trees.sums[-1][: self.capacity], 0.0))
            fits = partial(self._window_fits, state, num_steps=num_steps)
        else:
            mass = jnp.maximum(total - self._late_mass(state, trees.sums[-1], low, num_steps), 0.0)
        fine = (high > low) & (mass > 0)

        def accept(slots, masses):
            ids = self._slot_ids(state, slots)
            step = ids // self.batch_size
            found = (step >= low) & (step < high) & (masses > 0)
            return ids, masses, found if fits is None else found & fits(ids)

        def rejecting(strata):
            """The CPU's draw: descend the whole tree, draw again where a start cannot be drawn."""
            first, drawn, found = accept(*tree_descend(sums, strata * total))

            def more(carry):
                return jnp.any(~carry[2]) & fine

            def again(carry):
                first, drawn, found, round_ = carry
                targets = random_uniform(jax.random.fold_in(key, round_), (size,), self.checked) * total
                new_first, new_drawn, new_found = accept(*tree_descend(sums, targets))
                return (
                    jnp.where(found, first, new_first),
                    jnp.where(found, drawn, new_drawn),
                    found | new_found,
                    round_ + 1,
                )

            first, drawn, found, _ = lax.while_loop(more, again, (first, drawn, found, jnp.ones((), jnp.int32)))
            return first, drawn, found, mass

        def masking(strata):
            """Every other platform's draw: only the starts that can be drawn keep their mass, so
            nothing is rejected and no loop asks the host whether to go on (docs/gpu.md)."""
            drawable = self._drawable_starts(state, low, high) if starts is None else starts
            first, drawn, drawable_mass = self._masked_draw(state, sums, drawable, strata)
            return first, drawn, drawn > 0, drawable_mass

        jitter = random_uniform(key, (size,), self.checked)  # the key itself first, as above
        strata = (jnp.arange(size, dtype=jnp.float32) + jitter) / size
        first, drawn, found, drawn_from = per_platform((strata,), cpu=rejecting, default=masking)
        probabilities = jnp.where(fine, drawn / jnp.where(drawn_from > 0, drawn_from, 1.0), 0.0)
        smallest = trees.mins[0][0]
        weights = jnp.where(fine, (drawn / smallest) ** -options.beta, 0.0)
        return first, probabilities, weights, found & fine

    def _masked_draw(self, state: BufferState, sums: tuple, drawable: jax.Array, strata: jax.Array):
        """``(ids, masses, drawable mass)`` of draws at ``strata`` (fractions in [0, 1)) of the
        mass of the slots where ``drawable`` (bool ``[capacity]``) is True (``masked_descend``)."""
        padding = sums[-1].shape[0] - self.capacity
        slots, drawn, drawable_mass = masked_descend(sums, jnp.pad(drawable, (0, padding)), strata)
        return self._slot_ids(state, slots), drawn, drawable_mass

    def _masked_priorities(self, state: BufferState, key: jax.Array, starts: jax.Array, size: int):
        """``(ids, probabilities, weights, valid)`` of ``size`` stratified draws by priority
        among the slots where ``starts`` (bool ``[capacity]``) is True: exact, with no loop."""
        trees = state.priorities.trees
        strata = (jnp.arange(size, dtype=jnp.float32) + random_uniform(key, (size,), self.checked)) / size
        first, drawn, total = self._masked_draw(state, trees.sums, starts, strata)
        valid = drawn > 0
        probabilities = jnp.where(valid, drawn / jnp.where(total > 0, total, 1.0), 0.0)
        weights = jnp.where(valid, (drawn / trees.mins[0][0]) ** -self.priorities.beta, 0.0)
        return first, probabilities, weights, valid

    def _drawable_starts(self, state: BufferState, low: jax.Array, high: jax.Array) -> jax.Array:
        """bool ``[capacity]``: the slots holding a step in ``[low, high)`` (one pass over the rows)."""
        step = self._row_steps(state, jnp.arange(self.max_length))
        rows = (step >= low) & (step < high)
        return jnp.broadcast_to(rows[:, None], (self.max_length, self.batch_size)).ravel()

    def _late_mass(self, state: BufferState, leaves: jax.Array, low: jax.Array, num_steps: int) -> jax.Array:
        """The mass of the starts whose window would pass the head: the last ``num_steps - 1``
        steps (from ``low`` on). Those are consecutive rows of the ring, read as two slices (the
        second for the rows that wrapped to the front), which cost less than a gather of their
        slots."""
        span = num_steps - 1
        if span == 0:
            return jnp.zeros((), jnp.float32)
        rows = leaves[: self.capacity].reshape(self.max_length, self.batch_size)
        oldest = state.steps - span
        start = lax.clamp(0, (oldest % self.max_length).astype(jnp.int32), self.max_length - span)
        late = partial(self._late_rows, state, rows, jnp.maximum(oldest, low), span)
        return late(start, self.max_length) + late(jnp.zeros((), jnp.int32), start)

    def _late_rows(self, state, rows, oldest, span, start, below):
        """The mass in rows ``[start, start + span)`` below ``below`` holding a step >= ``oldest``."""
        block = lax.dynamic_slice_in_dim(rows, start, span)
        ring_rows = start + jnp.arange(span, dtype=jnp.int32)
        late = (self._row_steps(state, ring_rows) >= oldest) & (ring_rows < below)
        return jnp.sum(jnp.where(late[:, None], block, 0.0))

    def update_priorities(self, state: BufferState, ids: jax.Array, priorities: jax.Array) -> BufferState:
        """Set the priorities of the stored items ``ids`` (shaped like ``priorities``, or with
        one more time axis: windows count by their first id, as on every buffer).

        Inside jit: ids never added (or negative) and NaN, infinite, zero or negative
        priorities are dropped and counted in ``state.priorities.dropped``; overwritten
        (stale) ids are ignored. Raises ArgumentError (tracing) without prioritized sampling
        or with ids that are not integers shaped like the priorities.
        """
        if self.priorities is None:
            raise ArgumentError("update_priorities: this buffer was made without sampler='prioritized'")
        options, current = self.priorities, state.priorities
        priorities = jnp.asarray(priorities)
        ids = jnp.ravel(first_ids_of(jnp.asarray(ids), priorities)).astype(state.steps.dtype)
        values = jnp.ravel(priorities).astype(jnp.float32)
        low = jnp.maximum(state.steps - self.max_length, 0) * self.batch_size
        bad = (ids < 0) | (ids >= state.steps * self.batch_size) | ~jnp.isfinite(values) | (values <= 0)
        keep = ~bad & (ids >= low)
        if self.checked:
            first_bad = jnp.argmax(bad)
            checkify.check(
                ~jnp.any(bad),
                "PriorityError: update_priorities: expected ids of added items (below {added}) with finite "
                f"priorities > 0, got {{count}} bad of {ids.shape[0]} (the first: id {{id}}, priority {{value}})",
                added=state.steps * self.batch_size,
                count=jnp.sum(bad, dtype=jnp.int32),
                id=ids[first_bad],
                value=values[first_bad],
            )
        outside = current.trees.sums[-1].shape[0]  # an out-of-range slot: the update drops it
        slots = jnp.where(keep, ids % self.capacity, outside)
        masses = (jnp.where(keep, values, 1.0) + options.epsilon) ** options.alpha
        windows = current.windows
        # the window tree's root follows the add's read of these leaves (the starts' masses)
        trees = tree_update(current.trees, slots, masses, after=None if windows is None else windows.sums[0][0])
        if windows is not None:  # decided starts take their new mass where their window fits
            span = self.episodes.num_steps - 1
            decided = keep & (ids // self.batch_size + span < state.steps)
            fits = self._window_fits(state, ids, span + 1)
            window_slots = jnp.where(decided, slots, outside)
            windows = tree_update(windows, window_slots, jnp.where(fits, masses, 0.0))
        largest = jnp.max(jnp.where(keep, values, 0.0), initial=0.0)
        dropped = current.dropped + jnp.sum(bad, dtype=jnp.int32)
        return state._replace(
            priorities=PriorityState(trees, jnp.maximum(current.max_priority, largest), dropped, windows)
        )


def _id_dtype() -> Any:
    return jax.dtypes.canonicalize_dtype(np.int64)


def _check_sizes(sample_batch_size: Any, num_steps: Any, max_length: int) -> tuple[int, int]:
    for name, value in (("sample_batch_size", sample_batch_size), ("num_steps", num_steps)):
        if value is None and name == "num_steps":
            continue
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ArgumentError(f"{name}: expected a positive int (static under jit), got {value!r}")
    steps = 1 if num_steps is None else int(num_steps)
    if steps > max_length:
        raise ArgumentError(f"num_steps: expected at most max_length={max_length}, got {steps}")
    return int(sample_batch_size), steps


def _uniform_below(key: jax.Array, shape: tuple, count: jax.Array, checked: bool) -> jax.Array:
    """Integers in ``[0, count)`` (0 when count is 0): raw 32-bit draws modulo the range (~4x
    cheaper than ``randint`` on CPU; the modulo bias is below ``count / 2**32``)."""
    bits = random_bits(key, shape, checked)
    return bits % jnp.maximum(count, 1).astype(jnp.uint32)


def make_buffer(
    data_spec: Any,
    batch_size: int,
    max_length: int,
    *,
    respect_episodes: bool = False,
    episode_end_field: str | None = None,
    episode_num_steps: int = 1,
    pad_episode_ends: bool = False,
    candidates: int = 4,
    sampler: str = "uniform",
    prioritized: bool | None = None,
    alpha: float = 0.6,
    beta: float = 0.4,
    epsilon: float = 1e-6,
    branching: int = 8,
    checked: bool = False,
) -> Buffer:
    """A ``Buffer`` for items of ``data_spec`` in ``batch_size`` streams of ``max_length``.

    ``respect_episodes``: windows never cross an episode's end (ends from
    ``episode_end_field``, else a ``step_type`` or ``next_step_type`` field); the count of
    valid starts is kept for windows of ``episode_num_steps``; ``pad_episode_ends``: windows
    are drawn as without episodes and padded past the end instead (``DrawInfo.mask``).
    ``sampler="prioritized"`` (``prioritized=True`` is its deprecated old spelling): sampling
    by priority with ``alpha``/``beta``/``epsilon`` on a
    ``branching``-ary sum tree; with both,
    windows of ``episode_num_steps`` are drawn from a second sum tree of the valid starts
    (other lengths: one pass over the buffer per sample, then rejection).
    ``checked``: a sample with no valid window and bad priority updates are also checkify
    checks; call the functions that use the buffer through ``replaybuf.jax.checked``.

    64-bit leaves are stored in JAX's canonical dtype (32-bit unless ``jax_enable_x64``).

    Raises:
        ArgumentError: a non-positive size, an episode option without respect_episodes,
            or an episode marker that names no scalar field.
    """
    for name, value in (("batch_size", batch_size), ("max_length", max_length), ("candidates", candidates)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ArgumentError(f"{name}: expected a positive int, got {value!r}")
    if not isinstance(branching, int) or branching < 2:
        raise ArgumentError(f"branching: expected an int >= 2, got {branching!r}")
    if not isinstance(checked, bool):
        raise ArgumentError(f"checked: expected a bool, got {checked!r}")
    flat = FlatSpec(data_spec)
    specs = flat.leaves
    leaves, treedef = jax.tree_util.tree_flatten(flat.data_spec)
    episodes = None
    if respect_episodes:
        if not 1 <= episode_num_steps <= max_length:
            raise ArgumentError(
                f"episode_num_steps: expected an int in [1, max_length={max_length}], got {episode_num_steps!r}"
            )
        if not isinstance(pad_episode_ends, bool):
            raise ArgumentError(f"pad_episode_ends: expected a bool, got {pad_episode_ends!r}")
        marker, kind = episode_marker(flat, episode_end_field)
        episodes = EpisodeOptions(marker, kind, int(episode_num_steps), int(candidates), pad_episode_ends)
    else:
        why = "only used with respect_episodes=True"
        reject_unused(episode_end_field=(episode_end_field, None, why), pad_episode_ends=(pad_episode_ends, False, why))
    priorities = None
    if check_sampler(sampler, prioritized) == "prioritized":
        alpha, epsilon = check_exponents(alpha, epsilon)
        if not (is_number(beta) and 0 <= beta <= 1):  # a constant: the jitted draw cannot call a schedule
            raise ArgumentError(f"beta: expected a float in [0, 1], got {beta!r}")
        priorities = PriorityOptions(alpha, float(beta), epsilon, int(branching))
    if len(leaves) != len(specs):  # one spec flattened twice: optree and jax must agree
        raise ArgumentError(f"data_spec: {len(specs)} leaves for optree but {len(leaves)} for jax.tree_util")
    return Buffer(
        treedef=treedef,
        paths=tuple(flat.paths),
        shapes=tuple(tuple(s.shape) for s in specs),
        dtypes=tuple(np.dtype(jax.dtypes.canonicalize_dtype(s.dtype)) for s in specs),
        batch_size=int(batch_size),
        max_length=int(max_length),
        episodes=episodes,
        priorities=priorities,
        checked=checked,
    )
