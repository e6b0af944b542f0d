"""``MixedReplayBuffer``: one sample drawn from several buffers in an exact, scheduled ratio.

A sampler over buffers, not a buffer: each source keeps its items, its own sampling rule
(uniform, prioritized, episode-exact windows, sequences) and its own checkpoints. A sample of
``N`` rows takes exactly ``n_k`` from source ``k`` (``replaybuf.samplers.mixture``: the
rounding and the schedules), each drawn by that source's ``get_next``, and joins them in the
first source's framework. Offline-to-online RL (RLPD) mixes a fixed dataset 50/50 with fresh
experience; docs/offline.md.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from replaybuf.buffer import SampleInfo, check_positive, unstack_time
from replaybuf.dataset import RandomDataset, check_sample_arguments
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError
from replaybuf.frameworks import framework_of
from replaybuf.nest import FlatSpec, to_numpy
from replaybuf.persistence.front import Checkpoints
from replaybuf.persistence.state import check_rng_state, require
from replaybuf.refusals import bad_priorities
from replaybuf.samplers.mixture import RowAllocator, Weights

__all__ = ["MixedReplayBuffer"]


class _Part(NamedTuple):
    """One source's rows of a sample: its index, row count, flat leaves and info (ids,
    probabilities under the mixture, the extras it returned)."""

    source: int
    count: int
    leaves: list
    info: dict


class MixedReplayBuffer(Checkpoints):
    """Samples of rows from ``sources`` in the ratio of ``weights``; see the module.

    Args:
        sources: a dict of name -> buffer (any backends, the same data_spec); samples come back
            in the first source's framework (NumPy arrays, or torch tensors on its device, ...).
        weights: a dict of name -> share (numbers >= 0, normalised), or a schedule: a callable of
            the number of rows drawn so far returning such a dict (``replaybuf.linear_schedule``).
        shuffle: False joins the rows in source order; True shuffles them (the mixer's generator).
        seed: seed of that generator.

    Raises:
        ArgumentError: sources not a non-empty dict of buffers; weights (or the schedule's
            weights at 0 rows drawn) with a negative, non-finite or unknown share, a source
            without one, or all shares 0; shuffle not a bool.
        SpecMismatchError: a source whose data_spec differs from the first source's (named).
    """

    def __init__(self, sources: Mapping[str, Any], weights: Weights, *, shuffle: bool = False, seed: int | None = None):
        if not isinstance(sources, Mapping) or not sources:
            raise ArgumentError(f"sources: expected a non-empty dict of name -> buffer, got {sources!r:.80}")
        for name, source in sources.items():
            if not isinstance(name, str) or not callable(getattr(source, "get_next", None)):
                raise ArgumentError(f"sources[{name!r}]: expected a replay buffer under a str name, got {source!r:.80}")
        if shuffle.__class__ is not bool:
            raise ArgumentError(f"shuffle: expected True or False, got {shuffle!r:.80}")
        self._sources = dict(sources)
        names = tuple(self._sources)
        self._flat = FlatSpec(self._sources[names[0]].data_spec)
        for name in names[1:]:
            _check_same_spec(self._flat, names[0], name, self._sources[name].data_spec)
        self._allocator = RowAllocator(names, weights)
        self._framework = framework_of(self._sources[names[0]])
        self._shuffle = shuffle
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()

    @property
    def sources(self) -> dict[str, Any]:
        """The source buffers by name, in order (add to these)."""
        return dict(self._sources)

    @property
    def source_names(self) -> tuple[str, ...]:
        """The sources' names in order: ``info.source`` indexes this."""
        return self._allocator.names

    @property
    def data_spec(self) -> Any:
        return self._flat.data_spec

    @property
    def rows_drawn(self) -> int:
        """Rows sampled so far: what a schedule is called with."""
        return self._allocator.drawn

    def shares(self) -> dict[str, float]:
        """Each source's share of the next sample (the schedule's, now), summing to 1."""
        with self._lock:
            return dict(zip(self.source_names, self._allocator.shares().tolist(), strict=True))

    def add_batch(self, items: Any) -> None:
        """Refused: a mixer only samples; add to a source (``mixer.sources[name].add_batch``).

        Raises:
            ArgumentError: always; nothing is written.
        """
        raise ArgumentError(
            f"add_batch: a MixedReplayBuffer only samples its sources {list(self.source_names)}; add to one of "
            f"them (mixer.sources[{self.source_names[-1]!r}].add_batch(items))"
        )

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        **sampling: Any,
    ) -> tuple[Any, SampleInfo]:
        """A sample of ``sample_batch_size`` rows (one unbatched row for None), each source
        giving its rows by its own ``get_next(n_k, num_steps, **sampling)``.

        Returns ``(items, SampleInfo)``: ``info.source`` (int64 ``[B]``, an index into
        ``source_names``), ``info.ids`` (each row's id in its source), ``info.probabilities``
        (``n_k / B`` times the source's own probability: the row's probability under the
        mixture) and each extra (``weights``, ``mask``, ...) that every source drawn from returned
        (None otherwise), all in the first source's framework. ``weights`` are each source's own
        importance weights.

        Raises:
            EmptyBufferError: a source owed rows holds nothing, or no window it may draw
                (named); nothing is counted.
            ArgumentError: sample_batch_size or num_steps not a positive int; a schedule's
                weights that are not valid shares (nothing drawn); a source's own refusal.
        """
        check_sample_arguments(sample_batch_size, num_steps)
        n = sample_batch_size or 1
        with self._lock:
            shares = self._allocator.shares()
            counts = self._allocator.counts(shares, n)
            owed = [(k, int(c)) for k, c in enumerate(counts) if c > 0]
            for k, _ in owed:
                name = self.source_names[k]
                if int(self._sources[name].num_frames()) == 0:
                    raise EmptyBufferError(
                        f"sources[{name!r}]: owed {counts[k]} of {n} rows (share {shares[k]:.4g}) but empty; "
                        "add to it first, or give it weight 0 until it holds items"
                    )
            parts = [self._draw(k, count, n, num_steps, sampling) for k, count in owed]
            self._allocator.commit(shares, counts)
            order = self._rng.permutation(n) if self._shuffle and len(parts) > 1 else None
        leaves, info = self._join(parts, order)
        if sample_batch_size is None:
            leaves = [leaf[0] for leaf in leaves]
            info = {key: None if value is None else value[0] for key, value in info.items()}
        if time_stacked or num_steps is None:
            items = self._flat.unflatten(leaves)
        else:
            items = unstack_time(self._flat.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        return items, SampleInfo(**info)

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
        **sampling: Any,
    ) -> Any:
        """An endless iterable of ``get_next(sample_batch_size, num_steps, **sampling)``;
        ``num_parallel_calls`` samples ahead in a thread (as the NumPy buffers' datasets). With a
        torch first source it is a ``torch.utils.data.IterableDataset``, as the torch buffers'.

        Raises:
            ArgumentError: single_deterministic_pass=True (a mixture has no single pass: make
                one per source); the arguments ``get_next`` refuses.
        """
        if single_deterministic_pass is not False:
            raise ArgumentError(
                "single_deterministic_pass: expected False (a mixture samples; for one pass over the items, "
                f"iterate each source's as_dataset(single_deterministic_pass=True)), got {single_deterministic_pass!r}"
            )
        check_sample_arguments(sample_batch_size, num_steps)
        check_positive("num_parallel_calls", num_parallel_calls)
        samples = RandomDataset(lambda: self.get_next(sample_batch_size, num_steps, **sampling), num_parallel_calls)
        return self._framework.dataset(samples)

    def num_frames(self) -> int:
        """Items stored in all sources together."""
        return sum(int(source.num_frames()) for source in self._sources.values())

    def update_priorities(self, ids: Any, priorities: Any, source: Any) -> None:
        """Set priorities of sampled rows, each in its source: ``ids``, ``source`` from a sample's
        info (``[B]`` or ``[B, T]`` ids, ``[B]`` sources), one priority per row.

        Raises:
            ArgumentError: shapes that disagree, a source index outside ``source_names``, or
                rows of a source without priorities (named, with those rows); nothing changes.
            PriorityError: a priority that is not finite and > 0 (nothing changes); ids that
                a source refuses (the sources before it in order are already updated).
        """
        ids, priorities, source = (np.asarray(to_numpy(x)) for x in (ids, priorities, source))
        rows = priorities.shape[0] if priorities.ndim == 1 else -1
        if source.shape != (rows,) or ids.shape[:1] != (rows,) or not np.issubdtype(source.dtype, np.integer):
            raise ArgumentError(
                f"update_priorities: expected priorities [B], ids [B] or [B, T] and integer source [B] of one B, "
                f"got priorities {priorities.shape}, ids {ids.shape}, source {source.shape} {source.dtype}"
            )
        outside = (source < 0) | (source >= len(self.source_names))
        if outside.any():
            raise ArgumentError(
                f"source: expected indices into {list(self.source_names)}, got {source[outside][:5].tolist()}"
            )
        bad = ~(np.isfinite(priorities) & (priorities > 0))
        if bad.any():
            raise bad_priorities(priorities, bad)
        routes = [(self.source_names[k], source == k) for k in np.unique(source).tolist()]
        for name, mask in routes:
            buffer = self._sources[name]
            if not callable(getattr(buffer, "update_priorities", None)):
                raise ArgumentError(
                    f"source: rows {np.flatnonzero(mask)[:5].tolist()} come from sources[{name!r}] "
                    f"({type(buffer).__name__}), which keeps no priorities; update only the rows of prioritized "
                    "sources (info.source selects them)"
                )
        for name, mask in routes:
            self._sources[name].update_priorities(ids[mask], priorities[mask])

    # -- checkpoints (the sources keep their own) --------------------------------------------
    def state_dict(self) -> dict:
        """The schedule's position and the shuffle generator (not the sources' items)."""
        with self._lock:
            return {"mixer": "MixedReplayBuffer", **self._allocator.state(), "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a ``state_dict()``: later samples allocate and shuffle as the saved mixer's.

        Raises:
            CheckpointError: a state of other sources, or malformed (named by key); nothing changes.
        """
        if require(state, "mixer", str) != "MixedReplayBuffer":
            raise CheckpointError(f"state['mixer']: expected 'MixedReplayBuffer', got {state['mixer']!r:.80}")
        names, k = list(self.source_names), len(self.source_names)
        if require(state, "sources", list) != names:
            raise CheckpointError(f"state['sources']: expected the sources {names}, got {state['sources']!r:.200}")
        drawn = require(state, "drawn", int)
        exact, given = require(state, "exact", np.ndarray), require(state, "given", np.ndarray)
        if exact.dtype != np.float64 or exact.shape != (k,) or not (np.isfinite(exact) & (exact >= 0)).all():
            raise CheckpointError(f"state['exact']: expected {k} finite float64 values >= 0, got {exact!r:.200}")
        if given.dtype != np.int64 or given.shape != (k,) or (given < 0).any() or int(given.sum()) != drawn:
            raise CheckpointError(
                f"state['given']: expected {k} int64 counts >= 0 summing to state['drawn'] ({drawn}), "
                f"got {given!r:.200}"
            )
        rng = check_rng_state(self._rng, state.get("rng"))
        with self._lock:
            self._allocator.load_state(drawn, exact, given)
            self._rng.bit_generator.state = rng

    # -- internals ---------------------------------------------------------------------------
    def _draw(self, k: int, count: int, n: int, num_steps: int | None, sampling: dict) -> _Part:
        """Source ``k``'s ``count`` rows of a sample of ``n``."""
        name = self.source_names[k]
        try:
            items, info = self._sources[name].get_next(count, num_steps, **sampling)
        except EmptyBufferError as err:
            raise EmptyBufferError(f"sources[{name!r}]: {err}") from err
        extras = {key: value for key, value in getattr(info, "__dict__", {}).items() if value is not None}
        mixed = {"ids": info.ids, "probabilities": info.probabilities * (count / n), **extras}
        return _Part(k, count, self._flat.flatten(items), mixed)

    def _join(self, parts: list[_Part], order: np.ndarray | None) -> tuple[list, dict]:
        """The parts' leaves and info joined (and reordered) in the first source's framework."""
        fw = self._framework

        def join(values: list) -> Any:
            joined = fw.concat([fw.convert(v) for v in values]) if len(values) > 1 else fw.convert(values[0])
            return joined if order is None else fw.take(joined, order)

        leaves = [join([part.leaves[i] for part in parts]) for i in range(len(self._flat.leaves))]
        infos = [part.info for part in parts]
        joined = {
            key: None if any(i.get(key) is None for i in infos) else join([i[key] for i in infos]) for key in infos[0]
        }
        joined["source"] = join([np.concatenate([np.full(part.count, part.source, np.int64) for part in parts])])
        return leaves, joined


def _check_same_spec(flat: FlatSpec, first: str, name: str, data_spec: Any) -> None:
    """SpecMismatchError naming source ``name`` and the field where its data_spec differs from ``first``'s."""
    other = FlatSpec(data_spec)
    if other.treespec != flat.treespec:
        raise SpecMismatchError(
            f"sources[{name!r}].data_spec: expected the structure of sources[{first!r}].data_spec "
            f"{flat.paths}, got {other.paths}"
        )
    for path, mine, theirs in zip(flat.paths, flat.leaves, other.leaves, strict=True):
        if (mine.shape, mine.dtype) != (theirs.shape, theirs.dtype):
            raise SpecMismatchError(
                f"sources[{name!r}].data_spec: {path}: expected {mine.shape} {mine.dtype} "
                f"(as sources[{first!r}]), got {theirs.shape} {theirs.dtype}"
            )
