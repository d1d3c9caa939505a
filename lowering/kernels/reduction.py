"""NumPy kernels: reduce (variadic) and map.

``hlo.reduce`` has two strategies, chosen once at lowering time:

* a body that is one binary op on its two parameters (add, multiply, maximum,
  minimum, and, or, xor) becomes ``ufunc.reduce`` over the reduced axes,
  combined with the init value as XLA does: ``result = init op reduce(x)``
  (maxima and minima over the last axis of f32/f64 arrays with the compiled
  row kernels of :mod:`lowering.kernels.rowwise`, which give NumPy's values), except
  float sums, which are XLA CPU's (below);
* any other body (variadic reduces such as jax's argmax) is a vectorized tree
  reduction: the reduced axes are flattened into one trailing axis and
  adjacent pairs are combined with the compiled region function applied to
  whole arrays, halving the axis each step (``ceil(log2 n)`` calls). Pairing
  adjacent elements keeps the left-to-right order, so associative but
  non-commutative bodies are reduced correctly.

Integer reductions are exact (wrap-around, as XLA). Float sums that XLA CPU hands
to YNNPACK (f32/f64 sums of 4,096 elements or more, on AVX-512 hosts:
:func:`ynnpack_plan`) are summed in YNNPACK's order, bit for bit
(:mod:`lowering.kernels.ynnpack_sum`, the definition vector dots use too). Every
other float sum is summed in the order of XLA CPU's tree-reduction rewrite
(:mod:`lowering.kernels.tree_sum`: windows of 32, then the windows' sums; bitwise
for sums over one dimension, and most over several: the module says which are
not); f16/bf16/f8 sums and products accumulate in f32 as XLA CPU's do.
An empty reduced dimension gives the init value everywhere.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects import func
from xdsl.ir import BlockArgument

from xla_dialect.internal import MultiplyAddReduceOp, MultiplyReduceOp
from xla_dialect.ops.base import ints
from xla_dialect.ops.control_flow import ReturnOp, WhileOp
from xla_dialect.ops.constants import ConstantOp, IotaOp
from xla_dialect.ops.conversion import ConvertOp
from xla_dialect.ops.elementwise import (AbsOp, AddOp, BinaryElementwiseOp, ClampOp, CompareOp, ExpOp, LogOp, MulOp, NegOp,
                                        SelectOp, SubOp, UnaryElementwiseOp)
from xla_dialect.ops.indexing import GatherOp
from xla_dialect.ops.data_movement import BroadcastInDimOp, ReshapeOp, SliceOp, TransposeOp
from xla_dialect.ops.linalg import DotGeneralOp, DotOp
from xla_dialect.ops.windowed import ConvolutionOp
from xla_dialect.ops.reduction import MapOp, ReduceOp
from xla_dialect.types import element_type_from_dtype, numpy_dtype

from .registry import register
from . import host, small_dot
from .control_flow import BINARY_BODY_UFUNCS, array_applier, result_dtypes
from .tree_sum import (TREE_WINDOW, contracted_sum_function, contracted_term_sum_function, exp_sum_lanes,
                       plain_sum_lanes, rows_in_lanes, sum_function)
from .ynnpack_extrema import apply_rule, columns_extrema, extremum_plan, needs_ynnpack_rule
from .ynnpack_sum import COLUMNS, MIN_ELEMENTS, sum_plan, ynnpack_sum

REDUCE_UFUNCS = BINARY_BODY_UFUNCS
"""Single-op reduction bodies computed with ``ufunc.reduce``: op class -> ufunc (the table scatters' update regions
use, :data:`lowering.kernels.control_flow.BINARY_BODY_UFUNCS`)."""


def binary_body_ufunc(region):
    """The ufunc of a body ``return op(p0, p1)`` (either argument order), else None."""
    block = region.block
    ops = list(block.ops)
    if len(block.args) != 2 or len(ops) != 2:
        return None
    op, ret = ops
    if type(op) not in REDUCE_UFUNCS or op.properties.get("broadcast_dimensions") is not None:
        return None
    if set(op.operands) != set(block.args) or len(op.operands) != 2:
        return None  # e.g. add(p0, p0) or an op on a captured value
    if not isinstance(ret, ReturnOp) or list(ret.operands) != [op.results[0]]:
        return None
    return REDUCE_UFUNCS[type(op)]


def _accumulator(ufunc, dtype: np.dtype) -> np.dtype:
    """The dtype a ``ufunc.reduce`` accumulates in.

    Floats narrower than f32 (f16, bf16, f8) are summed and multiplied in f32
    and rounded once, as XLA CPU does (it upcasts them); everything else stays
    in its own type (integer sums wrap around, as in XLA).
    """
    if ufunc in (np.add, np.multiply) and element_type_from_dtype(dtype).kind == "float" and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


def _signed_zeros(ufunc, axes):
    """Fix the sign of zero results of a float max/min reduction.

    XLA orders -0 < +0 in maximum/minimum; NumPy treats them as equal and
    returns either. A zero maximum is +0 iff some reduced element (or the
    init value) is +0; a zero minimum is -0 iff some is -0.
    """
    want_negative = ufunc is np.minimum
    axes = tuple(axes)

    def fix(result, x, init):
        result = np.asarray(result)
        # NumPy's maximum/minimum return one of their operands, so a zero result of the sign XLA prefers (+0 for
        # max, -0 for min) had such a zero among its elements and is right; only zeros of the other sign are
        # checked, against their own elements (a max-pool of a ReLU's +0s has none).
        zero = (result == 0) & (np.signbit(result) != want_negative)
        if not zero.any():
            return result
        # The reduced axes moved last, the suspect outputs' rows picked out.
        kept = [d for d in range(x.ndim) if d not in axes]
        if kept + list(axes) != list(range(x.ndim)):
            x = np.transpose(x, kept + list(axes))
        rows = x[zero]
        rows = rows.reshape(rows.shape[0], -1)
        hit = np.logical_or.reduce((rows == 0) & (np.signbit(rows) == want_negative), axis=1)
        hit |= bool((init == 0) & (np.signbit(init) == want_negative))
        magnitude = np.abs(result[zero])
        fixed = result.copy()
        fixed[zero] = np.where(hit == want_negative, -magnitude, magnitude)
        return fixed

    return fix


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _first_nans(result, x, init, axes, ufunc):
    """``result`` of a max/min reduction with each NaN made the one XLA gives: the reduction folds
    ``acc = max(acc, x)`` over ``init, x...`` (the reduced elements in row-major order), so the first NaN it
    meets is carried through, with the sign :func:`lowering.kernels.elementwise.fmax` gives a NaN second
    operand: for max, set only if every value before it has its sign bit set; for min, if it or any value
    before it has. NumPy's reduce returns its own NaN (measured against jax.jit, rows of 2 to 1,000)."""
    result = np.asarray(result)
    nan = np.isnan(result)
    if not nan.any():
        return result
    fixed = np.array(result, ndmin=1)
    nan = nan.reshape(fixed.shape)
    if np.isnan(init):
        fixed[nan] = init
        return fixed.reshape(result.shape)
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = np.transpose(x, kept + list(axes)).reshape(-1, int(np.prod([x.shape[d] for d in axes], dtype=np.int64)))
    rows = rows[nan.reshape(-1)]
    first = np.argmax(np.isnan(rows), axis=1)
    values = rows[np.arange(rows.shape[0]), first]
    before = np.arange(rows.shape[1]) < first[:, None]
    signs = np.signbit(rows)
    if ufunc is np.maximum:  # the accumulator is negative-signed iff init and every value before are
        negative = np.all(signs | ~before, axis=1) & bool(np.signbit(init))
        values = np.where(negative, values, np.abs(values))
    else:  # min: negative-signed iff init or any value before is
        negative = np.any(signs & before, axis=1) | bool(np.signbit(init))
        values = np.where(negative, -np.abs(values), values)
    if fixed.dtype == _BF16:  # computed in f32, rounded by XLA's f32 -> bf16 conversion: the quiet NaN
        values = np.copysign(np.full(values.shape, np.nan, _BF16), values)
    fixed[nan] = values
    return fixed.reshape(result.shape)


