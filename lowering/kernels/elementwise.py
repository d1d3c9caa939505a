"""NumPy kernels: element-wise unary, binary, comparison, select, clamp.

Every op of :mod:`xla_dialect.ops.elementwise` has a kernel here, looked up in
tables keyed by op class and element kind. The numerics follow XLA on CPU
(checked against ``jax.jit`` in ``tests/test_elementwise.py``):

* integers wrap around; ``x / 0`` is all bits set, ``INT_MIN / -1`` is
  ``INT_MIN``; ``x % 0`` is ``x``; shifts by at least the bit width (or by a
  negative amount) give 0, or the sign fill for arithmetic right shifts;
  integer ``power`` with a negative exponent gives 0 unless the base is ±1;
* ``maximum``/``minimum`` propagate NaN and order ``-0 < +0``;
* low-precision floats (f16, bf16, the f8/f4 family) are computed in f32 and
  rounded back once per op, as XLA's CPU backend does; sub-byte integers
  (s2/s4/u2/u4) are computed in 8-bit integers and wrapped back;
* complex functions use XLA's own formulas (``EmitComplex*`` of XLA's
  elemental IR emitter) built from real NumPy functions, so special values
  (signed zeros, infinities, NaN) come out as XLA's do;
* exp, log, tanh, expm1, log1p, erf, rsqrt and logistic are XLA CPU's own
  approximations (Eigen's and Cephes' polynomials, XLA's expm1/log1p
  formulas, fdlibm's f64 erf, the CPU's rsqrt estimate plus a Newton step)
  with LLVM's fused multiply-adds and the CPU's flushing of denormals,
  reproduced bit for bit in :mod:`.xla_math` (f64 log and erf are libm's, with
  denormal inputs read as 0).
* complex log and log1p follow the StableHLO complex-math expansion XLA
  applies (double-word ``|z|² - 1`` and ``2x + x² + y²``), over XLA's own
  real log/log1p, bit for bit (see :func:`_clog`, :func:`_clog1p`);
* sine and cosine are the libm functions XLA CPU calls: for f32 glibc's
  ``sinf``/``cosf``, reproduced in :mod:`.xla_math` with their fused
  multiply-adds (NumPy's own f32 sin/cos differ in the last bit); tan is
  libm's; all three widen the 8-bit floats via f16 like the functions above.

Denormals: XLA's CPU runtime computes with the CPU's flush-to-zero and
denormals-are-zero modes. The executor sets the same modes around each call
(``lowering.compile(..., denormals="flush")``, the default; see
:mod:`lowering.runtime.denormals`), so these kernels flush exactly where XLA's
instructions do without doing anything themselves; ``sign`` uses XLA's
formula, which gives ±0 for a denormal under DAZ. With ``denormals="keep"``
they keep IEEE gradual underflow (the :mod:`.xla_math` functions flush in
both modes, as XLA's code does).

Binary kernels handle XLA's implicit broadcasting by reshaping operands at
lowering time so that NumPy broadcasting produces exactly XLA's result; when
operand shapes match and NumPy's ufunc already has XLA's semantics, the kernel
*is* the ufunc (no wrapper, no overhead).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from xla_dialect.errors import UnsupportedError
from xla_dialect.internal import ExpAddOp, FusedMultiplyAddOp
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import ints
from xla_dialect.types import element_type_of

from .registry import register
from . import libm, scalar, xla_math, ynnpack_math
from .host import host_properties

# ----------------------------------------------------------------------------
# Element types: storage dtype, the dtype kernels compute in, XLA bit width
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Elem:
    """What a kernel needs to know about an element type."""

    name: str  # XLA name, 's32'
    kind: str  # 'pred' | 'sint' | 'uint' | 'float' | 'complex'
    bits: int  # XLA bit width (4 for s4, although stored in a byte)
    dtype: np.dtype  # storage dtype
    compute: np.dtype  # dtype kernels compute in

    @property
    def widened(self) -> bool:
        """True when values are converted to ``compute`` and back around each op."""
        return self.compute != self.dtype


def elem_of(type_) -> Elem:
    """The :class:`Elem` of a tensor type (or of an element type)."""
    et = element_type_of(getattr(type_, "element_type", type_))
    compute = et.dtype
    if et.kind == "float" and et.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        compute = np.dtype(np.float32)  # XLA CPU upcasts f16/bf16/f8/f4 arithmetic to f32
    elif et.kind in ("sint", "uint") and et.bits < 8:
        compute = np.dtype(np.int8 if et.kind == "sint" else np.uint8)
    return Elem(et.xla_name, et.kind, et.bits, et.dtype, compute)


def _quiet(fn: Callable) -> Callable:
    """Run ``fn`` with NumPy floating-point warnings off (inf/NaN results are intended)."""

    @functools.wraps(fn)
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return run


class _PerType:
    """Marks a table entry as a factory ``make(elem) -> kernel`` (bit width or dtype dependent)."""

    def __init__(self, make: Callable[[Elem], Callable]):
        self.make = make


def _resolve(entry, e: Elem) -> Callable:
    return entry.make(e) if isinstance(entry, _PerType) else entry


# ----------------------------------------------------------------------------
# Integer helpers (operate on the compute dtype, honouring the XLA bit width)
# ----------------------------------------------------------------------------

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def _as_unsigned(x, e: Elem):
    """The low ``e.bits`` bits of ``x`` as an unsigned integer of the compute width."""
    u = np.asarray(x).astype(_UNSIGNED[e.compute.itemsize])
    return u if e.bits == 8 * e.compute.itemsize else u & ((1 << e.bits) - 1)


def _as_signed(u, e: Elem):
    """Reinterpret the low ``e.bits`` bits (from :func:`_as_unsigned`) as a signed integer."""
    s = u.astype(_SIGNED[e.compute.itemsize])
    if e.bits == 8 * e.compute.itemsize:
        return s
    sign = 1 << (e.bits - 1)
    return (s ^ sign) - sign


def _popcount_unsigned(u):
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(u)
    # NumPy < 2.0: count the set bits of each byte.
    bytes_ = np.ascontiguousarray(u)[..., None].view(np.uint8)
    return np.unpackbits(bytes_, axis=-1).sum(axis=-1)


def _popcnt(e: Elem):
    # Measured on XLA CPU: s4 is counted on its sign-extended 8-bit container
    # (popcnt(s4 -1) = 8, wrapped to -8), other widths on their own bits.
    container = e.name == "s4"

    def popcnt(x):
        u = np.asarray(x).astype(_UNSIGNED[e.compute.itemsize]) if container else _as_unsigned(x, e)
        return _popcount_unsigned(u).astype(e.compute)

    return popcnt


def _clz(e: Elem):
    def clz(x):
        u = _as_unsigned(x, e)
        shift = 1
        while shift < e.bits:  # smear the highest set bit into all lower bits
            u = u | (u >> shift)
            shift *= 2
        return (e.bits - _popcount_unsigned(u).astype(np.int64)).astype(e.compute)

    return clz


def _shift_amount(b, e: Elem):
    """(amount clipped to the bit width, amount >= width) with the amount read as unsigned."""
    bu = _as_unsigned(b, e)
    return np.minimum(bu, e.bits - 1).astype(e.compute), bu >= e.bits


def _shift_left(e: Elem):
    def shl(a, b):
        amount, big = _shift_amount(b, e)
        return np.where(big, e.compute.type(0), np.left_shift(a, amount))

    return shl


def _shift_right_arithmetic(e: Elem):
    def sra(a, b):
        amount, _ = _shift_amount(b, e)  # shifting by width-1 already gives the sign fill
        if e.kind == "sint":
            return np.right_shift(a, amount)
        s = _as_signed(_as_unsigned(a, e), e)  # unsigned operands: the top bit is the sign
        return np.right_shift(s, amount.astype(s.dtype)).astype(e.compute)

    return sra


def _shift_right_logical(e: Elem):
    def srl(a, b):
        amount, big = _shift_amount(b, e)
        u = _as_unsigned(a, e)
        r = np.right_shift(u, amount.astype(u.dtype))
        return np.where(big, 0, r).astype(e.compute)

    return srl


def _int_divide(e: Elem):
    all_ones = e.compute.type(-1) if e.kind == "sint" else np.iinfo(e.compute).max
    int_min = -(1 << (e.bits - 1))

    def div(a, b):
        a, b = np.broadcast_arrays(a, b)
        zero = b == 0
        bad = zero | ((a == int_min) & (b == -1)) if e.kind == "sint" else zero
        sb = np.where(bad, e.compute.type(1), b)  # INT_MIN / 1 = INT_MIN is XLA's answer
        q = np.floor_divide(np.subtract(a, np.fmod(a, sb)), sb)  # exact: truncates toward zero
        return np.where(zero, all_ones, q)

    return div


def _int_remainder(e: Elem):
    int_min = -(1 << (e.bits - 1))

    def rem(a, b):
        a, b = np.broadcast_arrays(a, b)
        zero = b == 0
        bad = zero | ((a == int_min) & (b == -1)) if e.kind == "sint" else zero
        r = np.fmod(a, np.where(bad, e.compute.type(1), b))  # INT_MIN % -1 = 0
        return np.where(zero, a, r)

    return rem


def _int_power(e: Elem):
    one, zero = e.compute.type(1), e.compute.type(0)
    minus_one = e.compute.type(-1) if e.kind == "sint" else np.iinfo(e.compute).max

    def power(a, b):
        a, b = np.broadcast_arrays(a, b)
        # XLA reads the exponent as signed, also for unsigned types (u8 200 is -56),
        # except u2/u4, which it widens to 8 bits first (measured on XLA CPU).
        if e.kind == "uint" and e.widened:
            negative = np.zeros(b.shape, bool)
        else:
            negative = _as_signed(_as_unsigned(b, e), e) < 0
        # XLA squares-and-multiplies over the exponent's low 6 bits only (exponents
        # above 63 overflow anyway except for bases 0 and +-1): 3 ** (2**31 - 1) is 3 ** 63.
        exp = np.where(negative, zero, b) & e.compute.type(63)
        result = np.ones_like(a)
        base = a
        while exp.size:  # wrapping like XLA
            result = np.where((exp & 1).astype(bool), np.multiply(result, base), result)
            exp = np.right_shift(exp, 1)
            if not exp.any():
                break
            base = np.multiply(base, base)
        # x ** -n: 1 for x == 1, +-1 for x == -1 (all bits set), else 0 (0 ** -n too).
        odd = (b & 1).astype(bool)
        special = np.where(a == one, one, np.where(a == minus_one, np.where(odd, minus_one, one), zero))
        return np.where(negative, special, result)

    return power


# ----------------------------------------------------------------------------
# Float helpers (IEEE semantics of XLA's emitter)
# ----------------------------------------------------------------------------


def float_extrema(compute: np.dtype, flush: bool) -> tuple[Callable, Callable]:
    """XLA's float maximum and minimum on arrays of ``compute`` (f32 or f64) elements: their scalar
    definitions (:func:`lowering.kernels.scalar.maximum_float` and its NaN, signed-zero and denormal rules),
    as the ufuncs the compiled paths' code is made of (``flush``: the executor's denormal mode)."""
    return tuple(_quiet(scalar.ufunc(scalar.float_extremum(which, flush), [compute, compute], compute))
                 for which in ("maximum", "minimum"))


def _defined(definition: Callable[[np.dtype], scalar.Scalar], arity: int = 1,
             emulation: Callable | None = None) -> _PerType:
    """Table entry: the op's scalar definition (:mod:`lowering.kernels.scalar`; ``definition(compute
    dtype)``) as a ufunc on the compute dtype, so the interpreter computes what the compiled paths compute;
    ``emulation(e)`` for sub-byte integers (XLA's rules hold at their own width, e.g. s4's ``INT_MIN / -1``),
    which have no definition."""

    def make(e: Elem):
        if e.widened and e.kind != "float":
            return emulation(e)
        return scalar.ufunc(definition(e.compute), [e.compute] * arity, e.compute)

    return _PerType(make)


def _typed_definition(name: str) -> Callable[[np.dtype], scalar.Scalar]:
    return lambda dtype: scalar.Scalar(name, (dtype.type,))


def _rsqrt(x):
    """XLA CPU's real rsqrt in the precision of ``x`` (its own f32 estimate-and-Newton or f64 formula)."""
    return xla_math.rsqrt_f32(x) if x.dtype == np.float32 else xla_math.rsqrt_f64(x)


