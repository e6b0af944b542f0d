"""``TFUniformReplayBuffer``: TF-Agents' segmented uniform buffer on tf.Variables.

Storage is one variable per leaf of the data_spec, ``[capacity] + leaf.shape``. Step ``t`` of
stream ``s`` has id ``t * batch_size + s`` and lives in slot ``id % capacity`` (the NumPy
buffer's convention), so one add writes one contiguous run of ``batch_size`` rows per leaf
and one sample is one draw of ``sample_batch_size`` integers and one gather per leaf.

Nothing takes a lock (a ``tf.CriticalSection`` costs more than the rest of a batch-1 add).
An add reserves its step with one atomic fetch-and-increment of the step counter
(``ResourceCountUpTo``), so concurrent adds get distinct steps, writes its rows, and then
marks its step row complete (``marks[step % max_length] = step``). Readers check their
reads seqlock-style: every step they read was marked complete before they gathered, and
no add had reserved a step that overwrites it by the time they finished (see
``replaybuf.tf.slots``). An add is reserved only after its batch passed its checks, so a
rejected add changes nothing. Eager calls run concrete functions traced once, so an eager
call costs one function call, not one op dispatch per leaf nor ``tf.function``'s input
binding.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.ops.gen_resource_variable_ops import read_variable_op

from replaybuf.buffer import BufferInfo, ReplayBuffer, check_positive, unstack_time
from replaybuf.dataset import check_pass_arguments, check_sample_arguments
from replaybuf.errors import EmptyBufferError
from replaybuf.nest import FlatSpec
from replaybuf.refusals import empty, window_too_long
from replaybuf.ring import Geometry, StreamRing
from replaybuf.tf import datasets
from replaybuf.tf.convert import convert_batch
from replaybuf.tf.iteration import exact_iteration, fast_iteration
from replaybuf.tf.slots import SlotStore, read_variable
from replaybuf.tf.state import TFCheckpoints

__all__ = ["TFEmptyBufferError", "TFUniformReplayBuffer"]

EMPTY_MESSAGE = str(empty("TFUniformReplayBuffer"))


class TFEmptyBufferError(EmptyBufferError, tf.errors.InvalidArgumentError):
    """An eager sample found nothing to draw: replaybuf's ``EmptyBufferError`` (a
    ValueError) that is also ``tf.errors.InvalidArgumentError``, what TF-Agents raises."""

    def __init__(self, message: str) -> None:
        EmptyBufferError.__init__(self, message)
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class _Compiled:
    """Per-buffer cache of eager entry points and write bookkeeping, kept out of the
    checkpoint's object graph (plain attributes: no tracking on the add path)."""

    def __init__(self) -> None:
        self.functions: dict[Any, Any] = {}
        self.writes = 0  # eager adds and clears so far
        self.graph_adds = False  # an add was traced into a graph: read the step counter
        self.graph_clears = False  # a clear was traced into a graph: read the clear counter


def _generator(seed: int | None) -> tf.random.Generator:
    """The sampling generator: from ``seed``; else, as TensorFlow's random ops do, from the
    global seed (``tf.random.set_seed``) and an operation seed it derives; else random."""
    if seed is not None:
        return tf.random.Generator.from_seed(seed)
    global_seed, op_seed = tf.compat.v1.get_seed(None)
    if global_seed is None:
        return tf.random.Generator.from_non_deterministic_state()
    return tf.random.Generator.from_seed(int(global_seed) * 2**31 + int(op_seed))


