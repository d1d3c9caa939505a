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

from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from xla_dialect.ops.base import HloOp
from xla_dialect.ops.conversion import UniformDequantizeOp, UniformQuantizeOp
from xla_dialect.quant import expressed_type, quantized_element

from .base import PatternPass
from .registry import register_pass
from .util import create


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
    from . import run

    if not needs_lowering(module):
        return module
    if clone:
        module = module.clone()
    run(module, LowerQuantizedPass(), verify=False)
    return module