def _real_of_float(x):
    return x


def _imag_of_float(x):
    return np.zeros_like(x)


def _by_width(f32_fn, f64_fn, f16_fn=None):
    """Table entry: XLA CPU's own approximation for f64, f32 and bf16 (computed in f32), or f16
    (``f16_fn`` where XLA's formula runs in f16 arithmetic); run on cache-sized blocks.

    XLA widens the 4-, 6- and 8-bit floats to f16, not f32 (all but f8e8m0fnu fit): their result is
    rounded to f16 before the final rounding (a double rounding that shows, e.g. f8e5m2 exp(-0.375)
    is 0.75, not the nearer 0.625).
    """
    f16_fn = f16_fn or f32_fn
    kernels = {name: fn if isinstance(fn, (np.ufunc, xla_math.Definition)) else xla_math.blockwise(fn)
               for name, fn in (("f32", f32_fn), ("f64", f64_fn), ("f16", f16_fn),
                                ("via_f16", lambda x: xla_math.round_f16(f16_fn(x))))}

    def pick(e: Elem):
        if e.name in kernels:
            return kernels[e.name]
        return kernels["via_f16" if e.bits <= 8 and e.name != "f8e8m0fnu" else "f32"]

    return _PerType(pick)


# ----------------------------------------------------------------------------
# Complex functions, following XLA's elemental IR emitter formula by formula
# ----------------------------------------------------------------------------


def _compose(re, im, dtype):
    out = np.empty(np.broadcast_shapes(np.shape(re), np.shape(im)), dtype)
    out.real = re
    out.imag = im
    return out


def _abs_parts(re, im):
    """(min, max, 1 + (min/max)^2) of |re|, |im| (XLA's EmitComplexAbsHelper, with the fused multiply-add)."""
    ar, ai = np.abs(re), np.abs(im)
    mx, mn = np.maximum(ar, ai), np.minimum(ar, ai)
    ratio = mn / mx
    return mn, mx, xla_math.fma(ratio, ratio, ratio.dtype.type(1))


def _cabs_parts(re, im):
    mn, mx, s = _abs_parts(re, im)
    r = mx * np.sqrt(s)
    return np.where(np.isnan(r), mn, r)  # (0,0), (inf,inf), NaN: fall back to min


def _cabs(z):
    return _cabs_parts(z.real, z.imag)


def _csign(z):
    r = _cabs(z)
    q = _compose(z.real / r, z.imag / r, z.dtype)
    return np.where(r == 0, z, q)


