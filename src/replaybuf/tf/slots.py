"""Lock-free storage of a segmented buffer in tf.Variables: reserved writes, checked reads.

``SlotStore`` holds one variable per leaf (``[capacity] + shape``), the write head
``steps`` (steps reserved by adds), ``marks`` (per step row, the last step whose write
completed there; -1 for none) and ``clears`` (how many clears happened). The protocol:

- an add takes its step with one atomic fetch-and-increment of ``steps``
  (``ResourceCountUpTo``: concurrent adds get distinct steps), scatters its rows, then
  sets ``marks[step % max_length] = step``. About ten ops, no lock.
- a reader gathers the marks of the steps it wants *before* gathering the rows, and reads
  the head *after*: a step is intact when its mark said complete and no add had reserved a
  step that overwrites it (``step >= head - max_length``). A read that fails is redone
  (``get_next``) or dropped (the random dataset draws another element).

Adds must stay fewer than ``max_length`` steps apart (two adds into one row at once could
mix their items), and ``clear`` must not run while another thread adds or reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["SlotStore", "read_variable"]

_NO_LIMIT = np.iinfo(np.int64).max


def read_variable(var: tf.Variable) -> tf.Tensor:
    """The variable's value, as one op (created here, so it obeys enclosing control deps)."""
    return tf.raw_ops.ReadVariableOp(resource=var.handle, dtype=var.dtype)


def _gather(var: tf.Variable, indices: tf.Tensor) -> tf.Tensor:
    return tf.raw_ops.ResourceGather(resource=var.handle, indices=indices, dtype=var.dtype)


class SlotStore(tf.Module):
    """The variables of ``batch_size`` streams of ``max_length`` steps, and their protocol."""

    def __init__(self, leaves: list[Any], batch_size: int, max_length: int, name: str):
        super().__init__(name=name)
        self.batch_size, self.max_length = batch_size, max_length
        self.capacity = batch_size * max_length
        with self.name_scope:
            with tf.name_scope("Table"):  # the data table, named as TF-Agents names its own
                self.leaves = [
                    tf.Variable(tf.zeros((self.capacity,) + s.shape, s.dtype), trainable=False, name=f"leaf_{i}")
                    for i, s in enumerate(leaves)
                ]
            self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
            self.marks = tf.Variable(tf.fill([max_length], tf.constant(-1, tf.int64)), trainable=False, name="marks")
            self.clears = tf.Variable(0, dtype=tf.int64, trainable=False, name="clears")

    # -- writing --------------------------------------------------------------------------------
    def write(self, leaves: list[tf.Tensor]) -> tf.Tensor:
        """Store one step of every stream; returns the step, once it is marked complete."""
        # the step is reserved only once the batch's own checks (tf.ensure_shape) have run,
        # so a rejected add reserves nothing
        with tf.control_dependencies(leaves):
            step = tf.raw_ops.ResourceCountUpTo(resource=self.steps.handle, limit=_NO_LIMIT, T=tf.int64)
        row = step % self.max_length
        if self.batch_size == 1:
            slots = tf.reshape(row, [1])
        else:
            slots = row * self.batch_size + np.arange(self.batch_size, dtype=np.int64)
        # scatters write in place; a strided-slice assign would copy the whole variable
        writes = [
            tf.raw_ops.ResourceScatterUpdate(resource=var.handle, indices=slots, updates=x)
            for var, x in zip(self.leaves, leaves, strict=True)
        ]
        with tf.control_dependencies(writes):
            done = tf.raw_ops.ResourceScatterUpdate(resource=self.marks.handle, indices=row, updates=step)
        with tf.control_dependencies([done]):
            return tf.identity(step)

    def clear(self, zero_leaves: bool) -> list[Any]:
        """The ops that forget everything (and zero the storage when asked)."""
        resets = [
            self.steps.assign(0, read_value=False),
            self.marks.assign(tf.fill([self.max_length], tf.constant(-1, tf.int64)), read_value=False),
            self.clears.assign_add(1, read_value=False),
        ]
        if zero_leaves:
            resets += [var.assign(tf.zeros_like(var), read_value=False) for var in self.leaves]
        return resets

    # -- reading --------------------------------------------------------------------------------
    def step_of(self, ids: tf.Tensor) -> tf.Tensor:
        return ids if self.batch_size == 1 else ids // self.batch_size

    def read(self, ids: tf.Tensor) -> tuple[list[tf.Tensor], tf.Tensor, tf.Tensor]:
        """``(rows under ids, their steps, the marks of those steps' rows read before)``."""
        steps = self.step_of(ids)
        marks = _gather(self.marks, steps % self.max_length)
        slots = ids % self.capacity
        with tf.control_dependencies([marks]):
            leaves = [_gather(var, slots) for var in self.leaves]
        return leaves, steps, marks

    def intact(self, steps: tf.Tensor, marks: tf.Tensor, head: tf.Tensor) -> tf.Tensor:
        """Per step read: complete before the read, and not reserved for overwriting by the
        head ``head`` read after it."""
        return tf.logical_and(tf.equal(marks, steps), steps >= head - self.max_length)

    def untorn(self, steps: tf.Tensor, marks: tf.Tensor, head: tf.Tensor) -> tf.Tensor:
        """Per step read: no add was writing its row meanwhile (newer complete data is fine).

        The next add into a row after the step marked there is ``mark + max_length`` (or the
        row's own index when none was marked); it has not been reserved iff the head read
        after the read is not past it.
        """
        row = steps % self.max_length
        following = tf.where(marks >= 0, marks + self.max_length, row)
        return head <= following

    def stream_ids(self, head: tf.Tensor) -> tf.Tensor:
        """Ids of every stored item for the head ``head``: ``[batch_size, n]``, oldest first."""
        start = tf.maximum(head - self.max_length, 0)
        step_ids = tf.range(start, head, dtype=tf.int64)[None, :] * self.batch_size
        return step_ids + tf.range(self.batch_size, dtype=tf.int64)[:, None]

    def gather_all(self) -> list[tf.Tensor]:
        """Every stored item, ``[batch_size, n] + shape``, leaving out steps written meanwhile."""
        ids = self.stream_ids(read_variable(self.steps))
        leaves, steps, marks = self.read(ids)
        with tf.control_dependencies(leaves):
            head = read_variable(self.steps)
        keep = tf.reduce_all(self.intact(steps, marks, head), axis=0)
        return [tf.boolean_mask(leaf, keep, axis=1) for leaf in leaves]
