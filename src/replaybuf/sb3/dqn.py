"""``PrioritizedDQN``: SB3's DQN whose train step learns from a ``PrioritizedReplayBuffer``.

The one change to DQN's update: the Huber loss of each sampled transition is weighted by
its importance weight, and the transitions' priorities become their ``|TD error|``
(plus 1e-6: priorities must be positive). ``beta`` is annealed linearly from
``beta_start`` to ``beta_end`` over ``learn``'s total timesteps (Schaul et al., 2016).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
import torch.nn.functional as F
from stable_baselines3 import DQN

from replaybuf.errors import ArgumentError
from replaybuf.sb3.prioritized import PrioritizedReplayBuffer

__all__ = ["PrioritizedDQN"]

_MIN_PRIORITY = 1e-6


class PrioritizedDQN(DQN):
    """DQN (every SB3 argument) with prioritized replay; ``replay_buffer_class`` defaults to
    ``replaybuf.sb3.PrioritizedReplayBuffer`` (``alpha`` etc. through ``replay_buffer_kwargs``).

    Args:
        beta_start, beta_end: the importance-sampling exponent at the start and the end of training.

    Raises:
        ArgumentError: beta_start or beta_end outside [0, 1]; a ``replay_buffer_class`` that
            is not a PrioritizedReplayBuffer.
    """

    def __init__(
        self,
        policy: Any,
        env: Any,
        *args: Any,
        beta_start: float = 0.4,
        beta_end: float = 1.0,
        replay_buffer_class: type | None = None,
        **kwargs: Any,
    ):
        for name, value in (("beta_start", beta_start), ("beta_end", beta_end)):
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ArgumentError(f"{name}: expected a float in [0, 1], got {value!r}")
        cls = PrioritizedReplayBuffer if replay_buffer_class is None else replay_buffer_class
        if not (isinstance(cls, type) and issubclass(cls, PrioritizedReplayBuffer)):
            raise ArgumentError(
                "replay_buffer_class: PrioritizedDQN needs replaybuf.sb3.PrioritizedReplayBuffer or a subclass, "
                f"got {cls!r}"
            )
        self.beta_start, self.beta_end = float(beta_start), float(beta_end)
        super().__init__(policy, env, *args, replay_buffer_class=cls, **kwargs)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        buffer = self.replay_buffer
        progress = 1.0 - self._current_progress_remaining
        buffer.beta = min(1.0, max(0.0, self.beta_start + (self.beta_end - self.beta_start) * progress))
        losses = []
        for _ in range(gradient_steps):
            data = buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = self.gamma if data.discounts is None else data.discounts
            with th.no_grad():
                next_q = self.q_net_target(data.next_observations).max(dim=1).values.reshape(-1, 1)
                target = data.rewards + (1 - data.dones) * discounts * next_q
            q = th.gather(self.q_net(data.observations), dim=1, index=data.actions.long())
            loss = (data.weights * F.smooth_l1_loss(q, target, reduction="none")).mean()
            losses.append(loss.item())
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            buffer.update_priorities(data.ids, (q - target).abs().detach().cpu().numpy().ravel() + _MIN_PRIORITY)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("train/beta", buffer.beta)
