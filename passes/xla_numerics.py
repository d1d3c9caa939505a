"""``xla-float-rewrites``: the rewrites of XLA's algebraic simplifier that change float results.

XLA CPU's pipeline (jax.jit) does not compute each hlo op as written: its
``AlgebraicSimplifier`` replaces, for example, ``x / broadcast(0.02)`` by
``x * broadcast(50)``, which differs from the true quotient in the last bit
for about a quarter of the elements. The executor computes every op exactly
(IEEE), so it runs this pass first (``lowering.compile(..., xla_rewrites=True)``,
the default) to compute what XLA computes. Each pattern is one rewrite of
``algebraic_simplifier.cc`` (``HandleDivide``, ``HandleMultiply``,
``HandleAdd``/``HandleSubtract``, ``HandlePower``), applied under XLA's own
conditions and checked bit for bit against jax.jit (tests/test_xla_numerics.py):

* ``A / C`` and ``A / broadcast(C)`` (``A`` not a constant, ``C`` any constant)
  -> ``A * (1 / C)``, the inverse computed in the element type, for f16, f32,
  f64 and complex. bf16 programs reach the simplifier already widened to f32
  (XLA's float normalization), so there the multiply is by the f32 inverse of
  the f32 value of ``C``: ``convert(convert(A, f32) * (1 / C), bf16)``.
  Integer division is never changed.
* ``A / broadcast(B)`` (``B`` not a constant, one use) -> ``A * broadcast(1 / B)`` (f16, f32, f64;
  bf16 via f32; not complex): the pass ``xla-divide-by-broadcast``, which the executor runs before
  ``canonicalize-broadcasts`` because XLA counts ``B``'s uses on the program as written (a broadcast repeating a
  size-1 dimension of ``B`` divides by a reshape of ``B`` of its own in XLA: one use).
* One-element values computed from constants (``n - ddof``, ``n - ddof > 0``, ``0.9 ** 1``) -> constants, by
  exact or correctly rounded ops only (:class:`FoldScalarConstants`, XLA's constant folding; ``power`` of the
  exponents 0, 1 and 2), the add, subtract, multiply or divide of two splat constants -> the splat of its value
  (:class:`FoldSplatConstants`: ``0.9 * zeros_like(g)`` in optax's first adam step), and ``select`` of a
  constant predicate -> its arm (:class:`SelectOfConstantPredicate`, ``HandleSelect``).
* ``exp(A) / exp(B)`` -> ``exp(A - B)``; ``A / exp(B)`` -> ``A * exp(-B)``;
  ``A / pow(B, C)`` -> ``A * pow(B, -C)``; ``A / sqrt(B)`` -> ``A * rsqrt(B)``
  and ``A / rsqrt(B)`` -> ``A * sqrt(B)`` when the root has no other use; ``exp(A) * exp(B)`` -> ``exp(A + B)``
  whatever else reads the exps (:class:`MultiplyOfExps`; f16, f32, f64).
* ``(A / B) / (C / D)`` -> ``(A * D) / (B * C)``; ``(A / B) / C`` ->
  ``A / (B * C)``; ``A / (B / C)`` -> ``(A * C) / B`` (float and complex).
* ``(A * C) * broadcast(B)`` -> ``A * broadcast(B * C)`` for a scalar constant ``C`` (:class:`ConstantIntoBroadcast`:
  ``0.37 * x * w[None, :]``).
* ``(A * C1) * C2`` -> ``A * (C1 * C2)`` and ``(A + C1) + C2`` ->
  ``A + (C1 + C2)`` for constants (or broadcast scalar constants) ``C1, C2``;
  ``A - C`` -> ``A + (-C)`` (exact; it lets subtractions of constants fold).
* ``A * C + B * C`` -> ``(A + B) * C`` for one constant ``C`` of powers of two (:class:`FactorPowerOfTwo`).
* ``A + 0`` and ``0 + A`` -> ``A`` (so ``-0.0 + 0.0`` stays ``-0.0``); ``A * 1``, ``A / 1``, ``A - 0``,
  ``max(A, A)``, ``min(A, A)`` -> ``A`` and ``A * -1``, ``-0 - A`` -> ``-A`` (subnormals kept, NaN signs flipped).
* ``convert(convert(x: A) -> B) -> A`` -> ``x`` where ``B`` holds every value of ``A``.
* ``abs(A)`` -> ``A`` where XLA knows ``A`` is non-negative (``abs``, ``A * A``, ``exp``, ...: :func:`_non_negative`).
* ``ln(exp(A))`` -> ``A``; ``ln(pow(A, B))`` -> ``ln|A| * B``; ``ln(sqrt(A))`` -> ``ln(A) * 0.5``;
  ``ln(rsqrt(A))`` -> ``ln(A) * -0.5``.
* ``pow(exp(A), B)`` -> ``exp(A * B)``; ``pow(A, 2)`` -> ``A * A``;
  ``pow(A, 3)`` -> ``A * (A * A)``; ``pow(A, -1)`` -> ``1 / A``; and LLVM's
  ``pow(A, 0.5)`` -> ``A == -inf ? inf : |sqrt(A)|`` (f16/f32/f64).

* ``A + scatter(O, I, U)`` -> ``scatter(A + O, I, U)`` for a scatter read by the add only whose update computation
  adds (``HandleAdd``; jax's gradients of gathers): a product in ``A`` is then not contracted into an FMA, and two
  such scatters added become one (:class:`AddOfScatter`).

* ``reduce(X, I, dims)`` -> ``reshape(X)`` when the reduced dimensions all have size 1 and ``I`` is the body's
  identity (``HandleReduce``: a sum over an axis of one keeps ``-0.0``; :class:`ReduceKeepingEveryElement`).
* ``reduce(reduce(X, d1, I), d2, I)`` -> ``reduce(X, d1 + d2, I)`` for the same body and init value
  (``HandleReduce``'s ``MergeReduces``; f32/f64/complex): a sum of a sum is one sum, in XLA CPU's order for it.

* ``reduce(dot_general(A, B))`` over ``A``'s leading free dimensions -> a reduce of the dot of ``A`` reshaped to
  rows (XLA's ``DotDecomposer`` and reduce-of-reshape): ``ReduceOfDecomposedDot``.
* ``transpose(dot_general(A, B))`` -> ``dot_general(B, A)`` when the transpose swaps the dot's two free
  dimensions and is its only user (``HandleTranspose``; :class:`TransposeOfDot`), a dot whose contracting
  dimensions all have size 1 -> a multiply of broadcasts (``HandleDot``; :class:`DotOfOneTerm`: then contracted
  into the add that reads it), and the matrix-vector products XLA's dot emitter computes with swapped operands
  written so (:class:`MatrixVectorProduct`): each product is then summed in the order of the product XLA runs.
* ``reduce_window`` of windows that do not overlap (size = stride), 4,096 elements or more, a body YNNPACK
  reduces -> ``reduce(reshape(X))`` over the window dimensions (:class:`ReduceWindowOfDisjointWindows`: XLA CPU
  gives it to YNNPACK, which sums the windows as that reduce).
* ``reduce_window`` of one-element windows with an identity init -> its operand
  (:class:`ReduceWindowOfSingleElements`); a cumulative ``reduce_window`` over more than 16 elements (``jnp.cumsum``) -> XLA's ``ReduceWindowRewriter``
  tree of scans in blocks of 16 (:class:`CumulativeWindowInBlocks`).

* ``convert(X: bf16) -> f32`` (not f64: XLA rounds to bf16 there) where X is an arithmetic or
  transcendental element-wise op, a dot or a convolution: X computed with an
  f32 result from its operands widened to f32. XLA CPU computes bf16 ops in
  f32 between conversions (float normalization) and a program's own widening
  convert then reads the f32 value, not its bf16 rounding (jax's
  ``x.astype(f32)`` after a bf16 matmul: thousands of ULPs otherwise). Chains
  of bf16 ops keep their per-op rounding; a program's explicit f32 -> bf16 ->
  f32 round trip keeps its rounding; reductions round per step.

Other bf16 ops are left alone: XLA computes each of them in f32 between
conversions, so no other pattern can match there. Ops computing on quantized values are never touched (their float
formula is the spec's). Not reproduced: the CPU backend's contraction of a
fused ``multiply`` + ``add`` into one FMA (see the project notes).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from lowering.kernels.reduction import binary_body_ufunc
from lowering.kernels.small_dot import SWAPPED_AFTER_DECOMPOSITION, dot_is_canonical
from lowering.kernels.scalar import GLIBC_EXP_TAIL
from lowering.kernels.tree_sum import exp_sum_lanes
from lowering.kernels.ynnpack_sum import MIN_ELEMENTS as YNNPACK_MIN_ELEMENTS
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, UnitAttr, i64
from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from xla_dialect.ops import conversion as cv
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import indexing as ix
from xla_dialect.ops.base import make_tensor, pred_type
from xla_dialect.ops.elementwise import (AbsOp, AddOp, Atan2Op, CbrtOp, CosineOp, DivOp, ErfOp, ExpOp, Expm1Op,
                                        Log1pOp, LogisticOp, LogOp, MaxOp, MinOp, MulOp, NegOp, PowOp, RsqrtOp,
                                        SineOp, SqrtOp, SubOp, TanhOp, TanOp)
from xla_dialect.ops.linalg import DotDimensionNumbers, DotGeneralOp, DotOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.ops.windowed import ConvolutionOp, ReduceWindowOp
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.base import ints
from xla_dialect.types import element_type_named, element_type_of, numpy_dtype

from .base import PatternPass
from .broadcasts import explicit_binary_operands, update_in_place
from .patterns import Pattern, Rule, m, rule
from .quantized import computes_on_quantized
from .registry import register_pass
from .runner import run
from .small_loops import moved_out_of_its_loop
from .util import create, element_name, i64s, make_constant, splat_scalar, tensor_type

_NATIVE = frozenset({"f16", "f32", "f64", "c64", "c128"})
_REAL = frozenset({"f16", "f32", "f64"})
"""Element types XLA CPU's simplifier sees as they are (bf16 arrives widened to f32; f8 types are not
verified and left alone)."""


def _eligible(op: Operation, types=_NATIVE) -> bool:
    """Whether ``op`` computes on an element type in ``types`` and not on quantized values."""
    return element_name(op.results[0]) in types and not computes_on_quantized(op)


def _defining(value: SSAValue, cls) -> Operation | None:
    owner = value.owner
    return owner if isinstance(owner, cls) else None


def _constant_array(value: SSAValue) -> np.ndarray | None:
    """The array of a ``constant``, or of a ``convert`` of one that changes no value (XLA folds the
    conversion before its simplifier sees it: ``lax.pow(x, jnp.int32(3))`` is ``pow(x, 3.0)``)."""
    owner = value.owner
    if isinstance(owner, ConstantOp):
        return owner.value.array
    if isinstance(owner, cv.ConvertOp) and isinstance(owner.operands[0].owner, ConstantOp) \
            and element_name(value) in _NATIVE and not computes_on_quantized(owner):
        source = owner.operands[0].owner.value.array
        if source.dtype.kind not in "biuf":
            return None
        with np.errstate(all="ignore"):
            converted = source.astype(numpy_dtype(value.type))
            exact = np.array_equal(converted.astype(source.dtype), source) and np.all(np.isfinite(converted))
        return converted if exact else None
    return None


def _constant(value: SSAValue):
    """``(array, broadcast_op)`` when ``value`` is ``constant`` (broadcast_op None) or
    ``broadcast_in_dim(constant)`` (a value-preserving ``convert`` of a constant counts as one), else None."""
    owner = value.owner
    array = _constant_array(value)
    if array is not None:
        return array, None
    if isinstance(owner, dm.BroadcastInDimOp):
        array = _constant_array(owner.operands[0])
        if array is not None:
            return array, owner
    return None


def _full_constant(value: SSAValue) -> tuple[np.ndarray, bool] | None:
    """``(array, splat)`` for a constant ``value``: a constant (``array`` as is) or a broadcast of a
    scalar constant (``array`` 0-d); ``splat`` says whether every element is the same.

    XLA folds ``(A op C1) op C2`` for two ``Constant``s or two ``Broadcast(ConstantScalar)``s. The
    broadcasts of scalars that jax emits reach the executor folded into splat constants (by
    ``canonicalize-broadcasts``), so splat constants count as broadcast scalars and only two
    splats, or two non-splat constants, are folded together.
    """
    found = _constant(value)
    if found is None:
        return None
    array, broadcast = found
    if broadcast is not None:
        return (array.reshape(()), True) if array.size == 1 else None
    return array, splat_scalar(value) is not None


def _is_all(value: SSAValue, number: float) -> bool:
    """XLA's ``IsAll``: a constant (or a broadcast of one) whose every element equals ``number``."""
    found = _constant(value)
    return found is not None and found[0].size > 0 and bool(np.all(found[0] == number))


def _emit(rewriter: PatternRewriter, cls, operands, result_type, props: dict | None = None) -> SSAValue:
    op = create(cls, list(operands), props or {}, [result_type])
    rewriter.insert(op)
    return op.results[0]


def _emit_constant(rewriter: PatternRewriter, array: np.ndarray, like: TensorType) -> SSAValue:
    """A constant of type ``like`` (a scalar ``array`` is broadcast with ``broadcast_in_dim``), remembered as
    made by a rewrite (:data:`_MADE_BY_REWRITES`)."""
    shape = tuple(like.get_shape())
    array = np.asarray(array)
    if array.shape == shape:
        const = make_constant(array, like)
        rewriter.insert(const)
        _MADE_BY_REWRITES.add(const)
        return const.results[0]
    scalar = make_constant(array.reshape(()), tensor_type(like.element_type, (), None))
    rewriter.insert(scalar)
    bcast = create(dm.BroadcastInDimOp, [scalar.results[0]], {"broadcast_dimensions": i64s(())}, [like])
    rewriter.insert(bcast)
    _MADE_BY_REWRITES.update((scalar, bcast))
    return bcast.results[0]


_MADE_BY_REWRITES: weakref.WeakSet = weakref.WeakSet()
"""Constants (and their broadcasts) made by this pass's rewrites. XLA's CSE merges the program's equal
constants before its simplifier runs, but not those the simplifier makes (:class:`FactorPowerOfTwo`)."""


def _replace(rewriter: PatternRewriter, op: Operation, value: SSAValue) -> None:
    """Replace ``op`` by ``value`` and drop the operand definitions left without uses."""
    operands = [v.owner for v in op.operands]
    rewriter.replace(op, [], [value])
    for owner in operands:
        if (isinstance(owner, Operation) and owner.parent is not None and not owner.regions
                and isinstance(owner, (ExpOp, SqrtOp, RsqrtOp, PowOp, DivOp, MulOp, AddOp, NegOp,
                                       ConstantOp, dm.BroadcastInDimOp))
                and all(r.first_use is None for r in owner.results)):
            rewriter.erase(owner)


