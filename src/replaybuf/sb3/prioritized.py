"""``PrioritizedReplayBuffer`` for SB3: ``ReplayBuffer`` drawing through replaybuf's
prioritized sampler (sum and min trees, stratified draws; docs/prioritized.md).

Samples are ``PrioritizedReplayBufferSamples``: SB3's fields plus ``weights`` (importance
weights ``(N p)^-beta`` normalised by their maximum, a ``[B, 1]`` tensor on ``device``) and
``ids`` (NumPy int64) to pass back to ``update_priorities`` with the new priorities.
New transitions get the largest priority seen so far.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th

from replaybuf.buffer import check_positive
from replaybuf.buffers import PrioritizedFrameStackReplayBuffer
from replaybuf.buffers import PrioritizedReplayBuffer as _NativePrioritized
from replaybuf.sb3.buffers import ReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "PrioritizedReplayBufferSamples"]


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, then the importance weights and the ids drawn."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    ids: np.ndarray


class PrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` whose ``sample`` draws transitions in proportion to
    ``(priority + epsilon) ** alpha``.

    Args:
        alpha, beta, epsilon: as ``replaybuf.PrioritizedReplayBuffer``'s (``beta`` is also
            settable through ``.beta``: ``PrioritizedDQN`` anneals it).
        The rest: as ``ReplayBuffer``. The draws use a generator seeded from NumPy's global
        one when the buffer is built, so SB3's ``seed=`` makes them repeatable.

    Raises:
        ArgumentError: alpha or epsilon not a finite float >= 0, beta outside [0, 1]; as
            ReplayBuffer. ``sample``: as ReplayBuffer's. ``update_priorities``: as
            ``replaybuf.PrioritizedReplayBuffer.update_priorities`` (PriorityError for a
            priority that is not finite and > 0).
    """

    _natives = (_NativePrioritized, PrioritizedFrameStackReplayBuffer)

    def __init__(self, *args: Any, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6, **kwargs: Any):
        seed = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))
        self._sampler_options = {"alpha": alpha, "beta": beta, "epsilon": epsilon, "seed": seed}
        super().__init__(*args, **kwargs)

    @property
    def beta(self) -> float:
        """The importance-sampling exponent of the next sample."""
        return self._native.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._native.beta = value

    def sample(self, batch_size: int, env: Any = None) -> PrioritizedReplayBufferSamples:
        """``batch_size`` transitions drawn by priority (with replacement).

        Raises:
            ArgumentError: ``batch_size`` is not a positive int.
            EmptyBufferError: nothing is stored.
        """
        check_positive("batch_size", batch_size, allow_none=False)
        items, info = self._native.get_next(batch_size)
        items = self._with_next(items, *np.divmod(info.ids % self._native.capacity, self.n_envs))
        samples = self._one_step_samples(items, env)
        return PrioritizedReplayBufferSamples(*samples, weights=self._tensor(info.weights.reshape(-1, 1)), ids=info.ids)

    def update_priorities(self, ids: np.ndarray, priorities: Any) -> None:
        """Set the priorities (a NumPy array or tensor, e.g. ``|TD error|``) of the
        transitions drawn as ``ids``; ids overwritten since are ignored."""
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        self._native.update_priorities(ids, np.asarray(priorities).reshape(np.shape(ids)))
