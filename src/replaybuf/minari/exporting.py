"""``export``: a buffer's complete episodes written as a Minari dataset.

The buffer holds Trajectory items (``step_type``, ``observation``, ``action``,
``next_step_type``, ``reward``, ``discount``: what the drivers and ``load`` store). An
episode is a run of one stream from a FIRST item to the next boundary item (step_type
LAST): its steps are the items before the boundary, its observations those and the
boundary's. The last step terminated when its discount is 0, else it was truncated.
Items before a stream's first FIRST (the ring overwrote their start), after its last
boundary (an episode still running) and padding boundaries are left out. Episodes are
written in the order they started (stream order within one step), so ``load`` then
``export`` gives back the dataset's episodes in order.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import optree

from replaybuf.errors import ArgumentError, EmptyBufferError, SpecMismatchError
from replaybuf.minari.episodes import import_minari
from replaybuf.nest import to_numpy
from replaybuf.specs import BoundedArraySpec, as_data_spec
from replaybuf.trajectory import StepType

FIELDS = ("step_type", "observation", "action", "next_step_type", "reward", "discount")


def export(
    buffer: Any,
    dataset_id: str,
    *,
    env: Any = None,
    observation_space: Any = None,
    action_space: Any = None,
    data_format: str | None = None,
    algorithm_name: str | None = None,
    description: str | None = None,
) -> Any:
    """Write ``buffer``'s complete episodes as the Minari dataset ``dataset_id``; return it.

    Args:
        buffer: any replaybuf buffer of Trajectory items (a namedtuple or dict with FIELDS).
        dataset_id: the new dataset's id (``namespace/name-v0``) in the local Minari root.
        env: the Gymnasium env (or its id or EnvSpec) the data came from, so that
            ``dataset.recover_environment()`` works; its spaces are the dataset's by default.
        observation_space, action_space: the dataset's spaces (default: the env's, else made
            from the buffer's spec: Discrete for a bounded int64 scalar, Box otherwise).
        data_format: Minari's storage format (``"hdf5"``, ``"arrow"``; None: Minari's default).
        algorithm_name, description: recorded in the dataset's metadata.

    Image observations are stored losslessly (Minari's JPEG encoding is off). Minari's warnings
    that advise filling in metadata (author, permalink, ...) for an upload are silenced.

    Raises:
        SpecMismatchError: the buffer's items are not Trajectory items.
        ArgumentError: dataset_id is malformed or names a dataset that exists.
        EmptyBufferError: the buffer holds no complete episode.
        ImportError: Minari is not installed.
    """
    minari = import_minari()
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage.datasets_root_dir import get_dataset_path

    spec = _trajectory_fields(as_data_spec(buffer.data_spec))
    if not isinstance(dataset_id, str):
        raise ArgumentError(f"dataset_id: expected a str such as 'replaybuf/cartpole-v0', got {dataset_id!r}")
    try:
        parse_dataset_id(dataset_id)
    except ValueError as err:
        raise ArgumentError(f"dataset_id: expected '(namespace/)name(-vN)', got {dataset_id!r} ({err})") from None
    path = get_dataset_path(dataset_id)
    if os.path.exists(os.path.join(path, "data")):
        raise ArgumentError(
            f"dataset_id: a Minari dataset {dataset_id!r} already exists at {path}; "
            "delete it (minari.delete_dataset) or pick another id"
        )
    if env is None:
        observation_space = observation_space or to_space(spec["observation"])
        action_space = action_space or to_space(spec["action"])
    items = optree.tree_map(to_numpy, _trajectory_fields(buffer.gather_all()))
    episodes = list(_episodes(items))
    if not episodes:
        raise EmptyBufferError("buffer: holds no complete episode (a FIRST item through its LAST boundary item)")
    with warnings.catch_warnings():  # Minari's advice to fill in metadata meant for uploads
        warnings.filterwarnings("ignore", r"`\w+` is set to None|env_spec is None", UserWarning)
        return minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            env=env,
            observation_space=observation_space,
            action_space=action_space,
            data_format=data_format,
            algorithm_name=algorithm_name,
            description=description,
            jpeg_encoding=False,
        )


def _trajectory_fields(nest: Any) -> dict:
    """The FIELDS of a Trajectory (or dict) nest, by name."""
    names = getattr(nest, "_fields", None) or (list(nest) if isinstance(nest, dict) else [])
    missing = [name for name in FIELDS if name not in names]
    if missing:
        raise SpecMismatchError(
            f"buffer.data_spec: export needs Trajectory items with the fields {list(FIELDS)}, "
            f"missing {missing} (got {type(nest).__name__} with {list(names)})"
        )
    return {name: (nest[name] if isinstance(nest, dict) else getattr(nest, name)) for name in FIELDS}


def _episodes(items: dict) -> Iterator[Any]:
    """Minari EpisodeBuffers of every complete episode, in the order they started."""
    from minari.data_collector import EpisodeBuffer

    step_type = np.asarray(items["step_type"])
    if step_type.ndim == 1:  # a single-stream buffer gathered as [n]
        items = optree.tree_map(lambda leaf: leaf[None], items)
        step_type = step_type[None]
    spans = []
    for stream, types in enumerate(step_type):
        firsts = np.flatnonzero(types == StepType.FIRST)
        lasts = np.flatnonzero(types == StepType.LAST)
        ends = np.searchsorted(lasts, firsts)
        for index, (first, end) in enumerate(zip(firsts, ends, strict=True)):
            following = firsts[index + 1] if index + 1 < len(firsts) else len(types)
            if end < len(lasts) and lasts[end] < following:
                spans.append((int(first), stream, int(lasts[end])))
    for first, stream, last in sorted(spans):
        terminations = np.zeros(last - first, np.bool_)
        terminations[-1] = items["discount"][stream, last - 1] == 0
        yield EpisodeBuffer(
            observations=_span(items["observation"], stream, first, last + 1),
            actions=_span(items["action"], stream, first, last),
            rewards=items["reward"][stream, first:last],
            terminations=terminations,
            truncations=~terminations & (np.arange(last - first) == last - first - 1),
        )


def _span(nest: Any, stream: int, start: int, stop: int) -> Any:
    return optree.tree_map(lambda leaf: leaf[stream, start:stop], nest)


def to_space(spec: Any) -> Any:
    """The Gymnasium space of a spec nest: Dict / Tuple for dicts and tuples, Discrete for a
    bounded int64 scalar, Box (with the spec's bounds, else the dtype's range) otherwise."""
    import gymnasium as gym

    if isinstance(spec, dict):
        return gym.spaces.Dict({key: to_space(value) for key, value in spec.items()})
    if isinstance(spec, tuple):
        return gym.spaces.Tuple([to_space(value) for value in spec])
    dtype = spec.dtype
    bounded = isinstance(spec, BoundedArraySpec)
    if bounded and spec.shape == () and dtype == np.int64:
        return gym.spaces.Discrete(int(spec.maximum) - int(spec.minimum) + 1, start=int(spec.minimum))
    if bounded:
        low, high = spec.minimum, spec.maximum
    elif dtype.kind == "f":
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    return gym.spaces.Box(low, high, spec.shape, dtype)
