"""Sample-count rules over any uniform sampler: epochs, consumption, staleness (docs/sample_rules.md).

- ``replacement=False``: shuffled epochs. The starts eligible when an epoch begins are drawn
  in a random order, each once; starts added during the epoch join the next one, starts that
  stop being eligible (overwritten, consumed, stale) are skipped. ``drop_remainder`` drops an
  epoch's last, short batch.
- ``max_times_sampled=K``: a start drawn K times is consumed (no longer drawn); the starts
  of one batch are distinct. ``fifo=True`` draws the oldest eligible starts first (Reverb's
  queue table; with K=1 a queue).
- ``max_staleness=V``: a start whose ``version_field`` is older than
  ``policy_version - V`` is not drawn.

The unit is the sample's start: an item, a window's first item, a sequence's learning start.
The live starts (stored, not consumed, not stale) are a ``LiveSet``; the wrapped sampler
(``UniformSampler`` or ``EpisodeSampler``) decides which of them fit the sample's shape. The
draws are ``rule_draws``' (NumPy, or one numba call a step); ``ruled_priorities`` keeps the
same bookkeeping over the prioritized sampler.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError
from replaybuf.nest import FlatSpec
from replaybuf.refusals import empty
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import _leaf_index, pad_windows
from replaybuf.samplers.live_set import LiveSet
from replaybuf.samplers.rule_draws import rule_draws
from replaybuf.samplers.sequences import SequenceRule, eligible
from replaybuf.samplers.uniform import filled_probabilities

__all__ = ["RuledSampler", "SampleRules", "check_policy_version", "check_sample_rules"]


class SampleRules:
    """The checked rules of one buffer (see the module); ``active`` when any is set."""

    def __init__(
        self,
        replacement: bool,
        max_times_sampled: int | None,
        fifo: bool,
        max_staleness: int | None,
        version: int | None,
        drop_remainder: bool,
    ):
        self.replacement, self.max_times_sampled, self.fifo = replacement, max_times_sampled, fifo
        self.max_staleness, self.version, self.drop_remainder = max_staleness, version, drop_remainder

    @property
    def active(self) -> bool:
        return not self.replacement or self.max_times_sampled is not None or self.fifo or self.max_staleness is not None


def _int_at_least(name: str, value: Any, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ArgumentError(f"{name}: expected an int >= {low} or None, got {value!r:.80}")
    return int(value)


def check_sample_rules(
    flat: FlatSpec,
    replacement: Any = True,
    max_times_sampled: Any = None,
    sampler: Any = None,
    max_staleness: Any = None,
    version_field: Any = "policy_version",
    drop_remainder: Any = False,
    prioritized: bool = False,
) -> SampleRules:
    """The ``SampleRules`` of a buffer's constructor keywords (``prioritized``: of a buffer
    that draws by priority, which keeps no epochs and no FIFO order).

    Raises:
        ArgumentError: ``replacement`` or ``drop_remainder`` not a bool, ``max_times_sampled``
            not an int >= 1, ``max_staleness`` not an int >= 0, ``sampler`` other than None or
            ``"fifo"`` (or ``"fifo"`` with ``replacement=False``), ``drop_remainder`` without
            ``replacement=False``, or ``max_staleness`` with a ``version_field`` that names no
            scalar integer field of the data_spec. With ``prioritized``: ``replacement=False``
            or a ``sampler``.
    """
    for name, value in (("replacement", replacement), ("drop_remainder", drop_remainder)):
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentError(f"{name}: expected True or False, got {value!r:.80}")
    if prioritized and not replacement:
        raise ArgumentError(
            "replacement: expected True on a prioritized buffer (an epoch draws every item once in a "
            "uniformly random order, leaving nothing to priorities; max_times_sampled=1 draws each item "
            "once, by priority), got False"
        )
    if prioritized and sampler is not None:
        raise ArgumentError(
            f"sampler: expected None on a prioritized buffer (priorities order its draws; a FIFO queue is "
            f"UniformReplayBuffer(max_times_sampled=1, sampler='fifo')), got {sampler!r:.80}"
        )
    times = _int_at_least("max_times_sampled", max_times_sampled, 1)
    staleness = _int_at_least("max_staleness", max_staleness, 0)
    if sampler not in (None, "fifo"):
        raise ArgumentError(f"sampler: expected None (uniform) or 'fifo' (oldest first), got {sampler!r:.80}")
    if sampler == "fifo" and not replacement:
        raise ArgumentError("sampler: expected None with replacement=False (an epoch is shuffled), got 'fifo'")
    if drop_remainder and replacement:
        raise ArgumentError(
            "drop_remainder: only used with replacement=False (it drops an epoch's last batch), got True"
        )
    version = None
    if staleness is not None:
        version = _leaf_index(flat, version_field) if isinstance(version_field, str) else None
        leaf = None if version is None else flat.leaves[version]
        if leaf is None or leaf.shape != () or np.dtype(leaf.dtype).kind not in "iu":
            raise ArgumentError(
                f"version_field: expected the path of a scalar integer field of the data_spec (one of {flat.paths}) "
                f"with max_staleness, got {version_field!r:.80}"
            )
    return SampleRules(bool(replacement), times, sampler == "fifo", staleness, version, bool(drop_remainder))


def check_policy_version(version: Any) -> int:
    """A learner's ``policy_version`` as an int (ArgumentError naming it otherwise): what the
    shared and Ray buffers' setters take, as ``StreamBuffer.policy_version`` does."""
    if isinstance(version, (bool, np.bool_)) or not isinstance(version, (int, np.integer)):
        raise ArgumentError(f"policy_version: expected an int, got {version!r:.80}")
    return int(version)


