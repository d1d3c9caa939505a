"""Export hlo modules as StableHLO MLIR text that jaxlib parses and XLA compiles.

Every op is printed in MLIR's generic form (``"stablehlo.add"(%0, %1) : ...``),
which needs no knowledge of each op's custom syntax. ``hlo.X`` becomes
``stablehlo.X`` with its properties converted back (the inverse of
:mod:`interop.stablehlo.importer`): string enums become
``#stablehlo<comparison_direction LT>``, dimension-number properties are
regrouped into ``#stablehlo.dot<...>`` / ``gather`` / ``scatter`` / ``conv``
structs, constants are written as exact hex blobs of their storage.

What StableHLO cannot say is kept in discardable attributes that XLA ignores
and :func:`~interop.stablehlo.import_stablehlo` reads back, so that
``import_stablehlo(export_stablehlo(m))`` rebuilds ``m``:

* layouts: on ``@main`` arguments as ``mhlo.layout_mode = "{1,0}"`` (what JAX
  writes), on op results as ``hlo.result_layouts = ["{1,0}"]``, on region
  arguments as ``hlo.region_arg_layouts``;
* ``hlo.conditional`` branch operands (StableHLO branches capture values
  instead): they go into a ``stablehlo.tuple`` marked ``hlo.branch_operands``
  and each branch starts with a ``get_tuple_element`` marked
  ``hlo.branch_argument``;
* the ``loc`` attribute becomes the op's MLIR location ``loc("file.py":12:0)``;
* hlo ops without a StableHLO counterpart are written as an equivalent op
  marked ``hlo.original_op`` (``hlo.copy`` as an identity ``reshape``), or as
  the chlo op JAX would write (``hlo.erf`` as ``chlo.erf``);
* ``hlo.while`` with tuple state (XLA's builder form): StableHLO's while takes
  arrays only, so the state is flattened into its leaves and rebuilt inside
  the regions and after; the while records the original state types
  (``hlo.tuple_state``) and the added tuple/get_tuple_element ops are marked
  (``hlo.tuple_state_*``).

XLA's implicit broadcasting (``broadcast_dimensions`` on binary ops, scalar or
degenerate operands) has no StableHLO form: the exporter inserts explicit
``stablehlo.broadcast_in_dim`` ops marked ``hlo.implicit_broadcast`` (and keeps
the op's ``broadcast_dimensions`` as ``hlo.broadcast_dimensions``); the importer
folds them back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    UnregisteredOp,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    NoneAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Operation, Region, SSAValue

from xla_dialect.errors import UnsupportedError, op_context
from xla_dialect.layout import LayoutAttr
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import CallOp, ConditionalOp, FusionOp, ReturnOp, TupleOp, WhileOp
from xla_dialect.ops.data_movement import BitcastOp, BroadcastInDimOp, CopyOp
from xla_dialect.ops.effects import TYPED_FFI, CustomCallOp
from xla_dialect.ops.elementwise import ClampOp, ErfOp, SelectOp, implicit_broadcast_dims
from xla_dialect.shape import format_shape
from xla_dialect.types import FutureType, TokenType

from ..schema import (
    BRANCH_ARGUMENT,
    BRANCH_OPERANDS,
    BROADCAST_DIMENSIONS,
    CHANNEL_TYPE_NUMBERS,
    ENUM_ATTRIBUTES,
    IMPLICIT_BROADCAST,
    ORIGINAL_OP,
    REGION_ARG_LAYOUTS,
    RESULT_LAYOUTS,
    STATE_ARG,
    STATE_PART,
    STATE_RESULT,
    STATE_RETURN,
    STRUCT_ATTRIBUTE_OF_OP,
    STRUCT_FIELDS,
    TUPLE_STATE,
)
from ..schema import leaf_types as _leaf_types

__all__ = ["export_stablehlo", "EXPORTERS", "stablehlo_type"]


I32_ATTRIBUTES = {
    ("stablehlo.get_tuple_element", "index"),
    ("stablehlo.reduce_precision", "exponent_bits"),
    ("stablehlo.reduce_precision", "mantissa_bits"),
    ("stablehlo.custom_call", "api_version"),
    ("stablehlo.composite", "version"),
}
"""(op, attribute) pairs that StableHLO types as i32 (the others are i64)."""

PAIR_ATTRIBUTES = {"padding", "source_target_pairs"}
"""Flat ``array<i64>`` properties that StableHLO writes as ``dense<[[lo, hi], ...]> : tensor<Nx2xi64>``."""

LAYOUT_LIST_ATTRIBUTES = {"operand_layouts", "result_layouts"}
"""custom_call layouts: lists of ``array<i64>`` here, of ``dense<...> : tensor<Nxindex>`` in StableHLO."""


def stablehlo_type(t: Attribute) -> str:
    """StableHLO spelling of an xDSL type (layouts dropped); cached, as printing types is slow in xDSL."""
    try:
        return _cached_type(t)
    except TypeError:  # a type holding a list (e.g. TupleType([...])) is not hashable
        return _type_text(t)


@lru_cache(maxsize=4096)
def _cached_type(t: Attribute) -> str:
    return _type_text(t)


def _type_text(t: Attribute) -> str:
    if isinstance(t, TensorType):
        dims = "".join("?x" if d == DYNAMIC_INDEX else f"{d}x" for d in t.get_shape())
        return f"tensor<{dims}{t.element_type}>"
    if isinstance(t, TupleType):
        return "tuple<" + ", ".join(stablehlo_type(e) for e in t.types) + ">"
    if isinstance(t, TokenType):
        return "!stablehlo.token"
    if isinstance(t, FutureType):  # the current spec's type (jaxlib 0.10 cannot parse it; our importer can)
        return "!stablehlo.future<" + ", ".join(stablehlo_type(e) for e in t.types.data) + ">"
    raise UnsupportedError(f"type {t} has no StableHLO equivalent")


def _layout_text(t: Attribute) -> str:
    """``{1,0}`` for a tensor with a layout, ``({1,0}, )`` for a tuple, ``""`` for none."""
    if isinstance(t, TensorType) and isinstance(t.encoding, LayoutAttr):
        return t.encoding.data.to_text()
    if isinstance(t, TupleType):
        parts = [_layout_text(e) for e in t.types]
        return "(" + ", ".join(parts) + ")" if any(parts) else ""
    return ""


def _string(text: str) -> str:
    return json.dumps(text)  # MLIR string escapes are a subset of JSON's for printable text


def _location(op: Operation) -> str:
    loc = op.attributes.get("loc")
    if not isinstance(loc, StringAttr):
        return ""
    text = loc.data
    file, sep, line = text.rpartition(":")
    if sep and line.isdigit():
        return f" loc({_string(file)}:{line}:0)"
    return f" loc({_string(text)}:0:0)"


def dense_text(array: np.ndarray, type_: TensorType) -> str:
    """``dense<"0x...">`` holding ``array``'s exact storage (``dense<>`` when empty).

    A splat (all elements bitwise equal) is written as one element's bytes.
    """
    if array.size == 0:
        return "dense<>"
    data = np.ascontiguousarray(array).tobytes()
    size = array.dtype.itemsize
    if array.size > 1 and data == data[:size] * array.size:
        data = data[:size]
    return 'dense<"0x' + data.hex().upper() + '">'


def _attribute(op_name: str, name: str, value: Attribute) -> str:
    """StableHLO text of a property value."""
    if name in ENUM_ATTRIBUTES:
        mnemonic = ENUM_ATTRIBUTES[name]
        if isinstance(value, ArrayAttr):
            return "[" + ", ".join(f"#stablehlo<{mnemonic} {v.data}>" for v in value.data) + "]"
        return f"#stablehlo<{mnemonic} {value.data}>"
    if isinstance(value, DenseArrayBase):
        values = value.get_values()
        if name in PAIR_ATTRIBUTES:
            pairs = [f"[{values[i]}, {values[i + 1]}]" for i in range(0, len(values), 2)]
            if not pairs:  # (no spatial dimensions: MLIR spells the empty 0x2 literal dense<>)
                return "dense<> : tensor<0x2xi64>"
            return f"dense<[{', '.join(pairs)}]> : tensor<{len(pairs)}x2xi64>"
        elt = value.elt_type
        if isinstance(elt, IntegerType) and elt.width.data == 1:
            body = ", ".join("true" if v else "false" for v in values)
            return f"array<i1: {body}>" if values else "array<i1>"
        return f"array<{elt}: {', '.join(str(v) for v in values)}>" if values else f"array<{elt}>"
    if isinstance(value, IntegerAttr):
        t = value.type
        if isinstance(t, IntegerType) and t.width.data == 1:
            return "true" if value.value.data else "false"
        return f"{value.value.data} : {'i32' if (op_name, name) in I32_ATTRIBUTES else t}"
    if isinstance(value, FloatAttr):
        return f"{_float_text(float(value.value.data), value.type)} : {value.type}"
    if isinstance(value, StringAttr):
        return _string(value.data)
    if isinstance(value, SymbolRefAttr):
        return "@" + value.root_reference.data
    if isinstance(value, UnitAttr):
        return "unit"
    if isinstance(value, DenseIntOrFPElementsAttr):
        return str(value)
    if isinstance(value, ArrayAttr):
        if name in LAYOUT_LIST_ATTRIBUTES:
            return "[" + ", ".join(
                f"dense<{_list(v)}> : tensor<{len(v)}xindex>" if len(v) else "dense<> : tensor<0xindex>"
                for v in value.data) + "]"
        if name == "output_operand_aliases":
            return "[" + ", ".join(
                "#stablehlo.output_operand_alias<output_tuple_indices = "
                f"{_list(v.data['output_tuple_indices'])}, operand_index = {v.data['operand_index'].value.data}, "
                f"operand_tuple_indices = {_list(v.data['operand_tuple_indices'])}>" for v in value.data) + "]"
        return "[" + ", ".join(_attribute(op_name, "", v) for v in value.data) + "]"
    if isinstance(value, DictionaryAttr):
        return "{" + ", ".join(f"{k} = {_attribute(op_name, k, v)}" for k, v in value.data.items()) + "}"
    raise UnsupportedError(f"{op_name}: property {name} = {value} has no StableHLO form")


def _float_text(v: float, type_: Attribute) -> str:
    """A float attribute value: decimal when finite (repr round-trips), else its bit pattern in hex."""
    if np.isfinite(v):
        return repr(v)
    from xla_dialect.types import element_type_of

    dtype = element_type_of(type_).dtype
    bits = np.array(v).astype(dtype).view(f"u{dtype.itemsize}")
    return "0x" + format(int(bits), f"0{2 * dtype.itemsize}X")


def _struct(kind: str, props: dict[str, Attribute]) -> str:
    fields = STRUCT_FIELDS[kind]
    if kind == "conv":
        body = ", ".join(
            f"{name} = " + (f"{props[name].value.data}" if k == "int" else _list(props[name]))
            for name, k in fields if name in props
        )
        return f"#stablehlo.conv<raw {body}>"
    parts = []
    for name, k in fields:
        v = props.get(name)
        if v is None:
            continue
        if k == "int":
            parts.append(f"{name} = {v.value.data}")
        elif len(v):
            parts.append(f"{name} = {_list(v)}")
    return f"#stablehlo.{kind}<{', '.join(parts)}>"


def _list(v: DenseArrayBase) -> str:
    return "[" + ", ".join(str(x) for x in v.get_values()) + "]"


# ----------------------------------------------------------------------------
# The printer
# ----------------------------------------------------------------------------

Exporter = Callable[["_Printer", Operation, str], None]

EXPORTERS: dict[type[Operation], Exporter] = {}
"""op class -> ``fn(printer, op, indent)`` for ops that are not printed generically."""


def _exporter(cls: type[Operation]):
    def deco(fn):
        EXPORTERS[cls] = fn
        return fn

    return deco


class _Printer:
    def __init__(self, layouts: bool):
        self.layouts = layouts
        self.lines: list[str] = []
        self.names: dict[SSAValue, str] = {}
        self.counter = 0
        self.skip: set[Operation] = set()

    # -- values -------------------------------------------------------------

    def name(self, v: SSAValue) -> str:
        try:
            return self.names[v]
        except KeyError:
            raise UnsupportedError(f"value {v} is used before it is defined") from None

    def define(self, op: Operation) -> str:
        """Name ``op``'s results; return the ``%x = `` / ``%x:2 = `` prefix."""
        n = len(op.results)
        if n == 0:
            return ""
        base = f"%{self.counter}"
        self.counter += 1
        if n == 1:
            self.names[op.results[0]] = base
            return f"{base} = "
        for i, r in enumerate(op.results):
            self.names[r] = f"{base}#{i}"
        return f"{base}:{n} = "

    # -- ops ----------------------------------------------------------------

    def op(self, op: Operation, indent: str) -> None:
        if op in self.skip:
            return
        exporter = EXPORTERS.get(type(op))
        if exporter is not None:
            exporter(self, op, indent)
            return
        if isinstance(op, UnregisteredOp):
            # An op imported with allow_unknown=True: written back as it came.
            props = {k: v for k, v in op.properties.items()}
            self.generic(op, indent, op.name, props=props)
            return
        if not op.name.startswith("hlo."):
            raise UnsupportedError(f"{op_context(op)}: cannot export op {op.name} to StableHLO")
        self.generic(op, indent, "stablehlo." + op.name[4:])

    def generic(self, op: Operation, indent: str, name: str, operands: list[str] | None = None,
                props: dict[str, Attribute] | None = None, extra_attrs: dict[str, str] | None = None,
                operand_types: list[Attribute] | None = None) -> None:
        """Print ``op`` as generic StableHLO op ``name``."""
        props = dict(op.properties) if props is None else props
        texts = []
        struct = STRUCT_ATTRIBUTE_OF_OP.get(name)
        if struct is not None:
            attr_name, kind = struct
            fields = {f for f, _ in STRUCT_FIELDS[kind]}
            if any(f in props for f in fields):
                texts.append(f"{attr_name} = {_struct(kind, props)}")
                props = {k: v for k, v in props.items() if k not in fields}
        if "channel_id" in props:
            channel = props["channel_id"].value.data
            ctype = props.get("channel_type")
            number = CHANNEL_TYPE_NUMBERS.get(ctype.data, 1) if isinstance(ctype, StringAttr) else 1
            texts.append(f"channel_handle = #stablehlo.channel_handle<handle = {channel}, type = {number}>")
            props = {k: v for k, v in props.items() if k not in ("channel_id", "channel_type")}
        attrs = self.discardable(op)
        for key, value in props.items():
            if isinstance(value, NoneAttr):
                continue
            try:
                text = _attribute(name, key, value)
            except UnsupportedError as e:
                raise UnsupportedError(f"{op_context(op)}: {e}") from None
            if "." in key:
                attrs[key] = text  # dialect attributes (mhlo.backend_config) are discardable, not properties
            else:
                texts.append(f"{key} = {text}")
        operand_names = operands if operands is not None else [self.name(v) for v in op.operands]
        in_types = operand_types if operand_types is not None else [v.type for v in op.operands]
        if extra_attrs:
            attrs.update(extra_attrs)
        prefix = self.define(op)
        line = f'{indent}{prefix}"{name}"({", ".join(operand_names)})'
        if texts:
            line += " <{" + ", ".join(texts) + "}>"
        if op.regions:
            self.lines.append(line + " (")
            for i, region in enumerate(op.regions):
                self.region(region, indent + "  ", last=i == len(op.regions) - 1)
            line = f"{indent})"
        if attrs:
            line += " {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}"
        line += (f" : ({', '.join(stablehlo_type(t) for t in in_types)}) -> "
                 f"({', '.join(stablehlo_type(r.type) for r in op.results)})")
        self.lines.append(line + _location(op))

    def discardable(self, op: Operation) -> dict[str, str]:
        attrs: dict[str, str] = {}
        if self.layouts:
            layouts = [_layout_text(r.type) for r in op.results]
            if any(layouts):
                attrs[RESULT_LAYOUTS] = "[" + ", ".join(_string(s) for s in layouts) + "]"
            region_layouts = [[_layout_text(a.type) for a in r.block.args] for r in op.regions if r.blocks]
            if any(any(r) for r in region_layouts):
                attrs[REGION_ARG_LAYOUTS] = "[" + ", ".join(
                    "[" + ", ".join(_string(s) for s in r) + "]" for r in region_layouts) + "]"
        return attrs

    def region(self, region: Region, indent: str, last: bool, arg_names: list[str] | None = None) -> None:
        block = region.block
        self.lines.append(indent[:-2] + "  {")
        if block.args and arg_names is None:
            args = []
            for a in block.args:
                n = f"%a{self.counter}"
                self.counter += 1
                self.names[a] = n
                args.append(f"{n}: {stablehlo_type(a.type)}")
            self.lines.append(f"{indent}^bb0({', '.join(args)}):")
        elif arg_names is not None:
            for a, n in zip(block.args, arg_names):
                self.names[a] = n
        for op in block.ops:
            self.op(op, indent + "  ")
        self.lines.append(indent[:-2] + "  }" + ("" if last else ","))

    # -- functions ----------------------------------------------------------

    def function(self, fn: func.FuncOp) -> None:
        block = fn.body.block
        arg_attrs = list(fn.arg_attrs.data) if fn.arg_attrs is not None else [None] * len(block.args)
        res_attrs = list(fn.res_attrs.data) if fn.res_attrs is not None else [None] * len(fn.function_type.outputs)
        params = []
        for i, a in enumerate(block.args):
            n = f"%arg{i}"
            self.names[a] = n
            entries = _dict_entries(arg_attrs[i])
            layout = _layout_text(a.type)
            if layout and self.layouts:
                entries["mhlo.layout_mode"] = _string(layout)
            text = f"{n}: {stablehlo_type(a.type)}"
            if entries:
                text += " {" + ", ".join(f"{k} = {v}" for k, v in entries.items()) + "}"
            params.append(text)
        results = []
        for t, d in zip(fn.function_type.outputs, res_attrs):
            layout = _layout_text(t)
            entries = _dict_entries(d, keep_layout_mode=not layout)
            if layout and self.layouts:
                entries["mhlo.layout_mode"] = _string(layout)
            text = stablehlo_type(t)
            if entries:
                text += " {" + ", ".join(f"{k} = {v}" for k, v in entries.items()) + "}"
            results.append(text)
        visibility = "private" if fn.sym_visibility is not None and fn.sym_visibility.data == "private" else "public"
        self.lines.append(f"  func.func {visibility} @{fn.sym_name.data}({', '.join(params)}) -> ({', '.join(results)}) {{")
        for op in block.ops:
            self.op(op, "    ")
        self.lines.append("  }")


