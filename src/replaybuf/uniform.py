"""The NumPy buffers: ``UniformReplayBuffer`` (segmented) and ``PyUniformReplayBuffer``."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from replaybuf import checkpoint
from replaybuf.buffer import BufferInfo, check_positive
from replaybuf.episodes import EpisodeIndex, EpisodeSampler, episode_markers
from replaybuf.errors import CheckpointError
from replaybuf.info import SampleInfo
from replaybuf.memmap_storage import open_storage, recovered_episode_state
from replaybuf.nest import FlatSpec
from replaybuf.ring import append_rows
from replaybuf.samplers import UniformSampler
from replaybuf.state import check_rng_state, check_spec_state, read_run, require, spec_state, view_run, write_run
from replaybuf.stream_buffer import StreamBuffer

__all__ = ["PyUniformReplayBuffer", "UniformReplayBuffer"]


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
        storage: ``"memory"`` (default) or ``"memmap"``: records in a memory-mapped file
            under ``path`` that survives the process (see docs/persistence.md).
        path: the folder of a ``"memmap"`` storage; reopening it recovers the items.
        respect_episodes: windows never cross an episode's end (docs/episodes.md); those
            that would are never sampled, unless ``pad_episode_ends``.
        pad_episode_ends: with respect_episodes, windows crossing an end are padded past
            it instead (repeating the last real item) and ``info.mask`` says which steps
            are real (``info`` is then a ``SampleInfo``).
        episode_end_field: the path of a scalar field whose nonzero value ends an episode
            (e.g. ``"done"``); default: the ``step_type`` / ``next_step_type`` fields.

    Checkpoints: ``state_dict()`` / ``load_state_dict(state)``, ``save(path)`` / ``load(path)``.
    """

    _name = "UniformReplayBuffer"
    _saving = False  # True while save() builds its state: items as views, not copies

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
    ):
        super().__init__(data_spec, batch_size, max_length, dataset_drop_remainder, dataset_window_shift)
        self._ring, self._storage = self._open_storage(storage, path, int(batch_size), int(max_length))
        self._sampler: Any = UniformSampler()
        self._episodes = None
        if respect_episodes:
            self._episodes = EpisodeIndex(self._ring, episode_markers(self._flat, episode_end_field))
            self._sampler = EpisodeSampler(self._episodes, pad=bool(pad_episode_ends))
        self._rng = np.random.default_rng(seed)
        self._rebuild_episodes()

    def _open_storage(self, storage: str, path: Any, batch_size: int, max_length: int) -> tuple:
        """The ring and the item storage; a subclass with its own storage overrides this."""
        return open_storage(storage, path, self._flat, batch_size, max_length)

    # -- the common API (the rest is StreamBuffer's) ------------------------------------
    def add_batch(self, items: Any) -> None:
        """Add one step to every stream: each leaf shaped ``[batch_size] + spec.shape``.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match the
                data_spec; nothing is written.
        """
        arrays = self._flat.flatten_batch(items, self._ring.batch_size)
        with self._lock:
            ring = self._ring
            self._storage.write((ring.steps % ring.max_length) * ring.batch_size, arrays)
            if self._episodes is not None:
                self._episodes.record(arrays)
            ring.steps += 1

    def get_next(
        self, sample_batch_size: int | None = None, num_steps: int | None = None, time_stacked: bool = True
    ) -> tuple[Any, BufferInfo]:
        """Sample uniformly; see the module docstring of ``replaybuf.buffer`` for shapes.

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` items.
            ArgumentError: sample_batch_size or num_steps is not a positive int.
        """
        check_positive("sample_batch_size", sample_batch_size)
        check_positive("num_steps", num_steps)
        with self._lock:
            ids, probability, extras = self._sampler.draw(
                self._rng, self._ring, sample_batch_size, num_steps, self._name
            )
            leaves = self._storage.read(ids % self._ring.capacity)
        probabilities = _probabilities(probability, sample_batch_size)
        items = self._flat.unflatten(leaves)
        if not time_stacked and num_steps is not None:
            items = _unstack_time(self._flat, leaves, num_steps, batched=sample_batch_size is not None)
        if extras:
            return items, SampleInfo(ids, probabilities, **extras)
        return items, BufferInfo(ids, probabilities)

    def clear(self) -> None:
        with self._lock:
            super().clear()
            if self._episodes is not None:
                self._episodes.clear()

    # -- checkpoints (docs/persistence.md) ----------------------------------------------------
    def state_dict(self) -> dict:
        """A plain snapshot (copies) of the items, counters and RNG; see ``load_state_dict``.

        ``items`` holds each leaf's stored items in id order (oldest first, valid items
        only); subclasses extend the dict via ``super().state_dict()``.
        """
        with self._lock:
            ring = self._ring
            first = ring.first_valid_step()
            count = (ring.steps - first) * ring.batch_size
            run = view_run if self._saving else read_run  # save() streams views under the lock
            leaves = run(self._storage.fields, (first % ring.max_length) * ring.batch_size, count)
            return {
                "class": type(self).__name__,
                "spec": spec_state(self._flat),
                "batch_size": ring.batch_size,
                "max_length": ring.max_length,
                "steps": ring.steps,
                "items": {str(i): leaf for i, leaf in enumerate(leaves)},
                "rng": self._rng.bit_generator.state,
                **({"episodes": self._episodes.state_dict()} if self._episodes is not None else {}),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()``: later samples equal the original's for the same calls.

        Raises:
            CheckpointError: a state of another class, data_spec or geometry, or malformed;
                the buffer is left unchanged.
        """
        ring = self._ring
        if require(state, "class", str) != type(self).__name__:
            raise CheckpointError(f"state: saved from a {state['class']}, cannot load into a {type(self).__name__}")
        check_spec_state(self._flat, require(state, "spec", dict))
        for key in ("batch_size", "max_length"):
            if require(state, key, int) != getattr(ring, key):
                raise CheckpointError(f"state[{key!r}]: saved {state[key]}, this buffer has {getattr(ring, key)}")
        steps, items = require(state, "steps", int), require(state, "items", dict)
        leaves = [items.get(str(i)) for i in range(len(self._flat.leaves))]
        arrays = (np.ndarray, checkpoint.StoredArray)  # StoredArray: a file load() reads directly
        count = leaves[0].shape[0] if leaves and isinstance(leaves[0], arrays) else 0
        first = steps - count // ring.batch_size
        if steps < 0 or count % ring.batch_size or not max(0, steps - ring.max_length) <= first <= steps:
            raise CheckpointError(f"state: {count} items do not fit steps={steps} of this buffer's streams")
        for leaf, spec, path in zip(leaves, self._flat.leaves, self._flat.paths, strict=True):
            if not isinstance(leaf, arrays) or leaf.shape != (count, *spec.shape) or leaf.dtype != spec.dtype:
                got = f"{leaf.shape} {leaf.dtype}" if isinstance(leaf, arrays) else type(leaf).__name__
                raise CheckpointError(
                    f"state['items'] {path}: expected ({count}, *{spec.shape}) {spec.dtype}, got {got}"
                )
        check_rng_state(self._rng, require(state, "rng", dict))
        if first > max(0, steps - ring.max_length) and not hasattr(ring, "floor"):
            raise CheckpointError("state: its oldest items were lost in a crash; load it into storage='memmap'")
        if self._episodes is not None:
            self._episodes.check_state(state.get("episodes"))
        with self._lock:
            ring.steps = 0
            if count:
                try:
                    write_run(self._storage, (first % ring.max_length) * ring.batch_size, leaves)
                except CheckpointError:
                    self.clear()  # a file failed its checksum while being read in: keep nothing of it
                    raise
            ring.steps = steps
            if hasattr(ring, "floor"):
                ring.floor = first if first > max(0, steps - ring.max_length) else 0
            self._rng.bit_generator.state = state["rng"]
            if self._episodes is not None:
                self._episodes.load_state_dict(state.get("episodes"))

    def _rebuild_episodes(self) -> None:
        """A reopened memmap folder holds items, not the episode index: derive it from them."""
        if self._episodes is not None and self._ring.steps:
            rebuilt = recovered_episode_state(self._ring, self._storage.fields, self._episodes.markers)
            self._episodes.load_state_dict(rebuilt)

    def save(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to the checkpoint folder ``path`` atomically (a new version).

        The items are written straight from the storage (no snapshot copy), so adds and
        samples from other threads wait until the save is done.

        Raises:
            CheckpointError: ``path`` exists and is not a checkpoint folder.
        """
        with self._lock:
            self._saving = True
            try:
                state = self.state_dict()
            finally:
                self._saving = False
            checkpoint.write_state(path, state)

    def load(self, path: str | os.PathLike) -> None:
        """Replace this buffer's state with the checkpoint at ``path``.

        Everything but the item data is verified before the buffer changes; the items are
        read straight into the storage and verified while reading (no second copy in RAM).

        Raises:
            CheckpointError: no checkpoint there, a missing, truncated or malformed file, or
                a state this buffer cannot take: the buffer is left unchanged. An item file
                whose checksum fails while it is read in: the buffer is left empty.
        """
        self.load_state_dict(checkpoint.read_state(path, lazy=("items",)))

    # -- internals ---------------------------------------------------------------------------
    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        with self._lock:
            leaves = self._storage.read(ids % self._ring.capacity)
        return self._flat.unflatten(leaves), BufferInfo(ids, ())


def _probabilities(probability: Any, sample_batch_size: int | None) -> np.ndarray:
    """float32 probabilities shaped like the sample: one per drawn item or window."""
    shape = () if sample_batch_size is None else (sample_batch_size,)
    if isinstance(probability, float):  # the uniform case: one value for all
        out = np.empty(shape, np.float32)
        out.fill(probability)
        return out
    return np.broadcast_to(np.asarray(probability, np.float32), shape).copy()


def _unstack_time(flat: FlatSpec, leaves: list[np.ndarray], num_steps: int, batched: bool) -> tuple:
    axis = 1 if batched else 0
    return tuple(flat.unflatten([leaf.take(t, axis=axis) for leaf in leaves]) for t in range(num_steps))


class PyUniformReplayBuffer(UniformReplayBuffer):
    """One FIFO stream of ``capacity`` items in NumPy arrays (TF-Agents' PyUniformReplayBuffer).

    ``add_batch`` takes a batch of any size and appends its items in order; an unbatched
    item is an error that says how to add one.
    """

    _name = "PyUniformReplayBuffer"

    def __init__(
        self,
        data_spec: Any,
        capacity: int,
        *,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike | None = None,
    ):
        super().__init__(data_spec, batch_size=1, max_length=capacity, seed=seed, storage=storage, path=path)

    def add_batch(self, items: Any) -> None:
        """Append ``n`` items (each leaf shaped ``[n] + spec.shape``, n >= 0) in order.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match, or the
                leaves disagree on n; nothing is written.
        """
        arrays = self._flat.flatten_batch(items, None)
        with self._lock:
            append_rows(self._ring, self._storage, arrays)
