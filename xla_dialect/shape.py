"""XLA shape text: ``bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}``, ``(f32[], s32[4]{0})``, ``token[]``.

:func:`parse_shape` turns XLA shape text into xDSL types (``TensorType`` with a
:class:`~xla_dialect.layout_attr.LayoutAttr` encoding, ``TupleType``, ``TokenType``);
:func:`format_shape` prints them back exactly as XLA's own printer
(``ShapeUtil::HumanStringWithLayout``) does, including the ``/*index=5*/``
comments XLA puts before every fifth tuple element.

The grammar follows XLA's HLO parser (``HloParserImpl::ParseShape``):
whitespace and ``/* */`` comments may separate tokens; a ``{`` after the
dimensions starts a layout only when a dimension number or ``:`` follows it,
so ``f32[]{}`` is not a scalar with an empty layout but an error. XLA prints
a scalar's layout ``{}`` as nothing, so ``f32[]{:S(0)}`` (a scalar with layout
``{}``) prints as ``f32[]``, which parses back as a layout-less scalar; both
mean XLA's default scalar layout.

Layout-less arrays: XLA's parser gives every non-scalar array without a
layout the default descending layout, so XLA prints ``f32[3,5]`` back as
``f32[3,5]{1,0}``. Here a layout-less type stays layout-less and
:func:`format_shape` prints it without braces; pass ``default_layout=True``
to print it as XLA would.
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import NoneAttr, TensorType, TupleType
from xdsl.ir import Attribute

from .errors import LayoutError, ShapeParseError
from .layout_attr import Layout, LayoutAttr, parse_layout_prefix
from .types import ELEMENT_TYPES, TokenType, element_type_of

MAX_TUPLE_DEPTH = 64
"""Deepest tuple nesting ``parse_shape`` accepts (deeper text is an error, not a RecursionError)."""

_SPACE = re.compile(r"(?:\s|/\*.*?\*/)*", re.S | re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM = re.compile(r"\d+|\?|<=", re.ASCII)

_XLA_ONLY_TYPES = {
    "s1": "1-bit signed integers",
    "u1": "1-bit unsigned integers",
    "opaque": "opaque values",
}
"""XLA primitive types this toolkit has no xDSL counterpart for (clear error, not 'unknown')."""

DYNAMIC_SHAPE = "hlo.dynamic_shape"
"""Attribute of an op (or argument attribute of a parameter) whose value XLA's text gives bounded dynamic
dimensions (``f32[<=8,4]``): the types here are static, with the bound as the size, and this attribute keeps
the shape as written so that it prints back with ``<=N`` (``interop.hlo``); the executor does not run
such values (an UnsupportedError naming where the shape is written, ``hlo.position``)."""

_TUPLE_INDEX_EVERY = 5
"""XLA's printer writes ``/*index=N*/`` before tuple elements 5, 10, 15, ..."""


def parse_shape(text: str, dynamic: list | None = None) -> Attribute:
    """Parse an XLA shape string into an xDSL type.

    Bounded dynamic dimensions (``f32[<=8,4]``, XLA's dynamic shapes) are an error unless a list is given as
    ``dynamic``: then the type has the bound as a static dimension and, for each array of the shape in
    order (tuple elements depth first), a tuple of its dynamic dimensions is appended to the list (``(0,)``
    here); :func:`format_shape` takes the list back to print ``<=8`` again. Unbounded ones (``?``) stay errors.

    Raises :class:`ShapeParseError` for malformed shape text and
    :class:`LayoutError` for a malformed layout or one that does not fit.

    >>> format_shape(parse_shape("f32[3,5]{1,0:T(2,2)}"))
    'f32[3,5]{1,0:T(2,2)}'
    """
    if not isinstance(text, str):
        raise ShapeParseError(f"parse_shape expects a string, got {type(text).__name__}")
    parser = _Parser(text)
    parser.dynamic = dynamic
    shape, end = parser.shape(0)
    end = _skip(text, end)
    if end < len(text):
        raise ShapeParseError(f"malformed shape {text!r}: unexpected {text[end:]!r} at offset {end}")
    return shape


