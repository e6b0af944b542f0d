"""TF-Agents' ``py_uniform_replay_buffer`` module: ``PyUniformReplayBuffer`` on replaybuf.

The class wraps ``replaybuf.PyUniformReplayBuffer`` (one FIFO stream of ``capacity`` items
in NumPy arrays) in TF-Agents' shape: ``get_next`` returns the items alone, ``as_dataset``
returns a ``tf.data.Dataset`` of items, ``size`` counts the stored items, integer arrays are
cast into narrower integer fields when their values fit (TF-Agents stores
``np.array([i])``, int64, into int32 fields), and the buffer is a ``tf.Module`` whose state
``tf.train.Checkpoint`` (and so TF-Agents' ``common.Checkpointer``) saves and restores.

replaybuf's fixes of TF-Agents' bugs stay: ``get_next`` on an empty buffer (or with
``num_steps`` longer than what is stored) raises ``EmptyBufferError`` instead of returning
uninitialised memory, a rejected add changes nothing, ``num_frames`` works, ``gather_all``
returns stored items only, and ``add_batch`` takes any batch size.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import tensorflow as tf

from replaybuf.buffers import PyUniformReplayBuffer as _Buffer
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, SpecMismatchError
from replaybuf.nest import FlatSpec, to_numpy
from replaybuf.specs import untracked_nest
from replaybuf.tf.datasets import element_unflatten, when_asked

__all__ = ["PyUniformReplayBuffer"]


class PyUniformReplayBuffer(tf.Module):
    """TF-Agents' ``PyUniformReplayBuffer(data_spec, capacity)``: uniform sampling from one
    FIFO stream of ``capacity`` items.

    Args:
        data_spec: a nest (tuple, namedtuple, list, dict) of TF-Agents ArraySpecs,
            tf.TensorSpecs or replaybuf specs describing one item.
        capacity: the number of items kept; the oldest is dropped first.
        seed: seed of the sampling generator. None draws one from NumPy's global
            generator, so ``np.random.seed(s)`` before building the buffer makes its draws
            repeatable, as it does TF-Agents' (which samples with ``np.random``).

    Raises:
        ArgumentError: capacity is not a positive int.
        SpecError: data_spec is not a nest of specs.
    """

    def __init__(self, data_spec: Any, capacity: int, seed: int | None = None):
        super().__init__(name="PyUniformReplayBuffer")
        if seed is None:
            seed = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))
        self._inner = _Inner(data_spec, capacity, seed)
        self._checkpoint_state = _State(self._inner)

    # -- TF-Agents' properties ------------------------------------------------------------------
    @property
    def data_spec(self) -> Any:
        """The data_spec as given."""
        return self._inner.given_spec

    @property
    def capacity(self) -> int:
        return self._inner.buffer.capacity

    @property
    def stateful_dataset(self) -> bool:
        return False

    @property
    def size(self) -> np.int64:
        """How many items are stored (at most ``capacity``)."""
        return np.int64(self._inner.buffer.num_frames())

    # -- the replay-buffer API --------------------------------------------------------------------
    def add_batch(self, items: Any) -> None:
        """Append a batch of items (leading dimension: any size, appended in order).

        Integer arrays are cast into a narrower integer field when every value fits, and
        float arrays into a narrower float field, as TF-Agents' NumPy storage does.

        Raises:
            SpecMismatchError: the structure, a shape or a dtype does not match (a value
                that does not fit its integer field names the field); nothing is written.
        """
        inner = self._inner
        leaves = inner.flat.flatten(items)
        flat = inner.flat
        cast = [_cast(path, spec, leaf) for path, spec, leaf in zip(flat.paths, flat.leaves, leaves, strict=True)]
        inner.buffer.add_batch(inner.flat.unflatten(cast))

    def get_next(self, sample_batch_size: int | None = None, num_steps: int | None = None, time_stacked: bool = True):
        """Sample uniformly: the items alone (TF-Agents' return), shaped as
        ``replaybuf.PyUniformReplayBuffer.get_next``'s items.

        Raises:
            EmptyBufferError: nothing is stored, or fewer than ``num_steps`` items.
            ArgumentError: sample_batch_size or num_steps is not a positive int.
        """
        items, _ = self._inner.buffer.get_next(sample_batch_size, num_steps, time_stacked)
        return items

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        sequence_preprocess_fn: Any = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """An endless ``tf.data.Dataset`` of items (TF-Agents' element: no BufferInfo),
        ``[sample_batch_size, num_steps] + shape`` per leaf where given, time-stacked; lists
        of the data_spec come as tuples (tf.data reads a list as one tensor).

        Each element is sampled when it is asked for (tf.data's automatic prefetch is
        switched off), so it sees every earlier add. While
        the buffer is empty, or holds fewer than ``num_steps`` items, an element is all
        zeros, where TF-Agents' holds uninitialised memory (its tests read a dataset before
        any add); ``get_next`` raises instead.

        Raises:
            ArgumentError: a non-positive argument; ``num_parallel_calls``,
                ``sequence_preprocess_fn`` or ``single_deterministic_pass``, which TF-Agents'
                PyUniformReplayBuffer does not support either.
        """
        for name, value in (
            ("num_parallel_calls", num_parallel_calls),
            ("sequence_preprocess_fn", sequence_preprocess_fn),
            ("single_deterministic_pass", single_deterministic_pass or None),
        ):
            if value is not None:
                raise ArgumentError(f"{name}: expected None (not supported by PyUniformReplayBuffer), got {value!r}")
        for name, value in (("sample_batch_size", sample_batch_size), ("num_steps", num_steps)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ArgumentError(f"{name}: expected a positive int or None, got {value!r}")
        inner = self._inner
        outer = tuple(n for n in (sample_batch_size, num_steps) if n is not None)
        signature = inner.element([tf.TensorSpec(outer + s.shape, s.dtype) for s in inner.flat.leaves])
        zeros = inner.element([np.zeros(outer + s.shape, s.dtype) for s in inner.flat.leaves])

        def samples():
            while True:
                try:
                    items, _ = inner.buffer.get_next(sample_batch_size, num_steps)
                except EmptyBufferError:
                    yield zeros
                    continue
                yield inner.element(inner.flat.flatten(items))

        return when_asked(tf.data.Dataset.from_generator(samples, output_signature=signature))

    def gather_all(self) -> Any:
        """Every stored item, ``[1, n] + shape``, oldest first (stored items only)."""
        return self._inner.buffer.gather_all()

    def num_frames(self) -> int:
        """How many items are stored (TF-Agents' PyUniformReplayBuffer raises here)."""
        return self._inner.buffer.num_frames()

    def clear(self) -> None:
        self._inner.buffer.clear()


class _Inner:
    """The wrapped buffer and what the wrapper needs of its spec; not tracked by tf.Module."""

    def __init__(self, data_spec: Any, capacity: int, seed: int) -> None:
        self.given_spec = untracked_nest(data_spec)
        self.buffer = _Buffer(self.given_spec, capacity, seed=seed)
        self.flat = FlatSpec(self.given_spec)
        self.element = element_unflatten(self.flat.data_spec)


def _cast(path: str, spec: Any, value: Any) -> Any:
    """``value`` in the field's dtype where TF-Agents' storage would cast it: an integer
    array whose values fit, a float array into a narrower float; else as given."""
    array = to_numpy(value)
    dtype = getattr(array, "dtype", None)
    if dtype is None or dtype == spec.dtype or not isinstance(array, np.ndarray):
        return value
    if dtype.kind in "iu" and spec.dtype.kind in "iu":
        cast = array.astype(spec.dtype)
        if not np.array_equal(cast, array):
            raise SpecMismatchError(f"{path}: values do not fit in {spec.dtype.name} (got {dtype.name} values)")
        return cast
    if dtype.kind == "f" and spec.dtype.kind == "f":
        return array.astype(spec.dtype)
    return value


class _State(tf.train.experimental.PythonState):
    """The wrapped buffer's ``state_dict`` as one checkpoint value: arrays in an ``.npz``,
    everything else as JSON inside it (no pickle)."""

    def __init__(self, inner: _Inner) -> None:
        self._inner = inner

    def serialize(self) -> bytes:
        arrays: dict[str, np.ndarray] = {}
        plain = _split(self._inner.buffer.state_dict(), arrays)
        arrays["__state__"] = np.frombuffer(json.dumps(plain).encode(), np.uint8)
        out = io.BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    def deserialize(self, string_value: bytes) -> None:
        try:
            with np.load(io.BytesIO(string_value), allow_pickle=False) as stored:
                arrays = {key: stored[key] for key in stored.files}
            plain = json.loads(arrays.pop("__state__").tobytes().decode())
        except (ValueError, OSError, KeyError) as err:
            raise CheckpointError(
                f"PyUniformReplayBuffer checkpoint value: expected an .npz state, got one that fails to load ({err})"
            ) from None
        self._inner.buffer.load_state_dict(_join(plain, arrays))


def _split(node: Any, arrays: dict) -> Any:
    """A JSON-able copy of ``node`` with every array moved into ``arrays`` (as a reference)."""
    if isinstance(node, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = node
        return {"__array__": key}
    if isinstance(node, dict):
        return {key: _split(value, arrays) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [_split(value, arrays) for value in node]
    if isinstance(node, np.generic):
        return node.item()
    return node


def _join(node: Any, arrays: dict) -> Any:
    if isinstance(node, dict):
        if set(node) == {"__array__"}:
            return arrays[node["__array__"]]
        return {key: _join(value, arrays) for key, value in node.items()}
    if isinstance(node, list):
        return [_join(value, arrays) for value in node]
    return node
