"""Element-wise fusion: runs of element-wise ops computed in one numba loop, as XLA's loop fusion does.

The executor computes each op with its own NumPy kernel: one Python call and
one pass over memory per op (plus several for the emulated fused
multiply-adds). A fused group computes all of its ops for one element before
moving to the next, in registers, with the hardware FMA and the C library's
trigonometric functions, and returns only the values used outside the group.
The scalar formula of every op is the one the compiled loops use
(:mod:`lowering.executor.compiled_loops`), so a fused group gives the same bits as the
interpreted ops.

What forms a group and how it reads its inputs: :mod:`lowering.executor.fusion_plan`.

When to compile (``lowering.compile(..., fusion=...)``): numba takes 0.1-1 s
per new group (milliseconds once numba's on-disk cache has it; a group that
runs in pieces on numba's threads takes ~0.2 s more for its parallel wrapper:
0.27-0.38 s against 0.09-0.11 s for the same loops small, measured), which pays
only for programs that run often or on large arrays. ``"auto"`` (the
default) runs a group interpreted until it has been called
:data:`AUTO_CALLS` times or has processed :data:`AUTO_ELEMENTS` elements,
then compiles it on a background thread (numba's LLVM work releases the GIL) and keeps interpreting it
until the kernel is ready -- both give the same bits, so a first call never waits for numba
(:func:`lowering.executor.compiled_loops.wait_for_background_compiles` waits); ``"always"`` compiles at the first
call, before running; ``"never"``.
"""

from __future__ import annotations

import threading

import numpy as np

from xla_dialect.ops.elementwise import CosineOp, DivOp, ExpOp, LogisticOp, LogOp, SineOp, TanhOp, TanOp
from xla_dialect.ops.base import ints
from xla_dialect.ops.reduction import ReduceOp

from .compile_queue import compile_function, compile_in_background
from ..kernels.scalar_numbers import payload_free
from .compiled_loops import ElementLoopWriter, _load, as_compiled
from .fusion_plan import Group, Ineligible, _reduction_kind, _shape, element_loop, input_reads
from ..kernels.reduction import ynnpack_extremum_plan
from ..kernels.tree_sum import TREE_WINDOW
from ..runtime.workers import even_bounds, numba_threads_available, run_pieces

AUTO_CALLS = 20
AUTO_ELEMENTS = 1 << 22


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
    writer = ElementLoopWriter({}, dtype_of, flush)
    reads, inner = input_reads(group, writer.info)
    sub = 1  # (reduction rows per loop row: a mask broadcast over the last two dimensions makes rows of n * n)
    if group.reductions:
        width = group.shape[-1]
        inner = width if inner == 1 else inner
        if inner % width:
            raise Ineligible("broadcasts that split the rows a reduction reduces")
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
    # Scalars come packed, one array per element type (see scalar_packs and ElementLoopWriter.op_constant).
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
    # (the row ends' own flag: a row sum's NaN check or-ed into the element loop's ``found`` after the inner loop
    # kept LLVM from vectorizing that loop -- an exp loop over 8,192 rows of 256 with a row sum at each row's end,
    # on one CPU: 8.0 ms, 1.3 ms with the flags apart)
    lines += ["    found = False", "    rows_found = False"]
    lines += element_loop(loads, stores, body, "stop - start", inner, "    ", row_stores=row_stores,
                          row_end=row_end)
    lines.append("    return found or rows_found")
    params = ", ".join([*writer.constants, *args, *outputs])
    # The kernel's pieces at once on numba's threads (lowering.runtime.workers), each in the caller's MXCSR.
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
    holding a NaN, or a NaN sum, setting ``rows_found``. Appends the buffers' allocations to ``lines``."""
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
            # (a NaN sum: which of several NaN payloads it keeps is the reduction kernel's to decide -- found by
            # the long fuzz campaign, seed 23: an f64 row mean of two NaN payloads differed fused and unfused)
            row_end.append(f"        rows_found |= {out}[o * {sub} + s] != {out}[o * {sub} + s]")
            continue
        minimum = kind == "min"
        row_end += [f"        m{q}, bad{q} = row_extremum(w{q}, s * {width}, {width}, {minimum})",
                    f"        rows_found |= bad{q}",
                    f"        if m{q} == 0:"]
        plan = ynnpack_extremum_plan(x.type.get_shape(), ints(op.dimensions), dtype)
        if plan is None:
            row_end.append(f"          m{q} = zero_sign(w{q}, s * {width}, {width}, m{q}, {minimum})")
        else:  # (XLA CPU reduces in YNNPACK: its rule gives the zero's sign, as the reduction kernel applies it;
            # a row holding a NaN is the kernel's to compute, above)
            identity = "np.inf" if minimum else "-np.inf"
            row_end.append(f"          m{q} = ynnpack_row_extremum(w{q}, s * {width}, {width}, {minimum}, "
                           f"np.{t}({identity}), {plan[2]})")
        # (No flush of a denormal maximum, as the kernel's ``-inf op total`` does under DAZ: in "flush" mode
        # no denormal reaches the row -- arguments are flushed, a constant is converted to the kernel's
        # type under the caller's MXCSR, results of arithmetic are flushed.)
        row_end.append(f"        {out}[o * {sub} + s] = m{q}")
    return row_stores, row_end


