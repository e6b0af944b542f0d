"""Flattening items against a data_spec, with field paths, and validating batches.

``FlatSpec`` is computed once per buffer; ``FlatSpec.flatten_batch`` is on every add's hot
path, so arrays that already match (the common case) pass with three attribute checks per
leaf, in a function generated for the spec (no loop, no flatten when the items are the
spec's own dict or tuple), and anything else goes through a slow path that converts safely
or raises a ``SpecMismatchError`` naming the field, what was expected and what came.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optree

from replaybuf.errors import SpecMismatchError
from replaybuf.mismatch import batch_sizes_differ, unbatched, unsafe_cast, wrong_shape
from replaybuf.specs import ArraySpec, as_data_spec, untracked_nest

__all__ = ["FlatSpec", "to_numpy"]

_NDARRAY = np.ndarray
_CACHED_SIGNATURES = 32  # batch sizes whose signature is kept (adds of varying n stay bounded)


def _path_string(path: tuple[Any, ...], spec: ArraySpec) -> str:
    """``observation/camera`` for dict keys; tuple positions also show the spec's name."""
    if not path:
        return spec.name or "item"
    text = "/".join(str(p) for p in path)
    if spec.name and spec.name != str(path[-1]):
        text += f" ({spec.name})"
    return text


def _field_names(spec: Any, path: tuple[Any, ...]) -> tuple[Any, ...]:
    """``path`` with the positions of namedtuple fields replaced by the fields' names
    (``Trajectory``'s ``1`` is ``observation``): what a person calls the field."""
    named, node = [], spec
    for entry in path:
        fields = getattr(node, "_fields", None) if isinstance(node, tuple) else None
        named.append(fields[entry] if fields is not None and isinstance(entry, int) else entry)
        try:
            node = node[entry]
        except (KeyError, IndexError, TypeError):  # a node optree walks some other way: keep the rest
            return (*named, *path[len(named) :])
    return tuple(named)


def to_numpy(value: Any) -> Any:
    """A NumPy view of a framework tensor (TensorFlow, PyTorch, JAX); other values as given."""
    if isinstance(value, _NDARRAY):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and callable(value.numpy):  # tf.Tensor (eager)
        return value.numpy()
    if hasattr(value, "__array__"):
        return np.asarray(value)
    return value


