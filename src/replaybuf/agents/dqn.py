"""A DQN agent in PyTorch that trains from 2-step Trajectory windows, as TF-Agents' DqnAgent.

``train(experience)`` takes a Trajectory whose leaves are ``[B, 2, ...]`` (what
``buffer.as_dataset(B, num_steps=2)`` yields) from NumPy, TensorFlow or PyTorch buffers.
Window ``(t, t + 1)`` is the transition ``o_t, a_t -> reward_t, discount_t, o_{t+1}``
with the target ``reward_t + gamma * discount_t * max_a Q_target(o_{t+1}, a)`` (Double
DQN: the action chosen by the Q-network, valued by the target network); windows
that start at a boundary item (step_type LAST: the env was resetting) are masked out.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from replaybuf.errors import ArgumentError
from replaybuf.nest import to_numpy
from replaybuf.trajectory import StepType, Trajectory

__all__ = ["DqnAgent"]


def _mlp(inputs: int, hidden: Sequence[int], outputs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(inputs, width), nn.ReLU()]
        inputs = width
    layers.append(nn.Linear(inputs, outputs))
    return nn.Sequential(*layers)


class DqnAgent:
    """Q-learning with an MLP Q-network, a target network, Huber loss and Adam.

    Args:
        observation_spec: the ArraySpec of one observation (flattened into the MLP).
        action_spec: a BoundedArraySpec of a scalar discrete action (its minimum and
            maximum give the number of actions).
        hidden: widths of the hidden layers.
        learning_rate: Adam's step size.
        gamma: the discount of future value.
        target_update_period: gradient steps between copies of the Q-network into the
            target network.
        double_q: pick the next action with the Q-network and value it with the target
            network (Double DQN), which curbs overestimation.
        max_grad_norm: clip the gradient to this global norm (None: no clipping).
        seed: seeds the network initialisation and the epsilon-greedy choices.

    Raises:
        ArgumentError: the action spec is not a bounded scalar integer spec.
    """

    def __init__(
        self,
        observation_spec: Any,
        action_spec: Any,
        *,
        hidden: Sequence[int] = (256, 256),
        learning_rate: float = 1e-3,
        gamma: float = 0.99,
        target_update_period: int = 100,
        double_q: bool = False,
        max_grad_norm: float | None = None,
        seed: int | None = None,
    ):
        minimum, maximum = (
            getattr(action_spec, "minimum", None),
            getattr(action_spec, "maximum", None),
        )
        if minimum is None or action_spec.shape != () or action_spec.dtype.kind not in "iu":
            raise ArgumentError(
                f"action_spec: expected a scalar integer BoundedArraySpec (a Discrete space), got {action_spec!r}"
            )
        self._action_offset = int(minimum)
        self._action_dtype = action_spec.dtype
        self.num_actions = int(maximum) - int(minimum) + 1
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            self.q_network = _mlp(int(np.prod(observation_spec.shape)), hidden, self.num_actions)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=learning_rate, fused=True)
        self.gamma = gamma
        self.target_update_period = target_update_period
        self.double_q = double_q
        self.max_grad_norm = max_grad_norm
        self.epsilon = 1.0
        self.train_steps = 0
        self._rng = np.random.default_rng(seed)

    # -- policies ------------------------------------------------------------------------
    def greedy_policy(self, observation: Any) -> np.ndarray:
        """The action of highest Q-value for each observation of a batch."""
        with torch.no_grad():
            q = self.q_network(self._tensor(observation).flatten(1))
        return (q.argmax(dim=1).numpy() + self._action_offset).astype(self._action_dtype)

    def collect_policy(self, observation: Any) -> np.ndarray:
        """Epsilon-greedy: a uniformly random action with probability ``self.epsilon``."""
        action = self.greedy_policy(observation)
        explore = self._rng.random(action.shape[0]) < self.epsilon
        random = self._rng.integers(0, self.num_actions, action.shape[0]) + self._action_offset
        return np.where(explore, random, action).astype(self._action_dtype)

    # -- learning ------------------------------------------------------------------------
    def train(self, experience: Trajectory) -> float:
        """One gradient step on a batch of 2-step windows; returns the (masked) Huber loss.

        Raises:
            ArgumentError: the windows are not [B, 2, ...].
        """
        step_type = self._tensor(experience.step_type)
        if step_type.ndim != 2 or step_type.shape[1] != 2:
            raise ArgumentError(
                "experience/step_type: expected windows shaped [B, 2] "
                "(as_dataset(B, num_steps=2)), "
                f"got {tuple(step_type.shape)}"
            )
        observation = self._tensor(experience.observation).float()
        action = self._tensor(experience.action)[:, 0].long() - self._action_offset
        reward = self._tensor(experience.reward)[:, 0].float()
        discount = self._tensor(experience.discount)[:, 0].float()
        valid = (step_type[:, 0] != StepType.LAST).float()

        q = self.q_network(observation[:, 0].flatten(1)).gather(1, action[:, None]).squeeze(1)
        with torch.no_grad():
            next_values = self.target_network(observation[:, 1].flatten(1))
            if self.double_q:
                best = self.q_network(observation[:, 1].flatten(1)).argmax(dim=1, keepdim=True)
                next_q = next_values.gather(1, best).squeeze(1)
            else:
                next_q = next_values.max(dim=1).values
            target = reward + self.gamma * discount * next_q
        elementwise = nn.functional.smooth_l1_loss(q, target, reduction="none")
        loss = (elementwise * valid).sum() / valid.sum().clamp(min=1.0)

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.q_network.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.train_steps += 1
        if self.train_steps % self.target_update_period == 0:
            self.target_network.load_state_dict(self.q_network.state_dict())
        return float(loss.detach())

    @staticmethod
    def _tensor(value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value.detach().cpu()
        return torch.as_tensor(np.asarray(to_numpy(value)))
