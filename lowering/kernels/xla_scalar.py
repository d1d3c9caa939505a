"""XLA CPU's own approximations as numba scalar functions, with the hardware FMA.

f32: Eigen's exp, log, tanh and logistic, XLA's ``EmitExpm1``/``EmitLog1p``
formulas over them and its rational erf; f64: Eigen's exp and tanh, XLA's
expm1, log1p and logistic over them, and the C library's erf (which XLA CPU
calls). Each is written once per element, operation by operation in XLA's
order, with LLVM's ``fma`` intrinsic where XLA's code has a fused multiply-add:
the instruction XLA's own LLVM code uses, so the rounding is the same by
construction (checked bit for bit against jax.jit on every f32 input for exp,
log, tanh and logistic by the slow ``tests/test_xla_math.py::test_f32_exhaustive``,
and on samples, thresholds and special values in the default run). Explicit
flushes (denormal results of exp and logistic, denormal inputs of log, log1p,
erf and f64 tanh) are written out, so the results do not depend on the
executor's denormal mode beyond what the hardware does in both.

They are registered as the ops' scalar definitions in
:mod:`lowering.kernels.scalar`: the fused groups and compiled loops call them,
and the interpreter's kernels are their ufuncs
(:class:`lowering.kernels.xla_math.Definition`).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from ..runtime.loop_runtime import float_from_bits
from ..runtime.loop_runtime import fused_multiply_add as fma

_njit = numba.njit(cache=True, error_model="numpy", forceinline=True)
f32 = np.float32


def _c(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bit pattern of an f32 as an int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def f32_from_bits(typingctx, i):
    """The f32 with IEEE bit pattern ``i`` (an int32)."""
    if i != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


TINY = f32(np.finfo(np.float32).tiny)
NAN_ALL_ONES = _c(0xFFFFFFFF)
EXP_LOG2E = _c(0x3FB8AA3B)
EXP_LN2_HI, EXP_LN2_LO = _c(0x3F318000), _c(0xB95E8083)
EXP_P0, EXP_P1, EXP_P2, EXP_P3, EXP_P4 = (_c(b) for b in (0x39506967, 0x3AB743CE, 0x3C088908, 0x3D2AA9C1,
                                                            0x3E2AAAAA))
LOG_P = tuple(_c(b) for b in (0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF, 0xBE2AAE50, 0x3E4CCEAC,
                               0xBE7FFFFC, 0x3EAAAAAA))
LOG_P0, LOG_P1, LOG_P2, LOG_P3, LOG_P4, LOG_P5, LOG_P6, LOG_P7, LOG_P8 = LOG_P
SQRT_HALF = _c(0x3F3504F3)
TANH_CLAMP = _c(0x40FFF644)
TANH_P0, TANH_P1, TANH_P2, TANH_P3, TANH_P4, TANH_P5, TANH_P6 = (_c(b) for b in (
    0xA59F25C0, 0x2A61337E, 0xAEBD37FF, 0x335C0041, 0x3779434A, 0x3A270DED, 0x3BA059DC))
TANH_Q0, TANH_Q1, TANH_Q2, TANH_Q3 = (_c(b) for b in (0x35A0D3D8, 0x38F895D6, 0x3B14AA05, 0x3BA059DD))


@_njit
def _clamp(x, lo, hi):
    """``x`` clamped to ``[lo, hi]``; a NaN passes (with its payload)."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


@_njit
def _exp_parts(x):
    """(y, n) with exp(x) = y 2**n: Eigen's pexp_float (see xla_math._exp32_parts_exact)."""
    xc = _clamp(x, f32(-87.8), f32(88.8))
    n = np.floor(fma(xc, EXP_LOG2E, f32(0.5)))
    if n < f32(-127):
        n = f32(-127)
    elif n > f32(127):
        n = f32(127)
    r = fma(n, -EXP_LN2_HI, xc)
    r = fma(n, -EXP_LN2_LO, r)
    p = fma(EXP_P0, r, EXP_P1)
    p = fma(p, r, EXP_P2)
    p = fma(p, r, EXP_P3)
    p = fma(p, r, EXP_P4)
    p = fma(p, r, f32(0.5))
    y = fma(p, r * r, r) + f32(1)
    return y, n


@_njit
def _scale(n):
    """2**n from the exponent bits (n = -127 gives +0); a NaN n gives 1 (its y is NaN anyway)."""
    if n != n:
        return f32(1)
    return f32_from_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))