def _cdiv_parts(ar, ai, br, bi):
    """Smith's algorithm with C99 corner cases (XLA's EmitComplexDivide) -> (re, im), with the
    multiply-adds fused as LLVM contracts them on XLA CPU."""
    one, zero, inf = 1, 0, np.inf
    fma = xla_math.fma
    ar, ai, br, bi = np.broadcast_arrays(ar, ai, br, bi)
    r_i = br / bi
    d_ri = fma(r_i, br, bi)
    i_r = bi / br
    d_ir = fma(i_r, bi, br)
    br_abs, bi_abs = np.abs(br), np.abs(bi)
    lt = br_abs < bi_abs
    cr = np.where(lt, fma(ar, r_i, ai) / d_ri, fma(ai, i_r, ar) / d_ir)
    ci = np.where(lt, fma(ai, r_i, -ar) / d_ri, fma(-ar, i_r, ai) / d_ir)
    # Case 1: zero denominator, numerator not all NaN.
    zero_den = (br_abs == 0) & (bi_abs == 0) & (~np.isnan(ar) | ~np.isnan(ai))
    sinf = np.copysign(inf, br)
    z_r, z_i = sinf * ar, sinf * ai
    # Case 2: infinite numerator, finite denominator.
    ar_abs, ai_abs = np.abs(ar), np.abs(ai)
    ar_inf, ai_inf = ar_abs == inf, ai_abs == inf
    inf_num = (ar_inf | ai_inf) & (br_abs != inf) & (bi_abs != inf) & ~np.isnan(br) & ~np.isnan(bi)
    ars = np.copysign(np.where(ar_inf, one, zero), ar)
    ais = np.copysign(np.where(ai_inf, one, zero), ai)
    n_r, n_i = inf * (ars * br + ais * bi), inf * (ais * br - ars * bi)
    # Case 3: finite numerator, infinite denominator.
    br_inf, bi_inf = br_abs == inf, bi_abs == inf
    inf_den = (br_inf | bi_inf) & (ar_abs != inf) & (ai_abs != inf) & ~np.isnan(ar) & ~np.isnan(ai)
    brs = np.copysign(np.where(br_inf, one, zero), br)
    bis = np.copysign(np.where(bi_inf, one, zero), bi)
    d_r, d_i = zero * (ar * brs + ai * bis), zero * (ai * brs - ar * bis)
    nan = np.isnan(cr) & np.isnan(ci)
    pick = [nan & zero_den, nan & ~zero_den & inf_num, nan & ~zero_den & ~inf_num & inf_den]
    return np.select(pick, [z_r, n_r, d_r], cr), np.select(pick, [z_i, n_i, d_i], ci)


def _cdiv(a, b):
    a, b = np.broadcast_arrays(a, b)
    re, im = _cdiv_parts(a.real, a.imag, b.real, b.imag)
    return _compose(re, im, np.result_type(a, b))


_SPLITTER = {np.dtype(np.float32): np.float32(4097), np.dtype(np.float64): np.float64(134217729)}
"""Veltkamp's splitting constant 2**ceil(p/2) + 1 per precision."""


def _square_parts(x):
    """(x*x, e) with x*x + e == x² (Dekker's product, as XLA's complex log expansions spell it,
    with the multiply-adds LLVM fuses)."""
    fma = xla_math.fma
    xx = x * x
    t = x * _SPLITTER[x.dtype]
    hi = t + (x - t)
    lo = x - hi
    p = hi * lo
    e = fma(hi, hi, -xx) + p
    return xx, fma(lo, lo, p + e)


def _two_sum_error(s, a, b):
    """The rounding error of ``s = a + b`` (Knuth), operation by operation as in XLA's IR."""
    d = s - a
    return (b - d) + (a + (d - s))


def _log1p_half_or_log(mx, mn):
    """``log(mx) + log1p((mn/mx)²)/2`` (1 for the ratio where mn == mx), LLVM fusing the final multiply-add."""
    t = mx.dtype.type
    ratio = mn / mx
    r = np.where(mn == mx, t(1), ratio * ratio)
    return xla_math.fma(xla_math.log1p(r), t(0.5), xla_math.log(mx))


def _piecewise(choice, branches, *args):
    """``branches[choice]`` evaluated only on the elements that choose it (``choice``: an int array of
    branch indices, ``args``: arrays of its shape), for formulas too costly to evaluate everywhere."""
    flat = [np.ravel(a) for a in args]
    out = None
    for k, branch in enumerate(branches):
        idx = np.flatnonzero(choice.ravel() == k)
        if idx.size:
            part = branch(*(a[idx] for a in flat))
            if out is None:
                out = np.empty(choice.size, part.dtype)
            out[idx] = part
    return (np.empty(0, args[0].dtype) if out is None else out).reshape(choice.shape)


def _abs2_minus_one(a, b):
    """``a² + b² - 1`` in double-word arithmetic, as XLA's complex log computes it."""
    t = a.dtype.type
    aa, e_a = _square_parts(a)
    bb, e_b = _square_parts(b)
    gt = bb > aa
    mx2, mn2 = np.where(gt, bb, aa), np.where(gt, aa, bb)
    m1 = mx2 + t(-1)
    s1 = m1 + mn2
    s2 = s1 + e_b
    s3 = s2 + e_a
    # XLA's emitted error of m1 = mx2 - 1 is mx2 - ((mx2 - 1) + 1); LLVM folds it to mx2 - mx2 (0, or NaN for inf).
    err = ((mx2 - mx2) + (mn2 - (s1 - m1))) + (e_b - (s2 - s1))
    return s3 + (err + (e_a - (s3 - s2)))


@xla_math.blockwise
def _clog(z):
    """XLA's complex log (the StableHLO complex-math expansion): for |z|² - 1 computed in double-word
    arithmetic below 1/2 in magnitude, ``log1p(|z|² - 1)/2``, else ``log(max) + log1p((min/max)²)/2``;
    the imaginary part is atan2(im, re)."""
    a, b = z.real, z.imag
    t = a.dtype.type
    total = _abs2_minus_one(a, b)
    abs_a, abs_b = np.abs(a), np.abs(b)
    re = _piecewise((np.abs(total) < t(0.5)).astype(np.int8),
                    (lambda mx, mn, s: _log1p_half_or_log(mx, mn),
                     lambda mx, mn, s: xla_math.log1p(s) * t(0.5)),
                    np.maximum(abs_a, abs_b), np.minimum(abs_a, abs_b), total)
    return _compose(re, libm.atan2(b, a), z.dtype)


_CLOG1P_LARGE = {np.dtype(np.float32): np.float32(1.84467419e+17), np.dtype(np.float64): 1.3407807929942595e+152}


def _clog1p_mid(x, y):
    """``log1p(2x + x² + y²)/2`` with the sum in double-word arithmetic (XLA's complex log1p)."""
    xx, e_x = _square_parts(x)
    yy, e_y = _square_parts(y)
    x2 = x + x
    s1 = x2 + yy
    s2 = xx + s1
    s3 = s2 + e_y
    s4 = e_x + s3
    err = ((_two_sum_error(s1, x2, yy) + _two_sum_error(s2, s1, xx)) + _two_sum_error(s3, s2, e_y)) \
        + _two_sum_error(s4, s3, e_x)
    return xla_math.log1p(s4 + err) * x.dtype.type(0.5)


@xla_math.blockwise
def _clog1p(z):
    """XLA's complex log1p (the StableHLO complex-math expansion): ``log(max) + log1p((min/max)²)/2``
    for huge parts, ``log((x+1)² + y²)/2`` where |x+1| + |y| < 0.2, else ``log1p(2x + x² + y²)/2`` with
    the sum in double-word arithmetic; the imaginary part is atan2(y, x + 1)."""
    x, y = z.real, z.imag
    t = x.dtype.type
    abs_x, abs_y = np.abs(x), np.abs(y)
    mx = np.maximum(abs_x, abs_y)
    xp1 = x + t(1)
    choice = np.where(mx > _CLOG1P_LARGE[x.dtype], 0, np.where(np.abs(xp1) + abs_y < t(0.2), 1, 2)).astype(np.int8)
    re = _piecewise(choice, (lambda x, y, xp1: _log1p_half_or_log(np.maximum(np.abs(x), np.abs(y)),
                                                                   np.minimum(np.abs(x), np.abs(y))),
                             lambda x, y, xp1: xla_math.log(xla_math.fma(xp1, xp1, y * y)) * t(0.5),
                             lambda x, y, xp1: _clog1p_mid(x, y)), x, y, xp1)
    return _compose(re, libm.atan2(y, xp1), z.dtype)


