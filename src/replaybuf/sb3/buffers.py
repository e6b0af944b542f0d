"""SB3's ``ReplayBuffer`` and ``DictReplayBuffer`` over replaybuf's NumPy buffers.

Each class is a subclass of SB3's own (so SB3's ``isinstance`` checks, e.g. in
``load_replay_buffer``, accept it) that never allocates SB3's arrays: the transitions live
in a ``replaybuf.UniformReplayBuffer`` (records: one gather per sample) of ``n_envs``
streams of ``buffer_size // n_envs`` steps, or a ``FrameStackReplayBuffer`` for image
spaces (each frame stored once, optionally compressed). SB3's step ``pos`` of environment
``e`` is the native buffer's slot ``pos * n_envs + e``, so ``observations``, ``actions``,
``rewards``, ``dones``, ``timeouts`` (and ``next_observations`` outside frame stacks) are
writable views shaped ``[buffer_size, n_envs, ...]`` of the stored records, as SB3's
arrays are. Samples are SB3's ``ReplayBufferSamples`` / ``DictReplayBufferSamples`` on
``device``, drawn with NumPy's global generator as SB3 does (``set_random_seed`` applies).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common import buffers as sb3
from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples

from replaybuf.buffer import check_positive
from replaybuf.buffers import FrameStackReplayBuffer, UniformReplayBuffer
from replaybuf.errors import ArgumentError, EmptyBufferError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.sb3.spaces import layout
from replaybuf.specs import ArraySpec

__all__ = ["DictReplayBuffer", "ReplayBuffer"]

# attributes rebuilt from the native buffer when unpickled, never pickled themselves
_DERIVED = ("_native", "observations", "next_observations", "actions", "rewards", "dones", "timeouts")


class ReplayBuffer(sb3.ReplayBuffer):
    """SB3's ``ReplayBuffer`` (same constructor, methods and attributes) on replaybuf's storage.

    Args:
        buffer_size, observation_space, action_space, device, n_envs,
            handle_timeout_termination: as SB3's.
        optimize_memory_usage: accepted and recorded for SB3's algorithms; memory is saved
            by the frame-stack storage instead, so it combines with timeout handling.
        frames: store image observations as frame stacks (each frame once); None (default)
            does so for image spaces, False keeps whole observations in plain records.
        compression, compression_level: keep stored frames compressed (``"lz4"``, ``"zstd"``;
            see ``replaybuf.FrameStackReplayBuffer``); image spaces only.

    Raises:
        ArgumentError: a non-positive ``buffer_size`` or ``n_envs``; a Dict space (use
            DictReplayBuffer); ``compression`` or ``frames=True`` without image observations.
    """

    _dict_space = False

    def __init__(
        self,
        buffer_size: int,
        observation_space: Any,
        action_space: Any,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        frames: bool | None = None,
        compression: str | None = None,
        compression_level: int | None = None,
    ):
        check_positive("buffer_size", buffer_size, allow_none=False)
        check_positive("n_envs", n_envs, allow_none=False)
        plan = layout(observation_space, action_space, self._dict_space, frames)
        if compression is not None and not plan.stacked:
            raise ArgumentError(
                f"compression: only image observations (frame stacks) are stored compressed, got {compression!r} "
                f"for {observation_space}"
            )
        sb3.BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=int(n_envs))
        self.buffer_size = max(int(buffer_size) // self.n_envs, 1)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = bool(handle_timeout_termination)
        self._native_options = {"stacked_fields": plan.stacked, "stack_axis": plan.stack_axis}
        if plan.stacked:
            self._native_options.update(compression=compression, compression_level=compression_level)
        self._spec = plan.spec
        self._open()

    # -- storage -------------------------------------------------------------------------------
    def _open(self) -> None:
        """Build the native buffer and bind SB3's array attributes to its records."""
        options = dict(self._native_options)
        stacked_fields = options.pop("stacked_fields")
        if stacked_fields:
            self._native: Any = FrameStackReplayBuffer(
                self._spec, self.n_envs, self.buffer_size, stacked_fields=stacked_fields, **options
            )
        else:
            self._native = UniformReplayBuffer(self._spec, self.n_envs, self.buffer_size)
        flat = FlatSpec(self._spec)
        storage = self._native._storage
        stacked = {leaf.index for leaf in getattr(storage, "stacked", ())}
        plain = [i for i in range(len(flat.leaves)) if i not in stacked]
        views: list[Any] = [None] * len(flat.leaves)
        for i, field in zip(plain, storage.fields, strict=False):
            views[i] = field.reshape(self.buffer_size, self.n_envs, *flat.leaves[i].shape)
        fields = flat.unflatten(views)
        for name, attribute in (("observation", "observations"), ("next_observation", "next_observations")):
            if not stacked:  # frame stacks have no array of whole observations
                setattr(self, attribute, fields[name])
        self.actions, self.rewards = fields["action"], fields["reward"]
        self.dones, self.timeouts = fields["done"], fields["timeout"]

    @property
    def native(self) -> Any:
        """The replaybuf buffer holding the transitions (its checkpoints: ``save`` / ``load``)."""
        return self._native

    def __getstate__(self) -> dict:
        """Pickles (``save_replay_buffer``, ``deepcopy``) as the attributes plus the native
        buffer's ``state_dict()``."""
        state = {key: value for key, value in self.__dict__.items() if key not in _DERIVED}
        state["_native_state"] = self._native.state_dict()
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        native_state = state.pop("_native_state")
        self.__dict__.update(state)
        self._open()
        self._native.load_state_dict(native_state)

    # -- SB3's API ---------------------------------------------------------------------------
    def add(
        self,
        obs: Any,
        next_obs: Any,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of every environment (each argument has ``n_envs`` rows).

        Raises:
            SpecMismatchError: an argument (named, with its key for Dict observations) that
                does not hold ``n_envs`` rows of its field, or ``infos`` that is not ``n_envs``
                dicts; nothing is written.
        """
        if len(infos) != self.n_envs:
            raise SpecMismatchError(f"infos: expected a list of {self.n_envs} dicts (one per env), got {len(infos)}")
        if self.handle_timeout_termination:
            timeouts: Any = [info.get("TimeLimit.truncated", False) for info in infos]
        else:
            timeouts = 0.0
        spec = self._spec
        self._native.add_batch(
            {
                "observation": self._observation_rows("obs", obs),
                "next_observation": self._observation_rows("next_obs", next_obs),
                "action": self._rows("action", action, spec["action"]),
                "reward": self._rows("reward", reward, spec["reward"]),
                "done": self._rows("done", done, spec["done"]),
                "timeout": self._rows("infos", timeouts, spec["timeout"], broadcast=True),
            }
        )
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def sample(self, batch_size: int, env: Any = None) -> Any:
        """``batch_size`` transitions drawn uniformly (with replacement), as SB3's.

        Raises:
            ArgumentError: ``batch_size`` is not a positive int.
            EmptyBufferError: nothing is stored.
        """
        check_positive("batch_size", batch_size, allow_none=False)
        upper = self.buffer_size if self.full else self.pos
        if upper == 0:
            raise EmptyBufferError(
                f"The {type(self).__name__} is empty. Make sure to add items before sampling the buffer."
            )
        return self._get_samples(np.random.randint(0, upper, size=batch_size), env=env)

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        items = self._read(batch_inds, env_indices)
        return self._samples(
            items["observation"],
            items["action"],
            items["next_observation"],
            (items["done"] * (1 - items["timeout"])).reshape(-1, 1),
            self._normalize_reward(items["reward"].reshape(-1, 1), env),
            env,
        )

    def reset(self) -> None:
        """Forget every transition (SB3's only rewinds ``pos``; ours empties the storage)."""
        self._native.clear()
        super().reset()

    # -- internals ----------------------------------------------------------------------------
    def _read(self, batch_inds: np.ndarray, env_indices: np.ndarray) -> dict:
        """The stored fields of steps ``batch_inds`` of environments ``env_indices``: one gather."""
        slots = np.asarray(batch_inds, np.int64) * self.n_envs + env_indices
        items, _ = self._native._read_ids(slots)
        return items

    def _samples(
        self, obs: Any, actions: np.ndarray, next_obs: Any, dones: np.ndarray, rewards: np.ndarray, env: Any, **extra
    ) -> Any:
        """SB3's samples tuple on ``device``, observations normalized by ``env`` (rewards come normalized)."""
        samples = DictReplayBufferSamples if self._dict_space else ReplayBufferSamples
        return samples(
            observations=self._tensors(self._normalize_obs(obs, env)),
            actions=self._tensor(actions),
            next_observations=self._tensors(self._normalize_obs(next_obs, env)),
            dones=self._tensor(dones),
            rewards=self._tensor(rewards),
            **{key: self._tensor(value) for key, value in extra.items()},
        )

    def _tensor(self, array: np.ndarray) -> th.Tensor:
        # a fresh gather: one contiguous copy at most, no second copy on the CPU
        return th.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def _tensors(self, obs: Any) -> Any:
        if isinstance(obs, dict):
            return {key: self._tensor(value) for key, value in obs.items()}
        return self._tensor(obs)

    def _observation_rows(self, name: str, obs: Any) -> Any:
        spec = self._spec["observation"]
        if not isinstance(spec, dict):
            return self._rows(name, obs, spec)
        if not isinstance(obs, dict) or set(obs) != set(spec):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise SpecMismatchError(f"{name}: expected a dict with the keys {sorted(spec)}, got {got}")
        return {key: self._rows(f"{name}/{key}", obs[key], leaf) for key, leaf in spec.items()}

    def _rows(self, name: str, value: Any, spec: ArraySpec, broadcast: bool = False) -> np.ndarray:
        """``value`` as ``[n_envs, *spec.shape]`` rows of the spec's dtype (cast as SB3's
        assignment casts), or SpecMismatchError naming ``name``."""
        shape = (self.n_envs, *spec.shape)
        got = repr(value)
        try:
            array = np.asarray(value)
            got = f"shape {array.shape} {array.dtype}"
            if broadcast and array.ndim == 0:
                array = np.broadcast_to(array, shape)
            if array.size == prod(shape):
                return array.reshape(shape).astype(spec.dtype, copy=False)
        except (TypeError, ValueError):
            pass
        raise SpecMismatchError(
            f"{name}: expected {self.n_envs} rows (one per env) of shape {spec.shape} {spec.dtype}, got {got}"
        )


class DictReplayBuffer(ReplayBuffer, sb3.DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` on replaybuf's storage: ``ReplayBuffer`` for Dict spaces.

    ``observations`` and ``next_observations`` are dicts of views by key; image keys
    (all of one shape) are stored as frame stacks. Takes ReplayBuffer's arguments.

    Raises:
        ArgumentError: as ReplayBuffer's, and an observation space that is not a Dict.
    """

    _dict_space = True
