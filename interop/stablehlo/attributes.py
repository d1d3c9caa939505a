"""jaxlib MLIR types, dense literals, attributes and locations -> their xDSL / hlo counterparts.

Part of the StableHLO importer (see :mod:`interop.stablehlo.importer`): pure conversions
of values, no knowledge of ops."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IndexType,
    Signedness,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute

from xla_dialect.errors import UnsupportedError
from xla_dialect.layout import LayoutAttr, parse_layout
from xla_dialect.ops.base import i64_array
from xla_dialect.types import ELEMENT_TYPES, ElementType, FutureType, TokenType

from ..schema import CHANNEL_TYPES, STRUCT_FIELDS
from .context import NEWER_DIALECT, _ir

# ----------------------------------------------------------------------------
# Types
# ----------------------------------------------------------------------------

ELEMENT_BY_MLIR: dict[str, ElementType] = {str(e.mlir): e for e in ELEMENT_TYPES.values()}
"""MLIR spelling of an element type (``f8E4M3FN``, ``ui4``, ``complex<f32>``) -> :class:`ElementType`."""

_DYNAMIC = -(2**63)


def convert_element_type(text: str, what: str = "element type") -> ElementType:
    """The :class:`ElementType` of an MLIR element-type spelling."""
    e = ELEMENT_BY_MLIR.get(text)
    if e is None:
        if text.startswith("!quant."):
            raise UnsupportedError(f"quantized {what} {text} is not supported yet")
        raise UnsupportedError(f"{what} {text} has no XLA equivalent")
    return e


def convert_type(t, cache: dict | None = None, allow_dynamic: bool = False) -> Attribute:
    """An xDSL type for a jaxlib ``ir.Type`` (tensor, tuple, token).

    ``?`` dimensions are an error unless ``allow_dynamic`` (they are then kept:
    xDSL and MLIR use the same marker value).
    """
    if cache is not None:
        hit = cache.get(t)
        if hit is not None:
            return hit
    ir = _ir()
    if isinstance(t, ir.RankedTensorType):
        shape = list(t.shape)
        if _DYNAMIC in shape and not allow_dynamic:
            raise UnsupportedError(
                f"dynamic shape {t} is not supported: refine it with example arguments (static shapes), "
                "or import with allow_unknown=True to keep it (round trip only)")
        if t.encoding is not None:
            raise UnsupportedError(f"tensor encoding in {t} (bounded dynamic shapes) is not supported yet")
        result: Attribute = TensorType(convert_element_type(str(t.element_type)).mlir, shape)
    elif isinstance(t, ir.TupleType):
        result = TupleType([convert_type(t.get_type(i), cache, allow_dynamic) for i in range(t.num_types)])
    else:
        text = str(t)
        if text == "!stablehlo.token":
            result = TokenType()
        elif text.startswith(f"!{NEWER_DIALECT}.future<") and text.endswith(">"):  # read past jaxlib's parser
            result = FutureType([convert_type(ir.Type.parse(part), cache, allow_dynamic)
                                 for part in top_level_parts(text[len(NEWER_DIALECT) + 9:-1])])
        elif isinstance(t, ir.UnrankedTensorType):
            raise UnsupportedError(f"unranked tensor type {text} is not supported")
        elif text.startswith("tensor<"):
            raise UnsupportedError(f"type {text} is not supported")
        else:
            raise UnsupportedError(f"type {text} is not an XLA shape (tensor, tuple or token)")
    if cache is not None:
        cache[t] = result
    return result


def _with_layouts(types: list[Attribute], layouts) -> list[Attribute]:
    """``types`` with the layouts of an ``ir.ArrayAttr`` of layout strings (``""``: none)."""
    return [_with_layout_text(t, text.value) for t, text in zip(types, layouts)]


def _with_layout_text(t: Attribute, text: str) -> Attribute:
    """``t`` with the layout written ``{1,0}`` (tensor) or ``({1,0}, {})`` (tuple, recursively)."""
    if not text:
        return t
    if isinstance(t, TensorType):
        return TensorType(t.element_type, t.get_shape(), LayoutAttr(parse_layout(text)))
    if isinstance(t, TupleType) and text.startswith("("):
        parts = top_level_parts(text[1:text.rindex(")")], keep_empty=True)
        return TupleType([_with_layout_text(e, part) for e, part in zip(t.types, parts)])
    return t


def top_level_parts(text: str, keep_empty: bool = False, sep: str = ",") -> list[str]:
    """``text`` split at the ``sep`` characters outside ``<>``, ``()``, ``[]`` and ``{}`` (the ``>`` of an arrow
    ``->`` closes nothing); the parts stripped, empty ones dropped unless ``keep_empty``."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<([{":
            depth += 1
        elif c in ")]}" or (c == ">" and (i == 0 or text[i - 1] != "-")):
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts if keep_empty else [p for p in parts if p]


