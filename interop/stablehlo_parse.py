"""StableHLO text, bytecode and portable artifacts -> jaxlib MLIR modules (jaxlib's own parser).

:func:`parse_stablehlo` is the one entry; quantized text goes through
:mod:`interop.stablehlo_quant` first. Part of the StableHLO importer (see
:mod:`interop.stablehlo_import`)."""

from __future__ import annotations

import re



from xla_dialect.errors import MlirParseError

from .schema import QUANTIZATION, QUANTIZED


# ----------------------------------------------------------------------------
# jaxlib MLIR access
# ----------------------------------------------------------------------------

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


_BYTECODE_MAGIC = b"ML\xefR"

NEWER_DIALECT = "stablehlo_next"
"""Where ops of the current StableHLO spec that jaxlib's parser does not know (yet) are read: as opaque ops
of this unregistered dialect (no verification by jaxlib), converted by the importer like ``stablehlo.*``."""

NEWER_OPS = ("collective_reduce", "collective_broadcast", "async_start", "async_done")
"""Ops (or forms: collective_broadcast with several operands or ``has_dynamic_root``, the spec's async ops)
newer than jaxlib 0.10's StableHLO, read in :data:`NEWER_DIALECT` when jaxlib rejects the text, as is any
generic-form ``stablehlo`` op jaxlib has not registered. Only their generic form can occur (jaxlib has no
custom syntax for them). (Why not a second parser, such as xDSL's, for such text: the renamed ops keep
jaxlib's reader -- 13 us per op against ~300 for xDSL's text parser -- and one importer for every input.)"""

_GENERIC_OP = re.compile(r'"stablehlo\.(\w+)"')
_NEWER_TYPE = re.compile(r"!stablehlo\.(future)<")
"""Types of the current spec jaxlib does not know: read as opaque types of :data:`NEWER_DIALECT`."""


def _parse_newer_ops(source: str):
    """``source`` parsed with its generic-form ops that jaxlib's StableHLO does not have -- :data:`NEWER_OPS`
    and any op name jaxlib has not registered (an op of a spec newer than it) -- renamed into
    :data:`NEWER_DIALECT`, or None when it has none of them or still does not parse (the caller reports
    jaxlib's first error). The importer converts the ops it knows and names the others as unsupported."""
    ctx = mlir_context()
    newer = {name for name in _GENERIC_OP.findall(source)
             if name in NEWER_OPS or not ctx.is_registered_operation(f"stablehlo.{name}")}
    if not newer:
        return None
    ir = _ir()
    text = _GENERIC_OP.sub(lambda m: f'"{NEWER_DIALECT}.{m.group(1)}"' if m.group(1) in newer else m.group(0),
                           source)
    text = _NEWER_TYPE.sub(lambda m: f"!{NEWER_DIALECT}.{m.group(1)}<", text)
    try:
        with mlir_context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            module.operation.attributes[PARSED_NEWER_OPS] = ir.UnitAttr.get()
            return module
    except Exception:
        return None


PARSED_NEWER_OPS = "xla_dialect.parsed_newer_ops"
"""Module attribute marking text that jaxlib's parser rejected and :func:`_parse_newer_ops` read."""


def parse_stablehlo(source, trusted: bool = False):
    """Parse StableHLO into a jaxlib ``ir.Module``.

    MLIR bytecode is untrusted input for jaxlib's C++ reader, which aborts the process or loops on some
    corrupted bytes: unless ``trusted``, it is checked structurally and then read once in a child process
    (about 0.5 s) before this process reads it (:mod:`interop.bytecode_check`).

    ``source`` is MLIR text (pretty or generic form, ``str`` or UTF-8 ``bytes``),
    MLIR bytecode, or a StableHLO portable artifact (versioned VHLO bytecode,
    as in ``Exported.mlir_module_serialized``). Raises
    :class:`~xla_dialect.errors.MlirParseError` with MLIR's diagnostic.

    jaxlib has no ``quant`` dialect: text with ``!quant.uniform`` element
    types is rewritten to their expressed types first
    (:func:`interop.stablehlo_quant.expand_quantized_text`), and each op with
    quantized results carries them in a ``hlo.quantization`` attribute, so
    that the module can be edited and then imported like any other.
    """
    ir = _ir()
    ctx = mlir_context()
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if data.startswith(_BYTECODE_MAGIC):
            from jaxlib.mlir.dialects import stablehlo

            from .bytecode_check import check_bytecode, check_in_subprocess

            check_bytecode(data)  # jaxlib's C++ reader aborts the process on some malformed input
            if not trusted:
                check_in_subprocess(data)

            try:
                with ctx:
                    return stablehlo.deserialize_portable_artifact(ctx, data)
            except Exception:  # plain MLIR bytecode rather than a VHLO artifact
                pass
            try:
                with ctx, ir.Location.unknown():
                    return ir.Module.parse(data)
            except Exception as e:
                raise MlirParseError(f"cannot read the MLIR bytecode / StableHLO portable artifact: {e}") from None
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MlirParseError("bytes are neither MLIR bytecode (magic 'ML\\xefR') nor UTF-8 MLIR text") from None
    if not isinstance(source, str):
        raise MlirParseError(f"expected StableHLO text or bytes, got {type(source).__name__}")
    table = None
    if "!quant." in source:
        from .stablehlo_quant import expand_quantized_text

        source, table = expand_quantized_text(source)
    try:
        with ctx, ir.Location.unknown():
            module = ir.Module.parse(source)
    except Exception as e:
        module = _parse_newer_ops(source)
        if module is None:
            raise MlirParseError(f"cannot parse the StableHLO text: {e}") from None
    if table is not None:
        _annotate_quantization(module, table)
    return module




def _annotate_quantization(module, table: dict) -> None:
    """Move the per-line table of :func:`~interop.stablehlo_quant.expand_quantized_text` onto the ops."""
    ir = _ir()
    ops = []

    def visit(op):
        loc = op.location
        if isinstance(loc, ir.FileLineColLoc) and loc.filename == "-" and loc.start_line in table:
            ops.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit)
        for op in ops:
            kind, infos = table[op.location.start_line]
            # Without the "!quant." prefix: printed and parsed again, the text is plain StableHLO.
            spellings = [kind] + [str(i)[len("!quant."):] if i is not None else "" for i in infos]
            op.attributes[QUANTIZATION] = ir.ArrayAttr.get([ir.StringAttr.get(t) for t in spellings])
        module.operation.attributes[QUANTIZED] = ir.UnitAttr.get()
