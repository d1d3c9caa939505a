"""Matrix products whose every element is one fused multiply-add chain over ``K``, at the speed of a tuned GEMM.

YNNPACK's AVX-512 kernels, which XLA CPU uses for most f32/f64 products, sum each output element as one chain from
zero, ``acc = fma(a[i, p], b[p, j], acc)`` for ``p`` in order (in chunks of ``K`` where a block of ``B`` exceeds its
cache budget: each chunk's chain from zero, added to the sum of the chunks before it) -- see
:mod:`lowering.kernels.small_dot`, which defines that order. The order of one element does not depend on how the
products are tiled, so a register-blocked kernel gives the same bits: ``tile_one_lane`` computes a tile of
:data:`TILE_ROWS` rows by two vectors of columns for a range of ``K``, its accumulators in vector registers (LLVM
vectors, emitted directly: one load of ``B``'s row per step, reused by every row of the tile). :func:`chain_product`
tiles a whole product with it and finishes the edge rows and columns with the same chain one element at a time;
:func:`lane_product` does the same for YNNPACK's kernels that sum ``K`` in two or four lanes (tiles of
:func:`_tile_intrinsic` with an accumulator per lane).

Used by :func:`lowering.kernels.small_dot.order_kernel` for its one-chain orders (the interpreter, fused groups and
compiled loops all call that one definition), which makes products too large for the element-by-element loop
(formerly left to BLAS, in BLAS's order) follow YNNPACK's order at about BLAS's speed.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..runtime.loop_runtime import fused_multiply_add

TILE_ROWS = 4
"""Rows of ``A`` per register tile (each row's accumulators are two vectors)."""

VECTOR_BYTES = 64
"""The width of one accumulator vector (16 f32, 8 f64 lanes; LLVM splits it where the CPU's vectors are narrower)."""


def _tile_intrinsic(width: int, vectors: int, vector_bytes: int = VECTOR_BYTES):
    """The register tile for ``width`` lanes of ``K`` (term ``p`` in lane ``p mod width``, each lane a fused chain
    from zero, lanes added as ``l0``, ``l0 + l1`` or ``(l0 + l1) + (l2 + l3)``), ``vectors`` accumulator vectors
    of ``vector_bytes`` per row and lane: ``tile(a, panel, out, i0, j0, p0, p1, accumulate)`` computes
    ``out[i0:i0+4, j0:j0+vectors*L]``
    from ``a[i0:i0+4]`` and the packed panel of B (``(K, vectors*L)``, C-contiguous) over ``p`` in ``[p0, p1)`` (a multiple of ``width`` long, not empty), stored or (``accumulate``) added to
    ``out``."""

    def tile(typingctx, a, b, out, i0, j0, p0, p1, accumulate):
        if not all(isinstance(t, types.Array) and t.ndim == 2 and t.dtype == a.dtype for t in (a, b, out)) \
                or a.dtype not in (types.float32, types.float64):
            return None
        scalar = ir.FloatType() if a.dtype == types.float32 else ir.DoubleType()
        lanes = vector_bytes // (4 if a.dtype == types.float32 else 8)
        vector = ir.VectorType(scalar, lanes)
        i64 = ir.IntType(64)

        def codegen(context, builder, signature, args):
            a_arr, b_arr, o_arr = (context.make_array(t)(context, builder, v)
                                   for t, v in zip(signature.args[:3], args[:3]))
            row0, col0, start, stop, acc_flag = args[3:]
            itemsize = ir.Constant(i64, 4 if a.dtype == types.float32 else 8)
            lda, ldb, ldo = (builder.sdiv(cgutils.unpack_tuple(builder, arr.strides, 2)[0], itemsize)
                             for arr in (a_arr, b_arr, o_arr))
            name = f"llvm.fma.v{lanes}{'f32' if a.dtype == types.float32 else 'f64'}"
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
            vector_ptr = vector.as_pointer()

            def element(arr, row, column, ld):
                return builder.gep(arr.data, [builder.add(builder.mul(row, ld), column)])

            def constant(value):
                return ir.Constant(i64, value)

            preheader = builder.block
            loop = builder.append_basic_block("tile.loop")
            done = builder.append_basic_block("tile.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            p = builder.phi(i64, "p")
            p.add_incoming(start, preheader)
            accs = {}
            for key in ((r, v, lane) for r in range(TILE_ROWS) for v in range(vectors) for lane in range(width)):
                accs[key] = builder.phi(vector)
                accs[key].add_incoming(ir.Constant(vector, None), preheader)  # (zeroinitializer)
            updated = {}
            for lane in range(width):
                term = builder.add(p, constant(lane))
                b_rows = [builder.load(builder.bitcast(element(b_arr, term, constant(v * lanes), ldb), vector_ptr),
                                       align=1) for v in range(vectors)]
                for r in range(TILE_ROWS):
                    x = builder.load(element(a_arr, builder.add(row0, constant(r)), term, lda))
                    splat = builder.insert_element(ir.Constant(vector, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
                    splat = builder.shuffle_vector(splat, ir.Constant(vector, ir.Undefined),
                                                   ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))
                    for v in range(vectors):
                        updated[r, v, lane] = builder.call(fma, [splat, b_rows[v], accs[r, v, lane]])
            p_next = builder.add(p, constant(width))
            for key, acc in accs.items():
                acc.add_incoming(updated[key], loop)
            p.add_incoming(p_next, loop)
            builder.cbranch(builder.icmp_signed("<", p_next, stop), loop, done)
            builder.position_at_end(done)
            for r in range(TILE_ROWS):
                for v in range(vectors):
                    lane_sums = [updated[r, v, lane] for lane in range(width)]
                    if width == 4:
                        total = builder.fadd(builder.fadd(lane_sums[0], lane_sums[1]),
                                             builder.fadd(lane_sums[2], lane_sums[3]))
                    elif width == 2:
                        total = builder.fadd(lane_sums[0], lane_sums[1])
                    else:
                        total = lane_sums[0]
                    pointer = builder.bitcast(element(o_arr, builder.add(row0, constant(r)),
                                                      builder.add(col0, constant(v * lanes)), ldo), vector_ptr)
                    # (a branch, not a select: a fresh result is never read -- on this VM a read of an untouched
                    # page and the write after it cost two page faults, 3-10 ms on an 8 MiB result)
                    with builder.if_else(acc_flag) as (accumulate, store):
                        with accumulate:
                            builder.store(builder.fadd(total, builder.load(pointer, align=1)), pointer, align=1)
                        with store:
                            builder.store(total, pointer, align=1)
            return context.get_dummy_value()

        return types.none(a, b, out, types.intp, types.intp, types.intp, types.intp, types.boolean), codegen

    tile.__name__ = f"tile_{width}_lanes_{vectors}x{vector_bytes}"
    return intrinsic(tile)


tile_one_lane = _tile_intrinsic(1, 2)
tile_two_lanes = _tile_intrinsic(2, 2)
tile_four_lanes = _tile_intrinsic(4, 1)
tile_one_lane_narrow = _tile_intrinsic(1, 1)
tile_two_lanes_narrow = _tile_intrinsic(2, 1)
tile_one_lane_half = _tile_intrinsic(1, 1, VECTOR_BYTES // 2)
tile_two_lanes_half = _tile_intrinsic(2, 1, VECTOR_BYTES // 2)
tile_four_lanes_half = _tile_intrinsic(4, 1, VECTOR_BYTES // 2)

WIDE, NARROW, HALF = 0, 1, 2
"""The tiles' widths: two 64-byte vectors of columns (one for four lanes), one vector, half a vector. Products
narrower than a wide tile (a convolution of 16 or 8 output features) take the narrower ones: their columns one row
at a time took 23 times BLAS's time ((8192, 27) @ (27, 16): 1.28 vs 0.055 ms)."""


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _tile_at(a, panel, out, i, j, p0, p1, accumulate, width, kind):
    """The tile of ``width`` lanes and ``kind`` (:data:`WIDE`, :data:`NARROW`, :data:`HALF`) for rows ``i:i+4`` of
    ``out``, columns ``j:`` from the packed ``panel`` of B."""
    if kind == HALF:
        if width == 4:
            tile_four_lanes_half(a, panel, out, i, j, p0, p1, accumulate)
        elif width == 2:
            tile_two_lanes_half(a, panel, out, i, j, p0, p1, accumulate)
        else:
            tile_one_lane_half(a, panel, out, i, j, p0, p1, accumulate)
    elif width == 4:
        tile_four_lanes(a, panel, out, i, j, p0, p1, accumulate)
    elif width == 2:
        if kind == NARROW:
            tile_two_lanes_narrow(a, panel, out, i, j, p0, p1, accumulate)
        else:
            tile_two_lanes(a, panel, out, i, j, p0, p1, accumulate)
    elif kind == NARROW:
        tile_one_lane_narrow(a, panel, out, i, j, p0, p1, accumulate)
    else:
        tile_one_lane(a, panel, out, i, j, p0, p1, accumulate)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _strip(a, b, out, row0, rows_end, col0, columns, bounds, width, kind, panel):
    """The whole row blocks of columns ``col0:col0+columns`` in tiles of ``kind`` (B's columns packed into
    ``panel`` first: its rows contiguous, not a row of B apart, which maps them all to a few cache sets when N is a
    large power of two; read by every block of rows in turn from the cache)."""
    for p in range(bounds[0], bounds[bounds.size - 1]):
        for c in range(columns):
            panel[p, c] = b[p, col0 + c]
    for i in range(row0, rows_end, TILE_ROWS):
        for c in range(bounds.size - 1):
            _tile_at(a, panel, out, i, col0, bounds[c], bounds[c + 1], c > 0, width, kind)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _add_lanes(l0, l1, l2, l3, width):
    if width == 4:
        return (l0 + l1) + (l2 + l3)
    if width == 2:
        return l0 + l1
    return l0


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _element(a, b, out, i, j, p0, p1, accumulate, width):
    """One element of :func:`lane_product` over ``[p0, p1)``: lane ``p mod width`` for term ``p``."""
    zero = a.dtype.type(0)
    l0, l1, l2, l3 = zero, zero, zero, zero
    for p in range(p0, p1):
        lane = (p - p0) % width
        if lane == 0:
            l0 = fused_multiply_add(a[i, p], b[p, j], l0)
        elif lane == 1:
            l1 = fused_multiply_add(a[i, p], b[p, j], l1)
        elif lane == 2:
            l2 = fused_multiply_add(a[i, p], b[p, j], l2)
        else:
            l3 = fused_multiply_add(a[i, p], b[p, j], l3)
    total = _add_lanes(l0, l1, l2, l3, width)
    out[i, j] = total + out[i, j] if accumulate else total


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _row_lanes(a, b, out, i, col0, col1, bounds, width, sums):
    """``out[i, col0:col1]`` as :func:`_element` computes each of them with ``width`` lanes, chunk by chunk, the
    loop over columns innermost so that it vectorizes (``sums``: scratch of at least ``(4, col1 - col0)``)."""
    zero = a.dtype.type(0)
    count = col1 - col0
    for c in range(bounds.size - 1):
        p0 = bounds[c]
        for lane in range(width):
            for j in range(count):
                sums[lane, j] = zero
        for p in range(p0, bounds[c + 1]):
            x, lanes = a[i, p], sums[(p - p0) % width]
            for j in range(count):
                lanes[j] = fused_multiply_add(x, b[p, col0 + j], lanes[j])
        for j in range(count):
            total = _add_lanes(sums[0, j], sums[1, j], sums[2, j], sums[3, j], width)
            out[i, col0 + j] = total if c == 0 else total + out[i, col0 + j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _bounded_lanes(a, b, out, row0, row1, col0, col1, bounds, width):
    """``out[row0:row1, col0:col1]`` from the terms ``p`` in ``[bounds[0], bounds[-1])``, chunk by chunk: chunk ``c``
    (``[bounds[c], bounds[c + 1])``, not empty, a multiple of ``width`` long) summed in ``width`` lanes (term ``p``
    in lane ``(p - bounds[c]) mod width``, each lane a fused chain from zero, lanes added as :func:`_add_lanes`
    adds them), the first chunk's sum stored, each later one's added to the sum before it."""
    stop = bounds[bounds.size - 1]
    lanes = VECTOR_BYTES // a.itemsize
    wide = (2 if width <= 2 else 1) * lanes  # (as the tiles above were made: 8 or 16 accumulators in all)
    rows_end = row0 + (row1 - row0) // TILE_ROWS * TILE_ROWS
    cols_end = col0
    if rows_end > row0:  # (else every element is an edge element, below)
        panel = np.empty((stop, wide), a.dtype)
        while col1 - cols_end >= wide:
            _strip(a, b, out, row0, rows_end, cols_end, wide, bounds, width, WIDE, panel)
            cols_end += wide
        if width <= 2 and col1 - cols_end >= lanes:
            _strip(a, b, out, row0, rows_end, cols_end, lanes, bounds, width, NARROW, panel)
            cols_end += lanes
        if col1 - cols_end >= lanes // 2:
            _strip(a, b, out, row0, rows_end, cols_end, lanes // 2, bounds, width, HALF, panel)
            cols_end += lanes // 2
    # (the edges a row at a time, the loop over columns innermost: it vectorizes; an element at a time, 4 lanes of
    # a (8, 2048) @ (2048, 10) product took 0.8 ms)
    sums = np.empty((4, col1 - col0), a.dtype)
    for i in range(row0, row1):
        first = cols_end if i < rows_end else col0
        if first < col1:
            _row_lanes(a, b, out, i, first, col1, bounds, width, sums)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def lane_product(a, b, out, row0, row1, col0, col1, chunk, width):
    """``out[row0:row1, col0:col1] = a[row0:row1] @ b[:, col0:col1]`` for C-contiguous 2-D ``a (M, K)``, ``b (K,
    N)``, ``out (M, N)`` of one float type, in YNNPACK's order for ``width`` (1, 2 or 4) lanes of ``K``: term ``p``
    of the first ``K - K mod width`` in lane ``p mod width``, each lane a fused multiply-add chain from zero, lanes
    added as ``l0``, ``l0 + l1`` or ``(l0 + l1) + (l2 + l3)``, in chunks of ``chunk`` terms (0: one chunk), each
    chunk's sum added to the sum before it; the last ``K mod width`` terms as one more such sum (each lane ``0 + x
    * y``), added to the rest. ``K = 0`` gives zeros."""
    k = a.shape[1]
    whole = k - k % width
    step = chunk if chunk > 0 else max(whole, 1)
    if k == 0:
        for i in range(row0, row1):
            for j in range(col0, col1):
                out[i, j] = a.dtype.type(0)
        return
    if whole > 0:
        count = (whole + step - 1) // step
        bounds = np.empty(count + 1, np.int64)
        for c in range(count):
            bounds[c] = c * step
        bounds[count] = whole
        _bounded_lanes(a, b, out, row0, row1, col0, col1, bounds, width)
    if whole < k:
        for i in range(row0, row1):
            for j in range(col0, col1):
                _element(a, b, out, i, j, whole, k, whole > 0, width)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def chunked_chain_product(a, b, out, bounds):
    """``out = a[:, s:e] @ b[s:e]`` (``s, e = bounds[0], bounds[-1]``; C-contiguous 2-D operands of one float type)
    with every element summed chunk by chunk: chunk ``c`` (``[bounds[c], bounds[c + 1])``, not empty) one fused
    multiply-add chain from zero, the first chunk's sum stored, each later one's added to the sum before it
    (:mod:`lowering.kernels.eigen_dots`' order, whose chunks are not all one length)."""
    _bounded_lanes(a, b, out, 0, a.shape[0], 0, b.shape[1], bounds, 1)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def chain_product(a, b, out, row0, row1, col0, col1, chunk):
    """:func:`lane_product` with one lane: every element one fused multiply-add chain over ``K``."""
    lane_product(a, b, out, row0, row1, col0, col1, chunk, 1)