# ----------------------------------------------------------------------------
# Dense literals
# ----------------------------------------------------------------------------

_NATIVE_DTYPES = frozenset(
    np.dtype(d) for d in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                          np.uint64, np.float16, np.float32, np.float64)
)
_DENSE_TOKEN = re.compile(r"true|false|[-+]?0x[0-9a-fA-F]+|[-+]?(?:inf|nan|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")


def dense_array(attr, text: str | None, type_: TensorType) -> np.ndarray:
    """The NumPy array held by a ``dense<...>`` attribute of tensor type ``type_``.

    jaxlib's buffer protocol handles booleans, 8- to 64-bit integers and f16/32/64
    (``attr`` given); every other element type (bf16, f8, f4, i2/i4/u2/u4,
    complex, for which jaxlib cannot even hand out the attribute object) is
    read from the attribute's text ``text``: a hex blob of the raw storage
    (one byte per element below 8 bits), a splat, or nested lists where
    non-finite floats are written as hex bit patterns.
    """
    element = ELEMENT_BY_MLIR[str(type_.element_type)]
    shape = tuple(type_.get_shape())
    from xla_dialect.limits import check_bytes

    check_bytes(int(np.prod(shape, dtype=object)) * element.dtype.itemsize, f"the constant of type {type_}")
    if attr is not None and element.dtype in _NATIVE_DTYPES:
        arr = np.array(attr)
        if arr.dtype != element.dtype:
            arr = arr.astype(element.dtype)
        return arr.reshape(shape)
    if text is None:
        text = str(attr)
    return parse_dense_text(text, element, shape)


def parse_dense_text(text: str, element: ElementType, shape: tuple[int, ...]) -> np.ndarray:
    """Parse ``dense<BODY> : type`` (or just BODY) into an array of ``element`` and ``shape``."""
    body = text.strip()
    if body.startswith("dense<"):
        body = body[len("dense<"):body.rfind("> : ")]
    body = body.strip()
    dtype = element.dtype
    count = int(np.prod(shape)) if shape else 1
    if body.startswith('"'):
        data = bytes.fromhex(body.strip('"')[2:])
        if len(data) == dtype.itemsize:
            return np.broadcast_to(np.frombuffer(data, dtype=dtype).reshape(()), shape).copy()
        if len(data) != count * dtype.itemsize:
            raise UnsupportedError(f"dense hex data has {len(data)} bytes; expected {count * dtype.itemsize}")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    tokens = _DENSE_TOKEN.findall(body)
    if element.kind == "complex":
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        flat = _tokens_to_array(tokens, part, "float").view(dtype)
    else:
        flat = _tokens_to_array(tokens, dtype, element.kind)
    if flat.size == 1:
        return np.broadcast_to(flat.reshape(()), shape).copy()
    if flat.size != count:
        raise UnsupportedError(f"dense literal has {flat.size} elements; its type needs {count}")
    return flat.reshape(shape)


