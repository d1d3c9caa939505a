"""XLA memory layouts: the ``#hlo.layout<...>`` attribute and tiling math.

A layout is written in XLA's own notation, e.g. ``{3,2,0,1:T(8,128)(2,1)L(1024)E(4)S(1)}``:

* ``3,2,0,1`` — minor_to_major: dimension numbers from fastest- to slowest-varying;
* ``T(8,128)(2,1)`` — tiling levels applied one after another; ``*`` in a tile
  combines that dimension with the next more minor one;
* ``L(n)`` — tail padding alignment in elements; ``E(n)`` — element size in
  bits; ``S(n)`` — memory space (0 = HBM/default, 1 = VMEM, 5 = host, ...).

The attribute lives in the ``encoding`` slot of xDSL's builtin ``TensorType``::

    tensor<8x1x1280x16384xbf16, #hlo.layout<{3,2,0,1:T(8,128)(2,1)}>>

Tiling math (bottom of this file) maps logical elements to linear memory as
the tiled-layout spec describes: :func:`linear_index`, :func:`linear_indices`
(vectorized), :func:`physical_dims`, :func:`physical_element_count`,
:func:`byte_size`, and :func:`to_physical` / :func:`from_physical` to lay a
NumPy array out in a 1-D buffer and read it back.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

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
                        f"layout {self}: tile sizes must be positive or '*', got {size} in T{_tile_text(tile)}"
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
            extra += "T" + "".join(_tile_text(t) for t in self.tiles)
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


def _tile_text(tile: tuple[int, ...]) -> str:
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


# ----------------------------------------------------------------------------
# Tiling math: where each element of an array lives in linear memory
# ----------------------------------------------------------------------------
#
# Follows the tiled-layout spec (shared/reference/xla-tiled-layout.md):
#
# 1. minor_to_major permutes the logical dimensions into physical order
#    (most major first);
# 2. each tiling level applies to the most-minor dimensions of the shape the
#    previous level produced: within the tiled suffix, every ``*`` first
#    merges its dimension into the next more minor one (bound d_i*d_{i-1}),
#    then each dimension d with tile size t splits into (ceil(d/t), t), and the
#    within-tile parts move to the minor end: (..., ceil(d/t)..., t...);
# 3. the final shape is laid out row-major; its element count, rounded up to
#    L(n), is the physical size.
#
# The same code runs on Python ints (one index, exact) and on NumPy int64
# arrays (all indices at once), so the scalar and vectorized paths cannot
# disagree.

_MAX_ELEMENTS = 2**62
"""Largest physical element count handled (int64 index arithmetic must not overflow)."""

_CACHE_LIMIT = 1 << 20
"""Linear-index tables up to this many elements are cached per (dims, layout)."""


def _array_layout(shape) -> tuple[tuple[int, ...], Layout, Attribute]:
    """``(dims, layout, tensor type)`` of ``shape`` (a TensorType or XLA shape text).

    A tensor without a layout gets XLA's default descending layout.
    """
    if isinstance(shape, str):
        from .shape import parse_shape

        shape = parse_shape(shape)
    if not isinstance(shape, TensorType):
        raise LayoutError(f"tiling math needs an array type (tensor), got {_show(shape)}")
    dims = tuple(shape.get_shape())
    if any(d < 0 for d in dims):
        raise LayoutError(f"{_show(shape)}: dynamic dimensions have no physical layout")
    encoding = shape.encoding
    if isinstance(encoding, NoneAttr):
        return dims, Layout.default(len(dims)), shape
    if not isinstance(encoding, LayoutAttr):
        raise LayoutError(f"{_show(shape)}: encoding {encoding} is not an #hlo.layout")
    encoding.data.check_rank(len(dims), _show(shape))
    return dims, encoding.data, shape


def _show(type_) -> str:
    """XLA shape text for messages (MLIR text when it is not an XLA shape)."""
    from .shape import format_shape

    try:
        return format_shape(type_)
    except Exception:
        return str(type_)


def _apply_tile(dims: list[int], coords: list, tile: tuple[int, ...], where: str):
    """One tiling level: ``dims``/``coords`` (physical order) -> the tiled shape and coordinates."""
    if tile[-1] == COMBINE_DIMENSION:
        raise LayoutError(
            f"{where}: tile T{_tile_text(tile)} ends with '*' but '*' combines a dimension "
            f"with the next more minor one, and the last tile entry has none"
        )
    if len(tile) > len(dims):
        # XLA: dimensions the shape lacks count as size-1 major dimensions.
        extra = len(tile) - len(dims)
        dims = [1] * extra + dims
        coords = [0] * extra + coords
    split = len(dims) - len(tile)
    outer_dims, outer_coords = dims[:split], coords[:split]
    tile_counts, tile_counts_coords, sizes, within = [], [], [], []
    merged_dim, merged_coord = 1, 0
    for size, d, c in zip(tile, dims[split:], coords[split:]):
        # '*': fold this dimension into the next more minor one (row-major merge).
        merged_coord = merged_coord * d + c
        merged_dim *= d
        if size == COMBINE_DIMENSION:
            continue
        tile_counts.append(-(-merged_dim // size))
        tile_counts_coords.append(merged_coord // size)
        sizes.append(size)
        within.append(merged_coord % size)
        merged_dim, merged_coord = 1, 0
    return outer_dims + tile_counts + sizes, outer_coords + tile_counts_coords + within


def _physical(dims: tuple[int, ...], layout: Layout, coords: list, where: str):
    """Final physical dims (Python ints) and the row-major linear index of ``coords``."""
    order = layout.minor_to_major[::-1]  # physical order, most major first
    pdims = [dims[d] for d in order]
    pcoords = [coords[d] for d in order]
    for tile in layout.tiles:
        pdims, pcoords = _apply_tile(pdims, pcoords, tile, where)
    linear = 0
    for d, c in zip(pdims, pcoords):
        linear = linear * d + c
    return pdims, linear


def _checked_physical_dims(dims: tuple[int, ...], layout: Layout, where: str) -> list[int]:
    pdims, _ = _physical(dims, layout, [0] * len(dims), where)
    total = 1
    for d in pdims:
        total *= d
    if total > _MAX_ELEMENTS:
        raise LayoutError(f"{where}: physical size of {total} elements is too large for int64 indexing")
    return pdims


def physical_dims(shape) -> tuple[int, ...]:
    """The shape after every tiling level, most major first, before L(n) padding.

    ``F32[3,5]{1,0:T(2,2)}`` gives ``(2, 3, 2, 2)``: 2x3 tiles of 2x2 elements.
    """
    dims, layout, tensor = _array_layout(shape)
    return tuple(_checked_physical_dims(dims, layout, _show(tensor)))


def physical_element_count(shape) -> int:
    """Elements in memory: tile padding included, rounded up to a multiple of L(n).

    Equals XLA's ``ShapeUtil::ArraySize`` element count when the sub-tiles
    add no padding (XLA assumes they do not and looks only at the first tile);
    here every level's padding is counted, so every linear index fits.
    XLA's ``ArraySize`` applies L(n) only to tiled shapes; here it applies to
    untiled ones too, as the LayoutProto field documents.
    """
    dims, layout, tensor = _array_layout(shape)
    total = 1
    for d in _checked_physical_dims(dims, layout, _show(tensor)):
        total *= d
    align = layout.tail_padding_alignment
    return -(-total // align) * align


def byte_size(shape) -> int:
    """Bytes the array occupies: physical elements times the element size.

    With ``E(n)`` elements take n bits each and the total is rounded up to
    whole bytes (XLA's sub-byte packing, e.g. ``s4[3]{0:E(4)}`` is 2 bytes);
    without it each element takes XLA's ``ByteWidth``: ceil(bits/8) bytes, so
    ``pred`` and ``s4`` take one byte each.
    """
    from .types import element_type_of

    _, layout, tensor = _array_layout(shape)
    count = physical_element_count(tensor)
    if layout.element_size_in_bits:
        return -(-count * layout.element_size_in_bits // 8)
    return count * -(-element_type_of(tensor.element_type).bits // 8)


def linear_index(shape, index) -> int:
    """Position of element ``index`` (logical coordinates) in the array's linear memory.

    >>> linear_index("f32[3,5]{1,0:T(2,2)}", (2, 3))
    17
    """
    dims, layout, tensor = _array_layout(shape)
    where = _show(tensor)
    index = tuple(index)
    if len(index) != len(dims):
        raise LayoutError(f"{where}: index {list(index)} has {len(index)} coordinates, the shape has rank {len(dims)}")
    for axis, (i, d) in enumerate(zip(index, dims)):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < d:
            raise LayoutError(f"{where}: index {list(index)} is out of bounds in dimension {axis} (size {d})")
    _checked_physical_dims(dims, layout, where)
    _, linear = _physical(dims, layout, [int(i) for i in index], where)
    return linear


def linear_indices(shape) -> np.ndarray:
    """int64 array of the logical shape holding each element's :func:`linear_index`.

    Computed for all elements at once with NumPy index arithmetic; the result
    is read-only (small tables are cached).
    """
    dims, layout, tensor = _array_layout(shape)
    where = _show(tensor)
    _checked_physical_dims(dims, layout, where)
    count = int(np.prod(dims, dtype=object))
    if count == 0:  # (the per-dimension index vectors of f32[0,300000000] alone would take gigabytes)
        try:
            table = np.empty(dims, np.int64)
        except ValueError as exc:  # NumPy refuses a dimension times the item size past its index range
            raise LayoutError(
                f"{where}: its index table (int64, of the logical dimensions {list(dims)}) cannot be a NumPy array: {exc}"
            ) from None
        table.flags.writeable = False
        return table
    from .limits import check_bytes

    check_bytes(count * 8 * 2, f"the index table of {where}")  # the table and a temporary of its size
    if count <= _CACHE_LIMIT:
        return _cached_linear_indices(dims, layout, where)
    return _linear_indices(dims, layout, where)


def _linear_indices(dims: tuple[int, ...], layout: Layout, where: str) -> np.ndarray:
    coords = [c.astype(np.int64) for c in np.indices(dims, dtype=np.int64, sparse=True)]
    _, linear = _physical(dims, layout, coords, where)
    table = np.broadcast_to(np.asarray(linear, dtype=np.int64), dims).copy()
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=64)
def _cached_linear_indices(dims: tuple[int, ...], layout: Layout, where: str) -> np.ndarray:
    return _linear_indices(dims, layout, where)


def to_physical(array, shape) -> np.ndarray:
    """Lay ``array`` out in memory: a 1-D buffer of :func:`physical_element_count` elements.

    Element ``i`` of ``array`` lands at ``linear_index(shape, i)``; padding is
    zero. The buffer keeps ``array``'s dtype.
    """
    dims, _, tensor = _array_layout(shape)
    array = np.asarray(array)
    if array.shape != dims:
        raise LayoutError(f"to_physical: array of shape {array.shape} does not match {_show(tensor)}")
    from .limits import check_bytes

    count = physical_element_count(tensor)
    check_bytes(count * array.dtype.itemsize, f"the physical buffer of {_show(tensor)}")
    buffer = np.zeros(count, dtype=array.dtype)
    if array.size:
        buffer[linear_indices(tensor).reshape(-1)] = array.reshape(-1)
    return buffer


def from_physical(buffer, shape) -> np.ndarray:
    """Read the logical array back out of a 1-D buffer laid out by :func:`to_physical`."""
    dims, _, tensor = _array_layout(shape)
    buffer = np.asarray(buffer)
    expected = physical_element_count(tensor)
    if buffer.ndim != 1 or buffer.size != expected:
        raise LayoutError(
            f"from_physical: {_show(tensor)} needs a 1-D buffer of {expected} elements, "
            f"got shape {buffer.shape}"
        )
    return buffer[linear_indices(tensor).reshape(-1)].reshape(dims)


def draw(shape, path: str | None = None, max_elements: int = 1024) -> str:
    """A picture of ``shape``'s physical order (SVG text; see :mod:`xla_dialect.layout_drawing`): elements in
    their logical grid labelled with their :func:`linear_index`, tiles outlined level by level, padding shaded,
    memory order drawn; more than ``max_elements`` cells are summarised.

    With ``path`` the picture is also written there: ``.svg``, or ``.png`` when the optional package
    ``cairosvg`` or the ``rsvg-convert`` program is installed (an
    :class:`~xla_dialect.errors.UnsupportedError` says so otherwise).

    >>> svg = draw("f32[3,5]{1,0:T(2,2)}")
    >>> svg.count('class="cell"'), svg.count('class="cell pad"')
    (15, 9)
    """
    from .layout_drawing import layout_svg, write_picture

    svg = layout_svg(shape, max_elements=max_elements)
    if path is not None:
        write_picture(svg, path)
    return svg

