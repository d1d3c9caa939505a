"""XLA HLO module text -> plain Python records (:class:`HloModuleText`).

The grammar is XLA's (``HloParserImpl``): a module header ``HloModule name,
key=value, ...``, optional debug-info sections (``FileNames``, ``FunctionNames``,
``FileLocations``, ``StackFrames``, as ``compile().as_text()`` prints them),
then computations::

    [ENTRY] [%]name [(params) -> shape] [, execution_thread="..."] {
      [ROOT] [%]name = shape opcode(operands)[, attribute=value]*
      ...
    }

An instruction may span several lines (attributes follow a ``,``); operands may
carry their shape (``f32[4]{0} %x``); ``/* */`` comments are skipped anywhere.
Attribute values are kept as their text here; :mod:`interop.hlo.attributes`
reads them. Shapes are parsed once per distinct text (a module repeats few).

Errors are :class:`~xla_dialect.errors.HloParseError` naming the line and
column of the text.
"""

from __future__ import annotations

import bisect
import re

from xdsl.dialects.builtin import NoneAttr, TensorType, TupleType
from xdsl.ir import Attribute

from xla_dialect.errors import HloParseError, LayoutError, ShapeParseError
from xla_dialect.layout import Layout, LayoutAttr
from xla_dialect.shape import format_shape, parse_shape

_SPACE = re.compile(r"(?:\s|/\*.*?\*/|//[^\n]*)*", re.S)
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_INSTR_HEAD = re.compile(r"(ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*")
_OPCODE = re.compile(r"([a-z][a-z0-9\-]*)\s*\(")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{(?=\s*[\d:])[^{}]*\})?")
_SHAPELESS = re.compile(r"[a-z][a-z0-9\-]*\s*\(")
_ATTR_KEY = re.compile(r"([A-Za-z_][\w.\-]*)\s*=\s*")
_DELIMS = re.compile(r'[(){}\[\]",\n]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_OPENERS = {"(": ")", "{": "}", "[": "]"}

# Fast path for the usual one-line instruction (the general reader handles everything else):
# name = array-or-simple-tuple shape, opcode, operands without parentheses, then the rest of the line.
_FAST_INSTR = re.compile(
    r"[ \t]*(ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*"
    r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{(?=[\d:])[^{}\n]*\})?)[ \t]+"
    r"([a-z][a-z0-9\-]*)\(([^()\n\"]*)\)([^\n]*)")
_FAST_ATTR = re.compile(
    r',[ \t]*([A-Za-z_][\w.\-]*)=((?:\{[^{}"\n]*(?:"(?:[^"\\\n]|\\.)*"[^{}"\n]*)*\})|"(?:[^"\\\n]|\\.)*"|[^,\s{}()"\[\]]+)[ \t]*')
_FAST_OPERAND = re.compile(r"[ \t]*%?([A-Za-z_][\w.\-]*)[ \t]*")
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


class Instruction:
    """One HLO instruction as written: name, shape, opcode, operand names, attribute texts."""

    __slots__ = ("name", "shape", "opcode", "operands", "operand_shapes", "literal", "attrs", "is_root", "pos",
                 "dynamic")

    def __init__(self, name, shape, opcode, operands, operand_shapes, literal, attrs, is_root, pos, dynamic=None):
        self.name: str = name
        self.shape: Attribute | None = shape  # None: left out (the importer infers it)
        self.opcode: str = opcode
        self.operands: list[str] = operands
        self.operand_shapes: list[Attribute | None] = operand_shapes  # shapes written inline, if any
        self.literal: str | None = literal  # constant(...) / parameter(...) text between the parentheses
        self.attrs: dict[str, str] = attrs
        self.is_root: bool = is_root
        self.pos: int = pos  # offset of the instruction in the text
        self.dynamic: str | None = dynamic  # the shape as written when it has bounded dynamic dimensions (<=N)

    def __repr__(self) -> str:
        return f"Instruction({self.name} = {self.opcode}({', '.join(self.operands)}))"


class Computation:
    """One computation: its instructions in text order and its root."""

    __slots__ = ("name", "is_entry", "instructions", "root", "attrs", "pos", "result")

    def __init__(self, name: str, is_entry: bool, instructions: list[Instruction], attrs: dict[str, str], pos: int,
                 result: tuple[Attribute, int] | None = None):
        self.name = name
        self.is_entry = is_entry
        self.instructions = instructions
        roots = [i for i in instructions if i.is_root]
        self.root = roots[-1] if roots else (instructions[-1] if instructions else None)
        self.attrs = attrs
        self.pos = pos
        self.result = result  # the signature's result shape and its offset ('-> f32[2]'), if written