def _dict_entries(d, keep_layout_mode: bool = False) -> dict[str, str]:
    if d is None or not isinstance(d, DictionaryAttr):
        return {}
    out = {}
    for k, v in d.data.items():
        if k == "mhlo.layout_mode" and not keep_layout_mode:
            continue  # written from the type's layout
        if isinstance(v, StringAttr):
            out[k] = _string(v.data)
    return out


# ----------------------------------------------------------------------------
# Special ops
# ----------------------------------------------------------------------------


@_exporter(func.ReturnOp)
def _func_return(p: _Printer, op, indent):
    names = [p.name(v) for v in op.operands]
    types = [stablehlo_type(v.type) for v in op.operands]
    p.lines.append(f'{indent}"func.return"({", ".join(names)}) : ({", ".join(types)}) -> (){_location(op)}')


@_exporter(ReturnOp)
def _hlo_return(p: _Printer, op, indent):
    names = [p.name(v) for v in op.operands]
    types = [stablehlo_type(v.type) for v in op.operands]
    p.lines.append(f'{indent}"stablehlo.return"({", ".join(names)}) : ({", ".join(types)}) -> (){_location(op)}')


@_exporter(ConstantOp)
def _constant(p: _Printer, op, indent):
    literal: DenseLiteralAttr = op.properties["value"]
    t = literal.data.type
    attrs = p.discardable(op)
    prefix = p.define(op)
    extra = (" {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}") if attrs else ""
    p.lines.append(
        f'{indent}{prefix}"stablehlo.constant"() <{{value = {dense_text(literal.array, t)} : {stablehlo_type(t)}}}>'
        f"{extra} : () -> {stablehlo_type(op.results[0].type)}{_location(op)}"
    )


