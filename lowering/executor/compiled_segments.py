"""Straight-line code compiled: runs of small ops of a block run as one numba function.

Real programs spend most of their time outside loops on small arrays (an ODE solver's step-size setup, a sampler's
bookkeeping), where each interpreted op costs a Python call of 1-3 us while XLA's code costs nanoseconds. A
*segment* is a run of consecutive ops of one block that the compiled-loop writer (:mod:`lowering.executor.compiled_loops`)
can write -- element-wise ops through their one scalar definition, slices, reshapes, broadcasts, concatenates,
dynamic slices and updates, small products, reductions, calls, conditionals, while loops, LAPACK custom calls --
whose values are small (:data:`SEGMENT_MAX_ELEMENTS`). The executor calls the segment as one op: its ops' own
kernels until the machine code is ready (compiled in the background after :data:`AUTO_CALLS` calls in
``loop_compilation="auto"``, before the first call with ``"always"``, never with ``"never"``), then one numba
function computing the same bits (it calls the same definitions).

A long run is one segment made of *chunks* of at most :data:`SEGMENT_MAX_OPS` ops (counting the ops inside
loops and branches): each chunk is a numba function of its own, compiled and cached on its own (numba's compile
time grows faster than a function), and the segment's function calls them one after the other in machine code
(:class:`SegmentChain`) -- an ODE solver's set-up of 3,500 small ops and its stepping loop are one call from
Python, not thirty. Loops inside a segment poll for Ctrl-C and the call's deadline
(:func:`lowering.runtime.interrupt.poll`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Block, Operation, SSAValue

from xla_dialect.ops.control_flow import ConditionalOp

from .compile_queue import compile_function, enter, leave
from .compiled_loops import (_NUMBA_TYPE_NAMES, _boxed, Ineligible, _load, _LoopWriter, as_compiled, call_compiled,
                             compile_in_background)

SEGMENT_MIN_OPS = 6
"""Runs of fewer ops stay interpreted (a segment call costs about as much as a few interpreted ops)."""

SEGMENT_MAX_OPS = 128
"""Longer runs are cut into segments of at most this many ops: numba's and LLVM's compile time and memory grow
faster than the function (a chain of 1,500 small ops as one function did not compile in 10 minutes and took
over 10 GB)."""

SEGMENT_MAX_ELEMENTS = 1 << 12
"""Every result of a segment's ops has at most this many elements (larger arrays: NumPy's kernels and fused
loops are as fast, and per-op cost does not matter)."""

AUTO_CALLS = 20
"""``loop_compilation="auto"`` compiles a segment in the background after this many calls."""


class _SegmentWriter(_LoopWriter):
    """The compiled-loop writer for straight-line code: values from before the segment become parameters."""

    def __init__(self, functions: dict[str, func.FuncOp], dtype_of: Callable, flush: bool,
                 single_thread_blas: bool, known: dict | None = None):
        super().__init__(functions, dtype_of, flush)
        self.single_thread_blas = single_thread_blas
        self.inputs: list[SSAValue] = []
        self.known = known or {}

    def name(self, value: SSAValue) -> str:
        if value not in self.names and value in self.known:  # computed when lowering: a constant of the code
            self.info(value)
            self.names[value] = self.fresh()
            self.bind_constant(np.asarray(self.known[value]), value, self.names[value], self.prologue, "    ")
        if value not in self.names:  # defined before the segment: a parameter
            self.info(value)
            name = f"p{len(self.inputs)}"
            if _boxed(*self.info(value)):  # (float scalars cross numba's boundary as one-element arrays)
                self.prologue.append(f"    {name} = b{len(self.inputs)}[0]")
            self.names[value] = name
            self.inputs.append(value)
        return self.names[value]

    @staticmethod
    def has_tensor_type(value: SSAValue) -> bool:
        """Whether ``value`` is a tensor (a segment's inputs and outputs are)."""
        from xdsl.dialects.builtin import TensorType

        return isinstance(value.type, TensorType)

    def try_op(self, op: Operation) -> bool:
        """Write ``op``; False (and nothing written) when it cannot be part of a segment."""
        state = (len(self.lines), len(self.prologue), len(self.inputs), len(self.names), len(self.constants),
                 self.counter)
        try:
            for inner in op.walk():  # (the op and the ops of its regions: a loop's body)
                for r in inner.results:
                    if int(np.prod(self.info(r)[1], dtype=np.int64)) > SEGMENT_MAX_ELEMENTS:
                        raise Ineligible("a large result")
            if isinstance(op, ConditionalOp) and not all(self.has_tensor_type(v) for v in op.operands):
                # (jax's empty-tuple branch operands are not values a segment can take from the code around it)
                raise Ineligible("a conditional with tuple operands")
            self.op(op, "    ")
            return True
        except Ineligible:
            lines, prologue, inputs, names, constants, self.counter = state
            del self.lines[lines:], self.prologue[prologue:], self.inputs[inputs:]
            for key in list(self.names)[names:]:
                del self.names[key]
            for key in list(self.constants)[constants:]:
                del self.constants[key]
            return False


class Segment:
    """A run of ops of one block (:attr:`ops`, in order) with the values it reads from before it
    (:attr:`inputs`) and the values it defines that later ops use (:attr:`outputs`), and its numba source."""

    def __init__(self, ops: list[Operation], writer: _SegmentWriter, outputs: list[SSAValue]):
        self.ops = ops
        self.inputs = list(writer.inputs)
        self.outputs = outputs
        boxed_out = []
        for k, v in enumerate(outputs):
            if _boxed(*writer.info(v)):
                name = writer.fresh("o")
                dtype = writer.info(v)[0]
                writer.emit("    ", f"{name} = new_array(1, {_NUMBA_TYPE_NAMES[dtype]})")
                writer.emit("    ", f"{name}[0] = {writer.names[v]}")
                boxed_out.append(name)
            else:
                boxed_out.append(writer.names[v])
        params = [f"b{k}" if _boxed(*writer.info(v)) else f"p{k}" for k, v in enumerate(self.inputs)]
        header = f"def segment({', '.join([*writer.constants, *params])}):"
        checks = writer.kernel_checks("    ")
        body = writer.prologue + writer.lines + checks
        self.source = "\n".join([header, *body, f"    return ({', '.join(boxed_out)},)"]) + "\n"
        self.constant_names = list(writer.constants)
        self.constants = list(writer.constants.values())
        self.input_info = [writer.info(v) for v in self.inputs]
        self.output_info = [writer.info(v) for v in outputs]


_CHUNK_NJIT = ("@numba.njit(cache=CACHE, error_model='numpy', nogil=True, no_cpython_wrapper=True, "
               "no_cfunc_wrapper=True)\n")
"""The decorator of a chain's chunks (the driver, first in the module, has the module header's:
:func:`lowering.executor.compiled_loops._load`). Only the driver is called from Python: without the wrappers that unbox
and box a chunk's arguments from Python objects (often dozens of arrays), odeint's segment compiled in 6.1-8.2 s
instead of 8.3-9.7 s (python /tmp harness, loaded 2-core VM)."""


class SegmentChain:
    """Chunks (:class:`Segment`, consecutive runs of one block) run as one segment: a numba function calling each
    chunk's function in turn, chunk outputs passed on in machine code. The same attributes as a :class:`Segment`
    (``ops``, ``inputs``, ``outputs``, ``source``, ``constants``, ``input_info``, ``output_info``): the executor
    and :class:`CompiledSegment` run either the same way. ``later`` says whether a value is used after the
    chain (its outputs)."""

    def __init__(self, chunks: list[Segment], later: Callable[[SSAValue], bool]):
        self.chunks = chunks
        self.ops = [op for chunk in chunks for op in chunk.ops]
        self.inputs: list[SSAValue] = []
        self.input_info: list = []
        produced: dict[SSAValue, str] = {}
        info: dict[SSAValue, tuple] = {}
        params, calls, self.constants, texts = [], [], [], []
        for j, chunk in enumerate(chunks):
            args = []
            for name, value in zip(chunk.constant_names, chunk.constants):
                params.append(f"c{j}_{name}")
                args.append(params[-1])
                self.constants.append(value)
            for v, v_info in zip(chunk.inputs, chunk.input_info):
                if v not in produced:
                    produced[v] = f"p{len(self.inputs)}"  # (a boxed float stays a one-element array throughout)
                    self.inputs.append(v)
                    self.input_info.append(v_info)
                args.append(produced[v])
            outs = [f"o{j}_{k}" for k in range(len(chunk.outputs))]
            calls.append(f"    {', '.join(outs)}, = chunk{j}({', '.join(args)})")
            for v, name, v_info in zip(chunk.outputs, outs, chunk.output_info):
                produced[v] = name
                info[v] = v_info
            texts.append(_CHUNK_NJIT + chunk.source.replace("def segment(", f"def chunk{j}(", 1))
        self.outputs = [v for chunk in chunks for v in chunk.outputs if later(v)]
        self.output_info = [info[v] for v in self.outputs]
        self.constant_names = list(params)
        driver = [f"def segment({', '.join([*params, *(f'p{k}' for k in range(len(self.inputs)))])}):", *calls,
                  f"    return ({', '.join(produced[v] for v in self.outputs)},)"]
        self.source = "\n\n".join(["\n".join(driver) + "\n", *texts])


def _weight(op: Operation) -> int:
    """How many ops ``op`` stands for in a chunk: itself and the ops of its regions (a loop's body)."""
    return sum(1 for _ in op.walk())


def plan_segments(block: Block, functions: dict[str, func.FuncOp], dtype_of: Callable, flush: bool,
                  single_thread_blas: bool, excluded: set[Operation] | frozenset = frozenset(),
                  known: dict | None = None) -> list:
    """The segments of ``block``: maximal runs of ops that the writer accepts, of at least
    :data:`SEGMENT_MIN_OPS` ops, with at least one output, each a :class:`Segment` or, when longer than
    :data:`SEGMENT_MAX_OPS` ops (counting the ops of their regions), a :class:`SegmentChain` of chunks of at most
    that many; ``excluded`` ops (those of long fused element-wise chains) end runs. ``known``: values computed
    when lowering (value -> array); ops whose result is known are not part of a segment and do not end a run
    (a segment reads their values as constants)."""
    known = known if known is not None else {}
    ops = [op for op in block.ops if op is not block.last_op]
    position = {op: i for i, op in enumerate(block.ops)}
    segments: list = []

    def top(op: Operation) -> Operation:
        while op.parent_block() is not block:
            op = op.parent_op()
        return op

    def used_after(value: SSAValue, members: set[Operation], last: int) -> bool:
        return any(top(use.operation) not in members and position[top(use.operation)] > last for use in value.uses)

    def close(run: list[Operation], writer: _SegmentWriter) -> Segment | None:
        if sum(_weight(op) for op in run) < SEGMENT_MIN_OPS:
            return None
        members = set(run)
        last = position[run[-1]]
        outputs = [r for op in run for r in op.results if used_after(r, members, last)]
        return Segment(run, writer, outputs) if outputs else None

    def end(chain: list[Segment]) -> None:
        if len(chain) == 1:
            segments.append(chain[0])
        elif chain:
            members = {op for chunk in chain for op in chunk.ops}
            last = position[chain[-1].ops[-1]]
            segments.append(SegmentChain(chain, lambda v: used_after(v, members, last)))

    chain: list[Segment] = []
    run: list[Operation] = []
    weight = 0
    writer = _SegmentWriter(functions, dtype_of, flush, single_thread_blas, known)
    for op in ops:
        if op.results and all(r in known for r in op.results):
            continue
        w = _weight(op)
        if run and weight + w > SEGMENT_MAX_OPS:  # a cut: the next chunk of the same chain
            chunk = close(run, writer)
            if chunk is None:
                end(chain)
                chain = []
            else:
                chain.append(chunk)
            run, weight, writer = [], 0, _SegmentWriter(functions, dtype_of, flush, single_thread_blas, known)
        if op not in excluded and writer.try_op(op):
            run.append(op)
            weight += w
            continue
        chunk = close(run, writer)
        if chunk is not None:
            chain.append(chunk)
        end(chain)
        chain, run, weight = [], [], 0
        writer = _SegmentWriter(functions, dtype_of, flush, single_thread_blas, known)
    chunk = close(run, writer)
    if chunk is not None:
        chain.append(chunk)
    end(chain)
    return segments


class CompiledSegment:
    """Runs a :class:`Segment`: ``interpreted`` (its ops' own kernels) until the numba function is ready."""

    def __init__(self, segment: Segment, interpreted: Callable, mode: str):
        self.segment = segment  # (its ops: for tests and debugging; not stored, __getstate__)
        self.source = segment.source  # (as written; its constants packed when it is first compiled: _compile)
        self.packed: list | None = None
        self.constant_names = segment.constant_names
        self.constants = segment.constants
        self._written = (segment.source, segment.constant_names, segment.constants)  # (never changed: __getstate__)
        self.interpreted = interpreted
        self.mode = mode
        self.inputs = [(np.dtype(dt), bool(shape), _boxed(dt, shape)) for dt, shape in segment.input_info]
        self.outputs = [(np.dtype(dt), bool(shape), _boxed(dt, shape)) for dt, shape in segment.output_info]
        self._ranks = [len(shape) for _, shape in segment.input_info]
        self.calls = 0
        self.started = False
        self.kernel = None
        self.readonly: list[bool] = []
        self._seen_readonly: list[bool] | None = None

    def _signature(self, readonly: list[bool]) -> tuple:
        from numba import from_dtype, typeof, types

        signature = [typeof(c) for c in self.constants]
        for (dt, is_array, boxed), ro, rank in zip(self.inputs, readonly, self._ranks):
            if is_array:
                signature.append(types.Array(from_dtype(dt), rank, "C", readonly=ro))
            elif boxed:
                signature.append(types.Array(from_dtype(dt), 1, "C"))
            else:
                signature.append(from_dtype(dt))
        return tuple(signature)

    def _compile(self, readonly: list[bool], cached_only: bool = False) -> None:
        """Compile for arguments with these read-only flags; with ``cached_only``, only when that is a load of
        machine code an earlier process compiled (:func:`lowering.runtime.numba_cache.has_machine_code`)."""
        from ..runtime.numba_cache import has_machine_code

        from .constant_packing import pack_constants, unowned_buffers

        try:
            if self.packed is None:
                # (its constants in a few packed arrays: one argument each cost the call ~50 ns apiece; its buffers
                # and constants read without reference counts)
                self.source, self.packed = pack_constants(unowned_buffers(self.source), "segment",
                                                          self.constant_names, self.constants)
            fn, sizes = _load(self.source, "segment")
            self.constants = [sizes, *self.packed]  # (the sizes first: generated_modules.hoisted_ints)
            signature = self._signature(readonly)
            if cached_only and not has_machine_code(fn, signature):
                return
            compile_function(fn, signature)
            self.readonly = readonly
            self.kernel = fn
        except Exception:  # noqa: BLE001 - numba rejected the generated code: stay interpreted
            self.kernel = None

    def __getstate__(self) -> dict:
        """The segment as it stands before its first call (:mod:`lowering.executor.executable_cache` stores it:
        a later process's first call loads the machine code an earlier one compiled, else it tiers up anew)."""
        state = dict(self.__dict__)  # (as written, whatever a compilation on another thread has done meanwhile)
        state["source"], state["constant_names"], state["constants"] = self._written
        del state["segment"]
        state.update(packed=None, calls=0, started=False, kernel=None, readonly=[], _seen_readonly=None)
        return state

    def background_job(self):
        """This segment's compilation, when it has not started (:func:`lowering.executor.compile_queue.compile_in_background`
        starts it for a unit inside, ahead of that unit's own); None once started."""
        if self.started or self.kernel is not None or self.mode != "auto" or self._seen_readonly is None:
            return None
        self.started = True
        readonly = self._seen_readonly
        return lambda: self._compile(readonly)

    def __call__(self, *inputs):
        if self.kernel is None:
            if not self.started and self.mode != "never":
                self.calls += 1
                readonly = [is_array and not np.asarray(x).flags.writeable
                            for x, (_, is_array, _) in zip(inputs, self.inputs)]
                if self.mode == "auto" and self.calls == 1:  # compiled by an earlier process: load it now
                    self._compile(readonly, cached_only=True)
                    self.started = self.kernel is not None
                if self.kernel is None and (self.mode == "always" or self.calls > AUTO_CALLS):
                    self.started = True
                    if self.mode == "always":
                        try:
                            self._compile(readonly)
                        except KeyboardInterrupt:  # Ctrl-C while numba compiled: the next call asks again
                            self.started = False
                            raise
                    else:  # interpreted until the kernel is ready (the same bits): a call never waits
                        compile_in_background(lambda: self._compile(readonly))
                self._seen_readonly = readonly
            if self.kernel is None:
                if self.mode != "auto":
                    return self.interpreted(*inputs)
                enter(self)  # (units inside start this segment's compilation: compile_queue)
                try:
                    return self.interpreted(*inputs)
                finally:
                    leave()
        args = [as_compiled(np.ascontiguousarray(x, dt), ro) if is_array else np.full(1, x, dt) if boxed
                else dt.type(x)
                for x, (dt, is_array, boxed), ro in zip(inputs, self.inputs, self.readonly)]
        results = call_compiled(self.kernel, *self.constants, *args)
        return tuple(v if is_array else v[0] if boxed else dt.type(v)
                     for v, (dt, is_array, boxed) in zip(results, self.outputs))
