"""``tf.data`` pipelines over a buffer: endless random samples, or one ordered pass.

Both are plain datasets built from a sampling or reading function, so they work eagerly
and inside ``tf.function``, and keep static element shapes where the arguments fix them.
The deterministic pass follows ``replaybuf.dataset.plan_deterministic_pass``: streams in
groups of ``sample_batch_size``, each group in time order, cut into windows of
``num_steps`` that start every ``window_shift`` steps; the plan is computed from the step
counter when an iterator reads its first element (TF-Agents' moment), as tensors.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optree
import tensorflow as tf

from replaybuf.buffer import BufferInfo

__all__ = [
    "PassPlan",
    "deterministic_pass",
    "element_unflatten",
    "group_dataset",
    "inline_map",
    "random_dataset",
    "when_asked",
]


Attempt = Callable[[int | None], tuple[list, tf.Tensor, tf.Tensor, tf.Tensor]]


def element_unflatten(data_spec: Any) -> Callable[[list], Any]:
    """Rebuilds a dataset element's items from their leaves: the data_spec's structure with
    every list a tuple (tf.data reads a list as one tensor, so its elements cannot hold one)."""

    def tuples(node: Any) -> Any:
        if isinstance(node, list):
            return tuple(tuples(child) for child in node)
        if isinstance(node, tuple):
            children = [tuples(child) for child in node]
            return type(node)(*children) if hasattr(node, "_fields") else tuple(children)
        if isinstance(node, dict):
            return type(node)((key, tuples(value)) for key, value in node.items())
        return node

    treespec = optree.tree_structure(tuples(data_spec))
    return functools.partial(optree.tree_unflatten, treespec)


def random_dataset(
    attempt: Attempt,
    unflatten: Callable,
    num_parallel_calls: int | None,
    draw_ahead: int = 1,
) -> tf.data.Dataset:
    """Endless uniform samples: ``attempt(group)`` (draws, their reads, and whether each
    read is intact) makes the elements, ``num_parallel_calls`` calls in flight (None: one,
    when asked).

    A torn read is dropped and the next draw takes its place, which keeps the draws
    uniform. With ``draw_ahead`` 1 each element costs one function call: the filter and
    the last map only pass tensors through, which tf.data does without calling a function,
    and there is no loop in the graph (``get_next``'s ``tf.while_loop`` costs more than the
    whole read). With ``draw_ahead`` K one call draws K elements at once (one gather per
    leaf for all of them) and ``unbatch`` hands them out one by one: the function call is
    paid once per K elements, and an element is at most K - 1 elements older than the
    element it is handed out after.
    """
    group = None if draw_ahead == 1 else draw_ahead

    def drawn(_: tf.Tensor) -> tuple[tuple[Any, BufferInfo], tf.Tensor]:
        leaves, ids, probabilities, intact = attempt(group)
        return (unflatten(leaves), BufferInfo(ids, probabilities)), intact

    dataset = _intact_draws(drawn, num_parallel_calls)
    if group is not None:
        dataset = dataset.unbatch()
    return dataset if num_parallel_calls is not None else when_asked(dataset)


def group_dataset(attempt: Attempt, unflatten: Callable, size: int) -> tf.data.Dataset:
    """Endless groups of ``size`` uniform samples drawn in one call (one draw of ``size``
    batches, one gather per leaf): each element is a tuple of ``size`` elements of
    ``random_dataset``, drawn when the group is asked for.

    The eager iteration of an exact dataset (``replaybuf.tf.iteration``) hands them out one
    by one while no add has happened since the draw.
    """

    def drawn(_: tf.Tensor) -> tuple[tuple, tf.Tensor]:
        leaves, ids, probabilities, intact = attempt(size)
        per_leaf = [tf.unstack(leaf, num=size) for leaf in leaves]
        ids, probabilities = tf.unstack(ids, num=size), tf.unstack(probabilities, num=size)
        group = tuple(
            (unflatten([leaf[k] for leaf in per_leaf]), BufferInfo(ids[k], probabilities[k])) for k in range(size)
        )
        return group, intact

    return when_asked(_intact_draws(drawn, None))


def _intact_draws(drawn: Callable, num_parallel_calls: int | None) -> tf.data.Dataset:
    """``drawn``'s elements whose read was intact (a torn draw is dropped whole)."""

    def is_intact(_: Any, intact: tf.Tensor) -> tf.Tensor:
        return intact

    def element(item: Any, _: tf.Tensor) -> Any:
        return item

    calls = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()
    if num_parallel_calls is None:
        draws = inline_map(calls, drawn)
    else:
        draws = calls.map(drawn, num_parallel_calls=num_parallel_calls, deterministic=False)
    return draws.filter(is_intact).map(element)


