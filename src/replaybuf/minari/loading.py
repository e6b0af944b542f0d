"""``load``: a Minari dataset into any replaybuf buffer, episode by episode.

Episodes are dealt to the buffer's ``batch_size`` streams in the dataset's order, each to
the stream holding the fewest items so far, so every stream is a run of whole episodes and
the streams fill evenly; ``add_batch`` then writes one item of every stream per call. When
the last episodes leave some streams shorter, those are padded with copies of their final
boundary item (step_type LAST, which learners already mask), so that every stream gets the
same number of adds. A ``PyUniformReplayBuffer`` (one stream, any number of items per add)
takes each chunk in one ``add_batch``; it is what ``load`` builds for one stream. Memory
stays bounded: episodes are read one at a time and written once about ``chunk_steps`` items
wait (plus at most one episode per stream).

Nothing is written when the dataset does not fit the buffer: the spec is compared first,
and a buffer that held items before is only written after every episode was read and
checked; an empty buffer is written as episodes come and cleared again if one is corrupt.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from replaybuf.buffer import check_positive
from replaybuf.buffers import PyUniformReplayBuffer, UniformReplayBuffer
from replaybuf.errors import ArgumentError, DatasetError, SpecMismatchError
from replaybuf.minari.episodes import EpisodeReader, episode_lengths, open_dataset
from replaybuf.nest import FlatSpec


def load(
    dataset: Any,
    buffer: Any = None,
    *,
    batch_size: int | None = None,
    max_length: int | None = None,
    seed: int | None = None,
    progress: bool | None = None,
    chunk_steps: int = 65_536,
) -> Any:
    """Fill ``buffer`` with the episodes of a Minari dataset, as Trajectory items; return the buffer.

    Args:
        dataset: a dataset id in the local Minari root (``MINARI_DATASETS_PATH``), the folder of
            a dataset, or a ``minari.MinariDataset`` (filtered ones load their episodes only).
        buffer: any replaybuf buffer (NumPy, prioritized, frame-stack, torch, JAX, shared) whose
            data_spec is ``replaybuf.collect_data_spec(dataset)`` up to safe dtype casts. None: a
            new buffer holding the whole dataset: a ``PyUniformReplayBuffer`` for one stream
            (written a chunk per ``add_batch``), a ``UniformReplayBuffer`` for more.
        batch_size: streams of the new buffer (default 1); with a buffer, its own or an error.
        max_length, seed: of the new buffer (max_length: items per stream, the capacity of a
            PyUniformReplayBuffer; default: the longest stream).
        progress: show a tqdm progress bar (None: when stderr is a terminal).
        chunk_steps: items read before they are written (bounds the memory used beside the buffer).

    Raises:
        DatasetError: the dataset is missing, unreadable or corrupt (nothing written).
        SpecMismatchError: the buffer's data_spec does not match the dataset's spaces (nothing written).
        ArgumentError: a bad argument, an option only the new buffer takes, or fewer episodes than streams.
    """
    check_positive("chunk_steps", chunk_steps, allow_none=False)
    check_positive("batch_size", batch_size)
    if buffer is not None:
        given = {"max_length": max_length, "seed": seed}
        for name, value in given.items():
            if value is not None:
                raise ArgumentError(f"{name}: only for the buffer load builds when buffer is None, got {value!r}")
        if batch_size is not None and batch_size != buffer.batch_size:
            raise ArgumentError(f"batch_size: expected the buffer's {buffer.batch_size} or None, got {batch_size}")
    check_positive("max_length", max_length)
    source = open_dataset(dataset)
    reader = EpisodeReader(source)
    target = None if buffer is None else _check_spec(buffer, reader.flat)
    lengths = episode_lengths(source)
    streams = batch_size or (1 if buffer is None else buffer.batch_size)
    single = isinstance(buffer, PyUniformReplayBuffer)
    plan, filled = _deal(lengths, 1 if single else streams)
    if buffer is None:
        length = max_length or int(filled.max())
        if streams == 1:  # one stream: a chunk per add_batch instead of an item
            buffer, single = PyUniformReplayBuffer(reader.spec, length, seed=seed), True
        else:
            buffer = UniformReplayBuffer(reader.spec, streams, length, seed=seed)
        target = reader.flat
    preexisting = bool(buffer.num_frames())
    if preexisting:  # keep "nothing written": read and check everything first
        for _ in _episodes(reader, lengths, plan):
            pass
    try:
        writer = _Writer(buffer, target, single, progress, chunk_steps, source.id)
        writer.run(_episodes(reader, lengths, plan), filled)
    except BaseException:
        if not preexisting:
            buffer.clear()
        raise
    return buffer


def _episodes(reader: EpisodeReader, lengths: np.ndarray, plan: np.ndarray) -> Iterator[tuple[int, list]]:
    """``(stream, leaves)`` of every planned episode, checked against the length its metadata gave."""
    dataset = reader.dataset
    episodes = iter(reader)
    for episode in np.flatnonzero(plan >= 0):
        leaves = next(episodes, None)
        size = 0 if leaves is None else len(leaves[0])
        if size != lengths[episode] + 1:
            raise DatasetError(
                f"dataset {dataset.id}, episode {dataset.episode_indices[episode]}: its metadata "
                f"says {lengths[episode]} steps, its data holds {max(size - 1, 0)}"
            )
        yield int(plan[episode]), leaves


def _deal(lengths: np.ndarray, streams: int) -> tuple[np.ndarray, np.ndarray]:
    """Each episode's stream (-1: no steps, skipped) and the items each stream gets."""
    plan = np.full(len(lengths), -1, np.int64)
    filled = np.zeros(streams, np.int64)
    heap = [(0, s) for s in range(streams)]
    for episode in np.flatnonzero(lengths > 0):
        held, stream = heapq.heappop(heap)
        plan[episode] = stream
        held += int(lengths[episode]) + 1  # its steps and the boundary item
        filled[stream] = held
        heapq.heappush(heap, (held, stream))
    if np.count_nonzero(plan >= 0) < streams:
        raise ArgumentError(
            f"batch_size: expected at most the dataset's {np.count_nonzero(plan >= 0)} non-empty episodes "
            f"(one stream holds whole episodes), got {streams}"
        )
    return plan, filled


