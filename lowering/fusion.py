"""Element-wise fusion: runs of element-wise ops computed in one numba loop, as XLA's loop fusion does.

The executor computes each op with its own NumPy kernel: one Python call and
one pass over memory per op (plus several for the emulated fused
multiply-adds). A fused group computes all of its ops for one element before
moving to the next, in registers, with the hardware FMA and the C library's
trigonometric functions, and returns only the values used outside the group.
The scalar formula of every op is the one the compiled loops use
(:mod:`lowering.compiled_loops`), so a fused group gives the same bits as the
interpreted ops.

What forms a group (:func:`plan`): consecutive ops of a block whose results
have one shape (not 0-d) among add, subtract, multiply, divide (floats),
maximum, minimum, negate, abs, and/or/xor/not, compare, select, convert,
shifts, sine, cosine, tan, f32 exp, log, tanh and logistic (XLA's own
approximations, :mod:`lowering.xla_scalar`), the executor's FMA, and
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
(:mod:`lowering.kernels.tree_sum` for sums, :mod:`lowering.rowwise` for maxima
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

When to compile (``lowering.compile(..., fusion=...)``): numba takes 0.1-1 s
per new group (milliseconds once numba's on-disk cache has it; a group that
runs in pieces on numba's threads takes ~0.2 s more for its parallel wrapper:
0.27-0.38 s against 0.09-0.11 s for the same loops small, measured), which pays
only for programs that run often or on large arrays. ``"auto"`` (the
default) runs a group interpreted until it has been called
:data:`AUTO_CALLS` times or has processed :data:`AUTO_ELEMENTS` elements,
then compiles it on a background thread (numba's LLVM work releases the GIL) and keeps interpreting it
until the kernel is ready -- both give the same bits, so a first call never waits for numba
(:func:`lowering.compiled_loops.wait_for_background_compiles` waits); ``"always"`` compiles at the first
call, before running; ``"never"``.
"""

from __future__ import annotations

import threading

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from xla_dialect.errors import UnsupportedError
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.data_movement import BroadcastInDimOp
from xla_dialect.ops.elementwise import CosineOp, DivOp, ExpOp, LogisticOp, LogOp, SineOp, TanhOp, TanOp
from xla_dialect.ops.reduction import ReduceOp

from .compile_queue import compile_function
from .compiled_loops import _Ineligible, _load, _LoopWriter, as_compiled, compile_in_background, compiles
from .kernels.tree_sum import TREE_WINDOW
from .workers import even_bounds, numba_threads_available, run_pieces

FUSION_MODES = ("auto", "always", "never")
MIN_GROUP = 2
AUTO_CALLS = 20
AUTO_ELEMENTS = 1 << 22

def fusible_op(op: Operation) -> bool:
    """Whether a group may hold ``op``: an op with a scalar definition (:mod:`lowering.kernels.scalar`, the one
    list of what compiled code computes), or a broadcast. (Each also needs element types its definition
    covers, checked when the group's code is written.)"""
    from .kernels.scalar import DEFINITIONS

    return type(op) in DEFINITIONS or isinstance(op, BroadcastInDimOp)


def resolve_fusion(mode: str | None) -> str:
    """Validate ``lowering.compile``'s ``fusion`` option (None: ``$XLA_DIALECT_FUSION``, else "auto")."""
    import os

    mode = os.environ.get("XLA_DIALECT_FUSION", "auto") if mode is None else mode
    if mode not in FUSION_MODES:
        raise UnsupportedError(f"lowering.compile: fusion must be one of {', '.join(FUSION_MODES)}, got {mode!r}")
    return mode


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
    is_splat = isinstance(op, ConstantOp) and op.splat_value() is not None
    if not (is_splat or fusible_op(op)) or op.regions or len(op.results) != 1:
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
    k, rank = len(operand), len(result)
    if dims == tuple(range(k)) and operand == result[:k]:
        return ("outer", int(np.prod(result[k:], dtype=np.int64)))
    if dims == tuple(range(rank - k, rank)) and operand == result[rank - k:]:
        return ("inner", int(np.prod(operand, dtype=np.int64)))
    # (Operands with size-1 dimensions to expand, e.g. keepdims statistics that canonicalize-broadcasts did
    # not compose, and transposing broadcasts are left to their kernel.)
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
                raise _Ineligible("an array input read in two ways")
            ((reads[k], n),) = modes
            splits.add(n)
    if len(splits) > 1:
        raise _Ineligible("broadcasts split the loop in different places")
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
    from .kernels.reduction import binary_body_ufunc

    return ROW_REDUCTIONS.get(getattr(binary_body_ufunc(op.body), "__name__", None))


