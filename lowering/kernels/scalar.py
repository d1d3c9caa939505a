"""One definition per element-wise op: numba scalar functions, registered by op class.

An element-wise op's numerics -- which NaN a float add returns, how a float maximum orders ``-0`` and
``+0`` and which sign a NaN gets, how a float converts to an integer (XLA's saturation), what a shift by
more than the width gives, XLA's own f32 ``exp`` -- are written here once, as a numba-compilable function
of scalars. Every compiled path calls these functions: the fused element loops of :mod:`lowering.fusion`
and the compiled while loops of :mod:`lowering.compiled_loops` generate only the glue (loops over the
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

import numba
import numpy as np

from xla_dialect.ops import conversion as cv
from xla_dialect.ops import elementwise as ew

from .. import loop_runtime as rt
from .. import xla_scalar

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
def add(a, b):
    """``a + b``; of two float NaNs, ``a``'s (the add instruction's first operand, quieted)."""
    r = a + b
    return a + a if (r != r) & (a != a) else r  # (no branch: the loop calling it stays vectorized)


@_njit
def subtract(a, b):
    """``a - b`` (the instruction's NaN rule, first operand first, holds: LLVM does not swap a subtraction)."""
    return a - b


@_njit
def multiply(a, b):
    """``a * b``; of two float NaNs, ``a``'s (see :func:`add`)."""
    r = a * b
    return a + a if (r != r) & (a != a) else r


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
    r = maximum_float(a, b)
    if abs(r) < np.finfo(r).tiny:  # (a denormal compares as 0 under DAZ; NaN is not below)
        return np.copysign(r - r, r)
    return r


@_njit
def minimum_float_flush(a, b):
    """:func:`minimum_float` with a denormal result read as a zero of its sign."""
    r = minimum_float(a, b)
    if abs(r) < np.finfo(r).tiny:
        return np.copysign(r - r, r)
    return r


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
    r = rt.fused_multiply_add(a, b, c)
    # (Selects, no branches: the loop calling it stays vectorized.)
    first = raw_a if raw_a != raw_a else (raw_b if raw_b != raw_b else raw_c)
    return first + first if (r != r) & (first != first) else r


# The C library's trigonometric functions, which XLA CPU calls.
sine_f32 = numba.types.ExternalFunction("sinf", numba.types.float32(numba.types.float32))
cosine_f32 = numba.types.ExternalFunction("cosf", numba.types.float32(numba.types.float32))
tan_f32 = numba.types.ExternalFunction("tanf", numba.types.float32(numba.types.float32))
sine_f64 = numba.types.ExternalFunction("sin", numba.types.float64(numba.types.float64))
cosine_f64 = numba.types.ExternalFunction("cos", numba.types.float64(numba.types.float64))
tan_f64 = numba.types.ExternalFunction("tan", numba.types.float64(numba.types.float64))
exp_f32, log_f32, tanh_f32, logistic_f32 = (xla_scalar.exp_f32, xla_scalar.log_f32, xla_scalar.tanh_f32,
                                            xla_scalar.logistic_f32)


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
    return Scalar("divide") if result in FLOATS and not _implicit_broadcast(op) else None


def float_extremum(which: str, flush: bool) -> Scalar:
    """XLA's float ``"maximum"`` or ``"minimum"`` (``flush``: as the instruction computes it under DAZ)."""
    return Scalar(f"{which}_float_flush" if flush else f"{which}_float")


@scalar_definition(ew.MaxOp, ew.MinOp)
def _maximum_minimum(op, dtypes, result, flush):
    if _implicit_broadcast(op):
        return None
    which = "maximum" if isinstance(op, ew.MaxOp) else "minimum"
    return float_extremum(which, flush) if result in FLOATS else Scalar(f"{which}_int")


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
    if (ctype is not None and ctype.data == "TOTALORDER") or _implicit_broadcast(op):
        return None
    return Scalar(_COMPARISONS[op.properties["comparison_direction"].data])


@scalar_definition(ew.SelectOp)
def _select(op, dtypes, result, flush):
    return Scalar("select")


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


@scalar_definition(ew.ExpOp, ew.LogOp, ew.TanhOp, ew.LogisticOp)
def _xla_f32_approximations(op, dtypes, result, flush):
    """XLA's own f32 approximations (:mod:`lowering.xla_scalar`); f64 ones have no scalar definition yet."""
    if result != F32:
        return None
    name = {ew.ExpOp: "exp", ew.LogOp: "log", ew.TanhOp: "tanh", ew.LogisticOp: "logistic"}[type(op)]
    return Scalar(f"{name}_f32")


def fused_multiply_add_definition(op, dtypes, result, flush):
    """The selector of ``hlo_internal.fma`` (registered with its op class, in the passes layer)."""
    return Scalar("multiply_add") if result in FLOATS else None


EXPORTS = tuple(name for name, value in list(globals().items())
                if not name.startswith("_") and (isinstance(value, numba.core.dispatcher.Dispatcher)
                                                 or isinstance(value, numba.types.ExternalFunction)))
"""The functions generated code imports from this module."""


# ----------------------------------------------------------------------------
# Definitions as NumPy ufuncs (the interpreter's kernels)
# ----------------------------------------------------------------------------

_UFUNCS: dict[tuple, np.ufunc] = {}
_LOCK = threading.Lock()


def ufunc(scalar: Scalar, operand_dtypes, result_dtype) -> Callable:
    """``scalar`` as a NumPy ufunc over arrays of ``operand_dtypes`` giving ``result_dtype`` (compiled on
    first use, cached on disk by numba): the interpreter computes with the definition the compiled paths
    call. The constant arguments are bound."""
    key = (scalar, tuple(np.dtype(d) for d in operand_dtypes), np.dtype(result_dtype))
    fn = _UFUNCS.get(key)
    if fn is None:
        with _LOCK:
            fn = _UFUNCS.get(key)
            if fn is None:
                fn = _UFUNCS[key] = _vectorize(scalar, *key[1:])
    return fn


def _vectorize(scalar: Scalar, operand_dtypes, result_dtype) -> Callable:
    from numba import from_dtype

    signature = from_dtype(np.dtype(result_dtype))(*(from_dtype(np.dtype(d)) for d in operand_dtypes))
    if not scalar.arguments and isinstance(scalar.function, numba.core.dispatcher.Dispatcher):
        # Defined in this file: numba caches the ufunc's machine code on disk.
        return numba.vectorize([signature], nopython=True, cache=True)(scalar.function.py_func)
    names = [f"x{k}" for k in range(len(operand_dtypes))]
    constants = {f"k{k}": value for k, value in enumerate(scalar.arguments)}
    call = f"target({scalar.name}({', '.join([*names, *constants])}))"
    source = f"def element({', '.join(names)}):\n    return {call}\n"
    namespace = {scalar.name: scalar.function, "target": np.dtype(result_dtype).type, **constants}
    exec(source, namespace)  # noqa: S102 - a two-line wrapper binding the constants
    return numba.vectorize([signature], nopython=True)(namespace["element"])