class TFUniformReplayBuffer(TFCheckpoints, tf.Module, ReplayBuffer):
    """``batch_size`` streams of ``max_length`` items in tf.Variables, sampled uniformly.

    A drop-in for TF-Agents' ``TFUniformReplayBuffer``: ``add_batch`` takes one step of
    every stream (leading dimension ``batch_size``; NumPy arrays, Python numbers or
    tensors), ``get_next`` and ``as_dataset`` sample windows of ``num_steps`` consecutive
    items of one stream that never pass the write head, and the buffer is a ``tf.Module``:
    ``tf.train.Checkpoint(rb=buffer)`` saves and restores its contents and counters, and
    ``save(path)`` / ``load(path)`` (``state_dict`` / ``load_state_dict``) move them to and
    from every other backend (replaybuf.tf.state, docs/persistence.md).

    Args:
        data_spec: a nest (tuple, namedtuple, dict) of tf.TensorSpec, ArraySpec or
            Gymnasium spaces describing one item.
        batch_size: the number of parallel streams (one per environment copy).
        max_length: items kept per stream; capacity is batch_size * max_length.
        scope: the name of the module and of its variables' name scope.
        device: where the variables live and the ops run (TF-Agents' default ``cpu:*``).
        dataset_drop_remainder: in a deterministic pass, drop windows and stream groups
            shorter than asked for.
        dataset_window_shift: in a deterministic pass, the step between window starts
            (default num_steps: windows do not overlap).
        stateful_dataset: accepted for TF-Agents compatibility and reported by the
            property of that name; datasets here always read the live variables.
        seed: seed of the sampling generator (a ``tf.random.Generator``, checkpointed
            with the buffer). None follows TensorFlow's seeding: after
            ``tf.random.set_seed(s)`` buffers built in the same order draw the same ids;
            without a global seed the draws are nondeterministic.
        dataset_draw_ahead: the most elements one draw of a random-mode dataset makes
            (one call, one gather per leaf). Iterated eagerly, a dataset draws ahead as
            far as the reads since the last add suggest and drops what it drew ahead
            when an add or clear happens, so every element still reflects every add made
            before its ``next()``. Not used with ``num_parallel_calls`` (one element per
            call there, so no more than the calls in flight are drawn ahead of the adds).

    Raises:
        ArgumentError: batch_size, max_length, dataset_window_shift or dataset_draw_ahead
            is not a positive int.
        SpecError: data_spec is not a nest of specs (an unknown dimension, a leaf that is
            no spec).
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int = 1000,
        *,
        scope: str = "TFUniformReplayBuffer",
        device: str = "cpu:*",
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        stateful_dataset: bool = False,
        seed: int | None = None,
        dataset_draw_ahead: int = 16,
    ):
        check_positive("batch_size", batch_size, allow_none=False)
        check_positive("max_length", max_length, allow_none=False)
        check_positive("dataset_window_shift", dataset_window_shift)
        check_positive("dataset_draw_ahead", dataset_draw_ahead, allow_none=False)
        super().__init__(name=scope)
        self._flat = FlatSpec(data_spec)
        self._element_unflatten = datasets.element_unflatten(self._flat.data_spec)
        self._batch_size = int(batch_size)
        self._max_length = int(max_length)
        self._geometry = Geometry(self._batch_size, self._max_length, self._batch_size * self._max_length)
        # TF-Agents' member: the capacity as an int64 tensor
        self._capacity = tf.constant(self._batch_size * self._max_length, tf.int64)
        self._device = device
        self._drop_remainder = bool(dataset_drop_remainder)
        self._window_shift = dataset_window_shift
        self._stateful_dataset = bool(stateful_dataset)
        self._draw_ahead = int(dataset_draw_ahead)
        with tf.device(device), self.name_scope:
            self._store = SlotStore(self._flat.leaves, self._batch_size, self._max_length, "store")
            self._rng = _generator(seed)
        self._compiled = _Compiled()

    # -- properties ---------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return self._device

    @property
    def stateful_dataset(self) -> bool:
        return self._stateful_dataset

    @property
    def dataset_draw_ahead(self) -> int:
        """The most elements one draw of a random-mode dataset makes (see the constructor)."""
        return self._draw_ahead

    # -- writing ----------------------------------------------------------------------------
    @tf.autograph.experimental.do_not_convert
    def add_batch(self, items: Any) -> Any:
        """Add one step to every stream: each leaf shaped ``[batch_size] + spec.shape``.

        Works eagerly and inside ``tf.function`` (returns the written step's index as a
        tensor there, so a driver can depend on it).

        Raises:
            SpecMismatchError: the structure, a static shape or a dtype does not match the
                data_spec (checked before anything is written; eagerly, values that cannot
                be cast safely too).
        """
        leaves = convert_batch(self._flat, items, self._batch_size)
        if tf.inside_function():
            self._compiled.graph_adds = True
            return self._write(leaves)
        write = self._compiled.functions.get("add")
        if write is None:
            signature = [tf.TensorSpec((self._batch_size,) + s.shape, s.dtype) for s in self._flat.leaves]
            write = tf.function(self._write).get_concrete_function(signature)
            self._compiled.functions["add"] = write
        write(leaves)
        self._compiled.writes += 1
        return None

    def _add_batch(self, items: Any) -> Any:
        """TF-Agents' name of ``add_batch``."""
        return self.add_batch(items)

    def _write(self, leaves: list[Any]) -> tf.Tensor:
        with tf.device(self._device), tf.name_scope("add_batch"):
            return self._store.write(leaves)

    # -- reading ----------------------------------------------------------------------------
    @tf.autograph.experimental.do_not_convert
    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> tuple[Any, BufferInfo]:
        """Sample uniformly: a step over the valid window starts, and a stream.

        Shapes as in ``replaybuf.buffer``; ids int64, probabilities float32, both tensors.

        Raises:
            TFEmptyBufferError: (eagerly) nothing is stored, or no stream holds ``num_steps``
                items: an ``EmptyBufferError`` that is also a ``tf.errors.InvalidArgumentError``
                (TF-Agents' error). Inside a graph the same conditions raise
                ``tf.errors.InvalidArgumentError`` when the graph runs.
            ArgumentError: sample_batch_size or num_steps is not a positive int.
        """
        check_sample_arguments(sample_batch_size, num_steps)
        if tf.inside_function():
            leaves, ids, probabilities = self._sample(sample_batch_size, num_steps)
        else:
            leaves, ids, probabilities = self._eager("sample", sample_batch_size, num_steps)
        if not time_stacked and num_steps is not None:
            items = unstack_time(self._flat.unflatten, leaves, num_steps, batched=sample_batch_size is not None)
        else:
            items = self._flat.unflatten(leaves)
        return items, BufferInfo(ids, probabilities)

    def _get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> tuple[Any, BufferInfo]:
        """TF-Agents' name of ``get_next``."""
        return self.get_next(sample_batch_size, num_steps, time_stacked)

    def _attempt(
        self, sample_batch_size: int | None, num_steps: int | None, group: int | None = None
    ) -> tuple[list, tf.Tensor, tf.Tensor, tf.Tensor]:
        """One uniform draw and its read: ``(leaves, ids, probabilities, intact)``.

        ``intact`` says the read is whole: every step read was complete before it, no add
        had reserved a step overwriting one of them by its end, and no clear ran meanwhile.
        Drawing again until it holds keeps the draw uniform. With ``group``, ``group``
        independent draws at once: every result but ``intact`` (one flag for all of them)
        gains a leading ``[group]`` axis.
        """
        size = num_steps or 1
        shape = () if sample_batch_size is None else (sample_batch_size,)
        drawn = shape if group is None else (group,) + shape
        batch = self._batch_size
        too_long = str(window_too_long(size))
        store = self._store
        clears, steps = read_variable(store.clears), read_variable(store.steps)
        low = tf.maximum(steps - self._max_length, 0)
        high = steps - size + 1
        # one Assert for both conditions; its message is the empty-buffer one when nothing
        # is stored
        reason = tf.where(steps > 0, too_long, EMPTY_MESSAGE)
        with tf.control_dependencies([tf.debugging.Assert(high > low, [reason])]):
            # the generator's own op: Generator.uniform wraps it in some twenty more
            first = tf.raw_ops.StatefulUniformInt(
                resource=self._rng.state.handle,
                algorithm=np.int64(self._rng.algorithm),
                shape=np.array(drawn, np.int32),
                minval=low * batch,
                maxval=high * batch,
            )
        if num_steps is not None:
            ids = first[..., None] + np.arange(num_steps, dtype=np.int64) * batch
        else:
            ids = first
        with tf.control_dependencies([clears]):
            leaves, steps_read, marks = store.read(ids)
        with tf.control_dependencies(leaves):
            head, clears_after = read_variable(store.steps), read_variable(store.clears)
        intact = tf.logical_and(tf.reduce_all(store.intact(steps_read, marks, head)), tf.equal(clears, clears_after))
        probability = 1.0 / tf.cast((high - low) * batch, tf.float32)
        return leaves, ids, tf.fill(drawn, probability), intact

    def _sample(self, sample_batch_size: int | None, num_steps: int | None) -> tuple[list, tf.Tensor, tf.Tensor]:
        def attempt() -> tuple:
            leaves, ids, probabilities, intact = self._attempt(sample_batch_size, num_steps)
            return intact, leaves, ids, probabilities

        with tf.device(self._device), tf.name_scope("get_next"):
            # no lock: a read that an add (or clear) may have torn is drawn again
            _, leaves, ids, probabilities = tf.while_loop(
                lambda intact, *_: tf.logical_not(intact), lambda *_: attempt(), attempt()
            )
            return leaves, ids, probabilities

    def _read_ids(self, ids: tf.Tensor) -> list[tf.Tensor]:
        """The leaves stored under ``ids`` (any shape) now, read again while an add tears them."""
        store = self._store

        def attempt() -> tuple:
            leaves, steps, marks = store.read(ids)
            with tf.control_dependencies(leaves):
                head = read_variable(store.steps)
            return tf.reduce_all(store.untorn(steps, marks, head)), leaves

        with tf.device(self._device), tf.name_scope("read"):
            _, leaves = tf.while_loop(lambda untorn, _: tf.logical_not(untorn), lambda *_: attempt(), attempt())
            return leaves

    @tf.autograph.experimental.do_not_convert
    def gather_all(self) -> Any:
        """Every stored item, ``[batch_size, n] + D``, oldest first (valid items only)."""
        if tf.inside_function():
            leaves = self._gather_leaves()
        else:
            leaves = self._eager("gather_all")
        return self._flat.unflatten(leaves)

    def _gather_all(self) -> Any:
        """TF-Agents' name of ``gather_all``."""
        return self.gather_all()

    def _gather_leaves(self) -> list[tf.Tensor]:
        with tf.device(self._device), tf.name_scope("gather_all"):
            return self._store.gather_all()

    @tf.autograph.experimental.do_not_convert
    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """A ``tf.data.Dataset`` of ``(items, BufferInfo(ids, probabilities))``.

        Random mode (default) is endless and exact: without ``num_parallel_calls`` every
        element reflects every add (and clear) made before its ``next()``. Iterated
        eagerly it draws up to ``dataset_draw_ahead`` elements at once while reads come
        without adds between them, and drops what it drew ahead as soon as an add or a
        clear happens; in a graph, or through a further transformation, each element is
        drawn when asked for. With ``num_parallel_calls`` (an int or
        ``tf.data.AUTOTUNE``) that many elements are drawn ahead, one per call, in parallel
        (as in TF-Agents, an element drawn ahead does not see adds made after its draw; nor
        does one held by a ``.prefetch(n)`` you add).
        With ``single_deterministic_pass=True`` every stored item is yielded once, stream
        by stream (``sample_batch_size`` streams at a time) in
        time order, cut into windows of ``num_steps`` (see ``dataset_window_shift`` and
        ``dataset_drop_remainder``); the ids are fixed when an iterator reads its first
        element, and ``probabilities`` is ``()``. Element shapes are static where the
        arguments fix them; lists of the data_spec come as tuples (tf.data reads a list
        as one tensor). Sampling an empty buffer raises
        ``tf.errors.InvalidArgumentError`` from the iterator.

        Raises:
            ArgumentError: a non-positive argument; in a deterministic pass,
                sample_batch_size > batch_size or num_steps > max_length (all data would
                be dropped, or no window fits).
        """
        check_sample_arguments(sample_batch_size, num_steps)
        if num_parallel_calls != tf.data.AUTOTUNE:
            check_positive("num_parallel_calls", num_parallel_calls)
        if single_deterministic_pass:
            check_pass_arguments(
                self._batch_size,
                self._max_length,
                sample_batch_size,
                num_steps,
                self._drop_remainder,
            )
            plan = datasets.PassPlan(
                self._batch_size,
                self._max_length,
                sample_batch_size,
                num_steps,
                self._window_shift,
                self._drop_remainder,
            )
            dataset = datasets.deterministic_pass(
                plan,
                functools.partial(read_variable, self._store.steps),
                self._read_ids,
                self._element_unflatten,
                EMPTY_MESSAGE,
            )
            return fast_iteration(dataset)

        def attempt(group: int | None) -> tuple:
            return self._attempt(sample_batch_size, num_steps, group)

        if num_parallel_calls is not None:  # one element per call, as TF-Agents: few drawn ahead
            return fast_iteration(datasets.random_dataset(attempt, self._element_unflatten, num_parallel_calls))
        return exact_iteration(
            datasets.random_dataset(attempt, self._element_unflatten, None),
            functools.partial(datasets.group_dataset, attempt, self._element_unflatten),
            self._write_version,
            self._draw_ahead,
        )

    def _as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """TF-Agents' name of ``as_dataset``."""
        return self.as_dataset(sample_batch_size, num_steps, num_parallel_calls, single_deterministic_pass)

    def _write_version(self) -> Any:
        """Changes whenever an add or a clear has happened (what exact iteration checks).

        Eager adds and clears count in Python (free); once an add or a clear has been traced
        into a graph, the step and clear counters are read too (one op each).
        """
        compiled = self._compiled
        if not (compiled.graph_adds or compiled.graph_clears):
            return compiled.writes
        store = self._store
        steps = int(read_variable_op(store.steps.handle, tf.int64)) if compiled.graph_adds else None
        clears = int(read_variable_op(store.clears.handle, tf.int64)) if compiled.graph_clears else None
        return compiled.writes, steps, clears

    # -- housekeeping ---------------------------------------------------------------------------
    @tf.autograph.experimental.do_not_convert
    def clear(self, clear_all_variables: bool = False) -> Any:
        """Forget every item (the counter goes back to 0); with ``clear_all_variables``
        also zero the storage variables, so no old bytes stay in memory or checkpoints."""
        if tf.inside_function():
            return self._clear(clear_all_variables)
        self._eager("clear", bool(clear_all_variables))
        self._compiled.writes += 1
        return None

    def _clear(self, clear_all_variables: bool = False) -> tf.Tensor:
        """TF-Agents' member: ``clear`` that returns its op's result (0) eagerly too."""
        if tf.inside_function():
            self._compiled.graph_clears = True
            return self._clear_ops(clear_all_variables)
        result = self._clear_ops(clear_all_variables)
        self._compiled.writes += 1
        return result

    def _clear_ops(self, clear_all_variables: bool) -> tf.Tensor:
        with tf.device(self._device), tf.name_scope("clear"):
            with tf.control_dependencies(self._store.clear(clear_all_variables)):
                return tf.constant(0, tf.int64)

    @tf.autograph.experimental.do_not_convert
    def num_frames(self) -> tf.Tensor:
        """How many items are stored now: an int64 scalar tensor (as in TF-Agents)."""
        return tf.minimum(read_variable(self._store.steps), self._max_length) * self._batch_size

    def _num_frames(self) -> tf.Tensor:
        """TF-Agents' name of ``num_frames``."""
        return self.num_frames()

    def _get_last_id(self) -> tf.Tensor:
        """TF-Agents' member: the last step added (its id counts steps), -1 when empty."""
        return read_variable(self._store.steps) - 1

    # -- eager entry points -----------------------------------------------------------------------
    def _eager(self, what: str, *args: Any) -> Any:
        """Run ``what`` through a graph compiled once per argument set.

        Translates the graph's emptiness checks into TFEmptyBufferError.
        """
        key = (what,) + args
        function = self._compiled.functions.get(key)
        if function is None:
            body = {"sample": self._sample, "gather_all": self._gather_leaves, "clear": self._clear_ops}[what]
            function = tf.function(lambda: body(*args), autograph=False).get_concrete_function()
            self._compiled.functions[key] = function
        try:
            return function()
        except tf.errors.InvalidArgumentError as err:
            if what != "sample":
                raise
            ring = StreamRing(self._batch_size, self._max_length, type(self).__name__)
            ring.steps = int(self._store.steps.numpy())
            try:
                ring.window_starts(args[1] or 1)  # the ring's words for what is missing
            except EmptyBufferError as empty:
                raise TFEmptyBufferError(str(empty)) from None
            raise TFEmptyBufferError(err.message.split("\n")[0]) from None
