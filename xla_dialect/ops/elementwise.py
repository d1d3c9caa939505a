"""Element-wise ops: unary functions, binary arithmetic/logic, comparison, select, clamp.

The ops are generated from two tables, :data:`UNARY_OPS` and :data:`BINARY_OPS`:
each row gives the op name, the element kinds it accepts and how the result
element type follows from the operand's. Binary and comparison ops accept XLA's
implicit broadcasting (scalars, ``broadcast_dimensions``, degenerate dimensions
and their composition, as in the XLA compiler overview); the
``canonicalize-broadcasts`` pass makes it explicit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import ComplexType, DenseArrayBase, StringAttr, TensorType
from xdsl.ir import Attribute
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, result_def, traits_def, var_operand_def

from ..quant import expressed_type
from ..types import element_type_of
from .base import (
    set_quantized,
    i64_array,
    HloOp,
    check_same_types,
    complex_component,
    fail,
    fmt,
    ints,
    kind_of,
    make_tensor,
    pred_type,
    string,
    tensor, builder_method)

ALL = ("pred", "sint", "uint", "float", "complex")
INT = ("sint", "uint")
NUM = ("sint", "uint", "float", "complex")
FLT = ("float",)
FC = ("float", "complex")
LOGIC = ("pred", "sint", "uint")


@dataclass(frozen=True)
class ElementwiseSpec:
    """One row of the element-wise op tables."""

    mnemonic: str  # 'add' -> op name 'hlo.add'
    class_name: str
    kinds: tuple[str, ...]
    result: str = "same"  # 'same' | 'pred' | 'real' (complex -> component) | 'complex' (f32 -> c64)
    doc: str = ""


UNARY_OPS: list[ElementwiseSpec] = [
    ElementwiseSpec("abs", "AbsOp", ("sint", "float", "complex"), "real", "|x|; complex -> magnitude"),
    ElementwiseSpec("cbrt", "CbrtOp", FC, doc="cube root; complex as in StableHLO (XLA rejects it)"),
    ElementwiseSpec("ceil", "CeilOp", FLT),
    ElementwiseSpec("count_leading_zeros", "ClzOp", INT, doc="XLA Clz"),
    ElementwiseSpec("cosine", "CosineOp", FC),
    ElementwiseSpec("erf", "ErfOp", FLT, doc="error function"),
    ElementwiseSpec("exponential", "ExpOp", FC),
    ElementwiseSpec("exponential_minus_one", "Expm1Op", FC),
    ElementwiseSpec("floor", "FloorOp", FLT),
    ElementwiseSpec("imag", "ImagOp", FC, "real"),
    ElementwiseSpec("is_finite", "IsFiniteOp", FLT, "pred"),
    ElementwiseSpec("log", "LogOp", FC),
    ElementwiseSpec("log_plus_one", "Log1pOp", FC),
    ElementwiseSpec("logistic", "LogisticOp", FC),
    ElementwiseSpec("negate", "NegOp", NUM),
    ElementwiseSpec("not", "NotOp", LOGIC),
    ElementwiseSpec("popcnt", "PopcntOp", INT, doc="population count"),
    ElementwiseSpec("real", "RealOp", FC, "real"),
    ElementwiseSpec("round_nearest_afz", "RoundOp", FLT, doc="round half away from zero"),
    ElementwiseSpec("round_nearest_even", "RoundEvenOp", FLT, doc="round half to even"),
    ElementwiseSpec("rsqrt", "RsqrtOp", FC),
    ElementwiseSpec("sign", "SignOp", ("sint", "float", "complex")),
    ElementwiseSpec("sine", "SineOp", FC),
    ElementwiseSpec("sqrt", "SqrtOp", FC),
    ElementwiseSpec("tan", "TanOp", FC),
    ElementwiseSpec("tanh", "TanhOp", FC),
]

BINARY_OPS: list[ElementwiseSpec] = [
    ElementwiseSpec("add", "AddOp", ("pred",) + NUM),
    ElementwiseSpec("and", "AndOp", LOGIC),
    ElementwiseSpec("atan2", "Atan2Op", FC),
    ElementwiseSpec("complex", "ComplexOp", FLT, "complex", "complex(real, imag)"),
    ElementwiseSpec("divide", "DivOp", NUM),
    ElementwiseSpec("maximum", "MaxOp", ALL),
    ElementwiseSpec("minimum", "MinOp", ALL),
    ElementwiseSpec("multiply", "MulOp", ALL),
    ElementwiseSpec("or", "OrOp", LOGIC),
    ElementwiseSpec("power", "PowOp", NUM),
    ElementwiseSpec("remainder", "RemOp", ("sint", "uint", "float")),
    ElementwiseSpec("shift_left", "ShiftLeftOp", INT),
    ElementwiseSpec("shift_right_arithmetic", "ShiftRightArithmeticOp", INT),
    ElementwiseSpec("shift_right_logical", "ShiftRightLogicalOp", INT),
    ElementwiseSpec("subtract", "SubOp", NUM),
    ElementwiseSpec("xor", "XorOp", LOGIC),
]

COMPARISON_DIRECTIONS = ("EQ", "NE", "GE", "GT", "LE", "LT")
COMPARE_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def _result_element(spec: ElementwiseSpec, element_type: Attribute) -> Attribute:
    if spec.result == "pred":
        return pred_type()
    if spec.result == "real" and isinstance(element_type, ComplexType):
        return complex_component(element_type)
    if spec.result == "complex":
        return ComplexType(element_type)
    return element_type


def _check_kind(op_name: str, spec_kinds: Sequence[str], type_: TensorType, what: str) -> None:
    kind = kind_of(type_)
    if kind not in spec_kinds:
        fail(op_name, f"{what} has element type {type_.element_type}; "
             f"expected {'/'.join(spec_kinds)} elements")


def broadcast_shapes(
    op_name: str,
    lhs: Sequence[int],
    rhs: Sequence[int],
    broadcast_dimensions: Sequence[int],
) -> tuple[int, ...]:
    """The result shape of an element-wise binary op under XLA's broadcasting rules.

    Follows the XLA compiler overview: scalars broadcast freely; operands of
    different rank need ``broadcast_dimensions`` mapping each dimension of the
    lower-rank operand to a dimension of the higher-rank one (strictly
    increasing); then dimensions of size 1 broadcast against the other operand
    (degenerate broadcasting), which composes with the former.
    """
    lhs, rhs = tuple(lhs), tuple(rhs)
    bdims = tuple(broadcast_dimensions)
    if len(lhs) == len(rhs):
        if bdims and bdims != tuple(range(len(lhs))):
            fail(op_name, f"broadcast_dimensions {list(bdims)} must be empty or the identity for operands "
                          f"of the same rank {len(lhs)}")
        small_expanded, large = lhs, rhs
    else:
        small, large = (lhs, rhs) if len(lhs) < len(rhs) else (rhs, lhs)
        if not small and not bdims:
            return large
        if len(bdims) != len(small):
            fail(op_name, f"operands of rank {len(lhs)} and {len(rhs)} need broadcast_dimensions with "
                          f"{len(small)} entries (one per dimension of the lower-rank operand), got {list(bdims)}")
        for i, d in enumerate(bdims):
            if not 0 <= d < len(large):
                fail(op_name, f"broadcast dimension {d} is out of range for the higher-rank operand of rank {len(large)}")
            if i and d <= bdims[i - 1]:
                fail(op_name, f"broadcast_dimensions {list(bdims)} must be strictly increasing")
        for i, d in enumerate(bdims):
            if small[i] != large[d] and small[i] != 1 and large[d] != 1:
                fail(op_name, f"broadcast dimension {i} of the lower-rank operand (size {small[i]}) does not "
                              f"match dimension {d} of the higher-rank operand (size {large[d]})")
        small_expanded = implicit_broadcast_view(small, len(large), bdims)
    result = []
    for i, (a, b) in enumerate(zip(small_expanded, large)):
        if a == b or b == 1:
            result.append(a)
        elif a == 1:
            result.append(b)
        else:
            fail(op_name, f"operand shapes {list(lhs)} and {list(rhs)} are incompatible at dimension {i} "
                          f"({a} vs {b}); dimensions must be equal or one of them 1")
    return tuple(result)


def implicit_broadcast_dims(operand_shape: Sequence[int], result_rank: int,
                            broadcast_dimensions: Sequence[int]) -> tuple[int, ...]:
    """Where each dimension of a binary op's operand goes in its result under XLA's implicit broadcasting:
    the ``broadcast_in_dim`` dimensions that make the operand explicit (size-1 dimensions then broadcast
    as ``broadcast_in_dim`` allows). An operand of the result's rank maps to the identity, a scalar to
    nothing, a lower-rank operand by ``broadcast_dimensions`` (checked by :func:`broadcast_shapes`).

    The one statement of the rule that shape inference, ``canonicalize-broadcasts``, the kernels and the
    StableHLO exporter all follow."""
    rank = len(operand_shape)
    if rank == result_rank:
        return tuple(range(rank))
    if rank == 0:
        return ()
    return tuple(broadcast_dimensions)


def implicit_broadcast_view(operand_shape: Sequence[int], result_rank: int,
                            broadcast_dimensions: Sequence[int]) -> tuple[int, ...]:
    """``operand_shape`` placed in the result's rank (size 1 elsewhere): the shape to reshape an operand to
    so that NumPy's broadcasting, which is XLA's degenerate-dimension broadcasting, gives the result."""
    view = [1] * result_rank
    for i, d in enumerate(implicit_broadcast_dims(operand_shape, result_rank, broadcast_dimensions)):
        view[d] = operand_shape[i]
    return tuple(view)


class UnaryElementwiseOp(HloOp):
    """Base of element-wise unary ops (one operand, same shape result)."""

    SPEC: ClassVar[ElementwiseSpec]
    operand = operand_def()
    result = result_def()
    traits = traits_def(Pure())

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        _check_kind(cls.name, cls.SPEC.kinds, t, "operand")
        return [make_tensor(_result_element(cls.SPEC, t.element_type), t.get_shape())]


class BinaryElementwiseOp(HloOp):
    """Base of element-wise binary ops, with XLA's implicit broadcasting."""

    SPEC: ClassVar[ElementwiseSpec]
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    traits = traits_def(Pure())
    broadcast_dimensions = opt_prop_def(DenseArrayBase)

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lhs, rhs = (tensor(cls.name, t, f"operand #{i}") for i, t in enumerate(operand_types))
        if lhs.element_type != rhs.element_type:
            fail(cls.name, f"operands must have the same element type, got {fmt(lhs)} and {fmt(rhs)}")
        _check_kind(cls.name, cls.SPEC.kinds, lhs, "operand")
        if cls.SPEC.result == "complex" and element_type_of(lhs.element_type).xla_name not in ("f32", "f64"):
            fail(cls.name, f"operands must be f32 or f64 (XLA has only c64 and c128), got {fmt(lhs)}")
        shape = broadcast_shapes(cls.name, lhs.get_shape(), rhs.get_shape(), ints(props.get("broadcast_dimensions")))
        return [make_tensor(_result_element(cls.SPEC, lhs.element_type), shape)]


