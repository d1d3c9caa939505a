"""HLO opcodes <-> hlo ops: one read rule and one write rule per opcode, side by side.

A *read* rule builds the hlo op(s) for one HLO instruction: ``read(imp, ins,
args) -> SSAValue`` where ``imp`` is the :class:`~interop.hlo.importer.HloImporter`
(``imp.emit`` appends an op, ``imp.attr`` reads and consumes an attribute,
``imp.region`` / ``imp.callee`` convert called computations), ``ins`` the
parsed :class:`~interop.hlo.syntax.Instruction` and ``args`` its operand
values. It returns the value standing for the instruction (a tuple value for
HLO's tuple-shaped results).

A *write* rule prints one hlo op: ``write(exp, op) -> (opcode, operands,
attributes)`` with ``attributes`` a list of ``(key, text)``; ``exp`` is the
:class:`~interop.hlo.exporter.HloExporter` (``exp.computation`` names the
computation printed for a region or callee).

:data:`READERS` maps opcodes to read rules, :data:`WRITERS` hlo op classes to
write rules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    UnitAttr,
    i64,
)

from xla_dialect.errors import UnsupportedError
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops import (
    collectives,
    constants,
    control_flow,
    conversion,
    data_movement,
    effects,
    elementwise,
    indexing,
    linalg,
    numerics,
    reduction,
    sorting,
    windowed,
)
from xla_dialect.ops.base import i64_array, ints, make_tensor
from xla_dialect.types import TokenType, element_type_of, numpy_dtype

from ..stablehlo.attributes import top_level_parts
from . import attributes as A

READERS: dict[str, Callable] = {}
"""HLO opcode -> read rule."""

WRITERS: dict[type, Callable] = {}
"""hlo op class -> write rule."""


def reads(*opcodes: str):
    def deco(fn):
        for opcode in opcodes:
            READERS[opcode] = fn
        return fn
    return deco


def writes(*op_classes):
    def deco(fn):
        for cls in op_classes:
            WRITERS[cls] = fn
        return fn
    return deco


def _i(value: int) -> IntegerAttr:
    return IntegerAttr(int(value), 64)


def _flag(value: bool) -> IntegerAttr:
    return IntegerAttr(1 if value else 0, 1)


def _bool_prop(op, name: str) -> bool:
    attr = op.properties.get(name)
    return attr is not None and bool(attr.value.data)


def _int_prop(op, name: str, default: int | None = None) -> int | None:
    attr = op.properties.get(name)
    return attr.value.data if attr is not None else default


def _str_prop(op, name: str, default: str | None = None) -> str | None:
    attr = op.properties.get(name)
    return attr.data if attr is not None else default


def _ints_prop(op, name: str) -> tuple[int, ...]:
    return ints(op.properties.get(name))


def _tuple_types(ins) -> list:
    """The element shapes of a tuple-shaped instruction (an error otherwise)."""
    if not isinstance(ins.shape, TupleType):
        raise UnsupportedError(f"{ins.opcode} with several results needs a tuple shape")
    return list(ins.shape.types)


def _results(imp, ins, op_cls, args, props=None, regions=(), multi: bool | None = None):
    """Emit an op whose HLO shape is a tuple when it has several results; return the HLO value."""
    if multi is None:
        multi = isinstance(ins.shape, TupleType)
    if not multi:
        return imp.emit(op_cls, args, props, [ins.shape], regions)[0]
    results = imp.emit(op_cls, args, props, _tuple_types(ins), regions)
    return imp.pack(results, ins.shape)


# ----------------------------------------------------------------------------
# Element-wise
# ----------------------------------------------------------------------------

def _opcode_of(mnemonic: str) -> str:
    return mnemonic.replace("_", "-")


def _elementwise_reader(cls):
    def read(imp, ins, args):
        return imp.emit(cls, args, None, [ins.shape])[0]
    return read


for _cls in elementwise.OPS:
    if _cls is elementwise.CompareOp:
        continue
    READERS[_opcode_of(_cls.name[4:])] = _elementwise_reader(_cls)
READERS["clz"] = READERS["count-leading-zeros"]


def _write_plain(exp, op):
    return _opcode_of(op.name[4:]), list(op.operands), []


for _cls in elementwise.OPS:
    if _cls not in (elementwise.CompareOp, elementwise.SelectOp, elementwise.ClampOp):
        WRITERS[_cls] = _write_plain


@reads("compare")
def _read_compare(imp, ins, args):
    props = {"comparison_direction": StringAttr(imp.attr(ins, "direction", A.string))}
    kind = imp.attr(ins, "type", A.string, None)
    if kind is not None:
        props["compare_type"] = StringAttr(kind)
    return imp.emit(elementwise.CompareOp, args, props, [ins.shape])[0]


@writes(elementwise.CompareOp)
def _write_compare(exp, op):
    attrs = [("direction", _str_prop(op, "comparison_direction"))]
    kind = _str_prop(op, "compare_type")
    if kind is not None:
        attrs.append(("type", kind))
    return "compare", list(op.operands), attrs


@reads("select", "clamp")
def _read_select(imp, ins, args):
    cls = elementwise.SelectOp if ins.opcode == "select" else elementwise.ClampOp
    return imp.emit(cls, args, None, [ins.shape])[0]


@writes(elementwise.SelectOp, elementwise.ClampOp)
def _write_select(exp, op):
    return op.name[4:], list(op.operands), []


# ----------------------------------------------------------------------------
# Conversion, shape ops
# ----------------------------------------------------------------------------

_SIMPLE = {
    "convert": conversion.ConvertOp,
    "bitcast-convert": conversion.BitcastConvertOp,
    "reshape": data_movement.ReshapeOp,
    "copy": data_movement.CopyOp,
    "bitcast": data_movement.BitcastOp,
    "dynamic-update-slice": indexing.DynamicUpdateSliceOp,
    "replica-id": collectives.ReplicaIdOp,
    "partition-id": collectives.PartitionIdOp,
}


def _read_simple(imp, ins, args):
    return imp.emit(_SIMPLE[ins.opcode], args, None, [ins.shape])[0]


def _write_simple(exp, op):
    return _SIMPLE_OPCODES[type(op)], list(op.operands), []


for _opcode, _cls in _SIMPLE.items():
    READERS[_opcode] = _read_simple
    WRITERS[_cls] = _write_simple
_SIMPLE_OPCODES = {cls: opcode for opcode, cls in _SIMPLE.items()}


@reads("broadcast")
def _read_broadcast(imp, ins, args):
    # A scalar's broadcast may leave out dimensions={} (XLA's parser defaults it).
    dims = imp.attr(ins, "dimensions", A.ints, () if args and not args[0].type.get_shape() else None)
    if dims is None:
        imp.attr(ins, "dimensions", A.ints)  # the error naming the missing attribute
    return imp.emit(data_movement.BroadcastInDimOp, args, {"broadcast_dimensions": i64_array(dims)}, [ins.shape])[0]


@writes(data_movement.BroadcastInDimOp)
def _write_broadcast_in_dim(exp, op):
    return "broadcast", [op.operand], [("dimensions", A.format_ints(_ints_prop(op, "broadcast_dimensions")))]


@writes(data_movement.BroadcastOp)
def _write_broadcast(exp, op):
    rank = op.result.type.get_num_dims()
    operand_rank = op.operand.type.get_num_dims()
    return "broadcast", [op.operand], [("dimensions", A.format_ints(range(rank - operand_rank, rank)))]


@reads("transpose")
def _read_transpose(imp, ins, args):
    dims = imp.attr(ins, "dimensions", A.ints)
    return imp.emit(data_movement.TransposeOp, args, {"permutation": i64_array(dims)}, [ins.shape])[0]


@writes(data_movement.TransposeOp)
def _write_transpose(exp, op):
    return "transpose", [op.operand], [("dimensions", A.format_ints(_ints_prop(op, "permutation")))]


@reads("slice")
def _read_slice(imp, ins, args):
    starts, limits, strides = imp.attr(ins, "slice", A.slices)
    props = {"start_indices": i64_array(starts), "limit_indices": i64_array(limits), "strides": i64_array(strides)}
    return imp.emit(data_movement.SliceOp, args, props, [ins.shape])[0]


@writes(data_movement.SliceOp)
def _write_slice(exp, op):
    starts, limits = _ints_prop(op, "start_indices"), _ints_prop(op, "limit_indices")
    strides = _ints_prop(op, "strides") or (1,) * len(starts)
    return "slice", [op.operand], [("slice", A.format_slices(starts, limits, strides))]


@reads("concatenate")
def _read_concatenate(imp, ins, args):
    (dim,) = imp.attr(ins, "dimensions", A.ints)
    return imp.emit(data_movement.ConcatenateOp, args, {"dimension": _i(dim)}, [ins.shape])[0]


@writes(data_movement.ConcatenateOp)
def _write_concatenate(exp, op):
    return "concatenate", list(op.operands), [("dimensions", A.format_ints([_int_prop(op, "dimension")]))]


@reads("pad")
def _read_pad(imp, ins, args):
    lows, highs, interiors = imp.attr(ins, "padding", A.padding)
    props = {"edge_padding_low": i64_array(lows), "edge_padding_high": i64_array(highs),
             "interior_padding": i64_array(interiors)}
    return imp.emit(data_movement.PadOp, args, props, [ins.shape])[0]


@writes(data_movement.PadOp)
def _write_pad(exp, op):
    text = A.format_padding(_ints_prop(op, "edge_padding_low"), _ints_prop(op, "edge_padding_high"),
                            _ints_prop(op, "interior_padding"))
    return "pad", list(op.operands), [("padding", text)]


@reads("reverse")
def _read_reverse(imp, ins, args):
    dims = imp.attr(ins, "dimensions", A.ints)
    return imp.emit(data_movement.ReverseOp, args, {"dimensions": i64_array(dims)}, [ins.shape])[0]


@writes(data_movement.ReverseOp)
def _write_reverse(exp, op):
    return "reverse", [op.operand], [("dimensions", A.format_ints(_ints_prop(op, "dimensions")))]


# ----------------------------------------------------------------------------
# Indexing
# ----------------------------------------------------------------------------

_GATHER_ATTRS = (("offset_dims", "offset_dims"), ("collapsed_slice_dims", "collapsed_slice_dims"),
                 ("start_index_map", "start_index_map"), ("operand_batching_dims", "operand_batching_dims"),
                 ("start_indices_batching_dims", "start_indices_batching_dims"), ("slice_sizes", "slice_sizes"))


@reads("gather")
def _read_gather(imp, ins, args):
    props = {}
    for key, prop in _GATHER_ATTRS:
        value = imp.attr(ins, key, A.ints, None)
        if value is not None:
            props[prop] = i64_array(value)
    props["index_vector_dim"] = _i(imp.attr(ins, "index_vector_dim", A.integer))
    if imp.attr(ins, "indices_are_sorted", A.boolean, False):
        props["indices_are_sorted"] = _flag(True)
    for required in ("offset_dims", "start_index_map", "slice_sizes"):
        props.setdefault(required, i64_array(()))
    return imp.emit(indexing.GatherOp, args, props, [ins.shape])[0]


@writes(indexing.GatherOp)
def _write_gather(exp, op):
    attrs = []
    for key, prop in _GATHER_ATTRS:
        if key == "slice_sizes":
            continue
        values = _ints_prop(op, prop)
        if values or key in ("offset_dims", "collapsed_slice_dims", "start_index_map"):
            attrs.append((key, A.format_ints(values)))
    attrs.append(("index_vector_dim", str(_int_prop(op, "index_vector_dim"))))
    attrs.append(("slice_sizes", A.format_ints(_ints_prop(op, "slice_sizes"))))
    if _bool_prop(op, "indices_are_sorted"):
        attrs.append(("indices_are_sorted", "true"))
    return "gather", list(op.operands), attrs


_SCATTER_ATTRS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                  "input_batching_dims", "scatter_indices_batching_dims")


@reads("scatter")
def _read_scatter(imp, ins, args):
    props = {}
    for key in _SCATTER_ATTRS:
        value = imp.attr(ins, key, A.ints, None)
        if value is not None:
            props[key] = i64_array(value)
    props.setdefault("update_window_dims", i64_array(()))
    props.setdefault("scatter_dims_to_operand_dims", i64_array(()))
    props["index_vector_dim"] = _i(imp.attr(ins, "index_vector_dim", A.integer))
    for flag in ("indices_are_sorted", "unique_indices"):
        if imp.attr(ins, flag, A.boolean, False):
            props[flag] = _flag(True)
    n = (len(args) - 1) // 2
    scalars = [make_tensor(a.type.element_type, []) for a in args[:n]]
    region = imp.region(ins, "to_apply", scalars + scalars, expand=n > 1)
    return _results(imp, ins, indexing.ScatterOp, args, props, [region])


@writes(indexing.ScatterOp)
def _write_scatter(exp, op):
    attrs = [(k, A.format_ints(_ints_prop(op, k))) for k in _SCATTER_ATTRS
             if _ints_prop(op, k) or k in ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims")]
    attrs.append(("index_vector_dim", str(_int_prop(op, "index_vector_dim"))))
    for flag in ("indices_are_sorted", "unique_indices"):
        if _bool_prop(op, flag):
            attrs.append((flag, "true"))
    attrs.append(("to_apply", exp.computation(op.update_computation, "scatter_computation")))
    return "scatter", list(op.operands), attrs


@reads("dynamic-slice")
def _read_dynamic_slice(imp, ins, args):
    sizes = imp.attr(ins, "dynamic_slice_sizes", A.ints)
    return imp.emit(indexing.DynamicSliceOp, args, {"slice_sizes": i64_array(sizes)}, [ins.shape])[0]


@writes(indexing.DynamicSliceOp)
def _write_dynamic_slice(exp, op):
    return "dynamic-slice", list(op.operands), [("dynamic_slice_sizes", A.format_ints(_ints_prop(op, "slice_sizes")))]


# ----------------------------------------------------------------------------
# Linear algebra, convolution, windows
# ----------------------------------------------------------------------------

def _read_precision(imp, ins):
    values = imp.attr(ins, "operand_precision", lambda t: [x.strip() for x in t.strip()[1:-1].split(",") if x.strip()],
                      None)
    if values is None:
        return None
    names = [v.upper() for v in values]
    for v in names:
        if v not in linalg.PRECISIONS:
            raise UnsupportedError(f"operand_precision {v.lower()!r} is not one of "
                                   f"{', '.join(p.lower() for p in linalg.PRECISIONS)}")
    return ArrayAttr([StringAttr(v) for v in names])


def _precision_attr(op) -> list:
    config = op.properties.get("precision_config")
    if config is None or not len(config.data):
        return []
    return [("operand_precision", "{" + ",".join(v.data.lower() for v in config.data) + "}")]


@reads("dot")
def _read_dot(imp, ins, args):
    props = {}
    for key, prop in (("lhs_batch_dims", "lhs_batching_dimensions"), ("rhs_batch_dims", "rhs_batching_dimensions"),
                      ("lhs_contracting_dims", "lhs_contracting_dimensions"),
                      ("rhs_contracting_dims", "rhs_contracting_dimensions")):
        props[prop] = i64_array(imp.attr(ins, key, A.ints, ()))
    precision = _read_precision(imp, ins)
    if precision is not None:
        props["precision_config"] = precision
    algorithm = imp.attr(ins, "algorithm", A.string, None)
    if algorithm is not None:
        reason = _algorithm_not_honoured(algorithm, args, ins.shape)
        if reason is not None:
            return read_opaque(imp, ins, args, reason)
        imp.keep_verbatim(ins, "algorithm")
    args = _upcast_operands(imp, ins, args)
    return imp.emit(linalg.DotGeneralOp, args, props, [ins.shape])[0]


DOT_ALGORITHMS = frozenset({
    "dot_any_f8_any_f8_f32", "dot_any_f8_any_f8_f32_fast_accum", "dot_f16_f16_f16", "dot_f16_f16_f32",
    "dot_bf16_bf16_bf16", "dot_bf16_bf16_f32", "dot_bf16_bf16_f32_x3", "dot_bf16_bf16_f32_x6",
    "dot_bf16_bf16_f32_x9", "dot_tf32_tf32_f32", "dot_tf32_tf32_f32_x3", "dot_f32_f32_f32", "dot_f64_f64_f64",
    "dot_any_f32_f32_f32",
})
"""XLA's dot algorithms (``PrecisionConfig.Algorithm``, as its printer spells them)."""


