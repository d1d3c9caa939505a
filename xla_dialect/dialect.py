"""The ``hlo`` dialect: every op family plus the layout, literal and token attributes."""

from __future__ import annotations

from xdsl.ir import Dialect

from .layout import LayoutAttr
from .literal import DenseLiteralAttr
from .ops import ALL_OPS
from .quant import QUANT
from .types import FutureType, TokenType

HLO = Dialect("hlo", ALL_OPS, [LayoutAttr, DenseLiteralAttr, TokenType, FutureType])
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


def check_string_literals(text: str) -> None:
    """Raise :class:`~xla_dialect.errors.MlirParseError` at the first unterminated string literal of MLIR
    ``text`` (linear time). xDSL's lexer matches string literals with a regular expression that takes
    exponential time on an unterminated one (``func.func @"abab...``: 28 characters, 5 s), so text is checked
    before xDSL sees it. MLIR strings end on the same line; ``//`` starts a comment outside strings."""
    from .errors import MlirParseError

    line, start, i, n = 1, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, start = line + 1, i + 1
        elif c == "/" and text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        elif c == '"':
            opened = i
            i += 1
            while i < n and text[i] != '"' and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            if i >= n or text[i] != '"':
                raise MlirParseError(f"<unknown>:{line}:{opened - start + 1}: string literal not closed before the end of "
                                     f"{'the line' if i < n else 'the text'}")
        i += 1


def parse_module(text: str):
    """Parse hlo MLIR text (custom or generic form) into a verified ``ModuleOp``."""
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    from .errors import MlirParseError

    if not isinstance(text, str):
        raise MlirParseError(f"parse_module expects MLIR text (a str), got {type(text).__name__}")
    check_string_literals(text)
    try:
        module = Parser(make_context(), text).parse_module()
    except ParseError as e:
        raise MlirParseError(str(e)) from None
    module.verify()
    return module
