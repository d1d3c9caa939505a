"""NumPy kernels. Indexing: gather, scatter, dynamic_slice, dynamic_update_slice.

Gather and scatter work on *linear* element offsets into the operand (C
order). Everything static is computed once in the factory: the operand's
strides, the offsets contributed by the window (offset) dimensions and by the
batching dimensions, and where each dimension of the index array lands. At run
time only the start indices are read:

* **gather**: each index vector component is clamped to
  ``[0, dim - slice_size]`` (XLA), multiplied by its operand stride and placed
  on the output's batch dimensions; adding the static window and batching
  offsets (NumPy broadcasting) gives the linear offset of every output
  element, read with one fancy-index gather. No loop over batch elements.
  A slice size of 0 in a collapsed or batching dimension (accepted by XLA,
  though the output is not empty) reads nothing; the result is zeros, as XLA
  CPU gives.
* **scatter**: the update arrays are viewed as ``(scatter index, window
  element)`` pairs (update scatter dimensions first, then window dimensions,
  which is the order XLA applies them in). A window is *skipped entirely* when
  any of its start indices is out of ``[0, dim - window_size]`` (XLA's
  semantics; StableHLO's spec drops only the out-of-bounds elements).
  Duplicates are found per window when windows can only coincide or be
  disjoint (each indexed dimension's window is one element or the whole
  dimension: row and element scatters), else per element. The update
  computation is applied by one of these strategies, chosen at lowering time
  from the region:

  - every result ``i`` is ``op(current_i, update_i)`` with ``op`` one of add,
    multiply, maximum, minimum, and, or, xor on an element type whose NumPy
    ufunc is exactly XLA's (not the widened low-precision or sub-byte types):
    ``ufunc.at`` (which applies duplicates sequentially, in update order, as
    XLA CPU does). Float maximum/minimum additionally order ``-0 < +0``;
  - every result is the update (``return update``: replace) or the current
    value: a plain assignment. With duplicate indices XLA leaves the winner
    unspecified; here the last update in XLA's application order wins (unless
    ``unique_indices`` promises there are none, then NumPy assigns directly);
  - any other computation keeps XLA's *sequential* semantics without a loop
    over update elements: updates are grouped into rounds in which every
    target appears at most once (the k-th update of each target is in round
    k, in update order), and each round applies the compiled region function
    to whole arrays. The number of rounds is the largest number of updates to
    one element. A region that is not element-wise (e.g. it contains a
    reshape or reduce of its scalars) is applied per element by
    :func:`~lowering.kernels.control_flow.array_applier`: the documented
    slow path.
* **dynamic_slice / dynamic_update_slice**: starts clamped to
  ``[0, dim - size]`` then a basic NumPy slice (a view) or slice assignment
  into a copy.

Index arrays of any integer type are read as int64; u64 values above 2**62
are clamped there first (they are out of bounds either way).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from xdsl.ir import OpResult

from xla_dialect.ops.base import ints
from xla_dialect.ops.indexing import DynamicSliceOp, DynamicUpdateSliceOp, GatherOp, ScatterOp

from .registry import register
from .control_flow import BINARY_BODY_UFUNCS, array_applier, result_dtypes
from .elementwise import elem_of

_INDEX_CAP = np.uint64(1 << 62)


def _as_int64(indices) -> np.ndarray:
    """Integer indices of any width as int64 (huge unsigned values capped, still out of bounds)."""
    x = np.asarray(indices)
    if x.dtype == np.uint64:
        x = np.minimum(x, _INDEX_CAP)
    return x.astype(np.int64)


def _strides(shape) -> list[int]:
    """C-order element strides of ``shape``."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def _along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """``values`` (1-D) laid along ``axis`` of a rank-``rank`` array of size-1 dimensions elsewhere."""
    view = [1] * rank
    view[axis] = len(values)
    return values.reshape(view)


def _index_vectors(indices, index_vector_dim: int) -> np.ndarray:
    """The index array as ``(*batch_shape, vector_size)`` int64 (index vectors last)."""
    idx = _as_int64(indices)
    if index_vector_dim == idx.ndim:
        return idx[..., None]  # the implicit trailing dimension of size 1
    return np.moveaxis(idx, index_vector_dim, -1)


def _batch_position(index_dim: int, index_vector_dim: int) -> int:
    """Position of index-array dimension ``index_dim`` among its batch dimensions (index_vector_dim removed)."""
    return index_dim - (index_dim > index_vector_dim)


# ----------------------------------------------------------------------------
# gather
# ----------------------------------------------------------------------------


class GatherPlan(NamedTuple):
    """Where each output element of a gather comes from, as XLA defines it: its linear operand offset is
    ``static`` (window offsets and batching iotas, broadcastable to ``out_shape``) plus, per index vector, the
    clamped start indices ``starts`` ``(k, largest start, stride)`` dotted with the operand's strides, laid out
    by ``batch_view``. Used by the kernel and by compiled loops (lowering.executor.compiled_loops)."""

    out_shape: tuple[int, ...]
    static: np.ndarray
    batch_view: list[int]
    starts: list[tuple[int, int, int]]
    index_vector_dim: int
    zero: bool  # (an empty slice of a non-empty result: zeros)


def gather_plan(op) -> GatherPlan:
    """The :class:`GatherPlan` of gather ``op``."""
    shape = tuple(op.operand.type.get_shape())
    out_shape = tuple(op.result.type.get_shape())
    rank, out_rank = len(shape), len(out_shape)
    offset_dims = ints(op.offset_dims)
    collapsed = ints(op.collapsed_slice_dims)
    batching = ints(op.operand_batching_dims)
    index_batching = ints(op.start_indices_batching_dims)
    index_map = ints(op.start_index_map)
    slice_sizes = ints(op.slice_sizes)
    ivd = op.index_vector_dim.value.data
    strides = _strides(shape)
    batch_out = [d for d in range(out_rank) if d not in offset_dims]  # output batch dims, in index-array order
    # Static part of each output element's linear operand offset: window offsets and batching iotas.
    static = np.zeros((1,) * out_rank, np.int64)
    window_dims = [d for d in range(rank) if d not in collapsed and d not in batching]
    for k, d in enumerate(window_dims):
        static = static + _along(np.arange(slice_sizes[d], dtype=np.int64) * strides[d], offset_dims[k], out_rank)
    for od, sd in zip(batching, index_batching):
        static = static + _along(np.arange(shape[od], dtype=np.int64) * strides[od],
                                 batch_out[_batch_position(sd, ivd)], out_rank)
    batch_view = [1] * out_rank
    for d in batch_out:
        batch_view[d] = out_shape[d]
    starts = [(k, shape[d] - slice_sizes[d], strides[d]) for k, d in enumerate(index_map)]
    return GatherPlan(out_shape, static, batch_view, starts, ivd, bool(math.prod(out_shape) and 0 in slice_sizes))


@register(GatherOp)
def _gather(op, ctx):
    plan = gather_plan(op)
    dtype = ctx.dtype(op.result.type)
    out_shape, static, batch_view, starts, ivd = plan.out_shape, plan.static, plan.batch_view, plan.starts, \
        plan.index_vector_dim

    if plan.zero:
        zeros = np.zeros(out_shape, dtype)
        return lambda operand, indices: zeros.copy()

    def gather_kernel(operand, indices):
        lin = static
        if starts:
            idx = _index_vectors(indices, ivd)
            dynamic = 0
            for k, high, stride in starts:
                dynamic = dynamic + np.minimum(np.maximum(idx[..., k], 0), high) * stride
            lin = lin + np.reshape(dynamic, batch_view)
        return np.reshape(operand, -1)[np.broadcast_to(lin, out_shape)]

    return gather_kernel


# ----------------------------------------------------------------------------
# scatter
# ----------------------------------------------------------------------------


def _components(region, n: int):
    """Per result of the update computation: 'keep', 'replace' or the ufunc of
    ``op(current, update)``; None when some result is anything else."""
    block = region.block
    args = list(block.args)
    out = []
    for i, v in enumerate(block.last_op.operands):
        if v is args[i]:
            out.append("keep")
        elif v is args[n + i]:
            out.append("replace")
        elif (isinstance(v, OpResult) and type(v.op) in BINARY_BODY_UFUNCS and len(v.op.operands) == 2
              and v.op.properties.get("broadcast_dimensions") is None
              and set(v.op.operands) == {args[i], args[n + i]}):
            out.append(BINARY_BODY_UFUNCS[type(v.op)])
        else:
            return None
    return out


def _fast_ufunc(ufunc, type_) -> bool:
    """True when ``ufunc.at`` on this element type computes exactly XLA's op."""
    e = elem_of(type_)
    if e.widened:
        return False  # f16/bf16/f8 and sub-byte ints: the region function rounds/wraps per update
    if ufunc in (np.maximum, np.minimum):
        return e.kind != "complex"  # XLA's complex max/min order differs from NumPy's
    return True


