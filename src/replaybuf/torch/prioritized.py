"""``TorchPrioritizedReplayBuffer``: prioritized replay with the items on a torch device.

On a CPU device (and under the sample-count rules, or with ``tree_device="host"``) the rule,
the trees and every draw are ``replaybuf.samplers.prioritized``'s, kept on the host (NumPy
arrays, numba kernels) and drawn with a NumPy generator seeded as the NumPy buffers
seed theirs, so the buffer samples the same ids, probabilities and weights as a
``PrioritizedReplayBuffer`` with the same seed, adds and updates. Only the results cross to
the device (ids, probabilities, weights, masks), copied without waiting for it. What goes
the other way: priorities given as device tensors (``update_priorities``, ``add_batch(...,
priorities=)``) and an add's episode markers are copied to the host, which on a GPU waits for
the computation that made them (docs/gpu.md, "Prioritized replay on a GPU").
``tree_device="device"`` (the default on a CUDA device) keeps the priorities on the device
instead: single-step draws and updates there, nothing read back
(``replaybuf.torch.device_draws``), which ``capture=True`` records
(``replaybuf.torch.captured_priorities``).

Under the sample-count rules (``max_times_sampled``, ``max_staleness``) the same
``RuledPrioritizedSampler`` as the NumPy buffer's wraps that sampler on the host
(``TorchRuledPrioritizedSampler``): the same eligible items, distinct batches and draws, its
bookkeeping in the checkpoints (``sample_rules``), so they continue in either buffer. An add's
version field is read on the host, as its episode markers are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from replaybuf.buffers.prioritized import PrioritizedReplayBuffer, prioritized_sampler
from replaybuf.errors import ArgumentError
from replaybuf.ring import StreamRing
from replaybuf.samplers.prioritized import PrioritizedSampler, check_priority_state
from replaybuf.samplers.ruled_priorities import RuledPrioritizedSampler
from replaybuf.samplers.sequences import SequenceRule
from replaybuf.torch.episodes import HostLeaves, draw_on_device, to_host
from replaybuf.torch.uniform import TorchUniformReplayBuffer, as_device

__all__ = ["TorchPrioritizedReplayBuffer", "TorchPrioritizedSampler", "TorchRuledPrioritizedSampler", "trees_on"]


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


def trees_on(tree_device: Any, capture: bool, device: torch.device, rules: bool) -> str:
    """Where the priority trees live: ``tree_device`` as given, or by default (None) on the
    device for a CUDA buffer or ``capture=True`` and on the host otherwise (a CPU's fastest,
    NumPy's draws) or under the sample-count rules (host bookkeeping).

    Raises:
        ArgumentError: not None/"host"/"device"; "device" with a rule; "host" with ``capture``.
    """
    if tree_device is None:
        return "device" if (capture or device.type == "cuda") and not rules else "host"
    if tree_device not in ("host", "device"):
        raise ArgumentError(f"tree_device: expected 'host' or 'device', got {tree_device!r:.80}")
    if tree_device == "device" and rules and not capture:  # with capture, the rules' own refusal
        raise ArgumentError(
            "tree_device: expected 'host' with the sample-count rules (max_times_sampled, max_staleness, "
            "replacement=False), which are kept on the host trees, got 'device'"
        )
    if capture and tree_device != "device":
        raise ArgumentError(
            "tree_device: expected 'device' (or None) with capture=True (a recorded step draws from the "
            f"trees on the device), got {tree_device!r}"
        )
    return tree_device


class TorchPrioritizedReplayBuffer(TorchUniformReplayBuffer):
    """``replaybuf.PrioritizedReplayBuffer`` with its items as torch tensors on ``device``.

    The same rule and options (and with host trees the same draws: the same ids for the same
    seed and calls): items drawn
    in proportion to ``(priority + epsilon) ** alpha``; ``get_next`` returns ``(items,
    SampleInfo)`` with ``ids``, ``probabilities`` and ``weights`` as tensors on ``device``;
    ``update_priorities(info.ids, priorities)`` takes tensors (on any device) or arrays;
    ``add_batch(items, priorities=...)`` sets the new items' priorities. The sum trees are on
    the host, or on the device (``tree_device``; module docstring); items are read on the
    device as by ``TorchUniformReplayBuffer``.

    Args:
        data_spec, batch_size, max_length, device, seed, dataset_drop_remainder,
            dataset_window_shift, respect_episodes, pad_episode_ends, episode_end_field,
            rate_limiter, rate_limiter_timeout: as for ``TorchUniformReplayBuffer``.
        alpha, beta, epsilon, compiled: as for ``replaybuf.PrioritizedReplayBuffer``.
        replacement, drop_remainder, max_times_sampled, max_staleness, version_field: the
            sample-count rules, as for ``replaybuf.PrioritizedReplayBuffer`` (docs/sample_rules.md):
            consumed and stale items leave the host trees, a batch's items are distinct under
            ``max_times_sampled``; the same ids for the same seed; ``replacement=False`` refused.
        capture: sample through one recorded step per sample size (a CUDA graph on a GPU;
            ``replaybuf.torch.captured_priorities``): single-step draws from the device trees
            (so ``tree_device="device"``, chosen by default with it), returning static tensors
            that the next sample overwrites. From the first add on; windows are drawn eagerly.
            Not with ``respect_episodes``, a rate limiter or the sample-count rules (as on the
            uniform buffer).
        tree_device: ``"host"``: every draw and update on the host trees, the same ids as NumPy's
            buffer for the same seed; the default (None) on a CPU device and under the rules.
            ``"device"``: the priorities live on ``device`` (``replaybuf.torch.device_draws``): single-step draws,
            priority updates (checked there; a bad one writes nothing and raises later, docs/gpu.md)
            and adds' masses run there without waiting for the device (other ids than NumPy's for
            the same seed, the same distribution); windows, sequences and checkpoints read host
            trees copied back when an update changed them. The default (None) on a CUDA device
            or with ``capture``. Refused with the sample-count rules.

    Checkpoints carry the priorities and, with rules, their bookkeeping (``sample_rules``), as
    ``PrioritizedReplayBuffer``'s do, and load across them.

    Raises:
        ArgumentError: ``trees_on``'s; PrioritizedReplayBuffer's and TorchUniformReplayBuffer's
            argument errors (the sample-count rules' among them).
        ImportError: compiled=True without numba installed.
    """

    alpha = PrioritizedReplayBuffer.alpha
    beta = PrioritizedReplayBuffer.beta
    update_priorities = PrioritizedReplayBuffer.update_priorities

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        alpha: float = 0.6,
        beta: float | Callable[[], float] = 0.4,
        epsilon: float = 1e-6,
        device: Any = "cpu",
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        capture: bool = False,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        compiled: bool | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
        tree_device: str | None = None,
    ):
        rules = max_times_sampled is not None or max_staleness is not None or not replacement
        self._tree_device = trees_on(tree_device, capture is True, as_device(device), rules)
        self._priority_options = (alpha, beta, epsilon, compiled)
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            device=device,
            seed=seed,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            respect_episodes=respect_episodes,
            pad_episode_ends=pad_episode_ends,
            episode_end_field=episode_end_field,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
            replacement=replacement,
            max_times_sampled=max_times_sampled,
            max_staleness=max_staleness,
            version_field=version_field,
            drop_remainder=drop_remainder,
            capture=capture,
        )

    def _captured_part(self) -> Any:
        from replaybuf.torch.captured_priorities import CapturedPrioritizedSampler  # imports this module

        return CapturedPrioritizedSampler(self._storage, self._sampler)

    def _sampler_part(
        self, episodes: bool, pad_episode_ends: bool, episode_end_field: str | None, seed: int | None
    ) -> Callable:
        sampler: type = TorchPrioritizedSampler
        if self._tree_device == "device":
            from replaybuf.torch.device_draws import DeviceTreeSampler  # imports this module

            sampler = DeviceTreeSampler
        make = partial(sampler, device=self._device, seed=seed, storage=lambda: self._storage)
        return prioritized_sampler(
            *self._priority_options,
            episodes,
            pad_episode_ends,
            episode_end_field,
            make=make,
            ruled=TorchRuledPrioritizedSampler,
            **self._rules,
        )