def _flush(array: np.ndarray) -> np.ndarray:
    """``array`` with its f32/f64 subnormals (complex parts too) made signed zeros.

    XLA CPU folds constants with the CPU's flush-to-zero and denormals-are-zero
    modes on (measured: ``x / 1e-38f`` becomes ``x * inf``, ``x / 3e38f`` becomes
    ``x * 0``); f16 and bf16 are computed in software through f32 and keep theirs.
    """
    array = np.asarray(array)
    if array.dtype.kind == "c":
        return _flush(array.real) + 1j * _flush(array.imag).astype(array.dtype)
    if array.dtype not in (np.float32, np.float64):
        return array
    tiny = np.finfo(array.dtype).tiny
    return np.where(np.abs(array) < tiny, np.copysign(np.zeros((), array.dtype), array), array).astype(array.dtype)


def _fold(fn, *arrays: np.ndarray, dtype) -> np.ndarray:
    """``fn(*arrays)`` computed in ``dtype`` as XLA's constant folding on the CPU does (see _flush)."""
    with np.errstate(all="ignore"):
        return _flush(np.asarray(fn(*(_flush(np.asarray(a, dtype=dtype)) for a in arrays)), dtype=dtype))


def _inverse(array: np.ndarray, dtype) -> np.ndarray:
    """``1 / array`` computed in ``dtype`` (XLA's ``InvertConstant``: ``T{1} / c``)."""
    return _fold(np.divide, np.ones((), dtype=dtype), array, dtype=dtype)


class DivideByConstant(RewritePattern):
    """``A / C`` and ``A / broadcast(C)`` -> ``A * (1 / C)`` (floats and complex; bf16 via f32)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DivOp, rewriter: PatternRewriter) -> None:
        a, b = op.operands
        name = element_name(op.results[0])
        if name not in _NATIVE and name != "bf16" or computes_on_quantized(op):
            return
        if isinstance(a.owner, ConstantOp):
            return  # m::NonConstant(A): a constant quotient is folded as written
        found = _constant(b)
        if found is None:
            return
        array, broadcast = found
        result_type = op.results[0].type
        if name != "bf16":
            inverse_type = broadcast.operands[0].type if broadcast is not None else b.type
            inverse = _emit_constant(rewriter, _inverse(array, array.dtype), inverse_type)
            if broadcast is not None:
                inverse = _emit(rewriter, dm.BroadcastInDimOp, [inverse], b.type, dict(broadcast.properties))
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, inverse], result_type))
            return
        # bf16: XLA divides convert(A, f32) by the constant folded to f32, then rounds to bf16.
        f32 = element_type_named("f32").mlir
        wide_type = TensorType(f32, result_type.get_shape(), result_type.encoding)
        inv = _inverse(array.astype(np.float32), np.float32)
        if broadcast is not None:
            src = broadcast.operands[0].type
            inverse = _emit_constant(rewriter, inv, TensorType(f32, src.get_shape(), src.encoding))
            inverse = _emit(rewriter, dm.BroadcastInDimOp, [inverse], wide_type, dict(broadcast.properties))
        else:
            inverse = _emit_constant(rewriter, inv, wide_type)
        _replace_by_bf16_product(rewriter, op, a, inverse)


def _replace_by_bf16_product(rewriter: PatternRewriter, op: Operation, a: SSAValue, inverse: SSAValue) -> None:
    """Replace bf16 ``op`` by ``convert(convert(a, f32) * inverse, bf16)`` (``inverse`` an f32 value of the
    result's shape): a division XLA's float normalization computes in f32 and rounds once."""
    result_type = op.results[0].type
    wide_a = _emit(rewriter, cv.ConvertOp, [a], inverse.type)
    wide_a.owner.attributes[NORMALIZATION_CONVERT] = UnitAttr()  # reads A's bf16 value
    product = _emit(rewriter, MulOp, [wide_a, inverse], inverse.type)
    narrowed = _emit(rewriter, cv.ConvertOp, [product], result_type)
    narrowed.owner.attributes[NORMALIZATION_CONVERT] = UnitAttr()  # XLA's float normalization made it
    _replace(rewriter, op, narrowed)


def _implicit_divisor_is_fresh(divisor: SSAValue, op: Operation) -> bool:
    """Whether XLA's builder makes the implicit broadcast of ``divisor`` (an operand of ``op`` whose shape
    differs from the result's) from a new value of its own: a reshape dropping the size-1 dimensions that
    grow (``AddBroadcastSequence``), which has one use. A scalar, or a lower-rank operand mapped by
    ``broadcast_dimensions`` onto the result's sizes, is broadcast directly."""
    shape = tuple(divisor.type.get_shape())
    out_shape = tuple(op.results[0].type.get_shape())
    if not shape:
        return False
    if len(shape) < len(out_shape):
        dims = ew.implicit_broadcast_dims(shape, len(out_shape), ints(op.properties.get("broadcast_dimensions")))
        return any(size != out_shape[d] for size, d in zip(shape, dims))
    return True


def _grows_size_one_dimension(b: SSAValue, dims: tuple[int, ...], divisor: SSAValue) -> bool:
    """Whether ``broadcast_in_dim(b, dims) -> divisor`` repeats a size-1 dimension of ``b``. An HLO broadcast
    cannot (its operand's sizes are the result's), so XLA's translation of such a ``broadcast_in_dim`` (jax's
    ``keepdims`` values and ``y[None, :]`` spread over a batch) first reshapes ``b`` to drop those dimensions:
    the divide's ``B`` is then that new reshape, with one use, whatever uses ``b`` has (measured in XLA's HLO
    before its simplifier: ``divide(A, broadcast(reshape(b)))`` for each divide of a BatchNorm gradient)."""
    shape, out_shape = b.type.get_shape(), divisor.type.get_shape()
    return any(size == 1 and out_shape[d] != 1 for size, d in zip(shape, dims))


class DivideByBroadcast(RewritePattern):
    """XLA CPU's ``A / broadcast(B)`` -> ``A * broadcast(1 / B)`` (``B`` not a constant, with one use; the
    broadcast adds elements; f16/f32/f64, bf16 via f32; never complex or integers).

    ``AlgebraicSimplifier::HandleDivide`` makes this rewrite on the CPU (``enable_sink_broadcast``), so
    ``x / y[None, :]``, ``x / jnp.max(x, -1, keepdims=True)`` or ``x / s`` multiply by a reciprocal
    computed once per element of ``B``: about a quarter of the quotients differ from the true ones in
    the last bit, and ``3e38 / 3e38`` is 0 (the reciprocal is subnormal and flushes). ``B``'s uses are
    counted as XLA counts them, on the program as written: this pattern runs before
    ``canonicalize-broadcasts`` merges chains of broadcasts (``y[None, :]`` is a reshape of one use
    under the divide's broadcast; a scalar ``s`` broadcast directly and also used elsewhere is not
    rewritten). Implicit broadcasts follow XLA's builder (:func:`_implicit_divisor_is_fresh`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DivOp, rewriter: PatternRewriter) -> None:
        name = element_name(op.results[0])
        if name not in _REAL and name != "bf16" or computes_on_quantized(op):
            return
        a, divisor = op.operands
        result_type = op.results[0].type
        if tuple(divisor.type.get_shape()) != tuple(result_type.get_shape()):
            if _constant(divisor) is not None or not (_implicit_divisor_is_fresh(divisor, op)
                                                    or divisor.has_one_use()):
                return
            new_ops: list[Operation] = []
            operands = explicit_binary_operands(op, new_ops)
            update_in_place(op, operands, new_ops, rewriter)
            a, divisor = operands
        broadcast = divisor.owner
        if isinstance(broadcast, dm.BroadcastOp):
            dims = tuple(range(len(broadcast.results[0].type.get_shape()) - broadcast.operands[0].type.get_num_dims(),
                               len(broadcast.results[0].type.get_shape())))
        elif isinstance(broadcast, dm.BroadcastInDimOp):
            dims = ints(broadcast.properties.get("broadcast_dimensions"))
        else:
            return
        b = broadcast.operands[0]
        if (_constant(divisor) is not None
                or not (b.has_one_use() or _grows_size_one_dimension(b, dims, divisor))
                or b.type.element_count() >= divisor.type.element_count()):
            return  # a constant B is DivideByConstant's (folded); an equal count is a reshape in XLA
        # XLA's reshape mover takes the reciprocal beneath a reshape that only adds size-1 dimensions
        # (jax's keepdims and [:, None]), where the rules for 1/sqrt(B) and 1/exp(B) then apply.
        looked_through = []
        while isinstance(b.owner, dm.BroadcastInDimOp) and b.owner.operands[0].type.element_count() == \
                b.type.element_count():
            looked_through.append(b.owner)
            inner = ints(b.owner.properties.get("broadcast_dimensions"))
            dims = tuple(dims[d] for d in inner)
            b = b.owner.operands[0]
        bcast_props = {"broadcast_dimensions": i64s(dims)}
        if name != "bf16":
            one = _emit_constant(rewriter, np.ones((), numpy_dtype(b.type)), b.type)
            inverse = _emit(rewriter, DivOp, [one, b], b.type)
            spread = _emit(rewriter, dm.BroadcastInDimOp, [inverse], divisor.type, bcast_props)
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, spread], result_type))
        else:
            self._rewrite_bf16(rewriter, op, a, b, bcast_props)
        for reshape in looked_through:  # outer first: each is unused once the one above is gone
            if reshape.parent is not None and reshape.results[0].first_use is None:
                rewriter.erase(reshape)

    @staticmethod
    def _rewrite_bf16(rewriter: PatternRewriter, op: Operation, a: SSAValue, b: SSAValue, bcast_props: dict) -> None:
        # bf16: XLA's float normalization has widened the divide to f32 before the simplifier sees it.
        result_type = op.results[0].type
        f32 = element_type_named("f32").mlir
        wide_b_type = TensorType(f32, b.type.get_shape(), b.type.encoding)
        wide_type = TensorType(f32, result_type.get_shape(), result_type.encoding)
        wide_b = _emit(rewriter, cv.ConvertOp, [b], wide_b_type)
        wide_b.owner.attributes[NORMALIZATION_CONVERT] = UnitAttr()
        one = _emit_constant(rewriter, np.ones((), np.float32), wide_b_type)
        inverse = _emit(rewriter, DivOp, [one, wide_b], wide_b_type)
        spread = _emit(rewriter, dm.BroadcastInDimOp, [inverse], wide_type, bcast_props)
        _replace_by_bf16_product(rewriter, op, a, spread)


NORMALIZATION_CONVERT = "hlo.float_normalization"
"""Marks a convert to bf16 that stands for XLA's float normalization (an op computed in f32, rounded)."""

# Ops XLA CPU computes in f32 for bf16 (float normalization): a convert of their result to a wider
# float reads the f32 value itself (no rounding), measured against jax.jit op by op
# (tests/test_xla_numerics.py). f16 is computed natively (rounded per op) except inside conversions
# that widen log/sqrt/rsqrt/power, where XLA rounds a correctly rounded f32 result: not reproduced.
_EXCESS_BF16 = frozenset({
    AddOp, SubOp, MulOp, DivOp, PowOp, Atan2Op, ExpOp, Expm1Op, LogOp, Log1pOp, LogisticOp, TanhOp, SqrtOp, RsqrtOp,
    CbrtOp, SineOp, CosineOp, TanOp, ErfOp, DotOp, DotGeneralOp, ConvolutionOp,
})


def _wide_operand(rewriter: PatternRewriter, value: SSAValue, element) -> SSAValue:
    """``value`` in the wide element type: constants (and broadcasts of them) converted exactly, so
    that the wide op still sees constants (XLA folds the conversion of a constant)."""
    t = value.type
    if not isinstance(t, TensorType) or element_name(value) not in ("bf16", "f16"):
        return value
    wide = TensorType(element, t.get_shape(), t.encoding)
    found = _constant(value)
    if found is not None:
        array, broadcast = found
        dtype = np.float32 if str(element) == "f32" else np.float64
        if broadcast is None:
            return _emit_constant(rewriter, array.astype(dtype), wide)
        src = broadcast.operands[0].type
        scalar = _emit_constant(rewriter, array.astype(dtype), TensorType(element, src.get_shape(), src.encoding))
        return _emit(rewriter, dm.BroadcastInDimOp, [scalar], wide, dict(broadcast.properties))
    widened = _emit(rewriter, cv.ConvertOp, [value], wide)
    # XLA's normalization reads the operand's bf16 value: this convert must not be widened in turn.
    widened.owner.attributes[NORMALIZATION_CONVERT] = UnitAttr()
    return widened


class ExcessPrecisionConvert(RewritePattern):
    """``convert(X: bf16) -> f32`` for an op X that XLA CPU computes in f32: X computed with an f32
    result (XLA's float normalization widens X and the round trip through bf16 that the convert
    would undo is removed), also for the normalized divisions of :class:`DivideByConstant`. A
    convert the program itself wrote (``convert(convert(y: f32) -> bf16) -> f32``) keeps its
    rounding, as in XLA."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: cv.ConvertOp, rewriter: PatternRewriter) -> None:
        # Only f32: XLA removes a bf16 -> f32 round trip (convert(convert(x: f32) -> bf16) -> f32), while
        # a convert to f64 reads the bf16 value (measured: sqrt, exp, sin, x*y, x+y, dot all round first).
        if element_name(op.results[0]) != "f32" or NORMALIZATION_CONVERT in op.attributes:
            return
        source = op.operands[0]
        narrow = element_name(source)
        owner = source.owner
        if narrow != "bf16" or not isinstance(owner, Operation) or computes_on_quantized(owner):
            return
        if isinstance(owner, cv.ConvertOp) and NORMALIZATION_CONVERT in owner.attributes and \
                element_name(owner.operands[0]) == "f32":
            rewriter.replace(op, [], [owner.operands[0]])
            return
        if type(owner) not in _EXCESS_BF16 or len(owner.results) != 1:
            return
        f32 = element_type_named("f32").mlir
        wide_type = TensorType(f32, source.type.get_shape(), source.type.encoding)
        operands = [_wide_operand(rewriter, v, f32) for v in owner.operands]
        wide = create(type(owner), operands, dict(owner.properties), [wide_type])
        rewriter.insert(wide)
        rewriter.replace(op, [], [wide.results[0]])


class DivideByFunction(RewritePattern):
    """``exp(A)/exp(B)`` -> ``exp(A-B)``; ``A/exp(B)`` -> ``A*exp(-B)``; ``A/pow(B,C)`` ->
    ``A*pow(B,-C)``; ``A/sqrt(B)`` -> ``A*rsqrt(B)``; ``A/rsqrt(B)`` -> ``A*sqrt(B)`` (one-use roots)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DivOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op):
            return
        a, b = op.operands
        t = op.results[0].type
        den = b.owner
        if isinstance(den, ExpOp):
            num = _defining(a, ExpOp)
            if num is not None:
                diff = _emit(rewriter, SubOp, [num.operands[0], den.operands[0]], t)
                _replace(rewriter, op, _emit(rewriter, ExpOp, [diff], t))
            else:
                neg = _emit(rewriter, NegOp, [den.operands[0]], t)
                _replace(rewriter, op, _emit(rewriter, MulOp, [a, _emit(rewriter, ExpOp, [neg], t)], t))
        elif isinstance(den, PowOp):
            base, exponent = den.operands
            neg = _emit(rewriter, NegOp, [exponent], exponent.type)
            power = _emit(rewriter, PowOp, [base, neg], base.type)
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, power], t))
        elif isinstance(den, (SqrtOp, RsqrtOp)) and b.has_one_use():
            other = RsqrtOp if isinstance(den, SqrtOp) else SqrtOp
            root = _emit(rewriter, other, [den.operands[0]], t)
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, root], t))