def _cexp(z):
    """XLA's complex exp: ``exp(x) (cos y + i sin y)`` with its own exp, and where exp(x) overflows
    ``(exp(x/2) cos y) exp(x/2)`` (likewise sin); a zero imaginary part gives +0 (exp(inf - 0i) = inf + 0i)."""
    x, y = z.real, z.imag
    t = x.dtype.type
    e = xla_math.exp(x)
    cos, sin = xla_math.cos(y), xla_math.sin(y)
    # Both factors NaN: x86 returns the first operand's NaN, and LLVM orders the f64 products the other way.
    re, im = (e * cos, e * sin) if t == np.float32 else (cos * e, sin * e)
    over = np.flatnonzero(e == np.inf)
    if over.size:
        half = xla_math.exp(x.ravel()[over] * t(0.5))
        re, im = re.ravel(), im.ravel()
        re[over] = (half * cos.ravel()[over]) * half
        im[over] = (half * sin.ravel()[over]) * half
        re, im = re.reshape(x.shape), im.reshape(x.shape)
    return _compose(re, np.where(y == 0, t(0), im), z.dtype)


_COSM1_COEFFS = (4.7377507964246204691685E-14, -1.1470284843425359765671E-11, 2.0876754287081521758361E-9,
                 -2.7557319214999787979814E-7, 2.4801587301570552304991E-5, -1.3888888888888872993737E-3,
                 4.1666666666666666609054E-2)
"""Cephes' cosm1 polynomial in x^2, highest power first (XLA's EmitCosm1)."""


def _cosm1(x):
    """cos(x) - 1 as XLA's EmitCosm1: ``x^4 P(x^2) - x^2/2`` for x^2 < 0.61685 (about (pi/4)^2),
    else ``cos(x) - 1`` (not ``-2 sin^2(x/2)``, which differs by ~1e-7 relative where cos(x) is small);
    P by fused multiply-adds (XLA emits llvm.fma), LLVM fusing the final multiply-add too."""
    t = x.dtype.type
    xx = x * x
    coeffs = tuple(t(c) for c in _COSM1_COEFFS)
    poly = xla_math.horner64(xx, coeffs) if t == np.float64 else xla_math.horner32(xx, coeffs)
    small = xla_math.fma(xx * xx, poly, t(-0.5) * xx)
    return np.where(xx >= t(0.61685), xla_math.cos(x) - t(1), small)


@xla_math.blockwise
def _cexpm1(z):
    """XLA's EmitComplexExpm1: ``expm1(x) cos(y) + cosm1(y)`` with ``cos(y) = cosm1(y) + 1`` (one fused
    multiply-add, over XLA's own expm1) and ``(expm1(x) + 1) sin(y)`` (+0 where y == 0)."""
    a, b = z.real, z.imag
    t = a.dtype.type
    cm1 = _cosm1(b)
    em1 = (xla_math.expm1_f64 if t == np.float64 else xla_math.expm1_f32)(a)
    # Where both sides are NaN, XLA's results carry y's NaN (the operand order LLVM chose).
    re = np.where(np.isnan(cm1), cm1, _fma_wide(em1, cm1 + t(1), cm1))
    im = xla_math.sin(b) * (em1 + t(1))
    return _compose(re, np.where(b == 0, t(0), im), z.dtype)


def _csin_cos(z, is_sin: bool):
    """XLA's own complex sine and cosine (its elemental emitter, which XLA CPU runs for ``hlo.sine`` and
    ``hlo.cosine`` on complex operands): with ``e = exp(y)`` over XLA's own exp,
    ``sin z = sin x (0.5 e + 0.5/e) + i cos x (0.5 e - 0.5/e)`` and
    ``cos z = cos x (0.5/e + 0.5 e) + i sin x (0.5/e - 0.5 e)`` -- the cosine's imaginary part is the
    product with ``0.5/e - 0.5 e``, not the negated sine-side product, which decides the sign of its zeros.

    ``jax.lax.sin``/``cos`` on complex do not emit this op: jax expands them into real ops (expm1(±y), a
    select on x == 0), which the executor runs op by op."""
    x, y = z.real, z.imag
    t = x.dtype.type
    ey = xla_math.exp(y)
    half_e, half_ne = t(0.5) * ey, t(0.5) / ey
    if is_sin:
        return _compose(xla_math.sin(x) * (half_e + half_ne), xla_math.cos(x) * (half_e - half_ne), z.dtype)
    return _compose(xla_math.cos(x) * (half_ne + half_e), xla_math.sin(x) * (half_ne - half_e), z.dtype)


def _ctanh_parts(a, b):
    two_a = a + a
    expm1 = xla_math.expm1_f64 if a.dtype == np.float64 else xla_math.expm1_f32
    e2 = expm1(two_a)
    en2 = expm1(-two_a)
    real_num = e2 - en2
    cos_b, sin_b = xla_math.cos(b), xla_math.sin(b)
    imag_num = 4 * (cos_b * sin_b)
    exp_sum_m2 = e2 + en2
    denom = exp_sum_m2 + 4 * (cos_b * cos_b)
    real = np.where(exp_sum_m2 == np.inf, np.copysign(a.dtype.type(1), a), real_num / denom)
    imag = imag_num / denom
    a_inf = np.abs(a) == np.inf
    sin2b_nan = np.isnan(imag_num)
    real = np.where(sin2b_nan & ~a_inf, np.nan, real)
    imag = np.where((b == 0) | (a_inf & sin2b_nan), a.dtype.type(0), imag)
    return real, imag


def _ctanh(z):
    re, im = _ctanh_parts(z.real, z.imag)
    return _compose(re, im, z.dtype)


def _ctan(z):
    # tan(x + yi) = -i * tanh(-y + xi)
    re, im = _ctanh_parts(-z.imag, z.real)
    return _compose(im, -re, z.dtype)


_CSQRT_CONSTANTS = (1.0986841134678098, 0.45508986056222733, 1.4142135623730951, 0.70710678118654746)
"""sqrt((1 + sqrt 2) / 2), its reciprocal halved, sqrt 2 and 1/sqrt 2 (rounded down), as XLA's complex sqrt spells them."""


_FMA64_SAFE = (2.0 ** -900, 2.0 ** 990)
"""Factor magnitudes for which :func:`xla_math.fma64`'s exact (Dekker) product holds."""


def _fma_redo(out, idx, a, b, c):
    """``out`` with the elements ``idx`` (flat indices) recomputed by the f64 FMA for the whole range."""
    shape = out.shape
    out = np.array(out, copy=True).reshape(-1)
    a, b, c = (np.broadcast_to(v, shape).reshape(-1)[idx] for v in (a, b, c))
    out[idx] = xla_math.fma64_full_range(a, b, c)  # (scales operands: slow, so only where needed)
    return out.reshape(shape)


def _fma_wide(a, b, c):
    """Fused ``a * b + c`` for operands anywhere in the f32/f64 range (f64: the fast emulation where
    both factors are moderate or zero, the scaled one for the others)."""
    if np.asarray(a).dtype == np.float32:
        return xla_math.fma32(a, b, c)
    out = xla_math.fma64(a, b, c)
    mags = [np.abs(v) for v in np.broadcast_arrays(a, b)]
    wild = np.zeros(out.shape, bool)
    for m in mags:
        wild |= ~((m >= _FMA64_SAFE[0]) & (m < _FMA64_SAFE[1])) & (m != 0)
    idx = np.flatnonzero(wild)
    return _fma_redo(out, idx, a, b, c) if idx.size else out


def _fma_half(a, c):
    """Fused ``a * 0.5 + c`` (LLVM's contraction): ``a * 0.5`` is exact unless it leaves the normal
    range, so only those rare f64 elements need an emulated FMA."""
    if a.dtype == np.float32:
        return xla_math.fma32(a, np.float32(0.5), c)
    out = a * 0.5 + c
    idx = np.flatnonzero((np.abs(a) < 2.0 ** -1020) & (a != 0))
    return _fma_redo(out, idx, a, 0.5, c) if idx.size else out


def _hypot_parts(mx, mn):
    """XLA's expanded ``hypot(mx, mn)`` for mx >= mn >= 0: ``mx sqrt 2`` where equal, ``mx + mx q²/2``
    where ``sqrt(1 + q²)`` rounds to 1 (q = mn/mx > 0), else ``mx sqrt(1 + q²)``; LLVM fuses ``mx + (mx q²) 0.5``."""
    t = mx.dtype.type
    q = mn / mx
    q2 = q * q
    root = np.sqrt(q2 + t(1))
    tiny = (root == t(1)) & (q2 > t(0))
    general = np.where(tiny, _fma_half(mx * q2, mx), mx * root)
    return np.where(mx == mn, mx * t(_CSQRT_CONSTANTS[2]), general)


