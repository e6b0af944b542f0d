"""Agents that learn from a replay buffer (PyTorch). Importing this package imports torch.

``DqnAgent`` trains from ``as_dataset(sample_batch_size, num_steps=2)`` windows of
Trajectory items; ``train_dqn`` is the collect/train/evaluate loop the ``replaybuf demo``
command runs.
"""

from replaybuf.agents.dqn import DqnAgent
from replaybuf.agents.loop import DqnConfig, DqnRun, evaluate, make_buffer, train_dqn

__all__ = ["DqnAgent", "DqnConfig", "DqnRun", "evaluate", "make_buffer", "train_dqn"]