def _algorithm_not_honoured(algorithm: str, args, shape) -> str | None:
    """None when computing the dot as usual is ``algorithm`` (operands of its input type, accumulated in
    f32/f64); else why not, for the UnsupportedError raised when the module is compiled."""
    if algorithm not in DOT_ALGORITHMS:
        raise UnsupportedError(f"unknown dot algorithm={algorithm} (XLA's are {', '.join(sorted(DOT_ALGORITHMS))})")
    if algorithm in ("dot_f32_f32_f32", "dot_f64_f64_f64", "dot_any_f32_f32_f32"):
        return None
    kinds = {str(a.type.element_type) for a in args}
    inputs = {"dot_bf16_bf16_f32": "bf16", "dot_f16_f16_f32": "f16"}.get(algorithm)
    if inputs is not None and kinds == {inputs} and str(shape.element_type) == "f32":
        return None
    return (f"with algorithm={algorithm} (operands {' and '.join(sorted(kinds))}) rounds or accumulates "
            f"otherwise than the executor's dot, which computes only the default numerics")


@writes(linalg.DotGeneralOp)
def _write_dot_general(exp, op):
    attrs = []
    for key, prop in (("lhs_batch_dims", "lhs_batching_dimensions"), ("rhs_batch_dims", "rhs_batching_dimensions")):
        if _ints_prop(op, prop):
            attrs.append((key, A.format_ints(_ints_prop(op, prop))))
    attrs.append(("lhs_contracting_dims", A.format_ints(_ints_prop(op, "lhs_contracting_dimensions"))))
    attrs.append(("rhs_contracting_dims", A.format_ints(_ints_prop(op, "rhs_contracting_dimensions"))))
    return "dot", list(op.operands), attrs + _precision_attr(op)


@writes(linalg.DotOp)
def _write_dot(exp, op):
    lhs_rank = op.lhs.type.get_num_dims()
    attrs = [("lhs_contracting_dims", A.format_ints([lhs_rank - 1] if lhs_rank else [])),
             ("rhs_contracting_dims", A.format_ints([0] if op.rhs.type.get_num_dims() else []))]
    return "dot", list(op.operands), attrs + _precision_attr(op)


def _window_props(win: dict, rank: int, base: str, window_: str) -> dict:
    sizes = win.get("size", [1] * rank)
    props = {"window_dimensions": sizes}
    if "stride" in win:
        props["window_strides"] = win["stride"]
    if "pad" in win:
        props["padding"] = [v for pair in win["pad"] for v in pair]
    if "lhs_dilate" in win:
        props[base] = win["lhs_dilate"]
    if "rhs_dilate" in win:
        props[window_] = win["rhs_dilate"]
    if "rhs_reversal" in win:
        props["window_reversal"] = win["rhs_reversal"]
    return props


