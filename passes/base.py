"""The pass model: a pass is a named, typed-option xDSL ``ModulePass`` whose
work is a declarative table of rewrite patterns.

A :class:`PatternPass` lists its patterns in ``PATTERNS`` (xDSL
``RewritePattern`` classes, usually with an ``op_type_rewrite_pattern`` method)
and how they are applied (walk order, recursion). :meth:`PatternPass.apply`
runs them with a driver that visits ops as xDSL's ``PatternRewriteWalker``
does, over a ``GreedyRewritePatternApplier``, trimmed for large programs with
the same result and written on xDSL's public API: each op is offered only the
patterns that can match its class (ops no pattern can match never enter the
worklist), the loops are leaner, and a pass may declare that it needs no
confirming final sweep
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
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import ErasedSSAValue, Operation, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriterListener,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint

from xla_dialect.errors import PassError, op_context
from xla_dialect.xdsl_compat import matched_op_types, unwrapped_match


class _GuardedApplier(GreedyRewritePatternApplier):
    """xDSL's greedy applier, dispatching on the op class and turning pattern failures
    into PassErrors naming pass and op."""

    def __init__(self, pass_name: str, patterns: list[RewritePattern]):
        # Trivial-DCE is off: it relies on xDSL traits our ops do not carry, and
        # dropping ops is the business of the dce pass alone.
        super().__init__(patterns, dce_enabled=False)
        self.pass_name = pass_name
        self._types = [matched_op_types(p) for p in patterns]
        self._calls = [unwrapped_match(p) for p in patterns]
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


class _Worklist:
    """The ops still to visit: a stack (last in, first out) with constant-time membership and removal
    (a removed op leaves ``None`` in its slot). Ops no pattern can match never enter it: popping them
    would only cost time, and leaving them out keeps the order of the others, hence the result."""

    __slots__ = ("stack", "queued", "can_match")

    def __init__(self, can_match):
        self.stack: list[Operation | None] = []
        self.queued: dict[Operation, int] = {}
        self.can_match = can_match

    def push(self, op: Operation) -> None:
        """Queue ``op`` (if some pattern can match it and it is not queued already)."""
        if op not in self.queued and self.can_match(type(op)):
            self.queued[op] = len(self.stack)
            self.stack.append(op)

    def remove(self, op: Operation) -> None:
        """Forget ``op`` (erased)."""
        index = self.queued.pop(op, None)
        if index is not None:
            self.stack[index] = None

    def pop(self) -> Operation | None:
        """The last op queued, or None when none is left."""
        stack = self.stack
        while stack:
            op = stack.pop()
            if op is not None:
                del self.queued[op]
                return op
        return None


class _Rewriter(PatternRewriter):
    """xDSL's ``PatternRewriter`` whose default insertion point, right before the matched op, is
    made when first asked for (most ops taken from the worklist are not rewritten at all)."""

    _point: InsertPoint | None = None
    matched: Operation | None = None

    @property
    def insertion_point(self) -> InsertPoint:
        """Where ops are inserted by default: before the matched op unless set otherwise."""
        point = self._point
        if point is None:
            point = self._point = InsertPoint.before(self.matched)
        return point

    @insertion_point.setter
    def insertion_point(self, point: InsertPoint) -> None:
        self._point = point


class _Driver:
    """Applies a pattern to every op of a module until nothing changes, as xDSL's ``PatternRewriteWalker``
    does (same visiting order, same worklist rules, the same final walk that confirms the fixed point),
    written on xDSL's public API only and with leaner loops.

    The worklist starts with every op (in walk order); an op is queued again when it is inserted or
    modified, the users of a replaced op's results are queued, and the single-use operand definitions of
    an erased op are queued. With ``confirm`` false, the walk over the whole module that xDSL repeats
    after the worklist empties is skipped: see :attr:`PatternPass.CONFIRM_FIXED_POINT`.
    """

    def __init__(self, applier: _GuardedApplier, walk_reverse: bool, apply_recursively: bool, confirm: bool):
        self.applier = applier
        self.walk_reverse = walk_reverse
        self.apply_recursively = apply_recursively
        self.confirm = confirm
        self.worklist = _Worklist(applier.can_match)

    # -- what a rewrite tells the worklist -----------------------------------------------------------

    def _inserted(self, op: Operation) -> None:
        if self.apply_recursively:
            self.worklist.push(op)

    def _removed(self, op: Operation) -> None:
        if self.apply_recursively:
            for operand in op.operands:  # single-use definitions have more to simplify once this use is gone
                owner = operand.owner
                if isinstance(owner, Operation) and not isinstance(operand, ErasedSSAValue) and operand.has_one_use():
                    self.worklist.push(owner)
        if op.regions:
            for inner in op.walk():
                self.worklist.remove(inner)
        else:
            self.worklist.remove(op)

    def _modified(self, op: Operation) -> None:
        if self.apply_recursively:
            self.worklist.push(op)

    def _replaced(self, op: Operation, new_results) -> None:
        if self.apply_recursively:
            for result in op.results:
                for use in result.uses:
                    self.worklist.push(use.operation)

    def _listener(self) -> PatternRewriterListener:
        return PatternRewriterListener(operation_insertion_handler=[self._inserted],
                                       operation_removal_handler=[self._removed],
                                       operation_modification_handler=[self._modified],
                                       operation_replacement_handler=[self._replaced])

    # -- the walk ------------------------------------------------------------------------------------

    def rewrite_module(self, module: ModuleOp) -> bool:
        """Rewrite the ops of ``module``; True when something changed."""
        listener = self._listener()
        self._populate(module.body)
        changed = result = self._process(listener)
        if not (self.apply_recursively and self.confirm):
            return result
        while changed:
            self._populate(module.body)
            changed = self._process(listener)
        return result

    def _populate(self, region: Region) -> None:
        """Queue every op of ``region`` as xDSL's walker does (``region.walk(reverse=not walk_reverse,
        region_first=True)``, so that the stack pops them in program order, or reverse order)."""
        reverse = not self.walk_reverse
        worklist = self.worklist
        queued, stack, can_match = worklist.queued, worklist.stack, worklist.can_match

        def walk(region: Region) -> None:
            for block in (reversed(region.blocks) if reverse else region.blocks):
                op = block.last_op if reverse else block.first_op
                while op is not None:
                    for inner in (reversed(op.regions) if reverse else op.regions):
                        walk(inner)
                    if op not in queued and can_match(type(op)):
                        queued[op] = len(stack)
                        stack.append(op)
                    op = op.prev_op if reverse else op.next_op

        walk(region)

    def _process(self, listener: PatternRewriterListener) -> bool:
        """Rewrite ops from the worklist until it is empty; True when something changed."""
        pop = self.worklist.pop
        op = pop()
        if op is None:
            return False
        rewriter = _Rewriter(op)
        rewriter.extend_from_listener(listener)
        match_and_rewrite = self.applier.match_and_rewrite
        changed = False
        while op is not None:
            rewriter.has_done_action = False
            rewriter.current_operation = op
            rewriter.matched = op
            rewriter._point = None  # the insertion point before op, made when needed (our own field)
            rewriter.name_hint = None
            try:
                match_and_rewrite(op, rewriter)
            except Exception as err:
                op.emit_error(f"Error while applying pattern: {err}", underlying_error=err)
            changed |= rewriter.has_done_action
            op = pop()
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

    def rewrite(self, module: ModuleOp, patterns: list[RewritePattern] | None = None) -> bool:
        """Apply the patterns (``self.patterns()`` unless given); return True when the module changed."""
        if patterns is None:
            patterns = self.patterns()
        if not patterns:
            return False
        applier = _GuardedApplier(self.name, patterns)
        driver = _Driver(applier, self.WALK_REVERSE, self.APPLY_RECURSIVELY,
                         confirm=self.CONFIRM_FIXED_POINT or not self.APPLY_RECURSIVELY)
        try:
            return driver.rewrite_module(module)
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
