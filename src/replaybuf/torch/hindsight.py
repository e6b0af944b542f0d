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

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from replaybuf.errors import ArgumentError
from replaybuf.hindsight import Drawn, HindsightRelabel, Relabeller, relabel_part
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.hindsight import kernels
from replaybuf.torch.episodes import TorchEpisodeSampler, on_device

__all__ = ["TorchRelabeller", "relabel_part_of"]


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
        goals = achieved.reshape(achieved.shape[0], -1)[on_device(device, slots)]
        relabelled = on_device(device, coins.reshape(last.shape))
        return Drawn(relabelled, on_device(device, rows), goals, host.shape[-1] if windows else 1)

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


def relabel_part_of(her: HindsightRelabel | None) -> Callable[..., TorchRelabeller] | None:
    """The relabelling part of a torch buffer with ``her`` (None without it); its sampler is a
    ``TorchEpisodeSampler`` (replaybuf.torch.episodes).

    Raises:
        ArgumentError: ``her`` is not a HindsightRelabel.
    """
    if her is None:
        return None
    relabel_part(her, respect_episodes=True)  # checks her's type

    def relabel(flat: FlatSpec, ring: StreamRing, sampler: TorchEpisodeSampler) -> TorchRelabeller:
        return TorchRelabeller(her, flat, ring, sampler)

    return relabel
