"""Compiled row-wise reductions for the NumPy kernels where NumPy's own are slow: the maximum and minimum of
each row of a C-ordered f32/f64 matrix with short rows (a softmax's row maximum over attention scores).

NumPy's ``np.maximum.reduce(x, axis=-1)`` pays a fixed cost per row on top of its vectorized loop: over
rows of 128 f32 it took 0.78 ns per element, 3x its row sums (measured: (2048, 128) 204 us, (1024, 256)
112 us, (256, 1024) 40 us). :func:`row_extrema` keeps 16 running maxima (minima) per row, one per lane of
a vector, combined element-wise: LLVM vectorizes that loop with compares and blends (no fast-math flags),
so every result is one of the row's elements, exactly as NumPy's. Rows holding a NaN are flagged by a
second pass (:func:`nan_rows`; one pass doing both did not vectorize: 2x slower) and recomputed with
NumPy, whose NaN (payload and sign) they then keep. Measured with the NaN pass: (2048, 128) 75 us,
(1024, 256) 79 us, (512, 512) 77 us, (256, 1024) 74 us, (8192, 256) 900 vs NumPy's 990 us -- faster than NumPy up to rows of 256 elements
(:data:`lowering.kernels.reduction.ROW_EXTREMA_MAX`). Inputs of at least :data:`PARALLEL_ELEMENTS` elements
run in one piece of rows per CPU on numba's threads, at any row length (attention's (8192, 256) row maximum:
attention 5.59-5.69 -> 4.88-5.08 ms, MLP's (256, 1024): MLP vs NumPy by hand 1.01-1.02x -> 0.97-0.99x, in two
alternating benchmark runs each).
The sign of a zero result is left to the caller's fix, as for NumPy's result (either zero may come back).
"""

from __future__ import annotations

import numba
import numpy as np

from .loop_runtime import mxcsr, set_mxcsr
from .workers import caller_mxcsr, even_bounds, numba_threads_available

_LANES = 16


@numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def row_extrema(x, out, minimum):
    """``out[r]`` = the maximum (``minimum`` False) or the minimum of row ``r`` of the 2-d C-ordered ``x`` (rows
    of at least one element), comparing with ``>`` (``<``): NaNs are skipped, not propagated (see the
    module doc)."""
    rows, n = x.shape
    lanes = np.empty(_LANES, x.dtype)
    for r in range(rows):
        row = x[r]
        if n >= _LANES:
            for k in range(_LANES):
                lanes[k] = row[k]
            full = n // _LANES * _LANES
            for j in range(_LANES, full, _LANES):
                if minimum:
                    for k in range(_LANES):
                        v = row[j + k]
                        lanes[k] = v if v < lanes[k] else lanes[k]
                else:
                    for k in range(_LANES):
                        v = row[j + k]
                        lanes[k] = v if v > lanes[k] else lanes[k]
            m = lanes[0]
            for k in range(1, _LANES):
                v = lanes[k]
                m = (v if v < m else m) if minimum else (v if v > m else m)
            start = full
        else:
            m = row[0]
            start = 1
        for j in range(start, n):
            v = row[j]
            m = (v if v < m else m) if minimum else (v if v > m else m)
        out[r] = m


@numba.njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def nan_rows(x, flags):
    """``flags[r]`` = whether row ``r`` of the 2-d ``x`` holds a NaN; returns whether any does."""
    rows, n = x.shape
    found = False
    for r in range(rows):
        row = x[r]
        bad = False
        for j in range(n):
            bad |= row[j] != row[j]
        flags[r] = bad
        found |= bad
    return found


@numba.njit(parallel=True, nogil=True, cache=True)
def row_extrema_pieces(x, out, flags, minimum, bounds, csr):
    """:func:`row_extrema` and :func:`nan_rows` for the rows ``bounds[p]`` of every piece ``p`` at once on
    numba's threads, each inside the caller's MXCSR ``csr`` (under DAZ a comparison reads a denormal as zero,
    as NumPy's on the caller's thread does). Returns whether any row holds a NaN."""
    found = np.zeros(bounds.shape[0], np.bool_)
    for piece in numba.prange(bounds.shape[0]):
        saved = mxcsr()
        set_mxcsr(csr)
        first, stop = bounds[piece, 0], bounds[piece, 1]
        row_extrema(x[first:stop], out[first:stop], minimum)
        found[piece] = nan_rows(x[first:stop], flags[first:stop])
        set_mxcsr(saved)
    return found.any()


PARALLEL_ELEMENTS = 1 << 17
"""Row reductions over at least this many elements run in one piece of rows per CPU where numba's threads poll
(:func:`lowering.workers.numba_threads_available`)."""


def row_extrema_of(x: np.ndarray, ufunc, workers: int = 1) -> np.ndarray:
    """``ufunc.reduce(x, axis=-1)`` for ``np.maximum`` or ``np.minimum`` and a C-ordered f32/f64 ``x`` whose
    rows have at least one element: the same values (NaN rows computed by NumPy itself, zero signs as NumPy
    may return them). Large inputs run in ``workers`` pieces of rows at once (:func:`row_extrema_pieces`)."""
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty(rows.shape[0], x.dtype)
    flags = np.empty(rows.shape[0], np.bool_)
    if parallel_rows(x.size, rows.shape[0], workers):
        bounds = np.array(even_bounds(rows.shape[0], workers), np.int64)
        found = row_extrema_pieces(rows, out, flags, ufunc is np.minimum, bounds, caller_mxcsr())
    else:
        row_extrema(rows, out, ufunc is np.minimum)
        found = nan_rows(rows, flags)
    if found:
        out[flags] = ufunc.reduce(rows[flags], axis=-1)
    return out.reshape(x.shape[:-1])


def parallel_rows(size: int, rows: int, workers: int) -> bool:
    """Whether a row reduction of ``size`` elements in ``rows`` rows runs in pieces on ``workers`` CPUs."""
    return workers > 1 and rows >= workers and size >= PARALLEL_ELEMENTS and numba_threads_available()
