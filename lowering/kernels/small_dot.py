"""Small f32/f64 matrix products, summed in the order XLA CPU sums them: one definition.

XLA CPU (jax 0.10.2; its dot runtime for small products) accumulates each output element of a small f32
product with fused multiply-adds, starting from zero, in one of two orders. Measured against jax.jit on a
2-core AMD EPYC VM with AVX-512, on random normal operands, every element of every sample equal
(``tests/test_linalg.py::test_small_dots_sum_as_xla_cpu``, ``test_small_dot_zero_signs_as_xla_cpu``):

* **one chain**: ``acc = fma(a[i, p], b[p, j], acc)`` for ``p = 0 .. K-1`` -- vector-matrix products
  (``M = 1``, but see below for their last columns), and products with ``N >= 17`` (``K`` up to 257);
* **four lanes** (f32 only): term ``p < K - K mod 4`` goes to lane ``p mod 4`` (each lane a chain from zero), and
  the lanes are added as ``(l0 + l1) + (l2 + l3)``; the last ``K mod 4`` terms are rounded products added in order
  (from the first), their sum added last -- ``M >= 2``, ``2 <= N <= 8`` and ``K >= 8``; ``9 <= N <= 16`` and
  ``K >= 4`` except ``K = 5, 6, 9, 10, 13, 17`` (one chain). Measured: 286 random shapes (``M`` 2..39, ``N``
  2..16, ``K`` 2..256) bitwise, and a table of ``M`` in 2..16, ``N`` in 2..16, ``K`` in 2..19.

f64 products (with ``jax_enable_x64``) are one chain in XLA wherever measured except Eigen's edge tiles: equal for
``(M, K, N)`` = (1, 7, 2), (1, 7, 3), (1, 16, 8), (8, 8, 8), (16, 16, 16), (4, 32, 16), (3, 100, 5), (32, 32, 32),
(64, 64, 64), (4, 64, 128), (16, 256, 17); not for (4, 8, 4), (7, 7, 7), (2, 12, 3) (no lane model matched).

Vector-matrix products (``M = 1``) are computed in groups of 32 bytes of columns (8 f32, 4 f64), whose chains
start from zero as above; the last ``r = N mod 8`` (f32; ``N mod 4`` f64) columns are computed apart: each is a
chain that starts from its first product (``a[0] * b[0, j]``), except a lone last column after whole groups
(``r = 1``) and column 0 of a two-column product with ``K >= 3``, which add the rounded products of their first 8
terms in order (no FMA) and go on with fused multiply-adds (measured for r = 1 .. 7 after 1, 2, 4, 7 and 12 groups).
Where a chain starts shows in the sign of a zero result: ``[-1, -1] @ zeros((2, 2))`` is ``[-0, -0]``. A
contraction of length 1 is a plain product (XLA rewrites it into a multiply).

A vector dot (``M = N = 1``, any batch) with ``K > 32`` is no dot in XLA: its simplifier makes it
``reduce(multiply(a, b))`` (products rounded, not fused), and its CPU tree-reduction rewriter sums a reduced
dimension longer than 32 as a ``reduce_window`` of windows of 32 (stride 32, padding split evenly, the smaller
half before), each window a sum from zero in order, then reduces the window sums again the same way until at
most 32 are left, added in order from zero (**tree**; measured bitwise for f32, f64 and f16 (computed in f32),
batch 1 and 3, every ``K`` in 33..79 and 100 to 3,000 in steps; with 4,096 products or more over all batches
XLA reduces otherwise, not identified). Up to 32 the multiply is fused into the reduce and contracted: the one
chain. So +inf and -inf partial products give NaN above 32 (rounded products; +-inf in one window, or windows
of opposite infinities) and the first overflowing product's sign up to 32.

Inside the while loops XLA CPU compiles whole (``xla_cpu_small_call``, see ``passes/small_loops.py``) its
emitters use 64-byte vectors: the groups of columns of a vector-matrix product are 16 f32 / 8 f64 wide, a
matrix-vector product has 16 / 8 lanes, added by folding halves (:data:`WIDE_VECTORS`; measured for f32 and f64
with ``K`` up to 64, ``N`` up to 33, ``M`` up to 12, zero signs included).

A matrix-vector product (``M >= 2``, ``N = 1``, ``K >= 2``; any batch) is XLA's row-major GEMV emitter
(**row tiles**, ``RowMajorMatrixVectorProductEmitter`` with 32-byte vectors): rows in tiles of 8; each row
accumulates its first ``K - K mod w`` terms in ``w`` lanes (8 f32, 4 f64; term ``p`` in lane ``p mod w``, fused
multiply-adds from zero) and the last ``K mod w`` terms in a scalar chain from zero; the lanes are added as
XLA's vector support library adds them -- AVX-style pairwise ``((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`` when the
tile has as many rows as lanes (f32 whole tiles; f64 a last tile of 4 rows), else halves folded
``((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))`` (f64 ``(l0+l2)+(l1+l3)``) -- and the scalar chain is added last.
Measured bitwise for f32 and f64, ``M`` in 2..20, 100, 1000 and ``K`` in 2..256 (mixed magnitudes), batches 2-4.

Elsewhere in the small range XLA's order was not identified: f32 ``2 <= N <= 8`` with ``K < 8`` (one chain for
``M <= 6, N <= 7``; four lanes for ``N = 8`` and for some ``M >= 8``, by tile), f64 ``M >= 2`` edge tiles, and
vector dots of 4,096 products or more. The one chain is used there too, so the result is still one definition,
the same on every CPU and in every path (the interpreter's dot kernel and compiled loops call
:func:`small_dot`), where BLAS's order would change with the CPU's OpenBLAS kernel. Larger products
(``batch * M * K * N > SMALL_DOT_MAX_MNK`` or ``K > SMALL_DOT_MAX_K``) stay with BLAS, for speed.
"""