def _last_of_each(targets: np.ndarray) -> np.ndarray:
    """Positions of the last occurrence of each distinct target (sequential replace semantics)."""
    _, first_in_reversed = np.unique(targets[::-1], return_index=True)
    return len(targets) - 1 - first_in_reversed


def _rounds(targets: np.ndarray) -> list[np.ndarray]:
    """Update positions grouped so each group hits distinct targets; round k holds every
    target's k-th update (in update order), so applying rounds in order is sequential."""
    if not len(targets):
        return []
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    pos = np.arange(len(targets))
    first = np.ones(len(targets), bool)
    first[1:] = sorted_t[1:] != sorted_t[:-1]
    rank_sorted = pos - np.maximum.accumulate(np.where(first, pos, 0))
    rank = np.empty_like(rank_sorted)
    rank[order] = rank_sorted
    by_round = np.argsort(rank, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rank))])
    return [by_round[bounds[r]:bounds[r + 1]] for r in range(len(bounds) - 1)]


def _apply_ufunc(ufunc, flat, targets, values, signed_zero: bool) -> None:
    if not signed_zero:
        ufunc.at(flat, targets, values)
        return
    # XLA orders -0 < +0; NumPy's maximum/minimum return either zero. A zero
    # maximum is +0 iff some contributor is +0 (a zero minimum -0 iff some is -0).
    # Only at the targets: under the flush mode a denormal reads as zero, and one the scatter does not touch keeps
    # its value (long fuzz campaign, session 20: a scatter-max turned an untouched f32 denormal into +0).
    want_negative = ufunc is np.minimum
    touched = np.unique(targets)
    hit = np.zeros(flat.shape, bool)
    hit[touched] = (flat[touched] == 0) & (np.signbit(flat[touched]) == want_negative)
    hit[targets[(values == 0) & (np.signbit(values) == want_negative)]] = True
    ufunc.at(flat, targets, values)
    flat[(flat == 0) & hit] = -0.0 if want_negative else 0.0


