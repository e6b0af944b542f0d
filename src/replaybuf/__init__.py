"""replaybuf: experience replay for reinforcement learning.

One TF-Agents-shaped API (``add_batch``, ``get_next``, ``as_dataset``, ``gather_all``,
``clear``) over host memory here, TensorFlow variables in ``replaybuf.tf`` and PyTorch
tensors in ``replaybuf.torch``. Importing ``replaybuf`` imports no framework.
"""

from replaybuf.buffer import BufferInfo, ReplayBuffer, SampleInfo
from replaybuf.buffers import (
    FrameStackReplayBuffer,
    PrioritizedFrameStackReplayBuffer,
    PrioritizedReplayBuffer,
    PyUniformReplayBuffer,
    UniformReplayBuffer,
)
from replaybuf.drivers import EpisodeDriver, StepDriver
from replaybuf.errors import (
    ArgumentError,
    BufferClosedError,
    CheckpointError,
    DatasetError,
    EmptyBufferError,
    PriorityError,
    RateLimiterTimeout,
    ReplayBufferError,
    SpecError,
    SpecMismatchError,
    WritersGoneError,
)
from replaybuf.hindsight import HindsightRelabel
from replaybuf.mixed import MixedReplayBuffer
from replaybuf.rate_limiters import MinSize, SampleToInsertRatio
from replaybuf.samplers.mixture import linear_schedule
from replaybuf.shared import SharedReplayBuffer
from replaybuf.specs import ArraySpec, BoundedArraySpec, TensorSpec, as_data_spec
from replaybuf.trajectory import StepType, Trajectory, collect_data_spec

__all__ = [
    "ArgumentError",
    "ArraySpec",
    "BoundedArraySpec",
    "BufferClosedError",
    "BufferInfo",
    "CheckpointError",
    "DatasetError",
    "EmptyBufferError",
    "EpisodeDriver",
    "FrameStackReplayBuffer",
    "HindsightRelabel",
    "MinSize",
    "MixedReplayBuffer",
    "PrioritizedFrameStackReplayBuffer",
    "PrioritizedReplayBuffer",
    "PriorityError",
    "PyUniformReplayBuffer",
    "RateLimiterTimeout",
    "ReplayBuffer",
    "ReplayBufferError",
    "SampleInfo",
    "SampleToInsertRatio",
    "SharedReplayBuffer",
    "SpecError",
    "SpecMismatchError",
    "StepDriver",
    "StepType",
    "TensorSpec",
    "Trajectory",
    "UniformReplayBuffer",
    "WritersGoneError",
    "as_data_spec",
    "collect_data_spec",
    "linear_schedule",
]

__version__ = "0.1.0"
