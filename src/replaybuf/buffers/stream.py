"""``StreamBuffer``: a ring + a storage + a sampler, behind the common API.

Every buffer of ``batch_size`` streams (the NumPy buffers here, the PyTorch ones in
``replaybuf.torch``) is this class with its parts plugged in: the ring (``replaybuf.ring``)
counts steps and turns them into ids, the storage (``replaybuf.storages``) keeps the bytes
by slot, the sampler (``replaybuf.samplers``) picks ids, and ``_validate`` checks and
converts an add before anything is written. The presets (``UniformReplayBuffer``,
``PrioritizedReplayBuffer``, the frame-stack buffers, the torch buffers) only choose parts.
One lock guards every write and read, so no read sees an item half written.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf.buffer import BufferInfo, ReplayBuffer, SampleInfo, check_positive, unstack_time
from replaybuf.dataset import (
    MAX_SAMPLE_ITEMS,
    DeterministicPass,
    RandomDataset,
    by_stream,
    check_sample_arguments,
    plan_deterministic_pass,
    plan_sequence_pass,
)
from replaybuf.errors import ArgumentError, CheckpointError
from replaybuf.hindsight import Relabeller
from replaybuf.nest import FlatSpec
from replaybuf.persistence.front import Checkpoints
from replaybuf.persistence.header import Holds, check_header, header
from replaybuf.persistence.state import check_rng_state, first_stored_step, require, spec_state
from replaybuf.rate_limiters import RateLimiter, check_rate_limiter, check_timeout, wait_for_eligible
from replaybuf.refusals import no_episode_window
from replaybuf.ring import StreamRing, append_rows
from replaybuf.samplers import EpisodeSampler, PrioritySampler
from replaybuf.samplers.prioritized import new_item_priorities
from replaybuf.samplers.sequences import SequenceRule, check_sequence_arguments
from replaybuf.storages.frames import FrameStorage

__all__ = ["MAX_STORAGE_BYTES", "Part", "StreamBuffer", "check_capacity", "reject_unused"]

MAX_STORAGE_BYTES = 2**62  # the most bytes one storage may span: offsets stay int64 with room

Part = Callable[[FlatSpec, StreamRing], Any]  # builds a storage or sampler for the spec and ring


class StreamBuffer(Checkpoints, ReplayBuffer):
    """``batch_size`` streams of ``max_length`` items: ring + storage + sampler; see the module.

    Args:
        data_spec: a nest of ArraySpec, tf.TensorSpec or Gymnasium spaces describing one item.
        batch_size, max_length: the ring's geometry; capacity is their product.
        storage, sampler: ``part(flat_spec, ring)`` factories of the storage and sampler.
        seed: seed of the sampling random generator.
        rate_limiter: a ``MinSize`` / ``SampleToInsertRatio`` that adds (``batch_size``
            items each) and samples (``sample_batch_size`` items) wait for, outside the lock;
            its counters are part of checkpoints (docs/many_writers.md).
        rate_limiter_timeout: seconds a blocked add or sample waits before
            ``RateLimiterTimeout`` (nothing written or counted); None waits until ``close()``.
        dataset_drop_remainder, dataset_window_shift: the deterministic pass's options.
        single_stream: ``add_batch`` appends a batch of any size to one stream (PyUniform);
            the sampler must then keep no per-add state (the uniform one).
        relabel: ``part(flat_spec, ring, sampler)`` building the hindsight relabelling of
            samples (``replaybuf.hindsight``), or None.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int,
        *,
        storage: Part,
        sampler: Part,
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        single_stream: bool = False,
        rate_limiter: RateLimiter | None = None,
        rate_limiter_timeout: float | None = None,
        relabel: Callable[[FlatSpec, StreamRing, Any], Relabeller] | None = None,
    ):
        check_positive("batch_size", batch_size, allow_none=False)
        self._limiter = check_rate_limiter(rate_limiter)
        self._limiter_timeout = check_timeout(rate_limiter_timeout, "rate_limiter_timeout")
        check_positive("max_length", max_length, allow_none=False)
        check_positive("dataset_window_shift", dataset_window_shift)
        self._flat = FlatSpec(data_spec)
        check_capacity(self._flat, batch_size, max_length, "capacity" if single_stream else "max_length")
        self._lock = threading.RLock()
        self._added = threading.Condition(self._lock)  # a sample waiting for eligible items (samplers.rules)
        self._waiters = 0
        self._drop_remainder = bool(dataset_drop_remainder)
        self._window_shift = dataset_window_shift
        self._single_stream = single_stream
        self._ring = self._geometry = StreamRing(int(batch_size), int(max_length), type(self).__name__)
        self._storage = storage(self._flat, self._ring)
        self._sampler = sampler(self._flat, self._ring)
        self._relabel = None if relabel is None else relabel(self._flat, self._ring, self._sampler)
        self._validate: Callable[[Any, int | None], list] = self._flat.flatten_batch
        self._rng: Any = np.random.default_rng(seed)
        self._policy_version = 0
        if self._ring.steps:  # a reopened storage (memmap folder): derive the sampler's state
            self.reindex()

    # -- geometry ----------------------------------------------------------------------------
    @property
    def single_stream(self) -> bool:
        """True when ``add_batch`` appends a batch of any size to one stream (PyUniform)."""
        return self._single_stream

    @property
    def ring(self) -> StreamRing:
        """The ring (steps added, the first valid step, ids): read it under ``lock``, never write it."""
        return self._ring

    @property
    def storage(self) -> Any:
        """The storage; its ``fields`` are views of the stored columns (replaybuf.sb3 shows them
        as SB3's arrays): write them only under ``lock``, then call ``reindex()``."""
        return self._storage

    @property
    def relabel(self) -> Any:
        """The hindsight relabelling part (``her=``), None without: its ``ends`` say where each
        stored episode ends."""
        return self._relabel

    @property
    def lock(self) -> threading.RLock:
        """The buffer's reentrant lock: hold it to make several calls one step (a Ray shard's
        priority update and the mass it reports)."""
        return self._lock

    # -- the common API ------------------------------------------------------------------------
    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Add one step to every stream: each leaf shaped ``[batch_size] + spec.shape``.
        (Single-stream buffers: ``[n] + spec.shape`` for any n >= 0, appended in order.)

        ``priorities`` (prioritized buffers): ``[batch_size]`` priorities of the new items (an
        actor's own TD errors, Ape-X); each also raises the largest priority, which items added
        without priorities get.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match the
                data_spec (or the leaves disagree on n); nothing is written.
            ArgumentError: ``priorities`` on a buffer without priorities, or not ``[batch_size]``
                numbers; nothing is written.
            PriorityError: a priority that is not finite and > 0; nothing is written.
            RateLimiterTimeout: the rate limiter held the add back past
                ``rate_limiter_timeout``; nothing is written or counted.
            BufferClosedError: ``close()`` was called (also while the add waited).
        """
        ring = self._ring
        given = None if priorities is None else self._new_priorities(priorities)
        if self._single_stream:
            arrays = self._validate(items, None)
            if self._limiter is None:  # the common case: nothing to wait for or count
                n = arrays[0].shape[0] if arrays else 0
                with self._lock:
                    if 0 < n <= ring.capacity:  # append_rows inlined (a call is a sixth of a single add)
                        storage = self._storage
                        storage.write(ring.steps % ring.capacity, arrays, n)
                        ring.steps += n
                        storage.commit(ring.steps)
                    else:
                        append_rows(ring, self._storage, arrays)
                return
            self._limiter.await_insert(arrays[0].shape[0] if arrays else 0, self._limiter_timeout)
            with self._lock:
                before = ring.steps
                append_rows(ring, self._storage, arrays)
                evicted = max(0, ring.steps - ring.capacity) - max(0, before - ring.capacity)
        else:
            arrays = self._validate(items, ring.batch_size)
            if self._limiter is not None:
                self._limiter.await_insert(ring.batch_size, self._limiter_timeout)
            with self._lock:
                self._storage.write(ring.slot(ring.steps), arrays)
                ring.steps += 1
                self._storage.commit(ring.steps)
                if given is None:
                    self._sampler.added(ring, arrays)
                else:
                    self._sampler.added(ring, arrays, given)
                if self._relabel is not None:
                    self._relabel.added()
                if self._waiters:
                    self._added.notify_all()
                evicted = ring.batch_size if ring.steps > ring.max_length else 0
        if self._limiter is not None and evicted:
            self._limiter.delete(evicted)

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, BufferInfo]:
        """Sample with the buffer's sampler; see ``replaybuf.buffer`` for the shapes.

        With ``burn_in`` or ``period`` (buffers with ``respect_episodes=True``): sequences of
        ``burn_in + num_steps`` steps from learning starts at episode positions that are
        multiples of ``period``, with ``info.mask`` and ``info.learn`` (docs/episodes.md,
        replaybuf.samplers.sequences).

        Raises:
            EmptyBufferError: nothing is stored, or no stream holds ``num_steps`` items
                (inside one episode, when the sampler respects episodes).
            ArgumentError: sample_batch_size or num_steps is not a positive int, or a sample
                of more than 2**31 - 1 items in all (sample_batch_size x num_steps).
                With ``her=``: ``compute_reward`` returned other than one reward per relabelled item.
            RateLimiterTimeout, BufferClosedError: with a rate limiter, see ``add_batch``.
            ArgumentError: ``burn_in`` / ``period`` on a buffer without episodes, with ``her=``,
                without ``num_steps``, or asking more steps than a stream holds.
        """
        if burn_in is not None or period is not None:
            return self._get_sequences(
                sample_batch_size,
                num_steps,
                time_stacked,
                self._sequence_rule(burn_in, period, sample_batch_size, num_steps),
            )
        if sample_batch_size is not None and (
            sample_batch_size.__class__ is not int or not 0 < sample_batch_size <= MAX_SAMPLE_ITEMS
        ):
            check_sample_arguments(sample_batch_size, num_steps)
        if num_steps is not None and (
            num_steps.__class__ is not int or not 0 < num_steps <= MAX_SAMPLE_ITEMS // (sample_batch_size or 1)
        ):
            check_sample_arguments(sample_batch_size, num_steps)
        if self._limiter is not None:
            self._limiter.await_sample(sample_batch_size or 1, self._limiter_timeout)
        with self._lock:
            whole = None
            try:
                one_call = self._relabel.whole if self._relabel is not None else None
                if one_call is not None and num_steps is None and sample_batch_size is not None:
                    whole = one_call(self._rng, self._ring, self._storage, sample_batch_size)
                if whole:
                    ids, probabilities, leaves, drawn = whole
                    extras = {}
                else:
                    draw = self._sampler.draw
                    ids, probabilities, extras = self._drawn(draw, sample_batch_size, num_steps)
            except BaseException:
                if self._limiter is not None:  # nothing was sampled: uncount the grant
                    self._limiter.undo_sample(sample_batch_size or 1)
                raise
            if not whole:
                leaves = self._storage.read(ids)
                if self._relabel is not None:
                    drawn = self._relabel.draw(self._rng, ids, num_steps is not None, self._storage)
        if self._relabel is not None:
            extras = {**extras, "relabelled": self._relabel.apply(leaves, drawn)}
        return self._finish_sample(leaves, ids, probabilities, extras, sample_batch_size, num_steps, time_stacked)

    def _drawn(self, draw: Callable, sample_batch_size: int | None, shape: Any) -> tuple[Any, Any, dict]:
        """``draw(rng, ring, sample_batch_size, shape)`` under the lock. With sample-count rules
        and a rate limiter, a draw that finds too few eligible items waits for adds (up to
        ``rate_limiter_timeout``: ``RateLimiterTimeout``) instead of raising EmptyBufferError."""
        if self._limiter is None or not hasattr(self._sampler, "live"):
            return draw(self._rng, self._ring, sample_batch_size, shape)
        return wait_for_eligible(
            lambda: draw(self._rng, self._ring, sample_batch_size, shape),
            self._limiter,
            self._limiter_timeout,
            self._wait_added,
        )

    def _wait_added(self, timeout: float | None) -> None:
        """Wait (the lock let go meanwhile) up to ``timeout`` seconds for an add (``_drawn``)."""
        self._waiters += 1
        try:
            self._added.wait(timeout)
        finally:
            self._waiters -= 1

    def _new_priorities(self, priorities: Any) -> Any:
        """The checked ``priorities`` of an add (see ``add_batch``), as the sampler keeps them."""
        check = getattr(self._sampler, "new_priorities", None)
        if check is None:
            raise ArgumentError(
                f"priorities: expected None, {type(self).__name__} keeps no priorities (use a prioritized "
                f"buffer), got {priorities!r:.80}"
            )
        return check(priorities, self._ring.batch_size)

    def _sequence_rule(self, burn_in: Any, period: Any, sample_batch_size: Any, num_steps: Any) -> SequenceRule:
        """The checked ``SequenceRule`` of a sequence sample (ArgumentError: see ``get_next``)."""
        check_sample_arguments(sample_batch_size, num_steps)
        if self._relabel is not None:
            raise ArgumentError(
                f"burn_in/period: expected a buffer without her= (relabelling draws single items or windows), "
                f"got burn_in={burn_in!r}, period={period!r}"
            )
        sampler = self._sampler
        episodes = getattr(sampler, "episodes", None) is not None
        return check_sequence_arguments(
            burn_in, period, num_steps, self._ring.max_length, episodes, getattr(sampler, "pad", False)
        )

    def _get_sequences(
        self, sample_batch_size: int | None, num_steps: int, time_stacked: bool, rule: SequenceRule
    ) -> tuple[Any, BufferInfo]:
        """``get_next`` of sequences under ``rule``."""
        if self._limiter is not None:
            self._limiter.await_sample(sample_batch_size or 1, self._limiter_timeout)
        with self._lock:
            try:
                ids, probabilities, extras = self._sampler.draw_sequences(
                    self._rng, self._ring, sample_batch_size, rule
                )
            except BaseException:
                if self._limiter is not None:
                    self._limiter.undo_sample(sample_batch_size or 1)
                raise
            leaves = self._storage.read(ids)
        length = rule.burn_in + num_steps
        return self._finish_sample(leaves, ids, probabilities, extras, sample_batch_size, length, time_stacked)

    def sequence_starts(self, rule: SequenceRule) -> np.ndarray:
        """The eligible learning starts of ``rule`` now, in id order (a copy): what a
        deterministic pass over sequences visits (here, or a Ray shard's)."""
        with self._lock:
            return self._sampler.episodes.starts(rule).live().copy()

    def read_sequences(self, starts: np.ndarray, rule: SequenceRule) -> tuple[Any, BufferInfo]:
        """The sequences from learning ``starts`` (stored ids) with their mask and learn (a
        deterministic pass; a Ray shard's reads)."""
        with self._lock:
            ids, extras = self._sampler.episodes.sequences(starts, rule)
            items, info = self._read_ids(ids)
        return items, SampleInfo(
            info.ids, (), mask=self._on_device(extras["mask"]), learn=self._on_device(extras["learn"])
        )

    def _on_device(self, array: np.ndarray) -> Any:
        """A host array where this backend returns its results (torch: a tensor on its device)."""
        return array

    def _finish_sample(
        self,
        leaves: list,
        ids: Any,
        probabilities: Any,
        extras: dict,
        sample_batch_size: int | None,
        num_steps: int | None,
        time_stacked: bool,
    ) -> tuple[Any, BufferInfo]:
        """A read's leaves as ``get_next`` returns them: the spec's nest (or one per time step
        with ``time_stacked=False``) and its info (``SampleInfo`` when extras apply)."""
        if time_stacked or num_steps is None:
            items = self._flat.unflatten(leaves)
        else:
            items = unstack_time(self._flat.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        if extras:
            return items, SampleInfo(ids, probabilities, **extras)
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
        """An iterable of ``(items, BufferInfo)``.

        Random mode (default) is endless and sees later adds; ``num_parallel_calls`` > 0
        samples in a background thread with that many batches queued. With
        ``single_deterministic_pass=True`` every stored item is yielded once, stream by
        stream (``sample_batch_size`` streams at a time) in time order, cut into windows
        of ``num_steps``; ids are fixed when the iterator is created. An iterator may be
        shared between threads (as TF's may): each ``next`` hands one element to one caller.
        With ``burn_in`` / ``period``: sequences as ``get_next`` samples them; a deterministic
        pass yields every eligible sequence once, ``sample_batch_size`` at a time, ordered by
        stream, then learning start (docs/episodes.md).

        Raises:
            ArgumentError: a non-positive argument, or samples of more than 2**31 - 1 items
                (as for ``get_next``); in a deterministic pass, sample_batch_size >
                batch_size or num_steps > max_length; bad sequence arguments (``get_next``).
        """
        check_sample_arguments(sample_batch_size, num_steps)
        check_positive("num_parallel_calls", num_parallel_calls)
        sequences = burn_in is not None or period is not None
        rule = self._sequence_rule(burn_in, period, sample_batch_size, num_steps) if sequences else None
        if single_deterministic_pass and rule is not None:

            def plan_sequences() -> list[np.ndarray]:
                starts = self.sequence_starts(rule)
                if starts.size == 0:
                    raise no_episode_window(rule.num_steps, padding=not rule.pad)
                return plan_sequence_pass(
                    by_stream(starts, self._ring.batch_size), sample_batch_size, self._drop_remainder
                )

            return self._wrap_dataset(
                DeterministicPass(plan_sequences, lambda starts: self.read_sequences(starts, rule))
            )
        if single_deterministic_pass:

            def plan() -> list[np.ndarray]:
                with self._lock:
                    return plan_deterministic_pass(
                        self._ring, sample_batch_size, num_steps, self._window_shift, self._drop_remainder
                    )

            return self._wrap_dataset(DeterministicPass(plan, self._read_ids))
        sample = lambda: self.get_next(sample_batch_size, num_steps, burn_in=burn_in, period=period)  # noqa: E731
        return self._wrap_dataset(RandomDataset(sample, num_parallel_calls))

    def gather_all(self) -> Any:
        """Every stored item, ``[batch_size, n, ...]`` oldest first (valid items only)."""
        with self._lock:
            items, _ = self._read_ids(self._ring.stream_ids())
        return items

    def clear(self) -> None:
        with self._lock:
            self._ring.reset()
            self._storage.commit(0)
            self._storage.clear()
            self._sampler.cleared()
            if self._relabel is not None:
                self._relabel.cleared()
            if self._limiter is not None:
                self._limiter.reset()

    def close(self) -> None:
        """Wake every add or sample waiting on the rate limiter with ``BufferClosedError``;
        later rate-limited calls raise it too. Without a rate limiter there is nothing to close."""
        if self._limiter is not None:
            self._limiter.close()
            with self._lock:
                self._added.notify_all()

    def num_frames(self) -> int:
        return self._ring.num_valid_steps() * self._ring.batch_size

    def num_eligible(self) -> int:
        """Stored items a sample may still draw: ``num_frames()`` less the items consumed
        (``max_times_sampled``) or stale (``max_staleness``); docs/sample_rules.md."""
        with self._lock:
            counter = getattr(self._sampler, "num_eligible", None)
            return self.num_frames() if counter is None else counter()

    @property
    def policy_version(self) -> int:
        """The learner's policy version: with ``max_staleness=V``, items whose version field is
        older than ``policy_version - V`` are not drawn. Set it after each policy update."""
        return self._policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        if isinstance(version, (bool, np.bool_)) or not isinstance(version, (int, np.integer)):
            raise ArgumentError(f"policy_version: expected an int, got {version!r:.80}")
        with self._lock:
            self._policy_version = int(version)
            setter = getattr(self._sampler, "set_policy_version", None)
            if setter is not None:
                setter(self._policy_version)

    def begin_epoch(self, num_steps: int | None = None) -> int:
        """Begin a new epoch now (``replacement=False``) over the eligible starts of windows of
        ``num_steps``; returns its size. A Ray driver begins every shard's at once, so that one
        epoch spans them all (replaybuf.samplers.parts). ArgumentError without epochs."""
        with self._lock:
            return self._epoch_sampler().begin_epoch(self._rng, self._ring, num_steps)

    def epoch_position(self) -> tuple[int, int, int]:
        """``(epoch, its size, starts left in it)`` (``replacement=False``; ArgumentError without)."""
        with self._lock:
            sampler = self._epoch_sampler()
            return sampler.epoch, sampler.order.shape[0], sampler.epoch_left()

    def _epoch_sampler(self) -> Any:
        rules = getattr(self._sampler, "rules", None)
        if rules is None or rules.replacement:
            raise ArgumentError("replacement: epochs need a buffer built with replacement=False, got True")
        return self._sampler

    def read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        """The items stored under ``ids`` (logical ids, NumPy int64; stored ones only) and
        ``BufferInfo(ids, ())``: what a deterministic pass, a Ray shard or replaybuf.sb3 reads."""
        return self._read_ids(ids)

    def mass(self, num_steps: int | None = None, rule: SequenceRule | None = None) -> tuple[float, float]:
        """``(mass, smallest)`` of the windows of ``num_steps`` a draw may return now: what the
        sampler normalises by (``P(element) = its mass / mass``; uniform: one per start) and
        the smallest stored priority mass (1.0 without priorities). What a caller splitting
        one batch over several buffers (Ray shards) weighs each buffer by. With a sequence
        ``rule``: the mass of its eligible learning starts instead."""
        with self._lock:
            if rule is not None:
                return self._sampler.sequence_mass(self._ring, rule)
            return self._sampler.mass(self._ring, num_steps)

    # -- checkpoints (docs/persistence.md) ---------------------------------------------------
    def state_dict(self) -> dict:
        """A plain snapshot (copies) of the items, counters, RNG and the sampler's bookkeeping.

        ``items`` holds each leaf's stored items in id order (oldest first, valid items only);
        the storage and the sampler add their own keys (``frames``, ``priorities``, ``episodes``).
        """
        with self._lock:
            return self._state(views=False)

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()``: later samples equal the original's for the same calls.

        Raises:
            CheckpointError: a state of another class, data_spec or geometry, or malformed;
                the buffer is left unchanged. An item file whose checksum fails while it is
                read in (``load``): the buffer is left empty.
        """
        ring = self._ring
        geometry = {"batch_size": ring.batch_size, "max_length": ring.max_length}
        steps, same_rng, new_priorities = check_header(state, self._holds(), self._flat, geometry)
        count, items = self._storage.check_state(self._flat, state)
        first = first_stored_step(steps, count, ring.batch_size, ring.max_length, self._storage.crash_safe)
        rng_state = check_rng_state(self._rng, require(state, "rng", dict)) if same_rng else None
        if new_priorities:  # a state without priorities: every item gets a new item's (docs/persistence.md)
            state = new_item_priorities(state, self._sampler.alpha, self._sampler.epsilon, count)
        sampler_state = self._sampler.check_state(ring, state, count)
        limiter_state = None if self._limiter is None else self._limiter.check_state(state.get("rate_limiter"))
        with self._lock:
            self.clear()
            try:
                self._storage.load_state(ring.slot(first), items)
            except CheckpointError:
                self.clear()  # a file failed its checksum while being read in: keep nothing of it
                raise
            ring.reset(steps, first if first > max(0, steps - ring.max_length) else 0)
            self._storage.commit(steps)
            if rng_state is not None:  # another backend's generator state: this buffer keeps its own
                self._rng.bit_generator.state = rng_state
            self._sampler.load_state(ring, sampler_state)
            loaded = getattr(self._sampler, "loaded", None)  # a sampler that reads the loaded items
            if loaded is not None:
                loaded(ring, self._storage.fields)
            self._policy_version = getattr(self._sampler, "policy_version", self._policy_version)
            if self._relabel is not None:
                self._relabel.rebuild()
            if self._limiter is not None:
                self._limiter.load_state(limiter_state)

    @property
    def _lazy_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._storage.lazy_keys

    def _saving(self) -> Any:
        return self._lock  # the state is views of the storage: adds and samples wait

    def _saved_state(self) -> dict:
        return self._state(views=True)

    # -- internals ---------------------------------------------------------------------------
    def _state(self, views: bool) -> dict:
        ring = self._ring
        first = ring.first_valid_step()
        return {
            "checkpoint": header(self._holds(), type(self).__name__),
            "spec": spec_state(self._flat),
            "batch_size": ring.batch_size,
            "max_length": ring.max_length,
            "steps": ring.steps,
            **self._storage.state(ring.slot(first), (ring.steps - first) * ring.batch_size, views),
            "rng": self._rng.bit_generator.state,
            **self._sampler.state(ring),
            **({} if self._limiter is None else {"rate_limiter": self._limiter.state()}),
        }

    def _holds(self) -> Holds:
        """What this buffer's checkpoints hold beside the items (replaybuf.persistence.header)."""
        sampler = self._sampler
        return Holds(
            priorities=isinstance(sampler, PrioritySampler),
            episodes=isinstance(sampler, EpisodeSampler) or getattr(sampler, "episodes", None) is not None,
            frames=isinstance(self._storage, FrameStorage),
            rate_limiter=self._limiter is not None,
        )

    def reindex(self) -> None:
        """Derive the sampler's and the relabelling's bookkeeping from the stored items (a
        reopened storage, or items edited in place through the storage's views: replaybuf.sb3)."""
        with self._lock:
            self._sampler.reopened(self._ring, self._storage.fields)
            if self._relabel is not None:
                self._relabel.rebuild()

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        """``read_ids`` as this backend reads (the torch buffers read on their device)."""
        with self._lock:
            leaves = self._storage.read(ids)
        return self._flat.unflatten(leaves), BufferInfo(ids, ())

    def _wrap_dataset(self, dataset: RandomDataset | DeterministicPass) -> Any:
        """The dataset as this backend hands it out (a torch IterableDataset, ...)."""
        return dataset


def check_capacity(flat: FlatSpec, batch_size: int, max_length: int, name: str) -> None:
    """ArgumentError naming ``name`` when ``batch_size x max_length`` items of ``flat``'s spec
    would span more than 2**62 bytes (no storage could be allocated or addressed)."""
    item = max(1, sum(leaf.dtype.itemsize * math.prod(leaf.shape) for leaf in flat.leaves))
    capacity = int(batch_size) * int(max_length)
    if capacity * item > MAX_STORAGE_BYTES:
        geometry = f"{capacity}"
        if name != "capacity":
            geometry += f" (batch_size {batch_size} x max_length {max_length})"
        raise ArgumentError(
            f"{name}: a capacity of {geometry} items of {item} bytes is more than 2**62 bytes; no storage can hold it"
        )


def reject_unused(**options: tuple[Any, Any, str]) -> None:
    """ArgumentError for every option given a value other than its default where it has no
    effect: ``name=(value, default, why)``."""
    for name, (value, default, why) in options.items():
        if value != default:
            raise ArgumentError(f"{name}: {why}, got {name}={value!r}")
