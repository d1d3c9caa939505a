"""The ``hlo`` dialect: every op family plus the layout, literal and token attributes."""

from __future__ import annotations

from xdsl.ir import Dialect

from .layout import LayoutAttr
from .literal import DenseLiteralAttr
from .ops import ALL_OPS
from .quant import QUANT
from .types import TokenType

HLO = Dialect("hlo", ALL_OPS, [LayoutAttr, DenseLiteralAttr, TokenType])
"""The hlo dialect (ops named like StableHLO: ``hlo.add``, ``hlo.dot_general``, ...)."""


def make_context(allow_unregistered: bool = False):
    """An xDSL ``Context`` with builtin, func, hlo and quant (``!quant.uniform``) loaded."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    ctx.load_dialect(HLO)
    ctx.load_dialect(QUANT)
    return ctx


def parse_module(text: str):
    """Parse hlo MLIR text (custom or generic form) into a verified ``ModuleOp``."""
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    from .errors import MlirParseError

    try:
        module = Parser(make_context(), text).parse_module()
    except ParseError as e:
        raise MlirParseError(str(e)) from None
    module.verify()
    return module