def _ufunc_reduce(ufunc, axes, dtype, out_shape, empty, in_shape=None, workers: int = 1, lanes: int = 0):
    if empty:
        return lambda body, x, init: np.full(out_shape, init, dtype)
    acc = _accumulator(ufunc, dtype)
    is_float = element_type_from_dtype(dtype).kind == "float"
    fix = _signed_zeros(ufunc, axes) if is_float and ufunc in (np.maximum, np.minimum) else None
    if ufunc is np.add and is_float:  # XLA CPU's order (lowering.kernels.tree_sum), decided once per static shape
        static = in_shape is not None and all(d >= 0 for d in in_shape)
        total = sum_function(in_shape, axes, acc, lanes, dtype) if static else None

        def tree_sum_kernel(body, x, init):
            x = np.asarray(x)
            result = total(x, init) if total is not None else sum_function(x.shape, axes, acc)(x, init)
            return result.astype(dtype, copy=False)

        return tree_sum_kernel

    static = in_shape is not None and all(d >= 0 for d in in_shape)
    plan = ynnpack_extremum_plan(in_shape, axes, dtype) if fix is not None and static else None

    def ynnpack_rule(result, x, init):
        """``result`` (the true extrema) with the outputs YNNPACK's rule may change recomputed by it."""
        if plan is None or not needs_ynnpack_rule(result):
            return result
        kind, shape, tile = plan
        out = np.array(result, dtype).reshape(-1)
        apply_rule(np.ascontiguousarray(x, dtype).reshape(shape), out, dtype.type(init), ufunc is np.minimum,
                   kind, tile)
        return out.reshape(np.shape(result))

    if plan is not None and plan[0] == COLUMNS:  # (YNNPACK's columns kernel: every output by its rule, one pass)
        _, shape, tile = plan

        def ynnpack_columns_kernel(body, x, init):
            out = np.empty(int(np.prod(out_shape, dtype=np.int64)), dtype)
            columns_extrema(np.ascontiguousarray(x, dtype).reshape(shape), out, dtype.type(init),
                            ufunc is np.minimum, tile)
            return out.reshape(out_shape)

        return ynnpack_columns_kernel

    def reduce_kernel(body, x, init):
        total = ufunc.reduce(x, axis=axes, dtype=acc)
        result = np.asarray(ufunc(np.asarray(init, acc), total), acc).astype(dtype, copy=False)
        return result if fix is None else ynnpack_rule(_first_nans(fix(result, x, init), x, init, axes, ufunc),
                                                       x, init)

    rows = in_shape is not None and len(in_shape) >= 1 and tuple(axes) == (len(in_shape) - 1,) and in_shape[-1] >= 1
    if rows and dtype in _ROW_DTYPES and fix is not None:
        # Rows of a C-ordered f32/f64 array: the compiled row kernels of lowering.kernels.rowwise (NumPy's values, faster).
        from . import rowwise

        def row_extrema_kernel(body, x, init):
            if not x.flags.c_contiguous or x.dtype != dtype:
                return reduce_kernel(body, x, init)
            total = rowwise.row_extrema_of(x, ufunc, workers)  # (zeros with XLA's sign over the row already)
            result = np.asarray(ufunc(np.asarray(init, acc), total), acc)
            result = fix(result, x, init) if init == 0 else result  # (a zero init takes part in the sign)
            return ynnpack_rule(_first_nans(result, x, init, axes, ufunc), x, init)

        return row_extrema_kernel
    return reduce_kernel


