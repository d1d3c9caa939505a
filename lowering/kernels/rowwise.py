"""Compiled row-wise reductions for the NumPy kernels where NumPy's own are slow: the maximum and minimum of
each row of a C-ordered f32/f64 matrix. (Float sums are XLA CPU's, :mod:`lowering.kernels.tree_sum`.)

NumPy's ``np.maximum.reduce(x, axis=-1)`` pays a fixed cost per row on top of its vectorized loop: over
rows of 128 f32 it took 0.78 ns per element, 3x its row sums (measured: (2048, 128) 204 us, (1024, 256)
112 us, (256, 1024) 40 us). Each kernel here is a loop over whole vectors written directly in LLVM IR
(:func:`lanes_extremum`), so that it is vectorized whatever LLVM's loop
vectorizer makes of the scalar form (it did not vectorize a compare-and-select reduction, nor one keeping
16 running maxima in a small array well: 0.24 ns per element).

* Maximum (minimum): 16 running maxima per row, one per lane of a vector, each replaced by an element that
  compares greater (less) -- compares and blends, no fast-math, so every result is one of the row's
  elements, as NumPy's -- then the lanes halved in a tree. NaNs are flagged in the same pass and rows
  holding one are recomputed with NumPy, whose NaN (payload and sign) they then keep; a zero result gets
  XLA's sign (-0 < +0) in a pass of its own (:func:`zero_sign`). Measured, one
  CPU, f32 (previous scalar-lane kernel + NaN pass / this / NumPy, us): (256, 1024) 89 / 14 / 48,
  (2048, 128) 81 / 15 / 217, (8192, 256) 918 / 318 / 1034.

numba's on-disk cache of these functions checks this file only: they inline the MXCSR intrinsics of
:mod:`lowering.runtime.loop_runtime`, which must keep their meaning (a changed one needs this file changed too).

Inputs of at least :data:`PARALLEL_ELEMENTS` elements run in one piece of rows per CPU on numba's threads,
each in the caller's MXCSR.
"""

from __future__ import annotations

import functools
import math

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..runtime.loop_runtime import mxcsr, set_mxcsr
from ..runtime.workers import even_bounds, numba_threads_available

_LANES = 16
"""Running maxima (minima) per row: one AVX-512 vector of f32 (two of f64)."""

_i32, _i64 = ir.IntType(32), ir.IntType(64)


def _float_vector(a) -> bool:
    """Whether the numba type ``a`` is a 1-d C-ordered f32/f64 array (what the intrinsics read)."""
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype in (types.float32,
                                                                                        types.float64)


def _vector_loader(builder, base, vector, align):
    """``load(index)``: the vector of ``base[index:index + lanes]`` (unaligned)."""
    def load(index):
        value = builder.load(builder.bitcast(builder.gep(base, [index]), vector.as_pointer()))
        value.align = align
        return value
    return load


@intrinsic
def lanes_extremum(typingctx, a, start, count, minimum):
    """``(extremum, any NaN)`` of ``a[start:start + count]`` (1-d C-ordered f32/f64; ``count`` a multiple of 16,
    at least 16): 16 lanes, each keeping the first of its elements (``k mod 16``) that nothing later compares
    greater than (``minimum`` False) or less than, then halved in a tree (the lower lane kept unless the
    upper one compares greater/less). NaNs are skipped, and flagged."""
    if not (_float_vector(a) and start == count == types.int64 and minimum == types.boolean):
        return None
    real = ir.FloatType() if a.dtype == types.float32 else ir.DoubleType()
    vector = ir.VectorType(real, _LANES)

    def codegen(context, builder, signature, args):
        array, start, count, minimum = args
        view = context.make_array(signature.args[0])(context, builder, array)
        load = _vector_loader(builder, builder.gep(view.data, [start]), vector, a.dtype.bitwidth // 8)

        def replaces(new, old):
            return builder.select(minimum, builder.fcmp_ordered("<", new, old), builder.fcmp_ordered(">", new, old))

        best = cgutils.alloca_once(builder, vector)
        nan = cgutils.alloca_once(builder, ir.VectorType(ir.IntType(1), _LANES))
        first = load(ir.Constant(_i64, 0))
        builder.store(first, best)
        builder.store(builder.fcmp_unordered("uno", first, first), nan)
        chunks = builder.sdiv(count, ir.Constant(_i64, _LANES))
        with cgutils.for_range_slice(builder, ir.Constant(_i64, 1), chunks, ir.Constant(_i64, 1)) as (chunk, _):
            value = load(builder.mul(chunk, ir.Constant(_i64, _LANES)))
            old = builder.load(best)
            builder.store(builder.select(replaces(value, old), value, old), best)
            builder.store(builder.or_(builder.load(nan), builder.fcmp_unordered("uno", value, value)), nan)
        lanes, width = builder.load(best), _LANES
        while width > 1:  # lane k against lane k + width / 2
            half = width // 2
            low = builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(_i32, half), list(range(half))))
            high = builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(_i32, half),
                                                                    list(range(half, width))))
            lanes, width = builder.select(replaces(high, low), high, low), half
        extremum = builder.extract_element(lanes, ir.Constant(_i32, 0))
        flags = builder.bitcast(builder.load(nan), ir.IntType(_LANES))
        any_nan = builder.icmp_unsigned("!=", flags, ir.Constant(ir.IntType(_LANES), 0))
        return context.make_tuple(builder, signature.return_type, [extremum, any_nan])

    return types.Tuple((a.dtype, types.boolean))(a, types.int64, types.int64, types.boolean), codegen


@numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, forceinline=True)
def row_extremum(a, start, n, minimum):
    """``(extremum, any NaN)`` of the row ``a[start:start + n]`` (1-d C-ordered f32/f64, ``n >= 1``): its
    maximum (``minimum`` False) or minimum, NaNs skipped (see the module doc), and whether it holds a NaN. A
    zero result may have either sign (:func:`zero_sign` gives XLA's)."""
    full = n // _LANES * _LANES
    if full:
        m, bad = lanes_extremum(a, start, full, minimum)
    else:
        m = a[start]
        bad = m != m
    for j in range(start + max(full, 1), start + n):
        v = a[j]
        bad |= v != v
        m = (v if v < m else m) if minimum else (v if v > m else m)
    return m, bad


@numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def zero_sign(a, start, n, m, minimum):
    """The zero ``m``, extremum of the row ``a[start:start + n]`` (:func:`row_extremum`), with XLA's sign, which
    orders -0 < +0: a maximum is +0 if the row holds a +0, a minimum -0 if it holds a -0 (the magnitude is
    kept: under DAZ a denormal compares as a zero)."""
    if (math.copysign(1.0, m) < 0) == minimum:
        return m  # the sign XLA prefers: the row holds such a zero
    for j in range(start, start + n):
        v = a[j]
        if v == 0 and (math.copysign(1.0, v) < 0) == minimum:
            return -abs(m) if minimum else abs(m)
    return abs(m) if minimum else -abs(m)


@numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def row_extrema(x, out, flags, minimum):
    """``out[r], flags[r]`` = :func:`row_extremum` of row ``r`` of the 2-d C-ordered ``x`` (rows of at least one
    element), zeros with XLA's sign (:func:`zero_sign`); returns whether any row holds a NaN."""
    rows, n = x.shape
    flat = x.ravel()
    found = False
    for r in range(rows):
        m, bad = row_extremum(flat, r * n, n, minimum)
        out[r] = m
        flags[r] = bad
        found |= bad
    for r in range(rows):  # (a pass of its own: in the loop above, the check slowed rows of 128 down 2x)
        if out[r] == 0:
            out[r] = zero_sign(flat, r * n, n, out[r], minimum)
    return found


@numba.njit(parallel=True, nogil=True, cache=True)
def row_extrema_pieces(x, out, flags, minimum, bounds):
    """:func:`row_extrema` for the rows ``bounds[p]`` of every piece ``p`` at once on numba's threads, each
    inside the caller's MXCSR (under DAZ a comparison reads a denormal as zero, as NumPy's on the
    caller's thread does). Returns whether any row holds a NaN."""
    found = np.zeros(bounds.shape[0], np.bool_)
    csr = mxcsr()  # (outside the parallel loop: read on the calling thread)
    for piece in numba.prange(bounds.shape[0]):
        saved = mxcsr()
        set_mxcsr(csr)
        first, stop = bounds[piece, 0], bounds[piece, 1]
        found[piece] = row_extrema(x[first:stop], out[first:stop], flags[first:stop], minimum)
        set_mxcsr(saved)
    return found.any()


PARALLEL_ELEMENTS = 1 << 17
"""Row reductions over at least this many elements run in one piece of rows per CPU where numba's threads poll
(:func:`lowering.runtime.workers.numba_threads_available`). On its own a (256, 1024) f32 row maximum is faster in one
piece (13-19 us against 19-22; its sum is not: 35-41 against 23-25), but in a program its input usually comes
from pieces of rows that the same CPUs computed and hold in their caches: in the MLP, the row maximum and the
exponentials after it took 93 and 92-102 us in pieces, against 91-92 and 158-173 us with the maximum in one
piece (the next loop's pieces fetch their rows from the other CPU's cache)."""


def row_extrema_of(x: np.ndarray, ufunc, workers: int = 1) -> np.ndarray:
    """``ufunc.reduce(x, axis=-1)`` for ``np.maximum`` or ``np.minimum`` and a C-ordered f32/f64 ``x`` whose
    rows have at least one element: the same values (NaN rows computed by NumPy itself), zeros with XLA's sign
    (:func:`row_extrema`). Large inputs run in ``workers`` pieces of rows at once (:func:`row_extrema_pieces`)."""
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty(rows.shape[0], x.dtype)
    flags = np.empty(rows.shape[0], np.bool_)
    if parallel_rows(x.size, rows.shape[0], workers):
        found = row_extrema_pieces(rows, out, flags, ufunc is np.minimum, _bounds(rows.shape[0], workers))
    else:
        found = row_extrema(rows, out, flags, ufunc is np.minimum)
    if found:
        out[flags] = ufunc.reduce(rows[flags], axis=-1)
    return out.reshape(x.shape[:-1])


@functools.lru_cache(maxsize=256)
def _bounds(rows: int, workers: int) -> np.ndarray:
    """The pieces' rows, (start, stop) per piece (kept per shape: in a program, every small NumPy call after
    a large product costs microseconds)."""
    bounds = np.array(even_bounds(rows, workers), np.int64)
    bounds.flags.writeable = False
    return bounds


def parallel_rows(size: int, rows: int, workers: int) -> bool:
    """Whether a row reduction of ``size`` elements in ``rows`` rows runs in pieces on ``workers`` CPUs."""
    return workers > 1 and rows >= workers and size >= PARALLEL_ELEMENTS and numba_threads_available()
