"""Sums XLA CPU leaves to LLVM's loop vectorizer, in the order LLVM's vectorized loops add: one definition.

XLA CPU (jax 0.10.2) emits some contractions as plain loops inside a loop fusion and lets LLVM optimize them with
reassociation allowed. A short loop LLVM unrolls fully and keeps as one chain; a longer one (LLVM's full-unroll
budget: roughly 300 instructions for the whole unrolled loop) it vectorizes, and the sum is then taken in lanes,
interleaved parts, a vector epilogue and a scalar tail, each a fixed function of the trip count.

**The elemental dot** (:func:`loop_dot_row`). A matrix-vector product whose matrix is stored transposed
(``g.T @ x``: an f32 or f64 ``(K, M)`` lhs contracted over its first dimension, a ``(K, 1)`` rhs, no batch) with
the vector under 16 KB (``K`` up to 4,095 f32, 2,047 f64) is XLA's ``copy_dot_fusion``: for each output row ``i``
a loop over ``K`` accumulating ``g[p, i] * x[p]`` (contracted to fused multiply-adds). Measured bitwise against
jax.jit on the 2-core Xeon (Emerald Rapids), probes reconstructing each element's summation tree with ``+-2^30``
(f64: ``2^60``) and single ones, then random operands of mixed magnitudes:

* ``K <= 49`` (``M >= 3``, and f64 ``M = 2``; f32 ``M = 2``: ``K <= 59``): unrolled, one chain of fused
  multiply-adds from zero.
* Longer (``M >= 9``): a vector loop of ``L`` lanes (256-bit vectors, which XLA prefers on AVX-512: 8 f32, 4 f64)
  in ``IC`` parts (the largest power of two up to 4 that leaves two iterations: f32 2 below ``K = 64``, else 4),
  ``W = L IC`` terms per iteration, ``n = K // W`` iterations: term ``it W + j L + l`` goes to lane ``l`` of part
  ``j``, each a chain of fused multiply-adds. The parts are added into part 0 lane by lane: a whole part's chain
  added to the sum, or, where LLVM unrolled the vector loop (``n W < 128``) and reassociated it, each element of
  the part fused into the running lane in the order ``e1, e0, e2, e3, ...``. The lanes are folded by halves
  (``l + l(L/2)``, ..., ``l + l1``).
* The ``R = K - n W`` terms left: from ``R >= L/2`` on a vector epilogue of ``L`` or ``L/2`` lanes (whichever
  leaves fewer iterations plus scalar terms; ``L`` on a tie) whose lane 0 starts from the main sum, ``R // VF``
  iterations of fused multiply-adds, folded by halves; then the last terms fused into the sum one by one. With no
  vector epilogue the scalar terms alternate: the first fused, the second added as a rounded product, the third
  fused.
* f32 with ``M <= 8``: LLVM reads the matrix with interleaved loads, which keep at least one scalar iteration:
  ``n = (K - 1) // W`` (``IC`` from ``K - 1``), the loop unrolled and reassociated up to ``n = 14`` (``M = 2``),
  11 (``M = 3, 4``) or 10 (``M = 5..8``); a vector epilogue of ``VF`` 2, 4 or 8 lanes by ``r = K mod W`` (2 for
  ``r`` 2, 3, 6, 7; 4 for 4, 5, 12..15, 20..23 and 28..31; 8 for 8..11, 16..19, 24..27 and, with ``M`` 5 or 6,
  28..31: LLVM's cost model) running ``(R - 1) // VF`` iterations; the scalar terms all fused. Read from XLA's
  optimized LLVM IR for every ``K`` in 2..4,095 and ``M`` in 2..8 (its vector structure matched for all), then
  bitwise against jax.jit for ``K`` 2..300 and 50 larger each, four draws. f64 with ``M <= 8`` beyond the chain
  is not identified (those products keep their earlier order).

Measured: f32 ``M`` in 9..17, 32, 40, 64, 100, 128, 300, 1000 with ``K`` in 40..140 and 20 sizes to 4,095; f64
``M`` 9, 10, 16, 17, 33, 64, 100 with ``K`` in 40..140 and to 2,047; every element equal. With a longer vector XLA
copies the transpose first and the product is its row-major GEMV emitter's
(:data:`lowering.kernels.small_dot.ROW_TILES`, measured bitwise). Where the transposed matrix is computed by
element-wise ops used only there, XLA fuses them into the loop, whose larger body moves LLVM's thresholds: not
identified (the same order is used).
"""