class HloModuleText:
    """A parsed HLO module: header attributes, computations by name, debug-info tables."""

    def __init__(self, text: str, name: str, attrs: dict[str, str], computations: list[Computation],
                 sections: dict[str, dict[int, str]], source: str | None):
        self.text = text
        self.name = name
        self.attrs = attrs
        self.computations = {c.name: c for c in computations}
        self.order = computations
        entries = [c for c in computations if c.is_entry]
        self.entry = entries[0] if entries else (computations[-1] if computations else None)
        self.sections = sections
        self.source = source
        self._lines: list[int] | None = None

    def where(self, pos: int) -> str:
        """``prog.hlo:12:5`` (or ``line 12, column 5``) for a text offset."""
        return where(self.text, pos, self.source, self)

    def line_starts(self) -> list[int]:
        if self._lines is None:
            self._lines = [0] + [m.end() for m in re.finditer("\n", self.text)]
        return self._lines


def where(text: str, pos: int, source: str | None = None, module: HloModuleText | None = None) -> str:
    """Line and column (1-based) of offset ``pos`` in ``text``."""
    starts = module.line_starts() if module is not None else [0] + [m.end() for m in re.finditer("\n", text)]
    line = bisect.bisect_right(starts, pos) - 1
    col = pos - starts[line] + 1
    return f"{source}:{line + 1}:{col}" if source else f"line {line + 1}, column {col}"


