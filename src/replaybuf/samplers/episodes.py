"""Episode-aware windows: where episodes end, kept up to date on every add.

Each stored item gets its *position in its episode* (0 for the item that starts one),
written on add from the previous step of the same stream, so nothing is recomputed when
sampling. A window of T items starting at step t is inside one episode exactly when the
item at t + T - 1 has position >= T - 1; in a padded window the real steps are those whose
position is the first step's position plus their offset.

Episode ends come from, in order: the field named by ``episode_end_field`` (any nonzero
value ends the episode after that item; e.g. ``done``); else a ``step_type`` field (an
item with StepType.LAST == 2 is the episode's last, its boundary; FIRST == 0 starts one);
else a ``next_step_type`` field (LAST ends the episode after that item).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.refusals import empty, no_episode_window
from replaybuf.ring import StreamRing
from replaybuf.samplers.bounded import BoundedIntegers
from replaybuf.samplers.sequences import SequenceRule, StartList, accept_kernel, sequence_windows
from replaybuf.samplers.uniform import filled_probabilities, window_start_count

__all__ = [
    "EpisodeIndex",
    "EpisodeSampler",
    "check_episode_state",
    "episode_markers",
    "episode_positions",
    "pad_windows",
]

FIRST, LAST = 0, 2
_START_LISTS = 8  # (num_steps, period, pad) whose eligible starts are kept (least recently used dropped)
Markers = Callable[[Sequence[np.ndarray]], "tuple[np.ndarray | None, np.ndarray]"]


def _leaf_index(flat: FlatSpec, name: str) -> int | None:
    """The flat index of the leaf at field path ``name`` ("a/b"), or None when absent."""
    node: Any = flat.data_spec
    for part in name.split("/"):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif hasattr(node, "_fields") and part in node._fields:
            node = getattr(node, part)
        else:
            return None
    return next((i for i, leaf in enumerate(flat.leaves) if leaf is node), None)


def episode_marker(flat: FlatSpec, episode_end_field: str | None) -> tuple[int, str]:
    """``(leaf index, kind)`` of the field that marks episode ends: ``episode_end_field``
    (kind ``"done"``: nonzero ends an episode), else the spec's top-level ``step_type``
    (``FIRST`` starts, ``LAST`` ends) or ``next_step_type`` (``LAST`` ends). Every buffer
    with episodes (NumPy, shared, Ray, JAX) resolves its marker here: a nested field is
    named by its whole path (``"info/done"``).

    Raises:
        ArgumentError: ``episode_end_field`` names no scalar leaf of the data_spec, or it is
            None and the spec has neither a ``step_type`` nor a ``next_step_type`` field.
    """
    if episode_end_field is not None:
        index = _leaf_index(flat, episode_end_field)
        if index is None or flat.leaves[index].shape != ():
            raise ArgumentError(
                f"episode_end_field: expected the path of a scalar field of the data_spec "
                f"(one of {flat.paths}), got {episode_end_field!r}"
            )
        return index, "done"
    for kind in ("step_type", "next_step_type"):
        index = _leaf_index(flat, kind)
        if index is not None:
            return index, kind
    raise ArgumentError(
        "respect_episodes=True: expected a step_type or next_step_type field in the data_spec, "
        f"or episode_end_field naming a done field (fields: {flat.paths}), got neither"
    )


def episode_markers(flat: FlatSpec, episode_end_field: str | None) -> Markers:
    """A function from an add's flat leaves to ``(starts or None, ends)``, each ``[batch]``;
    the marker is ``episode_marker``'s (which raises its ArgumentError)."""
    index, kind = episode_marker(flat, episode_end_field)
    if kind == "done":
        return lambda leaves: (None, np.asarray(leaves[index]) != 0)
    if kind == "step_type":
        return lambda leaves: (leaves[index] == FIRST, leaves[index] == LAST)
    return lambda leaves: (None, leaves[index] == LAST)


