"""``prefetch(address)`` for numba-compiled loops: LLVM's prefetch of one cache line.

Compiled reads of rows scattered over a pool far larger than the caches (lz4 blobs,
sequence windows) wait on each row's first lines; asking for the rows a few iterations
ahead lets those misses overlap the copy in progress. Built on first use (numba and
llvmlite are imported here only)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

__all__ = ["prefetch_intrinsic"]


@cache
def prefetch_intrinsic() -> Callable[[int], None]:
    """``prefetch(address)`` for compiled code: LLVM's prefetch of the cache line at an
    integer address (a hint: it never faults and changes no result)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, address):  # noqa: ANN001, ANN202 - numba's intrinsic protocol
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer_type = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            function_type = ir.FunctionType(ir.VoidType(), [pointer_type, i32, i32, i32])
            function = cgutils.get_or_insert_function(builder.module, function_type, "llvm.prefetch.p0i8")
            # read (0), keep in all cache levels (3), data cache (1)
            builder.call(function, [builder.inttoptr(args[0], pointer_type), *(ir.Constant(i32, v) for v in (0, 3, 1))])
            return context.get_dummy_value()

        return types.void(types.uint64), codegen

    return prefetch
