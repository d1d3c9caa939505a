"""Check ops at the text level: a corpus file split at ``// -----`` into programs (:func:`split_programs`),
and every ``check.*`` op (custom syntax or ``custom_call @check.*``) rewritten to the generic form jaxlib's
parser accepts for an unregistered dialect (:func:`normalize_checks`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .records import ConformanceError


_SPLIT = re.compile(r"(?m)^// -----.*$")
# A check op (custom or generic form), or an interpreter.probe / interpreter.print op in custom form.
_HARNESS_OP = re.compile(r'(?m)^[ \t]*(?P<result>%[\w#]+\s*=\s*)?(?:(?P<quote>"?)check\.(?P<kind>\w+)(?P=quote)'
                         r'|interpreter\.(?P<interpreter>probe|print)\b)')
_OPEN, _CLOSE = "([{<", ")]}>"


def split_programs(text: str) -> list[tuple[int, str]]:
    """Split a ``-split-input-file`` file at ``// -----`` lines: ``[(first_line, chunk), ...]``.

    Each chunk keeps its own text; ``first_line`` (0-based) lets messages give file lines.
    """
    chunks, start, line = [], 0, 0
    for m in _SPLIT.finditer(text):
        chunks.append((line, text[start:m.start()]))
        line += text.count("\n", start, m.end())
        start = m.end()
    chunks.append((line, text[start:]))
    return chunks


def _scan(text: str, start: int, stop: Callable[[int, str, int, bool], bool]) -> int:
    """Index of the first character at which ``stop(i, char, depth, colon_seen)`` holds.

    Tracks bracket depth (``()[]{}<>``, with ``->`` not counted), skips string
    literals and notes whether a ``:`` at depth 0 has been seen.
    """
    depth, colon, i, n = 0, False, start, len(text)
    while i < n:
        c = text[i]
        if stop(i, c, depth, colon):
            return i
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "/" and text.startswith("//", i):  # a comment: up to the end of its line
            newline = text.find("\n", i)
            i = (newline if newline >= 0 else n) - 1
        elif c == "-" and text.startswith("->", i):
            i += 1
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == ":" and depth == 0:
            colon = True
        i += 1
    return n


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` characters outside brackets and strings."""
    parts, start = [], 0
    while True:
        end = _scan(text, start, lambda i, c, d, _: c == sep and d == 0)
        parts.append(text[start:end].strip())
        if end >= len(text):
            return parts
        start = end + 1


def _top_index(text: str, char: str, last: bool = False) -> int:
    """Index of the first (or last) ``char`` outside brackets and strings, or -1."""
    found, start = -1, 0
    while True:
        i = _scan(text, start, lambda i, c, d, _: c == char and d == 0)
        if i >= len(text):
            return found
        if not last:
            return i
        found, start = i, i + 1


@dataclass
class _CheckText:
    """A check op read from the text: operands, attribute items and operand types."""

    kind: str  # 'expect_eq', ... or 'interpreter.probe' / 'interpreter.print'
    operands: list[str]
    attributes: list[str]  # 'key = value' items
    types: list[str]


def _parse_custom(kind: str, body: str) -> _CheckText:
    """A ``check.<kind>`` op in its custom syntax (``body`` follows the op name)."""
    body = body.strip()
    if kind.endswith("_const"):
        # %x, dense<...> : T [{attr-dict}]
        operand, _, rest = body.partition(",")
        brace = _top_index(rest, "{")
        value, extra = (rest[:brace], rest[brace + 1:rest.rindex("}")]) if brace >= 0 else (rest, "")
        value = value.strip()
        colon = _top_index(value, ":")
        if colon < 0:
            raise ConformanceError(f"check.{kind}: expected 'dense<...> : type', got {value[:60]!r}")
        attributes = [f"value = {value}"] + [a for a in _split_top(extra, ",") if a]
        return _CheckText(kind, [operand.strip()], attributes, [value[colon + 1:].strip()])
    # %a, %b [, key = value]* [{attr-dict}] : T [, T]
    colon = _top_index(body, ":", last=True)
    if colon < 0:
        raise ConformanceError(f"check.{kind}: no ': type' in {body[:60]!r}")
    head, types = body[:colon], _split_top(body[colon + 1:], ",")
    extra = ""
    brace = _top_index(head, "{")
    if brace >= 0:
        head, extra = head[:brace], head[brace + 1:head.rindex("}")]
    operands, attributes = [], []
    for item in _split_top(head, ","):
        (operands if item.startswith("%") else attributes).append(item)
    attributes += [a for a in _split_top(extra, ",") if a]
    if len(types) == 1 and len(operands) > 1:
        types = types * len(operands)
    return _CheckText(kind, operands, attributes, types)


