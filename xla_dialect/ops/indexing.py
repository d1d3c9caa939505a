"""hlo ops. Indexing: gather, scatter, dynamic_slice, dynamic_update_slice.

Operand and property layout follows StableHLO, one property per field of the
``#stablehlo.gather<...>`` / ``#stablehlo.scatter<...>`` dimension-number
structs (as the StableHLO importer and exporter expect):

* ``hlo.gather(operand, start_indices)`` with ``offset_dims``,
  ``collapsed_slice_dims``, ``operand_batching_dims``,
  ``start_indices_batching_dims``, ``start_index_map``, ``index_vector_dim``,
  ``slice_sizes`` and ``indices_are_sorted``. Start indices are clamped so
  every slice is in bounds (XLA and StableHLO semantics).
* ``hlo.scatter(inputs..., scatter_indices, updates...)`` (one operand list:
  N inputs, the indices, N updates) with ``update_window_dims``,
  ``inserted_window_dims``, ``input_batching_dims``,
  ``scatter_indices_batching_dims``, ``scatter_dims_to_operand_dims``,
  ``index_vector_dim``, ``indices_are_sorted``, ``unique_indices`` and an
  update computation region of 2N scalar parameters returning N scalars.
  An update window that is not entirely in bounds is skipped (XLA).
* ``hlo.dynamic_slice(operand, start_indices...)`` with ``slice_sizes`` and
  ``hlo.dynamic_update_slice(operand, update, start_indices...)``: one scalar
  integer start index per operand dimension, clamped to ``[0, dim - size]``.

``infer`` implements XLA's ``ShapeInference::InferGatherShape`` /
``InferScatterShape`` / ``InferDynamicSliceShape`` /
``InferDynamicUpdateSliceShape`` including the batching dimensions of
StableHLO (constraints C1-C23 of the StableHLO spec). The update computation's
parameter and result element types must equal the operands' (XLA's rule;
StableHLO's promotable types are not accepted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

from xdsl.dialects.builtin import BoolAttr, DenseArrayBase, IntegerAttr, IntegerType, TensorType
from xdsl.traits import Pure, RecursiveMemoryEffect
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
    traits_def,
)

from ..errors import BuilderError
from .base import (
    HloOp, fail, fmt, i64_array, ints, kind_of, make_tensor, tensor, set_quantized, builder_method,
    check_configuration_operand, declared_result,
)
from .control_flow import as_list, check_region, one_or_tuple, precheck, scalar_of, scalar_params

_FUNCTIONAL = "attr-dict `:` functional-type(operands, results)"


# ----------------------------------------------------------------------------
# Shared checks
# ----------------------------------------------------------------------------


def _int_prop(props: Mapping, name: str, default: int | None = None) -> int | None:
    """An integer property's value (``default`` when absent)."""
    attr = props.get(name)
    return default if attr is None else int(attr.value.data)


def _check_dims(op_name: str, dims: Sequence[int], bound: int, what: str, must_sort: bool = True,
                bound_what: str = "") -> None:
    """``dims`` in ``[0, bound)``, without repeats, ascending if ``must_sort``."""
    for d in dims:
        if not 0 <= d < bound:
            fail(op_name, f"{what} {list(dims)} has dimension {d} out of range [0, {bound})"
                          f"{' (' + bound_what + ')' if bound_what else ''}")
    if len(set(dims)) != len(dims):
        fail(op_name, f"{what} {list(dims)} must not repeat a dimension")
    if must_sort and list(dims) != sorted(dims):
        fail(op_name, f"{what} {list(dims)} must be sorted in ascending order")


def _check_slice_sizes(op_name: str, sizes: Sequence[int], operand: TensorType) -> None:
    """One slice size per operand dimension, each in ``[0, dim]``."""
    shape = operand.get_shape()
    if len(sizes) != len(shape):
        fail(op_name, f"slice_sizes {list(sizes)} must have one entry per operand dimension "
                      f"(operand {fmt(operand)} has rank {len(shape)})")
    for d, (s, size) in enumerate(zip(sizes, shape)):
        if not 0 <= s <= size:
            fail(op_name, f"slice size {s} for operand dimension {d} must be in [0, {size}] "
                          f"(the operand {fmt(operand)})")


