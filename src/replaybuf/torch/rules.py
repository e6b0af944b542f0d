"""Sample-count rules on the torch buffers: ``replaybuf.samplers.rules`` drawn on the host.

The eligible set, the epochs and every draw are ``RuledSampler``'s, made on the host from the
ring's counters and a NumPy generator seeded as the NumPy buffers seed theirs, so a torch
buffer with rules samples the same ids as a ``UniformReplayBuffer`` with the same rules, seed
and adds, and a checkpoint of either continues in the other (the generator state is a
``PCG64``'s, as theirs). Only the results cross to the device (ids, probabilities, masks),
copied without waiting for it; ``info.epoch`` stays a Python int. What goes the other way: an
add's version field and episode markers (``batch_size`` values each; a copy that waits on a
GPU). The torch checkpoints keep no episode index: it is recovered from the stored items.
With ``her=`` the relabelling (``replaybuf.torch.hindsight``) reads the last draw's host ids and
draws its goals from the same host generator, as after a NumPy buffer's ruled draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.buffers.uniform import episode_index
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers import EpisodeSampler, UniformSampler
from replaybuf.samplers.rules import RuledSampler, SampleRules
from replaybuf.samplers.sequences import SequenceRule
from replaybuf.torch.episodes import HostLeaves, draw_on_device

__all__ = ["TorchRuledSampler", "ruled_part"]


class _RecoveredEpisodes(EpisodeSampler):
    """The host episode sampler under the rules, without checkpoint keys (recovered on load)."""

    def state(self, ring: StreamRing) -> dict:
        return {}

    def check_state(self, ring: StreamRing, state: dict, count: int) -> None:
        return None

    def load_state(self, ring: StreamRing, checked: Any) -> None:
        """Nothing here: ``TorchRuledSampler.loaded`` recovers the index from the items."""


class TorchRuledSampler(RuledSampler):
    """``RuledSampler`` drawing with its own NumPy generator (``host_rng``), its results
    handed to ``device``; an add's leaves are read on the host (only the version field and
    the episode markers are). What the relabelling reads of a torch episode sampler is here
    too: ``host_ids`` (the last draw's ids), ``rebuilt`` (called once a load recovered the
    episode index) and ``rebuilt_by_add`` (never: every add is recorded as it comes)."""

    def __init__(self, base: Any, rules: SampleRules, ring: StreamRing, device: torch.device, seed: int | None):
        super().__init__(base, rules, ring)
        self.device = device
        self.host_rng = np.random.default_rng(seed)
        self.host_ids = np.zeros(0, np.int64)
        self.rebuilt: list[Callable[[], None]] = []
        self.rebuilt_by_add = False

    def draw(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        return self._on_device(*super().draw(self.host_rng, ring, sample_batch_size, num_steps))

    def draw_sequences(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        return self._on_device(*super().draw_sequences(self.host_rng, ring, sample_batch_size, rule))

    def _on_device(self, ids: np.ndarray, probabilities: np.ndarray, extras: dict) -> tuple:
        epoch = extras.pop("epoch", None)
        self.host_ids = np.asarray(ids)
        ids, probabilities, extras = draw_on_device(self.device, ids, probabilities, extras)
        return ids, probabilities, extras if epoch is None else {**extras, "epoch": epoch}

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: Any = None) -> None:
        super().added(ring, HostLeaves(arrays))

    def loaded(self, ring: StreamRing, fields: Sequence[Any]) -> None:
        """After a load: the episode index (if any) and then the rules' state from the items."""
        fields = HostLeaves(fields)
        self.base.reopened(ring, fields)
        for rebuilt in self.rebuilt:
            rebuilt()
        super().loaded(ring, fields)


def ruled_part(
    rules: SampleRules,
    respect_episodes: bool,
    pad_episode_ends: bool,
    episode_end_field: str | None,
    device: torch.device,
    seed: int | None,
) -> Callable[[FlatSpec, StreamRing], TorchRuledSampler]:
    """The sampler part of a torch buffer with sample-count ``rules`` (checked, active).

    Raises:
        ArgumentError: ``pad_episode_ends`` or ``episode_end_field`` without episodes.
    """

    def sampler(flat: FlatSpec, ring: StreamRing) -> TorchRuledSampler:
        index = episode_index(flat, ring, respect_episodes, pad_episode_ends, episode_end_field)
        base = UniformSampler() if index is None else _RecoveredEpisodes(index, pad=bool(pad_episode_ends))
        return TorchRuledSampler(base, rules, ring, device, seed)

    return sampler
