"""Lower an hlo module once to straight-line Python over NumPy kernels, and run it.

Each ``func.func`` becomes a Python function whose body is one line per op::

    def f_main(a0, a1):
        v0 = k0(a0, a1)      # hlo.multiply  (k0 is numpy.multiply itself)
        del a0, a1           # buffers are freed after their last use
        v1 = k1(v0, c2)      # hlo.add
        return (v1,)

Kernels come from :data:`lowering.kernels.registry.KERNELS`. Regions (reduce bodies,
while conditions, branches) become nested functions; they are hoisted to the
module level when they do not capture outer values, so the common case costs
nothing at run time. :attr:`Executable.source` shows the generated code.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, TupleType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from passes.purity import is_pure
from xla_dialect.errors import ExecutionError, UnsupportedError, XlaError, op_context
from xla_dialect.ops.control_flow import AsyncStartOp, ConditionalOp, ReturnOp, WhileOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.shape import format_shape
from xla_dialect.types import TokenType, numpy_dtype

from ..runtime.blas import BlasThreadLimit
from ..runtime import interrupt
from ..kernels.context import KernelContext
from ..runtime.collection_pause import fewer_collections
from ..runtime.denormals import mode_switch
from ..runtime.options import CompileOptions
from ..kernels.registry import KERNELS, Constant
from ..runtime.program_state import Runtime


class LoweringContext(KernelContext):
    """The executor's :class:`~lowering.kernels.context.KernelContext`: it also compiles functions and regions to
    Python over the kernels (one ``def`` per function, region and fusion group)."""

    def __init__(self, module: ModuleOp, num_replicas: int = 1, num_partitions: int = 1,
                 blas_threads: int | None = None, denormals: str | None = None, *,
                 options: CompileOptions | None = None):
        super().__init__(module, num_replicas, num_partitions, blas_threads, denormals, options=options)
        self.probe = self.options.probe
        self.namespace: dict[str, object] = {"np": np}
        self.sources: list[str] = []
        self._compiled: dict[str, object] = {}
        self._compiling: set[str] = set()
        self._names = itertools.count()
        # Values known when the program is lowered (hlo.constant, iota, and pure ops computed from them
        # here, once): value -> array. Kernels never write their inputs, so these are shared by every call.
        self._known: dict[SSAValue, object] = {}
        # Ops computed ahead of their block's compiled segments (_fold_ahead): op -> its Constant kernel.
        self._folded: dict[Operation, Constant] = {}

    def loop_kernel(self, op, interpreted):
        """The kernel of ``op`` (an ``hlo.while``): ``interpreted`` until the loop has run long enough, then one
        compiled function (:func:`lowering.executor.compiled_loops.tiered_loop`; ``loop_compilation="never"``: interpreted)."""
        from .compiled_loops import tiered_loop

        return tiered_loop(op, self, interpreted)

    def function(self, name: str):
        """The compiled Python function of ``func.func @name`` (compiled on first use)."""
        if name in self._compiled:
            return self._compiled[name]
        if name in self._compiling:
            raise UnsupportedError(f"func.call @{name}: recursive calls are not allowed in XLA programs")
        if name not in self.functions:
            raise ExecutionError(f"call to unknown function @{name}")
        self._compiling.add(name)
        fn = self._compile_function(self.functions[name])
        self._compiling.discard(name)
        self._compiled[name] = fn
        return fn

    # -- code generation ----------------------------------------------------

    def _bind(self, prefix: str, obj) -> str:
        name = f"{prefix}{next(self._names)}"
        self.namespace[name] = obj
        return name

    def _compile_function(self, fn: func.FuncOp):
        py_name = "f_" + "".join(c if c.isascii() and c.isalnum() else "_" for c in fn.sym_name.data)
        lines: list[str] = []
        self._emit_block(fn.body.block, py_name, lines, indent="", is_function=True, outer={})
        src = "\n".join(lines) + "\n"
        self.sources.append(src)
        exec(builtins.compile(src, f"<hlo {fn.sym_name.data}>", "exec"), self.namespace)
        return self.namespace[py_name]

    def _emit_block(self, block: Block, py_name: str, lines: list[str], indent: str,
                    is_function: bool, outer: dict[SSAValue, str]) -> None:
        """Emit ``def py_name(args): ...`` computing ``block``.

        ``outer`` maps values of enclosing blocks to their Python names
        (captured by closure).
        """
        names: dict[SSAValue, str] = dict(outer)
        args = []
        for arg in block.args:
            n = f"a{next(self._names)}"
            names[arg] = n
            args.append(n)
        body: list[str] = []
        inner = indent + "    "
        ops = list(block.ops)
        last_use = _last_uses(block)
        local = set(block.args)
        # Element-wise runs computed as one fused kernel (lowering.executor.fusion): each group is called where
        # its last op stands; values its earlier ops used last are freed after the call.
        # Runs of small ops computed as one compiled function (lowering.executor.compiled_segments), called where the
        # run's first op stands; fusion groups touching a run are left to it. Only in program code (functions,
        # loop and branch bodies): the regions of sort, reduce, scatter or map are applied to whole arrays of
        # elements at once, not to values of their block's types.
        segment_at, in_segment = {}, set()
        groups = []
        if self.fusion != "never":
            from .fusion_plan import plan

            groups = plan(block, row_reductions=True)
        parent = block.parent_op()
        program_code = is_function or (parent is not None and type(parent) in self._PROBED_REGIONS)
        if getattr(self, "loop_compilation", "never") != "never" and self.probe is None and program_code:
            from .compiled_segments import SEGMENT_MAX_OPS, plan_segments

            self._fold_ahead(block)
            # A fusion group of ops all computed ahead (a check on constants: diffrax's test that the save times
            # are sorted) is those constants, not a fused call at every call.
            groups = [g for g in groups if not all(m in self._folded for m in g.members)]
            # A long element-wise chain is better as one fused loop than as several segments.
            fused = {op for g in groups if len(g.members) >= SEGMENT_MAX_OPS // 4 for op in g.members}
            for segment in plan_segments(block, self.functions, self.dtype, self.denormals == "flush",
                                         self.blas_threads == 1, excluded=fused, known=self._known):
                segment_at[segment.ops[0]] = segment
                in_segment.update(segment.ops)
        group_of = {}
        if groups:
            # A segment is called where its first op stands, a group where its last op does, and a segment's span
            # may hold other ops (computed ahead, or independent of it: an optimizer's large-array updates between
            # its scalar steps). A group is cut where a segment that reads one of its values is called, and where
            # a member is computed by a segment (left out); each piece of MIN_GROUP ops or more is a group.
            position = {op: i for i, op in enumerate(ops)}
            seg_spans = [(position[s.ops[0]], position[s.ops[-1]], set(s.inputs)) for s in segment_at.values()]
            groups = [piece for g in groups
                      for piece in _cut_group(g, position, block, in_segment, [
                          first for first, last, reads in seg_spans if g.first <= last and first <= g.last
                          and not reads.isdisjoint(r for m in g.members for r in m.results)])]
            group_of = {op: g for g in groups for op in g.members}
            # What a member reads is used where its group is called: freed after that call (groups interleave,
            # and other ops -- a segment -- may stand between a group's members and read the same values).
            for g in groups:
                for member in g.members:
                    for v in _all_operands(member):
                        if last_use.get(v, -1) < g.last:
                            last_use[v] = g.last
        segment_end = -1
        def unread(op: Operation) -> bool:  # computed ahead, and read only as constants of compiled segments
            for r in op.results:
                for use in r.uses:
                    user = use.operation
                    while user.parent_block() is not block:
                        user = user.parent_op()
                    if not (user in in_segment or user in self._folded):
                        return False
            return True

        for index, op in enumerate(ops):
            if index <= segment_end and op in in_segment:
                continue  # (ops computed ahead inside a segment's span are not in it: bound below as constants)
            if op in self._folded and segment_at and op not in group_of and unread(op):
                continue  # (no Python name needed: nothing in the block's Python code reads it)
            if op in segment_at:
                segment = segment_at[op]
                segment_end = index + ops[index:].index(segment.ops[-1])  # (its last op: ops computed ahead
                # may stand between its ops)
                self._emit_segment(segment, names, body, inner)
                local.update(segment.outputs)
                dead = [names[v] for v, i in last_use.items() if index <= i <= segment_end and v in local
                        and v in names and ops[i] in in_segment]  # (used last by the segment itself)
                if dead:
                    body.append(f"{inner}del {', '.join(dead)}")
                continue
            if op is block.last_op and (isinstance(op, (func.ReturnOp, ReturnOp))):
                results = ", ".join(names[v] for v in op.operands)
                if is_function and len(op.operands) == 1:
                    body.append(f"{inner}return {results}")
                else:
                    body.append(f"{inner}return ({results}{',' if len(op.operands) == 1 else ''})")
                break
            group = group_of.get(op)
            if group is not None and op is not group.members[-1]:
                continue  # (computed by the group's call, where its last member stands)
            if group is not None:
                self._emit_group(group, names, body, inner)
                local.update(group.outputs)
            else:
                self._emit_op(op, names, body, inner)
                local.update(op.results)
                if self.timeout is not None:
                    body.append(f"{inner}{self._bind('chk', interrupt.check)}({op_context(op)!r})")
            dead = [names[v] for v, i in last_use.items() if i == index and v in local]
            if dead:
                body.append(f"{inner}del {', '.join(dead)}")
        else:
            raise ExecutionError(f"block of {py_name} has no terminator")
        lines.append(f"{indent}def {py_name}({', '.join(args)}):")
        lines.extend(body)

    def _check_result_sizes(self, op: Operation) -> None:
        """Every array result of ``op`` fits the memory limit (shapes are static: checked once, here)."""
        from xla_dialect.limits import check_bytes

        for r in op.results:
            t = r.type
            if isinstance(t, TensorType):
                count = 1
                for d in t.get_shape():
                    count *= max(int(d), 0)
                if count:
                    check_bytes(count * self.dtype(t).itemsize,
                                lambda: f"{op_context(op)}: the result {format_shape(t)}", self.max_bytes)

    def _fold_ahead(self, block: Block) -> None:
        """Compute now, in block order, the ops of ``block`` whose results are known when lowering (constants and
        pure ops of known operands: :meth:`_evaluate_on_constants`, the same kernels in the program's denormal
        mode, as :meth:`_emit_op` would when it reached them), before the block's compiled segments are planned:
        a segment then reads them as constants instead of computing them at every call (a diffrax solve's
        set-up has about 3,000 such ops, which XLA folds too)."""
        known = self._known
        for op in block.ops:
            if isinstance(op, ConditionalOp) and op not in self._folded:
                self._fold_conditional(op)
                continue
            if isinstance(op, ReduceOp) and op not in self._folded:
                self._fold_reduce(op)
                continue
            if (op in self._folded or op.regions or len(op.results) != 1
                    or not isinstance(op.results[0].type, TensorType)
                    or not all(v in known for v in op.operands)):
                continue
            factory = KERNELS.get(type(op))
            if factory is None or (op.operands and not is_pure(op)):
                continue
            try:
                self._check_result_sizes(op)
                kernel = factory(op, self)
            except XlaError:
                continue  # (reported where the op is emitted, as before)
            except Exception:  # noqa: BLE001 - likewise: _emit_op reports a failing factory
                continue
            if not isinstance(kernel, Constant):
                kernel = self._evaluate_on_constants(op, kernel)
            if isinstance(kernel, Constant):
                known[op.results[0]] = kernel.value
                self._folded[op] = kernel

    def _fold_reduce(self, op: Operation) -> None:
        """A reduce of known operands (its body capturing nothing) computed when lowering, with its kernel and
        its body compiled as at run time, in the program's denormal mode (XLA folds these too)."""
        known = self._known
        if (not all(v in known for v in op.operands) or _captured_values(op.regions[0]) or not is_pure(op)
                or not all(isinstance(r.type, TensorType) for r in op.results)):
            return
        try:
            self._check_result_sizes(op)
            body = self.namespace[self._emit_region(op.regions[0], {}, [], "")]
            kernel = KERNELS[type(op)](op, self)
            with np.errstate(all="ignore"), mode_switch(self.denormals):
                value = kernel(body, *[known[v] for v in op.operands])
        except Exception:  # noqa: BLE001 - reported where the op is emitted and runs, as before
            return
        values = [np.asarray(v) for v in (value if len(op.results) > 1 else [value])]
        if any(v.size > self._FOLD_LIMIT for v in values):
            return
        for v in values:
            v.flags.writeable = False  # shared by every call (as _evaluate_on_constants' values)
        for result, v in zip(op.results, values):
            known[result] = v
        self._folded[op] = Constant(values[0] if len(values) == 1 else tuple(values))

    def _fold_conditional(self, op: Operation) -> None:
        """A conditional whose selector is known when lowering and whose taken branch only returns known values
        (equinox's ``error_if`` on a condition that is constant: the branch that does not raise returns its
        operand) is those values, as XLA's conditional simplifier inlines it and folds what follows; the other
        branches (a host callback raising the error) never run, as at run time."""
        known = self._known
        if (not op.results or op.operands[0] not in known
                or not all(isinstance(r.type, TensorType) for r in op.results)):
            return
        selector = np.asarray(known[op.operands[0]])
        count = len(op.regions)
        if selector.dtype == np.bool_:
            branch = 0 if bool(selector) else 1  # (region 0 is the true branch)
        else:
            branch = int(selector)
            branch = branch if 0 <= branch < count else count - 1  # (XLA: an out-of-range index, the last)
        body = op.regions[branch].block
        returned = body.last_op
        if body.first_op is not returned or not all(v in known for v in returned.operands):
            return
        values = [known[v] for v in returned.operands]
        for result, value in zip(op.results, values):
            known[result] = value
        self._folded[op] = Constant(values[0] if len(values) == 1 else tuple(values))

    def _emit_op(self, op: Operation, names: dict[SSAValue, str], body: list[str], indent: str) -> None:
        if op in self._folded:  # computed ahead (_fold_ahead): bound as the constant it is
            self._bind_constant(op, self._folded[op], names, body, indent)
            return
        self._check_result_sizes(op)
        factory = KERNELS.get(type(op))
        if factory is None:
            hint = ""
            if op.name == "sdy.manual_computation":  # a shard_map over several devices, kept by the importer
                hint = ("; a shard_map over several devices runs partitioned through interop.compile_sharded, "
                        "or xla-run of its StableHLO (XLA's per-device program on N devices)")
            raise UnsupportedError(f"{op_context(op)}: the NumPy executor has no kernel for this op{hint}")
        try:
            kernel = factory(op, self)
        except XlaError:
            raise
        except Exception as e:
            raise ExecutionError(f"{op_context(op)}: lowering failed: {type(e).__name__}: {e}") from e
        if not isinstance(kernel, Constant):
            kernel = self._evaluate_on_constants(op, kernel) or kernel
        if isinstance(kernel, Constant):
            if len(op.results) == 1:
                self._known[op.results[0]] = kernel.value
            self._bind_constant(op, kernel, names, body, indent)
            return
        results = [f"v{next(self._names)}" for _ in op.results]
        for r, n in zip(op.results, results):
            names[r] = n
        region_names = []
        for region in op.regions:
            region_names.append(self._emit_region(region, names, body, indent))
        kname = self._bind("k", kernel)
        call_args = ", ".join([*region_names, *(names[v] for v in op.operands)])
        call = f"{kname}({call_args})"
        if not results:
            body.append(f"{indent}{call}  # {op.name}")
        elif len(results) == 1:
            body.append(f"{indent}{results[0]} = {call}  # {op.name}")
        else:
            body.append(f"{indent}{', '.join(results)}, = {call}  # {op.name}")
        self._emit_probe(op, results, body, indent)

    def _bind_constant(self, op: Operation, kernel: Constant, names: dict[SSAValue, str], body: list[str],
                       indent: str) -> None:
        """Emit ``op``'s results as the value of ``kernel``, computed when lowering."""
        results = [f"v{next(self._names)}" for _ in op.results]
        for r, n in zip(op.results, results):
            names[r] = n
        cname = self._bind("c", kernel.value)
        if len(results) == 1:
            body.append(f"{indent}{results[0]} = {cname}  # {op.name}")
        elif results:
            body.append(f"{indent}{', '.join(results)} = {cname}  # {op.name}")
        self._emit_probe(op, results, body, indent)

    probe = None
    """A recorder of intermediate values (``compile(probe=...)``; :mod:`interop.debugging.probes`) or None."""

    _PROBED_REGIONS = frozenset({WhileOp, ConditionalOp, AsyncStartOp})
    """Op classes whose regions run as program code, once per iteration or branch taken: their ops are probed. The
    regions of other ops (reduce, sort, scatter, map bodies) are applied per element or not called at all."""

    def _emit_probe(self, op: Operation, results: list[str], body: list[str], indent: str) -> None:
        """With a probe: after ``op``, hand its results to ``probe.record(op_id, *values)``, the values the
        kernel computed (no code at all without a probe: the normal path is unchanged)."""
        if self.probe is None or not results:
            return
        parent = op.parent_op()
        while parent is not None and not isinstance(parent, func.FuncOp):
            if type(parent) not in self._PROBED_REGIONS:
                return
            parent = parent.parent_op()
        pname = self._bind("probe", self.probe.record)
        body.append(f"{indent}{pname}({self.probe.register(op)}, {', '.join(results)})")

    _FOLD_LIMIT = 1 << 16
    """Most elements of a result computed at lowering time (a broadcast view counts as its operand)."""

    def _evaluate_on_constants(self, op: Operation, kernel) -> Constant | None:
        """``op``'s result as a :class:`Constant` when every operand is known when lowering and ``op`` is
        pure: the kernel runs once, here, in the program's denormal mode (so the bits are those of a
        call), instead of at every call (JAX programs broadcast many scalar constants). None otherwise,
        or when the kernel fails (the error then surfaces at run time, as it would have)."""
        known = self._known
        if (not op.operands or op.regions or len(op.results) != 1 or not isinstance(op.results[0].type, TensorType)
                or any(v not in known for v in op.operands) or not is_pure(op)):
            return None
        try:
            with np.errstate(all="ignore"), mode_switch(self.denormals):
                value = kernel(*[known[v] for v in op.operands])
        except Exception:
            return None
        if isinstance(value, np.generic):  # (a 0-d result, as kernels of scalars return it)
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            return None
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        if value.size > self._FOLD_LIMIT and base.size > self._FOLD_LIMIT:
            return None
        value = value.view()
        value.flags.writeable = False  # shared by every call: a result handed out is copied (_owned)
        return Constant(value)

    def _emit_unit(self, kind: str, prefix: str, ops: list[Operation], inputs: list[SSAValue], outputs: list[SSAValue],
                   make_runner: Callable, comment: str, names: dict[SSAValue, str], body: list[str],
                   indent: str) -> None:
        """Emit the call of a unit of several ops run as one (a fusion group, a compiled segment): the ops'
        own kernels in a function of their own, handed to ``make_runner`` (which returns the object that
        switches to compiled code), called with ``inputs`` and binding ``outputs``."""
        fname = f"{kind[0]}{next(self._names)}"
        inner_names = {v: f"i{k}" for k, v in enumerate(inputs)}
        lines = [f"def {fname}({', '.join(inner_names.values())}):"]
        for op in ops:  # values known when lowering (_fold_ahead) that the unit reads: constants, not inputs
            for inner in op.walk():
                for v in inner.operands:
                    if v not in inner_names and v in self._known and v.owner in self._folded:
                        inner_names[v] = self._bind("c", self._known[v])
        for op in ops:
            self._emit_op(op, inner_names, lines, "    ")
        lines.append(f"    return ({', '.join(inner_names[r] for r in outputs)},)")
        src = "\n".join(lines) + "\n"
        self.sources.append(src)
        exec(builtins.compile(src, f"<hlo {kind} {fname}>", "exec"), self.namespace)
        runner = self._bind(prefix, make_runner(self.namespace[fname]))
        results = [f"v{next(self._names)}" for _ in outputs]
        for r, n in zip(outputs, results):
            names[r] = n
        # (an input computed ahead and left unbound by _emit_block, as only folded ops read it: its constant)
        arguments = [names[v] if v in names else self._bind("c", self._known[v]) for v in inputs]
        body.append(f"{indent}{', '.join(results)}, = {runner}({', '.join(arguments)})  # {comment}")

    def _emit_group(self, group, names: dict[SSAValue, str], body: list[str], indent: str) -> None:
        """Emit the call of a fusion group (:mod:`lowering.executor.fusion`), run through a
        :class:`~lowering.executor.fusion.FusedGroup` that switches to the compiled kernel."""
        from .fusion import FusedGroup

        ops = ", ".join(op.name.removeprefix("hlo.") for op in group.members)
        self._emit_unit("fusion", "fz", group.members, group.inputs, group.outputs,
                        lambda fn: FusedGroup(fn, group, self.dtype, self.fusion, self.denormals == "flush",
                                              self.loop_workers, mode_switch(self.denormals)),
                        f"fused: {ops}", names, body, indent)

    def _emit_segment(self, segment, names: dict[SSAValue, str], body: list[str], indent: str) -> None:
        """Emit the call of a compiled segment (:mod:`lowering.executor.compiled_segments`), run through a
        :class:`~lowering.executor.compiled_segments.CompiledSegment` that switches to the numba function."""
        from .compiled_segments import CompiledSegment

        self._emit_unit("segment", "sg", segment.ops, segment.inputs, segment.outputs,
                        lambda fn: CompiledSegment(segment, fn, self.loop_compilation),
                        f"compiled segment of {len(segment.ops)} ops", names, body, indent)
        if self.timeout is not None:
            body.append(f"{indent}{self._bind('chk', interrupt.check)}('a compiled segment')")

    def _emit_region(self, region: Region, names: dict[SSAValue, str], body: list[str], indent: str) -> str:
        """Compile a single-block region to a function; returns its Python name."""
        if len(region.blocks) != 1:
            raise UnsupportedError(f"regions with {len(region.blocks)} blocks are not supported")
        block = region.block
        captured = _captured_values(region)
        rname = f"r{next(self._names)}"
        if not captured:
            lines: list[str] = []
            self._emit_block(block, rname, lines, indent="", is_function=False, outer={})
            src = "\n".join(lines) + "\n"
            self.sources.append(src)
            exec(builtins.compile(src, f"<hlo region {rname}>", "exec"), self.namespace)
            return rname
        outer = {v: names[v] for v in captured}
        lines = []
        self._emit_block(block, rname, lines, indent=indent, is_function=False, outer=outer)
        body.extend(lines)
        return rname