@_njit
def exp_f32_parts(x):
    """XLA CPU's f32 exp of ``x`` before its last multiply: the polynomial ``y`` and the scale ``2**n`` (+0 for
    ``n = -127``), whose product LLVM may contract into the add reading the exp
    (:func:`lowering.kernels.scalar.exp_add_f32`)."""
    y, n = _exp_parts(x)
    return y, _scale(n)


@_njit
def exp_f32(x):
    """XLA CPU's f32 exp; results below the normal range flush to 0.

    ``y * 2**n`` in f32 is exact whenever it is normal: ``y`` lies in [0.7, 2.2) and the scale is a power of
    two, so the only results below the normal range are n = -127 (a scale of +0) and n = -126 with y < 1,
    selected as +0 (y is positive or NaN). Computed so, branch-free, LLVM vectorizes loops calling it (a
    4M-element loop: 3.6 -> 1.5 ms on this 2-core VM); the same bits as the product formed in f64 and
    flushed, for every f32 input (and XLA's: tests/test_xla_math.py::test_f32_exhaustive)."""
    y, n = _exp_parts(x)
    result = y * _scale(n)
    if n == f32(-126) and y < f32(1):
        result = f32(0)
    return result


@_njit
def logistic_f32(x):
    """XLA CPU's f32 logistic ``1 / (1 + exp(-x))``: its exp's final scaling fused with the ``+ 1``;
    quotients below the normal range flush to 0."""
    y, n = _exp_parts(-x)
    q = 1.0 / np.float64(fma(y, _scale(n), f32(1)))
    if abs(q) < TINY:
        return f32(0)
    return f32(q)


@_njit
def tanh_f32(x):
    """XLA CPU's f32 tanh: Eigen's ptanh_float of x clamped to +-7.9053111; x for |x| < 4e-4, +-1 from 20.

    Written without early returns (the polynomial is always computed, the special ranges selected at the
    end), as Eigen's packet code does: LLVM then vectorizes loops calling it as straight-line selects
    (a numba loop of 4M tanh on this 2-core VM: 1.70 -> 1.40-1.46 ms, same bits)."""
    ax = abs(x)
    xc = _clamp(x, -TANH_CLAMP, TANH_CLAMP)
    x2 = xc * xc
    p = fma(TANH_P0, x2, TANH_P1)
    p = fma(p, x2, TANH_P2)
    p = fma(p, x2, TANH_P3)
    p = fma(p, x2, TANH_P4)
    p = fma(p, x2, TANH_P5)
    p = fma(p, x2, TANH_P6)
    q = fma(TANH_Q0, x2, TANH_Q1)
    q = fma(q, x2, TANH_Q2)
    q = fma(q, x2, TANH_Q3)
    r = (xc * p) / q
    if ax >= f32(20):
        r = f32(np.copysign(f32(1), x))
    if ax < f32(4e-4):
        r = x
    return r


@_njit
def log_f32(x):
    """XLA CPU's f32 log: Eigen's plog_float. 0 and denormals give -inf, +inf gives +inf, negative numbers,
    -inf and NaN the all-ones NaN.

    Branch-free (the special inputs selected after the polynomial, as Eigen's packet code does), so that
    LLVM vectorizes loops calling it (a 4M-element loop: 2.55 -> 1.64 ms on this 2-core VM); the same bits
    as with early returns, and as XLA's, for every f32 input (tests/test_xla_math.py::test_f32_exhaustive)."""
    bits = f32_bits(x)
    e = f32((bits >> np.int32(23)) - np.int32(127)) + f32(1)
    m = f32_from_bits(np.int32((bits & np.int32(-2139095041)) | np.int32(0x3F000000)))
    xm = m - f32(1)
    if m < SQRT_HALF:
        xm = xm + m
        e = e - f32(1)
    x2 = xm * xm
    x3 = x2 * xm
    y = fma(fma(xm, LOG_P0, LOG_P1), xm, LOG_P2)
    y1 = fma(fma(xm, LOG_P3, LOG_P4), xm, LOG_P5)
    y2 = fma(fma(xm, LOG_P6, LOG_P7), xm, LOG_P8)
    y = fma(fma(y, x3, y1), x3, y2)
    y = fma(y, x3, e * EXP_LN2_LO)
    result = fma(e, EXP_LN2_HI, fma(-x2, f32(0.5), xm) + y)
    if not (x > f32(0)):
        result = NAN_ALL_ONES
    if x == f32(np.inf):
        result = x
    if abs(x) < TINY:
        result = f32(-np.inf)
    return result


# ----------------------------------------------------------------------------
# f32 expm1, log1p and erf (XLA's EmitExpm1/EmitLog1p formulas over the functions above, its rational erf)
# ----------------------------------------------------------------------------

