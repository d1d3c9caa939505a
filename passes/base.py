"""The pass model: a pass is a named, typed-option xDSL ``ModulePass`` whose
work is a declarative table of rewrite patterns.

A :class:`PatternPass` lists its patterns in ``PATTERNS`` (xDSL
``RewritePattern`` classes, usually with an ``op_type_rewrite_pattern`` method)
and how they are applied (walk order, recursion). :meth:`PatternPass.apply`
runs them with xDSL's ``PatternRewriteWalker`` over a
``GreedyRewritePatternApplier``. Options are dataclass fields, so the xDSL
pipeline syntax ``assign-layouts{target=tpu}`` sets them::

    @register_pass
    @dataclass(frozen=True)
    class MyPass(PatternPass):
        name = "my-pass"
        PATTERNS = (FoldSomething, DropSomethingElse)
        threshold: int = 4     # my-pass{threshold=8}

Any exception a pattern raises becomes a :class:`~xla_dialect.errors.PassError`
naming the pass and the op it was rewriting. Passes may hand back a report
(:func:`emit_report`), which :func:`passes.run` collects.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from types import UnionType
from typing import Any, ClassVar, Union, get_args, get_origin

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from xla_dialect.errors import PassError, op_context


def matched_op_types(pattern: RewritePattern) -> tuple[type, ...] | None:
    """The op classes an ``op_type_rewrite_pattern`` pattern can match (None: any op).

    Read from the closure xDSL's decorator builds around the annotated method.
    """
    method = type(pattern).match_and_rewrite
    for cell in getattr(method, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, type) and issubclass(value, Operation):
            return (value,)
        if get_origin(value) in (Union, UnionType):
            args = get_args(value)
            if args and all(isinstance(a, type) and issubclass(a, Operation) for a in args):
                return args
    return None


class _GuardedApplier(GreedyRewritePatternApplier):
    """xDSL's greedy applier, dispatching on the op class and turning pattern failures
    into PassErrors naming pass and op."""

    def __init__(self, pass_name: str, patterns: list[RewritePattern]):
        # Trivial-DCE is off: it relies on xDSL traits our ops do not carry, and
        # dropping ops is the business of the dce pass alone.
        super().__init__(patterns, dce_enabled=False)
        self.pass_name = pass_name
        self._types = [matched_op_types(p) for p in patterns]
        self._by_class: dict[type, list[RewritePattern]] = {}

    def _patterns_for(self, cls: type) -> list[RewritePattern]:
        found = self._by_class.get(cls)
        if found is None:
            found = [p for p, types in zip(self.rewrite_patterns, self._types)
                     if types is None or issubclass(cls, types)]
            self._by_class[cls] = found
        return found

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        try:
            for pattern in self._patterns_for(type(op)):
                pattern.match_and_rewrite(op, rewriter)
                if rewriter.has_done_action:
                    return
        except PassError:
            raise
        except Exception as e:  # a pattern bug or an op it cannot handle: name both
            raise PassError(f"pass {self.pass_name}: {op_context(op)}: {type(e).__name__}: {e}") from e


def clean_pass_error(e: BaseException) -> None:
    """Drop the whole-module dump xDSL's walker attaches as a note (noise for users)."""
    if getattr(e, "__notes__", None):
        e.__notes__ = []


@dataclass(frozen=True)
class PatternPass(ModulePass):
    """A pass defined by its table of rewrite patterns (see the module docstring)."""

    name: ClassVar[str]
    PATTERNS: ClassVar[tuple[type[RewritePattern], ...]] = ()
    """The patterns, tried in order on every op until one rewrites it."""
    WALK_REVERSE: ClassVar[bool] = False
    """Visit ops from the last to the first (uses before definitions)."""
    APPLY_RECURSIVELY: ClassVar[bool] = True
    """Revisit rewritten ops and their users until nothing changes."""

    def patterns(self) -> list[RewritePattern]:
        """Instantiate the pattern table (override to pass options to patterns)."""
        return [pattern() for pattern in self.PATTERNS]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Run the pattern table to a fixed point over ``op``."""
        self.rewrite(op)

    def rewrite(self, module: ModuleOp) -> bool:
        """Apply the patterns; return True when the module changed."""
        patterns = self.patterns()
        if not patterns:
            return False
        walker = PatternRewriteWalker(
            _GuardedApplier(self.name, patterns),
            walk_reverse=self.WALK_REVERSE,
            apply_recursively=self.APPLY_RECURSIVELY,
        )
        try:
            return walker.rewrite_module(module)
        except PassError as e:
            clean_pass_error(e)
            raise


_REPORTS: ContextVar[list | None] = ContextVar("xla_pass_reports", default=None)


def emit_report(pass_: ModulePass, report: Any) -> None:
    """Hand ``report`` to the :func:`passes.run` currently running (if any)."""
    sink = _REPORTS.get()
    if sink is not None:
        sink.append((pass_, report))


def collect_reports(sink: list):
    """Context token making :func:`emit_report` append to ``sink`` (reset with ``_REPORTS.reset``)."""
    return _REPORTS.set(sink)


def reset_reports(token) -> None:
    """Undo :func:`collect_reports`."""
    _REPORTS.reset(token)
