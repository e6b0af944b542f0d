"""Minari episodes read as Trajectory items: the reading half of ``replaybuf.minari``.

A Minari episode of ``n`` steps holds ``n + 1`` observations and ``n`` actions, rewards,
terminations and truncations. It becomes ``n + 1`` Trajectory items, as the drivers store
an episode: ``n`` steps (FIRST, MID, ...; ``next_step_type`` LAST on the last one;
``discount`` 0 where the step terminated, 1 otherwise, so a truncation stays
bootstrappable) and the boundary item (step_type LAST, the final observation, a zero
action, next_step_type FIRST, reward 0, discount 1). An episode that ended neither way
(collection stopped mid-episode) reads as truncated.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, DatasetError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.trajectory import StepType, Trajectory, collect_data_spec

#: what Minari and h5py raise on a missing, unreadable or corrupt dataset
READ_ERRORS = (OSError, ValueError, KeyError, TypeError, AssertionError, RuntimeError)


def import_minari() -> Any:
    """The minari package, or an ImportError that names the extra to install."""
    try:
        import minari
    except ImportError as err:
        raise ImportError(f"replaybuf.minari needs Minari: pip install 'replaybuf[minari]' ({err})") from err
    return minari


def open_dataset(dataset: Any) -> Any:
    """A ``minari.MinariDataset`` from itself, a dataset id in the local Minari root, or a folder.

    Raises:
        DatasetError: no such dataset or folder, or its metadata cannot be read.
        ArgumentError: ``dataset`` is none of these.
        ImportError: Minari is not installed.
    """
    minari = import_minari()

    if isinstance(dataset, minari.MinariDataset):
        return dataset
    if not isinstance(dataset, (str, os.PathLike)):
        raise ArgumentError(f"dataset: expected a Minari dataset id, a folder or a MinariDataset, got {dataset!r}")
    path = Path(dataset)
    try:
        if isinstance(dataset, os.PathLike) or path.is_dir():
            data = path / "data" if (path / "data" / "metadata.json").exists() else path
            if not (data / "metadata.json").exists():
                raise DatasetError(f"dataset: {str(path)!r} holds no Minari dataset (no metadata.json)")
            return minari.MinariDataset(data)
        return minari.load_dataset(dataset)
    except FileNotFoundError:
        root = os.environ.get("MINARI_DATASETS_PATH", "~/.minari/datasets")
        raise DatasetError(
            f"dataset: no Minari dataset {dataset!r} under the Minari root {root} (MINARI_DATASETS_PATH); "
            "minari.list_local_datasets() lists what is there, minari.download_dataset(id) fetches a remote one"
        ) from None
    except READ_ERRORS as err:
        raise DatasetError(f"dataset: Minari dataset {str(dataset)!r} cannot be read: {err}") from err


def dataset_spec(dataset: Any) -> Trajectory:
    """The Trajectory spec of the dataset's items: its observation and action spaces as specs."""
    return collect_data_spec(dataset)


def episode_lengths(dataset: Any) -> np.ndarray:
    """Steps per episode, in the dataset's order, from the episodes' metadata (no data read).

    Raises:
        DatasetError: an episode's metadata is missing or unreadable.
    """
    try:
        metadata = dataset.storage.get_episode_metadata(dataset.episode_indices)
        return np.array([int(m["total_steps"]) for m in metadata], dtype=np.int64)
    except READ_ERRORS as err:
        raise DatasetError(f"dataset {dataset.id}: episode metadata cannot be read: {err!r}") from err


class EpisodeReader:
    """Turns a dataset's episodes into flat Trajectory leaves ``[n + 1, ...]`` in the spec's order."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.spec = dataset_spec(dataset)
        self.flat = FlatSpec(self.spec)
        self._observation = FlatSpec(self.spec.observation)
        self._action = FlatSpec(self.spec.action)

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        """Every episode with at least one step, read one at a time (the file stays open).

        Raises:
            DatasetError: an episode cannot be read, or a field has the wrong length, shape or
                dtype (the message names the episode and the field).
        """
        episodes = self.dataset.storage.get_episodes(self.dataset.episode_indices)
        while True:
            try:
                episode = next(episodes, None)
            except READ_ERRORS as err:
                raise DatasetError(f"dataset {self._name}: an episode cannot be read: {err!r}") from err
            if episode is None:
                return
            if len(episode["rewards"]):
                yield self.items(episode)

    @property
    def _name(self) -> str:
        return self.dataset.id

    def items(self, episode: dict) -> list[np.ndarray]:
        """The ``n + 1`` Trajectory items of one episode dict (Minari's storage form), as flat leaves."""
        where = f"dataset {self._name}, episode {episode.get('id')}"
        n = len(episode["rewards"])
        rewards = self._column(where, "rewards", episode["rewards"], n, np.float32, kind="f")
        terminated = self._column(where, "terminations", episode["terminations"], n, np.bool_, kind="b")
        self._column(where, "truncations", episode["truncations"], n, np.bool_, kind="b")
        observations = self._leaves(where, "observation", self._observation, episode["observations"], n + 1)
        actions = self._leaves(where, "action", self._action, episode["actions"], n)
        actions = [np.concatenate([a, np.zeros((1, *a.shape[1:]), a.dtype)]) for a in actions]
        step_type = np.full(n + 1, StepType.MID, np.int32)
        step_type[0], step_type[n] = StepType.FIRST, StepType.LAST
        next_step_type = np.full(n + 1, StepType.MID, np.int32)
        next_step_type[n - 1], next_step_type[n] = StepType.LAST, StepType.FIRST
        discount = np.ones(n + 1, np.float32)
        discount[:n][terminated] = 0.0
        trajectory = Trajectory(
            step_type=step_type,
            observation=self._observation.unflatten(observations),
            action=self._action.unflatten(actions),
            policy_info=(),
            next_step_type=next_step_type,
            reward=np.append(rewards, np.float32(0)),
            discount=discount,
        )
        return self.flat.flatten(trajectory)

    @staticmethod
    def _column(where: str, name: str, value: Any, n: int, dtype: Any, kind: str) -> np.ndarray:
        array = np.asarray(value)
        if array.shape != (n,) or (array.dtype.kind not in "biuf" if kind == "f" else array.dtype.kind != "b"):
            want = "numbers" if kind == "f" else "bools"
            raise DatasetError(f"{where}, {name}: expected {n} {want}, got shape {array.shape} {array.dtype}")
        return array.astype(dtype, copy=False)

    @staticmethod
    def _leaves(where: str, field: str, flat: FlatSpec, value: Any, length: int) -> list[np.ndarray]:
        try:
            leaves = flat.flatten(value)
        except SpecMismatchError as err:
            raise DatasetError(f"{where}, {field}: does not have the structure of the dataset's space: {err}") from None
        out = []
        for path, spec, leaf in zip(flat.paths, flat.leaves, leaves, strict=True):
            array = np.asarray(leaf)
            name = field if path == spec.name or path == "item" else f"{field}/{path}"
            if array.shape != (length, *spec.shape) or not np.can_cast(array.dtype, spec.dtype, "safe"):
                raise DatasetError(
                    f"{where}, {name}: expected shape {(length, *spec.shape)} {spec.dtype.name}, "
                    f"got {array.shape} {array.dtype.name}"
                )
            out.append(array.astype(spec.dtype, copy=False))
        return out