def _cut_group(group, position: dict, block: Block, computed_elsewhere: set, cuts: list[int]) -> list:
    """``group`` (a :class:`lowering.executor.fusion_plan.Group`) without its members in ``computed_elsewhere`` (a compiled
    segment's), cut there and at the positions ``cuts``: the groups of its pieces of at least ``MIN_GROUP`` ops
    with an element-wise member and a value used outside them (``[group]`` when nothing cuts it)."""
    if not cuts and computed_elsewhere.isdisjoint(group.members):
        return [group]
    from xla_dialect.ops.reduction import ReduceOp

    from .fusion_plan import MIN_GROUP, Group

    pieces: list[list[Operation]] = [[]]
    bounds = sorted(set(cuts))
    for member in group.members:
        while bounds and position[member] >= bounds[0]:
            bounds.pop(0)
            pieces.append([])
        if member in computed_elsewhere:
            pieces.append([])
            continue
        pieces[-1].append(member)
    out = []
    for members in pieces:
        # (a row reduction reduces a value of its own group: one whose operand a cut left in another piece goes)
        produced = {r for m in members for r in m.results}
        members = [m for m in members if not isinstance(m, ReduceOp) or m.operands[0] in produced]
        if len(members) >= MIN_GROUP and not all(isinstance(m, ReduceOp) for m in members):
            piece = Group(members, position[members[0]], position[members[-1]], block)
            if piece.outputs:
                out.append(piece)
    return out


