"""``prefetch(array, i)``: ask the CPU to start loading the cache line of ``array[i]``.

Hash-index probes and row gathers are chains of dependent cache misses (tag -> slot -> id ->
row). A loop that issues the first load of many keys before it needs any of them keeps many
misses in flight instead of one; numba has no prefetch, so this is LLVM's ``llvm.prefetch``
(a hint: it never faults, whatever the address, and changes no result).
"""

import numba as nb
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _codegen(context, builder, signature, args):
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    idx = list(args[1:]) + [context.get_constant(types.intp, 0)] * (aryty.ndim - len(args) + 1)
    ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                        "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep in every level, data
    return context.get_dummy_value()


@intrinsic
def prefetch(typingctx, array, i):
    """Prefetch the line holding ``array[i]`` (of a 2-d array: the start of row i)."""
    if isinstance(array, types.Array) and isinstance(i, types.Integer):
        return types.void(array, i), _codegen
    return None


@intrinsic
def prefetch_at(typingctx, array, i, j):
    """Prefetch the line holding ``array[i, j]`` of a 2-d array (a row past its first line)."""
    if isinstance(array, types.Array) and array.ndim == 2 and isinstance(i, types.Integer) \
            and isinstance(j, types.Integer):
        return types.void(array, i, j), _codegen
    return None


@nb.njit(inline="always")
def prefetch_row(data, r):
    """Prefetch every line of row r of a 2-d float32 array (16 floats a line)."""
    for j in range(0, data.shape[1], 16):
        prefetch_at(data, r, j)
