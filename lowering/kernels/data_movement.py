"""NumPy kernels: broadcast, broadcast_in_dim, reshape, transpose, slice, concatenate, pad, reverse.

Everything static (index tuples, permutations, view shapes) is computed once in
the factory. Several kernels return NumPy views (broadcast, transpose, slice,
reverse): kernels never write to their inputs, so sharing memory is safe inside
a program.
"""

from __future__ import annotations

import math

import numpy as np

from xla_dialect.ops import data_movement as dm
from xla_dialect.ops.base import ints

from .registry import register


def _identity(x):
    return x


def _shape(value) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


@register(dm.BroadcastOp, dm.BroadcastInDimOp)
def _broadcast(op, ctx):
    out_shape = _shape(op.result)
    in_shape = _shape(op.operand)
    if isinstance(op, dm.BroadcastOp):
        bdims = range(len(out_shape) - len(in_shape), len(out_shape))
    else:
        bdims = ints(op.broadcast_dimensions)
    # broadcast_dimensions are increasing, so a reshape puts each operand
    # dimension in its place (size 1 elsewhere); NumPy broadcasting does the rest.
    view = [1] * len(out_shape)
    for i, d in enumerate(bdims):
        view[d] = in_shape[i]
    view = tuple(view)
    if math.prod(view) == math.prod(out_shape):  # only size-1 dimensions added: a reshape is enough
        return lambda x: np.reshape(x, out_shape)
    return lambda x: np.broadcast_to(np.reshape(x, view), out_shape)


@register(dm.ReshapeOp)
def _reshape(op, ctx):
    out_shape = _shape(op.result)
    if out_shape == _shape(op.operand):
        return _identity
    return lambda x: np.reshape(x, out_shape)


@register(dm.TransposeOp)
def _transpose(op, ctx):
    perm = ints(op.permutation)
    if perm == tuple(range(len(perm))):
        return _identity
    return lambda x: np.transpose(x, perm)


@register(dm.SliceOp)
def _slice(op, ctx):
    index = tuple(slice(s, l, k) for s, l, k in zip(ints(op.start_indices), ints(op.limit_indices), ints(op.strides)))
    return lambda x: x[index]


@register(dm.ConcatenateOp)
def _concatenate(op, ctx):
    axis = op.dimension.value.data
    return lambda *xs: np.concatenate(xs, axis=axis)


@register(dm.ReverseOp)
def _reverse(op, ctx):
    dims = set(ints(op.dimensions))
    index = tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(len(_shape(op.operand))))
    return lambda x: x[index]


def pad_indices(in_shape, lows, highs, interiors, out_shape):
    """Index tuples ``(result_index, operand_index)`` so that ``result[result_index] = operand[operand_index]``
    performs XLA Pad after filling the result with the padding value; None when no operand
    element survives negative edge padding.

    Operand element ``i`` lands at ``low + i * (interior + 1)``; elements whose
    position falls outside ``[0, out)`` are the ones negative padding removes.
    """
    res_index, op_index = [], []
    for n, low, interior, out in zip(in_shape, lows, interiors, out_shape):
        step = interior + 1
        first = max(0, -(low // step) if low < 0 else 0)  # smallest i with low + i*step >= 0
        last = min(n - 1, (out - 1 - low) // step) if out - 1 - low >= 0 else -1
        if first > last:
            return None
        res_index.append(slice(low + first * step, low + last * step + 1, step))
        op_index.append(slice(first, last + 1))
    return tuple(res_index), tuple(op_index)


@register(dm.PadOp)
def _pad(op, ctx):
    in_shape = _shape(op.operand)
    out_shape = _shape(op.result)
    dtype = ctx.dtype(op.result.type)
    lows, highs, interiors = (ints(getattr(op, k)) for k in ("edge_padding_low", "edge_padding_high", "interior_padding"))
    if not any(lows) and not any(highs) and not any(interiors):
        return lambda x, v: x
    indices = pad_indices(in_shape, lows, highs, interiors, out_shape)
    if indices is None:
        return lambda x, v: np.full(out_shape, v, dtype=dtype)
    res_index, op_index = indices

    def pad(x, v):
        out = np.full(out_shape, v, dtype=dtype)
        out[res_index] = x[op_index]
        return out

    return pad


def _compact(x):
    a = np.asarray(x)
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


@register(dm.CopyOp)
def _copy(op, ctx):
    # hlo.copy only changes the layout; the logical value is the operand's. It is a
    # new buffer, so hand back a C-contiguous array (views become compact copies).
    return _compact


@register(dm.BitcastOp)
def _bitcast(op, ctx):
    # The bytes of the operand's physical buffer read with the result's layout. With one
    # element type the mapping is an index table computed once here (or a plain reshape
    # when both layouts store the elements in the same order); otherwise the buffer is
    # materialized and reinterpreted.
    from xla_dialect.layout import from_physical, linear_indices, physical_element_count, to_physical

    src, dst = op.operand.type, op.result.type
    out_dims = _shape(op.result)
    in_dtype, out_dtype = ctx.dtype(src), ctx.dtype(dst)
    if in_dtype == out_dtype:
        src_pos = linear_indices(src).reshape(-1)
        dst_pos = linear_indices(dst).reshape(-1)
        owner = np.full(physical_element_count(src), -1, dtype=np.int64)
        owner[src_pos] = np.arange(src_pos.size)
        take = owner[dst_pos]
        if take.size and take.min() < 0:  # reads padding of the operand's tiles: zeros, as laid out
            return lambda x: from_physical(to_physical(x, src), dst)
        if np.array_equal(take, np.arange(take.size)):
            return lambda x: np.reshape(x, out_dims)
        return lambda x: np.asarray(x).reshape(-1)[take].reshape(out_dims)

    def reinterpret(x):
        raw = to_physical(np.asarray(x, in_dtype), src).view(np.uint8)
        return from_physical(raw.view(out_dtype), dst)

    return reinterpret
