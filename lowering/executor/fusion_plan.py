"""Which element-wise ops fuse: the groups of a block (:func:`plan`), how a group reads its inputs
(:func:`input_reads`) and the element loop around its scalar code (:func:`element_loop`).

What forms a group (:func:`plan`): consecutive ops of a block whose results
have one shape (not 0-d) among add, subtract, multiply, divide (floats),
maximum, minimum, negate, abs, and/or/xor/not, compare, select, convert,
shifts, sine, cosine, tan, f32 exp, log, tanh and logistic (XLA's own
approximations, :mod:`lowering.kernels.xla_scalar`), the executor's FMA, and
``broadcast_in_dim`` of a scalar, of leading dimensions (read once per row) or of trailing dimensions (a
bias, read per column), splat constants (read as their scalar); other ops in between are allowed when they use no group value (e.g.
the scalar constants jax interleaves). Operands from outside are arrays of
the group's shape or scalars. At least :data:`MIN_GROUP` ops.

Row reductions (the executor's groups, ``plan(..., row_reductions=True)``): a
reduce of a group value over its last dimension -- a sum, maximum or minimum of
f32/f64 with the body's identity as init, as jax's ``sum``/``max``/``min`` and
softmax emit them -- joins the group at its end, as XLA's reduction fusion
does: the loop keeps each row's values in a buffer and reduces the row while
it is in the cache, with the reduction kernel's own row functions
(:mod:`lowering.kernels.tree_sum` for sums, :mod:`lowering.kernels.rowwise` for maxima
and minima), so the bits are the kernel's. A row maximum or
minimum that meets a NaN makes the whole group run on the ops' own kernels
for that call (NumPy's NaN payload). A softmax is then two loops and a divide.
Where the group's broadcasts cut longer loop rows (attention's causal mask,
broadcast over the last two dimensions), each loop row holds whole reduction
rows, reduced at its end. Measured in one process, the same program compiled
with and without them, medians of 41 alternating rounds (ms): GPT-2 block
3.93 -> 3.76 and 4.01 -> 3.88, attention 5.15 -> 5.04 and 4.93 -> 4.90, MLP
4.98 -> 4.97 and 4.71 -> 4.64: most of a softmax's time is moving its rows
between the CPUs' caches, which this does not change.

The fused kernels (:mod:`lowering.executor.fusion`) and the compiled loops' element loops
(:mod:`lowering.executor.compiled_loops`) are written from these groups.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.data_movement import BroadcastInDimOp
from xla_dialect.ops.reduction import ReduceOp

MIN_GROUP = 2
"""The fewest ops a group holds."""


class Ineligible(Exception):
    """Code the compiled paths do not take (the message says what): raised while a group, a loop or a segment is
    planned or written, it leaves that code to the interpreter."""


def fusible_op(op: Operation) -> bool:
    """Whether a group may hold ``op``: an op with a scalar definition (:mod:`lowering.kernels.scalar`, the one
    list of what compiled code computes), or a broadcast. (Each also needs element types its definition
    covers, checked when the group's code is written.)"""
    from ..kernels.scalar import DEFINITIONS

    return type(op) in DEFINITIONS or isinstance(op, BroadcastInDimOp)


def _shape(value: SSAValue):
    from xdsl.dialects.builtin import TensorType

    t = value.type
    return tuple(int(d) for d in t.get_shape()) if isinstance(t, TensorType) else None


class Group:
    """A run of fusible ops of one block: ``members`` (in order), the span of block indices they cover,
    ``inputs`` (values from outside, in first-use order) and ``outputs`` (member results used outside).
    ``shape`` is the element-wise ops' shape; ``reductions`` the reduces over its last dimension computed at
    the end of each row (:func:`row_reduction`), the last members."""

    def __init__(self, members: list[Operation], first: int, last: int, block: Block):
        self.members = members
        self.first, self.last = first, last
        member_set = set(members)
        results = {r for op in members for r in op.results}
        inputs: dict[SSAValue, None] = {}
        for op in members:
            for v in op.operands:
                if v not in results:
                    inputs.setdefault(v, None)
        self.inputs = list(inputs)
        self.outputs = [r for op in members for r in op.results
                        if any(_block_ancestor(use.operation, block) not in member_set for use in r.uses)]
        self.reductions = [op for op in members if isinstance(op, ReduceOp)]
        self.shape = _shape(next(op for op in members if not isinstance(op, ReduceOp)).results[0])


def _block_ancestor(op: Operation, block: Block) -> Operation | None:
    """The op of ``block`` that is ``op`` or contains it."""
    while op is not None and op.parent is not block:
        op = op.parent_op()
    return op


def _fusible(op: Operation, shape) -> bool:
    from ..kernels.elementwise import BF16_FLUSHED_STORE

    is_splat = isinstance(op, ConstantOp) and op.splat_value() is not None
    if not (is_splat or fusible_op(op)) or op.regions or len(op.results) != 1:
        return False
    if BF16_FLUSHED_STORE in op.attributes:  # (its kernel flushes before rounding: left to it)
        return False
    result_shape = _shape(op.results[0])
    if not result_shape or (shape is not None and result_shape != shape):
        return False
    if is_splat:  # a broadcast scalar folded into an array (canonicalize-broadcasts): read as the scalar
        return True
    if isinstance(op, BroadcastInDimOp):
        return _broadcast_read(op) is not None
    return all(_shape(v) in (result_shape, ()) for v in op.operands)


def _broadcast_read(op: Operation) -> tuple[str, int] | None:
    """How a fused loop reads the operand of ``broadcast_in_dim`` op, with the loop seen as rows of ``n``
    elements: ``("scalar", 0)``; ``("outer", n)`` when the operand is the leading result dimensions (one
    element per row: a softmax's or a layer norm's row statistics); ``("inner", n)`` when it is the trailing
    ones (the same ``n`` elements for every row: a bias); None for other broadcasts (left to their kernel)."""
    from xla_dialect.ops.base import ints

    operand, result = _shape(op.operands[0]), _shape(op.results[0])
    if operand == ():
        return ("scalar", 0)
    dims = tuple(ints(op.properties.get("broadcast_dimensions")))
    rank = len(result)
    # The operand's dimensions of more than one element, where they land: size-1 dimensions to expand read the
    # same as absent ones (a bias reshaped to (1, 1, 1, c) by flax's Conv, keepdims statistics): without this, such
    # a broadcast was computed on its own and the group copied its (n, h, w, c) stride-0 view whole every call.
    kept = [(d, size) for d, size in zip(dims, operand) if size != 1]
    if not kept or any(result[d] != size for d, size in kept):
        return None  # (all of size 1 -- one element, not a scalar -- or sizes that differ: left to their kernel)
    positions = [d for d, _ in kept]
    j = len(positions)
    if positions == list(range(j)):
        return ("outer", int(np.prod(result[j:], dtype=np.int64)))
    if positions == list(range(rank - j, rank)):
        return ("inner", int(np.prod([size for _, size in kept], dtype=np.int64)))
    # (Broadcasts into middle dimensions, and transposing ones, are left to their kernel.)
    return None


def input_reads(group: "Group", info) -> tuple[dict[int, str], int]:
    """How a fused loop reads each array input of ``group`` that is not of the group's shape (the operand of
    fused broadcasts: ``"outer"`` or ``"inner"``, by input index), and the row length the loop runs over
    (1 when every array input has the group's shape). ``info(value)`` gives ``(dtype, shape)``."""
    reads, splits = {}, set()
    for k, v in enumerate(group.inputs):
        shape = info(v)[1]
        if shape and shape != group.shape:  # every use must read it the same way
            users = [u.operation for u in v.uses if u.operation in group.members]
            modes = {_broadcast_read(op) for op in users}
            if any(not isinstance(op, BroadcastInDimOp) for op in users) or len(modes) != 1:
                raise Ineligible("an array input read in two ways")
            ((reads[k], n),) = modes
            splits.add(n)
    if len(splits) > 1:
        raise Ineligible("broadcasts split the loop in different places")
    return reads, next(iter(splits)) if splits else 1


def element_loop(loads: list[tuple[str, str, str]], stores: list[tuple[str, str]], body: list[str], rows: str,
                 inner: int, indent: str, i: str = "i", row_stores: list[tuple[str, str]] = (),
                 row_end: list[str] = ()) -> list[str]:
    """The lines of a fused group's element loop over ``rows`` rows of ``inner`` elements: ``loads`` are
    ``(scalar, flat array, read)`` with read "outer", "inner" or "element", ``body`` the ops' statements
    (written at ``indent`` plus 4 spaces), ``stores`` ``(flat output, scalar)``; ``row_stores``
    ``(row buffer, scalar)`` keep a row's values (at the inner index) for the ``row_end`` lines, run after
    each row (at ``indent`` plus 2 spaces, row index ``o``). The indices count from 0,
    so numba's negative-index wraparound folds away and LLVM loads whole vectors (counting from a start
    index it gathered element by element: a 4M-element tanh loop 3.2 -> 1.3 ms)."""
    if inner > 1 or row_end or any(read != "element" for _, _, read in loads):
        # Two loops, outer x inner = the elements: a row operand is read with the outer index, a bias with
        # the inner one (no division per element, and the inner loop stays vectorizable).
        lines = [f"{indent}for o in range({rows}):", f"{indent}  for j in range({inner}):",
                 f"{indent}    {i} = o * {inner} + j"]
    else:
        lines = [f"{indent}for {i} in range({rows}):"]
    index = {"outer": "o", "inner": "j", "element": i}
    lines += [f"{indent}    {name} = {flat}[{index[read]}]" for name, flat, read in loads]
    lines += body
    lines += [f"{indent}    {flat}[{i}] = {value}" for flat, value in stores]
    lines += [f"{indent}    {buffer}[j] = {value}" for buffer, value in row_stores]
    lines += list(row_end)
    return lines


ROW_REDUCTIONS = {"add": "sum", "maximum": "max", "minimum": "min"}
"""Reduce bodies a group computes at the end of each row (:func:`row_reduction`), by ufunc name."""

_IDENTITIES = {"sum": (0.0,), "max": (-np.inf,), "min": (np.inf,)}


def _reduction_kind(op: Operation) -> str | None:
    """``"sum"``, ``"max"`` or ``"min"`` for a reduce whose body is that one op of its two arguments, else None."""
    from ..kernels.reduction import binary_body_ufunc

    return ROW_REDUCTIONS.get(getattr(binary_body_ufunc(op.body), "__name__", None))


def row_reduction(op: Operation, produced, shape, members: list[Operation]) -> str | None:
    """``"sum"``, ``"max"`` or ``"min"`` when ``op`` is a reduce a group of element-wise ``members`` of
    ``shape`` can compute at the end of each of its rows, else None: one f32/f64 operand the group computes
    (in ``produced``), reduced over its last dimension (whole rows of the group's loop, as its broadcasts
    cut it, hold whole rows of the reduction), a body ``add``/``maximum``/``minimum`` of its two
    arguments and an init constant that is the body's identity (``0``, ``-inf``, ``+inf``: what jax
    emits), so that the row's reduction is the reduction kernel's result as it is (:mod:`lowering.kernels.rowwise`).
    Sums XLA CPU runs in YNNPACK (:func:`lowering.kernels.reduction.ynnpack_plan`) stay with their kernel."""
    from xdsl.dialects.builtin import Float32Type, Float64Type

    from xla_dialect.ops.base import ints

    if not isinstance(op, ReduceOp) or len(op.operands) != 2 or len(op.results) != 1 or not shape:
        return None
    x, init = op.operands
    if x not in produced or _shape(x) != shape or tuple(ints(op.dimensions)) != (len(shape) - 1,):
        return None
    if not isinstance(x.type.element_type, (Float32Type, Float64Type)):
        return None
    kind = _reduction_kind(op)
    owner = init.owner
    if kind is None or not isinstance(owner, ConstantOp):
        return None
    if kind == "sum":
        from ..kernels.reduction import ynnpack_plan

        if ynnpack_plan(op) is not None:
            return None  # (a sum XLA CPU runs in YNNPACK: the reduction kernel's order, not NumPy's row sums)
        from ..kernels.reduction import sum_lanes

        if sum_lanes(op):
            return None  # (a sum XLA CPU vectorizes: the reduction kernel's lanes)
    splat = owner.splat_value()
    if splat is None or float(splat) not in _IDENTITIES[kind]:
        return None
    splits = {_broadcast_read(m)[1] for m in members
              if isinstance(m, BroadcastInDimOp) and _broadcast_read(m)[0] != "scalar"}
    return kind if all(n % shape[-1] == 0 for n in splits) else None


def plan(block: Block, row_reductions: bool = False) -> list[Group]:
    """The fusion groups of ``block`` (see the module doc), in block order of their first ops. With
    ``row_reductions``, reduces over the last dimension of a group's values join the group at its end
    (:func:`row_reduction`).

    Groups of different shapes may be open at once and interleave (an optimizer's update runs through its
    parameters' shapes one op at a time: each parameter's chain is a group). A group is called where its last op
    stands, so it closes -- takes no later op -- as soon as an op outside it reads one of its values (that op, or
    the group it joins, must come after the call); an op with regions or the block's terminator closes every
    group."""
    groups: list[Group] = []
    ops = list(block.ops)
    open_groups: dict[tuple, dict] = {}  # shape -> {"members", "first", "last", "produced", "reducing"}
    owner: dict[SSAValue, tuple] = {}  # value -> the open group (its shape) that produces it

    def close(key) -> None:
        g = open_groups.pop(key)
        for v in g["produced"]:
            owner.pop(v, None)
        if len(g["members"]) >= MIN_GROUP:
            group = Group(g["members"], g["first"], g["last"], block)
            if group.outputs:  # (a run whose results are all unused is left to the ops' own kernels)
                groups.append(group)

    def join(key, op: Operation, index: int, reducing: bool = False) -> None:
        g = open_groups[key]
        g["members"].append(op)
        g["produced"].update(op.results)
        g["last"] = index
        g["reducing"] = g["reducing"] or reducing
        owner.update({r: key for r in op.results})

    for index, op in enumerate(ops):
        reads = {owner[v] for inner in op.walk() for v in inner.operands if v in owner}
        target = None
        for key, g in open_groups.items():
            if not g["reducing"] and _fusible(op, key):
                target, reducing = key, False
                break
            if row_reductions and row_reduction(op, g["produced"], key, g["members"]):
                target, reducing = key, True
                break
        if target is None and (op.regions or op is block.last_op):
            for key in list(open_groups):
                close(key)
            continue
        for key in reads - {target}:
            close(key)  # (its call must come before this op, or before the group this op joins)
        if target is not None:
            join(target, op, index, reducing)
            continue
        if _fusible(op, None):
            shape = _shape(op.results[0])
            if shape in open_groups:  # (a group of this shape that takes nothing more: after a reduce)
                close(shape)
            open_groups[shape] = {"members": [], "first": index, "last": index, "produced": set(),
                                  "reducing": False}
            join(shape, op, index)
    for key in list(open_groups):
        close(key)
    return sorted(groups, key=lambda g: g.first)
