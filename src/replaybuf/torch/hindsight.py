"""Hindsight relabelling (``her=``) on ``TorchUniformReplayBuffer``: drawn on the host, applied on the device.

The episode bookkeeping and every draw are the NumPy buffers' (``replaybuf.samplers.episodes``
windows inside one episode, ``replaybuf.hindsight`` goals), made on the host from the ring's
counters and a NumPy generator seeded as the NumPy buffers seed theirs, so a torch buffer
samples the same ids, goals and rewards as a ``UniformReplayBuffer(respect_episodes=True,
her=...)`` with the same seed and adds. On a device only their results cross over: the ids,
the relabelled rows and the goal slots, copied without waiting for the device; the goals are
read there with one gather from the storage and written into the sampled leaves. A storage
read through NumPy (the CPU's) is relabelled by ``Relabeller`` itself, on NumPy views of the
sampled tensors. Either way ``compute_reward`` receives tensors on the buffer's device. An
add's episode markers are read on the host (free for NumPy adds; one copy of ``batch_size``
flags for tensors on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.errors import ArgumentError
from replaybuf.hindsight import Drawn, HindsightRelabel, Relabeller, relabel_part
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import EpisodeIndex, EpisodeSampler, episode_markers
from replaybuf.samplers.hindsight import kernels

__all__ = ["TorchEpisodeSampler", "TorchRelabeller", "hindsight_parts"]


def _on(device: torch.device, array: np.ndarray) -> torch.Tensor:
    """``array`` on ``device``, copied without waiting for the device."""
    return torch.as_tensor(array).to(device, non_blocking=True)


class _HostLeaves(Sequence):
    """An add's leaves as NumPy arrays, each converted when read (the episode index reads only its markers)."""

    def __init__(self, leaves: Sequence[Any]):
        self._leaves = leaves

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        leaf = self._leaves[index]
        return leaf.detach().cpu().numpy() if isinstance(leaf, torch.Tensor) else np.asarray(leaf)

    def __len__(self) -> int:
        return len(self._leaves)


class TorchEpisodeSampler(EpisodeSampler):
    """``EpisodeSampler`` (windows inside one episode) drawn on the host with a NumPy generator,
    its ids and probabilities handed to the device; ``host_ids`` keeps the last draw's ids
    for the relabelling. ``storage`` (a ``TorchStorage``) is read back only when the ring was
    changed without this sampler seeing it (a loaded state), to rebuild the episode index."""

    def __init__(self, index: EpisodeIndex, device: torch.device, seed: int | None, storage: Callable[[], Any]):
        super().__init__(index, pad=False)
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
        ids, probabilities, extras = super().draw(self.host_rng, ring, sample_batch_size, num_steps)
        self.host_ids = np.asarray(ids)
        return _on(self.device, self.host_ids), _on(self.device, np.asarray(probabilities, np.float32)), extras

    def added(self, ring: StreamRing, arrays: Sequence[Any]) -> None:
        if ring.steps - 1 != self._steps:  # the index missed the steps before this one: rebuild it, this one too
            self._rebuild(ring)
            self.rebuilt_by_add = True
            return
        super().added(ring, _HostLeaves(arrays))
        self._steps = ring.steps

    def cleared(self) -> None:
        super().cleared()
        self._steps = 0

    def _rebuild(self, ring: StreamRing) -> None:
        """Derive the episode index from the stored items (one copy of the marker leaves to the host)."""
        self.index.recover(_HostLeaves(self._storage().tensors))
        self._steps = ring.steps
        for rebuilt in self.rebuilt:
            rebuilt()


