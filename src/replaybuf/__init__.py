"""replaybuf: experience replay for reinforcement learning.

One TF-Agents-shaped API (``add_batch``, ``get_next``, ``as_dataset``, ``gather_all``,
``clear``) over host memory here, TensorFlow variables in ``replaybuf.tf`` and PyTorch
tensors in ``replaybuf.torch``. Importing ``replaybuf`` imports no framework.
"""

from replaybuf.buffer import BufferInfo, ReplayBuffer
from replaybuf.errors import (
    ArgumentError,
    EmptyBufferError,
    PriorityError,
    ReplayBufferError,
    SpecError,
    SpecMismatchError,
)
from replaybuf.specs import ArraySpec, BoundedArraySpec, TensorSpec, as_data_spec
from replaybuf.uniform import PyUniformReplayBuffer, UniformReplayBuffer

__all__ = [
    "ArgumentError",
    "ArraySpec",
    "BoundedArraySpec",
    "BufferInfo",
    "EmptyBufferError",
    "PriorityError",
    "PyUniformReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferError",
    "SpecError",
    "SpecMismatchError",
    "TensorSpec",
    "UniformReplayBuffer",
    "as_data_spec",
]

__version__ = "0.1.0"