def _check_spec(buffer: Any, data: FlatSpec) -> FlatSpec:
    """The buffer's FlatSpec, once its fields, shapes and dtypes take the dataset's items."""
    target = FlatSpec(buffer.data_spec)
    if target.treespec != data.treespec:
        raise SpecMismatchError(
            f"buffer.data_spec: expected the dataset's item fields {data.paths} "
            f"(replaybuf.collect_data_spec(dataset)), got {target.paths}"
        )
    for path, want, have in zip(data.paths, target.leaves, data.leaves, strict=True):
        if want.shape != have.shape or not np.can_cast(have.dtype, want.dtype, "safe"):
            message = f"the buffer expects {want.describe()}, the dataset holds {have.describe()}"
            raise SpecMismatchError(f"{path}: {message}")
    return target


class _Writer:
    """Holds each stream's items until every stream has some, then adds them step by step."""

    def __init__(self, buffer: Any, target: FlatSpec, single: bool, progress: bool | None, chunk_steps: int, name: str):
        self.buffer, self.target, self.single, self.chunk_steps, self.name = buffer, target, single, chunk_steps, name
        self.progress = sys.stderr.isatty() if progress is None else progress

    def run(self, episodes: Iterator[tuple[int, list]], filled: np.ndarray) -> None:
        """Write every planned episode, then pad the shorter streams to the longest one."""
        streams = len(filled)
        self.pending: list[list[list[np.ndarray]]] = [[] for _ in range(streams)]
        self.held = np.zeros(streams, np.int64)
        last: list[list[np.ndarray]] = [[] for _ in range(streams)]
        bar = _progress_bar(int(filled.sum()), self.name) if self.progress else None
        for stream, leaves in episodes:
            self.pending[stream].append(leaves)
            last[stream] = [leaf[-1:] for leaf in leaves]
            self.held[stream] += len(leaves[0])
            if self.held.sum() >= self.chunk_steps and self.held.min():
                self._flush(bar)
        longest = int(filled.max())
        for stream in range(streams):
            pad = longest - int(filled[stream])
            if pad:
                self.pending[stream].append([np.repeat(leaf, pad, axis=0) for leaf in last[stream]])
                self.held[stream] += pad
        self._flush(bar)
        if bar is not None:
            bar.close()

    def _flush(self, bar: Any) -> None:
        """Add the first ``k`` held items of every stream (k: the fewest any stream holds)."""
        k = int(self.held.min())
        if not k:
            return
        heads: list[list[np.ndarray]] = []
        for stream, chunks in enumerate(self.pending):
            joined = [np.concatenate(parts) if len(parts) > 1 else parts[0] for parts in zip(*chunks, strict=True)]
            heads.append([leaf[:k] for leaf in joined])
            rest = [leaf[k:] for leaf in joined]
            self.pending[stream] = [rest] if len(rest[0]) else []
            self.held[stream] -= k
        columns = []
        for index, spec in enumerate(self.target.leaves):
            if len(heads) == 1:
                column = heads[0][index][:, None]
            else:
                column = np.stack([head[index] for head in heads], axis=1)
            columns.append(column.astype(spec.dtype, copy=False))
        unflatten, add = self.target.unflatten, self.buffer.add_batch
        if self.single:
            add(unflatten([column[:, 0] for column in columns]))
        else:
            for t in range(k):
                add(unflatten([column[t] for column in columns]))
        if bar is not None:
            bar.update(k * len(heads))


def _progress_bar(total: int, name: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"loading {name}", unit="item", unit_scale=True)