_ROW_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
"""Maxima and minima over the last axis of C-ordered arrays of these types use the compiled row kernels of
:mod:`lowering.kernels.rowwise`: NumPy's values, 1.5-12x faster than NumPy's reduce (a fixed cost per row there)."""


def _tree_reduce(op, axes, dtypes, out_shape, empty):
    n = len(dtypes)
    apply = array_applier(op.body, dtypes)
    rank = len(op.operands[0].type.get_shape())
    kept = [d for d in range(rank) if d not in axes]
    order = kept + list(axes)  # reduced axes last, flattened into one
    count = int(np.prod([op.operands[0].type.get_shape()[d] for d in axes], dtype=np.int64))
    flat_shape = tuple(out_shape) + (count,)

    if empty:
        def empty_kernel(body, *args):
            results = [np.full(out_shape, init, dt) for init, dt in zip(args[n:], dtypes)]
            return results[0] if n == 1 else tuple(results)
        return empty_kernel

    def reduce_kernel(body, *args):
        f = apply(body)
        xs = [np.transpose(x, order).reshape(flat_shape) for x in args[:n]]
        k = count
        while k > 1:
            half = k // 2
            # Adjacent pairs (0,1), (2,3), ...: combining neighbours keeps the order.
            ys = f(*(x[..., 0:2 * half:2] for x in xs), *(x[..., 1:2 * half:2] for x in xs))
            if k % 2:
                ys = [np.concatenate([y, x[..., 2 * half:]], axis=-1) for y, x in zip(ys, xs)]
            xs, k = ys, half + k % 2
        results = f(*args[n:], *(x[..., 0] for x in xs))
        return results[0] if n == 1 else tuple(results)

    return reduce_kernel