class MultiplyOfExps(RewritePattern):
    """``exp(A) * exp(B)`` -> ``exp(A + B)`` (``HandleMultiply``), ``exp(A) * exp(A)`` too, whatever else reads the
    exps (they stay for their other readers), on f16, f32 and f64 (measured with jax.jit on 4,096 elements: about
    half of ``jnp.exp(x) * jnp.exp(y)`` and ``jnp.exp(x) ** 2`` differed by the rounding of the two exps; a chain
    ``exp(x) * exp(y) * exp(x + 1)`` is ``exp((x + y) + (x + 1))``; bf16's results were equal without it; long fuzz
    campaign: ``v0 = exp(x0); v0 * v0`` in f16)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MulOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op):
            return
        first, second = (_defining(v, ExpOp) for v in op.operands)
        if first is None or second is None:
            return
        t = op.results[0].type
        total = _emit(rewriter, AddOp, [first.operands[0], second.operands[0]], t)
        _replace(rewriter, op, _emit(rewriter, ExpOp, [total], t))


def _reshape_like(op: Operation) -> bool:
    """Whether ``op`` only renames its operand's shape, keeping every element in row-major order: a ``reshape``,
    or a ``broadcast_in_dim`` adding dimensions of size 1 only (its dimensions increasing)."""
    if isinstance(op, dm.ReshapeOp):
        return True
    if isinstance(op, dm.BroadcastInDimOp):
        dims = list(ints(op.properties.get("broadcast_dimensions")))
        return (dims == sorted(dims)
                and op.operands[0].type.element_count() == op.results[0].type.element_count())
    return False


class ShapeRoundTrip(RewritePattern):
    """A chain of reshapes (and broadcasts that only add dimensions of size 1) that ends in the shape it started
    from -> the value it started from: XLA's simplifier folds such chains away (``jnp.max(x, axis=0,
    keepdims=True)`` of a one-row ``x`` is ``x`` to it once the reduce over a dimension of size 1 is a reshape),
    so the rewrites that read through an operand's producer see it: ``x / (x / x)`` is ``(x * x) / x`` (long fuzz
    campaign, session 19: an f16 column maximum of one row, a denormal ``x`` 0 in XLA)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (dm.ReshapeOp, dm.BroadcastInDimOp)) or not _reshape_like(op):
            return
        value = op.operands[0]
        while True:
            if value.type == op.results[0].type:
                rewriter.replace_matched_op([], [value])
                return
            owner = value.owner
            if not isinstance(owner, Operation) or not _reshape_like(owner):
                return
            value = owner.operands[0]


_EXTREMUM_OF_NEGATION_TYPES = frozenset({"f16", "f32", "f64"})
"""Where the max/min of a value and its negation was measured to be its magnitude in XLA CPU."""


class ExtremumOfNegation(RewritePattern):
    """``max(x, -x)`` -> ``|x|`` and ``min(x, -x)`` -> ``-|x|`` (either operand order): LLVM's InstCombine folds XLA's
    max/min of a value and its negation into a sign-bit operation (measured f16/f32/f64 on 1-d and 2-d shapes: a denormal kept
    where the max instruction under denormals-are-zero would give 0, a NaN's payload kept with its sign cleared or
    set; long fuzz campaign, session 19)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (MaxOp, MinOp)) or not _eligible(op, _EXTREMUM_OF_NEGATION_TYPES):
            return
        a, b = op.operands
        if op.properties.get("broadcast_dimensions") or a.type != b.type:
            return
        negated = (isinstance(b.owner, NegOp) and b.owner.operands[0] is a) or \
            (isinstance(a.owner, NegOp) and a.owner.operands[0] is b)
        if not negated:
            return
        x = a if isinstance(b.owner, NegOp) and b.owner.operands[0] is a else b
        t = op.results[0].type
        magnitude = _emit(rewriter, AbsOp, [x], t)
        _replace(rewriter, op, magnitude if isinstance(op, MaxOp) else _emit(rewriter, NegOp, [magnitude], t))


class DivideOfDivide(RewritePattern):
    """``(A/B)/(C/D)`` -> ``(A*D)/(B*C)``; ``(A/B)/C`` -> ``A/(B*C)``; ``A/(B/C)`` -> ``(A*C)/B``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DivOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op):
            return
        x, y = op.operands
        t = op.results[0].type
        num, den = _defining(x, DivOp), _defining(y, DivOp)
        if num is not None and den is not None:
            (a, b), (c, d) = num.operands, den.operands
            new = (_emit(rewriter, MulOp, [a, d], t), _emit(rewriter, MulOp, [b, c], t))
        elif num is not None:
            a, b = num.operands
            new = (a, _emit(rewriter, MulOp, [b, y], t))
        elif den is not None:
            b, c = den.operands
            new = (_emit(rewriter, MulOp, [x, c], t), b)
        else:
            return
        _replace(rewriter, op, _emit(rewriter, DivOp, new, t))


def _reassociate(op: Operation, rewriter: PatternRewriter, cls, combine) -> None:
    """``(A op C1) op C2`` -> ``A op (C1 op C2)`` in any operand order (``combine`` folds the constants)."""
    if not _eligible(op):
        return
    t = op.results[0].type
    for inner_value, c2_value in (op.operands, op.operands[::-1]):
        inner = _defining(inner_value, cls)
        found2 = _full_constant(c2_value)
        if inner is None or found2 is None:
            continue
        for a, c1_value in (inner.operands, inner.operands[::-1]):
            found1 = _full_constant(c1_value)
            if found1 is None or found1[1] != found2[1] or _full_constant(a) is not None:
                continue
            (c1, _), (c2, _) = found1, found2
            folded = _fold(combine, c1, c2, dtype=c1.dtype)
            _replace(rewriter, op, _emit(rewriter, cls, [a, _emit_constant(rewriter, folded, t)], t))
            return


class FoldMultiplyConstants(RewritePattern):
    """``(A * C1) * C2`` -> ``A * (C1 * C2)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MulOp, rewriter: PatternRewriter) -> None:
        _reassociate(op, rewriter, MulOp, np.multiply)


class ConstantIntoBroadcast(RewritePattern):
    """``(A * C) * broadcast(B)`` -> ``A * broadcast(B * C)`` for a scalar constant ``C`` (or a broadcast of one), a
    non-constant ``A`` and a broadcast that adds elements to a non-constant ``B`` (``HandleMultiply``; no use
    condition: the product ``A * C`` stays for its other readers). The constant is applied to the smaller operand,
    and rounds there: ``(x / 1e-40) / jnp.max(x / 1e-40, -1, keepdims=True)`` in f64 is ``x * broadcast((1 /
    max) * 1e40)`` in XLA, 0.9999999999999999 where the division order gives 1 (long fuzz campaign, seed 40)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: MulOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op, _REAL):
            return
        t = op.results[0].type
        for inner_value, spread in (op.operands, op.operands[::-1]):
            inner, broadcast = _defining(inner_value, MulOp), _defining(spread, dm.BroadcastInDimOp)
            if inner is None or broadcast is None or _constant(spread) is not None:
                continue
            b = broadcast.operands[0]
            if b.type.element_count() >= spread.type.element_count() or not _eligible(inner, _REAL):
                continue  # (a broadcast adding no elements is a reshape in XLA)
            for a, c_value in (inner.operands, inner.operands[::-1]):
                found = _full_constant(c_value)
                if found is None or not found[1] or _full_constant(a) is not None:
                    continue
                scalar = np.asarray(found[0]).reshape(-1)[:1].reshape(())
                scaled = _emit(rewriter, MulOp, [b, _emit_constant(rewriter, scalar, b.type)], b.type)
                spread_scaled = _emit(rewriter, dm.BroadcastInDimOp, [scaled], spread.type,
                                      dict(broadcast.properties))
                _replace(rewriter, op, _emit(rewriter, MulOp, [a, spread_scaled], t))
                return


class FoldAddConstants(RewritePattern):
    """``A + 0`` / ``0 + A`` -> ``A``; ``(A + C1) + C2`` -> ``A + (C1 + C2)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp, rewriter: PatternRewriter) -> None:
        # bf16 too for the zero (measured: bf16 x + 0 and x + -0 keep subnormals and -0 in XLA CPU; long fuzz
        # campaign seed 12), not for the reassociation.
        if not _eligible(op, _NATIVE | {"bf16"}):
            return
        a, b = op.operands
        for keep, zero in ((a, b), (b, a)):
            if _is_all(zero, 0) and keep.type == op.results[0].type:
                rewriter.replace(op, [], [keep])
                return
        if _eligible(op):
            _reassociate(op, rewriter, AddOp, np.add)



class FactorPowerOfTwo(RewritePattern):
    """``A * C + B * C`` -> ``(A + B) * C`` where ``C`` (the same value in both products: one instruction for
    XLA) is a constant, or a broadcast of one, whose elements are all +-2^k (``HandleAdd``; exact but for
    underflow and overflow of the products: ``x / 2 + x / 2`` of the smallest normal f32 is that normal in XLA,
    not the two flushed halves). ``x / 2 + y / 2`` keeps its two products: each division becomes a multiply by
    its own new constant, so ``C`` is not one value (measured the same in XLA CPU)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op, _REAL):
            return
        lhs, rhs = (_defining(v, MulOp) for v in op.operands)
        if lhs is None or rhs is None:
            return
        for a, c in (tuple(lhs.operands), tuple(reversed(lhs.operands))):
            same = [v for v in rhs.operands if _same_constant(v, c)]
            if not same:
                continue
            b = rhs.operands[1] if rhs.operands[0] is same[0] else rhs.operands[0]
            if not _all_powers_of_two(c) or not a.type == b.type == op.results[0].type:
                return
            total = _emit(rewriter, AddOp, [a, b], op.results[0].type)
            _replace(rewriter, op, _emit(rewriter, MulOp, [total, c], op.results[0].type))
            return


def _same_constant(a: SSAValue, b: SSAValue) -> bool:
    """Whether ``a`` and ``b`` are one instruction for XLA's simplifier: the same value, or equal constants (or
    broadcasts of equal constants) of the same type, both the program's own, which XLA's CSE has merged by then
    (jax writes ``x * 0.5 + y * 0.5`` with two constants 0.5: factored in XLA CPU, measured)."""
    if a is b:
        return True
    if a.type != b.type or any(v.owner in _MADE_BY_REWRITES for v in (a, b)):
        return False
    if any(isinstance(v.owner, dm.BroadcastInDimOp) and v.owner.operands[0].owner in _MADE_BY_REWRITES
           for v in (a, b)):
        return False
    found_a, found_b = _constant(a), _constant(b)
    if found_a is None or found_b is None:
        return False
    (x, bcast_a), (y, bcast_b) = found_a, found_b
    if (bcast_a is None) != (bcast_b is None) or x.dtype != y.dtype or x.shape != y.shape:
        return False
    if bcast_a is not None and ints(bcast_a.properties["broadcast_dimensions"]) != \
            ints(bcast_b.properties["broadcast_dimensions"]):
        return False
    return x.tobytes() == y.tobytes()


def _all_powers_of_two(value: SSAValue) -> bool:
    """Whether ``value`` is a constant (or a broadcast of one) whose elements are all +-2^k, as XLA's
    ``IsAllFpConstantPowerOf2`` finds: not an f32 or f64 subnormal, which its compiler, running with denormals
    flushed, reads as zero (measured with jax.jit's optimized HLO: ``x * c + y * c`` keeps both products for
    ``c = -1e-45`` and 2**-1074, factors 2**-126, 2**-1022 and the f16 subnormal 2**-24; factored, ``x * c + x *
    c`` of the largest f32 gave NaN where XLA gives -0, long fuzz campaign)."""
    found = _constant(value)
    if found is None:
        return False
    original = np.asarray(found[0])
    array = np.asarray(original, dtype=np.float64)
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array == 0):
        return False
    if original.dtype in (np.float32, np.float64) and np.any(np.abs(array) < np.finfo(original.dtype).tiny):
        return False
    mantissa, _ = np.frexp(np.abs(array))
    return bool(np.all(mantissa == 0.5))


# -- rules (passes.patterns) ---------------------------------------------------------------------------

_ERASABLE = (ExpOp, SqrtOp, RsqrtOp, PowOp, DivOp, MulOp, AddOp, NegOp, ConstantOp, dm.BroadcastInDimOp)
"""The operand definitions :func:`_replace` erases when a rewrite leaves them unused (rules say the same with
``erase_dead_operands=_ERASABLE``)."""


def _all(number: float) -> Pattern:
    """XLA's ``IsAll(number)`` as a matcher: a constant, a value-preserving convert of one, or a broadcast of
    either, whose every element equals ``number`` (:func:`_is_all`)."""
    return m.Any().where(lambda v: _is_all(v, number))


CONSTANT = m.Any().where(lambda v: _constant(v) is not None)
"""A constant as XLA's simplifier sees it (:func:`_constant`)."""
NON_CONSTANT = m.Any().where(lambda v: _constant(v) is None)


def _is_negative_zero(value: SSAValue) -> bool:
    """A constant (or a broadcast of one) of a real type whose every element is ``-0`` (a complex constant never
    is: XLA's fold is of real floats, and NumPy has no sign bit of a complex number)."""
    found = _constant(value)
    return (found is not None and found[0].size > 0 and found[0].dtype.kind != "c"
            and bool(np.all((found[0] == 0) & np.signbit(found[0]))))


def _identity_eligible(op) -> bool:
    return _eligible(op, _REAL | {"bf16"})


def _real(op) -> bool:
    return _eligible(op, _REAL)


def _negate(b, a, op):
    return b.neg(a) if a.type == op.results[0].type else None


def _identity_rules() -> tuple[Rule, ...]:
    """``A * 1``, ``1 * A``, ``A / 1``, ``A - 0``, ``max(A, A)``, ``min(A, A)``, ``select(P, A, A)`` -> ``A``, and
    ``A * -1``, ``-1 * A``, ``-0 - A`` -> ``-A``: XLA removes these ops when it compiles (its simplifier, and LLVM's
    ``fmul X, -1`` and ``fsub -0.0, X`` -> ``fneg X``; measured: ``-0 - A`` keeps a subnormal ``A``'s value,
    f32/f64 and bf16 (computed in f32), and flips a NaN's sign, f16 too; long fuzz campaign seed 14), so a
    subnormal ``A`` is not flushed, a signalling NaN is not quieted, and ``A * -1`` flips a NaN's sign. f16, bf16,
    f32 and f64, never on quantized values; ``A`` replaces the op only with its exact type (no implicit broadcast
    undone); constants left unused go too."""
    one, minus_one, zero = _all(1), _all(-1), _all(0)
    erase = dict(erase_dead_operands=_ERASABLE, keep_locations=False)
    return (
        rule(m.Select(m.Any(), "a", "a"), "a", name="select(p, A, A) -> A"),
        rule(m.Op((MaxOp, MinOp), "a", "a"), lambda b, a: a, when=_identity_eligible, name="max/min(A, A) -> A"),
        rule(m.Multiply("a", one), "a", when=_identity_eligible, name="A * 1 -> A", **erase),
        rule(m.Multiply("a", minus_one), _negate, when=_identity_eligible, name="A * -1 -> -A", **erase),
        rule(m.Multiply(one, "a"), "a", when=_identity_eligible, name="1 * A -> A", **erase),
        rule(m.Multiply(minus_one, "a"), _negate, when=_identity_eligible, name="-1 * A -> -A", **erase),
        rule(m.Divide("a", one), "a", when=_identity_eligible, name="A / 1 -> A", **erase),
        rule(m.Subtract("a", zero), "a", when=_identity_eligible, name="A - 0 -> A", **erase),
        rule(m.Subtract(m.Any().where(_is_negative_zero), "a"), _negate, when=_identity_eligible,
             name="-0 - A -> -A", **erase),
    )