@reads("convolution")
def _read_convolution(imp, ins, args):
    labels = imp.attr(ins, "dim_labels", A.dim_labels)
    nspatial = len(labels["input_spatial_dimensions"])
    win = imp.attr(ins, "window", A.window, {})
    raw = _window_props(win, nspatial, "lhs_dilation", "rhs_dilation")
    raw.pop("window_dimensions", None)
    props = {}
    for key, values in raw.items():
        if key == "window_reversal":
            props[key] = DenseArrayBase_bool(values)
        else:
            props[key] = i64_array(values)
    for key, value in labels.items():
        props[key] = i64_array(value) if isinstance(value, list) else _i(value)
    props["feature_group_count"] = _i(imp.attr(ins, "feature_group_count", A.integer, 1))
    props["batch_group_count"] = _i(imp.attr(ins, "batch_group_count", A.integer, 1))
    precision = _read_precision(imp, ins)
    if precision is not None:
        props["precision_config"] = precision
    args = _upcast_operands(imp, ins, args)
    return imp.emit(windowed.ConvolutionOp, args, props, [ins.shape])[0]


UPCAST = "hlo.operand_upcast"
"""Marks the ``hlo.convert`` the importer puts before a dot/convolution whose operands XLA lets differ in
element type; the exporter prints the dot with the operand as it was written."""


def _upcast_operands(imp, ins, args):
    """Operands of different element types (``bf16`` and ``f32``, ``s8`` and ``f32``...), which XLA's dot and
    convolution take: the narrower converted to the other's type when that is exact, as XLA computes
    them; an error when neither converts exactly."""
    lhs, rhs = args[0].type.element_type, args[1].type.element_type
    if lhs == rhs:
        return args
    if _exact_conversion(lhs, rhs):
        wide, narrow = 1, 0
    elif _exact_conversion(rhs, lhs):
        wide, narrow = 0, 1
    else:
        raise UnsupportedError(f"{ins.opcode} operands {lhs} and {rhs}: neither converts exactly to the other")
    value = args[narrow]
    target = TensorType(args[wide].type.element_type, value.type.get_shape(), value.type.encoding)
    (converted,) = imp.emit(conversion.ConvertOp, [value], None, [target], name=False)
    converted.op.attributes[UPCAST] = UnitAttr()
    out = list(args)
    out[narrow] = converted
    return out


def _exact_conversion(source, target) -> bool:
    """Whether every value of element type ``source`` is a value of ``target``."""
    import ml_dtypes

    a, b = element_type_of(source), element_type_of(target)
    sa, sb = np.dtype(numpy_dtype(source)), np.dtype(numpy_dtype(target))
    if a.kind in ("sint", "uint") and b.kind in ("sint", "uint"):
        ia, ib = ml_dtypes.iinfo(sa), ml_dtypes.iinfo(sb)
        return ib.min <= ia.min and ia.max <= ib.max
    if a.kind in ("sint", "uint") and b.kind == "float":
        ia = ml_dtypes.iinfo(sa)
        return max(abs(int(ia.min)), int(ia.max)) <= 2 ** (ml_dtypes.finfo(sb).nmant + 1)
    if a.kind == "float" and b.kind == "float":
        fa, fb = ml_dtypes.finfo(sa), ml_dtypes.finfo(sb)
        return fb.nmant >= fa.nmant and fb.maxexp >= fa.maxexp and fb.minexp <= fa.minexp
    return False


def DenseArrayBase_bool(values):
    from xdsl.dialects.builtin import DenseArrayBase, i1

    return DenseArrayBase.from_list(i1, [1 if v else 0 for v in values])


def _pairs(flat) -> list[tuple[int, int]]:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


@writes(windowed.ConvolutionOp)
def _write_convolution(exp, op):
    keys = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
            "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions",
            "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions")
    labels = {k: (list(_ints_prop(op, k)) if k.endswith("dimensions") else _int_prop(op, k)) for k in keys}
    rhs_shape = op.rhs.type.get_shape()
    n = len(labels["kernel_spatial_dimensions"])
    sizes = [rhs_shape[d] for d in labels["kernel_spatial_dimensions"]]
    strides = list(_ints_prop(op, "window_strides")) or [1] * n
    pads = _pairs(_ints_prop(op, "padding")) or [(0, 0)] * n
    lhs_d = list(_ints_prop(op, "lhs_dilation")) or [1] * n
    rhs_d = list(_ints_prop(op, "rhs_dilation")) or [1] * n
    rev = list(_ints_prop(op, "window_reversal")) or None
    attrs = []
    if n:
        attrs.append(("window", A.format_window(sizes, strides, pads, lhs_d, rhs_d, rev)))
    attrs.append(("dim_labels", A.format_dim_labels(labels)))
    for key in ("feature_group_count", "batch_group_count"):
        if _int_prop(op, key, 1) != 1:
            attrs.append((key, str(_int_prop(op, key))))
    return "convolution", list(op.operands), attrs + _precision_attr(op)


@reads("reduce-window")
def _read_reduce_window(imp, ins, args):
    n = len(args) // 2
    rank = args[0].type.get_num_dims()
    win = imp.attr(ins, "window", A.window, {})
    raw = _window_props(win, rank, "base_dilations", "window_dilations")
    if "window_reversal" in raw:
        raise UnsupportedError("reduce-window has no rhs_reversal")
    props = {k: i64_array(v) for k, v in raw.items()}
    scalars = [make_tensor(a.type.element_type, []) for a in args[n:]]
    region = imp.region(ins, "to_apply", scalars + scalars, expand=n > 1)
    return _results(imp, ins, windowed.ReduceWindowOp, args, props, [region])


def _window_text(op, rank: int, base: str, window_: str) -> str:
    sizes = _ints_prop(op, "window_dimensions")
    strides = list(_ints_prop(op, "window_strides")) or [1] * rank
    pads = _pairs(_ints_prop(op, "padding")) or [(0, 0)] * rank
    lhs_d = list(_ints_prop(op, base)) or [1] * rank if base else [1] * rank
    rhs_d = list(_ints_prop(op, window_)) or [1] * rank if window_ else [1] * rank
    return A.format_window(sizes, strides, pads, lhs_d, rhs_d)


@writes(windowed.ReduceWindowOp)
def _write_reduce_window(exp, op):
    rank = op.operands[0].type.get_num_dims()
    attrs = [("window", _window_text(op, rank, "base_dilations", "window_dilations")),
             ("to_apply", exp.computation(op.body, "reduce_window_computation"))]
    return "reduce-window", list(op.operands), attrs


@reads("select-and-scatter")
def _read_select_and_scatter(imp, ins, args):
    rank = args[0].type.get_num_dims()
    win = imp.attr(ins, "window", A.window, {})
    raw = _window_props(win, rank, "", "")
    props = {k: i64_array(v) for k, v in raw.items() if k in ("window_dimensions", "window_strides", "padding")}
    scalar = make_tensor(args[0].type.element_type, [])
    select = imp.region(ins, "select", [scalar, scalar])
    scatter = imp.region(ins, "scatter", [scalar, scalar])
    return imp.emit(windowed.SelectAndScatterOp, args, props, [ins.shape], [select, scatter])[0]


@writes(windowed.SelectAndScatterOp)
def _write_select_and_scatter(exp, op):
    rank = op.operand.type.get_num_dims()
    attrs = [("window", _window_text(op, rank, "", "")),
             ("select", exp.computation(op.select, "select_computation")),
             ("scatter", exp.computation(op.scatter, "scatter_computation"))]
    return "select-and-scatter", list(op.operands), attrs


# ----------------------------------------------------------------------------
# Reductions, map, sort
# ----------------------------------------------------------------------------

@reads("reduce")
def _read_reduce(imp, ins, args):
    n = len(args) // 2
    dims = imp.attr(ins, "dimensions", A.ints)
    scalars = [make_tensor(a.type.element_type, []) for a in args[n:]]
    region = imp.region(ins, "to_apply", scalars + scalars, expand=n > 1)
    return _results(imp, ins, reduction.ReduceOp, args, {"dimensions": i64_array(dims)}, [region])


@writes(reduction.ReduceOp)
def _write_reduce(exp, op):
    return "reduce", list(op.operands), [("dimensions", A.format_ints(_ints_prop(op, "dimensions"))),
                                         ("to_apply", exp.computation(op.body, "reduce_computation"))]


@reads("map")
def _read_map(imp, ins, args):
    dims = imp.attr(ins, "dimensions", A.ints, None)
    rank = ins.shape.get_num_dims()
    scalars = [make_tensor(a.type.element_type, []) for a in args]
    region = imp.region(ins, "to_apply", scalars)
    props = {"dimensions": i64_array(dims if dims is not None else range(rank))}
    return imp.emit(reduction.MapOp, args, props, [ins.shape], [region])[0]


@writes(reduction.MapOp)
def _write_map(exp, op):
    return "map", list(op.operands), [("dimensions", A.format_ints(_ints_prop(op, "dimensions"))),
                                      ("to_apply", exp.computation(op.computation, "map_computation"))]


@reads("sort")
def _read_sort(imp, ins, args):
    (dim,) = imp.attr(ins, "dimensions", A.ints)
    props = {"dimension": _i(dim)}
    if imp.attr(ins, "is_stable", A.boolean, False):
        props["is_stable"] = _flag(True)
    scalars = [make_tensor(a.type.element_type, []) for a in args]
    region = imp.region(ins, "to_apply", [t for s in scalars for t in (s, s)])
    return _results(imp, ins, sorting.SortOp, args, props, [region])


