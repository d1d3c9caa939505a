"""The StableHLO importer's entry points: :func:`parse_stablehlo` and :func:`import_stablehlo`, for input
that may be untrusted (bytecode is read in a child process first, :mod:`interop.stablehlo.bytecode_check`)."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from xla_dialect.errors import MlirParseError, XlaError

from .bytecode import MAGIC, check_bytecode
from . import bytecode_check
from .importer import import_mlir_module
from .parse import parse_mlir


def parse_stablehlo(source, trusted: bool = False, filename: str = "<string>"):
    """Parse StableHLO into a jaxlib ``ir.Module`` (:func:`interop.stablehlo.parse.parse_mlir`).

    MLIR bytecode is untrusted input for jaxlib's C++ reader, which aborts the process or loops on some
    corrupted bytes: unless ``trusted``, it is checked structurally and then read once in a child process
    (a fork of this one, about 0.1 s) before this process reads it (:mod:`interop.stablehlo.bytecode_check`).
    ``filename`` names the input in messages (``prog.mlir:3:8: ...``).
    """
    if not trusted and isinstance(source, (bytes, bytearray, memoryview)) and bytes(source[:4]) == MAGIC:
        data = bytes(source)
        try:
            check_bytecode(data)  # jaxlib's C++ reader aborts the process on some malformed input
            bytecode_check.check_in_subprocess(data)  # (looked up here: tests replace it)
        except MlirParseError as e:
            raise MlirParseError(f"{filename}: {e}") from None
        source = data
    return parse_mlir(source, filename)


def import_stablehlo(source, *example_args, verify: bool = False, allow_unknown: bool = False,
                     trusted: bool = False, filename: str = "<string>") -> ModuleOp:
    """Import StableHLO into the hlo dialect.

    ``source``: MLIR text in the pretty or generic form (``str`` or ``bytes``;
    quantized ``!quant.uniform`` element types included, see
    :mod:`interop.stablehlo.quant`), MLIR bytecode, a StableHLO portable
    artifact (``jax.export.Exported.mlir_module_serialized``), or a jaxlib
    ``ir.Module`` (from :func:`parse_stablehlo` for quantized text, which
    may be edited in between). ``example_args`` refine dynamic (``?``) shapes
    of ``@main``'s parameters (see :func:`~interop.stablehlo.importer.import_mlir_module`). With
    ``verify=True`` the hlo verifier runs on the result (otherwise
    ``lowering.compile`` runs it); ``allow_unknown=True`` keeps ops without
    hlo form and dynamic shapes for a round trip instead of raising. Bytecode is first read in a child
    process unless ``trusted`` (see :func:`parse_stablehlo`). ``filename`` names the input in messages
    (``prog.mlir:3:8: ...``).
    """
    module = parse_stablehlo(source, trusted=trusted, filename=filename)
    try:
        return import_mlir_module(module, *example_args, verify=verify, allow_unknown=allow_unknown,
                                  filename=filename)
    except XlaError as e:
        if filename.startswith("<") or str(e).startswith(filename) or f" at {filename}:" in str(e):
            raise
        raise type(e)(f"{filename}: {e}") from None
    except Exception as e:  # jaxlib's bindings on a malformed module (e.g. strings that are not UTF-8)
        raise MlirParseError(f"{filename}: cannot import the StableHLO module: {type(e).__name__}: {e}") from None
