"""``canonicalize-broadcasts``: make every implicit broadcast explicit, then tidy up.

After this pass the operands of every binary, compare, select and clamp op have
exactly the result's shape (select's predicate and clamp's bounds included),
so nothing downstream (the executor, layout assignment, tiling) needs to know
XLA's implicit broadcasting rules. The expansion is exactly the sequence
XLA's ``XlaBuilder::BinaryOp`` / ``TernaryOp`` emit:

1. *InDim* broadcasting — the lower-rank operand of a binary op with
   ``broadcast_dimensions`` becomes a ``broadcast_in_dim`` to the result's
   rank, keeping its own sizes at the mapped dimensions and the result's sizes
   elsewhere;
2. ``AddBroadcastSequence`` — a scalar is broadcast with
   ``broadcast_in_dim`` (no dimensions); an operand whose size-1 dimensions
   must grow is first reshaped to drop those dimensions, then broadcast with
   ``broadcast_in_dim`` to the result shape.

The pass also turns ``hlo.broadcast`` into ``broadcast_in_dim``, folds a
broadcast of a broadcast into one, a broadcast of a splat constant into a
constant (up to ``max-splat-elements``), and drops identity
broadcasts/reshapes/transposes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from xla_dialect.layout import Layout, layout_of
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import ints

from .base import PatternPass
from .movement import IDENTITY_PATTERNS, ComposeBroadcasts
from .patterns import RulePass, m, rule
from .registry import register_pass
from .runner import run
from .util import create, i64s, tensor_type


def _array_type(element_type: Attribute, shape: Sequence[int], like: Attribute) -> TensorType:
    """A tensor type; it carries the default layout when ``like`` carries a layout (builder convention)."""
    if layout_of(like) is None:
        return tensor_type(element_type, shape, None)
    layout = _DEFAULT_LAYOUTS.get(len(shape))
    if layout is None:
        layout = _DEFAULT_LAYOUTS[len(shape)] = Layout.default(len(shape))
    return tensor_type(element_type, shape, layout)


_DEFAULT_LAYOUTS: dict[int, Layout] = {}


def _broadcast_in_dim(value: SSAValue, shape: Sequence[int], dims: Sequence[int], like: Attribute,
                      new_ops: list[Operation]) -> SSAValue:
    op = create(dm.BroadcastInDimOp, [value], {"broadcast_dimensions": i64s(dims)},
                [_array_type(value.type.element_type, shape, like)])
    new_ops.append(op)
    return op.results[0]


def add_broadcast_sequence(value: SSAValue, out_shape: Sequence[int], like: Attribute,
                           new_ops: list[Operation]) -> SSAValue:
    """XLA's ``AddBroadcastSequence``: broadcast a scalar or same-rank ``value`` to ``out_shape``."""
    shape = tuple(value.type.get_shape())
    out_shape = tuple(out_shape)
    if shape == out_shape:
        return value
    if not shape:
        return _broadcast_in_dim(value, out_shape, [], like, new_ops)
    kept = [i for i, (a, b) in enumerate(zip(shape, out_shape)) if a == b]
    # Eliminate the size-1 dimensions that grow, then broadcast the rest in place.
    reshape = create(dm.ReshapeOp, [value], {},
                     [_array_type(value.type.element_type, [shape[i] for i in kept], like)])
    new_ops.append(reshape)
    return _broadcast_in_dim(reshape.results[0], out_shape, kept, like, new_ops)


def explicit_binary_operands(op: Operation, new_ops: list[Operation]) -> tuple[SSAValue, SSAValue]:
    """The operands of binary/compare ``op`` broadcast to its result shape (XLA ``BinaryOp``)."""
    lhs, rhs = op.operands
    out_shape = tuple(op.results[0].type.get_shape())
    like = op.results[0].type
    bdims = ints(op.properties.get("broadcast_dimensions"))
    lrank, rrank = lhs.type.get_num_dims(), rhs.type.get_num_dims()
    if bdims and lrank != rrank:
        # XLA's BinaryOp: the lower-rank operand first broadcast into the result's rank by
        # broadcast_dimensions (its size-1 dimensions kept), then both by AddBroadcastSequence.
        small = lhs if lrank < rrank else rhs
        small_shape = small.type.get_shape()
        dims = ew.implicit_broadcast_dims(small_shape, len(out_shape), bdims)
        to_size = [small_shape[dims.index(d)] if d in dims else out_shape[d] for d in range(len(out_shape))]
        widened = _broadcast_in_dim(small, to_size, dims, like, new_ops)
        lhs, rhs = (widened, rhs) if small is lhs else (lhs, widened)
    return (add_broadcast_sequence(lhs, out_shape, like, new_ops),
            add_broadcast_sequence(rhs, out_shape, like, new_ops))


def update_in_place(op: Operation, operands, new_ops: list[Operation], rewriter: PatternRewriter) -> None:
    """Insert the broadcasts before ``op`` and make it use them (no implicit broadcasting left).

    The op is modified rather than recreated: same result value, fewer IR objects.
    """
    rewriter.insert(new_ops, InsertPoint.before(op))
    op.operands = list(operands)
    op.properties.pop("broadcast_dimensions", None)
    rewriter.notify_op_modified(op)


def _needs_expansion(op: Operation) -> bool:
    out = op.results[0].type
    out_shape = out.get_shape()
    if "broadcast_dimensions" in op.properties:
        return True
    for v in op.operands:
        t = v.type
        if t is not out and isinstance(t, TensorType) and t.get_shape() != out_shape:
            return True
    return False