def _tokens_to_array(tokens: list[str], dtype: np.dtype, kind: str) -> np.ndarray:
    if kind == "pred":
        return np.array([t == "true" or (t not in ("false",) and int(t, 0) != 0) for t in tokens], dtype=np.bool_)
    if kind in ("sint", "uint"):
        wide = np.array([int(t, 0) for t in tokens], dtype=object)
        return wide.astype(np.int64 if kind == "sint" else np.uint64).astype(dtype)
    if any(t.lstrip("+-").startswith("0x") for t in tokens):
        # Floats written as bit patterns (NaN payloads, infinities) mixed with decimals.
        bits_dtype = np.dtype(f"u{dtype.itemsize}")
        out = np.empty(len(tokens), dtype=dtype)
        for i, t in enumerate(tokens):
            if t.lstrip("+-").startswith("0x"):
                out[i] = np.array(int(t, 16), dtype=bits_dtype).view(dtype)
            else:
                out[i] = np.float64(t).astype(dtype)
        return out
    return np.array([float(t) for t in tokens], dtype=np.float64).astype(dtype)


# ----------------------------------------------------------------------------
# Attributes
# ----------------------------------------------------------------------------

_PY_FIELD_NAMES = {"scatter_dims_to_operand_dims": "scattered_dims_to_operand_dims"}  # jaxlib's Python spelling

IGNORED_ATTRIBUTES = frozenset({
    "precision_config", "algorithm", "mhlo.sharding", "mhlo.frontend_attributes", "sdy.sharding",
    "sdy.sharding_rule", "mhlo.original_value", "result_accuracy", "indices_are_sorted", "unique_indices",
    "xla_shape", "mhlo.layout_mode", "jax.result_info", "mhlo.is_same_data_across_replicas",
    "layout",  # infeed's result layouts: XLA's CPU runtime takes any
})
"""Attributes dropped when the hlo op has no property of that name: hints and
metadata that do not change results on a CPU (precision, sharding, sortedness
promises, the default result accuracy), as XLA's CPU backend treats them."""

_ENUM_TEXT = re.compile(r"#stablehlo<([a-z_]+) ([A-Za-z0-9_]+)>")


def _struct_kind(attr):
    """(kind, typed attribute) for a dimension-numbers struct attribute, else (None, None)."""
    from jaxlib.mlir.dialects import stablehlo

    for kind, cls in (("dot", stablehlo.DotDimensionNumbers), ("gather", stablehlo.GatherDimensionNumbers),
                      ("scatter", stablehlo.ScatterDimensionNumbers), ("conv", stablehlo.ConvDimensionNumbers)):
        if cls.isinstance(attr):
            return kind, cls(attr)
    return None, None


def _exact_integer(attr) -> IntegerAttr:
    """An integer attribute with its MLIR type kept (i32 stays i32, ui8 stays ui8)."""
    t = attr.type
    if isinstance(t, _ir().IndexType):
        return IntegerAttr(attr.value, IndexType())
    sign = Signedness.UNSIGNED if t.is_unsigned else Signedness.SIGNED if t.is_signed else Signedness.SIGNLESS
    return IntegerAttr(attr.value, IntegerType(t.width, sign))


