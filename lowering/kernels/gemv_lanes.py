"""XLA CPU's row-major matrix-vector product (its GEMV emitter) with each row's lanes in one vector register.

The order is :data:`lowering.kernels.small_dot.ROW_TILES`' (see that module): per row of ``A``, term ``p`` of the
first ``K - K mod W`` goes to lane ``p mod W`` of a vector of ``W`` lanes (32-byte vectors, or 64-byte ones inside
the while loops XLA compiles whole), each lane a fused multiply-add chain from zero; the lanes are added as XLA's
vector support library adds them (:func:`horizontal_sum`: pairwise for a whole tile of
8 rows of 32-byte f32 vectors, or the last tile of 4 rows of f64 ones; else the upper half onto the lower half
until one lane is left); the last ``K mod W`` terms are one more chain from zero, added last.

:func:`gemv_rows` computes it with the lanes in an LLVM vector: the numba form kept them in a small array and took
~3.2 us for a (128, 8) @ (8, 1) product (optax's linear fit in ``lax.scan`` calls two such products per step).
C-contiguous operands only; others take the numba form (:func:`gemv_rows_scalar`).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ..runtime.loop_runtime import fused_multiply_add

TILE_ROWS = 8
"""Rows per tile of XLA CPU's row-major GEMV emitter (its tiling factor)."""


def _is_c_array(t, ndim: int) -> bool:
    return isinstance(t, types.Array) and t.ndim == ndim and t.layout == "C" and t.dtype in (types.float32,
                                                                                             types.float64)