@_exporter(CallOp)
def _call(p: _Printer, op, indent):
    props = {"callee": op.properties["callee"]}
    p.generic(op, indent, "func.call", props=props)


@_exporter(CustomCallOp)
def _custom_call(p: _Printer, op, indent):
    # XLA reads a typed-FFI call's attributes from backend_config when api_version = 4 (and from
    # mhlo.backend_config, where JAX puts them, only without it): an imported HLO-text call keeps
    # api_version = 4 with its attributes in mhlo.backend_config, so they move to backend_config.
    props = dict(op.properties)
    version = props.get("api_version")
    ffi = props.get("mhlo.backend_config")
    if (isinstance(ffi, DictionaryAttr) and isinstance(version, IntegerAttr) and version.value.data == TYPED_FFI
            and not isinstance(props.get("backend_config"), DictionaryAttr)):
        props["backend_config"] = props.pop("mhlo.backend_config")
    p.generic(op, indent, "stablehlo.custom_call", props=props)


@_exporter(FusionOp)
def _fusion(p: _Printer, op, indent):
    # A fusion is a call of its fused computation (StableHLO has no fusions; the kind is dropped).
    p.generic(op, indent, "func.call", props={"callee": op.properties["callee"]})


@_exporter(BitcastOp)
def _bitcast(p: _Printer, op, indent):
    # The bytes read with another shape and layout: a reshape or a transpose when it is one
    # (the usual case in optimized HLO), else no single StableHLO op says it.
    import numpy as np

    from xla_dialect.layout import linear_indices

    src, dst = op.operands[0].type, op.results[0].type
    if src.element_type == dst.element_type:
        src_pos = linear_indices(src).reshape(-1)
        dst_pos = linear_indices(dst).reshape(-1)
        if src_pos.size == dst_pos.size and src_pos.size == np.unique(src_pos).size:
            order = np.argsort(src_pos)
            take = order[np.searchsorted(src_pos, dst_pos, sorter=order)]
            if np.array_equal(src_pos[take], dst_pos):
                if np.array_equal(take, np.arange(take.size)):
                    return p.generic(op, indent, "stablehlo.reshape", props={})
                src_dims, dst_dims = src.get_shape(), dst.get_shape()
                if sorted(src_dims) == sorted(dst_dims) and len(src_dims) == len(dst_dims):
                    import itertools

                    logical = np.arange(take.size).reshape(src_dims)
                    for perm in itertools.permutations(range(len(src_dims))):
                        if [src_dims[d] for d in perm] == list(dst_dims) and \
                                np.array_equal(logical.transpose(perm).reshape(-1), take):
                            return p.generic(op, indent, "stablehlo.transpose",
                                             props={"permutation": DenseArrayBase.from_list(i64, list(perm))})
    raise UnsupportedError(f"{op_context(op)}: this bitcast ({format_shape(src)} -> {format_shape(dst)}) is neither "
                           "a reshape nor a transpose; StableHLO cannot say it (interop.export_hlo prints it)")


