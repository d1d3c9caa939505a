"""An example pass plugin: ``fold-double-negation`` rewrites ``-(-x)`` and ``not(not(x))`` to ``x``.

A pass is a table of xDSL rewrite patterns; registering it makes it usable in
pipelines, ``xla-opt`` and ``xdsl-opt`` (which loads plugin files named in ``$XLA_PASS_PLUGINS``)::

    xla-opt program.mlir --load-pass-plugin examples/fold_double_negation.py -p fold-double-negation,dce
    XLA_PASS_PLUGINS=examples/fold_double_negation.py xdsl-opt program.mlir -p fold-double-negation,hlo-dce

or from Python::

    import passes
    passes.load_plugin("examples/fold_double_negation.py")
    passes.run(module, "fold-double-negation,dce")

To ship it in an installed package instead, declare an entry point in that
package's ``pyproject.toml``::

    [project.entry-points."xla_dialect.passes"]
    fold-double-negation = "my_package.my_module:FoldDoubleNegationPass"

(the object may also be an iterable of pass classes, a module that registers its passes, or a function
returning either, as this project's own ``passes.registry:builtin_passes``). The same rewrite as a rule of
the pattern language (docs/writing-passes.md) is one line:
``rule_pass("fold-double-negation", rule(m.Negate(m.Negate("x")), "x"), rule(m.Not(m.Not("x")), "x"))``.

Both rewrites are exact for every element type: negation and bitwise not are
involutions (also for the most negative integer, which negates to itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from passes import PatternPass, register_pass
from xla_dialect.ops.elementwise import NegOp, NotOp


class FoldInvolution(RewritePattern):
    """``f(f(x))`` -> ``x`` for an involution ``f`` (negate, not)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: NegOp | NotOp, rewriter: PatternRewriter) -> None:
        inner = op.operand.owner
        # Same op class, and the types agree exactly (layouts included).
        if type(inner) is type(op) and inner.operand.type == op.result.type:
            rewriter.replace(op, [], [inner.operand])


@register_pass
@dataclass(frozen=True)
class FoldDoubleNegationPass(PatternPass):
    """``fold-double-negation``: ``-(-x)`` -> ``x`` and ``not(not(x))`` -> ``x``."""

    name = "fold-double-negation"
    PATTERNS = (FoldInvolution,)
