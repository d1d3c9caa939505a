"""Building xDSL ops fast: how the importers (StableHLO, HLO text) create ops and append them to blocks.

Building the xDSL ops is most of the import time. Operation.create and
Block.add_ops do general bookkeeping (dataclass defaults, default properties,
ancestor checks) that fresh ops appended in order do not need. The fast
paths below set the same fields directly; _fast_paths_work() checks once,
against xDSL's own constructors, that they produce identical objects, and
the importer falls back to the general API if not (another xDSL version).
"""

from __future__ import annotations

from xdsl.dialects.builtin import UNKNOWN_LOC, StringAttr, TensorType, f32
from xdsl.ir import Block, Operation, OpResult, SSAValues, Use

_DEFAULTS: dict[type, tuple[dict, dict]] = {}


def _defaults(cls) -> tuple[dict, dict]:
    """The default property and attribute values IRDLOperation.__post_init__ would fill in."""
    from xdsl.irdl import OptionalDef

    hit = _DEFAULTS.get(cls)
    if hit is None:
        op_def = cls.get_irdl_definition()
        hit = _DEFAULTS[cls] = tuple(
            {n: d.default_value for n, d in defs.items()
             if not isinstance(d, OptionalDef) and d.default_value is not None}
            for defs in (op_def.properties, op_def.attributes))
    return hit


def _fast_create(cls, operands, result_types, properties, attributes, regions):
    default_props, default_attrs = _DEFAULTS.get(cls) or _defaults(cls)
    if default_props:
        properties = {**default_props, **properties}
    if default_attrs:
        attributes = {**default_attrs, **attributes}
    op = cls.__new__(cls)
    d = op.__dict__
    values = SSAValues(operands)
    uses = tuple([Use(op, i) for i in range(len(values))])
    for v, u in zip(values, uses):
        v.add_use(u)
    d["_operands"] = values
    d["_operand_uses"] = uses
    d["results"] = SSAValues([OpResult(t, op, i) for i, t in enumerate(result_types)])
    d["properties"] = properties
    d["attributes"] = attributes
    d["location"] = UNKNOWN_LOC
    d["_successors"] = ()
    d["_successor_uses"] = ()
    d["regions"] = ()
    for region in regions:
        op.add_region(region)
    return op


def _slow_create(cls, operands, result_types, properties, attributes, regions):
    return cls.create(operands=operands, result_types=result_types, properties=properties,
                      attributes=attributes, regions=list(regions))


def _fast_append(block: Block, ops: list[Operation]) -> None:
    prev = block._last_op
    for op in ops:
        op.parent = block
        op._prev_op = prev
        if prev is None:
            block._first_op = op
        else:
            prev._next_op = op
        prev = op
    block._last_op = prev


def _slow_append(block: Block, ops: list[Operation]) -> None:
    block.add_ops(ops)


def _fast_paths_work() -> bool:
    try:
        from xla_dialect.ops.elementwise import AddOp

        t = TensorType(f32, [2])
        results = []
        for create, append in ((_slow_create, _slow_append), (_fast_create, _fast_append)):
            block = Block(arg_types=[t])
            a = create(AddOp, [block.args[0], block.args[0]], [t], {}, {"loc": StringAttr("x")}, ())
            b = create(AddOp, [a.results[0], block.args[0]], [t], {}, {}, ())
            append(block, [a, b])
            results.append((block, a, b))
        (b0, a0, c0), (b1, a1, c1) = results
        def fields(x):  # linkage fields left at their class default None may be unset
            return {k for k, v in x.__dict__.items() if not (k in ("_prev_op", "_next_op") and v is None)}

        same_fields = all(fields(x) == fields(y) for x, y in ((a0, a1), (c0, c1), (b0, b1)))
        return (same_fields and list(b1.ops) == [a1, c1] and a1.next_op is c1 and c1.prev_op is a1
                and b1.first_op is a1 and b1.last_op is c1 and a1.parent is b1
                and [u.operation for u in a1.results[0].uses] == [c1] and b1.is_structurally_equivalent(b0)
                and not AddOp.get_irdl_definition().properties["broadcast_dimensions"].default_value)
    except Exception:
        return False


_create, _append_ops = (_fast_create, _fast_append) if _fast_paths_work() else (_slow_create, _slow_append)