@intrinsic
def _gemv_rows_vector(typingctx, a, b, out, wide):
    """``out[t, i, 0] = a[t, i] . b[t, :, 0]`` in the GEMV emitter's order (module docstring) for C-contiguous
    ``a (batch, M, K)``, ``b (batch, K, 1)``, ``out (batch, M, 1)`` of one float type; ``wide``: 64-byte vectors."""
    if not (_is_c_array(a, 3) and _is_c_array(b, 3) and _is_c_array(out, 3) and a.dtype == b.dtype == out.dtype
            and wide == types.boolean):
        return None
    itemsize = a.dtype.bitwidth // 8
    real = ir.FloatType() if a.dtype == types.float32 else ir.DoubleType()
    i32, i64 = ir.IntType(32), ir.IntType(64)

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:3], args[:3])]
        a_data, b_data, out_data = (array.data for array in arrays)
        batch, m, k = cgutils.unpack_tuple(builder, arrays[0].shape, 3)
        scalar_fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(real, [real] * 3),
                                                    f"llvm.fma.{'f32' if itemsize == 4 else 'f64'}")
        zero = ir.Constant(real, 0.0)
        whole_tiles = builder.sub(m, builder.srem(m, ir.Constant(i64, TILE_ROWS)))
        last_tile_rows = builder.srem(m, ir.Constant(i64, TILE_ROWS))

        def rows(vector_bytes):
            lanes = vector_bytes // itemsize
            vector = ir.VectorType(real, lanes)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                                 f"llvm.fma.v{lanes}{'f32' if itemsize == 4 else 'f64'}")
            vectorized = builder.sub(k, builder.srem(k, ir.Constant(i64, lanes)))
            with cgutils.for_range(builder, batch) as batches:
                t = batches.index
                with cgutils.for_range(builder, m) as row_loop:
                    i = row_loop.index
                    row = builder.mul(builder.add(builder.mul(t, m), i), k)
                    column = builder.mul(t, k)
                    acc = cgutils.alloca_once_value(builder, ir.Constant(vector, None))
                    with cgutils.for_range_slice(builder, ir.Constant(i64, 0), vectorized,
                                                 ir.Constant(i64, lanes)) as (p, _):
                        x, y = (builder.load(builder.bitcast(builder.gep(data, [builder.add(base, p)]),
                                                             vector.as_pointer()), align=itemsize)
                                for data, base in ((a_data, row), (b_data, column)))
                        builder.store(builder.call(fma, [x, y, builder.load(acc)]), acc)
                    total = builder.load(acc)
                    lane = [builder.extract_element(total, ir.Constant(i32, q)) for q in range(lanes)]
                    halved = total
                    width = lanes
                    while width > 1:  # (the upper half onto the lower half: AddReduce)
                        width //= 2
                        halves = [builder.shuffle_vector(halved, halved, ir.Constant(
                            ir.VectorType(i32, width), list(range(h * width, (h + 1) * width)))) for h in range(2)]
                        halved = builder.fadd(halves[0], halves[1])
                    result = builder.extract_element(halved, ir.Constant(i32, 0))
                    if vector_bytes == 32 and lanes in (4, 8):  # (pairwise horizontal adds of a whole tile)
                        pairwise = builder.fadd(builder.fadd(lane[0], lane[1]), builder.fadd(lane[2], lane[3]))
                        if lanes == 8:
                            pairwise = builder.fadd(pairwise, builder.fadd(builder.fadd(lane[4], lane[5]),
                                                                           builder.fadd(lane[6], lane[7])))
                        tile_rows = builder.select(builder.icmp_signed("<", i, whole_tiles),
                                                   ir.Constant(i64, TILE_ROWS), last_tile_rows)
                        result = builder.select(builder.icmp_signed("==", tile_rows, ir.Constant(i64, lanes)),
                                                pairwise, result)
                    tail = cgutils.alloca_once_value(builder, zero)
                    with cgutils.for_range_slice(builder, vectorized, k, ir.Constant(i64, 1)) as (p, _):
                        x = builder.load(builder.gep(a_data, [builder.add(row, p)]))
                        y = builder.load(builder.gep(b_data, [builder.add(column, p)]))
                        builder.store(builder.call(scalar_fma, [x, y, builder.load(tail)]), tail)
                    builder.store(builder.fadd(result, builder.load(tail)),
                                  builder.gep(out_data, [builder.add(builder.mul(t, m), i)]))

        with builder.if_else(args[3]) as (wide_vectors, narrow_vectors):
            with wide_vectors:
                rows(64)
            with narrow_vectors:
                rows(32)
        return context.get_dummy_value()

    return types.none(a, b, out, wide), codegen


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def horizontal_sum(lanes, pairwise):
    """The sum of a vector accumulator's lanes as XLA's vector support library adds them: ``pairwise``
    (AVX-style horizontal adds of 8 lanes) ``((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`` (4 lanes: ``(l0+l1)+(l2+l3)``),
    else the upper half added onto the lower half until one lane is left (``AddReduce``; 8 lanes:
    ``((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))``). ``lanes`` is overwritten."""
    width = lanes.size
    if pairwise and width == 8:
        return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    if pairwise and width == 4:
        return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
    half = width // 2
    while half >= 1:
        for q in range(half):
            lanes[q] = lanes[q] + lanes[q + half]
        half //= 2
    return lanes[0]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def gemv_rows_scalar(a, b, out, wide):
    """:func:`gemv_rows` in numba code, for any layout (the lanes in a small array)."""
    batch, m, k = a.shape
    zero = a.dtype.type(0)
    width = (64 if wide else 32) // a.itemsize
    vectorized = k - k % width
    whole_tiles = m - m % TILE_ROWS
    lanes = np.empty(width, a.dtype)
    for t in range(batch):
        for i in range(m):
            lanes[:] = zero
            for p in range(vectorized):
                lanes[p % width] = fused_multiply_add(a[t, i, p], b[t, p, 0], lanes[p % width])
            tail = zero
            for p in range(vectorized, k):
                tail = fused_multiply_add(a[t, i, p], b[t, p, 0], tail)
            tile_rows = TILE_ROWS if i < whole_tiles else m % TILE_ROWS
            total = horizontal_sum(lanes, tile_rows == width and not wide)
            out[t, i, 0] = total + tail


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _gemv_rows_contiguous(a, b, out, wide):
    _gemv_rows_vector(a, b, out, wide)


def gemv_rows(a, b, out, wide):
    """``out[t, i, 0] = a[t, i] . b[t, :, 0]`` summed as XLA CPU's row-major GEMV emitter sums it (module docstring)
    for ``a (batch, M, K)``, ``b (batch, K, 1)``, ``out (batch, M, 1)`` of one float type (f32/f64); ``wide``:
    64-byte vectors (inside the while loops XLA compiles whole). From numba code too (the overload below picks the
    same form by the arrays' types)."""
    if a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous and a.dtype == b.dtype == out.dtype:
        _gemv_rows_contiguous(a, b, out, bool(wide))
    else:
        gemv_rows_scalar(a, b, out, bool(wide))


@overload(gemv_rows, jit_options={"cache": True})
def _gemv_rows(a, b, out, wide):
    if all(_is_c_array(t, 3) for t in (a, b, out)) and a.dtype == b.dtype == out.dtype:
        return lambda a, b, out, wide: _gemv_rows_vector(a, b, out, wide)
    return lambda a, b, out, wide: gemv_rows_scalar(a, b, out, wide)
