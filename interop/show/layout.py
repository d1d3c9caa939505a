"""``xla-show layout SHAPE -o out.svg|png``: the picture of :func:`xla_dialect.layout_drawing.draw`."""

from __future__ import annotations

from xla_dialect.errors import XlaError
from xla_dialect.layout_drawing import draw


def write_layout_picture(shape: str, path: str, max_elements: int = 1024) -> str:
    """Draw ``shape`` (XLA shape text with a layout) to ``path`` (``.svg``, or ``.png`` with cairosvg);
    returns the path. A malformed shape or an unsupported file type is an :class:`XlaError`."""
    if not isinstance(shape, str) or not shape.strip():
        raise XlaError("layout: SHAPE must be XLA shape text such as 'f32[3,5]{1,0:T(2,2)}'")
    draw(shape.strip(), path, max_elements=max_elements)
    return path
