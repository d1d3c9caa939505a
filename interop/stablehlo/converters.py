"""The StableHLO importer's converters: one function per MLIR op that is not a 1:1 rename.

Each is registered in :data:`interop.stablehlo.dispatch.CONVERTERS` by
:func:`~interop.stablehlo.dispatch.register_converter` when this module is imported
(:mod:`interop.stablehlo.importer` imports it)."""

from __future__ import annotations

import re

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BoolAttr,
    DictionaryAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    DYNAMIC_INDEX,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue

from xla_dialect.errors import UnsupportedError, XlaError
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.base import i64_array
from xla_dialect.ops.constants import ConstantOp, IotaOp
from xla_dialect.ops.control_flow import CallOp, ConditionalOp, GetTupleElementOp, ReturnOp, TupleOp, WhileOp
from xla_dialect.ops.conversion import BitcastConvertOp, ConvertOp
from xla_dialect.ops.data_movement import BroadcastInDimOp, DynamicPadOp, PadOp, ReshapeOp, SliceOp, TransposeOp
from xla_dialect.ops.effects import CompositeOp, CustomCallOp
from xla_dialect.ops.elementwise import (AddOp, AndOp, CompareOp, ErfOp, MulOp, SelectOp, ShiftRightArithmeticOp,
                                         ShiftRightLogicalOp, SubOp)
from xla_dialect.ops.indexing import DynamicGatherOp, DynamicSliceOp, DynamicUpdateSliceOp, GatherOp
from xla_dialect.ops.linalg import DotGeneralOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.ops.sorting import SortOp
from xla_dialect.ops.windowed import ConvolutionOp, DynamicConvOp
from xla_dialect.types import ELEMENT_TYPES, ElementType
from xla_dialect.xdsl_compat import create_op as _create
from xla_dialect.xdsl_compat import link_ops as _append_ops

from ..schema import (
    BRANCH_ARGUMENT,
    BRANCH_OPERANDS,
    IMPLICIT_BROADCAST,
    ORIGINAL_OP,
    REGION_ARG_LAYOUTS,
    RESULT_LAYOUTS,
    STATE_ARG,
    STATE_PART,
    STATE_RESULT,
    STATE_RETURN,
    TUPLE_STATE,
    leaf_types as _leaf_types,
)

from .attributes import _NATIVE_DTYPES, ELEMENT_BY_MLIR, _with_layouts, dense_array
from .dispatch import Importer, generic_converter, hlo_op_class, opaque_converter, opaque_op_class, register_converter


@register_converter("stablehlo.constant")
def _constant(imp: Importer, op):
    (result,) = op.results
    type_ = imp.type(result.type)
    if not isinstance(type_, TensorType):
        raise UnsupportedError(f"{imp._where()}: constant of type {type_} is not supported")
    attrs = op.attributes
    element = ELEMENT_BY_MLIR[str(type_.element_type)]
    if element.dtype in _NATIVE_DTYPES:
        attr, text = attrs["value"], None
    else:
        # jaxlib cannot hand out (or even safely touch) a complex dense
        # attribute object: read the attribute's text instead.
        attr = None
        named = next(attrs[i] for i in range(len(attrs)) if attrs[i].name == "value")
        text = str(named)
        text = text[text.index("=") + 1:text.rindex(")")]
    try:
        array = dense_array(attr, text, type_)
    except XlaError as e:
        raise UnsupportedError(f"{imp._where()}: {e}") from None
    except Exception as e:  # e.g. dense_resource<...> blobs
        raise UnsupportedError(f"{imp._where()}: constant {str(attr)[:60]} cannot be read: {e}") from None
    return imp.emit(ConstantOp, [], {"value": DenseLiteralAttr.from_array(array, type_)}, (), [type_])


@register_converter("func.return")
def _func_return(imp: Importer, op):
    imp._ops.append(func.ReturnOp(*imp.operands(op)))


@register_converter("func.call")
def _func_call(imp: Importer, op):
    callee = op.attributes["callee"].value
    callee = imp.callee_renames.get(callee, callee)
    return imp.emit(CallOp, imp.operands(op), {"callee": SymbolRefAttr(callee)})


@register_converter("stablehlo.composite")
def _composite(imp: Importer, op):
    """``stablehlo.composite`` -> ``hlo.composite`` (its decomposition stays a function of the module)."""
    return generic_converter(imp, op, CompositeOp)


@register_converter("stablehlo.custom_call")
def _custom_call(imp: Importer, op):
    target = op.attributes["call_target_name"].value
    if target == "shape_assertion":
        # JAX's shape-polymorphism guard. Shape refinement folds it away; one
        # left with a constant predicate is checked now, any other dropped
        # (it can only fail for shapes other than the imported static ones).
        _check_shape_assertion(imp, op)
        return None
    return generic_converter(imp, op, CustomCallOp)


@register_converter("sdy.sharding_constraint")
@register_converter("sdy.reshard")
def _sharding_constraint(imp: Importer, op):
    """Shardy's sharding constraint / reshard: XLA's ``Sharding`` custom call, the identity on one device.

    The sharding is kept as the op's ``hlo.sharding`` attribute (Shardy's text, e.g.
    ``<@mesh, [{"x"}, {}]>``) and, when it replicates the value, as XLA's ``{replicated}``
    in ``hlo.attributes`` (printed as ``sharding=`` in HLO text).
    """
    sharding = op.attributes["sharding"]
    text = str(sharding)
    (value,) = imp.emit(CustomCallOp, imp.operands(op), {"call_target_name": StringAttr("Sharding")})
    new = value.owner
    new.attributes["hlo.sharding"] = StringAttr(text)
    if not re.search(r'"[^"]*"', text.split("[", 1)[-1]):  # no mesh axis named: replicated
        new.attributes["hlo.attributes"] = DictionaryAttr({"sharding": StringAttr("{replicated}")})
    return [value]