from __future__ import annotations

import numba
import numpy as np

from ..runtime.loop_runtime import fused_multiply_add
from .tree_sum import add_lanes_by_halves

LOOP_DOT_MAX_BYTES = 16 * 1024
"""XLA CPU keeps the product in its ``copy_dot_fusion`` while the vector is smaller than this (K up to 4,095 f32,
2,047 f64); longer products copy the transpose and take the GEMV emitter."""

UNROLLED_MAX_K = 49
"""The longest contraction LLVM unrolls into one chain (``M >= 3``) ..."""

UNROLLED_MAX_K_TWO_ROWS = 59
"""... and for f32 with ``M = 2`` (a cheaper loop body; f64 unrolls up to 49 there too)."""

INTERLEAVED_MAX_M = 8
"""Up to this many rows LLVM reads the transposed matrix with interleaved loads (X86's largest interleave factor),
which changes the vector loops (:func:`_interleaved_row`)."""

UNROLLED_VECTOR_TERMS = 128
"""LLVM unrolls a vector loop over fewer terms than this (f32: at most 3 iterations of 32; f64: 7 of 16) and then
reassociates it (:func:`_main_loop`)."""

VECTOR_BYTES = 32
"""The 256-bit vectors XLA CPU prefers on AVX-512 hosts: 8 f32 or 4 f64 lanes."""


def unrolled_max_k(m: int, itemsize: int) -> int:
    """The longest contraction of an ``m``-row elemental dot of ``itemsize``-byte floats LLVM keeps as one chain."""
    return UNROLLED_MAX_K_TWO_ROWS if m == 2 and itemsize == 4 else UNROLLED_MAX_K


def is_elemental_dot(k: int, itemsize: int) -> bool:
    """Whether XLA CPU computes a transposed matrix times a vector of ``k`` elements as its elemental dot in a
    loop fusion (else it copies the transpose and takes its GEMV emitter)."""
    return k * itemsize < LOOP_DOT_MAX_BYTES


