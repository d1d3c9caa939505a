"""NumPy kernels: constant and iota."""

from __future__ import annotations

import numpy as np

from xla_dialect.ops.constants import ConstantOp, IotaOp

from .registry import Constant, register


@register(ConstantOp)
def _constant(op, ctx):
    return Constant(op.value.array)


@register(IotaOp)
def _iota(op, ctx):
    out = op.output.type
    shape = out.get_shape()
    dim = op.iota_dimension.value.data
    dtype = ctx.dtype(out)
    ramp = np.arange(shape[dim], dtype=np.int64 if dtype.kind in "iub" else np.float64).astype(dtype)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    value = np.broadcast_to(ramp.reshape(view), shape).copy()
    value.flags.writeable = False
    return Constant(value)
