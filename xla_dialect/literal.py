"""``#hlo.dense<...>``: exact array literals for constants, in every XLA element type.

xDSL's builtin ``dense<...>`` prints floats with six digits and cannot read back
several XLA types (f8, i1 hex, complex), so hlo constants carry their own
attribute that holds the NumPy array itself. Small finite arrays print as nested
lists with shortest round-trip decimals; anything else prints as the hex of the
raw little-endian storage (one byte per element for sub-byte types, as in
StableHLO's hex blobs).
"""

from __future__ import annotations

import re

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from .errors import XlaError
from .xdsl_compat import resume_after
from .types import element_type_of

_LIST_LIMIT = 64


class Literal:
    """An immutable, hashable array value with an exact element type."""

    __slots__ = ("array", "type", "_key")

    def __init__(self, array: np.ndarray, type_: TensorType):
        array = np.ascontiguousarray(array).reshape(np.shape(array))  # ascontiguousarray makes 0-d arrays 1-d
        array.flags.writeable = False
        self.array = array
        self.type = type_
        self._key = (type_, array.tobytes())

    def __eq__(self, other) -> bool:
        return isinstance(other, Literal) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Literal({self.array!r}, {self.type})"


def _format_scalar(value, kind: str, dtype: np.dtype) -> str:
    if kind == "pred":
        return "true" if value else "false"
    if kind in ("sint", "uint"):
        return str(int(value))
    if kind == "complex":
        part = np.float32 if dtype == np.complex64 else np.float64
        return f"({_format_float(part(value.real))}, {_format_float(part(value.imag))})"
    if dtype in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)):
        return _format_float(value)
    return _format_float(np.float32(value))  # bf16/f8/f4 are exact in f32


def _format_float(value) -> str:
    text = np.format_float_scientific(value, unique=True, trim="-")
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent}" if exponent and int(exponent) != 0 else mantissa


def _nested(array: np.ndarray, kind: str) -> str:
    if array.ndim == 0:
        return _format_scalar(array[()], kind, array.dtype)
    return "[" + ", ".join(_nested(sub, kind) for sub in array) + "]"


def literal_text(array: np.ndarray, type_: TensorType) -> str:
    """The text between ``#hlo.dense<`` and `` : type>``."""
    kind = element_type_of(type_.element_type).kind
    finite = kind not in ("float", "complex") or bool(np.isfinite(array.astype(np.complex128 if kind == "complex" else np.float64)).all())
    if array.size <= _LIST_LIMIT and finite:
        return _nested(array, kind)
    return '"0x' + array.tobytes().hex().upper() + '"'


_NUMBER = re.compile(r"\s*(true|false|[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan))")


def literal_from_text(text: str, type_: TensorType) -> np.ndarray:
    """Parse the body of ``#hlo.dense<...>`` into an array of ``type_``."""
    element = element_type_of(type_.element_type)
    shape = type_.get_shape()
    from .limits import check_bytes

    check_bytes(int(np.prod(shape, dtype=object)) * element.dtype.itemsize, f"the constant of type {type_}")
    text = text.strip()
    if text.startswith('"'):
        hexdigits = text.strip('"')
        if not hexdigits.lower().startswith("0x"):
            raise XlaError(f"#hlo.dense: expected a hex string \"0x...\", got {text[:20]!r}")
        data = bytes.fromhex(hexdigits[2:])
        count = int(np.prod(shape)) if shape else 1
        if len(data) == element.dtype.itemsize:
            arr = np.frombuffer(data, dtype=element.dtype).copy()
            return np.broadcast_to(arr.reshape(()), shape).copy()
        if len(data) != count * element.dtype.itemsize:
            raise XlaError(
                f"#hlo.dense: hex data has {len(data)} bytes, expected {count * element.dtype.itemsize} for {type_}"
            )
        return np.frombuffer(data, dtype=element.dtype).reshape(shape).copy()
    values: list = []
    pos = 0

    def parse_value(pos):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if text.startswith("[", pos):
            items = []
            pos += 1
            while True:
                while pos < len(text) and text[pos].isspace():
                    pos += 1
                if text.startswith("]", pos):
                    return items, pos + 1
                if items:
                    if not text.startswith(",", pos):
                        raise XlaError(f"#hlo.dense: expected ',' or ']' at {text[pos:pos + 20]!r}")
                    pos += 1
                item, pos = parse_value(pos)
                items.append(item)
        if text.startswith("(", pos):
            re_, pos = parse_value(pos + 1)
            while text[pos].isspace():
                pos += 1
            if not text.startswith(",", pos):
                raise XlaError("#hlo.dense: complex value must be (real, imag)")
            im, pos = parse_value(pos + 1)
            while text[pos].isspace():
                pos += 1
            return complex(re_, im), pos + 1
        m = _NUMBER.match(text, pos)
        if not m:
            raise XlaError(f"#hlo.dense: expected a number at {text[pos:pos + 20]!r}")
        tok = m.group(1)
        value = True if tok == "true" else False if tok == "false" else (
            float(tok) if any(c in tok for c in ".enaE") else int(tok))
        return value, m.end()

    value, pos = parse_value(pos)
    if text[pos:].strip():
        raise XlaError(f"#hlo.dense: unexpected {text[pos:].strip()[:20]!r}")
    values = np.array(value, dtype=object)
    if values.shape != tuple(shape):
        if values.shape == ():
            values = np.broadcast_to(values, shape)
        else:
            raise XlaError(f"#hlo.dense: value has shape {list(values.shape)} but the type is {type_}")
    if element.kind in ("float", "complex") and element.dtype not in (np.float64, np.complex128):
        # Go through the widest type first so decimal text rounds once.
        wide = np.complex128 if element.kind == "complex" else np.float64
        return values.astype(wide).astype(element.dtype)
    if element.kind in ("sint", "uint"):
        return np.array(values.astype(np.int64) if element.kind == "sint" else values.astype(np.uint64)).astype(element.dtype)
    return values.astype(element.dtype)


@irdl_attr_definition
class DenseLiteralAttr(Data[Literal]):
    """``#hlo.dense<[1.0, 2.0] : tensor<2xf32>>`` or ``#hlo.dense<"0x..." : tensor<...>>``."""

    name = "hlo.dense"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Literal:
        parser.parse_punctuation("<")
        text = parser.lexer.input.content
        start = parser.pos
        depth = 0
        end = start
        in_string = False
        while end < len(text):
            c = text[end]
            if c == '"':
                in_string = not in_string
            elif not in_string:
                if c in "[(":
                    depth += 1
                elif c in "])":
                    depth -= 1
                elif c == ":" and depth == 0:
                    break
            end += 1
        body = text[start:end]
        resume_after(parser, end)
        parser.parse_punctuation(":")
        type_ = parser.parse_type()
        parser.parse_punctuation(">")
        if not isinstance(type_, TensorType):
            parser.raise_error(f"#hlo.dense needs a tensor type, got {type_}")
        try:
            array = literal_from_text(body, type_)
        except XlaError as e:
            parser.raise_error(str(e))
        return Literal(array, type_)

    def print_parameter(self, printer: Printer) -> None:
        lit = self.data
        printer.print_string("<" + literal_text(lit.array, lit.type) + " : ")
        printer.print_attribute(lit.type)
        printer.print_string(">")

    @staticmethod
    def from_array(array: np.ndarray, type_: TensorType) -> DenseLiteralAttr:
        return DenseLiteralAttr(Literal(array, type_))

    @property
    def array(self) -> np.ndarray:
        return self.data.array