PARALLEL_ELEMENTS = 1 << 18
"""Fused loops over fewer elements run whole, on the calling thread."""

PARALLEL_MIN_NS = 100_000
"""Fused loops whose estimated time on one CPU (:func:`estimated_ns`) is at least this many nanoseconds run in
pieces on the CPUs at once, where the pieces run on numba's polling threads (:mod:`lowering.runtime.workers`). Measured
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
            # (NaN outputs are the ops' kernels' to give: the definitions without their NaN-payload rule, where
            # no op turns a NaN's bits into a value that is not a NaN: lowering.kernels.scalar_numbers)
            self.scalars = "lowering.kernels.scalar_numbers" if payload_free(group) else "lowering.kernels.scalar"
            self.base_constants = list(constants.values())
            self.constants = self.base_constants  # (with the sizes first once compiled: _compile_kernel)
            self.rows = size // inner
            self.parts = min(workers, size // (PARALLEL_ELEMENTS // 2)) if size >= PARALLEL_ELEMENTS else 1
            self.estimated_ns = estimated_ns(group)
            self.pieces = [(0, self.rows)]  # (cut when compiled: _cut)
            self.worker_mode = worker_mode
        except Ineligible:
            self.source = None
            self.tried = self.started = True

    def __getstate__(self) -> dict:
        """The group as it stands before its first call (:mod:`lowering.executor.executable_cache` stores it: a
        later process's first call loads the machine code an earlier one compiled, else it tiers up anew)."""
        state = dict(self.__dict__)
        del state["_lock"]
        state.pop("signature", None)
        compilable = self.source is not None
        state.update(calls=0, elements=0, kernel=None, bounds=None, _serial=None, readonly=[],
                     tried=not compilable, started=not compilable)
        if compilable:
            state.update(constants=self.base_constants, pieces=[(0, self.rows)])
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _compile(self, readonly: list[bool]):
        """Compile the group's kernel for arrays with these read-only flags (:meth:`_compile_kernel`)."""
        self._compile_kernel(readonly)

    def _compile_kernel(self, readonly: list[bool], cached_only: bool = False):
        """Compile the group's kernel for arrays with these read-only flags (those of the call that asked:
        they are stable per input -- constants are read-only, computed values not -- and a numba function
        compiled for a writable array is compiled again, at a call, for a read-only one). With
        ``cached_only``, only when that is a load of machine code an earlier process compiled
        (:func:`lowering.runtime.numba_cache.has_machine_code`); otherwise nothing is tried yet."""
        with self._lock:
            if self.tried:
                return
            try:
                from numba import from_dtype, typeof, types

                from ..runtime.numba_cache import has_machine_code

                pieces = self._cut()
                threaded = len(pieces) > 1 and numba_threads_available()
                fn, sizes = _load(self.source, "fused_pieces" if threaded else "fused", self.scalars)
                self.constants = [sizes, *self.base_constants]  # (the sizes first: generated_modules.hoisted_ints)
                signature = [typeof(c) for c in self.constants]
                signature += [types.Array(from_dtype(dt), rank, "C", readonly=ro)
                              for dt, rank, array, ro in zip(self.input_dtypes, self.input_ranks,
                                                             self.input_is_array, readonly)
                              if array]
                signature += [types.Array(from_dtype(dt), 1, "C") for dt, _ in self.packs]
                signature += [types.Array(from_dtype(dt), 1, "C") for dt in self.output_dtypes]
                if threaded:
                    full = (*signature, types.Array(types.int64, 2, "C"))
                else:
                    full = (*signature, types.int64, types.int64)
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

            fn, _ = _load(self.source, "fused", self.scalars)  # (fused_pieces' module: its sizes in self.constants)
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