@register_converter("sdy.manual_computation")
def _manual_computation(imp: Importer, op):
    """Shardy's manual computation (``shard_map``): on one device each shard is the whole value,
    so the body runs once on the operands (inlined). More than one device along its manual axes
    needs XLA's SPMD partitioner: an error here."""
    body = list(op.regions[0].blocks)[0]
    operands = imp.operands(op)
    if all(list(v.type.get_shape()) == list(imp.type(a.type).get_shape()) for v, a in zip(operands, body.arguments)):
        return imp.inline_block(body, operands)
    # Shards smaller than the values: kept as it is (the shardings as text, the body converted), so the
    # program imports and passes see it; the executor reports it (XLA's SPMD partitioner is not reproduced).
    props = {k: StringAttr(str(op.attributes[k])) for k in ("in_shardings", "out_shardings", "manual_axes")
             if k in op.attributes}
    cls = opaque_op_class("sdy.manual_computation")
    new = cls.create(operands=operands, result_types=imp.result_types(op), properties=props,
                     attributes=dict(imp._loc_attributes(op)), regions=imp.regions(op))
    imp._ops.append(new)
    return new.results


@register_converter("sdy.return")
def _sdy_return(imp: Importer, op):
    """The terminator of a kept ``sdy.manual_computation`` body."""
    imp.emit(ReturnOp, imp.operands(op), {}, (), [], plain=True)
    return None


def _check_shape_assertion(imp: Importer, op) -> None:
    values = imp.operands(op)
    constants = []
    for v in values:
        owner = getattr(v, "owner", None)
        constants.append(owner.properties["value"].array if isinstance(owner, ConstantOp) else None)
    if constants and constants[0] is not None and not bool(np.all(constants[0])):
        message = op.attributes["error_message"].value if "error_message" in op.attributes else "shape assertion failed"
        try:
            message = message.format(*[c.item() if c is not None else "?" for c in constants[1:]])
        except (IndexError, ValueError, KeyError):
            pass
        raise XlaError(f"{imp._where()}: {message}")