def row_reduction(op: Operation, produced, shape, members: list[Operation]) -> str | None:
    """``"sum"``, ``"max"`` or ``"min"`` when ``op`` is a reduce a group of element-wise ``members`` of
    ``shape`` can compute at the end of each of its rows, else None: one f32/f64 operand the group computes
    (in ``produced``), reduced over its last dimension (whole rows of the group's loop, as its broadcasts
    cut it, hold whole rows of the reduction), a body ``add``/``maximum``/``minimum`` of its two
    arguments and an init constant that is the body's identity (``0``, ``-inf``, ``+inf``: what jax
    emits), so that the row's reduction is the reduction kernel's result as it is (:mod:`lowering.rowwise`).
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
        from .kernels.reduction import ynnpack_plan

        if ynnpack_plan(op) is not None:
            return None  # (a sum XLA CPU runs in YNNPACK: the reduction kernel's order, not NumPy's row sums)
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


class _FusionWriter(_LoopWriter):
    """Writes a group's ops as scalar statements of one element loop."""

    def elementwise(self, out, dtype, shape, operands, expression, indent):
        self.emit(indent, f"{out} = {expression(*(self.name(v) for v in operands))}")

    @compiles(BroadcastInDimOp)
    def op_broadcast_in_dim(self, op, out, dtype, shape, indent):
        self.emit(indent, f"{out} = {self.name(op.operands[0])}")

    @compiles(ConstantOp)
    def op_constant(self, op, out, dtype, shape, indent):
        splat = op.splat_value()
        if splat is None:
            raise _Ineligible("a constant that is not a splat")
        const = self.fresh("k")
        dtype = np.dtype(dtype)
        if dtype.kind == "f" and dtype.itemsize in (4, 8):
            # Its bit pattern, cast back in the kernel: a float32 scalar argument would cross numba's boundary
            # through a double, which the caller's flush-to-zero mode flushes when it is subnormal (and a
            # one-element array read in the loop is reloaded per element, unvectorized).
            self.constants[const] = np.asarray(splat, dtype).reshape(()).view(f"i{dtype.itemsize}")[()]
            self.emit(indent, f"{out} = float_from_bits({const})")
            return
        self.constants[const] = dtype.type(splat.item())
        self.emit(indent, f"{out} = {const}")


def scalar_packs(dtypes: list[np.dtype], is_array: list[bool]) -> list[tuple[np.dtype, list[int]]]:
    """The scalar inputs of a fused kernel grouped by element type, in order of first appearance: a kernel
    takes each group as one array (one argument and one allocation per call for hundreds of scalars, and a
    float32 scalar does not cross numba's boundary through a double, which flush-to-zero would flush)."""
    packs: dict[np.dtype, list[int]] = {}
    for k, (dtype, array) in enumerate(zip(dtypes, is_array)):
        if not array:
            packs.setdefault(np.dtype(dtype), []).append(k)
    return list(packs.items())


