"""Uniform quantized element types: ``!quant.uniform<i8:f32, 0.5:-3>``.

A quantized tensor holds integers of a *storage type* (``i8``, ``u8``, ``i4``,
...) that stand for floats of an *expressed type*: ``f = (q - zero_point) *
scale``. Quantization is per tensor (one scale and zero point) or per axis (one
pair per index of ``quantization_dimension``). The spelling and the constraints
are StableHLO's (``QuantizedTensorElementType`` in the spec), which are MLIR's
``quant`` dialect's, so hlo text with quantized types is also valid StableHLO
text. The type lives in a dialect of its own, named ``quant`` like MLIR's.

At run time a quantized array is its storage integers (:func:`storage_type`);
``hlo.uniform_quantize`` / ``hlo.uniform_dequantize`` convert to and from the
expressed floats, and the ``lower-quantized`` pass rewrites every other op on
quantized values into that dequantize -> float op -> quantize form (the spec's
``dequantize_op_quantize``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Data, Dialect, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from .errors import XlaError
from .xdsl_compat import resume_after
from .types import ElementType, element_type_named

__all__ = [
    "QUANT",
    "QuantError",
    "QuantParams",
    "UniformQuantizedType",
    "expressed_type",
    "is_quantized",
    "parse_quantized_type",
    "quantized_element",
    "storage_type",
    "uniform_quantized",
]


class QuantError(XlaError, ValueError):
    """A quantized element type is malformed or violates the spec's constraints."""


# MLIR spells storage types i8 (signed), u8 / ui8 (unsigned), si8 (signed).
_STORAGE_PREFIX = {"i": "s", "si": "s", "u": "u", "ui": "u"}
_EXPRESSED = ("f16", "bf16", "f32", "f64")
_MLIR_FLOAT_NAME = {"f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}


def _storage_element(name: str) -> ElementType:
    m = re.fullmatch(r"(ui|si|i|u)(\d+)", name)
    if not m:
        raise QuantError(f"quantized storage type must be an integer type such as i8 or u8, got {name!r}")
    xla = _STORAGE_PREFIX[m.group(1)] + m.group(2)
    try:
        return element_type_named(xla)
    except XlaError:
        raise QuantError(f"quantized storage type {name} has no XLA equivalent "
                         "(expected i2/i4/i8/i16/i32/i64 or u2/u4/u8/u16/u32/u64)") from None


@dataclass(frozen=True)
class QuantParams:
    """The parameters of one uniform quantized element type (immutable, hashable).

    ``storage`` / ``expressed`` are XLA type names (``"s8"``, ``"f32"``);
    ``axis`` is the quantization dimension of per-axis quantization, else None.
    """

    storage: str
    expressed: str
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None = None
    storage_min: int | None = None  # None: the storage type's minimum
    storage_max: int | None = None  # None: the storage type's maximum

    def __post_init__(self):
        storage = element_type_named(self.storage) if self.storage in _XLA_INTS else None
        if storage is None:
            raise QuantError(f"quantized storage type must be an XLA integer type (s8, u8, s4, ...), got {self.storage!r}")
        if self.expressed not in _EXPRESSED:
            raise QuantError(f"quantized expressed type must be one of {', '.join(_EXPRESSED)}, got {self.expressed!r}")
        low, high = _int_range(storage)
        lo = low if self.storage_min is None else int(self.storage_min)
        hi = high if self.storage_max is None else int(self.storage_max)
        object.__setattr__(self, "storage_min", lo)
        object.__setattr__(self, "storage_max", hi)
        object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))
        object.__setattr__(self, "zero_points", tuple(int(z) for z in self.zero_points))
        where = f"quantized type !quant.uniform{self.to_text()}"
        if not low <= lo < hi <= high:  # (C3)
            raise QuantError(f"{where}: storage range [{lo}, {hi}] must satisfy {low} <= min < max <= {high}")
        if not self.scales:
            raise QuantError(f"{where}: needs at least one scale")
        if len(self.scales) != len(self.zero_points):  # (C9)
            raise QuantError(f"{where}: {len(self.scales)} scales but {len(self.zero_points)} zero points")
        for s in self.scales:  # (C5), (C6)
            if not (math.isfinite(s) and s > 0):
                raise QuantError(f"{where}: scales must be finite and positive, got {s}")
        for z in self.zero_points:  # (C7)
            if not lo <= z <= hi:
                raise QuantError(f"{where}: zero point {z} is outside the storage range [{lo}, {hi}]")
        if self.axis is None and len(self.scales) != 1:  # (C10)
            raise QuantError(f"{where}: per-tensor quantization takes one scale, got {len(self.scales)}")
        if self.axis is not None and self.axis < 0:  # (C11)
            raise QuantError(f"{where}: quantization dimension must be >= 0, got {self.axis}")

    @property
    def storage_type(self) -> ElementType:
        """The storage :class:`~xla_dialect.types.ElementType` (an integer type)."""
        return element_type_named(self.storage)

    @property
    def expressed_type(self) -> ElementType:
        """The expressed :class:`~xla_dialect.types.ElementType` (a float type)."""
        return element_type_named(self.expressed)

    @property
    def per_axis(self) -> bool:
        return self.axis is not None

    def to_text(self) -> str:
        """The MLIR spelling without the ``!quant.uniform`` prefix: ``<i8:f32, 0.5:-3>``."""
        storage = _mlir_storage_name(self.storage)
        low, high = _int_range(element_type_named(self.storage))
        if (self.storage_min, self.storage_max) != (low, high):
            storage += f"<{self.storage_min}:{self.storage_max}>"
        params = ", ".join(_param_text(s, z) for s, z in zip(self.scales, self.zero_points))
        if self.axis is None:
            return f"<{storage}:{self.expressed}, {params}>"
        return f"<{storage}:{self.expressed}:{self.axis}, {{{params}}}>"

    def with_axis(self, axis: int | None) -> QuantParams:
        """The same quantization with another quantization dimension."""
        return QuantParams(self.storage, self.expressed, self.scales, self.zero_points, axis,
                           self.storage_min, self.storage_max)


