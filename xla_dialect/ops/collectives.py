"""Collective ops over replicas and partitions.

``hlo.all_reduce``, ``hlo.all_gather``, ``hlo.all_to_all``, ``hlo.reduce_scatter``,
``hlo.collective_permute``, ``hlo.collective_broadcast``, ``hlo.replica_id`` and
``hlo.partition_id``, with the operand and attribute forms of StableHLO:

* ``replica_groups``: a 2-D ``dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>``; the
  order inside a group is the order of concatenation (all_gather, all_to_all)
  and of scattering (reduce_scatter). ``dense<> : tensor<0x0xi64>`` (empty)
  means one group of every id. all_reduce alone accepts groups of different
  sizes (as XLA does), padded with ``-1`` as MHLO writes them.
* ``channel_id`` (i64, optional; absent or <= 0 means no channel) and
  ``use_global_device_ids`` (unit) choose how the groups' ids are read
  (:func:`group_mode`, StableHLO's process-group strategies).
* ``source_target_pairs``: ``dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>``.

all_reduce, all_gather, all_to_all, reduce_scatter and collective_broadcast are
variadic (XLA's tuple operands; the builder takes a list or a tuple-shaped
value); the reduction computation of all_reduce and reduce_scatter takes two
scalars of the operands' element type (all operands share it) and returns one,
and is applied to each operand separately.

When ``replica_groups`` is empty, or a channel without ``use_global_device_ids``
makes every group span all partitions, the process group size depends on the
device grid, known only when the program is compiled: the result shape of
all_gather and reduce_scatter then carries it (XLA's builder takes it as
``shard_count``), and the executor checks it against the grid.

Documented restrictions: the computation's element type must equal the
operands' (StableHLO also allows a promotable one); collective_broadcast has no
``has_dynamic_root`` form (XLA has none either).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    TupleType,
    UnitAttr,
    i64,
)
from xdsl.traits import Pure
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

from ..errors import BuilderError, HloVerifyError
from ..layout import strip_layout
from .base import HloOp, fail, fmt, make_tensor, tensor, unsigned_int, set_quantized, builder_method
from .control_flow import check_region, scalar_of, scalar_params, types_text

# ----------------------------------------------------------------------------
# Attributes: replica groups, pairs, channels
# ----------------------------------------------------------------------------


def dense_i64(rows: Sequence[Sequence[int]], width: int | None = None) -> DenseIntOrFPElementsAttr:
    """A 2-D ``dense<...> : tensor<RxCxi64>`` from rows of ints (short rows padded with -1)."""
    rows = [[int(v) for v in row] for row in rows]
    cols = max((len(r) for r in rows), default=0) if width is None else width
    values = [v for r in rows for v in (r + [-1] * (cols - len(r)))]
    return DenseIntOrFPElementsAttr.from_list(TensorType(i64, [len(rows), cols]), values)


def _matrix(op_name: str, attr, what: str) -> list[list[int]]:
    """The rows of a 2-D i64 dense property."""
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        fail(op_name, f"{what} must be a 2-D dense<...> : tensor<RxCxi64> attribute, got {attr}")
    t = attr.get_type()
    shape = t.get_shape()
    if len(shape) != 2 or not isinstance(t.element_type, IntegerType) or t.element_type.width.data != 64:
        fail(op_name, f"{what} must have type tensor<RxCxi64>, got {t}")
    values = list(attr.get_values())
    rows, cols = shape
    return [values[r * cols:(r + 1) * cols] for r in range(rows)]


def replica_groups_of(op_name: str, props, ragged: bool = False) -> list[list[int]]:
    """The ``replica_groups`` of an op as lists of ids (padding removed), checked.

    Ids are non-negative and unique over all groups; groups have one size
    unless ``ragged`` (all_reduce), where rows are padded with trailing -1.
    An empty list means one group of every id.
    """
    attr = props.get("replica_groups")
    if attr is None:
        return []
    rows = _matrix(op_name, attr, "replica_groups")
    groups = []
    for row in rows:
        ids = [v for v in row if v != -1]
        if ragged and row[len(ids):] != [-1] * (len(row) - len(ids)):
            fail(op_name, f"replica_groups row {row} may only be padded with -1 at its end")
        if not ragged and len(ids) != len(row):
            fail(op_name, f"replica_groups must all have the same size (no -1 padding), got row {row}")
        if not ids:
            fail(op_name, f"replica_groups has an empty group: {row}")
        groups.append(ids)
    seen: set[int] = set()
    for g in groups:
        for i in g:
            if i < 0:
                fail(op_name, f"replica_groups id {i} is negative")
            if i in seen:
                fail(op_name, f"replica_groups {groups} contain id {i} more than once")
            seen.add(i)
    return groups


def channel_of(props) -> int | None:
    """The op's channel id, or None when it has no channel (absent or <= 0)."""
    attr = props.get("channel_id")
    if attr is None:
        return None
    value = attr.value.data
    return value if value > 0 else None