class ScatterPlan(NamedTuple):
    """Where each update element of a scatter goes, as XLA defines it, in XLA's application order (scatter
    index by scatter index, each window's elements in row-major order): the updates transposed by ``perm`` and
    seen as ``(count, width)``; window ``c`` starts at linear operand offset ``batch_lin[c]`` plus, per index
    vector component ``(k, highest valid start, stride)`` of ``starts``, the component times the stride -- a
    window whose start is outside ``[0, highest]`` in any component is skipped; element ``e`` of a window is
    at ``win_lin[e]`` past its start. Used by the kernel and by compiled loops (lowering.executor.compiled_loops)."""

    perm: list[int]
    count: int
    width: int
    batch_lin: np.ndarray
    win_lin: np.ndarray
    starts: list[tuple[int, int, int]]
    index_vector_dim: int
    aligned: bool  # every indexed dimension's window is one element or the whole dimension


def scatter_plan(op) -> ScatterPlan:
    """The :class:`ScatterPlan` of scatter ``op``."""
    n = len(op.results)
    shape = tuple(op.results[0].type.get_shape())
    upd_shape = tuple(op.operands_[n + 1].type.get_shape())
    rank = len(shape)
    window_dims = ints(op.update_window_dims)
    inserted = ints(op.inserted_window_dims)
    batching = ints(op.input_batching_dims)
    index_batching = ints(op.scatter_indices_batching_dims)
    index_map = ints(op.scatter_dims_to_operand_dims)
    ivd = op.index_vector_dim.value.data
    strides = _strides(shape)

    scatter_dims = [d for d in range(len(upd_shape)) if d not in window_dims]
    perm = scatter_dims + list(window_dims)  # XLA applies scatter index by scatter index
    batch_shape = tuple(upd_shape[d] for d in scatter_dims)
    win_shape = tuple(upd_shape[d] for d in window_dims)
    window_operand_dims = [d for d in range(rank) if d not in inserted and d not in batching]
    window_size = {d: win_shape[k] for k, d in enumerate(window_operand_dims)}

    win_lin = np.zeros((1,) * len(win_shape), np.int64)
    for k, d in enumerate(window_operand_dims):
        win_lin = win_lin + _along(np.arange(win_shape[k], dtype=np.int64) * strides[d], k, len(win_shape))
    win_lin = np.broadcast_to(win_lin, win_shape).reshape(-1)
    batch_lin = np.zeros((1,) * len(batch_shape), np.int64)
    for od, sd in zip(batching, index_batching):
        j = _batch_position(sd, ivd)
        batch_lin = batch_lin + _along(np.arange(batch_shape[j], dtype=np.int64) * strides[od], j, len(batch_shape))
    batch_lin = np.broadcast_to(batch_lin, batch_shape).reshape(-1)
    # (component, highest valid start, stride): a window fits iff 0 <= start <= dim - window size.
    starts = [(k, shape[d] - window_size.get(d, 1), strides[d]) for k, d in enumerate(index_map)]
    aligned = all(window_size.get(d, 1) in (1, shape[d]) for d in index_map)
    return ScatterPlan(perm, math.prod(batch_shape), math.prod(win_shape), batch_lin, win_lin, starts, ivd, aligned)