@writes(sorting.SortOp)
def _write_sort(exp, op):
    attrs = [("dimensions", A.format_ints([_int_prop(op, "dimension")]))]
    if _bool_prop(op, "is_stable"):
        attrs.append(("is_stable", "true"))
    attrs.append(("to_apply", exp.computation(op.comparator, "compare_computation")))
    return "sort", list(op.operands), attrs


# ----------------------------------------------------------------------------
# Numerics
# ----------------------------------------------------------------------------

@reads("reduce-precision")
def _read_reduce_precision(imp, ins, args):
    props = {"exponent_bits": IntegerAttr(imp.attr(ins, "exponent_bits", A.integer), 32),
             "mantissa_bits": IntegerAttr(imp.attr(ins, "mantissa_bits", A.integer), 32)}
    return imp.emit(numerics.ReducePrecisionOp, args, props, [ins.shape])[0]


@writes(numerics.ReducePrecisionOp)
def _write_reduce_precision(exp, op):
    return "reduce-precision", [op.operand], [("exponent_bits", str(_int_prop(op, "exponent_bits"))),
                                              ("mantissa_bits", str(_int_prop(op, "mantissa_bits")))]


@reads("fft")
def _read_fft(imp, ins, args):
    props = {"fft_type": StringAttr(imp.attr(ins, "fft_type", A.string)),
             "fft_length": i64_array(imp.attr(ins, "fft_length", A.ints))}
    return imp.emit(numerics.FftOp, args, props, [ins.shape])[0]


@writes(numerics.FftOp)
def _write_fft(exp, op):
    return "fft", [op.operand], [("fft_type", _str_prop(op, "fft_type")),
                                 ("fft_length", A.format_ints(_ints_prop(op, "fft_length")))]


@reads("cholesky")
def _read_cholesky(imp, ins, args):
    props = {"lower": _flag(imp.attr(ins, "lower", A.boolean, False))}
    return imp.emit(numerics.CholeskyOp, args, props, [ins.shape])[0]


@writes(numerics.CholeskyOp)
def _write_cholesky(exp, op):
    return "cholesky", [op.a], [("lower", "true" if _bool_prop(op, "lower") else "false")]


@reads("triangular-solve")
def _read_triangular_solve(imp, ins, args):
    props = {k: _flag(imp.attr(ins, k, A.boolean, False)) for k in ("left_side", "lower", "unit_diagonal")}
    props["transpose_a"] = StringAttr(imp.attr(ins, "transpose_a", A.string, "NO_TRANSPOSE"))
    return imp.emit(numerics.TriangularSolveOp, args, props, [ins.shape])[0]


@writes(numerics.TriangularSolveOp)
def _write_triangular_solve(exp, op):
    attrs = [(k, "true" if _bool_prop(op, k) else "false") for k in ("left_side", "lower", "unit_diagonal")]
    attrs.append(("transpose_a", _str_prop(op, "transpose_a", "NO_TRANSPOSE")))
    return "triangular-solve", list(op.operands), attrs


_BATCH_NORM = {"batch-norm-training": numerics.BatchNormTrainingOp,
               "batch-norm-inference": numerics.BatchNormInferenceOp,
               "batch-norm-grad": numerics.BatchNormGradOp}


@reads(*_BATCH_NORM)
def _read_batch_norm(imp, ins, args):
    props = {"epsilon": FloatAttr(imp.attr(ins, "epsilon", A.floating), 32),
             "feature_index": _i(imp.attr(ins, "feature_index", A.integer))}
    cls = _BATCH_NORM[ins.opcode]
    return _results(imp, ins, cls, args, props, multi=cls is not numerics.BatchNormInferenceOp)


@writes(*_BATCH_NORM.values())
def _write_batch_norm(exp, op):
    opcode = next(k for k, v in _BATCH_NORM.items() if v is type(op))
    eps = op.properties["epsilon"].value.data
    return opcode, list(op.operands), [("epsilon", repr(float(np.float32(eps)))),
                                       ("feature_index", str(_int_prop(op, "feature_index")))]


_DISTRIBUTIONS = {"rng_uniform": "UNIFORM", "rng_normal": "NORMAL"}
_ALGORITHMS = {"rng_default": "DEFAULT", "rng_three_fry": "THREE_FRY", "rng_philox": "PHILOX"}


@reads("rng")
def _read_rng(imp, ins, args):
    dist = imp.attr(ins, "distribution", A.string)
    if dist not in _DISTRIBUTIONS:
        raise UnsupportedError(f"rng distribution={dist} is not one of {', '.join(_DISTRIBUTIONS)}")
    dims = ins.shape.get_shape()
    shape_type = make_tensor(i64, [len(dims)])
    shape = imp.emit(constants.ConstantOp, [], {"value": DenseLiteralAttr.from_array(
        np.array(dims, np.int64), shape_type)}, [shape_type], name=False)[0]
    return imp.emit(numerics.RngOp, [*args, shape], {"rng_distribution": StringAttr(_DISTRIBUTIONS[dist])},
                    [ins.shape])[0]


@writes(numerics.RngOp)
def _write_rng(exp, op):
    dist = {v: k for k, v in _DISTRIBUTIONS.items()}[_str_prop(op, "rng_distribution")]
    return "rng", [op.a, op.b], [("distribution", dist)]


@reads("rng-bit-generator")
def _read_rng_bit_generator(imp, ins, args):
    alg = imp.attr(ins, "algorithm", A.string, "rng_default")
    if alg not in _ALGORITHMS:
        raise UnsupportedError(f"rng-bit-generator algorithm={alg} is not one of {', '.join(_ALGORITHMS)}")
    return _results(imp, ins, numerics.RngBitGeneratorOp, args, {"rng_algorithm": StringAttr(_ALGORITHMS[alg])},
                    multi=True)


@writes(numerics.RngBitGeneratorOp)
def _write_rng_bit_generator(exp, op):
    alg = {v: k for k, v in _ALGORITHMS.items()}[_str_prop(op, "rng_algorithm")]
    return "rng-bit-generator", [op.initial_state], [("algorithm", alg)]


# ----------------------------------------------------------------------------
# Constants
# ----------------------------------------------------------------------------

@reads("constant")
def _read_constant(imp, ins, args):
    shape = ins.shape
    if not isinstance(shape, TensorType):
        raise UnsupportedError("tuple constants are not supported; write one constant per element")
    element = element_type_of(shape.element_type)
    dtype = numpy_dtype(shape.element_type)
    count = int(np.prod(shape.get_shape(), dtype=np.int64))
    values = A.literal_values(ins.literal or "", np.dtype(dtype), element.kind, count, element.xla_name)
    array = values.reshape(shape.get_shape())
    plain = make_tensor(shape.element_type, shape.get_shape())
    return imp.emit(constants.ConstantOp, [], {"value": DenseLiteralAttr.from_array(array, plain)}, [shape])[0]


def write_constant_literal(op) -> str:
    lit = op.value.data
    return A.format_literal(np.asarray(lit.array), element_type_of(lit.type.element_type).kind)


@reads("iota")
def _read_iota(imp, ins, args):
    return imp.emit(constants.IotaOp, [], {"iota_dimension": _i(imp.attr(ins, "iota_dimension", A.integer))},
                    [ins.shape])[0]


@writes(constants.IotaOp)
def _write_iota(exp, op):
    return "iota", [], [("iota_dimension", str(_int_prop(op, "iota_dimension")))]


# ----------------------------------------------------------------------------
# Structure: tuples, calls, fusions, control flow
# ----------------------------------------------------------------------------

@reads("tuple")
def _read_tuple(imp, ins, args):
    return imp.emit(control_flow.TupleOp, args, None, [ins.shape])[0]


@writes(control_flow.TupleOp)
def _write_tuple(exp, op):
    return "tuple", list(op.operands), []


@reads("get-tuple-element")
def _read_get_tuple_element(imp, ins, args):
    index = imp.attr(ins, "index", A.integer)
    return imp.emit(control_flow.GetTupleElementOp, args, {"index": _i(index)}, [ins.shape])[0]


@writes(control_flow.GetTupleElementOp)
def _write_get_tuple_element(exp, op):
    return "get-tuple-element", [op.operand], [("index", str(_int_prop(op, "index")))]


@reads("call")
def _read_call(imp, ins, args):
    callee = imp.callee(ins, "to_apply")
    return imp.emit(control_flow.CallOp, args, {"callee": SymbolRefAttr(callee)}, [ins.shape])[0]


@writes(control_flow.CallOp)
def _write_call(exp, op):
    return "call", list(op.operands), [("to_apply", exp.function(op.callee.string_value()))]


@reads("fusion")
def _read_fusion(imp, ins, args):
    callee = imp.callee(ins, "calls")
    props = {"callee": SymbolRefAttr(callee)}
    kind = imp.attr(ins, "kind", A.string, None)
    if kind is not None:
        props["kind"] = StringAttr(kind)
    return imp.emit(control_flow.FusionOp, args, props, [ins.shape])[0]


@writes(control_flow.FusionOp)
def _write_fusion(exp, op):
    return "fusion", list(op.operands), [("kind", _str_prop(op, "kind", "kLoop")),
                                         ("calls", exp.function(op.callee.string_value()))]


@reads("while")
def _read_while(imp, ins, args):
    types = [a.type for a in args]
    cond = imp.region(ins, "condition", types)
    body = imp.region(ins, "body", types)
    return imp.emit(control_flow.WhileOp, args, None, [ins.shape], [cond, body])[0]


