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
from ..types import TokenType, element_type_of


class HloOp(IRDLOperation):
    """Base class of all hlo ops: verification through :meth:`infer`."""

    # Properties print inside the attribute dictionary of the custom syntax.
    irdl_options = (ParsePropInAttrDict(),)

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
    """XLA shape notation for messages (falls back to MLIR syntax)."""
    from ..shape import format_shape

    try:
        return format_shape(type_)
    except Exception:
        return str(type_)


def tensor(op_name: str, type_: Attribute, what: str) -> TensorType:
    """Assert ``type_`` is a tensor type; ``what`` names it ('operand #0')."""
    if not isinstance(type_, TensorType):
        fail(op_name, f"{what} must be an array, got {fmt(type_)}")
    return type_


def shape_of(type_: TensorType) -> tuple[int, ...]:
    return type_.get_shape()


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
