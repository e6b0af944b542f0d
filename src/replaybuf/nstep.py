"""n-step transitions from windows (or whole trajectories) of steps, termination and
truncation kept apart.

For a start t, with k the number of steps summed (k = n, fewer when the episode ends or
the data runs out first: the step t + k - 1 is the first end, the last step, or t + n - 1):

    R_t      = r_t + g r_{t+1} + ... + g^(k-1) r_{t+k-1}
    discount = 0      if step t + k - 1 terminated (no value after a terminal state)
             = g^k    otherwise (truncated by a time limit, or cut at n or at the data's end:
                      bootstrap from next_observation[t + k - 1])

so a learner's target is ``R_t + discount * V(next_observation[t + k - 1])``. Step i holds
``observation[i]``, ``action[i]``, ``reward[i]`` (received after the action),
``terminated[i]``, ``truncated[i]`` and ``next_observation[i]`` (Gymnasium's step order).
For Trajectory windows, ``trajectory_flags`` gives the two flags.

For recurrent learners, ``sequence_priority`` turns the TD errors of a sampled sequence's
learning steps into the sequence's priority (R2D2's ``eta * max + (1 - eta) * mean``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from replaybuf.errors import ArgumentError

__all__ = ["NStep", "n_step", "n_step_transitions", "sequence_priority", "trajectory_flags"]

LAST = 2


class NStep(NamedTuple):
    """Per start t (shape ``[..., T]``): the n-step return, the bootstrap discount, the
    index of the last step summed (whose next_observation bootstraps) and k."""

    returns: np.ndarray
    discounts: np.ndarray
    last: np.ndarray
    steps: np.ndarray


def n_step(reward: Any, terminated: Any, truncated: Any, *, gamma: float, n: int, mask: Any = None) -> NStep:
    """The n-step return and discount for every start of ``[..., T]`` sequences.

    ``mask`` (e.g. ``info.mask`` of padded windows) marks the real steps; masked steps are
    treated as absent (the sum stops before them and bootstraps, unless it terminated).
    Starts on masked steps get ``steps == 0``.

    Raises:
        ArgumentError: n < 1, gamma outside [0, 1], or inputs of different shapes.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ArgumentError(f"n: expected a positive int, got {n!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ArgumentError(f"gamma: expected a float in [0, 1], got {gamma!r}")
    reward = np.asarray(reward, np.float64)
    terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
    present = np.ones(reward.shape, bool) if mask is None else np.asarray(mask, bool)
    if not reward.shape == terminated.shape == truncated.shape == present.shape or reward.ndim == 0:
        raise ArgumentError(
            f"n_step: expected reward, terminated, truncated (and mask) of one shape [..., T], got "
            f"{reward.shape}, {terminated.shape}, {truncated.shape}, {present.shape}"
        )
    length = reward.shape[-1]
    starts = np.arange(length)
    returns = np.zeros(reward.shape)
    count = np.zeros(reward.shape, np.int64)
    ended = np.zeros(reward.shape, bool)
    alive = np.ones(reward.shape, bool)
    for offset in range(n):
        index = np.minimum(starts + offset, length - 1)
        alive &= (starts + offset < length) & present[..., index]
        returns += np.where(alive, gamma**offset * reward[..., index], 0.0)
        count += alive
        ended |= alive & terminated[..., index]
        alive &= ~(terminated[..., index] | truncated[..., index])
    discounts = np.where(ended, 0.0, float(gamma) ** count)
    return NStep(returns, discounts, np.maximum(starts + count - 1, starts), count)


def n_step_transitions(window: dict, *, gamma: float, n: int | None = None, mask: Any = None) -> dict:
    """The transition of the first step of each window ``[..., T, ...]``.

    ``window`` holds ``observation``, ``action``, ``reward``, ``terminated``, ``truncated``
    and ``next_observation`` with time on the axis after the batch axes (``[B, T]`` or
    ``[T]``); n defaults to T. Returns ``observation``, ``action``, ``return``,
    ``discount`` and ``next_observation``, each without the time axis.

    Raises:
        ArgumentError: as ``n_step``, or a missing key.
    """
    keys = ("observation", "action", "reward", "terminated", "truncated", "next_observation")
    missing = [k for k in keys if k not in window]
    if missing:
        raise ArgumentError(f"window: expected the keys {keys}, missing {missing}")
    reward = np.asarray(window["reward"])
    result = n_step(reward, window["terminated"], window["truncated"], gamma=gamma, n=n or reward.shape[-1], mask=mask)
    axis = reward.ndim - 1
    last = result.last[..., 0]
    next_obs = np.asarray(window["next_observation"])
    gather = last.reshape(last.shape + (1,) * (next_obs.ndim - axis))
    return {
        "observation": np.take(np.asarray(window["observation"]), 0, axis=axis),
        "action": np.take(np.asarray(window["action"]), 0, axis=axis),
        "return": result.returns[..., 0],
        "discount": result.discounts[..., 0],
        "next_observation": np.take_along_axis(next_obs, gather, axis=axis).squeeze(axis),
    }


def trajectory_flags(next_step_type: Any, discount: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(terminated, truncated)`` of Trajectory steps: the episode ends after a step whose
    next_step_type is LAST; it terminated when that step's discount is 0, else it was
    truncated (TF-Agents keeps discount 1 on time limits)."""
    ends = np.asarray(next_step_type) == LAST
    zero = np.asarray(discount) == 0
    return ends & zero, ends & ~zero


def sequence_priority(td_errors: Any, learn: Any, *, eta: float = 0.9) -> Any:
    """R2D2's priority of each sequence: ``eta * max|td| + (1 - eta) * mean|td|``, both over
    the sequence's real learning steps (``learn``, e.g. ``info.learn`` of
    ``get_next(..., burn_in=, period=)``); the other steps (burn-in, padding) are ignored
    whatever their value.

    ``td_errors`` and ``learn`` are ``[..., L]`` of one shape (a NumPy array, or torch
    tensors: then the result is a tensor on ``td_errors``' device, computed without leaving
    it); the result is ``[...]``, e.g. ``[N]`` for ``update_priorities(info.ids, ...)``.
    eta = 1 is the max alone, eta = 0 the mean alone.

    A row with no learning step is refused rather than given priority 0: every sequence that
    ``get_next`` returns has at least its learning start (``info.learn[:, burn_in]`` is
    True), so an empty row is a mask cut wrongly, and ``update_priorities`` refuses 0 anyway.

    Raises:
        ArgumentError: eta outside [0, 1]; td_errors without a time axis; learn not of
            td_errors' shape; a row of learn with no learning step.
    """
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.integer, np.floating)) or not 0.0 <= eta <= 1.0:
        raise ArgumentError(f"eta: expected a float in [0, 1], got {eta!r:.80}")
    torch_input = type(td_errors).__module__.startswith("torch")
    if torch_input:
        import torch

        error = td_errors.abs()
        real = torch.as_tensor(learn, device=error.device).bool()
    else:
        error = np.abs(np.asarray(td_errors))
        if not np.issubdtype(error.dtype, np.floating):
            error = error.astype(np.float64)
        real = np.asarray(learn).astype(bool)
    if error.ndim == 0 or error.shape[-1] == 0:
        raise ArgumentError(f"td_errors: expected [..., L] with L >= 1 steps, got shape {tuple(error.shape)}")
    if tuple(real.shape) != tuple(error.shape):
        raise ArgumentError(
            f"learn: expected a mask of td_errors' shape {tuple(error.shape)}, got shape {tuple(real.shape)}"
        )
    count = real.sum(-1)
    if not bool((count > 0).all()):
        empty = np.argwhere(np.asarray(count.cpu() if torch_input else count) == 0)[0]
        raise ArgumentError(
            f"learn: expected at least one learning step in every row, row {tuple(int(i) for i in empty)} has none"
        )
    if torch_input:
        kept = torch.where(real, error, torch.zeros((), dtype=error.dtype, device=error.device))
        return eta * kept.amax(-1) + (1.0 - eta) * kept.sum(-1) / count
    kept = np.where(real, error, 0.0).astype(error.dtype, copy=False)
    return eta * kept.max(-1) + (1.0 - eta) * kept.sum(-1) / count
