"""Cleanups: ``cse``, ``dce``, ``simplify`` and ``fold-constants``.

* ``cse`` — common-subexpression elimination with hlo purity from
  :mod:`passes.purity` (the hlo op classes carry no effect traits), scoped by
  region like xDSL's driver but hashing each op once.
* ``dce`` — drops pure ops whose results are unused (one pattern, walked
  backwards so a whole dead chain goes in one sweep).
* ``simplify`` — algebraic no-ops from the table :data:`IDENTITY_OPERANDS`
  (``x+0``, ``x*1``, ...) plus the data-movement no-ops of
  :mod:`passes.movement` (transpose of transpose, reshape of reshape, slice of
  the whole, identity broadcast/transpose/reshape).
* ``fold-constants`` — evaluates ops whose operands are all constants with the
  executor's own NumPy kernels (``lowering.kernels.registry.KERNELS``, with a
  :class:`lowering.kernels.context.KernelContext`: the executor is not imported), for results of
  at most ``max-elements`` elements.

Every rewrite is exact: results before and after are bit-identical. Hence
``x + 0.0`` is *not* folded for floating point (``-0.0 + 0.0`` is ``+0.0``);
``x + (-0.0)`` and ``x - 0.0`` are. (XLA's algebraic simplifier folds ``A + 0``
regardless of signed zeros; we keep results identical instead.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

import lowering.kernels  # noqa: F401  (registers every kernel family)
from lowering.kernels.context import KernelContext
from lowering.kernels.registry import KERNELS, Constant
from xla_dialect.errors import UnsupportedError
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import HloOp
from xla_dialect.ops.collectives import CollectiveOp
from xla_dialect.xdsl_compat import operands_of

from .base import PatternPass
from .movement import SIMPLIFY_PATTERNS
from .patterns import Rule, RulePass, m, rule
from .purity import is_pure
from .registry import register_pass
from .runner import run
from .util import AttrInterner, constant_array, erase_op, make_constant
from .quantized import computes_on_quantized

# ----------------------------------------------------------------------------
# cse
# ----------------------------------------------------------------------------


def _cse_key(op: Operation, intern: AttrInterner) -> tuple | None:
    """What identifies ``op``'s computation: class, operands, properties, attributes, result types
    (None when some part cannot be hashed, e.g. xDSL tuple types: such ops are left alone).

    Attributes enter as their :class:`~passes.util.AttrInterner` numbers: equal
    numbers exactly when the attributes are equal, without rehashing them.
    """
    return intern.op_signature(op, [type(op), op.name, len(op.regions), *operands_of(op)], operand_types=False)


class _CSE:
    """Common-subexpression elimination over hlo (and other side-effect-free) ops.

    One dictionary per region scope, chained to the enclosing scopes, so an op
    inside a region may reuse an identical op of an enclosing block (it
    dominates it) but never the other way round. Ops with regions must also
    have structurally equivalent regions. Ops are first grouped by class and
    operands; the full key (from interned attributes) is built only for ops
    whose group already has members, and then once (xDSL's driver rehashes
    properties and types at every lookup and copies its table for every
    region, which dominates on large programs).
    """

    def __init__(self):
        self.intern = AttrInterner()
        self._keys: dict[int, tuple | None] = {}  # id(op) -> its key (ops in the tables stay alive)

    def key(self, op: Operation) -> tuple | None:
        """``_cse_key(op)``, computed once per op."""
        found = self._keys.get(id(op), _NO_KEY)
        if found is _NO_KEY:
            found = self._keys[id(op)] = _cse_key(op, self.intern)
        return found

    def region(self, region, scopes: list[dict]) -> None:
        for block in region.blocks:
            self.block(block, scopes + [{}])

    def block(self, block, scopes: list[dict]) -> None:
        # Tables map (class, operands) to the ops seen with them: most ops have operands no earlier
        # op has, and need no full key at all. Candidates are compared by full key, in the order
        # they were seen, innermost scope first.
        table = scopes[-1]
        outer = scopes[-2::-1]
        next_op = block.first_op
        while next_op is not None:
            op, next_op = next_op, next_op.next_op  # op may be erased below, never the next one
            regions = op.regions
            if regions:
                for region in regions:
                    if len(region.blocks) == 1:
                        self.region(region, scopes)
                if any(len(r.blocks) > 1 for r in regions):
                    continue
            if not op.results or not is_pure(op):
                continue
            prefix = (type(op), *operands_of(op))
            existing = self._find(op, prefix, table)
            if existing is None:
                for scope in outer:
                    existing = self._find(op, prefix, scope)
                    if existing is not None:
                        break
            if existing is _NO_KEY:
                continue  # the op cannot be hashed: left alone
            if existing is None:
                table.setdefault(prefix, []).append(op)
                continue
            for old, new in zip(op.results, existing.results):
                old.replace_all_uses_with(new)
            erase_op(op)

    def _find(self, op: Operation, prefix: tuple, scope: dict):
        """The first op of ``scope`` computing what ``op`` computes (None; _NO_KEY if ``op`` has no key)."""
        candidates = scope.get(prefix)
        if not candidates:
            return None
        key = self.key(op)
        if key is None:
            return _NO_KEY
        for candidate in candidates:
            if self.key(candidate) == key and all(
                    a.is_structurally_equivalent(b) for a, b in zip(op.regions, candidate.regions)):
                return candidate
        return None


_NO_KEY = object()


@register_pass
@dataclass(frozen=True)
class CSEPass(PatternPass):
    """``cse``: merge identical pure ops (same operands, properties and result types, layouts included)."""

    name = "cse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        cse = _CSE()
        for region in op.regions:
            cse.region(region, [])


# ----------------------------------------------------------------------------
# dce
# ----------------------------------------------------------------------------


class RemoveDeadPureOp(RewritePattern):
    """Erase a pure op none of whose results is used."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if op.parent is None:
            return
        for r in op.results:
            if r.first_use is not None:
                return
        if is_pure(op):
            rewriter.erase(op)