def group_source(group: Group, dtype_of, flush: bool = True) -> tuple[str, dict, int]:
    """The numba source of ``group``'s kernel, its constants and its row length.

    The kernel is ``fused(*constants, *inputs, *outputs, start, stop)``: it
    fills the flat, C-ordered ``outputs`` (allocated by the caller) for rows
    ``start`` to ``stop`` of the elements seen as rows of the returned length
    (1, or the trailing elements fused broadcasts repeat, or the last dimension
    the group's reductions reduce), so that pieces of rows can run on several
    CPUs at once (``flush``: the executor's denormal mode is "flush"). It
    returns whether a maximum or minimum reduction met a NaN or a float output
    is NaN: the caller then computes the group with the ops' own kernels (so a
    NaN's payload and sign are theirs, whatever order LLVM gave the operands)."""
    writer = _FusionWriter({}, dtype_of, flush)
    reads, inner = input_reads(group, writer.info)
    sub = 1  # (reduction rows per loop row: a mask broadcast over the last two dimensions makes rows of n * n)
    if group.reductions:
        width = group.shape[-1]
        inner = width if inner == 1 else inner
        if inner % width:
            raise _Ineligible("broadcasts that split the rows a reduction reduces")
        sub = inner // width
    args, loads, cuts = [], [], []
    for k, v in enumerate(group.inputs):
        if writer.info(v)[1]:
            args.append(f"a{k}")
            read = reads.get(k, "element")
            # Each array is cut to the piece's rows (a bias is read whole, by every row).
            cut = {"outer": "[start:stop]", "inner": "", "element": f"[start * {inner}:stop * {inner}]"}[read]
            cuts.append(f"    f{k} = a{k}.ravel(){cut}")
            loads.append((f"x{k}", f"f{k}", read))
        writer.names[v] = f"x{k}"
    # Scalars come packed, one array per element type (see scalar_packs and _FusionWriter.op_constant).
    packs = scalar_packs([writer.info(v)[0] for v in group.inputs], [bool(writer.info(v)[1]) for v in group.inputs])
    for n, (_, members) in enumerate(packs):
        args.append(f"p{n}")
        cuts += [f"    x{k} = p{n}[{j}]" for j, k in enumerate(members)]
    body_start = len(writer.lines)
    for op in group.members:
        if not isinstance(op, ReduceOp):
            writer.op(op, "        ")
    body = writer.lines[body_start:]
    outputs = [f"g{j}" for j in range(len(group.outputs))]
    lines = [f"def fused({', '.join([*writer.constants, *args, *outputs, 'start', 'stop'])}):", *cuts]
    reduced = {r: op for op in group.reductions for r in op.results}
    lines += [f"    h{j} = g{j}[start * {sub}:stop * {sub}]" if r in reduced
              else f"    h{j} = g{j}[start * {inner}:stop * {inner}]" for j, r in enumerate(group.outputs)]
    stores = [(f"h{j}", writer.name(r)) for j, r in enumerate(group.outputs) if r not in reduced]
    # A NaN output: which NaN a loop of scalar ops gives depends on how LLVM orders commutative operands
    # (a * b of two NaNs); the ops' own kernels decide it instead, so fused and unfused agree bit for bit.
    body += [f"        found |= {writer.name(r)} != {writer.name(r)}" for r in group.outputs
             if r not in reduced and writer.info(r)[0].kind == "f"]
    row_stores, row_end = _row_reductions(group, writer, inner, sub, lines)
    lines.append("    found = False")
    lines += element_loop(loads, stores, body, "stop - start", inner, "    ", row_stores=row_stores,
                          row_end=row_end)
    lines.append("    return found")
    params = ", ".join([*writer.constants, *args, *outputs])
    # The kernel's pieces at once on numba's threads (lowering.workers), each in the caller's MXCSR.
    lines += ["", "", "@numba.njit(cache=CACHE, error_model='numpy', nogil=True, parallel=True)",
              f"def fused_pieces({params}, bounds):",
              "    csr = mxcsr()  # (outside the parallel loop: read on the calling thread)",
              "    found = np.zeros(bounds.shape[0], np.bool_)",
              "    for piece in numba.prange(bounds.shape[0]):",
              "        saved = mxcsr()",
              "        set_mxcsr(csr)",
              f"        found[piece] = fused({params}, bounds[piece, 0], bounds[piece, 1])",
              "        set_mxcsr(saved)",
              "    return found.any()"]
    return "\n".join(lines) + "\n", writer.constants, inner