def _last_uses(block: Block) -> dict[SSAValue, int]:
    """Value -> index (in ``block``) of the last op using it, counting nested uses."""
    index_of = {}
    for i, op in enumerate(block.ops):
        for v in _all_operands(op):
            index_of[v] = i
    return index_of


def _all_operands(op: Operation):
    yield from op.operands
    for region in op.regions:
        for inner in region.walk():
            yield from inner.operands


def _captured_values(region: Region) -> list[SSAValue]:
    """Values used inside ``region`` but defined outside it (in order of first use)."""
    inside: set[SSAValue] = set()
    for block in region.blocks:
        inside.update(block.args)
    for op in region.walk():
        inside.update(op.results)
        for r in op.regions:
            for b in r.blocks:
                inside.update(b.args)
    seen: dict[SSAValue, None] = {}
    for op in region.walk():
        for v in op.operands:
            if v not in inside:
                seen.setdefault(v, None)
    return list(seen)


def _argument_array(value, dtype: np.dtype, conversion: str, error) -> np.ndarray:
    """``value`` as an array of ``dtype`` under the executable's ``argument_conversion`` rule (see
    :func:`compile`); ``error(what)`` makes the exception to raise."""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype == dtype:
            return arr
        if arr.dtype == object:
            raise error("got an object array")
        if conversion == "exact":
            raise error(f"got dtype {arr.dtype} (pass {dtype} arrays, or compile with argument_conversion="
                        f"'lossless' or 'cast')")
        if conversion == "cast":
            with np.errstate(all="ignore"):
                return arr.astype(dtype)
    else:  # Python numbers, lists, ...: converted when every value survives the conversion
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise error(f"got {type(value).__name__} that is not an array ({e})") from None
        if arr.dtype == object or arr.dtype.kind not in "biufc":
            raise error(f"got {type(value).__name__} holding {arr.dtype} values")
        if conversion == "cast":
            with np.errstate(all="ignore"):
                return arr.astype(dtype)
    with np.errstate(all="ignore"):
        converted = arr.astype(dtype)
        back = converted.astype(arr.dtype)
    same = (back == arr) | (np.isnan(back) & np.isnan(arr)) if arr.dtype.kind in "fc" else back == arr
    if dtype.kind in "iub" and arr.dtype.kind in "fc":
        same &= np.isfinite(arr)
    if not np.all(same):
        bad = arr.flat[int(np.argmin(np.asarray(same).ravel()))]
        raise error(f"got {arr.dtype} values that {dtype} cannot hold exactly (e.g. {bad!r}); "
                    f"pass argument_conversion='cast' to lowering.compile to convert anyway")
    return converted