_XLA_INTS = frozenset(f"{p}{w}" for p in "su" for w in (2, 4, 8, 16, 32, 64))


def _int_range(storage: ElementType) -> tuple[int, int]:
    bits = storage.bits
    if storage.kind == "sint":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _mlir_storage_name(xla_name: str) -> str:
    return ("i" if xla_name[0] == "s" else "u") + xla_name[1:]


def _param_text(scale: float, zero_point: int) -> str:
    text = repr(float(scale))
    return f"{text}:{zero_point}" if zero_point else text


_TYPE_RE = re.compile(
    r"\s*(?P<storage>[a-z]+\d+)\s*(?:<\s*(?P<min>[-+]?\d+)\s*:\s*(?P<max>[-+]?\d+)\s*>)?\s*:\s*"
    r"(?P<expressed>[a-z]+\d+)\s*(?::\s*(?P<axis>\d+)\s*)?,\s*(?P<params>\{[^{}]*\}|[^{},<>]+?)\s*$"
)
_PARAM_RE = re.compile(r"\s*(?P<scale>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan))"
                       r"\s*(?::\s*(?P<zp>[-+]?\d+))?\s*")


def _parse_body(body: str, full: str) -> QuantParams:
    """Parse the text between ``!quant.uniform<`` and its closing ``>``."""
    m = _TYPE_RE.fullmatch(body)
    if not m:
        raise QuantError(
            f"cannot parse quantized type {full!r}: expected !quant.uniform<storage[<min:max>]:expressed[:axis], "
            "scale[:zero_point] or {scale:zp, ...}>")
    storage = _storage_element(m.group("storage"))
    expressed = m.group("expressed")
    if expressed not in _MLIR_FLOAT_NAME:
        raise QuantError(f"quantized type {full!r}: expressed type must be one of {', '.join(_EXPRESSED)}, got {expressed}")
    params = m.group("params").strip()
    per_axis = params.startswith("{")
    if per_axis:
        params = params[1:-1]
    if per_axis != (m.group("axis") is not None):
        raise QuantError(f"quantized type {full!r}: a quantization dimension goes with a {{...}} list of "
                         "scales, one per index (and only then)")
    scales, zero_points = [], []
    for part in params.split(","):
        p = _PARAM_RE.fullmatch(part)
        if not p:
            raise QuantError(f"quantized type {full!r}: cannot read scale[:zero_point] from {part.strip()!r}")
        scales.append(float(p.group("scale")))
        zero_points.append(int(p.group("zp") or 0))
    axis = int(m.group("axis")) if m.group("axis") is not None else None
    lo = int(m.group("min")) if m.group("min") is not None else None
    hi = int(m.group("max")) if m.group("max") is not None else None
    return QuantParams(storage.xla_name, expressed, tuple(scales), tuple(zero_points), axis, lo, hi)


def closing_angle_bracket(text: str, start: int) -> int:
    """Index of the ``>`` closing the ``<`` just before ``start`` (nested ``<>`` allowed), -1 if none."""
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                return i
    return -1


