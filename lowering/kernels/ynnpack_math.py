"""YNNPACK's element-wise exp, expm1, log, tanh and logistic, as numba scalar functions with the hardware FMA.

XLA CPU (jax 0.10.2) hands a reduce of 4,096 elements or more to YNNPACK (``__ynn_fusion``) and grows that
fusion over the element-wise ops around it (``passes.ynnpack_fusion`` says which). YNNPACK computes those ops
with its own approximations, not XLA's: an ``exp(x - max)`` of a large softmax differs from XLA's own exp in
about 4% of its elements by one ULP. These are YNNPACK's algorithms as the jax 0.10.2 build computes them on
x86 with FMA (measured: every element of a (64, 64) ``exp(x - max(x))`` equal to jax.jit, and the tests in
``tests/test_ynnpack_fusion.py``), one lane at a time -- every operation of YNNPACK's vector code is
lane-wise, so one element's result does not depend on its neighbours:

* ``exp`` / ``expm1``: ``x`` clamped to [-88.03, 88.72] (f32; f64 [-709.09, 709.78]); ``b = round(x *
  log2(e))`` by adding and subtracting ``1.5 * 2^23`` (2^52); ``r = x - b ln2`` in two fused steps (``ln2``
  split in a high and a low part); ``2^b`` built from the exponent bits (``b = -127`` gives +0, ``128``
  +inf); ``exp(r) - 1 ~= r + r^2 P(r)`` with ``P`` of degree 6 (f64: 10) evaluated in even and odd halves in
  ``r^2``; ``2^b * (exp(r) - 1) + (2^b - m)`` in one fused step (``m`` = 0 for exp, 1 for expm1); an
  infinite ``2^b`` is the result; a NaN ``x`` propagates.
* ``log``: the exponent of ``x`` (AVX-512 ``getexp``: NaN for ``x < 0``, -inf for 0) and its mantissa in
  [1, 2), halved above sqrt(2) with the exponent raised by one; ``r = m - 1``; ``log(1 + r) ~= r + r^2
  P(r)/Q(r)`` (f32: degrees 2 and 2; f64: 5 and 6), then ``e * ln2 + log(1 + r)`` in one fused step.
* ``tanh``: ``expm1(min(2x, 80)) / (expm1(min(2x, 80)) + 2)`` (f64: 300).
* ``logistic``: XLA expands it before fusing, as ``1 / (1 + exp(-x))``, its exp YNNPACK's.

Registered as the scalar definitions of ``exponential``, ``log``, ``tanh`` and ``logistic`` ops marked by
``ynnpack-fusion`` (:mod:`lowering.kernels.scalar`): the interpreter's kernels, fused loops and compiled
loops all call these functions.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from ..runtime.loop_runtime import float_from_bits
from ..runtime.loop_runtime import fused_multiply_add as fma

YNNPACK = "xla_cpu_ynn_fusion"
"""The attribute ``passes.ynnpack_fusion`` puts on an ``exponential``, ``log``, ``tanh`` or ``logistic`` op XLA CPU
computes inside a YNNPACK fusion: its scalar definition is then this module's."""

_njit = numba.njit(cache=True, error_model="numpy", forceinline=True)
f32, f64 = np.float32, np.float64


@intrinsic
def _bits(typingctx, x):
    """The IEEE bit pattern of an f32 (as an int32) or an f64 (as an int64)."""
    if x == types.float32:
        result, width = types.int32, 32
    elif x == types.float64:
        result, width = types.int64, 64
    else:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(width))

    return result(x), codegen


# f32 constants (YNNPACK's, rounded to f32 as its C++ source does).
_EXP32_P = tuple(f32(c) for c in (-4.9866619520e-05, 2.2773783712e-04, 1.4132461511e-03, 8.3242934197e-03,
                                  4.1665628552e-02, 1.6666725278e-01, 4.9999994040e-01))
_E32_P0, _E32_P1, _E32_P2, _E32_P3, _E32_P4, _E32_P5, _E32_P6 = _EXP32_P
_E32_LOG2E, _E32_LN2_HI, _E32_LN2_LO = f32(1.4426950408889634), f32(6.9314575195e-01), f32(1.4286067653e-06)
_E32_MIN, _E32_MAX = f32(-88.02969360351562), f32(88.72283935546875)
_ROUND32 = f32(1.5 * 2 ** 23)
_EXP2_32 = f32(127.0 + 2 ** 23)

