"""Shared machinery for hlo op definitions.

Every hlo op is an xDSL ``IRDLOperation`` deriving from :class:`HloOp`. An op's
shape rules live in one classmethod, :meth:`HloOp.infer`, used both by the
verifier (which checks the op's declared result types against it) and by the
builder (which creates the op with the inferred result types). Errors are
:class:`~xla_dialect.errors.HloVerifyError` naming the op and what was expected.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ComplexType,
    DenseArrayBase,
    IntegerType,
    NoneAttr,
    Signedness,
    StringAttr,
    TensorType,
    TupleType,
    i64,
)
from xdsl.ir import Attribute, Region
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict

from ..errors import HloVerifyError, LayoutError, op_context
from ..layout import LayoutAttr
from ..quant import QuantError, UniformQuantizedType, expressed_type, quantized_element
from ..types import TokenType, element_type_of


class HloOp(IRDLOperation):
    """Base class of all hlo ops: verification through :meth:`infer`.

    Quantized types (:mod:`xla_dialect.quant`): every subclass's ``infer`` is
    wrapped (:meth:`__init_subclass__`) so that the op's :attr:`QUANTIZED`
    mode decides what it sees; see :data:`QUANTIZED_MODES`.
    """

    # Properties print inside the attribute dictionary of the custom syntax.
    irdl_options = (ParsePropInAttrDict(),)

    QUANTIZED: ClassVar[str | None] = None
    """How the op treats quantized types: a key of :data:`QUANTIZED_MODES` (None: rejects them)."""

    @classmethod
    def quantized_axis(cls, props, axis: int, operand_shape, result_shape) -> int | None:
        """A ``storage`` op's result quantization dimension for an operand quantized along ``axis``.

        The default keeps the dimension (ops whose dimensions keep their
        positions); ops that move dimensions override it; None: per-axis
        quantization is not supported by the op.
        """
        return axis if len(operand_shape) == len(result_shape) else None

    QUANTIZED_HYBRID: ClassVar[bool] = False
    """A ``compute`` op that may mix float and quantized operands and give a float result
    (StableHLO's ``hybrid_dequantize_then_op``: dot_general, convolution)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        raw = cls.__dict__.get("infer")
        if isinstance(raw, classmethod) and not getattr(raw.__func__, "_quant_aware", False):
            cls.infer = classmethod(_quant_aware(raw.__func__))

    @classmethod
    def infer(
        cls,
        operand_types: Sequence[Attribute],
        props: Mapping[str, Attribute],
        regions: Sequence[Region],
        result_types: Sequence[Attribute] | None,
    ) -> list[Attribute]:
        """Return the result types XLA's shape inference gives this op.

        Raise :class:`HloVerifyError` (via :func:`fail`) when the operands or
        properties are invalid. ``result_types`` are the declared results when
        verifying an existing op, or the builder's requested results.
        """
        if result_types is None:
            raise HloVerifyError(f"{cls.name}: result types must be given explicitly")
        return list(result_types)

    def verify_(self) -> None:
        for value in (*self.operands, *self.results):
            check_layout_fits(value.type, self)
        declared = [r.type for r in self.results]
        try:
            inferred = self.infer(
                [o.type for o in self.operands], self.properties, self.regions, declared
            )
        except HloVerifyError as e:
            ctx = op_context(self)
            msg = str(e)
            raise HloVerifyError(msg if msg.startswith(ctx) else f"{ctx}: {msg}") from None
        if len(inferred) != len(declared):
            raise HloVerifyError(
                f"{op_context(self)}: expected {len(inferred)} results, op declares {len(declared)}"
            )
        for i, (want, got) in enumerate(zip(inferred, declared)):
            if not same_modulo_layout(want, got):  # (equal types are the same modulo layout)
                raise HloVerifyError(
                    f"{op_context(self)}: result #{i} has type {fmt(got)} but shape inference gives {fmt(want)}"
                )


QUANTIZED_MODES = {
    None: "rejects quantized operands and results",
    "compute": "computes on the expressed floats: shape inference on the expressed types; any quantization "
               "of the results (the spec's dequantize_op_quantize; lowered by the lower-quantized pass)",
    "storage": "moves storage values: shape inference on the expressed types; quantized results keep the "
               "quantization of the quantized operands (per-axis: the dimension moves with the data)",
    "transparent": "only compares types (control flow, regions, tuples): infer sees the quantized types",
    "own": "the op's infer handles quantized types itself (uniform_quantize, uniform_dequantize)",
}
"""``HloOp.QUANTIZED`` values and what they mean."""


def set_quantized(mode: str, *op_classes) -> None:
    """Give ``op_classes`` quantized mode ``mode`` (a key of :data:`QUANTIZED_MODES`)."""
    if mode not in QUANTIZED_MODES:
        raise ValueError(f"unknown quantized mode {mode!r}")
    for cls in op_classes:
        cls.QUANTIZED = mode


def _first_quantized(types) -> int:
    """Index of the first quantized tensor type in ``types`` (-1 if none); cheap for the common case."""
    for i, t in enumerate(types):
        if isinstance(t, TensorType) and isinstance(t.element_type, UniformQuantizedType):
            return i
    return -1


def _quant_aware(raw):
    """Wrap an op's ``infer`` (``raw(cls, operand_types, props, regions, result_types)``) for quantized types."""

    def infer(cls, operand_types, props, regions, result_types):
        q_in = _first_quantized(operand_types)
        q_out = _first_quantized(result_types) if result_types is not None else -1
        if (q_in < 0 and q_out < 0) or cls.QUANTIZED in ("transparent", "own"):
            return raw(cls, operand_types, props, regions, result_types)
        return _infer_quantized(cls, raw, operand_types, props, regions, result_types, q_in, q_out)

    infer._quant_aware = True
    infer.__doc__ = raw.__doc__
    infer.__wrapped__ = raw
    return infer


def _infer_quantized(cls, raw, operand_types, props, regions, result_types, q_in, q_out):
    """Shape inference of a ``compute`` / ``storage`` op with quantized operands or results."""
    name = cls.name
    mode = cls.QUANTIZED
    if mode is None:
        which = f"operand #{q_in} is {fmt(operand_types[q_in])}" if q_in >= 0 else \
            f"result #{q_out} is {fmt(result_types[q_out])}"
        fail(name, f"does not accept quantized types ({which}); convert with hlo.uniform_dequantize first")
    for what, types in (("operand", operand_types),) if mode == "storage" else \
            (("operand", operand_types), ("result", result_types or ())):  # (storage: the results are derived)
        for i, t in enumerate(types):
            q = quantized_element(t)
            if q is not None:
                try:
                    q.check_fits(t.get_shape(), f"{what} #{i}")
                except QuantError as e:
                    fail(name, str(e))
    view_in = [expressed_type(t) for t in operand_types]
    view_out = [expressed_type(t) for t in result_types] if result_types is not None else None
    inferred = raw(cls, view_in, props, regions, view_out)
    if mode == "compute":
        out = []
        for i, t in enumerate(inferred):
            declared = result_types[i] if result_types is not None and i < len(result_types) else None
            q = quantized_element(declared) if declared is not None else None
            if q is not None and isinstance(t, TensorType) and t.element_type == q.expressed.mlir:
                # The declared quantized result with the inferred shape: the verifier then compares shapes,
                # and builders may pass a result type that only carries the element type.
                t = TensorType(q, t.get_shape(), declared.encoding if declared.get_shape() == t.get_shape()
                               else t.encoding)
                try:
                    q.check_fits(t.get_shape(), f"result #{i}")
                except QuantError as e:
                    fail(name, str(e))
            elif (q_in >= 0 and not cls.QUANTIZED_HYBRID and isinstance(t, TensorType)
                  and kind_of(t) == "float"):
                got = f", got {fmt(declared)}" if declared is not None else ""
                fail(name, f"result #{i} must be quantized like the operands (the result of an op on quantized "
                           f"values is requantized); give its quantized type (builder methods: result_type=...){got}")
            out.append(t)
        return out
    # storage: quantized operands share one quantization, which the results keep.
    source = [quantized_element(t) for t in operand_types if quantized_element(t) is not None]
    if not source:
        fail(name, f"result #{q_out} is quantized ({fmt(result_types[q_out])}) but no operand is: "
                   "quantize with hlo.uniform_quantize")
    params = source[0].data
    for i, t in enumerate(operand_types):  # the data operands move together: all quantized alike
        if quantized_element(t) is None and isinstance(t, TensorType) and t.element_type == source[0].expressed.mlir:
            fail(name, f"operand #{i} is {fmt(t)} but other operands are quantized ({source[0]}): quantize it "
                       "with hlo.uniform_quantize")
    for q in source[1:]:
        if q.data.with_axis(None) != params.with_axis(None):
            fail(name, f"quantized operands must share one quantization, got {q} and {source[0]}")
    source_shape = next(t for t in operand_types if quantized_element(t) is not None).get_shape()
    out = []
    for i, t in enumerate(inferred):
        declared = result_types[i] if result_types is not None and i < len(result_types) else None
        if isinstance(t, TensorType) and t.element_type == source[0].expressed.mlir:
            want = source[0]
            if params.axis is not None:
                axis = cls.quantized_axis(props, params.axis, source_shape, t.get_shape())
                if axis is None:
                    fail(name, f"per-axis quantized operands ({source[0]}) are not supported by this op")
                want = UniformQuantizedType(params.with_axis(axis))
            got = quantized_element(declared) if declared is not None else None
            if declared is not None and got is None:
                fail(name, f"result #{i} must be quantized like the operands ({want}), got {fmt(declared)}")
            if got is not None and got != want:
                fail(name, f"result #{i} must keep the operands' quantization {want}, got {got}")
            t = TensorType(want, t.get_shape(), declared.encoding if declared is not None else t.encoding)
            try:
                want.check_fits(t.get_shape(), f"result #{i}")
            except QuantError as e:
                fail(name, str(e))
        out.append(t)
    return out


_LAYOUT_CHECKED: set[Attribute] = set()
"""Types whose layouts already passed :func:`check_layout_fits` (types are immutable)."""

_LAYOUT_CHECKED_IDS: dict[int, Attribute] = {}
"""The same by object identity (kept alive, so ids are not reused): no hashing for a type object
seen before (a tensor type's hash goes through its shape, element type and layout)."""


def check_layout_fits(type_: Attribute, op=None) -> None:
    """Raise HloVerifyError if a tensor type carries a layout of the wrong rank."""
    if id(type_) in _LAYOUT_CHECKED_IDS:
        return
    try:
        if type_ in _LAYOUT_CHECKED:
            if len(_LAYOUT_CHECKED_IDS) < 100_000:
                _LAYOUT_CHECKED_IDS[id(type_)] = type_
            return
        cacheable = True
    except TypeError:  # a type holding unhashable parameters: check it every time
        cacheable = False
    if isinstance(type_, TensorType) and isinstance(type_.encoding, LayoutAttr):
        try:
            type_.encoding.data.check_rank(type_.get_num_dims(), fmt(type_))
        except LayoutError as e:
            where = f"{op_context(op)}: " if op is not None else ""
            raise HloVerifyError(f"{where}{e}") from None
    elif isinstance(type_, TupleType):
        for t in type_.types:
            check_layout_fits(t, op)
    if cacheable and len(_LAYOUT_CHECKED) < 100_000:
        _LAYOUT_CHECKED.add(type_)
        _LAYOUT_CHECKED_IDS[id(type_)] = type_


def same_modulo_layout(a: Attribute, b: Attribute) -> bool:
    """Whether two types are equal once layout encodings are ignored."""
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return a.element_type == b.element_type and a.shape == b.shape
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        return len(a.types) == len(b.types) and all(
            x == y or same_modulo_layout(x, y) for x, y in zip(a.types, b.types)
        )
    return a == b


# ----------------------------------------------------------------------------
# Helpers for infer() implementations
# ----------------------------------------------------------------------------


def fail(op_name: str, message: str):
    """Raise the standard verification error for ``op_name``."""
    raise HloVerifyError(f"{op_name}: {message}")


def fmt(type_: Attribute) -> str:
    """XLA shape notation for messages (MLIR syntax for quantized types, which XLA shapes lack)."""
    from ..shape import format_shape

    if quantized_element(type_) is not None:
        return str(type_)
    try:
        return format_shape(type_)
    except Exception:
        return str(type_)


def tensor(op_name: str, type_: Attribute, what: str) -> TensorType:
    """Assert ``type_`` is a tensor type; ``what`` names it ('operand #0')."""
    if not isinstance(type_, TensorType):
        fail(op_name, f"{what} must be an array, got {fmt(type_)}")
    return type_


def make_tensor(element_type: Attribute, shape: Sequence[int]) -> TensorType:
    """A tensor type without layout (memoized: xDSL attribute construction is costly)."""
    return _make_tensor(element_type, tuple(shape))


@functools.lru_cache(maxsize=65536)
def _make_tensor(element_type: Attribute, shape: tuple[int, ...]) -> TensorType:
    return TensorType(element_type, list(shape))


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """A ``array<i64: ...>`` property value."""
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def ints(attr: Attribute | None, default: Sequence[int] | None = ()) -> tuple[int, ...]:
    """Python ints from an ``array<i64: ...>`` property (``default`` if absent)."""
    if attr is None or isinstance(attr, NoneAttr):
        return tuple(default) if default is not None else ()
    return tuple(attr.get_values())


def string(attr: Attribute | None, default: str | None = None) -> str | None:
    if attr is None:
        return default
    return attr.data if isinstance(attr, StringAttr) else str(attr)


def kind_of(type_: TensorType) -> str:
    """'pred' | 'sint' | 'uint' | 'float' | 'complex' for a tensor's element type."""
    return element_type_of(type_.element_type).kind


def is_token(type_: Attribute) -> bool:
    return isinstance(type_, TokenType)


def pred_type() -> IntegerType:
    return IntegerType(1)


def complex_component(element_type: Attribute) -> Attribute:
    """The real element type of a complex element type."""
    assert isinstance(element_type, ComplexType)
    return element_type.element_type


def unsigned_int(width: int) -> IntegerType:
    return IntegerType(width, Signedness.UNSIGNED)


def check_dims_in_range(op_name: str, dims: Sequence[int], rank: int, what: str) -> None:
    """Check every dimension number is in [0, rank) and unique."""
    for d in dims:
        if not 0 <= d < rank:
            fail(op_name, f"{what} {list(dims)} has dimension {d} out of range for rank {rank}")
    if len(set(dims)) != len(dims):
        fail(op_name, f"{what} {list(dims)} contains duplicates")


def check_same_types(op_name: str, types: Sequence[Attribute], what: str = "operands") -> None:
    """All ``types`` equal modulo layout."""
    first = types[0]
    for i, t in enumerate(types[1:], 1):
        if not same_modulo_layout(t, first):  # as strip_layout(t) != strip_layout(first), without new types
            fail(op_name, f"{what} must have the same type: #0 is {fmt(types[0])}, #{i} is {fmt(t)}")


def builder_method(method):
    """Mark a public ``XlaBuilder`` method: errors raised while it runs name it (``XlaBuilder.<name>``).

    The outermost marked method of a call is the one named (``softmax`` calling ``exp`` reports
    ``softmax``): that is what the user called."""
    qualified = f"XlaBuilder.{method.__name__}"

    @functools.wraps(method)
    def named(self, *args, **kwargs):
        if self._method is not None:
            return method(self, *args, **kwargs)
        self._method = qualified
        try:
            return method(self, *args, **kwargs)
        finally:
            self._method = None

    return named


def check_configuration_operand(op_name: str, t, what: str, shape: Sequence[int]) -> None:
    """An operand that configures an op at run time (``dynamic_pad``'s paddings, ``dynamic_gather``'s slice
    sizes, ``dynamic_conv``'s padding): an integer array of ``shape``."""
    t = tensor(op_name, t, what)
    if kind_of(t) not in ("sint", "uint") or tuple(t.get_shape()) != tuple(shape):
        fail(op_name, f"{what} must be an integer array of shape {list(shape)}, got {fmt(t)}")


def declared_result(op_name: str, result_types, what: str) -> list:
    """The result type an op whose shape depends on run-time values declares (it cannot be inferred)."""
    if not result_types:
        fail(op_name, f"the result type must be given ({what} are known only at run time)")
    return list(result_types)