from __future__ import annotations

import numba
import numpy as np

from ..loop_runtime import fused_multiply_add

SMALL_CALL = "xla_cpu_small_call"
"""The attribute (unit) the ``xla-small-loops`` pass puts on a dot, max or min inside a while loop XLA CPU compiles
whole (passes/small_loops.py); the kernels read it (defined here, below the passes that write it)."""

SMALL_DOT_MAX_MNK = 1 << 18
"""Products with at most this many multiply-adds (over all batches) use :func:`small_dot`."""

SMALL_DOT_MAX_K = 256
"""... and a contraction of at most this length (longer ones were not measured)."""

ONE_CHAIN, TREE, ROW_TILES, FOUR_LANES = 1, 2, 3, 4

WIDE_VECTORS = 8
"""A flag or-ed into an order: XLA's emitters with 64-byte vectors (inside the while loops XLA CPU compiles whole,
see the module docstring) instead of 32-byte ones."""

GEMV_TILE_ROWS = 8
"""Rows per tile of XLA CPU's row-major matrix-vector emitter (its GEMV tiling factor)."""

TREE_WINDOW = 32
"""XLA CPU's tree-reduction rewriter sums reduced dimensions longer than this in windows of this many."""

TREE_MAX_K = 3000
"""Vector dots (tree order) up to this length use :func:`small_dot` (measured up to 3,000)."""

TREE_MAX_PRODUCTS = 4095
"""... and up to this many products over all batches: XLA CPU reduces 4,096 elements or more otherwise (measured:
batch 124 x K 33 and 2 x 2047 are the tree, 128 x 33, 2 x 2048, 1 x 4095 are not; not identified)."""


def dot_vector_bytes(op) -> int:
    """The vector size XLA CPU computes the dot ``op`` with: 64 bytes inside the while loops it compiles whole
    (marked by the ``xla-small-loops`` pass), else 32."""
    return 64 if SMALL_CALL in op.attributes else 32


