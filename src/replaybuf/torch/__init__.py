"""replaybuf on PyTorch: buffers whose storage is torch tensors on a device (CPU or CUDA).

Importing this package imports torch; ``import replaybuf`` alone never does.
"""

from replaybuf.torch.convert import as_torch_dtype
from replaybuf.torch.dataset import TorchDataset
from replaybuf.torch.prefetch import prefetch
from replaybuf.torch.prioritized import TorchPrioritizedReplayBuffer
from replaybuf.torch.uniform import TorchPyUniformReplayBuffer, TorchUniformReplayBuffer

__all__ = [
    "TorchDataset",
    "TorchPrioritizedReplayBuffer",
    "TorchPyUniformReplayBuffer",
    "TorchUniformReplayBuffer",
    "as_torch_dtype",
    "prefetch",
]