IDENTITY_RULES = _identity_rules()


def _always_false(p) -> bool:
    """Whether the pred ``p`` is ``A > A`` or ``A < A`` of f32/f64 ``A`` (false everywhere, NaN too)."""
    compare = p.owner
    return (isinstance(compare, ew.CompareOp) and compare.operands[0] is compare.operands[1]
            and compare.properties["comparison_direction"].data in ("GT", "LT")
            and element_name(compare.operands[0]) in ("f32", "f64"))


# Folds LLVM makes in XLA CPU's fused loops (not XLA's simplifier), which then sees the operands of later ops as
# equal: ``max(x, where(x > x, t, x))`` is ``max(x, x)``, i.e. ``x`` (a subnormal kept; measured, long fuzz campaign
# seed 8; bf16 does not fold so: measured, XLA flushes there); ``where(x > x, t, f)`` is ``f``.
FOLDED_BY_LLVM = rule(m.Select("p", "t", "f"), "f", when=_always_false, name="select(A > A, T, F) -> F")

# ``select(P, A, select(P, B, C))`` -> ``select(P, A, C)`` and ``select(P, select(P, A, B), C)`` -> ``select(P, A,
# C)`` (LLVM's instcombine, before it forms max/min instructions: ``where(x > y, x, where(x > y, y, x))`` is ``x``
# in XLA, a subnormal kept, not a flushing min; long fuzz campaign seed 13 at HEAD 7463c94).
def _same_predicate(p, q) -> bool:
    """Whether preds ``p`` and ``q`` are one value, or the same compare of the same operands (XLA's CSE)."""
    if p is q:
        return True
    a, b = p.owner, q.owner
    return (isinstance(a, ew.CompareOp) and isinstance(b, ew.CompareOp) and list(a.operands) == list(b.operands)
            and a.properties == b.properties)


def _select(b, p, a, c, op):
    return b.create(ew.SelectOp, [p, a, c], result_type=op.results[0].type)


_SCALAR_FOLDS = (ew.CompareOp, cv.ConvertOp, AddOp, SubOp, MulOp, DivOp, NegOp, MaxOp, MinOp, ew.AndOp, ew.OrOp,
                 ew.NotOp, PowOp)
"""Ops of one element :class:`FoldScalarConstants` evaluates: exact or correctly rounded in XLA's evaluator and in
the kernels alike (no transcendental op, whose evaluator and run-time results differ; ``power`` only of the
exponents 0, 1 and 2: optax's bias correction ``1 - b1 ** count`` at the first step)."""


def _splat(value: SSAValue) -> np.ndarray | None:
    """The one value of a constant all of whose elements have the same bits (or of a broadcast of a constant of
    one element), as a 0-d array; else None."""
    found = _constant(value)
    if found is None or found[0].size == 0:
        return None
    array = np.asarray(found[0]).reshape(-1)
    first = array[:1]
    if array.size > 1 and not np.array_equal(array.view(np.uint8).reshape(array.size, -1),
                                             np.broadcast_to(first.view(np.uint8), (array.size, array.itemsize))):
        return None
    return first.reshape(())


class FoldSplatConstants(RewritePattern):
    """An add, subtract, multiply or divide of two constants whose elements are all one value (splats:
    jax's ``jnp.zeros_like`` state, its broadcast scalars) -> the splat of the folded value: XLA's constant
    folding (each op correctly rounded, in f32/f64 as XLA's evaluator computes it, :func:`_fold`). optax's first
    adam step reads ``0.9 * zeros + 0.1 * g``: folded, the add of zero goes, and the bias correction's constant
    then folds into ``0.1 * g``'s multiply as in XLA (1 ULP on half the updates before)."""

    _FUNCTIONS = {AddOp: np.add, SubOp: np.subtract, MulOp: np.multiply, DivOp: np.divide}

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        fn = self._FUNCTIONS.get(type(op))
        if fn is None or len(op.operands) != 2 or computes_on_quantized(op) or element_name(op.results[0]) not in (
                "f32", "f64"):
            return
        result = op.results[0]
        if not isinstance(result.type, TensorType) or result.type.element_count() < 2:
            return  # (one element: FoldScalarConstants)
        values = [_splat(v) for v in op.operands]
        if any(v is None for v in values):
            return
        folded = _fold(fn, *values, dtype=numpy_dtype(result.type))
        _replace(rewriter, op, _emit_constant(rewriter, folded, result.type))


class NaNConstantOperand(RewritePattern):
    """An add, subtract, multiply, divide, max or min with a NaN splat constant operand (either side) -> that
    constant's NaN, quieted, everywhere (``A - C``: of ``-C``, LLVM writing it ``A + (-C)``): LLVM folds the op to
    the constant in XLA's fused loops, whatever ``A`` holds (measured with jax.jit on f32 and f64: ``x + c``,
    ``x * c``, ``x / c``, ``max(x, c)``, ``min(c, x)`` give ``c``'s payload and sign for NaN, infinite and finite
    ``x``; the executor gave ``x``'s NaN where ``x`` was one). f16 and bf16 fold to other NaNs (payload bits
    dropped), not reproduced."""

    _OPS = (AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self._OPS) or computes_on_quantized(op) or element_name(op.results[0]) not in (
                "f32", "f64"):
            return
        result = op.results[0]
        for index, value in enumerate(op.operands):
            constant = _splat(value)
            if constant is None or not np.isnan(constant) or value.type != result.type:
                continue
            unsigned = np.dtype(f"u{constant.dtype.itemsize}")
            bits = np.array(constant, constant.dtype).view(unsigned)
            bits |= unsigned.type(1) << unsigned.type(np.finfo(constant.dtype).nmant - 1)  # (quieted)
            if isinstance(op, SubOp) and index == 1:
                bits ^= unsigned.type(1) << unsigned.type(8 * constant.dtype.itemsize - 1)
            _replace(rewriter, op, _emit_constant(rewriter, bits.view(constant.dtype), result.type))
            return


