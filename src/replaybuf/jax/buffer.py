"""``JaxReplayBuffer``: the common API over the functional core, state in JAX arrays.

Every call validates on the host first (nothing is dispatched for a bad add, and the
empty-buffer and ``num_steps`` errors come from host counters, without a device sync), then
runs one jitted core function with the state donated, so an add updates the storage in
place. Compiled functions are shared by every buffer of the same description. ``.state``
hands the state pytree (and ``.core`` the description) to a user's own jitted loop.
"""

from __future__ import annotations

import threading
import warnings
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from replaybuf.buffer import BufferInfo, ReplayBuffer, SampleInfo, check_positive, unstack_time
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.dataset import (
    DeterministicPass,
    RandomDataset,
    by_stream,
    check_sample_arguments,
    plan_deterministic_pass,
    plan_sequence_pass,
)
from replaybuf.errors import ArgumentError, SpecMismatchError
from replaybuf.jax.checkpoint import core_state, load_core_state
from replaybuf.jax.core import Buffer, BufferState, make_buffer
from replaybuf.jax.rows import pack
from replaybuf.jax.rules import StoredFields, jax_rules
from replaybuf.jax.sequences import sequence_windows
from replaybuf.nest import FlatSpec
from replaybuf.persistence.front import Checkpoints
from replaybuf.persistence.state import check_rng_state
from replaybuf.refusals import empty, no_episode_window
from replaybuf.ring import StreamRing
from replaybuf.samplers.choice import check_sampler
from replaybuf.samplers.prioritized import check_priority_values, priorities_of_add, priority_update
from replaybuf.samplers.sequences import SequenceRule, check_sequence_arguments, eligible

__all__ = ["JaxReplayBuffer", "JaxUniformReplayBuffer"]


@partial(jax.jit, static_argnums=0, donate_argnums=1)
def _add(core: Buffer, state: BufferState, batch: Any, priorities: Any = None) -> BufferState:
    return core.add(state, batch, priorities)


@partial(jax.jit, static_argnums=(0, 3, 4))
def _sample(core: Buffer, state: BufferState, key_data: jax.Array, size: int, num_steps: int | None):
    return core.sample(state, jax.random.wrap_key_data(key_data, impl="threefry2x32"), size, num_steps)


@partial(jax.jit, static_argnums=(0, 3, 4))
def _sample_sequences(core: Buffer, state: BufferState, key_data: jax.Array, size: int, rule: SequenceRule):
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return core.sample_sequences(state, key, size, rule.num_steps, rule.burn_in, rule.period)


@partial(jax.jit, static_argnums=0)
def _read(core: Buffer, state: BufferState, ids: jax.Array) -> Any:
    return core.read(state, ids)


@partial(jax.jit, static_argnums=0)
def _read_drawn(core: Buffer, state: BufferState, ids: Any, probabilities: Any) -> tuple[Any, jax.Array, jax.Array]:
    """A host draw read: the items at ``ids`` and the draw's ids and probabilities as JAX
    arrays (host arrays moved in the call's own transfer, not one call each)."""
    return core.read(state, ids), ids, probabilities


@partial(jax.jit, static_argnums=(0, 3, 4))
def _read_sequences(core: Buffer, state: BufferState, starts: jax.Array, burn_in: int, num_steps: int):
    ids, mask, learn = sequence_windows(state.episodes.position, state.steps, starts, burn_in, num_steps)
    return core.read(state, ids), ids, mask, learn


@partial(jax.jit, static_argnums=0)
def _packed(core: Buffer, leaves: list) -> jax.Array:
    return pack(core.layout, leaves)


@partial(jax.jit, static_argnums=0, donate_argnums=1)
def _update(core: Buffer, state: BufferState, ids: jax.Array, priorities: jax.Array) -> BufferState:
    return core.update_priorities(state, ids, priorities)


