"""Rewrite patterns on data-movement ops, shared by ``simplify`` and ``canonicalize-broadcasts``.

No-ops vanish (identity transpose/reshape/broadcast, slice of the whole, pad
by nothing, reverse of size-1 dimensions, concatenate of one operand) and
chains collapse (transpose of transpose, reshape of reshape, broadcast of
broadcast). The no-ops and the reshape chain are rules of :mod:`passes.patterns`
(a rule stands in a pattern table like a pattern class); the other chains are
hand-written patterns. A value is only forwarded in place of an op's result when the
types agree exactly, layouts included; otherwise the composed op keeps the
original result type.
"""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from xla_dialect.ops import data_movement as dm
from xla_dialect.ops.base import ints

from .patterns import m, rule
from .util import create, forward, i64s


def _is_identity(permutation) -> bool:
    return permutation == tuple(range(len(permutation)))


def _no_padding(config) -> bool:
    return not any(config or ())


def _reverses_nothing(x, op) -> bool:
    shape = x.type.get_shape()
    return all(shape[d] <= 1 for d in ints(op.dimensions))


# Each rule forwards ``x`` only when its type equals the op's result type exactly (layouts included):
# a forwarded value never changes a type. A reshape, broadcast or slice whose result has its operand's
# type is the identity (a broadcast's dimensions are then the identity, a slice starts at 0 with
# stride 1 in every dimension of size > 1).
DROP_IDENTITY_TRANSPOSE = rule(m.Transpose("x", permutation=_is_identity), "x",
                               name="transpose(x, identity permutation) -> x")
DROP_SAME_SHAPE_OP = rule(m.Op((dm.ReshapeOp, dm.BroadcastInDimOp, dm.SliceOp), "x"), "x",
                          name="reshape/broadcast_in_dim/slice(x) of x's type -> x")
DROP_EMPTY_PAD = rule(m.Pad("x", m.Any(), edge_padding_low=_no_padding, edge_padding_high=_no_padding,
                            interior_padding=_no_padding), "x", name="pad(x) by nothing -> x")
DROP_TRIVIAL_REVERSE = rule(m.Reverse("x"), "x", when=_reverses_nothing,
                            name="reverse(x) of dimensions of size <= 1 -> x")
DROP_SINGLE_CONCATENATE = rule(m.Concatenate("x"), "x", name="concatenate(x) -> x")


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


def _reshape(b, x, op):
    result = op.results[0].type
    return x if x.type == result else b.create(dm.ReshapeOp, [x], result_type=result)


COMPOSE_RESHAPES = rule(m.Reshape(m.Reshape("x")), _reshape, keep_locations=False,
                        name="reshape(reshape(x)) -> reshape(x), or x")


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


IDENTITY_PATTERNS = (DROP_IDENTITY_TRANSPOSE, DROP_SAME_SHAPE_OP)
"""Identity broadcasts, reshapes, transposes and full slices."""

SIMPLIFY_PATTERNS = (*IDENTITY_PATTERNS, DROP_EMPTY_PAD, DROP_TRIVIAL_REVERSE, DROP_SINGLE_CONCATENATE,
                     ComposeTransposes, COMPOSE_RESHAPES, ComposeBroadcasts)
"""The data-movement part of ``simplify``."""
