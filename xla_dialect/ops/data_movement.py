"""Data-movement ops: broadcast, broadcast_in_dim, reshape, transpose, slice, concatenate, pad, reverse.

Each op's ``infer`` implements XLA's shape inference (``ShapeInference::Infer*Shape``
in XLA, the operation-XLA operation semantics for the rules) with messages that say which
operand or attribute is wrong and what was expected. Ops whose result shape is
not a function of their attributes (``broadcast_in_dim``, ``reshape``) take it
from the declared result type, as StableHLO does; the builder supplies it from
its arguments.

Builder-only operations of XLA's operation semantics that are compositions are built from these
ops: ``reshape(operand, dimensions, new_sizes)`` is a transpose followed by a
reshape, ``collapse`` is a reshape, ``slice_in_dim`` is a slice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, TensorType
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def, var_operand_def

from ..errors import BuilderError
from .base import (
    HloOp, check_dims_in_range, fail, fmt, i64_array, ints, make_tensor, tensor, set_quantized, builder_method,
    check_configuration_operand, declared_result,
)

_FUNCTIONAL = "attr-dict `:` functional-type(operands, results)"


class _UnaryShapeOp(HloOp):
    """Common IRDL fields of the single-operand data-movement ops."""

    operand = operand_def()
    result = result_def()

    assembly_format = "$operand " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        return [cls.infer_array(tensor(cls.name, t, "operand"), props, result_types)]

    @classmethod
    def infer_array(cls, t: TensorType, props, result_types) -> TensorType:
        """The result type for operand array ``t`` (what ``infer`` returns)."""
        raise NotImplementedError


def _declared_array(op_name: str, result_types, operand: TensorType) -> TensorType:
    """The declared result array of an op whose result shape comes from its type."""
    if not result_types:
        fail(op_name, "the result type must be given (it carries the result shape)")
    (out,) = result_types
    out = tensor(op_name, out, "result")
    if out.element_type != operand.element_type:
        fail(op_name, f"result element type {out.element_type} must equal the operand's {operand.element_type}")
    if any(d < 0 for d in out.get_shape()):
        fail(op_name, f"result shape {fmt(out)} has a negative dimension size")
    return out


@irdl_op_definition
class BroadcastOp(_UnaryShapeOp):
    """``hlo.broadcast``: prepend dimensions of sizes ``broadcast_sizes``.

    ``output[i0..iN, j0..jM] = operand[j0..jM]`` (XLA Broadcast).
    """

    name = "hlo.broadcast"
    traits = traits_def(Pure())
    broadcast_sizes = prop_def(DenseArrayBase)

    @classmethod
    def infer_array(cls, t, props, result_types):
        sizes = ints(props.get("broadcast_sizes"))
        for s in sizes:
            if s < 0:
                fail(cls.name, f"broadcast_sizes {list(sizes)} has negative size {s}")
        return make_tensor(t.element_type, (*sizes, *t.get_shape()))

    @classmethod
    def quantized_axis(cls, props, axis, operand_shape, result_shape):
        """The operand's dimensions move behind the new ones."""
        return axis + len(ints(props.get("broadcast_sizes")))


@irdl_op_definition
class BroadcastInDimOp(_UnaryShapeOp):
    """``hlo.broadcast_in_dim``: operand dimension ``i`` becomes result dimension ``broadcast_dimensions[i]``.

    Operand dimensions of size 1 may expand; the other result dimensions are
    new. The result shape is the declared result type (XLA's ``out_dim_size``).
    """

    name = "hlo.broadcast_in_dim"
    traits = traits_def(Pure())
    broadcast_dimensions = prop_def(DenseArrayBase)

    @classmethod
    def infer_array(cls, t, props, result_types):
        out = _declared_array(cls.name, result_types, t)
        in_shape, out_shape = t.get_shape(), out.get_shape()
        bdims = ints(props.get("broadcast_dimensions"))
        if len(bdims) != len(in_shape):
            fail(cls.name, f"broadcast_dimensions {list(bdims)} must have one entry per operand dimension "
                           f"(operand {fmt(t)} has rank {len(in_shape)})")
        if len(out_shape) < len(in_shape):
            fail(cls.name, f"result rank {len(out_shape)} ({fmt(out)}) is smaller than the operand rank "
                           f"{len(in_shape)} ({fmt(t)})")
        for i, d in enumerate(bdims):
            if not 0 <= d < len(out_shape):
                fail(cls.name, f"broadcast dimension {d} is out of range for result {fmt(out)} of rank {len(out_shape)}")
            if in_shape[i] not in (1, out_shape[d]):
                fail(cls.name, f"operand dimension {i} has size {in_shape[i]}, but must be 1 or equal result "
                               f"dimension {d} of size {out_shape[d]}")
            if i and bdims[i - 1] >= d:
                fail(cls.name, f"broadcast_dimensions {list(bdims)} must be strictly increasing "
                               f"({d} comes after {bdims[i - 1]})")
        return make_tensor(t.element_type, out_shape)

    @classmethod
    def quantized_axis(cls, props, axis, operand_shape, result_shape):
        """Operand dimension ``axis`` becomes ``broadcast_dimensions[axis]`` (it must not expand: one scale per index)."""
        if operand_shape[axis] != result_shape[ints(props.get("broadcast_dimensions"))[axis]]:
            return None
        return ints(props.get("broadcast_dimensions"))[axis]


