"""Float sums in XLA CPU's order where YNNPACK does not compute them: one definition.

XLA CPU (jax 0.10.2) rewrites a reduce (one operand, any body) that has a reduced dimension longer than
:data:`TREE_WINDOW` elements (``TreeReductionRewriter``, window 32): into a ``reduce-window`` whose window is
``min(n, 32)`` elements long (stride the same) in every reduced dimension ``n`` and 1 in the kept ones, padded
``SAME`` (the padding of each dimension split evenly, the smaller half before), followed by the same reduce of the
window results; the new reduce is rewritten again until no reduced dimension is longer than 32. Both use the
reduce's initial value: each window's result is ``init`` plus its elements, and so is the last reduce's (with
``init = 0``, jax's sums, the windows' sums start from +0; a nonzero ``init`` is added once per window and once
more at the end, as XLA does). XLA's loops add the elements of a window (and those of the last reduce) one at a
time in row-major order of the reduced dimensions, padding skipped (:func:`window_sum`, :func:`nd_window_sum`).

Measured against ``jax.jit`` (f32 and f64, mixed magnitudes, on the 2-core AMD EPYC VM with AVX-512):
* 1-d sums, and sums over one dimension of any rank (rows, columns, middle dimensions; dimensions of one
  element anywhere): every result equal -- 192 random shapes of up to 4,095 elements, 1-d sizes 2..4,000;
* sums over several dimensions: 94 of 108 random shapes equal; full 2-d sums of an array read as it is in XLA's
  vector lanes (:func:`plain_sum_lanes`, every shape up to 32 x 8). Not reproduced (results differ in the last
  bits where XLA's LLVM loop vectorizer reassociates the sum, a choice of its cost model): other reduces without rewrite
  whose innermost reduced dimension has at most 8 elements and whose outer reduced extent is 2, 4, 8, 16, 20, 31,
  ... (measured: the rows' sums then kept as vector lanes, e.g. ``jnp.sum`` of ``(4, 3)`` is ``(r0 + r2) +
  (r1 + r3)``, of ``(16, 2)`` rows ``r`` and ``r + 8`` in one lane, 8 lanes halved; ``(3, n)``, ``(5, n)``,
  ``(6, 2)``, ``(12, 2)`` and every inner dimension of 9 or more are in order). Full 2-d f32 sums with a
  dimension over 32 are XLA's windows and lanes (:func:`grid_sum`: the windows' sums of ``(50, 40)`` or
  ``(33, 33)`` in 2 lanes).

Sums of at least 4,096 elements XLA hands to YNNPACK, summed in its order on the hosts
:mod:`lowering.kernels.ynnpack_sum` was measured on where the order was identified
(:func:`lowering.kernels.reduction.ynnpack_plan` decides; elsewhere :func:`reduced_dims` says how they are
summed); every other float sum is this one, in the
interpreter's reduce kernel (:func:`tree_sums`), the rows of fused loops, the compiled loops and segments, and
the vector dots XLA turns into reduces (:mod:`lowering.kernels.small_dot`).
"""

from __future__ import annotations

import numba
import numpy as np

from ..runtime.loop_runtime import fused_multiply_add
from .ynnpack_sum import MIN_ELEMENTS