UNARY_SPECS: dict[str, ElementwiseSpec] = {s.mnemonic: s for s in UNARY_OPS}
BINARY_SPECS: dict[str, ElementwiseSpec] = {s.mnemonic: s for s in BINARY_OPS}



@irdl_op_definition
class AbsOp(UnaryElementwiseOp):
    """``hlo.abs``: element-wise |x|; complex -> magnitude."""

    name = "hlo.abs"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["abs"]



@irdl_op_definition
class CbrtOp(UnaryElementwiseOp):
    """``hlo.cbrt``: element-wise cube root; complex as in StableHLO (XLA rejects it)."""

    name = "hlo.cbrt"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["cbrt"]



@irdl_op_definition
class CeilOp(UnaryElementwiseOp):
    """``hlo.ceil``: element-wise ceil."""

    name = "hlo.ceil"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["ceil"]



@irdl_op_definition
class ClzOp(UnaryElementwiseOp):
    """``hlo.count_leading_zeros``: element-wise XLA Clz."""

    name = "hlo.count_leading_zeros"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["count_leading_zeros"]



@irdl_op_definition
class CosineOp(UnaryElementwiseOp):
    """``hlo.cosine``: element-wise cosine."""

    name = "hlo.cosine"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["cosine"]



@irdl_op_definition
class ErfOp(UnaryElementwiseOp):
    """``hlo.erf``: element-wise error function."""

    name = "hlo.erf"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["erf"]



