"""Float maxima and minima as XLA CPU runs them in YNNPACK (jax 0.10.2): one definition for the reduction kernel,
fused row reductions, compiled loops and segments.

XLA CPU hands a reduce whose body is ``maximum``/``minimum`` of its two parameters to YNNPACK under the same
conditions as a sum (:mod:`lowering.kernels.ynnpack_sum`: 4,096 elements or more in its operand or result), and
YNNPACK's kernels (``ynnpack/kernels/reduce/min_max.h``) do not follow the IEEE rules XLA's own reduce follows
for NaN and for the sign of a zero. Their max of two vectors is x86's ``maxps(a, b)`` -- ``a > b ? a : b``, so a
NaN in either operand gives ``b`` -- and the final combination with the output is C++'s ``std::max(c, h)`` --
``c < h ? h : c``, so a NaN ``h`` leaves ``c``. Minima alike with ``<``. As measured against jax.jit (every
element of rows, columns, full reductions, long rows cut in tiles, f32 and f64, with NaNs, infinities and zeros
of both signs scattered; ``tests/test_reduction_ynnpack.py``):

* **rows** (the reduced dimensions innermost): one accumulator of 64-byte vector lanes (16 f32, 8 f64) per row,
  starting at the identity (-inf for max), takes ``acc = maxps(acc, v)`` for each consecutive vector ``v`` of the
  row, the last one padded with the identity; the lanes are then halved, ``maxps(low half, high half)``, down to
  one value ``h``, and the output is ``std::max(init, h)``. So a NaN replaces its lane's value and the next
  element of that lane replaces the NaN: a NaN is forgotten unless it is the last element of its lane, and a
  lane ending in NaN wipes the lanes below it at the halving steps; if ``h`` is NaN the output is the init
  value (``jnp.max`` of an array whose last element is NaN is ``-inf``). Zeros: a tie takes the newer value.
* **columns** (reduced dimensions followed by kept ones): per output element, the reduced rows in blocks of 4
  (a short last block repeats its first row), ``acc = maxps(maxps(maxps(r0, r1), r2), r3)``, then
  ``out = maxps(acc, out)`` from the init value: a NaN is always dropped.
* **tiles**: where YNNPACK's scheduler cuts the reduced elements in tiles (as for sums: 128 KiB,
  :func:`lowering.kernels.ynnpack_sum.sum_plan`), each tile is reduced from the identity into a partial result
  and the partials are reduced again the same way into the output.
* **two runs of reduced dimensions** (``axis=(0, 2)``; the ``(2, 4)`` of a 2 x 2 max pool's reshape): the inner run
  reduced by the rows or columns kernel for each index of the outer run in turn, into the output (as for sums).
  Where tiles cut the outer run, not identified (the reduction kernel keeps its own rule).

Values without NaN give the true maximum, so for rows the callers compute that first and re-run only the outputs
whose result is NaN or zero (:func:`needs_ynnpack_rule`, :func:`apply_rule`); column reductions are computed whole
by :func:`columns_extrema` (a max pool after a ReLU has mostly zero outputs)."""

from __future__ import annotations

import numba
import numpy as np

from .ynnpack_sum import COLUMNS, LOOPED_COLUMNS, LOOPED_ROWS, ROWS, sum_plan

VECTOR_BYTES = 64
"""The vectors of YNNPACK's AVX-512 min/max kernels: 16 f32 or 8 f64 lanes."""