@irdl_op_definition
class ReshapeOp(_UnaryShapeOp):
    """``hlo.reshape``: the operand's elements in row-major order, refilled into the result shape."""

    name = "hlo.reshape"
    traits = traits_def(Pure())

    @classmethod
    def infer_array(cls, t, props, result_types):
        out = _declared_array(cls.name, result_types, t)
        have, want = math.prod(t.get_shape()), math.prod(out.get_shape())
        if have != want:
            fail(cls.name, f"mismatched element counts: operand {fmt(t)} has {have} elements, "
                           f"result {fmt(out)} has {want}")
        return make_tensor(t.element_type, out.get_shape())

    @classmethod
    def quantized_axis(cls, props, axis, operand_shape, result_shape):
        """The result dimension with the same size and the same number of elements before it (StableHLO's rule)."""
        before = math.prod(operand_shape[:axis])
        for r in range(len(result_shape)):
            if math.prod(result_shape[:r]) == before and result_shape[r] == operand_shape[axis]:
                return r
        return None


def _check_permutation(op_name: str, perm: Sequence[int], operand: TensorType, what: str) -> None:
    if sorted(perm) != list(range(operand.get_num_dims())):
        fail(op_name, f"{what} {list(perm)} is not a permutation of the operand dimensions "
                      f"(operand shape is {fmt(operand)})")


@irdl_op_definition
class TransposeOp(_UnaryShapeOp):
    """``hlo.transpose``: ``result.dims[i] = operand.dims[permutation[i]]``."""

    name = "hlo.transpose"
    traits = traits_def(Pure())
    permutation = prop_def(DenseArrayBase)

    @classmethod
    def infer_array(cls, t, props, result_types):
        perm = ints(props.get("permutation"))
        _check_permutation(cls.name, perm, t, "permutation")
        shape = t.get_shape()
        return make_tensor(t.element_type, [shape[p] for p in perm])

    @classmethod
    def quantized_axis(cls, props, axis, operand_shape, result_shape):
        """``permutation[result axis] = operand axis``."""
        return list(ints(props.get("permutation"))).index(axis)


