"""NumPy kernels. Side effects and program structure: tokens, infeed/outfeed, send/recv, custom_call, composite,
optimization_barrier, dimension sizes.

Side-effecting kernels talk to the executable's host-side state,
``ctx.runtime`` (:mod:`lowering.runtime.program_state`): infeed reads ``exe.infeed``, outfeed
writes ``exe.outfeed``, send and recv meet in ``exe.channels``. Tokens are the
data-less :data:`~lowering.runtime.program_state.TOKEN`. The generated code runs ops in
program order, which respects every token dependency.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import TensorType

from xla_dialect.callbacks import HOST_CALLBACK_TARGETS
from xla_dialect.errors import ExecutionError, UnsupportedError, XlaError, op_context
from xla_dialect.ops.base import ints
from xla_dialect.ops.effects import (
    AfterAllOp,
    CompositeOp,
    CreateTokenOp,
    CustomCallOp,
    GetDimensionSizeOp,
    InfeedOp,
    OptimizationBarrierOp,
    OutfeedOp,
    RecvOp,
    SendOp,
    SetDimensionSizeOp,
    is_host_transfer,
    python_from_attribute,
)
from xla_dialect.shape import format_shape
from xla_dialect.types import TokenType, numpy_dtype

from ..runtime import lapack  # noqa: F401  (registers the built-in LAPACK custom-call targets)
from ..runtime.devices import current_device
from ..runtime.host_callbacks import host_callback_kernel
from .registry import Constant, register
from ..runtime.program_state import TOKEN, ResultSpec, custom_call_target

# ----------------------------------------------------------------------------
# Tokens and structure
# ----------------------------------------------------------------------------


@register(CreateTokenOp)
def _create_token(op, ctx):
    return Constant(TOKEN)


@register(AfterAllOp)
def _after_all(op, ctx):
    return lambda *tokens: TOKEN


@register(OptimizationBarrierOp)
def _optimization_barrier(op, ctx):
    # The identity: by the time it runs, its operands are computed (program order).
    if len(op.operands) == 1:
        return lambda x: x
    return lambda *xs: xs


@register(GetDimensionSizeOp)
def _get_dimension_size(op, ctx):
    return Constant(np.int32(op.operand.type.get_shape()[op.dimension.value.data]))


@register(SetDimensionSizeOp)
def _set_dimension_size(op, ctx):
    bound = op.operand.type.get_shape()[op.dimension.value.data]
    what = op_context(op)

    def set_dimension_size(operand, size):
        if not 0 <= int(size) <= bound:
            raise ExecutionError(f"{what}: size {int(size)} is outside [0, {bound}] (the dimension's static bound)")
        return operand

    return set_dimension_size


@register(CompositeOp)
def _composite(op, ctx):
    # Running a composite is running its decomposition.
    return ctx.function(op.decomposition.string_value())


# ----------------------------------------------------------------------------
# Feeds and channels
# ----------------------------------------------------------------------------


def _specs(types) -> list[tuple[tuple[int, ...], np.dtype, str]]:
    """(shape, dtype, shape text) of each data type of a feed/channel op."""
    return [(tuple(t.get_shape()), numpy_dtype(t), format_shape(t, False)) for t in types]


def _unpack(item, specs, what: str, source: str) -> list[np.ndarray]:
    """The arrays of one queued item, checked against the op's data types."""
    items = list(item) if isinstance(item, tuple) else [item]
    if len(items) != len(specs):
        want = ", ".join(s[2] for s in specs)
        raise ExecutionError(f"{what}: {source} holds {len(items)} array(s), the op reads {len(specs)} ({want})")
    out = []
    for i, (x, (shape, dtype, text)) in enumerate(zip(items, specs)):
        arr = np.asarray(x)
        if arr.shape != shape or not (arr.dtype == dtype or (np.can_cast(arr.dtype, dtype, "same_kind")
                                                             and arr.dtype.kind == dtype.kind)):
            raise ExecutionError(f"{what}: {source} element #{i} is {arr.dtype}{list(arr.shape)}, the op reads {text}")
        out.append(arr.astype(dtype, copy=True))
    return out


def _packed(arrays: Sequence[np.ndarray]):
    """What one outfeed/send puts in its queue: the array, or a tuple of them."""
    return arrays[0].copy() if len(arrays) == 1 else tuple(a.copy() for a in arrays)


def _reader(take, op, what: str, source: str):
    """Kernel of infeed/recv: one item from ``take()``, returned as the data results then a token."""
    specs = _specs([r.type for r in op.results[:-1]])
    if not specs:  # an empty tuple reads nothing (XLA's operation semantics: the infeed is a no-op)
        return lambda token: TOKEN

    def read(token):
        return (*_unpack(take(), specs, what, source), TOKEN)

    return read


@register(InfeedOp)
def _infeed(op, ctx):
    queue = ctx.runtime.infeed
    what = op_context(op)
    return _reader(lambda: queue.take(what), op, what, "the infeed item")


@register(OutfeedOp)
def _outfeed(op, ctx):
    queue = ctx.runtime.outfeed

    def outfeed(*operands):
        queue.put(_packed(operands[:-1]))
        return TOKEN

    return outfeed


def _channel_keys(op):
    """How a send/recv names its queue: the channel id, or (channel id, receiving device) with source_target_pairs.

    With ``source_target_pairs`` a send from device ``s`` goes to the devices
    ``t`` of its pairs ``(s, t)`` and a recv on device ``t`` reads what was sent
    to it; the device is the multi-device run's current device (0 otherwise).
    """
    channel = op.channel_id.value.data
    pairs = ints(op.properties.get("source_target_pairs"))
    return channel, list(zip(pairs[0::2], pairs[1::2]))


