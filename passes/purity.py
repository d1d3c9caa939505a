"""Which ops are free of side effects (may be deduplicated, moved or dropped).

The hlo op classes carry no xDSL effect traits; instead this module decides,
for all of them at once, from one table of XLA's side-effecting opcodes
(``HloInstruction::HasSideEffectNoRecurse``): I/O and communication through
tokens, collectives, ``rng``, side-effecting custom calls. An op with regions is
pure when everything inside it is. Ops of other dialects fall back to xDSL's
traits.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, TupleType
from xdsl.ir import Attribute, Operation
from xdsl.traits import IsTerminator, is_side_effect_free

from xla_dialect.callbacks import HOST_CALLBACK_TARGETS
from xla_dialect.ops import collectives as co
from xla_dialect.ops import effects as fx
from xla_dialect.ops import numerics as nm
from xla_dialect.ops.base import HloOp
from xla_dialect.types import TokenType
from xla_dialect.xdsl_compat import operands_of

IMPURE_OPS: set[type[Operation]] = {
    fx.AfterAllOp,
    co.AllGatherOp,
    co.AllReduceOp,
    co.AllToAllOp,
    co.CollectiveBroadcastOp,
    co.CollectivePermuteOp,
    co.CollectiveReduceOp,
    fx.CustomCallOp,  # only with has_side_effect = true, see is_pure
    fx.InfeedOp,
    fx.OptimizationBarrierOp,
    fx.OutfeedOp,
    fx.RecvOp,
    co.ReduceScatterOp,
    nm.RngOp,
    fx.SendOp,
}
"""Op classes with observable effects beyond their results (plugins may add to it)."""


_TOKEN_KIND: dict[type, int] = {}
"""Type class -> 0 (never a token), 1 (a token type), 2 (a tuple type: look inside)."""


def _mentions_token(t: Attribute) -> bool:
    cls = type(t)
    kind = _TOKEN_KIND.get(cls)
    if kind is None:  # isinstance on xDSL's ABC-based attribute classes is slow: decide once per class
        kind = _TOKEN_KIND[cls] = 1 if issubclass(cls, TokenType) else 2 if issubclass(cls, TupleType) else 0
    if kind == 0:
        return False
    return kind == 1 or any(_mentions_token(e) for e in t.types)


def _flag(op: Operation, name: str) -> bool | None:
    attr = op.properties.get(name) or op.attributes.get(name)
    if attr is None:
        return None
    if isinstance(attr, IntegerAttr):  # (BoolAttr is IntegerAttr[i1]; a subscripted generic cannot be isinstance'd)
        return bool(attr.value.data)
    return True


_CLASS_PURE: dict[type, bool | str] = {}
"""Op class -> False (never pure), True (pure unless it touches tokens or holds impure ops),
"custom_call" (as True, unless the op says it has side effects), "traits" (xDSL's traits decide)."""


def _class_purity(op: Operation) -> bool | str:
    if op.has_trait(IsTerminator, value_if_unregistered=False):
        return False
    if not isinstance(op, HloOp):
        return "traits"  # decided per op by xDSL's traits
    if isinstance(op, fx.CustomCallOp):
        return "custom_call"
    return type(op) not in IMPURE_OPS


def is_pure(op: Operation) -> bool:
    """True when ``op`` only computes its results (no effects, deterministic)."""
    cls = type(op)
    pure = _CLASS_PURE.get(cls)
    if pure is None:
        pure = _CLASS_PURE[cls] = _class_purity(op)
    if pure is not True:
        if pure == "traits":
            return is_side_effect_free(op)
        if pure is False:
            return False
        if _flag(op, "has_side_effect"):
            return False  # as in XLA: a custom call has effects only when it says so
        if op.properties["call_target_name"].data in HOST_CALLBACK_TARGETS:
            return False  # a Python callback (jax.pure_callback, eqx.error_if): run at every call, never folded
    kinds = _TOKEN_KIND
    for v in operands_of(op):
        t = v.type
        if kinds.get(type(t)) != 0 and _mentions_token(t):
            return False
    for v in op.results:
        t = v.type
        if kinds.get(type(t)) != 0 and _mentions_token(t):
            return False
    for region in op.regions:
        for inner in region.walk():
            if inner.has_trait(IsTerminator, value_if_unregistered=False):
                continue
            if not is_pure(inner):
                return False
    return True
