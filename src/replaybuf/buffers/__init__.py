"""The NumPy buffers: presets of ``StreamBuffer`` (a ring + a storage + a sampler)."""

from replaybuf.buffers.frames import FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer
from replaybuf.buffers.prioritized import PrioritizedReplayBuffer
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.buffers.uniform import PyUniformReplayBuffer, UniformReplayBuffer

__all__ = [
    "FrameStackReplayBuffer",
    "PrioritizedFrameStackReplayBuffer",
    "PrioritizedReplayBuffer",
    "PyUniformReplayBuffer",
    "StreamBuffer",
    "UniformReplayBuffer",
]