def convert_attribute(attr, exact: bool = False) -> Any:
    """Convert one jaxlib attribute to xDSL.

    Returns an xDSL attribute, or a ``dict`` of field name -> attribute for a
    struct (dimension numbers, channel handles) which becomes several
    properties. Integers become i64 (the hlo convention for op properties)
    unless ``exact``, used inside dictionaries (``composite_attributes``,
    ``mhlo.backend_config``) whose consumers read the declared types.
    """
    ir = _ir()
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return i64_array(list(attr))
    if isinstance(attr, ir.BoolAttr):
        return BoolAttr(bool(attr.value), IntegerType(1))
    if isinstance(attr, ir.IntegerAttr):
        return _exact_integer(attr) if exact else IntegerAttr(attr.value, 64)
    if isinstance(attr, ir.StringAttr):
        return StringAttr(attr.value)
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return SymbolRefAttr(attr.value)
    if isinstance(attr, ir.FloatAttr):
        width = str(attr.type)
        return FloatAttr(attr.value, f64 if width == "f64" else f32 if width == "f32" or not exact
                         else ELEMENT_BY_MLIR[width].mlir)
    if isinstance(attr, ir.DenseBoolArrayAttr):
        return DenseArrayBase.from_list(IntegerType(1), [int(bool(v)) for v in attr])
    if isinstance(attr, ir.DenseI32ArrayAttr):
        return i64_array(list(attr))
    if isinstance(attr, ir.UnitAttr):
        return UnitAttr()
    if isinstance(attr, ir.DenseIntElementsAttr):
        # 1-D and 2-D integer attributes (old-style dimension lists, padding
        # pairs, layouts) become a flat array<i64>, row-major (ops that keep
        # them 2-D get dense_elements() through Importer.properties).
        return i64_array(np.array(attr).reshape(-1).tolist())
    if isinstance(attr, ir.ArrayAttr):
        return ArrayAttr([convert_attribute(a, exact) for a in attr])
    if isinstance(attr, ir.DictAttr):
        return DictionaryAttr({attr[i].name: convert_attribute(attr[i].attr, True) for i in range(len(attr))})
    if isinstance(attr, ir.TypeAttr):
        return convert_type(attr.value)
    kind, typed = _struct_kind(attr)
    if kind is not None:
        fields = {}
        for name, field_kind in STRUCT_FIELDS[kind]:
            value = getattr(typed, _PY_FIELD_NAMES.get(name, name))
            fields[name] = IntegerAttr(int(value), 64) if field_kind == "int" else i64_array(list(value))
        return fields
    from jaxlib.mlir.dialects import stablehlo

    if stablehlo.ChannelHandle.isinstance(attr):
        handle = stablehlo.ChannelHandle(attr)
        return {"channel_id": IntegerAttr(handle.handle, 64),
                "channel_type": StringAttr(CHANNEL_TYPES.get(handle.channel_type, str(handle.channel_type)))}
    if stablehlo.OutputOperandAlias.isinstance(attr):
        alias = stablehlo.OutputOperandAlias(attr)
        return DictionaryAttr({"output_tuple_indices": i64_array(list(alias.output_tuple_indices)),
                               "operand_index": IntegerAttr(alias.operand_index, 64),
                               "operand_tuple_indices": i64_array(list(alias.operand_tuple_indices))})
    text = str(attr)
    m = _ENUM_TEXT.fullmatch(text)
    if m:
        return StringAttr(m.group(2))
    raise UnsupportedError(f"attribute {text} is not supported")


def dense_elements(attr) -> DenseIntOrFPElementsAttr:
    """A 2-D (any rank) integer ``dense<...>`` attribute as xDSL's builtin one, shape kept
    (``replica_groups``, ``source_target_pairs`` of the collectives)."""
    array = np.array(attr)
    shape = list(attr.type.shape)
    return DenseIntOrFPElementsAttr.from_list(TensorType(i64, shape), array.reshape(-1).astype(np.int64).tolist())


# ----------------------------------------------------------------------------
# Locations
# ----------------------------------------------------------------------------


_OWN_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
    for d in ("interop", "lowering", "xla_dialect")
)


def location_text(loc) -> str | None:
    """``file.py:12`` for the innermost file location of ``loc`` (None if it has none).

    JAX writes ``loc("jit(f)/sin"(callsite("f"("a.py":5:12) at ...)))``: names
    wrap call sites whose callee is the frame that created the op.
    """
    ir = _ir()
    for _ in range(64):  # nesting depth guard
        if isinstance(loc, ir.FileLineColLoc):
            if loc.filename == "-":
                return None  # the parser's position in the input text, not a source location
            return f"{loc.filename}:{loc.start_line}"
        if isinstance(loc, ir.NameLoc):
            loc = loc.child_loc
        elif isinstance(loc, ir.CallSiteLoc):
            inner = location_text(loc.callee)
            if inner is None or inner.startswith(_OWN_DIRS):
                # Frames of this toolkit (import_jax tracing the function) are not the user's.
                outer = location_text(loc.caller)
                return outer if outer is not None else inner
            return inner
        elif isinstance(loc, ir.FusedLoc):
            for sub in loc.locations:
                text = location_text(sub)
                if text is not None:
                    return text
            return None
        else:
            return None
    return None