class EpisodeIndex:
    """Position-in-episode of every slot, maintained on add, and valid-window counts.

    ``counts[T]`` (the number of stored windows of T items inside one episode and before
    the write head) is computed once when T is first asked for and then kept up to date
    by every add in O(batch_size) (one stream: every T - 1 adds in one pass over them, and
    whenever asked for; ``_catch_up``). The eligible learning starts of a sequence rule
    (``starts``, replaybuf.samplers.sequences) are listed when first asked for, then
    extended by the starts the adds decided each time they are looked at.
    """

    def __init__(self, ring: StreamRing, markers: Markers):
        self.ring = ring
        self.markers = markers
        self.position = np.zeros(ring.capacity, np.int64)
        self.clear()

    def clear(self) -> None:
        self._last = np.full(self.ring.batch_size, -1, np.int64)  # position of each stream's last item
        self._ended = np.ones(self.ring.batch_size, bool)  # its episode ended with it
        self._counts: dict[int, int] = {}
        self._counted = 0  # one stream: the counts take in the adds of the steps before this one
        self._due = 1  # ... and are caught up once this many adds wait (see _catch_up)
        self._starts: dict[tuple, StartList] = {}

    def _end_slots(self, step: int) -> slice:
        start = (step % self.ring.max_length) * self.ring.batch_size
        return slice(start, start + self.ring.batch_size)

    def record(self, leaves: Sequence[np.ndarray], steps: int) -> None:
        """Account for one add of step ``steps`` (0-based) to every stream, its ``leaves``."""
        starts, ends = self.markers(leaves)
        begins = self._ended if starts is None else self._ended | starts
        new = np.where(begins, 0, self._last + 1)
        if self.ring.batch_size == 1:  # one stream: counted late, many adds at once (_catch_up)
            if self._counts and steps - self._counted >= self._due:
                self._catch_up(steps)
        else:
            length = self.ring.max_length
            oldest, next_oldest = max(0, steps - length), max(0, steps + 1 - length)
            leaves_ring = next_oldest > oldest
            for size in self._counts:
                if leaves_ring and oldest + size - 1 <= steps - 1:
                    self._counts[size] -= int((self.position[self._end_slots(oldest + size - 1)] >= size - 1).sum())
                if steps >= next_oldest + size - 1:
                    self._counts[size] += int((new >= size - 1).sum())
        self.position[self._end_slots(steps)] = new
        self._last, self._ended = new, np.asarray(ends, bool)

    @property
    def ended(self) -> np.ndarray:
        """Whether each stream's episode ended with its newest item, ``[batch_size]`` bool."""
        return self._ended

    def count(self, size: int) -> int:
        """How many stored windows of ``size`` items lie inside one episode."""
        ring = self.ring
        if ring.batch_size == 1 and self._counts:
            self._catch_up(ring.steps)
        if size not in self._counts:
            ends = np.arange(ring.first_valid_step() + size - 1, ring.steps)
            slots = ((ends % ring.max_length) * ring.batch_size)[:, None] + np.arange(ring.batch_size)
            self._counts[size] = int((self.position[slots] >= size - 1).sum())
            self._counted = ring.steps
            self._due = min([ring.max_length] + [s - 1 for s in self._counts if s > 1])
        return self._counts[size]

    def _catch_up(self, stop: int) -> None:
        """Take the adds of steps ``[counted, stop)`` of one stream into the counts: the add of
        step t brings the window of each size ending at t, and takes away the one that started
        at the step it overwrote (t - L), read at its last step t - L + size - 1. That step is
        overwritten by the add of t + size - 1, so ``record`` catches up before that add
        (``_due``); then one NumPy pass per size covers every waiting add."""
        done, length, item = self._counted, self.ring.max_length, self.position.item
        self._counted = stop
        for size in self._counts:
            if size > length:  # never a window (count() found none)
                continue
            if stop - done < 4:  # a few adds: scalars cost less than NumPy calls
                for t in range(done, stop):
                    if t >= length:
                        self._counts[size] -= item((t - length + size - 1) % length) >= size - 1
                    if t >= size - 1:
                        self._counts[size] += item(t % length) >= size - 1
                continue
            gone = max(done, length) - length + size - 1
            self._counts[size] += self._at_least(max(done, size - 1), stop, size) - self._at_least(
                gone, stop - length + size - 1, size
            )

    def _at_least(self, first: int, stop: int, size: int) -> int:
        """How many of one stream's steps ``[first, stop)`` (at most L of them) are at
        position >= ``size - 1``."""
        if first >= stop:
            return 0
        length = self.ring.max_length
        low, high = first % length, (stop - 1) % length + 1
        if low < high:
            return int(np.count_nonzero(self.position[low:high] >= size - 1))
        return int(np.count_nonzero(self.position[low:] >= size - 1)) + int(
            np.count_nonzero(self.position[:high] >= size - 1)
        )

    def starts(self, rule: SequenceRule) -> StartList:
        """The eligible learning starts of ``rule``, listed once (O(capacity)) when first asked for."""
        found = self._starts.pop(rule.key, None)
        if found is None:
            if len(self._starts) >= _START_LISTS:
                self._starts.pop(next(iter(self._starts)))
            found = StartList(self.position, self.ring, rule)
        self._starts[rule.key] = found  # most recently used last
        return found

    def sequences(self, starts: np.ndarray, rule: SequenceRule) -> tuple[np.ndarray, dict]:
        """``(ids, {"mask", "learn"})`` of the sequences from learning ``starts``."""
        ids, mask, learn = sequence_windows(self.position, self.ring, starts, rule.burn_in, rule.num_steps)
        return ids, {"mask": mask, "learn": learn}

    def inside(self, first_ids: np.ndarray, size: int) -> np.ndarray:
        """Whether each window of ``size`` starting at ``first_ids`` lies inside one episode."""
        last = (first_ids + (size - 1) * self.ring.batch_size) % self.ring.capacity
        return self.position[last] >= size - 1

    def real(self, ids: np.ndarray) -> np.ndarray:
        """For windows of ids ``[..., T]``: which steps belong to the first step's episode."""
        position = self.position[ids % self.ring.capacity]
        return position == position[..., :1] + np.arange(ids.shape[-1])

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"position": self.position.copy(), "last": self._last.copy(), "ended": self._ended.copy()}

    def recover(self, fields: Sequence[np.ndarray]) -> None:
        """Derive the index from the stored items (a reopened memmap folder): ``fields`` are
        the storage's leaves by slot; only the marker fields are read.

        Positions count from the oldest stored item of each stream (or its episode's start):
        smaller than the original's for an episode that began before the oldest item, which
        changes no window's validity, since no window starts before that item.
        """
        ring = self.ring
        self.clear()
        self.position[:] = 0
        if ring.num_valid_steps() == 0:
            return
        starts, ends = self.markers(_StepLeaves(ring, fields))
        ends = np.asarray(ends, bool)
        batch = ring.batch_size
        position = episode_positions(starts, ends, np.full(batch, -1, np.int64), np.ones(batch, bool))
        slots = (np.arange(ring.first_valid_step(), ring.steps) % ring.max_length)[:, None] * ring.batch_size
        self.position[slots + np.arange(ring.batch_size)] = position
        self._last, self._ended = position[-1].copy(), ends[-1].copy()
        self._starts = {}

    def check_state(self, state: Any, steps: int, count: int) -> dict:
        """``check_episode_state`` for this index's ring."""
        return check_episode_state(self.ring, state, steps, count)

    def load_state_dict(self, checked: dict) -> None:
        """Restore the arrays returned by ``check_state``."""
        self.position[:] = checked["position"]
        self._last, self._ended = checked["last"].astype(np.int64), checked["ended"].astype(bool)
        self._counts, self._starts = {}, {}


