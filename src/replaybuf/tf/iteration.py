"""Eager iteration of a dataset without tf.data's per-element rebuild of the element in Python.

An eager ``next()`` on a tf.data iterator runs one op (``IteratorGetNext``) and then, in
Python, re-checks every component's shape against the element spec (``set_shape``) and
re-packs the nest with ``tf.nest``. For a buffer's element, a dict of five leaves and a
``BufferInfo``, that Python costs about twice what the op does, and more than the draw
itself (docs/tensorflow.md). The op already returns components of the spec's types and
shapes (tf.data checks them), so ``FastIterationDataset`` hands them out packed by a treespec
computed once per dataset.

Everything else is tf.data's own: the wrapper shares its input's dataset graph (the same
variant tensor), so options, further transformations, ``tf.function`` and checkpointing
an iterator behave as on the input. Only eager ``iter()`` changes, and only where every
component is a dense tensor and optree reads the element structure as tf.nest does;
otherwise, or on a TensorFlow without these internals, datasets are returned unwrapped.

``exact_iteration`` adds draw-ahead to an exact random dataset (every element reflects every
add made before its ``next()``): its eager iterator takes groups of elements drawn at once
from a second dataset and hands them out while the buffer's write version is unchanged,
dropping the rest when it changes. How many it draws follows the reads: after ``r`` reads
without an add it draws up to ``r`` (a power of two, at most ``max_group``), and never more
than the reads left before the next add if the last add came after that many. While every
read follows an add (the DQN loop) it stops asking for the version for ``SKIPPED_CHECKS``
reads at a time and draws each of them fresh: the check, an op run right after the add's
``tf.function`` call, was a measurable share of the round (docs/tensorflow.md). Iterated any
other way (in a graph, after a transformation) the dataset is the exact one itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree
import tensorflow as tf

try:  # TensorFlow internals, present from 2.15 through the newest release tested
    from tensorflow.python.data.ops.dataset_ops import UnaryUnchangedStructureDataset
    from tensorflow.python.data.ops.iterator_ops import OwnedIterator
    from tensorflow.python.eager import context
    from tensorflow.python.ops.gen_dataset_ops import iterator_get_next
except ImportError:  # a TensorFlow that moved them: plain iteration
    UnaryUnchangedStructureDataset = None

__all__ = ["SKIPPED_CHECKS", "exact_iteration", "fast_iteration"]

# reads drawn fresh without checking the version, once two reads in a row each followed an add
SKIPPED_CHECKS = 6

# what _FastIterator reads of OwnedIterator's state; an iterator lacking any iterates as usual
_ITERATOR_STATE = ("_iterator_resource", "_flat_output_types", "_flat_output_shapes")


def fast_iteration(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with a faster eager ``iter()`` where that is safe, else ``dataset``."""
    packer = None if UnaryUnchangedStructureDataset is None else _packer(dataset.element_spec)
    if packer is None:
        return dataset
    return FastIterationDataset(dataset, packer)


def exact_iteration(
    dataset: tf.data.Dataset,
    groups: Callable[[int], tf.data.Dataset],
    version: Callable[[], Any],
    max_group: int,
) -> tf.data.Dataset:
    """``dataset`` (exact: each element drawn when asked for) whose eager iterator draws up to
    ``max_group`` elements at once from ``groups(k)`` (each element a tuple of ``k`` of
    ``dataset``'s) while ``version()`` stays the same; else ``fast_iteration(dataset)``."""
    packer = None if UnaryUnchangedStructureDataset is None else _packer(dataset.element_spec)
    if packer is None or max_group == 1:
        return fast_iteration(dataset)
    return ExactIterationDataset(dataset, packer, groups, version, max_group)


def _packer(element_spec: Any) -> tuple[list[int], optree.PyTreeSpec] | None:
    """``(order, treespec)`` such that ``treespec.unflatten([flat[i] for i in order])`` is
    ``tf.nest.pack_sequence_as(element_spec, flat)``; None where they could differ."""
    leaves = tf.nest.flatten(element_spec)
    if not all(type(leaf) is tf.TensorSpec for leaf in leaves):
        return None  # sparse, ragged or other composite components: tf.data packs them
    positions = tf.nest.pack_sequence_as(element_spec, list(range(len(leaves))))
    order, treespec = optree.tree_flatten(positions)
    if len(order) != len(leaves) or not all(type(position) is int for position in order):
        return None  # a node tf.nest opens that optree keeps whole
    return order, treespec


