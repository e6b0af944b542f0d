"""``ShardedReplayBuffer``: one logical replay buffer spread over Ray actors (shards).

Geometry and ids. The buffer has ``batch_size`` streams of ``max_length`` items, like a
``UniformReplayBuffer``; stream ``s`` lives on shard ``s % shards`` as that shard's local
stream ``s // shards``. Step ``t`` of stream ``s`` has the global id ``t * batch_size + s``,
exactly the id a single buffer would give it, so ``update_priorities(ids)`` routes each id
to its shard (``(id % batch_size) % shards``). Writers add to one shard at a time, so
shards may hold different numbers of steps; ids stay unique and routable.

Sampling. A batch of B is split over the shards by one multinomial draw in proportion to
each shard's mass (its number of valid window starts for uniform shards, windows inside
one episode for episode-aware ones, its priority mass for prioritized ones); the shards
sample their counts in parallel, and the probability returned for each element is the one
actually used: ``share of its shard x its probability within the shard``. The shares come
from the masses the shards reported with the previous fan-out (every live shard answers
every fan-out, with a count of 0 if none of the batch fell to it), refreshed first when
unknown or after an add or clear through this object. A shard that cannot answer within
``call_timeout`` (dead, restarting, on a removed node) is left out: its share is redrawn
from the live shards, so the probabilities are those of the live shards' masses, still
exact. Prioritized shards: importance weights are ``(P(i) / P_min) ** -beta`` with P_min
over every live shard.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import ray

from replaybuf.buffer import BufferInfo, ReplayBuffer, SampleInfo, check_positive, unstack_time
from replaybuf.buffers.prioritized import PrioritizedReplayBuffer
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.buffers.uniform import UniformReplayBuffer
from replaybuf.dataset import (
    DeterministicPass,
    RandomDataset,
    by_stream,
    check_sample_arguments,
    plan_deterministic_pass,
    plan_sequence_pass,
)
from replaybuf.errors import (
    ArgumentError,
    CheckpointError,
    EmptyBufferError,
    RateLimiterTimeout,
    ReplayBufferError,
)
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import POINTER, read_state, write_state
from replaybuf.persistence.header import describe
from replaybuf.rate_limiters import check_rate_limiter, check_timeout
from replaybuf.ray.dataset import ShardedRandomDataset
from replaybuf.ray.gathered import gather_states, split_state
from replaybuf.ray.remote import SHARD_DOWN, Limiter, ShardUnavailableError, call, get, limiter_config
from replaybuf.ray.shard import Shard
from replaybuf.ray.writer import ShardWriter
from replaybuf.refusals import bad_priorities, empty, no_episode_window, unknown_ids, window_too_long
from replaybuf.ring import Geometry, StreamRing
from replaybuf.samplers.choice import check_sampler
from replaybuf.samplers.parts import EpochSplit, split_counts
from replaybuf.samplers.prioritized import priorities_of_add, priority_update
from replaybuf.samplers.rules import check_policy_version, check_sample_rules
from replaybuf.samplers.sequences import SequenceRule, check_sequence_arguments
from replaybuf.samplers.split import MassSplit

__all__ = ["ShardedReplayBuffer"]

MANIFEST = "manifest.json"
RULES = ("replacement", "max_times_sampled", "sampler", "max_staleness", "version_field", "drop_remainder")
FORMAT = "replaybuf-sharded-checkpoint"


class ShardedReplayBuffer(ReplayBuffer):
    """``batch_size`` streams of ``max_length`` items spread over ``shards`` Ray actors.

    Needs a running Ray (``ray.init()``, or a cluster to connect to). See the module
    docstring for ids and sampling, and docs/ray.md for the design and failure model.

    Args:
        data_spec: a nest of ArraySpec (or tf/Gymnasium specs) describing one item.
        shards: the number of shard actors.
        batch_size: streams in all (default: ``shards``, one per shard); shard ``k`` holds
            streams ``k, k + shards, ...``. ``add_batch`` on this object takes
            ``[batch_size]`` items; a writer of shard k takes that shard's streams.
        max_length: items kept per stream.
        sampler: ``"uniform"`` or ``"prioritized"``, as every buffer spells it: the shards hold
            ``UniformReplayBuffer`` or ``PrioritizedReplayBuffer`` (not with ``buffer_class``).
        buffer_class: the buffer each shard holds: ``UniformReplayBuffer`` (default),
            ``PrioritizedReplayBuffer``, or another ``StreamBuffer`` of batch_size streams
            (its sampler's ``mass`` weighs the shard when a batch is split).
        buffer_options: keyword arguments for ``buffer_class`` (``alpha``, ``beta``,
            ``respect_episodes``, ``storage``...), except the geometry and the seed; a
            memmap storage's ``path`` holds one folder per shard (``path/shard-NNN``).
        seed: seeds the split draws and each shard's generator.
        rate_limiter: a ``MinSize`` / ``SampleToInsertRatio``: its rules and counts are
            moved into one limiter actor that every shard's adds and this object's samples
            wait for (the object passed in is not used afterwards).
        rate_limiter_timeout: seconds a blocked add or sample waits (None: forever).
        checkpoint_dir: where each shard checkpoints (``shard-NNN`` folders in the
            checkpoint folder format); a restarted shard reloads its latest checkpoint.
        checkpoint_every: adds between a shard's checkpoints (needs checkpoint_dir).
        call_timeout: seconds a call to a shard may take before the shard counts as down.
        retry_timeout: seconds adds are resent to a down shard before ShardUnavailableError.
        max_restarts: Ray restarts of a dead shard actor (-1: without limit).
        max_in_flight: default pipelining depth of writers.
        dataset_draw_ahead: fan-outs a random dataset keeps in flight when
            ``num_parallel_calls`` is not given (each element is then up to
            ``dataset_draw_ahead - 1`` elements older than a synchronous get_next).
        actor_options: extra ``ray.remote`` options for the shard actors (resources,
            ``scheduling_strategy``...); default ``num_cpus=0``.
        replacement, drop_remainder, max_times_sampled, max_staleness, version_field: the
            sample-count rules (docs/sample_rules.md): each shard keeps them for its items and
            this object splits each batch so that they hold over all of them (one epoch over
            every shard, each item counted once, staleness against ``buffer.policy_version``,
            pushed to the shards; writers tag their adds in ``version_field``). Shards of
            ``UniformReplayBuffer`` or ``FrameStackReplayBuffer``; not with ``burn_in`` / ``period``.

    Raises:
        ArgumentError: a bad size or option (the shard's own argument errors included).
    """

    def __init__(
        self,
        data_spec: Any,
        shards: int = 2,
        batch_size: int | None = None,
        max_length: int = 1000,
        *,
        sampler: str | None = None,
        buffer_class: type = UniformReplayBuffer,
        buffer_options: dict | None = None,
        seed: int | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None,
        call_timeout: float = 30.0,
        retry_timeout: float = 120.0,
        max_restarts: int = -1,
        max_in_flight: int = 8,
        dataset_draw_ahead: int = 2,
        actor_options: dict | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
    ):
        check_positive("shards", shards, allow_none=False)
        batch_size = shards if batch_size is None else batch_size
        check_positive("batch_size", batch_size, allow_none=False)
        if batch_size < shards:
            raise ArgumentError(
                f"batch_size: expected an int >= shards ({shards}): every shard holds at least one stream, "
                f"got {batch_size}"
            )
        check_positive("max_length", max_length, allow_none=False)
        check_positive("checkpoint_every", checkpoint_every)
        check_positive("max_in_flight", max_in_flight, allow_none=False)
        check_positive("dataset_draw_ahead", dataset_draw_ahead, allow_none=False)
        self.dataset_draw_ahead = int(dataset_draw_ahead)
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ArgumentError(f"checkpoint_every: needs checkpoint_dir, got checkpoint_every={checkpoint_every}")
        if sampler is not None:
            if buffer_class is not UniformReplayBuffer:
                raise ArgumentError(
                    f"sampler: the shards' buffer_class {getattr(buffer_class, '__name__', buffer_class)!r} "
                    f"already chooses it; pass one of them, got sampler={sampler!r}"
                )
            chosen = check_sampler(sampler)
            buffer_class = PrioritizedReplayBuffer if chosen == "prioritized" else UniformReplayBuffer
        if not (isinstance(buffer_class, type) and issubclass(buffer_class, StreamBuffer)):
            raise ArgumentError(
                f"buffer_class: expected a replaybuf NumPy buffer class (UniformReplayBuffer, "
                f"PrioritizedReplayBuffer, ...), got {buffer_class!r}"
            )
        buffer_options = dict(buffer_options or {})
        rules = check_sample_rules(
            FlatSpec(data_spec), replacement, max_times_sampled, None, max_staleness, version_field, drop_remainder
        )
        for reserved in (
            "data_spec",
            "batch_size",
            "max_length",
            "seed",
            "rate_limiter",
            "rate_limiter_timeout",
            *RULES,
        ):
            if reserved in buffer_options:
                raise ArgumentError(
                    f"buffer_options: {reserved!r} is set by ShardedReplayBuffer itself, got "
                    f"buffer_options[{reserved!r}]={buffer_options[reserved]!r}"
                )
        if rules.active:  # the split draws uniformly over eligible counts: uniform shards only
            uniform = not hasattr(buffer_class, "update_priorities")
            if not uniform or "max_times_sampled" not in inspect.signature(buffer_class).parameters:
                raise ArgumentError(
                    f"buffer_class: the sample-count rules need uniform shards that keep them (UniformReplayBuffer, "
                    f"FrameStackReplayBuffer), got {buffer_class.__name__}"
                )
            buffer_options.update(  # an epoch's last batch is the driver's to drop, not a shard's
                replacement=bool(replacement),
                max_times_sampled=max_times_sampled,
                max_staleness=max_staleness,
                version_field=version_field,
            )
        with tempfile.TemporaryDirectory() as scratch:  # the options' errors, here (a memmap in scratch)
            local = {**buffer_options, **({"path": scratch} if "path" in buffer_options else {})}
            buffer_class(data_spec, batch_size=1, max_length=1, **local)
        limiter = check_rate_limiter(rate_limiter)
        self._limiter_timeout = check_timeout(rate_limiter_timeout, "rate_limiter_timeout")
        self._call_timeout = check_timeout(call_timeout, "call_timeout")
        self._retry_timeout = check_timeout(retry_timeout, "retry_timeout")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ArgumentError(f"max_restarts: expected an int >= -1, got {max_restarts!r}")
        if not ray.is_initialized():
            raise ArgumentError("ShardedReplayBuffer: expected a running Ray (call ray.init() first), got none")
        self._flat = FlatSpec(data_spec)
        self._shards, self._batch_size, self._max_length = int(shards), int(batch_size), int(max_length)
        self._geometry = Geometry(self._batch_size, self._max_length, self._batch_size * self._max_length)
        self._stream_counts = np.array([len(range(k, batch_size, shards)) for k in range(shards)], np.int64)
        self._buffer_class, self._buffer_options = buffer_class, buffer_options
        self._max_in_flight = int(max_in_flight)
        self._episodes = bool(buffer_options.get("respect_episodes", False))
        self._prioritized = hasattr(buffer_class, "update_priorities")
        self._rng = np.random.default_rng(seed)
        self._rules = rules if rules.active else None
        self._epochs = EpochSplit(shards)
        self._policy_version = 0
        shard_seeds = np.random.SeedSequence(seed).generate_state(shards, np.uint32)
        name = f"replaybuf-{uuid.uuid4().hex[:12]}"
        namespace = ray.get_runtime_context().namespace
        self._names = [f"{name}-shard-{k}" for k in range(shards)]
        self._limiter = None
        if limiter is not None:
            self._limiter = (
                ray.remote(Limiter)
                .options(num_cpus=0, max_concurrency=256, max_restarts=max_restarts, name=f"{name}-limiter")
                .remote(limiter_config(limiter), self._names, namespace)
            )
        options = {"num_cpus": 0, **(actor_options or {})}
        actor = ray.remote(Shard)
        options.update(max_restarts=max_restarts, max_task_retries=0, max_concurrency=32)
        checkpoint_dir = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self._actors = [
            actor.options(name=self._names[k], **options).remote(
                k,
                buffer_class,
                data_spec,
                int(self._stream_counts[k]),
                self._max_length,
                int(shard_seeds[k]),
                self._shard_options(k),
                checkpoint_dir,
                checkpoint_every,
                self._limiter,
                self._limiter_timeout,
            )
            for k in range(shards)
        ]
        get([a.ping.remote() for a in self._actors])  # the shards' own argument errors surface here
        self._writers = [self._writer_for(k) for k in range(shards)]  # this object's add_batch
        self._writer_count = np.zeros(shards, np.int64)
        self._masses: dict[tuple, np.ndarray] = {}  # (num_steps, sequence rule or None) -> each shard's mass
        self._fresh = False
        self._down: dict[int, Any] = {}  # shard -> the ping that tells when it is back

    def _shard_options(self, shard: int) -> dict:
        """Shard ``shard``'s buffer options: a memmap ``path`` becomes ``path/shard-NNN``."""
        options = dict(self._buffer_options)
        if options.get("path") is not None:
            options["path"] = os.path.join(os.fspath(options["path"]), f"shard-{shard:03d}")
        return options

    # -- geometry -------------------------------------------------------------------------------
    @property
    def shards(self) -> int:
        return self._shards

    @property
    def actors(self) -> list:
        """The shard actors' handles (shard k at index k)."""
        return list(self._actors)

    # -- writes ---------------------------------------------------------------------------------
    def writer(self, shard: int | None = None, *, max_in_flight: int | None = None) -> ShardWriter:
        """A ``ShardWriter`` for ``shard`` (default: the shard with the fewest writers so far).

        Its ``add_batch`` takes that shard's streams (``writer.batch_size``); it pickles
        into Ray tasks and actors.

        Raises:
            ArgumentError: ``shard`` is not a shard index; with ``respect_episodes``, a
                second writer for one shard (both would write steps into the same streams,
                breaking each other's episodes: use as many shards as writers).
        """
        if shard is None:
            shard = int(np.argmin(self._writer_count))
        if isinstance(shard, bool) or not isinstance(shard, (int, np.integer)) or not 0 <= shard < self._shards:
            raise ArgumentError(f"shard: expected an int in [0, {self._shards}), got {shard!r}")
        if self._episodes and self._writer_count[shard]:
            raise ArgumentError(
                f"shard: with respect_episodes each writer needs its own shard (two writers would interleave "
                f"steps in the same streams); shard {shard} already has a writer: use shards >= writers"
            )
        self._writer_count[shard] += 1
        return self._writer_for(int(shard), max_in_flight)

    def _writer_for(self, shard: int, max_in_flight: int | None = None) -> ShardWriter:
        return ShardWriter(
            self._actors[shard],
            shard,
            self.data_spec,
            int(self._stream_counts[shard]),
            max_in_flight=max_in_flight or self._max_in_flight,
            call_timeout=self._call_timeout,
            retry_timeout=self._retry_timeout,
            prioritized=self._prioritized,
        )

    def add_batch(self, items: Any, priorities: Any = None) -> None:
        """Add one step to every stream (each leaf ``[batch_size] + spec.shape``) and wait for it;
        ``priorities``: the new items' ``[batch_size]`` priorities (prioritized shards).

        Raises:
            SpecMismatchError: the items do not match the data_spec; nothing is written.
            ArgumentError: ``priorities`` without prioritized shards, or not ``[batch_size]``
                numbers; PriorityError: one not finite and > 0. Nothing is written.
            RateLimiterTimeout: a shard's add was held back past ``rate_limiter_timeout``.
            ShardUnavailableError: a shard stayed down past ``retry_timeout``.
        """
        without = None if self._prioritized else f"the shards hold {self._buffer_class.__name__} (no priorities)"
        given = priorities_of_add(priorities, self._batch_size, without)
        leaves = self._flat.flatten_batch(items, self._batch_size)
        for k, writer in enumerate(self._writers):
            part = self._flat.unflatten([leaf[k :: self._shards] for leaf in leaves])
            writer.add_batch(part, None if given is None else given[k :: self._shards])
        self._fresh = False
        errors = []
        for writer in self._writers:
            try:
                writer.flush()
            except ReplayBufferError as err:
                errors.append(err)
        if errors:
            raise errors[0]

    def update_priorities(self, ids: Any, priorities: Any, *, wait: bool = True) -> None:
        """Set the priorities of the items (windows) with global ``ids``, each on its shard.

        ``ids`` is ``info.ids`` of a sample (``[B]`` or ``[B, T]``, the first id of a window
        counts). ``wait=True`` waits for the shards and takes their new masses, so the next
        batch is split by them; ``wait=False`` returns once the updates are sent (the split
        catches up with the next fan-out's answers, one batch later).

        Raises:
            ArgumentError: not a prioritized buffer; ids not integers shaped like priorities.
            PriorityError: a priority not finite and > 0 (nothing changed), or an id never
                added (its shard changes nothing; other shards may have applied theirs).
        """
        if not self._prioritized:
            raise ArgumentError(
                f"update_priorities: expected shards of a prioritized buffer_class, got {self._buffer_class.__name__}"
            )
        ids, priorities = priority_update(ids, priorities)
        bad = ~(np.isfinite(priorities) & (priorities > 0))
        if bad.any():
            raise bad_priorities(priorities, bad)
        if (ids < 0).any():
            raise unknown_ids(ids, ids < 0)
        shard, local = self._route(ids)
        keys = list(self._masses)
        refs = {}
        for k in np.unique(shard):
            mine = shard == k
            refs[int(k)] = self._actors[k].update_priorities.remote(local[mine], priorities[mine], keys)
        if wait:  # the shards' new masses: the next split is exact at once
            for k, masses in zip(refs, get(list(refs.values()), timeout=self._call_timeout), strict=True):
                for key, mass in zip(keys, masses, strict=True):
                    self._masses[key][k] = mass

    def clear(self) -> None:
        """Forget every item on every shard (and the limiter's counts)."""
        get([a.clear.remote() for a in self._actors], timeout=self._call_timeout)
        if self._limiter is not None:
            call(self._limiter.reset, retry_timeout=self._retry_timeout)
        self._epochs.cleared()
        self._masses.clear()
        self._fresh = False

    # -- ids ------------------------------------------------------------------------------------
    def _route(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(shard, local id)`` of global ids."""
        stream, step = ids % self._batch_size, ids // self._batch_size
        shard = stream % self._shards
        return shard, step * self._stream_counts[shard] + stream // self._shards

    def _global(self, shard: int, local: np.ndarray) -> np.ndarray:
        count = int(self._stream_counts[shard])
        return (local // count) * self._batch_size + (local % count) * self._shards + shard

    # -- sampling -------------------------------------------------------------------------------
    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, BufferInfo]:
        """Sample across the shards; shapes as ``replaybuf.buffer`` says.

        Returns ``(items, info)``; ``info`` is a ``SampleInfo`` with ``weights`` for
        prioritized shards (and ``mask`` for padded episode windows). With ``burn_in`` or
        ``period`` (shards with ``respect_episodes``): sequences as the shards' buffers draw
        them (``info.mask``, ``info.learn``), the batch split by each shard's mass of eligible
        learning starts.

        Raises:
            EmptyBufferError: nothing is stored, or no shard holds a window of num_steps (or an
                eligible learning start).
            ArgumentError: sample_batch_size or num_steps not a positive int; bad sequence
                arguments (as ``UniformReplayBuffer.get_next``).
            RateLimiterTimeout: the limiter held the sample back past rate_limiter_timeout.
            ShardUnavailableError: every shard with items stayed down past call_timeout.
        """
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        rule = self._sequence_rule(burn_in, period, num_steps)
        if self._rules is not None:
            return self._ruled_sample(sample_batch_size, num_steps, time_stacked)
        return self._collect(self._submit(sample_batch_size, num_steps, rule), time_stacked)

    def _sequence_rule(self, burn_in: Any, period: Any, num_steps: Any) -> SequenceRule | None:
        """The checked ``SequenceRule`` of a sample with ``burn_in`` or ``period`` (None without),
        checked here as every shard's buffer would."""
        if burn_in is None and period is None:
            return None
        if self._rules is not None:
            raise ArgumentError(
                "burn_in / period: sequences under sample-count rules are not split over shards yet; "
                f"got burn_in={burn_in!r}, period={period!r}"
            )
        pad = bool(self._buffer_options.get("pad_episode_ends", False))
        return check_sequence_arguments(burn_in, period, num_steps, self._max_length, self._episodes, pad)

    def _submit(self, sample_batch_size: int | None, num_steps: int | None, rule: SequenceRule | None = None) -> dict:
        """Start one fan-out: the limiter's grant, the split, one call per live shard."""
        n = sample_batch_size or 1
        if self._limiter is not None:
            call(self._limiter.await_sample, n, self._limiter_timeout, retry_timeout=self._retry_timeout)
        self._check_down()
        key = (num_steps, None if rule is None else rule._replace(burn_in=0))  # what a shard's mass is of
        masses = self._masses.get(key)
        if masses is None or not self._fresh:
            masses = self._refresh(key)
        live = np.array([k not in self._down for k in range(self._shards)])
        pending = {"B": sample_batch_size, "T": num_steps, "rule": rule, "key": key, "n": n, "live": live}
        pending["masses"] = masses.copy()
        counts = self._split(n, masses, live)
        pending["counts"] = counts
        pending["refs"] = {
            k: self._actors[k].sample.remote(int(counts[k]), num_steps, rule) for k in np.flatnonzero(live)
        }
        return pending

    def _split(self, n: int, masses: np.ndarray, live: np.ndarray) -> np.ndarray:
        return MassSplit(np.where(live, masses, 0.0)).counts(self._rng, n)

    def _refresh(self, key: tuple) -> np.ndarray:
        """Ask every live shard for its mass of ``key`` ``(num_steps, rule)`` now (a fan-out of 0 draws)."""
        live = [k for k in range(self._shards) if k not in self._down]
        refs = {k: self._actors[k].sample.remote(0, *key) for k in live}
        masses = np.zeros(self._shards)
        for k, result in self._gather(refs).items():
            if result is not None:
                masses[k] = result["mass"]
        self._masses[key] = masses
        self._fresh = True
        return masses

    def _gather(self, refs: dict) -> dict:
        """``{shard: result or None}``: None for a shard that failed or missed the deadline
        (it is marked down until it answers a ping)."""
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self._call_timeout)
        ready = set(ready)
        results = {}
        for k, ref in refs.items():
            if ref not in ready:
                self._mark_down(k)
                results[k] = None
                continue
            try:
                results[k] = get(ref)
            except SHARD_DOWN:
                self._mark_down(k)
                results[k] = None
        return results

    def _mark_down(self, shard: int) -> None:
        if shard not in self._down:
            self._down[shard] = self._actors[shard].ping.remote()

    def _check_down(self) -> None:
        """Shards marked down rejoin when their ping answered; a failed ping is sent again."""
        for k, ping in list(self._down.items()):
            ready, _ = ray.wait([ping], timeout=0)
            if not ready:
                continue
            try:
                get(ping)
                del self._down[k]
                self._fresh = False
            except SHARD_DOWN:
                self._down[k] = self._actors[k].ping.remote()

    def _collect(self, pending: dict, time_stacked: bool = True) -> tuple[Any, BufferInfo]:
        """Finish a fan-out: redraw what failed from the live shards, assemble, exact probabilities."""
        try:
            return self._assemble(pending, time_stacked)
        except BaseException:
            self._undo(pending)
            raise

    def _undo(self, pending: dict) -> None:
        """Give back the limiter's grant of a fan-out that hands nothing out."""
        if self._limiter is not None:
            self._limiter.undo_sample.remote(pending["n"])

    def _assemble(self, pending: dict, time_stacked: bool) -> tuple[Any, BufferInfo]:
        n, num_steps, masses, rule = pending["n"], pending["T"], pending["masses"], pending["rule"]
        live, counts = pending["live"].copy(), pending["counts"].copy()
        parts: dict[int, list] = {}
        answers: dict[int, dict] = {}
        refs = pending["refs"]
        errors: list[str] = []
        for _ in range(self._shards + 1):
            for k, result in self._gather(refs).items():
                if result is None or "error" in result:
                    live[k] = False
                    masses[k] = 0.0
                    if result is not None:
                        errors.append(result["error"])
                    continue
                answers[k] = result
                parts.setdefault(k, [])
                if counts[k] and "leaves" in result:
                    parts[k].append(result)
            missing = n - sum(len(r["ids"]) for rs in parts.values() for r in rs)
            if missing == 0:
                break
            extra = self._split(missing, masses, live)
            if extra.sum() == 0 and missing == n:  # nothing drawn yet: start over with the masses just reported
                for k, result in answers.items():
                    masses[k] = result["mass"] if live[k] else 0.0
                extra = self._split(missing, masses, live)
            if extra.sum() == 0:
                self._raise_empty(num_steps, errors)
            counts = extra
            refs = {k: self._actors[k].sample.remote(int(extra[k]), num_steps, rule) for k in np.flatnonzero(extra)}
        else:
            raise ShardUnavailableError(f"a batch of {n} could not be filled in {self._shards + 1} rounds of redraws")
        for k, result in answers.items():
            self._masses.setdefault(pending["key"], np.zeros(self._shards))[k] = result["mass"]
        split = MassSplit(np.where(live, masses, 0.0))
        order = self._rng.permutation(n)
        leaves_parts, ids_parts, prob_parts = [], [], []
        marks: dict[str, list] = {"mask": [], "learn": []}
        for k in sorted(parts):
            for result in parts[k]:
                leaves_parts.append(result["leaves"])
                ids_parts.append(self._global(k, result["ids"]))
                prob_parts.append(split.probabilities(k, result["probabilities"]))
                for name, found in marks.items():
                    found.append(result[name])
        leaves = [np.concatenate([p[i] for p in leaves_parts])[order] for i in range(len(self._flat.leaves))]
        ids = np.concatenate(ids_parts)[order]
        probabilities = np.concatenate(prob_parts)[order].astype(np.float32)
        extras: dict = {}
        if self._prioritized:
            beta = next(iter(answers.values()))["beta"]
            reported = {k: (answers[k]["mass"], answers[k]["smallest"]) for k in np.flatnonzero(live) if k in answers}
            extras["weights"] = split.weights(probabilities, split.smallest(reported), beta)
        for name, found in marks.items():
            if found and found[0] is not None:
                extras[name] = np.concatenate(found)[order]
        if rule is not None:
            num_steps = rule.burn_in + rule.num_steps
        if pending["B"] is None:
            leaves = [leaf[0] for leaf in leaves]
            ids, probabilities = ids[0], probabilities[0]
            extras = {key: value[0] for key, value in extras.items()}
        if time_stacked or num_steps is None:
            items = self._flat.unflatten(leaves)
        else:
            items = unstack_time(self._flat.unflatten, leaves, num_steps, batched=pending["B"] is not None)
        if extras:
            return items, SampleInfo(ids, probabilities, **extras)
        return items, BufferInfo(ids, probabilities)

    # -- sample-count rules (replaybuf.samplers.parts) ------------------------------------------
    def _ruled_sample(self, sample_batch_size: int | None, num_steps: int | None, time_stacked: bool) -> Any:
        """``get_next`` under the rules. Too few eligible items: EmptyBufferError, or under a rate
        limiter a wait for adds (looked at every 0.05 s) up to ``rate_limiter_timeout``."""
        n = sample_batch_size or 1
        if self._limiter is not None:
            call(self._limiter.await_sample, n, self._limiter_timeout, retry_timeout=self._retry_timeout)
        deadline = None if self._limiter_timeout is None else time.monotonic() + self._limiter_timeout
        try:
            while True:
                try:
                    taken, probability, epoch = self._ruled_draw(n, num_steps)
                    break
                except EmptyBufferError as err:
                    if self._limiter is None:
                        raise
                    if deadline is not None and time.monotonic() >= deadline:
                        raise RateLimiterTimeout(
                            f"get_next waited {self._limiter_timeout} s for eligible items "
                            f"(rate_limiter_timeout): {err}"
                        ) from err
                    time.sleep(0.05)
        except BaseException:
            self._undo({"n": n})
            raise
        order = self._rng.permutation(sum(len(result["ids"]) for _, result in taken))
        leaves = [np.concatenate([r["leaves"][i] for _, r in taken])[order] for i in range(len(self._flat.leaves))]
        ids = np.concatenate([self._global(k, r["ids"]) for k, r in taken])[order]
        probabilities = np.full(ids.shape[0], probability, np.float32)
        extras: dict = {} if epoch is None else {"epoch": epoch}
        if taken[0][1]["mask"] is not None:
            extras["mask"] = np.concatenate([r["mask"] for _, r in taken])[order]
        if sample_batch_size is None:
            leaves, ids, probabilities = [leaf[0] for leaf in leaves], ids[0], probabilities[0]
            extras = {key: value if key == "epoch" else value[0] for key, value in extras.items()}
        if time_stacked or num_steps is None:
            items = self._flat.unflatten(leaves)
        else:
            items = unstack_time(self._flat.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        return items, (SampleInfo(ids, probabilities, **extras) if extras else BufferInfo(ids, probabilities))

    def _ruled_draw(self, n: int, num_steps: int | None) -> tuple[list, float, int | None]:
        """``([(shard, its sample's result)], probability, epoch or None)`` of ``n`` starts."""

        def take(counts: np.ndarray) -> tuple[list, int, np.ndarray]:
            shards = [int(k) for k in np.flatnonzero(counts)]
            results = self._shard_call(
                "sample", [self._actors[k].sample.remote(int(counts[k]), num_steps) for k in shards]
            )
            for result in results:
                if "error" in result:
                    raise EmptyBufferError(result["error"])
            taken = list(zip(shards, results, strict=True))
            left = self._epochs.left.copy()
            for k, result in taken:
                left[k] = result.get("left", 0)
            return taken, sum(len(r["ids"]) for r in results), left

        if not self._rules.replacement:
            begin = lambda: self._shard_call("epoch", [a.begin_epoch.remote(num_steps) for a in self._actors])  # noqa: E731
            found, size, epoch = self._epochs.batch(self._rng, n, begin, take, self._rules.drop_remainder)
            return [pair for taken in found for pair in taken], 1.0 / size, epoch
        eligible = np.array(
            [r["mass"] for r in self._shard_call("mass", [a.sample.remote(0, num_steps) for a in self._actors])],
            np.int64,
        )
        counts = split_counts(self._rng, n, eligible, self._rules.max_times_sampled is not None)
        return take(counts)[0], 1.0 / int(eligible.sum()), None

    @property
    def policy_version(self) -> int:
        """The learner's policy version (``max_staleness``: docs/sample_rules.md); setting it
        pushes it to every shard (ArgumentError for a non-int)."""
        return self._policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        version = check_policy_version(version)
        self._shard_call("policy_version", [a.set_policy_version.remote(version) for a in self._actors])
        self._policy_version = version
        self._fresh = False

    def num_eligible(self) -> int:
        """Items a sample may still draw on all shards: ``num_frames()`` less the consumed or
        stale ones (docs/sample_rules.md)."""
        return int(
            sum(info["num_eligible"] for info in self._shard_call("info", [a.info.remote() for a in self._actors]))
        )

    def _restore_rules(self, epoch: int | None = None) -> None:
        """After a load: the shards' policy version and epoch become this object's (the epoch's
        number from a sharded checkpoint's manifest when it has one)."""
        if self._rules is None:
            return
        found = self._shard_call("load", [a.rules_position.remote() for a in self._actors])
        self._policy_version = int(found[0]["policy_version"])
        if not self._rules.replacement:
            sizes = sum(f["size"] for f in found)
            number = max(f["epoch"] for f in found) if epoch is None else epoch
            self._epochs.restore(number, sizes, [f["left"] for f in found])

    def _raise_empty(self, num_steps: int | None, errors: list[str]) -> None:
        if len(self._down) == self._shards:
            raise ShardUnavailableError(f"every shard missed the call deadline of {self._call_timeout} s")
        if self.num_frames() == 0:
            raise empty(type(self).__name__)
        raise window_too_long(num_steps or 1, where="live shard", detail=f" ({errors[0]})" if errors else "")

    # -- datasets, reads ------------------------------------------------------------------------
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
        """An iterable of ``(items, info)``.

        Random mode is endless and keeps ``num_parallel_calls`` fan-outs in flight (default
        ``dataset_draw_ahead``): the next batches are being sampled on the shards while one is consumed. The
        deterministic pass (all shards must hold the same steps: items added through this
        object) reads every stored item once as ``UniformReplayBuffer``'s does. With
        ``burn_in`` / ``period``: sequences as ``get_next`` samples them; a deterministic pass
        yields every eligible sequence of every shard once, ordered by stream, then learning
        start, as ``UniformReplayBuffer``'s (shards may hold different steps).

        Raises:
            ArgumentError: a non-positive argument; in a deterministic pass as for
                UniformReplayBuffer, or shards holding different steps (windows); bad
                sequence arguments (``get_next``).
        """
        check_sample_arguments(sample_batch_size, num_steps)  # also at most 2**31 - 1 items
        check_positive("num_parallel_calls", num_parallel_calls)
        rule = self._sequence_rule(burn_in, period, num_steps)
        if single_deterministic_pass and rule is not None:
            plan = lambda: self._plan_sequences(sample_batch_size, rule)  # noqa: E731
            return DeterministicPass(plan, lambda starts: self._read_sequences(starts, rule))
        if single_deterministic_pass:
            return DeterministicPass(lambda: self._plan(sample_batch_size, num_steps), self._read_ids)
        if self._rules is not None:  # each draw changes the shards' counts: no fan-outs ahead
            return RandomDataset(lambda: self.get_next(sample_batch_size, num_steps), num_parallel_calls)
        depth = num_parallel_calls or self.dataset_draw_ahead
        submit = lambda size, steps: self._submit(size, steps, rule)  # noqa: E731
        return ShardedRandomDataset(submit, self._collect, self._undo, sample_batch_size, num_steps, depth)

    def _common_ring(self) -> StreamRing:
        """A ring standing for every shard: they must hold the same steps."""
        infos = get([a.info.remote() for a in self._actors], timeout=self._call_timeout)
        spans = {(info["first"], info["steps"]) for info in infos}
        if len(spans) > 1:
            raise ArgumentError(
                "shards: expected every shard to hold the same steps (items added through add_batch) for "
                f"gather_all or a deterministic pass, got (first, end) steps {sorted(spans)}; use gather_shards()"
            )
        first, steps = spans.pop()
        ring = StreamRing(self._batch_size, self._max_length, type(self).__name__)
        ring.reset(steps, first if first > max(0, steps - self._max_length) else 0)
        return ring

    def _plan(self, sample_batch_size: int | None, num_steps: int | None) -> list[np.ndarray]:
        return plan_deterministic_pass(self._common_ring(), sample_batch_size, num_steps, None, False)

    def _plan_sequences(self, sample_batch_size: int | None, rule: SequenceRule) -> list:
        """Every shard's eligible learning starts now (global ids), by stream, then step, in
        groups of ``sample_batch_size``: the order of a ``UniformReplayBuffer``'s pass."""
        found = self._shard_call("plan", [a.sequence_starts.remote(rule) for a in self._actors])
        starts = np.concatenate([self._global(k, local) for k, local in enumerate(found)])
        if starts.size == 0:
            raise no_episode_window(rule.num_steps, padding=not rule.pad)
        ordered = by_stream(starts, self._batch_size)
        return plan_sequence_pass(ordered, sample_batch_size, False)

    def _read_sequences(self, starts: np.ndarray, rule: SequenceRule) -> tuple[Any, BufferInfo]:
        """The sequences from the learning ``starts`` (global ids), read on their shards."""
        flat = np.atleast_1d(starts)
        length = rule.burn_in + rule.num_steps
        shard, local = self._route(flat)
        refs = {int(k): self._actors[k].read_sequences.remote(local[shard == k], rule) for k in np.unique(shard)}
        got = dict(zip(refs, self._shard_call("read", list(refs.values())), strict=True))
        ids, mask, learn = (
            np.empty((flat.size, length), np.int64),
            np.empty((flat.size, length), bool),
            np.empty((flat.size, length), bool),
        )
        leaves = [np.empty((flat.size, length, *spec.shape), spec.dtype) for spec in self._flat.leaves]
        for k, (parts, local_ids, part_mask, part_learn) in got.items():
            mine = shard == k
            ids[mine], mask[mine], learn[mine] = self._global(k, local_ids), part_mask, part_learn
            for leaf, part in zip(leaves, parts, strict=True):
                leaf[mine] = part
        shape = (*np.shape(starts), length)
        items = self._flat.unflatten([leaf.reshape(shape + leaf.shape[2:]) for leaf in leaves])
        return items, SampleInfo(ids.reshape(shape), (), mask=mask.reshape(shape), learn=learn.reshape(shape))

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        flat = ids.ravel()
        shard, local = self._route(flat)
        refs = {int(k): self._actors[k].read.remote(local[shard == k]) for k in np.unique(shard)}
        got = dict(zip(refs, get(list(refs.values()), timeout=self._call_timeout), strict=True))
        leaves = []
        for i, spec in enumerate(self._flat.leaves):
            out = np.empty((flat.shape[0], *spec.shape), spec.dtype)
            for k, parts in got.items():
                out[shard == k] = parts[i]
            leaves.append(out.reshape(ids.shape + tuple(spec.shape)))
        return self._flat.unflatten(leaves), BufferInfo(ids, ())

    def gather_all(self) -> Any:
        """Every stored item, ``[batch_size, n, ...]`` oldest first (shards must hold the same steps)."""
        ring = self._common_ring()
        return self._read_ids(ring.stream_ids())[0]

    def gather_shards(self) -> list:
        """Each shard's ``gather_all()`` (its own streams, ``[streams of shard k, n_k, ...]``)."""
        parts = get([a.gather.remote() for a in self._actors], timeout=self._call_timeout)
        return [self._flat.unflatten(leaves) for _, _, leaves in parts]

    def num_frames(self) -> int:
        """Items stored on all shards (a shard that misses the deadline counts as holding none)."""
        results = self._gather({k: a.info.remote() for k, a in enumerate(self._actors)})
        return int(sum(r["num_frames"] for r in results.values() if r is not None))

    def shard_info(self) -> list[dict | None]:
        """Each shard's counters (``num_frames``, ``steps``, ``inserts``, ``samples``,
        ``deletes``, ``waiting``: adds waiting for an earlier add of their writer, ``restored``,
        ``pid``); None for a shard that missed the deadline."""
        results = self._gather({k: a.info.remote() for k, a in enumerate(self._actors)})
        return [results[k] for k in range(self._shards)]

    def rate_limiter_state(self) -> dict | None:
        """The cluster limiter's counters and rules (None without a limiter)."""
        return None if self._limiter is None else call(self._limiter.state, retry_timeout=self._retry_timeout)

    def rate_limiter_actor(self) -> Any:
        """The limiter actor's handle (None without a limiter)."""
        return self._limiter

    def rate_limiter_range(self) -> tuple[float, float] | None:
        """The limiter's ``observed_range()`` (see ``RateLimiter``); None without a limiter."""
        return None if self._limiter is None else call(self._limiter.observed_range, retry_timeout=self._retry_timeout)

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, gather: bool = False) -> None:
        """Save every shard in parallel under ``path`` (``shard-NNN`` checkpoint folders),
        then the manifest (geometry, rate limiter counters, the versions written) last.

        ``gather=True`` writes one ordinary checkpoint folder instead: the shards' items
        joined into one ring of ``batch_size`` streams (replaybuf.ray.gathered), which any
        buffer of that spec and geometry loads (docs/persistence.md). Every shard must hold
        the same steps; the items pass through this process.

        Raises:
            ShardUnavailableError: a shard missed the deadline (nothing is written).
            CheckpointError: ``gather=True`` and the shards hold different steps.
        """
        if gather:
            states = self._shard_call("save", [a.state_dict.remote() for a in self._actors])
            rng = self._rng.bit_generator.state
            write_state(path, gather_states(states, self._shards, self._batch_size, rng, self.rate_limiter_state()))
            return
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        versions = self._shard_call(
            "save", [a.save.remote(str(root / f"shard-{k:03d}")) for k, a in enumerate(self._actors)]
        )
        manifest = {
            "format": FORMAT,
            "shards": self._shards,
            "batch_size": self._batch_size,
            "max_length": self._max_length,
            "versions": [os.path.relpath(v, root) for v in versions],
            "rate_limiter": self.rate_limiter_state(),
            "epoch": self._epochs.epoch,  # the shards count epochs begun, some refused (too few items)
        }
        temp = root / (MANIFEST + ".tmp")
        with open(temp, "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, root / MANIFEST)

    def _shard_call(self, what: str, refs: list) -> list:
        try:
            return get(refs, timeout=self._call_timeout)
        except SHARD_DOWN as err:
            raise ShardUnavailableError(f"{what}: a shard did not answer ({type(err).__name__})") from None

    def load(self, path: str | os.PathLike) -> None:
        """Load a ``save(path)`` into every shard (in parallel) and the limiter, or split one
        checkpoint folder (``save(path, gather=True)``, or any buffer's ``save`` of this spec
        and geometry) over the shards.

        Raises:
            CheckpointError: a sharded checkpoint of another geometry, a shard folder that
                fails its checks, or a one-folder checkpoint this buffer cannot hold (checked
                whole before any shard changes).
        """
        root = Path(path)
        manifest = _sharded_manifest(root)
        if manifest is None:
            self._load_one_folder(root)
            return
        expected = {"shards": self._shards, "batch_size": self._batch_size, "max_length": self._max_length}
        for key, value in expected.items():
            if manifest.get(key) != value:
                raise CheckpointError(f"{root}/{MANIFEST}[{key!r}]: expected {value!r}, got {manifest.get(key)!r}")
        if (manifest.get("rate_limiter") is None) != (self._limiter is None):
            raise CheckpointError(
                f"{root}/{MANIFEST}['rate_limiter']: saved {'none' if manifest.get('rate_limiter') is None else 'one'}"
                f", this buffer has {'none' if self._limiter is None else 'one'}"
            )
        get([a.load.remote(str(root / f"shard-{k:03d}")) for k, a in enumerate(self._actors)])
        if self._limiter is not None:
            call(self._limiter.load_state, manifest["rate_limiter"], retry_timeout=self._retry_timeout)
        self._restore_rules(manifest.get("epoch"))
        self._masses.clear()
        self._fresh = False

    def _load_one_folder(self, root: Path) -> None:
        """Check a one-folder checkpoint whole (in a probe buffer of the shards' class and this
        geometry), then hand each shard its streams and the limiter its counters."""
        state = read_state(root)
        limiter = None
        if isinstance(state, dict) and isinstance(state.get("checkpoint"), dict):
            header = state["checkpoint"]
            if "rate_limiter" in state and self._limiter is not None:  # the limiter actor holds it: check there
                limiter = call(self._limiter.check_state, state["rate_limiter"], retry_timeout=self._retry_timeout)
                state = {k: v for k, v in state.items() if k != "rate_limiter"}
                state["checkpoint"] = dict(header, rate_limiter=False)
            elif header.get("rate_limiter") is True or self._limiter is not None:
                saved = "holds" if header.get("rate_limiter") is True else "holds no"
                raise CheckpointError(
                    f"state['rate_limiter']: the checkpoint {saved} rate limiter counters, this buffer differs"
                )
        with tempfile.TemporaryDirectory() as scratch:
            options = {**self._buffer_options, **({"path": scratch} if "path" in self._buffer_options else {})}
            probe = self._buffer_class(
                self._flat.data_spec, batch_size=self._batch_size, max_length=self._max_length, **options
            )
            probe.load_state_dict(state)  # every check, before any shard changes
            checked = probe.state_dict()
        parts = split_state(checked, self._shards, self._batch_size)
        self._shard_call("load", [a.load_state_dict.remote(p) for a, p in zip(self._actors, parts, strict=True)])
        if describe(state).rng == "PCG64":
            self._rng.bit_generator.state = checked["rng"]
        if limiter is not None:
            call(self._limiter.load_state, limiter, retry_timeout=self._retry_timeout)
        self._restore_rules()
        self._masses.clear()
        self._fresh = False

    def checkpoint(self, path: str | os.PathLike) -> None:
        """Deprecated name of ``save`` (every buffer saves with ``save``); removed in the next release."""
        warnings.warn("ShardedReplayBuffer.checkpoint is deprecated: use save", DeprecationWarning, stacklevel=2)
        self.save(path)

    def restore(self, path: str | os.PathLike) -> None:
        """Deprecated name of ``load`` (every buffer loads with ``load``); removed in the next release."""
        warnings.warn("ShardedReplayBuffer.restore is deprecated: use load", DeprecationWarning, stacklevel=2)
        self.load(path)

    def close(self) -> None:
        """Wake every call blocked on the rate limiter with ``BufferClosedError``."""
        if self._limiter is not None:
            call(self._limiter.close, retry_timeout=self._retry_timeout)

    def shutdown(self) -> None:
        """Kill the shard and limiter actors (the buffer is unusable afterwards)."""
        for actor in [*self._actors, *([self._limiter] if self._limiter is not None else [])]:
            ray.kill(actor, no_restart=True)

    def __repr__(self) -> str:
        return (
            f"ShardedReplayBuffer(shards={self._shards}, batch_size={self._batch_size}, "
            f"max_length={self._max_length}, buffer_class={self._buffer_class.__name__})"
        )


def _sharded_manifest(root: Path) -> dict | None:
    """The manifest of a sharded checkpoint at ``root``; None when ``root`` is an ordinary
    checkpoint folder (``CURRENT``, or a version folder's own manifest)."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        if (root / POINTER).exists():
            return None
        raise CheckpointError(f"{root}: expected a sharded checkpoint with {MANIFEST} or a checkpoint folder") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{root}: expected a sharded checkpoint with {MANIFEST}, got {err}") from None
    if isinstance(manifest, dict) and manifest.get("format") == "replaybuf-checkpoint":
        return None  # a version folder
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{root}/{MANIFEST}['format']: expected {FORMAT!r}, got {manifest!r:.80}")
    return manifest