def ynnpack_plan(op) -> tuple[tuple, bool, tuple | None] | None:
    """``(plan, pairs, transposed)`` when XLA CPU computes the reduce ``op`` with YNNPACK's sum in an order
    :func:`lowering.kernels.ynnpack_sum.sum_plan` identified -- one f32/f64 operand summed (a body
    ``add(p0, p1)``) of at least 4,096 elements, on a host with the AVX-512 kernels it was measured with --
    ``pairs`` when the operand is converted from bf16 (YNNPACK's bf16 kernel reads it two values per lane); else
    None. Inside while loops too (measured: XLA CPU sums in ``lax.while_loop``/``scan``/``fori_loop`` bodies in the
    same order). The interpreter's kernel, fused loops (which leave such sums to it), compiled loops and compiled
    segments (which call the same definition) decide with this one function. ``transposed`` (else None): the
    operand is a transpose that XLA's simplifier folds into the reduce (``HandleReduce``: a result of rank < 2, or
    a transpose only reduces read), so the plan is the sum of the transpose's operand over the permuted dimensions:
    ``(inverse, kept, order)`` -- the operand is ``np.transpose(x, inverse)``, the plan's outputs have the shape
    ``kept``, and ``np.transpose(outputs, order)`` is the result (measured: ``jnp.sum(x.T, ...)``)."""
    if len(op.operands) != 2 or len(op.results) != 1 or binary_body_ufunc(op.body) is not np.add:
        return None
    x = op.operands[0]
    dtype = str(x.type.element_type)
    if dtype not in ("f32", "f64") or str(op.results[0].type.element_type) != dtype:
        return None
    if not host.measured_host():
        return None
    shape, dims = tuple(x.type.get_shape()), sorted(ints(op.dimensions))
    transposed = None
    if isinstance(x.owner, TransposeOp):
        if not (len(op.results[0].type.get_shape()) < 2 or len(list(x.uses)) == 1
                or all(isinstance(use.operation, ReduceOp) for use in x.uses)):
            return None  # (a transpose other ops read too, results of rank 2 or more: neither order, measured)
        perm = ints(x.owner.permutation)
        shape, dims = tuple(x.owner.operands[0].type.get_shape()), sorted(perm[d] for d in dims)
        kept = [e for e in range(len(shape)) if e not in dims]
        transposed = (tuple(int(v) for v in np.argsort(perm)), tuple(shape[e] for e in kept),
                      tuple(kept.index(perm[d]) for d in range(len(perm)) if perm[d] not in dims))
    plan = sum_plan(shape, tuple(dims), np.float32 if dtype == "f32" else np.float64)
    if plan is None:
        return None
    return plan, transposed is None and _reads_bf16(op), transposed


def ynnpack_extremum_plan(in_shape, axes, dtype) -> tuple | None:
    """:func:`lowering.kernels.ynnpack_extrema.extremum_plan` of a max/min reduction of the ``axes`` of an
    operand of ``in_shape`` (f32/f64) on a host with the AVX-512 kernels it was measured with, else None: where
    XLA CPU reduces with YNNPACK's max/min rule, which the reduction kernel, fused row reductions and compiled
    loops then apply to their NaN and zero outputs."""
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)) or not host.measured_host():
        return None
    return extremum_plan(in_shape, axes, dtype)


def _reads_bf16(op) -> bool:
    """Whether XLA CPU's YNNPACK call reads the operand of the reduce ``op`` (f32) as the bf16 values it was
    converted from (YNNPACK's bf16 kernel) rather than as f32: when it is ``convert`` (nothing else reading it) of
    a bf16 argument of the program that nothing else reads -- XLA fuses that convert into the call -- or the
    product of two such converts of one argument (``x * x``: YNNPACK's sum of squares; ``x * y`` is the f32
    kernel), also through a reshape XLA folds into the reduce (a full sum, or kept leading dimensions unchanged).
    Measured: another reader of the bf16 value (a bf16 multiply: XLA's float normalization converts it once for
    both) or of the converted one, a slice or dynamic slice (XLA converts the whole operand first), a loop carry
    that the body changes, a reshape XLA keeps: the f32 kernel. A carry the body returns unchanged counts as the
    loop's operand (XLA hoists the convert and the sum out of the loop)."""
    from xla_dialect.ops.data_movement import ReshapeOp
    from xla_dialect.ops.elementwise import MulOp

    x = op.operands[0]
    reader = op
    if isinstance(x.owner, MulOp):
        reader = x.owner
        converts = {v.owner for v in reader.operands}
    else:
        converts = {x.owner}
    if not all(isinstance(c, ConvertOp) and str(c.operands[0].type.element_type) == "bf16"
               and all(use.operation is reader for use in c.results[0].uses) for c in converts):
        return False
    sources = {c.operands[0] for c in converts}
    if len(sources) != 1:
        return False
    value = sources.pop()
    readers = converts
    if isinstance(value.owner, ReshapeOp) and all(use.operation in readers for use in value.uses):
        reshape = value.owner
        kept = [d for d in range(len(x.type.get_shape())) if d not in ints(op.dimensions)]
        before, after = list(reshape.operands[0].type.get_shape()), list(value.type.get_shape())
        if kept != list(range(len(kept))) or before[:len(kept)] != after[:len(kept)]:
            return False  # (a reshape XLA keeps between the convert and the reduce: the f32 kernel)
        value, readers = reshape.operands[0], {reshape}
    while True:
        if not all(use.operation in readers or _returned_unchanged(value, use) for use in value.uses):
            return False
        if not isinstance(value, BlockArgument):
            return False
        parent = value.block.parent_op()
        if isinstance(parent, func.FuncOp):
            return True
        if not (isinstance(parent, WhileOp) and value.block is parent.body.block
                and any(_returned_unchanged(value, use) for use in value.uses)):
            return False
        value, readers = parent.operands[value.index], {parent}


