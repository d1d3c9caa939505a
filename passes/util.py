"""Small helpers shared by the pass modules: constants, value replacement, op creation,
and the pieces that keep the passes fast on large programs.

* :class:`AttrInterner`, :class:`IdMemo`, :func:`share_types`: xDSL attributes
  rehash all their fields on every dictionary lookup; these look objects up by
  identity (by value once per object).
* :func:`new_op`, :func:`insert_new_ops`, :func:`erase_op`, :func:`retype`:
  what xDSL's ``create``, ``Rewriter.insert_op``, ``Rewriter.erase_op`` and
  ``replace_value_with_new_type`` do, without their per-op overheads, through
  :mod:`xla_dialect.xdsl_compat` (xDSL's internals, checked against its public
  API on import; ``tests/test_passes_speed.py`` checks all four).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import Rewriter

from xla_dialect.layout import Layout, LayoutAttr, strip_layout
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.base import HloOp, i64_array
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.types import element_type_of, numpy_dtype
from xla_dialect.xdsl_compat import create_op, link_ops, operands_of, retype_in_place, retypes_in_place


_TYPES: dict[tuple, TensorType] = {}
_ARRAYS: dict[tuple, object] = {}
_CACHE_LIMIT = 1 << 16


def tensor_type(element_type: Attribute, shape: Sequence[int], layout: Layout | None = None) -> TensorType:
    """``TensorType(element_type, shape, #hlo.layout<layout>)``, cached (xDSL types are costly to build)."""
    key = (element_type, tuple(shape), layout)
    t = _TYPES.get(key)
    if t is None:
        if len(_TYPES) > _CACHE_LIMIT:
            _TYPES.clear()
        t = _TYPES[key] = (TensorType(element_type, list(shape), LayoutAttr(layout)) if layout is not None
                           else TensorType(element_type, list(shape)))
    return t


class AttrInterner:
    """Numbers attributes so that equal attributes get the same number, hashing each object once.

    xDSL attributes are frozen dataclasses whose hash recomputes over every
    nested parameter (a tensor type: its shape array, each dimension, the
    element type, the layout), so keys made of attributes are costly to look up
    again and again. Programs share a few type and property objects among many
    ops: this maps each object (by identity, keeping it alive so its id is never
    reused) to the number of its equality class. Unhashable attributes get None.
    """

    __slots__ = ("known", "_by_value")

    def __init__(self):
        self.known: dict[int, tuple[Attribute, int | None]] = {}
        """id(attribute) -> (attribute, number): hot loops may look here first."""
        self._by_value: dict[Attribute, int] = {}

    def __call__(self, attr: Attribute) -> int | None:
        """The number of ``attr``'s equality class (None when it cannot be hashed)."""
        entry = self.known.get(id(attr))
        if entry is None:
            try:
                number = self._by_value.setdefault(_type_key(attr), len(self._by_value))
            except TypeError:  # e.g. xDSL tuple types hold lists
                number = None
            entry = self.known[id(attr)] = (attr, number)
        return entry[1]

    def op_signature(self, op: Operation, head: list, operand_types: bool) -> tuple | None:
        """``head`` followed by what an op is made of besides its operands and regions: the numbers of
        its operand types (with ``operand_types``) and result types, its property and attribute names
        and the numbers of their values. Two ops get equal keys exactly when these parts are equal
        (None when one cannot be hashed)."""
        values = [v.type for v in operands_of(op)] if operand_types else []
        results = op.results
        values.extend([r.type for r in results])
        props, attrs = op.properties, op.attributes
        if props:
            values.extend(props.values())
        if attrs:
            values.extend(attrs.values())
        head.append(len(values))  # with the counts and names below: how ``values`` divides up
        head.append(len(results))
        head.append(tuple(props) if props else ())
        head.append(tuple(attrs) if attrs else ())
        known = self.known
        for attr in values:
            entry = known.get(id(attr))
            number = entry[1] if entry is not None else self(attr)
            if number is None:
                return None
            head.append(number)
        return tuple(head)


class IdMemo:
    """A memo of ``fn`` over immutable objects (xDSL attributes), looked up by identity first.

    Looking an attribute up by value rehashes it in full every time; by
    identity it costs one dictionary probe. An object seen for the first time
    is looked up by value once (equal objects share the result), then
    remembered by identity, kept alive so that its id is never reused while
    memoized. Both tables are cleared when large. Unhashable attributes
    (tuple types) are memoized by identity only.
    """

    __slots__ = ("fn", "known", "by_value", "limit")

    def __init__(self, fn, limit: int = _CACHE_LIMIT):
        self.fn = fn
        self.known: dict[int, tuple[object, object]] = {}
        self.by_value: dict[object, object] = {}
        self.limit = limit

    def __call__(self, obj):
        entry = self.known.get(id(obj))
        if entry is None:
            if len(self.known) > self.limit:
                self.known.clear()
                self.by_value.clear()
            try:
                key = _type_key(obj)
                result = self.by_value.get(key, _MISSING)
                if result is _MISSING:
                    result = self.by_value[key] = self.fn(obj)
            except TypeError:  # unhashable
                result = self.fn(obj)
            entry = self.known[id(obj)] = (obj, result)
        return entry[1]


_MISSING = object()


def retype(value: SSAValue, new_type: Attribute) -> SSAValue:
    """Give ``value`` the type ``new_type``; return the value now carrying it.

    Same effect as xDSL's ``Rewriter.replace_value_with_new_type`` (which builds
    a new value and moves every use over to it), but the value itself is
    updated where xDSL allows (:func:`xla_dialect.xdsl_compat.retype_in_place`):
    no new objects and no use-list surgery, which matters when a pass retypes
    every value of a large program. The value keeps its name hint and, for block
    arguments, its location.
    """
    return retype_in_place(value, new_type)


def new_op(cls: type[Operation], operands: Sequence[SSAValue], properties: dict,
           result_types: Sequence[Attribute], attributes: dict | None = None) -> Operation:
    """``cls.create(operands=..., properties=..., result_types=..., attributes=...)`` without
    regions, about three times faster for IRDL ops (passes create tens of thousands of ops on
    large programs): :func:`xla_dialect.xdsl_compat.create_op`."""
    return create_op(cls, operands, result_types, properties, attributes or {})


def insert_new_ops(ops: Sequence[Operation], point) -> None:
    """``Rewriter.insert_op(ops, point)`` for newly built ops, linked into the block directly.

    xDSL checks each op for a parent and for containing the block (walking up
    from the block) before linking it; ops just built without regions pass
    both checks by construction (:func:`xla_dialect.xdsl_compat.link_ops`).
    Anything else takes ``Rewriter.insert_op``.
    """
    if not ops:
        return
    before = point.insert_before
    if ((before is not None and before.parent is not point.block)
            or any(op.parent is not None or op.regions for op in ops)):
        Rewriter.insert_op(ops, point)
        return
    link_ops(point.block, ops, before)


def erase_op(op: Operation) -> None:
    """``Rewriter.erase_op(op)``, cheaper for an op without regions whose results are unused.

    xDSL then detaches the op, drops its operand uses, and replaces the (no)
    uses of each result by a new erased value; the last step changes nothing
    observable and is skipped here.
    """
    if op.regions or op.parent is None or any(r.first_use is not None for r in op.results):
        Rewriter.erase_op(op)
        return
    op.parent.detach_op(op)
    op.drop_all_references()


def _type_key(t: Attribute):
    """A stand-in for ``t`` as a dictionary key: equal exactly when the types are equal, and
    cheaper to hash and compare for tensor types (whose shape array and layout attribute are
    dataclasses hashed field by field); other objects stand for themselves."""
    if type(t) is TensorType:
        encoding = t.encoding
        return (t.element_type, t.get_shape(), encoding.data if type(encoding) is LayoutAttr else encoding)
    return t


def share_types(values: Sequence[SSAValue]) -> None:
    """Give equal types of ``values`` one and the same type object (the IR means the same).

    Builders and parsers make a new type object for nearly every value; the
    passes' per-type-object memos (:class:`IdMemo`) then pay a full by-value
    lookup for each value. One lookup per value here makes every later one an
    identity hit.
    """
    if not retypes_in_place():
        return  # pragma: no cover - retyping would replace the values
    shared: dict[Attribute, Attribute] = {}
    seen: dict[int, tuple[Attribute, Attribute]] = {}  # id(type) -> (type, its shared object)
    for value in values:
        t = value.type
        entry = seen.get(id(t))
        if entry is None:
            try:
                same = shared.setdefault(_type_key(t), t)
            except TypeError:  # unhashable (tuple types): left alone
                same = t
            entry = seen[id(t)] = (t, same)
        if entry[1] is not t:
            retype_in_place(value, entry[1])


def i64s(values: Sequence[int]):
    """A cached ``array<i64: ...>`` property value."""
    key = tuple(int(v) for v in values)
    a = _ARRAYS.get(key)
    if a is None:
        if len(_ARRAYS) > _CACHE_LIMIT:
            _ARRAYS.clear()
        a = _ARRAYS[key] = i64_array(key)
    return a


def constant_array(value: SSAValue) -> np.ndarray | None:
    """The array of ``value`` when it is defined by ``hlo.constant``, else None."""
    owner = value.owner
    if isinstance(owner, ConstantOp):
        return owner.value.array
    return None


def splat_scalar(value: SSAValue) -> np.ndarray | None:
    """The 0-d array every element of a constant ``value`` equals bit for bit, else None."""
    owner = value.owner
    return owner.splat_value() if isinstance(owner, ConstantOp) else None


def constant_properties(array: np.ndarray, result_type: TensorType) -> dict:
    """The properties of an ``hlo.constant`` of ``array`` with result type ``result_type``."""
    array = np.asarray(array, dtype=numpy_dtype(result_type)).reshape(result_type.get_shape())
    return {"value": DenseLiteralAttr.from_array(array, _without_layout(result_type))}


_without_layout = IdMemo(strip_layout)
"""``strip_layout`` memoized per type object (it builds a new type each time)."""


def make_constant(array: np.ndarray, result_type: TensorType) -> ConstantOp:
    """An ``hlo.constant`` of ``array`` whose result has exactly ``result_type`` (layout kept)."""
    return new_op(ConstantOp, (), constant_properties(array, result_type), [result_type])


def create(op_cls: type[HloOp], operands: Sequence[SSAValue], props: dict | None = None,
           result_types: Sequence[Attribute] | None = None, regions=()) -> Operation:
    """Create an hlo op with result types from its ``infer`` (or the given ones)."""
    props = {k: v for k, v in (props or {}).items() if v is not None}
    if result_types is None:
        result_types = op_cls.infer([o.type for o in operands], props, list(regions), None)
    if not regions:
        return new_op(op_cls, operands, props, result_types)
    return op_cls.create(operands=list(operands), properties=props, result_types=list(result_types),
                         regions=list(regions))


def forward(rewriter: PatternRewriter, op: Operation, value: SSAValue) -> bool:
    """Replace ``op``'s single result by ``value`` when the types agree exactly (layouts too)."""
    if value.type != op.results[0].type:
        return False
    rewriter.replace(op, [], [value])
    return True


def element_name(value: SSAValue) -> str | None:
    """The XLA name of ``value``'s element type (``f32``, ``bf16``...), or None for non-arrays and
    quantized or unknown element types."""
    t = value.type
    if not isinstance(t, TensorType):
        return None
    try:
        return element_type_of(t.element_type).xla_name
    except Exception:  # quantized or unknown element types
        return None
