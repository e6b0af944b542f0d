"""Buffers for stacked-frame image observations that store each frame once (docs/images.md).

``FrameStackReplayBuffer`` and ``PrioritizedFrameStackReplayBuffer`` are the uniform and
prioritized presets over a ``FrameStorage``: same API, same samples (ids, probabilities,
windows, episodes), and every read returns exactly the stacks that were added, while an
84x84x4 observation plus its next observation costs one new 84x84 frame per transition
instead of eight. With ``compression="lz4"`` or ``"zstd"`` each such frame is also kept
compressed (about 0.2-1.3 KB instead of 7.1 KB on Atari frames) and decoded when sampled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from replaybuf.buffers.prioritized import PrioritizedReplayBuffer, prioritized_sampler
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.buffers.uniform import uniform_sampler
from replaybuf.errors import ArgumentError
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.storages import FrameStorage, stacked_leaves
from replaybuf.storages.codecs import make_codec
from replaybuf.storages.frame_memmap import MemmapFrameStorage

__all__ = ["FrameStackReplayBuffer", "PrioritizedFrameStackReplayBuffer"]


def frame_storage(
    stacked_fields: Sequence[str] | None,
    stack_axis: int,
    storage: str,
    path: str | os.PathLike | None,
    compression: str | None = None,
    compression_level: int | None = None,
) -> Callable[[FlatSpec, StreamRing], FrameStorage]:
    """The storage part of the frame-stack presets: in RAM, or in the folder ``path``
    (``storage="memmap"``, raw or compressed frames).

    Raises:
        ArgumentError: as ``stacked_leaves``; a storage other than ``"memory"`` or
            ``"memmap"``, ``"memmap"`` without a path, a path with
            ``"memory"``; as ``replaybuf.storages.codecs.make_codec`` for ``compression`` and its level.
        CheckpointError: as ``MemmapStorage.open`` for the folder ``path``.
    """
    if storage not in ("memory", "memmap"):
        raise ArgumentError(f"storage: expected 'memory' or 'memmap', got {storage!r}")
    if storage == "memory" and path is not None:
        raise ArgumentError(f"path: only used with storage='memmap', got storage='memory' and path={path!r}")
    if storage == "memmap" and path is None:
        raise ArgumentError("path: storage='memmap' needs a folder path for its files")
    make_codec(compression, compression_level, 1)  # the argument errors, before the spec's

    def build(flat: FlatSpec, ring: StreamRing) -> FrameStorage:
        stacked = stacked_leaves(flat, stacked_fields, stack_axis)
        first = stacked[0]
        frame_bytes = prod(first.frame_shape) * flat.leaves[first.index].dtype.itemsize
        codec = make_codec(compression, compression_level, frame_bytes)
        if storage == "memmap":
            return MemmapFrameStorage(path, flat, ring, stacked, codec=codec)  # type: ignore[arg-type]
        return FrameStorage(flat.leaves, stacked, ring.batch_size, ring.max_length, codec=codec)

    return build


class FrameStackReplayBuffer(StreamBuffer):
    """``UniformReplayBuffer`` whose stacked-frame fields store each distinct frame once.

    Args:
        data_spec, batch_size, max_length, seed, respect_episodes, pad_episode_ends,
            episode_end_field, dataset_drop_remainder, dataset_window_shift, replacement,
            max_times_sampled, sampler, max_staleness, version_field, drop_remainder: as for
            UniformReplayBuffer.
        stacked_fields: field paths of the stacked observations (default: ``observation``
            and ``next_observation``, those present). Their frames must share shape and dtype.
        stack_axis: the axis of the stack inside each such field: 0 for Gymnasium's
            FrameStackObservation (``[k, *frame]``), -1 for ``[84, 84, 4]``.
        compression: keep each stored frame compressed: ``"lz4"`` (fastest to sample) or
            ``"zstd"`` (smallest); None (default) keeps raw frames. Needs the ``compress`` extra.
        compression_level: the codec's level (lz4: 0 is LZ4's fast mode, 1-12 LZ4-HC,
            default 3; zstd: -7 to 22, default 1); None for the codec's default.

        storage: ``"memory"`` (default) or ``"memmap"``: records and frames (raw, or
            compressed with ``compression``) in the folder ``path``, read from disk as
            sampled; reopening the folder recovers the items (docs/images.md, docs/persistence.md).

    Raises:
        ArgumentError: as ``stacked_leaves``; a storage other than ``"memory"`` or
            ``"memmap"``, ``"memmap"`` without ``path``, ``path`` without ``"memmap"``; an
            unknown ``compression``, a level outside the codec's range or without a codec,
            or a codec whose package is missing; the UniformReplayBuffer's argument errors.
        CheckpointError: ``path`` holds a buffer of another spec, geometry or kind, or is damaged.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        stacked_fields: Sequence[str] | None = None,
        stack_axis: int = 0,
        compression: str | None = None,
        compression_level: int | None = None,
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
            storage=frame_storage(stacked_fields, stack_axis, storage, path, compression, compression_level),
            sampler=uniform_sampler(respect_episodes, pad_episode_ends, episode_end_field, **rules),
            seed=seed,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
        )


class PrioritizedFrameStackReplayBuffer(StreamBuffer):
    """``PrioritizedReplayBuffer`` whose stacked-frame fields store each distinct frame once.

    Takes PrioritizedReplayBuffer's arguments (the sample-count rules included) plus
    ``stacked_fields``, ``stack_axis``, ``compression`` and ``compression_level``; ``storage``
    and ``path`` as FrameStackReplayBuffer's.
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
        stacked_fields: Sequence[str] | None = None,
        stack_axis: int = 0,
        compression: str | None = None,
        compression_level: int | None = None,
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
            storage=frame_storage(stacked_fields, stack_axis, storage, path, compression, compression_level),
            sampler=sampler,
            seed=seed,
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
        )