def _returned_unchanged(value, use) -> bool:
    """Whether ``use`` is a while body returning its block argument ``value`` in the same position."""
    return (isinstance(use.operation, ReturnOp) and getattr(value, "block", None) is use.operation.parent_block()
            and isinstance(value.block.parent_op(), WhileOp) and value.block is value.block.parent_op().body.block
            and use.index == value.index)


def _ynnpack_reduce(plan, pairs, transposed, dtype, out_shape):
    def ynnpack_sum_kernel(body, x, init):
        if transposed is None:
            return ynnpack_sum(np.asarray(x, dtype), plan, init, pairs).reshape(out_shape)
        inverse, kept, order = transposed
        sums = ynnpack_sum(np.transpose(np.asarray(x, dtype), inverse), plan, init, pairs).reshape(kept)
        return np.ascontiguousarray(np.transpose(sums, order)).reshape(out_shape)

    return ynnpack_sum_kernel


def ynnpack_window_plan(op) -> tuple[tuple, tuple[int, int], int] | None:
    """``(plan, grid, lanes)`` when XLA CPU computes the full sum ``op`` of a 2-d f32/f64 operand of at least
    :data:`~lowering.kernels.ynnpack_sum.MIN_ELEMENTS` elements as windows of 32 x 32 in YNNPACK, then a loop over
    the windows' sums, else None: where XLA gives the operand a column-major layout (:func:`_column_major`: the
    chain of first operands through element-wise ops reaches a transpose, ``jnp.sum(a.T * b)``,
    ``jnp.sum(jnp.exp(a.T))``, ``jnp.sum(a.T + b)``, not ``jnp.sum(a * b.T)``, nor a transpose summed directly,
    which XLA folds: :func:`ynnpack_plan`; or LAPACK's results), XLA's ``TreeReductionRewriter`` rewrites the
    reduce (it keeps whole only the reduces it hands to YNNPACK, which takes row-major operands) and YNNPACK
    computes the reduce-window: the sum
    of the operand as ``(R / 32, 32, C / 32, 32)`` over axes 1 and 3 (``plan``, :func:`lowering.kernels.
    ynnpack_sum.sum_plan`, from the initial value), whose ``grid`` of sums is summed in the ``lanes`` of a plain
    sum of that shape (:func:`lowering.kernels.tree_sum.plain_sum_lanes`, :func:`~lowering.kernels.tree_sum.
    rows_in_lanes`; ``(2, 2)``: ``(w00 + w01) + (w10 + w11)``).

    Read from XLA's optimized HLO (jax 0.10.2, ``XLA_FLAGS=--xla_dump_to``: ``ynn_fusion`` of a ``reduce-window``
    32x32 for the bodies above, f32 and f64, ``(64, 64)``, ``(96, 64)``, ``(64, 100)``) and measured bitwise
    against jax.jit (the AVX-512 host of :func:`lowering.kernels.host.measured_host`): the GP log marginal
    likelihood's gradient (``benchmarks/library_programs.py``) and the shapes of ``tests/test_tree_sum.py``. Only
    dimensions that are multiples of 32 (XLA pads the others' windows in YNNPACK: not identified, the earlier
    order)."""
    if len(op.operands) != 2 or len(op.results) != 1 or binary_body_ufunc(op.body) is not np.add:
        return None
    x = op.operands[0]
    shape = tuple(x.type.get_shape())
    dtype = str(x.type.element_type)
    if (dtype not in ("f32", "f64") or str(op.results[0].type.element_type) != dtype or len(shape) != 2
            or sorted(ints(op.dimensions)) != [0, 1] or any(d % TREE_WINDOW or d <= 0 for d in shape)
            or shape[0] * shape[1] < MIN_ELEMENTS or not host.measured_host()):
        return None
    if isinstance(x.owner, TransposeOp) or not _column_major(x):
        return None
    grid = (shape[0] // TREE_WINDOW, shape[1] // TREE_WINDOW)
    numpy_type = np.float32 if dtype == "f32" else np.float64
    plan = sum_plan((grid[0], TREE_WINDOW, grid[1], TREE_WINDOW), (1, 3), numpy_type)
    if plan is None:
        return None
    return plan, grid, plain_sum_lanes(grid, (0, 1), numpy_type)


LAYOUT_STEPS = 64
"""How far back :func:`_column_major` follows a value's first operands."""


def _column_major(value) -> bool:
    """Whether XLA CPU gives the 2-d ``value`` the column-major layout ``{0,1}`` when its tree-reduction rewriter
    runs (read in its HLO dumps, ``--xla_dump_hlo_pass_re=tree.*``): LAPACK's results (Cholesky, triangular
    solves; a custom call's result whose ``result_layouts`` is ``[0, 1]``, as jaxlib's LAPACK calls give) are
    column-major, a transpose flips its operand's layout, element-wise ops and converts take their
    first operand's, a select its first choice's; anything else (arguments, dots, ...) row-major."""
    from xla_dialect.ops.effects import CustomCallOp
    from xla_dialect.ops.numerics import CholeskyOp, TriangularSolveOp

    flipped = False
    for _ in range(LAYOUT_STEPS):
        owner = value.owner if not isinstance(value, BlockArgument) else None
        if owner is None or len(value.type.get_shape()) != 2:
            return flipped
        if isinstance(owner, (CholeskyOp, TriangularSolveOp)):
            return not flipped
        if isinstance(owner, CustomCallOp):  # (jaxlib's LAPACK calls name their results' layouts)
            layouts = owner.result_layouts
            if layouts is None or value.index >= len(layouts.data):
                return flipped
            return (tuple(ints(layouts.data[value.index])) == (0, 1)) != flipped
        if isinstance(owner, TransposeOp):
            flipped = not flipped
            value = owner.operands[0]
        elif isinstance(owner, SelectOp):
            value = owner.operands[1]
        elif isinstance(owner, (UnaryElementwiseOp, BinaryElementwiseOp, ConvertOp)):
            value = owner.operands[0]
        else:
            return flipped
    return False


def _ynnpack_window_reduce(plan, grid, lanes, dtype):
    def ynnpack_window_sum_kernel(body, x, init):
        rows, cols = grid
        windows = ynnpack_sum(np.asarray(x, dtype).reshape(rows, TREE_WINDOW, cols, TREE_WINDOW), plan, init)
        flat = np.ascontiguousarray(windows).reshape(-1)
        return np.asarray(rows_in_lanes(flat, 0, cols, 0, rows, 0, cols, dtype.type(init), lanes), dtype)

    return ynnpack_window_sum_kernel


@register(ReduceOp)
def _reduce(op, ctx):
    axes = tuple(sorted(ints(op.dimensions)))
    shape = op.operands[0].type.get_shape()
    out_shape = op.results[0].type.get_shape()
    dtypes = result_dtypes(op, ctx)
    empty = any(shape[d] == 0 for d in axes)
    ufunc = binary_body_ufunc(op.body) if len(dtypes) == 1 else None
    windows = ynnpack_window_plan(op) if ufunc is np.add and not empty else None
    if windows is not None:
        return _ynnpack_window_reduce(*windows, dtypes[0])
    found = ynnpack_plan(op) if ufunc is np.add and not empty else None
    if found is not None:
        return _ynnpack_reduce(*found, dtypes[0], out_shape)
    if ufunc is not None:
        return _ufunc_reduce(ufunc, axes, dtypes[0], out_shape, empty, tuple(shape), ctx.loop_workers,
                             sum_lanes(op) if ufunc is np.add else 0)
    return _tree_reduce(op, axes, dtypes, out_shape, empty)


_NOT_FUSED_INTO_A_REDUCE = (DotOp, DotGeneralOp, ConvolutionOp, ReduceOp)
"""Ops whose result XLA CPU's reduce reads as a fusion parameter (never fused into it): dots and convolutions are
library calls, a reduce is the root of a fusion of its own."""


def sum_lanes(op: ReduceOp) -> int:
    """The vector lanes of XLA CPU's loop for the float sum ``op`` (:func:`lowering.kernels.tree_sum.
    plain_sum_lanes`), or 0: only for a 2-d full sum at a function's top level of an array XLA reads as it is (an
    argument of the function, or a dot, convolution or reduce result), of an ``exp`` read by nothing else of a
    function argument or a short element-wise body of one (XLA fuses them into the reduce's loop:
    :func:`lowering.kernels.tree_sum.exp_sum_lanes`, :func:`_read_in_the_loop`; an exp read elsewhere too is
    a multi-output fusion, scalar order from rows of 9), and
    the 1-d sum of a gathered loss (:func:`gathered_loss_lanes`); a sum of another computed value, or inside a
    loop, keeps the scalar order."""
    x = op.operands[0]
    if not isinstance(op.parent_op(), func.FuncOp) or len(op.results) != 1:
        return 0
    lanes = gathered_loss_lanes(op)
    if lanes:
        return lanes
    if _function_argument(x) or isinstance(x.owner, _NOT_FUSED_INTO_A_REDUCE):
        return plain_sum_lanes(x.type.get_shape(), ints(op.dimensions), numpy_dtype(x.type.element_type))
    if isinstance(x.owner, ExpOp) and x.has_one_use() and _read_in_the_loop(x.owner.operands[0], op.parent):
        return exp_sum_lanes(x.type.get_shape(), ints(op.dimensions), numpy_dtype(x.type.element_type))
    return 0


_CHEAP_ELEMENTWISE = (NegOp, AbsOp, AddOp, SubOp, MulOp)
"""The element-wise ops :func:`_read_in_the_loop` lets XLA fuse before a summed ``exp`` (measured: the lanes
unchanged)."""

EXP_BODY_MAX_OPS = 8
"""The most ops :func:`_read_in_the_loop` follows back from an ``exp``'s operand (a longer body: 0 lanes)."""


def _read_in_the_loop(value, block) -> bool:
    """Whether ``value`` (the operand of a summed ``exp``) is a function argument, or computed in ``block`` from
    function arguments, constants, values XLA reads as fusion parameters (:data:`_NOT_FUSED_INTO_A_REDUCE`) and
    broadcasts of scalars (however computed: loop-invariant, hoisted out of the vectorized loop) by at most
    :data:`EXP_BODY_MAX_OPS` of negate, abs, add, subtract and multiply: the body of the reduce loop
    :func:`lowering.kernels.tree_sum.exp_sum_lanes` measured (``exp(-a)``, ``exp(|a|)``, ``exp(a * 2)``,
    ``exp(a * a * 0.25)``, ``exp(a - 1)``, ``exp(a - max(a))``, the subtract also read elsewhere, and
    ``jax.nn.logsumexp(a)``: the same lanes as ``exp(a)``, 105-112 shapes x 2-3 draws each; this executor,
    ``exp(a - max(a))`` and ``logsumexp`` over every ``rows`` 2..32 x ``cols`` 1..32, 2 draws: every result
    equal to jax.jit 0.10.2's). Not followed: other
    ops (``exp(a / 3)`` was not reproduced, its exp values differ)."""
    todo, ops = [value], 0
    while todo:
        v = todo.pop()
        if _function_argument(v):
            continue
        owner = v.owner
        if isinstance(owner, ConstantOp) or isinstance(owner, _NOT_FUSED_INTO_A_REDUCE):
            continue
        if isinstance(v, BlockArgument) or owner.parent is not block:
            return False
        ops += 1
        if ops > EXP_BODY_MAX_OPS:
            return False
        if isinstance(owner, BroadcastInDimOp) and not owner.operands[0].type.get_shape():
            continue  # (a scalar however computed: the same in every iteration, out of the vector loop)
        if isinstance(owner, _CHEAP_ELEMENTWISE):
            todo.extend(owner.operands)
        else:
            return False
    return True


def _function_argument(x) -> bool:
    """Whether ``x`` is an argument of the function (XLA reads it as a fusion parameter)."""
    return isinstance(x, BlockArgument) and isinstance(x.block.parent_op(), func.FuncOp)


GATHERED_LOSS_MAX_STEPS = 200
"""How far back :func:`gathered_loss_lanes` follows a sum's operand through the ops XLA fuses into its loop."""

_LOOP_BODY_OPS = (UnaryElementwiseOp, BinaryElementwiseOp, SelectOp, CompareOp, ConvertOp, BroadcastInDimOp,
                  ReshapeOp, SliceOp, GatherOp, ClampOp, IotaOp, ReduceOp)
"""Ops :func:`gathered_loss_lanes` follows: what XLA fuses into a loss's mean loop (a row sum over the classes
included)."""


def gathered_loss_lanes(op: ReduceOp) -> int:
    """The vector lanes of XLA CPU's loop for a 1-d f32 sum of ``K <= 32`` per-example softmax cross-entropies whose
    loop body holds the label's gather and the log-sum-exp (``optax.softmax_cross_entropy_with_integer_labels(...)
    .mean()``; the gather's operand has ``C`` classes, ``K * C`` under YNNPACK's 4,096), else 0.

    Such a body is too large for LLVM to unroll the loop, so its vectorizer decides: under 16 iterations only a
    width that leaves no scalar remainder (4 and 8 iterations: one vector; 2 with more than 32 classes), else 8
    lanes for 16-19, 24-27 and 32 iterations and 4 for 20-23; for 28-31 its cost model picks 4 lanes with 3, 4, 7
    or 8 classes or 65-127, 8 otherwise (:func:`lowering.kernels.tree_sum.lane_sum`: iteration ``k`` in lane ``k
    mod lanes``, lanes added by halves, the rest in order). Read from XLA's optimized LLVM IR (a helper, ``K``
    2..33 with ``C`` 2, 10, 100, then ``C`` 2..130 at 13 ``K``; its NumPy model bitwise against jax.jit for ``K``
    2..300 with ``C`` 2, 3, 10, 100, five draws each); this executor: ``K`` 2..40, 64, 100 with ``C`` 2, 3, 10, 100,
    three draws each, every loss equal. Not identified: other bodies (the gather alone unrolls up to 21-24
    iterations and vectorizes otherwise), 128 classes or more at 32 iterations, sums inside loops."""
    x = op.operands[0]
    shape = x.type.get_shape()
    if (len(shape) != 1 or not 2 <= shape[0] <= 32 or ints(op.dimensions) != (0,) or len(op.operands) != 2
            or str(x.type.element_type) != "f32" or not host.measured_host()):
        return 0
    init = op.operands[1].owner
    if not isinstance(init, ConstantOp) or init.splat_value() is None or float(init.splat_value()) != 0.0 \
            or np.signbit(init.splat_value()):
        return 0
    classes, seen, todo = 0, set(), [x]
    found = set()  # ("exp", "log", "row sum"): the log-sum-exp of a softmax cross-entropy
    while todo and len(seen) < GATHERED_LOSS_MAX_STEPS:
        value = todo.pop()
        owner = value.owner
        if (isinstance(value, BlockArgument) or id(owner) in seen or owner.parent is not op.parent
                or isinstance(owner, ConstantOp)):
            continue
        seen.add(id(owner))
        if not isinstance(owner, _LOOP_BODY_OPS):
            continue
        if isinstance(owner, GatherOp):  # (the logits' gather: the widest one; jax also gathers its column)
            classes = max(classes, owner.operands[0].type.get_shape()[-1])
        if isinstance(owner, ExpOp):
            found.add("exp")
        if isinstance(owner, LogOp):
            found.add("log")
        if isinstance(owner, ReduceOp):
            if _is_sum(owner) and len(owner.operands[0].type.get_shape()) == 2:
                found.add("row sum")
            todo.extend(owner.operands[:1])
            continue
        todo.extend(owner.operands)
    if not classes or found != {"exp", "log", "row sum"}:
        return 0
    k = shape[0]
    if k * classes >= 4096 or classes >= 128:
        return 0
    if k < 16:
        return {4: 4, 8: 8}.get(k, 2 if k == 2 and classes > 32 else 0)
    if 28 <= k <= 31:
        return 4 if classes in (3, 4, 7, 8) or 65 <= classes <= 127 else 8
    return 4 if 20 <= k <= 23 else 8


def _is_sum(op: ReduceOp) -> bool:
    """Whether the reduce ``op`` sums (its body one ``add`` of its two arguments)."""
    return len(op.operands) == 2 and binary_body_ufunc(op.body) is np.add


@register(MultiplyReduceOp)
def _multiply_reduce(op, ctx):
    """The sum of ``a * b`` over the op's dimensions, each step one fused multiply-add, from the initial value
    (:func:`lowering.kernels.tree_sum.contracted_sums`: XLA CPU's reduce of a product it fuses and contracts)."""
    shape = tuple(op.a.type.get_shape())
    dtype = result_dtypes(op, ctx)[0]
    axes = tuple(sorted(ints(op.dimensions)))
    rounded, square = op.rounded_rows.value.data, op.a is op.b
    lanes = op.lanes.value.data if op.lanes is not None else 0
    if any(d < 0 for d in shape):
        return lambda a, b, init: contracted_sum_function(np.shape(a), axes, dtype, rounded, square)(a, b, init)
    contracted = contracted_sum_function(shape, axes, dtype, rounded, square, lanes)

    def multiply_reduce_kernel(a, b, init):
        return contracted(np.asarray(a), np.asarray(b), init)

    return multiply_reduce_kernel


@register(MultiplyAddReduceOp)
def _multiply_add_reduce(op, ctx):
    """The sum of ``a * b + c * d`` over the op's dimensions as XLA CPU contracts it, each step ``fma(a, b, fma(c,
    d, acc))`` (:func:`lowering.kernels.tree_sum.contracted_term_sums`)."""
    dtype = result_dtypes(op, ctx)[0]
    axes = tuple(sorted(ints(op.dimensions)))
    shape = tuple(op.a.type.get_shape())
    static = None if any(d < 0 for d in shape) else contracted_term_sum_function(shape, axes, dtype)

    def multiply_add_reduce_kernel(a, b, c, d, init):
        a, b, c, d = (np.asarray(v) for v in (a, b, c, d))
        contracted = static or contracted_term_sum_function(a.shape, axes, dtype)
        return contracted(a, b, c, d, init)

    return multiply_add_reduce_kernel


@register(MapOp)
def _map(op, ctx):
    apply = array_applier(op.computation, result_dtypes(op, ctx))

    def map_kernel(computation, *arrays):
        # The shape comes from the operands at run time, so a map nested in
        # another vectorized region works on whole arrays too.
        (result,) = apply(computation)(*arrays)
        return result

    return map_kernel