class JaxReplayBuffer(Checkpoints, ReplayBuffer):
    """``batch_size`` streams of ``max_length`` items in JAX arrays (TF-Agents' API).

    Args:
        data_spec: a nest of ArraySpec (or tf/Gymnasium specs) describing one item.
        batch_size, max_length: the ring's geometry; capacity is their product.
        seed: seed of the host generator that keys every sample.
        device: where the state lives (a ``jax.Device``; default JAX's default device).
        dataset_drop_remainder, dataset_window_shift: the deterministic pass's options.
        respect_episodes, episode_end_field, episode_num_steps: episode-exact windows
            (``make_buffer``): windows crossing an episode end are never drawn.
        pad_episode_ends: with respect_episodes, windows are drawn as without episodes and
            padded past the end instead; ``info`` is a ``SampleInfo`` with ``mask``.
        sampler: ``"uniform"`` or ``"prioritized"`` (``update_priorities``; ``info`` is then a
            ``SampleInfo`` with ``weights``); ``prioritized=True``: its deprecated old spelling.
            ``"fifo"``: uniform storage, the oldest eligible items first (a sample-count rule).
        alpha, beta, epsilon: the prioritized sampler's exponents.
        replacement, drop_remainder, max_times_sampled, max_staleness, version_field: the
            sample-count rules, as for ``replaybuf.UniformReplayBuffer`` (docs/sample_rules.md),
            drawn on the host (the same ids for the same seed; ``replaybuf.jax.rules``) and read
            in one jitted gather; ``num_eligible()``, ``policy_version``. Not with
            ``sampler="prioritized"`` or ``respect_episodes``.

    Returned items, ids and probabilities are JAX arrays. With x64 off (JAX's default), 64-bit
    leaves are stored in 32 bits: integers that do not fit are rejected, floats are rounded.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        seed: int | None = None,
        device: Any = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        respect_episodes: bool = False,
        episode_end_field: str | None = None,
        episode_num_steps: int = 1,
        pad_episode_ends: bool = False,
        sampler: str = "uniform",
        prioritized: bool | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
    ):
        check_positive("batch_size", batch_size, allow_none=False)
        check_positive("max_length", max_length, allow_none=False)
        check_positive("dataset_window_shift", dataset_window_shift)
        self._flat = FlatSpec(data_spec)
        fifo = isinstance(sampler, str) and sampler == "fifo" and prioritized is None
        choice = "fifo" if fifo else check_sampler(sampler, prioritized)
        self._ring = self._geometry = StreamRing(int(batch_size), int(max_length), type(self).__name__)
        self._sampler = jax_rules(  # the host sampler of the sample-count rules; None without
            self._flat,
            self._ring,
            choice,
            bool(respect_episodes),
            replacement=replacement,
            max_times_sampled=max_times_sampled,
            max_staleness=max_staleness,
            version_field=version_field,
            drop_remainder=drop_remainder,
        )
        self._policy_version = 0
        self._core = make_buffer(
            self._flat.data_spec,
            batch_size,
            max_length,
            respect_episodes=respect_episodes,
            episode_end_field=episode_end_field,
            episode_num_steps=episode_num_steps,
            pad_episode_ends=pad_episode_ends,
            sampler="uniform" if choice == "fifo" else choice,
            alpha=alpha,
            beta=beta,
            epsilon=epsilon,
        )
        stored = zip(self._flat.leaves, self._core.dtypes, strict=True)
        self._narrowed = [
            (i, np.iinfo(dtype)) for i, (spec, dtype) in enumerate(stored) if spec.dtype != dtype and dtype.kind in "iu"
        ]
        self._device = device
        self._lock = threading.RLock()
        self._rng = np.random.default_rng(seed)
        self._drop_remainder = bool(dataset_drop_remainder)
        self._window_shift = dataset_window_shift
        self._state = self._fresh_state()

    # -- geometry and the state ---------------------------------------------------------------
    @property
    def core(self) -> Buffer:
        """The functional core's description (``core.add(state, batch)``, ...)."""
        return self._core

    @property
    def state(self) -> BufferState:
        """The state pytree, for a user's jitted loop. Donating it invalidates this buffer's
        copy: set the returned state back (``buffer.state = new_state``) before using the
        buffer again."""
        return self._state

    @state.setter
    def state(self, state: BufferState) -> None:
        """Adopt a state produced by the core functions from this buffer's state (one device
        sync: the host counters are read from ``state.steps``).

        Raises:
            ArgumentError: a pytree of another structure, shape or dtype than this buffer's;
                any state on a buffer with sample-count rules (they keep the host's record of
                every add, which adds made outside the buffer bypass).
        """
        if self._sampler is not None:
            raise ArgumentError(
                "state: a buffer with sample-count rules keeps a host record of its adds; set no state from "
                "outside (adds through add_batch, checkpoints through load_state_dict)"
            )
        mine = jax.tree_util.tree_structure(self._state)
        if jax.tree_util.tree_structure(state) != mine or any(
            (a.shape, a.dtype) != (b.shape, b.dtype)
            for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(self._state), strict=True)
        ):
            raise ArgumentError(
                "state: expected a BufferState of this buffer's description (same leaves, shapes, dtypes)"
            )
        with self._lock:
            self._state = state
            self._ring.reset(int(state.steps))

    # -- the common API ----------------------------------------------------------------------
    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Add one step to every stream: each leaf shaped ``[batch_size] + spec.shape``;
        ``priorities`` (``sampler="prioritized"``): the new items' ``[batch_size]`` priorities
        (each raises the largest, which items added without get).

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match the data_spec,
                or an integer does not fit its 32-bit storage (x64 off); nothing is written.
            ArgumentError: ``priorities`` without ``sampler="prioritized"``, or not
                ``[batch_size]`` numbers; nothing is written.
            PriorityError: a priority that is not finite and > 0; nothing is written.
        """
        without = "this buffer was made without sampler='prioritized'" if self._core.priorities is None else None
        given = priorities_of_add(priorities, self._ring.batch_size, without)
        priorities = None if given is None else given.astype(np.float32)
        arrays = self._flat.flatten_batch(items, self._ring.batch_size)
        for index, limits in self._narrowed:
            leaf = arrays[index]
            if leaf.size and (leaf.min() < limits.min or leaf.max() > limits.max):
                raise SpecMismatchError(
                    f"{self._flat.paths[index]}: values in [{leaf.min()}, {leaf.max()}] do not fit the "
                    f"{limits.dtype} storage (JAX x64 is off; enable jax_enable_x64 for 64-bit leaves)"
                )
        batch = self._core.treedef.unflatten(arrays)
        with self._lock:
            self._state = _add(self._core, self._state, batch, priorities)
            self._ring.steps += 1
            if self._sampler is not None:
                self._sampler.added(self._ring, arrays)

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, BufferInfo]:
        """Sample windows (uniformly, by priority, or inside episodes); see ``replaybuf.buffer``.

        With ``burn_in`` or ``period`` (``respect_episodes=True``): sequences of ``burn_in +
        num_steps`` steps from learning starts at episode positions that are multiples of
        ``period``, with ``info.mask`` and ``info.learn``, as the NumPy buffers sample them
        (``Buffer.sample_sequences``; docs/jax.md).

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` items
                (host counters, no device sync); with respect_episodes, no window of
                ``num_steps`` fits inside an episode, or no sequence has an eligible learning
                start (known after the draw: one sync).
            ArgumentError: sample_batch_size or num_steps is not a positive int; ``burn_in`` /
                ``period`` on a buffer without episodes, without ``num_steps``, or asking more
                steps than a stream holds (``check_sequence_arguments``).
        """
        if burn_in is not None or period is not None:
            return self._get_sequences(
                sample_batch_size, time_stacked, self._sequence_rule(burn_in, period, sample_batch_size, num_steps)
            )
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        if self._sampler is not None:
            return self._get_ruled(sample_batch_size, num_steps, time_stacked)
        key = np.array(divmod(self._rng.bit_generator.random_raw(), 2**32), np.uint32)
        with self._lock:
            self._ring.window_starts(num_steps or 1)  # raises EmptyBufferError
            items, info = _sample(self._core, self._state, key, sample_batch_size or 1, num_steps)
        episodes = self._core.episodes
        if episodes is not None and not episodes.pad and not bool(info.valid[0]):
            raise no_episode_window(num_steps or 1, padding=True)
        return self._finish(items, info, sample_batch_size, num_steps, time_stacked)

    def _get_ruled(
        self, sample_batch_size: int | None, num_steps: int | None, time_stacked: bool
    ) -> tuple[Any, BufferInfo]:
        """``get_next`` under the sample-count rules: the host draws, one jitted gather reads."""
        with self._lock:
            draw = self._sampler.draw  # type: ignore[union-attr]
            ids, probabilities, extras = draw(self._rng, self._ring, sample_batch_size, num_steps)
            ids = np.asarray(ids).astype(jax.dtypes.canonicalize_dtype(np.int64), copy=False)
            items, *info = _read_drawn(self._core, self._state, ids, probabilities)
        if not time_stacked and num_steps is not None:
            leaves = self._core.treedef.flatten_up_to(items)
            items = unstack_time(self._core.treedef.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        return items, SampleInfo(*info, **extras) if extras else BufferInfo(*info)

    def _sequence_rule(self, burn_in: Any, period: Any, sample_batch_size: Any, num_steps: Any) -> SequenceRule:
        """The checked ``SequenceRule`` of a sequence sample (ArgumentError: see ``get_next``)."""
        check_sample_arguments(sample_batch_size, num_steps)
        episodes = self._core.episodes
        pad = episodes is not None and episodes.pad
        return check_sequence_arguments(burn_in, period, num_steps, self._ring.max_length, episodes is not None, pad)

    def _get_sequences(
        self, sample_batch_size: int | None, time_stacked: bool, rule: SequenceRule
    ) -> tuple[Any, BufferInfo]:
        """``get_next`` of sequences under ``rule``."""
        with self._lock:
            if self._ring.steps == 0:
                raise empty(self._ring.name)
            key = np.array(divmod(self._rng.bit_generator.random_raw(), 2**32), np.uint32)
            items, info = _sample_sequences(self._core, self._state, key, sample_batch_size or 1, rule)
        if not bool(info.valid[0]):
            detail = f" from a position that is a multiple of period={rule.period}" if rule.period > 1 else ""
            raise no_episode_window(rule.num_steps, padding=not rule.pad, detail=detail)
        return self._finish(items, info, sample_batch_size, rule.burn_in + rule.num_steps, time_stacked)

    def _finish(
        self, items: Any, info: Any, sample_batch_size: int | None, num_steps: int | None, time_stacked: bool
    ) -> tuple[Any, BufferInfo]:
        """A core draw (items and ``DrawInfo``) as ``get_next`` returns it: unbatched when
        ``sample_batch_size`` is None, one item per step with ``time_stacked=False``, and a
        ``SampleInfo`` when weights, a mask or learn apply."""
        ids, probabilities, weights, mask, learn = info.ids, info.probabilities, info.weights, info.mask, info.learn
        if sample_batch_size is None:
            items = jax.tree_util.tree_map(lambda leaf: leaf[0], items)
            ids, probabilities = ids[0], probabilities[0]
            weights, mask, learn = (None if extra is None else extra[0] for extra in (weights, mask, learn))
        if not time_stacked and num_steps is not None:
            leaves = self._core.treedef.flatten_up_to(items)
            items = unstack_time(self._core.treedef.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        if weights is not None or mask is not None:
            return items, SampleInfo(ids, probabilities, weights=weights, mask=mask, learn=learn)
        return items, BufferInfo(ids, probabilities)

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> Any:
        """An iterable of ``(items, BufferInfo)``: random (endless, sees later adds) or one
        ordered pass (ids planned when the iterator is created), as the NumPy buffers. With
        ``burn_in`` / ``period``: sequences as ``get_next`` samples them; a deterministic pass
        yields every eligible sequence once, ``sample_batch_size`` at a time, ordered by
        stream, then learning start (its starts planned when the iterator is created).

        Raises:
            ArgumentError: a non-positive argument; in a deterministic pass,
                sample_batch_size > batch_size or num_steps > max_length; bad sequence
                arguments (``get_next``).
            EmptyBufferError: a deterministic pass of sequences with no eligible start
                (when the iterator is created).
        """
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        check_positive("num_parallel_calls", num_parallel_calls)
        if burn_in is not None or period is not None:
            rule = self._sequence_rule(burn_in, period, sample_batch_size, num_steps)
            if single_deterministic_pass:
                plan = partial(self._plan_sequences, sample_batch_size, rule)
                return DeterministicPass(plan, self._sequences_of(rule))
            sample = partial(self.get_next, sample_batch_size, num_steps, burn_in=burn_in, period=period)
            return RandomDataset(sample, num_parallel_calls)
        if single_deterministic_pass:

            def plan() -> list[np.ndarray]:
                with self._lock:
                    return plan_deterministic_pass(
                        self._ring, sample_batch_size, num_steps, self._window_shift, self._drop_remainder
                    )

            return DeterministicPass(plan, self._read_ids)
        return RandomDataset(lambda: self.get_next(sample_batch_size, num_steps), num_parallel_calls)

    def gather_all(self) -> Any:
        """Every stored item, ``[batch_size, n, ...]`` oldest first (valid items only)."""
        items, _ = self._read_ids(self._ring_ids())
        return items

    def clear(self) -> None:
        with self._lock:
            self._ring.reset()
            self._state = self._fresh_state()
            if self._sampler is not None:
                self._sampler.cleared()

    def num_frames(self) -> int:
        return self._ring.num_valid_steps() * self._ring.batch_size

    num_eligible = StreamBuffer.num_eligible  # reads self._sampler: the rules' sampler, or None
    policy_version = StreamBuffer.policy_version

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Set the priorities of sampled items (``info.ids``, first step of each window).

        Ids already overwritten are ignored (stale). Checked on the host first (one device
        sync when they are JAX arrays), then applied in one jitted call.

        Raises:
            ArgumentError: the buffer was built without ``sampler="prioritized"``, or ``ids``
                are not integers shaped like ``priorities`` (or with one more time axis).
            PriorityError: ids never added, or zero, negative, NaN or infinite priorities;
                nothing changes.
        """
        if self._core.priorities is None:
            raise ArgumentError("update_priorities: this buffer was built without sampler='prioritized'")
        ids_np, values = (array.ravel() for array in priority_update(ids, priorities))
        with self._lock:
            check_priority_values(ids_np, values, self._ring.steps * self._ring.batch_size)
            self._state = _update(self._core, self._state, self._to_ids(ids_np), jnp.asarray(values, jnp.float32))

    # -- checkpoints (replaybuf.jax.checkpoint; docs/persistence.md, docs/jax.md) -------------
    def state_dict(self) -> dict:
        """A plain snapshot in the backend-neutral format (docs/persistence.md): a folder saved
        here loads into any buffer of the same spec and geometry that can hold it (NumPy,
        torch, TF, ...). Items come back to the spec's dtypes; an episode-aware buffer adds the
        NumPy index's ``episodes``; ``rng`` is the host generator that keys every sample.
        """
        with self._lock:
            rng = self._rng.bit_generator.state
            state = core_state(self._core, self._flat, self._state, self._ring.steps, type(self).__name__, rng)
            return state if self._sampler is None else {**state, **self._sampler.state(self._ring)}

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` of any buffer of this spec and geometry that it can hold
        (a state without priorities into a prioritized buffer: every item at priority 1.0).

        Raises:
            CheckpointError: a state of another data_spec or geometry, holding what this
                buffer cannot, or malformed (for an episode-aware buffer: ``episodes``
                missing or not what adds could have produced); the buffer is left unchanged.
        """
        new, steps, same_rng = load_core_state(self._core, self._flat, state, "PCG64")
        rng_state = check_rng_state(self._rng, state.get("rng")) if same_rng else None
        rules, ruled = None, self._sampler
        if ruled is not None:
            count = min(steps, self._ring.max_length) * self._ring.batch_size
            rules = ruled.check_state(self._ring, state, count)
        if self._device is not None:
            new = jax.device_put(new, self._device)
        with self._lock:
            self._state = new
            self._ring.reset(steps)
            if ruled is not None:
                ruled.cleared()
                ruled.load_state(self._ring, rules)
                ruled.loaded(self._ring, StoredFields(self._core.stored(new), self._ring.capacity))
                self._policy_version = ruled.policy_version
            if rng_state is not None:  # another backend's generator state: this buffer keeps its own
                self._rng.bit_generator.state = rng_state

    # -- internals -----------------------------------------------------------------------------
    def _plan_sequences(self, sample_batch_size: int | None, rule: SequenceRule) -> list[np.ndarray]:
        """The learning starts of a deterministic pass: every eligible one (found on the host
        from the positions, one device sync), by stream, then step."""
        with self._lock:
            position = np.asarray(self._state.episodes.position, np.int64).reshape(-1)
            stored = self._ring.stream_ids().ravel()
            starts = stored[eligible(position, self._ring, stored, rule)]
        if starts.size == 0:
            raise no_episode_window(rule.num_steps, padding=not rule.pad)
        return plan_sequence_pass(by_stream(starts, self._ring.batch_size), sample_batch_size, self._drop_remainder)

    def _sequences_of(self, rule: SequenceRule) -> Any:
        """A deterministic pass's read: the sequences (items, ids, mask, learn) from learning
        starts (``[n]``, or one start for an unbatched element)."""

        def read(starts: np.ndarray) -> tuple[Any, BufferInfo]:
            batch = self._to_ids(np.atleast_1d(starts))
            with self._lock:
                items, ids, mask, learn = _read_sequences(self._core, self._state, batch, rule.burn_in, rule.num_steps)
            if starts.ndim == 0:
                items = jax.tree_util.tree_map(lambda leaf: leaf[0], items)
                ids, mask, learn = ids[0], mask[0], learn[0]
            return items, SampleInfo(ids, (), mask=mask, learn=learn)

        return read

    def _fresh_state(self) -> BufferState:
        state = self._core.init()
        return jax.device_put(state, self._device) if self._device is not None else state

    def _ring_ids(self) -> np.ndarray:
        with self._lock:
            return self._ring.stream_ids()

    def _to_ids(self, ids: np.ndarray) -> jax.Array:
        return jnp.asarray(ids.astype(jax.dtypes.canonicalize_dtype(np.int64)))

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        """The items stored under ``ids`` (NumPy int64) and ``BufferInfo(ids, ())``."""
        device_ids = self._to_ids(ids)
        with self._lock:
            items = _read(self._core, self._state, device_ids)
        return items, BufferInfo(device_ids, ())


class JaxUniformReplayBuffer(JaxReplayBuffer):
    """Deprecated: ``JaxReplayBuffer`` under its old name (it was never uniform only: it samples
    by priority with ``sampler="prioritized"``); removed in 0.2.0."""

    def __init__(self, *args: Any, **kwargs: Any):
        warnings.warn(
            "JaxUniformReplayBuffer is deprecated and will be removed in the next release: use "
            "replaybuf.jax.JaxReplayBuffer (the same class and arguments)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)