@writes(control_flow.WhileOp)
def _write_while(exp, op):
    return "while", list(op.operands), [("condition", exp.computation(op.cond, "while_condition")),
                                        ("body", exp.computation(op.body, "while_body"))]


@reads("conditional")
def _read_conditional(imp, ins, args):
    if "branch_computations" in ins.attrs:
        names = imp.attr(ins, "branch_computations", A.computations)
        keys = [None] * len(names)
    else:
        names = [None, None]
        keys = ["true_computation", "false_computation"]
    regions = []
    for b, (name, key) in enumerate(zip(names, keys)):
        regions.append(imp.region(ins, key, [args[1 + b].type], name=name))
    return imp.emit(control_flow.ConditionalOp, args, None, [ins.shape], regions)[0]


@writes(control_flow.ConditionalOp)
def _write_conditional(exp, op):
    regions = list(op.branches)
    selector = op.operands[0]
    if element_type_of(selector.type.element_type).kind == "pred":
        attrs = [("true_computation", exp.computation(regions[0], "true_computation")),
                 ("false_computation", exp.computation(regions[1], "false_computation"))]
    else:
        names = [exp.computation(r, f"branch_{b}") for b, r in enumerate(regions)]
        attrs = [("branch_computations", "{" + ", ".join(names) + "}")]
    return "conditional", list(op.operands), attrs


# ----------------------------------------------------------------------------
# Side effects: tokens, infeed/outfeed, send/recv, custom calls
# ----------------------------------------------------------------------------

@reads("after-all", "create-token")
def _read_after_all(imp, ins, args):
    if not args:
        return imp.emit(effects.CreateTokenOp, [], None, [TokenType()])[0]
    return imp.emit(effects.AfterAllOp, args, None, [TokenType()])[0]


@writes(effects.CreateTokenOp, effects.AfterAllOp)
def _write_after_all(exp, op):
    return "after-all", list(op.operands), []


@reads("add-dependency")
def _read_add_dependency(imp, ins, args):
    # An ordering edge for XLA's scheduler: the value is the first operand's (execution here is in order).
    if len(args) != 2:
        raise UnsupportedError(f"add-dependency takes 2 operands (a value and a token), got {len(args)}")
    return args[0]


@reads("domain")
def _read_domain(imp, ins, args):
    imp.attr(ins, "domain", A.string, None)
    return args[0]


@reads("opt-barrier")
def _read_opt_barrier(imp, ins, args):
    return imp.emit(effects.OptimizationBarrierOp, args, None, [ins.shape])[0]


@writes(effects.OptimizationBarrierOp)
def _write_opt_barrier(exp, op):
    return "opt-barrier", exp.one_operand(op), []


@reads("infeed")
def _read_infeed(imp, ins, args):
    config = imp.attr(ins, "infeed_config", A.string, None)
    data, token = _tuple_types(ins)
    leaves = list(data.types) if isinstance(data, TupleType) else [data]
    props = {"infeed_config": StringAttr(config)} if config else {}
    results = imp.emit(effects.InfeedOp, args, props, leaves + [token])
    data_value = imp.pack(results[:-1], data) if isinstance(data, TupleType) else results[0]
    return imp.pack([data_value, results[-1]], ins.shape)


@writes(effects.InfeedOp)
def _write_infeed(exp, op):
    config = _str_prop(op, "infeed_config")
    return "infeed", list(op.operands), [("infeed_config", A.quote(config))] if config else []


@reads("outfeed")
def _read_outfeed(imp, ins, args):
    config = imp.attr(ins, "outfeed_config", A.string, None)
    imp.attr(ins, "outfeed_shape", A.string, None)
    data, token = args
    leaves = imp.unpack(data) if isinstance(data.type, TupleType) else [data]
    props = {"outfeed_config": StringAttr(config)} if config else {}
    return imp.emit(effects.OutfeedOp, [*leaves, token], props, [TokenType()])[0]


@writes(effects.OutfeedOp)
def _write_outfeed(exp, op):
    config = _str_prop(op, "outfeed_config")
    operands = exp.packed_operands(op, list(op.operands)[:-1]) + [op.operands[-1]]
    return "outfeed", operands, [("outfeed_config", A.quote(config))] if config else []


API_VERSION_NAMES = [effects.API_VERSIONS[v] for v in sorted(effects.API_VERSIONS)]
"""XLA's custom-call API version names, indexed by number."""


def _read_custom_call(imp, ins, args):
    target = imp.attr(ins, "custom_call_target", A.string)
    if target == "TopK":
        return _read_topk_custom_call(imp, ins, args)
    props = {"call_target_name": StringAttr(target)}
    version = imp.attr(ins, "api_version", A.string, None)
    if version is not None:
        if version not in API_VERSION_NAMES:
            raise UnsupportedError(f"api_version={version} is not one of {', '.join(API_VERSION_NAMES)}")
        props["api_version"] = IntegerAttr(API_VERSION_NAMES.index(version), 32)
    if version == API_VERSION_NAMES[effects.TYPED_FFI]:
        # Typed FFI: the attributes the target decodes, an MLIR dictionary; kept as the StableHLO
        # importer keeps JAX's (``mhlo.backend_config``), so targets read them the same way.
        config = imp.attr(ins, "backend_config", A.ffi_dictionary, None)
        if config is not None:
            props["mhlo.backend_config"] = config
    else:
        config = imp.attr(ins, "backend_config", lambda t: t, None)
        if config is not None:
            props["backend_config"] = StringAttr(A.string(config) if config.startswith('"') else config)
    if imp.attr(ins, "custom_call_has_side_effect", A.boolean, False):
        props["has_side_effect"] = _flag(True)
    layouts = imp.attr(ins, "operand_layout_constraints", lambda t: t, None)
    if layouts is not None:
        shapes = [imp.shape_of_text(s, ins) for s in top_level_parts(layouts.strip()[1:-1])]
        from xla_dialect.layout import layout_of

        props["operand_layouts"] = ArrayAttr([i64_array(layout_of(s).minor_to_major) for s in shapes])
        result_types = list(ins.shape.types) if isinstance(ins.shape, TupleType) else [ins.shape]
        props["result_layouts"] = ArrayAttr([i64_array(layout_of(t).minor_to_major) for t in result_types])
    called = imp.attr(ins, "called_computations", A.computations, None)
    if called:
        props["called_computations"] = ArrayAttr([SymbolRefAttr(imp.callee_named(ins, c)) for c in called])
    aliasing = imp.attr(ins, "output_to_operand_aliasing", lambda t: t, None)
    if aliasing is not None:
        imp.keep(ins, "output_to_operand_aliasing")
    return _results(imp, ins, effects.CustomCallOp, args, props)


READERS["custom-call"] = _read_custom_call




@writes(effects.CustomCallOp)
def _write_custom_call(exp, op):
    attrs = [("custom_call_target", A.quote(_str_prop(op, "call_target_name")))]
    if _bool_prop(op, "has_side_effect"):
        attrs.append(("custom_call_has_side_effect", "true"))
    config = op.properties.get("backend_config")
    ffi = op.properties.get("mhlo.backend_config", config)
    if isinstance(ffi, DictionaryAttr):  # typed-FFI attributes, wherever the call keeps them
        attrs.append(("backend_config", A.format_ffi_dictionary(ffi)))
    elif isinstance(config, StringAttr) and config.data:
        text = config.data
        attrs.append(("backend_config", text if text.startswith("{") and text.endswith("}") else A.quote(text)))
    called = op.properties.get("called_computations")
    if called is not None and len(called.data):
        attrs.append(("called_computations",
                      "{" + ", ".join(exp.function(c.string_value()) for c in called.data) + "}"))
    layouts = op.properties.get("operand_layouts")
    if layouts is not None:
        from xla_dialect.layout import Layout
        from xla_dialect.shape import format_shape

        shapes = []
        for v, lay in zip(op.operands, layouts.data):
            t = v.type
            shapes.append(format_shape(TensorType(t.element_type, t.get_shape(), _layout_attr(Layout(ints(lay))))))
        attrs.append(("operand_layout_constraints", "{" + ", ".join(shapes) + "}"))
    version = _int_prop(op, "api_version")
    if isinstance(ffi, DictionaryAttr):
        version = effects.TYPED_FFI  # as XLA converts JAX's mhlo.backend_config calls
    if version is not None:
        attrs.append(("api_version", API_VERSION_NAMES[version]))
    return "custom-call", list(op.operands), attrs


def custom_call_result_types(op) -> list:
    """A custom call's result types, as its result shapes are printed: a result type without a
    layout of its own takes the call's ``result_layouts`` entry (a StableHLO import keeps layouts
    only there). XLA holds the target to the layouts of its result shapes (jaxlib's LAPACK
    kernels write column-major matrices), so the default layout would misread them."""
    from xla_dialect.layout import Layout, layout_of, with_layout

    types = [r.type for r in op.results]
    layouts = op.properties.get("result_layouts")
    if layouts is None:
        return types
    return [with_layout(t, Layout(ints(lay))) if isinstance(t, TensorType) and layout_of(t) is None else t
            for t, lay in zip(types, layouts.data)]


def _layout_attr(layout):
    from xla_dialect.layout import LayoutAttr

    return LayoutAttr(layout)


@reads("get-dimension-size", "set-dimension-size")
def _read_dimension_size(imp, ins, args):
    (dim,) = imp.attr(ins, "dimensions", A.ints)
    cls = effects.GetDimensionSizeOp if ins.opcode == "get-dimension-size" else effects.SetDimensionSizeOp
    return imp.emit(cls, args, {"dimension": _i(dim)}, [ins.shape])[0]


