"""Pictures of layouts: an array's physical order as an SVG (:func:`draw`, ``xla-show layout``).

The picture follows the tiled-layout notes: every element sits in its logical grid (the last two dimensions
across and down; leading dimensions are separate panels), labelled with its offset in linear memory
(:func:`xla_dialect.layout.linear_index`, computed by the same code); each first-level tile has its own
colour and a thick outline, deeper tiling levels thinner (red, then dashed) outlines; the tile padding
appears as grey cells past the array's edge, labelled with the offsets they occupy; a line through the
first elements in memory order shows the minor-to-major order. Shapes with more than ``max_elements``
cells are summarised: the first tiles are drawn, the caption gives the counts.

Written by hand (no dependency): plain SVG 1.1, one ``<rect class="cell">`` per element with
``data-index`` (logical coordinates) and ``data-offset`` attributes, so tests and tools can read it back.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from .errors import LayoutError
from .layout import (
    COMBINE_DIMENSION,
    Layout,
    apply_tile,
    array_layout,
    byte_size,
    physical_dims,
    physical_element_count,
    physical_position,
    shape_text,
)

__all__ = ["draw", "layout_svg", "write_picture"]

_TILE_COLOURS = ("#cfe2ff", "#ffe5b4", "#d5f5d5", "#f8d7f0", "#fff3b0", "#d9d2f5", "#c8f0ef", "#ffd6d6")
_LEVEL_STYLES = (
    'stroke="#1a1a1a" stroke-width="3"',
    'stroke="#d62728" stroke-width="1.6"',
    'stroke="#2c7fb8" stroke-width="1.2" stroke-dasharray="4 3"',
)
_PAD_FILL = "#d9d9d9"


def _padded_dims(dims: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The logical extent with the first tiling level's padding: each tiled dimension rounded up to its tile
    (dimensions merged by ``*`` are not extended)."""
    padded = list(dims)
    if not layout.tiles or not dims:
        return tuple(padded)
    order = layout.minor_to_major[::-1]
    tile = layout.tiles[0]
    rank = len(dims)
    for j in range(min(len(tile), rank)):
        t = tile[-1 - j]
        if t == COMBINE_DIMENSION or (j + 1 < len(tile) and tile[-2 - j] == COMBINE_DIMENSION):
            continue
        d = order[rank - 1 - j]
        padded[d] = -(-dims[d] // t) * t if dims[d] else 0
    return tuple(padded)


def _tile_ids(dims, layout: Layout, coords: list, level: int, where: str):
    """For each coordinate, the number of its tile at tiling ``level`` (row-major over the tile grid)."""
    order = layout.minor_to_major[::-1]
    pdims = [dims[d] for d in order]
    pcoords = [coords[d] for d in order]
    for tile in layout.tiles[: level + 1]:
        pdims, pcoords = apply_tile(pdims, pcoords, tile, where)
    inner = sum(1 for t in layout.tiles[level] if t != COMBINE_DIMENSION)
    ids = 0
    for d, c in zip(pdims[:-inner], pcoords[:-inner]):
        ids = ids * d + c
    return ids


def _si(n: int) -> str:
    return f"{n:,}"


def draw(shape, path: str | None = None, max_elements: int = 1024) -> str:
    """A picture of ``shape``'s physical order (SVG text, :func:`layout_svg`): elements in their logical grid
    labelled with their :func:`~xla_dialect.layout.linear_index`, tiles outlined level by level, padding shaded,
    memory order drawn; more than ``max_elements`` cells are summarised.

    With ``path`` the picture is also written there: ``.svg``, or ``.png`` when the optional package
    ``cairosvg`` or the ``rsvg-convert`` program is installed (an
    :class:`~xla_dialect.errors.UnsupportedError` says so otherwise).

    >>> svg = draw("f32[3,5]{1,0:T(2,2)}")
    >>> svg.count('class="cell"'), svg.count('class="cell pad"')
    (15, 9)
    """
    svg = layout_svg(shape, max_elements=max_elements)
    if path is not None:
        write_picture(svg, path)
    return svg


def layout_svg(shape, max_elements: int = 1024, cell: int = 34, title: str | None = None) -> str:
    """An SVG picture of ``shape``'s physical order (XLA shape text such as ``"f32[3,5]{1,0:T(2,2)}"`` or a
    tensor type; no layout means XLA's default row-major one). See the module docstring for what is drawn.

    Raises :class:`~xla_dialect.errors.LayoutError` (or ``ShapeParseError``) for a malformed shape.
    """
    if max_elements < 1:
        raise LayoutError(f"layout picture: max_elements must be positive, got {max_elements}")
    dims, layout, tensor = array_layout(shape)
    where = shape_text(tensor)
    # The same checks and sizes as the tiling math (raises for layouts that do not fit).
    pdims = physical_dims(tensor)
    physical = physical_element_count(tensor)
    nbytes = byte_size(tensor)
    logical = math.prod(dims)
    rank = len(dims)
    padded = _padded_dims(dims, layout)

    # The grid: the last two dimensions (a 1-D array is one row; a scalar one cell); leading ones are panels.
    grid_dims = padded[-2:] if rank >= 2 else ((1,) + padded if rank == 1 else (1, 1))
    rows_full, cols_full = grid_dims
    lead = padded[:-2] if rank > 2 else ()
    lead_logical = dims[:-2] if rank > 2 else ()
    panels_full = math.prod(lead_logical) if lead_logical else 1

    # Summarise: crop columns, then rows, then panels, to about max_elements cells (keep whole first tiles).
    tile_rows, tile_cols = _first_tile_extent(dims, layout, rank)
    rows, cols = rows_full, cols_full
    if rows * cols > max_elements:
        tiled = (tile_rows, tile_cols) != (1, 1)
        if tiled:
            want = 2 * tile_cols if 2 * tile_cols * min(rows_full, tile_rows) <= max_elements else tile_cols
        else:
            want = math.isqrt(max_elements)
        cols = min(cols_full, want, max(1, max_elements // max(1, min(rows_full, tile_rows))))
        rows = min(rows_full, max(1, max_elements // cols))
        if tiled and rows > tile_rows:
            rows -= rows % tile_rows
    panels = min(panels_full, max(1, max_elements // max(1, rows * cols)))
    summarised = (rows, cols, panels) != (rows_full, cols_full, panels_full)

    label_font = 11 if cell >= 30 else 8
    margin_left, margin_top = 56, 64
    panel_gap = 28
    panel_height = rows * cell
    width = margin_left + cols * cell + 40
    caption_lines = _caption(where, layout, dims, pdims, logical, physical, nbytes, rows, cols, rows_full,
                             cols_full, panels, panels_full, summarised)
    height = margin_top + panels * (panel_height + panel_gap) + 18 * len(caption_lines) + 20
    width = max(width, 8 * max(len(line) for line in caption_lines) + 20)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace">',
        f"<title>{escape(title or where)}</title>",
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"5\" refY=\"5\" markerWidth=\"4\" markerHeight=\"4\" "
        "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#444\"/></marker></defs>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="20" font-size="15" font-weight="bold">{escape(where)}</text>',
    ]
    grid_names = (rank - 2, rank - 1) if rank >= 2 else (None, 0 if rank == 1 else None)
    m2m = layout.minor_to_major

    def dim_label(d):
        if d is None:
            return ""
        pos = m2m.index(d)
        role = "most minor" if pos == 0 else ("most major" if pos == len(m2m) - 1 else f"minor #{pos}")
        return f"dim {d} ({dims[d]}, {role})"

    for p in range(panels):
        lead_index = tuple(int(i) for i in np.unravel_index(p, lead_logical)) if lead_logical else ()
        top = margin_top + p * (panel_height + panel_gap)
        out.append(f'<g class="panel" data-panel="{",".join(map(str, lead_index))}">')
        if lead_index:
            out.append(f'<text x="{margin_left}" y="{top - 6}" font-size="12">'
                       f'[{", ".join(map(str, lead_index))}, :, :]</text>')
        out.extend(_panel(dims, padded, layout, where, lead_index, rows, cols, top, margin_left, cell, label_font,
                          rank))
        out.append("</g>")
    # Axis labels of the grid.
    out.append(f'<text x="{margin_left}" y="{margin_top - 26}" font-size="12">{escape(dim_label(grid_names[1]))} '
               f'&#8594;</text>')
    if grid_names[0] is not None:
        y = margin_top + panel_height / 2
        out.append(f'<text x="14" y="{y}" font-size="12" transform="rotate(90 14 {y})" text-anchor="middle">'
                   f'{escape(dim_label(grid_names[0]))} &#8594;</text>')
    y = margin_top + panels * (panel_height + panel_gap) + 4
    for line in caption_lines:
        out.append(f'<text class="caption" x="8" y="{y}" font-size="12">{escape(line)}</text>')
        y += 18
    out.append("</svg>")
    return "\n".join(out)


def _first_tile_extent(dims, layout: Layout, rank: int) -> tuple[int, int]:
    """Rows and columns of the grid a first-level tile covers (1 x 1 when untiled)."""
    if not layout.tiles or rank == 0:
        return 1, 1
    tile = [t for t in layout.tiles[0]]
    order = layout.minor_to_major[::-1]
    extent = [1] * rank
    for j in range(min(len(tile), rank)):
        t = tile[-1 - j]
        if t != COMBINE_DIMENSION:
            extent[order[rank - 1 - j]] = t
    if rank == 1:
        return 1, extent[0]
    return extent[-2], extent[-1]


def _panel(dims, padded, layout, where, lead_index, rows, cols, top, left, cell, font, rank) -> list[str]:
    """The cells, tile outlines and memory-order line of one panel."""
    r = np.arange(rows).reshape(-1, 1)
    c = np.arange(cols).reshape(1, -1)
    if rank >= 2:
        coords = [np.full((1, 1), i, np.int64) for i in lead_index] + [r, c]
        inside = (r < dims[-2]) & (c < dims[-1])
    elif rank == 1:
        coords = [c + 0 * r]
        inside = (c < dims[0]) & (r == 0)
    else:
        coords = []
        inside = np.ones((1, 1), bool)
    inside = np.broadcast_to(inside, (rows, cols))
    if rank:
        _, linear = physical_position(dims, layout, [np.asarray(x, np.int64) for x in coords], where)
        linear = np.broadcast_to(np.asarray(linear), (rows, cols))
        levels = [np.broadcast_to(np.asarray(_tile_ids(dims, layout, coords, k, where)), (rows, cols))
                  for k in range(len(layout.tiles))]
    else:
        linear = np.zeros((1, 1), np.int64)
        levels = []
    out, texts = [], []
    for i in range(rows):
        for j in range(cols):
            x, y = left + j * cell, top + i * cell
            if inside[i, j]:
                fill = _TILE_COLOURS[int(levels[0][i, j]) % len(_TILE_COLOURS)] if levels else "#eef3fb"
                index = ",".join(map(str, (*lead_index, i, j) if rank >= 2 else ((j,) if rank == 1 else ())))
                out.append(f'<rect class="cell" data-index="{index}" data-offset="{int(linear[i, j])}" x="{x}" '
                           f'y="{y}" width="{cell}" height="{cell}" fill="{fill}" stroke="#999" stroke-width="0.5"/>')
                colour = "#000"
            else:
                out.append(f'<rect class="cell pad" data-offset="{int(linear[i, j])}" x="{x}" y="{y}" '
                           f'width="{cell}" height="{cell}" fill="{_PAD_FILL}" stroke="#bbb" stroke-width="0.5"/>')
                colour = "#777"
            texts.append(f'<text x="{x + cell / 2}" y="{y + cell / 2 + font / 3}" font-size="{font}" '
                         f'text-anchor="middle" fill="{colour}">{int(linear[i, j])}</text>')
    # Memory order: a light line through the first elements in offset order, under the labels.
    flat = [(int(linear[i, j]), i, j) for i in range(rows) for j in range(cols) if inside[i, j]]
    flat.sort()
    flat = flat[:64]
    if len(flat) > 1:
        points = " ".join(f"{left + j * cell + cell / 2},{top + i * cell + cell / 2}" for _, i, j in flat)
        out.append(f'<polyline class="order" points="{points}" fill="none" stroke="#7a7a7a" stroke-opacity="0.45" '
                   f'stroke-width="2.5" stroke-linejoin="round" marker-end="url(#arrow)"/>')
    out.extend(texts)
    # Tile outlines: an edge wherever neighbouring cells lie in different tiles of a level, and around the grid.
    for k, ids in reversed(list(enumerate(levels))):
        segments = []
        for i in range(rows):
            for j in range(cols):
                x, y = left + j * cell, top + i * cell
                if j + 1 < cols and ids[i, j] != ids[i, j + 1]:
                    segments.append(f"M{x + cell} {y}v{cell}")
                if i + 1 < rows and ids[i, j] != ids[i + 1, j]:
                    segments.append(f"M{x} {y + cell}h{cell}")
        segments.append(f"M{left} {top}h{cols * cell}v{rows * cell}h{-cols * cell}z")
        style = _LEVEL_STYLES[min(k, len(_LEVEL_STYLES) - 1)]
        out.append(f'<path class="tile level{k + 1}" d="{"".join(segments)}" fill="none" {style}/>')
    if not levels:
        out.append(f'<path class="outline" d="M{left} {top}h{cols * cell}v{rows * cell}h{-cols * cell}z" '
                   f'fill="none" stroke="#1a1a1a" stroke-width="2"/>')
    return out


def _caption(where, layout, dims, pdims, logical, physical, nbytes, rows, cols, rows_full, cols_full, panels,
             panels_full, summarised) -> list[str]:
    lines = []
    m2m = ",".join(map(str, layout.minor_to_major)) or "-"
    lines.append(f"minor_to_major {{{m2m}}}: dimension {layout.minor_to_major[0] if layout.minor_to_major else '-'} "
                 f"varies fastest; the line follows memory order (first 64 elements).")
    if layout.tiles:
        levels = []
        for k, tile in enumerate(layout.tiles):
            text = "(" + ",".join("*" if t == COMBINE_DIMENSION else str(t) for t in tile) + ")"
            what = ("thick outline, one colour per tile" if k == 0 else "red outline" if k == 1 else "dashed outline")
            levels.append(f"level {k + 1} T{text}: {what}")
        lines.append("; ".join(levels))
        lines.append(f"physical shape {list(pdims)} (tile grid, then within-tile dimensions), laid out row-major")
    expansion = physical / logical if logical else 1.0
    lines.append(f"{_si(logical)} elements, {_si(physical)} in memory with padding (x{expansion:.3g}); "
                 f"{_si(nbytes)} bytes" + ("; grey cells are padding" if physical > logical else ""))
    if layout.tail_padding_alignment != 1:
        lines.append(f"L({layout.tail_padding_alignment}): the buffer is rounded up to a multiple of "
                     f"{layout.tail_padding_alignment} elements")
    if summarised:
        panel_text = f", {panels} of {panels_full} panels" if panels_full > 1 else ""
        lines.append(f"summarised: {rows} of {rows_full} rows, {cols} of {cols_full} columns{panel_text} shown")
    return lines


def write_picture(svg: str, path: str) -> str:
    """Write SVG text to ``path``: ``.svg`` as is, ``.png`` through the optional package ``cairosvg`` or the ``rsvg-convert`` program.

    Other extensions, a missing ``cairosvg`` for PNG and unwritable paths raise an
    :class:`~xla_dialect.errors.XlaError` subclass with the reason.
    """
    from .errors import UnsupportedError, XlaError

    lower = str(path).lower()
    if lower.endswith(".svg"):
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(svg)
        except OSError as e:
            raise XlaError(f"{path}: cannot write it: {e.strerror or e}") from None
        return str(path)
    if lower.endswith(".png"):
        _write_png(svg, str(path))
        return str(path)
    raise UnsupportedError(f"{path}: the picture is written as .svg or .png; got another extension")


def _write_png(svg: str, path: str) -> None:
    """Rasterize with the optional package ``cairosvg``, else the ``rsvg-convert`` program (librsvg)."""
    import shutil
    import subprocess

    from .errors import UnsupportedError, XlaError

    try:
        import cairosvg  # optional: PNG output only
    except ImportError:
        cairosvg = None
    if cairosvg is not None:
        try:
            cairosvg.svg2png(bytestring=svg.encode("utf-8"), write_to=path)
        except OSError as e:
            raise XlaError(f"{path}: cannot write it: {e.strerror or e}") from None
        return
    program = shutil.which("rsvg-convert")
    if program is None:
        raise UnsupportedError(
            f"{path}: PNG output needs the optional package cairosvg (pip install cairosvg) or the rsvg-convert "
            "program (librsvg); write an .svg instead (any browser shows it)"
        )
    run = subprocess.run([program, "-f", "png", "-o", path], input=svg.encode("utf-8"), capture_output=True)
    if run.returncode != 0:
        raise XlaError(f"{path}: rsvg-convert could not write it: {run.stderr.decode(errors='replace').strip()}")