class FlatSpec:
    """A data_spec flattened once: its treespec, leaf specs and field paths."""

    def __init__(self, data_spec: Any):
        self.data_spec = as_data_spec(data_spec)
        paths, leaves, self.treespec = optree.tree_flatten_with_path(self.data_spec)
        self.leaves: list[ArraySpec] = leaves
        self.paths: list[str] = [
            _path_string(_field_names(self.data_spec, p), s) for p, s in zip(paths, leaves, strict=True)
        ]
        self._signatures: dict[int, list[tuple]] = {}
        self.flatten_batch = _fast_flatten_batch(self, paths)

    def __reduce__(self) -> tuple:
        """Pickles as its data_spec (the generated ``flatten_batch`` is rebuilt on load)."""
        return (FlatSpec, (self.data_spec,))

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """Rebuild a nest shaped like the data_spec from its flat leaves."""
        return optree.tree_unflatten(self.treespec, leaves)

    def flatten(self, items: Any) -> list[Any]:
        """The leaves of ``items``, which must have the data_spec's structure."""
        try:
            return self.treespec.flatten_up_to(items)
        except (ValueError, TypeError) as err:
            plain = untracked_nest(items)
            if plain is not items:  # TensorFlow's tracking wrappers stand for their containers
                return self.flatten(plain)
            expected = optree.tree_map(lambda s: s.describe(), self.data_spec)
            raise SpecMismatchError(
                f"items: expected the structure of the data_spec {expected}, got {_describe_nest(items)} ({err})"
            ) from None

    #: ``flatten_batch(items, batch_size)``: validated NumPy leaves of a batch, each shaped
    #: ``[n] + spec.shape`` in the spec's dtype; ``batch_size`` fixes n, None lets n be any
    #: size shared by every leaf. Raises SpecMismatchError before anything is written. A
    #: function generated for this spec (``_fast_flatten_batch``): items of the spec's own
    #: container type holding matching arrays pass with straight-line checks; anything else
    #: goes to ``checked_batch``.
    flatten_batch: Callable[[Any, int | None], list[np.ndarray]]

    def checked_batch(self, items: Any, batch_size: int | None) -> list[np.ndarray]:
        """``flatten_batch`` for any items: converts what can be converted safely, or raises
        SpecMismatchError naming the field."""
        leaves = self.flatten(items)
        # The common case, arrays that already match, costs one list comparison against
        # the cached (class, dtype, shape) signature of a batch of n.
        try:
            n = batch_size if batch_size is not None else leaves[0].shape[0]
            if [(leaf.__class__, leaf.dtype, leaf.shape) for leaf in leaves] == self._signature(n):
                return leaves
        except (AttributeError, IndexError):  # a Python number or list, an empty spec: slow path
            pass
        out = [
            leaf
            if leaf.__class__ is _NDARRAY
            and leaf.dtype == spec.dtype
            and leaf.shape[1:] == spec.shape
            and (batch_size is None or leaf.shape[0] == batch_size)
            and leaf.ndim == len(spec.shape) + 1
            else self._coerce(index, leaf, batch_size)
            for index, (leaf, spec) in enumerate(zip(leaves, self.leaves, strict=True))
        ]
        if batch_size is None and out:
            sizes = {a.shape[0] for a in out}
            if len(sizes) > 1:
                raise batch_sizes_differ(self.paths, [a.shape[0] for a in out])
        return out

    def _signature(self, n: int) -> list[tuple]:
        """``(ndarray, dtype, shape)`` of each leaf of a batch of n; the latest sizes are cached."""
        signature = self._signatures.get(n)
        if signature is None:
            signature = [(_NDARRAY, s.dtype, (n,) + s.shape) for s in self.leaves]
            if len(self._signatures) >= _CACHED_SIGNATURES:
                self._signatures.clear()
            self._signatures[n] = signature
        return signature

    def _coerce(self, index: int, value: Any, batch_size: int | None) -> np.ndarray:
        spec, path = self.leaves[index], self.paths[index]
        outer = "[n]" if batch_size is None else f"[{batch_size}]"
        try:
            array = to_numpy(value)
        except Exception:  # the framework's own conversion (torch.bfloat16 has no NumPy dtype, ...)
            got = getattr(value, "dtype", type(value).__name__)
            raise SpecMismatchError(
                f"{path}: expected dtype {spec.dtype.name}, got {got} (no NumPy equivalent)"
            ) from None
        typed = hasattr(array, "dtype")
        try:
            array = np.asarray(array)
        except (ValueError, TypeError) as err:
            raise SpecMismatchError(f"{path}: expected {outer} + {spec.describe()}, got {value!r} ({err})") from None
        if array.dtype == object or array.dtype.kind in "USV":
            raise SpecMismatchError(f"{path}: expected dtype {spec.dtype.name}, got {array.dtype} data")
        if array.dtype != spec.dtype:
            # NumPy arrays and tensors carry a dtype, so only lossless casts are taken;
            # Python numbers are weakly typed (1.5 into float32 is fine, 1.5 into int32 is not).
            rule = "safe" if typed else "same_kind"
            if not np.can_cast(array.dtype, spec.dtype, casting=rule):
                raise unsafe_cast(path, spec, array.dtype.name)
            cast = array.astype(spec.dtype)
            if not typed and spec.dtype.kind in "iu" and not np.array_equal(cast, array):
                raise SpecMismatchError(f"{path}: values {value!r} do not fit in {spec.dtype.name}")
            array = cast
        if array.ndim == len(spec.shape) and array.shape == spec.shape:
            raise unbatched(path, spec, batch_size, array.shape, "x[None] or np.expand_dims(x, 0)")
        if (
            array.ndim != len(spec.shape) + 1
            or array.shape[1:] != spec.shape
            or (batch_size is not None and array.shape[0] != batch_size)
        ):
            raise wrong_shape(path, spec, batch_size, array.shape, array.dtype.name)
        return array