def inline_map(dataset: tf.data.Dataset, function: Callable) -> tf.data.Dataset:
    """``dataset.map(function)`` whose function runs its ops on the thread that asks for the
    element.

    ``Dataset.map`` runs them on TensorFlow's inter-op thread pool: for a draw of a few
    dozen small ops the hand-offs between threads cost more than the ops (a ``next()``
    drawing 256 windows takes about half the time inline: docs/tensorflow.md). The switch is
    ``MapDataset``'s ``use_inter_op_parallelism`` attribute, which ``Dataset.map`` does not
    expose; where TensorFlow's class for it is missing or changed, the map is tf.data's own.
    ``function`` must hold no loop: the single-threaded executor that runs it refuses
    lowered control flow.
    """
    if _INLINE_MAP is None:
        return dataset.map(function)
    return _INLINE_MAP(dataset, function, use_inter_op_parallelism=False, preserve_cardinality=True)


def _inline_map_class() -> type | None:
    try:
        from tensorflow.python.data.ops.map_op import _MapDataset
    except ImportError:
        return None
    parameters = inspect.signature(_MapDataset).parameters
    return _MapDataset if {"use_inter_op_parallelism", "preserve_cardinality"} <= parameters.keys() else None


_INLINE_MAP = _inline_map_class()


def when_asked(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Draw when asked, never ahead: tf.data would otherwise inject a prefetch (or turn a map
    into a parallel one) and serve elements drawn before the latest adds."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    return dataset.with_options(options)


@dataclass(frozen=True)
class PassPlan:
    """The static shape of a deterministic pass; ``windows``/``element_ids`` give its ids."""

    batch_size: int
    max_length: int
    sample_batch_size: int | None
    num_steps: int | None
    window_shift: int | None
    drop_remainder: bool

    @property
    def group(self) -> int:
        return self.sample_batch_size or 1

    @property
    def size(self) -> int:
        return self.num_steps or 1

    @property
    def shift(self) -> int:
        return self.window_shift or self.size

    @property
    def num_groups(self) -> int:
        if self.drop_remainder:
            return self.batch_size // self.group
        return -(-self.batch_size // self.group)

    def num_windows(self, first: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        span = steps - first
        if self.drop_remainder:
            return tf.where(span >= self.size, (span - self.size) // self.shift + 1, tf.zeros_like(span))
        return (span + self.shift - 1) // self.shift

    def element_ids(self, k: tf.Tensor, first: tf.Tensor, steps: tf.Tensor, windows: tf.Tensor) -> tf.Tensor:
        """The ids of element ``k`` of the pass.

        Element ``k`` is window ``k % windows`` of stream group ``k // windows``.
        """
        group, window = k // windows, k % windows
        start = first + window * self.shift
        step_ids = tf.range(start, tf.minimum(start + self.size, steps), dtype=tf.int64) * self.batch_size
        low = group * self.group
        streams = tf.range(low, tf.minimum(low + self.group, self.batch_size), dtype=tf.int64)
        ids = streams[:, None] + step_ids[None, :]
        whole_groups = self.drop_remainder or self.batch_size % self.group == 0
        ids.set_shape(
            [
                self.group if whole_groups else None,
                self.size if self.drop_remainder or self.size == 1 else None,
            ]
        )
        if self.num_steps is None:
            ids = ids[:, 0]
        if self.sample_batch_size is None:
            ids = ids[0]
        return ids


def deterministic_pass(
    plan: PassPlan,
    read_steps: Callable[[], tf.Tensor],
    read: Callable[[tf.Tensor], list],
    unflatten: Callable,
    empty_message: str,
) -> tf.data.Dataset:
    """One ordered pass over what is stored when an iterator reads its first element."""

    def elements(_: tf.Tensor) -> tf.data.Dataset:
        steps = read_steps()
        with tf.control_dependencies([tf.debugging.assert_positive(steps, message=empty_message)]):
            first = tf.maximum(steps - plan.max_length, 0)
        windows = plan.num_windows(first, steps)
        total = plan.num_groups * windows
        return inline_map(tf.data.Dataset.range(total), lambda k: plan.element_ids(k, first, steps, windows))

    def element(ids: tf.Tensor) -> tuple[Any, BufferInfo]:
        return unflatten(read(ids)), BufferInfo(ids, ())

    return tf.data.Dataset.range(1).flat_map(elements).map(element)  # read's loop: not inline
