"""Samplers: which ids a read returns. They never know where the bytes live.

Every sampler satisfies ``replaybuf.samplers.base.Sampler`` (``draw``, ``mass``, ``added``,
``cleared``, ``reopened``, ``state`` / ``check_state`` / ``load_state``); a prioritized one
``PrioritySampler`` (``update_priorities``, ``alpha``, ``beta``).
"""

from replaybuf.samplers.base import PrioritySampler, Sampler
from replaybuf.samplers.episodes import EpisodeIndex, EpisodeSampler, episode_markers
from replaybuf.samplers.prioritized import PrioritizedSampler
from replaybuf.samplers.uniform import UniformSampler

__all__ = [
    "EpisodeIndex",
    "EpisodeSampler",
    "PrioritizedSampler",
    "PrioritySampler",
    "Sampler",
    "UniformSampler",
    "episode_markers",
]