@xla_math.blockwise
def _csqrt(z):
    """XLA's complex sqrt (the StableHLO complex-math expansion, operation by operation from XLA CPU's
    optimized HLO and object code): ``sqrt((|z| + |x|)/2)`` and ``|y| / (2 that)``, rescaled through
    ``sqrt|x|``, ``sqrt|y|`` where that square root is 0 or inf, a closed form where |x| == |y|; the
    signs follow x and y (a NaN real part takes the imaginary branch)."""
    x, y = z.real, z.imag
    t = x.dtype.type
    c_eq, c_eq_im, sqrt2, rsqrt2 = (t(c) for c in _CSQRT_CONSTANTS)
    ax, ay = np.abs(x), np.abs(y)
    eq = ax == ay
    sq_ax, sq_ay = np.sqrt(ax), np.sqrt(ay)
    ratio = np.where(eq, t(1), np.where(ax < ay, ax / ay, ay / ax))
    h1 = _hypot_parts(np.maximum(ax, ay), np.minimum(ax, ay))
    s = np.sqrt(_fma_half(ax, h1 * t(0.5)))
    rescale = (s == 0) | (s == np.inf)
    a_r = np.abs(ratio)
    h2 = _hypot_parts(np.maximum(a_r, t(1)), np.minimum(a_r, t(1)))
    root_x = np.sqrt(h2 + t(1))
    root_y = np.sqrt(ratio + h2)
    gt = ax > ay
    re_pos = np.where(gt, sq_ax * (root_x * rsqrt2), sq_ay * (root_y * rsqrt2))
    re_pos = np.where(eq, sq_ax * c_eq, np.where(rescale, re_pos, s))
    im_big = np.where(gt, (sq_ay * np.where(eq, t(1), np.where(ax < ay, sq_ax / sq_ay, sq_ay / sq_ax)))
                      / (root_x * sqrt2), sq_ay / (root_y * sqrt2))
    im_pos = np.where(eq, sq_ay * c_eq_im, np.where(rescale, im_big, ay / (s * t(2))))
    y_neg = y < 0
    re = np.where(x >= 0, re_pos, im_pos)
    im = np.where(x < 0, np.where(y_neg, -re_pos, re_pos), np.where(y_neg, -im_pos, im_pos))
    return _compose(re, im, z.dtype)


def _crsqrt(z):
    a, b = z.real, z.imag
    mn, mx, s = _abs_parts(a, b)
    r = _rsqrt(mx) * _rsqrt(np.sqrt(s))
    r = np.where(np.isnan(r), _rsqrt(mn), r)
    angle = libm.atan2(b, a) * -0.5
    re, im = r * xla_math.cos(angle), r * xla_math.sin(angle)
    zero = a.dtype.type(0)
    abs_a, abs_b = np.abs(a), np.abs(b)
    zero_zero = (a == 0) & (b == 0)
    special = ((abs_b == np.inf) & np.isnan(a)) | (abs_a == np.inf)
    re = np.where(zero_zero, np.inf, np.where(special, np.copysign(zero, a), re))
    im = np.where(zero_zero, np.nan, np.where(special, -np.copysign(zero, b), im))
    return _compose(re, im, z.dtype)


def _ccbrt(z):
    """Principal cube root, as the StableHLO reference interpreter computes it (XLA rejects complex cbrt).

    In f64 whatever the operand type: ``(re² + im²)^(1/6) · (cos θ + i sin θ)`` with
    ``θ = atan2(im, re) / 3``, then rounded to the operand type.
    """
    re, im = z.real.astype(np.float64), z.imag.astype(np.float64)
    theta = libm.atan2(im, re) / 3.0
    r = libm.pow(libm.pow(re, 2.0) + libm.pow(im, 2.0), 1.0 / 6.0)
    return _compose(r * xla_math.cos(theta), r * xla_math.sin(theta), z.dtype)


def _clogistic(z):
    e = _cexp(-z)
    re, im = _cdiv_parts(np.ones_like(e.real), np.zeros_like(e.imag), 1 + e.real, e.imag)
    return _compose(re, im, z.dtype)


def _cpow(x, y):
    x, y = np.broadcast_arrays(x, y)
    a, b, c, d = x.real, x.imag, y.real, y.imag
    absx = _cabs_parts(a, b)
    arg = libm.atan2(b, a)
    # XLA's own exp and log; libm's pow, atan2, sin and cos (called by XLA CPU).
    coeff = libm.pow(absx, c) * xla_math.exp(-d * arg)
    q = xla_math.fma(c, arg, d * xla_math.log(absx))
    re, im = coeff * xla_math.cos(q), coeff * xla_math.sin(q)
    one, zero, inf = 1, 0, np.inf
    cases = [
        (a == inf) & (b == 0) & (d == 0) & (c < 0),  # inf ** c = 0 for c < 0
        (a == inf) & (b == 0) & (d == 0) & (c > 0),  # inf ** c = inf for c > 0
        (a == 1) & (b == 0),  # 1 ** y = 1
        (c == 0) & (d == 0),  # x ** 0 = 1
        (absx == 0) & (d == 0) & (c >= 0),  # 0 ** c = 0 (c > 0), 1 (c == 0)
    ]
    re = np.select(cases, [zero, inf, one, one, np.where(c == 0, one, zero)], re)
    im = np.select(cases, [zero, zero, zero, zero, zero], im)
    return _compose(re, im, x.dtype)


def _csqrt_parts(re, im):
    """XLA's EmitComplexSqrt (as used inside its complex atan2): ``sqrt(max) * (1 + (min/max)^2)^(1/4)``
    times cos/sin of half the argument, with C99's infinities -> (re, im)."""
    t = re.dtype.type
    mn, mx, s = _abs_parts(re, im)
    r = np.sqrt(mx) * libm.pow(s, t(0.25))
    r = np.where(np.isnan(r), mn, r)
    theta = libm.atan2(im, re) * t(0.5)
    sin = xla_math.sin(theta)
    out_re = r * xla_math.cos(theta)
    out_im = np.where(sin == 0, t(0), r * sin)
    im_inf = np.abs(im) == np.inf
    out_re = np.where((re == -np.inf) & ~im_inf, t(0), out_re)
    out_re = np.where(im_inf | (re == np.inf), t(np.inf), out_re)
    out_im = np.where(np.isnan(r), t(np.nan), out_im)
    out_im = np.where(im_inf | (re == -np.inf), np.copysign(t(np.inf), im), out_im)
    zero = r == 0
    return np.where(zero, t(0), out_re), np.where(zero, t(0), out_im)


def _catan2(y, x):
    """XLA's complex atan2(y, x) = -i log((x + i y) / sqrt(x x + y y)), step by step in complex arithmetic
    (the products by 0 in ``i y`` and ``-i log`` make infinite parts NaN, as in XLA)."""
    y, x = np.broadcast_arrays(y, x)
    dtype = np.result_type(x, y)
    t = np.finfo(dtype).dtype.type
    xr, xi, yr, yi = x.real, x.imag, y.real, y.imag
    # Squares: the real parts fuse a multiply-add; 2 (xi xr) is exact, fused or not.
    sr = xla_math.fma(xr, xr, -(xi * xi)) + xla_math.fma(yr, yr, -(yi * yi))
    si = (xi * xr) * t(2) + (yi * yr) * t(2)
    rr, ri = _csqrt_parts(sr, si)
    num_r, num_i = xr + (yr * t(0) - yi), xi + (yr + yi * t(0))  # x + i y
    qr, qi = _cdiv_parts(num_r, num_i, rr, ri)
    lr, li = xla_math.log(_cabs_parts(qr, qi)), libm.atan2(qi, qr)
    return _compose(lr * t(0) + li, li * t(0) - lr, dtype)  # (0 - i) (lr + i li)