TREE_WINDOW = 32
"""XLA CPU's ``TreeReductionRewriter`` window: a reduced dimension longer than this is summed in windows."""


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False, forceinline=True)
def window_sum(a, start, n, init, scratch):
    """``a[start:start + n]`` (1-d, ``n >= 0``) summed as XLA CPU sums one reduced dimension: windows of
    :data:`TREE_WINDOW` (padding split evenly, the smaller half before) each ``init`` plus its elements in
    order, written to ``scratch`` (at least ``ceil(n / 32)`` elements), again until at most 32 are left, then
    ``init`` plus those in order. ``scratch`` may be ``a`` itself with ``start = 0`` (a window's sum is written
    below the elements the later windows read)."""
    source = a
    first = start
    while n > TREE_WINDOW:
        windows = (n + TREE_WINDOW - 1) // TREE_WINDOW
        before = (windows * TREE_WINDOW - n) // 2
        for w in range(windows):
            s = init
            for p in range(max(0, w * TREE_WINDOW - before), min(n, (w + 1) * TREE_WINDOW - before)):
                s = s + source[first + p]
            scratch[w] = s
        source = scratch
        first = 0
        n = windows
    s = init
    for p in range(n):
        s = s + source[first + p]
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def nd_window_sum(a, start, dims, init, work):
    """The ``prod(dims)`` elements from ``a[start]`` on (1-d ``a``; the reduced dimensions ``dims``, an int64
    array, in row-major order) summed as XLA CPU sums them: while a dimension is longer than
    :data:`TREE_WINDOW`, windows ``min(d, 32)`` long in each dimension ``d`` (padding split evenly, the smaller
    half before), each ``init`` plus its elements in row-major order (padding skipped); then ``init`` plus the
    rest in row-major order. ``work`` (2-d, two rows at least :func:`scratch_length` long) holds the window
    sums, the levels alternating between its rows."""
    rank = dims.shape[0]
    if rank == 1:
        return window_sum(a, start, dims[0], init, work[0])
    shape = dims.copy()
    size = np.empty(rank, np.int64)
    windows = np.empty(rank, np.int64)
    before = np.empty(rank, np.int64)
    corner = np.empty(rank, np.int64)
    offset = np.empty(rank, np.int64)
    source = a
    first = start
    level = 0
    while True:
        longest = 0
        for d in range(rank):
            longest = max(longest, shape[d])
        if longest <= TREE_WINDOW:
            break
        count = 1
        inner = 1
        for d in range(rank):
            size[d] = min(shape[d], TREE_WINDOW)
            windows[d] = (shape[d] + size[d] - 1) // size[d]
            before[d] = (windows[d] * size[d] - shape[d]) // 2
            count *= windows[d]
            inner *= size[d]
        target = work[level % 2]
        for w in range(count):
            rest = w
            for d in range(rank - 1, -1, -1):
                corner[d] = (rest % windows[d]) * size[d] - before[d]
                rest //= windows[d]
            s = init
            for q in range(inner):
                rest = q
                inside = True
                flat = 0
                for d in range(rank - 1, -1, -1):
                    offset[d] = corner[d] + rest % size[d]
                    rest //= size[d]
                    inside = inside and 0 <= offset[d] < shape[d]
                if inside:
                    for d in range(rank):
                        flat = flat * shape[d] + offset[d]
                    s = s + source[first + flat]
            target[w] = s
        for d in range(rank):
            shape[d] = windows[d]
        source = target
        first = 0
        level += 1
    total = 1
    for d in range(rank):
        total *= shape[d]
    s = init
    for p in range(total):
        s = s + source[first + p]
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def tree_sums(x, dims, init, out):
    """``out[r]`` = the sum of row ``r`` of the C-ordered 2-d ``x`` (each row the reduced elements of one output in
    row-major order of the reduced dimensions ``dims``, an int64 array) from ``init`` in XLA CPU's order
    (:func:`nd_window_sum`; one reduced dimension: :func:`window_sum`). A window at a time: its adds are a
    chain, but the CPU overlaps the next windows' (measured, f32: 4,095 elements in 1.3 us, 0.32 ns each; the
    windows advanced together, element by element, took as long, and 2.3x as long on 2^20 elements)."""
    rows, k = x.shape
    flat = x.ravel()
    if dims.shape[0] == 1:
        scratch = np.empty(max(1, (k + TREE_WINDOW - 1) // TREE_WINDOW), x.dtype)
        for r in range(rows):
            out[r] = window_sum(flat, r * k, k, init, scratch)
        return
    work = np.empty((2, scratch_length(dims)), x.dtype)
    for r in range(rows):
        out[r] = nd_window_sum(flat, r * k, dims, init, work)


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def column_tree_sums(x, init, out):
    """``out[o, j]`` = the sum over ``i`` of ``x[o, i, j]`` (3-d C-ordered ``x``: one reduced dimension between kept
    ones) from ``init`` in XLA CPU's order (:func:`window_sum` of each column), the columns of a window summed
    together, one vector add per row (a column sum read with the columns' stride would be a chain per column and
    a transposed copy first)."""
    outer, n, inner = x.shape
    windows = max(1, (n + TREE_WINDOW - 1) // TREE_WINDOW)
    one = np.empty((windows, inner), x.dtype)
    two = np.empty((windows, inner), x.dtype)
    for o in range(outer):
        source = x[o]
        length = n
        level = 0
        while length > TREE_WINDOW:
            count = (length + TREE_WINDOW - 1) // TREE_WINDOW
            before = (count * TREE_WINDOW - length) // 2
            target = one if level % 2 == 0 else two
            for w in range(count):
                row = target[w]
                for j in range(inner):
                    row[j] = init
                for i in range(max(0, w * TREE_WINDOW - before), min(length, (w + 1) * TREE_WINDOW - before)):
                    values = source[i]
                    for j in range(inner):
                        row[j] = row[j] + values[j]
            source = target[:count]
            length = count
            level += 1
        result = out[o]
        for j in range(inner):
            result[j] = init
        for i in range(length):
            values = source[i]
            for j in range(inner):
                result[j] = result[j] + values[j]


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def contracted_sums(a, b, init, out, rounded_rows, square, lanes=0, lane_cols=1):
    """``out[r]`` = the sum of ``a[r, i] * b[r, i]`` over ``i`` (C-ordered 2-d ``a``, ``b``: each row the reduced
    elements of one output in row-major order) from ``init``, each step one fused multiply-add, ``acc = fma(a, b,
    acc)``: XLA CPU's sum of a product it fuses into the reduce (no reduced dimension longer than 32, where the
    rewrite above leaves the reduce one loop), LLVM contracting each step
    (:class:`~xla_dialect.internal.MultiplyReduceOp`); the first ``rounded_rows`` rows add rounded products
    instead (:func:`rounded_product_rows`). A ``square`` (``a`` is ``b``: ``x * x``) summed from +0 starts
    ``fma(a0, a0, a1 * a1)``: LLVM drops the +0 and contracts the first product of the first add (measured:
    1-D sums of 2-32 squares, every draw; a sum of two different products fuses the second).

    ``lanes > 0`` (one output: a full sum whose reduced elements are rows of ``lane_cols``): XLA's vectorized
    loop over those rows (:func:`vector_lanes`), :func:`lane_contracted_sum`; the lanes add rounded products
    where ``rounded_rows`` is nonzero, else fused ones."""
    rows, k = a.shape
    if lanes > 0:
        for r in range(rows):
            out[r] = lane_contracted_sum(a[r], b[r], init, lanes, lane_cols, rounded_rows != 0)
        return
    pair = square and k >= 2 and init == 0 and not np.signbit(init)
    for r in range(rows):
        s = init
        if r < rounded_rows:
            for i in range(k):
                s = s + a[r, i] * b[r, i]
        elif pair:
            s = fused_multiply_add(a[r, 0], b[r, 0], a[r, 1] * b[r, 1])
            for i in range(2, k):
                s = fused_multiply_add(a[r, i], b[r, i], s)
        else:
            for i in range(k):
                s = fused_multiply_add(a[r, i], b[r, i], s)
        out[r] = s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def contracted_term_sums(a, b, c, d, init, out):
    """``out[r]`` = the sum of ``a[r, i] * b[r, i] + c[r, i] * d[r, i]`` over ``i`` (C-ordered 2-d operands, each
    row the reduced elements of one output in row-major order) from ``init`` as XLA CPU computes a sum of a
    contracted two-product term it fuses into the reduce's loop (:class:`~xla_dialect.internal.MultiplyAddReduceOp`):
    the loop's adds allow reassociation, so LLVM's x86 backend turns ``acc + fma(a, b, c * d)`` into ``fma(a, b,
    fma(c, d, acc))``; from +0 the first step is the term itself, ``fma(a0, b0, c0 * d0)`` (measured: the
    Rosenbrock sum ``sum(100 * (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)``, 300 of 300 draws, read from XLA's
    optimized LLVM IR)."""
    rows, k = a.shape
    plain = init == 0 and not np.signbit(init)
    for r in range(rows):
        s = init
        start = 0
        if plain and k >= 1:
            s = fused_multiply_add(a[r, 0], b[r, 0], c[r, 0] * d[r, 0])
            start = 1
        for i in range(start, k):
            s = fused_multiply_add(a[r, i], b[r, i], fused_multiply_add(c[r, i], d[r, i], s))
        out[r] = s


def contracted_term_sum_function(shape, axes, acc: np.dtype):
    """``f(a, b, c, d, init)``: :func:`contracted_term_sums` of operands of ``shape`` over ``axes``, an array of
    the kept dimensions' shape."""
    layout = _Layout(shape, axes, acc)

    def contracted(a, b, c, d, init):
        out = np.empty(layout.outputs, layout.acc)
        contracted_term_sums(layout.rows(a), layout.rows(b), layout.rows(c), layout.rows(d), layout.acc.type(init),
                             out)
        return out.reshape(layout.kept_shape)

    return contracted


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False, forceinline=True)
def _start_lanes(lanes, init, like):
    """XLA's vector accumulator: ``lanes`` lanes of ``like``'s type, lane 0 ``init``, the others -0."""
    lane = np.empty(lanes, like.dtype)
    for i in range(lanes):
        lane[i] = -0.0
    lane[0] = init
    return lane


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False, forceinline=True)
def add_lanes_by_halves(lane):
    """LLVM's reduction of a vector accumulator: lane ``i`` plus lane ``i + half``, halving until one is left."""
    half = lane.shape[0] // 2
    while half >= 1:
        for i in range(half):
            lane[i] = lane[i] + lane[i + half]
        half //= 2
    return lane[0]


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def lane_contracted_sum(a, b, init, lanes, cols, rounded):
    """The sum of ``a[i] * b[i]`` (1-d ``a``, ``b``: ``rows`` rows of ``cols`` elements, row-major) from ``init``
    as XLA CPU's vectorized loop over the rows computes it (:func:`vector_lanes`): the first ``rows - rows %
    lanes`` rows in ``lanes`` vector lanes (row ``r`` in lane ``r % lanes``; lane 0 starts from ``init``, the
    others from -0), each row's products added into its lane in order (``rounded``: rounded products, else one
    fused multiply-add each); the lanes then added by halves (lane ``i`` plus lane ``i + lanes / 2``, until one
    is left); the rows after the last whole vector then one fused multiply-add each, in order."""
    rows = a.shape[0] // cols
    vector = rows - rows % lanes
    lane = _start_lanes(lanes, init, a)
    for r in range(vector):
        j = r % lanes
        s = lane[j]
        for c in range(r * cols, (r + 1) * cols):
            if rounded:
                s = s + a[c] * b[c]
            else:
                s = fused_multiply_add(a[c], b[c], s)
        lane[j] = s
    s = add_lanes_by_halves(lane)
    for c in range(vector * cols, rows * cols):
        s = fused_multiply_add(a[c], b[c], s)
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def lane_sum(a, start, rows, cols, init, lanes):
    """The sum of ``a[start:start + rows * cols]`` (``rows`` rows of ``cols`` elements, row-major) from ``init`` as
    XLA CPU's vectorized loop over the rows computes it (:func:`plain_sum_lanes`): the first ``rows - rows %
    lanes`` rows in ``lanes`` vector lanes (row ``r`` in lane ``r % lanes``; lane 0 starts from ``init``, the
    others from -0), each row's elements added into its lane in order; the lanes then added by halves (lane ``i``
    plus lane ``i + lanes / 2``, until one is left); the rows after the last whole vector then in order."""
    vector = rows - rows % lanes
    lane = _start_lanes(lanes, init, a)
    for r in range(vector):
        j = r % lanes
        s = lane[j]
        for c in range(start + r * cols, start + (r + 1) * cols):
            s = s + a[c]
        lane[j] = s
    s = add_lanes_by_halves(lane)
    for c in range(start + vector * cols, start + rows * cols):
        s = s + a[c]
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def rows_in_lanes(a, start, stride, first_row, rows, first_col, cols, init, lanes):
    """``init`` plus the block ``rows x cols`` of the row-major ``a`` (row length ``stride``) at row ``first_row``,
    column ``first_col`` from ``start``, as :func:`lane_sum` adds rows (``lanes`` 0: in row-major order): XLA's
    loop over a block's rows, vectorized or not (:func:`grid_sum`'s windows and last reduce, and the last reduce
    of YNNPACK's windows, :func:`lowering.kernels.reduction.ynnpack_window_plan`)."""
    if lanes == 0:
        s = init
        for r in range(first_row, first_row + rows):
            base = start + r * stride + first_col
            for c in range(base, base + cols):
                s = s + a[c]
        return s
    vector = rows - rows % lanes
    lane = _start_lanes(lanes, init, a)
    for r in range(vector):
        j = r % lanes
        t = lane[j]
        base = start + (first_row + r) * stride + first_col
        for c in range(base, base + cols):
            t = t + a[c]
        lane[j] = t
    s = add_lanes_by_halves(lane)
    for r in range(first_row + vector, first_row + rows):
        base = start + r * stride + first_col
        for c in range(base, base + cols):
            s = s + a[c]
    return s


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def _window_grid(a, start, rows, cols, init, out):
    """One level of XLA CPU's windows of :data:`TREE_WINDOW` over the row-major ``rows x cols`` block of ``a`` from
    ``start`` (:func:`grid_sum`): each window's sum from ``init`` written to ``out`` (row-major over the windows);
    returns the windows' ``(rows, cols)``."""
    size_r = min(rows, TREE_WINDOW)
    size_c = min(cols, TREE_WINDOW)
    count_r = (rows + size_r - 1) // size_r
    count_c = (cols + size_c - 1) // size_c
    before_r = (count_r * size_r - rows) // 2
    before_c = (count_c * size_c - cols) // 2
    split_column = size_c == TREE_WINDOW and cols % TREE_WINDOW == TREE_WINDOW - 1
    lane_rows = size_r == TREE_WINDOW and rows % TREE_WINDOW in (0, TREE_WINDOW - 1) and cols <= 8
    lanes = f32_sum_lanes(TREE_WINDOW - 1 if rows % TREE_WINDOW else TREE_WINDOW, cols) if lane_rows else 0
    for i in range(count_r):
        r0 = max(0, i * size_r - before_r)
        r1 = min(rows, (i + 1) * size_r - before_r)
        for j in range(count_c):
            c0 = max(0, j * size_c - before_c)
            c1 = min(cols, (j + 1) * size_c - before_c)
            if lanes:
                vector = min(r1 - r0, TREE_WINDOW - 1) if rows % TREE_WINDOW else r1 - r0
                s = rows_in_lanes(a, start, cols, r0, vector, c0, c1 - c0, init, lanes)
                s = rows_in_lanes(a, start, cols, r0 + vector, r1 - r0 - vector, c0, c1 - c0, s, 0)
            elif split_column and j < count_c - 1:
                s = rows_in_lanes(a, start, cols, r0, r1 - r0, c0, c1 - c0 - 1, init, 0)
                for r in range(r0, r1):
                    s = s + a[start + r * cols + c1 - 1]
            else:
                s = rows_in_lanes(a, start, cols, r0, r1 - r0, c0, c1 - c0, init, 0)
            out[i * count_c + j] = s
    return count_r, count_c


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def grid_sum(a, start, rows, cols, init, work):
    """The full sum of the row-major ``rows x cols`` f32 block of the 1-d ``a`` from ``start`` (a dimension longer
    than :data:`TREE_WINDOW`) from ``init`` as XLA CPU computes it (:func:`grid_order` says where): the
    rewrite's windows (module docstring) are a fusion of their own that reads the block as a parameter, and so
    is the last reduce of the windows' sums, each vectorized by LLVM as a plain sum is (:func:`f32_sum_lanes`):

    * a window is ``init`` plus its rows in order, except: with ``cols`` of 2..8 and ``rows`` a multiple of 32
      (or one less), each window's rows are vector lanes as a ``(32, cols)`` sum's (:func:`lane_sum`; ``rows =
      32k - 1``: its first 31 rows as a ``(31, cols)`` sum's, the 32nd, where there is one, added after them);
      with ``cols = 32k - 1`` every window but the last column of windows adds its rows without their last
      element, then those last elements in order (the loop over a window's columns is cut where the padding
      check can fail);
    * the windows' sums, ``(rows', cols')`` of them, are summed again the same way while a dimension is longer
      than 32, then as :func:`lane_sum` with the lanes of a plain ``(rows', cols')`` sum (``jnp.sum`` of
      ``(50, 40)``: ``(w00 + w01) + (w10 + w11)``).

    Read from XLA's optimized LLVM IR (``(63, 5)``: 31 rows in 4 lanes, row 32 after; ``(50, 40)``: the
    windows' reduce in 2 lanes) and measured against jax.jit 0.10.2 (f32, mixed magnitudes, the 2-core Intel
    Xeon with AVX-512 that :func:`lowering.kernels.host.measured_host` accepts), a NumPy model of this order:
    every ``(rows, cols)`` with ``rows`` 33..128 x ``cols`` 2..40 and ``cols`` 41..128 x ``rows`` 2..40 under
    4,096 elements (6,922 shapes, 2 draws each) and 34 long shapes such as ``(2, 2047)`` and ``(1300, 3)``
    (3 draws each), every sum equal. ``work``: two rows of at least the first level's window count."""
    source = a
    first = start
    level = 0
    while rows > TREE_WINDOW or cols > TREE_WINDOW:
        target = work[level % 2]
        rows, cols = _window_grid(source, first, rows, cols, init, target)
        source = target
        first = 0
        level += 1
    return rows_in_lanes(source, first, cols, 0, rows, 0, cols, init, f32_sum_lanes(rows, cols))


def grid_work_length(rows: int, cols: int) -> int:
    """The length of each of the two work rows :func:`grid_sum` needs: its first level's window count."""
    return max(1, -(-rows // TREE_WINDOW) * -(-cols // TREE_WINDOW))


def grid_order(shape, axes, dtype) -> bool:
    """Whether XLA CPU sums an operand of ``shape`` over ``axes`` in :func:`grid_sum`'s order: a full f32 sum of a
    2-d operand (dimensions of one element dropped) with a dimension longer than :data:`TREE_WINDOW`, fewer than
    :data:`~lowering.kernels.ynnpack_sum.MIN_ELEMENTS` elements (YNNPACK's otherwise), on the host it was
    measured on (:func:`lowering.kernels.host.measured_host`). Any operand: XLA computes it in a fusion of its
    own before the windows (``jnp.sum(jnp.exp(x))``, ``jnp.sum(x * y)``: measured). Not identified: f64, sums
    over two of more dimensions that keep others, three or more reduced dimensions (:func:`nd_window_sum`'s
    scalar order)."""
    from . import host

    shape = tuple(int(v) for v in shape)
    dims = [shape[d] for d in sorted(int(v) for v in axes) if shape[d] != 1]
    kept = [shape[d] for d in range(len(shape)) if d not in {int(v) for v in axes} and shape[d] != 1]
    return (len(dims) == 2 and not kept and max(dims) > TREE_WINDOW and np.dtype(dtype) == np.float32
            and dims[0] * dims[1] < MIN_ELEMENTS and host.measured_host())

def plain_sum_lanes(shape, axes, dtype) -> int:
    """The vector lanes XLA CPU's loop vectorizer sums a 2-d f32 or f64 array in (``rows x cols``, both reduced,
    the array read as it is: a fusion parameter, no op fused into the reduce), or 0 where it sums in the scalar
    order of :func:`nd_window_sum`. Same loops as :func:`vector_lanes` (the outer loop over the rows vectorized,
    the inner one over a row unrolled), the width the cost model picks for a plain load and add:

    * f32: rows of 2-6 elements in vectors of 8 rows, of 7-8 elements in vectors of 4, from 16 rows on when 8
      rows leave fewer than 4 over (``rows % 8 < 4``), else 4 (8 for rows of 2 at 28-31 rows); under 16 rows only
      a width that divides the rows: 2 rows 2, 4 rows 4, 8 rows 8 (4 for rows of 7-8);
    * f64: vectors of 4 rows (rows of 2-6 elements) or 2 (7-8), from 16 rows on and for 4, 8 and 12 rows; 2 rows 2.

    Measured (jax 0.10.2, the 2-core Intel Xeon VM with AVX-512 that :func:`lowering.kernels.host.measured_host`
    accepts): ``jnp.sum`` of every ``rows`` 2..32 x ``cols`` 1..8, f32 and f64, 6 draws of mixed magnitudes each,
    every result equal to this order (rows of one element, 3, 5-7 and 9-15 rows (f32), 5-7, 9-11 and 13-15 rows
    (f64): the scalar order). The vector IR read for f32 agrees (``<8 x float>``/``<4 x float>`` accumulators, a
    scalar remainder loop). 33 rows or more are cut into windows (:data:`TREE_WINDOW`): not vectorized. Sums of a
    computed value (``jnp.sum(jnp.tanh(x))``) have other widths (measured: rows of 7-8 elements in vectors of 8
    for tanh and exp): 0 here, not reproduced."""
    from . import host

    shape = tuple(int(v) for v in shape)
    if len(shape) != 2 or sorted(int(v) for v in axes) != [0, 1] or not host.measured_host():
        return 0
    rows, cols = shape
    if not (2 <= rows <= TREE_WINDOW and 2 <= cols <= 8):
        return 0
    if np.dtype(dtype) == np.float64:
        width = 4 if cols <= 6 else 2
        return 2 if rows == 2 else width if rows >= 16 or rows in (4, 8, 12) else 0
    if np.dtype(dtype) != np.float32:
        return 0
    return int(f32_sum_lanes(rows, cols))


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)
def f32_sum_lanes(rows, cols):
    """The f32 table of :func:`plain_sum_lanes` (the host check aside): the vector lanes of XLA CPU's loop over a
    ``rows x cols`` f32 fusion parameter it sums whole, 0 for the scalar order (outside ``rows`` 2..32 x ``cols``
    2..8 too). Compiled, so that :func:`grid_sum` reads the same table for its windows and its last reduce."""
    if not (2 <= rows <= TREE_WINDOW and 2 <= cols <= 8):
        return 0
    if rows >= 16:
        if cols >= 7:
            return 4
        if rows % 8 < 4:
            return 8
        return 8 if rows >= 28 and cols == 2 else 4
    if rows == 2:
        return 2
    if rows == 4:
        return 4
    if rows == 8:
        return 8 if cols <= 6 else 4
    return 0


def exp_sum_lanes(shape, axes, dtype) -> int:
    """The vector lanes XLA CPU's loop vectorizer sums ``exp`` of a 2-d f32 array in (``jnp.sum(jnp.exp(a))``,
    ``rows x cols`` both reduced, ``a`` a fusion parameter: the exp fused into the reduce's loop), or 0 for the
    scalar order. Same loops as :func:`plain_sum_lanes` (the outer loop over the rows vectorized, each row's exp
    values added into its lane in order, :func:`lane_sum`), the width the cost model picks for the exp body
    (:func:`f32_exp_sum_lanes`): from 16 rows, 8 lanes when 8 rows leave fewer than 4 over (``rows % 8 < 4``),
    else 4 (8 at 28-31 rows with rows of 2 or of 9 or more elements); under 16 rows only a width that divides
    them: 4 rows 4, 8 rows 8, 2 rows 2 (rows of up to 8 elements); other row counts and rows of one element (a
    1-d sum): the scalar order.

    The exp values are XLA's own (:func:`lowering.kernels.xla_scalar.exp_f32`, as ``jax.jit(jnp.exp)`` gives
    them) except over ``(2, 3)``, ``(2, 5)``, ``(2, 6)``, ``(2, 7)``, where LLVM's odd-width vector exp becomes
    calls of the C library's ``expf`` (XLA's optimized IR; the sums of 200 draws each all equal to 2 lanes of
    libm's ``expf`` values): ``xla-float-rewrites`` marks such an exp of a function argument
    (:data:`lowering.kernels.scalar.GLIBC_EXP_TAIL`), whose kernel then gives ``expf``'s values.

    Measured (jax 0.10.2, the 2-core Intel Xeon VM with AVX-512 that :func:`lowering.kernels.host.measured_host`
    accepts): a NumPy model of this order over ``exp_f32`` values, every ``rows`` 2..32 x ``cols`` 1..32, 4 draws
    each (uniform in [-4, 4) and 2 x standard normal), every sum equal to ``jax.jit`` but those four shapes'.
    Not identified: exp of a computed value (another body: its own widths), f64, sums inside loops."""
    from . import host

    shape = tuple(int(v) for v in shape)
    if (len(shape) != 2 or sorted(int(v) for v in axes) != [0, 1] or np.dtype(dtype) != np.float32
            or not host.measured_host()):
        return 0
    return f32_exp_sum_lanes(*shape)


def f32_exp_sum_lanes(rows: int, cols: int) -> int:
    """The table of :func:`exp_sum_lanes` (the host check aside): 0 outside ``rows`` 2..32 x ``cols`` 2..32."""
    if not (2 <= rows <= TREE_WINDOW and 2 <= cols <= TREE_WINDOW):
        return 0
    if rows >= 16:
        if rows % 8 < 4:
            return 8
        return 8 if rows >= 28 and (cols == 2 or cols >= 9) else 4
    if rows in (4, 8):
        return rows
    return 2 if rows == 2 and cols <= 8 else 0


LANE_BODIES = ("square", "product", "computed_square")
"""The contracted sums :func:`vector_lanes` was measured for: ``x * x`` and ``x * y`` of XLA fusion parameters,
and ``(x - y) ** 2`` of fusion parameters (the subtract in the loop)."""


def vector_lanes(shape, axes, dtype, body: str) -> tuple[int, bool]:
    """``(lanes, rounded)``: how XLA CPU's LLVM loop vectorizer computes the full sum of a product over a 2-d
    operand of ``shape`` (``rows x cols``, both reduced) -- lanes 0: not vectorized (the scalar order of
    :func:`contracted_sums`); else the rows are vector lanes (:func:`lane_contracted_sum`), the lanes adding
    rounded products when ``rounded``.

    Why: XLA's loop emitter writes the sum of a 2-d operand as two nested loops and marks the outer one (over the
    rows) ``llvm.loop.unroll.disable`` (read in the IR XLA dumps, ``XLA_FLAGS=--xla_dump_to``: a 1-d sum is one
    loop without the mark, which LLVM unrolls and sums in order). LLVM unrolls the inner loop over a row, and its
    loop vectorizer turns the outer loop into one vector accumulator (no interleaving: the mark forbids it), its
    lanes reduced by halves at the end, the rows after the last whole vector a scalar loop. Its cost model
    picks the width: under 16 rows only one that divides them (no scalar remainder allowed for so few
    iterations), from 16 rows 8 or 4 by comparing ``vector cost * rows // width + scalar cost * (rows % width)``
    -- costs of the loop body (per ``cols`` and body) not reproduced here but tabled as measured.

    Measured (jax 0.10.2, f32, the 2-core Intel Xeon VM with AVX-512, which :func:`lowering.kernels.host.
    measured_host` accepts): the vector width in the optimized IR of every ``rows`` 2..32 x ``cols`` 2..8 for
    the bodies ``x * x``, ``x * y``, ``(x - y) ** 2`` (:data:`LANE_BODIES`) and the plain ``jnp.sum(x)``; then
    each of those 868 shapes summed 6 times from random operands with mixed magnitudes (and 12 more at 8, 16, 20,
    32 rows): every sum with a width equal to this order, the lanes FMAs for ``x * x`` and ``x * y`` with rows of
    2-4 and rounded products with rows of 5-8 or with ``(x - y) ** 2`` (which the backend contracts is measured,
    not derived). Other bodies, element types, shapes and layouts: 0, the scalar order (not measured; other bodies'
    widths differ: optax's softmax cross-entropy summed over 28-31 rows of 3 classes is 4 lanes, of 10 classes 8;
    a 1-d sum is one loop LLVM unrolls, in order). Not reproduced either: the scalar order of some shapes it
    does not vectorize (``(x - y) ** 2`` over ``(2, 3)``, ``(2, 6)``, ``(5, 6)``, ``(6, 3)``, ``(13, 6)`` and
    ``x * x`` over ``(7, 2)``, ``(13, 4)``, ``(14, 8)``: 1-2 of 3 draws off, as before)."""
    from . import host

    shape = tuple(int(v) for v in shape)
    if (body not in LANE_BODIES or len(shape) != 2 or sorted(int(v) for v in axes) != [0, 1]
            or np.dtype(dtype) != np.float32 or not host.measured_host()):
        return 0, False
    rows, cols = shape
    width = _lane_width(rows, cols, body)
    return width, width > 0 and (body == "computed_square" or cols >= 5)


def _lane_width(rows: int, cols: int, body: str) -> int:
    """The measured vector width of :func:`vector_lanes` (0: not vectorized)."""
    if not (2 <= rows <= TREE_WINDOW and 2 <= cols <= 8):
        return 0
    if rows >= 16:
        if body == "product" and rows in (18, 19) and cols >= 7:
            return 2
        if cols >= 7:
            return 4
        if rows % 8 < 4:
            return 8
        return 8 if rows >= 28 and cols == 2 else 4
    if rows == 2:
        return 2 if body == "square" else 0
    if rows == 4:
        return 4
    if rows == 8:
        return 8 if cols <= 6 or body == "square" else 4
    return 0


def rounded_product_rows(shape, axes, dtype) -> int:
    """How many leading outputs of a contracted sum (:func:`contracted_sums`) of ``dtype`` operands of ``shape``
    over ``axes`` XLA CPU computes with rounded products: where its rows of 5 to 8 elements (the last dimension,
    one kept dimension before it) are unrolled and LLVM vectorizes the loop over the rows, the vector code does
    not contract; the rows after the last whole vector run one by one, contracted. Measured on the AVX-512
    hosts :func:`lowering.kernels.host.measured_host` names (f32 and f64, rows of 6 products for every row
    count 16..129 f32 / 16..79 f64, rows of 5, 7 and 8 products for 14..69 / 14..39 rows, and 2-15 rows of 5-8
    products; each row classified). From 16 rows: f32 vectors of 4 rows, of 8 from 40 rows on for rows of 5 or 6
    products (40-43 fit both); f64 vectors of 4, of 2 for rows of 8 products. Fewer than 16 rows only when whole
    vectors of ``min(8 f32 / 4 f64, the largest power of two <= rows)`` rows cover them (f32 4, 8; f64 4, 8,
    12). Not reproduced: f32 rows of 8 products leave no scalar rows at some counts (18, 19 rows: all vector).
    Rows of 2-4 or 9-32 products, column sums: all contracted. Other layouts and hosts: 0 (all contracted; not
    measured)."""
    from . import host

    shape = tuple(int(v) for v in shape)
    axes = sorted(int(v) for v in axes)
    kept = [shape[d] for d in range(len(shape)) if d not in axes and shape[d] != 1]
    if axes != [len(shape) - 1] or not 5 <= shape[-1] <= 8 or len(kept) != 1 or not host.measured_host():
        return 0
    rows, single, length = kept[0], np.dtype(dtype).itemsize == 4, shape[-1]
    if rows >= 16:
        width = 2 if not single and length == 8 else 8 if single and rows >= 40 and length <= 6 else 4
        return rows - rows % width
    if rows < 4:
        return 0
    width = min(8 if single else 4, 1 << (rows.bit_length() - 1))
    return rows if rows % width == 0 else 0


@numba.njit(cache=True, error_model="numpy", nogil=True, boundscheck=False, forceinline=True)
def scratch_length(dims) -> int:
    """The length of each work buffer :func:`nd_window_sum` needs for reduced dimensions ``dims``: its first
    level's windows (at least 1)."""
    count = 1
    for d in range(dims.shape[0]):
        count *= (dims[d] + TREE_WINDOW - 1) // TREE_WINDOW if dims[d] > TREE_WINDOW else 1
    return max(count, 1)


def reduced_dims(shape, axes) -> np.ndarray:
    """The reduced dimensions of a sum over ``axes`` of an operand of ``shape``, in row-major order, as the
    int64 array :func:`nd_window_sum` takes (dimensions of one element dropped: they change no order). An
    operand of :data:`~lowering.kernels.ynnpack_sum.MIN_ELEMENTS` or more is YNNPACK's in XLA CPU: where its
    order was not identified (no :func:`~lowering.kernels.reduction.ynnpack_plan`), the reduced elements are
    summed as one dimension (windows of 32 over all of them: as accurate as YNNPACK's tree, not its bits) rather
    than in the rewrite's per-dimension windows, which XLA does not use there and which, for dimensions of at
    most 32, would be one long chain."""
    if int(np.prod(shape, dtype=np.int64)) >= MIN_ELEMENTS:
        return np.array([max(1, int(np.prod([shape[d] for d in axes], dtype=np.int64)))], np.int64)
    dims = [int(shape[d]) for d in sorted(axes) if shape[d] != 1]
    return np.array(dims or [1], np.int64)


def sum_function(shape, axes, acc: np.dtype, lanes: int = 0, dtype=None):
    """``f(x, init)``: the sum of an operand of ``shape`` over ``axes`` from ``init`` in XLA CPU's order (module
    docstring), accumulated in ``acc`` (f32 or f64), an array of the kept dimensions' shape (0-d for a full sum).
    Decided once per shape: one reduced dimension (after dropping those of one element, or all of them as one
    where :func:`reduced_dims` says so) with the kept ones before it is a row sum, with kept ones after it a column
    sum (:func:`column_tree_sums`, no copy); any other layout is transposed to rows first. ``lanes``: a 2-d full
    sum in XLA's vector lanes (:func:`plain_sum_lanes`, :func:`lane_sum`); a 2-d full f32 sum with a dimension over
    32 in XLA's windows and lanes (:func:`grid_order`, :func:`grid_sum`; ``dtype``: the operand's element type
    where ``acc`` is wider, default ``acc``)."""
    layout = _Layout(shape, axes, acc)
    shape, axes, acc, cast = layout.shape, layout.axes, layout.acc, layout.acc.type
    if lanes:
        rows, cols = shape if len(shape) == 2 else (shape[0], 1)  # (a 1-d sum: each row one element)

        def in_lanes(x, init):
            flat = np.ascontiguousarray(x, dtype=acc).reshape(-1)
            return np.asarray(lane_sum(flat, 0, rows, cols, cast(init), lanes), acc)

        return in_lanes
    if grid_order(shape, axes, acc if dtype is None else dtype):
        rows, cols = (d for d in shape if d != 1)
        length = grid_work_length(rows, cols)

        def in_windows(x, init):
            flat = np.ascontiguousarray(x, dtype=acc).reshape(-1)
            return np.asarray(grid_sum(flat, 0, rows, cols, cast(init), np.empty((2, length), acc)), acc)

        return in_windows
    dims = reduced_dims(shape, axes)
    live = [d for d in axes if shape[d] != 1]
    contiguous_run = live == list(range(live[0], live[-1] + 1)) if live else True
    if len(dims) == 1 and contiguous_run:
        first = live[0] if live else len(shape)
        outer = int(np.prod(shape[:first], dtype=np.int64))
        inner = int(np.prod([shape[d] for d in range(first, len(shape)) if d not in axes], dtype=np.int64))
        if inner > 1 and all(shape[d] == 1 for d in axes if d > first):
            def columns(x, init):
                x3 = np.ascontiguousarray(x, dtype=acc).reshape(outer, layout.count, inner)
                out = np.empty((outer, inner), acc)
                column_tree_sums(x3, cast(init), out)
                return out.reshape(layout.kept_shape)

            return columns

    def rows(x, init):
        out = np.empty(layout.outputs, acc)
        tree_sums(layout.rows(x), dims, cast(init), out)
        return out.reshape(layout.kept_shape)

    return rows


class _Layout:
    """The outputs of a reduce over ``axes`` of an operand of ``shape`` as rows: :meth:`rows` is the operand as a
    C-ordered ``(outputs, count)`` array in ``acc``, the reduced dimensions moved last (a copy) where they are
    not."""

    def __init__(self, shape, axes, acc):
        self.shape = tuple(int(v) for v in shape)
        self.axes = sorted(int(v) for v in axes)
        self.kept = [d for d in range(len(self.shape)) if d not in self.axes]
        self.kept_shape = tuple(self.shape[d] for d in self.kept)
        self.outputs = int(np.prod(self.kept_shape, dtype=np.int64))
        self.count = int(np.prod([self.shape[d] for d in self.axes], dtype=np.int64))
        self.order = self.kept + self.axes
        self.moved = self.order != list(range(len(self.shape)))
        self.acc = np.dtype(acc)

    def rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` as C-ordered rows of the reduced elements, one row per output."""
        x = np.transpose(x, self.order) if self.moved else x
        return np.ascontiguousarray(x, dtype=self.acc).reshape(self.outputs, self.count)


def contracted_sum_function(shape, axes, acc: np.dtype, rounded: int = 0, square: bool = False, lanes: int = 0):
    """``f(a, b, init)``: :func:`contracted_sums` of operands of ``shape`` over ``axes`` (reduced dimensions moved
    last first where they are not; the first ``rounded`` outputs with rounded products; ``square``: ``a`` is
    ``b``; ``lanes``: XLA's vector lanes over the rows of a 2-d full sum, :func:`vector_lanes`), an array of the
    kept dimensions' shape."""
    layout = _Layout(shape, axes, acc)
    cols = int(shape[-1]) if lanes else 1

    def contracted(a, b, init):
        out = np.empty(layout.outputs, layout.acc)
        contracted_sums(layout.rows(a), layout.rows(b), layout.acc.type(init), out, rounded, square, lanes, cols)
        return out.reshape(layout.kept_shape)

    return contracted


def xla_sum(x: np.ndarray, axes, init, acc: np.dtype) -> np.ndarray:
    """The sum of ``x`` over ``axes`` from ``init`` in XLA CPU's order (module docstring), accumulated in ``acc``
    (f32 or f64): an array of the kept dimensions' shape (a 0-d array for a full sum). (Decides the layout on each
    call: kernels keep :func:`sum_function` of their static shape.)"""
    return sum_function(x.shape, axes, acc)(x, init)