@register_converter("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(imp: Importer, op):
    if IMPLICIT_BROADCAST in op.attributes:
        # Made explicit by interop.stablehlo.exporter for an op using XLA's implicit
        # broadcasting: that op takes the unbroadcast operand again.
        return imp.operands(op)
    dims = [int(d) for d in imp.attribute(op.attributes["broadcast_dimensions"]).get_values()]
    if dims != sorted(dims):
        return _unsorted_broadcast(imp, imp.operands(op)[0], dims)
    return generic_converter(imp, op, BroadcastInDimOp)


def _unsorted_broadcast(imp: Importer, operand: SSAValue, dims: list[int]) -> list[SSAValue]:
    """StableHLO's broadcast_in_dim with dimensions out of order (the spec only asks them unique): the operand
    transposed so that they increase, then XLA's broadcast (as XLA's own translation does)."""
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    shape = operand.type.get_shape()
    transposed_type = TensorType(operand.type.element_type, [shape[i] for i in order])
    (transposed,) = imp.emit(TransposeOp, [operand], {"permutation": i64_array(order)},
                             result_types=[transposed_type], plain=True)
    props = {"broadcast_dimensions": i64_array(sorted(dims))}
    return imp.emit(BroadcastInDimOp, [transposed], props)


def _static_result(imp: Importer, op) -> bool:
    types = imp.result_types(op)
    return all(isinstance(t, TensorType) and DYNAMIC_INDEX not in t.get_shape() for t in types)


@register_converter("stablehlo.dynamic_reshape")
@register_converter("stablehlo.dynamic_broadcast_in_dim")
@register_converter("stablehlo.dynamic_iota")
def _dynamic_with_static_result(imp: Importer, op):
    """Dynamic-shape ops whose result type is static: the shape operand is redundant."""
    if not _static_result(imp, op):
        if imp.allow_unknown:
            return opaque_converter(imp, op)
        raise UnsupportedError(f"{imp._where()}: {op.name} with a dynamic result shape is not supported "
                               "(refine the shapes with example arguments)")
    name = op.name
    operands = imp.operands(op)
    if name == "stablehlo.dynamic_reshape":
        return imp.emit(ReshapeOp, operands[:1])
    if name == "stablehlo.dynamic_iota":
        props = {"iota_dimension": imp.attribute(op.attributes["iota_dimension"])}
        return imp.emit(IotaOp, [], props)
    dims = [int(d) for d in imp.attribute(op.attributes["broadcast_dimensions"]).get_values()]
    if dims != sorted(dims):
        return _unsorted_broadcast(imp, operands[0], dims)
    props = {"broadcast_dimensions": imp.attribute(op.attributes["broadcast_dimensions"])}
    return imp.emit(BroadcastInDimOp, operands[:1], props)


@register_converter("stablehlo.reshape")
def _reshape(imp: Importer, op):
    # interop.stablehlo.exporter writes hlo ops without a StableHLO counterpart as an
    # equivalent op marked with the original name (hlo.copy: identity reshape).
    if ORIGINAL_OP in op.attributes:
        original = op.attributes[ORIGINAL_OP].value
        cls = hlo_op_class(imp, original)
        if cls is None:
            raise UnsupportedError(f"{imp._where()}: {ORIGINAL_OP} names {original}, which is not an hlo op")
        return imp.emit(cls, imp.operands(op))
    return generic_converter(imp, op, ReshapeOp)


@register_converter("chlo.erf")
@register_converter("mhlo.erf")
def _erf(imp: Importer, op):
    return imp.emit(ErfOp, imp.operands(op))


@register_converter("chlo.top_k")
@register_converter("mhlo.topk")
def _top_k(imp: Importer, op):
    """``top_k(x, k)``: the k largest along the last dimension, descending, with their i32 indices.

    Built as XLA expands TopK: a stable sort of (x, iota) by ``x`` in
    descending total order (NaN first, then +inf; ties keep the lower index),
    then a slice of the first k.
    """
    (x,) = imp.operands(op)
    values_type, indices_type = imp.result_types(op)
    shape = list(x.type.get_shape())
    rank = len(shape)
    k = values_type.get_shape()[-1]
    index_type = TensorType(indices_type.element_type, shape)
    (iota,) = imp.emit(IotaOp, [], {"iota_dimension": IntegerAttr(rank - 1, 64)}, (), [index_type])
    scalar_x = TensorType(x.type.element_type, [])
    scalar_i = TensorType(indices_type.element_type, [])
    kind = ELEMENT_BY_MLIR[str(x.type.element_type)].kind
    compare_type = {"float": "TOTALORDER", "sint": "SIGNED", "uint": "UNSIGNED", "pred": "UNSIGNED"}[kind]
    body = Block(arg_types=[scalar_x, scalar_x, scalar_i, scalar_i])
    gt = _create(CompareOp, [body.args[0], body.args[1]], [TensorType(IntegerType(1), [])],
                 {"comparison_direction": StringAttr("GT"), "compare_type": StringAttr(compare_type)}, {}, ())
    ret = _create(ReturnOp, [gt.results[0]], [], {}, {}, ())
    _append_ops(body, [gt, ret])
    sorted_x, sorted_i = imp.emit(SortOp, [x, iota],
                                  {"dimension": IntegerAttr(rank - 1, 64), "is_stable": BoolAttr(True, IntegerType(1))},
                                  [Region(body)], [x.type, index_type])
    limits = shape[:-1] + [k]
    props = {"start_indices": i64_array([0] * rank), "limit_indices": i64_array(limits),
             "strides": i64_array([1] * rank)}
    (values,) = imp.emit(SliceOp, [sorted_x], dict(props), (), [values_type])
    (indices,) = imp.emit(SliceOp, [sorted_i], dict(props), (), [indices_type])
    return [values, indices]


class OpEmitter:
    """Terse emission of hlo ops with explicit result types, for converters that expand one
    op into several (``emit(AddOp, [a, b], t)``); every op gets the converted op's location."""

    def __init__(self, imp: Importer):
        self.imp = imp

    def __call__(self, cls: type[Operation], operands, result_type: Attribute, **props: Attribute) -> SSAValue:
        """Emit an op of class ``cls`` with one result of ``result_type``."""
        (value,) = self.imp.emit(cls, list(operands), props, (), [result_type], plain=True)
        return value

    def splat(self, value, element: ElementType, shape) -> SSAValue:
        """The scalar ``value`` of ``element`` broadcast to ``shape`` (a scalar constant for ``[]``)."""
        scalar = TensorType(element.mlir, [])
        literal = DenseLiteralAttr.from_array(np.array(value, dtype=element.dtype), scalar)
        constant = self(ConstantOp, [], scalar, value=literal)
        if not len(shape):
            return constant
        return self(BroadcastInDimOp, [constant], TensorType(element.mlir, list(shape)),
                    broadcast_dimensions=i64_array([]))

    def like(self, value: SSAValue, element: ElementType) -> TensorType:
        """The tensor type of ``value``'s shape with elements ``element``."""
        return TensorType(element.mlir, list(value.type.get_shape()))


_WIDER = {"s2": "s4", "s4": "s8", "s8": "s16", "s16": "s32", "s32": "s64",
          "u2": "u4", "u4": "u8", "u8": "u16", "u16": "u32", "u32": "u64"}
"""Integer type -> the integer type of twice its width and the same signedness (chlo.mulhi)."""


@register_converter("chlo.mulhi")
def _mulhi(imp: Importer, op):
    """``mulhi(x, y)``: the high N bits of the 2N-bit product of N-bit integers.

    Up to 32 bits: the product in the type twice as wide, shifted right by N
    (arithmetically for signed types), converted back. 64 bits: see :func:`_mulhi64`.
    """
    emit = OpEmitter(imp)
    lhs, rhs = imp.operands(op)
    element = ELEMENT_BY_MLIR[str(lhs.type.element_type)]
    if element.kind not in ("sint", "uint"):
        raise UnsupportedError(f"{imp._where()}: chlo.mulhi of {element.xla_name} elements; expected integers")
    if element.bits == 64:
        return [_mulhi64(emit, lhs, rhs, element.kind == "sint")]
    wide = ELEMENT_TYPES[_WIDER[element.xla_name]]
    wide_type = emit.like(lhs, wide)
    product = emit(MulOp, [emit(ConvertOp, [lhs], wide_type), emit(ConvertOp, [rhs], wide_type)], wide_type)
    shift = ShiftRightArithmeticOp if element.kind == "sint" else ShiftRightLogicalOp
    high = emit(shift, [product, emit.splat(element.bits, wide, wide_type.get_shape())], wide_type)
    # The high half of a product of two N-bit values fits in N bits: the conversion is exact.
    return [emit(ConvertOp, [high], lhs.type)]


def _mulhi64(emit: OpEmitter, lhs: SSAValue, rhs: SSAValue, signed: bool) -> SSAValue:
    """High 64 bits of a 64x64-bit product from 32-bit halves (no 128-bit type).

    Unsigned: with ``a = ah*2^32 + al`` and ``b = bh*2^32 + bl`` (u64 arithmetic),
    ``cross = (al*bl >> 32) + (ah*bl & 0xffffffff) + al*bh`` (at most 2^64 - 1),
    ``high = ah*bh + (ah*bl >> 32) + (cross >> 32)``. Signed: the unsigned high
    half of the bit patterns, minus ``b`` where ``a < 0`` and minus ``a``
    where ``b < 0`` (mod 2^64), which is the floor of the signed product / 2^64.
    """
    u64 = ELEMENT_TYPES["u64"]
    t = emit.like(lhs, u64)
    shape = t.get_shape()
    a, b = (emit(BitcastConvertOp, [v], t) for v in (lhs, rhs)) if signed else (lhs, rhs)
    mask = emit.splat(0xFFFFFFFF, u64, shape)
    c32 = emit.splat(32, u64, shape)

    def mul(x, y):
        return emit(MulOp, [x, y], t)

    def add(x, y):
        return emit(AddOp, [x, y], t)

    def low(x):
        return emit(AndOp, [x, mask], t)

    def high(x):
        return emit(ShiftRightLogicalOp, [x, c32], t)

    al, ah, bl, bh = low(a), high(a), low(b), high(b)
    hi_lo = mul(ah, bl)
    cross = add(add(high(mul(al, bl)), low(hi_lo)), mul(al, bh))
    result = add(add(mul(ah, bh), high(hi_lo)), high(cross))
    if not signed:
        return result
    pred = TensorType(IntegerType(1), list(shape))
    zero_s = emit.splat(0, ELEMENT_TYPES["s64"], shape)
    zero_u = emit.splat(0, u64, shape)
    for sign_of, other in ((lhs, b), (rhs, a)):
        negative = emit(CompareOp, [sign_of, zero_s], pred, comparison_direction=StringAttr("LT"),
                        compare_type=StringAttr("SIGNED"))
        result = emit(SubOp, [result, emit(SelectOp, [negative, other, zero_u], t)], t)
    return emit(BitcastConvertOp, [result], lhs.type)


@register_converter("chlo.scan")
def _scan(imp: Importer, op):
    """``chlo.scan``: an ``hlo.while`` over the positions of the scan dimension.

    The body region takes one slice of every input (the scan dimension
    removed) and the carries, and returns one slice of every output and the
    new carries. Each iteration reads the inputs' slices at the position
    (``dynamic_slice``), runs the body inline and writes the outputs' slices
    (``dynamic_update_slice``); ``is_reverse`` walks the positions from the
    last. ``is_associative`` only allows a parallel evaluation: the
    sequential one gives the results the op defines.
    """
    emit = OpEmitter(imp)
    attrs = op.attributes
    n_inputs = list(attrs["operandSegmentSizes"])[0]
    operands = imp.operands(op)
    inputs, inits = operands[:n_inputs], operands[n_inputs:]
    result_types = imp.result_types(op)
    n_outputs = len(result_types) - len(inits)
    output_types = result_types[:n_outputs]
    dim = attrs["dimension"].value
    reverse = "is_reverse" in attrs and bool(attrs["is_reverse"].value)
    arrays = [v.type for v in inputs] + output_types
    if arrays:
        length = arrays[0].get_shape()[dim]
    elif "scan_dim_size" in attrs:
        length = attrs["scan_dim_size"].value
    else:
        raise UnsupportedError(f"{imp._where()}: chlo.scan without inputs or outputs needs scan_dim_size")
    (body,) = list(op.regions[0].blocks)
    s64 = ELEMENT_TYPES["s64"]
    index_type = TensorType(s64.mlir, [])

    def starts(rank: int, position: SSAValue) -> list[SSAValue]:
        zero = emit.splat(0, s64, [])
        return [position if d == dim else zero for d in range(rank)]

    def with_dim(shape, size):
        return [*shape[:dim], size, *shape[dim + 1:]]

    n_in = len(inputs)

    def loop_body(args):
        # State: counter, the inputs (carried so that no region captures a value: HLO computations
        # cannot), the outputs built so far, the carries.
        counter, xs = args[0], args[1:1 + n_in]
        accumulators, carries = args[1 + n_in:1 + n_in + n_outputs], args[1 + n_in + n_outputs:]
        position = counter
        if reverse:
            position = emit(SubOp, [emit.splat(length - 1, s64, []), counter], index_type)
        slices = []
        for x in xs:
            shape = list(x.type.get_shape())
            piece = emit(DynamicSliceOp, [x, *starts(len(shape), position)],
                         TensorType(x.type.element_type, with_dim(shape, 1)), slice_sizes=i64_array(with_dim(shape, 1)))
            slices.append(emit(ReshapeOp, [piece], TensorType(x.type.element_type, shape[:dim] + shape[dim + 1:])))
        returned = imp.inline_block(body, slices + list(carries))
        updated = []
        for acc, y in zip(accumulators, returned[:n_outputs]):
            shape = list(acc.type.get_shape())
            piece = emit(ReshapeOp, [y], TensorType(acc.type.element_type, with_dim(shape, 1)))
            updated.append(emit(DynamicUpdateSliceOp, [acc, piece, *starts(len(shape), position)], acc.type))
        step = emit(AddOp, [counter, emit.splat(1, s64, [])], index_type)
        return [step, *xs, *updated, *returned[n_outputs:]]

    def loop_cond(args):
        pred = TensorType(IntegerType(1), [])
        return [emit(CompareOp, [args[0], emit.splat(length, s64, [])], pred,
                     comparison_direction=StringAttr("LT"), compare_type=StringAttr("SIGNED"))]

    zeros = [emit.splat(0, ELEMENT_BY_MLIR[str(t.element_type)], t.get_shape()) for t in output_types]
    if length == 0:
        return [*zeros, *inits]  # the body never runs (and could not slice an empty dimension)
    state = [emit.splat(0, s64, []), *inputs, *zeros, *inits]
    state_types = [v.type for v in state]
    regions = [imp.build_region(state_types, loop_cond), imp.build_region(state_types, loop_body)]
    results = imp.emit(WhileOp, state, {}, regions, state_types, plain=True)
    return list(results[1 + n_in:])


@register_converter("stablehlo.dynamic_gather")
def _dynamic_gather(imp: Importer, op):
    """``dynamic_gather``: an ``hlo.gather`` when the slice sizes are a constant (what XLA takes), else an
    ``hlo.dynamic_gather`` (configured when it runs)."""
    operand, indices, sizes = imp.operands(op)
    owner = sizes.owner if isinstance(sizes, OpResult) else None
    if not isinstance(owner, ConstantOp):  # configured when it runs
        return imp.emit(DynamicGatherOp, [operand, indices, sizes], imp.properties(op, DynamicGatherOp),
                        result_types=imp.result_types(op))
    props = imp.properties(op, GatherOp)
    props["slice_sizes"] = i64_array([int(v) for v in np.asarray(owner.properties["value"].array).reshape(-1)])
    return imp.emit(GatherOp, [operand, indices], props)


def _constant_ints(imp: Importer, op, value: SSAValue, what: str, required: bool = True) -> list[int] | None:
    """The integers of a constant operand (None, or with ``required`` an error naming ``what``, when it is
    computed)."""
    owner = value.owner if isinstance(value, OpResult) else None
    if isinstance(owner, ConstantOp):
        return [int(v) for v in np.asarray(owner.properties["value"].array).reshape(-1)]
    if imp.allow_unknown or not required:
        return None
    raise UnsupportedError(f"{imp._where()}: {op.name} with {what} computed at run time is not supported "
                           "(XLA takes them as constants)")


@register_converter("stablehlo.dynamic_pad")
def _dynamic_pad(imp: Importer, op):
    """``dynamic_pad``: an ``hlo.pad`` when the paddings are constants (what XLA takes), else an
    ``hlo.dynamic_pad`` (configured when it runs)."""
    operand, value, low, high, interior = imp.operands(op)
    numbers = [_constant_ints(imp, op, v, "paddings", required=False) for v in (low, high, interior)]
    if any(n is None for n in numbers):
        return imp.emit(DynamicPadOp, imp.operands(op), result_types=imp.result_types(op))
    props = {"edge_padding_low": i64_array(numbers[0]), "edge_padding_high": i64_array(numbers[1]),
             "interior_padding": i64_array(numbers[2])}
    return imp.emit(PadOp, [operand, value], props)


@register_converter("stablehlo.dynamic_conv")
def _dynamic_conv(imp: Importer, op):
    """``dynamic_conv``: an ``hlo.convolution`` when the padding is a constant (what XLA takes), else an
    ``hlo.dynamic_conv`` (configured when it runs)."""
    lhs, rhs, padding = imp.operands(op)
    flat = _constant_ints(imp, op, padding, "the padding", required=False)
    if flat is None:  # configured when it runs
        return imp.emit(DynamicConvOp, [lhs, rhs, padding], imp.properties(op, DynamicConvOp),
                        result_types=imp.result_types(op))
    props = imp.properties(op, ConvolutionOp)
    props["padding"] = i64_array(flat)
    return imp.emit(ConvolutionOp, [lhs, rhs], props)


def _tuple_of_nothing(imp: Importer) -> SSAValue:
    (value,) = imp.emit(TupleOp, [], result_types=[TupleType([])])
    return value


@register_converter("stablehlo.tuple")
def _tuple(imp: Importer, op):
    attrs = op.attributes
    if BRANCH_OPERANDS in attrs:
        # The exporter's carrier of hlo.conditional branch operands: no op of its own.
        imp.branch_operands[op.results[0]] = imp.operands(op)
        return [None]
    if STATE_PART in attrs:
        return [None]  # a nested tuple rebuilt by the exporter for a tuple-state while
    if STATE_ARG in attrs:
        return [imp.state_args[-1][attrs[STATE_ARG].value]]
    if STATE_RESULT in attrs:
        return [imp.state_results[attrs[STATE_RESULT].value]]
    return generic_converter(imp, op, TupleOp)


@register_converter("stablehlo.get_tuple_element")
def _get_tuple_element(imp: Importer, op):
    if STATE_PART in op.attributes:
        # The exporter's flattening of tuple state: remember the tuple it reads from.
        (source,) = op.operands
        imp.state_roots[op.results[0]] = imp.state_roots.get(source) or imp.value(source)
        return [None]
    return generic_converter(imp, op, GetTupleElementOp)


def _state_groups(imp: Importer, leaves, state_types) -> list[SSAValue]:
    """The tuple-state values whose flattened leaves are ``leaves`` (ir values)."""
    out, i = [], 0
    for t in state_types:
        n = len(_leaf_types(t))
        first = leaves[i]
        out.append(imp.state_roots.get(first) or imp.value(first) if isinstance(t, TupleType) else imp.value(first))
        i += n
    return out


@register_converter("stablehlo.return")
def _hlo_return(imp: Importer, op):
    operands = list(op.operands)
    if STATE_RETURN in op.attributes:
        values = _state_groups(imp, operands, imp.state_types[-1])
    else:
        values = imp.operands(op)
    imp.emit(ReturnOp, values, result_types=[])


@register_converter("stablehlo.while")
def _while(imp: Importer, op):
    if TUPLE_STATE not in op.attributes:
        return generic_converter(imp, op, WhileOp)
    # The exporter's flattening of an hlo.while with tuple state: rebuild it.
    attrs = op.attributes
    state_types = [imp.type(t.value) for t in attrs[TUPLE_STATE]]
    result_types = list(state_types)
    if RESULT_LAYOUTS in attrs:
        result_types = _with_layouts(result_types, attrs[RESULT_LAYOUTS])
    region_layouts = attrs[REGION_ARG_LAYOUTS] if REGION_ARG_LAYOUTS in attrs else None
    operands = _state_groups(imp, list(op.operands), state_types)
    current = imp._current
    regions = []
    imp.state_types.append(state_types)
    try:
        for r_index, region in enumerate(op.regions):
            (ir_block,) = list(region.blocks)
            arg_types = state_types if region_layouts is None else _with_layouts(state_types, region_layouts[r_index])
            block = Block(arg_types=arg_types)
            offset = 0
            for t, arg in zip(state_types, block.args):
                if not isinstance(t, TupleType):
                    imp.values[ir_block.arguments[offset]] = arg
                offset += len(_leaf_types(t))
            imp.state_args.append(list(block.args))
            try:
                regions.append(Region(imp.block(ir_block, target=block)))
            finally:
                imp.state_args.pop()
    finally:
        imp.state_types.pop()
    imp._current = current
    new = imp.emit(WhileOp, operands, {}, regions, result_types)
    imp.state_results = list(new)
    out, i = [], 0
    for t, value in zip(state_types, new):
        n = len(_leaf_types(t))
        out.extend([value] + [None] * (n - 1) if not isinstance(t, TupleType) else [None] * n)
        i += n
    return out


def _branches(imp: Importer, op) -> tuple[list[SSAValue], list[Region]]:
    """Branch operands and regions of a StableHLO ``case``/``if`` for ``hlo.conditional``.

    StableHLO branches take no arguments (they capture values), hlo's take one
    operand each: every branch gets the same unused empty tuple, unless the
    module came from :mod:`interop.stablehlo.exporter`, whose branches start with a marked
    ``get_tuple_element`` of the real branch operands.
    """
    ir_blocks = []
    for r in op.regions:
        blocks = list(r.blocks)
        if len(blocks) != 1:
            raise UnsupportedError(f"{imp._where()}: branch regions with {len(blocks)} blocks are not supported")
        ir_blocks.append(blocks[0])
    firsts = [next(iter(b.operations), None) for b in ir_blocks]
    marked = all(f is not None and BRANCH_ARGUMENT in f.operation.attributes for f in firsts)
    current = imp._current
    regions = []
    if marked:
        operands = imp.branch_operands[firsts[0].operation.operands[0]]
        for b, (block, first) in enumerate(zip(ir_blocks, firsts)):
            first = first.operation
            arg_type = imp.type(first.results[0].type)
            if RESULT_LAYOUTS in first.attributes:
                (arg_type,) = _with_layouts([arg_type], first.attributes[RESULT_LAYOUTS])
            regions.append(Region(imp.block(block, [arg_type], first_op_is_argument=True)))
    else:
        empty = _tuple_of_nothing(imp)
        operands = [empty] * len(ir_blocks)
        regions = [Region(imp.block(block, [TupleType([])])) for block in ir_blocks]
    imp._current = current
    return operands, regions


@register_converter("stablehlo.case")
@register_converter("stablehlo.if")
def _conditional(imp: Importer, op):
    """``case``/``if`` -> ``hlo.conditional`` (selector: the index or the predicate)."""
    (selector,) = imp.operands(op)
    attrs = op.attributes
    if TUPLE_STATE not in attrs:
        operands, regions = _branches(imp, op)
        return imp.emit(ConditionalOp, [selector, *operands], {}, regions)
    # The exporter flattened tuple results: rebuild them.
    result_types = [imp.type(t.value) for t in attrs[TUPLE_STATE]]
    if RESULT_LAYOUTS in attrs:
        result_types = _with_layouts(result_types, attrs[RESULT_LAYOUTS])
    imp.state_types.append(result_types)
    try:
        operands, regions = _branches(imp, op)
    finally:
        imp.state_types.pop()
    new = imp.emit(ConditionalOp, [selector, *operands], {}, regions, result_types)
    imp.state_results = list(new)
    out = []
    for t, value in zip(result_types, new):
        n = len(_leaf_types(t))
        out.extend([value] + [None] * (n - 1) if not isinstance(t, TupleType) else [None] * n)
    return out


_RAGGED_FIELD = re.compile(r"(\w+)\s*=\s*\[([\d,\s]*)\]")


def _sum_over(imp: Importer, emit: OpEmitter, value: SSAValue, dim: int, result_type: TensorType) -> SSAValue:
    """``reduce(value, 0, dimensions=[dim], add)``."""
    element = ELEMENT_BY_MLIR[str(value.type.element_type)]
    scalar = TensorType(value.type.element_type, [])
    zero = emit.splat(0, element, [])

    def body(args):
        return [emit(AddOp, args, scalar)]

    region = imp.build_region([scalar, scalar], body)
    (out,) = imp.emit(ReduceOp, [value, zero], {"dimensions": i64_array([dim])}, [region],
                      [result_type], plain=True)
    return out


def _group_bounds(imp: Importer, emit: OpEmitter, sizes: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(start, end) of each group of ragged_dot's ``group_sizes``: ``end[j] = sizes[0] + ... + sizes[j]``,
    ``start[j] = end[j] - sizes[j]``."""
    g = sizes.type.get_shape()[0]
    index = ELEMENT_BY_MLIR[str(sizes.type.element_type)]
    gg = TensorType(index.mlir, [g, g])
    spread = emit(BroadcastInDimOp, [sizes], gg, broadcast_dimensions=i64_array([1]))
    row, col = (emit(IotaOp, [], gg, iota_dimension=IntegerAttr(d, 64)) for d in (0, 1))
    upto = emit(CompareOp, [col, row], TensorType(IntegerType(1), [g, g]), comparison_direction=StringAttr("LE"))
    kept = emit(SelectOp, [upto, spread, emit.splat(0, index, [g, g])], gg)
    end = _sum_over(imp, emit, kept, 1, TensorType(index.mlir, [g]))
    return emit(SubOp, [end, sizes], TensorType(index.mlir, [g])), end


def _ragged_contracting_or_batch(imp: Importer, emit: OpEmitter, lhs, rhs, sizes, result_type, numbers):
    """ragged_dot's other two forms. Ragged batch dimension (``lhs[b.., m, k] x rhs[b.., k, n]``): the batched
    product, whatever the group sizes (as jax.lax.ragged_dot_general computes it). Ragged contracting
    dimension (``-> [g, b.., m, n]``): group ``j`` sums over its own range of the contracting dimension, i.e.
    the product of lhs with the other columns zeroed (exact: the zeros add nothing)."""
    lhs_b, rhs_b = numbers["lhs_batching_dimensions"], numbers["rhs_batching_dimensions"]
    (lhs_k,), (rhs_k,) = numbers["lhs_contracting_dimensions"], numbers["rhs_contracting_dimensions"]
    (ragged,) = numbers["lhs_ragged_dimensions"]
    element = result_type.element_type
    out_shape = list(result_type.get_shape())
    if ragged in lhs_b:
        return [emit(DotGeneralOp, [lhs, rhs], result_type, lhs_batching_dimensions=i64_array(lhs_b),
                     rhs_batching_dimensions=i64_array(rhs_b), lhs_contracting_dimensions=i64_array([lhs_k]),
                     rhs_contracting_dimensions=i64_array([rhs_k]))]
    lshape = list(lhs.type.get_shape())
    g = sizes.type.get_shape()[0]
    index = ELEMENT_BY_MLIR[str(sizes.type.element_type)]
    pred = IntegerType(1)
    start, cum = _group_bounds(imp, emit, sizes)
    # masked[j, ...] = lhs where the contracting index is in group j, else 0
    full = [g, *lshape]
    position = emit(IotaOp, [], TensorType(index.mlir, full), iota_dimension=IntegerAttr(1 + lhs_k, 64))
    low = emit(BroadcastInDimOp, [start], TensorType(index.mlir, full), broadcast_dimensions=i64_array([0]))
    high = emit(BroadcastInDimOp, [cum], TensorType(index.mlir, full), broadcast_dimensions=i64_array([0]))
    mask_type = TensorType(pred, full)
    inside = emit(AndOp, [emit(CompareOp, [position, low], mask_type, comparison_direction=StringAttr("GE")),
                          emit(CompareOp, [position, high], mask_type, comparison_direction=StringAttr("LT"))],
                  mask_type)
    spread_lhs = emit(BroadcastInDimOp, [lhs], TensorType(lhs.type.element_type, full),
                      broadcast_dimensions=i64_array(list(range(1, 1 + len(lshape)))))
    zeros = emit.splat(0, ELEMENT_BY_MLIR[str(lhs.type.element_type)], full)
    masked = emit(SelectOp, [inside, spread_lhs, zeros], TensorType(lhs.type.element_type, full))
    # dot_general: [b.., g, m.., n..] -> transpose to the result's [g, b.., m.., n..]
    nb = len(lhs_b)
    product_shape = [*out_shape[1:1 + nb], g, *out_shape[1 + nb:]]
    product = emit(DotGeneralOp, [masked, rhs], TensorType(element, product_shape),
                   lhs_batching_dimensions=i64_array([1 + d for d in lhs_b]), rhs_batching_dimensions=i64_array(rhs_b),
                   lhs_contracting_dimensions=i64_array([1 + lhs_k]), rhs_contracting_dimensions=i64_array([rhs_k]))
    if not nb:
        return [product]
    perm = [nb, *range(nb), *range(nb + 1, len(product_shape))]
    return [emit(TransposeOp, [product], result_type, permutation=i64_array(perm))]


@register_converter("chlo.ragged_dot")
@register_converter("mhlo.ragged_dot")
def _ragged_dot(imp: Importer, op):
    """``ragged_dot(lhs[b.., m, k], rhs[g, b.., k, n], group_sizes[g]) -> [b.., m, n]``: rows of lhs in
    consecutive groups of ``group_sizes`` rows, group ``j`` multiplied by ``rhs[j]``; rows past the groups
    give 0.

    The ragged-non-contracting form (a mixture-of-experts layer; batch dimensions allowed, in any
    position), as in the StableHLO/chlo spec: expanded as the product with every group (``dot_general``
    to ``[b.., m, g, n]``), then each row's group selected by a one-hot mask over the group boundaries
    (cumulative sums of ``group_sizes``) and summed, which is exact (one term per row). The
    ragged-contracting and ragged-batch forms: :func:`_ragged_contracting_or_batch`.
    """
    emit = OpEmitter(imp)
    lhs, rhs, sizes = imp.operands(op)
    (result_type,) = imp.result_types(op)
    numbers = {k: [int(x) for x in v.split(",") if x.strip()]
               for k, v in _RAGGED_FIELD.findall(str(op.attributes["ragged_dot_dimension_numbers"]))}
    lshape, rshape = list(lhs.type.get_shape()), list(rhs.type.get_shape())
    for key in ("lhs_batching_dimensions", "rhs_batching_dimensions"):
        numbers.setdefault(key, [])  # (fields left out of the printed attribute are empty)
    lhs_b, rhs_b = numbers["lhs_batching_dimensions"], numbers["rhs_batching_dimensions"]
    nb = len(lhs_b)
    ragged_dims, lhs_ks = numbers.get("lhs_ragged_dimensions") or [], numbers.get("lhs_contracting_dimensions") or []
    if len(ragged_dims) == 1 and not numbers.get("rhs_group_dimensions") and (ragged_dims[0] in lhs_ks
                                                                              or ragged_dims[0] in lhs_b):
        return _ragged_contracting_or_batch(imp, emit, lhs, rhs, sizes, result_type, numbers)
    if (len(lshape) != nb + 2 or len(rshape) != nb + 3 or len(rhs_b) != nb or len(ragged_dims) != 1
            or len(lhs_ks) != 1 or ragged_dims[0] in lhs_ks or ragged_dims[0] in lhs_b
            or len(numbers.get("rhs_contracting_dimensions") or []) != 1
            or len(numbers.get("rhs_group_dimensions") or []) != 1):
        raise UnsupportedError(f"{imp._where()}: ragged_dot is supported in its ragged-non-contracting form "
                               f"lhs[b.., m, k] x rhs[g, b.., k, n]; got {numbers}")
    (ragged,) = ragged_dims
    (lhs_k,) = lhs_ks
    (rhs_k,) = numbers["rhs_contracting_dimensions"]
    (group_dim,) = numbers["rhs_group_dimensions"]
    m, g = lshape[ragged], rshape[group_dim]
    n_dim = (set(range(len(rshape))) - {rhs_k, group_dim, *rhs_b}).pop()
    n = rshape[n_dim]
    batch = [lshape[d] for d in lhs_b]
    index = ELEMENT_BY_MLIR[str(sizes.type.element_type)]
    pred = IntegerType(1)
    start, cum = _group_bounds(imp, emit, sizes)
    # onehot[i, j]: row i of lhs is in group j
    mg = TensorType(index.mlir, [m, g])
    rows = emit(IotaOp, [], mg, iota_dimension=IntegerAttr(0, 64))
    low = emit(BroadcastInDimOp, [start], mg, broadcast_dimensions=i64_array([1]))
    high = emit(BroadcastInDimOp, [cum], mg, broadcast_dimensions=i64_array([1]))
    mask_type = TensorType(pred, [m, g])
    inside = emit(AndOp, [emit(CompareOp, [rows, low], mask_type, comparison_direction=StringAttr("GE")),
                          emit(CompareOp, [rows, high], mask_type, comparison_direction=StringAttr("LT"))], mask_type)
    # every group's product [b.., m, g, n] (dot_general: batch, lhs free, rhs free dims in rhs order), then
    # each row's own
    element = result_type.element_type
    full = [*batch, m, g, n]
    order = [*batch, m, *([n, g] if n_dim < group_dim else [g, n])]
    products = emit(DotGeneralOp, [lhs, rhs], TensorType(element, order),
                    lhs_batching_dimensions=i64_array(lhs_b), rhs_batching_dimensions=i64_array(rhs_b),
                    lhs_contracting_dimensions=i64_array([lhs_k]), rhs_contracting_dimensions=i64_array([rhs_k]))
    if n_dim < group_dim:
        perm = [*range(nb), nb, nb + 2, nb + 1]
        products = emit(TransposeOp, [products], TensorType(element, full), permutation=i64_array(perm))
    mask = emit(BroadcastInDimOp, [inside], TensorType(pred, full), broadcast_dimensions=i64_array([nb, nb + 1]))
    zeros = emit.splat(0, ELEMENT_BY_MLIR[str(element)], full)
    chosen = emit(SelectOp, [mask, products, zeros], TensorType(element, full))
    return [_sum_over(imp, emit, chosen, nb + 1, result_type)]
