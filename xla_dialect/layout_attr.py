"""The ``#hlo.layout<...>`` attribute: XLA memory layouts, their notation and their place in tensor types.

A layout is written in XLA's own notation, e.g. ``{3,2,0,1:T(8,128)(2,1)L(1024)E(4)S(1)}``:

* ``3,2,0,1`` — minor_to_major: dimension numbers from fastest- to slowest-varying;
* ``T(8,128)(2,1)`` — tiling levels applied one after another; ``*`` in a tile
  combines that dimension with the next more minor one;
* ``L(n)`` — tail padding alignment in elements; ``E(n)`` — element size in
  bits; ``S(n)`` — memory space (0 = HBM/default, 1 = VMEM, 5 = host, ...).

The attribute lives in the ``encoding`` slot of xDSL's builtin ``TensorType``::

    tensor<8x1x1280x16384xbf16, #hlo.layout<{3,2,0,1:T(8,128)(2,1)}>>

This module knows nothing of XLA shape text (:mod:`xla_dialect.shape` parses shapes with it); the tiling
math over shapes is :mod:`xla_dialect.layout`, which also re-exports every name of this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xdsl.dialects.builtin import NoneAttr, TensorType
from xdsl.ir import Attribute, Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from .errors import LayoutError
from .xdsl_compat import resume_after

COMBINE_DIMENSION = -(2**63)
"""Tile entry written ``*``: combine this dimension with the next more minor one
(XLA's ``Tile::kCombineDimension``)."""


@dataclass(frozen=True)
class Layout:
    """An XLA layout (LayoutProto), immutable and hashable.

    ``tiles`` is a tuple of tiling levels, each a tuple of tile sizes (the most
    minor last) where :data:`COMBINE_DIMENSION` stands for ``*``.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    tail_padding_alignment: int = 1
    element_size_in_bits: int = 0
    memory_space: int = 0

    def __post_init__(self):
        m2m = self.minor_to_major
        if sorted(m2m) != list(range(len(m2m))):
            raise LayoutError(
                f"layout {self}: minor_to_major {list(m2m)} is not a permutation of 0..{len(m2m) - 1}"
            )
        for tile in self.tiles:
            if not tile:
                raise LayoutError(f"layout {self}: empty tile T()")
            for size in tile:
                if size != COMBINE_DIMENSION and size <= 0:
                    raise LayoutError(
                        f"layout {self}: tile sizes must be positive or '*', got {size} in T{tile_text(tile)}"
                    )
        if self.tail_padding_alignment <= 0:
            raise LayoutError(
                f"layout {self}: L(n) tail padding alignment must be positive, got L({self.tail_padding_alignment})"
            )
        if self.element_size_in_bits < 0:
            raise LayoutError(f"layout {self}: E(n) must be non-negative, got E({self.element_size_in_bits})")
        if self.memory_space < 0:
            raise LayoutError(f"layout {self}: S(n) must be non-negative, got S({self.memory_space})")

    @property
    def rank(self) -> int:
        return len(self.minor_to_major)

    @staticmethod
    def default(rank: int) -> Layout:
        """XLA's default (row-major, descending minor_to_major) layout."""
        return Layout(tuple(range(rank - 1, -1, -1)))

    def with_(self, **changes) -> Layout:
        """A copy with some fields replaced."""
        fields = dict(
            minor_to_major=self.minor_to_major,
            tiles=self.tiles,
            tail_padding_alignment=self.tail_padding_alignment,
            element_size_in_bits=self.element_size_in_bits,
            memory_space=self.memory_space,
        )
        fields.update(changes)
        return Layout(**fields)

    def to_text(self) -> str:
        """XLA notation, e.g. ``{1,0:T(8,128)(2,1)}``, fields in XLA's order."""
        body = ",".join(str(d) for d in self.minor_to_major)
        extra = ""
        if self.tiles:
            extra += "T" + "".join(tile_text(t) for t in self.tiles)
        if self.tail_padding_alignment != 1:
            extra += f"L({self.tail_padding_alignment})"
        if self.element_size_in_bits != 0:
            extra += f"E({self.element_size_in_bits})"
        if self.memory_space != 0:
            extra += f"S({self.memory_space})"
        return "{" + body + (":" + extra if extra else "") + "}"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"Layout({self.to_text()})"

    def check_rank(self, rank: int, context: str = "") -> None:
        """Raise :class:`LayoutError` unless this layout fits an array of ``rank``.

        A tile may have more dimensions than the array: XLA then treats the
        missing most-major dimensions as size 1 (``ShapeUtil::ArraySize``,
        ``LayoutUtil::LinearIndex``), e.g. TPU scalars ``f32[]{:T(256)}``.
        """
        if self.rank != rank:
            where = f"{context}: " if context else ""
            raise LayoutError(
                f"{where}layout {self} has {self.rank} dimensions in minor_to_major but the shape has rank {rank}"
            )


def tile_text(tile: tuple[int, ...]) -> str:
    """One tiling level in XLA notation: ``(8,128)``, ``*`` for :data:`COMBINE_DIMENSION`."""
    return "(" + ",".join("*" if d == COMBINE_DIMENSION else str(d) for d in tile) + ")"


# Whitespace and /* */ comments separate tokens, as in XLA's lexer.
_TOKEN = re.compile(r"(?:\s|/\*.*?\*/)*(\d+|[A-Za-z]+|[{}():,*#]|-\d+)", re.S | re.ASCII)


def parse_layout(text: str) -> Layout:
    """Parse XLA layout notation such as ``{1,0:T(8,128)(2,1)S(1)}``."""
    layout, end = parse_layout_prefix(text, 0)
    if text[end:].strip():
        raise LayoutError(f"malformed layout {text!r}: unexpected {text[end:].strip()!r} after the closing '}}'")
    return layout


_FIELD_ORDER = ("D", "T", "L", "#", "*", "E", "S", "SC", "P", "M")
"""Every field XLA's layout grammar knows, in the only order its parser accepts."""

_UNSUPPORTED_FIELDS = {
    "D": "dim level types, used only by sparse arrays",
    "#": "index primitive type, used only by sparse arrays",
    "*": "pointer primitive type, used only by sparse arrays",
    "SC": "split configs",
    "P": "physical shape, used only by sparse arrays",
    "M": "dynamic shape metadata prefix bytes",
}
"""XLA layout fields this toolkit recognises but does not model: they raise a precise LayoutError."""

_SUPPORTED_FIELDS = tuple(f for f in _FIELD_ORDER if f not in _UNSUPPORTED_FIELDS)


def parse_layout_prefix(text: str, pos: int) -> tuple[Layout, int]:
    """Parse a layout starting at ``text[pos]`` (``'{'``); return it and the end offset.

    Follows XLA's grammar (``HloParserImpl::ParseLayout``): fields after the
    ``:`` come at most once each and in XLA's order ``T, L, E, S``; XLA's other
    fields (``D # * SC P M``) are recognised and rejected with a clear message.
    """
    scanner = _Scanner(text, pos)
    scanner.expect("{")
    m2m: list[int] = []
    if scanner.peek() not in ("}", ":"):
        m2m.append(scanner.integer())
        while scanner.accept(","):
            m2m.append(scanner.integer())
    tiles: list[tuple[int, ...]] = []
    fields = {"L": 1, "E": 0, "S": 0}
    if scanner.accept(":"):
        last = -1
        while scanner.peek() != "}":
            key = scanner.next()
            if key is None:
                scanner.fail("unterminated layout, expected '}'")
            if key not in _FIELD_ORDER:
                scanner.fail(
                    f"unknown layout field {key!r} (XLA's fields, in order: {', '.join(_FIELD_ORDER)}; "
                    f"supported here: {', '.join(_SUPPORTED_FIELDS)})"
                )
            if key in _UNSUPPORTED_FIELDS:
                scanner.fail(f"XLA layout field {key}(...) ({_UNSUPPORTED_FIELDS[key]}) is not supported")
            rank = _FIELD_ORDER.index(key)
            if rank <= last:
                problem = "appears twice" if rank == last else "is out of order"
                scanner.fail(f"layout field {key} {problem}: XLA requires at most one of each, in the order T, L, E, S")
            last = rank
            if key == "T":
                if scanner.peek() != "(":
                    scanner.fail("expected '(' after T")
                while scanner.accept("("):
                    tiles.append(_parse_tile(scanner))
            else:
                scanner.expect("(")
                fields[key] = scanner.integer()
                scanner.expect(")")
    scanner.expect("}")
    layout = Layout(tuple(m2m), tuple(tiles), fields["L"], fields["E"], fields["S"])
    return layout, scanner.pos


def _parse_tile(scanner: _Scanner) -> tuple[int, ...]:
    """The sizes of one tile after its ``(``, through the closing ``)``."""
    tile: list[int] = []
    if scanner.accept(")"):
        return ()  # rejected by Layout with a message naming T()
    while True:
        tile.append(COMBINE_DIMENSION if scanner.accept("*") else scanner.integer())
        if scanner.accept(")"):
            return tuple(tile)
        scanner.expect(",")


class _Scanner:
    """A tiny tokenizer for XLA layout/shape notation with precise error messages."""

    def __init__(self, text: str, pos: int):
        self.text = text
        self.pos = pos
        self.start = pos

    def _match(self):
        return _TOKEN.match(self.text, self.pos)

    def peek(self) -> str | None:
        m = self._match()
        return m.group(1) if m else None

    def next(self) -> str | None:
        m = self._match()
        if not m:
            return None
        self.pos = m.end()
        return m.group(1)

    def accept(self, tok: str) -> bool:
        if self.peek() == tok:
            self.next()
            return True
        return False

    def expect(self, tok: str) -> None:
        if not self.accept(tok):
            self.fail(f"expected {tok!r}")

    def integer(self) -> int:
        tok = self.peek()
        if tok is None or not re.fullmatch(r"-?[0-9]+", tok):
            self.fail("expected an integer")
        self.next()
        return int(tok)

    def fail(self, msg: str):
        end = self.text.find("}", self.pos)
        shown = self.text[self.start : end + 1 if end >= 0 else self.start + 60]
        raise LayoutError(f"malformed layout {shown!r} at column {self.pos - self.start}: {msg}")


@irdl_attr_definition
class LayoutAttr(Data[Layout]):
    """``#hlo.layout<{...}>``: an XLA layout in the encoding slot of a tensor type."""

    name = "hlo.layout"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Layout:
        parser.parse_punctuation("<")
        text = parser.lexer.input.content
        start = parser.pos
        try:
            layout, end = parse_layout_prefix(text, start)
        except LayoutError as e:
            parser.raise_error(str(e))
        resume_after(parser, end)
        parser.parse_punctuation(">")
        return layout

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string("<" + self.data.to_text() + ">")

    @staticmethod
    def from_text(text: str) -> LayoutAttr:
        return LayoutAttr(parse_layout(text))


def layout_of(type_: Attribute) -> Layout | None:
    """The layout carried by a tensor type, or None when it has none."""
    if isinstance(type_, TensorType) and isinstance(type_.encoding, LayoutAttr):
        return type_.encoding.data
    return None


def with_layout(type_: TensorType, layout: Layout | str | None) -> TensorType:
    """``type_`` with its layout replaced (``None`` removes it)."""
    if isinstance(layout, str):
        layout = parse_layout(layout)
    if layout is not None:
        layout.check_rank(type_.get_num_dims(), str(type_))
    encoding = LayoutAttr(layout) if layout is not None else NoneAttr()
    return TensorType(type_.element_type, type_.get_shape(), encoding)


def strip_layout(type_: Attribute) -> Attribute:
    """The same type without layout encodings (recursing into tuples)."""
    from xdsl.dialects.builtin import TupleType

    if isinstance(type_, TensorType) and not isinstance(type_.encoding, NoneAttr):
        return TensorType(type_.element_type, type_.get_shape())
    if isinstance(type_, TupleType):
        return TupleType([strip_layout(t) for t in type_.types])
    return type_
