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
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common import buffers as sb3
from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples

from replaybuf.buffer import check_positive
from replaybuf.buffers import FrameStackReplayBuffer, UniformReplayBuffer
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import read_state, write_state
from replaybuf.sb3.finals import FinalObservations
from replaybuf.sb3.spaces import layout

__all__ = ["DictReplayBuffer", "ReplayBuffer"]

# attributes rebuilt from the native buffer when unpickled, never pickled themselves
_DERIVED = (
    "_native",
    "observations",
    "_next_observations",
    "actions",
    "rewards",
    "dones",
    "timeouts",
    "_final_counters",
)


def _row_meta(spec: dict, n_envs: int) -> dict:
    """``field path: (shape, dtype)`` of one add's rows per leaf; ``(None, None)`` for a Dict observation."""
    meta = {}
    for name, leaf in spec.items():
        if isinstance(leaf, dict):
            meta[name] = (None, None)
            meta.update({f"{name}/{key}": ((n_envs, *sub.shape), sub.dtype) for key, sub in leaf.items()})
        else:
            meta[name] = ((n_envs, *leaf.shape), leaf.dtype)
    return meta


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
    _natives: tuple = (UniformReplayBuffer, FrameStackReplayBuffer)  # plain records, frame stacks
    _sampler_options: dict = {}  # the native buffer's sampling options (prioritized: alpha, beta, ...)

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
        self._native_options: dict = {}  # the frame-stack storage's, for image spaces
        if plan.stacked:
            self._native_options = {
                "stacked_fields": plan.stacked,
                "stack_axis": plan.stack_axis,
                "compression": compression,
                "compression_level": compression_level,
            }
        self._spec = plan.spec
        self._row_meta = _row_meta(plan.spec, self.n_envs)
        self._no_timeouts = np.zeros(self.n_envs, np.float32)
        self._flag_rows = (self._no_timeouts, np.ones(self.n_envs, np.float32))  # False, True
        self._once = "final" in plan.spec  # plain observations: each stored once (replaybuf.sb3.finals)
        if self._once:
            self._steps = 0  # steps added since the buffer was empty
            self._no_finals = np.full(self.n_envs, -1, np.int64)
            self._finals = FinalObservations(plan.spec["observation"].shape, plan.spec["observation"].dtype)
            self._pending = np.zeros((self.n_envs, *plan.spec["observation"].shape), plan.spec["observation"].dtype)
        self._open()

    # -- storage -------------------------------------------------------------------------------
    def _open(self) -> None:
        """Build the native buffer and bind SB3's array attributes to its records."""
        uniform, frame_stacks = self._natives
        options = {**self._native_options, **self._sampler_options}
        if self._native_options:
            self._native: Any = frame_stacks(self._spec, self.n_envs, self.buffer_size, **options)
        else:
            self._native = uniform(self._spec, self.n_envs, self.buffer_size, **options)
        flat = FlatSpec(self._spec)
        storage = self._native.storage
        stacked = {leaf.index for leaf in getattr(storage, "stacked", ())}
        plain = [i for i in range(len(flat.leaves)) if i not in stacked]
        views: list[Any] = [None] * len(flat.leaves)
        stored = storage.fields  # by flat index (a stacked leaf's entry: its frame pointers)
        for i in plain:
            views[i] = stored[i].reshape(self.buffer_size, self.n_envs, *flat.leaves[i].shape)
        fields = flat.unflatten(views)
        if not stacked:  # frame stacks have no array of whole observations
            self.observations = fields["observation"]
        if "next_observation" in fields and not stacked:
            self.next_observations = fields["next_observation"]
        self.actions, self.rewards = fields["action"], fields["reward"]
        self.dones, self.timeouts = fields["done"], fields["timeout"]
        self._final_counters = fields.get("final")
        if self._once:  # which stored leaf the next observations are read from (one gather of records)
            self._observation_leaf = flat.paths.index("observation")

    @property
    def next_observations(self) -> Any:
        """SB3's ``next_observations``: a writable view of the stored ones (Dict spaces), or,
        where each observation is stored once, a fresh array built from the stored ones
        (reading only: writing to it changes nothing). Absent for frame stacks."""
        if self._once:
            steps = np.repeat(np.arange(self.buffer_size), self.n_envs)
            envs = np.tile(np.arange(self.n_envs), self.buffer_size)
            counters = self._final_counters[steps, envs]
            return self._next_observation(steps, envs, counters).reshape(self.observations.shape)
        try:
            return self.__dict__["_next_observations"]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} of frame stacks has no next_observations array") from None

    @next_observations.setter
    def next_observations(self, value: Any) -> None:
        self.__dict__["_next_observations"] = value

    @property
    def native(self) -> Any:
        """The replaybuf buffer holding the transitions (its checkpoints: ``save`` / ``load``)."""
        return self._native

    def save(self, path: Any) -> None:
        """Write replaybuf's checkpoint folders under ``path``: ``transitions`` (the native
        buffer's ``save``) and, where observations are stored once, ``next_observations``
        (the newest steps' and the final ones)."""
        root = Path(path)
        self._native.save(root / "transitions")
        if self._once:
            write_state(
                root / "next_observations", {"steps": self._steps, "pending": self._pending, **self._finals.state()}
            )

    def load(self, path: Any) -> None:
        """Replace the transitions with those ``save`` wrote (a buffer of the same spaces,
        ``buffer_size`` and ``n_envs``); ``pos`` and ``full`` follow.

        Raises:
            CheckpointError: as ``replaybuf.UniformReplayBuffer.load``, or next observations
                of another shape or dtype; nothing changes.
        """
        root = Path(path)
        kept = read_state(root / "next_observations") if self._once else None
        if kept is not None:
            pending, rows = np.asarray(kept.get("pending")), np.asarray(kept.get("rows"))
            if (pending.shape, pending.dtype, rows.shape[1:]) != (
                self._pending.shape,
                self._pending.dtype,
                self._pending.shape[1:],
            ):
                raise CheckpointError(
                    f"{root / 'next_observations'}: expected next observations {self._pending.shape} "
                    f"{self._pending.dtype}, got {pending.shape} {pending.dtype} (rows {rows.shape[1:]})"
                )
        self._native.load(root / "transitions")
        if kept is not None:
            self._steps = int(kept["steps"])
            self._pending[...] = pending
            self._finals.load_state(kept)
        steps = self._native.num_frames() // self.n_envs
        self.full = steps >= self.buffer_size
        self.pos = self._native.ring.steps % self.buffer_size

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
                does not hold ``n_envs`` rows of its field, or (with timeout handling) ``infos``
                that is neither ``n_envs`` dicts nor one dict of per-env arrays (Gymnasium's
                vector envs); nothing is written.
        """
        n = self.n_envs
        if not self.handle_timeout_termination:
            timeouts: Any = self._no_timeouts
        elif infos.__class__ is list and n == 1 and len(infos) == 1:  # one of two constant rows: no array built
            timeouts = self._flag_rows[bool(infos[0].get("TimeLimit.truncated", False))]
        elif isinstance(infos, dict):  # Gymnasium's vector-env infos: one dict of per-env arrays
            timeouts = infos.get("TimeLimit.truncated", self._no_timeouts)
        elif len(infos) == n:  # a list (a tuple from SubprocVecEnv) of one dict per env
            timeouts = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos], np.float32)
        else:
            raise SpecMismatchError(f"infos: expected a list of {n} dicts (one per env), got {len(infos)}")
        rows = self._rows
        items = {
            "observation": rows("obs", obs, "observation"),
            "next_observation": rows("next_obs", next_obs, "observation"),
            "action": rows("action", action, "action"),
            "reward": rows("reward", reward, "reward"),
            "done": rows("done", done, "done"),
            "timeout": rows("infos", timeouts, "timeout"),
        }
        if self._once:
            self._add_once(items)
        else:
            self._native.add_batch(items)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def _add_once(self, items: dict) -> None:
        """Store a step's observations once: its next observation waits (``_pending``) for
        the next step, and is kept among the finals only where that step's observation differs."""
        next_obs = items.pop("next_observation")
        items["final"] = self._no_finals
        self._native.add_batch(items)
        if self._steps:
            previous, obs, n = self._pending, items["observation"], self.n_envs
            if n == 1:
                envs = [0] if previous.tobytes() != obs.tobytes() else []
            else:  # byte for byte, so a NaN matches itself
                obs = np.ascontiguousarray(obs).reshape(n, -1).view(np.uint8)
                envs = np.flatnonzero((previous.reshape(n, -1).view(np.uint8) != obs).any(axis=1))
            if len(envs):
                counters = self._finals.append(previous[envs], self._steps - 1, self._steps - self.buffer_size + 1)
                self._final_counters[(self.pos - 1) % self.buffer_size, envs] = counters
        self._pending[...] = next_obs
        self._steps += 1

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
        return self._one_step_samples(self._read(batch_inds, self._env_indices(len(batch_inds))), env)

    def _env_indices(self, count: int) -> np.ndarray:
        """SB3's draw of each sampled step's environment, from NumPy's global generator. With
        one env, zeros without a draw: ``randint(0, 1)`` takes nothing from the generator, so
        the draws that follow stay SB3's."""
        if self.n_envs == 1:
            return np.zeros(count, np.int64)
        return np.random.randint(0, high=self.n_envs, size=(count,))

    def _one_step_samples(self, items: dict, env: Any) -> Any:
        """SB3's samples of stored transitions (dones that were timeouts count as not done)."""
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
        if self._once:
            self._steps = 0
            self._finals = FinalObservations(self._pending.shape[1:], self._pending.dtype)
        super().reset()

    # -- internals ----------------------------------------------------------------------------
    def _read(self, batch_inds: np.ndarray, env_indices: np.ndarray) -> dict:
        """The stored fields of steps ``batch_inds`` of environments ``env_indices``: one
        gather (and, where observations are stored once, one for the next observations)."""
        steps = np.asarray(batch_inds, np.int64)
        items, _ = self._native.read_ids(self._slot_ids(steps, env_indices))
        return self._with_next(items, steps, env_indices)

    def _slot_ids(self, steps: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """The native buffer's ids of steps ``steps`` of envs ``envs`` (``step * n_envs + env``)."""
        return steps * self.n_envs + envs if self.n_envs > 1 else steps

    def _with_next(self, items: dict, steps: np.ndarray, envs: np.ndarray) -> dict:
        """``items`` (those of steps ``steps`` of envs ``envs``) with their ``next_observation``."""
        if self._once:
            items["next_observation"] = self._next_observation(steps, envs, items.pop("final"))
        return items

    def _next_observation(self, steps: np.ndarray, envs: np.ndarray, counters: np.ndarray) -> np.ndarray:
        """The next observations of steps ``steps`` of envs ``envs``, whose items hold ``counters``:
        the next step's observation, a final one, or the newest step's (``_pending``)."""
        following = self._native.storage.read(self._slot_ids((steps + 1) % self.buffer_size, envs))
        following = following[self._observation_leaf]
        if counters.max(initial=-1) >= 0:
            finals = counters >= 0
            following[finals] = self._finals.read(counters[finals])
        newest = steps == (self.pos - 1) % self.buffer_size
        if newest.any():
            following[newest] = self._pending[envs[newest]]
        return following

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

    def _rows(self, name: str, value: Any, field: str) -> Any:
        """``value`` as ``[n_envs, *shape]`` rows of ``field``'s dtype (cast as SB3's assignment
        casts; Dict observations: a dict of such rows by key), or SpecMismatchError naming ``name``.
        An array of the right shape passes with two attribute checks (the per-step path)."""
        shape, dtype = self._row_meta[field]
        if value.__class__ is np.ndarray:
            if value.shape == shape:  # the per-step case (a Dict observation's shape is None: never equal)
                return value if value.dtype == dtype else value.astype(dtype)
            if shape is not None and value.size == prod(shape):  # e.g. SB3's DQN actions: [n_envs]
                value = value.reshape(shape)
                return value if value.dtype == dtype else value.astype(dtype)
        if shape is None:
            return self._dict_rows(name, value)
        try:
            array = np.asarray(value)
            if field == "timeout" and array.ndim == 0:  # one flag for every env
                array = np.broadcast_to(array, shape)
            if array.size == prod(shape):
                return array.reshape(shape).astype(dtype, copy=False)
            got = f"shape {array.shape} {array.dtype}"
        except (TypeError, ValueError):
            got = f"{value!r:.80}"
        raise SpecMismatchError(
            f"{name}: expected {shape[0]} rows (one per env) of shape {shape[1:]} {dtype}, got {got}"
        )

    def _dict_rows(self, name: str, obs: Any) -> dict:
        spec = self._spec["observation"]
        if not isinstance(obs, dict) or set(obs) != set(spec):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise SpecMismatchError(f"{name}: expected a dict with the keys {sorted(spec)}, got {got}")
        return {key: self._rows(f"{name}/{key}", obs[key], f"observation/{key}") for key in spec}


class DictReplayBuffer(ReplayBuffer, sb3.DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` on replaybuf's storage: ``ReplayBuffer`` for Dict spaces.

    ``observations`` and ``next_observations`` are dicts of views by key; image keys
    (all of one shape) are stored as frame stacks. Takes ReplayBuffer's arguments.

    Raises:
        ArgumentError: as ReplayBuffer's, and an observation space that is not a Dict.
    """

    _dict_space = True