def _parse_generic(kind: str, body: str) -> _CheckText:
    """A ``"check.<kind>"(operands) <{props}> {attrs} : (types) -> ()`` op (``body`` follows the name)."""
    body = body.strip()
    if not body.startswith("("):
        raise ConformanceError(f"check.{kind}: expected '(' after the op name, got {body[:40]!r}")
    close = _scan(body, 0, lambda i, c, d, _: c == ")" and d == 1)
    operands = [o for o in _split_top(body[1:close], ",") if o]
    rest = body[close + 1:].strip()
    attributes: list[str] = []
    while rest.startswith(("<{", "{")):  # properties, then the attribute dictionary
        open_at = 1 if rest.startswith("<{") else 0
        end = _scan(rest, open_at, lambda i, c, d, _: c == "}" and d == 1)
        attributes += [a for a in _split_top(rest[open_at + 1:end], ",") if a]
        rest = rest[end + 1 + open_at:].strip()
    if not rest.startswith(":"):
        raise ConformanceError(f"check.{kind}: expected ': (types) -> ()', got {rest[:40]!r}")
    signature = rest[1:].strip()
    arrow = signature.find("->")
    inputs = (signature[:arrow] if arrow >= 0 else signature).strip()
    types = [t for t in _split_top(inputs[1:-1] if inputs.startswith("(") else inputs, ",") if t]
    return _CheckText(kind, operands, attributes, types)


def _emit_check(check: _CheckText, serial: int) -> str:
    """The generic form (attributes, no properties) of a check; ``*_const`` checks become two-operand checks.

    ``check.expect_eq_const %x, dense<...>`` becomes a ``stablehlo.constant``
    followed by ``check.expect_eq %x, %const``, so that the importer reads
    the constant (jaxlib's Python bindings cannot hand out every dense
    attribute, e.g. complex ones) and the runner only meets two-operand checks.
    """
    kind, operands, attributes, types = check.kind, list(check.operands), list(check.attributes), list(check.types)
    if kind.startswith("interpreter."):  # probe returns its operand, print nothing
        attr_text = f" {{{', '.join(attributes)}}}" if attributes else ""
        results = types[0] if kind == "interpreter.probe" else "()"
        return f'"{kind}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> {results}'
    prefix = ""
    if kind.endswith("_const"):
        value = next((a for a in attributes if re.match(r"value\s*=", a)), None)
        if value is None or len(operands) != 1 or len(types) != 1:
            raise ConformanceError(f"check.{kind}: expected one operand and a 'value' attribute")
        attributes.remove(value)
        name = f"%__conformance_expected{serial}"
        prefix = f'{name} = "stablehlo.constant"() {{{value}}} : () -> {types[0]} '
        kind = kind[:-len("_const")]
        operands.append(name)
        types.append(types[0])
    attr_text = f" {{{', '.join(attributes)}}}" if attributes else ""
    return f'{prefix}"check.{kind}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> ()'


def _without_comments(text: str) -> str:
    """``text`` without its ``//`` comments (outside string literals)."""
    if "//" not in text:
        return text
    out, start = [], 0
    while True:
        j, quoted = start, False
        while j < len(text):
            if text[j] == '"':
                quoted = not quoted
            elif not quoted and text.startswith("//", j):
                break
            j += 2 if quoted and text[j] == "\\" else 1
        out.append(text[start:j])
        if j >= len(text):
            return "".join(out)
        newline = text.find("\n", j)
        if newline < 0:
            return "".join(out)
        start = newline


def normalize_checks(text: str) -> str:
    """Rewrite every ``check.*`` op of ``text`` into the generic form with attributes (not properties).

    Handles the custom syntax (``check.expect_eq_const %x, dense<...> : T``)
    and the generic form with properties (``"check.expect_eq_const"(%x) <{value
    = ...}>``); ``*_const`` checks become a constant and a two-operand check
    (:func:`_emit_check`). ``interpreter.probe`` and ``interpreter.print`` in
    custom syntax become generic too. Line numbers are kept: a rewritten op
    takes one line, padded with as many newlines as the original spanned.
    """
    out, pos, serial = [], 0, 0
    for m in _HARNESS_OP.finditer(text):
        if m.start() < pos:
            continue
        # The op ends at the first newline outside brackets after its ': type'.
        end = _scan(text, m.end(), lambda i, c, d, colon: c == "\n" and d == 0 and colon)
        begin = m.start("quote") if m.group("kind") else m.start("interpreter") - len("interpreter.")
        statement = text[begin:end]
        body = _without_comments(text[m.end():end])
        if m.group("kind"):
            parse = _parse_generic if m.group("quote") else _parse_custom
            new = _emit_check(parse(m.group("kind"), body), serial)
        else:
            parsed = _parse_custom(m.group("interpreter"), body)
            parsed.kind = "interpreter." + parsed.kind
            new = _emit_check(parsed, serial)
        serial += 1
        out.append(text[pos:begin])
        out.append(" ".join(new.split("\n")) + "\n" * statement.count("\n"))
        pos = end
    out.append(text[pos:])
    return "".join(out)
