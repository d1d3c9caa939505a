"""Rewrite patterns on data-movement ops, shared by ``simplify`` and ``canonicalize-broadcasts``.

No-ops vanish (identity transpose/reshape/broadcast, slice of the whole, pad
by nothing, reverse of size-1 dimensions, concatenate of one operand) and
chains collapse (transpose of transpose, reshape of reshape, broadcast of
broadcast). A value is only forwarded in place of an op's result when the
types agree exactly, layouts included; otherwise the composed op keeps the
original result type.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from xla_dialect.ops import data_movement as dm
from xla_dialect.ops.base import ints

from .util import create, forward, i64s


def _shape(value) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


class DropIdentityTranspose(RewritePattern):
    """``transpose(x, [0, 1, ..., n-1])`` -> ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.TransposeOp, rewriter: PatternRewriter) -> None:
        if ints(op.permutation) == tuple(range(len(ints(op.permutation)))):
            forward(rewriter, op, op.operand)


class DropSameShapeOp(RewritePattern):
    """reshape / broadcast_in_dim / slice whose result shape equals its operand's -> operand.

    For broadcast_in_dim the dimensions are then necessarily the identity, and
    for slice the start is 0 and stride 1 in every dimension of size > 1.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.ReshapeOp | dm.BroadcastInDimOp | dm.SliceOp,
                          rewriter: PatternRewriter) -> None:
        operand, result = op.operands[0], op.results[0]  # (op.operand/op.result without IRDL's accessors)
        if result.type.get_shape() == operand.type.get_shape():
            forward(rewriter, op, operand)


class DropEmptyPad(RewritePattern):
    """``pad`` with zero edge and interior padding -> operand."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.PadOp, rewriter: PatternRewriter) -> None:
        config = ints(op.edge_padding_low) + ints(op.edge_padding_high) + ints(op.interior_padding)
        if not any(config):
            forward(rewriter, op, op.operand)


class DropTrivialReverse(RewritePattern):
    """``reverse`` of dimensions of size <= 1 only -> operand."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.ReverseOp, rewriter: PatternRewriter) -> None:
        shape = _shape(op.operand)
        if all(shape[d] <= 1 for d in ints(op.dimensions)):
            forward(rewriter, op, op.operand)


class DropSingleConcatenate(RewritePattern):
    """``concatenate(x)`` -> ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.ConcatenateOp, rewriter: PatternRewriter) -> None:
        if len(op.inputs) == 1:
            forward(rewriter, op, op.inputs[0])


class ComposeTransposes(RewritePattern):
    """``transpose(transpose(x, p), q)`` -> ``transpose(x, p∘q)`` (or ``x`` when that is the identity)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.TransposeOp, rewriter: PatternRewriter) -> None:
        inner = op.operand.owner
        if not isinstance(inner, dm.TransposeOp):
            return
        p, q = ints(inner.permutation), ints(op.permutation)
        composed = [p[j] for j in q]
        if composed == list(range(len(composed))) and forward(rewriter, op, inner.operand):
            return
        rewriter.replace(op, create(dm.TransposeOp, [inner.operand], {"permutation": i64s(composed)},
                                    [op.result.type]))


class ComposeReshapes(RewritePattern):
    """``reshape(reshape(x))`` -> ``reshape(x)`` (or ``x`` when the shapes agree)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.operand.owner
        if not isinstance(inner, dm.ReshapeOp):
            return
        if forward(rewriter, op, inner.operand):
            return
        rewriter.replace(op, create(dm.ReshapeOp, [inner.operand], {}, [op.result.type]))


class ComposeBroadcasts(RewritePattern):
    """``broadcast_in_dim(broadcast_in_dim(x, d1), d2)`` -> ``broadcast_in_dim(x, d2∘d1)``.

    Valid because each operand size is 1 or the intermediate size, which is 1
    or the final size; composed dimensions stay strictly increasing.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: dm.BroadcastInDimOp, rewriter: PatternRewriter) -> None:
        inner = op.operands[0].owner
        if not isinstance(inner, dm.BroadcastInDimOp):
            return
        d1, d2 = ints(inner.broadcast_dimensions), ints(op.broadcast_dimensions)
        dims = [d2[d] for d in d1]
        rewriter.replace(op, create(dm.BroadcastInDimOp, [inner.operand], {"broadcast_dimensions": i64s(dims)},
                                    [op.result.type]))
        if inner.results[0].first_use is None:
            rewriter.erase(inner)  # (jax's keepdims broadcast, now unused: it would split a fusion group)


IDENTITY_PATTERNS = (DropIdentityTranspose, DropSameShapeOp)
"""Identity broadcasts, reshapes, transposes and full slices."""

SIMPLIFY_PATTERNS = (*IDENTITY_PATTERNS, DropEmptyPad, DropTrivialReverse, DropSingleConcatenate,
                     ComposeTransposes, ComposeReshapes, ComposeBroadcasts)
"""The data-movement part of ``simplify``."""
