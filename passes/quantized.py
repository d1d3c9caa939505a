"""``lower-quantized``: ops computing on quantized values -> dequantize, float op, quantize.

StableHLO defines every computing op on quantized tensors by the formula
``dequantize_op_quantize(op, inputs..., result_type)``: dequantize the
quantized operands to their expressed floats, run the op on floats, quantize
each quantized result to its type. This pass writes that formula out with
``hlo.uniform_dequantize`` / ``hlo.uniform_quantize`` around a float copy of
the op, for every op whose ``QUANTIZED`` mode is ``"compute"`` (see
:data:`xla_dialect.ops.base.QUANTIZED_MODES`), inside regions too. Hybrid ops
(a float lhs with a quantized rhs, float result: ``hybrid_dequantize_then_op``)
only get their quantized operands dequantized; ``compare`` gives pred, which is
not requantized (``dequantize_compare``).

Ops that only move storage values (reshape, transpose, gather, ...) and
structural ops (control flow, sort, reduce, ...) keep their quantized types:
they run on the storage integers; the computations in their regions are
lowered like any other op. The executor runs this pass before lowering, so a
program with quantized types runs as is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import HloOp
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.conversion import UniformDequantizeOp, UniformQuantizeOp
from xla_dialect.quant import expressed_type, quantized_element, storage_type
from xla_dialect.types import element_type_named, element_type_of

from .base import PatternPass
from .registry import register_pass
from .runner import run
from .util import create, i64s, make_constant, retype, tensor_type


def computes_on_quantized(op: Operation) -> bool:
    """Whether ``op`` is a ``compute`` op with a quantized operand or result."""
    if getattr(type(op), "QUANTIZED", None) != "compute":
        return False
    return any(isinstance(v.type, TensorType) and quantized_element(v.type) is not None
               for v in (*op.operands, *op.results))


class DequantizeOpQuantize(RewritePattern):
    """One computing op on quantized values -> its ``dequantize_op_quantize`` expansion."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, HloOp) or not computes_on_quantized(op):
            return
        new_ops: list[Operation] = []
        operands = []
        for v in op.operands:
            if quantized_element(v.type) is not None:
                deq = create(UniformDequantizeOp, [v], {}, [expressed_type(v.type)])
                deq.attributes.update(op.attributes)
                new_ops.append(deq)
                v = deq.results[0]
            operands.append(v)
        float_op = type(op).create(operands=operands, result_types=[expressed_type(r.type) for r in op.results],
                                   properties=dict(op.properties), attributes=dict(op.attributes))
        new_ops.append(float_op)
        results = []
        for r, f in zip(op.results, float_op.results):
            if quantized_element(r.type) is not None:
                quant = create(UniformQuantizeOp, [f], {}, [r.type])
                quant.attributes.update(op.attributes)
                new_ops.append(quant)
                f = quant.results[0]
            results.append(f)
        rewriter.replace(op, new_ops, results)


@register_pass
@dataclass(frozen=True)
class LowerQuantizedPass(PatternPass):
    """``lower-quantized``: computing ops on quantized values -> dequantize / float op / quantize."""

    name = "lower-quantized"
    PATTERNS = (DequantizeOpQuantize,)
    # A rewritten op is replaced by float ops and (de)quantizations, none of which match again.
    CONFIRM_FIXED_POINT = False


def needs_lowering(module: Operation) -> bool:
    """Whether some op of ``module`` computes on quantized values."""
    return any(computes_on_quantized(op) for op in module.walk())


