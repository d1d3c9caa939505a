"""NumPy kernels: dot and dot_general.

Both ops lower to one ``np.matmul`` of shape ``(batch, M, K) x (batch, K, N)``:
the factory works out, once, the operand transposes (batch dimensions first,
then free, then contracting for lhs; batch, contracting, free for rhs), the
3-d shapes and the result shape.

Numerics follow XLA on CPU (checked against jax.jit):

* The dot accumulates in one *compute* type. When the result type
  (``preferred_element_type``) is more precise than the operand type, by XLA's
  ``HigherPrecisionType`` order, the operands are converted to it first (XLA's
  OperandUpcaster: s8 x s8 -> s32 accumulates in s32, pred x pred -> s32 counts);
  otherwise the dot computes in the operand type and the result is converted
  (XLA's ResultCaster: f32 x f32 -> s32 is a saturating f32 -> s32 convert of
  the f32 dot; bf16 x bf16 -> f16 rounds twice).
* Floating-point types narrower than 32 bits (f16, bf16, f8, f4) are multiplied
  and accumulated in f32 and rounded once at the end, as XLA CPU does.
* Integer dots wrap around in the compute type; pred dots are OR of ANDs.
* Complex dots reproduce the summation order of XLA CPU's Eigen kernels (see :func:`_complex_matmul`).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from xla_dialect.ops.linalg import DotGeneralOp, DotOp, higher_precision_type
from xla_dialect.types import element_type_from_dtype

from ..runtime.denormals import mode_switch
from .registry import register
from .small_dot import dot_vector_bytes, small_dot_order, small_matmul


def xla_convert(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert like XLA's ConvertElementType on CPU: complex -> real drops the imaginary part;
    float -> integer truncates and saturates, NaN -> 0; float -> pred is ``x != 0``."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.dtype.kind == "c" and dtype.kind != "c":
        x = x.real
    if dtype == np.bool_:
        return x != 0
    if dtype.kind in "iu" and x.dtype.kind not in "iub":
        info = ml_dtypes.iinfo(dtype)
        wide = x.astype(np.float64)  # exact for every float type up to f64
        nan = np.isnan(wide)
        high = wide >= float(info.max) + 1  # a power of two: exact, unlike float(info.max) for s64
        low = wide < float(info.min)
        out = np.where(nan | high | low, 0, wide).astype(dtype)
        out[high] = info.max
        out[low] = info.min
        return out
    return x.astype(dtype)


def _arith_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy multiplies in: f32 for floats narrower than 32 bits, else the type itself."""
    et = element_type_from_dtype(dtype)
    if et.kind == "float" and et.bits < 32:
        return np.dtype(np.float32)
    return dtype


def _complex_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Complex ``(batch, M, K) x (batch, K, N)`` matmul rounded like XLA CPU's Eigen kernels.

    XLA CPU (checked against jax.jit) does not round like BLAS's complex gemm
    (which fuses multiply-adds and reorders the sum): Eigen's gemm keeps four
    real sums, ``Σ ar·br``, ``Σ ai·bi``, ``Σ ar·bi`` and ``Σ ai·br``, each
    product rounded and added in contraction order without FMA, and combines
    them at the end: ``(Σar·br - Σai·bi) + (Σar·bi + Σai·br)i``. When the lhs
    has a single row (M == 1) XLA takes a vector path that instead sums the
    rounded textbook products ``(ar·br - ai·bi) + (ar·bi + ai·br)i`` in
    contraction order. Where the sum cancels, any other order is off by many
    ULP, so the order is reproduced: one vectorized multiply-add over all of
    ``batch x M x N`` per contraction index (about 10x slower than BLAS for
    large square matrices).

    Eigen then scales the sum by ``alpha = 1+0j`` with the textbook product,
    so a sum with an infinite or NaN component becomes nan+nanj (a dot of
    (inf+1j) and (1+1j) with other finite terms is nan+nanj in XLA, not
    inf+infj). XLA rewrites dots with K == 1 into an element-wise multiply and
    vector·vector dots (M == N == 1) into multiply + reduce; neither scales.

    Not reproduced (a few to hundreds of ULP where a component cancels):
    Eigen's edge tiles (N not a multiple of its register block, with K >= 8
    it splits the sum over several accumulators), XLA's splitting of a long
    contraction over threads when M·N is small, and the rewritten dots' orders.
    """
    real = a.real.dtype
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    # (K, 2, 1, batch, M, 1) x (K, 1, 2, batch, 1, N): all four real products at once.
    x = np.moveaxis(np.stack([a.real, a.imag]), -1, 0)[:, :, None, :, :, None]
    y = np.moveaxis(np.stack([b.real, b.imag]), -2, 0)[:, None, :, :, None, :]
    out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n)
    products = np.empty((2, 2) + out_shape, real)
    sums = np.zeros((2,) + out_shape, real)  # real and imaginary parts
    with np.errstate(invalid="ignore", over="ignore"):
        if m == 1:
            for i in range(k):
                np.multiply(x[i], y[i], out=products)
                sums[0] += products[0, 0] - products[1, 1]
                sums[1] += products[0, 1] + products[1, 0]
        else:
            four = np.zeros_like(products)
            for i in range(k):
                np.multiply(x[i], y[i], out=products)
                four += products
            sums[0] = four[0, 0] - four[1, 1]
            sums[1] = four[0, 1] + four[1, 0]
        if k != 1 and (m, n) != (1, 1):
            sums[0], sums[1] = sums[0] - sums[1] * 0, sums[0] * 0 + sums[1]  # times alpha = 1+0j
    out = np.empty(out_shape, a.dtype)
    out.real, out.imag = sums
    return out


def matmul_kernel(ctx, arith: np.dtype, m: int, k: int, n: int, batch: int = 1):
    """The ``(batch, m, k) x (batch, k, n)`` matmul of ``arith`` operands: XLA's complex order, else BLAS
    run with the program's BLAS thread policy (:mod:`lowering.runtime.blas`). (Convolutions use it too; a dot's small
    products are summed in XLA's dot order instead, :func:`_dot`.)"""
    if np.dtype(arith).kind == "c":
        return _complex_matmul
    return ctx.blas_matmul(arith, m, k, n, batch)


