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
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, result_def, var_operand_def

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
    tensor,
)

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
        expanded = [1] * len(large)
        for i, d in enumerate(bdims):
            if small[i] != large[d] and small[i] != 1 and large[d] != 1:
                fail(op_name, f"broadcast dimension {i} of the lower-rank operand (size {small[i]}) does not "
                              f"match dimension {d} of the higher-rank operand (size {large[d]})")
            expanded[d] = small[i]
        small_expanded = tuple(expanded)
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


class UnaryElementwiseOp(HloOp):
    """Base of element-wise unary ops (one operand, same shape result)."""

    SPEC: ClassVar[ElementwiseSpec]
    operand = operand_def()
    result = result_def()

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


def _make_op_class(base: type, spec: ElementwiseSpec) -> type:
    doc = f"``hlo.{spec.mnemonic}``: element-wise {spec.doc or spec.mnemonic.replace('_', ' ')}."
    cls = type(spec.class_name, (base,), {"name": f"hlo.{spec.mnemonic}", "SPEC": spec, "__doc__": doc,
                                          "__annotations__": {"SPEC": ClassVar[ElementwiseSpec]},
                                          "__module__": __name__})
    return irdl_op_definition(cls)


UNARY_OP_CLASSES: dict[str, type[HloOp]] = {s.mnemonic: _make_op_class(UnaryElementwiseOp, s) for s in UNARY_OPS}
BINARY_OP_CLASSES: dict[str, type[HloOp]] = {s.mnemonic: _make_op_class(BinaryElementwiseOp, s) for s in BINARY_OPS}
globals().update({cls.__name__: cls for cls in (*UNARY_OP_CLASSES.values(), *BINARY_OP_CLASSES.values())})


@irdl_op_definition
class CompareOp(HloOp):
    """``hlo.compare``: element-wise comparison giving pred.

    ``comparison_direction`` is EQ/NE/GE/GT/LE/LT; ``compare_type`` is FLOAT
    (IEEE, NaN unordered), TOTALORDER (-NaN < -Inf < ... < -0 < +0 < ... < +Inf < NaN),
    SIGNED or UNSIGNED. Accepts the same implicit broadcasting as binary ops.
    """

    name = "hlo.compare"
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


_RESULT_TYPE_DOC = (" ``result_type``: the result's element type, needed on quantized operands (a quantized type "
                    "such as ``'!quant.uniform<i8:f32, 0.5:-3>'``, see :func:`xla_dialect.quant.uniform_quantized`).")


def _unary_method(method: str, op_cls):
    def build(self, operand, result_type=None):
        return self._emit1(op_cls, [operand],
                           result_types=self._results_of_element(op_cls, [operand], {}, result_type))

    build.__name__ = method
    build.__code__ = build.__code__.replace(co_name=method)  # error messages name the method
    build.__doc__ = f"Element-wise ``{op_cls.name}`` ({op_cls.__doc__.split(':', 1)[-1].strip()})." + _RESULT_TYPE_DOC
    return build


def _binary_method(method: str, op_cls):
    def build(self, lhs, rhs, broadcast_dimensions: Sequence[int] = (), result_type=None):
        props = {"broadcast_dimensions": i64_array(broadcast_dimensions)} if broadcast_dimensions else {}
        return self._emit1(op_cls, [lhs, rhs], props,
                           result_types=self._results_of_element(op_cls, [lhs, rhs], props, result_type))

    build.__name__ = method
    build.__code__ = build.__code__.replace(co_name=method)  # error messages name the method
    build.__doc__ = (f"Element-wise ``{op_cls.name}`` with XLA implicit broadcasting "
                     f"(``broadcast_dimensions`` maps the lower-rank operand's dimensions)." + _RESULT_TYPE_DOC)
    return build


def _compare_method(method: str, direction: str, total_order: bool):
    def build(self, lhs, rhs, broadcast_dimensions: Sequence[int] = ()):
        return self.compare(lhs, rhs, direction, "TOTALORDER" if total_order else None, broadcast_dimensions)

    build.__name__ = method
    build.__code__ = build.__code__.replace(co_name=method)  # error messages name the method
    build.__doc__ = f"``lhs {direction} rhs``{' in total order' if total_order else ''}, giving pred."
    return build


class ElementwiseBuilder:
    """Builder methods of the element-wise family."""

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

    def select(self, pred, on_true, on_false, result_type=None):
        """``hlo.select``: elements of ``on_true`` where ``pred``, else of ``on_false``.

        ``result_type``: the result's element type, needed on quantized operands."""
        operands = [pred, on_true, on_false]
        return self._emit1(SelectOp, operands,
                           result_types=self._results_of_element(SelectOp, operands, {}, result_type))

    def clamp(self, min, operand, max, result_type=None):  # noqa: A002 - XLA's argument names
        """``hlo.clamp``: ``min(max(operand, min), max)`` element-wise.

        ``result_type``: the result's element type, needed on quantized operands."""
        operands = [min, operand, max]
        return self._emit1(ClampOp, operands,
                           result_types=self._results_of_element(ClampOp, operands, {}, result_type))


for _method, _mnemonic in UNARY_BUILDER_NAMES.items():
    setattr(ElementwiseBuilder, _method, _unary_method(_method, UNARY_OP_CLASSES[_mnemonic]))
for _method, _mnemonic in BINARY_BUILDER_NAMES.items():
    setattr(ElementwiseBuilder, _method, _binary_method(_method, BINARY_OP_CLASSES[_mnemonic]))
for _direction in COMPARISON_DIRECTIONS:
    setattr(ElementwiseBuilder, _direction.lower(), _compare_method(_direction.lower(), _direction, False))
    setattr(ElementwiseBuilder, f"{_direction.lower()}_total_order",
            _compare_method(f"{_direction.lower()}_total_order", _direction, True))