def _flat_types(types: Sequence[Attribute]) -> list[Attribute]:
    out: list[Attribute] = []
    for t in types:
        if isinstance(t, TupleType):
            out.extend(_flat_types(list(t.types)))
        else:
            out.append(t)
    return out


def _flatten(value, out: list) -> None:
    if isinstance(value, tuple):
        for v in value:
            _flatten(v, out)
    else:
        out.append(value)


class Executable:
    """A compiled hlo program. Call it with NumPy arrays; get a tuple of arrays.

    ``source`` holds the generated Python code. ``infeed``, ``outfeed`` and
    ``channels`` are the host-side queues of :mod:`lowering.runtime.program_state`. ``from_cache`` says whether
    it was loaded from the cache of compiled programs (:mod:`lowering.executor.executable_cache`).
    """

    def __init__(self, fn, entry: func.FuncOp, source: str, runtime: Runtime | None = None,
                 blas_threads: int | None = None, denormals: str = "keep", options: CompileOptions | None = None):
        self._fn = fn
        if options is not None:
            denormals = options.denormals
        # The CPU's denormal mode for the call ("flush": XLA's FTZ/DAZ; lowering.runtime.denormals).
        self.denormals = denormals
        self._denormal_mode = mode_switch(denormals)
        # Held for the whole call: one BLAS limit per call instead of one per matmul (lowering.runtime.blas).
        self._blas_limit = contextlib.nullcontext() if blas_threads is None else BlasThreadLimit(blas_threads)
        self.runtime = runtime if runtime is not None else Runtime()
        self.infeed = self.runtime.infeed
        self.outfeed = self.runtime.outfeed
        self.channels = self.runtime.channels
        self.entry = entry
        self.source = source
        self.input_types = list(entry.function_type.inputs)
        self.output_types = list(entry.function_type.outputs)
        self._in_specs = [self._spec(t) for t in self.input_types]
        self._out_dtypes = [None if isinstance(t, TokenType) else numpy_dtype(t) for t in _flat_types(self.output_types)]
        self._single = len(self.output_types) == 1
        self._first_call = True  # (it generates and loads most of the compiled code: with fewer collections)
        # How arguments of another dtype are treated: "exact", "lossless" or "cast" (see compile()).
        self.argument_conversion = options.argument_conversion if options is not None else "exact"
        self.timeout = options.timeout if options is not None else None  # seconds per call (lowering.runtime.interrupt)
        # Whether lowering.compile loaded this executable from the cache of compiled programs instead of lowering
        # the module (lowering.executor.executable_cache; why not: executable_cache.last_miss).
        self.from_cache = False

    @staticmethod
    def _spec(t: Attribute):
        if isinstance(t, TensorType):
            return (t.get_shape(), numpy_dtype(t))
        return None

    def _check_args(self, args) -> list:
        if len(args) != len(self.input_types):
            raise ExecutionError(
                f"@{self.entry.sym_name.data} takes {len(self.input_types)} arguments "
                f"({', '.join(format_shape(t) for t in self.input_types)}), got {len(args)}"
            )
        checked = []
        for i, (a, spec, t) in enumerate(zip(args, self._in_specs, self.input_types)):
            if spec is None:
                checked.append(a)
                continue
            shape, dtype = spec
            arr = _argument_array(a, dtype, self.argument_conversion,
                                  lambda what: ExecutionError(f"@{self.entry.sym_name.data} argument #{i}: expected "
                                                              f"{format_shape(t, False)} ({dtype}), {what}"))
            if arr.shape != shape:
                raise ExecutionError(
                    f"@{self.entry.sym_name.data} argument #{i}: expected {format_shape(t, False)}, "
                    f"got an array of shape {list(arr.shape)}"
                )
            checked.append(arr)
        return checked

    def __call__(self, *args) -> tuple[np.ndarray, ...]:
        if self._first_call:
            self._first_call = False
            with fewer_collections():
                return self._call(args)
        return self._call(args)

    def _call(self, args) -> tuple[np.ndarray, ...]:
        checked = self._check_args(args)
        interrupt.start(self.timeout)
        try:
            with np.errstate(all="ignore"), self._blas_limit, self._denormal_mode:
                result = self._fn(*checked)
        finally:
            interrupt.finish()
        flat: list = []
        if self._single:
            _flatten(result, flat)
        else:
            for r in result:
                _flatten(r, flat)
        return tuple(
            v if dt is None else _owned(v if type(v) is np.ndarray and v.dtype == dt else np.asarray(v, dtype=dt),
                                        checked)
            for v, dt in zip(flat, self._out_dtypes)
        )


