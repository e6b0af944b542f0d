"""SB3's ``NStepReplayBuffer``: n-step returns computed when sampling, by ``replaybuf.nstep``.

Stored transitions are the one-step ones of ``ReplayBuffer``; a sample starting at step t
sums ``r_t + g r_{t+1} + ...`` up to n steps, stopping after the first step that is done
or timed out (``replaybuf.nstep.n_step``: termination = done and not a timeout). The newest
stored step ends every window (the step after it is not stored yet, or is the oldest), as
SB3's temporary truncation at ``pos - 1`` does, but without writing to the buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common import buffers as sb3

from replaybuf.buffer import check_positive
from replaybuf.errors import ArgumentError
from replaybuf.nstep import n_step
from replaybuf.sb3.buffers import ReplayBuffer

__all__ = ["NStepReplayBuffer"]


class NStepReplayBuffer(ReplayBuffer, sb3.NStepReplayBuffer):
    """SB3's ``NStepReplayBuffer`` on replaybuf's storage; samples carry ``discounts``
    (``gamma ** k``, k the steps summed) and ``dones`` of the window's last step.

    Args:
        n_steps: the most steps summed per sample. gamma: the discount.
        The rest: as ``ReplayBuffer`` (``optimize_memory_usage`` is accepted, unlike SB3's).

    Raises:
        ArgumentError: ``n_steps`` not a positive int, ``gamma`` outside [0, 1]; as ReplayBuffer.
    """

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any):
        check_positive("n_steps", n_steps, allow_none=False)
        if not isinstance(gamma, (int, float, np.floating)) or not 0.0 <= gamma <= 1.0:
            raise ArgumentError(f"gamma: expected a float in [0, 1], got {gamma!r}")
        super().__init__(*args, **kwargs)
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        batch_inds = np.asarray(batch_inds, np.int64)
        env_indices = self._env_indices(len(batch_inds))
        steps = (batch_inds[:, None] + np.arange(self.n_steps)) % self.buffer_size  # [B, n]
        envs = env_indices[:, None]
        dones = self.dones[steps, envs] != 0
        timeouts = (self.timeouts[steps, envs] != 0) | ((steps == (self.pos - 1) % self.buffer_size) & ~dones)
        rewards = self._normalize_reward(self.rewards[steps, envs], env)
        result = n_step(rewards, dones & ~timeouts, timeouts, gamma=self.gamma, n=self.n_steps)
        last = result.last[:, 0]  # the offset of the last step summed, per sample
        rows = np.arange(len(batch_inds))
        first = self._read(batch_inds, env_indices)
        final = self._read(steps[rows, last], env_indices)
        return self._samples(
            first["observation"],
            first["action"],
            final["next_observation"],
            (dones & ~timeouts)[rows, last][:, None].astype(np.float32),
            result.returns[:, :1].astype(np.float32),
            env,
            discounts=(self.gamma ** result.steps[:, :1]).astype(np.float32),
        )
