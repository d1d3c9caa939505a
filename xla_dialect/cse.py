"""Values XLA makes one: its common-subexpression elimination on HLO, and LLVM's uniqued constants.

jax writes a value once per use: ``jnp.abs(x)`` twice in ``where(x > abs(x), abs(x), x)``, the constant ``-1.0``
twice (each with its own broadcast) in ``where(x > -1.0, x, -1.0)``, ``a * b`` twice in ``(a*b + c) * (a*b - d)``.
XLA's CSE merges such duplicates before it fuses, and inside a fused loop LLVM sees one constant wherever a
constant of that value appears -- so a multiply merged with its duplicate has two uses (not contracted), and a
select of the merged values is LLVM's max/min. The executor's analyses that need XLA's view of a value ask
:class:`CseNumbering` for a number: equal numbers for values XLA merges. One model, used by the FMA contraction
pass (``passes/fma_contraction.py``: uses of a multiply) and the scalar kernels (``lowering/kernels/scalar.py``:
selects that are max/min).

What is merged: element-wise ops, compares and selects of one class, properties and result type on merged
operands (a commutative op's operands in either order: ``x * y`` and ``y * x``); conversions of a merged value to
one type (a conversion to its own type is the value: XLA's simplifier drops it); broadcasts and element moves
(reshape, transpose, slice, reverse, copy, bitcast) with one properties; constants of one value -- a splat
constant and a broadcast of a scalar constant of that value to the same type are one value (the executor's
constant folding turns some broadcasts of constants into literals, XLA keeps them as broadcasts).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import numpy as np
from xdsl.ir import Operation, SSAValue

from .ops import conversion as cv
from .ops import elementwise as ew
from .ops.constants import ConstantOp
from .ops.data_movement import BitcastOp, BroadcastInDimOp, CopyOp, ReshapeOp, ReverseOp, SliceOp, TransposeOp
from .types import numpy_dtype

ELEMENT_WISE = (*ew.UNARY_OP_CLASSES.values(), *ew.BINARY_OP_CLASSES.values(), ew.CompareOp, ew.SelectOp)
"""Element-wise ops XLA's CSE merges when their operands are merged."""

COMMUTATIVE = (ew.AddOp, ew.MulOp, ew.MaxOp, ew.MinOp, ew.AndOp, ew.OrOp, ew.XorOp)
"""Ops merged with their operands in either order: ``x * y - y * x`` is one multiply read twice (0 in jax.jit; an
FMA's rounding error before: long fuzz campaign, session 19)."""

MOVES = (TransposeOp, ReshapeOp, ReverseOp, SliceOp, CopyOp, BitcastOp)
"""Ops that only move elements, merged like element-wise ops (jax writes ``a[:n] * b[:n]`` twice with its
slices)."""

_KEYED = (*ELEMENT_WISE, *MOVES, BroadcastInDimOp)


@functools.cache
def _kind(cls: type) -> str:
    """How :class:`CseNumbering` keys an op of class ``cls``: "constant", "broadcast", "convert" (constants,
    broadcasts and conversions, which may hold one value), "commutative", "keyed", or "" (only itself). Per class,
    once: ``isinstance`` against the op classes (xDSL's are abstract-base classes) was most of the time of a key."""
    if issubclass(cls, ConstantOp):
        return "constant"
    if issubclass(cls, BroadcastInDimOp):
        return "broadcast"
    if issubclass(cls, cv.ConvertOp):
        return "convert"
    if issubclass(cls, COMMUTATIVE):
        return "commutative"
    return "keyed" if issubclass(cls, _KEYED) else ""


