"""``hlo.while`` loops compiled to machine code with numba, so iterations cost nanoseconds, not microseconds.

The executor runs a loop body as generated Python over NumPy kernels: every
op of every iteration is a Python call (about a microsecond each), so a
1,000-iteration scalar loop takes milliseconds where jax.jit takes
microseconds. For loops whose condition and body use only the ops below, this
module generates one numba function holding the whole loop (conditions,
bodies, inlined ``hlo.call``s), compiled once per loop; its results are the
same bits as the interpreted loop's, op by op:

* scalars (0-d values) are numba scalars of the element type, arrays are
  C-contiguous NumPy arrays; element-wise ops on arrays are explicit loops over
  the elements, so every element goes through the same scalar formula;
* element-wise ops are calls to their one scalar definition
  (:mod:`lowering.kernels.scalar`: arithmetic, max/min, compare, select,
  bitwise ops and shifts, convert, the FMA, sine/cosine/tan, XLA's f32
  exp/log/tanh/logistic), which the interpreter's kernels use too; this module
  writes only the loops, loads, stores and casts around them;
* ``constant``, ``broadcast_in_dim`` of a scalar, ``reshape``,
  ``dynamic_slice``, ``dynamic_update_slice`` (XLA's clamped start indices),
  ``reduce`` of a whole array with an add (XLA CPU's order, the interpreted
  kernel's: :mod:`lowering.kernels.tree_sum`), multiply, maximum or minimum
  body, and ``call``.
* and the structured ops the writer's methods name (gathers, scatters, sorts, reductions, window reductions,
  products, conditionals, nested loops, jaxlib's LAPACK LU and triangular-solve custom calls: see each method),
  each in the order of its interpreted kernel.

f32 and f64 only among floats (numba has no f16/bf16). Loops with any other
op, with values captured from outside the loop, or with tuple values keep the
interpreted path. Denormals: the compiled code runs in the caller's CPU flush
modes, as the interpreted kernels do.

When to compile: numba takes 0.2 s to tens of seconds per loop (a cold cache,
a large body: an adaptive ODE solve's nested loops take about 25 s on a 2-core
VM, a warm cache about 2 s), which only pays for loops that run long.
``lowering.compile(..., loop_compilation=...)``: ``"auto"`` (the default)
starts compiling a loop in the background (:mod:`lowering.executor.compile_queue`: outermost code first, in a compile
process) once it has run
:data:`AUTO_THRESHOLD` iterations or :data:`AUTO_SECONDS` seconds in total
(over all calls of the executable) and keeps interpreting it until the compiled code is ready, then switches, in
the middle of a call if needed (both give the same bits, so where it switches
does not show; :func:`wait_for_background_compiles` waits for them);
``"always"`` compiles every eligible loop on its first run, before running it;
``"never"`` keeps every loop interpreted.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from time import perf_counter

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Block, Operation, SSAValue

from xla_dialect.errors import XlaError
from xla_dialect.internal import FusedMultiplyAddOp, MultiplyAddReduceOp, MultiplyReduceOp
from xla_dialect.ops.base import ints
from xla_dialect.ops.constants import ConstantOp, IotaOp
from xla_dialect.ops.control_flow import CallOp, ConditionalOp, ReturnOp, TupleOp, WhileOp
from xla_dialect.ops.conversion import BitcastConvertOp
from xla_dialect.ops.data_movement import (BroadcastInDimOp, ConcatenateOp, PadOp, ReshapeOp, ReverseOp, SliceOp,
                                           TransposeOp)
from xla_dialect.ops.effects import CustomCallOp
from xla_dialect.ops.elementwise import (AddOp, AndOp, CompareOp, MaxOp, MinOp, MulOp, NegOp, OrOp, SelectOp,
                                         XorOp)
from xla_dialect.ops.indexing import DynamicSliceOp, DynamicUpdateSliceOp, GatherOp, ScatterOp
from xla_dialect.ops.linalg import DotGeneralOp, DotOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.ops.sorting import SortOp
from xla_dialect.ops.windowed import ReduceWindowOp

from .fusion_plan import Ineligible, element_loop, fusible_op, input_reads, plan
from .compile_queue import (compile_function, compile_in_background, enter, leave,  # noqa: F401 (re-exported)
                            wait_for_background_compiles)
from ..runtime.generated_modules import (cache_directory, hoisted_ints, import_generated, runtime_digest,
                                         text_digest, write_atomically)
from ..runtime.process_state import import_module_file
from ..runtime.interrupt import CHUNK, POLL_MASK, check
from ..kernels.scalar import EXPORTS as SCALAR_EXPORTS
from ..kernels.scalar import scalar_of
from ..kernels.small_dot import order_kernels
from ..kernels.reduction import sum_lanes, ynnpack_extremum_plan
from ..kernels.ynnpack_sum import COLUMNS, ROWS
from ..kernels.tree_sum import grid_order, grid_work_length, reduced_dims, scratch_length
from ..runtime.workers import numba_threads_available

AUTO_THRESHOLD = 2000
"""Iterations (over all calls) after which ``loop_compilation="auto"`` compiles a loop."""

AUTO_SECONDS = 0.25
"""Seconds spent running a loop interpreted (over all calls) after which ``loop_compilation="auto"`` compiles
it, however few its iterations (a sampler's loop of a few heavy iterations per call)."""

_FLOATS = {np.dtype(np.float32), np.dtype(np.float64)}
_INTS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)}
_SUPPORTED_DTYPES = _FLOATS | _INTS | {np.dtype(np.bool_)}


def compiles(*op_classes: type[Operation]) -> Callable:
    """Decorator: the writer method (``method(self, op, out, dtype, shape, indent)``, writing the code of one
    single-result op) is the compiled form of ``op_classes``. :class:`_LoopWriter` and each of its subclasses
    collect their methods' classes in ``COMPILED_FORMS`` (see :func:`compiled_forms`)."""

    def mark(method: Callable) -> Callable:
        method.compiled_forms = op_classes
        return method

    return mark


def compiled_forms(writer: type) -> dict[type[Operation], Callable]:
    """Op class -> the method of ``writer`` (a :class:`_LoopWriter` class) marked with :func:`compiles` for it,
    the most derived class's winning. A class registered twice in one writer class, or a marked method
    redefined in a subclass without the mark, is an error (the redefinition would not be called)."""
    forms: dict[type[Operation], Callable] = {}
    for klass in reversed(writer.__mro__):
        own: dict[type[Operation], Callable] = {}
        for name, member in vars(klass).items():
            for op_class in getattr(member, "compiled_forms", ()):
                if op_class in own:
                    raise TypeError(f"{klass.__name__}: {op_class.__name__} has two compiled forms, "
                                    f"{own[op_class].__name__} and {name}")
                own[op_class] = member
        for op_class, method in forms.items():
            redefined = vars(klass).get(method.__name__)
            if redefined is not None and redefined is not method and not hasattr(redefined, "compiled_forms"):
                raise TypeError(f"{klass.__name__}.{method.__name__} redefines the compiled form of "
                                f"{op_class.__name__} without @compiles")
        forms.update(own)
    return forms


# ----------------------------------------------------------------------------
# Code generation
# ----------------------------------------------------------------------------

_NUMBA_TYPE_NAMES = {np.dtype(t): f"np.{np.dtype(t).name}" for t in
                     (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                      np.uint8, np.uint16, np.uint32, np.uint64, np.bool_)}

GATHER_MAX_ELEMENTS = 1 << 16
"""Gathers with at most this many output elements compile (their per-element offsets are loop constants)."""

_REDUCE_BODIES = (AddOp, MulOp, MaxOp, MinOp, AndOp, OrOp, XorOp)


def _rank(value: SSAValue) -> int:
    """The rank of a tensor value (0 for anything else)."""
    shape = getattr(value.type, "get_shape", None)
    return len(shape()) if shape is not None else 0


def _only_read(value: SSAValue) -> bool:
    """Whether ``value`` (an array of a loop body) is only read by the ops using it: none returns, carries,
    writes or calls with it, directly or through reshapes (which are views in numba)."""
    for use in value.uses:
        op = use.operation
        if isinstance(op, ReshapeOp):
            if _rank(op.results[0]) and not _only_read(op.results[0]):  # (a scalar is read out: a copy)
                return False
        elif isinstance(op, (ReturnOp, func.ReturnOp, CallOp, DynamicUpdateSliceOp, DynamicSliceOp,
                             BroadcastInDimOp)) or op.regions:
            return False
    return True


# Ops whose generated code may give a view of operand 0 (or the operand itself) as its result.
_VIEW_OPS = (ReshapeOp, SliceOp, DynamicSliceOp, TransposeOp, BitcastConvertOp, BroadcastInDimOp)
# Ops whose generated code only reads its array operands (copying what it keeps).
_READING_OPS = (DotGeneralOp, DotOp, ReduceOp, MultiplyReduceOp, MultiplyAddReduceOp, ConcatenateOp, GatherOp,
                CustomCallOp)  # (the custom calls compiled code makes: LAPACK on copies of its operands)


def _iteration_local(value: SSAValue) -> bool:
    """Whether ``value`` (an array computed in a loop body) is dead before the op computing it runs again: every
    use only reads it -- element-wise ops, products, reductions, concatenates, the update of a
    dynamic_update_slice -- directly or through views that are themselves such (nothing carries, returns, calls,
    writes in place or passes it to a nested loop). Its buffer can then be allocated once per call of the
    compiled loop and reused by every iteration (:meth:`_LoopWriter.array_buffer`)."""
    for use in value.uses:
        op = use.operation
        if isinstance(op, _VIEW_OPS) and use.index == 0 and not isinstance(op, BroadcastInDimOp):
            if not all(_iteration_local(r) for r in op.results):
                return False
        elif isinstance(op, (DynamicUpdateSliceOp, ScatterOp)):
            if use.index == 0:
                return False  # (its operand: written, or copied into the result)
        elif not (isinstance(op, _READING_OPS) or fusible_op(op)):
            return False
    return True


def keeps_element_order(shape: tuple[int, ...], perm) -> bool:
    """Whether transposing an array of ``shape`` by ``perm`` leaves its elements in the same row-major order (only
    dimensions of size 1 move): a reshape, no copy needed."""
    moved = [int(d) for d in perm if shape[int(d)] != 1]
    return moved == sorted(moved)


def product_call(a: str, b: str, c: str, order: int) -> str:
    """Generated code for the product ``c = a @ b`` (3-D arrays) in ``order``, as the interpreter's dot kernel
    computes it: the order's kernel (:func:`lowering.kernels.small_dot.order_kernel`: only that one is compiled
    into the loop), or for an lhs-transposed f32 product Eigen's order (:func:`lowering.kernels.eigen_dots.eigen_dot`,
    a function of its own)."""
    from ..kernels.eigen_dots import EIGEN_CONTRACTION
    from ..kernels.small_dot import order_kernel

    name = "eigen_dot" if order & EIGEN_CONTRACTION else order_kernel(order).__name__
    return f"{name}({a}, {b}, {c}, {order})"


def _flat(array: str, shape) -> str:
    """Generated code for the flat C-ordered view of ``array`` of static ``shape`` (see
    :func:`lowering.runtime.loop_runtime.c_view`: no runtime reshape)."""
    return f"c_view({array}, ({int(np.prod(shape))},))"


def _view(array: str, shape) -> str:
    """Generated code for ``array`` (C-contiguous) seen with static ``shape``; for ``()`` its one element (a scalar,
    as rank-0 values are in generated code: a 0-d array reached the scalar definitions of a BFGS loop)."""
    return f"c_view({array}, {tuple(shape)!r})" if shape else f"c_view({array}, (1,))[0]"