def group_mode(op_cls, props) -> str:
    """How an op's groups name devices: StableHLO's process-group strategy (XLA's CollectiveOpGroupMode).

    all_reduce, all_gather, reduce_scatter: ``cross_replica`` without a
    channel, ``cross_replica_and_partition`` with one, ``flattened_ids`` with
    one and ``use_global_device_ids``. all_to_all, collective_permute,
    collective_broadcast: ``cross_replica`` without a channel,
    ``cross_partition`` with one.
    """
    channel = channel_of(props)
    if issubclass(op_cls, GlobalIdsCollectiveOp):
        if props.get("use_global_device_ids") is not None:
            return "flattened_ids"
        return "cross_replica" if channel is None else "cross_replica_and_partition"
    return "cross_replica" if channel is None else "cross_partition"


def _check_global_ids(op_name: str, props) -> None:
    if props.get("use_global_device_ids") is not None and channel_of(props) is None:
        fail(op_name, "use_global_device_ids needs a channel_id > 0")


def _arrays(op_name: str, operand_types, at_least: int = 1) -> list[TensorType]:
    if len(operand_types) < at_least:
        fail(op_name, f"expects at least {at_least} operand(s), got {len(operand_types)}")
    return [tensor(op_name, t, f"operand #{i}") for i, t in enumerate(operand_types)]


def _dimension(op_name: str, props, name: str, rank: int, what: str = "operands") -> int:
    d = props[name].value.data
    if not 0 <= d < rank:
        fail(op_name, f"{name} {d} is out of range for {what} of rank {rank}")
    return d


def _check_computation(op_name: str, regions, arrays: Sequence[TensorType]) -> None:
    """The reduction computation: ``(E[], E[]) -> E[]`` with E the operands' element type."""
    element = arrays[0].element_type
    for i, t in enumerate(arrays[1:], 1):
        if t.element_type != element:
            fail(op_name, f"operands must share one element type (the computation's): operand #0 is "
                          f"{fmt(arrays[0])}, operand #{i} is {fmt(t)}")
    if regions:
        scalar = scalar_of(arrays[0])
        check_region(op_name, regions[0], [scalar, scalar], "computation", [scalar])


def _sharded(op_cls, operand_types, props, result_types, dim_name: str, grow: bool) -> list[TensorType]:
    """Check the operands and groups of all_gather / reduce_scatter; return their result types."""
    arrays = _arrays(op_cls.name, operand_types)
    groups = replica_groups_of(op_cls.name, props)
    _check_global_ids(op_cls.name, props)
    for i, t in enumerate(arrays):
        _dimension(op_cls.name, props, dim_name, t.get_num_dims(), f"operand #{i}")
    dim = props[dim_name].value.data
    return _scaled(op_cls.name, arrays, dim, result_types, groups, group_mode(op_cls, props), grow)


