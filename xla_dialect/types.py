"""XLA primitive element types and their MLIR/xDSL and NumPy counterparts.

One table, :data:`ELEMENT_TYPES`, is the single source of truth: XLA's name
(``s32``), the xDSL builtin type (``i32``), the NumPy/ml_dtypes dtype, the bit
width, and the kind (pred, signed, unsigned, float, complex).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
from xdsl.dialects import builtin
from xdsl.dialects.builtin import (
    BFloat16Type,
    ComplexType,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition

from .errors import UnsupportedError


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """XLA's ``token[]``: orders side effects; carries no data."""

    name = "hlo.token"


@irdl_attr_definition
class FutureType(ParametrizedAttribute, TypeAttribute):
    """StableHLO's ``future<T...>``: the values an ``hlo.async_start`` computes, read by ``hlo.async_done``."""

    name = "hlo.future"
    types: builtin.ArrayAttr[Attribute]

    def __init__(self, types):
        super().__init__(builtin.ArrayAttr(list(types)))

    @classmethod
    def parse_parameters(cls, parser) -> list[Attribute]:
        """``<T, ...>`` as StableHLO writes it."""
        types = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, parser.parse_type)
        return [builtin.ArrayAttr(types)]

    def print_parameters(self, printer) -> None:
        """``<T, ...>`` as StableHLO writes it."""
        printer.print_string("<")
        printer.print_list(self.types.data, printer.print_attribute)
        printer.print_string(">")


@dataclass(frozen=True)
class ElementType:
    """One XLA primitive type."""

    xla_name: str
    make_mlir: Callable[[], Attribute]
    dtype: np.dtype
    bits: int
    kind: str  # "pred" | "sint" | "uint" | "float" | "complex"

    @property
    def mlir(self) -> Attribute:
        return self.make_mlir()

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("sint", "uint")


def _int(width: int, signed: bool) -> Callable[[], Attribute]:
    sign = Signedness.SIGNLESS if signed else Signedness.UNSIGNED
    return lambda: IntegerType(width, sign)


def _f8(cls_name: str) -> Callable[[], Attribute]:
    return lambda: getattr(builtin, cls_name)()


