"""``apply-pdl{file="patterns.mlir"}``: user rewrite patterns written in PDL.

Each ``pdl.pattern`` of the file becomes an xDSL ``PDLRewritePattern`` (run by
xDSL's PDL interpreter) and the patterns are applied like any other pattern
table. Example, dropping a double negation::

    pdl.pattern @double_negate : benefit(1) {
      %t = pdl.type
      %x = pdl.operand
      %inner = pdl.operation "hlo.negate"(%x : !pdl.value) -> (%t : !pdl.type)
      %v = pdl.result 0 of %inner
      %outer = pdl.operation "hlo.negate"(%v : !pdl.value) -> (%t : !pdl.type)
      pdl.rewrite %outer {
        pdl.replace %outer with (%x : !pdl.value)
      }
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import pdl
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreters.pdl import PDLRewritePattern
from xdsl.parser import Parser
from xdsl.pattern_rewriter import RewritePattern

from xla_dialect.dialect import make_context
from xla_dialect.errors import PassError

from .base import PatternPass
from .registry import register_pass


def load_pdl_patterns(path: str, ctx: Context | None = None) -> list[RewritePattern]:
    """The ``pdl.pattern``s of the MLIR file ``path`` as xDSL rewrite patterns."""
    ctx = (ctx or make_context()).clone()
    if pdl.PDL.name not in {d.name for d in ctx.loaded_dialects}:
        ctx.load_dialect(pdl.PDL)
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise PassError(f"pass apply-pdl: cannot read PDL file {path!r}: {e.strerror}") from None
    try:
        module = Parser(ctx, text, path).parse_module()
    except Exception as e:
        raise PassError(f"pass apply-pdl: {path} is not valid PDL: {e}") from None
    patterns = [PDLRewritePattern(op, ctx, None) for op in module.walk() if isinstance(op, pdl.RewriteOp)]
    if not patterns:
        raise PassError(f"pass apply-pdl: {path} contains no pdl.pattern with a pdl.rewrite")
    return patterns


@register_pass
@dataclass(frozen=True)
class ApplyPDLPass(PatternPass):
    """``apply-pdl{file="patterns.mlir"}``: apply the PDL patterns of a file."""

    name = "apply-pdl"
    required_options = ("file",)  # (passes.registry.pass_options shows it as required)
    file: str | None = None

    def patterns(self) -> list[RewritePattern]:
        if not self.file:
            raise PassError('pass apply-pdl: give the PDL file, e.g. apply-pdl{file="patterns.mlir"}')
        return load_pdl_patterns(self.file)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.rewrite(op)