def episode_positions(starts: np.ndarray | None, ends: np.ndarray, last: np.ndarray, ended: np.ndarray) -> np.ndarray:
    """Positions ``[k, batch]`` of k new steps with episode ``starts`` (None: only ends) and
    ``ends`` ``[k, batch]``, after each stream's ``last`` position (``ended``: its episode
    ended there): 0 where an episode begins, else one more than the step before."""
    begins = np.zeros_like(ends) if starts is None else np.asarray(starts, bool).copy()
    if begins.shape[0]:
        begins[0] |= ended
        begins[1:] |= ends[:-1]
    t = np.arange(begins.shape[0])[:, None]
    latest = np.maximum.accumulate(np.where(begins, t, -1), axis=0)
    return np.where(latest >= 0, t - latest, last + 1 + t)


def check_episode_state(ring: StreamRing, state: Any, steps: int, count: int) -> dict:
    """The arrays of an ``EpisodeIndex.state_dict()`` (or the JAX buffer's episode state) saved
    with ``steps`` steps and ``count`` stored items of ``ring``'s geometry, as an index could
    have kept them; CheckpointError naming the key when one is missing, misshaped, of another
    kind (integer positions, bool ends) or holds values no add could have produced:

    - every ``position`` >= 0; along each stream's stored steps, each position is 0 (an
      episode starts) or the previous one + 1, and at most its step;
    - ``last`` is each stream's newest stored position (-1 when nothing is stored);
    - ``ended`` is all True when nothing is stored.
    """
    arrays = {k: state.get(k) if isinstance(state, dict) else None for k in ("position", "last", "ended")}
    if not isinstance(state, dict) or set(state) != set(arrays):
        got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"state['episodes']: expected the keys ['ended', 'last', 'position'], got {got}")
    shapes = {"position": (ring.capacity,), "last": (ring.batch_size,), "ended": (ring.batch_size,)}
    kinds = {"position": ("iu", "integer"), "last": ("iu", "integer"), "ended": ("b", "bool")}
    for key, array in arrays.items():
        kind, name = kinds[key]
        if not isinstance(array, np.ndarray) or array.shape != shapes[key] or array.dtype.kind not in kind:
            got = f"{array.shape} {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
            raise CheckpointError(
                f"state['episodes'][{key!r}]: expected a {name} array shaped {shapes[key]}, got {got}"
            )
    position, last = arrays["position"], arrays["last"]
    if position.size and not (position.min() >= 0 and position.max() <= np.iinfo(np.int64).max):
        raise CheckpointError(
            f"state['episodes']['position']: expected positions in [0, 2**63), got values in "
            f"[{position.min()}, {position.max()}]"
        )
    batch, first = ring.batch_size, steps - count // ring.batch_size
    expected_last = np.full(batch, -1, np.int64)
    if count:
        t = np.arange(first, steps, dtype=np.int64)
        stored = position[((t % ring.max_length) * batch)[:, None] + np.arange(batch)].astype(np.int64)
        beyond = stored > t[:, None]
        broken = (stored[1:] != 0) & (stored[1:] != stored[:-1] + 1)
        if beyond.any() or broken.any():
            step = t[np.flatnonzero(beyond.any(axis=1) | np.append(False, broken.any(axis=1)))[0]]
            raise CheckpointError(
                f"state['episodes']['position']: the positions of step {step} ({stored[step - first].tolist()}) "
                "do not follow the step before (each is 0 or the previous position + 1, at most the step)"
            )
        expected_last = stored[-1]
    if not np.array_equal(last, expected_last):
        raise CheckpointError(
            f"state['episodes']['last']: expected each stream's newest position {expected_last.tolist()}, "
            f"got {last.tolist()}"
        )
    if not count and not arrays["ended"].all():
        raise CheckpointError("state['episodes']['ended']: expected all True when nothing is stored")
    return arrays


