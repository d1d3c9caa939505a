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

Low-precision floats (f16, bf16, f8) are computed in f32 and rounded once for
fft / cholesky / triangular_solve / batch norm, where XLA rounds after each
elementary op: results agree to a few ULPs of the narrow type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from xla_dialect.errors import ExecutionError
from xla_dialect.ops import numerics as nx
from xla_dialect.ops.base import ints, string
from xla_dialect.types import element_type_from_dtype, element_type_of

from ..registry import register

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


class _BatchNormPlan:
    """What the batch-norm kernels bake at lowering time: axes, feature reshape, epsilon, count."""

    def __init__(self, op, ctx):
        operand = op.operands[0].type
        self.dtype = ctx.dtype(operand)
        self.compute = _compute_dtype(self.dtype)
        index = op.properties["feature_index"].value.data
        shape = operand.get_shape()
        self.axes = tuple(i for i in range(len(shape)) if i != index)
        self.feature_shape = tuple(-1 if i == index else 1 for i in range(len(shape)))
        # XLA: epsilon is an f32 literal converted to the operand type.
        eps = np.float32(op.properties["epsilon"].value.data).astype(self.dtype)
        self.epsilon = eps.astype(self.compute)
        # Elements per feature: an s32 product converted to the operand type.
        count = int(np.prod([shape[i] for i in self.axes], dtype=np.int64))
        self.count = np.asarray(np.int32(count)).astype(self.dtype).astype(self.compute)

    def load(self, *arrays):
        return [np.asarray(a).astype(self.compute, copy=False) for a in arrays]

    def feature(self, v: np.ndarray) -> np.ndarray:
        return v.reshape(self.feature_shape)

    def total(self, x: np.ndarray) -> np.ndarray:
        return np.sum(x, axis=self.axes, dtype=self.compute)

    def store(self, *arrays):
        return tuple(a.astype(self.dtype) for a in arrays)


def _rsqrt(x):
    return 1 / np.sqrt(x)


@register(nx.BatchNormTrainingOp)
def _batch_norm_training(op, ctx):
    p = _BatchNormPlan(op, ctx)

    def training(operand, scale, offset):
        x, scale, offset = p.load(operand, scale, offset)
        mean = p.total(x) / p.count
        var = p.total(x * x) / p.count - mean * mean  # XLA: E[x^2] - E[x]^2
        normalized = (x - p.feature(mean)) * _rsqrt(p.feature(var) + p.epsilon)
        return p.store(normalized * p.feature(scale) + p.feature(offset), mean, var)

    return training


@register(nx.BatchNormInferenceOp)
def _batch_norm_inference(op, ctx):
    p = _BatchNormPlan(op, ctx)

    def inference(operand, scale, offset, mean, variance):
        x, scale, offset, mean, variance = p.load(operand, scale, offset, mean, variance)
        true_scale = scale * _rsqrt(variance + p.epsilon)
        true_shift = offset - mean * true_scale
        return p.store(x * p.feature(true_scale) + p.feature(true_shift))[0]

    return inference


@register(nx.BatchNormGradOp)
def _batch_norm_grad(op, ctx):
    p = _BatchNormPlan(op, ctx)

    def grad(operand, scale, mean, variance, grad_output):
        x, scale, mean, variance, g = p.load(operand, scale, mean, variance, grad_output)
        var_eps = p.feature(variance) + p.epsilon
        centered = x - p.feature(mean)
        sum_g_centered = p.total(g * centered)
        grad_offset = p.total(g)
        grad_scale = sum_g_centered * _rsqrt(variance + p.epsilon)
        i1 = g * p.count
        i5 = p.feature(sum_g_centered) * centered / var_eps
        i6 = (i1 - p.feature(grad_offset)) - i5
        grad_operand = (p.feature(scale) * _rsqrt(var_eps)) / p.count * i6
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
