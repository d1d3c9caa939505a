"""NumPy kernels: the collectives, replica_id and partition_id.

Each factory resolves everything static at lowering time from the device grid
the program is compiled for (``ctx.num_replicas`` x ``ctx.num_partitions``):
the op's process groups (:meth:`lowering.runtime.devices.ProcessGrid.process_groups`),
which group each device belongs to and the function ``combine`` that maps the
operands of every group member (in group order) to every member's results.
At run time a device alone in its group applies ``combine`` to its own
operands; otherwise it meets its group through :func:`lowering.runtime.devices.exchange`.
On a single device (the default grid) nothing else happens: replica_id and
partition_id are constants and a collective returns its operands (zeros for
a permute or broadcast that leaves device 0 out), as XLA, which removes them.

Results that a device receives from another device are always fresh arrays
(never views of another device's values), so no device's result aliases
another's arguments.

all_reduce and reduce_scatter fold the members' operands in group order. A
computation that is one add, multiply, maximum or minimum is reduced the way
XLA CPU's runtime does it (:data:`XLA_CPU_REDUCTIONS`: from the identity, NaN
ignored by max/min -- XLA CPU's behaviour, which differs from ``hlo.maximum``);
any other computation (XLA CPU rejects them) is applied left to right to
whole arrays.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from xla_dialect.errors import ExecutionError, HloVerifyError, op_context
from xla_dialect.ops.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    CollectiveBroadcastOp,
    CollectivePermuteOp,
    CollectiveReduceOp,
    PartitionIdOp,
    ReduceScatterOp,
    ReplicaIdOp,
    group_mode,
    replica_groups_of,
    source_target_pairs_of,
)

from ..runtime.denormals import flush_bits
from ..runtime.devices import ProcessGrid, current_device, exchange, new_collective_key
from xla_dialect.types import element_type_from_dtype

from .registry import Constant, register
from .control_flow import array_applier, result_dtypes
from .reduction import binary_body_ufunc


def _grid(ctx) -> ProcessGrid:
    return ProcessGrid(ctx.num_replicas, ctx.num_partitions)


def _groups(op, ctx, cover: bool = True) -> list[tuple[int, ...]]:
    """The op's process groups on the compiled grid (device ids in group order)."""
    ragged = getattr(type(op), "RAGGED_GROUPS", False)
    groups = replica_groups_of(op.name, op.properties, ragged=ragged)
    return _grid(ctx).process_groups(op_context(op), group_mode(type(op), op.properties), groups, cover)


def _distribute(value, count: int, deposits: list[tuple]) -> list:
    """``count`` copies of ``value`` for the members: one may be ``value`` itself if it is a fresh array."""
    shared = any(np.may_share_memory(value, d) for dep in deposits for d in dep)
    return [value if i == 0 and not shared else np.array(value, copy=True) for i in range(count)]


def _per_member(columns: list[list], single: bool) -> list:
    """Per-operand lists of per-member results -> per-member kernel results."""
    members = list(zip(*columns))
    return [m[0] if single else tuple(m) for m in members]


def _collective_kernel(op, ctx, groups, combine, n_regions: int = 0, outsider=None):
    """The kernel of a collective with static ``groups`` and ``combine(region_fns, deposits)``.

    ``outsider`` computes the results of a device that is in no group (zeros).
    """
    what = op_context(op)
    member_of = {d: (g, members) for g, members in enumerate(groups) for d in members}
    if _grid(ctx).num_devices == 1:
        if 0 not in member_of:
            return lambda *args: outsider()
        # XLA removes a collective of a single-device program: its operands pass through
        # (no reduction from the identity, so NaN and -0.0 stay).
        if len(op.results) == 1:
            return lambda *args: args[n_regions]
        return lambda *args: args[n_regions:]
    key = new_collective_key()

    def collective_kernel(*args):
        state = current_device()
        entry = member_of.get(state.device if state is not None else 0)
        if entry is None:
            return outsider()
        g, members = entry
        fns, operands = args[:n_regions], args[n_regions:]
        if len(members) == 1:
            return combine(fns, [operands])[0]
        return exchange(key, g, members, operands, lambda deposits: combine(fns, deposits), what)

    return collective_kernel


