"""Episodes on the torch buffers: the NumPy buffers' episode index and draws, on the host.

The episode bookkeeping and every draw are ``replaybuf.samplers.episodes``' (windows inside one
episode or padded, sequences with a burn-in), made on the host from the ring's counters and a
NumPy generator seeded as the NumPy buffers seed theirs, so a torch buffer samples the same ids
as a ``UniformReplayBuffer(respect_episodes=True)`` with the same seed and adds. Only the
results cross to the device (ids, probabilities, masks), copied without waiting for it. An
add's episode markers are read on the host (free for NumPy adds; one copy of ``batch_size``
flags for tensors on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.buffers.stream import reject_unused
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeIndex, EpisodeSampler, episode_markers
from replaybuf.samplers.sequences import SequenceRule

__all__ = ["HostLeaves", "TorchEpisodeSampler", "draw_on_device", "episode_part", "on_device", "to_host"]


def on_device(device: torch.device, array: np.ndarray) -> torch.Tensor:
    """``array`` on ``device``, copied without waiting for the device. On the CPU a fresh
    contiguous array is shared, not copied (``torch.from_numpy``: half of ``as_tensor``'s
    cost, which a prioritized sample pays three times)."""
    if device.type == "cpu":
        return _on_cpu(array)
    return torch.as_tensor(array).to(device, non_blocking=True)


def _on_cpu(array: Any) -> torch.Tensor:
    """``array`` as a CPU tensor: a contiguous, writable ndarray shared (the host draws' fresh
    results), anything else copied."""
    if array.__class__ is np.ndarray and array.flags.c_contiguous and array.flags.writeable:
        return torch.from_numpy(array)
    return torch.as_tensor(np.asarray(array))


def draw_on_device(
    device: torch.device, ids: np.ndarray, probabilities: np.ndarray, extras: dict
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A host draw's ``(ids, probabilities, extras)`` as tensors on ``device`` (an extra that is
    None stays None), copied without waiting for the device. On the CPU each fresh array is
    shared by one ``torch.from_numpy`` (no device check per value)."""
    if device.type == "cpu":
        extras = {key: None if value is None else _on_cpu(value) for key, value in extras.items()}
        return _on_cpu(ids), _on_cpu(np.asarray(probabilities, np.float32)), extras
    extras = {key: None if value is None else on_device(device, np.asarray(value)) for key, value in extras.items()}
    return on_device(device, np.asarray(ids)), on_device(device, np.asarray(probabilities, np.float32)), extras


def to_host(value: Any) -> Any:
    """A tensor (on any device) as a NumPy array (a GPU's: one copy that waits for it; a CPU
    tensor without gradients: its memory, shared); anything else as given."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_cpu and not value.requires_grad:
        return value.numpy()
    return value.detach().cpu().numpy()


class HostLeaves(Sequence):
    """An add's leaves as NumPy arrays, each converted when read (the episode index reads only its markers)."""

    def __init__(self, leaves: Sequence[Any]):
        self._leaves = leaves

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        return np.asarray(to_host(self._leaves[index]))

    def __len__(self) -> int:
        return len(self._leaves)


class TorchEpisodeSampler(EpisodeSampler):
    """``EpisodeSampler`` (windows inside one episode, or padded; sequences) drawn on the host
    with a NumPy generator, its ids, probabilities and masks handed to the device; ``host_ids``
    keeps the last draw's ids for the relabelling. ``storage`` (a ``TorchStorage``) is read back
    only when the ring was changed without this sampler seeing it (a loaded state), to rebuild
    the episode index."""

    def __init__(
        self, index: EpisodeIndex, pad: bool, device: torch.device, seed: int | None, storage: Callable[[], Any]
    ):
        super().__init__(index, pad=pad)
        self.device = device
        self.host_rng = np.random.default_rng(seed)
        self.host_ids = np.zeros(0, np.int64)
        self.rebuilt: list[Callable[[], None]] = []  # called after the index is rebuilt (the relabeller's ends)
        self._storage = storage
        self._steps = 0  # the ring's steps the index has recorded
        self.rebuilt_by_add = False  # the last add rebuilt the index (and the relabeller's ends) with its step

    def draw(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        if ring.steps != self._steps:
            self._rebuild(ring)
        return self._on_device(*super().draw(self.host_rng, ring, sample_batch_size, num_steps))

    def draw_sequences(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        if ring.steps != self._steps:
            self._rebuild(ring)
        return self._on_device(*super().draw_sequences(self.host_rng, ring, sample_batch_size, rule))

    def _on_device(
        self, ids: np.ndarray, probabilities: np.ndarray, extras: dict
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """A host draw's results as tensors on the device (``host_ids`` keeps the ids)."""
        self.host_ids = np.asarray(ids)
        return draw_on_device(self.device, self.host_ids, probabilities, extras)

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: Any = None) -> None:
        if ring.steps - 1 != self._steps:  # the index missed the steps before this one: rebuild it, this one too
            self._rebuild(ring)
            self.rebuilt_by_add = True
            return
        super().added(ring, HostLeaves(arrays))
        self._steps = ring.steps

    def cleared(self) -> None:
        super().cleared()
        self._steps = 0

    def _rebuild(self, ring: StreamRing) -> None:
        """Derive the episode index from the stored items (one copy of the marker leaves to the host)."""
        self.index.recover(HostLeaves(self._storage().tensors))
        self._steps = ring.steps
        for rebuilt in self.rebuilt:
            rebuilt()


def episode_part(
    respect_episodes: bool,
    pad_episode_ends: bool,
    episode_end_field: str | None,
    device: torch.device,
    seed: int | None,
    storage: Callable[[], Any],
) -> Callable[[FlatSpec, StreamRing], TorchEpisodeSampler] | None:
    """The sampler part of a torch buffer that keeps episodes (None when it keeps none).

    Raises:
        ArgumentError: ``pad_episode_ends`` or ``episode_end_field`` without episodes.
    """
    if not respect_episodes:
        why = "only used with respect_episodes=True (or her=)"
        reject_unused(pad_episode_ends=(pad_episode_ends, False, why), episode_end_field=(episode_end_field, None, why))
        return None

    def sampler(flat: FlatSpec, ring: StreamRing) -> TorchEpisodeSampler:
        index = EpisodeIndex(ring, episode_markers(flat, episode_end_field))
        return TorchEpisodeSampler(index, bool(pad_episode_ends), device, seed, storage)

    return sampler
