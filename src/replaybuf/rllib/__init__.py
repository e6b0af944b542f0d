"""RLlib's new-stack episode replay buffers on replaybuf (the ``rllib`` extra; docs/rllib.md).

``EpisodeReplayBuffer``, ``PrioritizedEpisodeReplayBuffer`` and their multi-agent versions
subclass RLlib's classes of the same names (so RLlib's ``isinstance`` checks and metrics hold) and keep their steps in
replaybuf columns and trees. DQN takes the dotted name:
``config.training(replay_buffer_config={"type": "replaybuf.rllib.PrioritizedEpisodeReplayBuffer", ...})``;
SAC, TQC and CQL accept only the stock names, which :func:`install` points at ours.
Imports Ray RLlib.
"""

from replaybuf.rllib.checkpoint import restore_algorithm, restore_buffer, save_algorithm, save_buffer
from replaybuf.rllib.episode_buffer import EpisodeReplayBuffer
from replaybuf.rllib.install import install, uninstall
from replaybuf.rllib.multi_agent_buffer import MultiAgentEpisodeReplayBuffer
from replaybuf.rllib.multi_agent_prioritized_buffer import MultiAgentPrioritizedEpisodeReplayBuffer
from replaybuf.rllib.prioritized_buffer import PrioritizedEpisodeReplayBuffer

__all__ = [
    "EpisodeReplayBuffer",
    "MultiAgentEpisodeReplayBuffer",
    "MultiAgentPrioritizedEpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer",
    "install",
    "restore_algorithm",
    "restore_buffer",
    "save_algorithm",
    "save_buffer",
    "uninstall",
]
