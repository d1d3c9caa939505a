"""NumPy kernels: tuple, get_tuple_element, call, while, conditional; region application helpers.

Region functions (see :mod:`lowering.executor.executable`) take the block arguments and
return a tuple of the ``hlo.return`` operands. The reduction, map and sort
kernels apply a scalar computation to whole arrays at once: that is valid when
every op in the region is element-wise (its kernel then works on arrays of any
shape), which :func:`region_is_elementwise` checks once at lowering time.
:func:`array_applier` returns the function to call: the region function itself,
or, for regions with shape-dependent ops, a documented slow fallback that runs
the region once per element.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Region

from xla_dialect.ops import elementwise
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import (AsyncDoneOp, AsyncStartOp, CallOp, ConditionalOp, FusionOp,
                                          GetTupleElementOp, ReturnOp, TupleOp, WhileOp)
from xla_dialect.ops.conversion import ConvertOp
from xla_dialect.ops.reduction import MapOp

from ..runtime.interrupt import check
from .registry import register

ELEMENTWISE_OP_CLASSES: frozenset[type] = frozenset(
    {*elementwise.OPS}
    | {
        # Ops whose kernels work unchanged on arrays of any shape when the
        # region's values are scalars: constants (0-d, broadcast by NumPy),
        # convert, tuples, and nested maps (their kernel takes the shape from
        # its operands at run time). Not bitcast_convert: its kernel bakes the
        # result shape in.
        ConstantOp, ConvertOp, TupleOp, GetTupleElementOp, MapOp, ReturnOp,
    }
)
"""Op classes whose kernels are shape-polymorphic on scalar regions."""

BINARY_BODY_UFUNCS: dict[type, np.ufunc] = {
    elementwise.AddOp: np.add,
    elementwise.MulOp: np.multiply,
    elementwise.MaxOp: np.maximum,
    elementwise.MinOp: np.minimum,
    elementwise.AndOp: np.bitwise_and,
    elementwise.OrOp: np.bitwise_or,
    elementwise.XorOp: np.bitwise_xor,
}
"""Op class -> the ufunc a region computing ``op(a, b)`` of its two arguments is applied as, on whole arrays:
a scatter's update (``ufunc.at``, :mod:`lowering.kernels.indexing`) and a reduce's single-op body
(:data:`lowering.kernels.reduction.REDUCE_UFUNCS`, ``ufunc.reduce``)."""


def region_is_elementwise(region: Region) -> bool:
    """True when every op of ``region`` (nested ones included) is element-wise."""
    return all(type(op) in ELEMENTWISE_OP_CLASSES for op in region.walk())


def array_applier(region: Region, result_dtypes: Sequence[np.dtype]) -> Callable[[Callable], Callable]:
    """Return ``wrap(fn)`` giving a function that applies region function ``fn`` to arrays.

    The wrapped function takes arrays of one common (broadcastable) shape and
    returns a tuple of arrays of that shape, one per region result, with
    ``result_dtypes``. Element-wise regions run once on the whole arrays;
    others (e.g. a region containing a reshape or a reduce of its scalar
    arguments) fall back to one call per element: correct, but a per-element
    Python loop, the one place the executor has one.
    """
    dtypes = [np.dtype(d) for d in result_dtypes]

    if region_is_elementwise(region):
        def wrap(fn):
            def apply(*arrays):
                shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
                return tuple(_fit(r, shape, dt) for r, dt in zip(fn(*arrays), dtypes))
            return apply
        return wrap

    def wrap_slow(fn):
        def apply(*arrays):
            arrays = np.broadcast_arrays(*arrays)
            shape = arrays[0].shape if arrays else ()
            flat = [a.reshape(-1) for a in arrays]
            outs = [np.empty(int(np.prod(shape)), dt) for dt in dtypes]
            for i in range(outs[0].size if outs else 0):  # fallback: see the docstring
                rs = fn(*(f[i:i + 1].reshape(()) for f in flat))
                for o, r in zip(outs, rs):
                    o[i] = r
            return tuple(o.reshape(shape) for o in outs)
        return apply

    return wrap_slow


def _fit(value, shape, dtype) -> np.ndarray:
    """``value`` as an array of ``shape`` and ``dtype`` (a constant result broadcasts)."""
    value = np.asarray(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    if value.shape != tuple(shape):
        value = np.broadcast_to(value, shape).copy()  # a constant result: a real array, not a view
    return value


def result_dtypes(op, ctx) -> list[np.dtype]:
    """NumPy dtypes of ``op``'s results."""
    return [ctx.dtype(r.type) for r in op.results]


def unwrap(n: int) -> Callable:
    """Region results (always a tuple) -> kernel result convention (value if one result)."""
    return operator.itemgetter(0) if n == 1 else tuple


# ----------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------


@register(TupleOp)
def _tuple(op, ctx):
    return lambda *elements: elements


@register(GetTupleElementOp)
def _get_tuple_element(op, ctx):
    return operator.itemgetter(op.index.value.data)


@register(CallOp, FusionOp)
def _call(op, ctx):
    # The callee's compiled function already follows the kernel convention
    # (one value, or a tuple for several results).
    return ctx.function(op.callee.string_value())


@register(WhileOp)
def _while(op, ctx):
    # The loop's semantics, interpreted; the executor's context runs it compiled once it has run long enough
    # (KernelContext.loop_kernel: lowering.executor.compiled_loops.tiered_loop).
    single = len(op.results) == 1
    if ctx.timeout is not None:  # checks the clock every iteration (lowering.runtime.interrupt)
        where = f"{op.name} iteration"

        def while_kernel(cond, body, *state):
            while cond(*state)[0]:
                state = body(*state)
                check(where)
            return state[0] if single else tuple(state)
    else:
        def while_kernel(cond, body, *state):
            while cond(*state)[0]:
                state = body(*state)
            return state[0] if single else tuple(state)

    return ctx.loop_kernel(op, while_kernel)


@register(AsyncStartOp)
def _async_start(op, ctx):
    # The spec allows a backend to run the op synchronously: the future holds its results, computed now.
    return lambda body, *operands: tuple(body())


@register(AsyncDoneOp)
def _async_done(op, ctx):
    if len(op.results) == 1:
        return operator.itemgetter(0)
    return tuple


@register(ConditionalOp)
def _conditional(op, ctx):
    n = len(op.branches)
    out = unwrap(len(op.results))
    by_pred = ctx.dtype(op.selector.type) == np.bool_

    def conditional_kernel(*args):
        branches, selector, operands = args[:n], args[n], args[n + 1:]
        if by_pred:
            b = 0 if selector else 1  # region 0 is the true branch
        else:
            b = int(selector)
            if not 0 <= b < n:
                b = n - 1  # XLA: an out-of-range index runs the last branch
        return out(branches[b](operands[b]))

    return conditional_kernel
