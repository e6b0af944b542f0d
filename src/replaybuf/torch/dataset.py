"""``as_dataset`` for the PyTorch buffers, as a ``torch.utils.data.IterableDataset``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils.data

__all__ = ["TorchDataset"]


class TorchDataset(torch.utils.data.IterableDataset):
    """An IterableDataset over a buffer's samples (endless) or deterministic pass (finite).

    Each element is already a batch, so use ``DataLoader(dataset, batch_size=None)``; keep
    ``num_workers=0``: worker processes would each read a copy of the buffer taken when
    they started, and never see later adds.
    """

    def __init__(self, source: Iterable[Any]):
        super().__init__()
        self._source = source

    def __iter__(self) -> Iterator[Any]:
        return iter(self._source)