def _row_reductions(group: Group, writer, inner: int, sub: int, lines: list[str]):
    """The code of ``group``'s row reductions (:func:`row_reduction`): each keeps its operand's loop row
    (``inner`` elements, ``sub`` reduction rows) in a buffer of its own (``row_stores``), and at the end of
    the loop row (``row_end``) stores each reduction row's reduction in its output, computed as the
    reduction kernel computes it: a sum in XLA CPU's order (:func:`lowering.kernels.tree_sum.window_sum`, from
    its init, +-0); a maximum or minimum with XLA's zero sign (its init, -+inf, changes nothing), a row
    holding a NaN setting ``found``. Appends the buffers' allocations to ``lines``."""
    row_stores, row_end = [], []
    outputs = {r: j for j, r in enumerate(group.outputs)}
    for q, op in enumerate(group.reductions):
        if op.results[0] not in outputs:
            continue
        x = op.operands[0]
        dtype = np.dtype(writer.info(x)[0])
        t = dtype.name
        kind = _reduction_kind(op)  # (plan checked the rest: row_reduction)
        out = f"h{outputs[op.results[0]]}"
        width = inner // sub
        lines.append(f"    w{q} = new_array({inner}, np.{t})")
        row_stores.append((f"w{q}", writer.name(x)))
        row_end.append(f"      for s in range({sub}):")
        if kind == "sum":  # (XLA CPU's order: lowering.kernels.tree_sum, from the init, +0 or -0)
            init = float(op.operands[1].owner.splat_value())
            lines.append(f"    scratch{q} = new_array({max(1, -(-width // TREE_WINDOW))}, np.{t})")
            row_end.append(f"        {out}[o * {sub} + s] = window_sum(w{q}, s * {width}, {width}, "
                           f"np.{t}({init!r}), scratch{q})")
            continue
        minimum = kind == "min"
        row_end += [f"        m{q}, bad{q} = row_extremum(w{q}, s * {width}, {width}, {minimum})",
                    f"        found |= bad{q}",
                    f"        if m{q} == 0:",
                    f"          m{q} = zero_sign(w{q}, s * {width}, {width}, m{q}, {minimum})"]
        # (No flush of a denormal maximum, as the kernel's ``-inf op total`` does under DAZ: in "flush" mode
        # no denormal reaches the row -- arguments are flushed, a constant is converted to the kernel's
        # type under the caller's MXCSR, results of arithmetic are flushed.)
        row_end.append(f"        {out}[o * {sub} + s] = m{q}")
    return row_stores, row_end


PARALLEL_ELEMENTS = 1 << 18
"""Fused loops over fewer elements run whole, on the calling thread."""

PARALLEL_MIN_NS = 100_000
"""Fused loops whose estimated time on one CPU (:func:`estimated_ns`) is at least this many nanoseconds run in
pieces on the CPUs at once, where the pieces run on numba's polling threads (:mod:`lowering.workers`). Measured
on a 2-core VM (A/B in one process, medians of 21 rounds, ms): MLP 5.01 -> 4.78 and GPT-2 block 4.20 -> 4.04
with this threshold instead of :data:`PARALLEL_MIN_NS_PYTHON`; attention, ResNet block, convnet and
element-wise within 1%."""

PARALLEL_MIN_NS_PYTHON = 500_000
""":data:`PARALLEL_MIN_NS` where the pieces run on Python worker threads: handing one a piece costs ~0.1 ms on
those VMs (an idle vCPU is slow to wake, then the GIL): a 262,144-element bias add took 0.09 ms whole and 0.17
ms in two pieces, a 4M-element gelu 3.4 ms whole and 1.8 ms in two."""