# f64 constants.
_EXP64_P = (2.119890244143296032e-09, 2.521079371356939368e-08, 2.755585399809175769e-07, 2.755675838881680360e-06,
            2.480158976814372031e-05, 1.984127071808468106e-04, 1.388888888680978647e-03, 8.333333332743943569e-03,
            4.166666666668113195e-02, 1.666666666666796748e-01, 4.999999999999995559e-01)
(_E64_P0, _E64_P1, _E64_P2, _E64_P3, _E64_P4, _E64_P5, _E64_P6, _E64_P7, _E64_P8, _E64_P9,
 _E64_P10) = (f64(c) for c in _EXP64_P)
_E64_LOG2E, _E64_LN2_HI, _E64_LN2_LO = f64(1.4426950408889634), f64(6.93147180369123816490e-01), \
    f64(1.90821492927058770002e-10)
_E64_MIN, _E64_MAX = f64(-709.0895657128241), f64(709.782712893384)
_ROUND64 = f64(1.5 * 2 ** 52)
_EXP2_64 = f64(1023.0 + 2 ** 52)

_L32_P0, _L32_P1, _L32_P2 = f32(-5.2293352783e-03), f32(-3.3127889037e-01), f32(-4.9999964237e-01)
_L32_Q0, _L32_Q1, _L32_Q2 = f32(3.9658042789e-01), f32(1.3292170763e+00), f32(1.0)
_L64_P = tuple(f64(c) for c in (-2.956046447212538203e-03, -6.691314126082094360e-02, -4.289980732181625789e-01,
                                -1.110965361416291097e+00, -1.242991301338429500e+00, -4.999999999999990008e-01))
_L64_P0, _L64_P1, _L64_P2, _L64_P3, _L64_P4, _L64_P5 = _L64_P
_L64_Q = tuple(f64(c) for c in (3.009181610003072455e-03, 7.942469932969810353e-02, 6.369060590899747742e-01,
                                2.230802780023532605e+00, 3.823696902394678077e+00, 3.152649269343555716e+00, 1.0))
_L64_Q0, _L64_Q1, _L64_Q2, _L64_Q3, _L64_Q4, _L64_Q5, _L64_Q6 = _L64_Q
_MANTISSA32, _ONE32_BITS = np.int32(0x007FFFFF), np.int32(0x3F800000)
_MANTISSA64, _ONE64_BITS = np.int64(0x000FFFFFFFFFFFFF), np.int64(0x3FF0000000000000)
_SQRT2_32, _SQRT2_64 = f32(1.41421356237309504880), f64(1.41421356237309504880)
_LN2_32, _LN2_64 = f32(6.93147180559945309e-01), f64(6.93147180559945309e-01)
_EXP_32_LO, _EXP_64_LO = f32(-126.0), f64(-1022.0)


@_njit
def _exp32(x, m):
    """YNNPACK's f32 ``exp(x) - m`` (``m`` = 0: exp, 1: expm1)."""
    xc = min(max(x, _E32_MIN), _E32_MAX)
    b = (_ROUND32 + xc * _E32_LOG2E) - _ROUND32
    r = fma(b, -_E32_LN2_HI, xc)
    r = fma(b, -_E32_LN2_LO, r)
    scale = float_from_bits(np.int32(_bits(f32(b + _EXP2_32)) << np.int32(23)))
    if x != x:
        scale = x
    r2 = r * r
    even = fma(r2, fma(r2, fma(r2, _E32_P0, _E32_P2), _E32_P4), _E32_P6)
    odd = fma(r2, fma(r2, _E32_P1, _E32_P3), _E32_P5)
    p = fma(r, odd, even)
    exp_r = fma(r2, p, r)
    result = fma(scale, exp_r, scale - m)
    return scale if abs(scale) == np.inf else result


@_njit
def _exp64(x, m):
    """YNNPACK's f64 ``exp(x) - m`` (``m`` = 0: exp, 1: expm1)."""
    xc = min(max(x, _E64_MIN), _E64_MAX)
    b = (_ROUND64 + xc * _E64_LOG2E) - _ROUND64
    r = fma(b, -_E64_LN2_HI, xc)
    r = fma(b, -_E64_LN2_LO, r)
    scale = float_from_bits(np.int64(_bits(f64(b + _EXP2_64)) << np.int64(52)))
    if x != x:
        scale = x
    r2 = r * r
    even = fma(r2, fma(r2, fma(r2, fma(r2, fma(r2, _E64_P0, _E64_P2), _E64_P4), _E64_P6), _E64_P8), _E64_P10)
    odd = fma(r2, fma(r2, fma(r2, fma(r2, _E64_P1, _E64_P3), _E64_P5), _E64_P7), _E64_P9)
    p = fma(r, odd, even)
    exp_r = fma(r2, p, r)
    result = fma(scale, exp_r, scale - m)
    return scale if abs(scale) == np.inf else result