@register(ScatterOp)
def _scatter(op, ctx):
    n = len(op.results)
    unique = op.unique_indices is not None and bool(op.unique_indices.value.data)
    perm, count, width, batch_lin, win_lin, starts, ivd, aligned = scatter_plan(op)

    # Two windows either cover the same elements or disjoint ones when every indexed dimension's
    # window is a single element or the whole dimension (aligned): then duplicates are found per window
    # (one key per scatter index) instead of per element.
    unit_offsets = win_lin if aligned else np.zeros(1, np.int64)

    def units_of(indices, updates):
        """(key, values) per unit: in-bounds windows (aligned) or their elements (not aligned).

        ``key`` is the linear offset of a unit's first element; ``values[j]`` is a
        ``(units, unit size)`` array per update operand, in XLA's application order.
        """
        lin = batch_lin
        valid = None
        if starts:
            idx = _index_vectors(indices, ivd).reshape(count, len(starts))
            valid = np.ones(count, bool)
            for k, high, stride in starts:
                component = idx[:, k]
                valid &= (component >= 0) & (component <= high)
                lin = lin + component * stride
            lin = lin[valid]
        values = []
        for u in updates:
            v = np.transpose(u, perm).reshape(count, width)
            values.append(v if valid is None else v[valid])
        if not aligned:
            lin = (lin[:, None] + win_lin[None, :]).reshape(-1)
            values = [v.reshape(-1, 1) for v in values]
        return lin, values

    def elements(keys):
        """Linear element offsets of the units starting at ``keys`` (unit by unit)."""
        return (keys[:, None] + unit_offsets[None, :]).reshape(-1)

    input_types = [t.type for t in op.inputs]
    components = _components(op.update_computation, n)
    applier = array_applier(op.update_computation, result_dtypes(op, ctx))  # (the region's array form)

    def apply_in_rounds(region_fn, flats, keys, values):
        """The update computation's own definition (lowering.kernels.region), round by round: every target's
        k-th update in round k, so each target sees its updates in XLA's order."""
        f = applier(region_fn)
        for ids in _rounds(keys):
            t = elements(keys[ids])
            results = f(*(flat[t] for flat in flats), *(v[ids].reshape(-1) for v in values))
            for flat, r in zip(flats, results):
                flat[t] = r

    if components is not None and all(c in ("keep", "replace") or _fast_ufunc(c, t)
                                      for c, t in zip(components, input_types)):
        plan = [(c, elem_of(t).kind == "float" and c in (np.maximum, np.minimum))
                for c, t in zip(components, input_types)]
        # NumPy's maximum/minimum of two NaNs keep the first (the target's); XLA's max/min -- the region's
        # definition, which the compiled paths use too -- may keep the update's: with a NaN among the updates
        # (long fuzz campaign, session 22: x.at[i % 2].max(x + 2) took another NaN's sign interpreted than
        # compiled and in XLA), the updates are applied in rounds with the region's definition.
        nan_sensitive = any(signed_zero for _, signed_zero in plan)

        def apply(region_fn, flats, keys, values):
            if nan_sensitive and any(np.isnan(v).any() for (_, sz), v in zip(plan, values) if sz):
                apply_in_rounds(region_fn, flats, keys, values)
                return
            targets = elements(keys)
            last = None
            for (c, signed_zero), flat, v in zip(plan, flats, values):
                if c == "keep":
                    continue
                if c == "replace":
                    if unique:
                        flat[targets] = v.reshape(-1)
                    else:
                        if last is None:
                            last = _last_of_each(keys)
                        flat[elements(keys[last])] = v[last].reshape(-1)
                else:
                    _apply_ufunc(c, flat, targets, v.reshape(-1), signed_zero)
    else:
        apply = apply_in_rounds

    def scatter_kernel(region_fn, *args):
        inputs, indices, updates = args[:n], args[n], args[n + 1:]
        outs = [np.array(x, order="C") for x in inputs]  # fresh C-contiguous copies, written in place
        if count and width:
            keys, values = units_of(indices, updates)
            if len(keys):
                apply(region_fn, [o.reshape(-1) for o in outs], keys, values)
        return outs[0] if n == 1 else tuple(outs)

    return scatter_kernel


# ----------------------------------------------------------------------------
# dynamic_slice / dynamic_update_slice
# ----------------------------------------------------------------------------


def _clamped_slices(shape, sizes):
    """``starts -> tuple of slices`` with each start clamped to ``[0, dim - size]``."""
    bounds = [(dim - size, size) for dim, size in zip(shape, sizes)]

    def slices(starts):
        out = []
        for start, (high, size) in zip(starts, bounds):  # (a plain loop: this runs in every loop iteration)
            c = int(start)
            c = 0 if c < 0 else high if c > high else c
            out.append(slice(c, c + size))
        return tuple(out)

    return slices


@register(DynamicSliceOp)
def _dynamic_slice(op, ctx):
    slices = _clamped_slices(op.operand.type.get_shape(), ints(op.slice_sizes))
    return lambda operand, *starts: operand[slices(starts)]


@register(DynamicUpdateSliceOp)
def _dynamic_update_slice(op, ctx):
    slices = _clamped_slices(op.operand.type.get_shape(), op.update.type.get_shape())

    def dynamic_update_slice_kernel(operand, update, *starts):
        out = np.array(operand)  # a copy: kernels never write their inputs
        out[slices(starts)] = update
        return out

    return dynamic_update_slice_kernel
