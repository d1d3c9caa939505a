"""chlo ops without a converter of their own: expanded by XLA's own decompositions.

:func:`legalize_chlo` runs XLA's chlo legalization on a module (through jaxlib's
StableHLO -> XLA -> StableHLO round trip); :func:`legalize_chlo_op` does it for one op,
cached. The importer inlines the expansion (:func:`interop.stablehlo.dispatch.chlo_through_xla`)."""

from __future__ import annotations

from typing import Any

from xla_dialect.errors import UnsupportedError

from .context import _ir, mlir_context
from .parse import parse_mlir


def legalize_chlo(module, debug_info: bool = True):
    """``module`` with its chlo ops expanded into StableHLO, the way XLA compiles them.

    jaxlib exposes no MLIR pass pipeline, but it converts StableHLO to an XLA
    computation (legalizing chlo with XLA's own decompositions) and back; the
    result computes the same and keeps the source locations (``debug_info``).
    XLA takes the function named ``main`` as the entry and keeps only what it
    calls: :func:`legalize_chlo_op` expands single ops of any function.
    """
    from jax._src.lib import _jax

    text = module.operation.get_asm(enable_debug_info=debug_info)
    try:
        computation = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=False)
        legal = _jax.mlir.xla_computation_to_mlir_module(computation)
    except Exception as e:
        raise UnsupportedError(f"cannot expand the chlo ops through XLA: {e}") from None
    return parse_mlir(legal)


_LEGALIZED: dict[str, Any] = {}
"""Expansions of chlo ops by :func:`legalize_chlo_op`, keyed by the text of the one-op module."""

_LEGALIZED_LIMIT = 512


def legalize_chlo_op(op):
    """XLA's StableHLO expansion of one chlo op: a module whose ``@main`` takes the op's operands
    and returns its results (cached per op text, attributes and types).

    The op is copied alone into a fresh module, so the function holding it
    may have any name and the rest of the program is not touched.
    """
    from jaxlib.mlir.dialects import func as mlir_func

    ir = _ir()
    op = op.operation
    with mlir_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            main = mlir_func.FuncOp("main", ([v.type for v in op.operands], [r.type for r in op.results]))
            block = main.add_entry_block()
        with ir.InsertionPoint(block):
            copy = op.clone()
            for i, arg in enumerate(block.arguments):
                copy.operands[i] = arg
            mlir_func.ReturnOp(list(copy.results))
        key = module.operation.get_asm()
    hit = _LEGALIZED.get(key)
    if hit is None:
        hit = legalize_chlo(module, debug_info=False)
        if len(_LEGALIZED) >= _LEGALIZED_LIMIT:
            _LEGALIZED.clear()
        _LEGALIZED[key] = hit
    return hit
