"""Small helpers shared by the pass modules: constants, value replacement, op creation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from xla_dialect.layout import Layout, LayoutAttr, strip_layout
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.base import HloOp, i64_array
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.types import numpy_dtype


_TYPES: dict[tuple, TensorType] = {}
_ARRAYS: dict[tuple, object] = {}
_CACHE_LIMIT = 1 << 16


def tensor_type(element_type: Attribute, shape: Sequence[int], layout: Layout | None = None) -> TensorType:
    """``TensorType(element_type, shape, #hlo.layout<layout>)``, cached (xDSL types are costly to build)."""
    key = (element_type, tuple(shape), layout)
    t = _TYPES.get(key)
    if t is None:
        if len(_TYPES) > _CACHE_LIMIT:
            _TYPES.clear()
        t = _TYPES[key] = (TensorType(element_type, list(shape), LayoutAttr(layout)) if layout is not None
                           else TensorType(element_type, list(shape)))
    return t


def i64s(values: Sequence[int]):
    """A cached ``array<i64: ...>`` property value."""
    key = tuple(int(v) for v in values)
    a = _ARRAYS.get(key)
    if a is None:
        if len(_ARRAYS) > _CACHE_LIMIT:
            _ARRAYS.clear()
        a = _ARRAYS[key] = i64_array(key)
    return a


def constant_array(value: SSAValue) -> np.ndarray | None:
    """The array of ``value`` when it is defined by ``hlo.constant``, else None."""
    owner = value.owner
    if isinstance(owner, ConstantOp):
        return owner.value.array
    return None


def splat_scalar(value: SSAValue) -> np.ndarray | None:
    """The 0-d array every element of a constant ``value`` equals bit for bit, else None."""
    array = constant_array(value)
    if array is None or array.size == 0:
        return None
    flat = array.reshape(-1)
    if array.size > 1:
        raw = np.ascontiguousarray(flat).view(np.uint8).reshape(array.size, -1)
        if not (raw == raw[:1]).all():
            return None
    return flat[0:1].reshape(())


def make_constant(array: np.ndarray, result_type: TensorType) -> ConstantOp:
    """An ``hlo.constant`` of ``array`` whose result has exactly ``result_type`` (layout kept)."""
    array = np.asarray(array, dtype=numpy_dtype(result_type)).reshape(result_type.get_shape())
    literal_type = strip_layout(result_type)
    return ConstantOp.create(properties={"value": DenseLiteralAttr.from_array(array, literal_type)},
                             result_types=[result_type])


def create(op_cls: type[HloOp], operands: Sequence[SSAValue], props: dict | None = None,
           result_types: Sequence[Attribute] | None = None, regions=()) -> Operation:
    """Create an hlo op with result types from its ``infer`` (or the given ones)."""
    props = {k: v for k, v in (props or {}).items() if v is not None}
    if result_types is None:
        result_types = op_cls.infer([o.type for o in operands], props, list(regions), None)
    return op_cls.create(operands=list(operands), properties=props, result_types=list(result_types),
                         regions=list(regions))


def forward(rewriter: PatternRewriter, op: Operation, value: SSAValue) -> bool:
    """Replace ``op``'s single result by ``value`` when the types agree exactly (layouts too)."""
    if value.type != op.results[0].type:
        return False
    rewriter.replace(op, [], [value])
    return True
