"""One definition per element-wise op: numba scalar functions, registered by op class.

An element-wise op's numerics -- which NaN a float add returns, how a float maximum orders ``-0`` and
``+0`` and which sign a NaN gets, how a float converts to an integer (XLA's saturation), what a shift by
more than the width gives, XLA's own f32 ``exp`` -- are written here once, as a numba-compilable function
of scalars. Every compiled path calls these functions: the fused element loops of :mod:`lowering.executor.fusion`
and the compiled while loops of :mod:`lowering.executor.compiled_loops` generate only the glue (loops over the
elements, loads, stores, the cast to the result's type) around calls to them; the interpreter's kernels
use them through :func:`ufunc` where the numerics are the project's own (max/min of floats, the FMA, float
to integer conversion, XLA's f32 approximations). Where a definition is one IEEE instruction (``a + b``,
``a < b``) the interpreter's NumPy ufunc is that same instruction, and the definition states the
instruction's NaN rule that LLVM must not change (it may swap a commutative op's operands):
``tests/test_scalar_definitions.py`` checks every definition, as a ufunc, against the interpreter's kernel
bit for bit on special values, and that every op the compiled paths accept has exactly one definition.

A definition is registered for op classes with :func:`scalar_definition`; its *selector* gets the op and
its operand and result dtypes and returns a :class:`Scalar` (the function and constant arguments that
follow the operands), or None for element types it does not cover (f16, bf16 and complex values keep the
interpreted kernels). Generated code imports the functions by name from this module (:data:`EXPORTS`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.ir as ir
import ml_dtypes
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from xdsl.ir import Operation

from xla_dialect.cse import CseNumbering, splat_value
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import WhileOp, moved_out_of_loop, static_trip_count
from xla_dialect.ops.data_movement import BroadcastInDimOp, ReshapeOp
from xla_dialect.types import numpy_dtype

from ..runtime import loop_runtime as rt
from ..runtime.loop_runtime import denormal_as_zero
from . import xla_scalar
from ..runtime.interrupt import compile_off_main_thread
from .host import host_properties, native_bf16
from . import ynnpack_math

# forceinline (LLVM's alwaysinline): a definition is inlined into the loop calling it, however large that
# loop is -- LLVM's inliner stops inlining into a large fused loop (about 100 calls), and a loop with calls
# left in it is not vectorized (a 400-op f32 kernel: 60 ms instead of 3).
_njit = numba.njit(cache=True, error_model="numpy", forceinline=True)

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOATS = frozenset({F32, F64})
INTEGERS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                            np.uint8, np.uint16, np.uint32, np.uint64))
PRED = np.dtype(np.bool_)
SCALAR_DTYPES = FLOATS | INTEGERS | {PRED}
"""Element types numba computes natively (it has no f16, bf16 or sub-byte integers)."""


# ----------------------------------------------------------------------------
# The definitions
# ----------------------------------------------------------------------------


@_njit
def first_nan(r, a):
    """``r``, or ``a`` quieted where ``r`` is a NaN and ``a`` is one: the NaN rule of the add, multiply and FMA
    instructions (of several NaN operands, the first). Written once, here: fused loops, which hand every NaN
    output to the ops' own kernels, compile the definitions without it (:mod:`lowering.kernels.scalar_numbers`)."""
    return a + a if (r != r) & (a != a) else r  # (no branch: the loop calling it stays vectorized)


def _wrapping(instruction: str):
    """An intrinsic computing an integer ``instruction`` (``add``, ``sub``, ``mul``) of two values of one integer
    type as it wraps: LLVM's instruction without the ``nsw`` flag numba puts on signed arithmetic. With ``nsw`` a
    signed overflow is undefined to LLVM, which then reasons as if it could not happen -- ``x * x`` of an int64 is
    taken to be non-negative and its remainder computed with an unsigned-style division, which traps (SIGFPE)
    when the square wrapped (long fuzz campaign: ``rem(x1 * x1, x0)`` in a fused int64 loop killed the process)."""

    @intrinsic
    def wrapping(typingctx, a, b):
        if not (isinstance(a, types.Integer) and a == b):
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, instruction)(*args)

        return a(a, b), codegen

    return wrapping


_wrapping_add, _wrapping_sub, _wrapping_mul = (_wrapping(name) for name in ("add", "sub", "mul"))


def _arithmetic(wrapping: Callable, python: Callable) -> Callable:
    """A function of two scalars for the definitions: integers (of one type, or both first converted to the type
    NumPy gives the pair) by ``wrapping``, everything else by ``python`` (the operator numba compiles)."""

    def operation(a, b):
        return python(a, b)

    @numba.extending.overload(operation, jit_options={"error_model": "numpy"})
    def _typed(a, b):
        if isinstance(a, types.Integer) and a == b:
            return lambda a, b: wrapping(a, b)
        if isinstance(a, types.Integer) and isinstance(b, types.Integer):
            common = np.result_type(numba.np.numpy_support.as_dtype(a), numba.np.numpy_support.as_dtype(b)).type
            return lambda a, b: wrapping(common(a), common(b))
        return python

    return operation


_plus = _arithmetic(_wrapping_add, lambda a, b: a + b)
_minus = _arithmetic(_wrapping_sub, lambda a, b: a - b)
_times = _arithmetic(_wrapping_mul, lambda a, b: a * b)


@_njit
def add(a, b):
    """``a + b``, integers wrapping; of two float NaNs, ``a``'s (the add instruction's first operand, quieted)."""
    return first_nan(_plus(a, b), a)


@_njit
def subtract(a, b):
    """``a - b``, integers wrapping (the instruction's NaN rule, first operand first, holds: LLVM does not swap a
    subtraction)."""
    return _minus(a, b)


@_njit
def multiply(a, b):
    """``a * b``, integers wrapping; of two float NaNs, ``a``'s (see :func:`add`)."""
    return first_nan(_times(a, b), a)


@_njit
def divide(a, b):
    """Float ``a / b`` (IEEE)."""
    return a / b


@_njit
def maximum_float(a, b):
    """XLA's float maximum: NaN-propagating, ``-0 < +0``. A NaN ``a`` is the result; a NaN ``b`` (``a`` not
    NaN) is, with the sign bit ``sign(a) & sign(b)``, as XLA CPU gives it (measured: ``max(1, -NaN)`` is
    ``+NaN``, ``max(-1, -NaN)`` is ``-NaN``)."""
    if a != a:
        return a
    if b != b:
        return b if np.copysign(1.0, a) < 0 else abs(b)
    if a == 0 and b == 0:
        return a + b  # -0 + +0 = +0, -0 + -0 = -0
    return a if a >= b else b


@_njit
def minimum_float(a, b):
    """XLA's float minimum (see :func:`maximum_float`); a NaN ``b`` has the sign bit ``sign(a) | sign(b)``."""
    if a != a:
        return a
    if b != b:
        return -abs(b) if np.copysign(1.0, a) < 0 else b
    if a == 0 and b == 0:
        return -((-a) + (-b))
    return a if a <= b else b


@_njit
def maximum_float_flush(a, b):
    """:func:`maximum_float` as the CPU computes it with denormals-are-zero (the executor's "flush" mode): a
    denormal result reads as a zero of its sign, as the max instruction returns it."""
    return denormal_as_zero(maximum_float(a, b))


@_njit
def minimum_float_flush(a, b):
    """:func:`minimum_float` with a denormal result read as a zero of its sign."""
    return denormal_as_zero(minimum_float(a, b))


@_njit
def maximum_float_flush_denormal_constant(x, c):
    """XLA CPU's vectorized maximum of ``x`` and a splat constant ``c`` that is a nonzero denormal, under DAZ
    (measured on arrays of 2 or more elements, either operand order): LLVM knows ``c`` is neither zero nor
    NaN, so no signed-zero fix-up is emitted and the max instruction alone decides, reading ``c`` as a zero of
    its sign and returning the (flushed) ``x`` on a tie: ``max(-0, +1e-45)`` is ``-0``, ``max(-1, -1e-45)``
    is ``-0``, a NaN ``x`` is the result."""
    if x != x:
        return x
    flushed = denormal_as_zero(x)
    zero = np.copysign(c - c, c)
    return zero if flushed < zero else flushed


@_njit
def minimum_float_flush_denormal_constant(x, c):
    """:func:`maximum_float_flush_denormal_constant` for the minimum: ``min(+0, -1e-45)`` is ``+0``,
    ``min(1, -1e-45)`` is ``-0``."""
    if x != x:
        return x
    flushed = denormal_as_zero(x)
    zero = np.copysign(c - c, c)
    return zero if zero < flushed else flushed


@_njit
def maximum_int(a, b):
    """Integer (and pred) maximum."""
    return a if a >= b else b


@_njit
def minimum_int(a, b):
    """Integer (and pred) minimum."""
    return a if a <= b else b


@_njit
def negate(a):
    """``-a`` (a float's sign bit flipped, NaNs included; integers wrap)."""
    return -a


@_njit
def absolute(a):
    """``|a|`` (a float's sign bit cleared; the most negative integer stays itself after the cast)."""
    return abs(a)


@_njit
def bit_and(a, b):
    """Bitwise and of integers."""
    return a & b


@_njit
def bit_or(a, b):
    """Bitwise or of integers."""
    return a | b


@_njit
def bit_xor(a, b):
    """Bitwise xor of integers."""
    return a ^ b


@_njit
def bit_not(a):
    """Bitwise not of an integer."""
    return ~a


@_njit
def logical_and(a, b):
    """``and`` of preds."""
    return bool(a) and bool(b)


@_njit
def logical_or(a, b):
    """``or`` of preds."""
    return bool(a) or bool(b)


@_njit
def logical_xor(a, b):
    """``xor`` of preds."""
    return bool(a) != bool(b)


@_njit
def logical_not(a):
    """``not`` of a pred."""
    return not a


@_njit
def equal(a, b):
    """``a == b`` (IEEE: NaN is unequal to everything)."""
    return a == b


