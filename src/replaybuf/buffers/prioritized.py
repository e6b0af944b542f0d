"""``PrioritizedReplayBuffer``: the NumPy buffer with a ``PrioritizedSampler`` (see there for the rule)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from replaybuf.buffers.stream import StreamBuffer
from replaybuf.buffers.uniform import episode_index
from replaybuf.hindsight import HindsightRelabel, relabel_part
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.prioritized import PrioritizedSampler, check_beta
from replaybuf.samplers.ruled_priorities import RuledPrioritizedSampler
from replaybuf.samplers.rules import check_sample_rules
from replaybuf.storages import open_storage

__all__ = ["PrioritizedReplayBuffer", "prioritized_sampler"]


def prioritized_sampler(
    alpha: float,
    beta: float | Callable[[], float],
    epsilon: float,
    compiled: bool | None,
    respect_episodes: bool,
    pad_episode_ends: bool,
    episode_end_field: str | None,
    make: Callable[..., PrioritizedSampler] = PrioritizedSampler,
    ruled: Callable[..., RuledPrioritizedSampler] = RuledPrioritizedSampler,
    **rules: Any,
) -> Callable[[FlatSpec, StreamRing], Any]:
    """The sampler part of the prioritized presets (plain, frame-stack and torch: ``make``
    builds the sampler from the capacity and the options), under the sample-count ``rules``
    (``replacement``, ``max_times_sampled``, ``max_staleness``, ``version_field``,
    ``drop_remainder``: replaybuf.samplers.ruled_priorities; ``ruled`` wraps the sampler in
    them) when any is set.

    Raises:
        ArgumentError: see ``episode_index`` and ``check_sample_rules``.
    """

    def build(flat: FlatSpec, ring: StreamRing) -> Any:
        checked = check_sample_rules(flat, prioritized=True, **rules)
        index = episode_index(flat, ring, respect_episodes, pad_episode_ends, episode_end_field)
        sampler = make(
            ring.capacity,
            alpha=alpha,
            beta=beta,
            epsilon=epsilon,
            episodes=index,
            pad=bool(pad_episode_ends),
            compiled=compiled,
        )
        return ruled(sampler, checked, ring) if checked.active else sampler

    return build


class PrioritizedReplayBuffer(StreamBuffer):
    """``UniformReplayBuffer``'s streams, drawing items in proportion to ``(priority + epsilon) ** alpha``.

    ``get_next`` returns ``(items, SampleInfo)``: ``info.ids``, ``info.probabilities`` (the
    real probability of each draw) and ``info.weights`` (importance weights, max-normalised;
    see ``replaybuf.samplers.prioritized``). After computing new priorities (e.g.
    ``|td_error|``) call ``update_priorities(info.ids, priorities)``.

    Args:
        data_spec, batch_size, max_length, seed, dataset_drop_remainder,
            dataset_window_shift, storage, path, respect_episodes, pad_episode_ends,
            episode_end_field, her: as for UniformReplayBuffer.
        alpha: how much prioritisation is used (0: uniform).
        beta: importance-sampling exponent, a float or a zero-argument callable read at
            every sample (an annealing schedule); also settable through ``.beta``.
        epsilon: added to every priority before ``** alpha``.
        compiled: None (default) uses numba's compiled tree kernels when numba is
            installed (the ``fast`` extra), False the NumPy ones, True insists on numba.
        max_times_sampled: an item drawn this many times is consumed (its mass leaves the
            trees); a batch's items are distinct (docs/sample_rules.md).
        max_staleness, version_field: items whose ``version_field`` (a scalar integer field) is
            older than ``buffer.policy_version - max_staleness`` are not drawn.
        replacement, drop_remainder: only True and False: epochs are uniform, refused here.

    Raises:
        ArgumentError: alpha or epsilon not a finite float >= 0, beta outside [0, 1],
            compiled not None/True/False, ``replacement=False``; the UniformReplayBuffer's
            argument errors.
        ImportError: compiled=True without numba installed.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        alpha: float = 0.6,
        beta: float | Callable[[], float] = 0.4,
        epsilon: float = 1e-6,
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
        compiled: bool | None = None,
        her: HindsightRelabel | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
    ):
        sampler = prioritized_sampler(
            alpha,
            beta,
            epsilon,
            compiled,
            respect_episodes,
            pad_episode_ends,
            episode_end_field,
            replacement=replacement,
            max_times_sampled=max_times_sampled,
            max_staleness=max_staleness,
            version_field=version_field,
            drop_remainder=drop_remainder,
        )
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            storage=lambda flat, ring: open_storage(storage, path, flat, ring),
            sampler=sampler,
            seed=seed,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
            relabel=relabel_part(her, respect_episodes),
        )

    @property
    def alpha(self) -> float:
        return self._sampler.alpha

    @property
    def beta(self) -> float:
        """The importance-sampling exponent used by the next sample."""
        return self._sampler.beta()

    @beta.setter
    def beta(self, value: float | Callable[[], float]) -> None:
        check_beta(value)
        self._sampler.beta_source = value

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Set the priorities of the items (or windows) with logical ``ids``.

        ``ids`` is ``info.ids`` of a sample: ``[B]``, or ``[B, T]`` for windows (only the
        first id of each window counts). Ids of items overwritten since they were sampled
        are ignored (their slots now hold other items); duplicates: the last one wins.

        Raises:
            ArgumentError: ``priorities`` is not numbers shaped like ``ids`` (without the time axis).
            PriorityError: a priority that is zero, negative, NaN or infinite, or an id that
                was never added; nothing is changed.
        """
        with self._lock:
            self._sampler.update_priorities(self._ring, ids, priorities)
