"""Check ops at the MLIR level (:func:`prepare_module`): the program is parsed with jaxlib, each check op
is taken out and its operands become extra results of the tested function (:func:`extract_checks`), so the
importer sees plain StableHLO; ``interpreter.run_parallel`` becomes a device program on a replica x partition
grid between a prologue and an epilogue; ``interpreter.probe`` values are recorded while the program runs."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

import numpy as np

from lowering.runtime.program_state import register_custom_call

from .records import ConformanceError
from .comparators import CHECKS, CheckSpec


@dataclass
class Check:
    """One check op taken out of a program: its kind and where its operands are among the results."""

    form: str  # 'op' | 'custom_call'
    kind: str  # 'expect_eq', 'expect_close', ...
    attributes: dict
    first: int  # index of its first operand among the tested function's results
    count: int
    where: str  # 'check.expect_eq at line 12'
    probed: bool = False  # expect_serialized_eq of a probe in a region: the actual value is in _PROBED

    @property
    def spec(self) -> CheckSpec:
        """The :class:`CheckSpec` of this check."""
        return CHECKS[(self.form, self.kind)]


def _ir():
    from jaxlib.mlir import ir

    return ir


def _attribute_value(attr):
    """A Python value for a scalar attribute (int, float, bool, string); else the attribute's text."""
    ir = _ir()
    for cls in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
        if isinstance(attr, cls):  # jaxlib hands out attributes downcast to their class
            return attr.value
    return str(attr)


def _line_of(op, offset: int) -> str:
    """`` at line N`` from an op's ``loc("-":N:col)`` location (shifted to the file's numbering), or ''."""
    m = re.search(r":(\d+):\d+", str(op.location))
    return f" at line {int(m.group(1)) + offset}" if m else ""


def _functions(module) -> dict:
    return {op.attributes["sym_name"].value: op for op in module.body.operations
            if op.operation.name == "func.func"}


def _check_kind(op) -> tuple[str, str] | None:
    name = op.name
    if name.startswith("check."):
        return "op", name[len("check."):]
    if name == "stablehlo.custom_call":
        target = _ir().StringAttr(op.attributes["call_target_name"]).value
        if target.startswith("check."):
            return "custom_call", target[len("check."):]
    return None


def _set_results(fop, values: list) -> None:
    """Make ``values`` the results of ``func.func`` op ``fop`` (replacing its terminator)."""
    ir = _ir()
    from jaxlib.mlir.dialects import func

    block = fop.regions[0].blocks[0]
    old = list(block.operations)[-1]
    with ir.InsertionPoint(old.operation):
        func.ReturnOp(values)
    old.operation.erase()
    ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
    inputs = [a.type for a in block.arguments]
    fop.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [v.type for v in values]))
    if "res_attrs" in fop.attributes:
        old_attrs = list(ir.ArrayAttr(fop.attributes["res_attrs"]))
        keep = old_attrs[:len(ftype.results)]
        keep += [ir.DictAttr.get({})] * (len(values) - len(keep))
        fop.attributes["res_attrs"] = ir.ArrayAttr.get(keep[:len(values)])