@irdl_op_definition
class ExpOp(UnaryElementwiseOp):
    """``hlo.exponential``: element-wise exponential."""

    name = "hlo.exponential"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["exponential"]



@irdl_op_definition
class Expm1Op(UnaryElementwiseOp):
    """``hlo.exponential_minus_one``: element-wise exponential minus one."""

    name = "hlo.exponential_minus_one"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["exponential_minus_one"]



@irdl_op_definition
class FloorOp(UnaryElementwiseOp):
    """``hlo.floor``: element-wise floor."""

    name = "hlo.floor"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["floor"]



@irdl_op_definition
class ImagOp(UnaryElementwiseOp):
    """``hlo.imag``: element-wise imag."""

    name = "hlo.imag"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["imag"]



@irdl_op_definition
class IsFiniteOp(UnaryElementwiseOp):
    """``hlo.is_finite``: element-wise is finite."""

    name = "hlo.is_finite"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["is_finite"]



@irdl_op_definition
class LogOp(UnaryElementwiseOp):
    """``hlo.log``: element-wise log."""

    name = "hlo.log"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["log"]



@irdl_op_definition
class Log1pOp(UnaryElementwiseOp):
    """``hlo.log_plus_one``: element-wise log plus one."""

    name = "hlo.log_plus_one"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["log_plus_one"]



@irdl_op_definition
class LogisticOp(UnaryElementwiseOp):
    """``hlo.logistic``: element-wise logistic."""

    name = "hlo.logistic"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["logistic"]



@irdl_op_definition
class NegOp(UnaryElementwiseOp):
    """``hlo.negate``: element-wise negate."""

    name = "hlo.negate"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["negate"]



@irdl_op_definition
class NotOp(UnaryElementwiseOp):
    """``hlo.not``: element-wise not."""

    name = "hlo.not"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["not"]



