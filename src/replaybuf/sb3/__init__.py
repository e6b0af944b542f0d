"""Stable-Baselines3's replay-buffer classes on replaybuf (the ``sb3`` extra; docs/sb3.md).

A one-line switch: ``DQN(..., replay_buffer_class=replaybuf.sb3.ReplayBuffer)``, or
``from replaybuf.sb3 import ReplayBuffer`` in a CleanRL script. Imports SB3 and torch.
"""

from replaybuf.sb3.buffers import DictReplayBuffer, ReplayBuffer
from replaybuf.sb3.dqn import PrioritizedDQN
from replaybuf.sb3.her import HerReplayBuffer
from replaybuf.sb3.nstep import NStepReplayBuffer
from replaybuf.sb3.prioritized import PrioritizedReplayBuffer, PrioritizedReplayBufferSamples

__all__ = [
    "DictReplayBuffer",
    "HerReplayBuffer",
    "NStepReplayBuffer",
    "PrioritizedDQN",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "ReplayBuffer",
]
