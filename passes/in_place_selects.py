"""``xla-in-place-selects``: the max/min selects against a constant that XLA CPU stores in place inside a while
loop, in the form it computes them there.

``lax.fori_loop(0, 3, lambda i, v: jnp.where(v > -1.0, v, -1.0), x)`` is one fusion whose output is its input's
buffer: XLA's optimized HLO keeps the broadcast constant inside the fusion, and LLVM writes the fusion's vectorized
elements as a compare and a masked store of the constant (the element the select keeps is never rewritten, so a
denormal stays), its elements in scalar code as the max/min instruction (under denormals-are-zero a denormal result
is flushed; :func:`lowering.kernels.scalar.select_flush`). Which elements are scalar code follows the fusion's
loop nest (:func:`scalar_code_elements`), measured against jax.jit (jax 0.10.2) on an Intel Xeon (session 25) and
an AMD EPYC (session 30), f32 and f64, the same on both.

A select is stored in place when it is the max/min form (:func:`lowering.kernels.scalar.max_min_pattern`) of a
value the loop carries and a constant, inside the body of a while loop that runs more than once, and the body
returns it -- itself, or through a select on a loop-invariant predicate (LLVM unswitches the element loop on it:
``where(jnp.sum(v) > c, v * 2, where(v > -1, v, -1))``) -- and nothing else reads the carried value but ops of
that fusion, ops XLA's CSE makes one with them, and ops computing only loop state XLA removes (its result unread,
:func:`_dead_slots`; :func:`_written_in_place`). The body may read the select elsewhere too (a scan stacking it:
the stacked rows are its values; ``b - where(a > -1, a, -1)``), and return a swap of carried values. The carried
value also returned at another position (``(where(a > -1, a, -1), a)``), read by an element-wise op of another
output (``-a``, ``b * a``), by a reverse or a sum (``c + jnp.sum(a)``) -- each measured with that output read after
the loop -- leaves XLA writing a new buffer: a vector max/min, every denormal flushed, as anywhere else in a loop,
where a constant is in each fusion reading it (XLA does not move constants and broadcasts out of a loop on their
own: :func:`lowering.kernels.scalar._looked_through`). All measured (session 30) on 121 elements, f32 and f64,
against jax.jit.

The pass marks a select all of whose elements XLA stores by masked stores
(:data:`~lowering.kernels.scalar.MASKED_STORE`: a select keeping denormals), one all of whose elements are scalar
code as the max/min (:data:`~lowering.kernels.scalar.MAX_MIN_ELEMENTS`), and writes one of both kinds as
``select(scalar_code, max_min, masked)``: the select twice, each copy marked, chosen by a constant mask of the
scalar-code elements. Only with the executor's denormal flushing does this change a result
(``lowering.compile(..., denormals="keep")`` gives the same select twice). bf16 and f16 selects are left alone (not
measured; f16 has no denormal f32 value to flush).

Not reproduced (measured): a swap of two carried values of shape ``[k, 2, c]`` with rows of 32 bytes keeps every
denormal in XLA (``[2|3, 2, 4]`` f64, ``[2, 2, 8]`` f32), where the model flushes them; ``where(v > y, v, y)`` of a
captured ``y`` (two variables: a max/min) keeps every denormal in XLA on f32[60] alone (flushed on f32[18|121|200],
f64[30|60|121], as here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, UnitAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.cse import CseNumbering, splat_value
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import pred_type
from xla_dialect.ops.control_flow import WhileOp, static_trip_count
from xla_dialect.ops.data_movement import BroadcastInDimOp
from xla_dialect.types import numpy_dtype

from .registry import register_pass
from .small_loops import _BF16_COSTS, _ELEMENT_LOOP_BASE, _cone, unrolled_whole
from .util import make_constant

from lowering.kernels.scalar import MASKED_STORE, MAX_MIN_ELEMENTS, max_min_pattern  # noqa: E402 - (marks the kernels read)

IN_PLACE_SELECT_COST = _ELEMENT_LOOP_BASE + 1 + 1 + _BF16_COSTS[ew.CompareOp] + _BF16_COSTS[ew.SelectOp]
"""LLVM's size cost per element of the element loop of an in-place select against a constant, by the element-loop
model of :mod:`passes.small_loops` (the loop's own two, a load, a store, a compare, the select: 6): its loop of 49
elements is unrolled whole (scalar code), of 50 vectorized (measured, f32 and f64:
:func:`~passes.small_loops.unrolled_whole`)."""

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
    if not unrolled_whole(columns, IN_PLACE_SELECT_COST):  # (each row's loop vectorized, its tail scalar)
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


_COLUMNS_KEPT = {4: frozenset({3, 4, 5, 6, 7, 8}), 8: frozenset({3, 4, 8, 12})}
"""Element size -> the column lengths below 16 (``[r, 1]``) whose elements are all vector code (measured every
``r`` from 2 to 20; the others are all scalar code)."""


def _column_scalar_code(rows: int, itemsize: int) -> np.ndarray:
    """Which elements of a column ``[rows, 1]`` LLVM computes in scalar code: XLA's loop nest over rows, its inner
    loop of one element, which LLVM vectorizes unlike a one-dimensional loop of as many elements. Below 16 rows all
    scalar code but for :data:`_COLUMNS_KEPT`; from 16 the tail of the loop over rows: f64 ``r % 4`` below 64 rows,
    f32 ``r % 4`` below 32 and ``r % 8`` below 120, else :func:`vector_tail` (measured f32 every ``r`` from 2 to
    200 and at 201, 206, 207, 255; f64 every ``r`` from 2 to 20 and at 49-51, 54-55, 58-59, 64, 66-67, 70-71,
    102-103 and 121; the other lengths swept against jax.jit, session 30)."""
    scalar = np.ones(rows, bool)
    if rows < 16:
        if rows in _COLUMNS_KEPT[itemsize]:
            scalar[:] = False
        return scalar
    if itemsize == 8:
        tail = rows % 4 if rows < 64 else vector_tail(rows, itemsize)
    else:
        tail = rows % 4 if rows < 32 else rows % 8 if rows < 120 else vector_tail(rows, itemsize)
    scalar[: rows - tail] = False
    return scalar


def scalar_code_elements(shape: tuple[int, ...], itemsize: int) -> np.ndarray:
    """Which elements (a bool array of ``shape``) of an in-place select's fusion LLVM computes in scalar code, for
    elements of ``itemsize`` bytes (4 or 8). Dimensions of one element are dropped (``[1, N]`` is ``[N]``,
    measured), except that a column ``[N, 1]`` is a loop nest of its own (:func:`_column_scalar_code`). One dimension of ``N``: all of them when the loop is unrolled whole (``6 * N + 2 <= 300``:
    up to 49 elements), else the last :func:`vector_tail`. Two or more: XLA emits a loop nest; the innermost two
    dimensions follow :func:`_rows_scalar_code` for each index of the others (measured ``[2, 3, 60]``, ``[4, 2,
    51]``, ``[3|5, 4, 4]``, ``[2, 2, 4]``, ``[2, 9, 2]`` f64 and ``[2, 8, 4]``, ``[2, 2, 8]``, ``[3, 3, 4]``
    f32)."""
    dims = [d for d in shape if d != 1]
    if len(dims) == 1 and shape[-1] == 1:  # (a column, ``[r, 1]``: its own loop nest)
        return _column_scalar_code(dims[0], itemsize).reshape(shape)
    if len(dims) <= 1:
        n = dims[0] if dims else 1
        scalar = np.ones(n, bool)
        if not unrolled_whole(n, IN_PLACE_SELECT_COST):
            scalar[: n - vector_tail(n, itemsize)] = False
        return scalar.reshape(shape)
    rows = _rows_scalar_code(dims[-2], dims[-1], itemsize)
    outer = int(np.prod(dims[:-2], dtype=np.int64))
    return np.broadcast_to(rows, (outer, *rows.shape)).reshape(shape)


def _carried_arm(select: Operation, body: Block) -> SSAValue | None:
    """The carried value the max/min ``select`` chooses between it and a constant (compared with one of them), or
    None."""
    arms = select.operands[1:]
    carried = [arm for arm in arms if arm.owner is body]
    if len(carried) != 1 or any(splat_value(arm) is None for arm in arms if arm is not carried[0]):
        return None
    compare = select.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or carried[0] not in compare.operands:
        return None
    return carried[0]


def _invariant_predicate(value: SSAValue) -> bool:
    """Whether the select predicate ``value`` is one value for every element (a broadcast of a scalar): LLVM
    unswitches the element loop on it, so each arm is stored by a loop of its own."""
    owner = value.owner
    return (isinstance(owner, BroadcastInDimOp) and isinstance(owner.operands[0].type, TensorType)
            and not owner.operands[0].type.get_shape())


def _stored_value(select: Operation, body: Block) -> SSAValue | None:
    """The value of the loop's fusion that the body returns holding ``select``'s elements: ``select`` itself, or a
    select on a loop-invariant predicate one of whose arms it is (``where(jnp.sum(v) > c, v * 2, where(v > -1, v,
    -1))``, measured); None when the body returns neither."""
    returned = body.last_op
    value = select.results[0]
    if any(use.operation is returned for use in value.uses):
        return value
    for use in value.uses:
        outer = use.operation
        if (isinstance(outer, ew.SelectOp) and use.index in (1, 2) and _invariant_predicate(outer.operands[0])
                and any(u.operation is returned for u in outer.results[0].uses)):
            return outer.results[0]
    return None


def _dead_slots(loop: WhileOp) -> set[int]:
    """The positions of ``loop``'s state that XLA's ``WhileLoopSimplifier`` removes: the loop's result there is
    unread, its condition does not read it, and the body computes it from nothing but such positions."""
    body, returned = loop.body.block, loop.body.block.last_op
    dead = {k for k, result in enumerate(loop.results) if not result.uses and not loop.cond.block.args[k].uses}
    changed = True
    while changed:
        changed = False
        for k in sorted(dead):
            if not _feeds_only(body.args[k], dead, returned):
                dead.discard(k)
                changed = True
    return dead


def _feeds_only(value: SSAValue, dead: set[int], returned: Operation) -> bool:
    """Whether ``value`` reaches the body's return only at the positions ``dead``, through whatever ops."""
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        for use in current.uses:
            user = use.operation
            if user is returned:
                if use.index not in dead:
                    return False
            elif id(user) not in seen:
                seen.add(id(user))
                stack.extend(user.results)
    return True


def _written_in_place(carried: SSAValue, stored: SSAValue, body: Block, cse: CseNumbering,
                      dead: set[int]) -> bool:
    """Whether XLA writes the fusion computing ``stored`` into ``carried``'s buffer: every other op reading the
    carried value computes part of ``stored`` (the fusion itself, an op XLA's CSE makes one with an op of it --
    jax writes ``jnp.where`` once per call --, or an op it waits for: ``jnp.sum(v)`` of a loop-invariant
    predicate), or computes only state XLA removes (:func:`_dead_slots`). Anything else reading it -- the body
    returning it at another position (``(where(a > -1, a, -1), a)``), an element-wise op of another output
    (``-a``, ``b * a``), a reverse, a sum -- leaves XLA writing a new buffer (measured: a vector max/min, every
    denormal flushed)."""
    returned = body.last_op
    cone = _cone(body, [stored])
    members = {id(op) for op in cone}
    numbers = {cse.number(op.results[0]) for op in cone if len(op.results) == 1}
    for use in carried.uses:
        reader = use.operation
        if reader is returned:
            if use.index in dead:
                continue
            return False
        if id(reader) in members or (len(reader.results) == 1 and cse.number(reader.results[0]) in numbers):
            continue
        if all(_feeds_only(result, dead, returned) for result in reader.results):
            continue
        return False
    return True


def in_place_selects(module: ModuleOp) -> list[Operation]:
    """The selects of ``module`` that XLA CPU stores in place inside a while loop (module doc), not yet marked, and
    the selects of their loop bodies XLA's CSE makes one with them (a scan stacking the value it carries: jax
    writes the ``jnp.where`` twice)."""
    found = []
    for loop in module.walk():
        if not isinstance(loop, WhileOp) or static_trip_count(loop) == 1:  # (a loop run once is straight-line)
            continue
        body = loop.body.block
        cse = CseNumbering(max_depth=8)  # (selects, compares and their constants: a few ops deep)
        selects = [op for op in body.ops if isinstance(op, ew.SelectOp) and isinstance(op.results[0].type, TensorType)
                   and numpy_dtype(op.results[0].type) in (np.float32, np.float64)
                   and MASKED_STORE not in op.attributes and MAX_MIN_ELEMENTS not in op.attributes]
        in_place = set()
        dead = _dead_slots(loop) if selects else set()
        for op in selects:
            carried = _carried_arm(op, body)
            stored = _stored_value(op, body) if carried is not None else None
            if stored is not None and _written_in_place(carried, stored, body, cse, dead) and max_min_pattern(op):
                in_place.add(cse.number(op.results[0]))
        found += [op for op in selects if cse.number(op.results[0]) in in_place]
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