@irdl_op_definition
class PopcntOp(UnaryElementwiseOp):
    """``hlo.popcnt``: element-wise population count."""

    name = "hlo.popcnt"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["popcnt"]



@irdl_op_definition
class RealOp(UnaryElementwiseOp):
    """``hlo.real``: element-wise real."""

    name = "hlo.real"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["real"]



@irdl_op_definition
class RoundOp(UnaryElementwiseOp):
    """``hlo.round_nearest_afz``: element-wise round half away from zero."""

    name = "hlo.round_nearest_afz"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["round_nearest_afz"]



@irdl_op_definition
class RoundEvenOp(UnaryElementwiseOp):
    """``hlo.round_nearest_even``: element-wise round half to even."""

    name = "hlo.round_nearest_even"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["round_nearest_even"]



@irdl_op_definition
class RsqrtOp(UnaryElementwiseOp):
    """``hlo.rsqrt``: element-wise rsqrt."""

    name = "hlo.rsqrt"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["rsqrt"]



@irdl_op_definition
class SignOp(UnaryElementwiseOp):
    """``hlo.sign``: element-wise sign."""

    name = "hlo.sign"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["sign"]



@irdl_op_definition
class SineOp(UnaryElementwiseOp):
    """``hlo.sine``: element-wise sine."""

    name = "hlo.sine"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["sine"]



@irdl_op_definition
class SqrtOp(UnaryElementwiseOp):
    """``hlo.sqrt``: element-wise sqrt."""

    name = "hlo.sqrt"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["sqrt"]



@irdl_op_definition
class TanOp(UnaryElementwiseOp):
    """``hlo.tan``: element-wise tan."""

    name = "hlo.tan"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["tan"]



@irdl_op_definition
class TanhOp(UnaryElementwiseOp):
    """``hlo.tanh``: element-wise tanh."""

    name = "hlo.tanh"
    SPEC: ClassVar[ElementwiseSpec] = UNARY_SPECS["tanh"]



@irdl_op_definition
class AddOp(BinaryElementwiseOp):
    """``hlo.add``: element-wise add."""

    name = "hlo.add"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["add"]



@irdl_op_definition
class AndOp(BinaryElementwiseOp):
    """``hlo.and``: element-wise and."""

    name = "hlo.and"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["and"]



@irdl_op_definition
class Atan2Op(BinaryElementwiseOp):
    """``hlo.atan2``: element-wise atan2."""

    name = "hlo.atan2"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["atan2"]



@irdl_op_definition
class ComplexOp(BinaryElementwiseOp):
    """``hlo.complex``: element-wise complex(real, imag)."""

    name = "hlo.complex"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["complex"]



@irdl_op_definition
class DivOp(BinaryElementwiseOp):
    """``hlo.divide``: element-wise divide."""

    name = "hlo.divide"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["divide"]



@irdl_op_definition
class MaxOp(BinaryElementwiseOp):
    """``hlo.maximum``: element-wise maximum."""

    name = "hlo.maximum"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["maximum"]



@irdl_op_definition
class MinOp(BinaryElementwiseOp):
    """``hlo.minimum``: element-wise minimum."""

    name = "hlo.minimum"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["minimum"]



@irdl_op_definition
class MulOp(BinaryElementwiseOp):
    """``hlo.multiply``: element-wise multiply."""

    name = "hlo.multiply"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["multiply"]



@irdl_op_definition
class OrOp(BinaryElementwiseOp):
    """``hlo.or``: element-wise or."""

    name = "hlo.or"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["or"]



@irdl_op_definition
class PowOp(BinaryElementwiseOp):
    """``hlo.power``: element-wise power."""

    name = "hlo.power"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["power"]



@irdl_op_definition
class RemOp(BinaryElementwiseOp):
    """``hlo.remainder``: element-wise remainder."""

    name = "hlo.remainder"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["remainder"]



@irdl_op_definition
class ShiftLeftOp(BinaryElementwiseOp):
    """``hlo.shift_left``: element-wise shift left."""

    name = "hlo.shift_left"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["shift_left"]



@irdl_op_definition
class ShiftRightArithmeticOp(BinaryElementwiseOp):
    """``hlo.shift_right_arithmetic``: element-wise shift right arithmetic."""

    name = "hlo.shift_right_arithmetic"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["shift_right_arithmetic"]



@irdl_op_definition
class ShiftRightLogicalOp(BinaryElementwiseOp):
    """``hlo.shift_right_logical``: element-wise shift right logical."""

    name = "hlo.shift_right_logical"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["shift_right_logical"]



@irdl_op_definition
class SubOp(BinaryElementwiseOp):
    """``hlo.subtract``: element-wise subtract."""

    name = "hlo.subtract"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["subtract"]



