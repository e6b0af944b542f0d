"""Samplers: which ids a read returns. They never know where the bytes live.

Every sampler has the same protocol (the buffer holds the lock around each call):

- ``draw(rng, ring, sample_batch_size, num_steps) -> (ids, probabilities, extras)``: ``ids``
  int64 shaped ``[B, T]``, ``[B]``, ``[T]`` or ``[]`` like the sample; ``probabilities``
  float32, one per drawn element (``[B]`` or ``[]``); ``extras`` a dict of ``SampleInfo``
  attributes (``weights``, ``mask``), empty when none apply. Raises ``EmptyBufferError``
  when nothing can be drawn.
- ``added(ring, arrays)``: one step was written to every stream (``arrays``: its flat
  leaves, ``[batch_size, ...]``) and ``ring.steps`` already counts it.
- ``cleared()``: the buffer forgot every item.
- ``reopened(ring, fields)``: a storage reopened with items (a memmap folder); derive what
  the sampler keeps from the stored leaves ``fields`` (indexed by slot).
- ``state(ring) -> dict``: the sampler's checkpoint keys (merged into the buffer's state);
  ``check_state(ring, state, count)`` validates them for ``count`` stored items before
  anything changes (``CheckpointError``) and returns what ``load_state(ring, checked)``
  applies once the ring holds the loaded counters.

``PrioritizedSampler`` adds ``update_priorities(ring, ids, priorities)``.
"""

from replaybuf.samplers.episodes import EpisodeIndex, EpisodeSampler, episode_markers
from replaybuf.samplers.prioritized import PrioritizedSampler
from replaybuf.samplers.uniform import UniformSampler

__all__ = ["EpisodeIndex", "EpisodeSampler", "PrioritizedSampler", "UniformSampler", "episode_markers"]