def lower_quantized(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """Run ``lower-quantized`` on ``module`` and return the result (a rewritten copy with ``clone``,
    or ``module`` itself when nothing computes on quantized values)."""
    if not needs_lowering(module):
        return module
    if clone:
        module = module.clone()
    run(module, LowerQuantizedPass(), verify=False)
    return module


# ----------------------------------------------------------------------------
# expand-quantized: no quantized types left (integers and float arithmetic)
# ----------------------------------------------------------------------------


def _splat_constant(value, element, shape: list[int], axis: int | None, like, new_ops: list[Operation]):
    """A constant of ``element`` type with ``shape``: ``value`` (a scalar) or, along ``axis``, a vector."""
    dtype = element_type_of(element).dtype
    array = np.asarray(value, dtype=dtype)
    const = make_constant(array, tensor_type(element, array.shape, None))
    new_ops.append(const)
    dims = [] if axis is None else [axis]
    result = TensorType(element, shape, like.encoding)
    op = create(dm.BroadcastInDimOp, [const.results[0]], {"broadcast_dimensions": i64s(dims)}, [result])
    new_ops.append(op)
    return op.results[0]


def _params(q, per_axis: bool):
    scales, zps = list(q.data.scales), list(q.data.zero_points)
    return (scales, zps) if per_axis else (scales[0], zps[0])


def dequantize_ops(storage, q, new_ops: list[Operation]):
    """The spec's ``dequantize`` as hlo ops on a storage-typed value: ``convert(q - zero_point) * scale``
    (the difference in 64-bit integers, as the executor's kernel takes it)."""
    t = storage.type
    shape = list(t.get_shape())
    s64 = element_type_named("s64").mlir
    scales, zps = _params(q, q.data.axis is not None)
    wide_t = TensorType(s64, shape, t.encoding)
    wide = create(cv.ConvertOp, [storage], {}, [wide_t])
    new_ops.append(wide)
    zp = _splat_constant(zps, s64, shape, q.data.axis, t, new_ops)
    centred = create(ew.SubOp, [wide.results[0], zp], {}, [wide_t])
    new_ops.append(centred)
    float_t = TensorType(q.expressed.mlir, shape, t.encoding)
    real = create(cv.ConvertOp, [centred.results[0]], {}, [float_t])
    new_ops.append(real)
    scale = _splat_constant(scales, q.expressed.mlir, shape, q.data.axis, t, new_ops)
    out = create(ew.MulOp, [real.results[0], scale], {}, [float_t])
    new_ops.append(out)
    return out.results[0]


def quantize_ops(x, q, new_ops: list[Operation]):
    """The spec's ``quantize`` as hlo ops on a float value:
    ``convert(round_nearest_even(clamp(min, x / scale + zero_point, max)), storage)``."""
    t = x.type
    shape = list(t.get_shape())
    ft = q.expressed.mlir
    scales, zps = _params(q, q.data.axis is not None)
    scale = _splat_constant(scales, ft, shape, q.data.axis, t, new_ops)
    scaled = create(ew.DivOp, [x, scale], {}, [t])
    zp = _splat_constant(zps, ft, shape, q.data.axis, t, new_ops)
    shifted = create(ew.AddOp, [scaled.results[0], zp], {}, [t])
    new_ops += [scaled, shifted]
    low = _splat_constant(q.data.storage_min, ft, shape, None, t, new_ops)
    high = _splat_constant(q.data.storage_max, ft, shape, None, t, new_ops)
    clamped = create(ew.ClampOp, [low, shifted.results[0], high], {}, [t])
    rounded = create(ew.RoundEvenOp, [clamped.results[0]], {}, [t])
    out = create(cv.ConvertOp, [rounded.results[0]], {}, [TensorType(q.storage.mlir, shape, t.encoding)])
    new_ops += [clamped, rounded, out]
    return out.results[0]


def _retype_quantized(module: ModuleOp) -> None:
    """Every quantized type of ``module`` -> its storage type (values, function types, constants)."""
    for op in module.walk():
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    if quantized_element(arg.type) is not None:
                        retype(arg, storage_type(arg.type))
        for r in op.results:
            if quantized_element(r.type) is not None:
                retype(r, storage_type(r.type))
        if isinstance(op, func.FuncOp):
            ftype = op.function_type
            if any(quantized_element(t) is not None for t in (*ftype.inputs, *ftype.outputs)):
                op.function_type = FunctionType.from_lists([storage_type(t) for t in ftype.inputs],
                                                           [storage_type(t) for t in ftype.outputs])
        elif isinstance(op, ConstantOp):
            literal = op.properties["value"].data
            if quantized_element(literal.type) is not None:
                op.properties["value"] = DenseLiteralAttr.from_array(literal.array, storage_type(literal.type))


@register_pass
@dataclass(frozen=True)
class ExpandQuantizedPass(PatternPass):
    """``expand-quantized``: no quantized types left: ``lower-quantized``, then every quantized value
    becomes its storage integers and uniform_quantize / uniform_dequantize become the spec's formulas
    in hlo arithmetic (what XLA itself needs: its CPU client does not compile quantized programs)."""

    name = "expand-quantized"
    PATTERNS = ()

    def apply(self, ctx, op: ModuleOp) -> None:
        LowerQuantizedPass().apply(ctx, op)
        conversions = [(o, quantized_element(o.operands[0].type), quantized_element(o.results[0].type))
                       for o in op.walk() if isinstance(o, (UniformQuantizeOp, UniformDequantizeOp))]
        _retype_quantized(op)
        for conversion, source, target in conversions:
            new_ops: list[Operation] = []
            value = conversion.operands[0]
            if source is not None:
                value = dequantize_ops(value, source, new_ops)
            if target is not None:
                value = quantize_ops(value, target, new_ops)
            for new in new_ops:
                new.attributes.update(conversion.attributes)
            rewriter = Rewriter()
            rewriter.insert_op(new_ops, InsertPoint.before(conversion))
            conversion.results[0].replace_all_uses_with(value)
            rewriter.erase_op(conversion)