@_exporter(ErfOp)
def _erf(p: _Printer, op, indent):
    # StableHLO has no erf op; chlo.erf is what JAX writes (and XLA compiles).
    p.generic(op, indent, "chlo.erf")


@_exporter(CopyOp)
def _copy(p: _Printer, op, indent):
    # XLA's kCopy has no StableHLO op: an identity reshape computes the same;
    # the marker brings hlo.copy back on import.
    p.generic(op, indent, "stablehlo.reshape", extra_attrs={ORIGINAL_OP: _string(CopyOp.name)})


def _implicit_broadcasts(p: _Printer, op, indent) -> list[str]:
    """Operand names, with XLA's implicit broadcasting made explicit."""
    out_type = op.results[0].type
    out_shape = out_type.get_shape()
    bdims_attr = op.properties.get("broadcast_dimensions")
    bdims = list(bdims_attr.get_values()) if isinstance(bdims_attr, DenseArrayBase) else []
    names = []
    for v in op.operands:
        t = v.type
        if not isinstance(t, TensorType) or t.get_shape() == out_shape:
            names.append(p.name(v))
            continue
        dims = implicit_broadcast_dims(t.get_shape(), len(out_shape), bdims)
        target = TensorType(t.element_type, out_shape)
        name = f"%b{p.counter}"
        p.counter += 1
        p.lines.append(
            f'{indent}{name} = "stablehlo.broadcast_in_dim"({p.name(v)}) <{{broadcast_dimensions = '
            f'array<i64{": " if dims else ""}{", ".join(str(d) for d in dims)}>}}> {{{IMPLICIT_BROADCAST}}} : '
            f"({stablehlo_type(t)}) -> {stablehlo_type(target)}{_location(op)}"
        )
        names.append(name)
    return names