def _scaled(op_name: str, arrays, dim: int, result_types, groups, mode: str, grow: bool) -> list[TensorType]:
    """Results of all_gather (``grow``: dim * G) or reduce_scatter (dim / G), G the process group size.

    G is the size of the replica groups, except without replica groups and
    in ``cross_replica_and_partition`` mode (where a group spans every
    partition): then it is read from the declared result types (the builder's
    ``shard_count``), the same for every operand and a multiple of the
    replica groups' size.
    """
    exact = bool(groups) and mode != "cross_replica_and_partition"
    if exact:
        count = len(groups[0])
    else:
        if not result_types or len(result_types) != len(arrays):
            fail(op_name, f"the {len(arrays)} result type(s) must be given (they carry the shard count, unknown "
                          f"{'without replica_groups' if not groups else 'across partitions'}), "
                          f"got {types_text(result_types or [])}")
        counts = set()
        for i, (x, r) in enumerate(zip(arrays, result_types)):
            r = tensor(op_name, r, f"result #{i}")
            if r.get_num_dims() != x.get_num_dims():
                fail(op_name, f"result #{i} {fmt(r)} must have the rank of operand #{i} {fmt(x)}")
            big, small = r.get_shape()[dim], x.get_shape()[dim]
            if not grow:
                big, small = small, big
            if big == small == 0:
                continue
            if small == 0 or big % small:
                fail(op_name, f"result #{i} {fmt(r)} does not fit operand #{i} {fmt(x)}: dimension {dim} must be "
                              f"{'multiplied' if grow else 'divided'} by the shard count")
            counts.add(big // small)
        if len(counts) > 1:
            fail(op_name, f"the result types imply different shard counts {sorted(counts)}")
        count = counts.pop() if counts else (len(groups[0]) if groups else 1)
        if groups and count % len(groups[0]):
            fail(op_name, f"the shard count {count} of the result types must be a multiple of the replica group "
                          f"size {len(groups[0])}")
    results = []
    for i, x in enumerate(arrays):
        shape = list(x.get_shape())
        if not grow and shape[dim] % count:
            fail(op_name, f"operand #{i} {fmt(x)} dimension {dim} (size {shape[dim]}) is not divisible by the "
                          f"shard count {count}")
        shape[dim] = shape[dim] * count if grow else shape[dim] // count
        results.append(make_tensor(x.element_type, shape))
    if not exact:
        for i, (want, got) in enumerate(zip(results, result_types)):
            if strip_layout(got) != want:
                fail(op_name, f"result #{i} is {fmt(got)}, expected {fmt(want)}")
        return list(result_types)
    return results


# ----------------------------------------------------------------------------
# Ops
# ----------------------------------------------------------------------------


class CollectiveOp(HloOp):
    """Base of the collectives. ``RAGGED_GROUPS``: replica groups may differ in size."""

    RAGGED_GROUPS: ClassVar[bool] = False


class GroupedCollectiveOp(CollectiveOp):
    """A variadic collective over ``replica_groups``, with an optional ``channel_id``."""

    operands_ = var_operand_def()
    results_ = var_result_def()
    replica_groups = prop_def(DenseIntOrFPElementsAttr)
    channel_id = opt_prop_def(IntegerAttr)

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_)"


class GlobalIdsCollectiveOp(GroupedCollectiveOp):
    """A grouped collective whose groups may be flattened device ids (``use_global_device_ids``)."""

    use_global_device_ids = opt_prop_def(UnitAttr)


class ReducingCollectiveOp(GlobalIdsCollectiveOp):
    """all_reduce and reduce_scatter: a scalar reduction ``computation``."""

    computation = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $computation"


@irdl_op_definition
class AllReduceOp(ReducingCollectiveOp):
    """``hlo.all_reduce``: within each process group, every member gets the reduction of all members' operands."""

    name = "hlo.all_reduce"
    RAGGED_GROUPS: ClassVar[bool] = True

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays = _arrays(cls.name, operand_types)
        replica_groups_of(cls.name, props, ragged=True)
        _check_global_ids(cls.name, props)
        _check_computation(cls.name, regions, arrays)
        return [make_tensor(t.element_type, t.get_shape()) for t in arrays]


@irdl_op_definition
class AllGatherOp(GlobalIdsCollectiveOp):
    """``hlo.all_gather``: every member gets all members' operands concatenated along ``all_gather_dim``."""

    name = "hlo.all_gather"
    all_gather_dim = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return _sharded(cls, operand_types, props, result_types, "all_gather_dim", grow=True)