class _Reader:
    """Position-based reader over the whole module text."""

    def __init__(self, text: str, source: str | None):
        self.text = text
        self.source = source
        self.shapes: dict[str, Attribute] = {}
        self.dynamic_shapes: dict[str, str] = {}  # shape spelling -> its text with <=N (bounded dynamic ones)
        self.single = False  # reading a single instruction (operands may be shapes without names)

    # -- errors -----------------------------------------------------------

    def fail(self, pos: int, message: str):
        line_start = self.text.rfind("\n", 0, pos) + 1
        line_end = self.text.find("\n", pos)
        line = self.text[line_start: line_end if line_end >= 0 else len(self.text)]
        if len(line) > 160:
            lo = max(0, pos - line_start - 60)
            line = ("..." if lo else "") + line[lo: lo + 120] + "..."
        raise HloParseError(f"HLO text {where(self.text, pos, self.source)}: {message}\n  {line.strip()}")

    # -- lexical helpers ----------------------------------------------------

    def skip(self, pos: int) -> int:
        return _SPACE.match(self.text, pos).end()

    def string_end(self, pos: int) -> int:
        """Offset just after the string literal starting at ``pos`` (escapes included)."""
        s = _STRING.match(self.text, pos)
        if s is None:
            self.fail(pos, "unterminated string")
        return s.end()

    def close(self, pos: int) -> int:
        """Offset just after the bracket matching the opener at ``pos`` (strings skipped)."""
        text = self.text
        stack = [_OPENERS[text[pos]]]
        opened = [pos]
        i = pos + 1
        search = _DELIMS.search
        while True:
            m = search(text, i)
            if m is None:
                self.fail(pos, f"unbalanced {text[pos]!r}: no matching {stack[-1]!r}")
            c = m.group()
            i = m.end()
            if c == '"':
                i = self.string_end(m.start())
            elif c in _OPENERS:
                stack.append(_OPENERS[c])
                opened.append(m.start())
            elif c in ")}]":
                if c != stack[-1]:
                    self.fail(m.start(), f"expected {stack[-1]!r} to close the {text[opened[-1]]!r} at "
                                         f"{where(text, opened[-1])}, found {c!r}")
                stack.pop()
                opened.pop()
                if not stack:
                    return i

    def value_end(self, pos: int) -> int:
        """End of an attribute value starting at ``pos``: the next ``,``, newline or closer at depth 0."""
        text = self.text
        i = pos
        search = _DELIMS.search
        while True:
            m = search(text, i)
            if m is None:
                return len(text)
            c = m.group()
            if c in _OPENERS:
                i = self.close(m.start())
            elif c == '"':
                i = self.string_end(m.start())
            else:  # , \n ) } ]
                return m.start()

    def split(self, start: int, end: int) -> list[tuple[int, int]]:
        """Spans of the comma-separated items of ``text[start:end]`` (top level only)."""
        text = self.text
        items = []
        i = item = start
        search = _DELIMS.search
        while True:
            m = search(text, i, end)
            if m is None:
                break
            c = m.group()
            if c == ",":
                items.append((item, m.start()))
                i = item = m.end()
            elif c in _OPENERS:
                i = self.close(m.start())
            elif c == '"':
                i = self.string_end(m.start())
            elif c == "\n":
                i = m.end()
            else:
                self.fail(m.start(), f"unexpected {c!r}")
        if text[item:end].strip() or items:
            items.append((item, end))
        return items

    # -- shapes -------------------------------------------------------------

    def shape_at(self, pos: int) -> tuple[Attribute, int]:
        """Parse the shape starting at ``pos``; return it and the offset after it."""
        text = self.text
        if text.startswith("(", pos):
            end = self.close(pos)
        else:
            m = _ARRAY_SHAPE.match(text, pos)
            if m is None:
                self.fail(pos, "expected a shape such as f32[2,3]{1,0} or a tuple shape (...)")
            end = m.end()
        return self.shape_text(text[pos:end], pos), end

    def shape_text(self, spelling: str, pos: int) -> Attribute:
        hit = self.shapes.get(spelling)
        if hit is None:
            big = next((n for n in _DIGITS.findall(spelling) if len(n) > 18 and int(n) > _INT64_MAX), None)
            if big is not None:
                self.fail(pos, f"{big} in shape {spelling!r} is beyond int64: XLA reads dimensions, tiles and "
                               f"layout fields as 64-bit integers")
            dynamic: list = []
            try:
                hit = with_default_layouts(parse_shape(_plain_shape(spelling), dynamic))
            except (ShapeParseError, LayoutError) as e:
                self.fail(pos, str(e))
            self.shapes[spelling] = hit
            if any(dynamic):  # XLA's bounded dynamic dimensions: the bound is the static size here
                self.dynamic_shapes[spelling] = format_shape(hit, default_layout=True, dynamic=dynamic)
        return hit

    def dynamic_of(self, spelling: str) -> str | None:
        """The shape ``spelling`` printed with its bounded dynamic dimensions (``f32[<=8,4]{1,0}``), or None
        when it has none (read by :meth:`shape_text` first)."""
        return self.dynamic_shapes.get(spelling) if "<=" in spelling else None

    # -- module -------------------------------------------------------------

    def module(self) -> HloModuleText:
        text = self.text
        pos = self.skip(0)
        name = None
        attrs: dict[str, str] = {}
        if text.startswith("HloModule", pos):
            pos = self.skip(pos + len("HloModule"))
            m = _NAME.match(text, pos)
            if m is None:
                self.fail(pos, "expected the module name after 'HloModule'")
            name = m.group(1)
            pos, attrs = self.attributes(m.end())
            self.check_module_attributes(attrs, m.end())
        elif not _COMPUTATION_START.match(text, pos):
            if _INSTR_HEAD.match(text, pos) or _ARRAY_SHAPE.match(text, pos) or text.startswith("(", pos):
                return self.single_instruction(pos)
            self.fail(pos, "expected 'HloModule name' (or a computation) at the start of HLO module text")
        sections: dict[str, dict[int, str]] = {}
        computations: list[Computation] = []
        seen: set[str] = set()
        while True:
            pos = self.skip(pos)
            if pos >= len(text):
                break
            section = next((s for s in _SECTIONS if text.startswith(s, pos)
                            and not (text[pos + len(s): pos + len(s) + 1].isalnum())), None)
            if section is not None:
                pos = self.section(pos + len(section), sections.setdefault(section, {}))
                continue
            comp = self.computation(pos)
            if comp.name in seen:
                self.fail(comp.pos, f"computation {comp.name!r} is defined twice")
            seen.add(comp.name)
            computations.append(comp)
            pos = self._after_computation
        if not computations:
            self.fail(len(text), "the module has no computations")
        if sum(c.is_entry for c in computations) > 1:
            second = [c for c in computations if c.is_entry][1]
            self.fail(second.pos, "more than one ENTRY computation")
        if name is None:  # computations without the header: XLA names the module after the entry
            entry = next((c for c in computations if c.is_entry), computations[-1])
            name = f"module_{entry.name}"
        return HloModuleText(text, name, attrs, computations, sections, self.source)

    def single_instruction(self, pos: int) -> HloModuleText:
        """Text that is one instruction (``%r = f32[4] add(f32[4] %a, f32[4] %b)``, or without ``%r =``):
        XLA's parser reads it as a module whose entry computation is that instruction, each operand a
        parameter of the shape written with it (unnamed operands are ``_0``, ``_1``...)."""
        self.single = True
        instr, end = self.instruction(pos, head_optional=True)
        end = self.skip(end)
        if end < len(self.text):
            self.fail(end, "expected the end of the text after a single instruction (a module of several "
                           "starts with 'HloModule name')")
        params: dict[str, Instruction] = {}
        for k, (name, shape) in enumerate(zip(instr.operands, instr.operand_shapes)):
            if not name:
                name = instr.operands[k] = f"_{len(params)}"
            if name in params:
                continue
            if shape is None:
                self.fail(instr.pos, f"operand %{name} has no shape: the operands of a single instruction are "
                                     f"its parameters, written with their shapes (f32[4] %{name})")
            params[name] = Instruction(name, shape, "parameter", [], [], str(len(params)), {}, False, instr.pos)
        instr.is_root = True
        comp = Computation("_", True, [*params.values(), instr], {}, pos)
        return HloModuleText(self.text, "_", {}, [comp], {}, self.source)

    def check_module_attributes(self, attrs: dict[str, str], pos: int) -> None:
        """The header attributes XLA's parser takes (``ParseHloModule``), with values of their kinds."""
        for key, value in attrs.items():
            kind = _MODULE_ATTRIBUTES.get(key)
            if kind is None:
                self.fail(pos, f"unknown module attribute {key}= (XLA's are {', '.join(sorted(_MODULE_ATTRIBUTES))})")
            ok = {"bool": lambda v: v in ("true", "false"),
                  "int": lambda v: re.fullmatch(r"-?\d+", v) is not None and -2**63 <= int(v) <= _INT64_MAX,
                  "bools": lambda v: re.fullmatch(r"true|false|\{\s*((true|false)\s*(,\s*(true|false)\s*)*)?\}", v)
                  is not None,
                  "braced": lambda v: v.startswith("{") and v.endswith("}")}[kind](value.strip())
            if not ok:
                what = {"bool": "true or false", "int": "a 64-bit integer", "bools": "true, false or a list of them",
                        "braced": "a {...} value"}[kind]
                self.fail(pos, f"module attribute {key}={value[:40]} must be {what}")

    def section(self, pos: int, table: dict[int, str]) -> int:
        """Debug-info lines ``<id> <text>`` after a section keyword (ids and integer fields: int32, as XLA's
        protos keep them)."""
        text = self.text
        line_re = re.compile(r"[ \t]*\n[ \t]*(\d+)[ \t]+([^\n]*)")
        while True:
            m = line_re.match(text, pos)
            if m is None:
                return pos
            _check_int32(self, m.group(1), m.start(1), "a debug-info id")
            body = m.group(2).strip()
            for f in re.finditer(r"(\w*(?:_id|line|column))\s*=\s*([^\s,}]*)", body):
                _check_int32(self, f.group(2), m.start(2) + f.start(2), f.group(1))
            table[int(m.group(1))] = body
            pos = m.end()

    def attributes(self, pos: int) -> tuple[int, dict[str, str]]:
        """``, key=value`` pairs from ``pos``; returns the offset after them and the texts."""
        text = self.text
        attrs: dict[str, str] = {}
        while True:
            p = self.skip(pos)
            if not text.startswith(",", p):
                return pos, attrs
            p = self.skip(p + 1)
            m = _ATTR_KEY.match(text, p)
            if m is None:
                self.fail(p, "expected attribute 'name=value' after ','")
            key = m.group(1)
            start = m.end()
            end = self.value_end(start)
            if key in attrs:
                self.fail(p, f"attribute {key!r} is given twice")
            attrs[key] = text[start:end].strip()
            pos = end

    def computation(self, pos: int) -> Computation:
        text = self.text
        start = pos
        is_entry = text.startswith("ENTRY", pos) and not (text[pos + 5: pos + 6].isalnum() or text[pos + 5: pos + 6] in "_.-")
        if is_entry:
            pos = self.skip(pos + 5)
        m = _NAME.match(text, pos)
        if m is None:
            self.fail(pos, "expected a computation name (or ENTRY)")
        name = m.group(1)
        if name == "HloModule":
            self.fail(pos, "a second module starts here: the text holds several HLO modules; import them one by "
                           "one (interop.tools.hlo_survey.split_modules splits such a file)")
        pos = self.skip(m.end())
        result = None
        if text.startswith("(", pos):  # the signature: checked as XLA does (its result against the root's)
            close = self.close(pos)
            for s, e in self.split(pos + 1, close - 1):
                s = self.skip(s)
                pm = re.compile(r"%?[A-Za-z_][\w.\-]*\s*:\s*").match(text, s)
                if pm is None:
                    self.fail(s, "expected a parameter 'name: shape' in the computation's signature")
                self.shape_text(text[pm.end():e].strip(), pm.end())
            pos = self.skip(close)
            if not text.startswith("->", pos):
                self.fail(pos, "expected '->' and the result shape after the computation's parameters")
            result_pos = self.skip(pos + 2)
            shape, pos = self.shape_at(result_pos)
            result = (shape, result_pos)
        pos, attrs = self.attributes(pos)
        pos = self.skip(pos)
        if not text.startswith("{", pos):
            self.fail(pos, f"expected '{{' to open computation {name!r}")
        pos += 1
        instructions: list[Instruction] = []
        names: set[str] = set()
        while True:
            pos = self.skip(pos)
            if pos >= len(text):
                self.fail(start, f"computation {name!r} is not closed with '}}'")
            if text.startswith("}", pos):  # XLA prints ', execution_thread="..."' after the '}'
                self._after_computation, after = self.attributes(pos + 1)
                for key, value in after.items():
                    if key in attrs:
                        self.fail(pos + 1, f"attribute {key!r} is given twice")
                    attrs[key] = value
                break
            instr, pos = self.fast_instruction(pos) or self.instruction(pos)
            if instr.name in names:
                self.fail(instr.pos, f"instruction name {instr.name!r} is used twice in computation {name!r}")
            names.add(instr.name)
            instructions.append(instr)
        if not instructions:
            self.fail(start, f"computation {name!r} has no instructions")
        unknown = next((k for k in attrs if k != "execution_thread"), None)
        if unknown is not None:
            self.fail(start, f"computation {name!r}: unknown attribute {unknown}= (XLA's computations take "
                             f"execution_thread= only)")
        return Computation(name, is_entry, instructions, attrs, start, result)

    def fast_instruction(self, pos: int):
        """The one-line common case, or None (then :meth:`instruction` reads it)."""
        text = self.text
        m = _FAST_INSTR.match(text, pos)
        if m is None:
            return None
        opcode = m.group(4)
        rest = m.group(6)
        end = m.end()
        attrs: dict[str, str] = {}
        if rest.strip():
            i = 0
            for a in _FAST_ATTR.finditer(rest):
                if a.start() != i:
                    return None
                key = a.group(1)
                if key in attrs:
                    return None
                attrs[key] = a.group(2)
                i = a.end()
            if rest[i:].strip():
                return None
        # A ',' on the next line continues this instruction: leave it to the general reader.
        after = self.skip(end)
        if text.startswith(",", after):
            return None
        operand_text = m.group(5)
        literal = None
        operands: list[str] = []
        if opcode in ("constant", "parameter"):
            literal = operand_text.strip()
        elif operand_text.strip():
            for item in operand_text.split(","):
                om = _FAST_OPERAND.fullmatch(item)
                if om is None:
                    return None  # inline shapes or comments: the general reader
                operands.append(om.group(1))
        shape = self.shapes.get(m.group(3))
        if shape is None:
            shape = self.shape_text(m.group(3), m.start(3))
        start = m.start(1) if m.group(1) is not None else m.start(2) - (text[m.start(2) - 1] == "%")
        return Instruction(m.group(2), shape, opcode, operands, [None] * len(operands), literal, attrs,
                           m.group(1) is not None, start, self.dynamic_of(m.group(3))), end

    def instruction(self, pos: int, head_optional: bool = False) -> tuple[Instruction, int]:
        text = self.text
        m = _INSTR_HEAD.match(text, pos)
        if m is None and not head_optional:
            self.fail(pos, "expected an instruction '[ROOT] name = shape opcode(operands)' or '}'")
        is_root = m is not None and m.group(1) is not None
        name = m.group(2) if m is not None else "_"
        after = m.end() if m is not None else pos
        dynamic = None
        if _SHAPELESS.match(text, after):  # 'tuple(a, b)': XLA infers the shape of some instructions
            shape, p = None, after
        else:
            shape, p = self.shape_at(after)
            dynamic = self.dynamic_of(text[after:p])
        p = self.skip(p)
        om = _OPCODE.match(text, p)
        if om is None:
            self.fail(p, f"expected an opcode and '(' after the shape of {name!r}")
        opcode = om.group(1)
        open_paren = om.end() - 1
        close = self.close(open_paren)
        operands: list[str] = []
        operand_shapes: list[Attribute | None] = []
        literal = None
        if opcode in ("constant", "parameter"):
            literal = text[open_paren + 1: close - 1].strip()
        else:
            for s, e in self.split(open_paren + 1, close - 1):
                s = self.skip(s)
                item = text[s:e].rstrip()
                if not item:
                    self.fail(s, f"empty operand in {opcode}")
                k = len(item)
                while k > 0 and (item[k - 1].isalnum() or item[k - 1] in "_.-%"):
                    k -= 1
                operand = item[k:].lstrip("%")
                if not operand and self.single and item[-1] in "]})":  # 'add(f32[4], f32[4])': unnamed
                    k = len(item)
                elif not operand or not (operand[0].isalpha() or operand[0] == "_"):
                    self.fail(s, f"expected an operand name in {opcode}, found {item[:40]!r}")
                operands.append(operand)
                prefix = item[:k].strip()
                operand_shapes.append(self.shape_text(prefix, s) if prefix else None)
        end, attrs = self.attributes(close)
        return Instruction(name, shape, opcode, operands, operand_shapes, literal, attrs, is_root, pos,
                           dynamic), end


