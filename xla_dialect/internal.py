"""``hlo_internal``: ops that are not XLA's, made by the executor's passes for the executor.

:class:`FusedMultiplyAddOp` (``hlo_internal.fma``) is ``a * b + c`` rounded once: XLA CPU's floating-point
contraction, made only by the ``contract-fma`` pass (:mod:`passes.fma_contraction`, which says when XLA
contracts); its kernel and scalar definition are registered with the kernels
(:func:`lowering.kernels.elementwise.fused_multiply_add_kernel`). It is defined here, in the IR package, so
that the passes that make it and the kernels and compiled paths that run it name the same class.
:class:`MultiplyReduceOp` (``hlo_internal.multiply_reduce``) is the same contraction inside a sum: XLA CPU fuses a
multiply into the reduce that sums it (no reduced dimension longer than 32: no tree rewrite) and contracts
each step (kernel: :func:`lowering.kernels.reduction._multiply_reduce`); :class:`MultiplyAddReduceOp`
(``hlo_internal.multiply_add_reduce``) is a sum of a contracted two-product term, ``a * b + c * d``, whose running
sum LLVM pushes into the term's FMAs. :class:`ExpAddOp` (``hlo_internal.exp_add``) is an f32 ``exp(x) + c`` (or
``- c``) whose exp's final scaling by ``2**n`` LLVM contracts into the add: one rounding, as XLA CPU computes it.
:data:`HLO_INTERNAL` is its dialect (not loaded by :func:`xla_dialect.make_context`: hlo text never holds
these ops).
"""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, UnitAttr
from xdsl.ir import Dialect
from xdsl.irdl import (IRDLOperation, irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def,
                       traits_def)
from xdsl.traits import Pure

from .errors import HloVerifyError


@irdl_op_definition
class FusedMultiplyAddOp(IRDLOperation):
    """``a * b + c`` rounded once (executor-internal; made only by :func:`passes.fma_contraction.contract_fma`)."""

    name = "hlo_internal.fma"
    traits = traits_def(Pure())  # (no effects: computed ahead on constants, deduplicated, dropped when unused)
    a = operand_def()
    b = operand_def()
    c = operand_def()
    result = result_def()


@irdl_op_definition
class MultiplyReduceOp(IRDLOperation):
    """The sum of ``a * b`` over ``dimensions`` from ``init``, each step a fused multiply-add: ``acc = a[i] * b[i]
    + acc`` rounded once, the reduced elements in row-major order -- except the first ``rounded_rows`` outputs,
    which add rounded products (XLA's vectorized rows) -- (executor-internal; made only by
    :func:`passes.fma_contraction.contract_fma` from a sum of a product that XLA CPU fuses and contracts).
    ``lanes`` (optional, a full sum of a 2-d operand): XLA's vector lanes over its rows
    (:func:`lowering.kernels.tree_sum.lane_contracted_sum`; ``rounded_rows`` 1: the lanes add rounded
    products)."""

    name = "hlo_internal.multiply_reduce"
    traits = traits_def(Pure())  # (no effects: computed ahead on constants, deduplicated, dropped when unused)
    a = operand_def()
    b = operand_def()
    init = operand_def()
    result = result_def()
    dimensions = prop_def(DenseArrayBase)
    rounded_rows = prop_def(IntegerAttr)
    lanes = opt_prop_def(IntegerAttr)


@irdl_op_definition
class MultiplyAddReduceOp(IRDLOperation):
    """The sum of ``a * b + c * d`` over ``dimensions`` from ``init`` as XLA CPU contracts it when it fuses the
    contracted term into the sum's loop: each step ``acc = fma(a, b, fma(c, d, acc))`` (LLVM pushes the running
    sum into the term's FMA, whose addend is the second product), the reduced elements in row-major order; from
    ``init`` +0 the first step is the term itself, ``fma(a0, b0, c0 * d0)`` (executor-internal; made only by
    :func:`passes.fma_contraction.contract_fma`)."""

    name = "hlo_internal.multiply_add_reduce"
    traits = traits_def(Pure())  # (no effects: computed ahead on constants, deduplicated, dropped when unused)
    a = operand_def()
    b = operand_def()
    c = operand_def()
    d = operand_def()
    init = operand_def()
    result = result_def()
    dimensions = prop_def(DenseArrayBase)


@irdl_op_definition
class ExpAddOp(IRDLOperation):
    """``exp(x) + c`` (``subtract``: ``exp(x) - c``; ``exp_subtracted``: ``c - exp(x)``) for f32, the exp's
    polynomial ``y`` and scale ``2**n`` (XLA's f32 exp, :mod:`lowering.kernels.xla_scalar`) contracted with the add:
    ``fma(y, 2**n, c)`` rounded once -- where the exp's product would overflow (``exp(x) - x`` at ``+inf`` is
    ``-inf``) or fall below the normal range, not the rounded exp plus ``c`` (executor-internal; made only by
    :func:`passes.fma_contraction.contract_fma`, which says when LLVM contracts the exp's multiply)."""

    name = "hlo_internal.exp_add"
    traits = traits_def(Pure())  # (no effects: computed ahead on constants, deduplicated, dropped when unused)
    x = operand_def()
    c = operand_def()
    result = result_def()
    subtract = opt_prop_def(UnitAttr)
    exp_subtracted = opt_prop_def(UnitAttr)

    def verify_(self) -> None:
        if self.subtract is not None and self.exp_subtracted is not None:
            raise HloVerifyError(f"{self.name}: 'subtract' (exp(x) - c) and 'exp_subtracted' (c - exp(x)) exclude "
                                 "each other")


OPS = [FusedMultiplyAddOp, MultiplyReduceOp, MultiplyAddReduceOp, ExpAddOp]
"""Every ``hlo_internal`` op class."""

HLO_INTERNAL = Dialect("hlo_internal", OPS)
"""The dialect of the executor-internal ops."""
