"""The contract every replay buffer keeps: ``ReplayBuffer`` and ``BufferInfo``.

Shapes (B = sample_batch_size, T = num_steps, D = a leaf's shape):
``get_next(None, None)`` -> [D]; ``(B, None)`` -> [B, D]; ``(B, T)`` -> [B, T, D];
``time_stacked=False`` gives a tuple of T items of [D] or [B, D] instead.
``get_next`` returns ``(items, BufferInfo(ids, probabilities))``; ids are logical ids
shaped like the items' leading dims, probabilities one per sampled element.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import numpy as np

from replaybuf.errors import ArgumentError

__all__ = ["BufferInfo", "ReplayBuffer", "SampleInfo", "check_positive", "unstack_time"]


class BufferInfo(NamedTuple):
    """What a read returns beside the items.

    ids: the logical id of every item returned (an id counts adds and survives
        wraparound: step ``t`` of stream ``s`` has id ``t * batch_size + s``).
    probabilities: the probability with which each sampled element was drawn; ``()`` in a
        deterministic pass, where nothing is drawn.
    """

    ids: Any
    probabilities: Any


class SampleInfo(BufferInfo):
    """``BufferInfo(ids, probabilities)`` plus the attributes ``weights``, ``mask``, ``learn``,
    ``epoch``, ``relabelled`` and ``source``.

    It is still the 2-tuple ``(ids, probabilities)`` (unpacking, indexing and equality behave
    exactly as for ``BufferInfo``, and ``isinstance(info, BufferInfo)`` holds); the extras are
    attributes, None when they do not apply:

    - ``weights``: importance-sampling weights of a prioritized sample, ``[B]`` (or ``[]``),
      ``(P(i) / P_min) ** -beta``, i.e. normalised by the largest weight any stored item can have.
    - ``mask``: with ``pad_episode_ends=True``, bool ``[B, T]`` (or ``[T]``): True where the
      step is real, False where it pads past the episode's end. Sequences (``burn_in`` /
      ``period``): ``[B, burn_in + T]``, False also where the burn-in pads before the episode.
    - ``epoch``: with ``replacement=False``, the number of the epoch the sample was drawn from (int).
    - ``learn``: sequences only, bool like ``mask``: True for the real steps of the learning part.
    - ``relabelled``: with ``her=``, bool ``[B]`` (or ``[]``): True where the element's goal and
      reward were relabelled (``replaybuf.HindsightRelabel``).
    - ``source``: in a ``replaybuf.MixedReplayBuffer`` sample, int ``[B]`` (or ``[]``): the index
      into ``mixer.source_names`` of the buffer each element was drawn from.

    ``_replace`` and ``_make`` return a plain 2-tuple without the extras.
    """

    # the extras that do not apply read these class defaults (setting six attributes on every
    # sample was a third of a microsecond of a ~25 us epoch sample)
    weights: Any = None
    mask: Any = None
    learn: Any = None
    relabelled: Any = None
    epoch: Any = None
    source: Any = None

    def __new__(
        cls,
        ids: Any,
        probabilities: Any,
        weights: Any = None,
        mask: Any = None,
        relabelled: Any = None,
        learn: Any = None,
        epoch: Any = None,
        source: Any = None,
    ):
        info = tuple.__new__(cls, (ids, probabilities))
        if weights is not None:
            info.weights = weights
        if mask is not None:
            info.mask = mask
        if learn is not None:
            info.learn = learn
        if epoch is not None:
            info.epoch = epoch
        if relabelled is not None:
            info.relabelled = relabelled
        if source is not None:
            info.source = source
        return info


def check_positive(name: str, value: Any, allow_none: bool = True) -> None:
    """Raise ArgumentError unless ``value`` is a positive int (or None when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1:
        return
    expected = "a positive int or None" if allow_none else "a positive int"
    raise ArgumentError(f"{name}: expected {expected}, got {value!r}")


def unstack_time(unflatten: Any, leaves: list, num_steps: int, batched: bool) -> tuple:
    """``time_stacked=False``: a tuple of ``num_steps`` items, each from time step ``t`` of
    ``leaves`` (NumPy arrays or tensors shaped ``[B, T, ...]``, or ``[T, ...]`` unbatched)."""
    lead = (slice(None),) if batched else ()
    return tuple(unflatten([leaf[(*lead, t)] for leaf in leaves]) for t in range(num_steps))


class ReplayBuffer(abc.ABC):
    """Abstract base: a store of items matching ``data_spec`` that is sampled back out.

    Its geometry is read from two attributes every buffer sets when built: ``_flat`` (the
    data_spec flattened once, ``replaybuf.nest.FlatSpec``) and ``_geometry`` (its
    ``StreamRing`` or a ``replaybuf.ring.Geometry``)."""

    _flat: Any
    _geometry: Any

    @property
    def data_spec(self) -> Any:
        """The nest of specs every stored item matches."""
        return self._flat.data_spec

    @property
    def capacity(self) -> int:
        """How many items the buffer holds before it overwrites the oldest."""
        return self._geometry.capacity

    @property
    def batch_size(self) -> int:
        """How many streams ``add_batch`` writes side by side (per writer, in a shared buffer)."""
        return self._geometry.batch_size

    @property
    def max_length(self) -> int:
        """How many steps each stream holds."""
        return self._geometry.max_length

    @abc.abstractmethod
    def add_batch(self, items: Any) -> None:
        """Add a batch of items (every leaf has a leading batch dimension)."""

    @abc.abstractmethod
    def get_next(
        self, sample_batch_size: int | None = None, num_steps: int | None = None, time_stacked: bool = True
    ) -> tuple[Any, BufferInfo]:
        """Sample an item, a batch of items, or a batch of windows of ``num_steps`` items."""

    @abc.abstractmethod
    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> Any:
        """An iterable of samples (random mode, endless) or of every item once (deterministic)."""

    @abc.abstractmethod
    def gather_all(self) -> Any:
        """Every stored item, shaped [batch_size, n, D], oldest first."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Forget every item; the capacity stays allocated."""

    @abc.abstractmethod
    def num_frames(self) -> int:
        """How many items are stored now."""