_DIGITS = re.compile(r"\d+")
_INT64_MAX = 2**63 - 1
_SHAPE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_SPLIT_CONFIGS = re.compile(r"SC(?:\(\s*\d+\s*:[\d,\s]*\))+")


def _plain_shape(spelling: str) -> str:
    """The shape text without what XLA's parser skips or drops for values: comments (a tuple shape written
    over several lines, ``(f32[4], // x``), and a layout's split configs ``SC(0:2)`` (how a buffer is split
    in memory; the layout's other fields are kept)."""
    if "/" in spelling:
        spelling = _SHAPE_COMMENT.sub(" ", spelling)
    if "SC(" in spelling:
        spelling = re.sub(r":\s*\}", "}", _SPLIT_CONFIGS.sub("", spelling))
    return spelling


_MODULE_ATTRIBUTES = {
    "is_scheduled": "bool", "replica_count": "int", "num_partitions": "int", "input_output_alias": "braced",
    "buffer_donor": "braced", "alias_passthrough_params": "bool", "entry_computation_layout": "braced",
    "frontend_attributes": "braced", "allow_spmd_sharding_propagation_to_parameters": "bools",
    "allow_spmd_sharding_propagation_to_output": "bools",
}
"""The module header attributes of XLA's parser (``HloParserImpl::ParseHloModule``) and their kinds."""


