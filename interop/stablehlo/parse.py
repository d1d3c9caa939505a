"""StableHLO text, bytecode and portable artifacts -> jaxlib MLIR modules (jaxlib's own parser).

:func:`parse_mlir` reads input this process may read (trusted bytecode, any text); quantized text goes through
:mod:`interop.stablehlo.quant` first. :func:`interop.stablehlo.parse_stablehlo` is the entry for input that
may be untrusted: it reads bytecode in a child process first (:mod:`interop.stablehlo.bytecode_check`), then
calls this parser."""

from __future__ import annotations

import re

from xla_dialect.errors import MlirParseError

from ..schema import QUANTIZATION, QUANTIZED
from .bytecode import MAGIC, check_bytecode
from .context import NEWER_DIALECT, _ir, mlir_context


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


_JAXLIB_POSITION = re.compile(r'"-":(\d+):(\d+)')
_JAXLIB_ERROR = re.compile(r'error: "-":(\d+):(\d+): ?(.*)')


def _jaxlib_error(error: Exception, text: str, filename: str) -> str:
    """jaxlib's parse diagnostic (``Unable to parse module assembly: error: "-":3:8: ...``) as
    ``filename:3:8: cannot parse the StableHLO text: ...`` with the line, a caret, and MLIR's notes."""
    from xla_dialect.dialect import positioned

    message = str(error)
    first = _JAXLIB_ERROR.search(message)
    if first is None:
        return f"{filename}: cannot parse the StableHLO text: {message}"
    line, col = int(first.group(1)), int(first.group(2))
    lines = text.split("\n")
    offset = sum(len(t) + 1 for t in lines[:line - 1]) + col - 1 if line <= len(lines) else len(text)
    head = positioned(text, filename, min(offset, len(text)), f"cannot parse the StableHLO text: {first.group(3)}")
    notes = [_JAXLIB_POSITION.sub(lambda m: f"{filename}:{m.group(1)}:{m.group(2)}", n.strip())
             for n in message[first.end():].split("\n") if n.strip()]
    return "\n".join([head] + [f"  {n}" for n in notes])


def parse_mlir(source, filename: str = "<string>"):
    """Parse StableHLO into a jaxlib ``ir.Module``, in this process (see :func:`interop.stablehlo.parse_stablehlo`
    for input that may be untrusted: it checks bytecode in a child process first, then calls this).

    ``source`` is MLIR text (pretty or generic form, ``str`` or UTF-8 ``bytes``),
    MLIR bytecode, or a StableHLO portable artifact (versioned VHLO bytecode,
    as in ``Exported.mlir_module_serialized``). Bytecode is checked structurally first
    (:func:`interop.stablehlo.bytecode.check_bytecode`: jaxlib's C++ reader aborts the process on some
    malformed input). Raises :class:`~xla_dialect.errors.MlirParseError` with MLIR's diagnostic.

    jaxlib has no ``quant`` dialect: text with ``!quant.uniform`` element
    types is rewritten to their expressed types first
    (:func:`interop.stablehlo.quant.expand_quantized_text`), and each op with
    quantized results carries them in a ``hlo.quantization`` attribute, so
    that the module can be edited and then imported like any other.

    ``filename`` names the input in messages (``prog.mlir:3:8: ...``).
    """
    from xla_dialect.errors import empty_input

    ir = _ir()
    ctx = mlir_context()
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if data.startswith(MAGIC):
            from jaxlib.mlir.dialects import stablehlo

            try:
                check_bytecode(data)  # jaxlib's C++ reader aborts the process on some malformed input
            except MlirParseError as e:
                raise MlirParseError(f"{filename}: {e}") from None

            try:
                with ctx:
                    return stablehlo.deserialize_portable_artifact(ctx, data)
            except Exception:  # plain MLIR bytecode rather than a VHLO artifact
                pass
            try:
                with ctx, ir.Location.unknown():
                    return ir.Module.parse(data)
            except Exception as e:
                raise MlirParseError(f"{filename}: cannot read the MLIR bytecode / StableHLO portable artifact: "
                                     f"{e}") from None
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MlirParseError(f"{filename}: neither MLIR bytecode (magic 'ML\\xefR') nor UTF-8 MLIR text") from None
    if not isinstance(source, str):
        raise MlirParseError(f"expected StableHLO text or bytes, got {type(source).__name__}")
    if not source.strip():
        raise MlirParseError(empty_input(filename, source))
    original, table = source, None
    if "!quant." in source:
        from .quant import expand_quantized_text

        source, table = expand_quantized_text(source)
    try:
        with ctx, ir.Location.unknown():
            module = ir.Module.parse(source)
    except Exception as e:
        module = _parse_newer_ops(source)
        if module is None:
            raise MlirParseError(_jaxlib_error(e, original, filename)) from None
    if table is not None:
        _annotate_quantization(module, table)
    return module


def _annotate_quantization(module, table: dict) -> None:
    """Move the per-line table of :func:`~interop.stablehlo.quant.expand_quantized_text` onto the ops."""
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