_OP_NS = {ExpOp: 0.5, LogOp: 0.4, TanhOp: 0.3, LogisticOp: 1.0, DivOp: 0.1, SineOp: 5.0, CosineOp: 5.0, TanOp: 6.0,
          ReduceOp: 0.1}
"""Rough per-element cost (ns) of a fused op in a vectorized loop on one CPU; other ops cost 0.05 (the
C library's sin, cos and tan are called one element at a time)."""


def estimated_ns(group: Group) -> float:
    """A rough single-CPU time of ``group``'s fused loop: 0.3 ns per element for each array read or written
    element by element (memory), plus :data:`_OP_NS` per op and element (a row reduction 0.1)."""
    size = float(np.prod(group.shape, dtype=np.int64))
    streams = (sum(1 for r in group.outputs if _shape(r) == group.shape)
               + sum(1 for v in group.inputs if _shape(v) == group.shape))
    ops = sum(_OP_NS.get(type(op), 0.05) for op in group.members)
    return size * (0.3 * streams + ops)


class FusedGroup:
    """Runs a group: interpreted (the ops' own kernels) until the mode says compile, then its numba kernel."""

    def __init__(self, interpreted, group: Group, dtype_of, mode: str, flush: bool = True, workers: int = 1,
                 worker_mode=None):
        self.interpreted = interpreted
        self.mode = mode
        self.calls = 0
        self.elements = 0
        self.kernel = None
        self.bounds = None  # the pieces' rows, when the kernel runs them on numba's threads (fused_pieces)
        self._serial = None  # the one-piece kernel, once compiled (_serial_kernel)
        self.tried = False  # compiled, or found not compilable
        self.started = False  # compilation asked for (it may run on a background thread)
        self.readonly: list[bool] = []
        self.shape = group.shape
        self.input_dtypes = [np.dtype(dtype_of(v.type)) for v in group.inputs]
        self.input_is_array = [bool(_shape(v)) for v in group.inputs]
        self.packs = scalar_packs(self.input_dtypes, self.input_is_array)
        self.input_ranks = [len(_shape(v) or ()) for v in group.inputs]
        self.output_dtypes = [np.dtype(dtype_of(r.type)) for r in group.outputs]
        self.output_shapes = [_shape(r) for r in group.outputs]
        self._lock = threading.Lock()
        size = int(np.prod(self.shape, dtype=np.int64))
        try:
            self.source, constants, inner = group_source(group, dtype_of, flush)
            self.constants = list(constants.values())
            self.rows = size // inner
            self.parts = min(workers, size // (PARALLEL_ELEMENTS // 2)) if size >= PARALLEL_ELEMENTS else 1
            self.estimated_ns = estimated_ns(group)
            self.pieces = [(0, self.rows)]  # (cut when compiled: _cut)
            self.worker_mode = worker_mode
        except _Ineligible:
            self.source = None
            self.tried = self.started = True

    def _compile(self, readonly: list[bool]):
        """Compile the group's kernel for arrays with these read-only flags (:meth:`_compile_kernel`)."""
        self._compile_kernel(readonly)

    def _compile_kernel(self, readonly: list[bool], cached_only: bool = False):
        """Compile the group's kernel for arrays with these read-only flags (those of the call that asked:
        they are stable per input -- constants are read-only, computed values not -- and a numba function
        compiled for a writable array is compiled again, at a call, for a read-only one). With
        ``cached_only``, only when that is a load of machine code an earlier process compiled
        (:func:`lowering.numba_cache.has_machine_code`); otherwise nothing is tried yet."""
        with self._lock:
            if self.tried:
                return
            try:
                from numba import from_dtype, typeof, types

                from .numba_cache import has_machine_code

                signature = [typeof(c) for c in self.constants]
                signature += [types.Array(from_dtype(dt), rank, "C", readonly=ro)
                              for dt, rank, array, ro in zip(self.input_dtypes, self.input_ranks,
                                                             self.input_is_array, readonly)
                              if array]
                signature += [types.Array(from_dtype(dt), 1, "C") for dt, _ in self.packs]
                signature += [types.Array(from_dtype(dt), 1, "C") for dt in self.output_dtypes]
                pieces = self._cut()
                if len(pieces) > 1 and numba_threads_available():
                    fn, full = _load(self.source, "fused_pieces"), (*signature, types.Array(types.int64, 2, "C"))
                else:
                    fn, full = _load(self.source, "fused"), (*signature, types.int64, types.int64)
                if cached_only and not has_machine_code(fn, full):
                    return
                self.pieces = pieces
                self.signature = tuple(signature)
                self.readonly = readonly
                compile_function(fn, full)
                if len(pieces) > 1 and numba_threads_available():
                    self.bounds = np.array(self.pieces, np.int64)
                else:
                    self._serial = fn
                self.kernel = fn
            except Exception:  # noqa: BLE001 - numba rejected the generated code: stay interpreted
                self.kernel = None
            self.tried = True

    def _serial_kernel(self):
        """The kernel ``fused`` (one piece per call), compiled for this group's arguments (once)."""
        if self._serial is None:
            from numba import types

            fn = _load(self.source, "fused")
            fn.compile((*self.signature, types.int64, types.int64))
            self._serial = fn
        return self._serial

    def _cut(self) -> list[tuple[int, int]]:
        """The rows of each piece: one per CPU when the loop is large for the threads the pieces run on
        (:data:`PARALLEL_MIN_NS`); each piece writes its own elements, so the bits do not depend on it."""
        if self.parts > 1:
            threshold = PARALLEL_MIN_NS if numba_threads_available() else PARALLEL_MIN_NS_PYTHON
            if self.estimated_ns >= threshold:
                return even_bounds(self.rows, self.parts)
        return [(0, self.rows)]

    def __call__(self, *inputs):
        if self.kernel is None and not self.started:
            self.calls += 1
            self.elements += int(np.prod(self.shape))
            readonly = [is_array and not np.asarray(x).flags.writeable
                        for x, is_array in zip(inputs, self.input_is_array)]
            if self.mode == "auto" and self.calls == 1:  # compiled by an earlier process: load it now
                self._compile_kernel(readonly, cached_only=True)
                self.started = self.tried
            if not self.started and (self.mode == "always" or self.calls > AUTO_CALLS
                                     or self.elements > AUTO_ELEMENTS):
                self.started = True
                if self.mode == "always":
                    try:
                        self._compile(readonly)
                    except KeyboardInterrupt:  # Ctrl-C while numba compiled: the next call asks again
                        self.started = self.tried = False
                        raise
                else:  # interpreted until the kernel is ready (the same bits): a first call does not wait
                    compile_in_background(lambda: self._compile(readonly))
        if self.kernel is None:
            return self.interpreted(*inputs)
        args = [as_compiled(np.ascontiguousarray(x, dt), ro)
                for x, dt, is_array, ro in zip(inputs, self.input_dtypes, self.input_is_array, self.readonly)
                if is_array]
        args += [np.array([inputs[k] for k in members], dt) for dt, members in self.packs]
        outputs = [np.empty(shape, dt) for shape, dt in zip(self.output_shapes, self.output_dtypes)]
        flat = [o.reshape(-1) for o in outputs]
        head = (*self.constants, *args, *flat)
        if len(self.pieces) == 1:
            found = self.kernel(*head, *self.pieces[0])
        elif self.bounds is not None and numba_threads_available():
            found = self.kernel(*head, self.bounds)
        else:  # Python workers (also in a child forked after numba's threads ran: they cannot start there)
            kernel = self.kernel if self.bounds is None else self._serial_kernel()
            pieces = [(*head, start, stop) for start, stop in self.pieces]
            found = any(run_pieces(kernel, pieces, self.worker_mode))
        if found:  # a NaN output or a row maximum or minimum met a NaN: the ops' own kernels give its bits
            return self.interpreted(*inputs)
        return tuple(outputs)

