"""``BoundedIntegers``: what ``Generator.integers(low, high, size)`` draws, the same stream,
without its per-call argument handling.

``Generator.integers`` spends ~10 us of a 256-draw call checking its bounds as arrays; the
episode sampler calls it on every sample, and must keep its stream (a restored or reopened
buffer draws the ids the saved one would have: docs/persistence.md). The compiled kernel
(``_bounded_kernels``, with numba) draws the same integers from the generator's own 32-bit
outputs; without numba, or for ranges of 2**32 - 1 or more, it is ``Generator.integers``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from replaybuf.samplers.compiled import load_kernel

__all__ = ["SPAN_LIMIT", "BoundedIntegers", "pointers", "raw_pointer"]

SPAN_LIMIT = 0xFFFFFFFF  # spans (high - low - 1) below it: the 32-bit draw
_fill: Any = False  # not looked up yet; then the compiled kernel, or None without numba


def pointers(bit_generator: Any) -> tuple[int, int]:
    """The addresses of ``bit_generator``'s ``next_uint32`` and of its state."""
    interface = bit_generator.ctypes
    return ctypes.cast(interface.next_uint32, ctypes.c_void_p).value, interface.state_address


def raw_pointer(bit_generator: Any) -> int:
    """The address of ``bit_generator``'s ``next_raw`` (what ``random_raw`` calls): the fifth
    member of NumPy's ``bitgen_t`` (state, next_uint64, next_uint32, next_double, next_raw)."""
    return (ctypes.c_void_p * 5).from_address(bit_generator.ctypes.bit_generator.value)[4]


def _kernel() -> Any:
    """``_bounded_kernels.fill`` (compiled or loaded from the disk cache once), or None without numba."""
    global _fill
    if _fill is False:
        _fill = load_kernel("_bounded_kernels", "fill")
    return _fill


class BoundedIntegers:
    """``rng.integers(low, high, size=size)`` as a call; one per sampler, which keeps the
    addresses of the generator it last drew from (a copy or an unpickled one looks them up
    again)."""

    def __init__(self) -> None:
        self._last: tuple[Any, int, int] = (None, 0, 0)  # (bit generator, its next_uint32, its state)

    def __reduce__(self) -> tuple:
        return (type(self), ())

    def __call__(self, rng: np.random.Generator, low: int, high: int, size: int | tuple = ()) -> np.ndarray:
        """The int64 draws of ``rng.integers(low, high, size=size)`` (``size`` an int or ``()``),
        leaving ``rng`` in the state that call would.

        Raises:
            ValueError: ``low >= high``, as ``Generator.integers`` does.
        """
        span = high - low - 1
        fill = _kernel()
        if fill is None or not 0 <= span < SPAN_LIMIT:
            return rng.integers(low, high, size=size)
        bit_generator, last = rng.bit_generator, self._last
        if last[0] is not bit_generator:
            last = self._last = (bit_generator, *pointers(bit_generator))
        out = np.empty(size, np.int64)
        with bit_generator.lock:  # as Generator.integers: other users of the generator wait
            fill(last[1], last[2], low, span, out.reshape(-1))
        return out
