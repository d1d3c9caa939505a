"""Control flow and structure: return, tuple, get_tuple_element, call, while, conditional."""

from __future__ import annotations

from xdsl.irdl import irdl_op_definition, traits_def, var_operand_def
from xdsl.traits import IsTerminator

from .base import HloOp


@irdl_op_definition
class ReturnOp(HloOp):
    """``hlo.return``: terminates the region of a region-carrying op (reduce, while, sort, ...)."""

    name = "hlo.return"
    results_ = var_operand_def()
    traits = traits_def(IsTerminator())

    assembly_format = "($results_^ `:` type($results_))? attr-dict"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return []


OPS = [ReturnOp]


class ControlFlowBuilder:
    """Builder methods of the control_flow family."""