@irdl_op_definition
class XorOp(BinaryElementwiseOp):
    """``hlo.xor``: element-wise xor."""

    name = "hlo.xor"
    SPEC: ClassVar[ElementwiseSpec] = BINARY_SPECS["xor"]



UNARY_OP_CLASSES: dict[str, type[HloOp]] = {cls.SPEC.mnemonic: cls for cls in (
    AbsOp, CbrtOp, CeilOp, ClzOp, CosineOp, ErfOp, ExpOp, Expm1Op, FloorOp, ImagOp, IsFiniteOp, LogOp,
    Log1pOp, LogisticOp, NegOp, NotOp, PopcntOp, RealOp, RoundOp, RoundEvenOp, RsqrtOp, SignOp, SineOp,
    SqrtOp, TanOp, TanhOp)}
"""Unary op mnemonic -> op class."""
BINARY_OP_CLASSES: dict[str, type[HloOp]] = {cls.SPEC.mnemonic: cls for cls in (
    AddOp, AndOp, Atan2Op, ComplexOp, DivOp, MaxOp, MinOp, MulOp, OrOp, PowOp, RemOp, ShiftLeftOp,
    ShiftRightArithmeticOp, ShiftRightLogicalOp, SubOp, XorOp)}
"""Binary op mnemonic -> op class."""


@irdl_op_definition
class CompareOp(HloOp):
    """``hlo.compare``: element-wise comparison giving pred.

    ``comparison_direction`` is EQ/NE/GE/GT/LE/LT; ``compare_type`` is FLOAT
    (IEEE, NaN unordered), TOTALORDER (-NaN < -Inf < ... < -0 < +0 < ... < +Inf < NaN),
    SIGNED or UNSIGNED. Accepts the same implicit broadcasting as binary ops.
    """

    name = "hlo.compare"
    traits = traits_def(Pure())
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    comparison_direction = opt_prop_def(StringAttr)
    compare_type = opt_prop_def(StringAttr)
    broadcast_dimensions = opt_prop_def(DenseArrayBase)

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lhs, rhs = (tensor(cls.name, t, f"operand #{i}") for i, t in enumerate(operand_types))
        if lhs.element_type != rhs.element_type:
            fail(cls.name, f"operands must have the same element type, got {fmt(lhs)} and {fmt(rhs)}")
        direction = string(props.get("comparison_direction"))
        if direction not in COMPARISON_DIRECTIONS:
            fail(cls.name, f"comparison_direction must be one of {', '.join(COMPARISON_DIRECTIONS)}, got {direction!r}")
        ctype = string(props.get("compare_type"))
        if ctype is not None and ctype not in COMPARE_TYPES:
            fail(cls.name, f"compare_type must be one of {', '.join(COMPARE_TYPES)}, got {ctype!r}")
        kind = kind_of(lhs)
        # XLA's verifier ties compare_type to the element type (StableHLO compare C3).
        allowed = {"float": ("FLOAT", "TOTALORDER"), "complex": ("FLOAT",), "sint": ("SIGNED",),
                   "uint": ("UNSIGNED",), "pred": ("UNSIGNED",)}[kind]
        if ctype is not None and ctype not in allowed:
            fail(cls.name, f"compare_type {ctype} does not fit element type {lhs.element_type}; "
                           f"expected {' or '.join(allowed)}")
        if kind == "complex" and direction not in ("EQ", "NE"):
            fail(cls.name, f"complex operands only support EQ and NE, got {direction}")
        shape = broadcast_shapes(cls.name, lhs.get_shape(), rhs.get_shape(), ints(props.get("broadcast_dimensions")))
        return [make_tensor(pred_type(), shape)]


def default_compare_type(element_type: Attribute) -> str:
    """The compare_type XLA picks when none is given."""
    kind = element_type_of(element_type).kind
    return {"float": "FLOAT", "complex": "FLOAT", "sint": "SIGNED", "uint": "UNSIGNED", "pred": "UNSIGNED"}[kind]


@irdl_op_definition
class SelectOp(HloOp):
    """``hlo.select(pred, on_true, on_false)``: pred is a scalar or has the operands' shape."""

    name = "hlo.select"
    traits = traits_def(Pure())
    pred = operand_def()
    on_true = operand_def()
    on_false = operand_def()
    result = result_def()

    assembly_format = "$pred `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        pred, on_true, on_false = operand_types
        pred = tensor(cls.name, pred, "predicate")
        if kind_of(pred) != "pred":
            fail(cls.name, f"predicate must have pred elements, got {fmt(pred)}")
        check_same_types(cls.name, [on_true, on_false], "on_true and on_false")
        if isinstance(on_true, TensorType):
            if pred.get_shape() and pred.get_shape() != on_true.get_shape():
                fail(cls.name, f"predicate shape {fmt(pred)} must be a scalar or equal the operands' shape {fmt(on_true)}")
            return [make_tensor(on_true.element_type, on_true.get_shape())]
        if pred.get_shape():
            fail(cls.name, "selecting between tuples needs a scalar predicate")
        return [on_true]