@_njit
def not_equal(a, b):
    """``a != b`` (IEEE)."""
    return a != b


@intrinsic
def total_order_key(typingctx, x):
    """XLA's total order of a float32/float64 as an int64 (-NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN):
    its bit pattern, the magnitude bits flipped when the sign bit is set (a bit cast, no arithmetic)."""
    if x == types.float32:
        width = 32
    elif x == types.float64:
        width = 64
    else:
        return None

    def codegen(context, builder, signature, args):
        bits_type = ir.IntType(width)
        bits = builder.bitcast(args[0], bits_type)
        negative = builder.icmp_signed("<", bits, ir.Constant(bits_type, 0))
        mask = builder.select(negative, ir.Constant(bits_type, (1 << (width - 1)) - 1), ir.Constant(bits_type, 0))
        key = builder.xor(bits, mask)
        return builder.sext(key, ir.IntType(64)) if width == 32 else key

    return types.int64(x), codegen


TOTAL_ORDER_DIRECTIONS = {"EQ": 0, "NE": 1, "LT": 2, "LE": 3, "GT": 4, "GE": 5}
"""The direction argument of :func:`compare_total_order`."""


@_njit
def compare_total_order(a, b, direction):
    """A ``TOTALORDER`` comparison of two floats (``direction`` from :data:`TOTAL_ORDER_DIRECTIONS`): their
    :func:`total_order_key` values compared (jax's sort comparators; -0 < +0, NaNs ordered by sign and bits)."""
    ka, kb = total_order_key(a), total_order_key(b)
    if direction == 0:
        return ka == kb
    if direction == 1:
        return ka != kb
    if direction == 2:
        return ka < kb
    if direction == 3:
        return ka <= kb
    if direction == 4:
        return ka > kb
    return ka >= kb


@_njit
def less(a, b):
    """``a < b`` (IEEE)."""
    return a < b


@_njit
def less_equal(a, b):
    """``a <= b`` (IEEE)."""
    return a <= b


@_njit
def greater(a, b):
    """``a > b`` (IEEE)."""
    return a > b


@_njit
def greater_equal(a, b):
    """``a >= b`` (IEEE)."""
    return a >= b


@_njit
def select(p, on_true, on_false):
    """``on_true`` where ``p``, else ``on_false``."""
    return on_true if p else on_false


@_njit
def select_flush(p, on_true, on_false):
    """:func:`select` of a float max/min pattern as the max/min instruction gives it under denormals-are-zero
    (:func:`_extremum_select`): the chosen operand read as a zero of its sign when it is a denormal. Measured
    against jax.jit: ``where(x > y, y, x)`` with ``x = 1e-39``, ``y = 0`` is ``0`` (here it was ``1e-39``)."""
    return denormal_as_zero(on_true if p else on_false)


@_njit
def select_flush_strict(p, on_true, on_false):
    """:func:`select_flush` of a ``>=``/``<=`` max/min pattern against a nonzero constant
    (``where(x >= c, x, c)``): LLVM makes the compare strict -- where ``x == c`` the arms are equal -- so the
    instruction gives the false arm where the arms tie as it reads them, under denormals-are-zero: a denormal
    constant against a zero or another denormal. Measured against jax.jit (session 23): f32 ``where(x >= 1e-40, x,
    1e-40)`` at ``x = -0`` is ``+0`` (the constant, flushed), here it was ``-0``."""
    chosen_true = denormal_as_zero(on_true)
    chosen_false = denormal_as_zero(on_false)
    if chosen_true == chosen_false:
        return chosen_false
    return chosen_true if p else chosen_false


@_njit
def select_zeroed_false(p, on_true, on_false):
    """:func:`select` whose false arm, a constant XLA's scalar code holds as a signed zero
    (:func:`_select_by_a_zeroed_constant`), is read as that zero: the true arm kept as it is."""
    return on_true if p else denormal_as_zero(on_false)


@_njit
def select_zeroed_true(p, on_true, on_false):
    """:func:`select_zeroed_false` with the constant, held as a signed zero, in the true arm: where a negation or
    absolute value reading the select is moved into its arms (:func:`_sign_op_moved_into_arms`), so no min/max
    instruction is left."""
    return denormal_as_zero(on_true) if p else on_false


@_njit
def select_kept(p, on_true, on_false):
    """:func:`select` whose arms LLVM cannot match against the compare that chose them
    (:func:`~lowering.runtime.loop_runtime.kept`): where XLA computes a plain select but the compiled code would
    let LLVM fold the compare's operands into the arms and use the min/max instruction, which flushes a denormal
    under denormals-are-zero (:func:`_select`)."""
    return rt.kept(on_true) if p else rt.kept(on_false)


@_njit
def float_to_pred(a, tiny):
    """A float as a pred: nonzero, read with denormals-are-zero (``tiny`` is the type's smallest normal
    number; NaN is true)."""
    return not (abs(a) < tiny)


@_njit
def number_to_pred(a):
    """An integer as a pred: nonzero."""
    return a != 0


@_njit
def pred_to_number(a, target):
    """A pred as a number of type ``target``: 1 or 0."""
    return target(1) if a else target(0)


@_njit
def float_to_int(a, upper, lower, high, low, target):
    """XLA's float to integer conversion into ``target``: NaN gives 0; at or beyond the range's power-of-two
    bounds (``upper``, ``lower``, exact in every float type) the result saturates to ``high`` or ``low``
    (the type's largest and smallest values); the rest truncate."""
    if a >= upper:
        return high
    if a < lower:
        return low
    if a != a:
        return target(0)
    return target(a)


@_njit
def convert_number(a, target):
    """An integer or float as ``target`` (C's conversion: rounding to nearest for floats, wrapping for
    integers; float to integer goes through :func:`float_to_int`)."""
    return target(a)


@_njit
def shift_left(a, b, bits, unsigned, target):
    """``a << b`` in ``bits``-bit integers; an amount outside ``[0, bits)`` shifts everything out."""
    amount = np.int64(b)
    if amount < 0 or amount >= bits:
        return target(0)
    return target(unsigned(unsigned(a) << unsigned(amount)))


@_njit
def shift_right_logical(a, b, bits, unsigned, target):
    """``a >> b`` filling with zeros; an amount outside ``[0, bits)`` gives 0."""
    amount = np.int64(b)
    if amount < 0 or amount >= bits:
        return target(0)
    return target(unsigned(a) >> unsigned(amount))


@_njit
def shift_right_arithmetic(a, b, bits, signed, target):
    """``a >> b`` filling with the sign bit; an amount outside ``[0, bits)`` fills the whole word."""
    amount = np.int64(b)
    if amount < 0 or amount >= bits:
        amount = bits - 1
    return target(signed(a) >> signed(amount))


@_njit
def multiply_add(a, b, c, raw_a, raw_b, raw_c):
    """``a * b + c`` rounded once (the hardware FMA). A NaN result is the first NaN of ``raw_a, raw_b,
    raw_c`` quieted -- the operands as they were before a negation that LLVM folds into the instruction
    (``vfnmadd``/``vfmsub`` return a NaN operand as it is) -- also for ``inf * 0 + NaN``; measured against
    jax.jit for ``a*b+c``, ``c+a*b``, ``a*b-c`` and ``c-a*b`` with payload NaN operands."""
    # (Selects, no branches: the loop calling it stays vectorized.)
    first = raw_a if raw_a != raw_a else (raw_b if raw_b != raw_b else raw_c)
    return first_nan(rt.fused_multiply_add(a, b, c), first)


@_njit
def exp_add_f32(x, c):
    """XLA CPU's f32 ``exp(x) + c`` with the exp's final scaling contracted into the add
    (:class:`~xla_dialect.internal.ExpAddOp`): ``fma(y, 2**n, c)`` of the exp's polynomial and scale
    (:func:`lowering.kernels.xla_scalar.exp_f32_parts`), rounded once. Of NaNs, the exp's (``x``'s) first, then
    ``c``'s, quieted (the FMA instruction's first NaN operand)."""
    y, scale = xla_scalar.exp_f32_parts(x)
    return first_nan(rt.fused_multiply_add(y, scale, c), y if y != y else c)


@_njit
def exp_subtract_f32(x, c):
    """:func:`exp_add_f32` of ``-c``: ``exp(x) - c``, the FMA instruction returning a NaN ``c`` as it is (before
    the negation it folds in, as for :func:`multiply_add`)."""
    y, scale = xla_scalar.exp_f32_parts(x)
    return first_nan(rt.fused_multiply_add(y, scale, -c), y if y != y else c)


@_njit
def subtract_exp_f32(x, c):
    """:func:`exp_add_f32` of the exp negated: ``c - exp(x)`` as ``fma(-y, 2**n, c)``, a NaN ``y`` returned as it
    is (the instruction folds the negation in)."""
    y, scale = xla_scalar.exp_f32_parts(x)
    return first_nan(rt.fused_multiply_add(-y, scale, c), y if y != y else c)


@_njit
def clamp_float(lo, x, hi):
    """XLA's float clamp: ``min(max(x, lo), hi)`` with :func:`maximum_float`'s and :func:`minimum_float`'s NaN
    and signed-zero rules."""
    return minimum_float(maximum_float(x, lo), hi)


@_njit
def clamp_float_flush(lo, x, hi):
    """:func:`clamp_float` as the CPU computes it with denormals-are-zero."""
    return minimum_float_flush(maximum_float_flush(x, lo), hi)


@_njit
def clamp_int(lo, x, hi):
    """Integer (and pred) clamp: ``min(max(x, lo), hi)``."""
    return minimum_int(maximum_int(x, lo), hi)