def _check_int32(reader, value: str, pos: int, what: str) -> None:
    if re.fullmatch(r"-?\d+", value) is None or not -2**31 <= int(value) < 2**31:
        reader.fail(pos, f"{what}={value} must be a 32-bit integer")


def with_default_layouts(type_: Attribute) -> Attribute:
    """``type_`` with XLA's default layout on every layout-less array (XLA's parser does the same)."""
    if isinstance(type_, TensorType):
        if isinstance(type_.encoding, NoneAttr):
            return TensorType(type_.element_type, type_.get_shape(), LayoutAttr(Layout.default(type_.get_num_dims())))
        return type_
    if isinstance(type_, TupleType):
        return TupleType([with_default_layouts(t) for t in type_.types])
    return type_


_HLO_START = re.compile(rb"(?:\s|/\*.*?\*/|//[^\n]*)*(?:HloModule\b|(ENTRY\s+)?%?[A-Za-z_][\w.\-]*\s*(?:\(|\{))", re.S)
_COMPUTATION_START = re.compile(r"(ENTRY\s+)?%?[A-Za-z_][\w.\-]*\s*(?:\(|\{)")


def is_hlo_text(data: bytes | str) -> bool:
    """Whether ``data`` starts like HLO module text: ``HloModule`` (after spaces and comments), or
    computations without that header (XLA's test files) with an ENTRY one."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="replace")
    m = _HLO_START.match(data[:4096])
    if m is None:
        return False
    if m.group().rstrip().endswith(b"HloModule"):
        return True
    return b"ENTRY" in data and b"func.func" not in data[:65536] and b"module {" not in data[:65536]


def parse_hlo_text(text: str, source: str | None = None) -> HloModuleText:
    """Parse HLO module text (``source`` names the file in messages)."""
    if not isinstance(text, str):
        raise HloParseError(f"HLO text must be a string, got {type(text).__name__}")
    return _Reader(text, source).module()