def _cmax_min(pick_max: bool):
    def cmp(a, b):
        # Lexicographic on (real, imag) as measured on XLA CPU: the real parts compare
        # ordered (a NaN real part picks rhs), the imaginary parts unordered (a NaN
        # imaginary part with equal real parts picks lhs).
        a, b = np.broadcast_arrays(a, b)
        if pick_max:
            first = (a.real > b.real) | ((a.real == b.real) & ~(a.imag < b.imag))
        else:
            first = (a.real < b.real) | ((a.real == b.real) & ~(a.imag > b.imag))
        return np.where(first, a, b)

    return cmp


# ----------------------------------------------------------------------------
# Kernel tables: op class -> element kind -> NumPy function (or _PerType)
# ----------------------------------------------------------------------------

UNARY_KERNELS: dict[type, dict[str, object]] = {
    ew.AbsOp: {"sint": np.abs, "float": np.abs, "complex": _cabs},
    ew.CbrtOp: {"float": libm.cbrt, "complex": _ccbrt},
    ew.CeilOp: {"float": np.ceil},
    ew.ClzOp: {"sint": _PerType(_clz), "uint": _PerType(_clz)},
    ew.CosineOp: {"float": _by_width(xla_math.cos_f32, libm.cos),
                  "complex": functools.partial(_csin_cos, is_sin=False)},
    ew.ErfOp: {"float": _by_width(xla_math.erf_f32, xla_math.erf_f64)},
    ew.ExpOp: {"float": _by_width(xla_math.exp_f32, xla_math.exp_f64), "complex": _cexp},
    ew.Expm1Op: {"float": _by_width(xla_math.expm1_f32, xla_math.expm1_f64, xla_math.expm1_f16), "complex": _cexpm1},
    ew.FloorOp: {"float": np.floor},
    ew.ImagOp: {"float": _imag_of_float, "complex": np.imag},
    ew.IsFiniteOp: {"float": np.isfinite},
    ew.LogOp: {"float": _by_width(xla_math.log_f32, xla_math.log_f64), "complex": _clog},
    ew.Log1pOp: {"float": _by_width(xla_math.log1p_f32, xla_math.log1p_f64), "complex": _clog1p},
    ew.LogisticOp: {"float": _by_width(xla_math.logistic_f32, xla_math.logistic_f64, xla_math.logistic_f16),
                    "complex": _clogistic},
    ew.NegOp: {"sint": np.negative, "uint": np.negative, "float": np.negative, "complex": np.negative},
    ew.NotOp: {"pred": np.logical_not, "sint": np.invert, "uint": np.invert},
    ew.PopcntOp: {"sint": _PerType(_popcnt), "uint": _PerType(_popcnt)},
    ew.RealOp: {"float": _real_of_float, "complex": np.real},
    ew.RoundOp: {"float": _defined(_typed_definition("round_nearest_afz"))},
    ew.RoundEvenOp: {"float": np.rint},
    ew.RsqrtOp: {"float": _by_width(xla_math.rsqrt_f32, xla_math.rsqrt_f64), "complex": _crsqrt},
    ew.SignOp: {"sint": np.sign, "float": _defined(_typed_definition("sign_float")), "complex": _csign},
    ew.SineOp: {"float": _by_width(xla_math.sin_f32, libm.sin), "complex": functools.partial(_csin_cos, is_sin=True)},
    ew.SqrtOp: {"float": np.sqrt, "complex": _csqrt},
    ew.TanOp: {"float": _by_width(libm.tan, libm.tan), "complex": _ctan},
    ew.TanhOp: {"float": _by_width(xla_math.tanh_f32, xla_math.tanh_f64), "complex": _ctanh},
}
"""Unary op class -> element kind -> NumPy function with XLA semantics (on the compute dtype)."""

_BITWISE = {"pred", "sint", "uint"}


def _same(fn, kinds=("pred", "sint", "uint", "float", "complex")):
    return {k: fn for k in kinds}


def _f16_nans(fn: Callable, e: Elem) -> Callable:
    """``fn`` (max or min) for elements ``e``: on f16, XLA CPU's element-wise max/min give every NaN as the
    positive quiet NaN (measured: ``max(1, -NaN(5))`` is ``0x7e00``; its f16 reductions keep payloads) -- on
    hosts without AVX512-FP16, where f16 is computed in f32. With it f16 is native and keeps f32's rules: the
    NaN operand's payload, a NaN ``b``'s sign and-ed (max) or or-ed (min) with ``a``'s (measured on a Xeon with
    AVX512-FP16: every pair of signed zeros, ones, infinities and signed payload NaNs), which ``fn`` computed on
    the exactly widened values gives."""
    if e.dtype != np.float16 or host_properties()["avx512fp16"]:
        return fn

    def canonical(a, b):
        result = np.asarray(fn(a, b))
        return np.where(np.isnan(result), result.dtype.type(np.nan), result)

    return canonical


BINARY_KERNELS: dict[type, dict[str, object]] = {
    ew.AddOp: _same(np.add),
    ew.SubOp: _same(np.subtract, ("sint", "uint", "float", "complex")),
    ew.MulOp: _same(np.multiply),
    ew.AndOp: _same(np.bitwise_and, _BITWISE),
    ew.OrOp: _same(np.bitwise_or, _BITWISE),
    ew.XorOp: _same(np.bitwise_xor, _BITWISE),
    ew.Atan2Op: {"float": libm.atan2, "complex": _catan2},
    ew.ComplexOp: {"float": None},  # built per result type below
    ew.DivOp: _same(_defined(lambda d: scalar.Scalar("divide_int"), 2, _int_divide), ("sint", "uint"))
              | {"float": np.divide, "complex": _cdiv},
    ew.MaxOp: {"pred": np.maximum, "sint": np.maximum, "uint": np.maximum, "float": None,  # (float_extrema)
               "complex": _cmax_min(True)},
    ew.MinOp: {"pred": np.minimum, "sint": np.minimum, "uint": np.minimum, "float": None,
               "complex": _cmax_min(False)},
    ew.PowOp: _same(_defined(scalar.integer_power, 2, _int_power), ("sint", "uint"))
              | {"float": libm.pow, "complex": _cpow},
    ew.RemOp: _same(_defined(lambda d: scalar.Scalar("remainder_int"), 2, _int_remainder), ("sint", "uint"))
              | {"float": np.fmod},
    ew.ShiftLeftOp: _same(_PerType(_shift_left), ("sint", "uint")),
    ew.ShiftRightArithmeticOp: _same(_PerType(_shift_right_arithmetic), ("sint", "uint")),
    ew.ShiftRightLogicalOp: _same(_PerType(_shift_right_logical), ("sint", "uint")),
}
"""Binary op class -> element kind -> NumPy function with XLA semantics (on the compute dtype)."""

_EXACT_UFUNCS = {np.add, np.subtract, np.multiply, np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.maximum,
                 np.minimum, np.negative, np.invert, np.logical_not, np.abs, np.ceil, np.floor, np.rint,
                 np.isfinite, np.sqrt, np.fmod}
"""Ufuncs that never warn in a way that matters and need no errstate wrapper."""


BF16_FLUSHED_STORE = "xla_cpu_bf16_flushed_store"
"""The attribute (unit) the ``xla-small-loops`` pass puts on a bf16 element-wise op inside a while loop XLA CPU
compiles whole, on hosts computing bf16 natively (AVX512-BF16 with AMX): there LLVM rounds the op's f32 result to bf16 with the hardware
conversion, which flushes a denormal to a zero of its sign whatever the CPU's flush modes (measured on a Xeon:
``expm1``, ``sin``, ``tanh`` of bf16 denormals in a ``fori_loop`` of two trips give +-0, straight-line and in
loops of 4,096 elements the denormal). The kernels of marked ops flush before rounding; fused groups leave them
to the kernels."""


