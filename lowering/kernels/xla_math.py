"""XLA CPU's own approximations of exp, log, tanh, expm1, log1p, erf, logistic and rsqrt, bit for bit.

XLA CPU does not call libm for most transcendental functions: it emits its own
polynomial or rational approximations (Eigen's ``pexp``/``plog``/``ptanh``
algorithms with Cephes' coefficients, XLA's ``EmitExpm1``/``EmitLog1p``
formulas over them, a rational f32 erf, and for rsqrt the CPU's own estimate
instruction refined by Newton steps), vectorized by LLVM, with LLVM's fused
multiply-adds and the CPU's FTZ/DAZ flushing. Each is written once, as a numba
scalar function with the hardware FMA (:mod:`lowering.kernels.xla_scalar`,
:mod:`lowering.kernels.scalar`): the op's scalar definition, which fused
kernels and compiled loops call; the interpreter's f32 and f64 kernels here
are those definitions as ufuncs (:class:`Definition`), bit-exact against
``jax.jit`` (``tests/test_xla_math.py``).

What remains in NumPy: the f16 arithmetic around f32 parts (XLA computes f16
expm1 and logistic rounding to f16 after each step), and the fused
multiply-add emulations the complex kernels and the ``fma`` op use (an f32 FMA
emulated in f64 with a midpoint correction, :func:`fma32`; f64 FMAs with
error-free transformations, :func:`fma64`), run :func:`blockwise` on blocks
of :data:`BLOCK` elements so that their temporaries stay in cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from . import xla_scalar
from . import cpu_rsqrt, libm

f32, f64 = np.float32, np.float64

BLOCK = 1 << 16
"""Elements per block: the temporaries of one block fit in the L2 cache."""


def blockwise(fn: Callable) -> Callable:
    """Run the element-wise ``fn`` on cache-sized blocks of its (flattened) operand."""

    @functools.wraps(fn)
    def run(x):
        x = np.asarray(x)
        if x.size <= BLOCK:
            return fn(x)
        flat = x.ravel()
        first = fn(flat[:BLOCK])
        out = np.empty(flat.shape, first.dtype)
        out[:BLOCK] = first
        for start in range(BLOCK, flat.size, BLOCK):
            out[start:start + BLOCK] = fn(flat[start:start + BLOCK])
        return out.reshape(x.shape)

    return run


def _f32(bits: int) -> np.float32:
    """The f32 constant with IEEE bit pattern ``bits`` (as XLA's IR spells its constants)."""
    return np.uint32(bits).view(f32)


class Definition:
    """An element-wise function that is an op's scalar definition (:mod:`lowering.kernels.scalar`, numba,
    with the hardware FMA), applied to arrays of ``dtype`` as its ufunc (compiled on first call, cached on
    disk): the interpreter computes with the code the fused and compiled loops call. One pass over memory,
    so kernel tables need not run it :func:`blockwise`."""

    def __init__(self, name: str, dtype):
        self.name, self.dtype, self._ufunc = name, np.dtype(dtype), None
        self.__doc__ = f"XLA CPU's ``{name}``: :func:`lowering.kernels.scalar.{name}` as a ufunc."

    def __call__(self, x):
        fn = self._ufunc
        if fn is None:
            from . import scalar

            fn = self._ufunc = scalar.ufunc(scalar.Scalar(self.name), [self.dtype], self.dtype)
        return fn(x)

    def __repr__(self) -> str:
        return f"xla_math.Definition({self.name!r})"


# ----------------------------------------------------------------------------
# f32 building blocks
# ----------------------------------------------------------------------------



def fma32(a, b, c):
    """f32 ``a * b + c`` rounded once, as the FMA instruction computes it (operands f32 arrays/scalars).

    ``a * b`` is exact in f64; ``fl64(a * b + c)`` rounded to f32 is correct unless the
    f64 rounding produced an exact f32 midpoint (low 29 significand bits 1000...0):
    then the f64 sum's rounding error (Knuth's two-sum) says which way to go.
    """
    return _sum32(np.multiply(a, b, dtype=f64), c)


_MIDPOINT_SHIFT, _SHIFTED_MIDPOINT = np.int64(35), np.iinfo(np.int64).min


def _midpoints(s):
    """Flat indices where the f64 array ``s`` sits exactly on an f32 rounding midpoint, or None (the
    usual case). Shifting the low 29 bits to the top maps the midpoint pattern, and only it, to the
    int64 minimum, so one shift and one reduction decide (instead of a mask, a compare and a search)."""
    shifted = np.left_shift(s.view(np.int64), _MIDPOINT_SHIFT)
    if shifted.size == 0 or shifted.min() != _SHIFTED_MIDPOINT:
        return None
    return np.flatnonzero(shifted == _SHIFTED_MIDPOINT)


def _sum32(p, c):
    """``p + c`` rounded once to f32, for an exact f64 product ``p`` and an f32 (or f32-valued) ``c``."""
    s = np.asarray(np.add(p, c, dtype=f64))
    idx = _midpoints(s)
    if idx is not None:  # rare: about 2**-28 of random operands, but common for short operands
        ps = p.ravel()[idx] if np.ndim(p) else p
        cs = np.broadcast_to(np.asarray(c, f64), s.shape).ravel()[idx]
        ss = s.ravel()[idx]
        bb = ss - ps
        err = (ps - (ss - bb)) + (cs - bb)
        s = s.ravel().copy()
        s[idx] = np.where(err == 0, ss, np.nextafter(ss, np.copysign(np.inf, err)))
        s = s.reshape(np.shape(p))
    return s.astype(f32)


def horner32(x, coeffs):
    """``((c0 x + c1) x + c2) ...`` in f32 with fused multiply-adds (LLVM's contraction)."""
    xd = np.asarray(x, f64)  # converted once: mixed f32 * f32 -> f64 products are slower
    p = _sum32(np.multiply(coeffs[0], xd, dtype=f64), coeffs[1])
    for c in coeffs[2:]:
        p = _sum32(np.multiply(p, xd, dtype=f64), c)
    return p


# ----------------------------------------------------------------------------
# f32 exp, log, tanh and the functions built on them
# ----------------------------------------------------------------------------

# XLA CPU's f32 exp (Eigen's pexp_float; results below the normal range flush to 0), log (plog_float: 0 and
# denormals give -inf, negative numbers, -inf and NaN the all-ones NaN), tanh (ptanh_float of x clamped to
# ±7.9053111, x itself for |x| < 0.0004, ±1 from 20) and XLA's EmitExpm1 over them: written once, in
# lowering.kernels.xla_scalar, registered in lowering.kernels.scalar.
exp_f32 = Definition("exp_f32", f32)
log_f32 = Definition("log_f32", f32)
tanh_f32 = Definition("tanh_f32", f32)
expm1_f32 = Definition("expm1_f32", f32)


def round_f16(x):
    """f32 values rounded to f16 precision (LLVM computes f16 arithmetic in f32, rounding after each op)."""
    return x.astype(np.float16).astype(f32)


def expm1_f16(x):
    """XLA's ``EmitExpm1`` in f16 arithmetic (x: f16 values held in f32; returns f16 values in f32).

    Unlike bf16, which XLA computes in f32, f16 expm1 rounds to f16 after each step of the formula;
    only tanh(x/2) is evaluated in f32.
    """
    e = round_f16(exp_f32(x))
    half = round_f16(x * f32(0.5))
    t = round_f16(tanh_f32(half))
    r = np.where(np.abs(x) > f32(0.5), round_f16(e - f32(1)), round_f16(round_f16(e + f32(1)) * t))
    return np.where(half == 0, x, r)


logistic_f32 = Definition("logistic_f32", f32)
"""XLA CPU's f32 logistic ``1 / (1 + exp(-x))`` with its own exp (:func:`lowering.kernels.xla_scalar.logistic_f32`)."""


def logistic_f16(x):
    """XLA's f16 logistic: ``1 / (1 + exp(-x))`` in f16 arithmetic around XLA's f32 exp."""
    return round_f16(f32(1) / round_f16(round_f16(exp_f32(-x)) + f32(1)))


log1p_f32 = Definition("log1p_f32", f32)
"""XLA's ``EmitLog1p`` in f32 (:func:`lowering.kernels.xla_scalar.log1p_f32`)."""

erf_f32 = Definition("erf_f32", f32)
"""XLA CPU's f32 erf: ``x P(x²) / Q(x²)``, ±1 for |x| >= 3.8325066 (:func:`lowering.kernels.xla_scalar.erf_f32`)."""


def rsqrt_f32(x):
    """XLA CPU's f32 rsqrt on this host: the CPU's own estimate refined by Newton steps
    (see :mod:`.cpu_rsqrt`)."""
    return cpu_rsqrt.rsqrt(x)


# ----------------------------------------------------------------------------
# f64 (XLA CPU's f64 exp and tanh are Eigen-derived too; its erf is libm's)
#
# Each multiply-add here is an exactly rounded fused one, emulated with
# error-free transformations (Dekker's product, Knuth's sum, and Boldo and
# Melquiond's round-to-odd for the final sum).
# ----------------------------------------------------------------------------

_DEKKER_SPLIT = 134217729.0  # 2**27 + 1


def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e == a + b exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    """Dekker's split: (hi, lo) with hi + lo == a exactly, each half fitting in 26 bits."""
    t = _DEKKER_SPLIT * a
    hi = t - (t - a)
    return hi, a - hi


def _fma64_split(a, b, bh, bl, c, finite: bool):
    """:func:`fma64` with ``b`` already split (Horner's rule multiplies by the same x at every step)."""
    ph = a * b
    ah, al = _split(a)
    pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl  # a * b == ph + pl exactly (Dekker)
    sh, sl = _two_sum(c, ph)
    # Round sl + pl to odd, so that adding it to sh rounds once (Boldo & Melquiond).
    t, err = _two_sum(sl, pl)
    inexact_even = (err != 0) & ((t.view(np.int64) & 1) == 0)
    t = np.where(inexact_even, np.nextafter(t, np.copysign(np.inf, err)), t)
    r = sh + t
    # An exact zero (c == -a*b, so ph + c is exact) takes its sign from IEEE addition, as in the FMA.
    r = np.where(r == 0, ph + c, r)
    if finite:
        return r
    plain = ph + c
    return np.where(np.isfinite(plain), r, plain)


def fma64(a, b, c, finite: bool = False):
    """Correctly rounded f64 ``a * b + c`` (|a|, |b| well below 2**996); where ``a * b + c`` is not
    finite, that value (infinities and NaN as the hardware FMA gives them). ``finite=True`` skips
    that check where the caller knows the operands finite (NaN still gives NaN)."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    bh, bl = _split(b)
    return _fma64_split(a, b, bh, bl, c, finite)


def fma16(a, b, c):
    """f16 ``a * b + c`` rounded once (the AVX512-FP16 FMA): the f64 product is exact and the f64 sum is
    exact whenever its rounding could matter (a finite f16 result spans at most 41 bits of it)."""
    f16 = np.float16
    return (np.multiply(a, b, dtype=f64) + np.asarray(c, f64)).astype(f16)


_STEP = 600  # scaling steps of 2**600 keep every operand fma64 handles exact
_BIG, _SMALL, _TINY_PRODUCT, _VANISHING = 995, -900, -900, -1100  # binary exponents
_TINY64 = np.finfo(np.float64).tiny
_STICKY = np.float64(2.0 ** -1000)


def _scaled(x, steps):
    """``x * 2**(600 * steps)`` (integer array ``steps``), one exact multiply per step."""
    for k in range(int(np.max(np.abs(steps), initial=0))):
        x = x * np.where(steps > k, 2.0 ** _STEP, np.where(steps < -k, 2.0 ** -_STEP, 1.0))
    return x


def fma64_full_range(a, b, c, flush: bool = True):
    """``fma64`` for every f64 operand.

    ``fma64``'s exact (Dekker) product needs factors in [2**-900, 2**995) and a product above
    about 2**-900: other factors are scaled by powers of 2**600 (``c`` by the same power as the
    product) and the result scaled back (a denormal result then rounds twice where denormals are
    kept; XLA's default flushes it). A product below 2**-1100 leaves ``c`` (or a zero of its sign
    when ``c`` is 0); an infinite ``c`` with finite factors is the result (the exact product is
    finite); a zero or non-finite factor computes ``a*b + c`` as IEEE does.
    """
    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    regular = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
    ea, eb = np.frexp(a)[1], np.frexp(b)[1]
    ea, eb = np.where(regular, ea, 0), np.where(regular, eb, 0)
    sa = np.where(ea >= _BIG, -1, np.where(ea < _SMALL, 1, 0))
    sb = np.where(eb >= _BIG, -1, np.where(eb < _SMALL, 1, 0))
    # a product still below 2**-900 after that: scale the smaller factor once more
    ea2, eb2 = ea + sa * _STEP, eb + sb * _STEP
    low = ea2 + eb2 < _TINY_PRODUCT
    sa = sa + (low & (ea2 <= eb2))
    sb = sb + (low & (ea2 > eb2))
    vanishing = regular & (ea + eb < _VANISHING)
    special = ~regular & ((np.abs(a) >= 2.0 ** _BIG) | (np.abs(b) >= 2.0 ** _BIG) | ~np.isfinite(a * b))
    if not (sa.any() or sb.any() or special.any()):
        return fma64(a, b, c)
    shift = sa + sb
    c_scaled = _scaled(c, shift)
    # A c scaled below 2**-1000 is far below the product's last bit: it only decides ties, by its
    # sign, which 2**-1000 of that sign does as well. One scaled past the largest f64 is the result.
    lost = (shift < 0) & (c != 0) & (np.abs(c_scaled) < _STICKY)
    c_scaled = np.where(lost, np.copysign(_STICKY, c), c_scaled)
    overflow = np.isinf(c_scaled) & np.isfinite(c)
    r = fma64(_scaled(a, sa), _scaled(b, sb), np.where(overflow, 0.0, c_scaled))
    r = np.where(overflow, c, _scaled(r, -shift))
    c_read = np.where(np.abs(c) < _TINY64, 0.0, c) if flush else c  # DAZ reads denormals as 0
    r = np.where(vanishing, np.where(c_read == 0, np.copysign(0.0, a * b), c_read), r)
    r = np.where(special, a * b + c, r)
    return np.where(np.isinf(c) & regular, c, r)


def horner64(x, coeffs, finite: bool = False):
    """``((c0 x + c1) x + c2) ...`` with fused multiply-adds."""
    x = np.asarray(x, np.float64)
    xh, xl = _split(x)
    p = np.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        p = _fma64_split(p, x, xh, xl, np.float64(c), finite)
    return p


# XLA CPU's f64 exp (Eigen's pexp: 0 below -708.396..., +inf above 709.78...), tanh (ptanh_double: ±1 for
# |x| >= 20, denormals read as 0) and logistic (1 / (1 + exp(-x)), denormal results flushed).
exp_f64 = Definition("exp_f64", f64)
tanh_f64 = Definition("tanh_f64", f64)
logistic_f64 = Definition("logistic_f64", f64)
expm1_f64 = Definition("expm1_f64", f64)
"""XLA's ``EmitExpm1`` in f64 over its own exp and tanh (:func:`lowering.kernels.xla_scalar.expm1_f64`)."""
log1p_f64 = Definition("log1p_f64", f64)
"""XLA's ``EmitLog1p`` in f64 (:func:`lowering.kernels.xla_scalar.log1p_f64`)."""
_LOG1P_P, _LOG1P_Q = xla_scalar.LOG1P64_P, xla_scalar.LOG1P64_Q  # (passes.small_loops reads them)


erf_f64 = Definition("erf_f64", f64)
"""XLA CPU's f64 erf: the C library's ``erf``, which it calls, denormals read as 0."""
log_f64 = Definition("log_f64", f64)
"""XLA CPU's f64 log: the C library's, denormals read as 0 (:func:`lowering.kernels.scalar.log_f64`)."""


def rsqrt_f64(x):
    """XLA CPU's f64 rsqrt on this host: with AVX-512 the CPU's own estimate refined by two Newton steps,
    else ``1 / sqrt(x)``; denormals read as 0 (DAZ). See :mod:`.cpu_rsqrt`."""
    return cpu_rsqrt.rsqrt(x)


def fma(a, b, c):
    """Fused ``a * b + c`` in the precision of ``a`` (f32 or f64), as LLVM contracts it on XLA CPU."""
    return fma32(a, b, c) if np.asarray(a).dtype == np.float32 else fma64(a, b, c)


def exp(x):
    """XLA CPU's own exp in the precision of ``x`` (f32 or f64)."""
    return exp_f32(x) if x.dtype == np.float32 else exp_f64(x)


def log(x):
    """XLA CPU's log in the precision of ``x`` (f32 or f64)."""
    return log_f32(x) if x.dtype == np.float32 else log_f64(x)


# ----------------------------------------------------------------------------
# f32 sine and cosine: XLA CPU calls the C library's sinf/cosf, which the executor
# calls too (lowering.kernels.libm), as its fused loops and compiled loops do: one
# definition, the same bits on any CPU (glibc picks its FMA or non-FMA build at
# run time for both), 10-40x faster than reproducing glibc's algorithm in NumPy.
# ----------------------------------------------------------------------------


def sin_f32(x):
    """XLA CPU's f32 sine: the C library's ``sinf`` (see the section comment)."""
    return libm.sin(np.asarray(x, f32))


def cos_f32(x):
    """XLA CPU's f32 cosine: the C library's ``cosf`` (see the section comment)."""
    return libm.cos(np.asarray(x, f32))


def sin(x):
    """The sine XLA CPU computes in the precision of ``x``: glibc's sinf for f32, libm's sin for f64."""
    return sin_f32(x) if x.dtype == np.float32 else libm.sin(x)


def cos(x):
    """The cosine XLA CPU computes in the precision of ``x``: glibc's cosf for f32, libm's cos for f64."""
    return cos_f32(x) if x.dtype == np.float32 else libm.cos(x)


def log1p(x):
    """XLA CPU's log1p in the precision of ``x`` (f32 or f64)."""
    return log1p_f32(x) if x.dtype == np.float32 else log1p_f64(x)