@irdl_op_definition
class AllToAllOp(GroupedCollectiveOp):
    """``hlo.all_to_all``: split along ``split_dimension``, send part i to member i, concatenate along
    ``concat_dimension`` in group order."""

    name = "hlo.all_to_all"
    split_dimension = prop_def(IntegerAttr)
    concat_dimension = prop_def(IntegerAttr)
    split_count = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays = _arrays(cls.name, operand_types)
        groups = replica_groups_of(cls.name, props)
        count = props["split_count"].value.data
        if count <= 0:
            fail(cls.name, f"split_count must be positive, got {count}")
        if groups and len(groups[0]) != count:
            fail(cls.name, f"split_count {count} must equal the size of each replica group "
                           f"({len(groups[0])} in {groups})")
        results = []
        for i, t in enumerate(arrays):
            split = _dimension(cls.name, props, "split_dimension", t.get_num_dims(), f"operand #{i}")
            concat = _dimension(cls.name, props, "concat_dimension", t.get_num_dims(), f"operand #{i}")
            shape = list(t.get_shape())
            if shape[split] % count:
                fail(cls.name, f"operand #{i} {fmt(t)} dimension {split} (size {shape[split]}) is not divisible "
                               f"by split_count {count}")
            shape[split] //= count
            shape[concat] *= count
            results.append(make_tensor(t.element_type, shape))
        return results


@irdl_op_definition
class ReduceScatterOp(ReducingCollectiveOp):
    """``hlo.reduce_scatter``: all_reduce, then member i gets block i of the result along ``scatter_dimension``."""

    name = "hlo.reduce_scatter"
    scatter_dimension = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        results = _sharded(cls, operand_types, props, result_types, "scatter_dimension", grow=False)
        _check_computation(cls.name, regions, _arrays(cls.name, operand_types))
        return results


def source_target_pairs_of(op_name: str, props) -> list[tuple[int, int]]:
    """The checked ``(source, target)`` pairs of a collective_permute."""
    rows = _matrix(op_name, props["source_target_pairs"], "source_target_pairs")
    if rows and len(rows[0]) != 2:
        fail(op_name, f"source_target_pairs must have 2 columns (source, target), got {len(rows[0])}")
    pairs = [(s, t) for s, t in rows]
    for column, what in ((0, "source"), (1, "target")):
        ids = [p[column] for p in pairs]
        if any(i < 0 for i in ids):
            fail(op_name, f"source_target_pairs {[list(p) for p in pairs]} has a negative {what} id")
        if len(set(ids)) != len(ids):
            fail(op_name, f"source_target_pairs {[list(p) for p in pairs]} name a {what} more than once")
    return pairs


@irdl_op_definition
class CollectivePermuteOp(CollectiveOp):
    """``hlo.collective_permute``: each target gets its source's operand; devices that are no target get zeros."""

    name = "hlo.collective_permute"
    operand = operand_def()
    result = result_def()
    source_target_pairs = prop_def(DenseIntOrFPElementsAttr)
    channel_id = opt_prop_def(IntegerAttr)

    assembly_format = "$operand attr-dict `:` functional-type($operand, $result)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (x,) = _arrays(cls.name, operand_types)
        source_target_pairs_of(cls.name, props)
        return [make_tensor(x.element_type, x.get_shape())]


@irdl_op_definition
class CollectiveBroadcastOp(GroupedCollectiveOp):
    """``hlo.collective_broadcast``: every member of a group gets the operands of the group's first member
    (with ``has_dynamic_root``: data operand ``j`` from the member ``root[j]``, the last operand ``root``
    an ``s32[k]`` array of group indices); devices in no group get zeros."""

    name = "hlo.collective_broadcast"
    has_dynamic_root = opt_prop_def(UnitAttr)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays = _data_operands(cls.name, operand_types, props)
        replica_groups_of(cls.name, props)
        return [make_tensor(t.element_type, t.get_shape()) for t in arrays]


@irdl_op_definition
class CollectiveReduceOp(GroupedCollectiveOp):
    """``hlo.collective_reduce``: within each process group the root (the group's first member, or with
    ``has_dynamic_root`` the member ``root[j]`` for data operand ``j``) gets the reduction of every member's
    operand by ``computation``; the other members and devices in no group get zeros."""

    name = "hlo.collective_reduce"
    has_dynamic_root = opt_prop_def(UnitAttr)
    computation = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $computation"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        arrays = _data_operands(cls.name, operand_types, props)
        replica_groups_of(cls.name, props)
        _check_computation(cls.name, regions, arrays)
        return [make_tensor(t.element_type, t.get_shape()) for t in arrays]


