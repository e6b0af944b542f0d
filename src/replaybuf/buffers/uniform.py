"""The NumPy buffers: ``UniformReplayBuffer`` (segmented) and ``PyUniformReplayBuffer``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from replaybuf.buffer import check_positive
from replaybuf.buffers.stream import StreamBuffer, reject_unused
from replaybuf.hindsight import HindsightRelabel, relabel_part
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers import EpisodeIndex, EpisodeSampler, UniformSampler, episode_markers
from replaybuf.samplers.rules import RuledSampler, check_sample_rules
from replaybuf.storages import open_storage

__all__ = ["PyUniformReplayBuffer", "UniformReplayBuffer", "episode_index", "uniform_sampler"]


def episode_index(
    flat: FlatSpec, ring: StreamRing, respect_episodes: bool, pad_episode_ends: bool, episode_end_field: str | None
) -> EpisodeIndex | None:
    """The episode index a sampler keeps (None without ``respect_episodes``).

    Raises:
        ArgumentError: ``pad_episode_ends`` or ``episode_end_field`` without
            ``respect_episodes``; an ``episode_end_field`` that names no scalar field.
    """
    why = "only used with respect_episodes=True"
    if not respect_episodes:
        reject_unused(pad_episode_ends=(pad_episode_ends, False, why), episode_end_field=(episode_end_field, None, why))
        return None
    return EpisodeIndex(ring, episode_markers(flat, episode_end_field))


def uniform_sampler(
    respect_episodes: bool, pad_episode_ends: bool, episode_end_field: str | None, **rules: Any
) -> Callable[[FlatSpec, StreamRing], Any]:
    """The sampler part of the uniform presets: episode-aware when asked, under the sample-count
    ``rules`` (``replacement``, ``max_times_sampled``, ``sampler``, ``max_staleness``,
    ``version_field``, ``drop_remainder``: replaybuf.samplers.rules) when any is set.

    Raises:
        ArgumentError: see ``episode_index`` and ``check_sample_rules``.
    """

    def build(flat: FlatSpec, ring: StreamRing) -> Any:
        checked = check_sample_rules(flat, **rules)
        index = episode_index(flat, ring, respect_episodes, pad_episode_ends, episode_end_field)
        base = UniformSampler() if index is None else EpisodeSampler(index, pad=bool(pad_episode_ends))
        return RuledSampler(base, checked, ring) if checked.active else base

    return build


class UniformReplayBuffer(StreamBuffer):
    """``batch_size`` streams of ``max_length`` items in host memory, sampled uniformly.

    The NumPy twin of TF-Agents' TFUniformReplayBuffer: ``add_batch`` writes one step to
    every stream (leading dimension == batch_size), ``get_next`` draws a step and a stream
    uniformly and returns windows of ``num_steps`` consecutive items of one stream that
    never pass the write head. Thread-safe: adds and reads hold one lock, so no read sees
    a half-written item.

    Args:
        data_spec: a nest (tuple, namedtuple, dict) of ArraySpec, tf.TensorSpec or
            Gymnasium spaces describing one item.
        batch_size: the number of parallel streams (one per environment copy).
        max_length: items kept per stream; capacity is batch_size * max_length.
        seed: seed of the sampling random generator.
        dataset_drop_remainder: in a deterministic pass, drop windows and stream groups
            shorter than asked for.
        dataset_window_shift: in a deterministic pass, the step between window starts
            (default num_steps: windows do not overlap).
        storage: ``"memory"`` (default: one record per item, one-gather samples),
            ``"columns"`` (one array per leaf: faster batched adds of small items, slower
            samples; docs/design.md, Storage) or ``"memmap"``: records in a memory-mapped
            file under ``path`` that survives the process (see docs/persistence.md).
        path: the folder of a ``"memmap"`` storage; reopening it recovers the items.
        respect_episodes: windows never cross an episode's end (docs/episodes.md); those
            that would are never sampled, unless ``pad_episode_ends``.
        pad_episode_ends: with respect_episodes, windows crossing an end are padded past
            it instead (repeating the last real item) and ``info.mask`` says which steps
            are real (``info`` is then a ``SampleInfo``).
        episode_end_field: the path of a scalar field whose nonzero value ends an episode
            (e.g. ``"done"``); default: the ``step_type`` / ``next_step_type`` fields.
        rate_limiter, rate_limiter_timeout: a ``MinSize`` / ``SampleToInsertRatio`` that adds
            and samples wait for, and how long (``StreamBuffer``; docs/many_writers.md).
        her: a ``replaybuf.HindsightRelabel``: samples relabel goals with achieved ones
            (hindsight experience replay; needs ``respect_episodes``; docs/her.md).
        replacement, drop_remainder: ``replacement=False``: shuffled epochs, each eligible item
            (or window / sequence start) drawn once per epoch (``info.epoch``); ``drop_remainder``
            drops an epoch's last, short batch (docs/sample_rules.md).
        max_times_sampled: an item drawn this many times is consumed (1: a queue).
        sampler: None (uniform) or ``"fifo"``: the oldest eligible items first.
        max_staleness, version_field: items whose ``version_field`` (a scalar integer field) is
            older than ``buffer.policy_version - max_staleness`` are not drawn.

    Raises:
        ArgumentError: a non-positive size; ``pad_episode_ends`` or ``episode_end_field``
            without ``respect_episodes``; ``path`` without ``storage="memmap"``; ``her``
            without ``respect_episodes``, or naming fields the data_spec lacks.

    Checkpoints: ``state_dict()`` / ``load_state_dict(state)``, ``save(path)`` / ``load(path)``.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        her: HindsightRelabel | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        sampler: str | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
    ):
        rules = {
            "replacement": replacement,
            "max_times_sampled": max_times_sampled,
            "sampler": sampler,
            "max_staleness": max_staleness,
            "version_field": version_field,
            "drop_remainder": drop_remainder,
        }
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            storage=lambda flat, ring: open_storage(storage, path, flat, ring),
            sampler=uniform_sampler(respect_episodes, pad_episode_ends, episode_end_field, **rules),
            seed=seed,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
            relabel=relabel_part(her, respect_episodes),
        )


class PyUniformReplayBuffer(StreamBuffer):
    """One FIFO stream of ``capacity`` items in NumPy arrays (TF-Agents' PyUniformReplayBuffer).

    ``add_batch`` takes a batch of any size and appends its items in order; an unbatched
    item is an error that says how to add one. ``storage`` and ``path`` as for
    UniformReplayBuffer.
    """

    def __init__(
        self,
        data_spec: Any,
        capacity: int,
        *,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
    ):
        check_positive("capacity", capacity, allow_none=False)
        super().__init__(
            data_spec,
            1,
            capacity,
            storage=lambda flat, ring: open_storage(storage, path, flat, ring),
            sampler=lambda flat, ring: UniformSampler(),
            seed=seed,
            single_stream=True,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
        )