def _broadcasting_exporter(p: _Printer, op, indent):
    names = _implicit_broadcasts(p, op, indent)
    props = {k: v for k, v in op.properties.items() if k != "broadcast_dimensions"}
    out_shape = op.results[0].type.get_shape() if isinstance(op.results[0].type, TensorType) else None
    types = [TensorType(v.type.element_type, out_shape) if isinstance(v.type, TensorType) and out_shape is not None
             and (v.type.get_shape() != out_shape and (v.type.get_shape() or not isinstance(op, _SCALAR_OK)))
             else v.type for v in op.operands]
    extra = {}
    bdims = op.properties.get("broadcast_dimensions")
    if isinstance(bdims, DenseArrayBase):
        extra[BROADCAST_DIMENSIONS] = _attribute(op.name, "broadcast_dimensions", bdims)
    p.generic(op, indent, "stablehlo." + op.name[4:], operands=names, props=props, operand_types=types,
              extra_attrs=extra)


_SCALAR_OK = (SelectOp, ClampOp)  # StableHLO allows a scalar predicate / bounds


def register_broadcasting_ops() -> None:
    """Use implicit-broadcast export for every element-wise op with a broadcast_dimensions property."""
    from xla_dialect.ops import ALL_OPS

    for cls in ALL_OPS:
        if cls in EXPORTERS:
            continue
        if "broadcast_dimensions" in cls.get_irdl_definition().properties and cls is not BroadcastInDimOp:
            EXPORTERS[cls] = _broadcasting_exporter