def small_dot_order(batch: int, m: int, k: int, n: int, dtype: np.dtype, vector_bytes: int = 32) -> int | None:
    """How :func:`small_dot` sums a ``(batch, m, k) x (batch, k, n)`` product of ``dtype``: ``ONE_CHAIN``,
    ``TREE``, ``ROW_TILES`` or ``FOUR_LANES`` (see the module docstring; with :data:`WIDE_VECTORS` or-ed in for
    ``vector_bytes`` 64, see :func:`dot_vector_bytes`), or None when the product is not a small f32/f64 one
    (BLAS)."""
    order = _order(batch, m, k, n, dtype)
    if vector_bytes == 64 and order in (ONE_CHAIN, ROW_TILES):
        return order | WIDE_VECTORS
    return order


def _order(batch: int, m: int, k: int, n: int, dtype: np.dtype) -> int | None:
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    if m == 1 and n == 1 and TREE_WINDOW < k <= TREE_MAX_K and batch * k <= TREE_MAX_PRODUCTS:
        return TREE
    if k > SMALL_DOT_MAX_K or batch * m * k * n > SMALL_DOT_MAX_MNK:
        return None
    if m >= 2 and n == 1 and k >= 2:
        return ROW_TILES
    if dtype == np.dtype(np.float32) and m >= 2 and 2 <= n <= 16 and _four_lanes(k, n):
        return FOUR_LANES
    return ONE_CHAIN


def _four_lanes(k: int, n: int) -> bool:
    """Whether XLA CPU sums an f32 ``(M >= 2, k) x (k, n)`` product with ``2 <= n <= 16`` in four lanes (measured
    table, module docstring): ``n <= 8`` from ``k = 8`` on; ``n >= 9`` except ``k <= 3``, ``k = 5, 9, 13, 17`` and
    ``k = 6, 10`` (one chain there)."""
    if n <= 8:
        return k >= 8
    return not (k <= 3 or (k % 4 == 1 and k <= 17) or (k % 4 == 2 and k <= 10))


ROUNDED_TERMS = 8
"""The column-by-column part of a vector-matrix product adds the rounded products of this many first terms."""


@numba.njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _single_column(a, b, out, t, i, j, rounded_terms):
    """Column ``j`` of row ``i`` computed on its own: a chain starting from the first product, whose first
    ``rounded_terms`` terms are rounded products added in order, the rest fused multiply-adds."""
    k = a.shape[2]
    s = a[t, i, 0] * b[t, 0, j]
    for p in range(1, k):
        if p < rounded_terms:
            s = s + a[t, i, p] * b[t, p, j]
        else:
            s = fused_multiply_add(a[t, i, p], b[t, p, j], s)
    out[t, i, j] = s


@numba.njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _tree_sum(terms, length):
    """The sum of ``terms[:length]`` as XLA CPU's tree-reduction rewriter has it computed (module docstring):
    windows of :data:`TREE_WINDOW` summed in order from zero (the padding split evenly, the smaller half before),
    again until at most one window is left. ``terms`` is overwritten by the window sums."""
    zero = terms.dtype.type(0)
    while length > TREE_WINDOW:
        windows = (length + TREE_WINDOW - 1) // TREE_WINDOW
        before = (windows * TREE_WINDOW - length) // 2
        for w in range(windows):
            s = zero
            # (window w reads from index w * 32 - before >= w + 17 on for w >= 1: writing terms[w] is safe)
            for p in range(max(0, w * TREE_WINDOW - before), min(length, (w + 1) * TREE_WINDOW - before)):
                s = s + terms[p]
            terms[w] = s
        length = windows
    s = zero
    for p in range(length):
        s = s + terms[p]
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, inline="always")
def _horizontal_sum(lanes, pairwise):
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