def extract_checks(fop, line_offset: int = 0) -> list[Check]:
    """Remove the check ops of ``func.func`` op ``fop``; their operands become extra results.

    The ``tensor<i1>`` result of ``custom_call @check.eq`` is replaced by ``true``
    (the runner evaluates the check itself). Returns the checks in program order.
    """
    ir = _ir()
    from jaxlib.mlir.dialects import stablehlo

    block = fop.regions[0].blocks[0]
    # Only the count: the returned values may change below (check.eq verdicts are replaced).
    returned = len(list(block.operations)[-1].operands)
    extra: list = []
    checks: list[Check] = []
    probes: dict[str, object] = {}  # probe_id -> the probed value
    in_regions = _probes_in_regions(fop, line_offset)
    for view in list(block.operations):
        op = view.operation
        if op.name in ("interpreter.probe", "interpreter.print"):
            # probe: its result is its operand, recorded for check.expect_serialized_eq; print: nothing to run.
            if op.name == "interpreter.probe":
                probe_id = _attribute_value(op.attributes["probe_id"])
                if probe_id in probes:
                    raise ConformanceError(f"interpreter.probe{_line_of(op, line_offset)}: probe '{probe_id}' is "
                                           "written more than once (only first iterations are supported)")
                probes[probe_id] = op.operands[0]
                op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
            continue
        found = _check_kind(op)
        if found is None:
            continue
        form, kind = found
        where = f"{'custom_call @' if form == 'custom_call' else ''}check.{kind}{_line_of(op, line_offset)}"
        spec = CHECKS.get((form, kind))
        if spec is None:
            raise ConformanceError(f"{where}: this check is not supported by the runner")
        attrs = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
        operands = list(op.operands)
        if kind == "expect_serialized_eq":
            # Compares the probed value (the "actual") with its operand.
            probe_id = _attribute_value(attrs["probe_id"]) if "probe_id" in attrs else None
            iteration = _attribute_value(attrs["iter"]) if "iter" in attrs else 0
            if probe_id in in_regions:  # recorded while running: the check reads _PROBED (Check.probed)
                operands = [None] + operands
            elif probe_id not in probes or iteration != 0:
                raise ConformanceError(f"{where}: no value probed as '{probe_id}' before it")
            else:
                operands = [probes[probe_id]] + operands
        if len(operands) != spec.operands:
            raise ConformanceError(f"{where}: expected {spec.operands} operands, got {len(operands)}")
        with ir.InsertionPoint(op), op.location:
            for r in op.results:  # custom_call @check.eq returns its verdict: true here
                true = ir.DenseElementsAttr.get_splat(r.type, ir.BoolAttr.get(True))
                r.replace_all_uses_with(stablehlo.ConstantOp(true).result)
        values = {k: _attribute_value(v) for k, v in attrs.items() if k not in ("value", "call_target_name")}
        probed = operands[0] is None
        if probed:
            operands = operands[1:]
        checks.append(Check(form, kind, values, returned + len(extra), len(operands), where, probed))
        extra.extend(operands)
        op.erase()
    if checks:
        _set_results(fop, list(list(block.operations)[-1].operands) + extra)
    return checks


PROBE_TARGET = "interpreter.probe"
"""Custom-call target an ``interpreter.probe`` inside a region becomes: it records each value it sees."""

_PROBED: dict[str, list[np.ndarray]] = {}
"""probe_id -> the values an in-region probe recorded in the run in progress, in order (one per iteration)."""
_PROBE_LOCK = threading.Lock()


def _record_probe(operands, attributes, result_types):
    """The :data:`PROBE_TARGET` custom call: append the operand to its probe's values, return it."""
    with _PROBE_LOCK:
        _PROBED.setdefault(str(attributes["backend_config"]), []).append(np.array(operands[0]))
    return operands[0]


register_custom_call(PROBE_TARGET, _record_probe)


def _probes_in_regions(fop, line_offset: int) -> set[str]:
    """Make every ``interpreter.probe`` inside a region of ``fop`` (a loop body, a branch) a
    :data:`PROBE_TARGET` custom call with side effects, which records the value of every execution;
    return their probe ids (``check.expect_serialized_eq ... iter = N`` reads the N-th value)."""
    ir = _ir()
    nested: list = []

    def visit(op):
        if op.operation.name == "interpreter.probe" and op.operation.parent is not None \
                and op.operation.parent.operation != fop.operation:
            nested.append(op.operation)
        return ir.WalkResult.ADVANCE

    fop.operation.walk(visit)
    ids = set()
    for op in nested:
        probe_id = _attribute_value(op.attributes["probe_id"])
        if probe_id in ids:
            raise ConformanceError(f"interpreter.probe{_line_of(op, line_offset)}: probe '{probe_id}' is written "
                                   "by more than one op")
        ids.add(probe_id)
        with ir.InsertionPoint(op), op.location:
            call = ir.Operation.create("stablehlo.custom_call", results=[op.results[0].type],
                                       operands=[op.operands[0]],
                                       attributes={"call_target_name": ir.StringAttr.get(PROBE_TARGET),
                                                   "has_side_effect": ir.BoolAttr.get(True),
                                                   "backend_config": ir.StringAttr.get(probe_id)})
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
    return ids