@irdl_op_definition
class SliceOp(_UnaryShapeOp):
    """``hlo.slice``: the elements ``start_indices + k * strides`` below ``limit_indices``, per dimension."""

    name = "hlo.slice"
    traits = traits_def(Pure())
    start_indices = prop_def(DenseArrayBase)
    limit_indices = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)

    @classmethod
    def infer_array(cls, t, props, result_types):
        shape = t.get_shape()
        starts, limits, strides = (ints(props.get(k)) for k in ("start_indices", "limit_indices", "strides"))
        for what, values in (("start_indices", starts), ("limit_indices", limits), ("strides", strides)):
            if len(values) != len(shape):
                fail(cls.name, f"{what} {list(values)} must have one entry per operand dimension "
                               f"(operand {fmt(t)} has rank {len(shape)})")
        sizes = []
        for d, (start, limit, stride, size) in enumerate(zip(starts, limits, strides, shape)):
            if start < 0:
                fail(cls.name, f"negative start index {start} in dimension {d}")
            if limit > size:
                fail(cls.name, f"limit index {limit} exceeds the size {size} of dimension {d} of {fmt(t)}")
            if start > limit:
                fail(cls.name, f"limit index {limit} is smaller than start index {start} in dimension {d}")
            if stride <= 0:
                fail(cls.name, f"stride {stride} in dimension {d} must be positive")
            sizes.append(-(-(limit - start) // stride))
        return make_tensor(t.element_type, sizes)


@irdl_op_definition
class ConcatenateOp(HloOp):
    """``hlo.concatenate``: the operands one after the other along ``dimension``."""

    name = "hlo.concatenate"
    traits = traits_def(Pure())
    inputs = var_operand_def()
    result = result_def()
    dimension = prop_def(IntegerAttr)

    assembly_format = "$inputs " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if not operand_types:
            fail(cls.name, "needs at least one operand")
        arrays = [tensor(cls.name, t, f"operand #{i}") for i, t in enumerate(operand_types)]
        first = arrays[0]
        dim = props["dimension"].value.data
        if not 0 <= dim < first.get_num_dims():
            fail(cls.name, f"dimension {dim} is out of range for operands of rank {first.get_num_dims()} "
                           f"(operand #0 is {fmt(first)})")
        total = 0
        for i, t in enumerate(arrays):
            if t.get_num_dims() != first.get_num_dims():
                fail(cls.name, f"operands must have the same rank: #0 is {fmt(first)}, #{i} is {fmt(t)}")
            if t.element_type != first.element_type:
                fail(cls.name, f"operands must have the same element type: #0 is {fmt(first)}, #{i} is {fmt(t)}")
            for d, (a, b) in enumerate(zip(first.get_shape(), t.get_shape())):
                if d != dim and a != b:
                    fail(cls.name, f"operands may differ only in dimension {dim}: dimension {d} of operand #{i} "
                                   f"{fmt(t)} is {b}, of operand #0 {fmt(first)} is {a}")
            total += t.get_shape()[dim]
        shape = list(first.get_shape())
        shape[dim] = total
        return [make_tensor(first.element_type, shape)]


@irdl_op_definition
class PadOp(HloOp):
    """``hlo.pad``: edge padding (negative removes elements) and interior padding with ``padding_value``.

    ``result[edge_padding_low + i * (interior_padding + 1)] = operand[i]`` per
    dimension; every other element is ``padding_value``.
    """

    name = "hlo.pad"
    traits = traits_def(Pure())
    operand = operand_def()
    padding_value = operand_def()
    result = result_def()
    edge_padding_low = prop_def(DenseArrayBase)
    edge_padding_high = prop_def(DenseArrayBase)
    interior_padding = prop_def(DenseArrayBase)

    assembly_format = "$operand `,` $padding_value " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        t, v = operand_types
        t = tensor(cls.name, t, "operand")
        v = tensor(cls.name, v, "padding_value")
        if v.get_num_dims() != 0:
            fail(cls.name, f"padding_value must be a scalar, got {fmt(v)}")
        if v.element_type != t.element_type:
            fail(cls.name, f"padding_value {fmt(v)} must have the operand's element type {t.element_type}")
        shape = t.get_shape()
        config = [ints(props.get(k)) for k in ("edge_padding_low", "edge_padding_high", "interior_padding")]
        for what, values in zip(("edge_padding_low", "edge_padding_high", "interior_padding"), config):
            if len(values) != len(shape):
                fail(cls.name, f"{what} {list(values)} must have one entry per operand dimension "
                               f"(operand {fmt(t)} has rank {len(shape)})")
        sizes = []
        for d, (size, low, high, interior) in enumerate(zip(shape, *config)):
            if interior < 0:
                fail(cls.name, f"interior padding {interior} of dimension {d} must not be negative")
            n = size + low + high + max(size - 1, 0) * interior
            if n < 0:
                fail(cls.name, f"padding (low {low}, high {high}, interior {interior}) makes dimension {d} "
                               f"of {fmt(t)} negative ({n})")
            sizes.append(n)
        return [make_tensor(t.element_type, sizes)]


@irdl_op_definition
class ReverseOp(_UnaryShapeOp):
    """``hlo.reverse`` (XLA Rev): index ``i`` of each listed dimension of size N becomes ``N - 1 - i``."""

    name = "hlo.reverse"
    traits = traits_def(Pure())
    dimensions = prop_def(DenseArrayBase)

    @classmethod
    def infer_array(cls, t, props, result_types):
        check_dims_in_range(cls.name, ints(props.get("dimensions")), t.get_num_dims(), "dimensions")
        return make_tensor(t.element_type, t.get_shape())


@irdl_op_definition
class DynamicPadOp(HloOp):
    """``hlo.dynamic_pad``: :class:`PadOp` with the paddings as operands (the StableHLO spec's dynamic_pad);
    the result type is declared, and the run-time paddings must give it."""

    name = "hlo.dynamic_pad"
    traits = traits_def(Pure())
    operand = operand_def()
    padding_value = operand_def()
    edge_padding_low = operand_def()
    edge_padding_high = operand_def()
    interior_padding = operand_def()
    result = result_def()

    STATIC: ClassVar = PadOp
    """The op it is, once its configuration operands are known (executed as that op)."""
    CONFIGURATION: ClassVar[tuple[int, ...]] = (2, 3, 4)
    """The operands whose values configure it."""

    assembly_format = "$operand `,` $padding_value `,` $edge_padding_low `,` $edge_padding_high `,` $interior_padding " \
        + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        t, v, *paddings = operand_types
        t = tensor(cls.name, t, "operand")
        for what, p in zip(("edge_padding_low", "edge_padding_high", "interior_padding"), paddings):
            check_configuration_operand(cls.name, p, what, [t.get_num_dims()])
        (result,) = declared_result(cls.name, result_types, "the paddings")
        if tensor(cls.name, result, "result").get_num_dims() != t.get_num_dims():
            fail(cls.name, f"result {fmt(result)} must have the operand's rank {t.get_num_dims()}")
        return [result]

    @staticmethod
    def static_properties(values) -> dict:
        """The :class:`PadOp` properties for the run-time values of the configuration operands."""
        low, high, interior = values
        return {"edge_padding_low": i64_array(low), "edge_padding_high": i64_array(high),
                "interior_padding": i64_array(interior)}


OPS = [BroadcastOp, BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, ConcatenateOp, PadOp, ReverseOp, DynamicPadOp]
"""Every op class of this family (registered in the hlo dialect)."""


# ----------------------------------------------------------------------------
# Builder methods (XLA client names, snake_case)
# ----------------------------------------------------------------------------


def _int_list(caller: str, values, what: str) -> list[int]:
    """``values`` as a list of Python ints, or BuilderError naming ``caller``."""
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise BuilderError(f"{caller}: {what} must be a sequence of ints, got {values!r}") from None
    if any(out[i] != v for i, v in enumerate(values)):
        raise BuilderError(f"{caller}: {what} must be a sequence of ints, got {values!r}")
    return out


class DataMovementBuilder:
    """Builder methods of the data_movement family."""

    def _array(self, operand, what: str = "operand") -> TensorType:
        """The array type of ``operand`` (BuilderError if it is not an array)."""
        t = self._value(operand, what).type
        if not isinstance(t, TensorType):
            raise BuilderError(f"{self._caller()}: {what} must be an array, got {fmt(t)}")
        return t

    @builder_method
    def broadcast(self, operand, broadcast_sizes: Sequence[int]):
        """``hlo.broadcast``: new major dimensions of sizes ``broadcast_sizes`` (XLA Broadcast)."""
        sizes = _int_list(self._caller(), broadcast_sizes, "broadcast_sizes")
        return self._emit1(BroadcastOp, [operand], {"broadcast_sizes": i64_array(sizes)})

    @builder_method
    def broadcast_in_dim(self, operand, out_dim_size: Sequence[int], broadcast_dimensions: Sequence[int]):
        """``hlo.broadcast_in_dim``: broadcast to ``out_dim_size``; operand dimension ``i`` maps to
        result dimension ``broadcast_dimensions[i]`` (size 1 or equal to it)."""
        caller = self._caller()
        sizes = _int_list(caller, out_dim_size, "out_dim_size")
        bdims = _int_list(caller, broadcast_dimensions, "broadcast_dimensions")
        if any(s < 0 for s in sizes):
            raise BuilderError(f"{caller}: out_dim_size {sizes} has a negative size")
        t = self._array(operand)
        return self._emit1(BroadcastInDimOp, [operand], {"broadcast_dimensions": i64_array(bdims)},
                           result_types=[make_tensor(t.element_type, sizes)])

    @builder_method
    def reshape(self, operand, dimensions_or_new_sizes: Sequence[int] | None = None,
                new_sizes: Sequence[int] | None = None):
        """``hlo.reshape``, in XLA's two forms.

        ``reshape(operand, new_sizes)`` refills the row-major element sequence
        into ``new_sizes``. ``reshape(operand, dimensions, new_sizes)`` first
        transposes by ``dimensions`` (a permutation, most major first), then
        reshapes: the transpose is only emitted when it is not the identity.
        """
        caller = self._caller()
        if new_sizes is None:
            if dimensions_or_new_sizes is None:
                raise BuilderError(f"{caller}: new_sizes must be given")
            dimensions, new_sizes = None, dimensions_or_new_sizes
        else:
            dimensions = dimensions_or_new_sizes
        sizes = _int_list(caller, new_sizes, "new_sizes")
        if any(s < 0 for s in sizes):
            raise BuilderError(f"{caller}: new_sizes {sizes} has a negative size")
        t = self._array(operand)
        if dimensions is not None:
            dims = _int_list(caller, dimensions, "dimensions")
            if sorted(dims) != list(range(t.get_num_dims())):
                raise BuilderError(f"{caller}: dimensions {dims} are not a permutation of the operand dimensions "
                                   f"(operand shape is {fmt(t)})")
            if dims != sorted(dims):
                operand = self._emit1(TransposeOp, [operand], {"permutation": i64_array(dims)})
        return self._emit1(ReshapeOp, [operand], {}, result_types=[make_tensor(t.element_type, sizes)])

    @builder_method
    def collapse(self, operand, dimensions: Sequence[int]):
        """XLA Collapse: merge the in-order, consecutive ``dimensions`` into one (a ``hlo.reshape``).

        With fewer than two dimensions nothing is collapsed and ``operand`` is
        returned, as in XLA.
        """
        caller = self._caller()
        dims = _int_list(caller, dimensions, "dimensions")
        t = self._array(operand)
        shape = list(t.get_shape())
        for d in dims:
            if not 0 <= d < len(shape):
                raise BuilderError(f"{caller}: dimension {d} is out of range for operand {fmt(t)} of rank {len(shape)}")
        if any(b != a + 1 for a, b in zip(dims, dims[1:])):
            raise BuilderError(f"{caller}: dimensions {dims} must be in order and consecutive, like [0, 1, 2] or [1, 2]")
        if len(dims) <= 1:
            return operand
        merged = shape[: dims[0]] + [math.prod(shape[dims[0]: dims[-1] + 1])] + shape[dims[-1] + 1:]
        return self._emit1(ReshapeOp, [operand], {}, result_types=[make_tensor(t.element_type, merged)])

    @builder_method
    def transpose(self, operand, permutation: Sequence[int]):
        """``hlo.transpose``: result dimension ``i`` is operand dimension ``permutation[i]``."""
        perm = _int_list(self._caller(), permutation, "permutation")
        return self._emit1(TransposeOp, [operand], {"permutation": i64_array(perm)})

    @builder_method
    def slice(self, operand, start_indices: Sequence[int], limit_indices: Sequence[int],
              strides: Sequence[int] | None = None):
        """``hlo.slice``: ``[start, limit)`` with ``strides`` (default 1) in every dimension."""
        return self._slice(operand, start_indices, limit_indices,
                           [1] * len(start_indices) if strides is None else strides)

    @builder_method
    def slice_in_dim(self, operand, start_index: int, limit_index: int, stride: int, dimno: int):
        """XLA SliceInDim: ``hlo.slice`` of dimension ``dimno`` only; the others are kept whole."""
        t = self._array(operand)
        shape = t.get_shape()
        if not 0 <= dimno < len(shape):
            raise BuilderError(f"{self._caller()}: dimno {dimno} is out of range for operand {fmt(t)} of rank {len(shape)}")
        starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
        starts[dimno], limits[dimno], strides[dimno] = start_index, limit_index, stride
        return self._slice(operand, starts, limits, strides)

    def _slice(self, operand, start_indices, limit_indices, strides):
        caller = self._caller()
        props = {what: i64_array(_int_list(caller, values, what)) for what, values in
                 (("start_indices", start_indices), ("limit_indices", limit_indices), ("strides", strides))}
        return self._emit1(SliceOp, [operand], props)

    @builder_method
    def concat_in_dim(self, operands: Sequence, dimension: int):
        """``hlo.concatenate`` of ``operands`` along ``dimension`` (XLA ConcatInDim)."""
        ops = list(operands) if isinstance(operands, (list, tuple)) else [operands]
        return self._emit1(ConcatenateOp, ops, {"dimension": IntegerAttr(int(dimension), 64)})

    @builder_method
    def pad(self, operand, padding_value, padding_config):
        """``hlo.pad``; ``padding_config`` has one ``(edge_low, edge_high, interior)`` per dimension.

        Also accepted per dimension: an object with XLA's field names
        ``edge_padding_low``, ``edge_padding_high`` and ``interior_padding``.
        """
        caller = self._caller()
        lows, highs, interiors = [], [], []
        for d, entry in enumerate(padding_config):
            if hasattr(entry, "edge_padding_low"):
                entry = (entry.edge_padding_low, entry.edge_padding_high, getattr(entry, "interior_padding", 0))
            triple = _int_list(caller, entry, f"padding_config[{d}]")
            if len(triple) != 3:
                raise BuilderError(f"{caller}: padding_config[{d}] must be (edge_low, edge_high, interior), got {entry!r}")
            lows.append(triple[0])
            highs.append(triple[1])
            interiors.append(triple[2])
        return self._emit1(PadOp, [operand, padding_value], {"edge_padding_low": i64_array(lows),
                                                             "edge_padding_high": i64_array(highs),
                                                             "interior_padding": i64_array(interiors)})


    @builder_method
    def dynamic_pad(self, operand, padding_value, edge_padding_low, edge_padding_high, interior_padding,
                    result_shape):
        """``hlo.dynamic_pad``: :meth:`pad` with the paddings as values (integer arrays, one entry per
        dimension) known at run time; ``result_shape`` (shape text or type) is what they must give."""
        result = self._type(result_shape)
        return self._emit1(DynamicPadOp, [operand, padding_value, edge_padding_low, edge_padding_high,
                                          interior_padding], result_types=[result])
    @builder_method
    def rev(self, operand, dimensions: Sequence[int]):
        """``hlo.reverse`` (XLA Rev): reverse the order of elements along ``dimensions``."""
        dims = _int_list(self._caller(), dimensions, "dimensions")
        return self._emit1(ReverseOp, [operand], {"dimensions": i64_array(dims)})

    reverse = rev

    @builder_method
    def copy(self, operand, layout=None):
        """``hlo.copy``: the same values, laid out with ``layout`` (XLA layout text like ``'{0,1}'``,
        a :class:`~xla_dialect.layout.Layout`, or None for the default layout)."""
        from ..layout import LayoutAttr, parse_layout

        t = self._array(operand)
        if layout is not None:
            try:
                parsed = parse_layout(layout) if isinstance(layout, str) else layout
                parsed.check_rank(t.get_num_dims(), fmt(t))
            except Exception as e:
                raise BuilderError(f"{self._caller()}: {e}") from None
            result = TensorType(t.element_type, t.get_shape(), LayoutAttr(parsed))
            return self._emit1(CopyOp, [operand], {}, result_types=[result])
        return self._emit1(CopyOp, [operand], {})


# ----------------------------------------------------------------------------
# hlo.copy (added by the passes work: layout assignment materializes layout changes with it)
# ----------------------------------------------------------------------------


@irdl_op_definition
class CopyOp(_UnaryShapeOp):
    """``hlo.copy`` (XLA kCopy): the operand's values in a new buffer.

    The logical value is unchanged; the result type may carry a different
    layout than the operand's, which makes this the op layout assignment
    inserts where layouts conflict.
    """

    name = "hlo.copy"
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        from ..layout import strip_layout

        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        inferred = make_tensor(t.element_type, t.get_shape())
        if result_types and strip_layout(result_types[0]) == inferred:
            return [result_types[0]]  # the declared (new) layout is the point of the op
        return [inferred]


OPS.append(CopyOp)


@irdl_op_definition
class BitcastOp(_UnaryShapeOp):
    """``hlo.bitcast`` (XLA kBitcast): the operand's bytes in memory, read with the result's shape and layout.

    Unlike reshape, the meaning depends on the physical layouts (tiling and
    padding included) of the operand and the result: element ``i`` of the
    result is the element stored at the position the result's layout gives
    ``i`` in the operand's buffer. Both must occupy the same number of bytes.
    Optimized HLO (after layout assignment) uses it for reshapes and
    transposes that move no data.
    """

    name = "hlo.bitcast"
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        from ..layout import byte_size

        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        if not result_types:
            fail(cls.name, "the result type must be given (its shape and layout say how to read the bytes)")
        out = tensor(cls.name, result_types[0], "result")
        try:
            have, want = byte_size(t), byte_size(out)
        except Exception as e:  # a layout that does not fit is reported by check_layout_fits
            fail(cls.name, str(e))
        if have != want:
            fail(cls.name, f"operand {fmt(t)} occupies {have} bytes but result {fmt(out)} needs {want}")
        return [out]


OPS.append(BitcastOp)

# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("storage", *OPS)