@_njit
def ynnpack_exp_f32(x):
    """YNNPACK's f32 exp (see the module docstring)."""
    return _exp32(x, f32(0))


@_njit
def ynnpack_exp_f64(x):
    """YNNPACK's f64 exp (see the module docstring)."""
    return _exp64(x, f64(0))


@_njit
def ynnpack_tanh_f32(x):
    """YNNPACK's f32 tanh: ``expm1(min(2x, 80)) / (expm1(min(2x, 80)) + 2)`` (a NaN propagates)."""
    two_x = f32(2) * x
    e = _exp32(two_x if two_x < f32(80) or two_x != two_x else f32(80), f32(1))
    return e / (e + f32(2))


@_njit
def ynnpack_tanh_f64(x):
    """YNNPACK's f64 tanh: ``expm1(min(2x, 300)) / (expm1(min(2x, 300)) + 2)`` (a NaN propagates)."""
    two_x = f64(2) * x
    e = _exp64(two_x if two_x < f64(300) or two_x != two_x else f64(300), f64(1))
    return e / (e + f64(2))


@_njit
def ynnpack_logistic_f32(x):
    """``1 / (1 + exp(-x))`` with YNNPACK's f32 exp (XLA expands logistic so before it fuses)."""
    return f32(1) / (f32(1) + _exp32(-x, f32(0)))


@_njit
def ynnpack_logistic_f64(x):
    """``1 / (1 + exp(-x))`` with YNNPACK's f64 exp."""
    return f64(1) / (f64(1) + _exp64(-x, f64(0)))


@_njit
def _exponent32(x):
    """AVX-512 ``getexp`` of an f32 as YNNPACK's log uses it: ``floor(log2|x|)`` as a float, -inf for a zero
    (a denormal read as zero under DAZ is one), +inf for +inf, NaN for ``x < 0`` (the default NaN) and a NaN
    ``x`` itself."""
    if x != x:
        return x
    if x < f32(0):
        return f32(np.nan)
    if x == f32(0):
        return f32(-np.inf)
    if x == f32(np.inf):
        return x
    e = (_bits(x) >> np.int32(23)) & np.int32(0xFF)
    if e == 0:  # (a denormal the executor keeps: its exponent from its leading bit)
        return f32(np.floor(np.log2(np.float64(x))))
    return f32(e - 127)


@_njit
def _exponent64(x):
    """AVX-512 ``getexp`` of an f64 (see :func:`_exponent32`)."""
    if x != x:
        return x
    if x < f64(0):
        return f64(np.nan)
    if x == f64(0):
        return f64(-np.inf)
    if x == f64(np.inf):
        return x
    e = (_bits(x) >> np.int64(52)) & np.int64(0x7FF)
    if e == 0:
        return np.floor(np.log2(x))
    return f64(e - 1023)


@_njit
def ynnpack_log_f32(x):
    """YNNPACK's f32 log (see the module docstring)."""
    e = _exponent32(x)
    m = float_from_bits(np.int32((_bits(x) & _MANTISSA32) | _ONE32_BITS))
    if m > _SQRT2_32:
        e = e + f32(1)
        m = m * f32(0.5)
    r = m - f32(1)
    r2 = r * r
    p = fma(r, _L32_P1, fma(r2, _L32_P0, _L32_P2))
    q = fma(r, _L32_Q1, fma(r2, _L32_Q0, _L32_Q2))
    log_r = fma(r2, p / q, r)
    return fma(e, _LN2_32, log_r)


@_njit
def ynnpack_log_f64(x):
    """YNNPACK's f64 log (see the module docstring)."""
    e = _exponent64(x)
    m = float_from_bits(np.int64((_bits(x) & _MANTISSA64) | _ONE64_BITS))
    if m > _SQRT2_64:
        e = e + f64(1)
        m = m * f64(0.5)
    r = m - f64(1)
    r2 = r * r
    p = fma(r, fma(r2, fma(r2, _L64_P0, _L64_P2), _L64_P4), fma(r2, fma(r2, _L64_P1, _L64_P3), _L64_P5))
    q = fma(r, fma(r2, fma(r2, _L64_Q1, _L64_Q3), _L64_Q5), fma(r2, fma(r2, fma(r2, _L64_Q0, _L64_Q2), _L64_Q4),
                                                                  _L64_Q6))
    log_r = fma(r2, p / q, r)
    return fma(e, _LN2_64, log_r)
