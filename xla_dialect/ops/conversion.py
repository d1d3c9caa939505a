"""hlo ops: conversion family (``hlo.convert``, ``hlo.bitcast_convert``).

``hlo.convert`` is XLA's ConvertElementType: any element type to any other,
same shape. ``hlo.bitcast_convert`` is BitcastConvertType: reinterpret the
bits; between types of different widths the shape gains (wider -> narrower) or
loses (narrower -> wider) a minor dimension of size ``ratio`` of the widths.
The new element type is the result type's; builders take it as an XLA name
(``'bf16'``) or a NumPy dtype.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def

from ..errors import BuilderError, XlaError
from ..quant import QuantError, UniformQuantizedType, parse_quantized_type, quantized_element
from ..types import element_type_of
from .base import HloOp, fail, fmt, make_tensor, tensor, set_quantized, builder_method


def _result_tensor(op_name: str, result_types) -> TensorType:
    if not result_types or len(result_types) != 1:
        fail(op_name, "the result type (carrying the new element type) must be given")
    result = tensor(op_name, result_types[0], "result")
    try:
        element_type_of(result.element_type)
    except XlaError as e:
        fail(op_name, str(e))
    return result


@irdl_op_definition
class ConvertOp(HloOp):
    """``hlo.convert``: element-wise conversion to the result's element type (XLA ConvertElementType).

    Follows XLA CPU: float -> integer truncates toward zero and saturates
    (NaN -> 0); complex -> real keeps the real part; x -> pred is ``x != 0``;
    float narrowing rounds to nearest even.
    """

    name = "hlo.convert"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        result = _result_tensor(cls.name, result_types)
        if result.get_shape() != t.get_shape():
            fail(cls.name, f"result {fmt(result)} must have the operand's shape {fmt(t)}")
        return [make_tensor(result.element_type, t.get_shape())]


@irdl_op_definition
class BitcastConvertOp(HloOp):
    """``hlo.bitcast_convert``: reinterpret each element's bits as the result's element type.

    Same bit width: same shape. Wider -> narrower: a minor dimension of size
    ``ratio`` is added (little-endian: element 0 holds the low bits).
    Narrower -> wider: the minor dimension must equal ``ratio`` and is removed.
    complex <-> real is rejected, as XLA/StableHLO do. pred is one bit wide, as
    in StableHLO (``64xi1 -> i64``: element i is bit i; the reference
    interpreter's tests expect it). XLA's HLO counts pred as 8 bits and so
    disagrees with StableHLO's own verifier (XLA CPU rejects ``64xi1 -> i64``
    and mis-lowers ``8xi1 -> i8`` into eight bytes; jax rejects bool bitcasts),
    so there is no consistent XLA behaviour to follow.
    """

    name = "hlo.bitcast_convert"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        result = _result_tensor(cls.name, result_types)
        return [make_tensor(result.element_type, bitcast_shape(cls.name, t, result.element_type))]


def bitcast_shape(op_name: str, operand: TensorType, new_element: Attribute) -> tuple[int, ...]:
    """The result shape of bitcasting ``operand`` to ``new_element`` (XLA's shape inference)."""
    old = element_type_of(operand.element_type)
    new = element_type_of(new_element)
    shape = tuple(operand.get_shape())
    if (old.kind == "complex") != (new.kind == "complex"):
        fail(op_name, f"cannot bitcast between complex and real element types ({old.xla_name} -> {new.xla_name})")
    if old.bits == new.bits:
        return shape
    big, small = max(old.bits, new.bits), min(old.bits, new.bits)
    if big % small:
        fail(op_name, f"cannot bitcast {old.xla_name} to {new.xla_name}: bit widths {old.bits} and {new.bits} "
                      f"do not divide")
    ratio = big // small
    if old.bits > new.bits:
        return shape + (ratio,)
    if not shape or shape[-1] != ratio:
        fail(op_name, f"bitcasting {fmt(operand)} to the wider {new.xla_name} needs a minor dimension of size "
                      f"{ratio} (the ratio of bit widths), got {list(shape)}")
    return shape[:-1]


@irdl_op_definition
class UniformQuantizeOp(HloOp):
    """``hlo.uniform_quantize``: floats (or another quantization) to the result's quantized type.

    ``result = quantize(x)`` with StableHLO's ``quantize``:
    ``round_nearest_even(clamp(x / scale + zero_point, storage_min, storage_max))``
    computed in the expressed type; a quantized operand is dequantized first
    (requantization).
    """

    name = "hlo.uniform_quantize"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        result = _result_tensor(cls.name, result_types)
        q = quantized_element(result)
        if q is None:
            fail(cls.name, f"result must be a quantized tensor, got {fmt(result)}")
        if result.get_shape() != t.get_shape():  # (C1)
            fail(cls.name, f"result {fmt(result)} must have the operand's shape {fmt(t)}")
        source = quantized_element(t)
        expressed = source.expressed if source is not None else element_type_of(t.element_type)
        if not expressed.is_float or expressed.xla_name != q.expressed.xla_name:  # (C2)
            what = f"expressed type {source.expressed.xla_name} of {source}" if source is not None else \
                f"element type {expressed.xla_name}"
            fail(cls.name, f"the operand's {what} must be the result's expressed type {q.expressed.xla_name}")
        _check_quantized_fits(cls.name, result, "result")
        if source is not None:
            _check_quantized_fits(cls.name, t, "operand")
        return [make_tensor(result.element_type, t.get_shape())]


@irdl_op_definition
class UniformDequantizeOp(HloOp):
    """``hlo.uniform_dequantize``: a quantized tensor to its expressed floats, ``(q - zero_point) * scale``."""

    name = "hlo.uniform_dequantize"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        q = quantized_element(t)
        if q is None:
            fail(cls.name, f"operand must be a quantized tensor, got {fmt(t)}")
        _check_quantized_fits(cls.name, t, "operand")
        return [make_tensor(q.expressed.mlir, t.get_shape())]  # (C1), (C2)


def _check_quantized_fits(op_name: str, t: TensorType, what: str) -> None:
    try:
        quantized_element(t).check_fits(t.get_shape(), what)
    except XlaError as e:
        fail(op_name, str(e))


OPS = [ConvertOp, BitcastConvertOp, UniformQuantizeOp, UniformDequantizeOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("transparent", BitcastConvertOp)  # bit widths of the storage type (spec C1)
set_quantized("own", UniformQuantizeOp, UniformDequantizeOp)


# ----------------------------------------------------------------------------
# Builder methods
# ----------------------------------------------------------------------------


class ConversionBuilder:
    """Builder methods of the conversion family."""

    @builder_method
    def convert_element_type(self, operand, new_element_type):
        """XLA ConvertElementType: ``operand`` converted element-wise to ``new_element_type``
        (an XLA name such as ``'bf16'`` or a NumPy dtype)."""
        new = self._element(new_element_type, "new_element_type")
        value = self._value(operand, "operand")
        if not isinstance(value.type, TensorType):
            raise BuilderError(f"XlaBuilder.convert_element_type: operand must be an array, got {fmt(value.type)}")
        return self._emit1(ConvertOp, [operand], result_types=[make_tensor(new, value.type.get_shape())])

    @builder_method
    def bitcast_convert_type(self, operand, new_element_type):
        """XLA BitcastConvertType: reinterpret the bits of ``operand`` as ``new_element_type``."""
        new = self._element(new_element_type, "new_element_type")
        value = self._value(operand, "operand")
        if not isinstance(value.type, TensorType):
            raise BuilderError(f"XlaBuilder.bitcast_convert_type: operand must be an array, got {fmt(value.type)}")
        try:
            shape = bitcast_shape(BitcastConvertOp.name, value.type, new)
        except XlaError as e:
            raise BuilderError(f"XlaBuilder.bitcast_convert_type: {e}") from None
        return self._emit1(BitcastConvertOp, [operand], result_types=[make_tensor(new, shape)])

    convert = convert_element_type
    bitcast_convert = bitcast_convert_type

    @builder_method
    def uniform_quantize(self, operand, quantized_type):
        """Quantize ``operand`` (floats, or a quantized array to requantize) to ``quantized_type``.

        ``quantized_type``: a :class:`~xla_dialect.quant.UniformQuantizedType`
        (see :func:`xla_dialect.quant.uniform_quantized`) or its spelling
        ``'!quant.uniform<i8:f32, 0.5:-3>'``.
        """
        if isinstance(quantized_type, str):
            try:
                quantized_type = parse_quantized_type(quantized_type)
            except QuantError as e:
                raise BuilderError(f"{self._caller()}: {e}") from None
        if not isinstance(quantized_type, UniformQuantizedType):
            raise BuilderError(f"{self._caller()}: quantized_type must be a UniformQuantizedType or its "
                               f"'!quant.uniform<...>' spelling, got {quantized_type!r}")
        value = self._value(operand, "operand")
        if not isinstance(value.type, TensorType):
            raise BuilderError(f"{self._caller()}: operand must be an array, got {fmt(value.type)}")
        return self._emit1(UniformQuantizeOp, [operand],
                           result_types=[make_tensor(quantized_type, value.type.get_shape())])

    @builder_method
    def uniform_dequantize(self, operand):
        """The expressed floats of a quantized ``operand``: ``(q - zero_point) * scale``."""
        return self._emit1(UniformDequantizeOp, [operand])