@writes(effects.GetDimensionSizeOp, effects.SetDimensionSizeOp)
def _write_dimension_size(exp, op):
    opcode = "get-dimension-size" if isinstance(op, effects.GetDimensionSizeOp) else "set-dimension-size"
    return opcode, list(op.operands), [("dimensions", A.format_ints([_int_prop(op, "dimension")]))]


# ----------------------------------------------------------------------------
# Collectives
# ----------------------------------------------------------------------------

def _groups_prop(groups: list[list[int]]):
    width = max((len(g) for g in groups), default=0)
    rows = [list(g) + [-1] * (width - len(g)) for g in groups]
    array = np.array(rows, dtype=np.int64).reshape(len(rows), width)
    t = TensorType(i64, [len(rows), width])
    return DenseIntOrFPElementsAttr.from_list(t, array.reshape(-1).tolist())


def _groups_of(op, name: str = "replica_groups") -> list[list[int]]:
    attr = op.properties.get(name)
    if attr is None:
        return []
    shape = attr.type.get_shape()
    values = [int(v) for v in attr.get_values()]
    width = shape[1] if len(shape) == 2 else 0
    rows = [values[i * width:(i + 1) * width] for i in range(shape[0])] if width else []
    return [[v for v in r if v >= 0] for r in rows]


def _collective_props(imp, ins) -> dict:
    props = {"replica_groups": _groups_prop(imp.attr(ins, "replica_groups", A.replica_groups, []))}
    channel = imp.attr(ins, "channel_id", A.integer, None)
    if channel is not None:
        props["channel_id"] = _i(channel)
    if imp.attr(ins, "use_global_device_ids", A.boolean, False):
        props["use_global_device_ids"] = UnitAttr()
    imp.attr(ins, "constrain_layout", A.boolean, None)
    return props


def _collective_attrs(op) -> list:
    attrs = []
    channel = _int_prop(op, "channel_id")
    if channel is not None and channel > 0:
        attrs.append(("channel_id", str(channel)))
    attrs.append(("replica_groups", A.format_int_lists(_groups_of(op))))
    if op.properties.get("use_global_device_ids") is not None:
        attrs.append(("use_global_device_ids", "true"))
    return attrs


def _leaves_of(imp, args):
    out = []
    for a in args:
        out.extend(imp.unpack(a) if isinstance(a.type, TupleType) else [a])
    return out


@reads("all-reduce", "all-reduce-start")
def _read_all_reduce(imp, ins, args):
    props = _collective_props(imp, ins)
    args = _leaves_of(imp, args)
    scalar = make_tensor(args[0].type.element_type, [])
    region = imp.region(ins, "to_apply", [scalar, scalar])
    return _results(imp, ins, collectives.AllReduceOp, args, props, [region])


@writes(collectives.AllReduceOp)
def _write_all_reduce(exp, op):
    return "all-reduce", list(op.operands), _collective_attrs(op) + [
        ("to_apply", exp.computation(op.computation, "all_reduce_computation"))]


@reads("reduce-scatter")
def _read_reduce_scatter(imp, ins, args):
    props = _collective_props(imp, ins)
    (dim,) = imp.attr(ins, "dimensions", A.ints)
    props["scatter_dimension"] = _i(dim)
    scalar = make_tensor(args[0].type.element_type, [])
    region = imp.region(ins, "to_apply", [scalar, scalar])
    return _results(imp, ins, collectives.ReduceScatterOp, args, props, [region])


@writes(collectives.ReduceScatterOp)
def _write_reduce_scatter(exp, op):
    return "reduce-scatter", list(op.operands), _collective_attrs(op) + [
        ("dimensions", A.format_ints([_int_prop(op, "scatter_dimension")])),
        ("to_apply", exp.computation(op.computation, "reduce_scatter_computation"))]


@reads("all-gather", "all-gather-start")
def _read_all_gather(imp, ins, args):
    props = _collective_props(imp, ins)
    (dim,) = imp.attr(ins, "dimensions", A.ints)
    props["all_gather_dim"] = _i(dim)
    if ins.opcode == "all-gather-start":  # shape (operands, results)
        results = _tuple_types(ins)[1]
        types = list(results.types) if isinstance(results, TupleType) else [results]
        values = imp.emit(collectives.AllGatherOp, args, props, types)
        return imp.pack(values, results) if isinstance(results, TupleType) else values[0]
    return _results(imp, ins, collectives.AllGatherOp, args, props)


@writes(collectives.AllGatherOp)
def _write_all_gather(exp, op):
    return "all-gather", list(op.operands), _collective_attrs(op) + [
        ("dimensions", A.format_ints([_int_prop(op, "all_gather_dim")]))]


@reads("all-to-all")
def _read_all_to_all(imp, ins, args):
    props = _collective_props(imp, ins)
    dims = imp.attr(ins, "dimensions", A.ints, None)
    if dims is None:
        return _read_tuple_all_to_all(imp, ins, _leaves_of(imp, args), props)
    (dim,) = dims
    groups = _groups_of_props(props)
    count = len(groups[0]) if groups else imp.replica_count()
    props.update(split_dimension=_i(dim), concat_dimension=_i(dim), split_count=_i(count))
    return _results(imp, ins, collectives.AllToAllOp, args, props)


def _read_tuple_all_to_all(imp, ins, args, props):
    """XLA's tuple all-to-all (no ``dimensions=``; what the SPMD partitioner emits): member ``i`` of a group
    sends its operand ``j`` to member ``j``, whose result ``i`` it becomes. Read as the array all-to-all of the
    operands stacked on a new leading dimension (split and concatenated there), then taken apart: the same
    values, so the operands must have one shape and element type, as the partitioner's have."""
    types = _tuple_types(ins) if isinstance(ins.shape, TupleType) else [ins.shape]
    first = args[0].type if args else None
    if (not args or len(types) != len(args) or any(
            a.type.element_type != first.element_type or list(a.type.get_shape()) != list(first.get_shape())
            for a in args)):
        shown = ", ".join(str(list(a.type.get_shape())) for a in args)
        raise UnsupportedError(f"tuple all-to-all: expected one operand per group member, all of one shape and "
                               f"element type, and as many results; got operands [{shown}] and {len(types)} results")
    count, shape, element = len(args), list(first.get_shape()), first.element_type
    groups = _groups_of_props(props)
    if groups and len(groups[0]) != count:
        raise UnsupportedError(f"tuple all-to-all: {count} operands for groups of {len(groups[0])} devices "
                               f"{groups}; expected one operand per group member")
    one = make_tensor(element, [1, *shape])
    stacked_type = make_tensor(element, [count, *shape])
    parts = [imp.emit(data_movement.ReshapeOp, [a], None, [one], name=False)[0] for a in args]
    stacked = imp.emit(data_movement.ConcatenateOp, parts, {"dimension": _i(0)}, [stacked_type], name=False)[0]
    props.update(split_dimension=_i(0), concat_dimension=_i(0), split_count=_i(count))
    (exchanged,) = imp.emit(collectives.AllToAllOp, [stacked], props, [stacked_type])
    results = []
    for i, t in enumerate(types):
        limits = [i + 1, *shape]
        piece = imp.emit(data_movement.SliceOp, [exchanged], {
            "start_indices": i64_array([i] + [0] * len(shape)), "limit_indices": i64_array(limits),
            "strides": i64_array([1] * (len(shape) + 1))}, [one], name=False)[0]
        results.append(imp.emit(data_movement.ReshapeOp, [piece], None, [t], name=False)[0])
    if not isinstance(ins.shape, TupleType):
        return results[0]
    return imp.pack(results, ins.shape, name=False)


def _groups_of_props(props) -> list[list[int]]:
    class _Op:
        properties = props

    return _groups_of(_Op)


@writes(collectives.AllToAllOp)
def _write_all_to_all(exp, op):
    split, concat = _int_prop(op, "split_dimension"), _int_prop(op, "concat_dimension")
    if split != concat:
        raise UnsupportedError(f"HLO text has no all-to-all with split_dimension {split} != concat_dimension "
                               f"{concat}")
    return "all-to-all", list(op.operands), _collective_attrs(op) + [("dimensions", A.format_ints([split]))]


@reads("collective-permute", "collective-permute-start")
def _read_collective_permute(imp, ins, args):
    if "slice_sizes" in ins.attrs:
        return _read_collective_permute_of_slices(imp, ins, args)
    pairs = imp.attr(ins, "source_target_pairs", A.int_lists)
    props = {"source_target_pairs": _groups_prop(pairs)}
    channel = imp.attr(ins, "channel_id", A.integer, None)
    if channel is not None:
        props["channel_id"] = _i(channel)
    shape = ins.shape
    if ins.opcode == "collective-permute-start":
        shape = _tuple_types(ins)[1]
    return imp.emit(collectives.CollectivePermuteOp, args, props, [shape])[0]