def _remaining_checks(module) -> list[str]:
    """Names of check ops left anywhere in ``module`` (in regions or other functions)."""
    left: list[str] = []

    def visit(op):
        found = _check_kind(op.operation)
        if found is not None:
            left.append(f"check.{found[1]}")
        return _ir().WalkResult.ADVANCE

    module.operation.walk(visit)
    return left


@dataclass
class Parallel:
    """An ``interpreter.run_parallel`` op: the device program and its grid."""

    programs: list[list[str]]  # the function each device runs: one row per replica, one column per partition
    num_replicas: int
    num_partitions: int
    operand_counts: list[int]  # arguments of each device's program, device order
    result_counts: list[int]
    infeed: list[str] = field(default_factory=list)  # functions whose results fill the infeed queue, in order


@dataclass
class Prepared:
    """A program ready for the importer: checks extracted, harness ops removed."""

    module: object  # jaxlib ir.Module
    entry: str
    checks: list[Check]
    prologue: object | None = None  # ir.Module computing run_parallel's operands (entry @main)
    parallel: Parallel | None = None


def _entry_function(functions: dict) -> str:
    if "main" in functions:
        return "main"
    with_checks = [name for name, f in functions.items() if any(_check_kind(op.operation) for op in
                                                                  f.regions[0].blocks[0].operations)]
    if len(with_checks) == 1:
        return with_checks[0]
    public = [n for n, f in functions.items() if "sym_visibility" not in f.attributes
              or f.attributes["sym_visibility"].value == "public"]
    if len(public) == 1:
        return public[0]
    raise ConformanceError(f"cannot tell which function to run (no @main; functions: {', '.join(functions)})")


def _run_parallel_op(fop):
    ops = [op.operation for op in fop.regions[0].blocks[0].operations if op.operation.name == "interpreter.run_parallel"]
    if len(ops) > 1:
        raise ConformanceError("more than one interpreter.run_parallel in a function is not supported")
    return ops[0] if ops else None


def _parallel_of(op, functions: dict) -> Parallel:
    ir = _ir()
    grid = [[ir.FlatSymbolRefAttr(p).value for p in ir.ArrayAttr(row)]
            for row in ir.ArrayAttr(op.attributes["programs"])]
    if len({len(row) for row in grid}) != 1 or not grid[0]:
        raise ConformanceError("interpreter.run_parallel: the programs grid must be rectangular and not empty")
    types = []
    for name in (n for row in grid for n in row):  # device order: replica-major
        if name not in functions:
            raise ConformanceError(f"interpreter.run_parallel: no function @{name}")
        types.append(ir.FunctionType(ir.TypeAttr(functions[name].attributes["function_type"]).value))
    if len(op.operands) != sum(len(t.inputs) for t in types) or len(op.results) != sum(len(t.results) for t in types):
        raise ConformanceError("interpreter.run_parallel: operand/result counts do not match the programs")
    infeed = [ir.FlatSymbolRefAttr(f).value for f in ir.ArrayAttr(op.attributes["infeed"])] \
        if "infeed" in op.attributes else []
    for name in infeed:
        if name not in functions:
            raise ConformanceError(f"interpreter.run_parallel: no infeed function @{name}")
    return Parallel(grid, len(grid), len(grid[0]), [len(t.inputs) for t in types], [len(t.results) for t in types],
                    infeed)


def _wrap_entry(module, fop, args_text: str | None, expected: list[str]) -> str:
    """Add ``@__conformance_main``: calls ``fop`` on constant arguments and checks its results.

    ``args_text`` is the ``--args`` list of a RUN line (``[dense<1> :
    tensor<2xi32>, ...]``); ``expected`` holds one dense literal per result
    (what the interpreter prints, read from the file's CHECK lines), checked
    with ``check.expect_eq``.
    """
    ir = _ir()
    from jaxlib.mlir.dialects import func, stablehlo

    name = fop.attributes["sym_name"].value
    ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
    args = list(ir.ArrayAttr(ir.Attribute.parse(args_text))) if args_text is not None else []
    if len(args) != len(ftype.inputs):
        raise ConformanceError(f"@{name} takes {len(ftype.inputs)} arguments; the RUN line gives {len(args)}")
    if expected and len(expected) != len(ftype.results):
        raise ConformanceError(f"@{name} has {len(ftype.results)} results; the CHECK lines show {len(expected)}")
    with ir.InsertionPoint(module.body):
        wrapper = func.FuncOp("__conformance_main", ([], list(ftype.results)))
        block = wrapper.add_entry_block()
    with ir.InsertionPoint(block):
        values = [stablehlo.ConstantOp(a).result for a in args]
        results = list(func.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get(name), values).results)
        for r, text in zip(results, expected):
            # (Parsed as an op: jaxlib's Python bindings cannot hand out a complex dense attribute.)
            constant = ir.Operation.parse(f'"stablehlo.constant"() {{value = {text}}} : () -> '
                                          f'{text.rsplit(" : ", 1)[1]}')
            ir.InsertionPoint(block).insert(constant)
            value = constant.result
            ir.Operation.create("check.expect_eq", results=[], operands=[r, value])
        func.ReturnOp(results)
    return "__conformance_main"