_constant_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Constant op -> its key (reading a large constant's bytes once)."""


def _constant_key(op: ConstantOp):
    """``("splat", dtype, bytes of the element)`` for a constant of one value (any shape: the result type is
    added by the caller), ``("constant", dtype, shape, bytes)`` for others, None for one that does not read as an
    array."""
    key = _constant_keys.get(op, False)
    if key is False:
        try:
            splat = op.splat_value()
            if splat is not None:
                key = ("splat", splat.dtype, splat.tobytes())
            else:
                array = np.ascontiguousarray(op.value.array)
                key = ("constant", array.dtype, array.shape, array.tobytes())
        except Exception:  # noqa: BLE001 - (a constant that does not read as an array: its own value)
            key = None
        _constant_keys[op] = key
    return key


def _splat(value: SSAValue):
    """``(dtype, bytes of the element)`` when ``value`` holds one value: a splat constant, a broadcast of one, or a
    conversion of one (XLA folds a conversion of a constant into a constant: jax writes ``where(x > -1.0, x,
    -1.0)``'s bf16 arm as a broadcast of the f32 constant converted), else None."""
    op = value.owner
    if isinstance(op, BroadcastInDimOp):
        return _splat(op.operands[0])
    if isinstance(op, ConstantOp):
        key = _constant_key(op)
        return key[1:] if key is not None and key[0] == "splat" else None
    if isinstance(op, cv.ConvertOp):
        source = _splat(op.operands[0])
        if source is None:
            return None
        try:
            target = numpy_dtype(value.type)
        except Exception:  # noqa: BLE001 - (an element type without a NumPy form: not folded here)
            return None
        element = np.frombuffer(source[1], dtype=source[0])
        if target.kind in "iub" and element.dtype.kind == "f" and not np.isfinite(element).all():
            return None  # (XLA's conversion of a non-finite float to an integer: not modelled here)
        with np.errstate(all="ignore"):
            converted = element.astype(target)
        return converted.dtype, converted.tobytes()
    return None


class CseNumbering:
    """Numbers values so that the values XLA makes one (module doc) have one number.

    ``see_through``: the value a value stands for before it is keyed (the scalar kernels pass what LLVM's
    simplifier leaves of it inside one fused loop; the identity by default). ``per_computation``: merge only ops of
    one block, as XLA's CSE runs per computation (the FMA pass counts a multiply's uses in its computation); without
    it, ops merge wherever they are (a select's arms as LLVM sees them). ``max_depth``: look at most that many ops
    up an operand chain, a value further up being only itself (numbers are then kept per value and depth: a key
    depends on the depth it was reached at), for callers that ask about a few values of a large program.
    ``opaque``: values that are only themselves (the scalar kernels pass the values XLA computes outside the
    select's fused loop -- ops moved out of a while loop --, which reach it loaded, one per op, unmerged)."""

    def __init__(self, see_through: Callable[[SSAValue], SSAValue] | None = None, per_computation: bool = True,
                 max_depth: int | None = None, opaque: Callable[[SSAValue], bool] | None = None):
        self._see_through = see_through
        self._opaque = opaque
        self._per_computation = per_computation
        self._max_depth = max_depth
        self._numbers: dict = {}  # value (with max_depth: value and depth) -> its number
        self._seen_as: dict[SSAValue, SSAValue] = {}  # value -> see_through(value)
        self._keys: dict[tuple, int] = {}  # flat keys (operand numbers, not operand keys) hash fast

    def number(self, value: SSAValue) -> int:
        """``value``'s number: equal for values XLA makes one."""
        return self._number(value, 0)

    def same(self, a: SSAValue, b: SSAValue) -> bool:
        """Whether XLA makes ``a`` and ``b`` one value."""
        return self.number(a) == self.number(b)

    def _seen(self, value: SSAValue) -> SSAValue:
        if self._see_through is None:
            return value
        seen = self._seen_as.get(value)
        if seen is None:
            seen = self._seen_as[value] = self._see_through(value)
        return seen

    def _number(self, value: SSAValue, depth: int) -> int:
        value = self._seen(value)
        # (with a depth limit, a value's key depends on the depth it is reached at: numbers are kept per depth --
        # an operand cone is a graph, whose values are reached along many paths: without this, each path was
        # keyed again, up to 2**depth times)
        memo_key = value if self._max_depth is None else (value, depth)
        n = self._numbers.get(memo_key)
        if n is not None:
            return n
        key = self._key(value, depth)
        n = self._numbers[memo_key] = self._keys.setdefault(key, len(self._keys))
        return n

    def _key(self, value: SSAValue, depth: int) -> tuple:
        op = value.owner
        if not isinstance(op, Operation) or (self._max_depth is not None and depth >= self._max_depth) or (
                self._opaque is not None and self._opaque(value)):
            return ("value", value)
        where = id(op.parent) if self._per_computation else None
        kind = _kind(type(op))
        if kind in ("constant", "broadcast", "convert"):
            splat = _splat(value)
            if splat is not None:
                return ("splat", *splat, value.type, where)
        if kind == "constant":
            constant = _constant_key(op)
            return ("value", value) if constant is None else (*constant, value.type, where)
        if not kind or len(op.results) != 1 or op.regions:
            return ("value", value)
        operands = [self._number(v, depth + 1) for v in op.operands]
        if kind == "convert":
            if op.operands[0].type == value.type:  # (XLA's simplifier drops a conversion to the same type)
                return self._key(self._seen(op.operands[0]), depth + 1)
            return ("convert", operands[0], value.type, where)
        if kind == "commutative" and not op.properties.get("broadcast_dimensions"):
            operands.sort()
        # (attributes themselves: xDSL's compare structurally -- bit for bit for floats -- and hash; printing
        # them for the key was a third of the time lowering.compile spent on betainc's program)
        properties = tuple(sorted(op.properties.items(), key=lambda item: item[0]))
        return (op.name, *operands, properties, value.type, where)


def splat_value(value: SSAValue):
    """The one element of ``value`` when it holds one value -- a splat constant, a broadcast or conversion of one
    (a NumPy scalar) --, else None."""
    splat = _splat(value)
    return None if splat is None else np.frombuffer(splat[1], dtype=splat[0])[0]
