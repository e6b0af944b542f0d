"""The messages of a rejected add, written once for every backend (NumPy, torch, TensorFlow).

Each function returns the ``SpecMismatchError`` to raise: it names the field path, what was
expected and what came, in the same words whichever framework the items came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replaybuf.errors import SpecMismatchError
from replaybuf.specs import ArraySpec

__all__ = ["batch_sizes_differ", "unbatched", "unsafe_cast", "wrong_shape"]


def _outer(batch_size: int | None) -> str:
    return "n" if batch_size is None else str(batch_size)


def unsafe_cast(path: str, spec: ArraySpec, got: Any) -> SpecMismatchError:
    """An array or tensor of dtype ``got`` that does not cast safely into the field's dtype."""
    return SpecMismatchError(
        f"{path}: expected dtype {spec.dtype.name}, got {got} "
        "(not a safe cast; convert it explicitly if the loss is intended)"
    )


def unbatched(path: str, spec: ArraySpec, batch_size: int | None, shape: Sequence[int], how: str) -> SpecMismatchError:
    """One item where a batch was expected; ``how`` shows the framework's way to add the axis."""
    return SpecMismatchError(
        f"{path}: expected a batch [{_outer(batch_size)}] + {spec.describe()}, got one unbatched item of "
        f"shape {tuple(shape)}; add_batch takes a batch: add a leading dimension ({how}) to add a single item"
    )


def wrong_shape(path: str, spec: ArraySpec, batch_size: int | None, shape: Any, got_dtype: Any) -> SpecMismatchError:
    """A batch whose shape is not ``[batch_size] + spec.shape``."""
    want = ", ".join((_outer(batch_size), *map(str, spec.shape)))
    return SpecMismatchError(
        f"{path}: expected shape ({want}) {spec.dtype.name} (a batch of {_outer(batch_size)} items of "
        f"{spec.describe()}), got {shape} {got_dtype}"
    )


def batch_sizes_differ(paths: Sequence[str], sizes: Sequence[int]) -> SpecMismatchError:
    """Leaves of one add that disagree on the batch size."""
    detail = ", ".join(f"{path}: {size}" for path, size in zip(paths, sizes, strict=True))
    return SpecMismatchError(f"items: every field needs the same batch size, got {detail}")