@irdl_attr_definition
class UniformQuantizedType(Data[QuantParams], TypeAttribute):
    """``!quant.uniform<...>``: a uniform quantized element type (see the module docstring)."""

    name = "quant.uniform"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> QuantParams:
        parser.parse_punctuation("<")
        text = parser.lexer.input.content
        start = parser.pos
        end = closing_angle_bracket(text, start)
        if end < 0:
            parser.raise_error("quantized type: missing closing '>'")
        body = text[start:end]
        try:
            params = _parse_body(body, f"!quant.uniform<{body}>")
        except QuantError as e:
            parser.raise_error(str(e))
        resume_after(parser, end)
        parser.parse_punctuation(">")
        return params

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(self.data.to_text())

    # -- conveniences ----------------------------------------------------------

    @property
    def params(self) -> QuantParams:
        return self.data

    @property
    def storage(self) -> ElementType:
        return self.data.storage_type

    @property
    def expressed(self) -> ElementType:
        return self.data.expressed_type

    def check_fits(self, shape: Sequence[int], where: str = "") -> None:
        """Per-axis constraints (C12, C13) against the shape of the tensor holding this element type."""
        axis = self.data.axis
        if axis is None:
            return
        prefix = f"{where}: " if where else ""
        if axis >= len(shape):
            raise QuantError(f"{prefix}quantization dimension {axis} of {self} is out of range for rank {len(shape)}")
        if shape[axis] != len(self.data.scales) and shape[axis] >= 0:
            raise QuantError(f"{prefix}{self} has {len(self.data.scales)} scales but dimension {axis} has size "
                             f"{shape[axis]}")


QUANT = Dialect("quant", [], [UniformQuantizedType])
"""The ``quant`` dialect: only the ``!quant.uniform`` element type (as MLIR spells it)."""


def uniform_quantized(storage: str, expressed: str, scale: float | Sequence[float], zero_point: int | Sequence[int] = 0,
                      axis: int | None = None, storage_range: tuple[int, int] | None = None) -> UniformQuantizedType:
    """A ``!quant.uniform`` element type.

    ``storage`` is an XLA or MLIR integer type name (``"s8"``/``"i8"``,
    ``"u8"``); ``expressed`` a float type (``"f32"``). Per-tensor: one
    ``scale`` and ``zero_point``; per-axis: ``axis`` and one of each per index
    of that dimension. ``storage_range`` narrows the storage range
    (``(-127, 127)``). Raises :class:`QuantError` if the spec's constraints fail.
    """
    name = storage if storage in _XLA_INTS else _storage_element(storage).xla_name
    scales = tuple(scale) if isinstance(scale, (list, tuple)) else (scale,)
    zps = tuple(zero_point) if isinstance(zero_point, (list, tuple)) else (zero_point,) * len(scales)
    lo, hi = storage_range if storage_range is not None else (None, None)
    return UniformQuantizedType(QuantParams(name, expressed, scales, zps, axis, lo, hi))


def parse_quantized_type(text: str) -> UniformQuantizedType:
    """Parse a ``!quant.uniform<...>`` spelling (raises :class:`QuantError`)."""
    text = text.strip()
    prefix = "!quant.uniform<"
    if not text.startswith(prefix) or not text.endswith(">"):
        raise QuantError(f"expected a quantized type !quant.uniform<...>, got {text!r}")
    body = text[len(prefix):-1]
    return UniformQuantizedType(_parse_body(body, text))


def is_quantized(type_: Attribute) -> bool:
    """Whether a tensor type (or element type) is quantized."""
    if isinstance(type_, TensorType):
        type_ = type_.element_type
    return isinstance(type_, UniformQuantizedType)


def quantized_element(type_: Attribute) -> UniformQuantizedType | None:
    """The quantized element type of a tensor type, or None."""
    element = type_.element_type if isinstance(type_, TensorType) else type_
    return element if isinstance(element, UniformQuantizedType) else None


def expressed_type(type_: Attribute) -> Attribute:
    """A quantized tensor type with its elements replaced by the expressed type (others unchanged)."""
    q = quantized_element(type_)
    if q is None:
        return type_
    return TensorType(q.expressed.mlir, type_.get_shape(), type_.encoding)


def storage_type(type_: Attribute) -> Attribute:
    """A quantized tensor type with its elements replaced by the storage type (others unchanged)."""
    q = quantized_element(type_)
    if q is None:
        return type_
    return TensorType(q.storage.mlir, type_.get_shape(), type_.encoding)