class _StepLeaves(Sequence):
    """The stored leaves as ``[step, stream, ...]`` for the valid steps, each built on access."""

    def __init__(self, ring: StreamRing, fields: Sequence[np.ndarray]):
        self._fields, self._ring = fields, ring
        self._order = np.arange(ring.first_valid_step(), ring.steps) % ring.max_length

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        field = self._fields[index]
        return field.reshape(self._ring.max_length, self._ring.batch_size, *field.shape[1:])[self._order]

    def __len__(self) -> int:
        return len(self._fields)


def pad_windows(index: EpisodeIndex, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` of padded windows ``[..., T]``: steps past the first step's episode
    repeat its last real id, and ``mask`` is True where the step is real."""
    mask = index.real(ids)
    last_real = np.take_along_axis(ids, mask.sum(axis=-1, keepdims=True) - 1, axis=-1)
    return np.where(mask, ids, last_real), mask


class EpisodeSampler:
    """Uniform windows that respect episodes: excluded when they cross an end, or padded.

    Excluded (default): candidates drawn uniformly over the window starts before the head
    are kept only when inside one episode (drawn in rounds sized by the known acceptance
    rate), so every valid window has probability ``1 / count``. Padded: starts are uniform
    over ``[low, high)`` as without episodes; steps past the episode's end repeat its last
    real item (ids included) and ``mask`` says which steps are real.
    """

    def __init__(self, index: EpisodeIndex, pad: bool):
        self.index = index
        self.pad = pad
        self._integers = BoundedIntegers()  # Generator.integers' draws, cheaper

    @property
    def episodes(self) -> EpisodeIndex:
        """The episode index (named as ``PrioritizedSampler``'s)."""
        return self.index

    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        size, steps = sample_batch_size, num_steps or 1
        low, high = ring.window_starts(steps)
        starts = (high - low) * ring.batch_size
        if self.pad or steps == 1:
            batch = ring.batch_size
            first = self._integers(rng, low * batch, high * batch, size if size is not None else ())
            probability = 1.0 / starts
        else:
            count = self.index.count(steps)
            if count == 0:
                raise no_episode_window(num_steps, padding=True)
            first = self._inside_starts(rng, low, high, 1 if size is None else size, steps, count / starts)
            first = first[0] if size is None else first
            probability = 1.0 / count
        ids = ring.window_ids(np.asarray(first), num_steps)
        probabilities = filled_probabilities(probability, size)
        if num_steps is None or not self.pad:
            return ids, probabilities, {}
        ids, mask = pad_windows(self.index, ids)
        return ids, probabilities, {"mask": mask}

    def draw_sequences(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(ids, probabilities, {"mask", "learn"})`` of sequences (replaybuf.samplers.sequences)
        whose learning starts are drawn uniformly over the eligible ones."""
        size, batch = sample_batch_size, ring.batch_size
        shape = () if size is None else size
        if ring.steps == 0:
            raise empty(ring.name)
        if rule.period == 1 and rule.pad:  # every stored step
            low = ring.first_valid_step()
            count = (ring.steps - low) * batch
            starts = self._integers(rng, low * batch, ring.steps * batch, shape)
        elif rule.period == 1:  # the starts of windows of num_steps inside one episode
            low, high = ring.window_starts(rule.num_steps)
            count = self.index.count(rule.num_steps)
            if count == 0:
                raise no_episode_window(rule.num_steps, padding=True)
            starts = self._inside_starts(
                rng, low, high, 1 if size is None else size, rule.num_steps, count / ((high - low) * batch)
            )
            starts = starts[0] if size is None else starts
        else:  # sparse starts: listed
            live = self.index.starts(rule).live()
            count = live.size
            if count == 0:
                raise no_episode_window(
                    rule.num_steps,
                    padding=not rule.pad,
                    detail=f" from a position that is a multiple of period={rule.period}",
                )
            starts = live[self._integers(rng, 0, count, shape)]
        ids, extras = self.index.sequences(np.asarray(starts), rule)
        return ids, filled_probabilities(1.0 / count, size), extras

    def sequence_mass(self, ring: StreamRing, rule: SequenceRule) -> tuple[float, float]:
        """``(count, 1.0)``: how many eligible learning starts of ``rule`` ``draw_sequences``
        draws among now (0 when none); what a Ray driver splits a batch of sequences by."""
        if ring.steps == 0:
            return 0.0, 1.0
        if rule.period == 1 and rule.pad:
            return float(ring.num_valid_steps() * ring.batch_size), 1.0
        if rule.period == 1:
            if window_start_count(ring, rule.num_steps) == 0:
                return 0.0, 1.0
            return float(self.index.count(rule.num_steps)), 1.0
        return float(self.index.starts(rule).live().size), 1.0

    def _inside_starts(
        self, rng: np.random.Generator, low: int, high: int, wanted: int, steps: int, rate: float
    ) -> np.ndarray:
        batch, found, need = self.index.ring.batch_size, None, wanted
        accept = accept_kernel()
        if accept is not None:  # the same rounds, the test compiled: the same starts
            ring, found, count = self.index.ring, np.empty(wanted, np.int64), 0
            while count < wanted:
                candidates = self._integers(rng, low * batch, high * batch, int((wanted - count) / rate * 1.2) + 8)
                count = accept(self.index.position, ring.capacity, batch, candidates, steps, found, count)
            return found
        while True:  # one round almost always (the round is sized for 1.2x the acceptance)
            candidates = self._integers(rng, low * batch, high * batch, int(need / rate * 1.2) + 8)
            kept = candidates[self.index.inside(candidates, steps)][:need]
            found = kept if found is None else np.concatenate((found, kept))
            need = wanted - found.shape[0]
            if not need:
                return found

    # -- the rest of the sampler protocol (replaybuf.samplers) -----------------------------------
    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        starts = window_start_count(ring, num_steps)
        if starts == 0 or self.pad or (num_steps or 1) == 1:
            return float(starts), 1.0
        return float(self.index.count(num_steps)), 1.0

    def added(self, ring: StreamRing, arrays: Sequence[np.ndarray], priorities: Any = None) -> None:
        self.index.record(arrays, ring.steps - 1)

    def cleared(self) -> None:
        self.index.clear()

    def reopened(self, ring: StreamRing, fields: Sequence[np.ndarray]) -> None:
        self.index.recover(fields)

    def state(self, ring: StreamRing) -> dict:
        return {"episodes": self.index.state_dict()}

    def check_state(self, ring: StreamRing, state: dict, count: int) -> dict:
        return self.index.check_state(state.get("episodes"), state["steps"], count)

    def load_state(self, ring: StreamRing, checked: dict) -> None:
        self.index.load_state_dict(checked)