def _read_collective_permute_of_slices(imp, ins, args):
    """``collective-permute(input, output, input_start_indices, output_start_indices), slice_sizes={{...}}``:
    XLA's in-place collective-permute of slices (each pair's slice of the input written into the target's
    output buffer at its start indices). Read and checked as XLA's parser checks it (exactly four operands,
    pairs of two), kept as written (an opaque op, attributes verbatim, printed back); the executor has no
    kernel for it -- the indices' per-pair layout is not specified by XLA (its parser has a TODO there) --
    so compiling it raises an UnsupportedError naming the instruction's file:line:col."""
    pairs = imp.attr(ins, "source_target_pairs", A.int_lists)
    if any(len(p) != 2 for p in pairs):
        imp.fail("expects 'source_target_pairs=' to be a list of pairs", ins)
    imp.attr(ins, "slice_sizes", A.int_lists)
    imp.attr(ins, "channel_id", A.integer, None)
    if len(args) != 4:
        imp.fail(f"{ins.opcode} with slice_sizes takes exactly four operands (input, output, input start "
                 f"indices, output start indices) for its dynamic slices and in-place update; got {len(args)}",
                 ins)
    reason = ("with slice_sizes (XLA's in-place collective-permute of slices) has no kernel in the NumPy "
              "executor")
    if ins.opcode == "collective-permute-start":  # its done hands over the output buffer: (..., output, ...)
        # (printed back as the synchronous collective-permute, as the other collective starts are)
        ins = type(ins)(ins.name, _tuple_types(ins)[1], "collective-permute", ins.operands, ins.operand_shapes,
                        ins.literal, ins.attrs, ins.is_root, ins.pos)
    return read_opaque(imp, ins, args, reason)


@writes(collectives.CollectivePermuteOp)
def _write_collective_permute(exp, op):
    attrs = []
    channel = _int_prop(op, "channel_id")
    if channel is not None and channel > 0:
        attrs.append(("channel_id", str(channel)))
    attrs.append(("source_target_pairs", A.format_int_lists(_groups_of(op, "source_target_pairs"))))
    return "collective-permute", list(op.operands), attrs


@reads("collective-broadcast")
def _read_collective_broadcast(imp, ins, args):
    props = _collective_props(imp, ins)
    props.pop("use_global_device_ids", None)
    return _results(imp, ins, collectives.CollectiveBroadcastOp, args, props)


@writes(collectives.CollectiveBroadcastOp)
def _write_collective_broadcast(exp, op):
    return "collective-broadcast", list(op.operands), _collective_attrs(op)


@writes(collectives.ReplicaIdOp, collectives.PartitionIdOp)
def _write_ids(exp, op):
    return ("replica-id" if isinstance(op, collectives.ReplicaIdOp) else "partition-id"), [], []


# ----------------------------------------------------------------------------
# Asynchronous pairs: *-start computes, *-done hands the result over
# ----------------------------------------------------------------------------

@reads("all-reduce-done", "all-gather-done", "collective-permute-done", "copy-done", "async-done",
       "send-done", "recv-done")
def _read_done(imp, ins, args):
    _check_pair_attributes(imp, ins)
    return imp.async_result(ins)


@reads("async-update")
def _read_async_update(imp, ins, args):
    _check_pair_attributes(imp, ins)
    return imp.async_forward(ins)


_PAIR_ATTRIBUTES = {"channel_id": A.integer, "is_host_transfer": A.boolean, "calls": A.computation}
"""Attributes XLA prints on a done (or update) again: they must say what its start says."""


def _check_pair_attributes(imp, ins) -> None:
    """``send-done(s), channel_id=1``, ``async-done(a), calls=f``: XLA repeats the start's channel or
    computation on the done; read, and checked against the start."""
    start = imp.start_instruction(ins)
    for key, reader in _PAIR_ATTRIBUTES.items():
        if key not in ins.attrs:
            continue
        value = imp.attr(ins, key, reader)
        if key == "calls" and ins.opcode in ("send-done", "recv-done"):
            raise UnsupportedError(f"{ins.opcode} takes no calls=")
        if start is None:
            continue
        given = start.attrs.get(key)
        theirs = reader(given) if given is not None else ({"channel_id": 0, "is_host_transfer": False}.get(key))
        if key == "calls" and given is None and start.opcode != "async-start":
            continue  # X-start wraps X: its computation is implicit
        if theirs != value:
            raise UnsupportedError(f"{key}={ins.attrs[key]} differs from the {start.opcode} %{start.name} it "
                                   f"completes ({key}={given if given is not None else theirs})")


@reads("copy-start")
def _read_copy_start(imp, ins, args):
    imp.attr(ins, "cross_program_prefetch_index", A.integer, None)
    result = _tuple_types(ins)[0]
    value = imp.emit(data_movement.CopyOp, args, None, [result])[0]
    return imp.async_start(ins, value)


@reads("async-start")
def _read_async_start(imp, ins, args):
    callee = imp.callee(ins, "calls")
    imp.attr(ins, "async_execution_thread", A.string, None)
    result = _tuple_types(ins)[1]
    value = imp.emit(control_flow.CallOp, args, {"callee": SymbolRefAttr(callee)}, [result])[0]
    return imp.async_start(ins, value)


def _wrap_start(reader):
    def read(imp, ins, args):
        return imp.async_start(ins, reader(imp, ins, args))
    return read


for _start in ("all-reduce-start", "all-gather-start", "collective-permute-start"):
    READERS[_start] = _wrap_start(READERS[_start])


@reads("send")
def _read_send(imp, ins, args):
    props = _channel_props(imp, ins)
    data, token = args
    leaves = imp.unpack(data) if isinstance(data.type, TupleType) else [data]
    value = imp.emit(effects.SendOp, [*leaves, token], props, [TokenType()])[0]
    return imp.async_start(ins, value)


@reads("recv")
def _read_recv(imp, ins, args):
    props = _channel_props(imp, ins)
    data = _tuple_types(ins)[0]
    leaves = list(data.types) if isinstance(data, TupleType) else [data]
    results = imp.emit(effects.RecvOp, args, props, leaves + [TokenType()])
    data_value = imp.pack(results[:-1], data) if isinstance(data, TupleType) else results[0]
    done_shape = TupleType([data, TokenType()])
    return imp.async_start(ins, imp.pack([data_value, results[-1]], done_shape, name=False))


def _channel_props(imp, ins) -> dict:
    props = {"channel_id": _i(imp.attr(ins, "channel_id", A.integer, 0))}
    if imp.attr(ins, "is_host_transfer", A.boolean, False):
        props["is_host_transfer"] = _flag(True)
    pairs = imp.attr(ins, "_xla_send_recv_source_target_pairs", lambda t: t, None)
    if pairs is not None:
        imp.keep(ins, "_xla_send_recv_source_target_pairs")
    return props


@writes(effects.SendOp)
def _write_send(exp, op):
    data = exp.packed_operands(op, list(op.operands)[:-1])
    attrs = [("channel_id", str(_int_prop(op, "channel_id", 0)))]
    if _bool_prop(op, "is_host_transfer"):
        attrs.append(("is_host_transfer", "true"))
    return "send", data + [op.operands[-1]], attrs


@writes(effects.RecvOp)
def _write_recv(exp, op):
    attrs = [("channel_id", str(_int_prop(op, "channel_id", 0)))]
    if _bool_prop(op, "is_host_transfer"):
        attrs.append(("is_host_transfer", "true"))
    return "recv", list(op.operands), attrs


# ----------------------------------------------------------------------------
# Ops HLO text has no form for
# ----------------------------------------------------------------------------

NO_HLO_FORM = {
    conversion.UniformQuantizeOp: "run the expand-quantized pass first (-p expand-quantized)",
    conversion.UniformDequantizeOp: "run the expand-quantized pass first (-p expand-quantized)",
}
"""hlo ops without an HLO text form -> what to do instead."""


# ----------------------------------------------------------------------------
# Opcodes XLA has for chlo ops (topk, mulhi, scan): the StableHLO importer's expansions, shared
# ----------------------------------------------------------------------------

class _Expansion:
    """The interface the StableHLO importer's expansion converters use, over the HLO importer.

    ``interop.stablehlo`` expands ``chlo.top_k``, ``chlo.mulhi`` and ``chlo.scan`` into
    hlo ops; XLA has them as HLO opcodes (``topk``, ``mulhi``, ``scan``). The same converter
    functions build them here: one expansion per op, whichever text it comes from.
    """

    def __init__(self, imp, ins, args):
        self.imp, self.ins, self.args = imp, ins, list(args)
        self.callee: str | None = None  # scan: the to_apply function the body calls
        self.callee_result = None  # and its result type

    def operands(self, op):
        return list(self.args)

    def result_types(self, op):
        shape = self.ins.shape
        return list(shape.types) if isinstance(shape, TupleType) else [shape]

    def emit(self, cls, operands, properties=None, regions=(), result_types=None, op=None, plain=False):
        return self.imp.emit(cls, operands, properties, result_types, regions)

    def _where(self):
        return self.imp.where(self.ins)

    def build_region(self, arg_types, body):
        return self.imp.build_region(arg_types, body)

    def inline_block(self, block, args):
        """The scan body: a call of the ``to_apply`` computation, its tuple result taken apart."""
        (result,) = self.imp.emit(control_flow.CallOp, list(args), {"callee": SymbolRefAttr(self.callee)},
                                  [self.callee_result], name=False)
        return self.imp.unpack(result) if isinstance(result.type, TupleType) else [result]


class _Attr:
    """A stand-in for an MLIR attribute with a ``.value`` (what the shared converters read)."""

    def __init__(self, value):
        self.value = value


class _Op:
    """A stand-in for the MLIR op the shared converters read attributes and regions from."""

    def __init__(self, attributes, regions=()):
        self.attributes = attributes
        self.regions = regions


class _Region:
    def __init__(self, blocks):
        self.blocks = blocks


def _pack_expansion(imp, ins, values):
    if isinstance(ins.shape, TupleType):
        return imp.pack(values, ins.shape)
    (value,) = values
    return value


