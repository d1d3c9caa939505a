"""XLA's bounded dynamic dimensions (``f32[<=8,4]`` in HLO text) at :func:`lowering.compile`.

The importer reads such a shape as its bound (a static ``f32[8,4]``) and keeps the shape as written in the
op's (or parameter's) ``hlo.dynamic_shape`` attribute (:data:`xla_dialect.shape.DYNAMIC_SHAPE`). The executor's
arrays have static shapes, so it runs only what does not depend on a dynamic size beyond the size itself:

* ``get-dimension-size(x), dimensions={d}`` where ``x`` is ``set-dimension-size(y, n), dimensions={d}``,
  directly or through element-wise ops on values of that dynamic dimension, is ``n`` (what XLA computes);
* the set-dimension-size and element-wise ops with dynamic dimensions that are then dead are removed.

Any value with bounded dynamic dimensions still used after that (a reduction over it, a result, a
parameter) is an :class:`UnsupportedError` naming the op and where the shape is written (``file:line:col``).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import OpResult

from xla_dialect.errors import UnsupportedError
from xla_dialect.shape import DYNAMIC_SHAPE, parse_shape


def _dynamic_dimensions(attributes) -> tuple[int, ...]:
    """The dynamic dimensions of a single-array value (from its ``hlo.dynamic_shape``), () for none."""
    written = attributes.get(DYNAMIC_SHAPE)
    if not isinstance(written, StringAttr):
        return ()
    dynamic: list = []
    parse_shape(written.data, dynamic)
    return dynamic[0] if len(dynamic) == 1 else ()


def _size_set_for(value, dimension: int):
    """The ``size`` operand of the set-dimension-size that gives ``value`` its dynamic ``dimension``
    (through element-wise ops), or None."""
    from xla_dialect.ops.effects import SetDimensionSizeOp
    from xla_dialect.ops.elementwise import BinaryElementwiseOp, UnaryElementwiseOp

    seen = 0
    while isinstance(value, OpResult) and seen < 10_000:
        seen += 1
        op = value.owner
        if dimension not in _dynamic_dimensions(op.attributes):
            return None
        if isinstance(op, SetDimensionSizeOp):
            return op.size if op.dimension.value.data == dimension else None
        if not isinstance(op, (UnaryElementwiseOp, BinaryElementwiseOp)):
            return None
        nxt = [v for v in op.operands
               if isinstance(v, OpResult) and dimension in _dynamic_dimensions(v.owner.attributes)]
        if not nxt:
            return None
        value = nxt[0]
    return None


def resolve_dynamic_sizes(module: ModuleOp) -> ModuleOp:
    """``module`` itself when nothing in it has bounded dynamic dimensions; else a copy with the sizes XLA
    would compute forwarded to get-dimension-size and the dead dynamic values removed (see the module doc).
    Raises :class:`UnsupportedError` when a value with dynamic dimensions is still used."""
    from xla_dialect.ops.effects import GetDimensionSizeOp

    def marked(op) -> bool:
        if DYNAMIC_SHAPE in op.attributes:
            return True
        return isinstance(op, func.FuncOp) and op.arg_attrs is not None and any(
            DYNAMIC_SHAPE in a.data for a in op.arg_attrs.data)

    if not any(marked(op) for op in module.walk()):
        return module
    module = module.clone()
    for op in list(module.walk()):
        if isinstance(op, GetDimensionSizeOp):
            size = _size_set_for(op.operand, op.dimension.value.data)
            if size is not None and size.type == op.result.type:
                op.result.replace_all_uses_with(size)
                op.detach()  # (pure, and unused now: it would keep the dynamic value alive)
                op.erase()
    _remove_dead_dynamic_values(module)
    for op in module.walk():
        if DYNAMIC_SHAPE in op.attributes:
            name = op.attributes.get("hlo.name")
            _fail(op.attributes, op.name + (f" %{name.data}" if isinstance(name, StringAttr) else ""))
        if isinstance(op, func.FuncOp) and op.arg_attrs is not None:
            for i, attrs in enumerate(op.arg_attrs.data):
                if DYNAMIC_SHAPE in attrs.data and op.body.block.args[i].first_use is not None:
                    name = attrs.data.get("hlo.name")
                    _fail(attrs.data, f"parameter {i}" + (f" %{name.data}" if isinstance(name, StringAttr) else "")
                          + f" of @{op.sym_name.data}")
    return module


def _remove_dead_dynamic_values(module: ModuleOp) -> None:
    """Erase the set-dimension-size and element-wise ops with dynamic dimensions whose results are unused
    (those ops are pure), until none is left."""
    from xla_dialect.ops.effects import SetDimensionSizeOp
    from xla_dialect.ops.elementwise import BinaryElementwiseOp, UnaryElementwiseOp

    removable = (SetDimensionSizeOp, UnaryElementwiseOp, BinaryElementwiseOp)
    changed = True
    while changed:
        changed = False
        for op in list(module.walk()):
            if (DYNAMIC_SHAPE in op.attributes and isinstance(op, removable)
                    and all(r.first_use is None for r in op.results)):
                op.detach()
                op.erase()
                changed = True


def _fail(attributes, what: str):
    where = attributes.get("hlo.position")
    raise UnsupportedError(
        f"{where.data + ': ' if isinstance(where, StringAttr) else ''}{what} has the bounded dynamic shape "
        f"{attributes[DYNAMIC_SHAPE].data}: the executor runs static shapes only (it computes get-dimension-size "
        f"of a set-dimension-size; other uses of XLA's dynamic dimensions are read, kept and printed back by "
        f"interop.hlo, not executed)")