def _integer_division(remainder: bool):
    """The intrinsic of XLA's integer division (``remainder``: its remainder), C's truncating ``/`` and ``%``
    on the operands' type with XLA's answers where C's are undefined: ``x / 0`` is all bits set, ``x % 0`` is
    ``x``; signed ``INT_MIN / -1`` is ``INT_MIN`` (the wrapped ``-x``) and ``INT_MIN % -1`` is 0. Written as
    selects around one ``sdiv``/``udiv`` (``srem``/``urem``) by a divisor that is never 0 or -1."""

    @intrinsic
    def division(typingctx, a, b):
        if not (isinstance(a, types.Integer) and a == b):
            return None
        signed = a.signed

        def codegen(context, builder, signature, args):
            x, y = args
            one, all_ones = ir.Constant(x.type, 1), ir.Constant(x.type, -1)
            by_zero = builder.icmp_unsigned("==", y, ir.Constant(x.type, 0))
            by_minus_one = builder.icmp_unsigned("==", y, all_ones) if signed else None
            unsafe = builder.or_(by_zero, by_minus_one) if signed else by_zero
            divisor = builder.select(unsafe, one, y)  # x / 1 = x, x % 1 = 0
            if remainder:
                r = (builder.srem if signed else builder.urem)(x, divisor)
                return builder.select(by_zero, x, r)
            q = (builder.sdiv if signed else builder.udiv)(x, divisor)
            if signed:
                q = builder.select(by_minus_one, builder.neg(x), q)  # (-INT_MIN wraps to INT_MIN)
            return builder.select(by_zero, all_ones, q)

        return a(a, b), codegen

    return division


_integer_quotient = _integer_division(remainder=False)
_integer_remainder = _integer_division(remainder=True)


@_njit
def divide_int(a, b):
    """XLA's integer ``a / b``: truncating; ``a / 0`` is all bits set, ``INT_MIN / -1`` is ``INT_MIN``."""
    return _integer_quotient(a, b)


@_njit
def remainder_int(a, b):
    """XLA's integer ``a % b``: C's (the sign of ``a``); ``a % 0`` is ``a``, ``INT_MIN % -1`` is 0."""
    return _integer_remainder(a, b)


@_njit
def remainder_float(a, b):
    """Float ``a % b`` as XLA CPU computes it (measured against jax.jit): C's ``fmod`` (exact; the default NaN
    for ``inf % b`` and ``a % 0``), a denormal divisor read as 0 with denormals-are-zero, and of NaN operands
    the first, quieted (the C library's fmod returns the second of two NaNs)."""
    divisor = b if b != 0 else b - b  # (b - b: a zero that stays a runtime value)
    r = np.fmod(a, divisor)
    first = a if a != a else b
    return first + first if (a != a) | (b != b) else r