def extremum_plan(in_shape, axes, dtype) -> tuple[int, tuple[int, int, int, int, int], int] | None:
    """``(kind, (p, l, m, k, n), tile)`` when XLA CPU reduces the ``axes`` of an operand of ``in_shape`` (f32/f64)
    with YNNPACK's max/min kernels in an order identified here, else None (see the module doc): the operand is
    ``(p, l, m, k, n)`` C-ordered, ``l`` and ``k`` reduced (``l`` is 1 and ``m`` 1 for one run of reduced
    dimensions), and ``kind`` ROWS (``n`` 1: the rows kernel on each ``k``) or COLUMNS (the columns kernel on each
    ``(k, n)``), each ``l`` in turn into the output; ``tile`` the reduced elements (rows) per tile of one run
    (``tile >= k``: one tile). Two runs cut in tiles, and tiles that cut below the first reduced dimension, are not
    identified."""
    plan = sum_plan(tuple(int(d) for d in in_shape), tuple(int(a) for a in axes), dtype, rows_in_turn=False)
    if plan is None:
        return None
    kind, outer, k, n, (tile_outer, extent, inner, size) = plan
    if tile_outer != 1:
        return None
    if kind in (LOOPED_ROWS, LOOPED_COLUMNS):
        p, l, m, looped_tile = outer
        if looped_tile:
            return None
        return (ROWS if kind == LOOPED_ROWS else COLUMNS), (int(p), int(l), int(m), int(k), int(n)), int(k)
    return kind, (int(outer), 1, 1, int(k), int(n)), int(min(size, extent) * inner)


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def _vector_op(a, b, minimum):
    """x86's ``minps(a, b)`` / ``maxps(a, b)`` on one lane: ``a`` if it compares below (above) ``b``, else ``b``."""
    if minimum:
        return a if a < b else b
    return a if a > b else b


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def _scalar_op(c, h, minimum):
    """C++'s ``std::min(c, h)`` / ``std::max(c, h)``: ``h`` if it compares below (above) ``c``, else ``c``."""
    if minimum:
        return h if h < c else c
    return h if c < h else c


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def _lanes(a, start, n, minimum):
    """The lane accumulator of ``a[start:start + n]`` (1-d), halved down to one value (the rows kernel's ``h``)."""
    lanes = VECTOR_BYTES // a.itemsize
    identity = a.dtype.type(np.inf if minimum else -np.inf)
    acc = np.empty(lanes, a.dtype)
    acc[:] = identity
    for s in range(0, n, lanes):
        for lane in range(lanes):
            v = a[start + s + lane] if s + lane < n else identity
            acc[lane] = _vector_op(acc[lane], v, minimum)
    width = lanes
    while width > 1:
        width //= 2
        for lane in range(width):
            acc[lane] = _vector_op(acc[lane], acc[lane + width], minimum)
    return acc[0]


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def row_extremum(a, start, n, minimum, init, tile):
    """YNNPACK's maximum (``minimum`` False) or minimum of the row ``a[start:start + n]`` (1-d f32/f64, ``n >= 1``)
    into the output value ``init``, the row cut in tiles of ``tile`` elements (module doc)."""
    if n <= tile:
        return _scalar_op(init, _lanes(a, start, n, minimum), minimum)
    identity = a.dtype.type(np.inf if minimum else -np.inf)
    count = (n + tile - 1) // tile
    partials = np.empty(count, a.dtype)
    for t in range(count):
        s = t * tile
        partials[t] = _scalar_op(identity, _lanes(a, start + s, min(tile, n - s), minimum), minimum)
    return _scalar_op(init, _lanes(partials, 0, count, minimum), minimum)


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def _column(x, o, first, stop, j, c, minimum):
    """The columns kernel on rows ``first .. stop - 1`` of column ``j`` of block ``o`` of ``x``, into ``c``."""
    for s in range(first, stop, 4):
        acc = x[o, s, j]
        for i in range(1, 4):
            acc = _vector_op(acc, x[o, s + i if s + i < stop else s, j], minimum)
        c = _vector_op(acc, c, minimum)
    return c


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def column_extremum(x, o, j, minimum, init, tile):
    """YNNPACK's maximum or minimum over the rows of column ``j`` of block ``o`` of ``x`` (``(outer, k, n)``)
    into the output value ``init``, the rows cut in tiles of ``tile`` (module doc)."""
    k = x.shape[1]
    if k <= tile:
        return _column(x, o, 0, k, j, init, minimum)
    identity = x.dtype.type(np.inf if minimum else -np.inf)
    count = (k + tile - 1) // tile
    partials = np.empty((1, count, 1), x.dtype)
    for t in range(count):
        partials[0, t, 0] = _column(x, o, t * tile, min(k, (t + 1) * tile), j, identity, minimum)
    return _column(partials, 0, 0, count, 0, init, minimum)


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def extremum(x, i, j, c, minimum, kind, init, tile):
    """YNNPACK's maximum or minimum of output ``(i, j, c)`` of the operand ``x`` as ``(p, l, m, k, n)``
    (:func:`extremum_plan`): each ``x[i, t, j]`` in turn, by the rows (``kind`` ROWS) or columns kernel, into the
    output value, from ``init``."""
    value = init
    for t in range(x.shape[1]):
        if kind == ROWS:
            value = row_extremum(x[i, t, j, :, 0], 0, x.shape[3], minimum, value, tile)
        else:
            value = column_extremum(x[i, t, j:j + 1], 0, c, minimum, value, tile)
    return value


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def apply_rule(x, out, init, minimum, kind, tile):
    """Recompute with YNNPACK's rule each output of ``out`` (flat, ``p * m * n`` values) that is NaN or zero --
    the outputs that may differ from the true extremum computed first (:func:`needs_ynnpack_rule`). ``x`` is the
    operand as ``(p, l, m, k, n)`` (:func:`extremum_plan`)."""
    p, l, m, k, n = x.shape
    for i in range(p):
        for j in range(m):
            for c in range(n):
                v = out[(i * m + j) * n + c]
                if v == v and v != 0:
                    continue
                out[(i * m + j) * n + c] = extremum(x, i, j, c, minimum, kind, init, tile)


@numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def columns_extrema(x, out, init, minimum, tile):
    """Every output of a COLUMNS plan at once (:func:`extremum_plan`): ``out`` (flat, ``p * m * n``) from the
    operand ``x`` as ``(p, l, m, k, n)``, a vector of ``n`` outputs per ``(i, j)`` -- what the reduction kernel
    computes for column reductions (a max pool's reshape: ``(batch * rows, 2, columns, 2, channels)``), where
    computing the true extremum first and re-running its zero outputs (most of them, after a ReLU) cost twice
    as much."""
    p, l, m, k, n = x.shape
    for i in range(p):
        for j in range(m):
            base = (i * m + j) * n
            if k > tile:  # (tiles: one run only, extremum_plan)
                for c in range(n):
                    out[base + c] = extremum(x, i, j, c, minimum, COLUMNS, init, tile)
                continue
            for c in range(n):
                out[base + c] = init
            for t in range(l):
                for s in range(0, k, 4):
                    # (blocks of 4 rows, a short block repeating its first row; the four rows' lanes combined
                    # in one loop over the outputs, which LLVM vectorizes: a 2 x 2 max pool of 8 x 32 x 32 x 16,
                    # 84 -> 46 us on one CPU, the same bits)
                    row0 = x[i, t, j, s]
                    row1 = x[i, t, j, s + 1 if s + 1 < k else s]
                    row2 = x[i, t, j, s + 2 if s + 2 < k else s]
                    row3 = x[i, t, j, s + 3 if s + 3 < k else s]
                    for c in range(n):
                        a = _vector_op(_vector_op(_vector_op(row0[c], row1[c], minimum), row2[c], minimum),
                                       row3[c], minimum)
                        out[base + c] = _vector_op(a, out[base + c], minimum)


def needs_ynnpack_rule(result: np.ndarray) -> bool:
    """Whether a true extremum ``result`` has outputs YNNPACK's rule may change: a NaN (a NaN in the reduced
    elements or the init value) or a zero (its sign)."""
    with np.errstate(invalid="ignore"):
        return bool(np.any((result != result) | (result == 0)))