def dot_geometry(op) -> tuple[tuple | None, tuple | None, int, int, int, int]:
    """How the dot kernel lays out a dot's operands: ``(lperm, rperm, batch, m, k, n)``, the lhs transposed by
    ``lperm`` to (batch, free, contracting) dimensions and seen as ``(batch, m, k)``, the rhs by ``rperm`` to
    (batch, contracting, free) as ``(batch, k, n)`` (None: no transpose). Compiled loops lay them out the same."""
    lshape, rshape = op.lhs.type.get_shape(), op.rhs.type.get_shape()
    dn = op.dimension_numbers()
    lfree, rfree = dn.free_dimensions(len(lshape), len(rshape))
    lb, lc = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rb, rc = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    lperm, rperm = tuple(lb + lfree + lc), tuple(rb + rc + rfree)
    batch = math.prod(lshape[d] for d in lb)
    m, k, n = (math.prod(lshape[d] for d in lfree), math.prod(lshape[d] for d in lc),
               math.prod(rshape[d] for d in rfree))
    lperm = None if lperm == tuple(range(len(lshape))) else lperm
    rperm = None if rperm == tuple(range(len(rshape))) else rperm
    return lperm, rperm, batch, m, k, n


@register(DotOp, DotGeneralOp)
def _dot(op, ctx):
    lhs_t, rhs_t, out_t = op.lhs.type, op.rhs.type, op.result.type
    out_shape = tuple(out_t.get_shape())
    lperm, rperm, batch, m, k, n = dot_geometry(op)
    l3, r3 = (batch, m, k), (batch, k, n)

    operand_et, result_et = lhs_t.element_type, out_t.element_type
    result_dtype = ctx.dtype(out_t)
    # OperandUpcaster when the result type is more precise, ResultCaster otherwise.
    upcast = result_et != operand_et and higher_precision_type(operand_et, result_et) == result_et
    compute_dtype = result_dtype if upcast else ctx.dtype(lhs_t)
    arith = _arith_dtype(compute_dtype)

    def convert_and_reshape(x, perm, shape3):
        if perm is not None:
            x = np.transpose(x, perm)
        x = np.reshape(x, shape3)
        if x.dtype != compute_dtype:
            x = x.astype(compute_dtype)  # XLA converts the operands (may round, e.g. f16 -> bf16)
        return x.astype(arith, copy=False)

    def reshape_only(x, perm, shape3):  # the common case: the operands only change shape
        return x.reshape(shape3)

    operand_dtypes = (ctx.dtype(lhs_t), ctx.dtype(rhs_t))
    only_reshape = lperm is None and rperm is None and operand_dtypes == (compute_dtype,) * 2 == (arith,) * 2
    prepare = reshape_only if only_reshape else convert_and_reshape

    round_compute = arith != compute_dtype
    convert_result = compute_dtype != result_dtype

    order = small_dot_order(batch, m, k, n, arith, dot_vector_bytes(op))
    # Small products in XLA CPU's dot order (lowering/kernels/small_dot.py), others as matmul_kernel computes them.
    matmul = (small_matmul(order, ctx.split_workers, mode_switch(ctx.denormals)) if order is not None
              else matmul_kernel(ctx, arith, m, k, n, batch))

    def dot(a, b):
        c = matmul(prepare(a, lperm, l3), prepare(b, rperm, r3)).reshape(out_shape)
        if round_compute:
            c = c.astype(compute_dtype)
        if convert_result:
            c = xla_convert(c, result_dtype)
        return c

    return dot