@numba.njit(cache=True, error_model="numpy", nogil=True, inline="always")
def small_dot(a, b, out, order):
    """``out[t] = a[t] @ b[t]`` for C-contiguous ``a (batch, M, K)``, ``b (batch, K, N)``, ``out (batch, M, N)``
    of one float type, summed in ``order`` (:data:`ONE_CHAIN`, :data:`TREE`, :data:`ROW_TILES` or
    :data:`FOUR_LANES`) as the module
    docstring describes. The loop over ``N`` is innermost so that it vectorizes; each element's own order is XLA's."""
    batch, m, k = a.shape
    n = b.shape[2]
    zero = a.dtype.type(0)
    vector_bytes = 64 if order & WIDE_VECTORS else 32
    order = order & ~WIDE_VECTORS
    if order == ONE_CHAIN:
        # Columns [0, whole) are chains from zero; the others are computed one by one (_single_column).
        whole = n
        if k == 1:
            whole = 0
        elif m == 1 and n >= 2:
            whole = n - n % (vector_bytes // a.itemsize)
        for t in range(batch):
            for i in range(m):
                for j in range(whole):
                    out[t, i, j] = zero
                for p in range(k):
                    x = a[t, i, p]
                    for j in range(whole):
                        out[t, i, j] = fused_multiply_add(x, b[t, p, j], out[t, i, j])
                for j in range(whole, n):
                    lone = n - whole == 1 and whole > 0
                    rounded = ROUNDED_TERMS if lone or (n == 2 and j == 0 and k >= 3) else 0
                    _single_column(a, b, out, t, i, j, rounded)
        return
    if order == ROW_TILES:
        # A matrix-vector product: XLA's row-major GEMV emitter (module docstring).
        width = vector_bytes // a.itemsize
        vectorized = k - k % width
        whole_tiles = m - m % GEMV_TILE_ROWS
        lanes = np.empty(width, a.dtype)
        for t in range(batch):
            for i in range(m):
                lanes[:] = zero
                for p in range(vectorized):
                    lanes[p % width] = fused_multiply_add(a[t, i, p], b[t, p, 0], lanes[p % width])
                tail = zero
                for p in range(vectorized, k):
                    tail = fused_multiply_add(a[t, i, p], b[t, p, 0], tail)
                tile_rows = GEMV_TILE_ROWS if i < whole_tiles else m % GEMV_TILE_ROWS
                out[t, i, 0] = _horizontal_sum(lanes, tile_rows == width and vector_bytes == 32) + tail
        return
    if order == TREE:
        # A vector dot: rounded products (XLA's multiply), then the tree of windows (_tree_sum).
        terms = np.empty(k, a.dtype)
        for t in range(batch):
            for i in range(m):
                for j in range(n):
                    for p in range(k):
                        terms[p] = a[t, i, p] * b[t, p, j]
                    out[t, i, j] = _tree_sum(terms, k)
        return
    lanes = np.empty((4, n), a.dtype)
    whole = k - k % 4
    for t in range(batch):
        for i in range(m):
            lanes[:] = zero
            for p in range(whole):
                x = a[t, i, p]
                q = p & 3
                for j in range(n):
                    lanes[q, j] = fused_multiply_add(x, b[t, p, j], lanes[q, j])
            for j in range(n):
                out[t, i, j] = (lanes[0, j] + lanes[1, j]) + (lanes[2, j] + lanes[3, j])
            if whole < k:  # the last k mod 4 terms: rounded products added in order, their sum added last
                for j in range(n):
                    rest = a[t, i, whole] * b[t, whole, j]
                    for p in range(whole + 1, k):
                        rest = rest + a[t, i, p] * b[t, p, j]
                    out[t, i, j] = out[t, i, j] + rest


def small_matmul(order: int):
    """The interpreter's ``(batch, m, k) x (batch, k, n)`` matmul by :func:`small_dot` in ``order``."""

    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
        small_dot(a, b, out, order)
        return out

    matmul.__doc__ = f"small_dot in order {order}: XLA CPU's summation order for small products."
    return matmul
