"""``SampleInfo``: a ``BufferInfo`` that also carries importance weights or a padding mask.

It is still the 2-tuple ``(ids, probabilities)`` (unpacking, indexing and equality behave
exactly as for ``BufferInfo``, and ``isinstance(info, BufferInfo)`` holds); the extras are
attributes:

- ``weights``: importance-sampling weights of a prioritized sample, ``[B]`` (or ``[]``),
  ``(P(i) / P_min) ** -beta``, i.e. normalised by the largest weight any stored item can have.
- ``mask``: with ``pad_episode_ends=True``, bool ``[B, T]`` (or ``[T]``): True where the
  step is real, False where it pads past the episode's end.

Both are None when they do not apply. ``_replace`` and ``_make`` return a plain 2-tuple
without the extras.
"""

from __future__ import annotations

from typing import Any

from replaybuf.buffer import BufferInfo

__all__ = ["SampleInfo"]


class SampleInfo(BufferInfo):
    """``BufferInfo(ids, probabilities)`` plus the attributes ``weights`` and ``mask``."""

    weights: Any
    mask: Any

    def __new__(cls, ids: Any, probabilities: Any, weights: Any = None, mask: Any = None):
        info = super().__new__(cls, ids, probabilities)
        info.weights = weights
        info.mask = mask
        return info