def _select_like(p: _Printer, op, indent):
    # select/clamp: StableHLO accepts a scalar predicate / scalar bounds as they are.
    names = [p.name(v) for v in op.operands]
    p.generic(op, indent, "stablehlo." + op.name[4:], operands=names)


@_exporter(ConditionalOp)
def _conditional(p: _Printer, op, indent):
    selector, *branch_operands = op.operands
    is_pred = isinstance(selector.type, TensorType) and isinstance(selector.type.element_type, IntegerType) \
        and selector.type.element_type.width.data == 1
    name = "stablehlo.if" if is_pred else "stablehlo.case"
    regions = list(op.regions)
    # The importer's form: every branch takes the same empty tuple, made just before.
    first = branch_operands[0] if branch_operands else None
    simple = (
        first is not None
        and all(v is first for v in branch_operands)
        and isinstance(first.type, TupleType) and not first.type.types.data
        and isinstance(first.owner, TupleOp) and first.owner.next_op is op
        and len(list(first.uses)) == len(branch_operands)
        and all(not list(r.block.args[0].uses) for r in regions)
    )
    attrs = p.discardable(op)
    attrs.pop(REGION_ARG_LAYOUTS, None)
    prefix_lines = []
    arg_names: list[list[str]] = []
    if simple:
        for r in regions:
            arg_names.append(["%unused"])
    else:
        tuple_name = f"%t{p.counter}"
        p.counter += 1
        names = [p.name(v) for v in branch_operands]
        types = [stablehlo_type(v.type) for v in branch_operands]
        prefix_lines.append(
            f'{indent}{tuple_name} = "stablehlo.tuple"({", ".join(names)}) {{{BRANCH_OPERANDS}}} : '
            f'({", ".join(types)}) -> tuple<{", ".join(types)}>'
        )
        tuple_type = f'tuple<{", ".join(types)}>'
        for b, (r, v) in enumerate(zip(regions, branch_operands)):
            arg = f"%br{p.counter}"
            p.counter += 1
            layout = _layout_text(r.block.args[0].type) if p.layouts else ""
            extra = f", {RESULT_LAYOUTS} = [{_string(layout)}]" if layout else ""
            arg_names.append([arg, (
                f'{arg} = "stablehlo.get_tuple_element"({tuple_name}) <{{index = {b} : i32}}> '
                f"{{{BRANCH_ARGUMENT}{extra}}} : ({tuple_type}) -> ({stablehlo_type(v.type)})")])
    p.lines.extend(prefix_lines)
    if simple:
        p.skip.add(first.owner)
        # The empty tuple was printed already (it precedes the op): drop its line.
        _drop_last_definition(p, first)
    # StableHLO branches return arrays and tokens only: tuple results are
    # flattened (marked as for while loops) and rebuilt after the op.
    tuple_results = any(isinstance(r.type, TupleType) for r in op.results)
    result_types = [t for r in op.results for t in _leaf_types(r.type)]
    if tuple_results:
        base = f"%c{p.counter}"
        p.counter += 1
        prefix = f"{base}:{len(result_types)} = " if len(result_types) != 1 else f"{base} = "
        attrs[TUPLE_STATE] = "[" + ", ".join(stablehlo_type(r.type) for r in op.results) + "]"
    else:
        prefix = p.define(op)
    p.lines.append(f'{indent}{prefix}"{name}"({p.name(selector)}) (')
    inner_indent = indent + "    "
    for i, r in enumerate(regions):
        p.lines.append(indent + "  {")
        if simple:
            p.names[r.block.args[0]] = "%unused"
        else:
            arg, line = arg_names[i]
            p.names[r.block.args[0]] = arg
            p.lines.append(inner_indent + line)
        for inner in r.block.ops:
            if tuple_results and inner is r.block.last_op:
                out: list[tuple[str, Attribute]] = []
                for v in inner.operands:
                    _flatten_value(p, p.name(v), v.type, inner_indent, out)
                p.lines.append(f'{inner_indent}"stablehlo.return"({", ".join(n for n, _ in out)}) '
                               f'{{{STATE_RETURN}}} : ({", ".join(stablehlo_type(t) for _, t in out)}) -> ()'
                               f"{_location(inner)}")
            else:
                p.op(inner, inner_indent)
        p.lines.append(indent + "  }" + ("" if i == len(regions) - 1 else ","))
    extra = (" {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}") if attrs else ""
    p.lines.append(f"{indent}){extra} : ({stablehlo_type(selector.type)}) -> "
                   f"({', '.join(stablehlo_type(t) for t in result_types)}){_location(op)}")
    if tuple_results:
        names = [f"{base}#{i}" for i in range(len(result_types))] if len(result_types) != 1 else [base]
        for j, r in enumerate(op.results):
            p.names[r] = _rebuild_value(p, names, r.type, indent, f"{STATE_RESULT} = {j} : i64")


