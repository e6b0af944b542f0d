"""``bounded_integers``: what ``Generator.integers(low, high, size)`` draws, the same stream,
without its per-call argument handling.

``Generator.integers`` spends ~15 us of a 256-draw call checking its bounds as arrays; the
episode sampler calls it on every sample, and must keep its stream (a restored or reopened
buffer draws the ids the saved one would have: docs/persistence.md). The compiled kernel
(``_bounded_kernels``, with numba) draws the same integers from the generator's own 32-bit
outputs; without numba, or for ranges of 2**32 - 1 or more, it is ``Generator.integers``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

__all__ = ["bounded_integers", "pointers"]

_SPAN_LIMIT = 0xFFFFFFFF  # spans (high - low - 1) below it: the 32-bit draw


def pointers(bit_generator: Any) -> tuple[int, int]:
    """The addresses of ``bit_generator``'s ``next_uint32`` and of its state."""
    interface = bit_generator.ctypes
    return ctypes.cast(interface.next_uint32, ctypes.c_void_p).value, interface.state_address


class BoundedIntegers:
    """``bounded_integers`` with the generator's addresses looked up once per generator."""

    def __init__(self) -> None:
        self._bit_generator: Any = None
        self._pointers = (0, 0)
        self._kernel: Any = False  # not looked up yet; then the kernel, or None without numba

    def __call__(self, rng: np.random.Generator, low: int, high: int, size: int | tuple = ()) -> np.ndarray:
        """``rng.integers(low, high, size=size)`` (int64; ``size`` an int or ``()``)."""
        span = high - low - 1
        kernel = self._kernel if self._kernel is not False else self._look_up()
        if kernel is None or not 0 <= span < _SPAN_LIMIT:
            return rng.integers(low, high, size=size)
        bit_generator = rng.bit_generator
        if bit_generator is not self._bit_generator:
            self._bit_generator, self._pointers = bit_generator, pointers(bit_generator)
        out = np.empty(size, np.int64)
        with bit_generator.lock:  # as Generator.integers: other users of the generator wait
            kernel(*self._pointers, low, span, out.reshape(-1))
        return out

    def _look_up(self) -> Any:
        try:
            from replaybuf.samplers import _bounded_kernels

            _bounded_kernels.warm_up()
            self._kernel = _bounded_kernels.fill
        except ImportError:
            self._kernel = None
        return self._kernel


bounded_integers = BoundedIntegers()