_TABLE = [
    ElementType("pred", lambda: IntegerType(1), np.dtype(np.bool_), 1, "pred"),
    ElementType("s2", _int(2, True), np.dtype(ml_dtypes.int2), 2, "sint"),
    ElementType("s4", _int(4, True), np.dtype(ml_dtypes.int4), 4, "sint"),
    ElementType("s8", _int(8, True), np.dtype(np.int8), 8, "sint"),
    ElementType("s16", _int(16, True), np.dtype(np.int16), 16, "sint"),
    ElementType("s32", _int(32, True), np.dtype(np.int32), 32, "sint"),
    ElementType("s64", _int(64, True), np.dtype(np.int64), 64, "sint"),
    ElementType("u2", _int(2, False), np.dtype(ml_dtypes.uint2), 2, "uint"),
    ElementType("u4", _int(4, False), np.dtype(ml_dtypes.uint4), 4, "uint"),
    ElementType("u8", _int(8, False), np.dtype(np.uint8), 8, "uint"),
    ElementType("u16", _int(16, False), np.dtype(np.uint16), 16, "uint"),
    ElementType("u32", _int(32, False), np.dtype(np.uint32), 32, "uint"),
    ElementType("u64", _int(64, False), np.dtype(np.uint64), 64, "uint"),
    ElementType("f16", Float16Type, np.dtype(np.float16), 16, "float"),
    ElementType("bf16", BFloat16Type, np.dtype(ml_dtypes.bfloat16), 16, "float"),
    ElementType("f32", Float32Type, np.dtype(np.float32), 32, "float"),
    ElementType("f64", Float64Type, np.dtype(np.float64), 64, "float"),
    ElementType("f8e5m2", _f8("Float8E5M2Type"), np.dtype(ml_dtypes.float8_e5m2), 8, "float"),
    ElementType("f8e4m3", _f8("Float8E4M3Type"), np.dtype(ml_dtypes.float8_e4m3), 8, "float"),
    ElementType("f8e4m3fn", _f8("Float8E4M3FNType"), np.dtype(ml_dtypes.float8_e4m3fn), 8, "float"),
    ElementType("f8e4m3fnuz", _f8("Float8E4M3FNUZType"), np.dtype(ml_dtypes.float8_e4m3fnuz), 8, "float"),
    ElementType("f8e5m2fnuz", _f8("Float8E5M2FNUZType"), np.dtype(ml_dtypes.float8_e5m2fnuz), 8, "float"),
    ElementType("f8e4m3b11fnuz", _f8("Float8E4M3B11FNUZType"), np.dtype(ml_dtypes.float8_e4m3b11fnuz), 8, "float"),
    ElementType("f8e3m4", _f8("Float8E3M4Type"), np.dtype(ml_dtypes.float8_e3m4), 8, "float"),
    ElementType("f8e8m0fnu", _f8("Float8E8M0FNUType"), np.dtype(ml_dtypes.float8_e8m0fnu), 8, "float"),
    ElementType("f6e2m3fn", _f8("Float6E2M3FNType"), np.dtype(ml_dtypes.float6_e2m3fn), 6, "float"),
    ElementType("f6e3m2fn", _f8("Float6E3M2FNType"), np.dtype(ml_dtypes.float6_e3m2fn), 6, "float"),
    ElementType("f4e2m1fn", _f8("Float4E2M1FNType"), np.dtype(ml_dtypes.float4_e2m1fn), 4, "float"),
    ElementType("c64", lambda: ComplexType(Float32Type()), np.dtype(np.complex64), 64, "complex"),
    ElementType("c128", lambda: ComplexType(Float64Type()), np.dtype(np.complex128), 128, "complex"),
]

ELEMENT_TYPES: dict[str, ElementType] = {e.xla_name: e for e in _TABLE}
"""XLA primitive-type name -> :class:`ElementType`."""

_BY_MLIR: dict[Attribute, ElementType] = {e.mlir: e for e in _TABLE}
_BY_DTYPE: dict[np.dtype, ElementType] = {e.dtype: e for e in _TABLE}


def element_type_of(attr: Attribute) -> ElementType:
    """Look up the :class:`ElementType` of an xDSL element type such as ``i32``.

    A quantized element type (``!quant.uniform<i8:f32, ...>``) gives its
    storage type: that is what a quantized array physically holds (its NumPy
    dtype, its bit width in layouts). Shape inference never sees quantized
    types through this function: :class:`~xla_dialect.ops.base.HloOp` hands
    ``infer`` the expressed types (see :mod:`xla_dialect.quant`).
    """
    try:
        return _BY_MLIR[attr]
    except (KeyError, TypeError):
        if getattr(attr, "name", None) == "quant.uniform":
            return attr.data.storage_type
        raise UnsupportedError(f"element type {attr} has no XLA equivalent") from None


def element_type_from_dtype(dtype) -> ElementType:
    """Look up the :class:`ElementType` for a NumPy/ml_dtypes dtype."""
    try:
        return _BY_DTYPE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise UnsupportedError(f"NumPy dtype {dtype} has no XLA equivalent") from None


def element_type_named(name: str) -> ElementType:
    """Look up an XLA primitive type by its XLA name (``'bf16'``)."""
    try:
        return ELEMENT_TYPES[name.lower()]
    except KeyError:
        raise UnsupportedError(
            f"unknown XLA primitive type {name!r}; expected one of {', '.join(ELEMENT_TYPES)}"
        ) from None


def numpy_dtype(attr: Attribute) -> np.dtype:
    """The NumPy dtype of an xDSL element type or of a tensor type's elements."""
    if isinstance(attr, builtin.TensorType):
        attr = attr.element_type
    return element_type_of(attr).dtype