def _flatten_value(p: _Printer, name: str, t: Attribute, indent: str, out: list[tuple[str, Attribute]]) -> None:
    """Append the array/token leaves of value ``name`` (marked get_tuple_element chains for tuples)."""
    if not isinstance(t, TupleType):
        out.append((name, t))
        return
    for i, e in enumerate(t.types):
        leaf = f"%g{p.counter}"
        p.counter += 1
        p.lines.append(f'{indent}{leaf} = "stablehlo.get_tuple_element"({name}) <{{index = {i} : i32}}> '
                       f"{{{STATE_PART}}} : ({stablehlo_type(t)}) -> {stablehlo_type(e)}")
        _flatten_value(p, leaf, e, indent, out)


def _rebuild_value(p: _Printer, leaves: list[str], t: Attribute, indent: str, marker: str) -> str:
    """Consume leaves (in order) and return the name of a value of type ``t`` built from them.

    ``marker`` is the discardable attribute of the outermost tuple op (nested ones are parts).
    """
    if not isinstance(t, TupleType):
        return leaves.pop(0)
    parts = [_rebuild_value(p, leaves, e, indent, STATE_PART) for e in t.types]
    name = f"%u{p.counter}"
    p.counter += 1
    types = ", ".join(stablehlo_type(e) for e in t.types)
    p.lines.append(f'{indent}{name} = "stablehlo.tuple"({", ".join(parts)}) {{{marker}}} : ({types}) -> '
                   f"{stablehlo_type(t)}")
    return name