def _index_array(op_name: str, type_, what: str) -> TensorType:
    t = tensor(op_name, type_, what)
    if kind_of(t) not in ("sint", "uint"):
        fail(op_name, f"{what} must have an integral element type, got {fmt(t)}")
    return t


@dataclass(frozen=True)
class IndexSpace:
    """How an index array is read: its batch dimensions and index vectors.

    ``batch_shape`` is the index array's shape without ``index_vector_dim``;
    ``vector_size`` is the length of each index vector (1 when
    ``index_vector_dim`` equals the rank: an implicit trailing dimension).
    """

    batch_shape: tuple[int, ...]
    vector_size: int


def _index_space(op_name: str, indices: TensorType, index_vector_dim: int | None, what: str) -> IndexSpace:
    shape = indices.get_shape()
    if index_vector_dim is None:
        fail(op_name, "index_vector_dim must be given")
    if not 0 <= index_vector_dim <= len(shape):
        fail(op_name, f"index_vector_dim {index_vector_dim} must be in [0, {len(shape)}] "
                      f"(the rank of {what} {fmt(indices)}, or the rank itself for an implicit trailing 1)")
    if index_vector_dim == len(shape):
        return IndexSpace(tuple(shape), 1)
    return IndexSpace(tuple(shape[:index_vector_dim] + shape[index_vector_dim + 1:]), shape[index_vector_dim])


def _check_batching(op_name: str, operand_shape, operand_batching: Sequence[int], collapsed: Sequence[int],
                    index_map: Sequence[int], indices: TensorType, index_batching: Sequence[int],
                    index_vector_dim: int, names: tuple[str, str, str, str, str]) -> None:
    """The batching-dimension constraints shared by gather and scatter (StableHLO C6, C10-C18)."""
    operand_name, batching_name, collapsed_name, map_name, index_batching_name = names
    rank = len(operand_shape)
    _check_dims(op_name, operand_batching, rank, batching_name, bound_what=f"{operand_name} rank {rank}")
    overlap = sorted(set(collapsed) & set(operand_batching))
    if overlap:
        fail(op_name, f"{collapsed_name} {list(collapsed)} and {batching_name} {list(operand_batching)} "
                      f"must be disjoint; both contain {overlap}")
    overlap = sorted(set(index_map) & set(operand_batching))
    if overlap:
        fail(op_name, f"{map_name} {list(index_map)} and {batching_name} {list(operand_batching)} "
                      f"must be disjoint; both contain {overlap}")
    idx_shape = indices.get_shape()
    _check_dims(op_name, index_batching, len(idx_shape), index_batching_name, must_sort=False,
                bound_what=f"rank of the indices {fmt(indices)}")
    if index_vector_dim in index_batching:
        fail(op_name, f"{index_batching_name} {list(index_batching)} must not contain "
                      f"index_vector_dim {index_vector_dim}")
    if len(operand_batching) != len(index_batching):
        fail(op_name, f"{batching_name} {list(operand_batching)} and {index_batching_name} "
                      f"{list(index_batching)} must have the same length")
    for a, b in zip(operand_batching, index_batching):
        if operand_shape[a] != idx_shape[b]:
            fail(op_name, f"{operand_name} batching dimension {a} has size {operand_shape[a]} but the indices' "
                          f"batching dimension {b} has size {idx_shape[b]}; they must be equal")


def _check_index_map(op_name: str, index_map: Sequence[int], space: IndexSpace, rank: int, what: str,
                     index_vector_dim: int) -> None:
    if len(index_map) != space.vector_size:
        fail(op_name, f"{what} {list(index_map)} has {len(index_map)} entries but the index vectors "
                      f"(dimension index_vector_dim={index_vector_dim} of the indices) have "
                      f"{space.vector_size}; they must be equal")
    _check_dims(op_name, index_map, rank, what, must_sort=False, bound_what=f"operand rank {rank}")