class TorchRelabeller(Relabeller):
    """``Relabeller`` whose draws (on the host, from the sampler's ids and generator) are applied to tensors."""

    def __init__(self, her: HindsightRelabel, flat: FlatSpec, ring: StreamRing, sampler: TorchEpisodeSampler):
        super().__init__(her, flat, ring, sampler.episodes)
        self.sampler = sampler
        sampler.rebuilt.append(self.rebuild)

    def added(self) -> None:
        if self.sampler.rebuilt_by_add:  # the rebuild has accounted for this add
            self.sampler.rebuilt_by_add = False
        else:
            super().added()

    def draw(self, rng: Any, ids: torch.Tensor, windows: bool, storage: Any) -> Drawn:
        """As ``Relabeller.draw``, from the host copy of ``ids`` and the sampler's host generator.
        A storage read through NumPy (``storage.fields``, on the CPU) is relabelled exactly as a
        NumPy buffer's; elsewhere the goals are gathered on the device."""
        host = self.sampler.host_ids
        if storage.fields is not None:
            return super().draw(self.sampler.host_rng, host, windows, storage)
        last = host[..., -1] if windows else host
        raw = self.sampler.host_rng.bit_generator.random_raw(2 * last.size)
        compiled = kernels(self.her.compiled)
        if compiled is None:
            coins, slots = self.ends.pick(last.reshape(-1), raw, self.her.ratio, self.her.strategy)
            rows = np.flatnonzero(coins)
        else:
            args = (self.threshold, self.strategy, *self.ends.arguments())
            coins, rows, slots = compiled.pick(last.reshape(-1), raw, *args)
        device = self.sampler.device
        achieved = storage.tensors[self.achieved]
        goals = achieved.reshape(achieved.shape[0], -1)[_on(device, slots)]
        relabelled = _on(device, coins.reshape(last.shape))
        return Drawn(relabelled, _on(device, rows), goals, host.shape[-1] if windows else 1)

    def apply(self, leaves: list, drawn: Drawn) -> torch.Tensor:
        """As ``Relabeller.apply``, with tensors: ``compute_reward`` gets ``[count, *goal_shape]``
        tensors on the device and returns tensors or arrays of ``count`` rewards.

        Raises:
            ArgumentError: ``compute_reward`` returned other than one reward per relabelled item.
        """
        if isinstance(drawn.rows, np.ndarray):  # drawn from a storage read through NumPy
            return self._apply_on_host(leaves, drawn)
        rows, goals, window = drawn.rows, drawn.goals, drawn.window
        count, n, width = rows.shape[0], drawn.relabelled.numel(), goals.shape[1]
        if not count:
            return drawn.relabelled
        for i in self.goals:
            _rows(leaves, i, (n, window, width))[rows] = goals[:, None]
        seen = _rows(leaves, self.achieved, (n, window, width))[rows]
        goal, shape = self.goal_shape, self.reward_spec.shape
        desired = goals.repeat_interleave(window, dim=0) if window > 1 else goals
        rewards = torch.as_tensor(
            self.her.compute_reward(seen.reshape(-1, *goal), desired.reshape(-1, *goal), None), device=goals.device
        )
        if rewards.numel() != count * window * int(np.prod(shape)):
            raise ArgumentError(
                f"compute_reward: expected {count * window} rewards shaped {shape} (one per relabelled item), "
                f"got an array shaped {tuple(rewards.shape)}"
            )
        out = _rows(leaves, self.reward, (n, window, -1))
        out[rows] = rewards.reshape(count, window, -1).to(out.dtype)
        return drawn.relabelled

    def _apply_on_host(self, leaves: list, drawn: Drawn) -> torch.Tensor:
        """``Relabeller.apply`` on NumPy views of the sampled CPU tensors (a leaf it had to copy
        comes back as a tensor of that copy); ``compute_reward`` still gets tensors."""
        touched = {i: leaves[i].numpy() for i in (*self.goals, self.achieved, self.reward)}
        arrays = list(leaves)
        for i, array in touched.items():
            arrays[i] = array
        relabelled = super().apply(arrays, drawn)
        for i, array in touched.items():
            if arrays[i] is not array:
                leaves[i] = torch.from_numpy(arrays[i])
        return torch.from_numpy(relabelled)

    def rewards(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """``compute_reward`` given CPU tensors sharing the arrays' memory (the torch buffers' contract)."""
        return np.asarray(self.her.compute_reward(torch.from_numpy(achieved), torch.from_numpy(desired), None))


def _rows(leaves: list, index: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A view ``[n, T, width]`` of the sampled leaf ``leaves[index]`` that writes reach; where no
    view of it has that shape, the leaf is first replaced by a contiguous copy."""
    try:
        return leaves[index].view(shape)
    except RuntimeError:  # strides no view can keep
        leaves[index] = leaves[index].contiguous()
        return leaves[index].view(shape)


def hindsight_parts(
    her: HindsightRelabel | None,
    episode_end_field: str | None,
    device: torch.device,
    seed: int | None,
    storage: Callable[[], Any],
) -> tuple[Callable[[FlatSpec, StreamRing], TorchEpisodeSampler] | None, Callable[..., TorchRelabeller] | None]:
    """``(sampler, relabel)`` parts of a torch buffer with ``her`` (None, None without it).

    Raises:
        ArgumentError: ``her`` is not a HindsightRelabel; ``episode_end_field`` without ``her``.
    """
    if her is None:
        if episode_end_field is not None:
            raise ArgumentError(
                f"episode_end_field: expected None without her= (the torch buffers keep episodes only to "
                f"relabel), got {episode_end_field!r}"
            )
        return None, None
    relabel_part(her, respect_episodes=True)  # checks her's type

    def sampler(flat: FlatSpec, ring: StreamRing) -> TorchEpisodeSampler:
        return TorchEpisodeSampler(EpisodeIndex(ring, episode_markers(flat, episode_end_field)), device, seed, storage)

    def relabel(flat: FlatSpec, ring: StreamRing, sampler: TorchEpisodeSampler) -> TorchRelabeller:
        return TorchRelabeller(her, flat, ring, sampler)

    return sampler, relabel