@_exporter(WhileOp)
def _while(p: _Printer, op, indent):
    if not any(isinstance(v.type, TupleType) for v in op.operands):
        p.generic(op, indent, "stablehlo.while")
        return
    # StableHLO's while carries arrays and tokens only: flatten tuple state
    # into its leaves, and rebuild the tuples inside the regions and after.
    # The while records the original state types (hlo.tuple_state) and every
    # op added for this is marked, so that the importer restores the hlo.while.
    flat: list[tuple[str, Attribute]] = []
    for v in op.operands:
        _flatten_value(p, p.name(v), v.type, indent, flat)
    state_types = [t for v in op.operands for t in _leaf_types(v.type)]
    base = f"%w{p.counter}"
    p.counter += 1
    count = len(state_types)
    p.lines.append(f'{indent}{base}:{count} = "stablehlo.while"({", ".join(n for n, _ in flat)}) (')
    for r_index, region in enumerate(op.regions):
        block = region.block
        inner = indent + "    "
        p.lines.append(indent + "  {")
        leaf_names = []
        for t in state_types:
            leaf_names.append(f"%s{p.counter}")
            p.counter += 1
        p.lines.append(f"{indent}  ^bb0({', '.join(f'{n}: {stablehlo_type(t)}' for n, t in zip(leaf_names, state_types))}):")
        pending = list(leaf_names)
        for j, a in enumerate(block.args):
            p.names[a] = _rebuild_value(p, pending, a.type, inner, f"{STATE_ARG} = {j} : i64")
        for inner_op in block.ops:
            if inner_op is block.last_op and isinstance(inner_op, ReturnOp) and r_index == 1:
                out: list[tuple[str, Attribute]] = []
                for v in inner_op.operands:
                    _flatten_value(p, p.name(v), v.type, inner, out)
                p.lines.append(f'{inner}"stablehlo.return"({", ".join(n for n, _ in out)}) {{{STATE_RETURN}}} : '
                               f'({", ".join(stablehlo_type(t) for _, t in out)}) -> (){_location(inner_op)}')
            else:
                p.op(inner_op, inner)
        p.lines.append(indent + "  }" + ("," if r_index == 0 else ""))
    types = ", ".join(stablehlo_type(t) for t in state_types)
    attrs = p.discardable(op)
    attrs[TUPLE_STATE] = "[" + ", ".join(stablehlo_type(v.type) for v in op.operands) + "]"
    attr_text = " {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}"
    p.lines.append(f"{indent}){attr_text} : ({types}) -> ({types}){_location(op)}")
    results = [f"{base}#{i}" for i in range(count)]
    for j, r in enumerate(op.results):
        p.names[r] = _rebuild_value(p, results, r.type, indent, f"{STATE_RESULT} = {j} : i64")


def _drop_last_definition(p: _Printer, value: SSAValue) -> None:
    name = p.names.get(value)
    if name is None:
        return
    for i in range(len(p.lines) - 1, -1, -1):
        if p.lines[i].lstrip().startswith(f"{name} = "):
            del p.lines[i]
            return


# ----------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------


def export_stablehlo(module: ModuleOp, *, layouts: bool = True) -> str:
    """StableHLO MLIR text (generic op form) for an hlo ``ModuleOp``.

    With ``layouts=False`` no layout information is written (XLA then picks
    its default layouts, as for any JAX program).
    """
    if not isinstance(module, ModuleOp):
        raise UnsupportedError(f"export_stablehlo expects an xDSL ModuleOp, got {type(module).__name__}")
    register_broadcasting_ops()
    for cls in _SCALAR_OK:
        EXPORTERS.setdefault(cls, _select_like)
    p = _Printer(layouts)
    p.lines.append("module {")
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            p.function(op)
        else:
            raise UnsupportedError(f"{op_context(op)}: only func.func ops can be exported at module level")
    p.lines.append("}")
    return "\n".join(p.lines) + "\n"