TWO_M125 = f32(2.0**-125)
LOG1P_THRESHOLD = _c(0x3ED413CD)  # sqrt(2) - 1
LOG1P_P = (f32(4.527e-05),) + tuple(_c(b) for b in (0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD,
                                                     0x41A05101))
LOG1P_Q = (f32(1),) + tuple(_c(b) for b in (0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982))
ERF_CLAMP = _c(0x407547CB)
ERF_P = tuple(_c(b) for b in (0x39702D51, 0x3B5F5DA2, 0x3D50B6EB, 0x3E3DA740, 0x3F906EBA))
ERF_Q = tuple(_c(b) for b in (0xB3FD3906, 0x37C588DF, 0x3A856D28, 0x3C6687D4, 0x3DE34C21, 0x3EFEB44A)) + (f32(1),)


@_njit
def _horner(x, coefficients):
    """``((c0 x + c1) x + c2) ...`` with fused multiply-adds (LLVM's contraction in XLA's code); the
    coefficients a tuple of constants of ``x``'s type."""
    p = coefficients[0]
    for c in coefficients[1:]:
        p = fma(p, x, c)
    return p


@_njit
def _daz32(x):
    """``x`` with a denormal read as a zero of its sign (the DAZ mode), in both executor modes."""
    return np.copysign(x - x, x) if abs(x) < TINY else x


@_njit
def expm1_f32(x):
    """XLA's ``EmitExpm1`` in f32: ``exp(x) - 1`` for |x| > 0.5, else ``tanh(x/2) (exp(x) + 1)``, with XLA's
    own f32 exp (its product ``y 2**n`` not flushed: only its sums with +-1 are used) and tanh; ``x`` itself
    where ``x/2`` flushes to 0 (|x| < 2**-125: tiny before rounding)."""
    y, n = _exp_parts(x)
    e = y * _scale(n)
    large = e - f32(1)
    small = tanh_f32(x * f32(0.5)) * (e + f32(1))  # (both computed: selects, no branches)
    r = large if abs(x) > f32(0.5) else small
    return x if abs(x) < TWO_M125 else r


@_njit
def log1p_f32(x):
    """XLA's ``EmitLog1p`` in f32: Cephes' ``x - x^2/2 + x^3 P(x)/Q(x)`` for |x| < sqrt(2) - 1, else XLA's f32
    log of ``x + 1``; a denormal ``x`` read as 0."""
    x = _daz32(x)
    x2 = x * x
    small = x + fma(-x2, f32(0.5), (x * x2) * (_horner(x, LOG1P_P) / _horner(x, LOG1P_Q)))
    large = log_f32(x + f32(1))
    return small if abs(x) < LOG1P_THRESHOLD else large


@_njit
def erf_f32(x):
    """XLA CPU's f32 erf: ``x P(x^2) / Q(x^2)`` (degrees 9 and 12), +-1 for |x| >= 3.8325066; a denormal
    ``x`` read as 0."""
    x = _daz32(x)
    x2 = x * x
    r = (x * _horner(x2, ERF_P)) / _horner(x2, ERF_Q)
    return np.copysign(f32(1), x) if abs(x) >= ERF_CLAMP else r


# ----------------------------------------------------------------------------
# f64: Eigen's exp and tanh (Cephes' rational functions), XLA's expm1, log1p and logistic over them, the C
# library's erf (which XLA CPU calls for f64)
# ----------------------------------------------------------------------------

TINY64 = np.finfo(np.float64).tiny
EXP64_LO, EXP64_HI = -708.3964185322641, 709.782712893384
EXP64_LOG2E = 1.4426950408889634073599
EXP64_LN2_HI, EXP64_LN2_LO = 0.693145751953125, 1.42860682030941723212e-6
EXP64_P = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
EXP64_Q = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1, 2.00000000000000000009e0)
TANH64_CLAMP = 17.714196154005176
TANH64_P = (2.6158007860482230e-23, 7.6534862268749319e-19, 3.1309488231386680e-15, 4.2303918148209176e-12,
            2.4618379131293676e-09, 6.8644367682497074e-07, 9.3839087674268880e-05, 5.9809711724441161e-03,
            1.5184719640284322e-01, 1.0)
TANH64_Q = (6.463747022670968018e-21, 5.782506856739003571e-17, 1.293019623712687916e-13, 1.123643448069621992e-10,
            4.492975677839633985e-08, 8.785185266237658698e-06, 8.295161192716231542e-04, 3.437448108450402717e-02,
            4.851805297361760360e-01, 1.0)
