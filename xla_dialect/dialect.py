"""The ``hlo`` dialect: every op family plus the layout, literal and token attributes."""

from __future__ import annotations

import re

from xdsl.ir import Dialect

from .callbacks import HostCallbackAttr
from .layout import LayoutAttr
from .literal import DenseLiteralAttr
from .ops import ALL_OPS
from .quant import QUANT
from .types import FutureType, TokenType

HLO = Dialect("hlo", ALL_OPS, [LayoutAttr, DenseLiteralAttr, TokenType, FutureType, HostCallbackAttr])
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


def check_string_literals(text: str, source: str = "<string>") -> None:
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


def text_position(text: str, offset: int) -> tuple[int, int]:
    """(line, column), both from 1, of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def positioned(text: str, source: str, offset: int, message: str) -> str:
    """``source:line:col: message`` followed by the line and a caret under the column."""
    line, col = text_position(text, offset)
    start = offset - col + 1
    end = text.find("\n", start)
    shown = text[start:end if end >= 0 else len(text)]
    if len(shown) > 200:
        shown = shown[:200] + " ..."
    return f"{source}:{line}:{col}: {message}\n  {shown}\n  {' ' * (col - 1)}^"


def parse_module(text: str, source: str = "<string>"):
    """Parse hlo MLIR text (custom or generic form) into a verified ``ModuleOp``.

    Errors are :class:`~xla_dialect.errors.MlirParseError` (syntax) or
    :class:`~xla_dialect.errors.HloVerifyError` (an op that does not verify), both
    starting ``source:line:column:`` (``source``: the file name in messages)."""
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError, VerifyException

    from .errors import HloVerifyError, MlirParseError, empty_input

    if not isinstance(text, str):
        raise MlirParseError(f"parse_module expects MLIR text (a str), got {type(text).__name__}")
    if not text.strip():
        raise MlirParseError(empty_input(source, text))
    check_string_literals(text, source)
    positions: dict[int, int] = {}

    class _Parser(Parser):
        """xDSL's parser, noting where each op starts (for the verifier's messages)."""

        def parse_operation(self):
            start = self._current_token.span.start
            op = super().parse_operation()
            positions[id(op)] = start
            return op

    try:
        module = _Parser(make_context(), text, source).parse_module()
    except ParseError as e:
        offset = e.span.start
        undefined = re.match(r"values used but not defined: \[(%[\w$.-]+)", e.msg)  # xDSL says so at the end
        if undefined:
            use = re.search(re.escape(undefined.group(1)) + r"(?![\w$.-])", text)
            offset = use.start() if use else offset
        raise MlirParseError(positioned(text, source, offset, e.msg)) from None
    try:
        module.verify()
    except VerifyException as e:
        offset = _failing_op_offset(module, positions)
        message = str(e) if offset is None else positioned(text, source, offset, str(e))
        raise (type(e) if isinstance(e, HloVerifyError) else HloVerifyError)(message) from None
    return module


def _failing_op_offset(module, positions: dict[int, int]) -> int | None:
    """Where the innermost op that does not verify starts, as xDSL's verifier finds it (nested ops first)."""
    from xdsl.utils.exceptions import VerifyException

    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, ValueError):
            return positions.get(id(op))
    return None