# ----------------------------------------------------------------------------
# gather
# ----------------------------------------------------------------------------


class GatherConfiguration(HloOp):
    """The properties :class:`GatherOp` and :class:`DynamicGatherOp` share (everything but the slice sizes)."""

    offset_dims = prop_def(DenseArrayBase)
    collapsed_slice_dims = opt_prop_def(DenseArrayBase)
    operand_batching_dims = opt_prop_def(DenseArrayBase)
    start_indices_batching_dims = opt_prop_def(DenseArrayBase)
    start_index_map = prop_def(DenseArrayBase)
    index_vector_dim = prop_def(IntegerAttr)
    indices_are_sorted = opt_prop_def(IntegerAttr[IntegerType])


@irdl_op_definition
class GatherOp(GatherConfiguration):
    """``hlo.gather``: slices of ``operand`` at (clamped) starts read from ``start_indices``.

    ``result[out] = operand[start + batch + offset]`` with the index mapping of
    XLA's Gather (see the operation-XLA operation semantics and StableHLO ``gather``).
    """

    name = "hlo.gather"
    traits = traits_def(Pure())
    operand = operand_def(TensorType)
    start_indices = operand_def(TensorType)
    result = result_def(TensorType)
    slice_sizes = prop_def(DenseArrayBase)

    assembly_format = "$operand `,` $start_indices " + _FUNCTIONAL

    @classmethod
    def quantized_axis(cls, props, axis, operand_shape, result_shape):
        """Per-tensor quantization only (StableHLO): gathered slices mix the operand's dimensions."""
        return None

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if len(operand_types) != 2:
            fail(cls.name, f"takes 2 operands (operand, start_indices), got {len(operand_types)}")
        operand = tensor(cls.name, operand_types[0], "operand")
        indices = _index_array(cls.name, operand_types[1], "start_indices")
        shape = operand.get_shape()
        rank = len(shape)
        offset_dims = ints(props.get("offset_dims"))
        collapsed = ints(props.get("collapsed_slice_dims"))
        batching = ints(props.get("operand_batching_dims"))
        index_batching = ints(props.get("start_indices_batching_dims"))
        index_map = ints(props.get("start_index_map"))
        slice_sizes = ints(props.get("slice_sizes"))
        ivd = _int_prop(props, "index_vector_dim")

        space = _index_space(cls.name, indices, ivd, "start_indices")
        out_rank = len(space.batch_shape) + len(offset_dims)
        _check_dims(cls.name, offset_dims, out_rank, "offset_dims",
                    bound_what=f"result rank {out_rank}: {len(space.batch_shape)} batch + "
                               f"{len(offset_dims)} offset dimensions")
        _check_dims(cls.name, collapsed, rank, "collapsed_slice_dims", bound_what=f"operand rank {rank}")
        _check_index_map(cls.name, index_map, space, rank, "start_index_map", ivd)
        _check_batching(cls.name, shape, batching, collapsed, index_map, indices, index_batching, ivd,
                        ("operand", "operand_batching_dims", "collapsed_slice_dims", "start_index_map",
                         "start_indices_batching_dims"))
        if rank != len(offset_dims) + len(collapsed) + len(batching):
            fail(cls.name, f"operand {fmt(operand)} has rank {rank}, but offset_dims {list(offset_dims)}, "
                           f"collapsed_slice_dims {list(collapsed)} and operand_batching_dims {list(batching)} "
                           f"account for {len(offset_dims) + len(collapsed) + len(batching)} dimensions")
        _check_slice_sizes(cls.name, slice_sizes, operand)
        for what, dims in (("collapsed_slice_dims", collapsed), ("operand_batching_dims", batching)):
            for d in dims:
                if slice_sizes[d] > 1:
                    fail(cls.name, f"dimension {d} is in {what} so its slice size must be at most 1, "
                                   f"got {slice_sizes[d]}")
        window = [slice_sizes[d] for d in range(rank) if d not in collapsed and d not in batching]
        out = []
        batch_iter, window_iter = iter(space.batch_shape), iter(window)
        for d in range(out_rank):
            out.append(next(window_iter) if d in offset_dims else next(batch_iter))
        return [make_tensor(operand.element_type, out)]