def is_replayed(m: int, k: int, itemsize: int) -> bool:
    """Whether :func:`loop_dot_row` gives XLA's order for an ``(m, k)`` elemental dot of ``itemsize``-byte floats
    (``m >= 2``, :func:`is_elemental_dot`): the unrolled chain, the vector loops of ``m >= 9`` rows, and f32's
    interleaved loops of fewer rows (f64's are not identified)."""
    return 2 <= m and 1 <= k and (k <= unrolled_max_k(m, itemsize) or m > INTERLEAVED_MAX_M or itemsize == 4)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _main_loop(a, x, width, parts, n, reassociated, lanes):
    """The main vector loop's sum of ``a[:n * width * parts] * x``: ``width`` lanes, ``parts`` interleaved parts
    (``reassociated``: unrolled, each later part's elements fused into the lane one by one), folded."""
    step = width * parts
    zero = a.dtype.type(0)
    for l in range(width):
        acc = zero
        for it in range(n):
            p = it * step + l
            acc = fused_multiply_add(a[p], x[p], acc)
        for j in range(1, parts):
            base = j * width + l
            if reassociated:  # (unrolled and reassociated: the part's elements join one by one)
                for q in range(n):
                    it = 1 if q == 0 and n >= 2 else (0 if q == 1 else q)
                    p = it * step + base
                    acc = fused_multiply_add(a[p], x[p], acc)
            else:
                part = zero
                for it in range(n):
                    p = it * step + base
                    part = fused_multiply_add(a[p], x[p], part)
                acc = acc + part
        lanes[l] = acc
    return add_lanes_by_halves(lanes[:width])


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _epilogue(a, x, start, count, width, total, lanes):
    """A vector epilogue of ``count`` iterations of ``width`` lanes from ``start``, lane 0 starting from
    ``total``; its folded sum."""
    zero = a.dtype.type(0)
    for l in range(width):
        lanes[l] = zero
    lanes[0] = total
    for it in range(count):
        for l in range(width):
            p = start + it * width + l
            lanes[l] = fused_multiply_add(a[p], x[p], lanes[l])
    return add_lanes_by_halves(lanes[:width])


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _tail(a, x, start, stop, total, alternate):
    """The scalar terms ``start .. stop - 1`` added to ``total``: fused, or (``alternate``) every second one a
    rounded product added."""
    for i in range(stop - start):
        p = start + i
        if alternate and i % 2 == 1:
            total = total + a[p] * x[p]
        else:
            total = fused_multiply_add(a[p], x[p], total)
    return total


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _wide_row(a, x, lanes):
    """One output of an elemental dot with at least 9 rows (module docstring)."""
    k = a.shape[0]
    width = VECTOR_BYTES // a.itemsize
    parts = 1
    while parts < 4 and k >= 4 * width * parts:  # (the largest power of two up to 4 with two iterations)
        parts *= 2
    step = width * parts
    n = k // step
    total = _main_loop(a, x, width, parts, n, n * step < UNROLLED_VECTOR_TERMS, lanes)
    p = n * step
    rest = k - p
    half = width // 2
    if rest >= half:
        wide = rest // width + rest % width if rest >= width else k + 1
        narrow = rest // half + rest % half
        vf = width if wide <= narrow else half
        count = rest // vf
        total = _epilogue(a, x, p, count, vf, total, lanes)
        return _tail(a, x, p + count * vf, k, total, False)
    return _tail(a, x, p, k, total, True)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _interleaved_row(a, x, rows, lanes):
    """One output of an f32 elemental dot with at most 8 rows (module docstring)."""
    k = a.shape[0]
    width = 8
    parts = 4 if k - 1 >= 64 else 2
    step = width * parts
    n = (k - 1) // step  # (interleaved loads keep at least one scalar iteration)
    unrolled = 14 if rows == 2 else (11 if rows <= 4 else 10)
    total = _main_loop(a, x, width, parts, n, n <= unrolled, lanes)
    p = n * step
    rest = k - p
    r = k % step
    # LLVM's vector epilogue for the r iterations left (its cost model's choice, measured for every r)
    if r < 2:
        vf = 0
    elif r < 8:
        vf = 4 if r in (4, 5) else 2
    elif r >= 28:
        vf = 8 if rows in (5, 6) else 4
    else:
        vf = 8 if (r // 4) % 2 == 0 else 4
    count = (rest - 1) // vf if vf else 0
    if count:
        total = _epilogue(a, x, p, count, vf, total, lanes)
        p += count * vf
    return _tail(a, x, p, k, total, False)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def loop_dot_row(a, x, rows, lanes):
    """``a @ x`` (1-d f32 ``a``, ``x`` of the same length) as XLA CPU's elemental dot of a product with ``rows``
    output rows sums one row: one chain of fused multiply-adds when LLVM unrolls the loop, else its vectorized
    loops (module docstring; products :func:`is_replayed` accepts). ``lanes`` is scratch of at least 8
    elements."""
    k = a.shape[0]
    if k <= (UNROLLED_MAX_K_TWO_ROWS if rows == 2 and a.itemsize == 4 else UNROLLED_MAX_K):
        total = a.dtype.type(0)
        for p in range(k):
            total = fused_multiply_add(a[p], x[p], total)
        return total
    if rows <= INTERLEAVED_MAX_M:
        return _interleaved_row(a, x, rows, lanes)
    return _wide_row(a, x, lanes)
