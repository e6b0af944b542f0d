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

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from replaybuf.buffers.prioritized import PrioritizedReplayBuffer, prioritized_sampler
from replaybuf.errors import ArgumentError
from replaybuf.torch.captured_priorities import CapturedPrioritizedSampler
from replaybuf.torch.device_draws import DeviceTreeSampler
from replaybuf.torch.priority_samplers import TorchPrioritizedSampler, TorchRuledPrioritizedSampler
from replaybuf.torch.uniform import TorchUniformReplayBuffer, as_device

__all__ = ["TorchPrioritizedReplayBuffer", "trees_on"]


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
        return CapturedPrioritizedSampler(self._storage, self._sampler)

    def _sampler_part(
        self, episodes: bool, pad_episode_ends: bool, episode_end_field: str | None, seed: int | None
    ) -> Callable:
        sampler = DeviceTreeSampler if self._tree_device == "device" else TorchPrioritizedSampler
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
