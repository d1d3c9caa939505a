"""The pass model: a pass is a named, typed-option xDSL ``ModulePass`` whose
work is a declarative table of rewrite patterns.

A :class:`PatternPass` lists its patterns in ``PATTERNS`` (xDSL
``RewritePattern`` classes, usually with an ``op_type_rewrite_pattern`` method)
and how they are applied (walk order, recursion). :meth:`PatternPass.apply`
runs them with xDSL's ``PatternRewriteWalker`` over a
``GreedyRewritePatternApplier``, trimmed for large programs with the same
result: each op is offered only the patterns that can match its class (ops no
pattern can match never enter the worklist), the walker's loops are leaner,
and a pass may declare that it needs no confirming final sweep
(:attr:`PatternPass.CONFIRM_FIXED_POINT`). Options are dataclass fields, so
the xDSL pipeline syntax ``assign-layouts{target=tpu}`` sets them::

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
from xdsl.ir import Operation, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.utils.worklist import Worklist

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


def _unwrapped(pattern: RewritePattern):
    """``pattern.match_and_rewrite`` without the class test ``op_type_rewrite_pattern`` wraps
    around it (the applier dispatches on the op class already), or as is."""
    method = type(pattern).match_and_rewrite
    if matched_op_types(pattern) is not None:
        for cell in method.__closure__:
            inner = cell.cell_contents
            if callable(inner) and getattr(inner, "__name__", None) == "match_and_rewrite":
                return inner.__get__(pattern)
    return pattern.match_and_rewrite


class _GuardedApplier(GreedyRewritePatternApplier):
    """xDSL's greedy applier, dispatching on the op class and turning pattern failures
    into PassErrors naming pass and op."""

    def __init__(self, pass_name: str, patterns: list[RewritePattern]):
        # Trivial-DCE is off: it relies on xDSL traits our ops do not carry, and
        # dropping ops is the business of the dce pass alone.
        super().__init__(patterns, dce_enabled=False)
        self.pass_name = pass_name
        self._types = [matched_op_types(p) for p in patterns]
        self._calls = [_unwrapped(p) for p in patterns]
        self._by_class: dict[type, list] = {}

    def _patterns_for(self, cls: type) -> list:
        """The ``match_and_rewrite`` callables of the patterns that may match ops of class ``cls``, in order."""
        found = self._by_class.get(cls)
        if found is None:
            found = [call for call, types in zip(self._calls, self._types)
                     if types is None or issubclass(cls, types)]
            self._by_class[cls] = found
        return found

    def can_match(self, cls: type) -> bool:
        """Whether some pattern may rewrite ops of class ``cls``."""
        found = self._by_class.get(cls)
        return bool(found if found is not None else self._patterns_for(cls))

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        try:
            calls = self._by_class.get(type(op))
            for match_and_rewrite in calls if calls is not None else self._patterns_for(type(op)):
                match_and_rewrite(op, rewriter)
                if rewriter.has_done_action:
                    return
        except PassError:
            raise
        except Exception as e:  # a pattern bug or an op it cannot handle: name both
            raise PassError(f"pass {self.pass_name}: {op_context(op)}: {type(e).__name__}: {e}") from e


class _MatchableWorklist(Worklist):
    """xDSL's worklist that never takes in an op no pattern can match.

    Popping such an op would only cost time: the applier tries no pattern on
    it, so nothing changes. Leaving it out keeps the order in which the other
    ops are visited, hence the walker's result, exactly the same, while the
    walks over the whole region (the first one and the final one that checks
    nothing is left to rewrite) only touch the ops that matter.
    """

    def __init__(self, can_match):
        super().__init__()
        self._can_match = can_match

    def push(self, item: Operation) -> None:
        """Push ``item`` (if some pattern can match it and it is not already queued)."""
        if item not in self._map and self._can_match(type(item)):
            self._map[item] = len(self._stack)
            self._stack.append(item)


class _Rewriter(PatternRewriter):
    """xDSL's ``PatternRewriter`` whose default insertion point, right before the matched op, is
    made when first asked for (most ops taken from the worklist are not rewritten at all)."""

    _point: InsertPoint | None = None

    @property
    def insertion_point(self) -> InsertPoint:
        """Where ops are inserted by default: before the matched op unless set otherwise."""
        point = self._point
        if point is None:
            point = self._point = InsertPoint.before(self._current_operation)
        return point

    @insertion_point.setter
    def insertion_point(self, point: InsertPoint) -> None:
        self._point = point


class _Walker(PatternRewriteWalker):
    """xDSL's ``PatternRewriteWalker`` with leaner loops and an optional final walk.

    Ops are visited in xDSL's order and the rewriter is reset for each as xDSL
    does (flag, matched op, insertion point before the op, name hint), without
    its per-op overheads: nested generators to walk the region, method calls
    to push and pop, a deprecated property setter, an insertion point built
    for every op (here: on first use). With ``confirm`` false, the walk over
    the whole region that xDSL repeats after the worklist empties (to confirm
    nothing is left to rewrite) is skipped: see
    :attr:`PatternPass.CONFIRM_FIXED_POINT`.
    """

    confirm: bool = True

    def rewrite_region(self, region) -> bool:
        """Rewrite the ops of ``region``; True when something changed."""
        if self.confirm:
            return super().rewrite_region(region)
        listener = self._get_rewriter_listener()
        self._populate_worklist(region)
        changed = self._process_worklist(listener)
        if self.post_walk_func is not None:
            changed |= self.post_walk_func(region, listener)
        return changed

    def _populate_worklist(self, op) -> None:
        if not isinstance(op, Region) or not isinstance(self._worklist, _MatchableWorklist):
            return super()._populate_worklist(op)
        # What pushing every op of region.walk(reverse=..., region_first=...) does, as xDSL here.
        reverse, region_first = not self.walk_reverse, not self.walk_regions_first
        worklist = self._worklist
        queued, stack, can_match = worklist._map, worklist._stack, worklist._can_match  # noqa: SLF001

        def walk(region: Region) -> None:
            for block in (reversed(region.blocks) if reverse else region.blocks):
                op = block.last_op if reverse else block.first_op
                while op is not None:
                    if not region_first and op not in queued and can_match(type(op)):
                        queued[op] = len(stack)
                        stack.append(op)
                    for inner in (reversed(op.regions) if reverse else op.regions):
                        walk(inner)
                    if region_first and op not in queued and can_match(type(op)):
                        queued[op] = len(stack)
                        stack.append(op)
                    op = op.prev_op if reverse else op.next_op

        walk(op)

    def _process_worklist(self, listener) -> bool:
        worklist = self._worklist
        if not worklist:
            return False
        stack, queued = worklist._stack, worklist._map  # noqa: SLF001 - Worklist.pop, inlined
        op = worklist.pop()
        rewriter = _Rewriter(op)
        rewriter.extend_from_listener(listener)
        match_and_rewrite = self.pattern.match_and_rewrite
        changed = False
        while True:
            rewriter.has_done_action = False
            rewriter._current_operation = op  # noqa: SLF001 - what the deprecated setter does
            rewriter._point = None  # the insertion point before op, made when needed
            rewriter._name_hint = None  # noqa: SLF001 - the name_hint setter's result for None
            try:
                match_and_rewrite(op, rewriter)
            except Exception as err:
                op.emit_error(f"Error while applying pattern: {err}", underlying_error=err)
            changed |= rewriter.has_done_action
            while stack:
                op = stack.pop()
                if op in queued:  # ops removed from the worklist left a mark in the stack, not in queued
                    del queued[op]
                    break
            else:
                return changed


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
    CONFIRM_FIXED_POINT: ClassVar[bool] = True
    """After the worklist empties, walk the whole program again (and again while something
    changes) to confirm no pattern applies anywhere, as xDSL's walker does.

    The worklist already revisits every op a rewrite may have made matchable:
    inserted and modified ops, the users of replaced ops, the single-use operand
    definitions of erased ops. A pass whose patterns look only at the op itself
    and at the defining ops of its operands (never at an op modified in place,
    nor at uses) reaches the same fixed point without that final walk, and may
    set this to False."""

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
        applier = _GuardedApplier(self.name, patterns)
        walker = _Walker(
            applier,
            walk_reverse=self.WALK_REVERSE,
            apply_recursively=self.APPLY_RECURSIVELY,
        )
        walker.confirm = self.CONFIRM_FIXED_POINT or not self.APPLY_RECURSIVELY
        walker._worklist = _MatchableWorklist(applier.can_match)
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