def prepare_module(text: str, line_offset: int = 0, args_text: str | None = None,
                   expected: list[str] | None = None, entry: str | None = None) -> Prepared:
    """Parse a (normalized) program with jaxlib and take its check and harness ops out.

    ``args_text`` (the ``--args`` list of a RUN line) and ``expected`` (dense
    literals of the printed results) make a wrapper the entry point (see
    :func:`_wrap_entry`). ``line_offset`` is added to line numbers in messages.
    """
    ir = _ir()
    from ...stablehlo import parse_stablehlo
    from ...stablehlo.context import mlir_context

    module = parse_stablehlo(text)
    ctx = mlir_context()
    with ctx, ir.Location.unknown():
        functions = _functions(module)
        if entry is not None:
            if entry not in functions:
                raise ConformanceError(f"no function @{entry} in the program")
            # One program per checked function: the other checked functions are other programs.
            for name in [n for n in functions if n != entry]:
                if any(_check_kind(op.operation) for op in functions[name].regions[0].blocks[0].operations):
                    functions.pop(name).operation.erase()
        entry = entry or _entry_function(functions)
        fop = functions[entry]
        if entry != "main" and "main" not in functions:
            # The importer expands chlo ops through XLA, which wants an entry named main.
            fop.attributes["sym_name"] = ir.StringAttr.get("main")
            functions["main"] = functions.pop(entry)
            entry = "main"
        if args_text is not None or expected:
            entry = _wrap_entry(module, fop, args_text, expected or [])
            fop = _functions(module)[entry]
        parallel_op = _run_parallel_op(fop)
        if parallel_op is None:
            checks = extract_checks(fop, line_offset)
            left = _remaining_checks(module)
            if left:
                raise ConformanceError(f"{len(left)} check ops outside the body of @{entry} ({left[0]}) are not "
                                       "supported")
            return Prepared(module, entry, checks)
        parallel = _parallel_of(parallel_op, functions)
        # Epilogue: @entry takes run_parallel's results as arguments and checks them.
        block = fop.regions[0].blocks[0]
        for r in list(parallel_op.results):
            r.replace_all_uses_with(block.add_argument(r.type, parallel_op.location))
        parallel_op.erase()
        checks = extract_checks(fop, line_offset)
        if not checks:
            _set_results(fop, list(list(block.operations)[-1].operands))  # the new arguments in its type
        # Prologue: a second copy of the program whose @entry stops at run_parallel and returns its operands.
        prologue = parse_stablehlo(text)
        pfop = _functions(prologue)[entry]
        pblock = pfop.regions[0].blocks[0]
        pop = _run_parallel_op(pfop)
        operands = list(pop.operands)
        ops = list(pblock.operations)
        index = next(i for i, o in enumerate(ops) if o.operation == pop)
        if any(_check_kind(o.operation) for o in ops[:index]):
            raise ConformanceError("check ops before interpreter.run_parallel are not supported")
        from jaxlib.mlir.dialects import func

        with ir.InsertionPoint(pop):
            func.ReturnOp(operands)
        for o in reversed(ops[index:]):
            o.operation.erase()
        pfop.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], [v.type for v in operands]))
        if "res_attrs" in pfop.attributes:
            del pfop.attributes["res_attrs"]
        return Prepared(module, entry, checks, prologue=prologue, parallel=parallel)