class RuledSampler:
    """A uniform sampler (``base``) whose draws follow ``rules``; the Sampler protocol.

    ``compiled``: None draws with numba's kernels when numba is installed (the ``fast``
    extra), False with NumPy's, True insists on numba (``replaybuf.samplers.rule_draws``).
    """

    def __init__(self, base: Any, rules: SampleRules, ring: StreamRing, compiled: bool | None = None):
        self.base, self.rules, self.ring = base, rules, ring
        self.draws = rule_draws(ring.capacity, compiled)
        self.live = LiveSet(ring.capacity)
        limit = rules.max_times_sampled
        # counts in int32 where the limit fits (half the memory a draw's count reads at random)
        self.times = np.zeros(ring.capacity, np.int32 if limit is None or limit < 2**31 else np.int64)
        self.versions = np.zeros(ring.capacity, np.int64)
        self._saved_live: np.ndarray | None = None  # a checkpoint's order of the live ids, until loaded
        self.floor = 0  # ids below it are not live (sampler="fifo" scans from it)
        self.policy_version = 0
        self._clear_epoch()
        self._batch = None  # the single-item draw of the common cases (see ``_epoch_batch``)
        if not rules.replacement and rules.max_times_sampled is None:
            self._batch = self._epoch_batch
        elif rules.replacement and rules.max_times_sampled is not None and not rules.fifo:
            self._batch = self._counted_batch

    @property
    def episodes(self) -> Any:
        return getattr(self.base, "episodes", None)

    @property
    def pad(self) -> bool:
        return getattr(self.base, "pad", False)

    def _clear_epoch(self) -> None:
        self.epoch, self.order, self.cursor = 0, np.zeros(0, np.int64), 0
        self._removals: int | None = None  # ``live.removals`` when the order was made (None: loaded)

    def _new_order(self, order: np.ndarray) -> None:
        """Begin the next epoch over ``order`` (live starts), drawn lazily, batch by batch."""
        self.order, self.cursor, self.epoch = order, 0, self.epoch + 1
        self._removals = self.live.removals

    def _left(self, ids: np.ndarray) -> None:
        """``ids`` stopped being eligible (consumed or stale): nothing more to do for uniform draws."""

    # -- draws ----------------------------------------------------------------------------------
    def draw(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, num_steps: int | None
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        batch = self._batch
        if batch is not None and num_steps is None and sample_batch_size is not None:
            drawn = batch(rng, ring, sample_batch_size)
            if drawn is not None:
                return drawn
        starts, probabilities, epoch = self._starts(rng, ring, sample_batch_size, num_steps)
        ids = ring.window_ids(starts, num_steps)
        extras: dict = {} if epoch is None else {"epoch": epoch}
        if num_steps is not None and self.pad:
            ids, extras["mask"] = pad_windows(self.episodes, ids)
        return ids, probabilities, extras

    def draw_sequences(
        self, rng: np.random.Generator, ring: StreamRing, sample_batch_size: int | None, rule: SequenceRule
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        starts, probabilities, epoch = self._starts(rng, ring, sample_batch_size, rule)
        ids, extras = self.episodes.sequences(starts, rule)
        return ids, probabilities, extras if epoch is None else {**extras, "epoch": epoch}

    def _epoch_batch(self, rng: np.random.Generator, ring: StreamRing, size: int) -> tuple | None:
        """``draw`` of ``size`` single items from an epoch that has a whole batch left (the
        common case, in fewer Python steps than ``_starts``: each is ~0.3 us of a ~25 us
        sample); None when it has not (``_starts`` then begins the next epoch)."""
        order, cursor = self.order, self.cursor
        if cursor + size > order.shape[0]:
            return None
        oldest, live = ring.first_valid_step() * ring.batch_size, self.live
        # whether a start may have left the live set since the epoch began but by overwriting
        # (``id >= oldest`` tells those apart): ``alive`` is read only then
        check = self._removals != live.removals
        taken = self.draws.take(rng, order, cursor, size, live, oldest, check)
        self.cursor = cursor + size
        if taken.shape[0] < size:  # some stopped being eligible: the rest as ``_epoch_starts`` finds it
            taken, count, epoch = self._epoch_starts(rng, ring, size, None, [taken])
            return taken, filled_probabilities(1.0 / count, taken.shape[0]), {"epoch": epoch}
        return taken, filled_probabilities(1.0 / order.shape[0], size), {"epoch": self.epoch}

    def _counted_batch(self, rng: np.random.Generator, ring: StreamRing, size: int) -> tuple | None:
        """``draw`` of ``size`` distinct single items, counted (``max_times_sampled``), in fewer
        steps than ``_starts``; None when too few are eligible (``_starts`` raises). While every
        stored item is live (none consumed or stale yet), the ids are drawn from their range
        as the plain sample draws them, not read from the live set (a cache miss per item)."""
        live = self.live
        count = live.size
        if count < size:
            return None
        oldest = ring.first_valid_step() * ring.batch_size
        pool = oldest if count == ring.steps * ring.batch_size - oldest else live.dense
        counts = (self.times, self.rules.max_times_sampled, live, oldest - oldest % ring.capacity)
        return self.draws.pick_counted(rng, pool, count, size, counts), filled_probabilities(1.0 / count, size), {}

    def _fits(self, ring: StreamRing, ids: np.ndarray, shape: int | SequenceRule | None) -> np.ndarray:
        """Which live starts fit a sample of ``shape`` (num_steps, or a sequence rule) now."""
        if isinstance(shape, SequenceRule):
            return eligible(self.episodes.position, ring, ids, shape)
        steps = shape or 1
        fits = ids < (ring.steps - steps + 1) * ring.batch_size
        if steps > 1 and self.episodes is not None and not self.pad:
            fits &= self.episodes.inside(ids, steps)
        return fits

    def _fitting(self, ring: StreamRing, shape: Any) -> np.ndarray:
        """The live starts that fit a sample of ``shape`` (the live set's view for single items)."""
        live = self.live.ids()
        return live if shape is None or shape == 1 else live[self._fits(ring, live, shape)]

    def _starts(
        self, rng: np.random.Generator, ring: StreamRing, size: int | None, shape: int | SequenceRule | None
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        if ring.steps == 0:
            raise empty(ring.name)
        wanted = 1 if size is None else size
        epoch = None
        if self.rules.replacement:
            starts, count = self._live_starts(rng, ring, wanted, shape)
        else:
            starts, count, epoch = self._epoch_starts(rng, ring, wanted, shape)
            if self.rules.max_times_sampled is not None:
                self._sampled(ring, starts)
        if size is None:
            return starts[0], filled_probabilities(1.0 / count, None), epoch
        return starts, filled_probabilities(1.0 / count, starts.shape[0]), epoch

    def _too_few(self, wanted: int, count: int) -> EmptyBufferError:
        distinct = self.rules.max_times_sampled is not None or self.rules.fifo
        return EmptyBufferError(
            f"sample_batch_size={wanted}: only {count} eligible items (not yet consumed"
            f"{', not stale' if self.rules.max_staleness is not None else ''}) fit the sample; add more items"
            + (" or sample fewer (a batch's items are distinct under max_times_sampled or fifo)" if distinct else "")
        )

    def _live_starts(
        self, rng: np.random.Generator, ring: StreamRing, wanted: int, shape: Any
    ) -> tuple[np.ndarray, int]:
        """``(starts, count)``: ``wanted`` starts among the ``count`` live ones that fit, their
        draw counted (``max_times_sampled``)."""
        limit = self.rules.max_times_sampled
        if self.rules.fifo:
            starts, count = self._oldest(ring, wanted, shape)
            if limit is not None:
                self._sampled(ring, starts)
            return starts, count
        live = self.live
        fitting = live.dense[: live.size] if shape is None or shape == 1 else self._fitting(ring, shape)
        count = fitting.shape[0]
        if count == 0 or (limit is not None and count < wanted):
            raise self._too_few(wanted, count)
        if limit is None:
            return self.draws.pick(rng, fitting, count, wanted, False), count
        counts = (self.times, limit, live, self._origin(ring))  # the picks are read before any is counted
        return self.draws.pick_counted(rng, fitting, count, wanted, counts), count

    def _oldest(self, ring: StreamRing, wanted: int, shape: Any) -> tuple[np.ndarray, int]:
        """``(starts, count)``: the ``wanted`` oldest live starts that fit, scanned by id from
        ``floor``, which moves up to the first live id (ids only grow: those below never live again)."""
        head = ring.steps * ring.batch_size
        low = self.floor = max(self.floor, ring.first_valid_step() * ring.batch_size)
        found: list[np.ndarray] = []
        need, span = wanted, max(wanted, 1024)
        while need and low < head:
            ids = np.arange(low, min(low + span, head), dtype=np.int64)
            ids = ids[self.live.contains(ids)]
            if low == self.floor:  # nothing live yet below this chunk
                self.floor = int(ids[0]) if ids.shape[0] else min(low + span, head)
            if not (shape is None or shape == 1):
                ids = ids[self._fits(ring, ids, shape)]
            found.append(ids[:need])
            need -= found[-1].shape[0]
            low += span
        count = self.live.size if shape is None or shape == 1 else self._fitting(ring, shape).shape[0]
        if need:
            raise self._too_few(wanted, count)
        return np.concatenate(found), count

    def _epoch_starts(
        self, rng: np.random.Generator, ring: StreamRing, wanted: int, shape: Any, found: list | None = None
    ) -> tuple:
        """``(starts, epoch size, epoch)``: the next ``wanted`` starts of the epoch (fewer at its
        end), a new epoch begun when this one is spent (``rule_draws``: drawn a batch at a time).
        ``found``: starts of this batch already taken (``_epoch_batch``)."""
        oldest = ring.first_valid_step() * ring.batch_size
        single = shape is None or shape == 1
        found = [] if found is None else found
        need = wanted - sum(taken.shape[0] for taken in found)
        while need:
            if self.cursor >= self.order.shape[0]:
                if found:  # the epoch ended short of a whole batch
                    if self.rules.drop_remainder:
                        found, need = [], wanted
                    else:
                        break
                order = self._fitting(ring, shape).copy()
                if order.shape[0] == 0:
                    raise EmptyBufferError(
                        f"sample_batch_size={wanted}: no eligible item for a new epoch; add more items"
                    )
                if self.rules.drop_remainder and order.shape[0] < wanted:
                    raise EmptyBufferError(
                        f"sample_batch_size={wanted}: an epoch of {order.shape[0]} items has no whole batch "
                        "(drop_remainder=True); add more items or sample fewer"
                    )
                self._new_order(order)
            size = min(need, self.order.shape[0] - self.cursor)
            check = self._removals != self.live.removals  # (as in ``_epoch_batch``)
            taken = self.draws.take(rng, self.order, self.cursor, size, self.live, oldest, check)
            self.cursor += size
            if not single:
                taken = taken[self._fits(ring, taken, shape)]
            found.append(taken)
            need -= taken.shape[0]
        return found[0] if len(found) == 1 else np.concatenate(found), self.order.shape[0], self.epoch

    # -- epochs driven from outside (a batch split over parts: replaybuf.samplers.parts) --------
    def epoch_left(self) -> int:
        """Starts left in the epoch's order (at most: some may have stopped being eligible)."""
        return self.order.shape[0] - self.cursor

    def begin_epoch(self, rng: np.random.Generator, ring: StreamRing, shape: int | SequenceRule | None) -> int:
        """Begin a new epoch now over the eligible starts that fit ``shape``; returns its size.
        Draws of at most ``epoch_left()`` starts then stay inside it (coming short, never
        beginning another, when starts stopped being eligible)."""
        live = self.live.ids()
        order = live.copy() if shape is None or shape == 1 else live[self._fits(ring, live, shape)]
        self._new_order(order)
        return order.shape[0]

    def _sampled(self, ring: StreamRing, starts: np.ndarray) -> None:
        """Count a draw of ``starts`` (distinct); those drawn K times are consumed."""
        self.draws.count(starts, self.times, self.rules.max_times_sampled, self.live, self._origin(ring))

    @staticmethod
    def _origin(ring: StreamRing) -> int:
        """The id stored in slot 0 on the ring's pass that holds the oldest valid id."""
        oldest = ring.first_valid_step() * ring.batch_size
        return oldest - oldest % ring.capacity

    # -- versions -------------------------------------------------------------------------------
    def set_policy_version(self, version: int) -> None:
        """The learner's policy version: live starts older than ``version - max_staleness`` go."""
        self.policy_version = int(version)
        if self.rules.max_staleness is not None:
            live = self.live.ids()
            stale = live[self.versions[live % self.ring.capacity] < self._oldest_version()]
            self.live.remove(stale)
            self._left(stale)

    def _oldest_version(self) -> int:
        return self.policy_version - self.rules.max_staleness  # type: ignore[operator]

    def num_eligible(self) -> int:
        """Stored starts not consumed and not stale (whatever a sample's shape)."""
        return self.live.size

    # -- the rest of the sampler protocol ---------------------------------------------------------
    def mass(self, ring: StreamRing, num_steps: int | None) -> tuple[float, float]:
        live = self.live.ids()
        return float(np.count_nonzero(self._fits(ring, live, num_steps))), 1.0

    def added(self, ring: StreamRing, arrays: Any, priorities: Any = None) -> None:
        self._base_added(ring, arrays, priorities)
        batch = ring.batch_size
        ids = (ring.steps - 1) * batch + np.arange(batch, dtype=np.int64)
        self.live.remove(ids - ring.capacity, overwritten=True)  # the overwritten step's ids
        slots = ids % ring.capacity
        self.times[slots] = 0
        fresh = ids
        if self.rules.version is not None:
            self.versions[slots] = np.asarray(arrays[self.rules.version], np.int64)
            young = self.versions[slots] >= self._oldest_version()
            fresh = ids[young]
            if not young.all():
                self._left(ids[~young])
        self.live.add(fresh)

    def _base_added(self, ring: StreamRing, arrays: Any, priorities: Any) -> None:
        self.base.added(ring, arrays)

    def cleared(self) -> None:
        self.base.cleared()
        self.live.clear()
        self.floor = 0
        self._clear_epoch()

    def reopened(self, ring: StreamRing, fields: Any) -> None:
        self.base.reopened(ring, fields)
        self.times.fill(0)
        self._clear_epoch()
        self.loaded(ring, fields)

    def loaded(self, ring: StreamRing, fields: Any) -> None:
        """After a load or a reopen: the versions from the stored items' version field, and the
        live starts (stored, not consumed, not stale), in the checkpoint's order when it has one
        (so that draws continue as the saved buffer's would)."""
        ids = ring.stream_ids().T.ravel()
        slots = ids % ring.capacity
        keep = np.ones(ids.shape[0], bool)
        if self.rules.version is not None:
            self.versions[slots] = np.asarray(fields[self.rules.version])[slots]
            keep &= self.versions[slots] >= self._oldest_version()
        if self.rules.max_times_sampled is not None:
            keep &= self.times[slots] < self.rules.max_times_sampled
        self.live.clear()
        self.floor = 0
        self.live.add(ids[keep])
        saved, self._saved_live = self._saved_live, None
        if saved is not None:  # the saved order of the ids still live, then the others by id
            saved = saved[self.live.contains(saved)]
            rest = ids[keep][~np.isin(ids[keep], saved)]
            self.live.clear()
            self.live.add(np.concatenate([saved, rest]))
        if not keep.all():
            self._left(ids[~keep])

    def state(self, ring: StreamRing) -> dict:
        ids = ring.stream_ids().T.ravel()
        rules = {
            "times": self.times[ids % ring.capacity].astype(np.int64),
            "policy_version": self.policy_version,
            "epoch": self.epoch,
            "order": self.order.copy(),
            "cursor": self.cursor,
            "live": self.live.ids().copy(),
        }
        return {**self.base.state(ring), "sample_rules": rules}

    def check_state(self, ring: StreamRing, state: dict, count: int) -> tuple:
        """The base's checked state and the saved rules (None: a state saved without rules,
        whose items start uncounted); CheckpointError naming the key when malformed. ``live``
        (the order of the live ids) is optional: checkpoints saved before it load in id order."""
        base = self.base.check_state(ring, state, count)
        rules = state.get("sample_rules")
        if rules is None:
            return base, None
        keys = {"times", "policy_version", "epoch", "order", "cursor"}
        if not isinstance(rules, dict) or set(rules) - {"live"} != keys:
            got = sorted(map(str, rules)) if isinstance(rules, dict) else type(rules).__name__
            raise CheckpointError(f"state['sample_rules']: expected the keys {sorted(keys | {'live'})}, got {got}")
        for key in ("times", "order", "live"):
            array = rules.get(key, np.zeros(0, np.int64))
            size = (count,) if key == "times" else None
            if (
                not isinstance(array, np.ndarray)
                or array.ndim != 1
                or array.dtype.kind not in "iu"
                or (size is not None and array.shape != size)
            ):
                got = f"{array.shape} {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
                raise CheckpointError(
                    f"state['sample_rules'][{key!r}]: expected a 1-d integer array of {size or 'ids'}, got {got}"
                )
        for key in ("policy_version", "epoch", "cursor"):
            if isinstance(rules[key], bool) or not isinstance(rules[key], (int, np.integer)):
                raise CheckpointError(f"state['sample_rules'][{key!r}]: expected an int, got {rules[key]!r:.60}")
        limit = self.rules.max_times_sampled
        if rules["times"].size and (rules["times"].min() < 0 or (limit is not None and rules["times"].max() > limit)):
            raise CheckpointError(f"state['sample_rules']['times']: expected counts in [0, {limit}], got out of range")
        if not 0 <= rules["cursor"] <= rules["order"].shape[0] or rules["epoch"] < 0:
            raise CheckpointError("state['sample_rules']: expected 0 <= cursor <= len(order) and epoch >= 0")
        steps = state["steps"]
        for key in ("order", "live"):
            ids = rules.get(key, np.zeros(0, np.int64))
            if ids.size and (ids.min() < 0 or ids.max() >= steps * ring.batch_size):
                raise CheckpointError(
                    f"state['sample_rules'][{key!r}]: expected ids of added items (0 <= id < {steps * ring.batch_size})"
                )
            if key == "live" and np.unique(ids).shape[0] != ids.shape[0]:
                raise CheckpointError("state['sample_rules']['live']: expected distinct ids, got repeats")
        return base, rules

    def load_state(self, ring: StreamRing, checked: tuple) -> None:
        """Restore the counts and the epoch; ``loaded`` then reads the versions and rebuilds
        the live starts (the buffer calls it once its storage holds the items)."""
        base, rules = checked
        self.base.load_state(ring, base)
        self.times.fill(0)
        self._clear_epoch()
        self._saved_live = None
        if rules is not None:
            self.times[ring.stream_ids().T.ravel() % ring.capacity] = rules["times"]
            self.policy_version = int(rules["policy_version"])
            self.epoch, self.order = int(rules["epoch"]), rules["order"].astype(np.int64)
            self.cursor = int(rules["cursor"])
            if "live" in rules:
                self._saved_live = rules["live"].astype(np.int64)
