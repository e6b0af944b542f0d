"""``Relabeller``: a ``HindsightRelabel`` bound to one buffer, and the goals it draws (``Drawn``)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from replaybuf.errors import ArgumentError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.hindsight import STRATEGIES, EpisodeEnds, kernels, threshold

__all__ = ["Drawn", "Relabeller"]


def _field(flat: FlatSpec, argument: str, path: str) -> int:
    """The flat index of the leaf at ``path``; ArgumentError naming ``argument`` if none."""
    if path not in flat.paths:
        raise ArgumentError(
            f"{argument}: expected the path of a field of the data_spec (one of {flat.paths}), got {path!r}"
        )
    return flat.paths.index(path)


class Relabeller:
    """A ``HindsightRelabel`` bound to one buffer: its fields' flat indices and episode ends;
    ``whole``: its one-call sample (``hindsight.records.WholeSample``) where the buffer has one."""

    whole: Any = None

    def __init__(self, her: Any, flat: FlatSpec, ring: StreamRing, episodes: Any):
        self.her = her
        self.achieved = _field(flat, "achieved_field", her.achieved_field)
        self.goals = [_field(flat, "goal_field", path) for path in her.goal_fields]
        self.reward = _field(flat, "reward_field", her.reward_field)
        achieved = flat.leaves[self.achieved]
        for index in self.goals:
            goal = flat.leaves[index]
            if (goal.shape, goal.dtype) != (achieved.shape, achieved.dtype):
                raise ArgumentError(
                    f"goal_field: expected {flat.paths[index]} shaped like {her.achieved_field}, "
                    f"{achieved.shape} {achieved.dtype}, got {goal.shape} {goal.dtype}"
                )
        self.reward_spec = flat.leaves[self.reward]
        self.goal_shape = achieved.shape
        self.ends = EpisodeEnds(ring, episodes)
        self.threshold, self.strategy = threshold(her.ratio), STRATEGIES.index(her.strategy)  # the kernels' codes

    def added(self) -> None:
        self.ends.added()

    def cleared(self) -> None:
        self.ends.cleared()

    def rebuild(self) -> None:
        self.ends.rebuild()

    def draw(self, rng: np.random.Generator, ids: np.ndarray, windows: bool, storage: Any) -> Drawn:
        """Which elements of a sample of ``ids`` are relabelled (each with probability ``ratio``)
        and their new goals, read from the stored achieved goals (``storage.fields``, by slot).
        Under the buffer's lock (it reads the storage); ``apply`` writes them into the sample."""
        last = ids[..., -1] if windows else ids
        width = math.prod(self.goal_shape)
        raw = rng.bit_generator.random_raw(2 * last.size)
        flat_last = last.reshape(-1)
        field, compiled = storage.fields[self.achieved], kernels(self.her.compiled)
        source = field if field.ndim == 2 else _view(field, (-1, width))
        if compiled is not None and source is not None:
            args = (self.threshold, self.strategy, *self.ends.arguments(), source)
            coins, rows, goals = compiled.relabel(flat_last, raw, *args)
        else:
            coins, slots = self.ends.pick(flat_last, raw, self.her.ratio, self.her.strategy)
            rows = np.flatnonzero(coins)
            goals = field[slots].reshape(-1, width)
        return Drawn(coins.reshape(last.shape), rows, goals, ids.shape[-1] if windows else 1)

    def apply(self, leaves: list, drawn: Drawn) -> np.ndarray:
        """Write the drawn goals into the goal fields of the sampled ``leaves`` (every step of a
        window) and the relabelled items' rewards from ``compute_reward`` (called once, with the
        achieved goals of those items); returns which elements were relabelled.

        Raises:
            ArgumentError: ``compute_reward`` returned other than one reward per relabelled item.
        """
        rows, goals, window = drawn.rows, drawn.goals, drawn.window
        count, (n, width) = rows.shape[0], (drawn.relabelled.size, goals.shape[1])
        if not count:
            return drawn.relabelled
        if not drawn.relabelled.ndim:  # an unbatched sample: its leaves (scalars too) as rows of one
            for i in (*self.goals, self.achieved, self.reward):
                leaves[i] = np.array(leaves[i])
        seen = drawn.seen
        if seen is None:  # the goals are not written yet
            compiled = kernels(self.her.compiled)
            outs = tuple(_rows(leaves, i, (n, window, width)) for i in self.goals)
            achieved = _rows(leaves, self.achieved, (n, window, width))
            if compiled is None:
                for out in outs:
                    out[rows] = goals[:, None]
                seen = achieved[rows]
            else:
                seen = compiled.place(outs, achieved, rows, goals)
        goal, shape = self.goal_shape, self.reward_spec.shape
        desired = np.repeat(goals, window, axis=0) if window > 1 else goals
        rewards = self.rewards(seen.reshape(-1, *goal), desired.reshape(-1, *goal))
        if rewards.size != count * window * math.prod(shape):
            raise ArgumentError(
                f"compute_reward: expected {count * window} rewards shaped {shape} (one per relabelled item), "
                f"got an array shaped {rewards.shape}"
            )
        leaf = leaves[self.reward]
        target = leaf if drawn.relabelled.ndim else leaf[None]  # a view: rows index its first axis
        target[rows] = rewards.reshape(count, *target.shape[1:])  # cast to the field's dtype
        return drawn.relabelled

    def rewards(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """``compute_reward`` of the relabelled items' achieved and new desired goals, as an array."""
        return np.asarray(self.her.compute_reward(achieved, desired, None))


class Drawn(NamedTuple):
    """What ``Relabeller.draw`` drew: ``relabelled`` (bool, shaped like the sample without its
    time axis), the indices ``rows`` of the relabelled elements (flat), their ``goals``
    ``[count, G]`` and the sample's ``window`` (steps per element, 1 without ``num_steps``);
    ``seen``: None, or (``hindsight.records``) the goals are already written into the sample
    and these are the relabelled elements' achieved goals ``[count, window, G]``."""

    relabelled: np.ndarray
    rows: np.ndarray
    goals: np.ndarray
    window: int
    seen: np.ndarray | None = None


def _view(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``array`` reshaped without a copy, or None where that needs one."""
    try:
        return np.reshape(array, shape, copy=False)
    except ValueError:
        return None


def _rows(leaves: list, index: int, shape: tuple[int, ...]) -> np.ndarray:
    """A view ``[n, T, width]`` of the sampled leaf ``leaves[index]`` that writes reach; where no
    view of it has that shape, the leaf is first replaced by a contiguous copy."""
    leaf = leaves[index]
    view = leaf.reshape(shape)
    if not np.may_share_memory(view, leaf):  # reshape had to copy: the sample's leaf becomes that copy
        leaves[index] = view.reshape(leaf.shape)
    return view
