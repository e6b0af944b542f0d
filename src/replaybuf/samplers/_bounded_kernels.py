"""The compiled draw of ``replaybuf.samplers.bounded`` (numba: ``replaybuf[fast]``).

NumPy's ``Generator.integers`` for a range below 2**32 - 1: Lemire's multiply-and-reject on
the bit generator's own 32-bit outputs, which the kernel takes by calling the generator's
``next_uint32`` through its address, so the stream (and what the generator buffers between
calls) is the one NumPy's draw leaves. Compiled on first use and cached on disk.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["fill", "next_raw", "warm_up"]

_LOW_BITS = np.uint64(0xFFFFFFFF)


def _caller(bits: int):
    """An intrinsic ``(function, state) -> uint<bits>``: calls the bit generator function at
    address ``function`` (``next_uint32``, ``next_raw``) on its state."""

    def call(typingctx, function, state):  # pragma: no cover - compiled
        def codegen(context, builder, signature, args):
            address, pointer = args
            kind = ir.FunctionType(ir.IntType(bits), [ir.IntType(8).as_pointer()])
            return builder.call(builder.inttoptr(address, kind.as_pointer()), [builder.inttoptr(pointer, kind.args[0])])

        return getattr(types, f"uint{bits}")(types.uintp, types.uintp), codegen

    return intrinsic(call)


_next_uint32 = _caller(32)  # a bit generator's uint32_t next_uint32(void *state)
next_raw = _caller(64)  # its uint64_t next_raw(void *state): what random_raw returns, one by one


@njit(cache=True, nogil=True)
def fill(function, state, low, span, out):  # pragma: no cover - compiled
    """``out[i] = low + x`` with ``x`` uniform in ``[0, span]`` (``span < 2**32 - 1``), each drawn
    as NumPy draws it: the high half of a 32-bit output times ``span + 1``, redrawn while the
    low half falls below ``2**32 mod (span + 1)``."""
    excl = np.uint64(span) + np.uint64(1)
    for i in range(out.shape[0]):
        if span == 0:
            out[i] = low
            continue
        m = np.uint64(_next_uint32(function, state)) * excl
        leftover = m & _LOW_BITS
        if leftover < excl:
            threshold = (_LOW_BITS - np.uint64(span)) % excl
            while leftover < threshold:
                m = np.uint64(_next_uint32(function, state)) * excl
                leftover = m & _LOW_BITS
        out[i] = low + np.int64(m >> np.uint64(32))


def warm_up() -> None:
    """Compile (or load from the disk cache) the kernel with a generator of its own."""
    from replaybuf.samplers.bounded import pointers  # (a cycle at import time otherwise)

    bit_generator = np.random.default_rng(0).bit_generator  # alive while the kernel uses its addresses
    fill(*pointers(bit_generator), 0, 1, np.empty(1, np.int64))