_FOLDED_TYPES = frozenset({"f32", "f64", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"})


class FoldScalarConstants(RewritePattern):
    """One element computed from constants (``n - ddof``, ``n - ddof > 0`` in ``jnp.var`` once its call is
    inlined) -> its constant: XLA's ``HloConstantFolding`` runs before the simplifier, so ``x / (48 - 1)`` is a
    division by the constant 47 there (``DivideByConstant``: a multiplication by ``1 / 47``) and a select on
    ``48 - 0 > 0`` has a constant predicate (:class:`SelectOfConstantPredicate`). Only arithmetic that is exact or
    correctly rounded (:data:`_SCALAR_FOLDS`) on f32/f64, integers and preds, so folding changes no value."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _SCALAR_FOLDS) or len(op.results) != 1:
            return
        if not all(isinstance(v.owner, (ConstantOp, cv.ConvertOp)) for v in op.operands):
            return  # (what _constant_array reads: the cheapest test first, most ops fail it)
        if computes_on_quantized(op):
            return
        result = op.results[0]
        if (not isinstance(result.type, TensorType) or result.type.element_count() != 1
                or any(element_name(v) not in _FOLDED_TYPES for v in (*op.operands, result))):
            return
        args = [_constant_array(v) for v in op.operands]
        if any(a is None for a in args):
            return
        if isinstance(op, PowOp):  # (only exponents whose power is exact or correctly rounded: 0, 1, 2)
            base, exponent = (a.reshape(-1)[0] for a in args)
            if exponent not in (0, 1, 2):
                return
            value = _fold(lambda b: b ** int(exponent), base, dtype=numpy_dtype(result.type))
            rewriter.replace_op(op, make_constant(value.reshape(tuple(result.type.get_shape())), result.type))
            return
        from .cleanup import ConstantEvaluator

        out = ConstantEvaluator().evaluate(op, args)
        if out is None:
            return
        folded = make_constant(np.asarray(out[0]).reshape(tuple(result.type.get_shape())), result.type)
        rewriter.replace_op(op, folded)


class SelectOfConstantPredicate(RewritePattern):
    """``select(P, A, B)`` -> ``A`` (``B``) where constants decide ``P`` all true (false): XLA folds the predicate
    (``HloConstantFolding``) and ``HandleSelect`` picks the arm, so nothing stands between the arm and the ops
    around it. ``jnp.var(x) + eps`` is ``select(n - ddof > 0, sum * (1 / n), nan) + eps``: in XLA one multiply-add
    (``sum * (1 / n) + eps`` contracted; 7 of 40 elements 1 ULP off while the select stood between them)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ew.SelectOp, rewriter: PatternRewriter) -> None:
        found = _constant(op.operands[0])
        if found is None or found[0].size == 0:
            return
        predicate = found[0]
        if not (predicate.all() or not predicate.any()):
            return
        arm = op.operands[1] if predicate.all() else op.operands[2]
        if arm.type != op.results[0].type:
            return
        rewriter.replace_op(op, [], [arm])


NESTED_SELECTS = (
    rule(m.Select("p", "a", m.Select("q", "b", "c")), _select, when=_same_predicate,
         name="select(P, A, select(P, B, C)) -> select(P, A, C)"),
    rule(m.Select("p", m.Select("q", "a", "b"), "c"), _select, when=_same_predicate,
         name="select(P, select(P, A, B), C) -> select(P, A, C)"),
)


# ``max(A, select(P, T, A))`` -> ``select(P, max(A, T), A)``, and the other arm and operand orders, min alike
# (LLVM's instcombine in XLA CPU's fused loops: an op of a select one of whose arms is the op's other operand is
# moved into the select's arms, where ``max(A, A)`` folds to ``A``; read in the optimized IR, long fuzz campaign
# seed 27: ``jnp.maximum(x, jnp.where(x > y, jnp.abs(x), x))`` of an f32 subnormal ``x`` (``x > 0`` false under
# DAZ) is ``x`` in XLA, not the flushing max of ``x`` and ``x``; f32 and f64 measured, every arm and operand order;
# bf16 and f16 give the same bits either way).
def _f32_or_f64(op) -> bool:
    return _eligible(op, frozenset({"f32", "f64"}))


def _extremum(b, op, x, y):
    return b.create(type(op), [x, y], dict(op.properties), op.results[0].type)


_extremum_rule = dict(when=_f32_or_f64, keep_locations=False)
EXTREMUM_OF_SELECT = (
    rule(m.Op((MaxOp, MinOp), "a", m.Select("p", "t", "a")),
         lambda b, a, p, t, op: _select(b, p, _extremum(b, op, a, t), a, op),
         name="max/min(A, select(P, T, A)) -> select(P, max/min(A, T), A)", **_extremum_rule),
    rule(m.Op((MaxOp, MinOp), "a", m.Select("p", "a", "f")),
         lambda b, a, p, f, op: _select(b, p, a, _extremum(b, op, a, f), op),
         name="max/min(A, select(P, A, F)) -> select(P, A, max/min(A, F))", **_extremum_rule),
    rule(m.Op((MaxOp, MinOp), m.Select("p", "t", "a"), "a"),
         lambda b, a, p, t, op: _select(b, p, _extremum(b, op, t, a), a, op),
         name="max/min(select(P, T, A), A) -> select(P, max/min(T, A), A)", **_extremum_rule),
    rule(m.Op((MaxOp, MinOp), m.Select("p", "a", "f"), "a"),
         lambda b, a, p, f, op: _select(b, p, a, _extremum(b, op, f, a), op),
         name="max/min(select(P, A, F), A) -> select(P, A, max/min(F, A))", **_extremum_rule),
)


# ``sqrt(A * A)`` -> ``|A|`` (XLA's simplifier; measured f16/f32/f64: subnormal and huge ``A`` give ``|A|`` where
# the square under- or overflows, NaNs their abs; long fuzz campaign seed 13; bf16 is not rewritten: measured).
# ``cos(-A)``, ``cos(|A|)`` -> ``cos(A)``: LLVM's InstCombine drops the sign operation under XLA's cos (and so does
# numba's LLVM in compiled loops: without the rule a NaN's sign differed between the interpreter and compiled loops,
# long fuzz campaign; measured f16/f32/f64 on NaNs of both signs and payloads, whose sign XLA keeps).
COSINE_OF_SIGN_CHANGE = tuple(
    rule(m.Cosine(inner("a")), lambda b, a, op: b.create(CosineOp, [a], result_type=op.results[0].type),
         when=lambda a, op: _real(op) and a.type == op.results[0].type, name=f"cos({name}) -> cos(A)",
         erase_dead_operands=_ERASABLE, keep_locations=False)
    for inner, name in ((m.Negate, "-A"), (m.Abs, "|A|")))

SQRT_OF_SQUARE = rule(m.Sqrt(m.Multiply("a", "a")),
                      lambda b, a, op: b.create(AbsOp, [a], result_type=op.results[0].type), when=_real,
                      name="sqrt(A * A) -> |A|", erase_dead_operands=_ERASABLE, keep_locations=False)

def _non_negative(value: SSAValue) -> bool:
    """Whether XLA's simplifier knows every element of ``value`` is non-negative (measured against jax.jit's
    optimized HLO, which keeps ``abs`` of everything else: ``sqrt``, ``rsqrt``, ``expm1``, ``cosh``, a logistic,
    a convert, ``max(A, B)`` of unknown operands, a product of two different values -- even two converts of one):
    an ``abs``, ``A * A`` of one value, ``exp``, a constant (or broadcast one) with no negative element,
    ``max`` with one such operand, ``min`` and ``select`` with two, ``pow`` of one."""
    owner = value.owner
    if isinstance(owner, (AbsOp, ExpOp)):
        return True
    if isinstance(owner, MulOp):
        return owner.operands[0] is owner.operands[1]
    if isinstance(owner, MaxOp):
        return _non_negative(owner.operands[0]) or _non_negative(owner.operands[1])
    if isinstance(owner, MinOp):
        return _non_negative(owner.operands[0]) and _non_negative(owner.operands[1])
    if isinstance(owner, ew.SelectOp):
        return _non_negative(owner.operands[1]) and _non_negative(owner.operands[2])
    if isinstance(owner, PowOp):
        return _non_negative(owner.operands[0])
    constant = _constant_array(value)
    return constant is not None and constant.dtype.kind in "fiu" and bool(np.all(constant >= 0))


_SIGN_FOLDED = _REAL | frozenset({"s8", "s16", "s32", "s64"})
"""Element types whose non-negative values XLA's simplifier folds on (:func:`_non_negative`): the floats it sees as
they are and the signed integers, whose ``A * A`` and ``abs`` wrap to negative values it takes as non-negative all
the same (unsigned values are non-negative anyway)."""


# ``abs(A)`` -> ``A`` for a non-negative ``A`` (XLA's simplifier, ``HandleAbs``): ``abs(abs(x))``, ``abs(x * x)``,
# ``abs(exp(x))``... A NaN ``A`` keeps its sign (``abs`` would clear it), and a value that was ``abs(abs(x))`` is
# ``abs(x)`` itself, which a select's max/min pattern sees (``where(y > abs(abs(x)), abs(x), y)`` is XLA's min:
# long fuzz campaign seed 29's sibling). Measured f16/f32/f64, and signed integers, whose wrapped square stays
# negative (int8 ``abs(x * x)`` at ``x = 20`` is -112 in XLA: long fuzz campaign, session 20).
ABS_OF_NON_NEGATIVE = rule(m.Abs("a"), "a", when=lambda a, op: _eligible(op, _SIGN_FOLDED) and _non_negative(a),
                           name="abs(A) -> A for A non-negative", erase_dead_operands=_ERASABLE,
                           keep_locations=False)


def _sign_test(folded: dict):
    """A rule folding ``compare(A, 0)`` (or ``compare(0, A)``, ``folded`` keyed by the direction) of a non-negative
    ``A`` to the constant ``folded[direction]``."""
    def when(a, op):
        found = folded.get(op.properties["comparison_direction"].data)
        return (found is not None and element_name(a) in _SIGN_FOLDED and not computes_on_quantized(op)
                and _non_negative(a))

    def fold(b, a, op):
        value = folded[op.properties["comparison_direction"].data]
        return b.constant_of_type(np.full(tuple(op.results[0].type.get_shape()), value), op.results[0].type)

    return when, fold


_ZERO_ON_THE_RIGHT = _sign_test({"GE": True, "LT": False})
_ZERO_ON_THE_LEFT = _sign_test({"LE": True, "GT": False})

# ``A >= 0`` -> true and ``A < 0`` -> false (and ``0 <= A``, ``0 > A``) for a non-negative ``A`` (XLA's simplifier,
# ``HandleCompare``): a NaN ``A`` too (f32 ``x * x >= 0`` of NaN is true in XLA), and a signed integer square or
# abs that wrapped (int8 ``x * x >= 0`` at ``x = 20``, ``jnp.abs(x) >= 0`` at -128: true in XLA). Measured f32, int8,
# int32, int64, straight-line and in loops (session 20).
SIGN_TESTS_OF_NON_NEGATIVE = (
    rule(m.Compare("a", _all(0)), _ZERO_ON_THE_RIGHT[1], when=_ZERO_ON_THE_RIGHT[0],
         name="A >= 0 -> true, A < 0 -> false for A non-negative", keep_locations=False),
    rule(m.Compare(_all(0), "a"), _ZERO_ON_THE_LEFT[1], when=_ZERO_ON_THE_LEFT[0],
         name="0 <= A -> true, 0 > A -> false for A non-negative", keep_locations=False),
)


# ``min(A, +inf)``, ``max(A, -inf)`` -> ``A`` (XLA's simplifier; measured: f32/bf16 subnormals kept, NaNs as they
# are; long fuzz campaign seed 9), a constant on either side.
INFINITE_BOUND_RULES = (
    rule(m.Minimum("a", _all(np.inf)), "a", when=_identity_eligible, name="min(A, +inf) -> A",
         erase_dead_operands=_ERASABLE, keep_locations=False),
    rule(m.Minimum(_all(np.inf), "a"), "a", when=_identity_eligible, name="min(+inf, A) -> A",
         erase_dead_operands=_ERASABLE, keep_locations=False),
    rule(m.Maximum("a", _all(-np.inf)), "a", when=_identity_eligible, name="max(A, -inf) -> A",
         erase_dead_operands=_ERASABLE, keep_locations=False),
    rule(m.Maximum(_all(-np.inf), "a"), "a", when=_identity_eligible, name="max(-inf, A) -> A",
         erase_dead_operands=_ERASABLE, keep_locations=False),
)


# ``max(C, A)`` -> ``max(A, C)``, ``min(C, A)`` -> ``min(A, C)`` for a constant ``C`` (or a broadcast of one): XLA's
# simplifier puts the constant operand of a commutative op on the right. Values are the same; the sign of a NaN
# result is not (a NaN ``A`` keeps its sign on the left, takes ``C``'s on the right: measured,
# ``jnp.maximum(0.0, -nan)`` is ``-nan`` in XLA CPU).
CONSTANT_ON_THE_RIGHT = rule(
    m.Op((MaxOp, MinOp), CONSTANT.bind("c"), NON_CONSTANT.bind("a")),
    lambda b, a, c, op: b.create(type(op), [a, c], dict(op.properties), op.results[0].type),
    when=_identity_eligible, name="max/min(C, A) -> max/min(A, C)", erase_dead_operands=_ERASABLE,
    keep_locations=False)


def _log_of_power(b, base, exponent, op):
    t = op.results[0].type
    return b.create(MulOp, [b.create(LogOp, [b.create(AbsOp, [base], result_type=t)], result_type=t), exponent],
                    result_type=t)


def _log_of_root(b, a, op, sign: float):
    t = op.results[0].type
    log = b.create(LogOp, [a], result_type=t)
    return b.create(MulOp, [log, b.splat(0.5 * sign, t)], result_type=t)


# XLA's ``HandleLog``, whatever the inner op's other uses; real types only: jax.jit computes complex
# ``ln(pow(A, B))``, ``ln(exp(A))`` and ``ln(sqrt(A))`` as written (measured, c64).
_log = dict(when=_real, erase_dead_operands=_ERASABLE, keep_locations=False)
LOG_RULES = (
    rule(m.Log(m.Exp("a")), "a", name="ln(exp(A)) -> A", **_log),
    # (a negative base gives a finite value where pow gives NaN)
    rule(m.Log(m.Power("base", "exponent")), _log_of_power, name="ln(pow(A, B)) -> ln|A| * B", **_log),
    rule(m.Log(m.Sqrt("a")), lambda b, a, op: _log_of_root(b, a, op, 1.0), name="ln(sqrt(A)) -> ln(A) * 0.5",
         **_log),
    rule(m.Log(m.Rsqrt("a")), lambda b, a, op: _log_of_root(b, a, op, -1.0),
         name="ln(rsqrt(A)) -> ln(A) * -0.5", **_log),
)


class SubtractConstant(RewritePattern):
    """``A - C`` -> ``A + (-C)`` (exact; lets ``(A - C1) - C2`` fold like additions)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SubOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op):
            return
        a, b = op.operands
        found = _full_constant(b)
        if found is None or _full_constant(a) is not None:
            return
        t = op.results[0].type
        _replace(rewriter, op, _emit(rewriter, AddOp, [a, _emit_constant(rewriter, np.negative(found[0]), t)], t))


class SubtractionFromConstant(RewritePattern):
    """``C - (X - Y)`` -> ``C + (Y - X)`` for an f32/f64 constant ``C`` that is not -0 (a splat), the inner
    subtraction used once: LLVM's instcombine inside XLA's fused loop ("Z - (X - Y) --> Z + (Y - X)" when ``Z``
    cannot be -0; exact in IEEE arithmetic). It changes results where ``C`` is a negative subnormal, which the CPU
    reads as -0 under denormals-are-zero: ``jnp.float32(-1e-45) - (x - y)`` with ``x == y`` is +0 in XLA, -0 computed
    as written (long fuzz campaign seed 52; measured f32 with ``x == y`` of both signs and ``x != y``); and of two
    NaNs it returns ``Y``'s, as XLA."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SubOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op, {"f32", "f64"}):
            return
        c, inner_value = op.operands
        inner = _defining(inner_value, SubOp)
        found = _full_constant(c)
        if inner is None or found is None or not found[1] or inner.parent_block() is not op.parent_block():
            return
        value = np.asarray(found[0]).reshape(-1)[0]
        if (value == 0 and np.signbit(value)) or len(list(inner_value.uses)) != 1:
            return
        x, y = inner.operands
        t = op.results[0].type
        _replace(rewriter, op, _emit(rewriter, AddOp, [c, _emit(rewriter, SubOp, [y, x], inner_value.type)], t))
        if inner.parent is not None and inner.results[0].first_use is None:
            rewriter.erase(inner)


class SimplifyPower(RewritePattern):
    """``pow(exp(A), B)`` -> ``exp(A*B)``; ``pow(A, 2)`` -> ``A*A``; ``pow(A, 3)`` -> ``A*(A*A)``;
    ``pow(A, -1)`` -> ``1/A``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: PowOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op):
            return
        a, b = op.operands
        t = op.results[0].type
        if _is_all(b, 0) or _is_all(b, 1):
            return  # pow(A, 0) -> 1 and pow(A, 1) -> A are exact
        base = _defining(a, ExpOp)
        if base is not None:
            product = _emit(rewriter, MulOp, [base.operands[0], b], t)
            _replace(rewriter, op, _emit(rewriter, ExpOp, [product], t))
        elif _is_all(b, 2):
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, a], t))
        elif _is_all(b, 3):
            square = _emit(rewriter, MulOp, [a, a], t)
            _replace(rewriter, op, _emit(rewriter, MulOp, [a, square], t))
        elif _is_all(b, -1):
            one = _emit_constant(rewriter, np.ones((), dtype=_constant(b)[0].dtype), t)
            _replace(rewriter, op, _emit(rewriter, DivOp, [one, a], t))
        elif _is_all(b, 0.5) and element_name(a) in _REAL:
            # Not XLA's simplifier but LLVM's (LibCallSimplifier, without fast-math flags), on XLA CPU's
            # fused loop where the exponent is a constant: pow(A, 0.5) -> A == -inf ? +inf : |sqrt(A)|
            # (the |.| makes pow(-0, 0.5) = +0). libm's pow differs from sqrt in the last bit on ~0.1%.
            dtype = _constant(b)[0].dtype
            root = _emit(rewriter, AbsOp, [_emit(rewriter, SqrtOp, [a], t)], t)
            minus_inf = _emit_constant(rewriter, np.array(-np.inf, dtype), t)
            is_minus_inf = _emit(rewriter, ew.CompareOp, [a, minus_inf], make_tensor(pred_type(), t.get_shape()),
                                 {"comparison_direction": StringAttr("EQ"), "compare_type": StringAttr("FLOAT")})
            plus_inf = _emit_constant(rewriter, np.array(np.inf, dtype), t)
            _replace(rewriter, op, _emit(rewriter, ew.SelectOp, [is_minus_inf, plus_inf, root], t))


def _preserves_values(source: np.dtype, intermediate: np.dtype) -> bool:
    """XLA's ``CastPreservesValues`` for float and integer types: every ``source`` value survives a conversion
    to ``intermediate`` (a float of at least the exponent range and mantissa, an integer of the range)."""
    if source.kind == "f" or source.kind == "V" or intermediate.kind in "fV":
        if not (_is_float(source) and _is_float(intermediate)):
            return False
        s, i = ml_dtypes.finfo(source), ml_dtypes.finfo(intermediate)
        return i.nmant >= s.nmant and i.maxexp >= s.maxexp and i.minexp <= s.minexp
    if source.kind in "iu" and intermediate.kind in "iu":
        s, i = np.iinfo(source), np.iinfo(intermediate)
        return i.min <= s.min and i.max >= s.max
    return False


def _is_float(dtype: np.dtype) -> bool:
    try:
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return False
    return True


def _convert_pair_is_no_op(x, middle, op) -> bool:
    """XLA's ``IsConvertPairNoOp``: ``middle``'s type holds every value of ``x``'s (neither convert quantized)."""
    if computes_on_quantized(op) or computes_on_quantized(middle.owner):
        return False
    try:
        a, b = numpy_dtype(x.type), numpy_dtype(middle.type)
    except Exception:  # noqa: BLE001 - element types without a NumPy dtype are left alone
        return False
    return _preserves_values(np.dtype(a), np.dtype(b))


# ``convert(convert(x: A) -> B) -> A`` -> ``x`` where ``B`` holds every value of ``A``: a bf16 subnormal kept
# through f64, a signalling NaN not quieted (``x`` replaces the op only with its exact type).
CONVERT_PAIR = rule(m.Convert(m.Convert("x").bind("middle")), "x", when=_convert_pair_is_no_op,
                    name="convert(convert(x: A) -> B) -> A -> x where B holds A")


_MERGED_TYPES = frozenset({"f32", "f64", "c64", "c128"})
"""Element types whose reduce of a reduce XLA CPU merges as written (measured f32, f64, c64; bf16 and f16 sums reach
the simplifier as f32 sums between converts, which keep the two reduces apart)."""

_COMMUTATIVE_BODIES = (AddOp, MulOp, ew.AndOp, ew.OrOp)


def _body_ops(reduce: Operation) -> list[Operation] | None:
    """The ops of a single-input ``reduce``'s body (its block of two arguments), or None."""
    block = reduce.regions[0].blocks.first if reduce.regions and reduce.regions[0].blocks else None
    if block is None or len(block.args) != 2 or reduce.regions[0].blocks.last is not block:
        return None
    return list(block.ops)


def _same_body(a: Operation, b: Operation) -> bool:
    """XLA's ``ReductionComputationsEquivalent``: the two bodies are the same computation (op by op, the same
    properties, operands at the same places), or each is one ``add``/``multiply``/``and``/``or`` of its two
    parameters in either order."""
    ops_a, ops_b = _body_ops(a), _body_ops(b)
    if ops_a is None or ops_b is None or len(ops_a) != len(ops_b):
        return False
    block_a, block_b = a.regions[0].blocks.first, b.regions[0].blocks.first
    if len(ops_a) == 2 and type(ops_a[0]) is type(ops_b[0]) and isinstance(ops_a[0], _COMMUTATIVE_BODIES):
        return all(len(op.operands) == 2 and set(op.operands) == set(blk.args)
                   and len(ret.operands) == 1 and ret.operands[0] is op.results[0]
                   for op, ret, blk in ((ops_a[0], ops_a[1], block_a), (ops_b[0], ops_b[1], block_b)))
    places: dict[SSAValue, SSAValue] = dict(zip(block_a.args, block_b.args))
    for op_a, op_b in zip(ops_a, ops_b):
        if (type(op_a) is not type(op_b) or op_a.regions or op_b.regions or op_a.properties != op_b.properties
                or len(op_a.operands) != len(op_b.operands) or len(op_a.results) != len(op_b.results)
                or any(places.get(x) is not y for x, y in zip(op_a.operands, op_b.operands))
                or [r.type for r in op_a.results] != [r.type for r in op_b.results]):
            return False
        if isinstance(op_a, ConstantOp) and not _identical_constants(op_a.results[0], op_b.results[0]):
            return False
        places.update(zip(op_a.results, op_b.results))
    return True


def _identical_constants(a: SSAValue, b: SSAValue) -> bool:
    x, y = _constant_array(a), _constant_array(b)
    return (x is not None and y is not None and x.dtype == y.dtype and x.shape == y.shape
            and x.tobytes() == y.tobytes())


class MergeReduces(RewritePattern):
    """``reduce(reduce(X, dims1, I), dims2, I)`` -> ``reduce(X, dims1 + dims2, I)`` (one input, the same body
    and init value): XLA's ``AlgebraicSimplifier::HandleReduce`` (``MergeReduces``), which merges however many
    other ops read the inner reduce (they keep it). A sum of a sum is then one sum over both sets of dimensions,
    in XLA CPU's order for it (YNNPACK's for 4,096 elements or more), not a sum of partial sums. Measured
    against jax 0.10.2's compiled HLO: merged for add, max, min and multiply bodies, an init value the same
    constant (bit for bit: NaN with NaN) or the same parameter, f32, f64 and c64, the inner reduce read by other
    ops too, three reduces in a row, and through a reshape between them when the outer reduce reduces every
    dimension (``keepdims=True``: XLA's reduce-of-reshape rule first); not merged for different bodies
    (a sum of a max), different init values, or bf16/f16 sums (converts between them)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        if len(op.operands) != 2 or element_name(op.results[0]) not in _MERGED_TYPES or computes_on_quantized(op):
            return
        arg, init = op.operands
        reshape = None
        outer_dims = sorted(ints(op.dimensions))
        if (isinstance(arg.owner, (dm.ReshapeOp, dm.BroadcastInDimOp)) and len(outer_dims) == len(arg.type.get_shape())
                and arg.owner.operands[0].type.element_count() == arg.type.element_count()):
            # A full reduction of a reshape (jax's keepdims is a broadcast_in_dim XLA makes a reshape): XLA reduces
            # the reshape's operand instead.
            reshape = arg.owner
            arg = reshape.operands[0]
            outer_dims = list(range(len(arg.type.get_shape())))
        inner = arg.owner
        if (not isinstance(inner, ReduceOp) or len(inner.operands) != 2 or inner.parent_block() is not op.parent_block()
                or (reshape is not None and reshape.parent_block() is not op.parent_block())
                or computes_on_quantized(inner)):
            return
        if not (init is inner.operands[1] or _identical_constants(init, inner.operands[1])) or not _same_body(op, inner):
            return
        counts = [v.type.element_count() for v in (inner.operands[0], arg, op.results[0])]
        if 0 in counts or counts[0] == counts[1] or counts[1] == counts[2]:
            return  # (XLA makes a reduce of no elements a broadcast, one that keeps every element a reshape)
        inner_dims = sorted(ints(inner.dimensions))
        for d in inner_dims:  # (XLA's MergeReduces: the outer dimensions in the inner operand's numbering)
            outer_dims = [e + 1 if e >= d else e for e in outer_dims]
        merged = create(ReduceOp, [inner.operands[0], init], {"dimensions": i64s(sorted(inner_dims + outer_dims))},
                        [op.results[0].type], regions=[op.regions[0].clone()])
        merged.attributes.update(op.attributes)
        rewriter.replace(op, merged)
        for dead in (reshape, inner):
            if dead is not None and dead.parent is not None and all(r.first_use is None for r in dead.results):
                rewriter.erase(dead)


_IDENTITIES = {AddOp: (0.0,), MulOp: (1.0,), MaxOp: (-np.inf,), MinOp: (np.inf,)}


def _combining_op(reduce: Operation) -> Operation | None:
    """The op of a single-input ``reduce`` whose body is that one op of its two parameters, returned; else None."""
    body = _body_ops(reduce)
    if body is None or len(body) != 2:
        return None
    combine, ret = body
    block = reduce.regions[0].blocks.first
    if set(combine.operands) != set(block.args) or list(ret.operands) != [combine.results[0]]:
        return None
    return combine


def _identity_init(reduce: Operation) -> bool:
    """Whether ``reduce``'s body is one ``add``/``multiply``/``max``/``min`` of its two parameters and its init
    value a constant identity of it (a zero of either sign for ``add``, 1, -inf, +inf)."""
    combine = _combining_op(reduce)
    if combine is None or type(combine) not in _IDENTITIES:
        return False
    init = _constant_array(reduce.operands[1])
    return init is not None and init.size == 1 and complex(init.reshape(-1)[0]) in _IDENTITIES[type(combine)]


_YNNPACK_WINDOW_TYPES = {AddOp: ("f32", "f64"), MaxOp: ("bf16", "f16", "f32", "f64"),
                         MinOp: ("bf16", "f16", "f32", "f64")}
"""The bodies and element types of the reduces (and window reductions) XLA CPU gives YNNPACK."""


class ReduceWindowOfDisjointWindows(RewritePattern):
    """``reduce_window`` whose windows do not overlap (each window size equal to its stride, no dilation) over
    4,096 elements or more, with a body YNNPACK reduces (an ``add`` of f32/f64, a ``max``/``min`` of
    bf16/f16/f32/f64) -> ``reduce(reshape(X))`` over the split-off window dimensions (``pad`` first for the
    padding, the remainder a VALID window leaves dropped): XLA CPU gives such a window reduction to YNNPACK
    (``__ynn_fusion``: flax's ``avg_pool``/``max_pool`` with stride = window), which sums each window as that
    reduce, the inner window dimension first (``(a00 + a01) + (a10 + a11)`` for 2 x 2), not in XLA's own window
    order. Measured bitwise against jax.jit (f32, f64; windows 2 x 2, 4 x 4, 3 x 3, 8 x 8, 2 x 2 x 1, 1-D 2; NHWC
    and NCHW; SAME padding; an init value of 1; a fused producer). With padding only for an init value that is the
    body's identity (the padded elements then change nothing). Smaller arrays stay XLA's own window loop."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceWindowOp, rewriter: PatternRewriter) -> None:
        if len(op.operands) != 2 or computes_on_quantized(op):
            return
        combine = _combining_op(op)
        if combine is None or element_name(op.results[0]) not in _YNNPACK_WINDOW_TYPES.get(type(combine), ()):
            return
        x, init = op.operands
        shape, out_shape = x.type.get_shape(), op.results[0].type.get_shape()
        if max(x.type.element_count(), op.results[0].type.element_count()) < YNNPACK_MIN_ELEMENTS:
            return
        window = op.window()
        if (window.dimensions != window.strides or any(d != 1 for d in window.base_dilations)
                or any(d != 1 for d in window.window_dilations) or any(window.reversal)
                or all(d == 1 for d in window.dimensions)
                or any(lo < 0 or hi < 0 for lo, hi in window.padding)):
            return
        if any(lo or hi for lo, hi in window.padding):
            found = _constant(init)  # (jax passes the init value through a scalar broadcast_in_dim)
            if found is None or found[0].size != 1 or complex(found[0].reshape(-1)[0]) not in _IDENTITIES[type(combine)]:
                return
        low = [lo for lo, _ in window.padding]
        high = [out * w - size - lo for out, w, size, (lo, _) in zip(out_shape, window.dimensions, shape,
                                                                      window.padding)]
        element = x.type.element_type
        if any(low) or any(high):  # (the padding, less the elements of an incomplete last window)
            x = _emit(rewriter, dm.PadOp, [x, init],
                      tensor_type(element, [size + lo + hi for size, lo, hi in zip(shape, low, high)]),
                      {"edge_padding_low": i64s(low), "edge_padding_high": i64s(high),
                       "interior_padding": i64s([0] * len(shape))})
        split, reduced = [], []
        for out, w in zip(out_shape, window.dimensions):
            split.append(out)
            if w > 1:
                reduced.append(len(split))
                split.append(w)
        x = _emit(rewriter, dm.ReshapeOp, [x], tensor_type(element, split))
        reduce = create(ReduceOp, [x, init], {"dimensions": i64s(reduced)}, [op.results[0].type],
                        regions=[op.regions[0].clone()])
        reduce.attributes.update(op.attributes)
        rewriter.replace(op, reduce)


class ReduceWindowOfSingleElements(RewritePattern):
    """``reduce_window(X, I)`` -> ``X`` when every window holds one element (each window dimension of size 1,
    stride 1, no padding or dilation) and ``I`` is the body's identity: XLA's simplifier returns the operand (jax.jit's
    optimized HLO of ``jax.lax.cummax`` over one element is a copy), the init value never combined -- so an f32
    denormal is kept where ``max(-inf, x)`` under denormals-are-zero would flush it (long fuzz campaign, session 19).
    Not for bf16, which XLA computes in f32 first, with the max instruction (the kernel does the same)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceWindowOp, rewriter: PatternRewriter) -> None:
        if len(op.operands) != 2 or element_name(op.results[0]) == "bf16" or computes_on_quantized(op):
            return
        window = op.window()
        if (any(d != 1 for d in window.dimensions) or any(d != 1 for d in window.strides)
                or any(lo or hi for lo, hi in window.padding) or any(d != 1 for d in window.base_dilations)
                or any(d != 1 for d in window.window_dilations)):
            return
        if not _identity_init(op) or op.operands[0].type != op.results[0].type:
            return
        rewriter.replace_matched_op([], [op.operands[0]])


SCAN_BASE_LENGTH = 16
"""XLA CPU's ``ReduceWindowRewriter`` base length: a cumulative ``reduce_window`` over more elements is split into
blocks of this many (read in jax.jit's optimized HLO: ``jnp.cumsum`` of 64 elements is a scan of ``[4, 16]``)."""


class CumulativeWindowInBlocks(RewritePattern):
    """A cumulative ``reduce_window`` (``jnp.cumsum``, ``cumprod``, ``cummax``, ``cummin``: one window dimension as
    long as the array, stride 1, padded ``n - 1`` (inclusive) or ``n`` (exclusive) on one side) over more than
    :data:`SCAN_BASE_LENGTH` elements -> XLA's ``ReduceWindowRewriter`` tree: the scan dimension moved last,
    padded with the init value to a multiple of 16 and split into ``[n / 16, 16]``; each block scanned; the blocks'
    last (reverse: first) elements scanned exclusively (itself rewritten again past 16 blocks); each element then
    ``body(its in-block scan, its block's exclusive prefix)`` -- so ``jnp.cumsum`` of 64 f64 values rounds as
    ``(x0 + ... + x15) + (x16 + x17)`` at element 17, not in sequence (long fuzz campaign, session 19: 1 ULP off
    on elements 17-22 of a ``(3, 64)`` row). Bodies of one binary op of the two parameters; others are left as
    they are (not reproduced)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceWindowOp, rewriter: PatternRewriter) -> None:
        if len(op.operands) != 2 or computes_on_quantized(op):
            return
        combine = _combining_op(op)
        if combine is None or len(combine.operands) != 2:
            return
        x, init = op.operands
        shape = list(x.type.get_shape())
        window = op.window()
        scanned = [d for d in range(len(shape))
                   if window.dimensions[d] != 1 or window.padding[d] != (0, 0) or window.strides[d] != 1
                   or window.base_dilations[d] != 1 or window.window_dilations[d] != 1 or window.reversal[d]]
        if len(scanned) != 1:
            return
        d = scanned[0]
        n = shape[d]
        low, high = window.padding[d]
        if (n <= SCAN_BASE_LENGTH or window.dimensions[d] != n or window.strides[d] != 1
                or window.base_dilations[d] != 1 or window.window_dilations[d] != 1 or window.reversal[d]):
            return
        forward = low in (n - 1, n) and high == 0
        if not forward and not (high in (n - 1, n) and low == 0):
            return
        exclusive = (low if forward else high) == n
        block = op.regions[0].blocks.first
        swapped = list(combine.operands) == [block.args[1], block.args[0]]  # (body(a, b) computes b op a)
        element = x.type.element_type
        last = len(shape) - 1
        order = list(range(len(shape)))
        order[d], order[last] = last, d  # (XLA swaps the scan dimension with the last one)
        if d != last:
            x = _emit(rewriter, dm.TransposeOp, [x], tensor_type(element, [shape[k] for k in order]),
                      {"permutation": i64s(order)})
        moved = [shape[k] for k in order]
        padded = -(-n // SCAN_BASE_LENGTH) * SCAN_BASE_LENGTH
        blocks = padded // SCAN_BASE_LENGTH
        rank = len(shape)
        if padded != n:
            x = _emit(rewriter, dm.PadOp, [x, init], tensor_type(element, moved[:-1] + [padded]),
                      {"edge_padding_low": i64s([0] * rank), "edge_padding_high": i64s([0] * last + [padded - n]),
                       "interior_padding": i64s([0] * rank)})
        tiled = moved[:-1] + [blocks, SCAN_BASE_LENGTH]
        x = _emit(rewriter, dm.ReshapeOp, [x], tensor_type(element, tiled))

        def scan(value: SSAValue, length: int, pad: int, result_shape: list[int]) -> SSAValue:
            r = len(result_shape)
            padding = [0] * (2 * r)
            padding[2 * (r - 1) + (0 if forward else 1)] = pad
            rw = create(ReduceWindowOp, [value, init],
                        {"window_dimensions": i64s([1] * (r - 1) + [length]), "padding": i64s(padding)},
                        [tensor_type(element, result_shape)], regions=[op.regions[0].clone()])
            rewriter.insert(rw)
            return rw.results[0]

        within = scan(x, SCAN_BASE_LENGTH, SCAN_BASE_LENGTH - 1, tiled)
        edge = SCAN_BASE_LENGTH - 1 if forward else 0
        column = _emit(rewriter, dm.SliceOp, [within], tensor_type(element, tiled[:-1] + [1]),
                       {"start_indices": i64s([0] * (rank - 1) + [0, edge]),
                        "limit_indices": i64s(tiled[:-1] + [edge + 1]), "strides": i64s([1] * (rank + 1))})
        column = _emit(rewriter, dm.ReshapeOp, [column], tensor_type(element, tiled[:-1]))
        prefixes = scan(column, blocks, blocks, tiled[:-2] + [blocks + 1])
        start = 0 if forward else 1
        prefixes = _emit(rewriter, dm.SliceOp, [prefixes], tensor_type(element, tiled[:-1]),
                         {"start_indices": i64s([0] * (rank - 1) + [start]),
                          "limit_indices": i64s(tiled[:-2] + [start + blocks]), "strides": i64s([1] * rank)})
        prefixes = _emit(rewriter, dm.BroadcastInDimOp, [prefixes], tensor_type(element, tiled),
                         {"broadcast_dimensions": i64s(list(range(rank)))})
        operands = [prefixes, within] if swapped else [within, prefixes]
        result = _emit(rewriter, type(combine), operands, tensor_type(element, tiled))
        result = _emit(rewriter, dm.ReshapeOp, [result], tensor_type(element, moved[:-1] + [padded]))
        if d != last:
            result = _emit(rewriter, dm.TransposeOp, [result],
                           tensor_type(element, [(moved[:-1] + [padded])[k] for k in order]),
                           {"permutation": i64s(order)})
        if padded != n:
            result = _emit(rewriter, dm.SliceOp, [result], tensor_type(element, shape),
                           {"start_indices": i64s([0] * rank), "limit_indices": i64s(shape),
                            "strides": i64s([1] * rank)})
        if exclusive:
            edges = [0] * rank
            out = op.results[0].type.get_shape()
            result = _emit(rewriter, dm.PadOp, [result, init], tensor_type(element, out),
                           {"edge_padding_low": i64s(edges if not forward else
                                                      [1 if k == d else 0 for k in range(rank)]),
                            "edge_padding_high": i64s(edges if forward else
                                                       [1 if k == d else 0 for k in range(rank)]),
                            "interior_padding": i64s([0] * rank)})
        rewriter.replace_matched_op([], [result])


class ReduceKeepingEveryElement(RewritePattern):
    """``reduce(X, I, dims)`` -> ``reshape(X)`` when every reduced dimension has size 1 (as many results as
    elements): XLA's ``HandleReduce`` makes such a reduce a reshape, the init value never combined, so ``-0.0``
    stays ``-0.0`` in a sum (``+0.0`` when added to the init) and a denormal is not flushed; jax's ``mean``,
    ``sum``, ``max`` over an axis of one (long fuzz campaign seed 29). Measured against jax.jit's optimized HLO:
    for every body and init value, f32/f64/bf16; here only for an init the identity of an ``add``, ``multiply``,
    ``max`` or ``min`` body -- the StableHLO spec (and the conformance corpus) combine a non-identity init, which XLA
    drops."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        if (len(op.operands) != 2 or element_name(op.results[0]) not in (*_NATIVE, "bf16")
                or computes_on_quantized(op)):
            return
        arg = op.operands[0]
        if arg.type.element_count() != op.results[0].type.element_count() or not _identity_init(op):
            return
        reshape = create(dm.ReshapeOp, [arg], {}, [op.results[0].type])
        reshape.attributes.update(op.attributes)
        rewriter.replace(op, reshape)


class SumOfNegation(RewritePattern):
    """``reduce(negate(X), +0, add)`` -> ``negate(reduce(X, +0, add))``: XLA's simplifier sums ``X`` and negates the
    sum (measured in jax.jit's optimized HLO: ``jnp.sum(-x, axis=0)``, also when ``-x`` has other readers; not for
    an init of 1, a product, a max). The same value up to the sign of a zero sum (``-0`` in XLA: the sum of zeros
    is +0, negated) -- and a sum of a product then contracts each step into an FMA (``sum(-(r * x))``; the gradient
    of ``h - h.mean(0)`` in a training step, where the negation stood between the multiply and the sum)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        if (len(op.operands) != 2 or element_name(op.results[0]) not in _REAL or computes_on_quantized(op)
                or not isinstance(op.operands[0].owner, NegOp)):
            return
        if not isinstance(_combining_op(op), AddOp):
            return
        init = _constant_array(op.operands[1])
        if init is None or init.size != 1 or init.reshape(-1)[0] != 0 or np.signbit(init.reshape(-1)[0]):
            return
        summed = op.clone()
        summed.operands[0] = op.operands[0].owner.operands[0]
        rewriter.insert(summed)
        rewriter.replace_matched_op(create(NegOp, [summed.results[0]], {}, [op.results[0].type]))


def _contracts_one_term(dot: Operation) -> bool:
    """Whether every contracting dimension of ``dot`` has size 1 (each element is one product)."""
    dn = dot.dimension_numbers()
    lshape = dot.lhs.type.get_shape()
    return all(lshape[d] == 1 for d in dn.lhs_contracting_dimensions)


def _spread(rewriter: PatternRewriter, value: SSAValue, batch, free, contracting, result, at: int) -> SSAValue:
    """``value`` (a dot operand) without its size-1 ``contracting`` dimensions, its ``batch`` then ``free``
    dimensions in order, broadcast to the ``result`` type with the free dimensions at ``at`` (exact moves)."""
    t = value.type
    shape = t.get_shape()
    kept = [d for d in range(len(shape)) if d not in contracting]
    if len(kept) != len(shape):
        value = _emit(rewriter, dm.ReshapeOp, [value], tensor_type(t.element_type, [shape[d] for d in kept]))
    order = [kept.index(d) for d in (*batch, *free)]
    if order != sorted(order):
        value = _emit(rewriter, dm.TransposeOp, [value],
                      tensor_type(t.element_type, [shape[kept[i]] for i in order]), {"permutation": i64s(order)})
    dims = [*range(len(batch)), *range(at, at + len(free))]
    return _emit(rewriter, dm.BroadcastInDimOp, [value], tensor_type(t.element_type, result.type.get_shape()),
                 {"broadcast_dimensions": i64s(dims)})


class DotOfOneTerm(RewritePattern):
    """A dot whose contracting dimensions all have size 1 -> ``broadcast(lhs) * broadcast(rhs)``: XLA's simplifier
    makes every such dot (outer products, ``(M, 1) x (1, N)``, batched, any size and element type: measured in
    jax.jit's optimized HLO) a multiply of broadcasts, which its fusions then treat as any multiply -- contracted
    into the add that reads it (equinox's first ``Linear`` of one input feature: ``W x + b`` is one FMA per
    element in XLA), and a product of ``-0`` stays ``-0``. Operands and result of one element type only (a
    ``preferred_element_type`` product is left alone)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DotGeneralOp, rewriter: PatternRewriter) -> None:
        element = op.results[0].type.element_type
        if (computes_on_quantized(op) or op.lhs.type.element_type != element or op.rhs.type.element_type != element
                or not _contracts_one_term(op) or op.results[0].type.element_count() == 0):
            return
        dn = op.dimension_numbers()
        lfree, rfree = dn.free_dimensions(op.lhs.type.get_num_dims(), op.rhs.type.get_num_dims())
        batch = len(dn.lhs_batch_dimensions)
        result = op.results[0]
        lhs = _spread(rewriter, op.lhs, dn.lhs_batch_dimensions, lfree, dn.lhs_contracting_dimensions, result, batch)
        rhs = _spread(rewriter, op.rhs, dn.rhs_batch_dimensions, rfree, dn.rhs_contracting_dimensions, result,
                      batch + len(lfree))
        rewriter.replace(op, create(MulOp, [lhs, rhs], {}, [result.type]))


def _swapped_dot(dot: DotGeneralOp, result_type) -> Operation:
    """``dot_general(B, A)`` for ``dot`` = ``dot_general(A, B)``: its dimension numbers and precisions swapped, of
    ``result_type`` (the transpose of ``dot``'s result, or its reshape when a free dimension has size 1)."""
    dn = dot.dimension_numbers()
    swapped = DotDimensionNumbers(dn.rhs_contracting_dimensions, dn.lhs_contracting_dimensions,
                                  dn.rhs_batch_dimensions, dn.lhs_batch_dimensions)
    props = {k: v for k, v in dot.properties.items() if k not in swapped.to_props()}
    props.update(swapped.to_props())
    precision = dot.properties.get("precision_config")
    if precision is not None and len(precision.data) == 2:
        props["precision_config"] = ArrayAttr([precision.data[1], precision.data[0]])
    return create(DotGeneralOp, [dot.rhs, dot.lhs], props, [result_type])


class MatrixVectorProduct(RewritePattern):
    """A matrix-vector product XLA's dot emitter computes with its operands swapped, written as that product:

    * ``(1, K) x (K, N)`` whose rhs is stored ``(N, K)`` (``dot_general(v, W)`` contracting ``W``'s last
      dimension: equinox's last ``Linear`` of one output) -> ``reshape(dot_general(W, v))``: XLA's row-major
      matrix-vector emitter sums each element of the ``(N, K) x (K, 1)`` product;
    * ``(M, K) x (K, 1)`` whose lhs is stored ``(K, M)`` (contracted over its first dimension) ->
      ``reshape(dot_general(v, A))``: XLA's column-major matrix-vector emitter, the order of the vector-matrix
      product ``(1, K) x (K, M)``.

    Measured bitwise against jax.jit (f32 and f64, ``K`` 5..100, ``N``/``M`` 8..64; 2-D operands without batch
    dimensions). The result is the same array (a reshape of a size-1 dimension); only the order of the sums
    changes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: DotGeneralOp, rewriter: PatternRewriter) -> None:
        result = op.results[0]
        element = result.type.element_type
        if (element_name(result) not in ("f32", "f64") or op.lhs.type.element_type != element
                or op.rhs.type.element_type != element or computes_on_quantized(op)):
            return
        dn = op.dimension_numbers()
        if dn.lhs_batch_dimensions or len(dn.lhs_contracting_dimensions) != 1:
            return
        (lc,), (rc,) = dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions
        lshape, rshape = op.lhs.type.get_shape(), op.rhs.type.get_shape()
        lfree, rfree = dn.free_dimensions(len(lshape), len(rshape))
        m, n, k = math.prod(lshape[d] for d in lfree), math.prod(rshape[d] for d in rfree), lshape[lc]
        # (a vector of any rank whose free dimensions are all 1 -- one token's gradient, (1, 1, K) -- is the (1, K)
        # vector to XLA, whose DotDecomposer reshapes it: measured, the gradient of x @ W for x of (1, 1, K))
        if k < 2 or not ((m == 1 and n >= 2 and rc == 1 and len(rshape) == 2)
                         or (n == 1 and m >= 2 and lc == 0 and len(lshape) == 2)):
            return
        swapped_shape = [rshape[d] for d in rfree] + [lshape[d] for d in lfree]
        product = _swapped_dot(op, tensor_type(element, swapped_shape))
        rewriter.insert(product)
        rewriter.replace(op, create(dm.ReshapeOp, [product.results[0]], {}, [result.type]))


class ReduceOfDecomposedDot(RewritePattern):
    """``reduce(dot_general(A, B), lhs free dimensions)`` -> ``reduce(dot_general(reshape(A), B), 0)`` when ``A`` has
    several free dimensions leading it (``(batch, sequence, features) @ W``) and the reduce sums exactly those:
    XLA's ``DotDecomposer`` computes the dot on ``A`` reshaped to ``(batch * sequence, features)`` and reshapes the
    result back, and its simplifier folds the reduce of that reshape into a reduce of the dot's ``(batch *
    sequence, N)`` result over its first dimension -- summed in the order of that shape (XLA's windows of 32 rows,
    or YNNPACK's). A dense layer's bias gradient behind another layer, ``sum(g @ W.T, axis=(0, 1))`` (long fuzz
    campaign of layer gradients, session 21: 12-14 of 16 elements differed). f32 and f64, no batch dimensions, one
    input; the dot's other readers read the reshaped result back."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        if len(op.operands) != 2 or element_name(op.results[0]) not in ("f32", "f64") or computes_on_quantized(op):
            return
        dot = op.operands[0].owner
        if (not isinstance(dot, DotGeneralOp) or dot.parent_block() is not op.parent_block()
                or computes_on_quantized(dot) or len(dot.results) != 1):
            return
        dn = dot.dimension_numbers()
        lshape = dot.lhs.type.get_shape()
        lfree, _ = dn.free_dimensions(len(lshape), len(dot.rhs.type.get_shape()))
        contracting = list(dn.lhs_contracting_dimensions)
        if (dn.lhs_batch_dimensions or len(lfree) < 2 or lfree != list(range(len(lfree)))
                or sorted(ints(op.dimensions)) != list(range(len(lfree)))):
            return
        rows = math.prod(lshape[d] for d in lfree)
        flat_lhs = create(dm.ReshapeOp, [dot.lhs], {}, [tensor_type(dot.lhs.type.element_type,
                                                                   [rows, *(lshape[d] for d in contracting)])])
        props = {k: v for k, v in dot.properties.items()}
        props.update(DotDimensionNumbers([d - len(lfree) + 1 for d in contracting], dn.rhs_contracting_dimensions,
                                         [], []).to_props())
        shape = dot.results[0].type.get_shape()
        flat_dot = create(DotGeneralOp, [flat_lhs.results[0], dot.rhs], props,
                          [tensor_type(dot.results[0].type.element_type, [rows, *shape[len(lfree):]])])
        flat_dot.attributes.update(dot.attributes)
        reduce = create(ReduceOp, [flat_dot.results[0], op.operands[1]], {"dimensions": i64s([0])},
                        [op.results[0].type], regions=[op.regions[0].clone()])
        reduce.attributes.update(op.attributes)
        rewriter.insert_op(flat_lhs, InsertPoint.before(dot))
        rewriter.insert_op(flat_dot, InsertPoint.before(dot))
        rewriter.replace(op, reduce)
        if dot.results[0].first_use is not None:  # (the dot's other readers read the flat result reshaped back)
            back = create(dm.ReshapeOp, [flat_dot.results[0]], {}, [dot.results[0].type])
            rewriter.insert_op(back, InsertPoint.before(dot))
            rewriter.replace_all_uses_with(dot.results[0], back.results[0])
        rewriter.erase_op(dot)


class TransposeOfDot(RewritePattern):
    """``transpose(dot_general(A, B))`` -> ``dot_general(B, A)`` when the transpose only swaps the dot's two free
    dimensions (one of each operand, after its batch dimensions) and is the dot's only user: XLA's simplifier
    computes the swapped product, whose kernel sums each element in the order of the swapped shapes (a YNNPACK
    product ``(M, K) x (K, N)`` and ``(N, K) x (K, M)`` tile and split ``K`` differently). Measured in jax.jit's
    optimized HLO: equinox's ``Linear`` under ``vmap`` computes ``transpose(dot_general(W, x))``, which XLA runs as
    ``dot(x, W)``; batched products too; not when the dot has another reader, nor when a free dimension has size
    1 (the transpose is a bitcast there, removed first). Exact for every element type; only the order of the sums
    changes, so every type is rewritten."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.TransposeOp, rewriter: PatternRewriter) -> None:
        dot = op.operands[0].owner
        if (not isinstance(dot, DotGeneralOp) or computes_on_quantized(dot) or not dot.results[0].has_one_use()
                or _contracts_one_term(dot)):  # (a multiply in XLA: DotOfOneTerm)
            return
        lshape, rshape = dot.lhs.type.get_shape(), dot.rhs.type.get_shape()
        dn = dot.dimension_numbers()
        lfree, rfree = dn.free_dimensions(len(lshape), len(rshape))
        batch = len(dn.lhs_batch_dimensions)
        permutation = [int(p) for p in op.properties["permutation"].get_values()]
        if (len(lfree) != 1 or len(rfree) != 1 or permutation != [*range(batch), batch + 1, batch]
                or lshape[lfree[0]] == 1 or rshape[rfree[0]] == 1):
            return
        swapped = _swapped_dot(dot, op.results[0].type)
        if not dot_is_canonical(dot):
            swapped.attributes[SWAPPED_AFTER_DECOMPOSITION] = UnitAttr()  # (XLA canonicalizes first: small_dot)
        rewriter.replace(op, swapped)
        rewriter.erase(dot)


def _adds_parameters(scatter: Operation) -> bool:
    """XLA's ``Match(to_apply()->root_instruction(), m::Add(m::Parameter(), m::Parameter()))``: the update
    computation returns an ``add`` of two of its parameters."""
    block = scatter.regions[0].blocks.first if scatter.regions and scatter.regions[0].blocks else None
    if block is None or scatter.regions[0].blocks.last is not block:
        return False
    ret = block.last_op
    if ret is None or len(ret.operands) != 1 or not isinstance(ret.operands[0].owner, AddOp):
        return False
    return all(v in block.args for v in ret.operands[0].owner.operands)


def _additive_scatter(value: SSAValue, add: Operation) -> Operation | None:
    """The one-input ``scatter`` defining ``value`` when ``add`` is its only user and its update computation is
    an ``add`` of its parameters (XLA's conditions), else None."""
    scatter = value.owner
    if (not isinstance(scatter, ix.ScatterOp) or len(scatter.operands) != 3 or len(scatter.results) != 1
            or scatter.parent_block() is not add.parent_block() or computes_on_quantized(scatter)
            or not _adds_parameters(scatter)):
        return None
    if any(use.operation is not add for use in value.uses):
        return None
    return scatter


def _window(scatter: Operation) -> tuple[int, ...]:
    """The shape of a scatter's update window (its updates' window dimensions)."""
    dims = set(ints(scatter.update_window_dims))
    return tuple(s for k, s in enumerate(scatter.operands[2].type.get_shape()) if k in dims)


def _listed(op: Operation, name: str) -> tuple[int, ...]:
    value = op.properties.get(name)
    return () if value is None else tuple(ints(value))


def _flag(op: Operation, name: str) -> bool:
    value = op.properties.get(name)
    return value is not None and bool(value.value.data)


def _same_scatter_kind(a: Operation, b: Operation) -> bool:
    """Whether two scatters differ at most in the shape of their batch of indices (the same index vector, window,
    inserted dimensions, no batching dimensions): XLA's ``ScatterSimplifier`` gives them the same dimension
    numbers (indices flattened to ``[N, k]``) before ``HandleAdd`` compares them."""
    return (all(_listed(a, n) == _listed(b, n) for n in ("scatter_dims_to_operand_dims", "inserted_window_dims"))
            and not any(_listed(x, n) for x in (a, b) for n in ("input_batching_dims", "scatter_indices_batching_dims"))
            and _window(a) == _window(b) and a.operands[1].type.element_type == b.operands[1].type.element_type)


class AddOfScatter(RewritePattern):
    """``A + scatter(O, I, U)`` -> ``scatter(A + O, I, U)`` (and ``scatter(O, I, U) + A`` -> ``scatter(O + A, I,
    U)``) for a one-input scatter read by the add only whose update computation adds its parameters:
    ``HandleAdd``'s scatter rule. jax's gradient of a gather (``take_along_axis``, ``x[i]``) is such a scatter
    into zeros, added to the other terms of the cotangent; XLA then scatters into those terms, and ``A + 0`` is
    ``A``. What changes: a multiply in ``A`` is no longer an add's operand, so it is not contracted into an FMA
    (``contract-fma``; optax's softmax cross-entropy gradient, ``exp(z - max) * (1/n / sum) + scatter(0, label,
    -1/n)``, was an FMA at the labels), and several updates of one element add to ``A + O`` one at a time.

    Two such scatters added (the gradient of two gathers), with fewer updates together than the result has
    elements and the same kind (:func:`_same_scatter_kind`): as XLA, their inputs added and, when neither has
    sorted or unique indices, one scatter of both's indices and updates concatenated, computed as the left scatter
    into the sum and the right into that (the left's updates first: measured, 1-D and 2-D index batches of equal and
    different ranks); else the right scatter into the sum and the left into that. Scatters of other kinds are left
    apart (XLA's ``ScatterSimplifier`` normalizes them first: not reproduced)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp, rewriter: PatternRewriter) -> None:
        if not _eligible(op) or op.properties.get("broadcast_dimensions") is not None:
            return
        a, b = op.operands
        t = op.results[0].type
        if a is b or not a.type == b.type == t:
            return
        lhs, rhs = _additive_scatter(a, op), _additive_scatter(b, op)
        if lhs is None and rhs is None:
            return
        if lhs is not None and rhs is not None:
            self._both(op, lhs, rhs, rewriter)
            return
        scatter, other = (rhs, a) if rhs is not None else (lhs, b)
        operand = scatter.operands[0]
        total = _emit(rewriter, AddOp, [other, operand] if rhs is not None else [operand, other], t)
        self._scatter(rewriter, op, scatter, [total, *scatter.operands[1:]], dict(scatter.properties))
        rewriter.erase(scatter)

    @staticmethod
    def _scatter(rewriter: PatternRewriter, op: Operation | None, like: Operation, operands, props) -> SSAValue:
        new = create(ix.ScatterOp, operands, props, [like.results[0].type], regions=[like.regions[0].clone()])
        new.attributes.update(like.attributes)
        if op is None:
            rewriter.insert(new)
        else:
            rewriter.replace(op, new)
        return new.results[0]

    def _both(self, op: Operation, lhs: Operation, rhs: Operation, rewriter: PatternRewriter) -> None:
        (o_l, i_l, u_l), (o_r, i_r, u_r) = lhs.operands, rhs.operands
        if u_l.type.element_count() + u_r.type.element_count() >= lhs.results[0].type.element_count():
            return  # (XLA: concatenating the updates is not cheap, the add stays)
        if not _same_scatter_kind(lhs, rhs):
            return  # (not reproduced: XLA's scatter normalization decides)
        total = _emit(rewriter, AddOp, [o_l, o_r], op.results[0].type)
        if not any(_flag(x, f) for x in (lhs, rhs) for f in ("unique_indices", "indices_are_sorted")):
            # One scatter of the concatenated indices and updates: the left's updates, then the right's.
            first, second = lhs, rhs
        else:  # the left scatter into the right's result
            first, second = rhs, lhs
        inner = self._scatter(rewriter, None, first, [total, *first.operands[1:]], dict(first.properties))
        props = dict(second.properties)
        if first is lhs:
            props = {k: v for k, v in props.items() if k not in ("unique_indices", "indices_are_sorted")}
        self._scatter(rewriter, op, second, [inner, *second.operands[1:]], props)
        rewriter.erase(lhs)
        rewriter.erase(rhs)


def _hoisted_exp_of_an_argument(op: ExpOp) -> bool:
    """Whether ``op`` is an exp in a while body that XLA moves out of the loop as a fusion of its own, of a function
    argument: its operand a value the loop carries unchanged from a function argument, none of its readers moved
    out with it (they would fuse it). XLA computes it before the loop like the exp of an argument (measured:
    ``fori_loop(0, 3, lambda i, v: sin(exp(x2) + v * s), x0)`` on f32[6], 2 of 12 draws differed, the hoisted exp
    computed with ``expf``)."""
    if not moved_out_of_its_loop(op):
        return False
    loop = op.parent_op()
    argument = op.operands[0]
    if not isinstance(argument, BlockArgument) or argument.owner is not loop.body.block:
        return False
    started = loop.operands[argument.index]
    if not (isinstance(started, BlockArgument) and isinstance(loop.parent_op(), func.FuncOp)):
        return False
    return not any(moved_out_of_its_loop(u.operation) for u in op.results[0].uses)


class ExpInALoopOfItsOwn(RewritePattern):
    """Marks an f32 ``exp`` some of whose elements XLA CPU computes with the C library's ``expf``
    (:data:`lowering.kernels.scalar.GLIBC_EXP_TAIL`, which gives the measurements), at the top of a function,
    of one of its arguments (nothing for XLA to fuse into it):

    * over a 1-d array of ``n < 16`` elements, ``n % 8`` in 3, 5, 6, 7, the exp in a loop fusion of its own: read by
      a return and otherwise only by reduces (jax's exps of the same argument merged first, as XLA's CSE does:
      ``(exp(x), sum(exp(x)))`` is one multi-output fusion, the glibc values returned and summed in order; 3-15 of
      100 draws differed before); elements from ``8 * (n // 8)`` on;
    * over ``(2, k)``, ``k`` in 3, 5, 6, 7, read only by its full sum (the exp fused into the sum's loop, summed in
      2 lanes): every element.

    Not marked: exps in loops, of computed values, read by other ops (which fuse it), other shapes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ExpOp, rewriter: PatternRewriter) -> None:
        shape = tuple(op.results[0].type.get_shape())
        if GLIBC_EXP_TAIL in op.attributes or element_name(op.results[0]) != "f32" or computes_on_quantized(op):
            return
        if _hoisted_exp_of_an_argument(op):
            if len(shape) == 1 and 3 <= shape[0] < 16 and shape[0] % 8 in (3, 5, 6, 7):
                self._mark(op, 8 * (shape[0] // 8), rewriter)
            return
        if not isinstance(op.parent_op(), func.FuncOp) or not isinstance(op.operands[0], BlockArgument):
            return
        if len(shape) == 2 and shape[0] == 2 and shape[1] in (3, 5, 6, 7):
            readers = [use.operation for use in op.results[0].uses]
            if (len(readers) == 1 and isinstance(readers[0], ReduceOp) and len(readers[0].operands) == 2
                    and sorted(ints(readers[0].dimensions)) == [0, 1] and binary_body_ufunc(readers[0].body) is np.add
                    and exp_sum_lanes(shape, (0, 1), np.float32) == 2):
                self._mark(op, 0, rewriter)
            return
        if len(shape) != 1 or not 3 <= shape[0] < 16 or shape[0] % 8 not in (3, 5, 6, 7):
            return
        # (jax writes exp(x) once per use; XLA's CSE makes them one exp before fusing)
        twins = [u.operation for u in op.operands[0].uses if isinstance(u.operation, ExpOp)
                 and u.operation is not op and u.operation.parent is op.parent
                 and u.operation.results[0].type == op.results[0].type
                 and GLIBC_EXP_TAIL not in u.operation.attributes]
        readers = [u.operation for e in (op, *twins) for u in e.results[0].uses]
        if not any(isinstance(r, func.ReturnOp) for r in readers) or \
                not all(isinstance(r, (func.ReturnOp, ReduceOp)) for r in readers):
            return
        for twin in twins:
            rewriter.replace_op(twin, [], [op.results[0]])
        self._mark(op, 8 * (shape[0] // 8), rewriter)

    @staticmethod
    def _mark(op: Operation, start: int, rewriter: PatternRewriter) -> None:
        op.attributes[GLIBC_EXP_TAIL] = IntegerAttr(start, i64)
        rewriter.notify_op_modified(op)


@register_pass
@dataclass(frozen=True)
class XlaFloatRewritesPass(PatternPass):
    """``xla-float-rewrites``: XLA's float-result-changing algebraic simplifications (see the module doc)."""

    name = "xla-float-rewrites"
    PATTERNS = (NaNConstantOperand, *IDENTITY_RULES, FOLDED_BY_LLVM, FoldScalarConstants, FoldSplatConstants,
                SelectOfConstantPredicate,
                *NESTED_SELECTS,
                *EXTREMUM_OF_SELECT, *INFINITE_BOUND_RULES, SQRT_OF_SQUARE, ABS_OF_NON_NEGATIVE,
                *SIGN_TESTS_OF_NON_NEGATIVE,
                *COSINE_OF_SIGN_CHANGE,
                CONSTANT_ON_THE_RIGHT, ShapeRoundTrip, ExtremumOfNegation, DivideByFunction, DivideByConstant, DivideOfDivide, MultiplyOfExps,
                FoldMultiplyConstants, ConstantIntoBroadcast, FoldAddConstants, FactorPowerOfTwo, SubtractConstant,
                SubtractionFromConstant,
                SimplifyPower, *LOG_RULES, CONVERT_PAIR, ExcessPrecisionConvert, MergeReduces,
                ReduceKeepingEveryElement, SumOfNegation, AddOfScatter, DotOfOneTerm, ReduceOfDecomposedDot, TransposeOfDot,
                MatrixVectorProduct, ReduceWindowOfDisjointWindows, ReduceWindowOfSingleElements,
                CumulativeWindowInBlocks, ExpInALoopOfItsOwn)


@register_pass
@dataclass(frozen=True)
class XlaDivideByBroadcastPass(PatternPass):
    """``xla-divide-by-broadcast``: XLA CPU's ``A / broadcast(B)`` -> ``A * broadcast(1 / B)``
    (:class:`DivideByBroadcast`); run on the program as written, before ``canonicalize-broadcasts``,
    since XLA decides on the uses of ``B`` before broadcasts are merged."""

    name = "xla-divide-by-broadcast"
    PATTERNS = (DivideByBroadcast,)


def divides_by_broadcasts(module: Operation) -> bool:
    """Whether ``module`` has a float division by a broadcast value (explicit or implicit), which
    ``xla-divide-by-broadcast`` may rewrite (a cheap over-approximation)."""
    for op in module.walk():
        if isinstance(op, DivOp) and element_name(op.results[0]) in (*_REAL, "bf16"):
            divisor = op.operands[1]
            if (isinstance(divisor.owner, (dm.BroadcastInDimOp, dm.BroadcastOp))
                    or tuple(divisor.type.get_shape()) != tuple(op.results[0].type.get_shape())):
                return True
    return False


def _run_if(needed, pass_: PatternPass, module: ModuleOp, clone: bool) -> ModuleOp:
    """Run ``pass_`` on ``module`` (a copy with ``clone``) when ``needed(module)``; else return ``module``."""
    if not needed(module):
        return module
    if clone:
        module = module.clone()
    run(module, pass_, verify=False)
    return module


def xla_divide_by_broadcast(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """Run ``xla-divide-by-broadcast`` on ``module`` and return the result (a rewritten copy with
    ``clone``, or ``module`` itself when no division can be rewritten)."""
    return _run_if(divides_by_broadcasts, XlaDivideByBroadcastPass(), module, clone)


_ROOTS = (DivOp, MulOp, AddOp, SubOp, PowOp, LogOp, MaxOp, MinOp, ew.SelectOp, SqrtOp, AbsOp, ExpOp, CosineOp)
"""The root op classes of :data:`XlaFloatRewritesPass`'s element-wise patterns: a program without one of them (and
without the other ops :func:`needs_rewrites` names) is not copied and rewritten
(``tests/test_xla_numerics.py`` checks every pattern's root is covered)."""


def needs_rewrites(module: Operation) -> bool:
    """Whether ``module`` has an op some pattern may rewrite (a cheap over-approximation)."""
    return any((isinstance(op, _ROOTS) and element_name(op.results[0]) in (*_NATIVE, "bf16"))
               or (isinstance(op, ReduceOp)
                   and (isinstance(op.operands[0].owner, (ReduceOp, dm.ReshapeOp, dm.BroadcastInDimOp, NegOp))
                        or op.operands[0].type.element_count() == op.results[0].type.element_count()))
               or (isinstance(op, cv.ConvertOp) and (element_name(op.operands[0]) == "bf16"
                                                     or isinstance(op.operands[0].owner, cv.ConvertOp)))
               or (isinstance(op, dm.TransposeOp) and isinstance(op.operands[0].owner, DotGeneralOp))
               or isinstance(op, DotGeneralOp)
               or isinstance(op, ReduceWindowOp)
               or (isinstance(op, (AbsOp, ew.CompareOp)) and element_name(op.operands[0]) in _SIGN_FOLDED)
               for op in module.walk())


def xla_float_rewrites(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """Run ``xla-float-rewrites`` on ``module`` and return the result (a rewritten copy with
    ``clone``, or ``module`` itself when no op can be rewritten)."""
    return _run_if(needs_rewrites, XlaFloatRewritesPass(), module, clone)