def _check_group_size(op, groups, count: int, what: str) -> None:
    size = len(groups[0]) if groups else 0
    if size != count:
        raise HloVerifyError(f"{op_context(op)}: {what} {count} does not match the process groups of "
                             f"{size} devices on this grid {[list(g) for g in groups]}")


def _extreme(dtype: np.dtype, sign: int):
    """-inf / +inf of a float type (its finite extreme if it has no infinity), else the integer extreme."""
    if dtype == np.bool_:
        return sign > 0
    if element_type_from_dtype(dtype).kind == "float":
        with np.errstate(invalid="ignore", over="ignore"):
            value = np.array(sign * np.inf).astype(dtype)
        return value if not np.isnan(value.astype(np.float32)) else np.array(sign * ml_dtypes.finfo(dtype).max, dtype)
    info = ml_dtypes.iinfo(dtype)
    return info.max if sign > 0 else info.min


XLA_CPU_REDUCTIONS = {
    # ufunc of a one-op computation: (identity(dtype), step(acc, x))
    np.add: (lambda dt: 0, np.add),
    np.multiply: (lambda dt: 1, np.multiply),
    np.maximum: (lambda dt: _extreme(dt, -1), lambda acc, x: np.where(x > acc, x, acc)),
    np.minimum: (lambda dt: _extreme(dt, +1), lambda acc, x: np.where(x < acc, x, acc)),
}
"""How XLA CPU's collectives reduce the computations it recognises (sum, product, max, min).

It starts from the identity and folds the members in group order (sums and
products of bf16/f8 in f32, rounded once; f16 step by step in f16); max/min
keep the accumulator unless the next value is strictly greater/smaller, so
NaN operands are ignored (unlike ``hlo.maximum``) and of equal zeros the first
member's sign wins; a sum of -0.0s is +0.0. In a "flush" program max/min read f32/f64/bf16 denormals as
zeros of their sign (:func:`_denormals_read_as_zero`), as the runtime does under DAZ.
"""


def _accumulator(ufunc, dtype: np.dtype) -> np.dtype:
    """XLA CPU's collectives add and multiply bf16 and f8 in f32 (rounded once); f16 and the rest in their type."""
    narrow = element_type_from_dtype(dtype).kind == "float" and dtype.itemsize < 4 and dtype != np.float16
    return np.dtype(np.float32) if ufunc in (np.add, np.multiply) and narrow else dtype


def _denormals_read_as_zero(ufunc, dtype: np.dtype, ctx):
    """How max/min collectives read their operands: in a "flush" program, f32/f64/bf16 denormals as the zero of
    their sign, as XLA CPU's runtime computes them under DAZ (max(1e-40, -1e-40, -0.6, ...) is +0.0; bf16 through
    f32). The select of :data:`XLA_CPU_REDUCTIONS` copies bits, so they are flushed here; sums and products flush
    in the arithmetic itself, f16 and f8 never flush."""
    if ufunc not in (np.maximum, np.minimum) or not ctx.flush:
        return lambda x: x
    if dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        return flush_bits
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return lambda x: flush_bits(x.astype(np.float32)).astype(dtype)
    return lambda x: x


def _folder(op, ctx):
    """``fold(fns, arrays)``: the members' arrays reduced in group order.

    Computations XLA CPU recognises follow its runtime (:data:`XLA_CPU_REDUCTIONS`);
    any other computation is applied left to right to whole arrays
    (``acc = f(acc, x_i)``), a valid schedule of the StableHLO spec.
    """
    dtype = result_dtypes(op, ctx)[0]
    ufunc = binary_body_ufunc(op.computation)
    is_complex = element_type_from_dtype(dtype).kind == "complex"
    if ufunc in XLA_CPU_REDUCTIONS and not (is_complex and ufunc in (np.maximum, np.minimum)):
        identity_of, step = XLA_CPU_REDUCTIONS[ufunc]
        acc_dtype = _accumulator(ufunc, dtype)
        identity = np.asarray(identity_of(dtype), dtype).astype(acc_dtype)
        read = _denormals_read_as_zero(ufunc, dtype, ctx)

        def runtime_fold(fns, arrays):
            acc = identity
            for x in arrays:
                acc = step(acc, read(x if x.dtype == acc_dtype else x.astype(acc_dtype)))
            return np.asarray(acc).astype(dtype, copy=False)

        return runtime_fold

    apply = array_applier(op.computation, [dtype])

    def fold(fns, arrays):
        f = apply(fns[0])
        acc = arrays[0]
        for x in arrays[1:]:
            (acc,) = f(acc, x)
        return acc

    return fold