class _LoopWriter:
    """Writes the numba source of one while loop."""

    COMPILED_FORMS: dict[type[Operation], Callable] = {}
    """Op class -> the method writing its code (:func:`compiles`); filled for each writer class."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.COMPILED_FORMS = compiled_forms(cls)

    def __init__(self, functions: dict[str, func.FuncOp], dtype_of: Callable, flush: bool = True):
        self.functions = functions
        # The executor's denormal mode: float max/min results are flushed as the CPU's instruction does.
        self.flush = flush
        self.dtype_of = dtype_of
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}
        self.names: dict[SSAValue, str] = {}
        self.counter = 0
        self.call_depth = 0
        # dynamic_update_slice ops that write their operand in place (see in_place_updates).
        self.in_place: set[Operation] = set()
        self.single_thread_blas = False  # the executor's matmuls run on one BLAS thread (op_dot_general)
        self.gemm_pairs: dict[Operation, Operation] = {}  # first dot of a pair -> second (gemm_pairs)
        self.pending_gemm: dict[Operation, tuple] = {}  # second dot -> the first's operands, result and (m, k, n)
        self.parallel_gemm = False  # pairs of independent products may run on two CPUs (gemm_pairs)
        # Arrays allocated once per call, before the loop, for iteration-local values (array_buffer).
        self.prologue: list[str] = []
        self.calls_kernels = False  # a kernel is called through call_kernel (kernel): the _failed flag is needed

    # -- values ---------------------------------------------------------------

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def info(self, value: SSAValue) -> tuple[np.dtype, tuple[int, ...]]:
        from xdsl.dialects.builtin import TensorType

        t = value.type
        if not isinstance(t, TensorType):
            raise Ineligible(f"a {t} value")
        dtype = np.dtype(self.dtype_of(t))
        if dtype not in _SUPPORTED_DTYPES:
            raise Ineligible(f"element type {dtype}")
        shape = tuple(int(d) for d in t.get_shape())
        if any(d < 0 for d in shape):
            raise Ineligible("a dynamic shape")
        return dtype, shape

    def has_name(self, value: SSAValue) -> bool:
        """Whether ``value`` is known to the code being written (an input, or computed by it)."""
        return value in self.names

    def name(self, value: SSAValue) -> str:
        if value not in self.names:
            raise Ineligible("a value captured from outside the loop")
        return self.names[value]

    def emit(self, indent: str, line: str) -> None:
        self.lines.append(indent + line)

    def kernel(self, call: str) -> str:
        """The generated call ``call`` (``kernel(args...)``, a numba-compiled kernel of :mod:`lowering.kernels`)
        through :func:`lowering.runtime.loop_runtime.call_kernel`: without numba's status branch after it, which
        keeps the reference counts of the kernel's operand views (atomic operations) in a loop body; a failure is
        recorded in the function's ``_failed`` flag, raised by :meth:`kernel_checks` where the function polls and
        returns."""
        self.calls_kernels = True
        name, arguments = call.split("(", 1)
        return f"call_kernel(_failed, {name}, {arguments}"

    def kernel_checks(self, indent: str) -> list[str]:
        """Where a kernel is called (:meth:`kernel`), the ``_failed`` flag: allocated by the prologue and checked
        after each inner loop's poll (a failed kernel's garbage cannot make a loop run on unnoticed); returns the
        lines that check it before the function returns (at ``indent``; none where no kernel is called)."""
        if not self.calls_kernels:
            return []
        if "    _failed = new_array(1, np.int64)" not in self.prologue:
            self.prologue[:0] = ["    _failed = new_array(1, np.int64)", "    _failed[0] = 0"]
            checked = []
            for line in self.lines:
                checked.append(line)
                if line.strip() == "poll_interrupts()":
                    checked.append(line.replace("poll_interrupts()", "check_kernels(_failed)"))
            self.lines[:] = checked
        return [indent + "check_kernels(_failed)"]

    def array_buffer(self, value: SSAValue, shape: tuple[int, ...], dtype: np.dtype) -> str:
        """An expression for a new ``shape`` array of ``dtype`` to hold ``value``: a buffer allocated once per
        call when ``value`` is iteration-local (:func:`_iteration_local`: a small loop step then allocates
        nothing), else ``np.empty``."""
        if shape and _iteration_local(value):
            buffer = self.fresh("h")
            self.prologue.append(f"    {buffer} = new_array({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})")
            return buffer
        return f"new_array({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})"

    # -- ops ------------------------------------------------------------------

    def block(self, block: Block, indent: str) -> list[str]:
        """Emit ``block``'s ops; return the names of its ``hlo.return`` / ``func.return`` operands.

        Runs of element-wise ops on arrays (lowering.executor.fusion's groups) become one element loop that
        allocates only the values used after it, as in a fused kernel."""
        groups = {g.members[-1]: g for g in plan(block)}
        in_group = {op for g in groups.values() for op in g.members}
        if self.parallel_gemm and sum(isinstance(op, (DotGeneralOp, DotOp)) for op in block.ops) > 1 \
                and numba_threads_available():  # (probed only where a pair may be: starting numba's threads costs)
            self.gemm_pairs.update(gemm_pairs(block, self.pair_kind, self.info))
        for op in block.ops:
            if isinstance(op, (ReturnOp, func.ReturnOp)):
                return [self.name(v) for v in op.operands]
            if op in groups:
                self.fused_group(groups[op], indent)
            elif op not in in_group:
                self.op(op, indent)
        raise Ineligible("a block without a return")

    def fused_group(self, group, indent: str) -> None:
        """One element loop computing ``group``'s ops in scalars (see :meth:`block`), read as a fused kernel
        reads its inputs (:func:`lowering.executor.fusion_plan.element_loop`: broadcast operands per row or per column)."""
        scalar = ElementLoopWriter(self.functions, self.dtype_of, self.flush)
        scalar.constants, scalar.counter = self.constants, self.counter
        reads, inner = input_reads(group, self.info)
        i = self.fresh("i")
        loads = []
        for k, v in enumerate(group.inputs):
            if self.info(v)[1]:
                flat = self.fresh("f")
                self.emit(indent, f"{flat} = {_flat(self.name(v), self.info(v)[1])}")
                scalar.names[v] = flat + "_e"
                loads.append((flat + "_e", flat, reads.get(k, "element")))
            else:
                scalar.names[v] = self.name(v)
        stores = []
        for r in group.outputs:
            out, flat = self.fresh(), self.fresh("g")
            self.emit(indent, f"{out} = {self.array_buffer(r, tuple(group.shape), self.info(r)[0])}")
            self.emit(indent, f"{flat} = {_flat(out, group.shape)}")
            self.names[r] = out
            stores.append((r, flat))
        scalar.counter = self.counter
        start = len(scalar.lines)
        for op in group.members:
            scalar.op(op, indent + "    ")
        body = scalar.lines[start:]
        self.counter = scalar.counter
        rows = int(np.prod(group.shape)) // inner
        self.lines.extend(element_loop(loads, [(flat, scalar.name(r)) for r, flat in stores], body, str(rows),
                                       inner, indent, i))

    def op(self, op: Operation, indent: str) -> None:
        if op.regions and not isinstance(op, (ReduceOp, WhileOp, ScatterOp, ConditionalOp, SortOp, ReduceWindowOp)):
            raise Ineligible(f"{op.name} (an op with regions)")
        if isinstance(op, CallOp):
            return self.call(op, indent)
        if isinstance(op, WhileOp):
            return self.nested_while(op, indent)
        if isinstance(op, ConditionalOp):
            return self.conditional(op, indent)
        if isinstance(op, TupleOp) and not op.operands:
            # (the empty operand of a conditional's branches, as jax writes lax.cond: see conditional)
            self.names[op.results[0]] = "None"
            return
        if isinstance(op, ReduceOp) and len(op.results) > 1:
            return self.tree_reduce(op, indent)
        if isinstance(op, SortOp):
            return self.sort(op, indent)
        if isinstance(op, ReduceWindowOp):
            return self.reduce_window(op, indent)
        if isinstance(op, CustomCallOp):
            return self.custom_call(op, indent)
        if len(op.results) != 1:
            raise Ineligible(f"{op.name} with {len(op.results)} results")
        result = op.results[0]
        dtype, shape = self.info(result)
        for v in op.operands:
            self.info(v)
            self.name(v)  # (known to the code, also when unread: a segment takes every operand as an input)
        out = self.fresh()
        self.names[result] = out
        definition = scalar_of(op, [self.info(v)[0] for v in op.operands], dtype, self.flush)
        if definition is not None and not (isinstance(op, SelectOp) and shape and not self.info(op.operands[0])[1]):
            return self.scalar_op(op, definition, out, dtype, shape, indent)
        form = self.COMPILED_FORMS.get(type(op))
        if form is None:
            raise Ineligible(op.name)
        form(self, op, out, dtype, shape, indent)

    def nested_while(self, op: Operation, indent: str) -> None:
        """A while loop inside the compiled loop (or segment), as a loop of its own in the same function. Every
        :data:`lowering.runtime.interrupt.POLL_MASK` + 1 iterations it calls :func:`lowering.runtime.interrupt.poll` (through
        :func:`lowering.runtime.loop_runtime.poll_interrupts`, numba's objmode in one cached function): Ctrl-C and the
        call's deadline stop a long inner loop too."""
        for v in [*op.operands, *op.results]:
            self.info(v)
        state = [self.fresh("w") for _ in op.operands]
        ticks = self.fresh("n")
        self.emit(indent, f"{ticks} = 0")
        cond_block, body_block = op.regions[0].block, op.regions[1].block
        in_place = {i: update for i, update in in_place_updates(body_block).items() if self.info(op.operands[i])[1]}
        self.in_place.update(in_place.values())
        for i, (name, value) in enumerate(zip(state, op.operands)):
            # (state written in place is copied once on entry: the value it starts from stays unchanged)
            self.emit(indent, f"{name} = {self.name(value)}{'.copy()' if i in in_place else ''}")
        self.emit(indent, "while True:")
        for arg, name in zip(cond_block.args, state):
            self.names[arg] = name
        (pred,) = self.block(cond_block, indent + "    ")
        self.emit(indent + "    ", f"if not {pred}:")
        self.emit(indent + "        ", "break")
        self.emit(indent + "    ", f"{ticks} += 1")
        self.emit(indent + "    ", f"if {ticks} & {POLL_MASK} == 0:")
        self.emit(indent + "        ", "poll_interrupts()")
        for arg, name in zip(body_block.args, state):
            self.names[arg] = name
        results = self.block(body_block, indent + "    ")
        self.emit(indent + "    ", f"{', '.join(state)}{',' if len(state) == 1 else ''} = "
                                   f"{', '.join(results)}{',' if len(results) == 1 else ''}")
        for r, name in zip(op.results, state):
            self.names[r] = name

    def conditional(self, op: Operation, indent: str) -> None:
        """An ``hlo.conditional`` as ``if``/``elif``/``else`` over its branches, written in place (as the
        interpreted kernel runs it: a ``pred`` selector runs region 0 when true, an ``s32`` index runs its
        branch, the last one when out of range). A branch may read values of the enclosing code; its argument
        is either a value or an unused empty tuple (``lax.cond``)."""
        from xdsl.dialects.builtin import TupleType

        for v in op.results:
            self.info(v)
        selector, branch_operands = op.operands[0], list(op.operands[1:])
        dtype, shape = self.info(selector)
        if shape:
            raise Ineligible("a conditional with an array selector")
        branches = [region.block for region in op.regions]
        outs = [self.fresh("r") for _ in op.results]
        sel = self.name(selector)
        if dtype == np.bool_:
            tests = [sel, None]
        else:
            index = self.fresh("s")
            self.emit(indent, f"{index} = np.int64({sel})")
            tests = [f"{index} == {k}" for k in range(len(branches) - 1)] + [None]
        for k, (block, test) in enumerate(zip(branches, tests)):
            inner = indent + "    " if len(branches) > 1 else indent
            if len(branches) > 1:
                self.emit(indent, "else:" if test is None else f"{'if' if k == 0 else 'elif'} {test}:")
            for arg in block.args:
                if isinstance(arg.type, TupleType):
                    if list(arg.uses):
                        raise Ineligible("a conditional branch that reads a tuple")
                    continue
                self.names[arg] = self.name(branch_operands[k])
            results = self.block(block, inner)
            for out, name, value in zip(outs, results, block.last_op.operands):
                # (a constant is a read-only array: numba cannot join it with the other branches' arrays)
                constant = isinstance(value.owner, ConstantOp)
                copy = ".copy()" if constant and self.info(value)[1] else ""
                self.emit(inner, f"{out} = {name}{copy}")
        for r, out in zip(op.results, outs):
            self.names[r] = out

    def call(self, op: Operation, indent: str) -> None:
        name = op.callee.string_value()
        fn = self.functions.get(name)
        if fn is None or self.call_depth > 16:
            raise Ineligible(f"call to @{name}")
        block = fn.body.block
        for arg, value in zip(block.args, op.operands):
            self.names[arg] = self.name(value)
        self.call_depth += 1
        results = self.block(block, indent)
        self.call_depth -= 1
        for r, n in zip(op.results, results):
            self.info(r)
            self.names[r] = n

    def elementwise(self, out: str, dtype: np.dtype, shape, operands, expression: Callable[..., str], indent: str):
        """``out = expression(*scalars)`` element by element (or once, for scalars)."""
        names = [self.name(v) for v in operands]
        if not shape:
            self.emit(indent, f"{out} = {expression(*names)}")
            return
        for v in operands:
            if self.info(v)[1] != shape:
                raise Ineligible("an implicit broadcast")
        flats = [self.fresh("f") for _ in names]
        result_flat = self.fresh("f")
        i = self.fresh("i")
        self.emit(indent, f"{out} = new_array({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})")
        self.emit(indent, f"{result_flat} = {_flat(out, shape)}")
        for flat, n in zip(flats, names):
            self.emit(indent, f"{flat} = {_flat(n, shape)}")
        self.emit(indent, f"for {i} in range({int(np.prod(shape))}):")
        self.emit(indent + "    ", f"{result_flat}[{i}] = {expression(*(f'{f}[{i}]' for f in flats))}")

    def typed(self, dtype: np.dtype, expression: str) -> str:
        return f"{_NUMBA_TYPE_NAMES[dtype]}({expression})"

    @compiles(ConstantOp)
    def op_constant(self, op, out, dtype, shape, indent):
        self.bind_constant(np.asarray(op.value.array), op.results[0], out, self.lines, indent)

    def bind_constant(self, value: np.ndarray, result: SSAValue, out: str, lines: list[str], indent: str) -> None:
        """Emit (into ``lines``) ``out`` = the array ``value`` of ``result``'s type, passed as a constant argument
        of the generated function."""
        dtype, shape = self.info(result)
        const = self.fresh("k")
        if not shape and dtype in _FLOATS:
            # A one-element array, read in the loop: a float scalar argument would cross numba's boundary
            # through a conversion that the caller's flush-to-zero mode flushes when it is subnormal.
            self.constants[const] = np.full(1, value.reshape(()), dtype)
            lines.append(f"{indent}{out} = {const}[0]")
            return
        self.constants[const] = value.reshape(()).item() if not shape else np.ascontiguousarray(value, dtype)
        if not shape:
            self.constants[const] = np.dtype(dtype).type(self.constants[const])
        lines.append(f"{indent}{out} = {const}")

    def scalar_op(self, op, definition, out, dtype, shape, indent):
        """``op`` element by element through its one scalar definition (:mod:`lowering.kernels.scalar`): the
        generated code calls the definition and casts to the result's type; it computes nothing itself."""
        operands = list(op.operands)
        if isinstance(op, FusedMultiplyAddOp):
            # The NaN of the instruction is taken from the operands as they were before a negation that
            # LLVM folds into it (vfnmadd, vfmsub), as XLA's fused loops compute it.
            raw = [v.owner.operands[0] if isinstance(v.owner, NegOp) else v
                   for v in operands]
            operands += raw if all(self.has_name(v) for v in raw) else list(op.operands)
        arguments = []
        for value in definition.arguments:
            if isinstance(value, type):
                arguments.append(_NUMBA_TYPE_NAMES[np.dtype(value)])
            else:
                const = self.fresh("k")
                self.constants[const] = value
                arguments.append(const)
        self.elementwise(out, dtype, shape, operands, lambda *xs: self.typed(
            dtype, f"{definition.name}({', '.join([*xs, *arguments])})"), indent)

    @compiles(SelectOp)
    def op_select(self, op, out, dtype, shape, indent):
        """A select by a scalar predicate of whole arrays (element-wise selects have a scalar definition)."""
        p, t, f = (self.name(v) for v in op.operands)
        self.emit(indent, f"{out} = {t} if {p} else {f}")

    @compiles(BroadcastInDimOp)
    def op_broadcast_in_dim(self, op, out, dtype, shape, indent):
        source_shape = self.info(op.operands[0])[1]
        src = self.name(op.operands[0])
        dims = list(ints(op.broadcast_dimensions))
        if not shape:
            self.emit(indent, f"{out} = {src}")  # (a scalar stays a scalar, not a 0-d array)
        elif not source_shape:
            self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
            self.emit(indent, f"{out}[...] = {src}")
        elif source_shape == shape and dims == list(range(len(shape))):
            self.emit(indent, f"{out} = {src}")
        else:
            # The operand's dimensions in the result's order, size-1 dimensions between them, then an
            # assignment that repeats them (NumPy's broadcasting is XLA's here).
            order = sorted(range(len(dims)), key=lambda k: dims[k])
            view = self.fresh("t")
            if order != list(range(len(dims))):
                self.emit(indent, f"{view} = transposed({src}, {tuple(order)!r})")
            else:
                self.emit(indent, f"{view} = contiguous({src})")
            expanded = [1] * len(shape)
            for k in order:
                expanded[dims[k]] = source_shape[k]
            self.emit(indent, f"{out} = new_array({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})")
            self.emit(indent, f"{out}[...] = {view}.reshape({tuple(expanded)!r})")

    @compiles(BitcastConvertOp)
    def op_bitcast_convert(self, op, out, dtype, shape, indent):
        """The same bits as another element type of the same width."""
        source = self.info(op.operands[0])[0]
        if source.itemsize != dtype.itemsize or np.bool_ in (source, dtype):
            raise Ineligible("a bitcast_convert between widths")
        src = self.name(op.operands[0])
        t = _NUMBA_TYPE_NAMES[dtype]
        if shape:
            self.emit(indent, f"{out} = contiguous({src}).view({t})")
        else:
            self.emit(indent, f"{out} = np.full(1, {src}, {_NUMBA_TYPE_NAMES[source]}).view({t})[0]")

    @compiles(TransposeOp)
    def op_transpose(self, op, out, dtype, shape, indent):
        """Dimensions permuted, copied to a C-ordered array; a permutation that moves only dimensions of size 1
        (``g.T`` of a column ``g``) keeps the elements' order: a reshape, as :meth:`op_reshape` writes it (a view,
        not a copy per iteration: the gradient of a linear fit in ``lax.scan`` made two such copies per step)."""
        perm = tuple(ints(op.permutation))
        src = self.name(op.operands[0])
        source_shape = self.info(op.operands[0])[1]
        if len(perm) <= 1 or perm == tuple(range(len(perm))):
            self.emit(indent, f"{out} = {src}")
        elif keeps_element_order(source_shape, perm):
            self.emit(indent, f"{out} = c_view({src}, {shape!r})")
        else:
            self.emit(indent, f"{out} = transposed({src}, {perm!r})")

    @compiles(ReverseOp)
    def op_reverse(self, op, out, dtype, shape, indent):
        """``hlo.reverse``: a copy of the operand read with negative strides along the reversed dimensions."""
        dims = set(ints(op.dimensions))
        if not shape:
            raise Ineligible("a reverse of a scalar")
        index = ", ".join("::-1" if d in dims else ":" for d in range(len(shape)))
        self.emit(indent, f"{out} = contiguous({self.name(op.operands[0])}[{index}])")

    @compiles(IotaOp)
    def op_iota(self, op, out, dtype, shape, indent):
        """Each element's index along ``iota_dimension``, converted to the element type."""
        if dtype == np.bool_ or not shape:
            raise Ineligible("an iota of pred or a scalar")
        dim = int(op.iota_dimension.value.data)
        expanded = [1] * len(shape)
        expanded[dim] = shape[dim]
        t = _NUMBA_TYPE_NAMES[dtype]
        self.emit(indent, f"{out} = new_array({shape!r}, {t})")
        self.emit(indent, f"{out}[...] = np.arange({shape[dim]}).astype({t}).reshape({tuple(expanded)!r})")

    @compiles(ReshapeOp)
    def op_reshape(self, op, out, dtype, shape, indent):
        source_shape = self.info(op.operands[0])[1]
        src = self.name(op.operands[0])
        if not shape:
            self.emit(indent, f"{out} = {_flat(src, source_shape)}[0]" if source_shape else f"{out} = {src}")
        elif not source_shape:
            self.emit(indent, f"{out} = np.full({shape!r}, {src}, {_NUMBA_TYPE_NAMES[dtype]})")
        else:
            self.emit(indent, f"{out} = c_view({src}, {shape!r})")

    @compiles(ScatterOp)
    def op_scatter(self, op, out, dtype, shape, indent):
        """A scatter of one operand (``x.at[i].set(row)``, ``.at[idx].add(v)``, vmapped updates with batching
        dimensions), replacing elements or combining them through the update computation's scalar definition,
        window by window and element by element in XLA's application order -- the order the interpreted
        kernel's result has (:func:`lowering.kernels.indexing.scatter_plan`, the one definition of where each
        update goes). A window whose start index is outside ``[0, dim - size]`` is skipped, as XLA does."""
        from ..kernels.indexing import scatter_plan

        if len(op.operands) != 3 or not shape:
            raise Ineligible("a scatter of several operands or into a scalar")
        operand, indices, update = op.operands
        (_, ishape), (_, ushape) = self.info(indices), self.info(update)
        block = op.regions[0].block
        body = [o for o in block.ops if not isinstance(o, ReturnOp)]
        returned = block.last_op.operands[0]
        if not body and returned is block.args[1]:
            combine = None
        elif (len(body) == 1 and len(body[0].operands) == 2 and body[0].results[0] is returned
              and list(body[0].operands) == list(block.args)):
            combine = scalar_of(body[0], [dtype, dtype], dtype, self.flush)
            if combine is None or combine.arguments:
                raise Ineligible("a scatter whose update computation has no scalar definition")
        else:
            raise Ineligible("a scatter with a general update computation")
        plan = scatter_plan(op)
        if op in self.in_place:
            self.emit(indent, f"{out} = {self.name(operand)}")
        else:
            self.emit(indent, f"{out} = {self.name(operand)}.copy()")  # kernels never write their inputs
        if not plan.count or not plan.width:
            return
        flat = self.fresh("x")
        self.emit(indent, f"{flat} = {_flat(out, shape)}")
        vectors = None  # (a scalar index is read as it is: no per-call array)
        if plan.starts and ishape:
            ivd = plan.index_vector_dim
            moved = [d for d in range(len(ishape)) if d != ivd] + ([ivd] if ivd < len(ishape) else [])
            vectors = self.laid_out(indices, None if moved == list(range(len(ishape))) else tuple(moved),
                                    (plan.count, len(plan.starts)), indent)
        perm = None if plan.perm == list(range(len(ushape))) else tuple(plan.perm)
        values = self.laid_out(update, perm, (plan.count, plan.width), indent) if ushape else None
        batch_lin, win_lin = self.fresh("k"), self.fresh("k")
        self.constants[batch_lin] = np.ascontiguousarray(plan.batch_lin)
        self.constants[win_lin] = np.ascontiguousarray(plan.win_lin)
        c, e, at, start, t = (self.fresh(p) for p in ("c", "e", "s", "s", "t"))
        self.emit(indent, f"for {c} in range({plan.count}):")
        inner = indent + "    "
        self.emit(inner, f"{start} = {batch_lin}[{c}]")
        checks = []
        for k, high, stride in plan.starts:
            component = self.fresh("s")
            self.emit(inner, f"{component} = np.int64({vectors}[{c}, {k}])" if vectors is not None
                      else f"{component} = np.int64({self.name(indices)})")
            checks.append(f"0 <= {component} <= {high}")
            self.emit(inner, f"{start} += {component} * {stride}")
        if checks:
            self.emit(inner, f"if not ({' and '.join(checks)}):")
            self.emit(inner + "    ", "continue")
        self.emit(inner, f"for {e} in range({plan.width}):")
        element = inner + "    "
        self.emit(element, f"{at} = {start} + {win_lin}[{e}]")
        value = f"{values}[{c}, {e}]" if values is not None else self.name(update)
        if combine is None:
            self.emit(element, f"{flat}[{at}] = {value}")
        else:
            self.emit(element, f"{t} = {value}")
            self.emit(element, f"{flat}[{at}] = {_NUMBA_TYPE_NAMES[dtype]}({combine.name}({flat}[{at}], {t}))")

    @compiles(GatherOp)
    def op_gather(self, op, out, dtype, shape, indent):
        """A gather as the kernel defines it (:func:`lowering.kernels.indexing.gather_plan`): each output
        element reads the operand at its static offset plus its index vector's clamped starts times the
        operand's strides. The static offsets and each element's index vector are constants of the loop."""
        from ..kernels.indexing import gather_plan

        plan = gather_plan(op)
        size = int(np.prod(shape, dtype=np.int64))
        if size > GATHER_MAX_ELEMENTS:
            raise Ineligible("a large gather")
        (_, operand_shape), (index_dtype, index_shape) = self.info(op.operands[0]), self.info(op.operands[1])
        if plan.zero or size == 0:
            self.emit(indent, f"{out} = np.zeros({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})")
            return
        static, batch_of = self.fresh("k"), self.fresh("k")
        self.constants[static] = np.ascontiguousarray(np.broadcast_to(plan.static, shape).reshape(-1))
        batches = int(np.prod(plan.batch_view, dtype=np.int64))
        self.constants[batch_of] = np.ascontiguousarray(
            np.broadcast_to(np.arange(batches, dtype=np.int64).reshape(plan.batch_view), shape).reshape(-1))
        source = _flat(self.name(op.operands[0]), operand_shape) if operand_shape else \
            f"np.full(1, {self.name(op.operands[0])})"
        src, flat, e = self.fresh("f"), self.fresh("g"), self.fresh("i")
        self.emit(indent, f"{src} = {source}")
        self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
        self.emit(indent, f"{flat} = {_flat(out, shape)}")
        if not plan.starts:
            self.emit(indent, f"for {e} in range({size}):")
            self.emit(indent + "    ", f"{flat}[{e}] = {src}[{static}[{e}]]")
            return
        # The index vectors, one row each (the index vector dimension last, as the kernel moves it).
        ivd = plan.index_vector_dim
        rank = len(index_shape)
        width = 1 if ivd == rank else index_shape[ivd]
        indices = self.name(op.operands[1])
        if not index_shape:
            indices = f"np.full(1, {indices})"
        elif ivd < rank and ivd != rank - 1:
            perm = tuple([d for d in range(rank) if d != ivd] + [ivd])
            indices = f"transposed({indices}, {perm!r})"
        vectors, dynamic, b, start = self.fresh("x"), self.fresh("d"), self.fresh("b"), self.fresh("s")
        self.emit(indent, f"{vectors} = c_view({indices}, ({batches}, {width}))")
        self.emit(indent, f"{dynamic} = new_array({batches}, np.int64)")
        self.emit(indent, f"for {b} in range({batches}):")
        self.emit(indent + "    ", f"{dynamic}[{b}] = 0")
        for k, high, stride in plan.starts:
            value = f"{vectors}[{b}, {k}]"
            if index_dtype == np.dtype(np.uint64):  # (capped as the kernel reads them: still out of bounds)
                value = f"min({value}, np.uint64({1 << 62}))"
            self.emit(indent + "    ", f"{start} = min(max(np.int64({value}), 0), {high})")
            self.emit(indent + "    ", f"{dynamic}[{b}] += {start} * {stride}")
        self.emit(indent, f"for {e} in range({size}):")
        self.emit(indent + "    ", f"{flat}[{e}] = {src}[{static}[{e}] + {dynamic}[{batch_of}[{e}]]]")

    @compiles(PadOp)
    def op_pad(self, op, out, dtype, shape, indent):
        """Edge and interior padding as the kernel pads (:func:`lowering.kernels.data_movement.pad_indices`: the
        result filled with the padding value, then the surviving operand elements assigned by strided slices)."""
        from ..kernels.data_movement import pad_indices

        operand, value = op.operands
        in_shape = self.info(operand)[1]
        if not shape or not in_shape:
            raise Ineligible("a pad of a scalar")
        lows, highs, interiors = (list(ints(op.properties[k])) for k in
                                  ("edge_padding_low", "edge_padding_high", "interior_padding"))
        indices = pad_indices(in_shape, lows, highs, interiors, shape)
        self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
        self.emit(indent, f"{out}[...] = {self.name(value)}")
        if indices is None:
            return

        def text(index):
            return ", ".join(f"{s.start}:{s.stop}:{s.step or 1}" for s in index)

        result_index, operand_index = indices
        self.emit(indent, f"{out}[{text(result_index)}] = {self.name(operand)}[{text(operand_index)}]")

    @compiles(SliceOp)
    def op_slice(self, op, out, dtype, shape, indent):
        """A static (strided) slice, copied to a C-ordered array."""
        starts, limits, strides = (list(ints(op.properties[k])) for k in ("start_indices", "limit_indices", "strides"))
        if not shape:
            self.emit(indent, f"{out} = {_flat(self.name(op.operands[0]), self.info(op.operands[0])[1])}[0]")
            return
        operand_shape = self.info(op.operands[0])[1]
        sizes = [b - a for a, b in zip(starts, limits)]
        lead = len(sizes)
        while lead and sizes[lead - 1] == operand_shape[lead - 1]:
            lead -= 1
        if all(c == 1 for c in strides) and lead <= 1 and _only_read(op.results[0]):
            # A C-contiguous region that is only read: a view, as for dynamic_slice (no step and no trailing
            # ":", which would make numba type it as non-contiguous).
            index = ", ".join(f"{a}:{b}" for a, b in zip(starts[:lead], limits[:lead])) or ":"
            self.emit(indent, f"{out} = {self.name(op.operands[0])}[{index}]")
            return
        index = ", ".join(f"{a}:{b}:{c}" for a, b, c in zip(starts, limits, strides))
        self.emit(indent, f"{out} = contiguous({self.name(op.operands[0])}[{index}])")

    @compiles(ConcatenateOp)
    def op_concatenate(self, op, out, dtype, shape, indent):
        """Arrays joined along ``dimension``."""
        parts = [self.name(v) for v in op.operands]
        if any(not self.info(v)[1] for v in op.operands):
            raise Ineligible("a concatenate of scalars")
        axis = int(op.dimension.value.data)
        self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
        offset = 0
        for v, part in zip(op.operands, parts):
            width = self.info(v)[1][axis]
            index = ", ".join([":"] * axis + [f"{offset}:{offset + width}"])
            self.emit(indent, f"{out}[{index}] = {part}")
            offset += width

    def _clamped_starts(self, starts, operand_shape, sizes, indent) -> list[str]:
        names = []
        for s, dim, size in zip(starts, operand_shape, sizes):
            if self.info(s)[1]:
                raise Ineligible("a non-scalar start index")
            n = self.fresh("s")
            self.emit(indent, f"{n} = min(max(np.int64({self.name(s)}), 0), {dim - size})")
            names.append(n)
        return names

    @compiles(DynamicSliceOp)
    def op_dynamic_slice(self, op, out, dtype, shape, indent):
        operand_shape = self.info(op.operands[0])[1]
        if not operand_shape:
            self.emit(indent, f"{out} = {self.name(op.operands[0])}")
            return
        sizes = list(ints(op.slice_sizes))
        starts = self._clamped_starts(op.operands[1:], operand_shape, sizes, indent)
        # Whole trailing dimensions are not sliced, so numba keeps the view C-contiguous; a view that
        # is only read (not carried, returned or written) needs no copy (a scan's row: 55 ns per iteration).
        lead = len(sizes)
        while lead and sizes[lead - 1] == operand_shape[lead - 1]:
            lead -= 1
        contiguous = lead <= 1  # (numba types a view sliced in two dimensions as non-contiguous)
        # (Trailing ":" would make numba type the view as non-contiguous: they are left out.)
        index = ", ".join(f"{s}:{s} + {k}" for s, k in zip(starts[:lead], sizes[:lead])) or ":"
        copy = "" if contiguous and _only_read(op.results[0]) else ".copy()"
        self.emit(indent, f"{out} = {self.name(op.operands[0])}[{index}]{copy}")

    @compiles(DynamicUpdateSliceOp)
    def op_dynamic_update_slice(self, op, out, dtype, shape, indent):
        operand, update, *starts = op.operands
        if not shape:
            self.emit(indent, f"{out} = {self.name(update)}")
            return
        sizes = self.info(update)[1]
        names = self._clamped_starts(starts, shape, sizes, indent)
        index = ", ".join(f"{s}:{s} + {k}" for s, k in zip(names, sizes))
        if op in self.in_place:
            self.emit(indent, f"{out} = {self.name(operand)}")
        else:
            self.emit(indent, f"{out} = {self.name(operand)}.copy()")  # kernels never write their inputs
        self.emit(indent, f"{out}[{index}] = {self.name(update)}")

    def product_shape(self, op) -> tuple[int, int, int] | None:
        """``(m, k, n)`` of a dot of f32/f64 operands of the result's type, without batch dimensions or
        transposes, that OpenBLAS computes on one thread and the executor does not split (:mod:`lowering.runtime.blas`),
        else None."""
        from ..runtime.blas import SERIAL_MNK, SPLIT_MNK

        lhs, rhs = op.operands
        (ldt, lshape), (rdt, rshape) = self.info(lhs), self.info(rhs)
        dtype = self.info(op.results[0])[0]
        if not (ldt == rdt == dtype and dtype in (np.dtype(np.float32), np.dtype(np.float64))):
            return None
        dn = op.dimension_numbers()
        lfree, rfree = dn.free_dimensions(len(lshape), len(rshape))
        lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
        if (list(dn.lhs_batch_dimensions) or lfree + lc != list(range(len(lshape)))
                or rc + rfree != list(range(len(rshape)))):
            return None
        m, k, n = (int(np.prod([lshape[d] for d in lfree], dtype=np.int64)),
                   int(np.prod([lshape[d] for d in lc], dtype=np.int64)),
                   int(np.prod([rshape[d] for d in rfree], dtype=np.int64)))
        if k < 1 or m * k * n >= SPLIT_MNK or not (self.single_thread_blas or m * k * n <= SERIAL_MNK):
            return None
        return m, k, n

    def pair_kind(self, op) -> str | None:
        """How a dot is paired with another on two CPUs (:func:`gemm_pairs`): "gemm" (one CBLAS gemm call,
        :meth:`gemm_shape`), "small" (a :func:`~lowering.kernels.small_dot.order_kernel` product of at least
        ``PAIRED_MNK`` multiply-adds, :meth:`small_product`), or None."""
        from ..kernels.small_dot import PAIRED_MNK, dot_vector_bytes, small_dot_order

        if self.gemm_shape(op) is not None:
            return "gemm"
        plan = self.product_shape(op)
        if plan is None or int(np.prod(plan)) < PAIRED_MNK:
            return None
        from ..kernels.eigen_dots import EIGEN_CONTRACTION

        order = small_dot_order(1, *plan, self.info(op.results[0])[0], dot_vector_bytes(op))
        return "small" if order and not order & EIGEN_CONTRACTION else None  # (pairs call the orders' kernels)

    def gemm_shape(self, op) -> tuple[int, int, int] | None:
        """``(m, k, n)`` of a dot computed with one CBLAS gemm call (see :meth:`op_dot_general`), else None."""
        from ..runtime.blas import numpy_gemm_address

        from ..kernels.small_dot import small_dot_order

        plan = self.product_shape(op)
        dtype = self.info(op.results[0])[0]
        if (plan is None or plan[0] < 2 or plan[2] < 2 or numpy_gemm_address(dtype) is None
                or small_dot_order(1, *plan, dtype) is not None):  # (a small product: :meth:`small_product`)
            return None
        return plan

    def product_operands(self, op, plan, dtype, indent, batch: bool = False,
                         result: SSAValue | None = None) -> tuple[str, str, str]:
        """Names of a product's C-contiguous ``(m, k)`` and ``(k, n)`` operands and a new ``(m, n)`` result (each
        with a leading batch dimension of 1 when ``batch``; the result in a reused buffer when ``result``, the
        product's value, is iteration-local), emitted."""
        m, k, n = plan
        shape = (1, m, n) if batch else (m, n)
        lead = "1, " if batch else ""
        lhs, rhs = op.operands
        a, b, c = self.fresh("a"), self.fresh("b"), self.fresh("m")
        self.emit(indent, f"{a} = c_view({self.name(lhs)}, ({lead}{m}, {k}))")
        self.emit(indent, f"{b} = c_view({self.name(rhs)}, ({lead}{k}, {n}))")
        new = (self.array_buffer(result, shape, dtype) if result is not None
               else f"new_array({shape!r}, {_NUMBA_TYPE_NAMES[dtype]})")
        self.emit(indent, f"{c} = {new}")
        return a, b, c

    def small_product(self, op, out, dtype, shape, indent) -> bool:
        """A small f32/f64 product as the dot kernel computes it: the same :func:`lowering.kernels.small_dot.order_kernel`
        call, summed in XLA CPU's order; False when ``op`` is not one."""
        from ..kernels.small_dot import dot_vector_bytes, small_dot_order

        plan = self.product_shape(op)
        order = None if plan is None else small_dot_order(1, *plan, dtype, dot_vector_bytes(op))
        if order is None:
            return self.transposed_small_product(op, out, dtype, shape, indent)
        a, b, c = self.product_operands(op, plan, dtype, indent, batch=True, result=op.results[0])
        if op in self.gemm_pairs:  # the first of a pair: computed with the second (:meth:`op_dot_general`)
            self.pending_gemm[self.gemm_pairs[op]] = (a, b, c, order)
        elif op in self.pending_gemm:
            from ..runtime.loop_runtime import PAIRS_ENABLED

            from ..kernels.small_dot import kernel_address

            a0, b0, c0, order0 = self.pending_gemm.pop(op)
            enabled, kernel0, kernel = self.fresh("k"), self.fresh("k"), self.fresh("k")
            self.constants[enabled] = PAIRS_ENABLED  # (the array itself: cleared in forked children)
            # (the kernels' addresses in this process: arguments of the loop, never in its cached code)
            self.constants[kernel0] = np.int64(kernel_address(order0, dtype))
            self.constants[kernel] = np.int64(kernel_address(order, dtype))
            self.emit(indent, f"if {enabled}[0]:")
            self.emit(indent + "    ", f"small_dot_pair({a0}, {b0}, {c0}, {order0}, {kernel0}, {a}, {b}, {c}, {order}, "
                                       f"{kernel}, csr)")
            self.emit(indent, "else:")
            self.emit(indent + "    ", self.kernel(product_call(a0, b0, c0, order0)))
            self.emit(indent + "    ", self.kernel(product_call(a, b, c, order)))
        else:
            self.emit(indent, self.kernel(product_call(a, b, c, order)))
        self.emit(indent, f"{out} = {_view(c, shape)}")
        return True

    def laid_out(self, value: SSAValue, perm: tuple | None, shape: tuple, indent: str) -> str:
        """The name of ``value`` transposed by ``perm`` (None: as it is) into a C-contiguous array seen with
        ``shape``, emitted."""
        src = self.name(value)
        if perm is not None and not keeps_element_order(self.info(value)[1], perm):
            src = f"transposed({src}, {tuple(perm)!r})"
        name = self.fresh("t")
        self.emit(indent, f"{name} = c_view({src}, {tuple(shape)!r})")
        return name

    def transposed_small_product(self, op, out, dtype, shape, indent) -> bool:
        """A small f32/f64 product with batch dimensions or operands the kernel transposes first (``jax.grad``'s
        ``x.T @ r`` contracts leading dimensions): the operands laid out as the kernel lays them out
        (:func:`lowering.kernels.linalg.dot_geometry`), then the same :func:`~lowering.kernels.small_dot.order_kernel` call; False when ``op``
        is not one (other products: BLAS, see :meth:`op_dot_general`)."""
        from ..kernels.linalg import dot_geometry
        from ..kernels.small_dot import dot_vector_bytes, small_dot_order

        lhs, rhs = op.operands
        if not (self.info(lhs)[0] == self.info(rhs)[0] == dtype) or dtype not in (np.dtype(np.float32),
                                                                                   np.dtype(np.float64)):
            return False
        lperm, rperm, batch, m, k, n = dot_geometry(op)
        order = small_dot_order(batch, m, k, n, dtype, dot_vector_bytes(op))
        if order is None:
            return False
        names = [self.laid_out(lhs, lperm, (batch, m, k), indent), self.laid_out(rhs, rperm, (batch, k, n), indent)]
        c = self.fresh("m")
        self.emit(indent, f"{c} = {self.array_buffer(op.results[0], (batch, m, n), dtype)}")
        self.emit(indent, self.kernel(product_call(names[0], names[1], c, order)))
        self.emit(indent, f"{out} = {_view(c, shape)}")
        return True

    def vector_matrix(self, op, out, dtype, shape, indent) -> bool:
        """A vector times a matrix (``m`` = 1, ``n`` >= 2) as NumPy's matmul computes it, with one CBLAS gemv
        call (:func:`lowering.runtime.loop_runtime.cblas_gemv`, the same call: the same bits); False when ``op`` is not
        one."""
        from ..runtime.blas import numpy_gemv_address

        plan = self.product_shape(op)
        if plan is None or plan[0] != 1 or plan[2] < 2 or numpy_gemv_address(dtype) is None:
            return False
        _, k, n = plan
        lhs, rhs = op.operands
        a, b, c, const = self.fresh("a"), self.fresh("b"), self.fresh("m"), self.fresh("k")
        self.constants[const] = np.int64(numpy_gemv_address(dtype))
        self.emit(indent, f"{a} = c_view({self.name(lhs)}, ({k},))")
        self.emit(indent, f"{b} = c_view({self.name(rhs)}, ({k}, {n}))")
        self.emit(indent, f"{c} = new_array(({n},), {_NUMBA_TYPE_NAMES[dtype]})")
        self.emit(indent, f"cblas_gemv({const}, {a}, {b}, {c})")
        self.emit(indent, f"{out} = {_view(c, shape)}")
        return True

    @compiles(DotGeneralOp, DotOp)
    def op_dot_general(self, op, out, dtype, shape, indent):
        """A float matrix product as the executor's dot kernel computes it: the same CBLAS gemm call NumPy's
        matmul makes (:func:`lowering.runtime.loop_runtime.cblas_gemm`), so the same bits. Only where that kernel
        is one plain single-threaded call: f32/f64 operands of the result's type, no batch dimensions or
        transposes, at least 2 rows and columns (NumPy uses gemv for vectors), and a product OpenBLAS runs on
        one thread (the executor holds a one-thread limit, or the product is small) that is not split over
        the CPUs (:mod:`lowering.runtime.blas`).

        Two such products of one type, the second not using the first (an RNN step's ``x @ wx`` and
        ``h @ wh``: :func:`gemm_pairs`), are computed at once on two CPUs
        (:func:`lowering.runtime.loop_runtime.gemm_pair`): the first is prepared where it stands, both are computed
        where the second stands."""
        from ..runtime.blas import numpy_gemm_address

        if self.small_product(op, out, dtype, shape, indent) or self.vector_matrix(op, out, dtype, shape, indent):
            return
        plan = self.gemm_shape(op)
        if plan is None:
            raise Ineligible("a dot the executor does not compute with one single-threaded gemm or gemv")
        a, b, c = self.product_operands(op, plan, dtype, indent)
        if op in self.gemm_pairs:  # the first of a pair: computed with the second
            self.pending_gemm[self.gemm_pairs[op]] = (a, b, c, plan)
        else:
            const = self.fresh("k")
            self.constants[const] = np.int64(numpy_gemm_address(dtype))
            if op in self.pending_gemm:
                from ..runtime.loop_runtime import PAIRS_ENABLED

                a0, b0, c0, plan0 = self.pending_gemm.pop(op)
                enabled = self.fresh("k")
                self.constants[enabled] = PAIRS_ENABLED  # (the array itself: cleared in forked children)
                self.emit(indent, f"if {enabled}[0]:")
                (small_plan, small), (large_plan, large) = sorted([(plan0, (a0, b0, c0)), (plan, (a, b, c))],
                                                                  key=lambda item: _cost(item[0]))
                cut = balanced_cut(dtype, small_plan, large_plan)
                if cut is not None:  # part of the larger product's columns with the smaller product
                    self.emit(indent + "    ", f"gemm_pair_balanced({const}, {', '.join(small)}, {', '.join(large)}, "
                                               f"{cut}, csr)")
                else:
                    self.emit(indent + "    ", f"gemm_pair({const}, {a0}, {b0}, {c0}, {a}, {b}, {c}, csr)")
                self.emit(indent, "else:")
                self.emit(indent + "    ", f"cblas_gemm({const}, {a0}, {b0}, {c0})")
                self.emit(indent + "    ", f"cblas_gemm({const}, {a}, {b}, {c})")
            else:
                self.emit(indent, f"cblas_gemm({const}, {a}, {b}, {c})")
        self.emit(indent, f"{out} = {_view(c, shape)}")

    @compiles(ReduceOp)
    def op_reduce(self, op, out, dtype, shape, indent):
        """A reduce in the order of the interpreted kernel (:mod:`lowering.kernels.reduction`): bodies that are
        one ufunc as it folds them (whole arrays; or per output, see :meth:`partial_reduce`), any other body
        (argmax's pair of values and indices, ...) by :meth:`tree_reduce`. Sums XLA CPU runs in YNNPACK
        (:func:`lowering.kernels.reduction.ynnpack_plan`) call the kernel's own definition
        (:func:`lowering.kernels.ynnpack_sum.sum_rows`, ``sum_columns`` and their ``_looped`` forms)."""
        from ..kernels.reduction import binary_body_ufunc, ynnpack_plan, ynnpack_window_plan
        from ..kernels.ynnpack_sum import LOOPED_COLUMNS, LOOPED_ROWS

        windows = ynnpack_window_plan(op)
        if windows is not None:  # (YNNPACK's windows, then XLA's loop over their sums: the kernel's definitions)
            (kind, outer, k, _, _), (rows, cols), lanes = windows
            if kind != LOOPED_ROWS:  # (one row or column of windows: the interpreted kernel's plan)
                raise Ineligible("a sum in YNNPACK's windows of another plan")
            p, l, m, tile = outer
            t = _NUMBA_TYPE_NAMES[dtype]
            x, init = (self.name(v) for v in op.operands)
            sums = self.fresh("h")
            self.prologue.append(f"    {sums} = new_array({p * m}, {t})")
            self.emit(indent, self.kernel(f"ynnpack_sum_rows_looped(c_view({x}, {(p, l, m, k)!r}), c_view({sums}, "
                                          f"{(p, m)!r}), {t}({init}), False, {int(tile)})"))
            self.emit(indent, f"{out} = " + self.kernel(f"rows_in_lanes({sums}, 0, {cols}, 0, {rows}, 0, {cols}, "
                                                        f"{t}({init}), {lanes})"))
            return
        found = ynnpack_plan(op)
        if found is not None:
            (kind, outer, k, n, tiles), pairs, transposed = found
            t = _NUMBA_TYPE_NAMES[dtype]
            x, init = (self.name(v) for v in op.operands)
            if transposed is not None:  # (the sum of the transpose's operand: see ynnpack_plan)
                x = self.name(op.operands[0].owner.operands[0])
            if shape and transposed is not None and transposed[2] != tuple(range(len(shape))):
                target = self.fresh("h")  # (the sums in the operand's order, transposed after)
                self.prologue.append(f"    {target} = new_array({transposed[1]!r}, {t})")
            elif shape:
                self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
                target = out
            else:  # (a scalar result: summed into a one-element buffer of the call)
                target = self.fresh("h")
                self.prologue.append(f"    {target} = new_array(1, {t})")
            if kind in (LOOPED_ROWS, LOOPED_COLUMNS):  # (sum_rows_looped / sum_columns_looped)
                p, l, m, tile = outer
                call, source, result = (("rows_looped", (p, l, m, k), (p, m)) if kind == LOOPED_ROWS
                                        else ("columns_looped", (p, l, m, k, n), (p, m, n)))
                extra = [str(bool(pairs)), str(int(tile))] if kind == LOOPED_ROWS else [str(int(tile))]
            else:  # (sum_rows / sum_columns)
                call, source, result = (("rows", (outer, k), (outer,)) if kind == ROWS
                                        else ("columns", (outer, k, n), (outer, n)))
                extra = [repr(tuple(int(v) for v in tiles))] + ([str(bool(pairs))] if kind == ROWS else [])
            source, result = tuple(int(v) for v in source), tuple(int(v) for v in result)
            self.emit(indent, self.kernel(f"ynnpack_sum_{call}(c_view({x}, {source!r}), c_view({target}, {result!r}), "
                                          f"{', '.join([f'{t}({init})', *extra])})"))
            if not shape:
                self.emit(indent, f"{out} = {target}[0]")
            elif target != out:
                self.emit(indent, f"{out} = transposed({target}, {transposed[2]!r})")
            return
        ufunc = binary_body_ufunc(op.body)
        body_op = next(iter(op.body.block.ops))
        if ufunc is None or not isinstance(body_op, _REDUCE_BODIES):
            return self.tree_reduce(op, indent, [out])
        if shape:
            return self.partial_reduce(op, out, dtype, shape, indent)
        x, init = (self.name(v) for v in op.operands)
        source_shape = self.info(op.operands[0])[1]
        n = int(np.prod(source_shape))
        if not source_shape:  # (no dimensions: the body applied once, init first, as the kernel does)
            body = next(iter(op.body.block.ops))
            definition = scalar_of(body, [dtype, dtype], dtype, self.flush)
            if definition is None:
                raise Ineligible(f"a reduce with a {body_op.name} body on {dtype}")
            self.emit(indent, f"{out} = {_NUMBA_TYPE_NAMES[dtype]}({definition.name}({init}, {x}))")
            return
        if n == 0:
            self.emit(indent, f"{out} = {init}")
            return
        flat, acc, i = self.fresh("f"), self.fresh("a"), self.fresh("i")
        self.emit(indent, f"{flat} = {_flat(x, source_shape)}")
        t = _NUMBA_TYPE_NAMES[dtype]
        if isinstance(body_op, AddOp) and dtype in _FLOATS:
            # XLA CPU's order, the interpreted kernel's (lowering.kernels.tree_sum).
            lanes = sum_lanes(op)
            if lanes:
                rows, cols = (int(v) for v in (source_shape if len(source_shape) == 2 else (*source_shape, 1)))
                self.emit(indent, f"{out} = " + self.kernel(f"lane_sum({flat}, 0, {rows}, {cols}, {t}({init}), {lanes})"))
                return
            if grid_order(source_shape, range(len(source_shape)), dtype):  # (windows and lanes: tree_sum.grid_sum)
                rows, cols = (int(v) for v in source_shape if v != 1)
                work = self.fresh("h")
                self.prologue.append(f"    {work} = new_array((2, {grid_work_length(rows, cols)}), {t})")
                self.emit(indent, f"{out} = " + self.kernel(f"grid_sum({flat}, 0, {rows}, {cols}, {t}({init}), {work})"))
                return
            dims = reduced_dims(source_shape, range(len(source_shape)))
            self.emit(indent, f"{out} = {self.tree_sum(flat, dims, f'{t}({init})', t)}")
            return
        body = next(iter(op.body.block.ops))
        definition = scalar_of(body, [dtype, dtype], dtype, self.flush)
        if definition is None:
            raise Ineligible(f"a reduce with a {body_op.name} body on {dtype}")

        def combine(a, b):
            return f"{t}({definition.name}({a}, {b}))"

        if isinstance(body_op, (MaxOp, MinOp)) and dtype in _FLOATS:
            plan = ynnpack_extremum_plan(source_shape, range(len(source_shape)), dtype)
            if plan is not None:  # (YNNPACK's rule, as the interpreted kernel applies it: ynnpack_extrema)
                self.emit(indent, f"{out} = " + self.kernel(f"ynnpack_row_extremum({flat}, 0, {n}, "
                                                            f"{isinstance(body_op, MinOp)}, {t}({init}), {plan[2]})"))
                return
            # XLA's fold acc = max(acc, x) over init, x... in row-major order, as the interpreted kernel
            # gives it (lowering.kernels.reduction._first_nans: the first NaN met, its sign from the values
            # before it; zeros by their signs).
            self.emit(indent, f"{acc} = {init}")
            self.emit(indent, f"for {i} in range({n}):")
            self.emit(indent + "    ", f"{acc} = {combine(acc, f'{flat}[{i}]')}")
            self.emit(indent, f"{out} = {acc}")
            return
        self.emit(indent, f"{acc} = {flat}[0]")
        self.emit(indent, f"for {i} in range(1, {n}):")
        self.emit(indent + "    ", f"{acc} = {combine(acc, f'{flat}[{i}]')}")
        self.emit(indent, f"{out} = {combine(init, acc)}")

    def block_with(self, block: Block, arguments: list[str], indent: str) -> list[str]:
        """Emit ``block`` (a region of scalars) with its arguments bound to the expressions ``arguments``; the
        names of its results."""
        for arg, name in zip(block.args, arguments):
            self.names[arg] = name
        return self.block(block, indent)

    def reduced_rows(self, value: SSAValue, axes: list[int], indent: str) -> tuple[str, int, int]:
        """A C-contiguous ``(outputs, count)`` view of ``value`` with the reduced ``axes`` last (a transposed
        copy unless they are the trailing axes), its name and both sizes."""
        source_shape = self.info(value)[1]
        kept = [d for d in range(len(source_shape)) if d not in axes]
        outputs = int(np.prod([source_shape[d] for d in kept], dtype=np.int64))
        count = int(np.prod([source_shape[d] for d in axes], dtype=np.int64))
        rows, src = self.fresh("t"), self.name(value)
        if kept + axes != list(range(len(source_shape))):
            src = f"transposed({src}, {tuple(kept + axes)!r})"
        self.emit(indent, f"{rows} = c_view({src}, ({outputs}, {count}))")
        return rows, outputs, count

    @compiles(MultiplyReduceOp)
    def multiply_reduce(self, op, out, dtype, shape, indent):
        """The contracted sum of a product (:class:`~xla_dialect.internal.MultiplyReduceOp`) through the kernel's
        definition, :func:`lowering.kernels.tree_sum.contracted_sums`, on the operands' rows (reduced dimensions
        last)."""
        if dtype not in _FLOATS:
            raise Ineligible(f"a contracted sum of {dtype}")
        axes = sorted(ints(op.dimensions))
        rows_a, outputs, _ = self.reduced_rows(op.a, axes, indent)
        rows_b, _, _ = self.reduced_rows(op.b, axes, indent)
        t = _NUMBA_TYPE_NAMES[dtype]
        init = f"{t}({self.name(op.init)})"
        rounded, square = op.rounded_rows.value.data, op.a is op.b
        lanes = op.lanes.value.data if op.lanes is not None else 0
        cols = int(self.info(op.a)[1][-1]) if lanes else 1
        if shape:
            self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
            flat = _flat(out, shape)
            self.emit(indent, self.kernel(f"contracted_sums({rows_a}, {rows_b}, {init}, {flat}, {rounded}, {square}, "
                                          f"{lanes}, {cols})"))
            return
        target = self.fresh("h")
        self.prologue.append(f"    {target} = new_array(1, {t})")
        self.emit(indent, self.kernel(f"contracted_sums({rows_a}, {rows_b}, {init}, {target}, {rounded}, {square}, "
                                      f"{lanes}, {cols})"))
        self.emit(indent, f"{out} = {target}[0]")

    @compiles(MultiplyAddReduceOp)
    def multiply_add_reduce(self, op, out, dtype, shape, indent):
        """The contracted sum of a two-product term (:class:`~xla_dialect.internal.MultiplyAddReduceOp`) through the
        kernel's definition, :func:`lowering.kernels.tree_sum.contracted_term_sums`, on the operands' rows."""
        if dtype not in _FLOATS:
            raise Ineligible(f"a contracted sum of {dtype}")
        axes = sorted(ints(op.dimensions))
        rows = []
        for value in (op.a, op.b, op.c, op.d):
            name, outputs, _ = self.reduced_rows(value, axes, indent)
            rows.append(name)
        init = f"{_NUMBA_TYPE_NAMES[dtype]}({self.name(op.init)})"
        if shape:
            self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
            self.emit(indent, self.kernel(f"contracted_term_sums({', '.join(rows)}, {init}, {_flat(out, shape)})"))
            return
        target = self.fresh("h")
        self.prologue.append(f"    {target} = new_array(1, {_NUMBA_TYPE_NAMES[dtype]})")
        self.emit(indent, self.kernel(f"contracted_term_sums({', '.join(rows)}, {init}, {target})"))
        self.emit(indent, f"{out} = {target}[0]")

    def constant_dims(self, dims: np.ndarray) -> str:
        """The name of an int64 array holding ``dims`` (the reduced dimensions of a sum,
        :func:`lowering.kernels.tree_sum.reduced_dims`), filled once at the start of the function."""
        name = self.fresh("d")
        self.prologue.append(f"    {name} = new_array({len(dims)}, np.int64)")
        self.prologue += [f"    {name}[{i}] = {int(v)}" for i, v in enumerate(dims)]
        return name

    def tree_sum(self, flat: str, dims: np.ndarray, init: str, t: str) -> str:
        """Generated code for the sum of the 1-d ``flat`` (the reduced elements of one output in row-major order of
        the reduced dimensions ``dims``) from ``init`` in XLA CPU's order: :func:`lowering.kernels.tree_sum.
        window_sum` for one dimension, else :func:`~lowering.kernels.tree_sum.nd_window_sum`, with work space
        allocated once at the start of the function."""
        scratch = self.fresh("h")
        length = int(scratch_length(dims))
        if len(dims) == 1:
            self.prologue.append(f"    {scratch} = new_array({length}, {t})")
            return self.kernel(f"window_sum({flat}, 0, {int(dims[0])}, {init}, {scratch})")
        self.prologue.append(f"    {scratch} = new_array((2, {length}), {t})")
        return self.kernel(f"nd_window_sum({flat}, 0, {self.constant_dims(dims)}, {init}, {scratch})")

    def partial_reduce(self, op, out, dtype, shape, indent):
        """A one-ufunc reduce that keeps dimensions, output by output in the interpreted kernel's order: float
        sums in XLA CPU's order (:func:`lowering.kernels.tree_sum.tree_sums`); products a chain in row-major
        order (NumPy's reduce); float maxima and minima XLA's fold from the initial value; integers and booleans
        a fold."""
        from ..kernels.reduction import _accumulator, binary_body_ufunc

        ufunc = binary_body_ufunc(op.body)
        body = next(iter(op.body.block.ops))
        source_shape = self.info(op.operands[0])[1]
        axes = sorted(ints(op.dimensions))
        last = len(source_shape) - 1
        is_float = dtype in _FLOATS
        if _accumulator(ufunc, dtype) != dtype or (is_float and dtype.itemsize < 4):
            raise Ineligible(f"a reduce of {dtype} accumulated in another type")
        if is_float and isinstance(body, MulOp) and last in axes and axes != [last]:
            raise Ineligible("a float product over the last and other axes")
        definition = scalar_of(body, [dtype, dtype], dtype, self.flush)
        if definition is None:
            raise Ineligible(f"a reduce with a {body.name} body on {dtype}")
        t = _NUMBA_TYPE_NAMES[dtype]

        def combine(a, b):
            return f"{t}({definition.name}({a}, {b}))"

        plan = ynnpack_extremum_plan(source_shape, axes, dtype) if isinstance(body, (MaxOp, MinOp)) and is_float else None
        if plan is not None:  # (YNNPACK's rule, as the interpreted kernel applies it, on the operand as (p, l, m, k,
            # n): lowering.kernels.ynnpack_extrema.extremum_plan; no transposed copy of the rows)
            kind, (p, l, m, k, n), tile = plan
            init, minimum = self.name(op.operands[1]), isinstance(body, MinOp)
            self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
            flat, x5, o = self.fresh("g"), self.fresh("x"), self.fresh("o")
            self.emit(indent, f"{flat} = {_flat(out, shape)}")
            self.emit(indent, f"{x5} = c_view({self.name(op.operands[0])}, ({p}, {l}, {m}, {k}, {n}))")
            if kind == COLUMNS:
                self.emit(indent, self.kernel(f"ynnpack_columns_extrema({x5}, {flat}, {t}({init}), {minimum}, {tile})"))
                return
            self.emit(indent, f"for {o} in range({p * m}):")
            self.emit(indent + "    ", f"{flat}[{o}] = " + self.kernel(f"ynnpack_extremum({x5}, {o} // {m}, {o} % {m}, 0, "
                                                                        f"{minimum}, {kind}, {t}({init}), {tile})"))
            return
        rows, outputs, count = self.reduced_rows(op.operands[0], axes, indent)
        init = self.name(op.operands[1])
        self.emit(indent, f"{out} = {self.array_buffer(op.results[0], shape, dtype)}")
        flat, o, r, acc = self.fresh("g"), self.fresh("o"), self.fresh("i"), self.fresh("a")
        self.emit(indent, f"{flat} = {_flat(out, shape)}")
        if count == 0:
            self.emit(indent, f"{flat}[:] = {init}")
            return
        if isinstance(body, AddOp) and is_float:  # XLA CPU's order, the kernel's (lowering.kernels.tree_sum)
            dims = self.constant_dims(reduced_dims(source_shape, axes))
            self.emit(indent, self.kernel(f"tree_sums({rows}, {dims}, {t}({init}), {flat})"))
            return
        self.emit(indent, f"for {o} in range({outputs}):")
        inner = indent + "    "
        if isinstance(body, (MaxOp, MinOp)) and is_float:
            self.emit(inner, f"{acc} = {init}")
            self.emit(inner, f"for {r} in range({count}):")
            self.emit(inner + "    ", f"{acc} = {combine(acc, f'{rows}[{o}, {r}]')}")
            self.emit(inner, f"{flat}[{o}] = {acc}")
        else:
            self.emit(inner, f"{acc} = {rows}[{o}, 0]")
            self.emit(inner, f"for {r} in range(1, {count}):")
            self.emit(inner + "    ", f"{acc} = {combine(acc, f'{rows}[{o}, {r}]')}")
            self.emit(inner, f"{flat}[{o}] = {combine(init, acc)}")

    def sort(self, op, indent: str) -> None:
        """A sort along one dimension by a comparator the kernel recognises (:mod:`lowering.kernels.sorting`:
        jax's sorts, argsorts and top_k), as a stable bottom-up merge sort per row that calls the comparator's
        own ops as scalar code. Both the kernel's strategies are stable, and a stable sort by a strict weak
        order has one result, so the bits are the kernel's. Comparators that are not such an order on floats
        (an ordering compare of type FLOAT, under which NaN is unordered) stay interpreted."""
        from ..kernels.sorting import recognise_comparator

        block = op.comparator.block
        if recognise_comparator(op) is None:
            raise Ineligible("a sort with a comparator not recognised")
        for inner in block.ops:
            if isinstance(inner, CompareOp) and self.info(inner.operands[0])[0] in _FLOATS:
                kind = inner.compare_type.data if inner.compare_type is not None else "FLOAT"
                direction = inner.comparison_direction.data
                canonicalising = direction in ("EQ", "NE") and (
                    inner.operands[0] is inner.operands[1]
                    or any(isinstance(v.owner, ConstantOp) for v in inner.operands))
                if kind != "TOTALORDER" and not canonicalising:
                    raise Ineligible("a sort whose comparator leaves NaN unordered")
        infos = [self.info(v) for v in op.operands]
        shape = infos[0][1]
        for r in op.results:
            self.info(r)
        if not shape:
            raise Ineligible("a sort of scalars")
        axis = int(op.dimension.value.data) % len(shape)
        n = shape[axis]
        rows = int(np.prod(shape, dtype=np.int64)) // max(n, 1)
        perm = [d for d in range(len(shape)) if d != axis] + [axis]
        moved_shape = tuple(shape[d] for d in perm)
        inverse = tuple(int(i) for i in np.argsort(perm))
        sources, outs = [], []
        for v, (dtype, _) in zip(op.operands, infos):
            moved = None if perm == list(range(len(shape))) else tuple(perm)
            sources.append(self.laid_out(v, moved, (rows, n), indent))
            out = self.fresh("q")
            self.emit(indent, f"{out} = new_array(({rows}, {n}), {_NUMBA_TYPE_NAMES[dtype]})")
            outs.append(out)
        order, spare = self.fresh("h"), self.fresh("h")
        self.prologue.append(f"    {order} = new_array({max(n, 1)}, np.int64)")
        self.prologue.append(f"    {spare} = new_array({max(n, 1)}, np.int64)")
        row, j, width, lo, mid, hi, i, k, a, b = (self.fresh(p) for p in "ojwlmhiknn")
        src_order, dst_order = self.fresh("u"), self.fresh("u")
        at = indent + "    "
        self.emit(indent, f"for {row} in range({rows}):")
        self.emit(at, f"{src_order} = {order}")
        self.emit(at, f"{dst_order} = {spare}")
        self.emit(at, f"for {j} in range({n}):")
        self.emit(at + "    ", f"{src_order}[{j}] = {j}")
        self.emit(at, f"{width} = 1")
        self.emit(at, f"while {width} < {n}:")
        w1 = at + "    "
        self.emit(w1, f"{lo} = 0")
        self.emit(w1, f"while {lo} < {n}:")
        w2 = w1 + "    "
        self.emit(w2, f"{mid} = min({lo} + {width}, {n})")
        self.emit(w2, f"{hi} = min({lo} + 2 * {width}, {n})")
        self.emit(w2, f"{i} = {lo}")
        self.emit(w2, f"{j} = {mid}")
        self.emit(w2, f"{k} = {lo}")
        self.emit(w2, f"while {i} < {mid} and {j} < {hi}:")
        w3 = w2 + "    "
        self.emit(w3, f"{a} = {src_order}[{j}]")  # (the right run's element goes first only if strictly less)
        self.emit(w3, f"{b} = {src_order}[{i}]")
        pairs = [name for src in sources for name in (f"{src}[{row}, {a}]", f"{src}[{row}, {b}]")]
        (less,) = self.block_with(block, pairs, w3)
        self.emit(w3, f"if {less}:")
        self.emit(w3 + "    ", f"{dst_order}[{k}] = {a}")
        self.emit(w3 + "    ", f"{j} += 1")
        self.emit(w3, "else:")
        self.emit(w3 + "    ", f"{dst_order}[{k}] = {b}")
        self.emit(w3 + "    ", f"{i} += 1")
        self.emit(w3, f"{k} += 1")
        for start, end in ((i, mid), (j, hi)):
            self.emit(w2, f"while {start} < {end}:")
            self.emit(w2 + "    ", f"{dst_order}[{k}] = {src_order}[{start}]")
            self.emit(w2 + "    ", f"{start} += 1")
            self.emit(w2 + "    ", f"{k} += 1")
        self.emit(w2, f"{lo} += 2 * {width}")
        self.emit(w1, f"{src_order}, {dst_order} = {dst_order}, {src_order}")
        self.emit(w1, f"{width} *= 2")
        self.emit(at, f"for {j} in range({n}):")
        for src, out in zip(sources, outs):
            self.emit(at + "    ", f"{out}[{row}, {j}] = {src}[{row}, {src_order}[{j}]]")
        for r, out in zip(op.results, outs):
            name = self.fresh()
            if perm != list(range(len(shape))):
                self.emit(indent, f"{name} = transposed(c_view({out}, {moved_shape!r}), "
                                  f"{inverse!r})")
            else:
                self.emit(indent, f"{name} = c_view({out}, {shape!r})")
            self.names[r] = name

    def custom_call(self, op, indent: str) -> None:
        """A LAPACK custom call jaxlib emits (``jnp.linalg.solve``'s LU factorization and triangular solves:
        :data:`lowering.runtime.lapack_compiled.COMPILED_ROUTINES`), as a call of the routine the interpreter's target
        calls, through its address (:mod:`lowering.runtime.lapack_compiled`): the same bits. Leading dimensions are a
        batch, one call per matrix. Other targets stay interpreted."""
        from ..kernels.effects import custom_call_attributes
        from ..runtime.lapack import trsm_letters
        from ..runtime.lapack_compiled import compiled_target

        target = op.call_target_name.data
        infos = [self.info(v) for v in op.operands]
        results = [self.info(r) for r in op.results]
        found = compiled_target(target, infos[0][0]) if infos and len(infos[0][1]) >= 2 else None
        if found is None:
            raise Ineligible(f"hlo.custom_call @{target}")
        routine, function, address = found
        dtype, shape = infos[0]
        batch, int32 = int(np.prod(shape[:-2], dtype=np.int64)), np.dtype(np.int32)
        address_name = self.fresh("k")
        self.constants[address_name] = np.int64(address)
        outs = []
        for dt, result_shape in results:
            buffer = self.fresh("q")
            self.emit(indent, f"{buffer} = new_array({max(int(np.prod(result_shape, dtype=np.int64)), 1)}, "
                              f"{_NUMBA_TYPE_NAMES[dt]})")
            outs.append(buffer)
        if routine == "getrf":
            m, n = shape[-2:]
            if [r for r in results] != [(dtype, shape), (int32, shape[:-2] + (min(m, n),)), (int32, shape[:-2])]:
                raise Ineligible(f"hlo.custom_call @{target} with results of other types")
            a = self.laid_out(op.operands[0], None, (batch, m, n), indent)
            self.emit(indent, f"{function}({address_name}, {a}, c_view({outs[0]}, {(batch, m, n)!r}), "
                              f"c_view({outs[1]}, {(batch, min(m, n))!r}), c_view({outs[2]}, ({batch},)))")
        else:  # trsm: x (.., k, k), y (.., m, n)[, alpha]
            try:
                letters = trsm_letters(custom_call_attributes(op), target)
            except XlaError:  # (a missing or bad letter: the interpreted target reports it where the call runs)
                raise Ineligible(f"hlo.custom_call @{target} with unreadable attributes") from None
            (_, x_shape), (y_dtype, y_shape) = infos[:2]
            m, n = y_shape[-2:]
            k = m if letters["side"] == "L" else n
            if (len(infos) > 3 or y_dtype != dtype or x_shape != y_shape[:-2] + (k, k) or results != [infos[1]]
                    or (len(infos) == 3 and infos[2] != (dtype, ()))):
                raise Ineligible(f"hlo.custom_call @{target} with operands of other shapes or types")
            flags = self.fresh("k")
            self.constants[flags] = np.frombuffer("".join(letters[key] for key in ("side", "uplo", "trans_x", "diag"))
                                                  .encode(), np.uint8).copy()
            alpha = self.fresh("k")
            if len(infos) == 3:  # (older jaxlib passes alpha as an operand)
                alpha = self.fresh("s")
                self.emit(indent, f"{alpha} = np.full(1, {self.name(op.operands[2])}, {_NUMBA_TYPE_NAMES[dtype]})")
            else:
                self.constants[alpha] = np.ones(1, dtype)
            x = self.laid_out(op.operands[0], None, (batch, k, k), indent)
            y = self.laid_out(op.operands[1], None, (batch, m, n), indent)
            self.emit(indent, f"{function}({address_name}, {flags}, {alpha}, {x}, {y}, "
                              f"c_view({outs[0]}, {(batch, m, n)!r}))")
        for r, out, (_, result_shape) in zip(op.results, outs, results):
            name = self.fresh()
            self.emit(indent, f"{name} = {_view(out, result_shape)}")
            self.names[r] = name

    def unravel(self, flat: str, coords: list[str], shape, scratch: str, indent: str) -> None:
        """Emit ``coords`` = the row-major coordinates in ``shape`` of the flat index ``flat``."""
        self.emit(indent, f"{scratch} = {flat}")
        for d in reversed(range(len(shape))):
            self.emit(indent, f"{coords[d]} = {scratch} % {shape[d]}")
            self.emit(indent, f"{scratch} = {scratch} // {shape[d]}")

    def reduce_window(self, op, indent: str) -> None:
        """A reduce_window (cumulative sums, pooling) as the interpreted kernel folds it
        (:func:`lowering.kernels.windowed._reduce_window`): per output, from the initial values, the window's
        elements in row-major order, padding and base-dilation holes skipped (the kernel pads with the body's
        identity, which leaves the fold unchanged). Float max/min stay interpreted (the kernel fixes their
        zeros' signs after a NumPy fold: not the scalar definitions' NaN rules)."""
        from ..kernels.reduction import binary_body_ufunc

        n = len(op.results)
        inputs, inits = list(op.operands[:n]), list(op.operands[n:])
        infos = [self.info(r) for r in op.results]
        for v in op.operands:
            self.info(v)
        block = op.body.block
        ufunc = binary_body_ufunc(op.body) if n == 1 else None
        if ufunc is not None and infos[0][0] in _FLOATS and ufunc in (np.maximum, np.minimum):
            raise Ineligible("a float max/min reduce_window")
        window = op.window()
        base = self.info(inputs[0])[1]
        out_shape = infos[0][1]
        if not base or not out_shape:
            raise Ineligible("a reduce_window of scalars")
        if any(window.reversal or ()):
            raise Ineligible("a reversed window")
        outs = [self.fresh() for _ in op.results]
        flats = []
        for r, out, (dtype, shape) in zip(op.results, outs, infos):
            self.names[r] = out
            self.emit(indent, f"{out} = {self.array_buffer(r, shape, dtype)}")
            flat = self.fresh("g")
            self.emit(indent, f"{flat} = {_flat(out, shape)}")
            flats.append(flat)
        sources = []
        for v in inputs:
            src = self.fresh("f")
            self.emit(indent, f"{src} = {_flat(self.name(v), base)}")
            sources.append(src)
        strides = [int(np.prod(base[d + 1:], dtype=np.int64)) for d in range(len(base))]
        o, p, rest, src_index, ok = (self.fresh(x) for x in ("o", "p", "n", "s", "b"))
        accs = [self.fresh("a") for _ in op.results]
        coords = [self.fresh("c") for _ in base]
        offsets = [self.fresh("w") for _ in base]
        size = int(np.prod(out_shape, dtype=np.int64))
        window_size = int(np.prod(window.dimensions, dtype=np.int64))
        self.emit(indent, f"for {o} in range({size}):")
        at = indent + "    "
        self.unravel(o, coords, out_shape, rest, at)
        for acc, init in zip(accs, inits):
            self.emit(at, f"{acc} = {self.name(init)}")
        self.emit(at, f"for {p} in range({window_size}):")
        inner = at + "    "
        self.unravel(p, offsets, window.dimensions, rest, inner)
        self.emit(inner, f"{ok} = True")
        self.emit(inner, f"{src_index} = 0")
        for d in range(len(base)):
            q = self.fresh("q")
            lo = window.padding[d][0]
            dilation = window.base_dilations[d]
            extent = (base[d] - 1) * dilation + 1
            self.emit(inner, f"{q} = {coords[d]} * {window.strides[d]} + {offsets[d]} * {window.window_dilations[d]}"
                             f" - {lo}")
            self.emit(inner, f"if {q} < 0 or {q} >= {extent} or {q} % {dilation} != 0:")
            self.emit(inner + "    ", f"{ok} = False")
            self.emit(inner, f"{src_index} += ({q} // {dilation}) * {strides[d]}")
        self.emit(inner, f"if {ok}:")
        results = self.block_with(block, [*accs, *(f"{src}[{src_index}]" for src in sources)], inner + "    ")
        values = [self.fresh("e") for _ in results]
        for value, name in zip(values, results):
            self.emit(inner + "    ", f"{value} = {name}")
        for acc, value, (dtype, _) in zip(accs, values, infos):
            self.emit(inner + "    ", f"{acc} = {_NUMBA_TYPE_NAMES[dtype]}({value})")
        for flat, acc in zip(flats, accs):
            self.emit(at, f"{flat}[{o}] = {acc}")

    def tree_reduce(self, op, indent: str, outs: list[str] | None = None) -> None:
        """A reduce with any body (several operands: argmax's values and indices; a body of several ops), as
        the interpreted kernel computes it (:func:`lowering.kernels.reduction._tree_reduce`): per output, the
        reduced elements in row-major order are combined with their neighbours, (0, 1), (2, 3), ..., an odd
        last one carried, until one is left, which is combined with the initial values last. The body is
        written once per combination site as scalar code."""
        n = len(op.results)
        inputs, inits = list(op.operands[:n]), list(op.operands[n:])
        infos = [self.info(r) for r in op.results]
        shape = infos[0][1]
        for v in op.operands:
            self.info(v)
        if outs is None:
            outs = [self.fresh() for _ in op.results]
            for r, name in zip(op.results, outs):
                self.names[r] = name
        axes = sorted(ints(op.dimensions))
        block = op.body.block
        if any(self.info(a)[1] for a in block.args):
            raise Ineligible("a reduce body on arrays")
        if not self.info(inputs[0])[1]:  # a reduce of scalars: the body applied once, init first
            finals = self.block_with(block, [*(self.name(v) for v in inits), *(self.name(v) for v in inputs)],
                                     indent)
            for out, (dtype, _), final in zip(outs, infos, finals):
                self.emit(indent, f"{out} = {_NUMBA_TYPE_NAMES[dtype]}({final})")
            return
        views = []
        for v in inputs:
            rows, outputs, count = self.reduced_rows(v, axes, indent)
            views.append(rows)
        flats = []
        for r, out, (dtype, rshape) in zip(op.results, outs, infos):
            if rshape:
                self.emit(indent, f"{out} = {self.array_buffer(r, rshape, dtype)}")
                flat = self.fresh("g")
                self.emit(indent, f"{flat} = {_flat(out, rshape)}")
                flats.append(flat)
        init_names = [self.name(v) for v in inits]

        def apply(lhs: list[str], rhs: list[str], at: str) -> list[str]:
            return self.block_with(block, [*lhs, *rhs], at)

        o = self.fresh("o")
        body_indent = indent + "    "
        self.emit(indent, f"for {o} in range({outputs}):")
        if count == 0:
            finals = init_names
        else:
            scratch = []
            for v, rows in zip(inputs, views):
                buffer = self.fresh("h")
                self.prologue.append(f"    {buffer} = new_array({count}, {_NUMBA_TYPE_NAMES[self.info(v)[0]]})")
                self.emit(body_indent, f"{buffer}[:] = {rows}[{o}]")
                scratch.append(buffer)
            k, half, p = self.fresh("n"), self.fresh("n"), self.fresh("p")
            self.emit(body_indent, f"{k} = {count}")
            self.emit(body_indent, f"while {k} > 1:")
            self.emit(body_indent + "    ", f"{half} = {k} // 2")
            self.emit(body_indent + "    ", f"for {p} in range({half}):")
            at = body_indent + "        "
            results = apply([f"{b}[2 * {p}]" for b in scratch], [f"{b}[2 * {p} + 1]" for b in scratch], at)
            values = [self.fresh("e") for _ in results]
            for value, name in zip(values, results):  # (all read before any is written back)
                self.emit(at, f"{value} = {name}")
            for b, value in zip(scratch, values):
                self.emit(at, f"{b}[{p}] = {value}")
            self.emit(body_indent + "    ", f"if {k} % 2:")
            for b in scratch:
                self.emit(body_indent + "        ", f"{b}[{half}] = {b}[{k} - 1]")
            self.emit(body_indent + "    ", f"{k} = {half} + {k} % 2")
            finals = apply(init_names, [f"{b}[0]" for b in scratch], body_indent)
        for k_out, (out, (dtype, rshape), final) in enumerate(zip(outs, infos, finals)):
            if rshape:
                self.emit(body_indent, f"{flats[k_out]}[{o}] = {final}")
            else:
                self.emit(body_indent, f"{out} = {_NUMBA_TYPE_NAMES[dtype]}({final})")


_LoopWriter.COMPILED_FORMS = compiled_forms(_LoopWriter)


class ElementLoopWriter(_LoopWriter):
    """Writes a fused group's ops as scalar statements of one element loop (:mod:`lowering.executor.fusion`'s kernels and the
    element loops of :meth:`_LoopWriter.fused_group`): broadcasts read their operand's element, splat constants their scalar."""

    def elementwise(self, out, dtype, shape, operands, expression, indent):
        self.emit(indent, f"{out} = {expression(*(self.name(v) for v in operands))}")

    @compiles(BroadcastInDimOp)
    def op_broadcast_in_dim(self, op, out, dtype, shape, indent):
        self.emit(indent, f"{out} = {self.name(op.operands[0])}")

    @compiles(ConstantOp)
    def op_constant(self, op, out, dtype, shape, indent):
        splat = op.splat_value()
        if splat is None:
            raise Ineligible("a constant that is not a splat")
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


def _cost(plan: tuple[int, int, int]) -> int:
    m, k, n = plan
    return m * k * n


BALANCE_MIN_RATIO = 1.25
"""A pair's larger product gives columns to the smaller's thread when it costs at least this many times more."""


def balanced_cut(dtype, small: tuple[int, int, int], large: tuple[int, int, int]) -> int | None:
    """The column at which the ``(m, k, n)`` product ``large`` of a pair is cut so that both threads get about
    the same number of multiply-adds (``small`` plus the columns before the cut on one, the rest on the
    other), at a multiple of 16 -- or None when the products are about equal, or when the pieces would not
    give the whole product's bits: checked once per process for each shape on random operands (NumPy's own
    calls for the column views, under a one-thread BLAS limit). An RNN step (32x128x256 with 32x256x256):
    cut 64, each thread 1.5M multiply-adds instead of 1M and 2M."""
    small_cost, large_cost = _cost(small), _cost(large)
    if large_cost < BALANCE_MIN_RATIO * small_cost:
        return None
    m, k, n = large
    cut = int(n * (large_cost - small_cost) / (2 * large_cost)) // 16 * 16
    if cut < 16 or cut > n - 16:
        return None
    key = (np.dtype(dtype), m, k, n, cut)
    if key not in _BALANCED_EXACT:
        from ..runtime.blas import _SCOPE

        rng = np.random.default_rng(0)
        a = rng.uniform(-1.0, 1.0, (m, k)).astype(dtype)
        b = rng.uniform(-1.0, 1.0, (k, n)).astype(dtype)
        pieces = np.empty((m, n), dtype)
        _SCOPE.enter(1)
        try:
            for columns in (slice(0, cut), slice(cut, n)):  # the calls cblas_gemm_columns makes
                np.matmul(a, b[:, columns], out=pieces[:, columns])
            whole = np.matmul(a, b)
        finally:
            _SCOPE.leave()
        _BALANCED_EXACT[key] = bool(np.array_equal(pieces, whole))
    return cut if _BALANCED_EXACT[key] else None


_BALANCED_EXACT: dict = {}


def gemm_pairs(block: Block, pair_kind, info) -> dict[Operation, Operation]:
    """Pairs of dots of ``block`` computed together on two CPUs: consecutive dots (no dot between them) of
    one type and one kind (``pair_kind``: both one gemm call, or both large ``small_dot`` products), where no
    op from the first up to the second uses the first's result; first -> second."""
    pairs = {}
    ops = list(block.ops)
    dots = [i for i, op in enumerate(ops) if isinstance(op, (DotGeneralOp, DotOp))]
    paired = set()
    for i, j in zip(dots, dots[1:]):
        first, second = ops[i], ops[j]
        kind = pair_kind(first)
        if i in paired or kind is None or pair_kind(second) != kind:
            continue
        if info(first.results[0])[0] != info(second.results[0])[0]:
            continue
        result = first.results[0]
        if any(result in list(op.operands) or any(result in list(inner.operands) for inner in op.walk())
               for op in ops[i + 1:j + 1]):
            continue
        pairs[first] = second
        paired.update((i, j))
    return pairs


_WRITING_OPS = (DynamicUpdateSliceOp, ScatterOp)
"""Ops whose generated code may write their operand 0 in place (see :func:`in_place_updates`)."""


def _sharing(value: SSAValue) -> list[tuple[SSAValue, Operation]]:
    """The uses (value, op) of ``value`` and of every value that may share its buffer in generated code:
    results of view ops (reshape, slices, transposes, broadcasts that are the identity, ...) of it and of
    whole-array selects between it and others, transitively."""
    found, seen, todo = [], set(), [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            op = use.operation
            found.append((v, op))
            if (isinstance(op, _VIEW_OPS) and use.index == 0) or (isinstance(op, SelectOp) and use.index > 0):
                todo.extend(op.results)
    return found


def in_place_updates(body: Block) -> dict[int, Operation]:
    """The dynamic_update_slice and scatter ops of a while ``body`` that may write the loop state in place, by
    state index: the op updates state ``i``, its result is only state ``i`` of the next iteration, and every
    other op that sees the old contents of state ``i`` (directly or through a view) only reads them and runs
    before the update (a scan's output buffer; an ODE solver's stage array, read by a product then written).
    The loop copies such state once when it is entered: the caller's arrays, the program's constants and the
    values of an enclosing loop are never written."""
    ops = list(body.ops)
    position = {op: k for k, op in enumerate(ops)}
    for group in plan(body):  # a fused group runs where its last member is
        for member in group.members:
            position[member] = position[group.members[-1]]
    terminator = body.last_op
    found = {}
    for i, arg in enumerate(body.args):
        updates = [use.operation for use in arg.uses
                   if isinstance(use.operation, _WRITING_OPS) and use.index == 0
                   and use.operation.parent_block() is body]
        if len(updates) != 1:
            continue
        update = updates[0]
        result_uses = list(update.results[0].uses)
        if not (len(result_uses) == 1 and result_uses[0].operation is terminator and result_uses[0].index == i):
            continue
        at = position[update]

        def read_before(value: SSAValue, op: Operation) -> bool:
            if op is update and value is arg:
                return True
            outer = op
            while outer is not None and outer.parent_block() is not body:
                outer = outer.parent_op()
            if outer is None or position.get(outer, len(ops)) >= at:
                return False  # runs after the update, or is the terminator (the old contents carried on)
            if isinstance(op, _VIEW_OPS) or isinstance(op, SelectOp):
                return True  # (its results' uses are checked too)
            if isinstance(op, _WRITING_OPS):
                return list(op.operands).index(value) > 0  # (operand 0 would be written: copied first)
            return isinstance(op, _READING_OPS) or fusible_op(op)

        if all(read_before(v, op) for v, op in _sharing(arg)):
            found[i] = update
    return found


def _boxed(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Whether a loop state value of this type crosses numba's boundary as a one-element array (a float
    scalar: see :meth:`CompiledLoop.__call__`)."""
    return not shape and dtype in _FLOATS


def loop_source(op: Operation, functions: dict[str, func.FuncOp], dtype_of: Callable,
                flush: bool = True, single_thread_blas: bool = False) -> tuple[str, dict]:
    """The numba source of ``hlo.while`` ``op`` and the constants it refers to; raises ``Ineligible``.
    ``flush``: the executor runs with denormals flushed (see :class:`_LoopWriter`); ``single_thread_blas``:
    the executor runs its matmuls on one BLAS thread (see :meth:`_LoopWriter.op_dot_general`)."""
    writer = _LoopWriter(functions, dtype_of, flush)
    writer.single_thread_blas = single_thread_blas
    writer.parallel_gemm = single_thread_blas  # (and numba's threads poll: asked where a block has two dots)
    cond_block, body_block = op.regions[0].block, op.regions[1].block
    state = [f"c{i}" for i in range(len(op.operands))]
    boxed = [i for i, v in enumerate(op.operands) if _boxed(*writer.info(v))]
    header = len(writer.lines)
    for i in boxed:  # float scalars come and go as one-element arrays (see CompiledLoop)
        writer.emit("    ", f"{state[i]} = b{i}[0]")
    # At most `budget` iterations per call: the caller re-enters until `done`, checking for Ctrl-C and
    # its deadline in between (lowering.runtime.interrupt).
    in_place = in_place_updates(body_block)
    writer.in_place = set(in_place.values())
    for i in sorted(in_place):
        if writer.info(op.operands[i])[1]:
            writer.emit("    ", f"{state[i]} = {state[i]}.copy()  # updated in place below")
        else:
            writer.in_place.discard(in_place[i])
    writer.emit("    ", "done = False")
    writer.emit("    ", "iteration = 0")
    writer.emit("    ", "while True:")
    for arg, name in zip(cond_block.args, state):
        writer.names[arg] = name
    (pred,) = writer.block(cond_block, "        ")
    writer.emit("        ", f"if not {pred}:")
    writer.emit("            ", "done = True")
    writer.emit("            ", "break")
    writer.emit("        ", "if iteration == budget:")
    writer.emit("            ", "break")
    writer.emit("        ", "iteration += 1")
    for arg, name in zip(body_block.args, state):
        writer.names[arg] = name
    results = writer.block(body_block, "        ")
    writer.emit("        ", f"{', '.join(state)}{',' if len(state) == 1 else ''} = "
                           f"{', '.join(results)}{',' if len(results) == 1 else ''}")
    for i in boxed:
        writer.emit("    ", f"b{i}[0] = {state[i]}")
    returned = [f"b{i}" if i in boxed else name for i, name in enumerate(state)]
    writer.lines += writer.kernel_checks("    ")
    writer.emit("    ", f"return ({', '.join(returned)}, done)")
    # Constants are arguments (not globals), so the source depends on the program's structure only and
    # numba's on-disk cache can serve every program with the same loop.
    if writer.gemm_pairs:  # the caller's denormal mode, for the paired products' second CPU
        writer.lines.insert(header, "    csr = mxcsr()")
    writer.lines[header:header] = writer.prologue
    parameters = [f"b{i}" if i in boxed else name for i, name in enumerate(state)]
    writer.lines.insert(header, f"def loop({', '.join([*writer.constants, *parameters, 'budget'])}):")
    return "\n".join(writer.lines) + "\n", writer.constants


def as_compiled(array: np.ndarray, readonly: bool = False) -> np.ndarray:
    """``array`` with the read-only flag a numba function was compiled for (numba compiles a function again,
    at the call, for a read-only array where it was compiled for a writable one): a read-only view of a
    writable array (free), a copy of a read-only one."""
    if array.flags.writeable == readonly:
        if readonly:
            array = array.view()
            array.flags.writeable = False
        else:
            array = array.copy()
    return array


def call_compiled(function, *args):
    """``function(*args)`` for a numba function of generated code, with Ctrl-C and deadlines as Python raises
    them: Ctrl-C while the compiled code runs Python -- to box its results (numba's ``_numba_unpickle``) or
    around a poll (:func:`lowering.runtime.interrupt.poll`, in numba's objmode) -- reaches the caller as a SystemError
    "returned a result with an exception set", caused by the KeyboardInterrupt (or the deadline's
    ExecutionTimeout): that cause is what is raised."""
    try:
        return function(*args)
    except SystemError as e:
        from xla_dialect.errors import XlaError

        if isinstance(e.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        if isinstance(e.__cause__, XlaError):
            raise e.__cause__ from None
        raise


class CompiledLoop:
    """The numba-compiled loop of one ``hlo.while``: call it with the loop's state (a list of arrays)."""

    def __init__(self, source: str, constants: dict, dtypes: list[np.dtype]):
        from .constant_packing import pack_constants, unowned_buffers

        self.source, packed = pack_constants(unowned_buffers(source), "loop", list(constants), list(constants.values()))
        self.dtypes = dtypes
        self._fn, sizes = _load(self.source)
        self.constants = [sizes, *packed]  # (the sizes first: lowering.runtime.generated_modules.hoisted_ints)

    def compile_for(self, ranks: list[int], cached_only: bool = False) -> bool:
        """Compile now (not at the first call) for a state of these ranks; with ``cached_only``, only when that
        is a load of machine code compiled before (:func:`lowering.runtime.numba_cache.has_machine_code`). Whether
        the loop is compiled."""
        from numba import from_dtype, typeof, types

        from ..runtime.numba_cache import has_machine_code

        def numba_type(dtype: np.dtype, rank: int):
            return types.Array(from_dtype(dtype), max(rank, 1), "C") if rank or _boxed(dtype, ()) \
                else from_dtype(dtype)

        signature = [typeof(c) for c in self.constants] + [numba_type(dt, r) for dt, r in zip(self.dtypes, ranks)]
        signature = tuple([*signature, types.int64])
        if cached_only and not has_machine_code(self._fn, signature):
            return False
        compile_function(self._fn, signature)
        self._is_array = [bool(r) for r in ranks]
        self._is_boxed = [not r and _boxed(dt, ()) for dt, r in zip(self.dtypes, ranks)]
        return True

    def __call__(self, state):
        # (Per-call work kept small: a scan of 64 small steps spends ~20 us in the loop itself.)
        # Float scalars go in and out as one-element arrays: numba converts a float32 scalar argument or
        # result through a double, which flushes a subnormal under the caller's flush-to-zero mode.
        # A read-only array (a constant, a view the interpreter made read-only) is copied: the loop is compiled
        # for writable arrays.
        args = [as_compiled(np.ascontiguousarray(v, dt)) if is_array else np.full(1, v, dt) if boxed else dt.type(v)
                for v, dt, is_array, boxed in zip(state, self.dtypes, self._is_array, self._is_boxed)]
        while True:
            *args, done = call_compiled(self._fn, *self.constants, *args, CHUNK)
            if done:
                return [v if is_array else v[0] if boxed else dt.type(v)
                        for v, dt, is_array, boxed in zip(args, self.dtypes, self._is_array, self._is_boxed)]
            check("a compiled hlo.while loop")  # (and Python raises KeyboardInterrupt here on Ctrl-C)


_MODULE_HEADER = ("import numpy as np\nimport numba\nfrom lowering.runtime.loop_runtime import " + "{names}\n"
                  "from lowering.kernels.rowwise import row_extremum, zero_sign\n"
                  "from lowering.kernels.ynnpack_extrema import row_extremum as ynnpack_row_extremum, "
                  "extremum as ynnpack_extremum, columns_extrema as ynnpack_columns_extrema\n"
                  "from lowering.kernels.tree_sum import (contracted_sums, contracted_term_sums, grid_sum, lane_sum,\n"
                  "    nd_window_sum, rows_in_lanes, tree_sums, window_sum)\n"
                  "from lowering.kernels.small_dot import small_dot_pair, "
                  + ", ".join(kernel.__name__ for kernel in order_kernels()) + "\n"
                  "from lowering.kernels.eigen_dots import eigen_dot\n"
                  "from lowering.kernels.ynnpack_sum import sum_columns as ynnpack_sum_columns, "
                  "sum_columns_looped as ynnpack_sum_columns_looped, sum_rows as ynnpack_sum_rows, "
                  "sum_rows_looped as ynnpack_sum_rows_looped\n"
                  "from lowering.runtime.lapack_compiled import lapack_getrf, lapack_trsm\n"
                  "from {scalars} import " + ", ".join(SCALAR_EXPORTS) + "\n\n\n"
                  "CACHE = {cache}\n\n\n@numba.njit(cache=CACHE, error_model='numpy', nogil=True)\n")


@functools.cache
def _array_helper_names(header: str) -> frozenset[str]:
    """The names a generated module's ``header`` (ending in the decorator of the function that follows it)
    imports from modules other than the scalar definitions: the compiled helpers and kernels (views, allocations,
    sums, products) that take shapes, sizes and axes."""
    import ast

    return frozenset(alias.asname or alias.name for node in ast.parse(header + "def _():\n    pass\n").body
                     if isinstance(node, ast.ImportFrom) and node.module != "lowering.kernels.scalar"
                     for alias in node.names)


_SHAPE_FREE: dict[str, tuple[str, tuple[int, ...]]] = {}
"""Digest of a generated module's text -> (digest of its shape-free text, the sizes it reads): this process's memo of
the ``.ints`` index files (:func:`_load`)."""
_SHAPE_FREE_LOCK = threading.Lock()


def _load(source: str, function: str = "loop", scalars: str = "lowering.kernels.scalar") -> tuple[Callable, np.ndarray]:
    """The numba function ``function`` of generated ``source`` and the sizes to pass it first (an int64 array); the
    scalar definitions it calls are those of the module ``scalars`` (fused loops: :mod:`lowering.kernels.scalar_numbers`).

    The module is the source without its sizes (:func:`~lowering.runtime.generated_modules.hoisted_ints`: the same
    file, and numba's cached machine code, for every shape of one program), its integer constants passed to the
    helpers typed int64 (the same function), kept as a module file in the cache directory (so numba caches its
    machine code: :mod:`lowering.runtime.generated_modules`) or, without one, run from memory. That rewrite costs
    ~10 ms for a 20 KB module (parsing it), so each text's result is kept too: ``loop_<digest>.ints`` names the
    shape-free module and holds the sizes (a later process reads that instead)."""
    from ..runtime.loop_runtime import HELPER_NAMES

    directory = cache_directory()
    header = f"# runtime {runtime_digest()}\n" + _MODULE_HEADER.format(names=", ".join(HELPER_NAMES),
                                                                      cache=directory is not None, scalars=scalars)
    key = text_digest(header + source)
    index = os.path.join(directory, f"loop_{key}.ints") if directory is not None else None
    with _SHAPE_FREE_LOCK:
        known = _SHAPE_FREE.get(key)
    if known is None and index is not None and os.path.exists(index):
        try:
            with open(index) as f:
                digest, *sizes = f.read().split()
            known = (digest, tuple(int(v) for v in sizes))
        except (OSError, ValueError):  # (unreadable: made again below)
            known = None
    module = None
    if known is not None and directory is not None:
        path = os.path.join(directory, f"loop_{known[0]}.py")
        if os.path.exists(path):
            module = import_module_file(f"xla_dialect_loop_{known[0]}", path)
    if module is None:
        generic, sizes = hoisted_ints(source, _array_helper_names(header))
        text = header + generic
        if directory is None:
            namespace: dict = {}
            exec(compile(text, f"<hlo loop {text_digest(text)}>", "exec"), namespace)
            return namespace[function], np.array(sizes, np.int64)
        module = import_generated(text, "loop")
        known = (text_digest(text), sizes)
        write_atomically(index, " ".join(map(str, (known[0], *sizes))) + "\n")
    with _SHAPE_FREE_LOCK:
        _SHAPE_FREE[key] = known
    return getattr(module, function), np.array(known[1], np.int64)


def compile_loop(op: Operation, functions: dict[str, func.FuncOp], dtype_of: Callable,
                 flush: bool = True, single_thread_blas: bool = False,
                 cached_only: bool = False) -> CompiledLoop | None:
    """The compiled loop of ``op``, or None when it uses something this module does not compile (or, with
    ``cached_only``, when its machine code is not in numba's cache yet)."""
    try:
        source, constants = loop_source(op, functions, dtype_of, flush, single_thread_blas)
    except Ineligible:
        return None
    dtypes = [np.dtype(dtype_of(v.type)) for v in op.operands]
    return _compiled_loop(source, constants, dtypes, [len(v.type.get_shape()) for v in op.operands], cached_only)


def _compiled_loop(source: str, constants: dict, dtypes: list[np.dtype], ranks: list[int],
                   cached_only: bool) -> CompiledLoop | None:
    """The :class:`CompiledLoop` of a loop's written ``source`` compiled for a state of these dtypes and ranks (with
    ``cached_only``: loaded from numba's cache, or None), or None when numba rejects it."""
    try:
        loop = CompiledLoop(source, constants, dtypes)
        return loop if loop.compile_for(ranks, cached_only) else None
    except Exception:  # noqa: BLE001 - numba rejected the generated code: keep the interpreted loop
        return None


def tiered_loop(op: WhileOp, ctx, interpreted: Callable) -> Callable:
    """The kernel of ``op`` (an ``hlo.while``) for the executor's ``loop_compilation`` mode ("auto" or "always";
    ``ctx`` the lowering context): ``interpreted`` (:mod:`lowering.kernels.control_flow`'s kernel) when the mode is
    "never", else a :class:`TieredLoop` that interprets the loop the same way until it has run long enough and then
    runs it as one compiled function (:func:`compile_loop`), from wherever it stands, with the same bits."""
    if ctx.loop_compilation == "never":
        return interpreted
    return TieredLoop(op, ctx)


class TieredLoop:
    """An ``hlo.while``'s kernel in ``loop_compilation`` "auto" or "always" (:func:`tiered_loop`): called as the
    interpreted loop kernel is, ``(cond, body, *state)``.

    The loop runs interpreted until it has run :data:`AUTO_THRESHOLD` iterations or :data:`AUTO_SECONDS` seconds
    (over all calls; "always": at once), then as one numba-compiled function when it is eligible, from wherever it
    stands. In "auto" mode the compilation runs on a background thread and the loop stays interpreted until it is
    done; a loop an earlier process compiled is loaded from numba's cache at the first call. It is also the loop's
    unit for :mod:`lowering.executor.compile_queue`: the compilation of a unit inside starts this loop's, which
    makes theirs useless once done."""

    def __init__(self, op: WhileOp, ctx):
        self.mode = ctx.loop_compilation
        self.single = len(op.results) == 1
        self.bounded = ctx.timeout is not None
        self.where = f"{op.name} iteration"
        # (the loop's IR and context until its source is written: at its compilation, or when it is stored)
        self._op, self._ctx = op, ctx
        self._written = None  # (source, constants, dtypes, ranks), or "ineligible"
        self._reset()

    def _reset(self) -> None:
        self.threshold = 0 if self.mode == "always" else AUTO_THRESHOLD
        self.seconds_limit = AUTO_SECONDS
        self.iterations = 0
        self.seconds = 0.0
        self.started = False
        self.loop = None
        self.probed = self.mode == "always"

    def __getstate__(self) -> dict:
        """The loop as it stands before its first call, its source written (:mod:`lowering.executor.executable_cache`
        stores it without the IR)."""
        self._write()
        return {"mode": self.mode, "single": self.single, "bounded": self.bounded, "where": self.where,
                "_written": self._written}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._op = self._ctx = None
        self._reset()  # (the thresholds of this process)

    def _write(self):
        """The loop's generated source, constants, state dtypes and ranks (written once), or "ineligible"."""
        if self._written is None:
            op, ctx = self._op, self._ctx
            try:
                source, constants = loop_source(op, ctx.functions, ctx.dtype, ctx.flush, ctx.blas_threads == 1)
                self._written = (source, constants, [np.dtype(ctx.dtype(v.type)) for v in op.operands],
                                 [len(v.type.get_shape()) for v in op.operands])
            except Ineligible:
                self._written = "ineligible"
        return self._written

    def _compiled(self, cached_only: bool = False):
        """The compiled loop (:func:`compile_loop`'s), or None."""
        written = self._write()
        return None if written == "ineligible" else _compiled_loop(*written, cached_only)

    def _compile_now(self) -> None:
        try:
            self.loop = self._compiled()
        except Exception:  # noqa: BLE001 - (ineligible loops stay interpreted; anything else too)
            self.loop = None

    def _start(self) -> None:
        self.started = True
        if self.mode == "always":
            try:
                self._compile_now()
            except KeyboardInterrupt:  # Ctrl-C while numba compiled (lowering.runtime.interrupt.guard_compiles): the
                self.started = False  # next call asks again (numba finishes the compilation meanwhile)
                raise
        else:
            compile_in_background(self._compile_now)

    def _load_cached(self) -> None:
        # (first call, "auto": a loop an earlier process compiled is a load from numba's cache -- run it now)
        self.probed = True
        try:
            loop = self._compiled(cached_only=True)
        except Exception:  # noqa: BLE001 - (as _compile_now: anything else keeps the loop interpreted for now)
            loop = None
        if loop is not None:
            self.loop, self.started = loop, True

    @property
    def kernel(self):
        """The compiled loop once ready (:mod:`lowering.executor.compile_queue` reads it), else None."""
        return self.loop

    def background_job(self):
        """This loop's compilation when it has not started (:mod:`lowering.executor.compile_queue`), else None."""
        if self.started or self.mode != "auto":
            return None
        self.started = True
        return self._compile_now

    def _run_compiled(self, state):
        out = self.loop(state)
        return out[0] if self.single else tuple(out)

    def __call__(self, cond, body, *state):
        if not self.probed:
            self._load_cached()
        if not self.started and (self.iterations >= self.threshold or self.seconds >= self.seconds_limit):
            self._start()
        if self.loop is not None:
            return self._run_compiled(state)
        n = 0
        began = perf_counter()
        enter(self)
        try:
            while cond(*state)[0]:
                if not self.started and self.iterations + n >= self.threshold:
                    self._start()
                if self.loop is not None:  # (compiled meanwhile: switch here, the same bits)
                    self.iterations += n
                    return self._run_compiled(state)
                state = body(*state)
                n += 1
                if self.bounded:
                    check(self.where)
        finally:
            leave()
        self.iterations += n
        self.seconds += perf_counter() - began
        return state[0] if self.single else tuple(state)
