"""The host samplers of the torch prioritized buffers: NumPy's prioritized draws, results as tensors.

``TorchPrioritizedSampler`` is ``replaybuf.samplers.prioritized.PrioritizedSampler`` drawing on
the host with its own NumPy generator, seeded as the NumPy buffers seed theirs, so it draws
the ids a ``PrioritizedReplayBuffer`` draws; its results are handed to the device and what it
is given as tensors (priorities, an add's markers) is read on the host.
``TorchRuledPrioritizedSampler`` is the sample-count rules' sampler over it. Used by
``TorchPrioritizedReplayBuffer`` (``replaybuf.torch.prioritized``), the MindSpore-style
buffer's prioritized option, and as the base of the device-tree sampler
(``replaybuf.torch.device_draws``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from replaybuf.ring import StreamRing
from replaybuf.samplers.prioritized import PrioritizedSampler, check_priority_state
from replaybuf.samplers.ruled_priorities import RuledPrioritizedSampler
from replaybuf.samplers.sequences import SequenceRule
from replaybuf.torch.episodes import HostLeaves, draw_on_device, to_host

__all__ = ["TorchPrioritizedSampler", "TorchRuledPrioritizedSampler"]


class TorchPrioritizedSampler(PrioritizedSampler):
    """``PrioritizedSampler`` drawing on the host with its own NumPy generator (``host_rng``),
    its results handed to ``device``; priorities and markers given as tensors are read on the
    host. Its checkpoint keys are the priorities only: the episode index is rebuilt from the
    stored items (``storage()``, a ``TorchStorage``) when a state is loaded."""

    def __init__(
        self, capacity: int, *, device: torch.device, seed: int | None, storage: Callable[[], Any], **options: Any
    ):
        super().__init__(capacity, **options)
        self.device = device
        self.host_rng = np.random.default_rng(seed)
        self._storage = storage
        self._on_cpu = device.type == "cpu"
        self.drawn_ids: tuple[torch.Tensor, np.ndarray] | None = None  # the last CPU draw's ids, tensor and array

    def draw(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        ids, probabilities, extras = PrioritizedSampler.draw(self, self.host_rng, ring, sample_batch_size, num_steps)
        if self._on_cpu and extras["mask"] is None:
            # the hot path of a CPU buffer: the draw's fresh arrays shared as they are (one
            # from_numpy each), where draw_on_device checks and converts each value; the ids'
            # host array is kept beside their tensor, for the read and the update to use
            self.drawn_ids = self._storage().drawn_ids = (tensor := torch.from_numpy(ids), ids)
            return (
                tensor,
                torch.from_numpy(probabilities),
                {"weights": torch.from_numpy(extras["weights"]), "mask": None},
            )
        return draw_on_device(self.device, ids, probabilities, extras)

    def draw_sequences(
        self, rng: Any, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        return draw_on_device(self.device, *super().draw_sequences(self.host_rng, ring, sample_batch_size, rule))

    def new_priorities(self, priorities: Any, count: int) -> np.ndarray:
        return super().new_priorities(to_host(priorities), count)

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: np.ndarray | None = None) -> None:
        super().added(ring, HostLeaves(arrays), priorities)

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        drawn = self.drawn_ids
        ids = drawn[1] if drawn is not None and ids is drawn[0] else to_host(ids)
        PrioritizedSampler.update_priorities(self, ring, ids, to_host(priorities))

    def state(self, ring: StreamRing) -> dict:
        return {"priorities": super().state(ring)["priorities"]}

    def check_state(self, ring: StreamRing, state: dict, count: int) -> tuple[np.ndarray, float, None]:
        return (*check_priority_state(state.get("priorities"), count), None)

    def load_state(self, ring: StreamRing, checked: tuple[np.ndarray, float, Any]) -> None:
        super().load_state(ring, checked)
        if self.episodes is not None:
            self.episodes.recover(HostLeaves(self._storage().tensors))


class TorchRuledPrioritizedSampler(RuledPrioritizedSampler):
    """``RuledPrioritizedSampler`` over a ``TorchPrioritizedSampler``: what it reads of an add,
    an update or the loaded items (version field, ids, priorities) is read on the host; its
    draws are the base's (host generator ``host_rng``, results on the device)."""

    @property
    def host_rng(self) -> np.random.Generator:
        return self.base.host_rng

    def added(self, ring: StreamRing, arrays: Sequence[Any], priorities: np.ndarray | None = None) -> None:
        super().added(ring, HostLeaves(arrays), priorities)

    def update_priorities(self, ring: StreamRing, ids: Any, priorities: Any) -> None:
        super().update_priorities(ring, to_host(ids), to_host(priorities))

    def loaded(self, ring: StreamRing, fields: Sequence[Any]) -> None:
        super().loaded(ring, HostLeaves(fields))
