"""NumPy kernels: reduce_precision, fft, cholesky, triangular_solve, batch norm, rng, rng_bit_generator.

Numerics follow XLA on CPU (checked against jax.jit in ``tests/test_numerics.py``):

* ``reduce_precision`` is XLA's integer algorithm (``EmitReducePrecisionIR``) on
  the float's bits: round to nearest even by adding a bias and masking,
  then exponent overflow to signed infinity and underflow (denormals
  included) to signed zero; NaN operands come back unchanged. As on XLA CPU,
  f16/f32/f64 are rounded in their own format, bf16 and f8e8m0fnu in f32 and
  the other f8/f4 formats in f16, converting back afterwards; an op that
  cannot change a value of that compute format is the identity (XLA's
  simplifier removes it). Bit-exact for f16/bf16/f32/f64 and the f8 formats
  the tests list.
* ``rng_bit_generator`` is bit-exact with XLA's ``RngBitGeneratorExpander``:
  Threefry-2x32 (20 rounds) over the counter ``state[1] + linear index`` and
  Philox-4x32 (10 rounds) over a 128-bit counter, with XLA's shape splitting,
  word interleaving and state updates (``xla/hlo/builder/lib/prng.cc``). DEFAULT
  is Philox, as on XLA's CPU backend. Types narrower than 32 bits take the low
  bits of the 32-bit stream; float outputs are the raw bits.
* ``rng`` (XLA RngUniform / RngNormal) turns random bits into values with XLA's
  formulas (mantissa bits scaled into ``[a, b)``; ``a + bits % (b - a)`` for
  integers), but the bits come from a NumPy generator seeded when the program
  is compiled, so the stream differs from XLA's (whose own stream depends on
  its global RNG state). Each call of an executable draws new numbers.
* ``fft`` is ``numpy.fft`` in the operand's precision (c64 stays c64; f32 RFFT
  gives c64); results agree with XLA's DUCC FFT to rounding.
* ``cholesky`` reads the chosen triangle only (LAPACK via ``np.linalg.cholesky``;
  an upper factor is computed as XLA does, through the transposed matrix),
  zeroes the other triangle, and gives an all-NaN matrix for each batch
  element that is not positive definite (XLA's ``seen_error`` rule).
* ``triangular_solve`` masks ``a`` to its triangle (unit diagonal if asked),
  applies the transpose/adjoint and solves with ``np.linalg.solve`` over the
  whole batch; singular systems fall back to vectorized substitution and, as
  XLA, give NaN for every unknown a zero pivot reaches.
* batch norm follows XLA's ``BatchNormExpander`` step by step (variance as
  ``E[x^2] - E[x]^2``, ``rsqrt``, the ``grad`` formula's ``I1..I6``), with
  epsilon rounded to f32 and then to the operand type.

Narrow floats (f16, bf16, f8): ``fft`` is computed in f32 and rounded once.
cholesky and triangular_solve replay XLA's CholeskyExpander /
TriangularSolveExpander (blocks of 128; unblocked column Cholesky; diagonal
blocks inverted row by row, or direct substitution when the batch is > 8 and
n < 32) rounding every op to the narrow type, dots as f32 products added in
contraction order and rounded once, and XLA's division-by-reciprocal rewrites
(reciprocal rounded to f16 for f16, kept in f32 for bf16): bit-exact with XLA
CPU on the tested shapes (rarely 1 ULP in f16 solves with inverted blocks).
bf16/f8 batch norm is computed in f32 (XLA widens it before expanding it: f32
epsilon, XLA's f32 rsqrt) and rounded once, bit-exact; f16 batch norm is
expanded in f16 with element-by-element f16 sums (exact for short 2-D sums;
XLA splits longer sums in a way not reproduced here).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from xla_dialect.errors import ExecutionError
from xla_dialect.ops import numerics as nx
from xla_dialect.ops.base import ints, string
from xla_dialect.types import element_type_from_dtype, element_type_of

from .registry import register
from . import xla_math

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's linear algebra and FFT work in for ``dtype`` (f32 for narrow floats)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c" or dtype in (_F32, _F64):
        return dtype
    return _F32


def _swap(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


# ----------------------------------------------------------------------------
# reduce_precision
# ----------------------------------------------------------------------------

_RP_COMPUTE = {"f16": _F16, "f32": _F32, "f64": _F64, "bf16": _F32, "f8e8m0fnu": _F32}
"""Element type -> the format XLA CPU rounds it in (other f8/f4 formats: f16)."""

_CANONICAL_NAN = {"f8e5m2": 0x7F}
"""Types whose NaN results XLA CPU canonicalizes to one bit pattern (checked against jax)."""


def _format_bits(dtype: np.dtype) -> tuple[int, int]:
    """(exponent bits, explicit mantissa bits) of an IEEE-like float dtype."""
    mantissa = ml_dtypes.finfo(dtype).nmant
    return 8 * dtype.itemsize - 1 - mantissa, mantissa


def reduce_precision_bits(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's reduce-precision of an f16/f32/f64 array by integer operations on its bits."""
    dtype = x.dtype
    nbits = 8 * dtype.itemsize
    src_exponent, src_mantissa = _format_bits(dtype)
    u = _UINT[dtype.itemsize]
    bits = np.ascontiguousarray(x).view(u).reshape(np.shape(x))  # ascontiguousarray makes 0-d arrays 1-d
    sign_mask = u(1 << (nbits - 1))
    exp_mask = u(((1 << src_exponent) - 1) << src_mantissa)
    is_nan = (bits & ~sign_mask) > exp_mask
    if mantissa_bits < src_mantissa:
        shift = src_mantissa - mantissa_bits
        last = 1 << shift
        # Ties to even: a bias of 0111... plus the last kept mantissa bit, then truncate.
        bias = ((bits >> u(shift)) & u(1)) + u((last >> 1) - 1)
        bits = (bits + bias) & u(~(last - 1) & ((1 << nbits) - 1))
    if exponent_bits < src_exponent:
        bias = (1 << (src_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & exp_mask
        signed_zero = bits & sign_mask
        bits = np.where(exponent > u((bias + reduced_bias) << src_mantissa), signed_zero | exp_mask, bits)
        # Underflow includes every denormal of the reduced format: they become signed zero.
        bits = np.where(exponent <= u((bias - reduced_bias) << src_mantissa), signed_zero, bits)
    return np.where(is_nan, x, bits.view(dtype))


@register(nx.ReducePrecisionOp)
def _reduce_precision(op, ctx):
    dtype = ctx.dtype(op.operands[0].type)
    exponent_bits = op.properties["exponent_bits"].value.data
    mantissa_bits = op.properties["mantissa_bits"].value.data
    name = element_type_of(op.operands[0].type.element_type).xla_name
    compute = _RP_COMPUTE.get(name, _F16)
    c_exponent, c_mantissa = _format_bits(compute)
    if exponent_bits >= c_exponent and mantissa_bits >= c_mantissa:
        return lambda x: x  # cannot change a value of the compute format
    if dtype.itemsize == 1 and (exponent_bits, mantissa_bits) == (c_exponent - 1, c_mantissa + 1):
        return lambda x: x  # observed on XLA CPU (jaxlib 0.10): this one format is the identity for f8 types
    if compute == dtype:
        return lambda x: reduce_precision_bits(x, exponent_bits, mantissa_bits)
    canonical = _CANONICAL_NAN.get(name)

    def narrow(x):
        out = reduce_precision_bits(x.astype(compute), exponent_bits, mantissa_bits).astype(dtype)
        if canonical is not None:
            out = np.where(np.isnan(out), np.array(canonical, np.uint8).view(dtype), out)
        return out

    return narrow


# ----------------------------------------------------------------------------
# fft
# ----------------------------------------------------------------------------


@register(nx.FftOp)
def _fft(op, ctx):
    kind = string(op.properties["fft_type"])
    lengths = list(ints(op.properties["fft_length"]))
    rank = op.operands[0].type.get_num_dims()
    axes = list(range(rank - len(lengths), rank))
    out_type = op.results[0].type
    out_shape, out_dtype = tuple(out_type.get_shape()), ctx.dtype(out_type)
    if 0 in out_shape or 0 in op.operands[0].type.get_shape():
        return lambda x: np.zeros(out_shape, out_dtype)  # numpy.fft rejects empty transforms
    transform = {
        "FFT": lambda x: np.fft.fftn(x, axes=axes),
        "IFFT": lambda x: np.fft.ifftn(x, axes=axes),
        "RFFT": lambda x: np.fft.rfftn(x, axes=axes),
        "IRFFT": lambda x: np.fft.irfftn(x, s=lengths, axes=axes),
    }[kind]
    return lambda x: transform(x).astype(out_dtype, copy=False)


# ----------------------------------------------------------------------------
# Narrow floats (f16, bf16, f8): XLA's expanders step by step
# ----------------------------------------------------------------------------
#
# XLA expands cholesky, triangular_solve and batch norm into HLO in the
# operand's own element type: every elementwise op rounds to that type, and
# dots and reductions accumulate in f32 and round once (XLA CPU widens them).
# The emulation keeps f32 arrays holding values of the narrow type and rounds
# after every op with ``q``. An f32 op followed by rounding to f16/bf16 is the
# correctly rounded narrow op (f32 has more than twice their precision), so
# only the order of f32 sums inside dots and reductions can differ.

_BLOCK = 128
"""Block size of XLA's CholeskyExpander and TriangularSolveExpander (CPU default)."""


def _rounder(dtype: np.dtype):
    """``q(x)``: f32 ``x`` rounded to ``dtype`` and back (each expanded HLO op's rounding)."""
    return lambda x: np.asarray(x, _F32).astype(dtype).astype(_F32)


def _native_rounder(dtype: np.dtype):
    """Rounding of values XLA's simplifier creates inside a fusion (a divisor's reciprocal): f16 is
    computed in f16 on XLA CPU, the other narrow types are widened to f32 by float normalization
    before the simplifier runs, so their new intermediate values stay f32."""
    return _rounder(dtype) if dtype == _F16 else (lambda x: np.asarray(x, _F32))


def _dot(q, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A narrow-type HLO dot on XLA CPU: f32 products added one by one in contraction order
    (``cumsum`` is sequential, unlike NumPy's pairwise ``sum`` or BLAS), rounded once."""
    if x.shape[-1] == 0:
        return np.zeros(np.broadcast_shapes(x.shape[:-1] + (1,), y.shape[:-2] + (1, y.shape[-1])), _F32)
    products = x[..., :, :, None] * y[..., None, :, :]
    # + 0: the sum starts from +0, so an all -0 sum is +0.
    return q(np.cumsum(products, axis=-2, dtype=_F32)[..., -1, :] + np.float32(0))


def _invert_diagonal_block(q, block: np.ndarray, lower: bool, recip=None) -> np.ndarray:
    """XLA's InvertDiagonalBlocks for one (batched) triangular block: scale the columns to a unit
    diagonal, invert row by row with ``row <- -(row @ inverse)``, then divide the rows by the diagonal."""
    k = block.shape[-1]
    diag = np.diagonal(block, axis1=-2, axis2=-1)
    div = (lambda x, d: q(x / d)) if recip is None else (lambda x, d: q(x * recip(1 / d)))
    scaled = div(block, diag[..., None, :])
    out = np.broadcast_to(-np.eye(k, dtype=_F32), block.shape).copy()
    first = 0 if lower else k - 1
    out[..., first, first] = 1
    rows = range(1, k) if lower else range(k - 2, -1, -1)
    for j in rows:
        out[..., j:j + 1, :] = -_dot(q, scaled[..., j:j + 1, :], out)
    return div(out, diag[..., :, None])


def _narrowed_product_fma(dtype: np.dtype):
    """``fma(a, b, c)`` where XLA CPU computes ``c - convert(f32(a) * f32(b))`` as one f16 FMA, else None.

    A one-term dot of f16 values becomes an f32 multiply of their conversions (exact), rounded back to
    f16; LLVM narrows that to an f16 multiply, and where the host computes f16 natively (AVX512-FP16)
    contracts it into the subtraction that follows (read off XLA's optimized HLO and checked bit for
    bit against it). Elsewhere the product rounds before the subtraction."""
    from .host import host_properties

    if dtype != _F16 or not host_properties()["avx512fp16"]:
        return None
    return _contracted_multiply_add(_F16, _F32)


def xla_triangular_solve(q, a, b, left: bool, lower: bool, transpose: bool, unit: bool,
                         q_native=None, product_fma=None) -> np.ndarray:
    """XLA's TriangularSolveExpander in a narrow type (``a``, ``b`` f32 arrays of narrow values;
    ``q_native`` rounds the reciprocals XLA's simplifier introduces, see :func:`_native_rounder`;
    ``product_fma`` is :func:`_narrowed_product_fma`'s)."""
    n = a.shape[-1]
    q_native = q_native or q
    batch = math.prod(a.shape[:-2])
    if n == 1:
        return b if unit else q(b / a)
    # Everything below is written for op(m) @ x = rhs; x @ op(a) = b is its transpose.
    flips = int(transpose) + int(not left)
    eff_lower = lower if flips % 2 == 0 else not lower
    if batch > _BLOCK // 16 and n < _BLOCK // 4:
        # SolveDirectly: substitution reading the triangle only, one row (or column) of b per step.
        m = _swap(a) if flips % 2 else a
        x = (b if left else _swap(b)).copy()
        rows = range(n) if eff_lower else range(n - 1, -1, -1)
        for j in rows:
            known = slice(0, j) if eff_lower else slice(j + 1, n)
            if product_fma is not None and (j == 1 if eff_lower else j == n - 2):  # a one-term dot
                k = j - 1 if eff_lower else j + 1
                row = product_fma(-m[..., j, k][..., None], x[..., k, :], x[..., j, :])
            else:
                row = q(x[..., j, :] - _dot(q, m[..., j:j + 1, known], x[..., known, :])[..., 0, :])
            # The simplifier turns the division by the diagonal into a product with its reciprocal.
            x[..., j, :] = row if unit else q(row * q_native(1 / m[..., j, j][..., None]))
        return x if left else _swap(x)
    # SolveByInvertingDiagonalBlocks: mask a to its triangle, invert the diagonal blocks, solve by GEMMs.
    tri = np.tril(np.ones((n, n), bool), -1 if unit else 0) if lower else np.triu(np.ones((n, n), bool), 1 if unit else 0)
    a = np.where(tri, a, np.eye(n, dtype=np.float32) if unit else np.float32(0))
    size = min(_BLOCK, n)
    starts = list(range(0, n, size))
    recip = q_native if batch * len(starts) == 1 else None
    inverses = [_invert_diagonal_block(q, a[..., s:s + size, s:s + size], lower, recip) for s in starts]
    m = _swap(a) if flips % 2 else a
    rhs = b if left else _swap(b)
    x = np.zeros_like(rhs)
    order = starts if eff_lower else starts[::-1]
    for i, s in enumerate(order):
        e = min(s + size, n)
        inv = _swap(inverses[s // size]) if flips % 2 else inverses[s // size]
        remainder = rhs[..., s:e, :]
        if i:
            done = slice(0, s) if eff_lower else slice(e, n)
            remainder = q(remainder - _dot(q, m[..., s:e, done], x[..., done, :]))
        x[..., s:e, :] = _dot(q, inv, remainder)
    return x if left else _swap(x)


def xla_cholesky(q, a: np.ndarray, q_native=None) -> np.ndarray:
    """XLA's CholeskyExpander (lower factor of ``a``'s lower triangle) in a narrow type: blocks of 128,
    each factored column by column from ``a - l @ l^T``, the panel below by a triangular solve."""
    n = a.shape[-1]
    q_native = q_native or q
    l = np.zeros_like(a)
    error = np.zeros(a.shape[:-2], bool)
    for i in range(0, n, _BLOCK):
        k = min(_BLOCK, n - i)
        panel = a[..., i:, i:i + k]
        if i:
            panel = q(panel - _dot(q, l[..., i:, :i], _swap(l[..., i:i + k, :i])))
        x = panel[..., :k, :k]
        factor = np.zeros_like(x)
        if k == 1:  # a 1x1 block is its square root
            factor = q(np.sqrt(x))
            error |= np.isnan(factor[..., 0, 0])
        for j in range(k if k > 1 else 0):
            # The column of a - l @ l^T, the pivot's square root, and the column divided by it
            # (the diagonal too: temp / sqrt(temp), not the square root itself).
            temp = q(x[..., j:, j] - _dot(q, factor[..., j:, :], factor[..., j, :, None])[..., 0])
            pivot = q(np.sqrt(temp[..., :1]))
            error |= np.isnan(pivot[..., 0])
            # XLA's simplifier turns the division by the pivot into a product with its reciprocal.
            factor[..., j:, j] = q(temp * q_native(1 / pivot)) + np.float32(0)  # select(mask, ., 0) + l: -0 -> +0
        l[..., i:i + k, i:i + k] = factor
        if i + k < n:
            l[..., i + k:, i:i + k] = xla_triangular_solve(q, factor, panel[..., k:, :], False, True, True, False,
                                                           q_native)
    return np.where(error[..., None, None], np.float32(np.nan), l)


# ----------------------------------------------------------------------------
# cholesky
# ----------------------------------------------------------------------------


def column_cholesky(a: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors from ``a``'s lower triangle, one column per step over the whole batch.

    Non-positive-definite inputs give NaN pivots instead of raising (used when
    LAPACK rejects some matrix of a batch).
    """
    n = a.shape[-1]
    out = np.zeros_like(a)
    for j in range(n):
        row = out[..., j, :j]
        pivot = np.sqrt(np.real(a[..., j, j]) - np.sum(np.abs(row) ** 2, axis=-1))
        out[..., j, j] = pivot
        if j + 1 < n:
            below = a[..., j + 1:, j] - np.matmul(out[..., j + 1:, :j], np.conj(row)[..., None])[..., 0]
            out[..., j + 1:, j] = below / pivot[..., None]
    return out


@register(nx.CholeskyOp)
def _cholesky(op, ctx):
    lower = nx.flag(op.properties, "lower")
    dtype = ctx.dtype(op.results[0].type)
    compute = _compute_dtype(dtype)
    if compute != dtype:
        q = _rounder(dtype)

        def narrow_cholesky(a):
            x = a.astype(_F32)
            if not lower:
                x = _swap(x)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                factor = xla_cholesky(q, x, _native_rounder(dtype))
            return (factor if lower else _swap(factor)).astype(dtype)

        return narrow_cholesky

    def cholesky(a):
        x = a.astype(compute)
        if not lower:
            x = _swap(x)  # XLA factors transpose(a) and transposes the factor back
        try:
            factor = np.linalg.cholesky(x)
        except np.linalg.LinAlgError:
            factor = column_cholesky(x)
        # XLA's seen_error: a NaN pivot makes that batch element all NaN.
        failed = np.isnan(np.real(np.diagonal(factor, axis1=-2, axis2=-1))).any(axis=-1)
        factor = np.where(failed[..., None, None], np.nan, factor)
        return (factor if lower else _swap(factor)).astype(dtype)

    return cholesky


# ----------------------------------------------------------------------------
# triangular_solve
# ----------------------------------------------------------------------------


def substitute(m: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """Solve ``m @ x = b`` for triangular ``m`` by substitution, one row per step over the whole batch."""
    x = np.zeros(np.broadcast_shapes(m.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.result_type(m, b))
    rows = range(m.shape[-1]) if lower else reversed(range(m.shape[-1]))
    for i in rows:
        known = slice(0, i) if lower else slice(i + 1, None)
        partial = np.matmul(m[..., i:i + 1, known], x[..., known, :])[..., 0, :]
        x[..., i, :] = (b[..., i, :] - partial) / m[..., i, i][..., None]
    return x


@register(nx.TriangularSolveOp)
def _triangular_solve(op, ctx):
    props = op.properties
    left = nx.flag(props, "left_side")
    lower = nx.flag(props, "lower")
    unit = nx.flag(props, "unit_diagonal")
    transpose = string(props["transpose_a"])
    dtype = ctx.dtype(op.results[0].type)
    compute = _compute_dtype(dtype)
    out_shape = tuple(op.results[0].type.get_shape())
    if 0 in out_shape:
        return lambda a, b: np.zeros(out_shape, dtype)
    n = out_shape[-2] if left else out_shape[-1]
    eye = np.eye(n, dtype=bool)
    keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    # After op(a) (and, for x @ op(a) = b, the transpose that makes it a left solve) the triangle may flip.
    flips = (transpose != "NO_TRANSPOSE") + (not left)
    effective_lower = lower if flips % 2 == 0 else not lower
    if compute != dtype:
        q = _rounder(dtype)

        def narrow_solve(a, b):
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                x = xla_triangular_solve(q, a.astype(_F32), b.astype(_F32), left, lower,
                                         transpose != "NO_TRANSPOSE", unit, _native_rounder(dtype),
                                         _narrowed_product_fma(dtype))
            return x.astype(dtype)

        return narrow_solve

    def solve(a, b):
        m = np.where(keep, a.astype(compute), 0)
        if unit:
            m = np.where(eye, np.ones((), compute), m)
        if transpose != "NO_TRANSPOSE":
            m = _swap(m)
            if transpose == "ADJOINT":
                m = np.conj(m)
        rhs = b.astype(compute)
        if not left:  # x @ m = b  <=>  m^T @ x^T = b^T
            m, rhs = _swap(m), _swap(rhs)
        try:
            x = np.linalg.solve(m, rhs)
        except np.linalg.LinAlgError:
            # A zero pivot: XLA's expander multiplies by inverted diagonal blocks, so inf * 0
            # turns everything the zero pivot reaches into NaN; substitution gives +-inf there.
            x = substitute(m, rhs, effective_lower)
            x = np.where(np.isfinite(x), x, np.nan)
        return (x if left else _swap(x)).astype(dtype)

    return solve


# ----------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------


_SEQUENTIAL_F16_SUM = 32
"""Longest f16 batch-norm sum XLA CPU is known to add one element at a time (longer ones it splits)."""


class _BatchNormPlan:
    """What the batch-norm kernels bake at lowering time: axes, feature reshape, epsilon, count,
    and the rounding ``q`` after every expanded op (the identity for f32/f64; narrow types round
    each step to the operand type, with f32 sums and XLA CPU's f32 rsqrt)."""

    def __init__(self, op, ctx):
        operand = op.operands[0].type
        self.dtype = ctx.dtype(operand)
        self.compute = _compute_dtype(self.dtype)
        index = self.index = op.properties["feature_index"].value.data
        shape = operand.get_shape()
        self.axes = tuple(i for i in range(len(shape)) if i != index)
        self.feature_shape = tuple(-1 if i == index else 1 for i in range(len(shape)))
        # XLA: epsilon is an f32 literal converted to the operand type.
        eps = np.float32(op.properties["epsilon"].value.data).astype(self.dtype)
        self.epsilon = eps.astype(self.compute)
        # Elements per feature: an s32 product converted to the operand type.
        count = int(np.prod([shape[i] for i in self.axes], dtype=np.int64))
        self.count = np.asarray(np.int32(count)).astype(self.dtype).astype(self.compute)
        # x / count is computed as x * (1 / count), the reciprocal rounded to the type (XLA's simplifier).
        self.inverse_count = (1 / self.count).astype(self.dtype).astype(self.compute)
        self.sequential = self.dtype == _F16
        self.divide = lambda x, y: x / y
        self.reciprocal = None  # where divisions by a feature vector become products with its reciprocal
        self.fma = _contracted_multiply_add(self.dtype, self.compute)
        if self.dtype == _F16:
            # XLA CPU expands f16 batch norm in f16: every op rounds to f16, sums too.
            self.q = _rounder(self.dtype)
            self.rsqrt = lambda x: self.q(xla_math.rsqrt_f32(np.asarray(x, _F32)))
            # The simplifier turns a division by a broadcast feature vector into a product with
            # its reciprocal (computed in f16).
            self.reciprocal = lambda y: self.q(1 / y)
            self.divide = lambda x, y: self.q(x * self.reciprocal(y))
        else:
            # f32/f64 as they are; bf16 and f8 are widened to f32 (float normalization) before the
            # expander runs: f32 epsilon and count, XLA's f32 rsqrt, one rounding at the end.
            self.q = lambda x: x
            if self.compute != self.dtype:
                self.epsilon = np.float32(op.properties["epsilon"].value.data)
                self.count = np.float32(np.int32(count))
                self.inverse_count = np.float32(1) / self.count
                self.rsqrt = xla_math.rsqrt_f32
            else:
                self.rsqrt = lambda x: 1 / np.sqrt(x)

    def load(self, *arrays):
        return [np.asarray(a).astype(self.compute, copy=False) for a in arrays]

    def feature(self, v: np.ndarray) -> np.ndarray:
        return v.reshape(self.feature_shape)

    def total(self, x: np.ndarray) -> np.ndarray:
        n = x.size // max(x.shape[self.index], 1)
        if not self.sequential or n > _SEQUENTIAL_F16_SUM:
            # f32/f64/bf16: one f32/f64 sum. Long f16 sums: XLA CPU splits them (33 elements as
            # 17 + 16, 64 as 32 + 32, longer ones otherwise); here summed in f32, rounded once.
            return self.q(np.sum(x, axis=self.axes, dtype=self.compute))
        # Short f16 sums: XLA CPU's reduce loop adds the elements one by one in f16, in row-major order.
        flat = np.moveaxis(x, self.index, -1).reshape(-1, x.shape[self.index])
        acc = np.zeros(flat.shape[1], _F32)
        for row in flat:
            acc = self.q(acc + row)
        return acc

    def total_of_products(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``total(a * b)`` as XLA's fused reduce loop computes it where it adds one element at a time
        (short f16 sums): each product contracted into the running sum, ``fma(ak, bk, sum)`` from a sum
        of 0. For squares (``a is b``) LLVM drops the initial ``+ 0`` (a square is never -0), and the
        first two products make ``fma(a0, a0, a1*a1)`` (read off XLA's optimized LLVM IR; bit-exact
        against jax.jit for 2 to 32 terms)."""
        q = self.q
        n = a.size // max(a.shape[self.index], 1)
        if not self.sequential or n > _SEQUENTIAL_F16_SUM:
            return self.total(q(a * b))
        rows_a = np.moveaxis(a, self.index, -1).reshape(-1, a.shape[self.index])
        rows_b = rows_a if b is a else np.moveaxis(b, self.index, -1).reshape(-1, b.shape[self.index])
        if b is a and n >= 2:
            acc, start = self.fma(rows_a[0], rows_a[0], q(rows_a[1] * rows_a[1])), 2
        else:
            acc, start = np.zeros(rows_a.shape[1], _F32), 0
        for ak, bk in zip(rows_a[start:], rows_b[start:]):
            acc = self.fma(ak, bk, acc)
        return acc

    def store(self, *arrays):
        return tuple(a.astype(self.dtype) for a in arrays)


def _contracted_multiply_add(dtype: np.dtype, compute: np.dtype):
    """``fma(a, b, c)``: ``a * b + c`` in an expanded batch norm as XLA CPU computes it after LLVM's
    contraction (:mod:`passes.fma_contraction`): one rounding in f32/f64 (bf16 and f8 are computed
    in f32), and in f16 on hosts with AVX512-FP16; elsewhere f16 rounds the product and the sum."""
    from .host import host_properties

    if dtype == _F16:
        if host_properties()["avx512fp16"]:
            return lambda a, b, c: xla_math.fma16(*(np.asarray(v, _F16) for v in (a, b, c))).astype(compute)
        q = _rounder(dtype)
        return lambda a, b, c: q(q(a * b) + c)
    if compute == _F32:
        return lambda a, b, c: xla_math.fma32(np.asarray(a, _F32), np.asarray(b, _F32), np.asarray(c, _F32))
    return lambda a, b, c: xla_math.fma64_full_range(a, b, c)


@register(nx.BatchNormTrainingOp)
def _batch_norm_training(op, ctx):
    p = _BatchNormPlan(op, ctx)
    q, f = p.q, p.feature

    def training(operand, scale, offset):
        x, scale, offset = p.load(operand, scale, offset)
        # XLA's simplifier makes the divisions by the element count products with its reciprocal.
        mean = q(p.total(x) * p.inverse_count)
        # E[x^2] - E[x]^2: the first operand's product is contracted (the square sum's too, in its loop).
        var = p.fma(p.total_of_products(x, x), p.inverse_count, -q(mean * mean))
        normalized = q(q(x - f(mean)) * p.rsqrt(q(f(var) + p.epsilon)))
        return p.store(p.fma(normalized, f(scale), f(offset)), mean, var)

    return training


@register(nx.BatchNormInferenceOp)
def _batch_norm_inference(op, ctx):
    p = _BatchNormPlan(op, ctx)
    q, f = p.q, p.feature

    def inference(operand, scale, offset, mean, variance):
        x, scale, offset, mean, variance = p.load(operand, scale, offset, mean, variance)
        true_scale = q(scale * p.rsqrt(q(variance + p.epsilon)))
        true_shift = p.fma(-mean, true_scale, offset)  # offset - mean * true_scale, contracted
        return p.store(p.fma(x, f(true_scale), f(true_shift)))[0]

    return inference


@register(nx.BatchNormGradOp)
def _batch_norm_grad(op, ctx):
    p = _BatchNormPlan(op, ctx)
    q, f = p.q, p.feature

    def grad(operand, scale, mean, variance, grad_output):
        x, scale, mean, variance, g = p.load(operand, scale, mean, variance, grad_output)
        var_eps = q(f(variance) + p.epsilon)
        centered = q(x - f(mean))
        sum_g_centered = p.total_of_products(g, centered)
        grad_offset = p.total(g)
        grad_scale = q(sum_g_centered * p.rsqrt(q(variance + p.epsilon)))
        i1_minus_offset = p.fma(g, p.count, -f(grad_offset))  # g * count - grad_offset, contracted
        product = q(f(sum_g_centered) * centered)
        if p.reciprocal is not None:  # i5 = product * (1 / var_eps): contracted into the subtraction
            i6 = p.fma(-product, p.reciprocal(var_eps), i1_minus_offset)
        else:
            i6 = q(i1_minus_offset - p.divide(product, var_eps))
        grad_operand = q(q(q(f(scale) * p.rsqrt(var_eps)) * p.inverse_count) * i6)
        return p.store(grad_operand, grad_scale, grad_offset)

    return grad


# ----------------------------------------------------------------------------
# rng
# ----------------------------------------------------------------------------

_RNG_SEED = 0x5EED
"""Seed of every compiled hlo.rng op's generator (a compiled program is reproducible; its calls are not)."""


def _uniform_floats(generator, shape, dtype, a, b):
    """XLA's ConvertRandomBitsToUniformFloatingPoint: mantissa-many random bits scaled into [a, b)."""
    compute = _compute_dtype(dtype)
    mantissa = ml_dtypes.finfo(dtype).nmant
    word = 64 if mantissa > 32 else 32
    bits = generator.integers(0, 1 << word, size=shape, dtype=np.uint64 if word == 64 else np.uint32)
    fraction = (bits >> (word - mantissa)).astype(compute) * compute.type(2.0 ** -mantissa)
    a, b = np.asarray(a).astype(compute), np.asarray(b).astype(compute)
    return (fraction * (b - a) + a).astype(dtype)


def _uniform_ints(generator, shape, dtype, a, b):
    """XLA's ConvertRandomBitsToUniformInt: ``a + bits % (b - a)`` in unsigned arithmetic of the
    element's width (wrapping; ``b == a`` keeps the bits, as XLA's ``x % 0 == x``)."""
    width = element_type_from_dtype(dtype).bits
    mask = (1 << width) - 1
    bits = generator.integers(0, mask, size=shape, dtype=np.uint64, endpoint=True)
    lo = int(np.asarray(a).astype(np.int64)) & mask
    span = (int(np.asarray(b).astype(np.int64)) - lo) & mask
    dist = bits % np.uint64(span) if span else bits
    half = dist >> np.uint64(1)
    value = (np.uint64(lo) + half + (dist - half)) & np.uint64(mask)
    if dtype == np.bool_:
        return value != 0
    if dtype.kind == "u" or (dtype.kind == "V" and element_type_from_dtype(dtype).kind == "uint"):
        return value.astype(dtype)
    signed = value.view(np.int64) if width == 64 else value.astype(np.int64)
    if width < 64:
        signed = np.where(signed > mask >> 1, signed - (1 << width), signed)
    return signed.astype(dtype)


@register(nx.RngOp)
def _rng(op, ctx):
    distribution = string(op.properties["rng_distribution"])
    result = op.results[0].type
    shape, dtype = tuple(result.get_shape()), ctx.dtype(result)
    generator = np.random.default_rng(_RNG_SEED)

    def check(dims):
        if tuple(np.asarray(dims).tolist()) != shape:
            raise ExecutionError(f"hlo.rng: the shape operand {np.asarray(dims).tolist()} does not match the "
                                 f"declared result shape {list(shape)}")

    if distribution == "NORMAL":
        compute = _compute_dtype(dtype)

        def normal(mu, sigma, dims):
            check(dims)
            z = generator.standard_normal(shape).astype(compute)
            return (z * np.asarray(sigma).astype(compute) + np.asarray(mu).astype(compute)).astype(dtype)

        return normal
    draw = _uniform_floats if element_type_of(result.element_type).kind == "float" else _uniform_ints

    def uniform(a, b, dims):
        check(dims)
        return draw(generator, shape, dtype, a, b)

    return uniform


# ----------------------------------------------------------------------------
# rng_bit_generator: Threefry-2x32 and Philox-4x32 as XLA's prng.cc uses them
# ----------------------------------------------------------------------------

_U32, _U64 = np.uint32, np.uint64
_MASK32, _MASK64 = (1 << 32) - 1, (1 << 64) - 1
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PHILOX_M = (_U64(0xD2511F53), _U64(0xCD9E8D57))
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)

# Key and counter arithmetic on scalars is done in Python ints (masked), arrays wrap in NumPy.


def _halves(x: int) -> tuple[int, int]:
    """u64 -> (low u32, high u32) as Python ints."""
    return x & _MASK32, (x >> 32) & _MASK32


def _split64(x: np.ndarray):
    """u64 array -> (low u32 array, high u32 array)."""
    return (x & _U64(_MASK32)).astype(_U32), (x >> _U64(32)).astype(_U32)


def _join64(lo, hi):
    return lo.astype(_U64) | (hi.astype(_U64) << _U64(32))


def _rotl(v, r):
    return (v << _U32(r)) | (v >> _U32(32 - r))


def threefry2x32(x0, x1, k0: int, k1: int):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011) on u32 arrays ``x0, x1`` and key ``k0, k1``."""
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    x0, x1 = x0 + _U32(ks[0]), x1 + _U32(ks[1])
    for block in range(5):
        for r in _THREEFRY_ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        # Key injection after every four rounds: key words rotate, plus the injection count.
        x0 = x0 + _U32(ks[(block + 1) % 3])
        x1 = x1 + _U32((ks[(block + 2) % 3] + block + 1) & _MASK32)
    return x0, x1


def philox4x32(c, k0: int, k1: int):
    """Philox-4x32 with 10 rounds on a list of four u32 counter arrays ``c`` and key ``k0, k1``."""
    for _ in range(10):
        p0 = c[0].astype(_U64) * _PHILOX_M[0]
        p1 = c[2].astype(_U64) * _PHILOX_M[1]
        hi0, lo0 = (p0 >> _U64(32)).astype(_U32), p0.astype(_U32)
        hi1, lo1 = (p1 >> _U64(32)).astype(_U32), p1.astype(_U32)
        c = [hi1 ^ c[1] ^ _U32(k0), lo1, hi0 ^ c[3] ^ _U32(k1), lo0]
        k0, k1 = (k0 + _PHILOX_W[0]) & _MASK32, (k1 + _PHILOX_W[1]) & _MASK32
    return c


def _split_shape(shape: tuple[int, ...]):
    """XLA's SplitShapeIntoHalves: (half shape, split dimension); the split dimension is halved
    (rounded up) and followed by a new dimension of size 1 where the two halves are concatenated."""
    if not shape:
        return (1,), 0
    split = next((i for i, d in enumerate(shape) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(shape)), key=lambda i: (shape[i], -i))  # the first largest dimension
    half = list(shape)
    half[split] = -(-shape[split] // 2)
    half.insert(split + 1, 1)
    return tuple(half), split


def _counters(start: int, n: int) -> np.ndarray:
    """``start + [0, n)`` as u64, wrapping."""
    return _U64(start) + np.arange(n, dtype=_U64)


def threefry_bits(key: int, counter: int, shape: tuple[int, ...], width: int):
    """(bits, new counter) of XLA's ThreeFryRngBit32/64 for a key and 64-bit counter."""
    k0, k1 = _halves(key)
    if width == 64:
        n = int(np.prod(shape, dtype=np.int64))
        x0, x1 = threefry2x32(*_split64(_counters(counter, n)), k0, k1)
        return _join64(x0, x1).reshape(shape), (counter + n) & _MASK64
    # 32-bit words: each Threefry block yields two words, for the two halves of the split shape.
    half, split = _split_shape(shape)
    n = int(np.prod(half, dtype=np.int64))
    x0, x1 = threefry2x32(*_split64(_counters(counter, n)), k0, k1)
    if not shape:
        return x0.reshape(()), (counter + n) & _MASK64
    both = np.concatenate([x0.reshape(half), x1.reshape(half)], axis=split + 1)
    padded = list(shape)
    padded[split] = half[split] * 2
    bits = both.reshape(padded)[tuple(slice(0, d) for d in shape)]
    return bits, (counter + n) & _MASK64


def philox_bits(key: int, counter: int, shape: tuple[int, ...], width: int):
    """(bits, new counter) of XLA's PhiloxRngBit32/64 for a key and 128-bit counter (Python ints)."""
    k0, k1 = _halves(key)
    n = int(np.prod(shape, dtype=np.int64))
    blocks = -(-(n * 2 if width == 64 else n) // 4)  # four u32 words per Philox block
    lo = _counters(counter & _MASK64, blocks)
    hi = np.where(lo < _U64(counter & _MASK64), _U64(((counter >> 64) + 1) & _MASK64), _U64(counter >> 64))
    c = philox4x32([*_split64(lo), *_split64(hi)], k0, k1)
    parts = [_join64(c[0], c[1]), _join64(c[2], c[3])] if width == 64 else c
    # Words of one block are consecutive outputs (round-robin over the block's lanes).
    bits = np.stack(parts, axis=1).reshape(-1)[:n].reshape(shape)
    return bits, (counter + blocks) & ((1 << 128) - 1)


@register(nx.RngBitGeneratorOp)
def _rng_bit_generator(op, ctx):
    algorithm = string(op.properties["rng_algorithm"])
    if algorithm == "DEFAULT":
        algorithm = "PHILOX"  # XLA's CPU compiler: RngBitGeneratorExpander(RNG_PHILOX)
    out = op.results[1].type
    shape, dtype = tuple(out.get_shape()), ctx.dtype(out)
    bits_width = element_type_of(out.element_type).bits
    width = 64 if bits_width == 64 else 32
    state_size = op.operands[0].type.get_shape()[0]
    storage = np.dtype(_UINT[dtype.itemsize])
    mask = storage.type((1 << bits_width) - 1) if bits_width < 8 * storage.itemsize else None

    def as_output(bits):
        # Narrow types take the low bits of the 32-bit words (XLA converts u32 -> uN); floats are raw bits.
        raw = bits.astype(storage)
        if mask is not None:
            raw = raw & mask
        return raw.view(dtype)

    def generate(state):
        words = [int(w) for w in np.asarray(state, _U64)]
        key = words[0]
        if algorithm == "THREE_FRY":
            bits, counter = threefry_bits(key, words[1], shape, width)
            new_state = [key, counter]
        elif state_size >= 3:
            bits, counter = philox_bits(key, words[1] | (words[2] << 64), shape, width)
            new_state = [key, counter & _MASK64, counter >> 64]
        else:  # u64[2]: XLA reverses the state, so the counter is (low = state[1], high = state[0])
            bits, counter = philox_bits(key, words[1] | (key << 64), shape, width)
            new_state = [key, counter & _MASK64]
        return np.array(new_state, _U64), as_output(bits)

    return generate
