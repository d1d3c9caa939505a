"""``inline-constant-conditionals``: an ``hlo.conditional`` whose selector is a constant replaced by the branch it
runs (XLA's ConditionalSimplifier).

JAX writes conditionals on values it knows while tracing: diffrax's solvers and equinox's checks branch on
options fixed for the program (``lax.cond`` of a Python bool becomes a constant ``pred``, a ``lax.switch`` on a
static index a constant ``s32``). XLA inlines the branch such a conditional takes before it fuses, so its ops are
straight-line code of the enclosing computation: fused with the ops around them, and summed or contracted as
those are. The executor, which ran each such conditional as a call of its branch, interpreted between its
compiled segments (the diffrax Tsit5 solve of ``benchmarks/library_programs.py``: three nested constant
conditionals around its compiled loop), now sees what XLA sees.

The selector counts as constant when it is an ``hlo.constant`` or computed from constants by pure ops of at
most :data:`MAX_SELECTOR_ELEMENTS` elements (a convert, a compare, a reduce: jax writes ``lax.cond`` on a traced
constant as ``convert(reduce_or(pred))``), evaluated with the NumPy kernels. A ``pred``
selector runs region 0 when true, region 1 when false; an ``s32`` index runs its region, the last one when out of
range (XLA's semantics, :class:`~xla_dialect.ops.control_flow.ConditionalOp`). Conditionals are inlined from the
outside in, the inlined branch's own constant conditionals after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.errors import PassError
from xla_dialect.ops.base import HloOp
from xla_dialect.ops.control_flow import ConditionalOp, ReturnOp
from xla_dialect.ops.reduction import ReduceOp

from .cleanup import ConstantEvaluator
from .purity import is_pure
from .registry import register_pass

MAX_SELECTOR_ELEMENTS = 16
"""The largest value (in elements) followed back from a selector to the constants it is computed from."""

MAX_SELECTOR_DEPTH = 8
"""How many ops back from a selector its constant value is looked for."""


def constant_selector(value: SSAValue, evaluator: ConstantEvaluator, depth: int = 0) -> np.ndarray | None:
    """The value of a conditional's selector ``value`` when it is known without running the program: a
    constant, or pure ops (:data:`MAX_SELECTOR_DEPTH` deep, none larger than :data:`MAX_SELECTOR_ELEMENTS`
    elements) of constants; else None."""
    if not isinstance(value.type, TensorType) or int(np.prod(value.type.get_shape())) > MAX_SELECTOR_ELEMENTS:
        return None
    known = evaluator.value(value, MAX_SELECTOR_ELEMENTS)
    if known is not None:
        return known
    owner = value.owner
    if (depth >= MAX_SELECTOR_DEPTH or not isinstance(owner, HloOp) or not owner.operands
            or (owner.regions and not isinstance(owner, ReduceOp)) or len(owner.results) != 1 or not is_pure(owner)):
        return None
    args = []
    for operand in owner.operands:
        arg = constant_selector(operand, evaluator, depth + 1)
        if arg is None:
            return None
        args.append(arg)
    if isinstance(owner, ReduceOp):
        return _reduced(owner, args)
    results = evaluator.evaluate(owner, args)
    return None if results is None else results[0]


def _reduced(op: ReduceOp, args: list[np.ndarray]) -> np.ndarray | None:
    """A one-operand reduce of bool or integer constants whose body is one binary op (jax's ``reduce_or`` of a
    predicate): exact in any order; None for other reduces."""
    from lowering.kernels.reduction import binary_body_ufunc

    ufunc = binary_body_ufunc(op.body)
    if ufunc is None or len(args) != 2 or args[0].dtype.kind not in "biu":
        return None
    dims = tuple(int(d) for d in op.dimensions.get_values())
    return np.asarray(ufunc(args[1], ufunc.reduce(args[0], axis=dims)), args[0].dtype)


def taken_branch(conditional: ConditionalOp, selector: np.ndarray) -> int:
    """The region ``conditional`` runs for the selector value ``selector``: a ``pred`` picks region 0 when
    true and 1 when false, an ``s32`` its index, the last region for an index out of range."""
    count = len(conditional.branches)
    if selector.dtype == np.bool_:
        return 0 if bool(selector) else 1
    index = int(selector)
    return index if 0 <= index < count else count - 1


def inline_constant_conditionals(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` with every ``hlo.conditional`` whose selector is constant (:func:`constant_selector`) replaced
    by the branch it takes (a copy with ``clone``; ``module`` itself when there is none)."""
    evaluator = ConstantEvaluator()

    def first_constant(root) -> tuple[ConditionalOp, np.ndarray] | None:
        """The outermost conditional with a constant selector (walk is pre-order: a branch's own conditionals
        come after it) and the selector's value; the walk stops there."""
        for op in root.walk():
            if isinstance(op, ConditionalOp):
                selector = constant_selector(op.selector, evaluator)
                if selector is not None:
                    return op, selector
        return None

    if first_constant(module) is None:
        return module
    if clone:
        module = module.clone()
        evaluator = ConstantEvaluator()
    while True:
        found = first_constant(module)
        if found is None:
            return module
        conditional, selector = found
        branch = taken_branch(conditional, selector)
        block = conditional.branches[branch].block
        terminator = block.last_op
        if not isinstance(terminator, ReturnOp) or len(terminator.operands) != len(conditional.results):
            raise PassError(f"inline-constant-conditionals: branch {branch} of an hlo.conditional does not end in "
                            f"an hlo.return of {len(conditional.results)} values")
        operand = conditional.branch_operands[branch]
        # A returned block argument is the conditional's own branch operand (the block's argument goes away).
        values = [operand if v is block.args[0] else v for v in terminator.operands]
        Rewriter.erase_op(terminator)
        Rewriter.inline_block(block, InsertPoint.before(conditional), [operand])
        for result, value in zip(conditional.results, values):
            result.replace_all_uses_with(value)
        Rewriter.erase_op(conditional)


@register_pass
@dataclass(frozen=True)
class InlineConstantConditionalsPass(ModulePass):
    """``inline-constant-conditionals``: conditionals on constant selectors replaced by the branch they take, as
    XLA's ConditionalSimplifier does."""

    name = "inline-constant-conditionals"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        inline_constant_conditionals(op)
