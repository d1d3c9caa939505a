"""XLA CPU's own f32 exp, log, tanh and logistic as numba scalar functions, with the hardware FMA.

:mod:`lowering.kernels.xla_math` reproduces these approximations bit for bit
in NumPy, emulating each fused multiply-add in f64 with midpoint checks
(several passes over memory per operation). Here each is written once per
element, operation by operation in the same order, with LLVM's ``fma``
intrinsic: the instruction XLA's own LLVM code uses, so the rounding is the
same by construction (checked bit for bit against jax.jit on every f32 input
by the slow ``tests/test_xla_math.py::test_f32_exhaustive``, and on samples,
thresholds and special values in the default run). Explicit flushes
(denormal results of exp and logistic, denormal inputs of log) are kept as the
NumPy versions have them, so the results do not depend on the executor's
denormal mode beyond what the hardware does in both.

The functions are numba ``@njit`` scalar functions (called from fused groups
and compiled loops) and NumPy ufuncs built from them (:func:`ufunc`), used
as the executor's f32 kernels.
"""

from __future__ import annotations

import threading

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from .loop_runtime import fused_multiply_add as fma

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
def _exp_parts(x):
    """(y, n) with exp(x) = y 2**n: Eigen's pexp_float (see xla_math._exp32_parts_exact)."""
    xc = x
    if xc < f32(-87.8):
        xc = f32(-87.8)
    elif xc > f32(88.8):
        xc = f32(88.8)
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
    xc = x
    if xc < -TANH_CLAMP:
        xc = -TANH_CLAMP
    elif xc > TANH_CLAMP:
        xc = TANH_CLAMP
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


SCALAR_FUNCTIONS = {"exp": exp_f32, "log": log_f32, "tanh": tanh_f32, "logistic": logistic_f32}
"""Name -> numba scalar function (f32 -> f32)."""

_UFUNCS: dict[str, np.ufunc] = {}
_LOCK = threading.Lock()


def ufunc(name: str) -> np.ufunc:
    """The f32 NumPy ufunc of :data:`SCALAR_FUNCTIONS` ``[name]`` (compiled on first use, cached on disk)."""
    fn = _UFUNCS.get(name)
    if fn is None:
        with _LOCK:
            fn = _UFUNCS.get(name)
            if fn is None:
                scalar = SCALAR_FUNCTIONS[name]
                fn = _UFUNCS[name] = numba.vectorize([types.float32(types.float32)], nopython=True)(
                    lambda x: scalar(x))
    return fn