def _skip(text: str, pos: int) -> int:
    """Skip whitespace and ``/* */`` comments (XLA's lexer ignores both)."""
    return _SPACE.match(text, pos).end()


class _Parser:
    """Recursive-descent parser for one shape string, with precise error messages."""

    def __init__(self, text: str):
        self.text = text
        self.depth = 0
        self.dynamic: list | None = None  # per array, its bounded dynamic dimensions (None: not accepted)
        self.bounded: list[int] = []  # the dynamic dimensions of the array being read

    def fail(self, pos: int, message: str):
        text = self.text if len(self.text) <= 120 else self.text[:100] + f"... ({len(self.text)} characters)"
        raise ShapeParseError(f"malformed shape {text!r} at offset {pos}: {message}")

    def shape(self, pos: int) -> tuple[Attribute, int]:
        text = self.text
        pos = _skip(text, pos)
        if text.startswith("(", pos):
            return self.tuple(pos + 1)
        m = _NAME.match(text, pos)
        if not m:
            found = repr(text[pos : pos + 10]) if pos < len(text) else "the end"
            self.fail(pos, f"expected a shape ('type[dims]' or '(' for a tuple), found {found}")
        name = m.group()
        pos = _skip(text, m.end())
        if not text.startswith("[", pos):
            self.fail(pos, f"expected '[' after the element type {name!r}")
        self.bounded = []
        dims, pos = self.dims(pos + 1)
        if self.dynamic is not None and name != "token":
            self.dynamic.append(tuple(self.bounded))
        if name == "token":
            if dims:
                self.fail(pos, "token[] takes no dimensions")
            return TokenType(), pos
        element = self.element_type(name, m.start())
        encoding: Attribute = NoneAttr()
        after = _skip(text, pos)
        if text.startswith("{", after):
            inside = _skip(text, after + 1)
            if inside < len(text) and (text[inside] in "0123456789" or text[inside] == ":"):
                layout, pos = self.layout(after, len(dims))
                encoding = LayoutAttr(layout)
            elif text.startswith("}", inside):
                self.fail(
                    after,
                    "'{}' is not a layout in XLA shape text (a layout starts with a dimension number or ':'); "
                    "a scalar's default layout is written by omitting it",
                )
        return TensorType(element, dims, encoding), pos

    def tuple(self, pos: int) -> tuple[Attribute, int]:
        text = self.text
        self.depth += 1
        if self.depth > MAX_TUPLE_DEPTH:
            self.fail(pos, f"tuple shapes nested more than {MAX_TUPLE_DEPTH} deep are not supported")
        elements: list[Attribute] = []
        pos = _skip(text, pos)
        if text.startswith(")", pos):
            self.depth -= 1
            return TupleType([]), pos + 1
        while True:
            element, pos = self.shape(pos)
            elements.append(element)
            pos = _skip(text, pos)
            if text.startswith(")", pos):
                self.depth -= 1
                return TupleType(elements), pos + 1
            if not text.startswith(",", pos):
                self.fail(pos, "expected ',' or ')' in a tuple shape")
            pos += 1

    def dims(self, pos: int) -> tuple[list[int], int]:
        text = self.text
        dims: list[int] = []
        pos = _skip(text, pos)
        if text.startswith("]", pos):
            return dims, pos + 1
        while True:
            pos = _skip(text, pos)
            m = _DIM.match(text, pos)
            if not m:
                self.fail(pos, "expected a dimension size (a non-negative integer)")
            if m.group() == "<=" and self.dynamic is not None:  # a bounded dynamic dimension: its bound
                bound = _skip(text, m.end())
                m = re.compile(r"\d+", re.ASCII).match(text, bound)
                if not m:
                    self.fail(bound, "expected the bound of a dynamic dimension after '<='")
                self.bounded.append(len(dims))
            elif m.group() == "?" and self.dynamic is not None:
                self.fail(pos, "unbounded dynamic dimensions ('?') are not supported, only static shapes and "
                               "bounded dynamic ones ('<=N')")
            elif m.group() in ("?", "<="):
                self.fail(pos, "dynamic dimensions ('?', '<=N') are not supported, only static shapes")
            dims.append(int(m.group()))
            pos = _skip(text, m.end())
            if text.startswith("]", pos):
                return dims, pos + 1
            if not text.startswith(",", pos):
                self.fail(pos, "expected ',' or ']' after a dimension size")
            pos += 1

    def element_type(self, name: str, pos: int) -> Attribute:
        element = ELEMENT_TYPES.get(name)
        if element is not None:
            return element.mlir
        if name in _XLA_ONLY_TYPES:
            self.fail(pos, f"XLA element type {name!r} ({_XLA_ONLY_TYPES[name]}) is not supported")
        hint = " (XLA type names are lower case)" if name.lower() in ELEMENT_TYPES else ""
        self.fail(pos, f"unknown element type {name!r}{hint}; expected one of {', '.join(ELEMENT_TYPES)}, token")

    def layout(self, pos: int, rank: int) -> tuple[Layout, int]:
        try:
            layout, end = parse_layout_prefix(self.text, pos)
            layout.check_rank(rank, self.text)
        except LayoutError as e:
            message = str(e)
            raise LayoutError(message if self.text in message else f"in shape {self.text!r}: {message}") from None
        return layout, end


