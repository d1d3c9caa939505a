"""``xla-reduce``: shrink a program while it stays interesting (delta debugging), keep the smallest.

A program is *interesting* when a test says so: a command (``CMD candidate.mlir`` exits 0) or a built-in
test, run in this process: ``crash`` (compiling or running it on generated inputs raises the same kind of
error as the original), ``mismatch-vs-jax`` (the executor's results differ from XLA CPU's beyond difftest's
budgets) or ``pass-changes`` (a pass of a pipeline changes its results, :func:`check_semantics`).

The reductions, each tried on a copy that must verify before it is tested:

1. results: keep a subset of the entry function's results (ddmin), or return the results of the earliest op
   that keeps the program interesting instead; dead code then goes;
2. ops: cut sets of the entry function's ops (ddmin): an op cut is removed and its results become new
   parameters of the function, so everything computing only its operands dies too;
3. regions and operands: a conditional is replaced by one of its branches, a while loop by one run of its
   body, in line; an op inside a region (or left at the top) is bypassed, its result replaced by an operand
   or block argument of the same type, or by a constant zero;
4. constants: a constant array becomes a splat of its first element, then of zero;
5. shapes: every dimension of one size made 1, 2 or half as large, all at once (from the program's text:
   ops whose attributes do not fit the new shapes fail to verify, and that candidate is dropped);

then unused parameters and functions are dropped. Every step keeps the program interesting.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import Block, Operation
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.errors import XlaError
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import ConditionalOp, ReturnOp, WhileOp

__all__ = ["ReduceResult", "command_test", "crash_test", "mismatch_vs_jax_test", "pass_changes_test",
           "reduce_program", "write_pytest"]


@dataclass
class ReduceResult:
    """The smallest interesting program found, with the counts of ops before and after."""

    module: ModuleOp
    ops_before: int
    ops_after: int
    candidates: int
    seconds: float

    def __str__(self) -> str:
        return (f"reduced {self.ops_before} ops to {self.ops_after} in {self.seconds:.1f} s "
                f"({self.candidates} candidates tried)")


def count_ops(module: ModuleOp) -> int:
    """Ops that compute something: every op but modules, functions and returns."""
    return sum(1 for op in module.walk() if not isinstance(op, (ModuleOp, func.FuncOp, func.ReturnOp, ReturnOp)))


# -- interestingness tests ------------------------------------------------------------------------------------


def _inputs(module: ModuleOp, entry: str, seed: int, special_values: bool):
    from .random_inputs import random_inputs

    return random_inputs(module, seed=seed, special_values=special_values, entry=entry)


def _error_signature(e: BaseException) -> tuple[str, str | None]:
    """The kind of a failure: its class and the first op mnemonic its message names."""
    found = re.search(r"\b(?:hlo|hlo_internal|stablehlo|chlo)\.[a-z_]+", str(e))
    return type(e).__name__, found.group(0) if found else None


def _run_on_inputs(module: ModuleOp, entry: str, seed: int, special_values: bool, timeout: float):
    import lowering

    exe = lowering.compile(module, entry=entry, timeout=timeout)
    return exe(*_inputs(module, entry, seed, special_values))


def crash_test(entry: str = "main", seed: int = 0, special_values: bool = True, timeout: float = 20.0,
               signature: tuple | None = None) -> Callable[[ModuleOp], bool]:
    """Interesting when compiling the program or running it on generated inputs raises, with the same error class
    and first op mnemonic in the message as ``signature`` (taken from the first program tested when None)."""
    state = {"signature": signature}

    def test(module: ModuleOp) -> bool:
        """True when the candidate crashes as the original did."""
        from lowering.runtime.interrupt import ExecutionTimeout

        try:
            _run_on_inputs(module, entry, seed, special_values, timeout)
        except ExecutionTimeout:
            return False
        except Exception as e:  # noqa: BLE001 - any crash is what is looked for
            sig = _error_signature(e)
            if state["signature"] is None:
                state["signature"] = sig
            return sig == state["signature"]
        return False

    test.kind = "crash"
    test.state = state
    return test


def mismatch_vs_jax_test(entry: str = "main", seed: int = 0, special_values: bool = False,
                         timeout: float = 20.0, max_ulp=None, rtol_magnitude=None) -> Callable[[ModuleOp], bool]:
    """Interesting when the executor's results on generated inputs differ from XLA CPU's (``interop.run_xla``)
    beyond the budgets of :func:`interop.comparison.compare_output` (``max_ulp``, ``rtol_magnitude``: its
    per-dtype defaults when None; 0 and 0 for bitwise)."""
    def test(module: ModuleOp) -> bool:
        """True when the candidate's results differ from XLA CPU's."""
        from ..comparison import compare_output
        from ..stablehlo.xla import run_xla

        try:
            args = _inputs(module, entry, seed, special_values)
            import lowering

            ours = lowering.compile(module, entry=entry, timeout=timeout)(*args)
            theirs = run_xla(module, *args)
        except Exception:  # noqa: BLE001 - a candidate that cannot run on both is not this mismatch
            return False
        return len(ours) != len(theirs) or any(
            isinstance(a, np.ndarray) and not compare_output(a, b, max_ulp, rtol_magnitude=rtol_magnitude).ok
            for a, b in zip(ours, theirs))

    test.kind = "mismatch-vs-jax"
    test.budgets = (max_ulp, rtol_magnitude)
    return test


def pass_changes_test(pipeline: str, entry: str = "main", seeds=(0, 1)) -> Callable[[ModuleOp], bool]:
    """Interesting when a pass of ``pipeline`` changes the program's results (the same pass as for the first
    program tested), by :func:`interop.debugging.check_semantics`."""
    state = {"pass": None}

    def test(module: ModuleOp) -> bool:
        """True when the same pass changes the candidate's results."""
        from .bisection import check_semantics

        try:
            report = check_semantics(module, pipeline, seeds=seeds, entry=entry)
        except XlaError:
            return False
        if report.ok:
            return False
        if state["pass"] is None:
            state["pass"] = report.first
        return report.first == state["pass"]

    test.kind = "pass-changes"
    test.pipeline = pipeline
    test.state = state
    return test