def _data_operands(op_name: str, operand_types, props) -> list[TensorType]:
    """The data operands of a collective with an optional dynamic root: with ``has_dynamic_root`` the last
    operand is the ``s32[k]`` root array of the ``k`` data operands before it."""
    arrays = _arrays(op_name, operand_types)
    if "has_dynamic_root" not in props:
        return arrays
    if len(arrays) < 2:
        fail(op_name, "has_dynamic_root needs the data operands and then the root operand")
    *data, root = arrays
    if str(root.element_type) != "i32" or root.get_shape() != (len(data),):
        fail(op_name, f"the root operand must be s32[{len(data)}] (one group index per data operand), "
                      f"got {fmt(root)}")
    return data


class _DeviceIdOp(CollectiveOp):
    """Base of replica_id / partition_id: a ``u32[]`` scalar."""

    result = result_def()

    assembly_format = "attr-dict `:` type($result)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if operand_types:
            fail(cls.name, f"takes no operands, got {len(operand_types)}")
        return [make_tensor(unsigned_int(32), [])]


@irdl_op_definition
class ReplicaIdOp(_DeviceIdOp):
    """``hlo.replica_id``: the replica the program runs on, ``u32[]`` in [0, num_replicas)."""

    name = "hlo.replica_id"
    traits = traits_def(Pure())


@irdl_op_definition
class PartitionIdOp(_DeviceIdOp):
    """``hlo.partition_id``: the partition the program runs on, ``u32[]`` in [0, num_partitions)."""

    name = "hlo.partition_id"
    traits = traits_def(Pure())


OPS = [AllReduceOp, AllGatherOp, AllToAllOp, ReduceScatterOp, CollectivePermuteOp, CollectiveBroadcastOp,
       CollectiveReduceOp, ReplicaIdOp, PartitionIdOp]
"""Every op class of this family (registered in the hlo dialect)."""

# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("storage", AllGatherOp, AllToAllOp, CollectivePermuteOp, CollectiveBroadcastOp)
set_quantized("transparent", AllReduceOp, ReduceScatterOp, CollectiveReduceOp)  # computations lowered like any region


# ----------------------------------------------------------------------------
# Builder methods
# ----------------------------------------------------------------------------


def _collective_props(replica_groups=None, channel_id=None, use_global_device_ids=False, ragged=False) -> dict:
    props: dict = {}
    if replica_groups is not None:
        groups = [list(g) for g in replica_groups]
        if not ragged and len({len(g) for g in groups}) > 1:
            raise BuilderError(f"replica_groups {groups} must all have the same size")
        props["replica_groups"] = dense_i64(groups)
    if channel_id is not None:
        props["channel_id"] = IntegerAttr(int(channel_id), 64)
    if use_global_device_ids:
        props["use_global_device_ids"] = UnitAttr()
    return props