def _glibc_tail(exp_f32: Callable, start: int) -> Callable:
    """The f32 ``exp`` kernel of an op marked :data:`~lowering.kernels.scalar.GLIBC_EXP_TAIL`: ``exp_f32``, then
    glibc's ``expf`` on the elements from ``start`` on (row-major)."""
    def exp(x):
        x = np.asarray(x)
        result = np.array(exp_f32(x), np.float32)
        flat = result.reshape(-1)
        flat[start:] = libm.exp(x.reshape(-1)[start:])
        return result

    exp.quiet = getattr(exp_f32, "quiet", False)
    return exp


def _typed(fn: Callable, operand: Elem, result_dtype: np.dtype, flushed_store: bool = False) -> Callable:
    """Adapt ``fn`` (computing on ``operand.compute``) to storage dtypes in and out.

    Low-precision floats and sub-byte integers are converted to their compute
    dtype before the op and the result is rounded/wrapped back once after it
    (``flushed_store``: denormal results flushed to zero first, :data:`BF16_FLUSHED_STORE`).
    """
    if fn not in _EXACT_UFUNCS and not getattr(fn, "quiet", False):
        fn = _quiet(fn)
    if not operand.widened:
        return fn
    compute = operand.compute
    tiny = np.finfo(compute).tiny if flushed_store and np.dtype(compute).kind == "f" else None

    def widened(*xs):
        result = np.asarray(fn(*(np.asarray(x).astype(compute) for x in xs)))
        if tiny is not None:
            result = np.where(np.abs(result) < tiny, np.copysign(compute.type(0), result), result)
        return store(result, result_dtype)

    return widened


def _flushed_store(op) -> bool:
    return BF16_FLUSHED_STORE in op.attributes