# ----------------------------------------------------------------------------
# scatter
# ----------------------------------------------------------------------------


@irdl_op_definition
class ScatterOp(HloOp):
    """``hlo.scatter``: N inputs with windows of N updates combined in by the update computation.

    Operands: the N inputs, the scatter indices, the N updates. The region
    takes N current values then N update values (scalars) and returns N
    scalars. Windows that are not entirely in bounds are skipped.
    """

    name = "hlo.scatter"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    results_ = var_result_def()
    update_window_dims = prop_def(DenseArrayBase)
    inserted_window_dims = opt_prop_def(DenseArrayBase)
    input_batching_dims = opt_prop_def(DenseArrayBase)
    scatter_indices_batching_dims = opt_prop_def(DenseArrayBase)
    scatter_dims_to_operand_dims = prop_def(DenseArrayBase)
    index_vector_dim = prop_def(IntegerAttr)
    indices_are_sorted = opt_prop_def(IntegerAttr[IntegerType])
    unique_indices = opt_prop_def(IntegerAttr[IntegerType])
    update_computation = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $update_computation"

    @property
    def inputs(self):
        """The N arrays scattered into."""
        return self.operands_[: len(self.operands_) // 2]

    @property
    def scatter_indices(self):
        """The scatter indices operand."""
        return self.operands_[len(self.operands_) // 2]

    @property
    def updates(self):
        """The N update arrays."""
        return self.operands_[len(self.operands_) // 2 + 1:]

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        count = len(operand_types)
        if count < 3 or count % 2 == 0:
            fail(cls.name, f"needs N >= 1 inputs, the scatter indices and N updates (2N+1 operands), "
                           f"got {count} operands")
        n = count // 2
        inputs = [tensor(cls.name, t, f"input #{i}") for i, t in enumerate(operand_types[:n])]
        indices = _index_array(cls.name, operand_types[n], "scatter_indices")
        updates = [tensor(cls.name, t, f"update #{i}") for i, t in enumerate(operand_types[n + 1:])]
        shape = inputs[0].get_shape()
        for i, t in enumerate(inputs[1:], 1):
            if t.get_shape() != shape:
                fail(cls.name, f"all inputs must have the same dimensions: input #0 is {fmt(inputs[0])}, "
                               f"input #{i} is {fmt(t)}")
        upd_shape = updates[0].get_shape()
        for i, t in enumerate(updates[1:], 1):
            if t.get_shape() != upd_shape:
                fail(cls.name, f"all updates must have the same dimensions: update #0 is {fmt(updates[0])}, "
                               f"update #{i} is {fmt(t)}")
        for i, (x, u) in enumerate(zip(inputs, updates)):
            if x.element_type != u.element_type:
                fail(cls.name, f"update #{i} {fmt(u)} must have input #{i}'s element type {x.element_type}")
        rank = len(shape)
        window_dims = ints(props.get("update_window_dims"))
        inserted = ints(props.get("inserted_window_dims"))
        batching = ints(props.get("input_batching_dims"))
        index_batching = ints(props.get("scatter_indices_batching_dims"))
        index_map = ints(props.get("scatter_dims_to_operand_dims"))
        ivd = _int_prop(props, "index_vector_dim")

        space = _index_space(cls.name, indices, ivd, "scatter_indices")
        want_rank = len(window_dims) + len(space.batch_shape)
        if len(upd_shape) != want_rank:
            fail(cls.name, f"updates {fmt(updates[0])} must have rank {want_rank} "
                           f"({len(window_dims)} update_window_dims + {len(space.batch_shape)} scatter "
                           f"dimensions of the indices {fmt(indices)}), got rank {len(upd_shape)}")
        _check_dims(cls.name, window_dims, len(upd_shape), "update_window_dims",
                    bound_what=f"updates rank {len(upd_shape)}")
        _check_dims(cls.name, inserted, rank, "inserted_window_dims", bound_what=f"input rank {rank}")
        _check_index_map(cls.name, index_map, space, rank, "scatter_dims_to_operand_dims", ivd)
        _check_batching(cls.name, shape, batching, inserted, index_map, indices, index_batching, ivd,
                        ("input", "input_batching_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                         "scatter_indices_batching_dims"))
        if rank != len(window_dims) + len(inserted) + len(batching):
            fail(cls.name, f"inputs {fmt(inputs[0])} have rank {rank}, but update_window_dims "
                           f"{list(window_dims)}, inserted_window_dims {list(inserted)} and input_batching_dims "
                           f"{list(batching)} account for {len(window_dims) + len(inserted) + len(batching)} "
                           f"dimensions")
        window_operand_dims = [d for d in range(rank) if d not in inserted and d not in batching]
        for ud, od in zip(window_dims, window_operand_dims):
            if upd_shape[ud] > shape[od]:
                fail(cls.name, f"update window dimension {ud} has size {upd_shape[ud]}, more than the size "
                               f"{shape[od]} of the input dimension {od} it updates")
        scatter_dims = [d for d in range(len(upd_shape)) if d not in window_dims]
        for k, (ud, size) in enumerate(zip(scatter_dims, space.batch_shape)):
            if upd_shape[ud] != size:
                fail(cls.name, f"update scatter dimension {ud} has size {upd_shape[ud]} but the matching "
                               f"dimension of the scatter indices {fmt(indices)} has size {size}; "
                               f"they must be equal")
        results = [make_tensor(x.element_type, shape) for x in inputs]
        if regions:
            scalars = [scalar_of(x) for x in inputs]
            check_region(cls.name, regions[0], scalars + scalars, "update computation", scalars)
        return results


# ----------------------------------------------------------------------------
# dynamic_slice / dynamic_update_slice
# ----------------------------------------------------------------------------


def _check_start_indices(op_name: str, types: Sequence, rank: int) -> None:
    """One scalar integer start index per operand dimension, all of one type."""
    if len(types) != rank:
        fail(op_name, f"needs {rank} start indices (one per operand dimension), got {len(types)}")
    first = None
    for i, t in enumerate(types):
        t = tensor(op_name, t, f"start index #{i}")
        if t.get_shape():
            fail(op_name, f"start index #{i} must be a scalar, got {fmt(t)}")
        if kind_of(t) not in ("sint", "uint"):
            fail(op_name, f"start index #{i} must be an integer, got {fmt(t)}")
        if first is None:
            first = t
        elif t.element_type != first.element_type:
            fail(op_name, f"start indices must all have the same type: #0 is {fmt(first)}, #{i} is {fmt(t)}")


@irdl_op_definition
class DynamicSliceOp(HloOp):
    """``hlo.dynamic_slice``: the ``slice_sizes`` slice at start indices clamped to ``[0, dim - size]``."""

    name = "hlo.dynamic_slice"
    traits = traits_def(Pure())
    operand = operand_def(TensorType)
    start_indices = var_operand_def(TensorType)
    result = result_def(TensorType)
    slice_sizes = prop_def(DenseArrayBase)

    assembly_format = "$operand `,` $start_indices " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if not operand_types:
            fail(cls.name, "needs an operand")
        operand = tensor(cls.name, operand_types[0], "operand")
        shape = operand.get_shape()
        _check_start_indices(cls.name, operand_types[1:], len(shape))
        sizes = ints(props.get("slice_sizes"))
        _check_slice_sizes(cls.name, sizes, operand)
        return [make_tensor(operand.element_type, sizes)]


@irdl_op_definition
class DynamicUpdateSliceOp(HloOp):
    """``hlo.dynamic_update_slice``: ``operand`` with ``update`` written at clamped start indices."""

    name = "hlo.dynamic_update_slice"
    traits = traits_def(Pure())
    operand = operand_def(TensorType)
    update = operand_def(TensorType)
    start_indices = var_operand_def(TensorType)
    result = result_def(TensorType)

    assembly_format = "$operand `,` $update `,` $start_indices " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if len(operand_types) < 2:
            fail(cls.name, "needs an operand and an update")
        operand = tensor(cls.name, operand_types[0], "operand")
        update = tensor(cls.name, operand_types[1], "update")
        shape, upd = operand.get_shape(), update.get_shape()
        if update.element_type != operand.element_type:
            fail(cls.name, f"update {fmt(update)} must have the operand's element type {operand.element_type}")
        if len(upd) != len(shape):
            fail(cls.name, f"update {fmt(update)} must have the operand's rank {len(shape)} (operand {fmt(operand)})")
        for d, (u, size) in enumerate(zip(upd, shape)):
            if u > size:
                fail(cls.name, f"update dimension {d} has size {u}, more than the operand's {size} "
                               f"(update {fmt(update)}, operand {fmt(operand)})")
        _check_start_indices(cls.name, operand_types[2:], len(shape))
        return [make_tensor(operand.element_type, shape)]


@irdl_op_definition
class DynamicGatherOp(GatherConfiguration):
    """``hlo.dynamic_gather``: :class:`GatherOp` with the slice sizes as an operand (the StableHLO spec's
    dynamic_gather); the result type is declared, and the run-time slice sizes must give it."""

    name = "hlo.dynamic_gather"
    traits = traits_def(Pure())
    operand = operand_def(TensorType)
    start_indices = operand_def(TensorType)
    slice_sizes = operand_def(TensorType)
    result = result_def(TensorType)

    STATIC: ClassVar = GatherOp
    """The op it is, once its configuration operand is known (executed as that op)."""
    CONFIGURATION: ClassVar[tuple[int, ...]] = (2,)
    """The operands whose values configure it."""

    assembly_format = "$operand `,` $start_indices `,` $slice_sizes " + _FUNCTIONAL

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if len(operand_types) != 3:
            fail(cls.name, f"takes operand, start_indices and slice_sizes, got {len(operand_types)} operands")
        t = tensor(cls.name, operand_types[0], "operand")
        check_configuration_operand(cls.name, operand_types[2], "slice_sizes", [t.get_num_dims()])
        return declared_result(cls.name, result_types, "the slice sizes")

    @staticmethod
    def static_properties(values) -> dict:
        """The :class:`GatherOp` property for the run-time slice sizes."""
        (sizes,) = values
        return {"slice_sizes": i64_array(sizes)}


OPS = [GatherOp, ScatterOp, DynamicSliceOp, DynamicUpdateSliceOp, DynamicGatherOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("storage", GatherOp, DynamicSliceOp, DynamicUpdateSliceOp)
set_quantized("transparent", ScatterOp)  # its update computation is lowered like any region


# ----------------------------------------------------------------------------
# Dimension numbers (builder side)
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GatherDimensionNumbers:
    """XLA's GatherDimensionNumbers (field order as ``jax.lax.GatherDimensionNumbers``).

    ``index_vector_dim=None`` means the last dimension of ``start_indices``
    (jax's convention, which has no such field).
    """

    offset_dims: Sequence[int] = ()
    collapsed_slice_dims: Sequence[int] = ()
    start_index_map: Sequence[int] = ()
    operand_batching_dims: Sequence[int] = ()
    start_indices_batching_dims: Sequence[int] = ()
    index_vector_dim: int | None = None


@dataclass(frozen=True)
class ScatterDimensionNumbers:
    """XLA's ScatterDimensionNumbers (field order as ``jax.lax.ScatterDimensionNumbers``).

    ``input_batching_dims`` is jax's ``operand_batching_dims`` (both names are
    accepted by the builder). ``index_vector_dim=None`` means the last
    dimension of ``scatter_indices``.
    """

    update_window_dims: Sequence[int] = ()
    inserted_window_dims: Sequence[int] = ()
    scatter_dims_to_operand_dims: Sequence[int] = ()
    input_batching_dims: Sequence[int] = ()
    scatter_indices_batching_dims: Sequence[int] = ()
    index_vector_dim: int | None = None


_ALIASES = {"operand_batching_dims": "input_batching_dims"}  # jax's scatter spelling -> XLA's
"""Other names accepted for scatter dimension-number fields."""


def _dimension_numbers(builder, cls, given, kwargs: dict, aliases: Mapping[str, str] = {}) -> dict:
    """Field -> value from a ``cls`` instance, any object with the fields (jax's
    NamedTuples), a mapping, or keyword arguments; BuilderError on unknown fields."""
    names = [f.name for f in fields(cls)]
    values: dict = {}
    if given is not None:
        if isinstance(given, Mapping):
            items = dict(given)
        else:
            items = {}
            for attr in (*names, *aliases):
                if hasattr(given, attr):
                    items[attr] = getattr(given, attr)
            if not items:
                raise BuilderError(f"{builder._caller()}: dimension_numbers must be a {cls.__name__}, a mapping "
                                   f"or an object with its fields, got {type(given).__name__}")
        values.update(items)
    values.update(kwargs)
    out = {}
    for key, value in values.items():
        name = aliases.get(key, key)
        if name not in names:
            raise BuilderError(f"{builder._caller()}: unknown dimension number {key!r}; expected one of "
                               f"{', '.join(names)}")
        out[name] = value
    return out


def _default_index_vector_dim(builder, indices, given) -> int:
    if given is not None:
        return int(given)
    t = builder._value(indices, "indices").type
    rank = t.get_num_dims() if isinstance(t, TensorType) else 0
    return max(rank - 1, 0)


def _dims_attr(builder, values, what: str) -> DenseArrayBase:
    """``array<i64: ...>`` from a list of ints; BuilderError naming ``what`` otherwise."""
    try:
        return i64_array(list(values))
    except (TypeError, ValueError) as e:
        raise BuilderError(f"{builder._caller()}: {what} must be a list of ints, got {values!r} ({e})") from None


def _array_props(builder, dnums: dict, names: Sequence[str]) -> dict:
    return {n: _dims_attr(builder, dnums.get(n, ()), n) for n in names}


class IndexingBuilder:
    """Builder methods of the indexing family."""

    @builder_method
    def gather(self, operand, start_indices, dimension_numbers=None, slice_sizes: Sequence[int] | None = None,
               indices_are_sorted: bool = False, **dimension_kwargs):
        """``hlo.gather``: slices of ``operand`` of ``slice_sizes`` at (clamped) starts from ``start_indices``.

        ``dimension_numbers`` is a :class:`GatherDimensionNumbers`, a
        ``jax.lax.GatherDimensionNumbers``, a mapping, or given as keyword
        arguments (``offset_dims=..., collapsed_slice_dims=..., start_index_map=...,
        operand_batching_dims=..., start_indices_batching_dims=..., index_vector_dim=...``).
        ``index_vector_dim`` defaults to the last dimension of ``start_indices``.
        """
        dn = _dimension_numbers(self, GatherDimensionNumbers, dimension_numbers, dimension_kwargs)
        if slice_sizes is None:
            raise BuilderError(f"{self._caller()}: slice_sizes must be given")
        props = _array_props(self, dn, ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                                  "start_indices_batching_dims", "start_index_map"))
        props["index_vector_dim"] = IntegerAttr(
            _default_index_vector_dim(self, start_indices, dn.get("index_vector_dim")), 64)
        props["slice_sizes"] = _dims_attr(self, slice_sizes, "slice_sizes")
        props["indices_are_sorted"] = BoolAttr.from_bool(bool(indices_are_sorted))
        return self._emit1(GatherOp, [operand, start_indices], props)

    @builder_method
    def dynamic_gather(self, operand, start_indices, slice_sizes, result_shape, dimension_numbers=None,
                       indices_are_sorted: bool = False, **dimension_kwargs):
        """``hlo.dynamic_gather``: :meth:`gather` with ``slice_sizes`` a value (an integer array, one entry per
        operand dimension) known at run time; ``result_shape`` (shape text or type) is what it must give."""
        dn = _dimension_numbers(self, GatherDimensionNumbers, dimension_numbers, dimension_kwargs)
        props = _array_props(self, dn, ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                                  "start_indices_batching_dims", "start_index_map"))
        props["index_vector_dim"] = IntegerAttr(
            _default_index_vector_dim(self, start_indices, dn.get("index_vector_dim")), 64)
        props["indices_are_sorted"] = BoolAttr.from_bool(bool(indices_are_sorted))
        return self._emit1(DynamicGatherOp, [operand, start_indices, slice_sizes], props,
                           result_types=[self._type(result_shape)])

    @builder_method
    def scatter(self, operands, scatter_indices, updates, update_computation, dimension_numbers=None,
                indices_are_sorted: bool = False, unique_indices: bool = False, **dimension_kwargs):
        """``hlo.scatter``: combine ``updates`` into ``operands`` at windows given by ``scatter_indices``.

        ``operands`` and ``updates`` are one XlaOp each or lists of N;
        ``update_computation`` (a callable or built computation) takes N
        current values then N update values (scalars) and returns N scalars.
        ``dimension_numbers`` is a :class:`ScatterDimensionNumbers`, a
        ``jax.lax.ScatterDimensionNumbers``, a mapping, or keyword arguments
        (``update_window_dims``, ``inserted_window_dims``,
        ``scatter_dims_to_operand_dims``, ``input_batching_dims`` (or jax's
        ``operand_batching_dims``), ``scatter_indices_batching_dims``,
        ``index_vector_dim`` (default: the last dimension of the indices)).
        Returns one XlaOp, or a tuple of N.
        """
        inputs, upds = as_list(operands), as_list(updates)
        if len(inputs) != len(upds):
            raise BuilderError(f"{self._caller()}: {len(inputs)} operands but {len(upds)} updates; "
                               f"each operand needs one update array")
        dn = _dimension_numbers(self, ScatterDimensionNumbers, dimension_numbers, dimension_kwargs, _ALIASES)
        props = _array_props(self, dn, ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                                  "scatter_indices_batching_dims", "scatter_dims_to_operand_dims"))
        props["index_vector_dim"] = IntegerAttr(
            _default_index_vector_dim(self, scatter_indices, dn.get("index_vector_dim")), 64)
        props["indices_are_sorted"] = BoolAttr.from_bool(bool(indices_are_sorted))
        props["unique_indices"] = BoolAttr.from_bool(bool(unique_indices))
        all_operands = [*inputs, scatter_indices, *upds]
        precheck(self, ScatterOp, all_operands, props)
        scalars = scalar_params(self, [self._value(x).type for x in inputs])
        region = self._region(update_computation, scalars + scalars, "update_computation")
        return one_or_tuple(self._emit(ScatterOp, all_operands, props, [region]))

    @builder_method
    def dynamic_slice(self, operand, start_indices: Sequence, slice_sizes: Sequence[int]):
        """``hlo.dynamic_slice``: the slice of ``slice_sizes`` at ``start_indices`` (N scalar XlaOps),
        each clamped to ``[0, dim - size]``."""
        return self._emit1(DynamicSliceOp, [operand, *as_list(start_indices)],
                           {"slice_sizes": _dims_attr(self, slice_sizes, "slice_sizes")})

    @builder_method
    def dynamic_update_slice(self, operand, update, start_indices: Sequence):
        """``hlo.dynamic_update_slice``: ``operand`` with ``update`` written at ``start_indices``
        (N scalar XlaOps), each clamped to ``[0, dim - update dim]``."""
        return self._emit1(DynamicUpdateSliceOp, [operand, update, *as_list(start_indices)])