@irdl_op_definition
class ClampOp(HloOp):
    """``hlo.clamp(min, operand, max)``: min/max are scalars or have the operand's shape."""

    name = "hlo.clamp"
    traits = traits_def(Pure())
    min = operand_def()
    operand = operand_def()
    max = operand_def()
    result = result_def()

    assembly_format = "$min `,` $operand `,` $max attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lo, x, hi = (tensor(cls.name, t, w) for t, w in zip(operand_types, ("min", "operand", "max")))
        for bound, what in ((lo, "min"), (hi, "max")):
            if bound.element_type != x.element_type:
                fail(cls.name, f"{what} {fmt(bound)} must have the operand's element type {x.element_type}")
            if bound.get_shape() and bound.get_shape() != x.get_shape():
                fail(cls.name, f"{what} {fmt(bound)} must be a scalar or have the operand's shape {fmt(x)}")
        if kind_of(x) == "complex":
            fail(cls.name, "complex operands cannot be clamped")
        return [make_tensor(x.element_type, x.get_shape())]


OPS = [*UNARY_OP_CLASSES.values(), *BINARY_OP_CLASSES.values(), CompareOp, SelectOp, ClampOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("compute", *(UNARY_OP_CLASSES[n] for n in (
    "abs", "cbrt", "ceil", "cosine", "erf", "exponential", "exponential_minus_one", "floor", "is_finite", "log",
    "log_plus_one", "logistic", "negate", "round_nearest_afz", "round_nearest_even", "rsqrt", "sign", "sine",
    "sqrt", "tan", "tanh")),
    *(BINARY_OP_CLASSES[n] for n in (
        "add", "atan2", "divide", "maximum", "minimum", "multiply", "power", "remainder", "subtract")),
    CompareOp, SelectOp, ClampOp)


# ----------------------------------------------------------------------------
# Builder methods (XLA client names, snake_case)
# ----------------------------------------------------------------------------

UNARY_BUILDER_NAMES = {
    "abs": "abs", "cbrt": "cbrt", "ceil": "ceil", "clz": "count_leading_zeros", "cos": "cosine",
    "erf": "erf", "exp": "exponential", "expm1": "exponential_minus_one", "floor": "floor",
    "imag": "imag", "is_finite": "is_finite", "log": "log", "log1p": "log_plus_one",
    "logistic": "logistic", "neg": "negate", "not_": "not", "population_count": "popcnt",
    "real": "real", "round": "round_nearest_afz", "round_nearest_even": "round_nearest_even",
    "rsqrt": "rsqrt", "sign": "sign", "sin": "sine", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh",
}
"""Builder method name -> unary op mnemonic."""

BINARY_BUILDER_NAMES = {
    "add": "add", "and_": "and", "atan2": "atan2", "complex": "complex", "div": "divide",
    "max": "maximum", "min": "minimum", "mul": "multiply", "or_": "or", "pow": "power",
    "rem": "remainder", "shift_left": "shift_left", "shift_right_arithmetic": "shift_right_arithmetic",
    "shift_right_logical": "shift_right_logical", "sub": "subtract", "xor": "xor",
}
"""Builder method name -> binary op mnemonic."""


class ElementwiseBuilder:
    """Builder methods of the element-wise family."""

    def _unary(self, op_cls, operand, result_type=None):
        """Emit unary ``op_cls``. ``result_type``: the result's element type, needed on quantized operands
        (a quantized type such as ``'!quant.uniform<i8:f32, 0.5:-3>'``, see
        :func:`xla_dialect.quant.uniform_quantized`)."""
        return self._emit1(op_cls, [operand], result_types=self._results_of_element(op_cls, [operand], {}, result_type))

    def _binary(self, op_cls, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Emit binary ``op_cls``; ``broadcast_dimensions`` maps the lower-rank operand's dimensions (XLA's
        implicit broadcasting); ``result_type`` as for :meth:`_unary`."""
        props = {"broadcast_dimensions": i64_array(broadcast_dimensions)} if broadcast_dimensions else {}
        return self._emit1(op_cls, [lhs, rhs], props,
                           result_types=self._results_of_element(op_cls, [lhs, rhs], props, result_type))

    @builder_method
    def abs(self, operand, result_type=None):
        """Element-wise ``hlo.abs`` (element-wise |x|; complex -> magnitude.); ``result_type``: see :meth:`_unary`."""
        return self._unary(AbsOp, operand, result_type)

    @builder_method
    def cbrt(self, operand, result_type=None):
        """Element-wise ``hlo.cbrt`` (element-wise cube root; complex as in StableHLO (XLA rejects it).); ``result_type``: see :meth:`_unary`."""
        return self._unary(CbrtOp, operand, result_type)

    @builder_method
    def ceil(self, operand, result_type=None):
        """Element-wise ``hlo.ceil`` (element-wise ceil.); ``result_type``: see :meth:`_unary`."""
        return self._unary(CeilOp, operand, result_type)

    @builder_method
    def clz(self, operand, result_type=None):
        """Element-wise ``hlo.count_leading_zeros`` (element-wise XLA Clz.); ``result_type``: see :meth:`_unary`."""
        return self._unary(ClzOp, operand, result_type)

    @builder_method
    def cos(self, operand, result_type=None):
        """Element-wise ``hlo.cosine`` (element-wise cosine.); ``result_type``: see :meth:`_unary`."""
        return self._unary(CosineOp, operand, result_type)

    @builder_method
    def erf(self, operand, result_type=None):
        """Element-wise ``hlo.erf`` (element-wise error function.); ``result_type``: see :meth:`_unary`."""
        return self._unary(ErfOp, operand, result_type)

    @builder_method
    def exp(self, operand, result_type=None):
        """Element-wise ``hlo.exponential`` (element-wise exponential.); ``result_type``: see :meth:`_unary`."""
        return self._unary(ExpOp, operand, result_type)

    @builder_method
    def expm1(self, operand, result_type=None):
        """Element-wise ``hlo.exponential_minus_one`` (element-wise exponential minus one.); ``result_type``: see :meth:`_unary`."""
        return self._unary(Expm1Op, operand, result_type)

    @builder_method
    def floor(self, operand, result_type=None):
        """Element-wise ``hlo.floor`` (element-wise floor.); ``result_type``: see :meth:`_unary`."""
        return self._unary(FloorOp, operand, result_type)

    @builder_method
    def imag(self, operand, result_type=None):
        """Element-wise ``hlo.imag`` (element-wise imag.); ``result_type``: see :meth:`_unary`."""
        return self._unary(ImagOp, operand, result_type)

    @builder_method
    def is_finite(self, operand, result_type=None):
        """Element-wise ``hlo.is_finite`` (element-wise is finite.); ``result_type``: see :meth:`_unary`."""
        return self._unary(IsFiniteOp, operand, result_type)

    @builder_method
    def log(self, operand, result_type=None):
        """Element-wise ``hlo.log`` (element-wise log.); ``result_type``: see :meth:`_unary`."""
        return self._unary(LogOp, operand, result_type)

    @builder_method
    def log1p(self, operand, result_type=None):
        """Element-wise ``hlo.log_plus_one`` (element-wise log plus one.); ``result_type``: see :meth:`_unary`."""
        return self._unary(Log1pOp, operand, result_type)

    @builder_method
    def logistic(self, operand, result_type=None):
        """Element-wise ``hlo.logistic`` (element-wise logistic.); ``result_type``: see :meth:`_unary`."""
        return self._unary(LogisticOp, operand, result_type)

    @builder_method
    def neg(self, operand, result_type=None):
        """Element-wise ``hlo.negate`` (element-wise negate.); ``result_type``: see :meth:`_unary`."""
        return self._unary(NegOp, operand, result_type)

    @builder_method
    def not_(self, operand, result_type=None):
        """Element-wise ``hlo.not`` (element-wise not.); ``result_type``: see :meth:`_unary`."""
        return self._unary(NotOp, operand, result_type)

    @builder_method
    def population_count(self, operand, result_type=None):
        """Element-wise ``hlo.popcnt`` (element-wise population count.); ``result_type``: see :meth:`_unary`."""
        return self._unary(PopcntOp, operand, result_type)

    @builder_method
    def real(self, operand, result_type=None):
        """Element-wise ``hlo.real`` (element-wise real.); ``result_type``: see :meth:`_unary`."""
        return self._unary(RealOp, operand, result_type)

    @builder_method
    def round(self, operand, result_type=None):
        """Element-wise ``hlo.round_nearest_afz`` (element-wise round half away from zero.); ``result_type``: see :meth:`_unary`."""
        return self._unary(RoundOp, operand, result_type)

    @builder_method
    def round_nearest_even(self, operand, result_type=None):
        """Element-wise ``hlo.round_nearest_even`` (element-wise round half to even.); ``result_type``: see :meth:`_unary`."""
        return self._unary(RoundEvenOp, operand, result_type)

    @builder_method
    def rsqrt(self, operand, result_type=None):
        """Element-wise ``hlo.rsqrt`` (element-wise rsqrt.); ``result_type``: see :meth:`_unary`."""
        return self._unary(RsqrtOp, operand, result_type)

    @builder_method
    def sign(self, operand, result_type=None):
        """Element-wise ``hlo.sign`` (element-wise sign.); ``result_type``: see :meth:`_unary`."""
        return self._unary(SignOp, operand, result_type)

    @builder_method
    def sin(self, operand, result_type=None):
        """Element-wise ``hlo.sine`` (element-wise sine.); ``result_type``: see :meth:`_unary`."""
        return self._unary(SineOp, operand, result_type)

    @builder_method
    def sqrt(self, operand, result_type=None):
        """Element-wise ``hlo.sqrt`` (element-wise sqrt.); ``result_type``: see :meth:`_unary`."""
        return self._unary(SqrtOp, operand, result_type)

    @builder_method
    def tan(self, operand, result_type=None):
        """Element-wise ``hlo.tan`` (element-wise tan.); ``result_type``: see :meth:`_unary`."""
        return self._unary(TanOp, operand, result_type)

    @builder_method
    def tanh(self, operand, result_type=None):
        """Element-wise ``hlo.tanh`` (element-wise tanh.); ``result_type``: see :meth:`_unary`."""
        return self._unary(TanhOp, operand, result_type)

    @builder_method
    def add(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.add`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(AddOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def and_(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.and`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(AndOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def atan2(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.atan2`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(Atan2Op, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def complex(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.complex`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(ComplexOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def div(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.divide`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(DivOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def max(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.maximum`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(MaxOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def min(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.minimum`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(MinOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def mul(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.multiply`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(MulOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def or_(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.or`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(OrOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def pow(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.power`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(PowOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def rem(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.remainder`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(RemOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def shift_left(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.shift_left`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(ShiftLeftOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def shift_right_arithmetic(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.shift_right_arithmetic`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(ShiftRightArithmeticOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def shift_right_logical(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.shift_right_logical`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(ShiftRightLogicalOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def sub(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.subtract`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(SubOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def xor(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        """Element-wise ``hlo.xor`` with XLA's implicit broadcasting (see :meth:`_binary`)."""
        return self._binary(XorOp, lhs, rhs, broadcast_dimensions, result_type)

    @builder_method
    def eq(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs EQ rhs``, giving pred."""
        return self.compare(lhs, rhs, "EQ", None, broadcast_dimensions)

    @builder_method
    def eq_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs EQ rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "EQ", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def ne(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs NE rhs``, giving pred."""
        return self.compare(lhs, rhs, "NE", None, broadcast_dimensions)

    @builder_method
    def ne_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs NE rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "NE", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def ge(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs GE rhs``, giving pred."""
        return self.compare(lhs, rhs, "GE", None, broadcast_dimensions)

    @builder_method
    def ge_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs GE rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "GE", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def gt(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs GT rhs``, giving pred."""
        return self.compare(lhs, rhs, "GT", None, broadcast_dimensions)

    @builder_method
    def gt_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs GT rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "GT", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def le(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs LE rhs``, giving pred."""
        return self.compare(lhs, rhs, "LE", None, broadcast_dimensions)

    @builder_method
    def le_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs LE rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "LE", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def lt(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs LT rhs``, giving pred."""
        return self.compare(lhs, rhs, "LT", None, broadcast_dimensions)

    @builder_method
    def lt_total_order(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        """``lhs LT rhs`` in total order, giving pred."""
        return self.compare(lhs, rhs, "LT", "TOTALORDER", broadcast_dimensions)

    @builder_method
    def compare(self, lhs, rhs, direction: str, compare_type: str | None = None,
                broadcast_dimensions: Sequence[int] = ()):
        """``hlo.compare``: ``direction`` in EQ/NE/GE/GT/LE/LT; ``compare_type`` FLOAT/TOTALORDER/SIGNED/UNSIGNED
        (default: chosen from the element type as XLA does)."""
        lhs_v = self._value(lhs, "lhs")
        if compare_type is None and isinstance(lhs_v.type, TensorType):
            try:
                compare_type = default_compare_type(expressed_type(lhs_v.type).element_type)  # quantized: FLOAT
            except Exception:
                compare_type = None
        props = {"comparison_direction": StringAttr(str(direction).upper())}
        if compare_type is not None:
            props["compare_type"] = StringAttr(compare_type.upper())
        if broadcast_dimensions:
            props["broadcast_dimensions"] = i64_array(broadcast_dimensions)
        return self._emit1(CompareOp, [lhs, rhs], props)

    @builder_method
    def select(self, pred, on_true, on_false, result_type=None):
        """``hlo.select``: elements of ``on_true`` where ``pred``, else of ``on_false``.

        ``result_type``: the result's element type, needed on quantized operands."""
        operands = [pred, on_true, on_false]
        return self._emit1(SelectOp, operands,
                           result_types=self._results_of_element(SelectOp, operands, {}, result_type))

    @builder_method
    def clamp(self, min, operand, max, result_type=None):  # noqa: A002 - XLA's argument names
        """``hlo.clamp``: ``min(max(operand, min), max)`` element-wise.

        ``result_type``: the result's element type, needed on quantized operands."""
        operands = [min, operand, max]
        return self._emit1(ClampOp, operands,
                           result_types=self._results_of_element(ClampOp, operands, {}, result_type))