def store(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round computed values to the storage ``dtype``. f4e2m1fn has no NaN: XLA stores every NaN as -0
    (ml_dtypes gives a NaN's sign to the zero)."""
    if dtype.name == "float4_e2m1fn" and x.dtype.kind == "f":
        x = np.where(np.isnan(x), x.dtype.type(-0.0), x)
    return x.astype(dtype)


def _lookup(table, op, e: Elem):
    entry = table[type(op)].get(e.kind)
    if entry is None:
        raise UnsupportedError(f"{op.name}: no kernel for element type {e.name}")
    return _resolve(entry, e)


# ----------------------------------------------------------------------------
# Implicit broadcasting
# ----------------------------------------------------------------------------


def broadcast_views(op):
    """Shapes to reshape lhs/rhs to so NumPy broadcasting gives XLA's result (None: as is).

    Operands of different rank are placed in the higher rank by ``broadcast_dimensions``
    (:func:`xla_dialect.ops.elementwise.implicit_broadcast_view`); NumPy's broadcasting then does
    XLA's degenerate-dimension broadcasting, which composes with the former (a 1x2 matrix onto
    4x3x1 with dimensions (1, 2) gives 4x3x2).
    """
    lhs_shape = op.operands[0].type.get_shape()
    rhs_shape = op.operands[1].type.get_shape()
    bdims = ints(op.properties.get("broadcast_dimensions"))
    if len(lhs_shape) == len(rhs_shape) or not bdims:
        return None, None
    out_rank = max(len(lhs_shape), len(rhs_shape))
    return tuple(None if len(shape) == out_rank else ew.implicit_broadcast_view(shape, out_rank, bdims)
                 for shape in (lhs_shape, rhs_shape))


def binary_kernel(fn, op):
    """Wrap a NumPy binary function with the op's implicit broadcasting."""
    lv, rv = broadcast_views(op)
    if lv is None and rv is None:
        return fn  # same shapes, scalars, or degenerate dimensions: NumPy broadcasting is XLA's
    if lv is None:
        return lambda a, b: fn(a, np.reshape(b, rv))
    return lambda a, b: fn(np.reshape(a, lv), b)


# ----------------------------------------------------------------------------
# Kernel factories
# ----------------------------------------------------------------------------


def _unary_factory(op, ctx):
    e = elem_of(op.operands[0].type)
    if ynnpack_math.YNNPACK in op.attributes and e.dtype in (np.float32, np.float64):
        # (an op XLA CPU computes inside a YNNPACK fusion: YNNPACK's approximation, passes.ynnpack_fusion)
        definition = scalar.scalar_of(op, [e.dtype], e.dtype, ctx.flush)
        if definition is not None:
            return _typed(_quiet(scalar.ufunc(definition, [e.dtype], e.dtype)), e, ctx.dtype(op.results[0].type))
    kernel = _lookup(UNARY_KERNELS, op, e)
    if scalar.GLIBC_EXP_TAIL in op.attributes and e.dtype == np.float32:
        # (XLA's loops calling expf: passes.xla_numerics.ExpInALoopOfItsOwn)
        kernel = _glibc_tail(kernel, op.attributes[scalar.GLIBC_EXP_TAIL].value.data)
    return _typed(kernel, e, ctx.dtype(op.results[0].type), _flushed_store(op))


def _complex_factory(op, ctx):
    dtype = ctx.dtype(op.results[0].type)

    def make_complex(re, im):
        return _compose(re, im, dtype)

    return binary_kernel(make_complex, op)


def _first_nan_of_two(fast: np.ufunc, op, compute: np.dtype) -> Callable:
    """``fast`` (NumPy's add or multiply: the IEEE instruction) where the result has no NaN, else the op's scalar
    definition over the whole array: of two NaN operands NumPy's AVX-512 loops return the second, XLA (and the
    definition, :func:`lowering.kernels.scalar.add`) the first. (One read of the result to look for a NaN.)"""
    name = "add" if isinstance(op, ew.AddOp) else "multiply"
    definition = scalar.ufunc(scalar.Scalar(name), [compute, compute], compute)
    maximum = np.maximum.reduce  # (propagates a NaN: one vectorized read of the result)

    def nan_first(a, b):
        r = fast(a, b)
        if np.ndim(r) == 0:
            return r if r == r else _nan_redone(definition, a, b, r)
        if r.size and np.isnan(maximum(r, axis=None)):
            return _nan_redone(definition, a, b, r)
        return r

    nan_first.quiet = True  # (NumPy's add and multiply do not warn here; the definition runs quietly)
    return nan_first


def _nan_redone(definition, a, b, r):
    with np.errstate(all="ignore"):
        return np.asarray(definition(a, b), r.dtype) if np.ndim(r) else r.dtype.type(definition(a, b))


def _binary_factory(op, ctx):
    if isinstance(op, ew.ComplexOp):
        return _complex_factory(op, ctx)
    e = elem_of(op.operands[0].type)
    if e.kind == "float" and isinstance(op, (ew.AddOp, ew.MulOp)) and e.compute in (np.float32, np.float64):
        return binary_kernel(_typed(_first_nan_of_two(np.add if isinstance(op, ew.AddOp) else np.multiply, op,
                                                      e.compute), e, ctx.dtype(op.results[0].type),
                                             _flushed_store(op)), op)
    if e.kind == "float" and isinstance(op, (ew.MaxOp, ew.MinOp)):
        flush = ctx.flush
        # The op's own definition (it may depend on its operands: a denormal splat constant), else the type's.
        definition = scalar.scalar_of(op, [e.compute, e.compute], e.compute, flush)
        fn = (_quiet(scalar.ufunc(definition, [e.compute, e.compute], e.compute)) if definition is not None
              else float_extrema(e.compute, flush)[isinstance(op, ew.MinOp)])
        fn = _f16_nans(fn, e)
    else:
        fn = _lookup(BINARY_KERNELS, op, e)
    return binary_kernel(_typed(fn, e, ctx.dtype(op.results[0].type), _flushed_store(op)), op)


register(*UNARY_KERNELS)(_unary_factory)
register(*BINARY_KERNELS)(_binary_factory)


# -- compare ------------------------------------------------------------------

_COMPARE_UFUNCS = {"EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal, "GT": np.greater,
                   "LE": np.less_equal, "LT": np.less}


def total_order_key(x, e: Elem):
    """Integers ordered like XLA's total order: -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN."""
    x = np.asarray(x)
    if 8 * x.dtype.itemsize != e.bits:  # f4 is stored in a byte: its f32 value orders the same
        x = x.astype(np.float32)
    bits = x.view(_SIGNED[x.dtype.itemsize])
    # Negative floats: flip the magnitude bits so larger magnitudes order lower.
    return np.where(bits < 0, bits ^ np.iinfo(bits.dtype).max, bits)


@register(ew.CompareOp)
def _compare(op, ctx):
    e = elem_of(op.operands[0].type)
    direction = op.comparison_direction.data
    ctype = op.compare_type.data if op.compare_type is not None else ew.default_compare_type(
        op.operands[0].type.element_type)
    ufunc = _COMPARE_UFUNCS[direction]
    definition = scalar.scalar_of(op, [e.compute, e.compute], np.bool_, ctx.flush)
    if ctype == "TOTALORDER" and definition is not None and not e.widened:  # (f32, f64: the compiled paths')
        return binary_kernel(scalar.ufunc(definition, [e.compute, e.compute], np.bool_), op)
    if ctype == "TOTALORDER":
        def total(a, b):
            return ufunc(total_order_key(a, e), total_order_key(b, e))

        return binary_kernel(total, op)
    if e.widened:  # ml_dtypes types: compare the (exactly) widened values
        def widened(a, b):
            return ufunc(np.asarray(a).astype(e.compute), np.asarray(b).astype(e.compute))

        return binary_kernel(widened, op)
    return binary_kernel(ufunc, op)


# -- select, clamp ---------------------------------------------------------------


@register(ew.SelectOp)
def _select(op, ctx):
    from xdsl.dialects.builtin import TensorType

    if not isinstance(op.operands[1].type, TensorType):  # tuples: a scalar predicate picks one
        return lambda p, t, f: t if bool(p) else f
    dtype = ctx.dtype(op.results[0].type)
    definition = scalar.scalar_of(op, [np.bool_, dtype, dtype], dtype, ctx.flush)
    if definition is not None and definition.name in ("select_flush", "select_flush_strict", "select_zeroed_false",
                                                   "select_zeroed_true"):
        return _quiet(scalar.ufunc(definition, [np.bool_, dtype, dtype], dtype))  # (a float max/min: its definition)
    if dtype == ml_dtypes.bfloat16 and ctx.flush and scalar.bf16_select_flushes(op):
        tiny = ml_dtypes.finfo(ml_dtypes.bfloat16).tiny

        def select_flushed(p, on_true, on_false):
            chosen = np.where(p, on_true, on_false)
            return np.where(np.abs(chosen) < tiny, np.copysign(np.zeros_like(chosen), chosen), chosen)

        return select_flushed
    return np.where


@register(ew.ClampOp)
def _clamp(op, ctx):
    e = elem_of(op.operands[1].type)
    lo_max, hi_min = (float_extrema(e.compute, ctx.flush) if e.kind == "float"
                      else (np.maximum, np.minimum))

    def clamp(lo, x, hi):
        # XLA: min(max(x, lo), hi), with maximum/minimum's NaN and signed-zero rules.
        return hi_min(lo_max(x, lo), hi)

    fn = _typed(clamp, e, e.dtype)
    x_shape = op.operands[1].type.get_shape()
    if op.operands[0].type.get_shape() == x_shape and op.operands[2].type.get_shape() == x_shape:
        return fn
    # A scalar bound broadcasts; the result always has the operand's shape.
    return lambda lo, x, hi: np.broadcast_to(fn(lo, x, hi), x_shape)


# -- fused multiply-add (xla_dialect.internal's op, made by passes.fma_contraction) -------------------


@register(FusedMultiplyAddOp)
def fused_multiply_add_kernel(op, ctx):
    """Kernel of ``a * b + c`` rounded once (f16, f32, f64; bf16 as an f32 FMA rounded to bf16, where XLA's small
    loops contract bf16, :mod:`passes.small_loops`): the FMA instruction's result.

    f32 and f64 compute with the op's scalar definition (:func:`lowering.kernels.scalar.multiply_add`, the
    hardware FMA, in the executor's denormal mode), as the compiled paths do; f16 with its emulation.
    An FMA whose first factor is a ``negate`` (``c - a*b`` contracted as ``fma(-a, b, c)``) keeps the
    sign of a NaN ``a``: LLVM folds the negation into the instruction (``vfnmadd``), which returns a
    NaN operand as it is (measured against jax.jit: ``c - x*b`` with ``x`` NaN)."""
    dtype = ctx.dtype(op.results[0].type)
    negated = tuple(isinstance(v.owner, ew.NegOp) for v in op.operands)
    if dtype in (np.float32, np.float64):
        definition = _quiet(scalar.ufunc(scalar.Scalar("multiply_add"), [dtype] * 6, dtype))

        def hardware_fma(a, b, c):
            raw = [np.negative(v) if flip else v for v, flip in zip((a, b, c), negated)]
            return definition(a, b, c, *raw)

        return hardware_fma
    if dtype == ml_dtypes.bfloat16:  # (XLA's small loops on native-bf16 hosts: an f32 FMA rounded to bf16)
        single = _quiet(scalar.ufunc(scalar.Scalar("multiply_add"), [np.dtype(np.float32)] * 6, np.float32))
        tiny = np.finfo(np.float32).tiny if _flushed_store(op) else None

        def bf16_fma(a, b, c):
            wide = [np.asarray(v).astype(np.float32) for v in (a, b, c)]
            raw = [np.negative(v) if flip else v for v, flip in zip(wide, negated)]
            result = np.asarray(single(*wide, *raw))
            if tiny is not None:  # (the hardware conversion to bf16 flushes a denormal: BF16_FLUSHED_STORE)
                result = np.where(np.abs(result) < tiny, np.copysign(np.float32(0), result), result)
            return store(result, dtype)

        return bf16_fma
    if dtype != np.float16:
        raise UnsupportedError(f"{op.name}: no fused multiply-add for {dtype} (bf16, f16, f32 and f64 only)")

    def fused_multiply_add(a, b, c):
        return fma_nans(xla_math.fma16(a, b, c), a, b, c, negated)

    return fused_multiply_add


scalar.scalar_definition(FusedMultiplyAddOp)(scalar.fused_multiply_add_definition)  # (the compiled paths' FMA)


@register(ExpAddOp)
def exp_add_kernel(op, ctx):
    """Kernel of an f32 ``exp(x) + c`` (or ``- c``) with the exp's scaling contracted into the add: the op's scalar
    definition (:func:`lowering.kernels.scalar.exp_add_f32`) as a ufunc, as the compiled paths compute it."""
    definition = scalar.scalar_of(op, [ctx.dtype(v.type) for v in op.operands], ctx.dtype(op.results[0].type),
                                  False)
    if definition is None:
        raise UnsupportedError(f"{op.name}: f32 only")
    return _quiet(scalar.ufunc(definition, [np.dtype(np.float32)] * 2, np.float32))


scalar.scalar_definition(ExpAddOp)(scalar.exp_add_definition)


def fma_nans(r, a, b, c, negated=(False, False, False)):
    """``r = fma(a, b, c)`` with the NaN the FMA instruction gives: the first NaN operand of ``a, b, c``,
    quieted, with the sign it had before a ``negate`` that LLVM folds into the instruction (``negated[i]``:
    operand ``i`` is a negation; ``vfnmadd``/``vfmsub`` return a NaN operand as it is) -- also for ``inf * 0 +
    NaN``, where the instruction returns the NaN operand. Measured against jax.jit for ``a*b+c``,
    ``c+a*b``, ``a*b-c`` and ``c-a*b`` with every combination of payload NaN operands."""
    nan = np.isnan(r)
    if not nan.any():
        return r
    operands = [np.broadcast_to(np.negative(v) if flip else v, np.shape(r)) for v, flip in zip((a, b, c), negated)]
    chosen = np.where(np.isnan(operands[0]), operands[0], np.where(np.isnan(operands[1]), operands[1], operands[2]))
    use = nan & (np.isnan(operands[0]) | np.isnan(operands[1]) | np.isnan(operands[2]))
    return np.where(use, chosen + chosen.dtype.type(0), r)  # (+0 quiets a signalling NaN, as the instruction)
