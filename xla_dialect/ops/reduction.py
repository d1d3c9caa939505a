"""Ops applying a scalar computation over arrays: ``hlo.reduce`` (variadic) and ``hlo.map``.

``hlo.reduce`` takes N arrays followed by N scalar init values (StableHLO's
operand order, as one operand list) and a region of 2N scalar parameters
(N accumulators, then N input elements) returning N scalars; it reduces the
``dimensions`` of every array at once. ``hlo.map`` applies a region of N
scalar parameters returning one scalar at every index of N same-shaped arrays.

XLA accepts reduction computations whose float types differ from the inputs'
only in precision; here the computation's parameter and result element types
must equal the operands' (a documented restriction).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase, TensorType
from xdsl.traits import RecursiveMemoryEffect
from xdsl.irdl import irdl_op_definition, prop_def, region_def, result_def, traits_def, var_operand_def, var_result_def

from .base import (
    HloOp, check_dims_in_range, fail, fmt, i64_array, ints, make_tensor, tensor, set_quantized, builder_method,
)
from .control_flow import (
    as_list,
    check_region,
    one_or_tuple,
    precheck,
    same_shape_arrays,
    scalar_of,
    scalar_params,
    types_text,
)


@irdl_op_definition
class ReduceOp(HloOp):
    """``hlo.reduce``: reduces ``dimensions`` of N arrays with a 2N-parameter computation.

    Operands: the N arrays, then the N scalar init values. Result ``i`` has
    array ``i``'s element type and its dimensions minus ``dimensions``.
    """

    name = "hlo.reduce"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    results_ = var_result_def()
    dimensions = prop_def(DenseArrayBase)
    body = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $body"

    @property
    def inputs(self):
        """The N arrays reduced."""
        return self.operands_[: len(self.operands_) // 2]

    @property
    def init_values(self):
        """The N scalar init values."""
        return self.operands_[len(self.operands_) // 2:]

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        count = len(operand_types)
        if count < 2 or count % 2:
            fail(cls.name, f"needs N >= 1 operands followed by N init values, got {count} operands in all")
        n = count // 2
        inputs, shape = same_shape_arrays(cls.name, operand_types[:n])
        inits = [tensor(cls.name, t, f"init value #{i}") for i, t in enumerate(operand_types[n:])]
        for i, (x, init) in enumerate(zip(inputs, inits)):
            if init.get_shape():
                fail(cls.name, f"init value #{i} must be a scalar, got {fmt(init)}")
            if init.element_type != x.element_type:
                fail(cls.name, f"init value #{i} {fmt(init)} must have operand #{i}'s element type "
                               f"{fmt(scalar_of(x))}")
        dims = ints(props.get("dimensions"))
        check_dims_in_range(cls.name, dims, len(shape), "dimensions")
        out_shape = [s for d, s in enumerate(shape) if d not in dims]
        results = [make_tensor(x.element_type, out_shape) for x in inputs]
        if regions:
            scalars = [scalar_of(x) for x in inputs]
            check_region(cls.name, regions[0], scalars + scalars, "reduction computation", scalars)
        return results


@irdl_op_definition
class MapOp(HloOp):
    """``hlo.map``: applies a scalar computation of N parameters at every index of N arrays.

    ``dimensions`` must be ``[0, ..., rank-1]`` (XLA maps over all dimensions).
    """

    name = "hlo.map"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    result = result_def(TensorType)
    dimensions = prop_def(DenseArrayBase)
    computation = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $result) $computation"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays, shape = same_shape_arrays(cls.name, operand_types)
        dims = ints(props.get("dimensions"))
        if list(dims) != list(range(len(shape))):
            fail(cls.name, f"dimensions must be [0, ..., {len(shape) - 1}] (all dimensions, in order) for "
                           f"operands of rank {len(shape)}, got {list(dims)}")
        if not regions:  # operands checked before the computation is built
            return list(result_types or [])
        results = check_region(cls.name, regions[0], [scalar_of(t) for t in arrays], "mapped computation")
        if len(results) != 1 or not isinstance(results[0], TensorType) or results[0].get_shape():
            fail(cls.name, f"mapped computation must return one scalar, returns {types_text(results)}")
        return [make_tensor(results[0].element_type, shape)]


OPS = [ReduceOp, MapOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("transparent", ReduceOp, MapOp)  # their computations are lowered like any region


class ReductionBuilder:
    """Builder methods of the reduction family."""

    @builder_method
    def reduce(self, operands, init_values, computation, dimensions: Sequence[int]):
        """``hlo.reduce``: reduce ``dimensions`` of ``operands`` (one XlaOp or a list of N).

        ``init_values`` are N scalars; ``computation`` (a callable or a built
        computation) takes N accumulators then N input elements and returns N
        scalars. Returns one XlaOp, or a tuple of N for a variadic reduce.
        """
        arrays, inits = as_list(operands), as_list(init_values)
        if len(arrays) != len(inits):
            from ..errors import BuilderError

            raise BuilderError(f"{self._caller()}: {len(arrays)} operands but {len(inits)} init values; "
                               f"each operand needs one init value")
        props = {"dimensions": i64_array(dimensions)}
        precheck(self, ReduceOp, [*arrays, *inits], props)
        scalars = scalar_params(self, [self._value(a).type for a in arrays])
        region = self._region(computation, scalars + scalars, "computation")
        return one_or_tuple(self._emit(ReduceOp, [*arrays, *inits], props, [region]))

    @builder_method
    def reduce_all(self, operand, init_value, computation):
        """``hlo.reduce`` over every dimension of ``operand`` (XLA's ReduceAll)."""
        t = self._value(operand).type
        rank = t.get_num_dims() if isinstance(t, TensorType) else 0
        return self.reduce(operand, init_value, computation, range(rank))

    @builder_method
    def map(self, operands, computation, dimensions: Sequence[int] | None = None):  # noqa: A003 - XLA's name
        """``hlo.map``: apply the scalar ``computation`` element-wise over ``operands`` (same shapes).

        ``dimensions`` defaults to all dimensions, the only form XLA accepts.
        """
        arrays = as_list(operands)
        if dimensions is None:
            first = self._value(arrays[0], "operand #0").type if arrays else None
            dimensions = range(first.get_num_dims()) if isinstance(first, TensorType) else ()
        props = {"dimensions": i64_array(dimensions)}
        precheck(self, MapOp, arrays, props)
        params = scalar_params(self, [self._value(a).type for a in arrays])
        region = self._region(computation, params, "computation")
        return self._emit1(MapOp, arrays, props, [region])