def format_shape(type_: Attribute, print_layout: bool = True, default_layout: bool = False, dynamic=None) -> str:
    """Print an xDSL type in XLA shape notation, exactly as XLA's printer does.

    ``print_layout=False`` leaves layouts out (XLA's ``ShapeUtil::HumanString``).
    A tensor without a layout prints without braces unless ``default_layout``
    is set, which prints XLA's default descending layout for it, as XLA does
    for a parsed module. A scalar's layout ``{}`` is never printed (XLA).
    XLA shapes have no quantized element types: a quantized array prints in
    MLIR syntax (``tensor<4x!quant.uniform<i8:f32, 0.5:-3>>``).
    ``dynamic``: the bounded dynamic dimensions of each array, as :func:`parse_shape` lists them: those
    print as ``<=N``.
    """
    if dynamic is not None and not isinstance(dynamic, _Arrays):
        dynamic = _Arrays(dynamic)
    if isinstance(type_, TupleType):
        parts = []
        for i, t in enumerate(type_.types):
            text = format_shape(t, print_layout, default_layout, dynamic)
            if i and i % _TUPLE_INDEX_EVERY == 0:
                text = f"/*index={i}*/" + text
            parts.append(text)
        return "(" + ", ".join(parts) + ")"
    if isinstance(type_, TokenType):
        return "token[]"
    if isinstance(type_, TensorType):
        if getattr(type_.element_type, "name", None) == "quant.uniform":
            return str(type_) if print_layout else str(TensorType(type_.element_type, type_.get_shape()))
        name = element_type_of(type_.element_type).xla_name
        shape = type_.get_shape()
        if any(d < 0 for d in shape):
            raise ShapeParseError(f"format_shape: {type_} has dynamic dimensions, which XLA shape text here does not express")
        bounded = dynamic.next() if dynamic is not None else ()
        text = f"{name}[{','.join(('<=' if i in bounded else '') + str(d) for i, d in enumerate(shape))}]"
        if not print_layout:
            return text
        layout: Layout | None = None
        if isinstance(type_.encoding, LayoutAttr):
            layout = type_.encoding.data
        elif default_layout and isinstance(type_.encoding, NoneAttr):
            layout = Layout.default(len(shape))
        if layout is not None:
            layout_text = layout.to_text()
            if layout_text != "{}":  # XLA omits a scalar's empty layout
                text += layout_text
        return text
    raise ShapeParseError(f"format_shape: {type_} is not an XLA shape (tensor, tuple or token)")


class _Arrays:
    """The per-array dynamic dimensions given to :func:`format_shape`, handed out in order."""

    def __init__(self, dynamic):
        self.items = [tuple(d) for d in dynamic]
        self.index = 0

    def next(self) -> tuple:
        item = self.items[self.index] if self.index < len(self.items) else ()
        self.index += 1
        return item