def command_test(command: str, timeout: float = 120.0) -> Callable[[ModuleOp], bool]:
    """Interesting when ``command candidate_path`` exits 0 (the candidate written as hlo MLIR text)."""
    argv = shlex.split(command)
    if not argv:
        raise XlaError("reduce_program: --test needs a command")
    folder = tempfile.mkdtemp(prefix="xla-reduce-")

    def test(module: ModuleOp) -> bool:
        """True when the command exits 0 on the candidate."""
        path = os.path.join(folder, "candidate.mlir")
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(module) + "\n")
        try:
            return subprocess.run([*argv, path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            return False
        except OSError as e:
            raise XlaError(f"--test {command}: cannot run it: {e}") from None

    test.kind = "command"
    test.command = command
    return test


# -- program surgery --------------------------------------------------------------------------------------------


def _entry(module: ModuleOp, entry: str) -> func.FuncOp:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == entry:
            return op
    raise XlaError(f"reduce_program: no function @{entry} in the program")


def _resign(fn: func.FuncOp) -> None:
    """The function type from the entry block's arguments and the return's operands (argument and result
    attributes dropped: their count changes)."""
    block = fn.body.block
    fn.properties["function_type"] = FunctionType.from_lists([a.type for a in block.args],
                                                             [v.type for v in block.last_op.operands])
    fn.arg_attrs = None
    fn.res_attrs = None


def _cleanup(module: ModuleOp, entry: str) -> None:
    """Dead pure ops, unused parameters of the entry function and functions nobody calls, gone."""
    import passes

    passes.run(module, "dce", verify=False)
    fn = _entry(module, entry)
    block = fn.body.block
    for arg in reversed(list(block.args)):
        if not arg.uses:
            block.erase_arg(arg)
    _resign(fn)
    functions = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if len(functions) > 1:
        # (referred to by symbol anywhere: calls, custom calls' called_computations, ...)
        texts = {op.sym_name.data: str(op) for op in functions}
        for op in functions:
            name = op.sym_name.data
            if name != entry and not any(re.search(rf"@{re.escape(name)}\b", text)
                                         for other, text in texts.items() if other != name):
                op.detach()
                op.erase()


def _top_ops(module: ModuleOp, entry: str) -> list[Operation]:
    fn = _entry(module, entry)
    return [op for op in fn.body.block.ops if op is not fn.body.block.last_op
            and all(isinstance(r.type, TensorType) or r.type.name == "hlo.token" for r in op.results)]


def _position(module: ModuleOp, op: Operation) -> int:
    for i, o in enumerate(module.walk()):
        if o is op:
            return i
    raise ValueError("op not in module")


def _at(module: ModuleOp, index: int) -> Operation:
    for i, o in enumerate(module.walk()):
        if i == index:
            return o
    raise ValueError("no op at index")


def _cut(module: ModuleOp, entry: str, positions: list[int]) -> ModuleOp:
    """A copy with the ops at ``positions`` (walk order) removed, their results new parameters of the entry."""
    copy = module.clone()
    ops = [_at(copy, i) for i in positions]
    block: Block = _entry(copy, entry).body.block
    for op in ops:
        for r in op.results:
            if r.uses:
                arg = block.insert_arg(r.type, len(block.args))
                r.replace_all_uses_with(arg)
    for op in reversed(ops):
        op.detach()
        op.erase()
    _cleanup(copy, entry)
    return copy


def _keep_results(module: ModuleOp, entry: str, keep: list[int]) -> ModuleOp:
    copy = module.clone()
    ret = _entry(copy, entry).body.block.last_op
    values = list(ret.operands)
    ret.operands = [values[i] for i in keep]
    _cleanup(copy, entry)
    return copy


def _return_op(module: ModuleOp, entry: str, position: int) -> ModuleOp | None:
    """A copy whose entry function returns the results of the op at ``position`` instead (what follows dies)."""
    copy = module.clone()
    op = _at(copy, position)
    if not op.results or not all(isinstance(r.type, TensorType) for r in op.results):
        return None
    ret = _entry(copy, entry).body.block.last_op
    if list(ret.operands) == list(op.results):
        return None
    ret.operands = list(op.results)
    _cleanup(copy, entry)
    return copy


def _inline_region(module: ModuleOp, entry: str, position: int, k: int) -> ModuleOp | None:
    """A copy where the conditional or while at ``position`` is replaced by its region ``k`` run once, in line:
    branch ``k`` of a conditional on its operand, the body of a while (``k`` = 1) on the initial values."""
    copy = module.clone()
    op = _at(copy, position)
    if isinstance(op, ConditionalOp) and k < len(op.regions):
        inputs = [op.operands[1 + k]]
    elif isinstance(op, WhileOp) and k == 1:
        inputs = list(op.operands)
    else:
        return None
    block = op.regions[k].block
    if len(block.args) != len(inputs) or any(a.type != v.type for a, v in zip(block.args, inputs)):
        return None
    mapping = dict(zip(block.args, inputs))
    for inner in list(block.ops)[:-1]:
        clone = inner.clone(value_mapper=mapping)
        Rewriter.insert_op(clone, InsertPoint.before(op))
        mapping.update(zip(inner.results, clone.results))
    outs = [mapping.get(v, v) for v in block.last_op.operands]
    if len(outs) != len(op.results) or any(o.type != r.type for o, r in zip(outs, op.results)):
        return None
    for r, o in zip(op.results, outs):
        r.replace_all_uses_with(o)
    op.detach()
    op.erase()
    _cleanup(copy, entry)
    return copy


def _replace_result(module: ModuleOp, entry: str, position: int, choice) -> ModuleOp | None:
    """A copy where the op at ``position`` is gone, its (single) result replaced by ``choice``: an operand index
    of the op, ``"zero"`` (a constant zero of the type)."""
    from xla_dialect.literal import DenseLiteralAttr
    from xla_dialect.ops.constants import ConstantOp
    from xla_dialect.types import numpy_dtype

    copy = module.clone()
    op = _at(copy, position)
    if len(op.results) != 1 or not isinstance(op.results[0].type, TensorType):
        return None
    r = op.results[0]
    if choice == "zero":
        try:
            dtype = numpy_dtype(r.type)
        except XlaError:
            return None
        value = np.zeros(r.type.get_shape(), dtype)
        const = ConstantOp.create(properties={"value": DenseLiteralAttr.from_array(value, r.type)},
                                  result_types=[r.type])
        Rewriter.insert_op(const, InsertPoint.before(op))
        new = const.results[0]
    else:
        new = op.operands[choice]
        if new.type != r.type:
            return None
    r.replace_all_uses_with(new)
    op.detach()
    op.erase()
    _cleanup(copy, entry)
    return copy


def _splat_constant(module: ModuleOp, entry: str, position: int, zero: bool) -> ModuleOp | None:
    from xla_dialect.literal import DenseLiteralAttr

    copy = module.clone()
    op = _at(copy, position)
    array = op.value.array
    if array.size <= 1:
        return None
    fill = np.zeros((), array.dtype) if zero else array.reshape(-1)[0]
    new = np.full(array.shape, fill, array.dtype)
    if new.tobytes() == array.tobytes():
        return None
    op.properties["value"] = DenseLiteralAttr.from_array(new, op.value.data.type)
    return copy


# -- the driver ---------------------------------------------------------------------------------------------------


class _Search:
    def __init__(self, test, entry: str, deadline: float | None, log):
        self.test, self.entry, self.deadline, self.log = test, entry, deadline, log
        self.candidates = 0

    def expired(self) -> bool:
        """True once the time budget is spent."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def accept(self, candidate: ModuleOp | None, current: ModuleOp) -> bool:
        """``candidate`` verifies, is smaller than ``current`` (or simpler) and is interesting."""
        if candidate is None or self.expired():
            return False
        try:
            candidate.verify()
        except Exception:  # noqa: BLE001 - a candidate that does not verify is not tried
            return False
        self.candidates += 1
        return bool(self.test(candidate))


def _ddmin(search: _Search, module: ModuleOp, items: Callable[[ModuleOp], list], make) -> ModuleOp:
    """Delta debugging: remove chunks of ``items(module)`` with ``make(module, chunk)`` while interesting."""
    n = 2
    while True:
        current_items = items(module)
        if len(current_items) < 1 or search.expired():
            return module
        n = min(n, len(current_items))
        size = -(-len(current_items) // n)
        chunks = [current_items[i:i + size] for i in range(0, len(current_items), size)]
        reduced = False
        for chunk in chunks:
            candidate = make(module, chunk)
            if search.accept(candidate, module):
                module, reduced = candidate, True
                search.log(f"  {count_ops(module)} ops")
                break
        if not reduced and n > 2:
            for chunk in chunks:
                rest = [x for x in current_items if x not in chunk]
                candidate = make(module, rest)
                if search.accept(candidate, module):
                    module, reduced = candidate, True
                    search.log(f"  {count_ops(module)} ops")
                    break
        if reduced:
            n = max(n - 1, 2)
            continue
        if n >= len(current_items):
            return module
        n = min(2 * n, len(current_items))


def reduce_program(program, test: Callable[[ModuleOp], bool], entry: str = "main", max_seconds: float | None = None,
                   verbose: bool = False) -> ReduceResult:
    """Shrink ``program`` (a module, or a program file) while ``test(candidate)`` is true; return the smallest
    interesting program found (a :class:`ReduceResult`). ``test`` is one of :func:`crash_test`,
    :func:`mismatch_vs_jax_test`, :func:`pass_changes_test`, :func:`command_test` or any function of a
    module. Calls are inlined first; every candidate verifies before it is tested (results, op cuts, bypasses,
    constants, then dimension sizes: see the module's docstring). ``max_seconds`` bounds the
    search (the best program so far is returned)."""
    from .probes import load_program_like

    start = time.perf_counter()
    module = load_program_like(program, (), "reduce_program")
    log = (lambda text: print(text, file=sys.stderr)) if verbose else (lambda text: None)
    from passes.inlining import inline_calls

    module = inline_calls(module, clone=True)
    if module is program:
        module = module.clone()
    _cleanup(module, entry)
    before = count_ops(load_program_like(program, (), "reduce_program"))
    search = _Search(test, entry, None if max_seconds is None else start + max_seconds, log)
    if not test(module):
        raise XlaError("reduce_program: the program is not interesting to begin with (the test says no to it)")
    search.candidates += 1
    for _ in range(3):  # until nothing changes (a pass over all reductions)
        size = count_ops(module), len(str(module))
        ret = lambda m: list(range(len(_entry(m, entry).body.block.last_op.operands)))  # noqa: E731
        module = _ddmin(search, module, ret, lambda m, drop: _keep_results(m, entry, [i for i in ret(m)
                                                                                      if i not in drop]))
        positions = lambda m: [_position(m, op) for op in _top_ops(m, entry)]  # noqa: E731
        module = _ddmin(search, module, positions, lambda m, chunk: _cut(m, entry, chunk))
        for position in positions(module):  # the earliest op whose results alone stay interesting (few left now)
            candidate = _return_op(module, entry, position)
            if search.accept(candidate, module):
                module = candidate
                search.log(f"  {count_ops(module)} ops")
                break
        module = _one_by_one(search, module, entry)
        module = _shrink_shapes(search, module)
        if (count_ops(module), len(str(module))) == size or search.expired():
            break
    return ReduceResult(module, before, count_ops(module), search.candidates, time.perf_counter() - start)


_TENSOR = re.compile(r"tensor<((?:\d+x)+)")


def _dimension_sizes(text: str) -> list[int]:
    """The sizes (above 1) of the dimensions of the tensor types in ``text``, largest first."""
    sizes = {int(d) for m in _TENSOR.finditer(text) for d in m.group(1).rstrip("x").split("x")}
    return sorted((d for d in sizes if d > 1), reverse=True)


def _resized(module: ModuleOp, size: int, new: int) -> ModuleOp | None:
    """A copy where every dimension of ``size`` elements has ``new`` (read back from text: ops whose
    attributes or constants do not fit the new shapes do not verify, and the candidate is dropped)."""
    from xla_dialect import parse_module

    def shrink(m):
        dims = ["x".join(str(new) if int(d) == size else d for d in m.group(1).rstrip("x").split("x"))]
        return f"tensor<{dims[0]}x"

    try:
        return parse_module(_TENSOR.sub(shrink, str(module)))
    except Exception:  # noqa: BLE001 - text that does not parse (a constant's elements) is no candidate
        return None


def _shrink_shapes(search: _Search, module: ModuleOp) -> ModuleOp:
    """Each dimension size, largest first, made 1, 2 or half of itself everywhere at once, while interesting."""
    for size in _dimension_sizes(str(module)):
        for new in dict.fromkeys((1, 2, size // 2)):
            if new >= size:
                continue
            candidate = _resized(module, size, new)
            if search.accept(candidate, module):
                module = candidate
                search.log(f"  dimensions of {size} -> {new}")
                break
    return module


def _one_by_one(search: _Search, module: ModuleOp, entry: str) -> ModuleOp:
    """Inline each conditional's branch or while's body, bypass or zero each op (regions included), splat each
    constant: greedy, one at a time."""
    index = 0
    while not search.expired():
        ops = list(module.walk())
        if index >= len(ops):
            break
        op = ops[index]
        index += 1
        if isinstance(op, (ModuleOp, func.FuncOp, func.ReturnOp, ReturnOp)):
            continue
        if isinstance(op, ConstantOp):
            for zero in (False, True):
                candidate = _splat_constant(module, entry, index - 1, zero)
                if search.accept(candidate, module):
                    module = candidate
            continue
        candidates = [lambda k=k: _inline_region(module, entry, index - 1, k) for k in range(len(op.regions))]
        candidates += [lambda c=c: _replace_result(module, entry, index - 1, c)
                       for c in [*range(len(op.operands)), "zero"]]
        for make in candidates:
            candidate = make()
            if search.accept(candidate, module):
                module = candidate
                index -= 1  # (the op there now is the next one)
                search.log(f"  {count_ops(module)} ops")
                break
    return module


# -- the reproducing test ------------------------------------------------------------------------------------------

_PYTEST = '''"""Reduced by xla-reduce ({kind}) from {source}: {ops} ops.

The test fails while the problem reproduces and passes once it is fixed.
"""

PROGRAM = """
{program}
"""


def _inputs(module):
    from interop.debugging import random_inputs

    return random_inputs(module, seed={seed}, special_values={special})


def test_reduced_program():
    import lowering
    from xla_dialect import parse_module

    module = parse_module(PROGRAM)
{body}
'''

_BODIES = {
    "crash": "    lowering.compile(module, entry={entry!r})(*_inputs(module))  # raised {signature}",
    "mismatch-vs-jax": """    from interop import run_xla
    from interop.comparison import compare_output

    args = _inputs(module)
    ours = lowering.compile(module)(*args)
    theirs = run_xla(module, *args)
    for a, b in zip(ours, theirs):
        assert compare_output(a, b, {max_ulp!r}, rtol_magnitude={rtol!r}).ok""",
    "pass-changes": """    import passes
    from interop.debugging import check_semantics
{plugins}
    report = check_semantics(module, {pipeline!r}, seeds=(0, 1), entry={entry!r})
    assert report.ok, str(report)""",
    "command": """    import shlex
    import subprocess

    path = "reduced_candidate.mlir"
    with open(path, "w") as f:
        f.write(PROGRAM)
    # the command exits 0 while the program is interesting (the problem reproduces)
    assert subprocess.run([*shlex.split({command!r}), path]).returncode != 0""",
}


def write_pytest(path: str, module: ModuleOp, test, source: str, entry: str = "main", seed: int = 0,
                 special_values: bool = True, plugins=()) -> None:
    """Write a pytest file reproducing ``test`` on ``module`` (it fails while the problem reproduces)."""
    kind = getattr(test, "kind", "command")
    state = getattr(test, "state", {})
    body = _BODIES.get(kind, _BODIES["command"]).format(
        entry=entry, signature=state.get("signature"), pipeline=getattr(test, "pipeline", ""),
        max_ulp=getattr(test, "budgets", (None, None))[0], rtol=getattr(test, "budgets", (None, None))[1],
        command=getattr(test, "command", ""),
        plugins="".join(f"    passes.load_plugin({os.path.abspath(p)!r})\n" for p in plugins))
    text = _PYTEST.format(kind=kind, source=source, ops=count_ops(module), program=str(module).replace('"""', "'''"),
                          seed=seed, special=special_values if kind != "mismatch-vs-jax" else False, body=body)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
