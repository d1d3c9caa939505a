"""``hlo.sort``: variadic sort along one dimension with a comparator computation.

All N operands have the same dimensions (element types may differ) and are
permuted together. The comparator takes 2N scalars (``lhs_0, rhs_0, lhs_1,
rhs_1, ...``) and returns ``pred[]``: true when the lhs element must come
before the rhs element. ``dimension`` may be negative (counted from the end,
as StableHLO allows); the builder normalizes XLA's default ``-1``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import BoolAttr, IntegerAttr, IntegerType
from xdsl.traits import RecursiveMemoryEffect
from xdsl.irdl import irdl_op_definition, opt_prop_def, prop_def, region_def, traits_def, var_operand_def, var_result_def

from .base import HloOp, fail, make_tensor, set_quantized, builder_method
from .control_flow import (
    as_list,
    check_region,
    is_scalar_pred,
    one_or_tuple,
    precheck,
    same_shape_arrays,
    scalar_of,
    scalar_params,
    types_text,
)


@irdl_op_definition
class SortOp(HloOp):
    """``hlo.sort``: sorts N same-shaped arrays together along ``dimension`` with a comparator region."""

    name = "hlo.sort"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    results_ = var_result_def()
    dimension = prop_def(IntegerAttr)
    is_stable = opt_prop_def(IntegerAttr[IntegerType])
    comparator = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $comparator"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays, shape = same_shape_arrays(cls.name, operand_types)
        dim = props["dimension"].value.data
        rank = len(shape)
        if not -rank <= dim < rank:
            fail(cls.name, f"dimension {dim} is out of range for operands of rank {rank}")
        if regions:
            params = [p for t in arrays for p in (scalar_of(t), scalar_of(t))]
            results = check_region(cls.name, regions[0], params, "comparator")
            if len(results) != 1 or not is_scalar_pred(results[0]):
                fail(cls.name, f"comparator must return pred[], returns {types_text(results)}")
        return [make_tensor(t.element_type, shape) for t in arrays]


OPS = [SortOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("transparent", SortOp)  # the comparator is lowered like any region


def _default_less(*params):
    """XLA's CreateScalarLtComputation: ``lhs_0 < rhs_0`` (default compare type)."""
    return params[0].builder.lt(params[0], params[1])


class SortingBuilder:
    """Builder methods of the sorting family."""

    @builder_method
    def sort(self, operands, comparator=None, dimension: int = -1, is_stable: bool = False):
        """``hlo.sort``: sort ``operands`` (one XlaOp or a list) together along ``dimension``.

        ``comparator`` (callable or built computation) takes 2N scalars
        ``lhs_0, rhs_0, lhs_1, rhs_1, ...`` and returns ``pred[]``; the default
        is ``lhs_0 < rhs_0`` (XLA's less-than on the first operand). Returns one
        XlaOp, or a tuple of N.
        """
        arrays = as_list(operands)
        first = self._value(arrays[0], "operand #0").type if arrays else None
        dim = int(dimension)
        if dim < 0 and first is not None and hasattr(first, "get_num_dims"):
            dim += first.get_num_dims()  # XLA's -1 = the last dimension
        props = {"dimension": IntegerAttr(dim, 64), "is_stable": BoolAttr.from_bool(bool(is_stable))}
        precheck(self, SortOp, arrays, props)
        params = [p for a in arrays for p in scalar_params(self, [self._value(a).type] * 2)]
        region = self._region(comparator if comparator is not None else _default_less, params, "comparator")
        return one_or_tuple(self._emit(SortOp, arrays, props, [region]))
