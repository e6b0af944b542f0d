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

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing

__all__ = ["EpisodeIndex", "EpisodeSampler", "episode_markers"]

FIRST, LAST = 0, 2
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


def episode_markers(flat: FlatSpec, episode_end_field: str | None) -> Markers:
    """A function from an add's flat leaves to ``(starts or None, ends)``, each ``[batch]``.

    Raises:
        ArgumentError: ``episode_end_field`` names no leaf of the data_spec, or it is None
            and the spec has neither a ``step_type`` nor a ``next_step_type`` field.
    """
    if episode_end_field is not None:
        index = _leaf_index(flat, episode_end_field)
        if index is None or flat.leaves[index].shape != ():
            raise ArgumentError(
                f"episode_end_field: expected the path of a scalar field of the data_spec "
                f"(one of {flat.paths}), got {episode_end_field!r}"
            )
        return lambda leaves: (None, np.asarray(leaves[index]) != 0)
    step = _leaf_index(flat, "step_type")
    if step is not None:
        return lambda leaves: (leaves[step] == FIRST, leaves[step] == LAST)
    following = _leaf_index(flat, "next_step_type")
    if following is not None:
        return lambda leaves: (None, leaves[following] == LAST)
    raise ArgumentError(
        "respect_episodes=True: expected a step_type or next_step_type field in the data_spec, "
        f"or episode_end_field naming a done field (fields: {flat.paths}), got neither"
    )


class EpisodeIndex:
    """Position-in-episode of every slot, maintained on add, and valid-window counts.

    ``counts[T]`` (the number of stored windows of T items inside one episode and before
    the write head) is computed once when T is first asked for and then kept up to date
    by every add in O(batch_size).
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

    def _end_slots(self, step: int) -> slice:
        start = (step % self.ring.max_length) * self.ring.batch_size
        return slice(start, start + self.ring.batch_size)

    def record(self, leaves: Sequence[np.ndarray]) -> None:
        """Account for one add of a step to every stream; call before ``ring.steps`` moves."""
        ring = self.ring
        starts, ends = self.markers(leaves)
        begins = self._ended if starts is None else self._ended | starts
        new = np.where(begins, 0, self._last + 1)
        steps, length = ring.steps, ring.max_length
        oldest, next_oldest = max(0, steps - length), max(0, steps + 1 - length)
        for size in self._counts:
            if next_oldest > oldest and oldest + size - 1 <= steps - 1:  # that window's start leaves
                self._counts[size] -= int((self.position[self._end_slots(oldest + size - 1)] >= size - 1).sum())
            if steps >= next_oldest + size - 1:
                self._counts[size] += int((new >= size - 1).sum())
        self.position[self._end_slots(steps)] = new
        self._last, self._ended = new, np.asarray(ends, bool)

    def count(self, size: int) -> int:
        """How many stored windows of ``size`` items lie inside one episode."""
        if size not in self._counts:
            ring = self.ring
            ends = np.arange(ring.first_valid_step() + size - 1, ring.steps)
            slots = ((ends % ring.max_length) * ring.batch_size)[:, None] + np.arange(ring.batch_size)
            self._counts[size] = int((self.position[slots] >= size - 1).sum())
        return self._counts[size]

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

    def check_state(self, state: Any) -> dict:
        """The arrays of a ``state_dict()``; CheckpointError when one is missing or misshaped."""
        arrays = {k: state.get(k) if isinstance(state, dict) else None for k in ("position", "last", "ended")}
        shapes = {"position": self.position.shape, "last": self._last.shape, "ended": self._ended.shape}
        for key, array in arrays.items():
            if not isinstance(array, np.ndarray) or array.shape != shapes[key]:
                raise CheckpointError(f"state['episodes'][{key!r}]: expected an array shaped {shapes[key]}")
        return arrays

    def load_state_dict(self, state: Any) -> None:
        arrays = self.check_state(state)
        self.position[:] = arrays["position"]
        self._last, self._ended = arrays["last"].astype(np.int64), arrays["ended"].astype(bool)
        self._counts = {}


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

    def draw(
        self, rng: np.random.Generator, ring: StreamRing, size: int | None, num_steps: int | None, what: str
    ) -> tuple[np.ndarray, Any, dict]:
        steps = num_steps or 1
        low, high = ring.window_starts(steps, what)
        starts = (high - low) * ring.batch_size
        if self.pad or steps == 1:
            first = rng.integers(low * ring.batch_size, high * ring.batch_size, size=size if size is not None else ())
            probability: float = 1.0 / starts
        else:
            count = self.index.count(steps)
            if count == 0:
                raise EmptyBufferError(
                    f"num_steps={num_steps}: no stored episode holds {num_steps} steps; add longer "
                    "episodes, ask for shorter windows, or pass pad_episode_ends=True"
                )
            first = self._inside_starts(rng, low, high, 1 if size is None else size, steps, count / starts)
            first = first[0] if size is None else first
            probability = 1.0 / count
        ids = ring.window_ids(np.asarray(first), num_steps)
        if num_steps is None or not self.pad:
            return ids, probability, {}
        mask = self.index.real(ids)
        last_real = np.take_along_axis(ids, mask.sum(axis=-1, keepdims=True) - 1, axis=-1)
        return np.where(mask, ids, last_real), probability, {"mask": mask}

    def _inside_starts(
        self, rng: np.random.Generator, low: int, high: int, wanted: int, steps: int, rate: float
    ) -> np.ndarray:
        batch, found, need = self.index.ring.batch_size, [], wanted
        while need:
            candidates = rng.integers(low * batch, high * batch, size=int(need / rate * 1.2) + 8)
            kept = candidates[self.index.inside(candidates, steps)][:need]
            found.append(kept)
            need -= kept.shape[0]
        return np.concatenate(found)