def _bit_count(name: str, *flags):
    """The intrinsic of LLVM's ``llvm.<name>`` on an integer (``ctpop``, ``ctlz``), in the operand's type."""

    @intrinsic
    def count(typingctx, a):
        if not isinstance(a, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            (x,) = args
            extra = [ir.Constant(ir.IntType(1), f) for f in flags]
            fnty = ir.FunctionType(x.type, [x.type, *(c.type for c in extra)])
            fn = builder.module.declare_intrinsic(f"llvm.{name}", [x.type], fnty)
            return builder.call(fn, [x, *extra])

        return a(a), codegen

    return count


_ctpop, _ctlz = _bit_count("ctpop"), _bit_count("ctlz", 0)


@_njit
def popcnt(a):
    """The number of set bits of an integer."""
    return _ctpop(a)


@_njit
def count_leading_zeros(a):
    """The number of leading zero bits of an integer (its width for 0)."""
    return _ctlz(a)


@_njit
def sqrt(a):
    """Float ``sqrt(a)`` (the IEEE instruction: a NaN operand quieted, a negative one the default NaN)."""
    return np.sqrt(a)


@_njit
def floor(a):
    """Float ``floor(a)`` (the rounding instruction; a NaN quieted)."""
    return np.floor(a)


@_njit
def ceil(a):
    """Float ``ceil(a)`` (the rounding instruction; a NaN quieted)."""
    return np.ceil(a)


@_njit
def round_nearest_even(a):
    """Float ``a`` rounded to the nearest integer, ties to even (the rounding instruction)."""
    return np.rint(a)


@_njit
def round_nearest_afz(a, target):
    """Float ``a`` rounded to the nearest integer, ties away from zero: ``trunc(a) +- 1`` where the dropped
    fraction ``a - trunc(a)`` (exact) is at least 0.5 (``floor(a + 0.5)`` would round 0.49999997 up)."""
    t = np.trunc(a)
    return t + np.copysign(target(1), a) if abs(a - t) >= 0.5 else t


@_njit
def sign_float(a, target):
    """XLA's float sign: ``copysign(a != 0 ? 1 : 0, a)``, a NaN itself; ``+-0`` for ``+-0`` (and, read with
    denormals-are-zero, for a denormal)."""
    return a if a != a else np.copysign(target(1) if a != 0 else target(0), a)


@_njit
def sign_int(a):
    """Signed integer sign: -1, 0 or 1."""
    return (a > 0) - (a < 0)


@_njit
def is_finite(a):
    """A float is neither infinite nor NaN."""
    return np.isfinite(a)


@_njit
def power_int(a, b, signed, unsigned, target):
    """XLA's integer ``a ** b``, wrapping: square-and-multiply over the exponent's low 6 bits (larger
    exponents overflow anyway but for bases 0 and +-1); the exponent is read as signed (also for unsigned
    types: u8 200 is -56), and a negative one gives 1 for ``a == 1``, ``+-1`` for ``a == -1`` (all bits
    set) by its parity, else 0."""
    e = unsigned(b) & unsigned(63)
    result = target(1)
    base = target(a)
    for _ in range(6):  # (unrolled: selects, no branches)
        result = target(_times(result, base)) if e & unsigned(1) else result
        e = e >> unsigned(1)
        base = target(_times(base, base))
    odd = (unsigned(b) & unsigned(1)) != unsigned(0)
    minus_one = target(-1)
    special = target(1) if a == target(1) else ((minus_one if odd else target(1)) if a == minus_one else target(0))
    return special if signed(b) < signed(0) else result


@_njit
def rsqrt_exact(x, tiny, one):
    """``1 / sqrt(x)`` correctly rounded, a denormal ``x`` read as a zero of its sign (XLA's rsqrt on a host
    without the estimate instruction it uses; ``one`` is 1 in ``x``'s type)."""
    x = np.copysign(x - x, x) if abs(x) < tiny else x
    return one / np.sqrt(x)


@intrinsic
def _rsqrt_estimate(typingctx, x):
    """The CPU's reciprocal-square-root estimate of ``x``: f32 ``RSQRTPS`` (XLA vectorizes f32 8 wide, so
    not the AVX-512 ``VRSQRT14PS``), f64 ``VRSQRT14PD``, on lane 0 of a vector holding ``x``."""
    if x == types.float32:
        ir_scalar, lanes, name, masked = ir.FloatType(), 4, "llvm.x86.sse.rsqrt.ps", False
    elif x == types.float64:
        ir_scalar, lanes, name, masked = ir.DoubleType(), 2, "llvm.x86.avx512.rsqrt14.pd.128", True
    else:
        return None

    def codegen(context, builder, signature, args):
        vector = ir.VectorType(ir_scalar, lanes)
        arg_types = [vector, vector, ir.IntType(8)] if masked else [vector]
        fn = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(vector, arg_types))
        packed = builder.insert_element(ir.Constant(vector, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
        call_args = [packed, ir.Constant(vector, [0.0] * lanes), ir.Constant(ir.IntType(8), -1)] if masked \
            else [packed]
        return builder.extract_element(builder.call(fn, call_args), ir.Constant(ir.IntType(32), 0))

    return x(x), codegen


@_njit
def rsqrt_refined(x, tiny, steps, minus_half, minus_one, inf):
    """XLA CPU's rsqrt on a host with the estimate instruction (see :mod:`lowering.kernels.cpu_rsqrt`): the
    CPU's estimate (:func:`_rsqrt_estimate`) refined by ``steps`` (1 or 2) Newton steps
    ``y <- y + (-y/2) (x y y - 1)``, both multiply-adds fused; the estimate itself for inputs below the
    smallest normal number ``tiny`` (a denormal read as a zero of its sign) and +inf. ``minus_half``,
    ``minus_one`` and ``inf`` are those constants in ``x``'s type."""
    x = np.copysign(x - x, x) if abs(x) < tiny else x
    y0 = _rsqrt_estimate(x)
    y1 = rt.fused_multiply_add(y0 * minus_half, rt.fused_multiply_add(x * y0, y0, minus_one), y0)
    y2 = rt.fused_multiply_add(y1 * minus_half, rt.fused_multiply_add(x * y1, y1, minus_one), y1)
    y = y2 if steps == 2 else y1  # (both computed: selects, no branches)
    return y0 if (x < tiny) | (x == inf) else y


# The C library's trigonometric functions, which XLA CPU calls.
sine_f32 = numba.types.ExternalFunction("sinf", numba.types.float32(numba.types.float32))
cosine_f32 = numba.types.ExternalFunction("cosf", numba.types.float32(numba.types.float32))
tan_f32 = numba.types.ExternalFunction("tanf", numba.types.float32(numba.types.float32))
sine_f64 = numba.types.ExternalFunction("sin", numba.types.float64(numba.types.float64))
cosine_f64 = numba.types.ExternalFunction("cos", numba.types.float64(numba.types.float64))
tan_f64 = numba.types.ExternalFunction("tan", numba.types.float64(numba.types.float64))
atan2_f32 = numba.types.ExternalFunction("atan2f", numba.types.float32(numba.types.float32, numba.types.float32))
atan2_f64 = numba.types.ExternalFunction("atan2", numba.types.float64(numba.types.float64, numba.types.float64))
power_f32 = numba.types.ExternalFunction("powf", numba.types.float32(numba.types.float32, numba.types.float32))
power_f64 = numba.types.ExternalFunction("pow", numba.types.float64(numba.types.float64, numba.types.float64))
cbrt_f32 = numba.types.ExternalFunction("cbrtf", numba.types.float32(numba.types.float32))
cbrt_f64 = numba.types.ExternalFunction("cbrt", numba.types.float64(numba.types.float64))
# (and the C library's log and exp, which XLA calls inside other functions: lowering.kernels.libm's ufuncs)
c_log_f32 = numba.types.ExternalFunction("logf", numba.types.float32(numba.types.float32))
c_log_f64 = numba.types.ExternalFunction("log", numba.types.float64(numba.types.float64))
c_exp_f32 = numba.types.ExternalFunction("expf", numba.types.float32(numba.types.float32))
c_exp_f64 = numba.types.ExternalFunction("exp", numba.types.float64(numba.types.float64))


@_njit
def log_f64(x):
    """XLA CPU's f64 log: the C library's ``log``, a denormal ``x`` read as a zero of its sign (DAZ)."""
    return c_log_f64(denormal_as_zero(x))


# YNNPACK's approximations, for the ops XLA computes inside YNNPACK fusions (marked by passes.ynnpack_fusion).
ynnpack_exp_f32, ynnpack_exp_f64 = ynnpack_math.ynnpack_exp_f32, ynnpack_math.ynnpack_exp_f64
ynnpack_log_f32, ynnpack_log_f64 = ynnpack_math.ynnpack_log_f32, ynnpack_math.ynnpack_log_f64
ynnpack_tanh_f32, ynnpack_tanh_f64 = ynnpack_math.ynnpack_tanh_f32, ynnpack_math.ynnpack_tanh_f64
ynnpack_logistic_f32, ynnpack_logistic_f64 = ynnpack_math.ynnpack_logistic_f32, ynnpack_math.ynnpack_logistic_f64

# XLA's own approximations (lowering.kernels.xla_scalar).
exp_f32, exp_f64 = xla_scalar.exp_f32, xla_scalar.exp_f64
log_f32 = xla_scalar.log_f32
tanh_f32, tanh_f64 = xla_scalar.tanh_f32, xla_scalar.tanh_f64
logistic_f32, logistic_f64 = xla_scalar.logistic_f32, xla_scalar.logistic_f64
expm1_f32, expm1_f64 = xla_scalar.expm1_f32, xla_scalar.expm1_f64
log1p_f32, log1p_f64 = xla_scalar.log1p_f32, xla_scalar.log1p_f64
erf_f32, erf_f64 = xla_scalar.erf_f32, xla_scalar.erf_f64


# ----------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    """A definition chosen for one op: ``name(*operands, *arguments)`` computes one element (cast to the
    result's type by the caller). ``arguments`` are constants: numbers, or NumPy scalar types (``np.int32``)
    that numba passes as type classes."""

    name: str
    arguments: tuple = ()

    @property
    def function(self):
        """The numba function (or external C function) itself."""
        return globals()[self.name]


Selector = Callable[..., "Scalar | None"]
"""``selector(op, operand_dtypes, result_dtype, flush) -> Scalar | None``."""

DEFINITIONS: dict[type, Selector] = {}
"""Op class -> selector of its scalar definition."""


def scalar_definition(*op_classes: type) -> Callable[[Selector], Selector]:
    """Decorator: register the selector of the scalar definition of ``op_classes`` (one per class)."""

    def deco(selector: Selector) -> Selector:
        for cls in op_classes:
            if cls in DEFINITIONS:
                raise ValueError(f"{cls.__name__} already has a scalar definition")
            DEFINITIONS[cls] = selector
        return selector

    return deco


def scalar_of(op, operand_dtypes, result_dtype, flush: bool) -> Scalar | None:
    """The scalar definition of ``op`` for these element types (``flush``: the executor flushes denormals),
    or None when it has none (the op then keeps its interpreted kernel)."""
    selector = DEFINITIONS.get(type(op))
    if selector is None:
        return None
    dtypes = [np.dtype(d) for d in operand_dtypes]
    if any(d not in SCALAR_DTYPES for d in [*dtypes, np.dtype(result_dtype)]):
        return None
    return selector(op, dtypes, np.dtype(result_dtype), flush)


def _implicit_broadcast(op) -> bool:
    return op.properties.get("broadcast_dimensions") is not None


@scalar_definition(ew.AddOp, ew.MulOp)
def _add_multiply(op, dtypes, result, flush):
    if result == PRED or _implicit_broadcast(op):
        return None
    return Scalar("add" if isinstance(op, ew.AddOp) else "multiply")


@scalar_definition(ew.SubOp)
def _subtract(op, dtypes, result, flush):
    return None if result == PRED or _implicit_broadcast(op) else Scalar("subtract")


@scalar_definition(ew.DivOp)
def _divide(op, dtypes, result, flush):
    if _implicit_broadcast(op) or result == PRED:
        return None
    return Scalar("divide" if result in FLOATS else "divide_int")


def float_extremum(which: str, flush: bool) -> Scalar:
    """XLA's float ``"maximum"`` or ``"minimum"`` (``flush``: as the instruction computes it under DAZ)."""
    return Scalar(f"{which}_float_flush" if flush else f"{which}_float")


def _denormal_splat(value) -> bool:
    """Whether ``value`` is a splat f32/f64/bf16 constant (or a broadcast of one) whose elements are a nonzero
    denormal: XLA CPU's code holds it as an immediate that LLVM knows is not zero (bf16 is computed in f32,
    where a bf16 denormal is an f32 denormal: measured, ``jnp.maximum(-0, bf16(1e-40))`` is ``-0`` on arrays)."""
    owner = value.owner
    if isinstance(owner, BroadcastInDimOp):
        owner = owner.operands[0].owner
    if not isinstance(owner, ConstantOp):
        return False
    return _zero_of_denormal(owner.splat_value()) is not None


@scalar_definition(ew.MaxOp, ew.MinOp)
def _maximum_minimum(op, dtypes, result, flush):
    if _implicit_broadcast(op):
        return None
    which = "maximum" if isinstance(op, ew.MaxOp) else "minimum"
    if result not in FLOATS:
        return Scalar(f"{which}_int")
    if flush and result in (np.float32, np.float64) and (_elements(op.results[0].type) >= 2 or _small_call(op)):
        # A denormal splat operand: XLA's vector code compares without the signed-zero fix-up (a single
        # element keeps it: measured, f32[1] gives the sign rule, except inside the loops XLA compiles whole,
        # passes.small_loops). XLA's simplifier has moved a constant to the right
        # (passes.xla_numerics.ConstantOnTheRight); with xla_rewrites=False the op is as written.
        if _denormal_splat(op.operands[1]):
            return Scalar(f"{which}_float_flush_denormal_constant")
    return float_extremum(which, flush)


def _small_call(op) -> bool:
    """Whether ``op`` is inside a while loop XLA CPU compiles whole (marked by ``xla-small-loops``)."""
    from .small_dot import SMALL_CALL

    return SMALL_CALL in op.attributes


def _elements(tensor_type) -> int:
    return int(np.prod(tensor_type.get_shape(), dtype=np.int64))


@scalar_definition(ew.NegOp)
def _negate(op, dtypes, result, flush):
    return None if result == PRED else Scalar("negate")


@scalar_definition(ew.AbsOp)
def _absolute(op, dtypes, result, flush):
    return None if result == PRED or result.kind == "u" else Scalar("absolute")


@scalar_definition(ew.AndOp, ew.OrOp, ew.XorOp)
def _bitwise(op, dtypes, result, flush):
    if _implicit_broadcast(op) or result in FLOATS:
        return None
    word = {ew.AndOp: "and", ew.OrOp: "or", ew.XorOp: "xor"}[type(op)]
    return Scalar(f"logical_{word}" if result == PRED else f"bit_{word}")


@scalar_definition(ew.NotOp)
def _not(op, dtypes, result, flush):
    if result in FLOATS:
        return None
    return Scalar("logical_not" if result == PRED else "bit_not")


_COMPARISONS = {"EQ": "equal", "NE": "not_equal", "LT": "less", "LE": "less_equal", "GT": "greater",
                "GE": "greater_equal"}


@scalar_definition(ew.CompareOp)
def _compare(op, dtypes, result, flush):
    ctype = op.properties.get("compare_type")
    if _implicit_broadcast(op):
        return None
    direction = op.properties["comparison_direction"].data
    if ctype is not None and ctype.data == "TOTALORDER":
        if np.dtype(dtypes[0]) not in (np.dtype(np.float32), np.dtype(np.float64)):
            return None
        return Scalar("compare_total_order", (TOTAL_ORDER_DIRECTIONS[direction],))
    return Scalar(_COMPARISONS[direction])


MASKED_STORE = "xla_cpu_masked_store"
"""The attribute (unit) ``xla-in-place-selects`` puts on a max/min select that XLA CPU computes as a compare and a
masked store of its constant into the buffer it updates in place (:mod:`passes.in_place_selects`): a select, the
element it keeps never rewritten, so a denormal is kept."""

MAX_MIN_ELEMENTS = "xla_cpu_max_min"
"""The attribute (unit) ``xla-in-place-selects`` puts on the copy of such a select that computes its elements in
scalar code: the max/min instruction, a denormal result flushed (:func:`select_flush`)."""


@scalar_definition(ew.SelectOp)
def _select(op, dtypes, result, flush):
    if flush and result in FLOATS:
        if MASKED_STORE in op.attributes:
            return Scalar("select_kept")
        if MAX_MIN_ELEMENTS in op.attributes:
            return Scalar("select_flush_strict" if made_strict(op) else "select_flush")
        single = _select_by_a_zeroed_constant(op)
        if single is not None:
            return Scalar(single)
        if max_min_select(op):
            return Scalar("select_flush_strict" if made_strict(op) else "select_flush")
        if _extremum_select(op, everywhere=True):  # (LLVM in the compiled code would see the pattern XLA does not)
            return Scalar("select_kept")
    return Scalar("select")


def max_min_pattern(op) -> bool:
    """Whether the float select ``op`` is the max/min pattern as LLVM sees it with every constant of the program
    in view (:func:`_extremum_select` of one compiled function): what a select XLA stores in place in a while loop
    computes in its scalar code (``xla-in-place-selects``)."""
    return _extremum_select(op, everywhere=True)


def max_min_select(op) -> bool:
    """Whether XLA CPU computes the float select ``op`` with the max/min instruction, which flushes a denormal
    result under denormals-are-zero (:func:`select_flush`): the pattern of :func:`_extremum_select` as LLVM sees it
    in XLA's fused loop, not merged into an outer select, not a select of its own minimum, no negation or absolute
    value moved into its arms."""
    return (_extremum_select(op) and not _merged_into_outer_select(op) and not _select_of_its_minimum(op)
            and not _sign_op_moved_into_arms(op))


def _select_by_a_zeroed_constant(op) -> str | None:
    """The definition of the f32/f64 select ``op`` of one element (outside the loops XLA compiles whole) comparing
    its variable arm with a denormal splat constant, the other arm a constant reading as the same signed zero:
    XLA's scalar code holds the constant as that zero (LLVM folds it under denormals-are-zero), so the select is
    the one written with ``+-0.0`` -- a ``>``/``<`` one the max/min instruction (:func:`select_flush`), a
    ``>=``/``<=`` one with the constant in its true arm too, else a select whose constant arm is the zero
    (:func:`select_zeroed_false`). Measured (session 24, an Intel Xeon) on every direction, operand and arm order
    with +-1e-40, in jax's 32-bit mode (one constant) and its 64-bit mode (the arm an f64 ``1e-40`` converted,
    which XLA folds to 0): f32 ``where(x >= 1e-40, x, 1e-40)`` keeps a denormal ``x``, gives +0 for ``x = -1``.
    f64 of one element does not (its ``>=``/``<=`` ties as on arrays: :func:`made_strict`). None where this is
    not the case."""
    if _elements(op.results[0].type) != 1 or _small_call(op) or numpy_dtype(op.results[0].type) != np.float32:
        return None
    compare = op.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or _implicit_broadcast(compare):
        return None
    direction = compare.properties["comparison_direction"].data
    ctype = compare.properties.get("compare_type")
    if direction not in ("GT", "LT", "GE", "LE") or (ctype is not None and ctype.data != "FLOAT"):
        return None
    site = _placement(op)
    zeros = [_zero_of_denormal(splat_value(_folded(v, site))) for v in compare.operands]
    if (zeros[0] is None) == (zeros[1] is None):
        return None
    constant = 0 if zeros[0] is not None else 1
    cse = _cse(site)
    variable = cse.number(compare.operands[1 - constant])
    arms = op.operands[1:]
    is_variable = [cse.number(arm) == variable for arm in arms]
    reads_zero = [_reads_as(splat_value(_folded(arm, site)), zeros[constant]) for arm in arms]
    moved = _sign_op_moved_into_arms(op)  # (then a select of the zero, whatever the direction: measured)
    if is_variable == [True, False] and reads_zero[1]:
        return "select_flush" if direction in ("GT", "LT") and not moved else "select_zeroed_false"
    if is_variable == [False, True] and reads_zero[0]:
        return "select_zeroed_true" if moved else "select_flush"
    return None


def _zero_of_denormal(value) -> int | None:
    """The bits of the signed zero a nonzero denormal f32/f64/bf16 constant ``value`` reads as (None: not one).
    From the bits: float arithmetic on a denormal reads zero when this runs in the executor's flush mode (compiled
    loops are written at their first call; found by test_max_min_with_a_denormal_constant_as_xla)."""
    if value is None or value.dtype not in (np.float32, np.float64, ml_dtypes.bfloat16):
        return None
    bits = int(np.asarray(value).view(f"u{value.dtype.itemsize}"))
    sign = bits & (1 << (8 * value.dtype.itemsize - 1))
    mantissa = ml_dtypes.finfo(value.dtype).nmant
    return sign if (bits ^ sign) >> mantissa == 0 and bits != sign else None


def _reads_as(value, zero: int) -> bool:
    """Whether the float constant ``value`` is the signed zero of bits ``zero``, or a denormal of its sign."""
    if value is None or value.dtype not in (np.float32, np.float64):
        return False
    return int(np.asarray(value).view(f"u{value.dtype.itemsize}")) == zero or _zero_of_denormal(value) == zero


def bf16_select_flushes(op) -> bool:
    """Whether the bf16 select ``op`` is a max/min instruction in XLA's fused loop, flushing a denormal result:
    XLA computes bf16 in f32, where a bf16 denormal is an f32 denormal. Measured (session 22) on every operand and
    arm order: against a constant the f32 rule of :func:`_extremum_select` holds; of two variables, a select.
    Inside the while loops XLA compiles whole on hosts computing bf16 natively (:func:`native_bf16`), a select
    keeping the denormal (measured on an Intel Xeon with AMX, session 24: every ``>``/``<``/``>=``/``<=`` form
    against -1.0, 0.0, 2.5 and +-1e-40, a ``fori_loop`` of 3 trips on 18 elements)."""
    compare = op.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or not _extremum_select(op):
        return False
    if _small_call(op) and native_bf16():
        return False
    site = _placement(op)
    constants = [splat_value(_folded(v, site)) for v in compare.operands]
    tiny = ml_dtypes.finfo(ml_dtypes.bfloat16).tiny
    # (a denormal constant -- bf16(1e-40) --: not modelled, a select here; XLA flushes it in some forms only:
    # docs/operations.md)
    return (any(c is not None for c in constants)
            and not any(_nonzero_constant(c) and abs(float(c)) < tiny for c in constants)
            and not _merged_into_outer_select(op) and not _select_of_its_minimum(op))


def made_strict(op) -> bool:
    """Whether LLVM makes the compare of the max/min select ``op`` strict: ``>=``/``<=`` against a nonzero
    constant ``c``, where ``x == c`` makes the arms equal, so ``select(x >= c, A, B)`` is ``select(x > c, A, B)``
    and the instruction gives ``B`` where it reads the operands as equal -- a denormal ``c`` read as zero against
    a zero or another denormal ``x`` (:func:`select_flush_strict`). With jax's default 32-bit mode, where the
    constant is an f32 literal: ``where(x >= 1e-40, x, 1e-40)`` at ``x = -0`` is +0 in XLA on 2 elements or more,
    -0 on one (measured on an Intel Xeon, session 24; with ``jax_enable_x64`` jax writes another program, -0)."""
    compare = op.operands[0].owner
    if compare.properties["comparison_direction"].data not in ("GE", "LE"):
        return False
    if _elements(op.results[0].type) < 2 and not _small_call(op) and numpy_dtype(op.results[0].type) == np.float32:
        return False  # (f32, one element: scalar code, :func:`_select_by_a_zeroed_constant`; f64 ties so there too)
    site = _placement(op)
    return any(_nonzero_constant(splat_value(_folded(v, site))) for v in compare.operands)


def _nonzero_constant(value) -> bool:
    """Whether the float constant ``value`` (a NumPy scalar, or None for a variable) is not a zero, from its bits:
    a denormal constant is nonzero to LLVM, and float arithmetic here may run under denormals-are-zero (code is
    written at a call's first run, in the executor's flush mode)."""
    if value is None:
        return False
    bits = int(np.asarray(value).view(f"u{value.dtype.itemsize}"))
    return bits & ~(1 << (8 * value.dtype.itemsize - 1)) != 0


def _select_of_its_minimum(op) -> bool:
    """Whether ``op`` is ``select(x > m, m, x)`` with ``m = minimum(x, y)`` (either operand order) computed in the
    same fused loop: XLA keeps a denormal ``x`` there (no min instruction), measured f32 and f64 with ``y`` NaN and
    1.0 (long fuzz campaign seed 39: ``where(x1 > minimum(x1, x0), minimum(x1, x0), x1)``). Only that form: ``select(m
    < x, m, x)``, ``select(x < m, x, m)`` and the maximum's ``select(x < M, M, x)`` flush as a min/max instruction
    (measured; LLVM's folds of a compare with a minimum are not modelled beyond what was measured)."""
    compare = op.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or compare.properties["comparison_direction"].data != "GT":
        return False
    x, m = compare.operands
    minimum = m.owner
    site = _placement(op)
    return (isinstance(minimum, ew.MinOp) and _looked_through(m, site) and op.operands[1] is m and op.operands[2] is x
            and any(operand is x for operand in minimum.operands))


def _sign_op_moved_into_arms(op) -> bool:
    """Whether LLVM's instruction combiner moves the negation or absolute value that reads the max/min select ``op``
    into its arms inside XLA's fused loop -- ``-select(c, x, C)`` is ``select(c, -x, -C)``, ``|select(c, x, C)|`` is
    ``select(c, |x|, |C|)`` (the select used once there, through reshapes, one arm a constant) --, so no max/min
    instruction is left and a denormal ``x`` is kept. Measured against jax.jit (session 30, an AMD EPYC), f32 and
    f64 on 1, 21 and 121 elements, straight-line and in loops: ``-jnp.where(x > -1.0, x, -1.0)``, its min and ``>=``
    forms, ``jnp.abs`` of it, ``-jnp.abs`` of it, ``jnp.copysign`` of it (an abs read twice) and a reshaped negation
    keep a denormal ``x``; two variable arms (``-jnp.where(x > y, x, y)``) and a select also returned
    (``(-s, s)``) are max/min instructions, flushed; ``-(-s)`` is ``s`` (XLA's simplifier). Uses are counted as
    XLA's CSE leaves them (:func:`_only_user`). Not bf16: XLA negates the bf16 value its f32 max/min rounded, so
    a bf16 denormal is flushed there (measured, same forms)."""
    site = _placement(op)
    if all(splat_value(_folded(arm, site)) is None for arm in op.operands[1:]):
        return False
    cse = _cse(site)
    value = op.results[0]
    while True:
        user = _only_user(value, cse, site)
        if user is None or _placement(user) != site:
            return False
        if isinstance(user, ew.NegOp):
            twice = _only_user(user.results[0], cse, site)
            if not isinstance(twice, ew.NegOp):
                return True
            value = twice.results[0]  # (``-(-s)`` is ``s``: XLA's simplifier)
            continue
        if isinstance(user, ew.AbsOp):
            return True
        if not isinstance(user, ReshapeOp):
            return False
        value = user.results[0]


def _values_of_block(block, value) -> list:
    """The results of ``block``'s ops of ``value``'s op class with ``value``'s type (CSE candidates), ``value``
    first."""
    owner = value.owner
    found = [value]
    if block is None or not isinstance(owner, Operation):
        return found
    for op in block.ops:
        if type(op) is type(owner) and op is not owner and len(op.results) == 1 and op.results[0].type == value.type:
            found.append(op.results[0])
    return found


def _only_user(value, cse: CseNumbering, site):
    """The one op reading ``value`` as XLA sees it after its CSE, or None: the values of ``value``'s block that CSE
    makes one with it are one value (``(-jnp.where(c, x, -1.0), jnp.where(c, x, -1.0))`` writes the select twice),
    and so are its users (``jnp.copysign`` writes ``jnp.abs(x)`` twice)."""
    number = cse.number(value)
    users = [use.operation for other in _values_of_block(site[0], value) if cse.number(other) == number
             for use in other.uses]
    if not users or any(len(user.results) != 1 for user in users):
        return None
    if len({cse.number(user.results[0]) for user in users}) != 1:
        return None
    return users[0]


def _merged_into_outer_select(op) -> bool:
    """Whether LLVM's instruction combiner merges the select ``op`` into the one select that reads it, inside XLA's
    fused loop: ``select(c0, select(c1, a, b), b)`` is ``select(c0 & c1, a, b)`` and ``select(c0, a, select(c1, a,
    b))`` is ``select(c0 | c1, a, b)`` (the inner select used once, its other arm the outer's, as LLVM sees the
    values), so no max/min instruction is left and a denormal ``a`` or ``b`` is kept. Measured against jax.jit, f32
    and f64, straight-line and in a fori_loop, both forms, with max and min selects (long fuzz campaign seed 50:
    ``where(x1 > x0, where(x2 > x1, x1, x2), x2)`` of denormals): merged for scalars and for arrays of 2, 23 and
    3 x 20 elements; not for arrays of one element (``(1,)``, ``(1, 1)``: flushed). Where the inner select has
    other users XLA's fusions may each hold a copy of it (merged in one, a max/min in another): not reproduced."""
    uses = list(op.results[0].uses)
    if len(uses) != 1:
        return False
    shape = op.results[0].type.get_shape()
    if shape and int(np.prod(shape)) == 1:
        return False
    user, index = uses[0].operation, uses[0].index
    site = _placement(op)
    if not isinstance(user, ew.SelectOp) or _placement(user) != site or index not in (1, 2):
        return False
    shared = 3 - index  # (the outer select's other arm must be the inner select's arm on the same side)
    return _same_value(user.operands[shared], op.operands[shared], site, _small_call(op))


def _extremum_select(op, everywhere: bool = False) -> bool:
    """Whether the select ``op`` is one LLVM computes with the max/min instruction on float values, XLA's fused
    loops and the executor's compiled code alike, which reads denormal operands as zeros (:func:`select_flush`):
    ``select(a > b, a, b)`` or ``select(a < b, a, b)``, either arm order; with ``>=`` or ``<=``, only where the
    instruction's handling of signed zeros cannot differ from the select's -- one of ``a``, ``b`` a nonzero constant
    (``where(x >= -1.0, x, -1.0)``), or a zero constant with the arms in the other order
    (``where(x >= 0.0, 0.0, x)``; ``where(x >= 0.0, x, 0.0)`` and ``where(x >= y, x, y)`` stay selects). Measured
    against jax.jit on every arm order, operand order and direction, f32 and f64, with a variable, -1.0 and 0.0
    (LLVM's x86 select lowering: ``>=``/``<=`` become max/min only where a zero's sign cannot tell them apart). The
    arms are compared as LLVM sees them inside XLA's fused loop of ``op`` (:func:`_folded`); with ``everywhere``, as
    LLVM sees them in one compiled function holding every op of the program (the executor's compiled loops and
    segments)."""
    compare = op.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or _implicit_broadcast(compare):
        return False
    ctype = compare.properties.get("compare_type")
    direction = compare.properties["comparison_direction"].data
    if direction not in ("GT", "LT", "GE", "LE") or (ctype is not None and ctype.data != "FLOAT"):
        return False
    site = None if everywhere else _placement(op)
    cse = _cse(site, _small_call(op))
    arms = {cse.number(op.operands[1]), cse.number(op.operands[2])}
    if len(arms) != 2 or arms != {cse.number(compare.operands[0]), cse.number(compare.operands[1])}:
        return False
    if direction in ("GT", "LT"):
        return True
    constants = [splat_value(_folded(v, site)) for v in compare.operands]
    if any(_nonzero_constant(c) for c in constants):  # (a NaN constant: the compare is false and flushing leaves the NaN)
        return True
    swapped = cse.number(op.operands[1]) == cse.number(compare.operands[1])
    return swapped and any(c is not None for c in constants)


def _same_value(a, b, site, small: bool = False) -> bool:
    """Whether ``a`` and ``b`` are one value to LLVM inside XLA's fused loop at ``site``: each as LLVM's simplifier
    leaves it there (:func:`_folded`), with the values XLA's CSE makes one made one, wherever they are computed
    (:class:`xla_dialect.cse.CseNumbering`: jax writes ``jnp.abs(x)`` once per call, so ``where(x > jnp.abs(x),
    jnp.abs(x), x)`` is XLA's min -- long fuzz campaign, session 20: a denormal flushed --, and ``-1.0`` once per
    use, so ``where(x > -1.0, x, -1.0)`` is its max; a commutative op's operands in either order; conversions of
    one value to one type, as ``xla-float-rewrites`` may write a second ``convert`` where XLA's simplifier reuses
    the first). To :data:`_CSE_DEPTH` ops deep."""
    return _cse(site, small).same(a, b)


def _cse(site, small: bool = False) -> CseNumbering:
    """XLA's CSE seen from a fused loop at ``site`` (:func:`_same_value`). A value XLA computes outside that loop
    (an op it moves out of a while loop) reaches it loaded, one value per op; an f32/f64 constant is in every fusion
    reading it (:func:`_looked_through`), so ``fori_loop(0, 3, lambda i, v: jnp.where(v > -1.0, v, -1.0), x)`` is a
    max inside the loop as straight-line, except where XLA stores it in place: its vectorized elements masked
    stores, keeping a denormal (``xla-in-place-selects``, :data:`MASKED_STORE`; session 30 -- before, broadcast
    constants were taken as moved out of the loop, a select: denormals kept in scalar code and in selects XLA does
    not store in place, ``(where(a > -1, a, -1), -a)``). A scalar constant stays a constant, and in a loop XLA
    compiles whole (``small``: the select marked by ``xla-small-loops``) LLVM sees every value of the loop."""
    def opaque(value) -> bool:
        owner = value.owner
        return (site is not None and not small and not _looked_through(value, site)
                and not (isinstance(owner, ConstantOp) and not value.type.get_shape()))

    return CseNumbering(see_through=lambda value: _folded(value, site), per_computation=False, max_depth=_CSE_DEPTH,
                        opaque=opaque)


_CSE_DEPTH = 8


def _placement(op) -> tuple:
    """Where XLA computes ``op``: its block, and whether it is an op of a while body that XLA moves out of the loop
    (:func:`~xla_dialect.ops.control_flow.loop_invariant_ops`). Ops of one placement are one fused loop in XLA,
    where LLVM's simplifier sees them together."""
    block = op.parent_block()
    parent = block.parent_op() if block is not None else None
    hoisted = (isinstance(parent, WhileOp) and block is parent.body.block and moved_out_of_loop(op, parent)
               and static_trip_count(parent) != 1)  # (a loop run once XLA removes: its body is straight-line)
    return block, hoisted


def _looked_through(value, site) -> bool:
    """Whether LLVM sees the op computing ``value`` in the same fused loop as the select placed at ``site`` (with
    ``site`` None: whether ``value`` is computed by an op at all, as in one compiled function holding everything)."""
    owner = value.owner
    if not isinstance(owner, Operation):
        return False
    if site is None:
        return True
    if owner.parent_block() is not site[0]:
        return False
    if _placement(owner) == site:
        return True
    # (an f32/f64 constant -- a splat, a broadcast or conversion of one -- is in every fusion reading it: XLA's
    # WhileLoopInvariantCodeMotion does not move constants and broadcasts out of a loop on their own, and fusion
    # copies them into each consumer -- measured, session 30: a max/min select against one in a loop is a max/min
    # unless XLA stores it in place, ``xla-in-place-selects``)
    constant = splat_value(value)
    return constant is not None and constant.dtype in (np.float32, np.float64)


_ROUNDINGS = (ew.FloorOp, ew.CeilOp, ew.RoundOp, ew.RoundEvenOp)


def _integral(value) -> bool:
    """Whether LLVM knows every value of ``value`` is integral: a rounding op's result (``llvm.floor``, ``ceil``,
    ``round``, ``roundeven``) or a conversion from an integer or pred (``sitofp``/``uitofp``)."""
    owner = value.owner
    return isinstance(owner, _ROUNDINGS) or (
        isinstance(owner, cv.ConvertOp) and _kind(owner.operands[0]) in "iub")


_HOLDS = {"bfloat16": {"bfloat16", "float32", "float64"}, "float16": {"float16", "float32", "float64"},
          "float32": {"float32", "float64"}, "float64": {"float64"}}
"""Float type -> the float types that hold each of its values."""


def _exactly_converted(value, site):
    """The earliest value of ``value``'s chain of float conversions (looked through at ``site``) that LLVM sees as
    ``value`` itself: conversions that keep every value (``fpext``, and an ``fptrunc`` back to a type that holds
    what an earlier ``fpext`` widened) fold to one conversion of the value they started from, so
    ``f64(f32(f64(x: bf16)))`` is ``f64(x)`` (measured: ``where(y > v, f64(f32(v)), y)`` with ``v`` converted
    from bf16 is XLA's min; long fuzz campaign seed 30). ``value`` when no earlier value is the same."""
    chain = [value]
    while True:
        owner = chain[-1].owner
        if not (_looked_through(chain[-1], site) and isinstance(owner, cv.ConvertOp)
                and _float_name(owner.operands[0])):
            break
        chain.append(owner.operands[0])
    chain.reverse()  # (from the first value to ``value``)
    names = [_float_name(v) for v in chain]
    start, content = 0, names[0]
    for i, name in enumerate(names[1:], 1):
        if name not in _HOLDS.get(content, ()):  # (a rounding conversion: a new value starts here)
            start, content = i, name
    return next(v for v, name in zip(chain[start:], names[start:]) if name == names[-1])


def _float_name(value) -> str | None:
    """The name of ``value``'s element type when it is one of the floats of :data:`_HOLDS`, else None."""
    name = numpy_dtype(value.type.get_element_type()).name
    return name if name in _HOLDS else None


def _kind(value) -> str:
    """The NumPy kind of ``value``'s element type (``"f"``, ``"c"``, ``"i"``, ``"u"``, ``"b"``)."""
    return numpy_dtype(value.type.get_element_type()).kind


def _folded(value, site):
    """``value`` as LLVM's instruction simplifier leaves it inside one of XLA's fused loops (measured against
    jax.jit, f32 and f64, through the max/min pattern each fold exposes): ``select(x > x, t, f)`` (or ``<``) is
    ``f``; ``select(p, a, a)`` is ``a``; a rounding of an integral value (``floor(floor(x))``, ``ceil(round(x))``,
    ``floor(convert(i))``: long fuzz campaign seed 29) is that value (``abs`` of a rounding and a rounding of
    ``abs`` are not folded: measured; ``abs(abs(x))`` is XLA's own fold, in ``xla-float-rewrites``); a chain of
    float conversions that keep every value is one conversion (:func:`_exactly_converted`). Only ops XLA
    computes in the select's own fused loop are looked through (``site``: :func:`_placement`): an op XLA moves out
    of a while loop reaches the loop's fusion as a value, whatever computed it."""
    while True:
        if not _looked_through(value, site):
            return value
        owner = value.owner
        if isinstance(owner, ew.SelectOp):
            compare = owner.operands[0].owner
            if (isinstance(compare, ew.CompareOp) and compare.operands[0] is compare.operands[1]
                    and compare.properties["comparison_direction"].data in ("GT", "LT")):
                value = owner.operands[2]
                continue
            arm = _folded(owner.operands[1], site)
            if arm is _folded(owner.operands[2], site):
                value = arm
                continue
        elif isinstance(owner, cv.ConvertOp) and _float_name(owner.operands[0]) and _float_name(value):
            same = _exactly_converted(value, site)
            if same is not value:
                value = same
                continue
        elif isinstance(owner, _ROUNDINGS):
            operand = _folded(owner.operands[0], site)
            if _looked_through(operand, site) and _integral(operand):
                value = operand
                continue
        return value


@scalar_definition(cv.ConvertOp)
def _convert(op, dtypes, result, flush):
    return conversion(dtypes[0], result, flush)


def conversion(source: np.dtype, result: np.dtype, flush: bool) -> Scalar:
    """The definition converting ``source`` elements to ``result`` elements (both numba types; ``flush``: the
    executor's denormal mode is XLA's, so a denormal float reads as zero -- the hardware's conversions
    between f32 and f64 flush by themselves in that mode)."""
    target = result.type
    if result == PRED:
        if source in FLOATS and flush:
            return Scalar("float_to_pred", (source.type(np.finfo(source).tiny),))
        return Scalar("number_to_pred")
    if source == PRED:
        return Scalar("pred_to_number", (target,))
    if source in FLOATS and result in INTEGERS:
        bits = 8 * result.itemsize
        signed = result.kind == "i"
        upper = source.type(2.0 ** (bits - 1 if signed else bits))
        info = np.iinfo(result)
        return Scalar("float_to_int", (upper, -upper if signed else source.type(0), target(info.max),
                                       target(info.min), target))
    return Scalar("convert_number", (target,))


def _shift(kind: str):
    def select_shift(op, dtypes, result, flush):
        if result not in INTEGERS:
            return None
        width = result.itemsize
        helper = np.dtype(f"i{width}").type if kind == "shift_right_arithmetic" else np.dtype(f"u{width}").type
        return Scalar(kind, (8 * width, helper, result.type))

    return select_shift


scalar_definition(ew.ShiftLeftOp)(_shift("shift_left"))
scalar_definition(ew.ShiftRightLogicalOp)(_shift("shift_right_logical"))
scalar_definition(ew.ShiftRightArithmeticOp)(_shift("shift_right_arithmetic"))


@scalar_definition(ew.SineOp, ew.CosineOp, ew.TanOp)
def _trigonometric(op, dtypes, result, flush):
    """The C library's ``sinf``/``sin``... that XLA CPU calls."""
    if result not in FLOATS:
        return None
    name = {ew.SineOp: "sine", ew.CosineOp: "cosine", ew.TanOp: "tan"}[type(op)]
    return Scalar(f"{name}_{'f32' if result == F32 else 'f64'}")


_YNNPACK_DEFINED = frozenset({ew.ExpOp, ew.LogOp, ew.TanhOp, ew.LogisticOp})
"""Ops with a YNNPACK definition (:mod:`lowering.kernels.ynnpack_math`), used where ``xla-ynnpack-fusion`` marked
them."""

GLIBC_EXP_TAIL = "xla_cpu_glibc_exp_tail"
"""The attribute (an integer ``i``) ``xla-float-rewrites`` puts on an f32 ``exp`` whose elements from ``i`` on
(row-major) XLA CPU computes with the C library's ``expf`` (:class:`passes.xla_numerics.ExpInALoopOfItsOwn`):

* an exp in a loop fusion of its own over a 1-d array of ``n < 16`` elements, ``n % 8`` in 3, 5, 6, 7: LLVM
  vectorizes the first ``i = 8 * (n // 8)`` elements (XLA's polynomial) and calls ``expf`` for the others
  (measured: ``jnp.exp`` of f32[3], [5], [6], [7] is glibc's ``expf`` on every element of 300 draws each,
  f32[11], [13], [14], [15] on the last 3-7; [9], [10], [12] and from 16 elements on, XLA's polynomial everywhere);
* the exp of a ``(2, k)`` argument, ``k`` in 3, 5, 6, 7, fused into its full sum (``jnp.sum(jnp.exp(a))``): LLVM
  sums the rows in 2 lanes (:func:`lowering.kernels.tree_sum.exp_sum_lanes`) and its odd-width vector exp becomes
  ``expf`` calls, ``i = 0`` (the sums of 200 draws each all equal to 2 lanes of ``expf`` values; 7-16 differed).

The kernel of a marked op does the same (:mod:`lowering.kernels.elementwise`); it has no scalar definition
(:func:`_xla_approximations`), so the compiled paths leave it to the kernel."""


_APPROXIMATIONS = {ew.ExpOp: "exp", ew.LogOp: "log", ew.TanhOp: "tanh", ew.LogisticOp: "logistic",
                   ew.Expm1Op: "expm1", ew.Log1pOp: "log1p", ew.ErfOp: "erf"}


@scalar_definition(*_APPROXIMATIONS)
def _xla_approximations(op, dtypes, result, flush):
    """XLA's own approximations (:mod:`lowering.kernels.xla_scalar`: Eigen's exp, log and tanh, XLA's expm1, log1p
    and logistic formulas over them, its f32 erf) and the C library's f64 log and erf, which it calls."""
    if result not in FLOATS or GLIBC_EXP_TAIL in op.attributes:
        return None  # (an exp with glibc's expf on some elements: its kernel, lowering.kernels.elementwise)
    width = 'f32' if result == F32 else 'f64'
    if ynnpack_math.YNNPACK in op.attributes and type(op) in _YNNPACK_DEFINED:
        return Scalar(f"ynnpack_{_APPROXIMATIONS[type(op)]}_{width}")  # (inside XLA's YNNPACK fusions)
    return Scalar(f"{_APPROXIMATIONS[type(op)]}_{width}")


@scalar_definition(ew.ClampOp)
def _clamp(op, dtypes, result, flush):
    """``min(max(x, lo), hi)`` (operands ``lo, x, hi``; a scalar bound is an implicit broadcast the compiled
    paths do not write)."""
    if result in FLOATS:
        return Scalar("clamp_float_flush" if flush else "clamp_float")
    return Scalar("clamp_int")


@scalar_definition(ew.RemOp)
def _remainder(op, dtypes, result, flush):
    if _implicit_broadcast(op) or result == PRED:
        return None
    return Scalar("remainder_float" if result in FLOATS else "remainder_int")


@scalar_definition(ew.PopcntOp, ew.ClzOp)
def _bit_counts(op, dtypes, result, flush):
    if result not in INTEGERS:
        return None
    return Scalar("popcnt" if isinstance(op, ew.PopcntOp) else "count_leading_zeros")


_ROUNDING = {ew.SqrtOp: "sqrt", ew.FloorOp: "floor", ew.CeilOp: "ceil", ew.RoundEvenOp: "round_nearest_even"}


@scalar_definition(*_ROUNDING)
def _one_instruction(op, dtypes, result, flush):
    """Float ops that are one IEEE instruction (NumPy's ufunc is the same instruction)."""
    return Scalar(_ROUNDING[type(op)]) if result in FLOATS else None


@scalar_definition(ew.RoundOp)
def _round_afz(op, dtypes, result, flush):
    return Scalar("round_nearest_afz", (result.type,)) if result in FLOATS else None


@scalar_definition(ew.SignOp)
def _sign(op, dtypes, result, flush):
    if result in FLOATS:
        return Scalar("sign_float", (result.type,))
    return Scalar("sign_int") if result in INTEGERS and result.kind == "i" else None


@scalar_definition(ew.IsFiniteOp)
def _is_finite(op, dtypes, result, flush):
    return Scalar("is_finite") if dtypes[0] in FLOATS else None


@scalar_definition(ew.PowOp)
def _power(op, dtypes, result, flush):
    """Floats: the C library's ``powf``/``pow``, which XLA CPU calls; integers: :func:`power_int`."""
    if _implicit_broadcast(op) or result == PRED:
        return None
    if result in FLOATS:
        return Scalar(f"power_{'f32' if result == F32 else 'f64'}")
    return integer_power(result)


def integer_power(dtype: np.dtype) -> Scalar:
    """:func:`power_int` for ``dtype`` integers (the interpreter's kernel too)."""
    width = dtype.itemsize
    return Scalar("power_int", (np.dtype(f"i{width}").type, np.dtype(f"u{width}").type, dtype.type))


@scalar_definition(ew.Atan2Op)
def _atan2(op, dtypes, result, flush):
    """The C library's ``atan2f``/``atan2``, which XLA CPU calls."""
    if _implicit_broadcast(op) or result not in FLOATS:
        return None
    return Scalar(f"atan2_{'f32' if result == F32 else 'f64'}")


@scalar_definition(ew.CbrtOp)
def _cbrt(op, dtypes, result, flush):
    """The C library's ``cbrtf``/``cbrt``, which XLA CPU calls."""
    return Scalar(f"cbrt_{'f32' if result == F32 else 'f64'}") if result in FLOATS else None


@scalar_definition(ew.RsqrtOp)
def _rsqrt(op, dtypes, result, flush):
    """XLA CPU's rsqrt on this host, as :mod:`lowering.kernels.cpu_rsqrt` decides: the estimate instruction
    and Newton steps (f32 with AVX: one step on AMD CPUs, two elsewhere; f64 with AVX-512F: two), else
    ``1 / sqrt``."""
    return rsqrt_definition(result, host_properties()) if result in FLOATS else None


def rsqrt_definition(dtype: np.dtype, host: dict) -> Scalar:
    """XLA CPU's f32 or f64 (``dtype``) rsqrt on a host with these :func:`host_properties` (see
    :func:`_rsqrt`; the interpreter's kernel, :func:`lowering.kernels.cpu_rsqrt.rsqrt`, too)."""
    result = np.dtype(dtype)
    t = result.type
    tiny = t(np.finfo(result).tiny)
    if not (host["avx"] if result == F32 else host["avx512f"]):
        return Scalar("rsqrt_exact", (tiny, t(1)))
    steps = 1 if result == F32 and host["vendor"] == "AuthenticAMD" else 2
    return Scalar("rsqrt_refined", (tiny, steps, t(-0.5), t(-1), t(np.inf)))


def exp_add_definition(op, dtypes, result, flush):
    """The selector of :class:`~xla_dialect.internal.ExpAddOp` (``hlo_internal.exp_add``; registered with that
    class in :mod:`lowering.kernels.elementwise`, beside its kernel): f32 only."""
    if result != F32:
        return None
    if "subtract" in op.properties:
        return Scalar("exp_subtract_f32")
    return Scalar("subtract_exp_f32" if "exp_subtracted" in op.properties else "exp_add_f32")


def fused_multiply_add_definition(op, dtypes, result, flush):
    """The selector of :class:`~xla_dialect.internal.FusedMultiplyAddOp` (``hlo_internal.fma``, defined in the IR
    package; registered with that class in :mod:`lowering.kernels.elementwise`, beside its kernel)."""
    return Scalar("multiply_add") if result in FLOATS else None


EXPORTS = tuple(name for name, value in list(globals().items())
                if not name.startswith("_") and (isinstance(value, numba.core.dispatcher.Dispatcher)
                                                 or isinstance(value, numba.types.ExternalFunction)))
"""The functions generated code imports from this module."""


# ----------------------------------------------------------------------------
# Definitions as NumPy ufuncs (the interpreter's kernels)
# ----------------------------------------------------------------------------

_UFUNCS: dict[tuple, "LazyUfunc"] = {}
_LOCK = threading.Lock()
_BUILD_LOCK = threading.RLock()  # (apart from _LOCK: a build waits for numba on another thread)


class LazyUfunc:
    """A scalar definition as a NumPy ufunc, built by numba on its first call (:func:`_vectorize`: about 0.1 s
    each even when numba's cache has its machine code). Kernels are made for every op a program holds, also
    for ops that only ever run inside compiled loops and segments (their interpreted form is the fallback until
    the machine code is ready, and the reference path); building their ufuncs when the kernel is made cost a
    new process 0.4 s of ``lowering.compile`` for an ODE solve whose calls never use them."""

    __slots__ = ("_key", "_ufunc", "__name__")

    def __init__(self, key: tuple):
        self._key = key
        self._ufunc = None
        self.__name__ = key[0].name

    def built(self) -> np.ufunc:
        """The ufunc (built now if this is the first use)."""
        fn = self._ufunc
        if fn is None:
            with _BUILD_LOCK:
                fn = self._ufunc
                if fn is None:
                    fn = _vectorize(*self._key)
                    _BUILT_KEYS[fn] = self._key
                    self._ufunc = fn
        return fn

    def __call__(self, *args, **kwargs):
        return self.built()(*args, **kwargs)

    def __getattr__(self, name: str):  # (ufunc attributes: reduce, types, ...; never the wrapper's dunders)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.built(), name)

    def __repr__(self) -> str:
        return f"LazyUfunc({self._key[0].name!r}, {[d.name for d in self._key[1]]} -> {self._key[2].name})"


_BUILT_KEYS: dict[np.ufunc, tuple] = {}
"""Each built ufunc -> the key it was built for (the executable cache stores a ufunc as its key)."""


def built_ufunc_key(fn: np.ufunc) -> tuple | None:
    """The ``(scalar, operand_dtypes, result_dtype)`` a ufunc of :func:`ufunc` was built for, or None when ``fn``
    is not one (:mod:`lowering.executor.executable_cache` stores the key, not the ufunc)."""
    return _BUILT_KEYS.get(fn)


def ufunc(scalar: Scalar, operand_dtypes, result_dtype) -> LazyUfunc:
    """``scalar`` as a NumPy ufunc over arrays of ``operand_dtypes`` giving ``result_dtype`` (compiled on
    first call, cached on disk by numba): the interpreter computes with the definition the compiled paths
    call. The constant arguments are bound."""
    key = (scalar, tuple(np.dtype(d) for d in operand_dtypes), np.dtype(result_dtype))
    fn = _UFUNCS.get(key)
    if fn is None:
        with _LOCK:
            fn = _UFUNCS.get(key)
            if fn is None:
                fn = _UFUNCS[key] = LazyUfunc(key)
    return fn


def _vectorize(scalar: Scalar, operand_dtypes, result_dtype) -> np.ufunc:
    """``scalar`` as a NumPy ufunc whose inner loop is a numba cfunc of a generated module (:mod:`.ufunc_loops`:
    cached on disk whole, loop included -- a later process loads it in 3-7 ms, where ``numba.vectorize``
    generated its loop again in every process, 35-150 ms each). The module is kept with the library's machine code
    (:func:`~lowering.runtime.generated_modules.library_module_directory`): compiled once per installation, not
    once per generated-code cache. The constant arguments are bound as globals of that module, written by their
    bytes; where one cannot be written in its text, or no directory is writable, the same loop is compiled in
    memory."""
    from . import ufunc_loops

    operand_dtypes = [np.dtype(d) for d in operand_dtypes]
    result_dtype = np.dtype(result_dtype)
    constants = {f"k{k}": value for k, value in enumerate(scalar.arguments)}
    call = f"{scalar.name}({', '.join([*(f'x{k}' for k in range(len(operand_dtypes))), *constants])})"
    assignments = _constant_assignments({**constants, "target": result_dtype.type})
    module = None
    if assignments is not None:
        from ..runtime.generated_modules import import_generated, library_module_directory, runtime_digest

        text = "\n".join([f"# runtime {runtime_digest()}", *ufunc_loops.LOOP_IMPORTS,
                          f"from lowering.kernels.scalar import {scalar.name}", *assignments, "", "",
                          ufunc_loops.loop_text(call, operand_dtypes, result_dtype, cached=True)])
        # (imported, and so compiled or loaded, off the main thread: Ctrl-C meanwhile is a KeyboardInterrupt here,
        # not inside numba)
        directory = library_module_directory("ufuncs")  # (with the library's machine code: once per installation)
        module = compile_off_main_thread(import_generated, text, "ufunc", directory) if directory else None
    if module is not None:
        loop = module.loop
    else:
        namespace = {scalar.name: scalar.function, "target": result_dtype.type, **constants}
        text = "\n".join([*ufunc_loops.LOOP_IMPORTS, ufunc_loops.loop_text(call, operand_dtypes, result_dtype,
                                                                          cached=False)])
        compile_off_main_thread(exec, text, namespace)  # (the decorator compiles; off the main thread as above)
        loop = namespace["loop"]
    return ufunc_loops.ufunc_of_loop(scalar.name, loop, operand_dtypes, result_dtype)


def _constant_assignments(constants: dict) -> list[str] | None:
    """Lines of module text binding ``constants`` (numbers written by their bytes; NumPy scalar types by name), or
    None when one cannot be written exactly in text."""
    lines = []
    for name, value in constants.items():
        if isinstance(value, type) and issubclass(value, np.generic) and getattr(np, value.__name__, None) is value:
            lines.append(f"{name} = np.{value.__name__}")
        elif isinstance(value, (bool, int)) and not isinstance(value, np.generic):
            lines.append(f"{name} = {int(value)!r}" if not isinstance(value, bool) else f"{name} = {value!r}")
        elif isinstance(value, np.generic) and getattr(np, type(value).__name__, None) is type(value):
            dtype = np.dtype(type(value))
            lines.append(f"{name} = np.frombuffer(bytes.fromhex({value.tobytes().hex()!r}), np.{dtype.type.__name__})[0]")
        else:
            return None
    return lines