def _owned(v: np.ndarray, args: Sequence) -> np.ndarray:
    """``v``, copied if the caller could not safely keep and write it.

    Kernels may return read-only views (np.broadcast_to, constants) or views of
    their inputs (transpose, slice, reshape); inside a program that is free, but
    a result handed out must be writable and must not alias the caller's arguments.
    """
    if not v.flags.writeable:
        return v.copy()
    if v.flags.owndata:  # (its own buffer: it shares memory with an argument only by being that argument)
        return v.copy() if any(v is a for a in args) else v
    if any(isinstance(a, np.ndarray) and np.may_share_memory(v, a) for a in args):
        return v.copy()
    return v


def compile(module: ModuleOp, entry: str | Sequence[Sequence[str]] = "main",  # noqa: A001
            options: CompileOptions | None = None, **shortcuts):
    """Lower ``module`` once and return an :class:`Executable` for function ``entry``.

    The options below are the fields of :class:`lowering.runtime.options.CompileOptions`: pass one object as
    ``options``, or any of them as keywords (``lowering.compile(module, denormals="keep")``), or both (the
    keywords replace the object's fields). They are resolved and validated once, in the object.

    With ``num_replicas * num_partitions > 1`` the result is a
    :class:`lowering.executor.multi_device.MultiDeviceExecutable`: called with one argument
    list per device, it returns one result tuple per device. ``entry`` may also
    name one function per device, as a grid with one row per replica and one
    column per partition (``[["sender"], ["receiver"]]``: two replicas running
    different programs, which share channels and feeds); the grid's size is
    the number of replicas and partitions.

    ``blas_threads`` is the number of BLAS threads the float matmuls of dot,
    dot_general and convolution run with. None (the default) is automatic:
    a thread count set in the environment (``OPENBLAS_NUM_THREADS``, ...) is
    respected, otherwise one thread on machines with at most two CPUs (where
    multi-threaded OpenBLAS is fragile under load) and the BLAS's own setting
    on larger ones. OpenBLAS's f32 results may differ in the last bits between
    thread counts. See :mod:`lowering.runtime.blas`.

    ``denormals`` says how denormal floats are treated: ``"flush"`` as XLA's
    CPU runtime does (denormal inputs of arithmetic read as 0, denormal
    results become 0; data movement keeps them), ``"keep"`` as IEEE (gradual
    underflow), None (the default) "flush" where the CPU's mode can be set,
    else "keep". See :mod:`lowering.runtime.denormals`.

    ``xla_rewrites`` (default True) first applies the float-result-changing
    rewrites of XLA's algebraic simplifier (``x / c`` -> ``x * (1/c)``, ...;
    see :mod:`passes.xla_numerics`), as jax.jit does; False computes every
    op literally (IEEE).

    ``fma_contraction`` (default True) computes ``a*b + c`` (f32/f64; also
    ``a*b - c``, ``c - a*b``) as one fused multiply-add where XLA CPU's
    compiler contracts it (see :mod:`passes.fma_contraction`: f16 too on hosts with AVX512-FP16); False rounds twice.

    ``loop_compilation`` says when ``hlo.while`` loops are compiled to machine code with numba (same
    results, nanoseconds per iteration; see :mod:`lowering.executor.compiled_loops`): ``"auto"`` (None, the
    default) once a loop has run 2,000 iterations, ``"always"`` on its first run, ``"never"``.

    ``argument_conversion`` says what a call does with an argument whose dtype is not the parameter's:
    ``"exact"`` (the default) rejects NumPy arrays and scalars of another dtype and converts Python numbers
    and lists only when every value survives (``2.0`` for an f32 parameter, not ``0.1`` or ``2**40`` for
    s32); ``"lossless"`` converts any argument whose values all survive; ``"cast"`` converts as NumPy's
    ``astype`` does (wrapping, rounding, overflowing to inf). Lossy conversion is never silent otherwise.

    ``max_bytes`` bounds the size of every array the program computes (checked when it is lowered, as
    shapes are static): a larger result is a ``ResourceLimitError`` naming the op and the size. None: the
    default of :mod:`xla_dialect.limits` (``$XLA_DIALECT_MAX_BYTES``, else half the physical memory).

    ``timeout`` (seconds) bounds each call: the program checks the clock after every op and loop iteration
    and raises :class:`lowering.runtime.interrupt.ExecutionTimeout` once past it (see :mod:`lowering.runtime.interrupt`);
    None (the default) generates no checks.

    ``fusion`` says when runs of element-wise ops are computed as one numba-compiled loop (same results,
    one pass over memory; see :mod:`lowering.executor.fusion`): ``"auto"`` (None, the default) once a group has
    been called 20 times or has processed 4M elements, ``"always"`` at its first call, ``"never"``.

    ``executable_cache`` (None by default: on, unless ``$XLA_DIALECT_EXECUTABLE_CACHE`` is 0) stores the executable
    and loads it at a later compilation of the same module with the same options, in any process (see
    :mod:`lowering.executor.executable_cache`); the executable's ``from_cache`` says whether it was loaded.

    ``probe`` (None by default) records intermediate values: an object with ``register(op) -> int`` (called
    once per op when lowering) and ``record(op_id, *results)`` (called after each op of a function body and
    of while/conditional regions, every time it runs, with the values its kernel computed). With a probe,
    fusion and loop compilation are off, so that every op runs as its own kernel. See
    :func:`interop.debugging.trace`.
    """
    with fewer_collections():  # (collection_pause: compiling makes many short-lived objects)
        return _compile(module, entry, options, shortcuts)