if UnaryUnchangedStructureDataset is not None:

    class FastIterationDataset(UnaryUnchangedStructureDataset):
        """The input dataset, same graph and elements; eager iterators skip the rebuild."""

        def __init__(self, dataset: tf.data.Dataset, packer: tuple[list[int], optree.PyTreeSpec]) -> None:
            super().__init__(dataset, dataset._variant_tensor)
            self.packer = packer

        def __iter__(self) -> OwnedIterator:
            if context.executing_eagerly():
                return _FastIterator(self)
            return super().__iter__()

        def prefetch(self, buffer_size: Any, name: str | None = None) -> tf.data.Dataset:
            """Keeps the fast iteration (TF-Agents' tutorials end their pipelines here)."""
            return fast_iteration(super().prefetch(buffer_size, name=name))

    class _FastIterator(OwnedIterator):
        """An ``OwnedIterator`` whose eager ``next()`` packs the op's outputs directly."""

        def __init__(self, dataset: FastIterationDataset) -> None:
            super().__init__(dataset)
            self._fast = all(hasattr(self, name) for name in _ITERATOR_STATE)
            if self._fast:
                self._order, self._treespec = dataset.packer
                # plain lists convert to the op's attribute faster than TensorShapes
                self._shapes = [s.as_list() if s.rank is not None else s for s in self._flat_output_shapes]

        def _next_internal(self) -> Any:
            if not self._fast or not context.executing_eagerly():
                return super()._next_internal()
            if context.is_async():  # end of sequence must come back as this op's error
                with context.execution_mode(context.SYNC):
                    return self._next_internal()
            flat = iterator_get_next(
                self._iterator_resource, output_types=self._flat_output_types, output_shapes=self._shapes
            )
            return self._treespec.unflatten([flat[i] for i in self._order])

    class ExactIterationDataset(FastIterationDataset):
        """An exact random dataset whose eager iterators draw ahead while nothing is added."""

        def __init__(
            self,
            dataset: tf.data.Dataset,
            packer: tuple[list[int], optree.PyTreeSpec],
            groups: Callable[[int], tf.data.Dataset],
            version: Callable[[], Any],
            max_group: int,
        ) -> None:
            super().__init__(dataset, packer)
            self.groups, self.version, self.max_group = groups, version, max_group

        def __iter__(self) -> OwnedIterator:
            if context.executing_eagerly():
                return _ExactIterator(self)
            return super().__iter__()

    class _ExactIterator(_FastIterator):
        """Hands out elements drawn ahead in groups while the write version is unchanged."""

        def __init__(self, dataset: ExactIterationDataset) -> None:
            super().__init__(dataset)
            self._groups, self._version, self._max_group = dataset.groups, dataset.version, dataset.max_group
            self._group_iterators: dict[int, Any] = {}
            self._pending: list[Any] = []  # drawn at version self._seen, next one last
            self._seen: Any = None
            self._run = 0  # reads since the version last changed, this one included
            self._last_run: int | None = None  # reads between the last two changes
            self._unchecked = 0  # reads left to draw fresh without checking the version

        def _next_internal(self) -> Any:
            if not self._fast or not context.executing_eagerly():
                return super()._next_internal()
            if self._unchecked:
                self._unchecked -= 1
                if not self._unchecked:  # adds may or may not have come meanwhile: start over
                    self._run, self._last_run = 0, None
                return super()._next_internal()
            version = self._version()
            if version != self._seen:
                if self._run:
                    self._last_run = self._run
                self._seen, self._run = version, 0
                self._pending.clear()
            self._run += 1
            if self._pending:
                return self._pending.pop()
            if self._run == 1 and self._last_run == 1:  # two reads in a row each followed an add
                self._unchecked = SKIPPED_CHECKS
            size = self._group_size()
            if size == 1:
                return super()._next_internal()
            iterator = self._group_iterators.get(size)
            if iterator is None:
                iterator = self._group_iterators[size] = iter(fast_iteration(self._groups(size)))
            group = next(iterator)
            self._pending = list(group[:0:-1])
            return group[0]

        def _group_size(self) -> int:
            """A power of two: at most the reads so far without an add, ``max_group``, and the
            reads left if the last stretch between adds was as long."""
            limit = min(self._run, self._max_group)
            if self._last_run is not None and self._run <= self._last_run:
                limit = min(limit, self._last_run - self._run + 1)
            size = 1
            while size * 2 <= limit:
                size *= 2
            return size
