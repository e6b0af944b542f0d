"""What a ``replaybuf.sb3`` buffer stores for one step of one environment, from SB3's spaces.

The item is SB3's transition (observation, next observation, action, reward, done,
timeout) with SB3's shapes and dtypes (``get_obs_shape``, ``get_action_dim``, float64
actions kept as float32), so the fields read back as SB3's arrays would. A plain (non-Dict,
non-image) observation is stored once: in place of the next observation the item keeps
``final``, the counter of its next observation in ``replaybuf.sb3.finals`` or -1 where it
is the next step's observation. Image spaces
(SB3's ``is_image_space``: uint8 ``[H, W, C]`` or ``[C, H, W]``, e.g. ``VecFrameStack``'s
stacks) go to the frame-stack storage, which keeps each frame once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer as _SB3ReplayBuffer
from stable_baselines3.common.preprocessing import (
    get_action_dim,
    get_obs_shape,
    is_image_space,
    is_image_space_channels_first,
)

from replaybuf.errors import ArgumentError
from replaybuf.specs import ArraySpec

__all__ = ["Layout", "layout"]

_FLAG = ArraySpec((), np.float32)
_COUNTER = ArraySpec((), np.int64)  # a row of FinalObservations, or -1: the next step's observation


class Layout(NamedTuple):
    """The data_spec of one transition and, for image spaces, the frame-stack options."""

    spec: dict
    stacked: list[str]  # field paths of image observations (empty: plain records)
    stack_axis: int


def _observation(space: spaces.Space) -> ArraySpec:
    return ArraySpec(get_obs_shape(space), space.dtype)


def layout(observation_space: Any, action_space: Any, dict_space: bool, frames: bool | None) -> Layout:
    """The transition spec of these spaces; ``frames`` None stores images as frame stacks.

    Raises:
        ArgumentError: a Dict space for ReplayBuffer or a non-Dict one for DictReplayBuffer;
            ``frames=True`` without image observations, or image keys whose frames differ.
    """
    if isinstance(observation_space, spaces.Dict) != dict_space:
        want = "a gymnasium.spaces.Dict (DictReplayBuffer)" if dict_space else "a non-Dict space (ReplayBuffer)"
        raise ArgumentError(f"observation_space: expected {want}, got {observation_space}")
    if dict_space:
        observation: Any = {key: _observation(space) for key, space in observation_space.spaces.items()}
        images = {key: space for key, space in observation_space.spaces.items() if is_image_space(space, False)}
    else:
        observation = _observation(observation_space)
        images = {None: observation_space} if is_image_space(observation_space, False) else {}
    action = ArraySpec((get_action_dim(action_space),), _SB3ReplayBuffer._maybe_cast_dtype(action_space.dtype))
    spec = {
        "observation": observation,
        "next_observation": observation,
        "action": action,
        "reward": _FLAG,
        "done": _FLAG,
        "timeout": _FLAG,
    }
    if frames is False or (frames is None and not images):
        if not dict_space:  # the next observation is the next step's (replaybuf.sb3.finals)
            del spec["next_observation"]
            spec["final"] = _COUNTER
        return Layout(spec, [], 0)
    if not images:
        raise ArgumentError(
            f"frames: True needs image observations (uint8 [H, W, C] or [C, H, W]), got {observation_space}"
        )
    firsts = {is_image_space_channels_first(space) for space in images.values()}
    shapes = {space.shape for space in images.values()}
    if len(firsts) > 1 or len(shapes) > 1:
        raise ArgumentError(f"frames: the image keys of a frame-stack buffer need one shape, got {observation_space}")
    paths = [name if key is None else f"{name}/{key}" for name in ("observation", "next_observation") for key in images]
    return Layout(spec, paths, 0 if firsts.pop() else -1)