TWO_M1021 = 2.0**-1021
LOG1P64_THRESHOLD = 0.41421356237309504880
LOG1P64_P = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1, 6.5787325942061044846969E0,
             2.9911919328553073277375E1, 6.0949667980987787057556E1, 5.7112963590585538103336E1,
             2.0039553499201281259648E1)
LOG1P64_Q = (1., 1.5062909083469192043167E1, 8.3047565967967209469434E1, 2.2176239823732856465394E2,
             3.0909872225312059774938E2, 2.1642788614495947685003E2, 6.0118660497603843919306E1)
_c_log = numba.types.ExternalFunction("log", types.float64(types.float64))
_c_erf = numba.types.ExternalFunction("erf", types.float64(types.float64))


@_njit
def _daz64(x):
    """``x`` with a denormal read as a zero of its sign (the DAZ mode), in both executor modes."""
    return np.copysign(x - x, x) if abs(x) < TINY64 else x


@_njit
def _power_of_two(k):
    """``2**k`` for an integer ``k`` in [-1022, 1023], from the exponent bits."""
    return float_from_bits((k + np.int64(1023)) << np.int64(52))


@_njit
def exp_f64(x):
    """XLA CPU's f64 exp: Eigen's ``pexp`` (Cephes' P/Q on [-ln2/2, ln2/2], scaled by ``2**n``); 0 below
    -708.396... (no denormal results but from the final scaling's rounding), +inf above 709.78...

    The scaling ``e 2**n`` (n in [-1022, 1024], 0.7 < e < 1.5) is two multiplies by powers of two, the
    first exact: one rounding of the exact product, as ``ldexp`` gives it, in both denormal modes."""
    xc = _clamp(x, EXP64_LO, EXP64_HI)
    n = np.floor(fma(xc, EXP64_LOG2E, 0.5))
    g = fma(n, -EXP64_LN2_LO, xc - n * EXP64_LN2_HI)
    g2 = g * g
    p = _horner(g2, EXP64_P) * g
    q = _horner(g2, EXP64_Q)
    e = (p / (q - p)) * 2.0 + 1.0
    k = np.int64(n) if n == n else np.int64(0)
    half = k >> np.int64(1)
    out = (e * _power_of_two(half)) * _power_of_two(k - half)
    if x > EXP64_HI:
        out = np.inf
    if x < EXP64_LO:
        out = 0.0
    return out


@_njit
def tanh_f64(x):
    """XLA CPU's f64 tanh: Eigen's ``ptanh_double`` rational function of x clamped to +-17.714196154005176,
    +-1 for |x| >= 20; a denormal ``x`` read as 0."""
    x = _daz64(x)
    xc = _clamp(x, -TANH64_CLAMP, TANH64_CLAMP)
    x2 = xc * xc
    r = (xc * _horner(x2, TANH64_P)) / _horner(x2, TANH64_Q)
    return np.copysign(1.0, x) if abs(x) >= 20.0 else r


@_njit
def expm1_f64(x):
    """XLA's ``EmitExpm1`` in f64: ``exp(x) - 1`` for |x| > 0.5, else ``tanh(x/2) (exp(x) + 1)``, with XLA's
    own exp and tanh; ``x`` itself where ``x/2`` flushes to 0 (|x| < 2**-1021)."""
    e = exp_f64(x)
    large = e - 1.0
    small = tanh_f64(x * 0.5) * (e + 1.0)  # (both computed: selects, no branches)
    r = large if abs(x) > 0.5 else small
    return x if abs(x) < TWO_M1021 else r


@_njit
def log1p_f64(x):
    """XLA's ``EmitLog1p`` in f64: Cephes' ``x - x^2/2 + x^3 P(x)/Q(x)`` for |x| < sqrt(2) - 1, else the C
    library's ``log(x + 1)``; a denormal ``x`` read as 0."""
    x = _daz64(x)
    if abs(x) >= LOG1P64_THRESHOLD:  # (a branch: the C library's log is a call, not vectorized anyway)
        return _c_log(x + 1.0)
    x2 = x * x
    return fma(-0.5, x2, (x * x2) * (_horner(x, LOG1P64_P) / _horner(x, LOG1P64_Q))) + x


@_njit
def logistic_f64(x):
    """XLA CPU's f64 logistic ``1 / (1 + exp(-x))`` with its own exp; a denormal quotient flushes to 0."""
    q = 1.0 / (1.0 + exp_f64(-x))
    return 0.0 if abs(q) < TINY64 else q


@_njit
def erf_f64(x):
    """XLA CPU's f64 erf: the C library's ``erf``, which it calls; a denormal ``x`` read as 0."""
    return _c_erf(_daz64(x))
