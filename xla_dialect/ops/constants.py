"""Ops that create values from nothing: constant and iota."""

from __future__ import annotations

import numpy as np

from xdsl.dialects.builtin import IntegerAttr, TensorType
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, prop_def, result_def, traits_def

from ..literal import DenseLiteralAttr
from ..layout import strip_layout
from .base import HloOp, fail, fmt, kind_of, make_tensor, set_quantized, builder_method


@irdl_op_definition
class ConstantOp(HloOp):
    """``hlo.constant``: a literal array (``#hlo.dense<...>``)."""

    name = "hlo.constant"
    traits = traits_def(Pure())
    value = prop_def(DenseLiteralAttr)
    output = result_def()

    assembly_format = "attr-dict $value `:` type($output)"

    def splat_value(self):
        """The 0-d array every element equals bit for bit (a broadcast scalar), or None (also when empty)."""
        array = self.value.array
        if array.size == 0:
            return None
        flat = array.reshape(-1)
        if array.size > 1:
            raw = np.ascontiguousarray(flat).view(np.uint8).reshape(array.size, -1)
            if not (raw[-1] == raw[0]).all() or not (raw == raw[:1]).all():  # (the last first: a cheap no)
                return None
        return flat[0:1].reshape(())

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        literal = props["value"].data
        inferred = make_tensor(literal.type.element_type, literal.type.get_shape())
        if result_types:
            # Keep the declared layout (constants may be given any layout).
            if strip_layout(result_types[0]) == inferred:
                return [result_types[0]]
        return [inferred]


@irdl_op_definition
class IotaOp(HloOp):
    """``hlo.iota``: values 0, 1, 2, ... along ``iota_dimension``, broadcast along the others."""

    name = "hlo.iota"
    traits = traits_def(Pure())
    iota_dimension = prop_def(IntegerAttr)
    output = result_def()

    assembly_format = "attr-dict `:` type($output)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if not result_types:
            fail(cls.name, "the result type must be given")
        (out,) = result_types
        if not isinstance(out, TensorType):
            fail(cls.name, f"result must be an array, got {fmt(out)}")
        dim = props["iota_dimension"].value.data
        if not 0 <= dim < max(out.get_num_dims(), 0) :
            fail(cls.name, f"iota_dimension {dim} is out of range for result {fmt(out)}")
        if kind_of(out) == "pred":
            fail(cls.name, "iota of pred elements is not defined")
        return [out]


OPS = [ConstantOp, IotaOp]


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("compute", IotaOp)  # quantize(index)
set_quantized("transparent", ConstantOp)  # a quantized literal holds storage integers


class ConstantsBuilder:
    """Builder methods of the constants family (``constant`` itself is in the builder core)."""

    @builder_method
    def iota(self, shape, iota_dimension: int = 0):
        """``hlo.iota``: ``shape`` (XLA text or type) counting along ``iota_dimension``."""
        t = self._type(shape)
        return self._emit1(IotaOp, [], {"iota_dimension": IntegerAttr(int(iota_dimension), 64)}, (), [t])