def _compile(module: ModuleOp, entry, options: CompileOptions | None, shortcuts: dict):
    """:func:`compile`, within its pause of the garbage collector."""
    from .. import kernels  # noqa: F401  (registers every kernel family)

    if isinstance(entry, CompileOptions) and options is None:  # compile(module, options)
        entry, options = "main", entry
    if options is not None and not isinstance(options, CompileOptions):
        CompileOptions.of(options)  # (raises the error naming the option)
    num_replicas = shortcuts.get("num_replicas", options.num_replicas if options is not None else 1)
    num_partitions = shortcuts.get("num_partitions", options.num_partitions if options is not None else 1)
    if not isinstance(entry, str):  # one program per device: a grid of function names, replicas x partitions
        grid = [list(row) for row in entry] if isinstance(entry, (list, tuple)) else []
        if (not grid or not all(isinstance(row, list) and row and len(row) == len(grid[0]) for row in grid)
                or not all(isinstance(name, str) for row in grid for name in row)):
            raise ExecutionError("lowering.compile: entry must be a function name or a non-empty rectangular grid "
                                 f"of names (one row per replica, one column per partition), got {entry!r}")
        if (num_replicas, num_partitions) == (1, 1):
            num_replicas, num_partitions = len(grid), len(grid[0])
        if (num_replicas, num_partitions) != (len(grid), len(grid[0])):
            raise ExecutionError(f"lowering.compile: the entry grid is {len(grid)} x {len(grid[0])}, but "
                                 f"num_replicas x num_partitions is {num_replicas} x {num_partitions}")
        entry = grid
        shortcuts = {**shortcuts, "num_replicas": num_replicas, "num_partitions": num_partitions}
    # every option resolved and validated once, before the (possibly long) verification
    options = CompileOptions.of(options, **shortcuts)

    if not isinstance(module, ModuleOp):
        raise ExecutionError(f"lowering.compile expects an xDSL ModuleOp, got {type(module).__name__}")
    from . import executable_cache

    cache_key, caller_module = None, module
    if isinstance(entry, str):  # (compiled before, by this process or an earlier one: loaded, nothing lowered)
        cache_key, cached = executable_cache.lookup(module, entry, options)
        if cached is not None:
            return _stored_executable(cached, options, from_cache=True)
    lowering_began = time.perf_counter()
    try:
        module.verify()
    except XlaError:
        raise
    except Exception as e:
        raise ExecutionError(f"the module does not verify: {e}") from None
    from .dynamic_shapes import resolve_dynamic_sizes

    module = resolve_dynamic_sizes(module)  # XLA's bounded dynamic dimensions (HLO text): sizes, or an error
    # The executor pipeline (passes.pipelines): implicit broadcasts made explicit, XLA's float rewrites,
    # XLA CPU's FMA contraction, quantized ops as float ops; on a copy, the caller's module is never changed.
    from passes.pipelines import prepare_for_execution

    module = prepare_for_execution(module, options.xla_rewrites, options.fma_contraction)
    ctx = LoweringContext(module, options=options)  # (with a probe: every op as its own kernel, loops in Python)
    names = [entry] if isinstance(entry, str) else [name for row in entry for name in row]
    for name in dict.fromkeys(names):
        if name not in ctx.functions:
            raise ExecutionError(f"no function @{name} in the module (have: {', '.join(ctx.functions) or 'none'})")
        ctx.function(name)
    executables = {}
    for name in dict.fromkeys(names):  # after lowering them all: one source and BLAS policy for the grid
        executable = executables[name] = Executable(ctx.function(name), ctx.functions[name], "\n".join(ctx.sources),
                                                    ctx.runtime, ctx.blas_threads if ctx.limits_blas else None,
                                                    options=options)
    num_replicas, num_partitions = options.num_replicas, options.num_partitions
    if num_replicas * num_partitions == 1:
        if cache_key is not None:
            read_back = executable_cache.store(cache_key, caller_module, names[0], ctx, executables[names[0]],
                                               time.perf_counter() - lowering_began)
            if read_back is not None:  # (XLA_DIALECT_EXECUTABLE_CACHE=roundtrip)
                return _stored_executable(read_back, options, from_cache=False)
        return executables[names[0]]
    from .multi_device import MultiDeviceExecutable

    per_device = executables[entry] if isinstance(entry, str) else [executables[name] for name in names]
    return MultiDeviceExecutable(per_device, num_replicas, num_partitions)


def _stored_executable(parts, options: CompileOptions, from_cache: bool) -> Executable:
    """The :class:`Executable` of an executable's stored parts (:mod:`lowering.executor.executable_cache`)."""
    fn, function, source, runtime, limits_blas = parts
    executable = Executable(fn, function, source, runtime, options.blas_thread_count if limits_blas else None,
                            options=options)
    executable.from_cache = from_cache
    return executable