@reads("topk")
def _read_topk(imp, ins, args):
    from ..stablehlo.converters import _top_k

    k = imp.attr(ins, "k", A.integer)
    largest = imp.attr(ins, "largest", A.boolean, True)
    imp.attr(ins, "is_stable", A.boolean, None)  # either way: the expansion's sort is stable (ties: lower index)
    if not largest:
        raise UnsupportedError("topk with largest=false is not supported (XLA's TopK takes the largest)")
    values = _top_k(_Expansion(imp, ins, args), None)
    if values[0].type.get_shape()[-1] != k:
        raise UnsupportedError(f"topk k={k} does not match the result shape {ins.shape}")
    return _pack_expansion(imp, ins, values)


def _read_topk_custom_call(imp, ins, args):
    """XLA CPU's ``custom-call(x), custom_call_target="TopK"`` (what its compiler makes of ``topk``): the k largest
    along the last dimension in descending total order, ties at the lower index, with s32 indices -- read as the
    ``topk`` opcode is. The called comparator is XLA's total-order greater-than, which the expansion's sort uses."""
    from ..stablehlo.converters import _top_k

    imp.attr(ins, "called_computations", A.computations, None)
    types = _tuple_types(ins)
    if len(args) != 1 or len(types) != 2 or args[0].type.get_num_dims() < 1:
        raise UnsupportedError(f"custom-call TopK: expected one operand of rank >= 1 and a (values, indices) tuple "
                               f"result, got {len(args)} operands and shape {ins.shape}")
    return _pack_expansion(imp, ins, _top_k(_Expansion(imp, ins, args), None))


@reads("mulhi")
def _read_mulhi(imp, ins, args):
    from ..stablehlo.converters import _mulhi

    return _pack_expansion(imp, ins, _mulhi(_Expansion(imp, ins, args), None))


@reads("scan")
def _read_scan(imp, ins, args):
    from ..stablehlo.converters import _scan

    (dim,) = imp.attr(ins, "dimensions", A.ints)
    carries = imp.attr(ins, "num_carries", A.integer, 0)
    reverse = imp.attr(ins, "is_reverse", A.boolean, False)
    imp.attr(ins, "is_associative", A.boolean, None)
    n_inputs = len(args) - carries
    expansion = _Expansion(imp, ins, args)
    expansion.callee = imp.callee(ins, "to_apply")
    expansion.callee_result = imp.function_result_type(expansion.callee)
    attributes = {"operandSegmentSizes": [n_inputs, carries], "dimension": _Attr(dim)}
    if reverse:
        attributes["is_reverse"] = _Attr(True)
    values = _scan(expansion, _Op(attributes, [_Region(["body"])]))
    return _pack_expansion(imp, ins, values)


# ----------------------------------------------------------------------------
# Newer XLA opcodes for chlo's math functions (acos, cosh, ...): XLA's own chlo expansion, as a call
# ----------------------------------------------------------------------------

CHLO_OPCODES = {
    "acos": "chlo.acos", "acosh": "chlo.acosh", "asin": "chlo.asin", "asinh": "chlo.asinh",
    "atan": "chlo.atan", "atanh": "chlo.atanh", "cosh": "chlo.cosh", "sinh": "chlo.sinh",
}
"""HLO opcode -> the chlo op it is (newer XLA versions have these as HLO instructions)."""


def _read_chlo(imp, ins, args):
    if len(args) != 1:
        raise UnsupportedError(f"{ins.opcode} takes one operand")
    callee = imp.chlo_function(CHLO_OPCODES[ins.opcode], args[0].type, ins.shape)
    return imp.emit(control_flow.CallOp, args, {"callee": SymbolRefAttr(callee)}, [ins.shape])[0]


for _opcode in CHLO_OPCODES:
    READERS[_opcode] = _read_chlo


@reads("ragged-dot")
def _read_ragged_dot(imp, ins, args):
    from ..stablehlo.converters import _ragged_dot

    fields = {key: imp.attr(ins, key, A.ints, ()) for key in (
        "lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims", "lhs_ragged_dims",
        "rhs_group_dims")}
    _read_precision(imp, ins)
    text = ("<" + ", ".join(f"{name} = [{', '.join(map(str, fields[key]))}]" for name, key in (
        ("lhs_batching_dimensions", "lhs_batch_dims"), ("rhs_batching_dimensions", "rhs_batch_dims"),
        ("lhs_contracting_dimensions", "lhs_contracting_dims"), ("rhs_contracting_dimensions", "rhs_contracting_dims"),
        ("lhs_ragged_dimensions", "lhs_ragged_dims"), ("rhs_group_dimensions", "rhs_group_dims"))) + ">")
    values = _ragged_dot(_Expansion(imp, ins, args), _Op({"ragged_dot_dimension_numbers": text}))
    return _pack_expansion(imp, ins, values)


# ----------------------------------------------------------------------------
# XLA opcodes (and forms) the executor has no kernel for: read and kept as written
# ----------------------------------------------------------------------------

XLA_OPCODES_WITHOUT_OP = frozenset({
    "collective-reduce", "dynamic-reshape", "ragged-all-to-all", "rng-get-and-update-state", "scaled-dot",
    "shuffle", "stochastic-convert",
})
"""Opcodes of XLA's ``HLO_OPCODE_LIST`` (xla/hlo/ir/hlo_opcode.h) without an hlo op here: the importer
keeps them as opaque ops (:func:`read_opaque`)."""

OPAQUE_PREFIX = "hlo_text."
"""Name prefix of the opaque ops standing for such instructions (``hlo_text.scaled-dot``)."""

_ASYNC_SUFFIXES = ("-start", "-update", "-done")


def is_xla_opcode(opcode: str) -> bool:
    """Whether XLA's parser takes ``opcode``: one of its opcodes, or ``X-start``/``X-update``/``X-done``
    of one (an asynchronous wrapper of X, as ``HloParserImpl::ParseOpcode`` reads it)."""
    if opcode in READERS or opcode in XLA_OPCODES_WITHOUT_OP:
        return True
    base = async_base(opcode)
    return base is not None and (base in READERS or base in XLA_OPCODES_WITHOUT_OP)


def async_base(opcode: str) -> str | None:
    """``reduce-scatter`` for ``reduce-scatter-start`` (any ``-start``/``-update``/``-done``), else None."""
    for suffix in _ASYNC_SUFFIXES:
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return None


def _no_kernel(op, ctx):
    where = op.attributes.get("hlo.position")
    reason = op.attributes.get("hlo.unsupported")
    opcode = op.name[len(OPAQUE_PREFIX):]
    raise UnsupportedError(
        f"{where.data if where is not None else op.name}: {opcode} "
        f"{reason.data if reason is not None else 'has no kernel in the NumPy executor'} "
        f"(import_hlo read it and keeps it as written; export_hlo prints it back)")


def opaque_class(opcode: str) -> type:
    """The opaque op class of ``opcode`` (one per opcode), whose kernel raises :class:`UnsupportedError`."""
    from lowering.kernels.registry import KERNELS, register_kernel

    from ..stablehlo.dispatch import opaque_op_class

    cls = opaque_op_class(OPAQUE_PREFIX + opcode)
    if cls not in KERNELS:
        register_kernel(cls, _no_kernel)
    return cls


_COMPUTATION_KEYS = ("to_apply", "calls", "condition", "body", "branch_computations", "called_computations")


def read_opaque(imp, ins, args, reason: str | None = None):
    """An instruction the executor cannot compute, kept as an opaque op: its operands, its shape, its
    attributes verbatim (printed back by :func:`write_opaque`); computations it names are converted so
    that the module still has them. ``reason`` (e.g. 'dot algorithm=... changes the numerics') is what
    the UnsupportedError raised when the module is compiled says."""
    if ins.shape is None:
        raise UnsupportedError(f"{ins.opcode} needs its shape written")
    for key in _COMPUTATION_KEYS:
        text = ins.attrs.get(key)
        if text is not None:
            for name in A.computations(text):
                imp.callee_named(ins, name)
    for key in ins.attrs:
        imp.keep_verbatim(ins, key)
    attributes = {"hlo.position": StringAttr(imp.parsed.where(ins.pos))}
    if reason is not None:
        attributes["hlo.unsupported"] = StringAttr(reason)
    return imp.emit_opaque(opaque_class(ins.opcode), args, ins.shape, attributes)


def write_opaque(exp, op):
    return op.name[len(OPAQUE_PREFIX):], list(op.operands), []


def reader_for(opcode: str):
    """The read rule of an XLA opcode without an entry in :data:`READERS` (None: not an XLA opcode):
    opaque ops, and the asynchronous wrappers ``X-start``/``X-update``/``X-done`` of an opcode X."""
    if opcode in XLA_OPCODES_WITHOUT_OP:
        return read_opaque
    base = async_base(opcode)
    if base is None or not is_xla_opcode(base):
        return None
    if opcode.endswith("-done"):
        return _read_done
    if opcode.endswith("-update"):
        return _read_async_update
    return _read_wrapped_start


def _read_wrapped_start(imp, ins, args):
    """``X-start`` (XLA's asynchronous wrapper of X): shape ``((operands), result, context...)``; X computed
    here, its done hands the result over."""
    base = async_base(ins.opcode)
    shapes = _tuple_types(ins)
    if len(shapes) < 2:
        raise UnsupportedError(f"{ins.opcode} needs the shape ((operands...), result, ...)")
    inner = type(ins)(ins.name, shapes[1], base, ins.operands, ins.operand_shapes, ins.literal, ins.attrs,
                      ins.is_root, ins.pos)
    reader = READERS.get(base)
    value = reader(imp, inner, args) if reader is not None else read_opaque(imp, inner, args)
    return imp.async_start(ins, value)