def _device() -> int:
    state = current_device()
    return state.device if state is not None else 0


@register(SendOp)
def _send(op, ctx):
    channels = ctx.runtime.channels
    channel, pairs = _channel_keys(op)

    def send(*operands):
        item = _packed(operands[:-1])
        if not pairs:
            channels.put(channel, item)
        else:
            me = _device()
            for source, target in pairs:
                if source == me:
                    channels.put((channel, target), item)
        return TOKEN

    return send


@register(RecvOp)
def _recv(op, ctx):
    channels = ctx.runtime.channels
    channel, pairs = _channel_keys(op)
    what = f"{op_context(op)} (channel {channel})"
    source = "the host's item" if is_host_transfer(op) else "the sent item"
    zeros = tuple(np.zeros(r.type.get_shape(), numpy_dtype(r.type)) for r in op.results[:-1])
    targets = {t for _, t in pairs}

    def take():
        state = current_device()
        # Another device's send may still be on its way: wait for it (bounded).
        wait = channels.device_timeout if state is not None else None
        if not pairs:
            return channels.get(channel, what, wait)
        me = state.device if state is not None else 0
        if me not in targets:  # not a receiver of this channel: zeros, as collective_permute gives
            return zeros if len(zeros) != 1 else zeros[0]
        return channels.get((channel, me), what, wait)

    return _reader(take, op, what, source)


# ----------------------------------------------------------------------------
# Custom calls
# ----------------------------------------------------------------------------


def custom_call_attributes(op) -> dict:
    """The attributes a custom-call target receives, as Python values.

    ``backend_config`` is the typed-FFI dictionary when there is one (in
    ``mhlo.backend_config``, where JAX puts it, or ``backend_config``), else the
    opaque string ('' when absent).
    """
    attrs = {name: python_from_attribute(value) for name, value in op.properties.items()}
    if "mhlo.backend_config" in attrs:
        attrs["backend_config"] = attrs["mhlo.backend_config"]
    attrs.setdefault("backend_config", "")
    attrs.setdefault("api_version", 0)
    attrs.setdefault("has_side_effect", False)
    return attrs


def _result_spec(t) -> ResultSpec:
    if isinstance(t, TokenType):
        return ResultSpec((), None, t)
    if isinstance(t, TensorType):
        return ResultSpec(tuple(t.get_shape()), numpy_dtype(t), t)
    return ResultSpec((), None, t)


def _read_only(x):
    """A read-only view: a target must not change its operands (they may be shared)."""
    if isinstance(x, np.ndarray):
        x = x.view()
        x.flags.writeable = False
    return x


def _checked_results(out, specs: Sequence[ResultSpec], what: str) -> list:
    values = [out] if len(specs) == 1 and not isinstance(out, (tuple, list)) else list(out or ())
    if len(values) != len(specs):
        raise ExecutionError(f"{what}: the target returned {len(values)} value(s), the call declares {len(specs)}")
    checked = []
    for i, (v, spec) in enumerate(zip(values, specs)):
        if spec.dtype is None:  # token (or tuple) results are passed through
            checked.append(TOKEN if isinstance(spec.type, TokenType) else v)
            continue
        arr = np.asarray(v)
        if arr.shape != spec.shape:
            raise ExecutionError(f"{what}: result #{i} has shape {list(arr.shape)}, the call declares "
                                 f"{format_shape(spec.type, False)}")
        if arr.dtype != spec.dtype:
            if not (np.can_cast(arr.dtype, spec.dtype, "same_kind") and arr.dtype.kind == spec.dtype.kind):
                raise ExecutionError(f"{what}: result #{i} has dtype {arr.dtype}, the call declares "
                                     f"{format_shape(spec.type, False)}")
            arr = arr.astype(spec.dtype)
        checked.append(arr)
    return checked


SHARDING_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                              "MoveToHost", "MoveToDevice", "annotate_device_placement"})
"""Custom-call targets that annotate where a value lives (a sharding, a memory space): the identity here,
where one device holds every value whole (``num_partitions`` programs each run the whole program)."""


def _placement_identity(op, what: str):
    if len(op.operands) != 1 or len(op.results) != 1 or op.operands[0].type.get_shape() != \
            op.results[0].type.get_shape():
        raise UnsupportedError(f"{what}: changes the shape ({op.operands[0].type} -> {op.results[0].type}); "
                               "splitting values over devices needs XLA's SPMD partitioner")
    return lambda x: x


@register(CustomCallOp)
def _custom_call(op, ctx):
    name = op.call_target_name.data
    what = f"{op_context(op)} @{name}"
    if name in SHARDING_TARGETS:
        return _placement_identity(op, what)
    if name in HOST_CALLBACK_TARGETS:  # jax.debug.print, pure_callback, io_callback, eqx.error_if
        return host_callback_kernel(op, what)
    target = custom_call_target(name, op_context(op))
    attrs = custom_call_attributes(op)
    # Targets may run the computations the call names (compiled like any function).
    attrs["called_functions"] = [ctx.function(n) for n in attrs.get("called_computations", [])]
    specs = [_result_spec(r.type) for r in op.results]
    single = len(specs) == 1

    def custom_call(*operands):
        try:
            out = target([_read_only(x) for x in operands], attrs, specs)
        except XlaError:
            raise
        except Exception as e:  # a bug or a failure in the Python target
            raise ExecutionError(f"{what}: the target raised {type(e).__name__}: {e}") from e
        results = _checked_results(out, specs, what)
        return results[0] if single else tuple(results)

    return custom_call
