"""XLA shape text: ``bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}``, ``(f32[], s32[4]{0})``, ``token[]``.

:func:`parse_shape` turns XLA shape text into xDSL types (``TensorType`` with a
:class:`~xla_dialect.layout.LayoutAttr` encoding, ``TupleType``, ``TokenType``);
:func:`format_shape` prints them back exactly as XLA's own printer does.
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import NoneAttr, TensorType, TupleType
from xdsl.ir import Attribute

from .errors import ShapeParseError, LayoutError
from .layout import Layout, LayoutAttr, parse_layout_prefix
from .types import TokenType, element_type_named, element_type_of

_ARRAY_HEAD = re.compile(r"\s*([a-z][a-z0-9]*)\[")
_DIM = re.compile(r"\s*(\d+|\?|<=\d+)\s*")


def parse_shape(text: str) -> Attribute:
    """Parse an XLA shape string into an xDSL type.

    >>> parse_shape("f32[3,5]{1,0:T(2,2)}")
    TensorType(...)
    """
    if not isinstance(text, str):
        raise ShapeParseError(f"parse_shape expects a string, got {type(text).__name__}")
    shape, end = _parse(text, 0)
    if text[end:].strip():
        raise ShapeParseError(f"malformed shape {text!r}: unexpected {text[end:].strip()!r} at offset {end}")
    return shape


def _parse(text: str, pos: int) -> tuple[Attribute, int]:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if text.startswith("(", pos):
        pos += 1
        elements: list[Attribute] = []
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if text.startswith(")", pos):
                pos += 1
                break
            if elements:
                if not text.startswith(",", pos):
                    raise ShapeParseError(f"malformed shape {text!r}: expected ',' or ')' at offset {pos}")
                pos += 1
            element, pos = _parse(text, pos)
            elements.append(element)
        return TupleType(elements), pos
    m = _ARRAY_HEAD.match(text, pos)
    if not m:
        raise ShapeParseError(f"malformed shape {text!r}: expected 'type[dims]' or '(' at offset {pos}")
    type_name = m.group(1)
    pos = m.end()
    dims: list[int] = []
    while True:
        if text.startswith("]", pos):
            pos += 1
            break
        if dims:
            if not text.startswith(",", pos):
                raise ShapeParseError(f"malformed shape {text!r}: expected ',' or ']' at offset {pos}")
            pos += 1
        dm = _DIM.match(text, pos)
        if not dm:
            raise ShapeParseError(f"malformed shape {text!r}: expected a dimension size at offset {pos}")
        if not dm.group(1).isdigit():
            raise ShapeParseError(
                f"shape {text!r}: dynamic dimension {dm.group(1)!r} is not supported in static shapes"
            )
        dims.append(int(dm.group(1)))
        pos = dm.end()
    if type_name == "token":
        if dims:
            raise ShapeParseError(f"malformed shape {text!r}: token[] takes no dimensions")
        return TokenType(), pos
    try:
        element = element_type_named(type_name)
    except Exception:
        raise ShapeParseError(f"malformed shape {text!r}: unknown element type {type_name!r}") from None
    encoding: Attribute = NoneAttr()
    if text.startswith("{", pos):
        try:
            layout, pos = parse_layout_prefix(text, pos)
            layout.check_rank(len(dims), text)
        except LayoutError as e:
            raise ShapeParseError(str(e)) from None
        encoding = LayoutAttr(layout)
    return TensorType(element.mlir, dims, encoding), pos


def format_shape(type_: Attribute, print_layout: bool = True) -> str:
    """Print an xDSL type in XLA shape notation (as XLA's ``Shape::ToString(true)``)."""
    if isinstance(type_, TupleType):
        return "(" + ", ".join(format_shape(t, print_layout) for t in type_.types) + ")"
    if isinstance(type_, TokenType):
        return "token[]"
    if isinstance(type_, TensorType):
        name = element_type_of(type_.element_type).xla_name
        dims = ",".join(str(d) for d in type_.get_shape())
        text = f"{name}[{dims}]"
        if print_layout and isinstance(type_.encoding, LayoutAttr):
            layout: Layout = type_.encoding.data
            if layout.rank > 0 or layout.to_text() != "{}":
                text += layout.to_text()
        return text
    raise ShapeParseError(f"format_shape: {type_} is not an XLA shape (tensor, tuple or token)")
