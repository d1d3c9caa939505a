"""xla_dialect: XLA's HLO as an xDSL dialect, with XLA memory layouts.

Public entry points: :class:`~xla_dialect.builder.XlaBuilder`,
:func:`~xla_dialect.shape.parse_shape` / :func:`~xla_dialect.shape.format_shape`,
:class:`~xla_dialect.layout.Layout` / :class:`~xla_dialect.layout.LayoutAttr`,
the dialect object :data:`~xla_dialect.dialect.HLO` and :func:`~xla_dialect.dialect.parse_module`.
"""

from .builder import XlaBuilder, XlaOp
from .dialect import HLO, make_context, parse_module
from .errors import XlaError
from .layout import Layout, LayoutAttr, parse_layout
from .shape import format_shape, parse_shape

__all__ = [
    "HLO",
    "Layout",
    "LayoutAttr",
    "XlaBuilder",
    "XlaError",
    "XlaOp",
    "format_shape",
    "make_context",
    "parse_layout",
    "parse_module",
    "parse_shape",
]