class CollectivesBuilder:
    """Builder methods of the collectives family.

    A collective's operand is one array, a tuple-shaped value (the result is
    then a tuple-shaped value, as in XLA) or a list of arrays (the result is a
    tuple of XlaOps). ``replica_groups`` is a list of lists of ids, empty for
    one group of every replica; ``channel_id`` and ``use_global_device_ids``
    choose cross-replica, cross-partition or flattened device ids (see
    :func:`group_mode`).
    """

    def _collective_operands(self, operand):
        """(list of array operands, function turning the op's results into the builder's return value)."""
        if isinstance(operand, (list, tuple)):
            return list(operand), tuple
        value = self._value(operand, "operand")
        if isinstance(value.type, TupleType):
            parts = [self.get_tuple_element(operand, i) for i in range(len(value.type.types))]
            return parts, lambda results: self.tuple(list(results))
        return [operand], lambda results: results[0]

    def _props(self, **kwargs) -> dict:
        try:
            return _collective_props(**kwargs)
        except BuilderError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None

    def _precheck(self, op_cls, arrays, props, result_types) -> None:
        """Check the operands (and declared results) before the computation region is built."""
        types = [self._value(a, f"operand #{i}").type for i, a in enumerate(arrays)]
        try:
            op_cls.infer(types, props, [], result_types)
        except HloVerifyError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None

    def _reducing(self, op_cls, operand, computation, props, result_types=None):
        """Emit all_reduce / reduce_scatter: operands, then the scalar computation over their element type."""
        arrays, wrap = self._collective_operands(operand)
        self._precheck(op_cls, arrays, props, result_types)
        params = scalar_params(self, [self._value(arrays[0]).type] * 2)
        region = self._region(computation, params, "computation")
        return wrap(self._emit(op_cls, arrays, props, [region], result_types))

    @builder_method
    def all_reduce(self, operand, computation, replica_groups: Sequence[Sequence[int]] = (),
                   channel_id: int | None = None, use_global_device_ids: bool = False):
        """``hlo.all_reduce``: reduce ``operand`` over the members of each group with ``computation``.

        ``computation`` (callable or built computation) takes two scalars of
        the operand's element type and returns one. Groups may differ in size.
        """
        props = self._props(replica_groups=replica_groups, channel_id=channel_id,
                            use_global_device_ids=use_global_device_ids, ragged=True)
        return self._reducing(AllReduceOp, operand, computation, props)

    @builder_method
    def cross_replica_sum(self, operand, replica_groups: Sequence[Sequence[int]] = ()):
        """XLA's CrossReplicaSum: :meth:`all_reduce` with an add computation."""
        return self.all_reduce(operand, lambda a, b: a.builder.add(a, b), replica_groups)

    def _shard_count(self, op_cls, shard_count, props) -> int | None:
        """The process group size the results are built for; None when the replica groups give it."""
        try:
            groups = replica_groups_of(op_cls.name, props)
        except HloVerifyError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None
        if groups and group_mode(op_cls, props) != "cross_replica_and_partition":
            if shard_count is not None and shard_count != len(groups[0]):
                raise BuilderError(f"{self._caller()}: shard_count {shard_count} must equal the size of each "
                                   f"replica group ({len(groups[0])})")
            return None
        if shard_count is None:
            raise BuilderError(f"{self._caller()}: shard_count is needed " + (
                "when replica_groups is empty (it is the number of devices in the group)" if not groups else
                "with a channel_id and no use_global_device_ids: a group spans every partition"))
        if not isinstance(shard_count, int) or shard_count <= 0:
            raise BuilderError(f"{self._caller()}: shard_count must be a positive int, got {shard_count!r}")
        return shard_count

    def _scaled_types(self, arrays, dim: int, count: int | None, grow: bool):
        """The result types for an explicit shard count (None: inferred from the groups)."""
        if count is None:
            return None
        types = []
        for i, a in enumerate(arrays):
            t = self._value(a, f"operand #{i}").type
            if not isinstance(t, TensorType) or not 0 <= dim < t.get_num_dims():
                return None  # infer reports the problem
            shape = list(t.get_shape())
            if not grow and shape[dim] % count:
                raise BuilderError(f"{self._caller()}: operand #{i} {fmt(t)} dimension {dim} (size {shape[dim]}) "
                                   f"is not divisible by the shard count {count}")
            shape[dim] = shape[dim] * count if grow else shape[dim] // count
            types.append(make_tensor(t.element_type, shape))
        return types

    @builder_method
    def all_gather(self, operand, all_gather_dim: int, shard_count: int | None = None,
                   replica_groups: Sequence[Sequence[int]] = (), channel_id: int | None = None,
                   use_global_device_ids: bool = False):
        """``hlo.all_gather``: concatenate the group members' operands along ``all_gather_dim``.

        ``shard_count`` (the number of devices in a group) is needed only when
        the replica groups do not give it: when they are empty, or with a
        ``channel_id`` but no ``use_global_device_ids`` (a group then spans every
        partition, so its size depends on the grid).
        """
        props = self._props(replica_groups=replica_groups, channel_id=channel_id,
                            use_global_device_ids=use_global_device_ids)
        props["all_gather_dim"] = IntegerAttr(int(all_gather_dim), 64)
        count = self._shard_count(AllGatherOp, shard_count, props)
        arrays, wrap = self._collective_operands(operand)
        types = self._scaled_types(arrays, int(all_gather_dim), count, grow=True)
        return wrap(self._emit(AllGatherOp, arrays, props, result_types=types))

    @builder_method
    def all_to_all(self, operand, split_dimension: int, concat_dimension: int, split_count: int,
                   replica_groups: Sequence[Sequence[int]] = (), channel_id: int | None = None):
        """``hlo.all_to_all``: split ``operand`` into ``split_count`` blocks along ``split_dimension``,
        send block i to group member i, concatenate what arrives along ``concat_dimension``."""
        props = self._props(replica_groups=replica_groups, channel_id=channel_id)
        props.update(split_dimension=IntegerAttr(int(split_dimension), 64),
                     concat_dimension=IntegerAttr(int(concat_dimension), 64),
                     split_count=IntegerAttr(int(split_count), 64))
        arrays, wrap = self._collective_operands(operand)
        return wrap(self._emit(AllToAllOp, arrays, props))

    @builder_method
    def reduce_scatter(self, operand, computation, scatter_dimension: int, shard_count: int | None = None,
                       replica_groups: Sequence[Sequence[int]] = (), channel_id: int | None = None,
                       use_global_device_ids: bool = False):
        """``hlo.reduce_scatter``: all_reduce with ``computation``, then group member i keeps block i
        of ``scatter_dimension`` split into ``shard_count`` blocks (needed only when the replica groups
        do not give it, as for :meth:`all_gather`)."""
        props = self._props(replica_groups=replica_groups, channel_id=channel_id,
                            use_global_device_ids=use_global_device_ids)
        props["scatter_dimension"] = IntegerAttr(int(scatter_dimension), 64)
        count = self._shard_count(ReduceScatterOp, shard_count, props)
        arrays, _ = self._collective_operands(operand)
        types = self._scaled_types(arrays, int(scatter_dimension), count, grow=False)
        return self._reducing(ReduceScatterOp, operand, computation, props, types)

    @builder_method
    def collective_permute(self, operand, source_target_pairs: Sequence[Sequence[int]],
                           channel_id: int | None = None):
        """``hlo.collective_permute``: send ``operand`` from each source to its target (pairs of ids);
        devices that are no target get zeros."""
        pairs = [list(p) for p in source_target_pairs]
        if any(len(p) != 2 for p in pairs):
            raise BuilderError(f"{self._caller()}: source_target_pairs must be (source, target) pairs, got {pairs}")
        props = self._props(channel_id=channel_id)
        props["source_target_pairs"] = dense_i64(pairs, 2)
        return self._emit1(CollectivePermuteOp, [operand], props)

    @builder_method
    def collective_broadcast(self, operand, replica_groups: Sequence[Sequence[int]],
                             channel_id: int | None = None, root=None):
        """``hlo.collective_broadcast``: every member of a group gets its first member's ``operand``;
        devices in no group get zeros. ``root`` (an ``s32[k]`` value, one group index per operand): each
        operand comes from that member of the group instead (``has_dynamic_root``)."""
        props = self._props(replica_groups=replica_groups, channel_id=channel_id)
        arrays, wrap = self._collective_operands(operand)
        if root is not None:
            props["has_dynamic_root"] = UnitAttr()
            arrays = [*arrays, root]
        return wrap(self._emit(CollectiveBroadcastOp, arrays, props))

    @builder_method
    def collective_reduce(self, operand, computation, replica_groups: Sequence[Sequence[int]],
                          channel_id: int | None = None, root=None):
        """``hlo.collective_reduce``: the first member of each group (or, with ``root``, an ``s32[k]``
        value, the member ``root[j]`` for operand ``j``) gets the reduction of the members' ``operand`` by
        ``computation``; every other device gets zeros."""
        props = self._props(replica_groups=replica_groups, channel_id=channel_id)
        arrays, wrap = self._collective_operands(operand)
        if root is not None:
            props["has_dynamic_root"] = UnitAttr()
        operands = [*arrays, root] if root is not None else list(arrays)
        self._precheck(CollectiveReduceOp, operands, props, None)
        params = scalar_params(self, [self._value(arrays[0]).type] * 2)
        region = self._region(computation, params, "computation")
        return wrap(self._emit(CollectiveReduceOp, operands, props, [region]))

    @builder_method
    def replica_id(self):
        """``hlo.replica_id``: this replica's id, ``u32[]``."""
        return self._emit1(ReplicaIdOp)

    @builder_method
    def partition_id(self):
        """``hlo.partition_id``: this partition's id, ``u32[]``."""
        return self._emit1(PartitionIdOp)
