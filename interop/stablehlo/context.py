"""jaxlib's MLIR: the one context every StableHLO module of the importer is parsed in.

The bottom of the StableHLO package (:mod:`interop.stablehlo`): the parser, the value conversions and the
chlo expansions use it; it imports none of them."""

from __future__ import annotations

_CONTEXT = None


def _ir():
    from jaxlib.mlir import ir

    return ir


def mlir_context():
    """The jaxlib MLIR context used to parse StableHLO (created once).

    It has every dialect JAX emits registered (stablehlo, chlo, func, sdy, ...)
    and allows unregistered dialects so that test-harness ops such as
    ``check.expect_eq`` in the generic form parse (converters may handle them).
    """
    global _CONTEXT
    if _CONTEXT is None:
        from jax._src.interpreters import mlir as jax_mlir

        _CONTEXT = jax_mlir.make_ir_context()
        _CONTEXT.allow_unregistered_dialects = True
    return _CONTEXT


NEWER_DIALECT = "stablehlo_next"
"""Where ops of the current StableHLO spec that jaxlib's parser does not know (yet) are read: as opaque ops
of this unregistered dialect (no verification by jaxlib), converted by the importer like ``stablehlo.*``."""
