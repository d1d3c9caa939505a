"""``inline-calls``: every ``hlo.call`` replaced by a copy of its callee's body (XLA's CallInliner).

XLA inlines calls before it optimizes and fuses, so a multiply in a called
function and the add that uses its result in the caller are one multiply-add
to its fusion and to LLVM's contraction; JAX programs are full of such calls
(``pjit``, ``closed_call``, ``dynamic_slice`` helpers). The executor runs this
pass first in its pipeline (:data:`passes.pipelines.EXECUTOR_PIPELINE`): the
contraction then sees what XLA sees, element-wise runs fuse across former
call boundaries, and loop bodies call no functions.

Calls are inlined from the inside out (a callee's own calls first), each
callee body cloned once per call. Functions stay in the module (the public
ones are entry points; unused private ones cost nothing when lowering). A
call cycle (recursion, which XLA programs cannot have) is reported. Calls of
functions that are not in the module are left alone, for the verifier or the
executor to report.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.errors import PassError
from xla_dialect.ops.control_flow import CallOp, ReturnOp

from .registry import register_pass


def _calls_in(op: Operation) -> list[CallOp]:
    return [o for o in op.walk() if isinstance(o, CallOp)]


def inline_calls(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` with every ``hlo.call`` of a function of the module inlined (a copy with ``clone``;
    ``module`` itself when it has no call)."""
    if not any(isinstance(o, CallOp) for o in module.walk()):
        return module
    if clone:
        module = module.clone()
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    done: set[str] = set()  # functions whose own calls are inlined already
    active: list[str] = []  # the chain being inlined, to report recursion

    def prepare(name: str) -> None:
        """Inline the calls in the body of function ``name`` (first those of its callees)."""
        if name in done:
            return
        if name in active:
            cycle = " -> ".join(f"@{n}" for n in active[active.index(name):] + [name])
            raise PassError(f"inline-calls: recursive calls ({cycle}); XLA programs cannot recurse")
        active.append(name)
        for call in _calls_in(functions[name]):
            inline_call(call)
        active.pop()
        done.add(name)

    def inline_call(call: CallOp) -> None:
        name = call.callee.string_value()
        callee = functions.get(name)
        if callee is None or not callee.body.blocks:
            return
        prepare(name)
        body = callee.body.clone()
        block = body.block
        terminator = block.last_op
        if not isinstance(terminator, (func.ReturnOp, ReturnOp)) or len(terminator.operands) != len(call.results):
            raise PassError(f"inline-calls: @{name} does not end in a return of {len(call.results)} values")
        # A returned argument of the callee is the call's own operand (the block's arguments go away).
        values = [call.operands[v.index] if isinstance(v, BlockArgument) and v.block is block else v
                  for v in terminator.operands]
        Rewriter.erase_op(terminator)
        Rewriter.inline_block(block, InsertPoint.before(call), list(call.operands))
        for result, value in zip(call.results, values):
            result.replace_all_uses_with(value)
        Rewriter.erase_op(call)

    for name in functions:
        prepare(name)
    return module


@register_pass
@dataclass(frozen=True)
class InlineCallsPass(ModulePass):
    """``inline-calls``: every ``hlo.call`` replaced by its callee's body, as XLA's CallInliner does."""

    name = "inline-calls"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        inline_calls(op)
