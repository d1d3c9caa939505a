"""Attribute syntaxes read by scanning the text, then handing the position back to xDSL's parser.

XLA's layout notation (``{1,0:T(8,128)(2,1)}``), quantized types
(``!quant.uniform<i8<-127:127>:f32:1, {0.1:-2, 0.2}>``) and large dense
literals are read character by character by the dialect's own parsers: their
grammars are not MLIR's tokens (``T(8,128)(2,1)``, ``i8<-127:127>``), and a
literal of millions of numbers scans an order of magnitude faster as text
than token by token. Afterwards xDSL's parser must continue after what was
read; xDSL has no public call for that, only ``GenericParser._resume_from``.

This module is the one place that uses it: :func:`resume_after` checks once
that the xDSL in use has it and otherwise raises an error naming the version
range the dialect was tested with (``pyproject.toml`` pins it), instead of an
AttributeError deep inside a parse.
"""

from __future__ import annotations

from xdsl.parser import AttrParser

from .errors import XlaError

TESTED_XDSL = ">=0.74,<0.75"
"""The xDSL versions this dialect was tested with (kept equal to pyproject.toml's pin)."""

_RESUME = getattr(AttrParser, "_resume_from", None)


def resume_after(parser: AttrParser, position: int) -> None:
    """Make ``parser`` continue at character ``position`` of its input (after text scanned by hand)."""
    if _RESUME is None:
        import xdsl

        raise XlaError(f"this xDSL ({getattr(xdsl, '__version__', 'unknown version')}) cannot resume parsing "
                       f"after a scanned attribute; xla_dialect is tested with xdsl{TESTED_XDSL}")
    _RESUME(parser, position)
