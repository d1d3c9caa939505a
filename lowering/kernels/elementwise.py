"""NumPy kernels: element-wise unary, binary, comparison, select, clamp.

Kernels are looked up in tables keyed by op mnemonic. Binary kernels handle
XLA's implicit broadcasting by reshaping operands at lowering time so that
NumPy broadcasting produces exactly XLA's result; when operand shapes already
match, the kernel *is* the NumPy ufunc (no wrapper, no overhead).
"""

from __future__ import annotations

import numpy as np

from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import ints

from ..registry import register

UNARY_KERNELS = {
    "abs": np.abs,
    "cbrt": np.cbrt,
    "ceil": np.ceil,
    "cosine": np.cos,
    "exponential": np.exp,
    "exponential_minus_one": np.expm1,
    "floor": np.floor,
    "log": np.log,
    "log_plus_one": np.log1p,
    "negate": np.negative,
    "round_nearest_even": np.rint,
    "sine": np.sin,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": np.tanh,
}
"""Unary op mnemonic -> NumPy function (XLA semantics)."""

BINARY_KERNELS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}
"""Binary op mnemonic -> NumPy function (XLA semantics)."""


def broadcast_views(op):
    """Shapes to reshape lhs/rhs to so NumPy broadcasting gives XLA's result (None: as is)."""
    lhs_shape = op.operands[0].type.get_shape()
    rhs_shape = op.operands[1].type.get_shape()
    bdims = ints(op.properties.get("broadcast_dimensions"))
    if len(lhs_shape) == len(rhs_shape) or not bdims:
        return None, None
    out_rank = max(len(lhs_shape), len(rhs_shape))

    def view(shape):
        if len(shape) == out_rank:
            return None
        v = [1] * out_rank
        for i, d in enumerate(bdims):
            v[d] = shape[i]
        return tuple(v)

    return view(lhs_shape), view(rhs_shape)


def binary_kernel(fn, op):
    """Wrap a NumPy binary function with the op's implicit broadcasting."""
    lv, rv = broadcast_views(op)
    out_shape = op.results[0].type.get_shape()
    if lv is None and rv is None:
        if op.operands[0].type.get_shape() == op.operands[1].type.get_shape() == out_shape:
            return fn
        return lambda a, b: np.broadcast_to(fn(a, b), out_shape)
    if lv is None:
        return lambda a, b: fn(a, np.reshape(b, rv))
    return lambda a, b: fn(np.reshape(a, lv), b)


def _unary_factory(op, ctx):
    return UNARY_KERNELS[op.SPEC.mnemonic]


def _binary_factory(op, ctx):
    return binary_kernel(BINARY_KERNELS[op.SPEC.mnemonic], op)


for _mnemonic in UNARY_KERNELS:
    register(ew.UNARY_OP_CLASSES[_mnemonic])(_unary_factory)
for _mnemonic in BINARY_KERNELS:
    register(ew.BINARY_OP_CLASSES[_mnemonic])(_binary_factory)


@register(ew.SelectOp)
def _select(op, ctx):
    return np.where
