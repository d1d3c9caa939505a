"""``hlo_internal``: ops that are not XLA's, made by the executor's passes for the executor.

:class:`FusedMultiplyAddOp` (``hlo_internal.fma``) is ``a * b + c`` rounded once: XLA CPU's floating-point
contraction, made only by the ``contract-fma`` pass (:mod:`passes.fma_contraction`, which says when XLA
contracts); its kernel and scalar definition are registered with the kernels
(:func:`lowering.kernels.elementwise.fused_multiply_add_kernel`). It is defined here, in the IR package, so
that the passes that make it and the kernels and compiled paths that run it name the same class.
:data:`HLO_INTERNAL` is its dialect (not loaded by :func:`xla_dialect.make_context`: hlo text never holds
these ops).
"""

from __future__ import annotations

from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def


@irdl_op_definition
class FusedMultiplyAddOp(IRDLOperation):
    """``a * b + c`` rounded once (executor-internal; made only by :func:`passes.fma_contraction.contract_fma`)."""

    name = "hlo_internal.fma"
    a = operand_def()
    b = operand_def()
    c = operand_def()
    result = result_def()


OPS = [FusedMultiplyAddOp]
"""Every ``hlo_internal`` op class."""

HLO_INTERNAL = Dialect("hlo_internal", OPS)
"""The dialect of the executor-internal ops."""
