"""``xla-in-place-selects``: the max/min selects against a constant that XLA CPU stores in place inside a while
loop, in the form it computes them there.

``lax.fori_loop(0, 3, lambda i, v: jnp.where(v > -1.0, v, -1.0), x)`` is one fusion whose output is its input's
buffer: XLA's optimized HLO keeps the broadcast constant inside the fusion, and LLVM writes the fusion's vectorized
elements as a compare and a masked store of the constant (the element the select keeps is never rewritten, so a
denormal stays), its elements in scalar code as the max/min instruction (under denormals-are-zero a denormal result
is flushed; :func:`lowering.kernels.scalar.select_flush`). Which elements are scalar code follows the fusion's
loop nest (:func:`scalar_code_elements`), measured against jax.jit (jax 0.10.2) on an Intel Xeon (session 25) and
an AMD EPYC (session 30), f32 and f64, the same on both.

The pass models the selects it can tell are stored in place: the max/min form
(:func:`lowering.kernels.scalar.max_min_pattern`) of a value the loop carries and a constant, inside the body of a
while loop that runs more than once, the body returns it and nothing else reads it, and nothing else in the body
reads the carried value but its compare and the body's return (XLA copies a carried value returned at another
position first: ``(where(s0 > -1, s0, -1), s0)`` and a swap of two carried values are in place, measured).
It marks a select all of whose elements XLA stores by masked stores (:data:`~lowering.kernels.scalar.MASKED_STORE`:
a select keeping denormals), one all of whose elements are scalar code as the max/min
(:data:`~lowering.kernels.scalar.MAX_MIN_ELEMENTS`), and writes one of both kinds as ``select(scalar_code, max_min,
masked)``: the select twice, each copy marked, chosen by a constant mask of the scalar-code elements. Only with the
executor's denormal flushing does this change a result (``lowering.compile(..., denormals="keep")`` gives the same
select twice). bf16 and f16 selects are left alone (not measured; f16 has no denormal f32 value to flush).

Not reproduced (measured, session 30): the forms the pass does not see as in place keep the kernels' model
(:func:`lowering.kernels.scalar._cse`: a select, denormals kept, in loops XLA does not compile whole) -- right for
the vectorized elements of a select XLA stores in place through another select on a loop-invariant predicate
(``where(jnp.sum(v) > c, v * 2, where(v > -1, v, -1))``) or that a scan also stacks, not for their elements in
scalar code; and not for the selects XLA does not store in place, a vector max/min flushing every denormal: the
carried value read by another output (``(where(a > -1, a, -1), b + jnp.sum(a))``, ``(where(a > -1, a, -1), -a)``).
A swap of two carried values of shape ``[k, 2, c]`` with ``c`` elements of 32 bytes keeps every denormal in XLA
(``[2|3, 2, 4]`` f64, ``[2, 2, 8]`` f32), where the model flushes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, UnitAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.cse import splat_value
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import pred_type
from xla_dialect.ops.control_flow import WhileOp, static_trip_count
from xla_dialect.types import numpy_dtype

from .registry import register_pass
from .small_loops import UNROLL_THRESHOLD
from .util import make_constant

from lowering.kernels.scalar import MASKED_STORE, MAX_MIN_ELEMENTS, max_min_pattern  # noqa: E402 - (marks the kernels read)

IN_PLACE_SELECT_COST = 6
"""LLVM's size cost per element of the element loop of an in-place select against a constant (a load, a compare,
the select, a store, the loop's own two): its loop of 49 elements is unrolled whole (scalar code), of 50
vectorized (measured, f32 and f64: :data:`~passes.small_loops.UNROLL_THRESHOLD`)."""

_ROW_BYTES_VECTORIZED_ACROSS_ROWS = (8, 16, 32)
"""The row sizes (bytes) of an unrolled inner loop for which LLVM vectorizes the loop over rows around it (two to
eight elements, a power of two: f64 rows of 2 and 4, f32 rows of 2, 4 and 8; measured rows of 3, 5, 6, 7, 8 (f64), 9,
12 and 16 (f32) elements are scalar code)."""


def vector_tail(elements: int, itemsize: int) -> int:
    """How many of the last elements of a vectorized element loop of ``elements`` (more than LLVM unrolls whole)
    LLVM computes in scalar code: its remainder after the vector loop and the vector epilogue. Measured for every
    length from 50 to 399 and at 1,000-1,007, 4,099 and 4,102-4,103: f64 ``n % 4``, but ``n % 2`` where ``n % 16``
    is 2, 3, 6 or 7; f32 ``n % 4``, but ``n % 8`` where ``n % 32`` is 6 or 7 (from 64 elements) and for 54 and 55."""
    n = elements
    if itemsize == 8:
        return n % 2 if n % 16 in (2, 3, 6, 7) else n % 4
    if (n >= 64 and n % 32 in (6, 7)) or n in (54, 55):
        return n % 8
    return n % 4


def _rows_scalar_code(rows: int, columns: int, itemsize: int) -> np.ndarray:
    """Which elements of ``rows`` rows of ``columns`` (the two innermost dimensions of a fusion of two or more,
    dimensions of one dropped) LLVM computes in scalar code."""
    scalar = np.zeros((rows, columns), bool)
    if IN_PLACE_SELECT_COST * columns + 2 > UNROLL_THRESHOLD:  # (each row's loop vectorized, its tail scalar)
        scalar[:, columns - vector_tail(columns, itemsize):] = True
        return scalar
    # Each row's loop unrolled whole: the loop over rows vectorized (rows interleaved) for short power-of-two
    # rows from 4 rows on, unless fewer than 16 rows that 4 does not divide (no scalar epilogue for such short
    # loops); rows of 32 bytes need no epilogue (the rows past a multiple of 4 are vectors), shorter ones leave
    # the rows past a multiple of 4 in scalar code. Measured: f64 [4|8|12|16|17|20|24|33, 4] and [4|8|12|16, 2]
    # kept, [18|19, 2] the last 2|3 rows flushed, [2|3|5, 4], [5|6, 2], [*, 3|5|6|8] flushed; f32 [4|16|17|20, 8]
    # and [4|8|20, 4] kept, [17|18|19, 4] the last 1|2|3 rows flushed, [4|16, 2] kept, [18, 2] the last 2 rows
    # flushed, [2|3|5, 8], [6, 4], [*, 5|7|9|12|16] flushed.
    row_bytes = columns * itemsize
    if (row_bytes not in _ROW_BYTES_VECTORIZED_ACROSS_ROWS or columns < 2 or rows < 4
            or (rows < 16 and rows % 4 != 0)):
        scalar[:] = True
    elif row_bytes != 32:
        scalar[rows - rows % 4:, :] = True
    return scalar


def scalar_code_elements(shape: tuple[int, ...], itemsize: int) -> np.ndarray:
    """Which elements (a bool array of ``shape``) of an in-place select's fusion LLVM computes in scalar code, for
    elements of ``itemsize`` bytes (4 or 8). Dimensions of one element are dropped (``[1, N]`` and ``[N, 1]`` are
    ``[N]``, measured). One dimension of ``N``: all of them when the loop is unrolled whole (``6 * N + 2 <= 300``:
    up to 49 elements), else the last :func:`vector_tail`. Two or more: XLA emits a loop nest; the innermost two
    dimensions follow :func:`_rows_scalar_code` for each index of the others (measured ``[2, 3, 60]``, ``[4, 2,
    51]``, ``[3|5, 4, 4]``, ``[2, 2, 4]``, ``[2, 9, 2]`` f64 and ``[2, 8, 4]``, ``[2, 2, 8]``, ``[3, 3, 4]``
    f32)."""
    dims = [d for d in shape if d != 1]
    if len(dims) <= 1:
        n = dims[0] if dims else 1
        scalar = np.ones(n, bool)
        if IN_PLACE_SELECT_COST * n + 2 > UNROLL_THRESHOLD:
            scalar[: n - vector_tail(n, itemsize)] = False
        return scalar.reshape(shape)
    rows = _rows_scalar_code(dims[-2], dims[-1], itemsize)
    outer = int(np.prod(dims[:-2], dtype=np.int64))
    return np.broadcast_to(rows, (outer, *rows.shape)).reshape(shape)


def _carried_arm(select: Operation, body: Block) -> SSAValue | None:
    """The carried value ``select`` (a max/min select stored in place, module doc) chooses between it and a
    constant, or None when ``select`` is not one."""
    arms = select.operands[1:]
    carried = [arm for arm in arms if arm.owner is body]
    if len(carried) != 1 or any(splat_value(arm) is None for arm in arms if arm is not carried[0]):
        return None
    value = carried[0]
    compare = select.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or value not in compare.operands:
        return None
    allowed = {id(select), id(compare), id(body.last_op)}
    if any(id(use.operation) not in allowed for use in value.uses):
        return None
    return value


def in_place_selects(module: ModuleOp) -> list[Operation]:
    """The selects of ``module`` that XLA CPU stores in place inside a while loop (module doc), not yet marked."""
    found = []
    for loop in module.walk():
        if not isinstance(loop, WhileOp) or static_trip_count(loop) == 1:  # (a loop run once is straight-line)
            continue
        body = loop.body.block
        for op in body.ops:
            if not isinstance(op, ew.SelectOp) or MASKED_STORE in op.attributes or MAX_MIN_ELEMENTS in op.attributes:
                continue
            result = op.results[0]
            if not isinstance(result.type, TensorType) or numpy_dtype(result.type) not in (np.float32, np.float64):
                continue
            uses = list(result.uses)
            if len(uses) != 1 or uses[0].operation is not body.last_op or _carried_arm(op, body) is None:
                continue
            if max_min_pattern(op):
                found.append(op)
    return found


def mark_in_place_selects(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` with each select XLA CPU stores in place (:func:`in_place_selects`) in the form it computes it
    (module doc); a copy with ``clone``, ``module`` itself when there is none."""
    if not in_place_selects(module):
        return module
    if clone:
        module = module.clone()
    for select in in_place_selects(module):
        result_type = select.results[0].type
        scalar = scalar_code_elements(result_type.get_shape(), numpy_dtype(result_type).itemsize)
        if not scalar.any():
            select.attributes[MASKED_STORE] = UnitAttr()
            continue
        select.attributes[MAX_MIN_ELEMENTS] = UnitAttr()
        if scalar.all():
            continue
        masked = select.clone()
        del masked.attributes[MAX_MIN_ELEMENTS]
        masked.attributes[MASKED_STORE] = UnitAttr()
        mask = make_constant(scalar, TensorType(pred_type(), result_type.get_shape()))
        chosen = ew.SelectOp.create(operands=[mask.results[0], select.results[0], masked.results[0]],
                                    result_types=[result_type],
                                    attributes={k: v for k, v in select.attributes.items() if k != MAX_MIN_ELEMENTS})
        Rewriter.insert_op([masked, mask], InsertPoint.after(select))
        Rewriter.insert_op(chosen, InsertPoint.after(mask))
        select.results[0].replace_uses_with_if(chosen.results[0], lambda use: use.operation is not chosen)
    return module


@register_pass
@dataclass(frozen=True)
class InPlaceSelectsPass(ModulePass):
    """``xla-in-place-selects``: the max/min selects XLA CPU stores in place in a while loop, marked or split into
    their masked-store and max/min elements (module doc)."""

    name = "xla-in-place-selects"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mark_in_place_selects(op)