@register(AllReduceOp)
def _all_reduce(op, ctx):
    groups = _groups(op, ctx)
    fold = _folder(op, ctx)
    k, single = len(op.operands), len(op.results) == 1

    def combine(fns, deposits):
        n = len(deposits)
        columns = [_distribute(fold(fns, [dep[i] for dep in deposits]), n, deposits) for i in range(k)]
        return _per_member(columns, single)

    return _collective_kernel(op, ctx, groups, combine, n_regions=1)


def _sharded_groups(op, ctx, dim: int) -> list[tuple[int, ...]]:
    """The groups of all_gather / reduce_scatter, checked against the shard count of the result shape.

    The shard count is result/operand (all_gather) or operand/result
    (reduce_scatter) size of ``dim``, unknown when that is 0.
    """
    groups = _groups(op, ctx)
    x, r = op.operands[0].type.get_shape()[dim], op.results[0].type.get_shape()[dim]
    big, small = (r, x) if isinstance(op, AllGatherOp) else (x, r)
    if small:
        _check_group_size(op, groups, big // small, "the shard count of the result shape")
    return groups


@register(AllGatherOp)
def _all_gather(op, ctx):
    dim = op.all_gather_dim.value.data
    groups = _sharded_groups(op, ctx, dim)
    k, single = len(op.operands), len(op.results) == 1

    def combine(fns, deposits):
        n = len(deposits)
        columns = [_distribute(np.concatenate([dep[i] for dep in deposits], axis=dim), n, deposits)
                   for i in range(k)]
        return _per_member(columns, single)

    return _collective_kernel(op, ctx, groups, combine)


@register(AllToAllOp)
def _all_to_all(op, ctx):
    groups = _groups(op, ctx)
    split, concat = op.split_dimension.value.data, op.concat_dimension.value.data
    count = op.split_count.value.data
    _check_group_size(op, groups, count, "split_count")
    k, single = len(op.operands), len(op.results) == 1

    def combine(fns, deposits):
        columns = []
        for i in range(k):
            parts = [np.split(dep[i], count, axis=split) for dep in deposits]
            # Receiver j concatenates block j of every sender, in group order (always a fresh array).
            columns.append([np.concatenate([p[j] for p in parts], axis=concat) for j in range(count)])
        return _per_member(columns, single)

    return _collective_kernel(op, ctx, groups, combine)


@register(ReduceScatterOp)
def _reduce_scatter(op, ctx):
    dim = op.scatter_dimension.value.data
    groups = _sharded_groups(op, ctx, dim)
    fold = _folder(op, ctx)
    k, single = len(op.operands), len(op.results) == 1

    def combine(fns, deposits):
        n = len(deposits)
        columns = []
        for i in range(k):
            reduced = fold(fns, [dep[i] for dep in deposits])
            columns.append([block.copy() for block in np.split(reduced, n, axis=dim)])
        return _per_member(columns, single)

    return _collective_kernel(op, ctx, groups, combine, n_regions=1)


def _zeros(op, ctx):
    """``outsider`` for ops whose non-participating devices get zeros."""
    specs = [(r.type.get_shape(), ctx.dtype(r.type)) for r in op.results]
    single = len(specs) == 1

    def zeros():
        values = [np.zeros(shape, dtype) for shape, dtype in specs]
        return values[0] if single else tuple(values)

    return zeros


@register(CollectivePermuteOp)
def _collective_permute(op, ctx):
    grid = _grid(ctx)
    pairs = source_target_pairs_of(op.name, op.properties)
    mode = group_mode(type(op), op.properties)
    size, what = (grid.num_replicas, "replica") if mode == "cross_replica" else (grid.num_partitions, "partition")
    for s, t in pairs:
        if not (0 <= s < size and 0 <= t < size):
            raise HloVerifyError(f"{op_context(op)}: source_target_pairs {[list(p) for p in pairs]} name {what} "
                                 f"ids outside [0, {size}) ({grid.num_replicas} replicas x "
                                 f"{grid.num_partitions} partitions)")
    ids = sorted({i for p in pairs for i in p})
    # One group per slice of the grid (a partition for cross-replica pairs, a replica for
    # cross-partition ones), holding the devices named in any pair, in id order.
    if mode == "cross_replica":
        groups = [tuple(grid.device(r, p) for r in ids) for p in range(grid.num_partitions)]
    else:
        groups = [tuple(grid.device(r, p) for p in ids) for r in range(grid.num_replicas)]
    source_of = {ids.index(t): ids.index(s) for s, t in pairs}  # member index -> member index
    zeros = _zeros(op, ctx)

    def combine(fns, deposits):
        return [np.array(deposits[source_of[j]][0], copy=True) if j in source_of else zeros()
                for j in range(len(deposits))]

    return _collective_kernel(op, ctx, groups if ids else [], combine, outsider=zeros)


def _roots(op, deposits, what: str) -> list[int]:
    """The group index each data operand comes from / goes to: 0, or with ``has_dynamic_root`` the values of
    the last operand (the first member's: every member passes the same roots)."""
    k = len(op.results)
    if "has_dynamic_root" not in op.properties:
        return [0] * k
    roots = [int(r) for r in np.asarray(deposits[0][-1]).reshape(-1)]
    for r in roots:
        if not 0 <= r < len(deposits):
            raise ExecutionError(f"{what}: root {r} is not an index into the process group of {len(deposits)} "
                                 f"devices")
    return roots


def _rooted_kernel(op, ctx, groups, combine, n_regions: int):
    """:func:`_collective_kernel` for the ops with an optional dynamic root, whose root operand is no result
    (on one device the data operands pass through; elsewhere devices in no group get zeros)."""
    kernel = _collective_kernel(op, ctx, groups, combine, n_regions, outsider=_zeros(op, ctx))
    if _grid(ctx).num_devices != 1 or "has_dynamic_root" not in op.properties or 0 not in {d for g in groups
                                                                                           for d in g}:
        return kernel
    k = len(op.results)
    return lambda *args: args[n_regions] if k == 1 else tuple(args[n_regions:n_regions + k])


@register(CollectiveBroadcastOp)
def _collective_broadcast(op, ctx):
    groups = _groups(op, ctx, cover=False)
    k, single = len(op.results), len(op.results) == 1
    what = op_context(op)

    def combine(fns, deposits):
        n = len(deposits)
        roots = _roots(op, deposits, what)
        columns = [[np.array(deposits[roots[i]][i], copy=True) for _ in range(n)] for i in range(k)]
        return _per_member(columns, single)

    return _rooted_kernel(op, ctx, groups, combine, n_regions=0)


@register(CollectiveReduceOp)
def _collective_reduce(op, ctx):
    groups = _groups(op, ctx, cover=False)
    fold = _folder(op, ctx)
    k, single = len(op.results), len(op.results) == 1
    what = op_context(op)

    def combine(fns, deposits):
        n = len(deposits)
        roots = _roots(op, deposits, what)
        columns = []
        for i in range(k):
            total = fold(fns, [dep[i] for dep in deposits])
            columns.append([total if member == roots[i] else np.zeros_like(total) for member in range(n)])
        return _per_member(columns, single)

    return _rooted_kernel(op, ctx, groups, combine, n_regions=1)


def _device_id(op, ctx, of_device):
    """replica_id / partition_id: a constant on one device, else this thread's device."""
    grid = _grid(ctx)
    values = []
    for d in range(grid.num_devices):
        v = np.array(of_device(grid, d), dtype=np.uint32)
        v.flags.writeable = False
        values.append(v)
    if grid.num_devices == 1:
        return Constant(values[0])
    zero = values[0]

    def device_id_kernel():
        state = current_device()
        return zero if state is None else values[state.device]

    return device_id_kernel


@register(ReplicaIdOp)
def _replica_id(op, ctx):
    return _device_id(op, ctx, lambda grid, d: d // grid.num_partitions)


@register(PartitionIdOp)
def _partition_id(op, ctx):
    return _device_id(op, ctx, lambda grid, d: d % grid.num_partitions)
