"""Program files: the one loader of ``xla-run``, ``xla-opt`` and :func:`interop.load_program`.

:data:`FORMATS` lists what it reads (each command's ``--help`` prints it); the format is told apart
by the content, not by the file name. Errors are :class:`~xla_dialect.errors.XlaError` naming the
file, and the line and column where there is one.
"""

from __future__ import annotations

import re

from xla_dialect.errors import XlaError

from .stablehlo.bytecode import MAGIC as _BYTECODE_MAGIC

__all__ = ["FORMATS", "FORMATS_HELP", "load_program", "program_from_bytes", "read_program_file"]

FORMATS = (
    "XLA HLO module text (jax's .as_text(dialect='hlo'), compiled modules' .as_text(), XLA dumps, .hlo files)",
    "hlo MLIR text (this dialect; custom or generic form)",
    "StableHLO MLIR text (jax's .lower().as_text(), pretty or generic form)",
    "MLIR bytecode or a StableHLO portable artifact (Exported.mlir_module_serialized)",
    "a serialized jax.export.Exported (Exported.serialize())",
)
"""The program formats the loader reads."""

FORMATS_HELP = ("program files: " + "; ".join(FORMATS)
                + ". The format is recognised from the content, whatever the file name.")
""":data:`FORMATS` as one paragraph, for the commands' ``--help``."""

# An op of StableHLO (or of the dialects JAX writes next to it) anywhere in the text.
_STABLEHLO_OP = re.compile(rb"\b(?:stablehlo|chlo|mhlo|sdy)\.[a-z_]+")


def load_program(path: str, inputs=None, trusted: bool = False):
    """Read a program file in any of :data:`FORMATS` (told apart by content, not by the file name).

    A shape-polymorphic StableHLO program is refined to the shapes of ``inputs``. Errors are
    :class:`XlaError` naming the file (and the line and column where there is one). Bytecode,
    artifacts and serialized exports are read in a child process first unless ``trusted``
    (files you produced yourself; see :func:`interop.import_jax`).
    """
    return program_from_bytes(read_program_file(path), path, inputs, trusted)


def read_program_file(path: str) -> bytes:
    """The bytes of the file ``path``; an :class:`XlaError` naming it when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise XlaError(f"{path}: cannot read it: {e.strerror or e}") from None


def program_from_bytes(data: bytes, path: str, inputs=None, trusted: bool = False):
    """:func:`load_program` on the bytes of the file ``path`` (the name shown in messages)."""
    from xla_dialect.errors import MlirParseError, empty_input

    from .hlo.syntax import is_hlo_text

    if not data.strip():
        raise MlirParseError(empty_input(path, data))
    if is_hlo_text(data):
        from .hlo import import_hlo

        return import_hlo(data.decode("utf-8", errors="replace"), source=path)
    bytecode = data.startswith(_BYTECODE_MAGIC)
    text = None if bytecode else _utf8(data)
    if text is not None and not _STABLEHLO_OP.search(data) and re.search(r"\bhlo\.[a-z_]+", text):
        from xla_dialect import parse_module

        return parse_module(text, path)
    if bytecode or text is not None:
        from .stablehlo import import_stablehlo

        try:
            return import_stablehlo(data, filename=path, trusted=trusted)
        except XlaError as e:
            if inputs and "dynamic shape" in str(e):
                return import_stablehlo(data, *inputs, filename=path, trusted=trusted)
            raise
    from .jax import import_jax

    try:  # a serialized jax.export.Exported
        try:
            return import_jax(data, trusted=trusted)
        except XlaError as e:
            if inputs and "dynamic shape" in str(e):
                return import_jax(data, *inputs, trusted=trusted)
            raise
    except XlaError as e:
        raise type(e)(f"{path}: {str(e).removeprefix('import_jax: ')}") from None


def _utf8(data: bytes) -> str | None:
    """``data`` decoded as UTF-8, or None."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