def _fast_flatten_batch(flat: FlatSpec, paths: list[tuple]) -> Callable[[Any, int | None], list[np.ndarray]]:
    """``flat.flatten_batch``: straight-line code generated for this spec (as dataclasses do).

    For items of the spec's own container (a ``dict`` with the spec's keys, or the spec's
    tuple / namedtuple class) whose leaves are all ``ndarray`` of the spec's dtype object and
    shape ``[n] + spec.shape``, it returns the leaves without flattening or looping; any
    other items (other containers, nests, casts, errors) take ``flat.checked_batch``, so a
    miss is only slower, never different. The dtype check is identity (NumPy's built-in
    dtypes are singletons); an equal dtype that is another object takes the slow path.
    """
    spec, count = flat.data_spec, len(flat.leaves)
    if count == 0:
        return flat.checked_batch
    names = [f"l{i}" for i in range(count)]
    env: dict[str, Any] = {"ND": _NDARRAY, "slow": flat.checked_batch, "flatten_up_to": flat.treespec.flatten_up_to}
    one_level = all(len(path) == 1 for path in paths) and not isinstance(spec, ArraySpec)
    if one_level and type(spec) is dict:
        env.update({f"K{i}": path[0] for i, path in enumerate(paths)})
        lines = [
            f"    if items.__class__ is not dict or len(items) != {count}:",
            "        return slow(items, batch_size)",
            "    try:",
            *(f"        {name} = items[K{i}]" for i, name in enumerate(names)),
            "    except KeyError:",
            "        return slow(items, batch_size)",
        ]
    elif one_level and isinstance(spec, tuple) and [path[0] for path in paths] == list(range(count)):
        env["SPEC_TYPE"] = type(spec)
        lines = [
            f"    if items.__class__ is not SPEC_TYPE or len(items) != {count}:",
            "        return slow(items, batch_size)",
            f"    {', '.join(names)}, = items",
        ]
    else:
        lines = [
            "    try:",
            f"        {', '.join(names)}, = flatten_up_to(items)",
            "    except (ValueError, TypeError):",
            "        return slow(items, batch_size)",
        ]
    env.update({f"D{i}": leaf.dtype for i, leaf in enumerate(flat.leaves)})
    checks = [f"{name}.__class__ is ND" for name in names]
    checks += [f"{name}.dtype is D{i}" for i, name in enumerate(names)]
    checks += [
        f"{name}.shape == (n, {''.join(f'{int(d)}, ' for d in leaf.shape)})"
        for name, leaf in zip(names, flat.leaves, strict=True)
    ]
    source = "\n".join(
        [
            "def flatten_batch(items, batch_size):",
            *lines,
            "    n = batch_size if batch_size is not None else (l0.shape[0] if l0.__class__ is ND and l0.ndim else -1)",
            f"    if {' and '.join(checks)}:",
            f"        return [{', '.join(names)}]",
            "    return slow(items, batch_size)",
        ]
    )
    exec(compile(source, f"<replaybuf flatten_batch of {count} leaves>", "exec"), env)  # noqa: S102
    function = env["flatten_batch"]
    function.__doc__ = FlatSpec.checked_batch.__doc__
    function.source = source
    return function


def _describe_nest(items: Any) -> str:
    def leaf(x: Any) -> str:
        shape = getattr(x, "shape", None)
        return f"{tuple(shape)}" if shape is not None else type(x).__name__

    try:
        return str(optree.tree_map(leaf, items))
    except Exception:  # a structure optree cannot walk: name its type
        return type(items).__name__
