"""XLA memory layouts: tiling math, where each element of an array lives in linear memory.

The layout itself (:class:`Layout`, its notation, the ``#hlo.layout<...>`` attribute
:class:`LayoutAttr`, :func:`parse_layout`, :func:`layout_of`, :func:`with_layout`,
:func:`strip_layout`) is defined in :mod:`xla_dialect.layout_attr` and re-exported here.

Tiling math maps logical elements to linear memory as
the tiled-layout spec describes: :func:`linear_index`, :func:`linear_indices`
(vectorized), :func:`physical_dims`, :func:`physical_element_count`,
:func:`byte_size`, and :func:`to_physical` / :func:`from_physical` to lay a
NumPy array out in a 1-D buffer and read it back. Each takes a tensor type or
XLA shape text (:mod:`xla_dialect.shape`). Pictures of the physical order are
:func:`xla_dialect.layout_drawing.draw`.
"""

from __future__ import annotations

import functools

import numpy as np

from xdsl.dialects.builtin import NoneAttr, TensorType
from xdsl.ir import Attribute

from .errors import LayoutError
from .layout_attr import (  # noqa: F401  (re-exported: the layout's own names stay importable from here)
    COMBINE_DIMENSION,
    Layout,
    LayoutAttr,
    layout_of,
    parse_layout,
    parse_layout_prefix,
    strip_layout,
    tile_text,
    with_layout,
)
from .shape import format_shape, parse_shape


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


def array_layout(shape) -> tuple[tuple[int, ...], Layout, Attribute]:
    """``(dims, layout, tensor type)`` of ``shape`` (a TensorType or XLA shape text).

    A tensor without a layout gets XLA's default descending layout.
    """
    if isinstance(shape, str):
        shape = parse_shape(shape)
    if not isinstance(shape, TensorType):
        raise LayoutError(f"tiling math needs an array type (tensor), got {shape_text(shape)}")
    dims = tuple(shape.get_shape())
    if any(d < 0 for d in dims):
        raise LayoutError(f"{shape_text(shape)}: dynamic dimensions have no physical layout")
    encoding = shape.encoding
    if isinstance(encoding, NoneAttr):
        return dims, Layout.default(len(dims)), shape
    if not isinstance(encoding, LayoutAttr):
        raise LayoutError(f"{shape_text(shape)}: encoding {encoding} is not an #hlo.layout")
    encoding.data.check_rank(len(dims), shape_text(shape))
    return dims, encoding.data, shape


def shape_text(type_) -> str:
    """XLA shape text for messages (MLIR text when it is not an XLA shape)."""
    try:
        return format_shape(type_)
    except Exception:
        return str(type_)


def apply_tile(dims: list[int], coords: list, tile: tuple[int, ...], where: str):
    """One tiling level: ``dims``/``coords`` (physical order) -> the tiled shape and coordinates."""
    if tile[-1] == COMBINE_DIMENSION:
        raise LayoutError(
            f"{where}: tile T{tile_text(tile)} ends with '*' but '*' combines a dimension "
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


def physical_position(dims: tuple[int, ...], layout: Layout, coords: list, where: str):
    """Final physical dims (Python ints) and the row-major linear index of ``coords``."""
    order = layout.minor_to_major[::-1]  # physical order, most major first
    pdims = [dims[d] for d in order]
    pcoords = [coords[d] for d in order]
    for tile in layout.tiles:
        pdims, pcoords = apply_tile(pdims, pcoords, tile, where)
    linear = 0
    for d, c in zip(pdims, pcoords):
        linear = linear * d + c
    return pdims, linear


def _checked_physical_dims(dims: tuple[int, ...], layout: Layout, where: str) -> list[int]:
    pdims, _ = physical_position(dims, layout, [0] * len(dims), where)
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
    dims, layout, tensor = array_layout(shape)
    return tuple(_checked_physical_dims(dims, layout, shape_text(tensor)))


def physical_element_count(shape) -> int:
    """Elements in memory: tile padding included, rounded up to a multiple of L(n).

    Equals XLA's ``ShapeUtil::ArraySize`` element count when the sub-tiles
    add no padding (XLA assumes they do not and looks only at the first tile);
    here every level's padding is counted, so every linear index fits.
    XLA's ``ArraySize`` applies L(n) only to tiled shapes; here it applies to
    untiled ones too, as the LayoutProto field documents.
    """
    dims, layout, tensor = array_layout(shape)
    total = 1
    for d in _checked_physical_dims(dims, layout, shape_text(tensor)):
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

    _, layout, tensor = array_layout(shape)
    count = physical_element_count(tensor)
    if layout.element_size_in_bits:
        return -(-count * layout.element_size_in_bits // 8)
    return count * -(-element_type_of(tensor.element_type).bits // 8)


def linear_index(shape, index) -> int:
    """Position of element ``index`` (logical coordinates) in the array's linear memory.

    >>> linear_index("f32[3,5]{1,0:T(2,2)}", (2, 3))
    17
    """
    dims, layout, tensor = array_layout(shape)
    where = shape_text(tensor)
    index = tuple(index)
    if len(index) != len(dims):
        raise LayoutError(f"{where}: index {list(index)} has {len(index)} coordinates, the shape has rank {len(dims)}")
    for axis, (i, d) in enumerate(zip(index, dims)):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < d:
            raise LayoutError(f"{where}: index {list(index)} is out of bounds in dimension {axis} (size {d})")
    _checked_physical_dims(dims, layout, where)
    _, linear = physical_position(dims, layout, [int(i) for i in index], where)
    return linear


def linear_indices(shape) -> np.ndarray:
    """int64 array of the logical shape holding each element's :func:`linear_index`.

    Computed for all elements at once with NumPy index arithmetic; the result
    is read-only (small tables are cached).
    """
    dims, layout, tensor = array_layout(shape)
    where = shape_text(tensor)
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
    _, linear = physical_position(dims, layout, coords, where)
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
    dims, _, tensor = array_layout(shape)
    array = np.asarray(array)
    if array.shape != dims:
        raise LayoutError(f"to_physical: array of shape {array.shape} does not match {shape_text(tensor)}")
    from .limits import check_bytes

    count = physical_element_count(tensor)
    check_bytes(count * array.dtype.itemsize, f"the physical buffer of {shape_text(tensor)}")
    buffer = np.zeros(count, dtype=array.dtype)
    if array.size:
        buffer[linear_indices(tensor).reshape(-1)] = array.reshape(-1)
    return buffer


def from_physical(buffer, shape) -> np.ndarray:
    """Read the logical array back out of a 1-D buffer laid out by :func:`to_physical`."""
    dims, _, tensor = array_layout(shape)
    buffer = np.asarray(buffer)
    expected = physical_element_count(tensor)
    if buffer.ndim != 1 or buffer.size != expected:
        raise LayoutError(
            f"from_physical: {shape_text(tensor)} needs a 1-D buffer of {expected} elements, "
            f"got shape {buffer.shape}"
        )
    return buffer[linear_indices(tensor).reshape(-1)].reshape(dims)