@register_pass
@dataclass(frozen=True)
class DCEPass(PatternPass):
    """``dce``: drop pure ops whose results are unused."""

    name = "dce"
    PATTERNS = (RemoveDeadPureOp,)
    WALK_REVERSE = True


def _dead(op: Operation) -> bool:
    return bool(op.results) and all(r.first_use is None for r in op.results) and is_pure(op)


def remove_dead_ops(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` after ``dce`` (a copy with ``clone``), or ``module`` itself when no pure op is dead (checked
    first). The executor runs it before contracting multiply-adds, as XLA removes dead code before it fuses:
    a dead user of a multiply must not keep it from contracting (found by the differential fuzzer: a
    ``fori_loop`` body's unused ``v0 * c`` kept ``v0 + x`` from being XLA's FMA)."""
    if not any(_dead(op) for op in module.walk()):
        return module
    if clone:
        module = module.clone()
    run(module, DCEPass(), verify=False)
    return module


# ----------------------------------------------------------------------------
# simplify: identity operands
# ----------------------------------------------------------------------------


def _bits_equal(scalar: np.ndarray, value) -> bool:
    want = np.asarray(value).astype(scalar.dtype).reshape(())
    return scalar.tobytes() == want.tobytes()


def _additive_identity(s: np.ndarray) -> bool:
    # -0.0 is the exact additive identity of IEEE floats (+0.0 turns -0.0 into +0.0).
    kind = element_kind(s)
    if kind == "float":
        return _bits_equal(s, -0.0)
    if kind == "complex":
        return _bits_equal(s, complex(-0.0, -0.0))
    return _bits_equal(s, 0)


def _zero(s: np.ndarray) -> bool:
    return _bits_equal(s, 0)


def _one(s: np.ndarray) -> bool:
    return _bits_equal(s, 1)


def _all_ones(s: np.ndarray) -> bool:
    return s.tobytes() == b"\xff" * s.dtype.itemsize or (s.dtype == np.bool_ and bool(s))


def element_kind(s: np.ndarray) -> str:
    """'pred' | 'sint' | 'uint' | 'float' | 'complex' of a NumPy scalar array."""
    from xla_dialect.types import element_type_from_dtype

    return element_type_from_dtype(s.dtype).kind


IDENTITY_OPERANDS: list[tuple[type[HloOp], str, Callable[[np.ndarray], bool]]] = [
    # (binary op class, which operand may be the identity, test on its splat value)
    (ew.AddOp, "either", _additive_identity),
    (ew.SubOp, "rhs", _zero),  # x - (+0) == x exactly, also for x = -0.0
    (ew.MulOp, "either", _one),
    (ew.DivOp, "rhs", _one),
    (ew.OrOp, "either", _zero),
    (ew.XorOp, "either", _zero),
    (ew.AndOp, "either", _all_ones),
    (ew.ShiftLeftOp, "rhs", _zero),
    (ew.ShiftRightLogicalOp, "rhs", _zero),
    (ew.ShiftRightArithmeticOp, "rhs", _zero),
]
"""Operands that leave a binary op's other operand unchanged, bit for bit."""



def _not_quantized(op) -> bool:
    # A quantized 0 or 1 is a storage value, and the result is requantized anyway.
    return not computes_on_quantized(op)


def _identity_rules() -> list[Rule]:
    """``x op e`` -> ``x`` for each entry of :data:`IDENTITY_OPERANDS`: ``e`` a splat ``hlo.constant`` (not
    seen through broadcasts or converts) passing the entry's test. The constant on the right is tried
    first; ``x`` is forwarded only when its type is the result's (no implicit broadcast undone)."""
    rules = []
    for cls, side, test in IDENTITY_OPERANDS:
        mnemonic = cls.SPEC.mnemonic  # (in the rules' names)
        identity = m.ConstantScalar(test, through=())
        rules.append(rule(m.Op(cls, "x", identity), "x", when=_not_quantized, name=f"x {mnemonic} e -> x"))
        if side == "either":
            rules.append(rule(m.Op(cls, identity, "x"), "x", when=_not_quantized, name=f"e {mnemonic} x -> x"))
    return rules


IDENTITY_RULES = tuple(_identity_rules())
"""The rules of :data:`IDENTITY_OPERANDS` (:mod:`passes.patterns`)."""


@register_pass
@dataclass(frozen=True)
class SimplifyPass(RulePass):
    """``simplify``: algebraic and data-movement no-ops (x+0, x*1, transpose of transpose, ...).

    Its report counts the rewrites of its rules (the identity operands, the data-movement no-ops and
    reshape chains), not those of the hand-written patterns (transpose and broadcast chains)."""

    name = "simplify"
    PATTERNS = (*IDENTITY_RULES, *SIMPLIFY_PATTERNS)


# ----------------------------------------------------------------------------
# fold-constants
# ----------------------------------------------------------------------------


class ConstantEvaluator:
    """Runs one op's NumPy kernel on constant operands (a lowering context per module)."""

    def __init__(self):
        self._contexts: dict[int, KernelContext] = {}

    def context(self, op: Operation) -> KernelContext:
        """The kernel context of ``op``'s module (one per module)."""
        module = op.get_toplevel_object()
        ctx = self._contexts.get(id(module))
        if ctx is None:
            ctx = self._contexts[id(module)] = KernelContext(module)
        return ctx

    def value(self, value, max_elements: int) -> np.ndarray | None:
        """The constant value of ``value``: an hlo.constant, or a pure zero-operand op like iota (not the device's
        replica or partition id)."""
        array = constant_array(value)
        if array is not None:
            return array
        owner = value.owner
        # (replica_id and partition_id are pure but differ per device: never constants)
        if (isinstance(owner, HloOp) and not owner.operands and not owner.regions and len(owner.results) == 1
                and not isinstance(owner, CollectiveOp)
                and isinstance(value.type, TensorType) and _count(value.type) <= max_elements and is_pure(owner)):
            factory = KERNELS.get(type(owner))
            if factory is not None:
                try:
                    kernel = factory(owner, self.context(owner))
                except UnsupportedError:  # e.g. a call: functions are compiled only by the executor
                    return None
                if isinstance(kernel, Constant):
                    return np.asarray(kernel.value)
        return None

    def evaluate(self, op: Operation, args: list[np.ndarray]) -> list[np.ndarray] | None:
        """``op``'s results on constant operands ``args``, or None where its kernel cannot run here."""
        factory = KERNELS.get(type(op))
        if factory is None:
            return None
        try:
            kernel = factory(op, self.context(op))
        except UnsupportedError:  # e.g. a call: functions are compiled only by the executor
            return None
        if isinstance(kernel, Constant):
            out = kernel.value
        else:
            with np.errstate(all="ignore"):
                out = kernel(*args)
        outs = list(out) if len(op.results) > 1 else [out]
        return [np.asarray(o) for o in outs]


def _count(t: TensorType) -> int:
    return int(np.prod(t.get_shape(), dtype=np.int64))


class FoldConstantOperands(RewritePattern):
    """Replace a pure op whose operands are all constants by constants of its results."""

    def __init__(self, max_elements: int, evaluator: ConstantEvaluator):
        self.max_elements = max_elements
        self.evaluator = evaluator

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, HloOp) or not op.operands or op.regions or not op.results:
            return
        if computes_on_quantized(op):  # kernels compute on floats: lower-quantized expands these first
            return
        if not all(isinstance(r.type, TensorType) and _count(r.type) <= self.max_elements for r in op.results):
            return
        args = []
        for v in op.operands:
            if not isinstance(v.type, TensorType):
                return
            a = self.evaluator.value(v, self.max_elements)
            if a is None:
                return
            args.append(a)
        if not is_pure(op):
            return
        outs = self.evaluator.evaluate(op, args)
        if outs is None:
            return
        consts = []
        for out, result in zip(outs, op.results):
            want = tuple(result.type.get_shape())
            if out.shape != want:
                out = np.broadcast_to(out, want)
            consts.append(make_constant(out, result.type))
        rewriter.replace(op, consts, [c.results[0] for c in consts])


@register_pass
@dataclass(frozen=True)
class FoldConstantsPass(PatternPass):
    """``fold-constants{max-elements=N}``: evaluate constant subexpressions with the NumPy kernels."""

    name = "fold-constants"
    max_elements: int = 4096
    """Results with more elements are left alone (folding would bloat the program)."""

    def patterns(self) -> list[RewritePattern]:
        return [FoldConstantOperands(self.max_elements, ConstantEvaluator())]