def needs_canonicalization(module: Operation) -> bool:
    """Whether some op of ``module`` uses implicit broadcasting or ``hlo.broadcast``, or is a broadcast of a
    broadcast (jax's keepdims statistics broadcast back: composed, the executor's fusion reads them per row)."""
    for op in module.walk():
        if isinstance(op, (ew.BinaryElementwiseOp, ew.CompareOp, ew.SelectOp, ew.ClampOp)):
            if isinstance(op.results[0].type, TensorType) and _needs_expansion(op):
                return True
        elif isinstance(op, dm.BroadcastOp):
            return True
        elif isinstance(op, dm.BroadcastInDimOp) and isinstance(op.operands[0].owner, dm.BroadcastInDimOp):
            return True
    return False


class ExplicitBinaryBroadcast(RewritePattern):
    """Binary and compare ops: implicit broadcasting -> ``broadcast_in_dim`` (+ ``reshape``) operands."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ew.BinaryElementwiseOp | ew.CompareOp, rewriter: PatternRewriter) -> None:
        if not _needs_expansion(op):
            return
        new_ops: list[Operation] = []
        operands = explicit_binary_operands(op, new_ops)
        update_in_place(op, operands, new_ops, rewriter)


def needs_explicit_binary_broadcasts(module: Operation) -> bool:
    """Whether some binary or compare op of ``module`` broadcasts implicitly (what HLO text cannot say;
    select's scalar predicate and clamp's scalar bounds it can)."""
    return any(isinstance(op, (ew.BinaryElementwiseOp, ew.CompareOp)) and isinstance(op.results[0].type, TensorType)
               and _needs_expansion(op) for op in module.walk())


class ExplicitScalarOperands(RewritePattern):
    """select's scalar predicate and clamp's scalar bounds -> ``broadcast_in_dim`` to the result shape."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ew.SelectOp | ew.ClampOp, rewriter: PatternRewriter) -> None:
        result = op.results[0].type
        if not isinstance(result, TensorType) or not _needs_expansion(op):
            return  # selecting between tuples keeps its scalar predicate
        new_ops: list[Operation] = []
        operands = [add_broadcast_sequence(v, result.get_shape(), result, new_ops) for v in op.operands]
        update_in_place(op, operands, new_ops, rewriter)


class BroadcastToBroadcastInDim(RewritePattern):
    """``hlo.broadcast(x, sizes)`` -> ``broadcast_in_dim`` mapping x to the last dimensions (as XLA's builder)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.BroadcastOp, rewriter: PatternRewriter) -> None:
        rank = op.operand.type.get_num_dims()
        new = len(ints(op.broadcast_sizes))
        rewriter.replace(op, create(dm.BroadcastInDimOp, [op.operand],
                                    {"broadcast_dimensions": i64s(range(new, new + rank))},
                                    [op.result.type]))


def _small_enough(op, options) -> bool:
    return int(np.prod(op.results[0].type.get_shape(), dtype=np.int64)) <= options.max_splat_elements


FOLD_BROADCAST_OF_SPLAT = rule(
    m.BroadcastInDim(m.ConstantScalar(name="scalar", through=())),
    lambda b, scalar, op: b.constant_of_type(scalar, op.results[0].type),
    when=_small_enough, keep_locations=False, name="broadcast_in_dim(splat constant) -> splat constant")
"""``broadcast_in_dim(splat constant)`` -> a splat constant of the result type, up to the pass's
``max-splat-elements`` (larger constants would bloat the program)."""


@register_pass
@dataclass(frozen=True)
class ExplicitBinaryBroadcastsPass(PatternPass):
    """``explicit-binary-broadcasts``: only binary and compare ops' implicit broadcasting made explicit
    (what XLA's HLO text needs; nothing else of the module changes)."""

    name = "explicit-binary-broadcasts"
    PATTERNS = (ExplicitBinaryBroadcast,)
    CONFIRM_FIXED_POINT = False


@register_pass
@dataclass(frozen=True)
class CanonicalizeBroadcastsPass(RulePass):
    """``canonicalize-broadcasts{max-splat-elements=N}``: every implicit broadcast made explicit.

    Its report counts the rewrites of its rules (identity broadcasts, reshapes and transposes, folded splats),
    not the broadcasts it makes explicit."""

    name = "canonicalize-broadcasts"
    PATTERNS = (ExplicitBinaryBroadcast, ExplicitScalarOperands, BroadcastToBroadcastInDim,
                ComposeBroadcasts, *IDENTITY_PATTERNS)
    # The patterns look at the op and at its operands' defining broadcasts and constants, which
    # are replaced (their users then revisited), never modified in place: one sweep suffices.
    CONFIRM_FIXED_POINT = False
    max_splat_elements: int = 65536
    """Broadcasts of splat constants up to this many elements become constants."""
    RULES = (FOLD_BROADCAST_OF_SPLAT,)


def canonicalize_broadcasts(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """Run ``canonicalize-broadcasts`` on ``module`` and return the result.

    This is the hook for the executor's lowering: afterwards no binary,
    compare, select or clamp op relies on implicit broadcasting. With
    ``clone`` the caller's module is left untouched: a rewritten copy is
    returned, or ``module`` itself when nothing needs rewriting (checked
    first, cheaply).
    """
    if clone:
        if not needs_canonicalization(module):
            return module
        module = module.clone()
    run(module, CanonicalizeBroadcastsPass(), verify=False)
    return module
