"""Side effects and program structure: tokens, infeed/outfeed, send/recv, custom_call, composite,
optimization_barrier, dimension sizes.

Side-effecting ops are ordered by ``!hlo.token`` values, as in XLA and StableHLO:
``hlo.create_token`` makes one, ``hlo.after_all`` joins several, and every
feed or channel op takes a token and produces the next. IR forms (StableHLO's):

* ``hlo.infeed`` and ``hlo.recv`` take a token and return the data *arrays*
  followed by a token. XLA's tuple-shaped ``Infeed(shape)`` is one op with one
  result per tuple element (the builder regroups them with ``hlo.tuple``);
  nested tuples are not supported, as XLA's operation semantics say.
* ``hlo.outfeed`` and ``hlo.send`` take the data arrays followed by a token
  and return a token.
* Channels: ``channel_id`` and ``channel_type`` (``DEVICE_TO_DEVICE``,
  ``DEVICE_TO_HOST`` for sends to the host, ``HOST_TO_DEVICE`` for receives from
  it) stand for StableHLO's ``channel_handle``; ``is_host_transfer`` must agree
  with the type; ``source_target_pairs`` is a flat ``array<i64>`` of pairs.
* ``hlo.get_dimension_size`` / ``hlo.set_dimension_size``: shapes are static
  here. ``get`` returns the dimension's static size (``s32[]``); ``set`` keeps
  the operand's static shape - the bound of XLA's dynamic dimension - and passes
  the data through (the run-time size is checked against the bound, but later
  ops do not see it: there is no dynamic padding).
* ``hlo.custom_call`` keeps StableHLO's attribute names (``call_target_name``,
  ``backend_config`` - a string, or a dictionary for ``api_version = 4``
  typed-FFI calls -, ``has_side_effect``, ``operand_layouts``/``result_layouts``
  as lists of ``array<i64>`` minor-to-major orders, ``output_operand_aliases``
  as dictionaries) plus ``mhlo.backend_config``, where JAX puts the typed-FFI
  attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    f32,
    f64,
    i32,
)
from xdsl.ir import Attribute
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
    traits_def,
)
from xdsl.traits import Pure, SymbolTable

from ..errors import BuilderError, HloVerifyError, op_context
from ..layout import layout_of, strip_layout
from ..types import TokenType
from .base import (
    HloOp, fail, fmt, i64_array, ints, is_token, make_tensor, string, tensor, set_quantized, builder_method,
)
from .control_flow import as_list, one_or_tuple, same_types, types_text

TOKEN_TYPE = TokenType()

# ----------------------------------------------------------------------------
# Tokens
# ----------------------------------------------------------------------------


@irdl_op_definition
class CreateTokenOp(HloOp):
    """``hlo.create_token``: a fresh token (XLA's ``CreateToken``, an ``AfterAll`` of nothing)."""

    name = "hlo.create_token"
    result = result_def(TOKEN_TYPE)

    assembly_format = "attr-dict"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return [TOKEN_TYPE]


@irdl_op_definition
class AfterAllOp(HloOp):
    """``hlo.after_all``: a token ordered after every input token (a join of side effects)."""

    name = "hlo.after_all"
    inputs = var_operand_def(TOKEN_TYPE)
    result = result_def(TOKEN_TYPE)

    assembly_format = "`(` $inputs `)` attr-dict"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        for i, t in enumerate(operand_types):
            if not is_token(t):
                fail(cls.name, f"operand #{i} must be a token, got {fmt(t)}")
        return [TOKEN_TYPE]


# ----------------------------------------------------------------------------
# Infeed / outfeed
# ----------------------------------------------------------------------------


def _check_token_operand(op_name: str, t: Attribute, what: str = "the last operand") -> None:
    if not is_token(t):
        fail(op_name, f"{what} must be a token, got {fmt(t)}")


def _check_data_then_token(op_name: str, result_types, what: str) -> None:
    """Results are data arrays followed by one token (infeed, recv)."""
    if result_types is None:
        fail(op_name, f"result types must be given (the {what} arrays followed by a token)")
    if not result_types or not is_token(result_types[-1]):
        fail(op_name, f"the last result must be a token, got {types_text(result_types)}")
    for i, t in enumerate(result_types[:-1]):
        if not isinstance(t, TensorType):
            fail(op_name, f"result #{i} must be an array ({what} of nested tuples or tokens is not supported), "
                          f"got {fmt(t)}")


def _check_data_operands(op_name: str, operand_types, what: str) -> None:
    """Operands are data arrays followed by one token (outfeed, send)."""
    if not operand_types:
        fail(op_name, "expects the data operands followed by a token")
    _check_token_operand(op_name, operand_types[-1])
    for i, t in enumerate(operand_types[:-1]):
        if not isinstance(t, TensorType):
            fail(op_name, f"operand #{i} must be an array ({what} of tuples or tokens is not supported), got {fmt(t)}")


@irdl_op_definition
class InfeedOp(HloOp):
    """``hlo.infeed``: reads one item from the device's infeed queue; results are its arrays then a token."""

    name = "hlo.infeed"
    token = operand_def(TOKEN_TYPE)
    results_ = var_result_def()
    infeed_config = opt_prop_def(StringAttr)

    assembly_format = "$token attr-dict `:` type($results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        _check_token_operand(cls.name, operand_types[0], "the operand")
        _check_data_then_token(cls.name, result_types, "infeed")
        return list(result_types)


@irdl_op_definition
class OutfeedOp(HloOp):
    """``hlo.outfeed``: writes its data operands as one item to the outfeed queue; returns a token."""

    name = "hlo.outfeed"
    inputs = var_operand_def()
    result = result_def(TOKEN_TYPE)
    outfeed_config = opt_prop_def(StringAttr)

    assembly_format = "$inputs attr-dict `:` type($inputs)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        _check_data_operands(cls.name, operand_types, "outfeed")
        return [TOKEN_TYPE]


# ----------------------------------------------------------------------------
# Send / recv
# ----------------------------------------------------------------------------

CHANNEL_TYPES = {"DEVICE_TO_DEVICE": 1, "DEVICE_TO_HOST": 2, "HOST_TO_DEVICE": 3}
"""StableHLO/XLA ``ChannelHandle.type`` names -> numbers."""

HOST_CHANNEL_TYPE = {"hlo.send": "DEVICE_TO_HOST", "hlo.recv": "HOST_TO_DEVICE"}
"""The channel type of a host transfer, per op."""


def _check_channel(op_name: str, props: Mapping[str, Attribute]) -> None:
    """channel_id >= 0, a known channel type consistent with is_host_transfer, valid source_target_pairs."""
    channel_id = props["channel_id"].value.data
    if channel_id < 0:
        fail(op_name, f"channel_id must be non-negative, got {channel_id}")
    host = bool(props["is_host_transfer"].value.data) if "is_host_transfer" in props else None
    ctype = string(props.get("channel_type"), None)
    host_type = HOST_CHANNEL_TYPE[op_name]
    if ctype is not None and ctype not in ("DEVICE_TO_DEVICE", host_type):
        fail(op_name, f"channel_type must be DEVICE_TO_DEVICE or {host_type}, got {ctype!r}")
    if host is not None and ctype is not None and host != (ctype == host_type):
        fail(op_name, f"is_host_transfer = {str(host).lower()} contradicts channel_type {ctype} "
                      f"(host transfers are {host_type})")
    pairs = ints(props.get("source_target_pairs"))
    if len(pairs) % 2:
        fail(op_name, f"source_target_pairs must hold (source, target) pairs, got {len(pairs)} numbers")
    sources, targets = pairs[0::2], pairs[1::2]
    for what, ids in (("source", sources), ("target", targets)):
        if any(i < 0 for i in ids):
            fail(op_name, f"source_target_pairs has a negative {what} in {_pairs_text(pairs)}")
        if len(set(ids)) != len(ids):
            fail(op_name, f"source_target_pairs has a repeated {what} in {_pairs_text(pairs)}")


def _pairs_text(pairs: Sequence[int]) -> str:
    return "[" + ", ".join(f"[{s}, {t}]" for s, t in zip(pairs[0::2], pairs[1::2])) + "]"


def is_host_transfer(op) -> bool:
    """Whether a send/recv op talks to the host (its channel type or flag says so)."""
    props = op.properties
    if "is_host_transfer" in props:
        return bool(props["is_host_transfer"].value.data)
    return string(props.get("channel_type"), "DEVICE_TO_DEVICE") != "DEVICE_TO_DEVICE"


class _ChannelOp(HloOp):
    """The channel properties shared by send and recv."""

    channel_id = prop_def(IntegerAttr)
    channel_type = opt_prop_def(StringAttr)
    is_host_transfer = opt_prop_def(IntegerAttr[IntegerType])
    source_target_pairs = opt_prop_def(DenseArrayBase)


@irdl_op_definition
class SendOp(_ChannelOp):
    """``hlo.send``: sends its data operands on channel ``channel_id``; returns a token."""

    name = "hlo.send"
    inputs = var_operand_def()
    result = result_def(TOKEN_TYPE)

    assembly_format = "$inputs attr-dict `:` type($inputs)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        _check_data_operands(cls.name, operand_types, "send")
        _check_channel(cls.name, props)
        return [TOKEN_TYPE]


@irdl_op_definition
class RecvOp(_ChannelOp):
    """``hlo.recv``: receives one item from channel ``channel_id``; results are its arrays then a token."""

    name = "hlo.recv"
    token = operand_def(TOKEN_TYPE)
    results_ = var_result_def()

    assembly_format = "$token attr-dict `:` type($results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        _check_token_operand(cls.name, operand_types[0], "the operand")
        _check_data_then_token(cls.name, result_types, "recv")
        _check_channel(cls.name, props)
        return list(result_types)


# ----------------------------------------------------------------------------
# Optimization barrier, dimension sizes
# ----------------------------------------------------------------------------


@irdl_op_definition
class OptimizationBarrierOp(HloOp):
    """``hlo.optimization_barrier``: the identity on its operands; no computation moves across it."""

    name = "hlo.optimization_barrier"
    operands_ = var_operand_def()
    results_ = var_result_def()

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return list(operand_types)


def _dimension(op_name: str, operand: TensorType, props) -> int:
    dim = props["dimension"].value.data
    rank = operand.get_num_dims()
    if not 0 <= dim < rank:
        fail(op_name, f"dimension {dim} is out of range [0, {rank}) for operand {fmt(operand)}")
    return dim


@irdl_op_definition
class GetDimensionSizeOp(HloOp):
    """``hlo.get_dimension_size``: the size of dimension ``dimension`` of the operand, as ``s32[]``."""

    name = "hlo.get_dimension_size"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()
    dimension = prop_def(IntegerAttr)

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        _dimension(cls.name, tensor(cls.name, operand_types[0], "operand"), props)
        return [make_tensor(i32, [])]


@irdl_op_definition
class SetDimensionSizeOp(HloOp):
    """``hlo.set_dimension_size``: the operand with dimension ``dimension`` marked as having ``size`` elements.

    Shapes are static here: the result keeps the operand's type (the bound of
    XLA's dynamic dimension) and the data passes through unchanged.
    """

    name = "hlo.set_dimension_size"
    traits = traits_def(Pure())
    operand = operand_def()
    size = operand_def()
    result = result_def()
    dimension = prop_def(IntegerAttr)

    assembly_format = "$operand `,` $size attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        operand = tensor(cls.name, operand_types[0], "operand")
        size = operand_types[1]
        if not (isinstance(size, TensorType) and not size.get_shape() and size.element_type == i32):
            fail(cls.name, f"size must be an s32[] scalar, got {fmt(size)}")
        _dimension(cls.name, operand, props)
        return [operand]


# ----------------------------------------------------------------------------
# Calls: composite and custom_call
# ----------------------------------------------------------------------------

_NAMESPACED = re.compile(r"[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)+")


def _check_callee(op, symbol: SymbolRefAttr, what: str) -> None:
    """Check the function ``symbol`` names takes the op's operand types and returns its result types."""
    name = symbol.string_value()
    try:
        callee = SymbolTable.lookup_symbol(op, symbol)
    except ValueError:
        return  # not inside a module yet (being built): checked once it is
    ftype = getattr(callee, "function_type", None)
    if ftype is None:
        raise HloVerifyError(f"{op_context(op)}: {what} @{name} is not a function defined in the module")
    for kind, have, want in (("arguments", [o.type for o in op.operands], list(ftype.inputs)),
                             ("results", [r.type for r in op.results], list(ftype.outputs))):
        if not same_types(have, want):
            raise HloVerifyError(f"{op_context(op)}: {kind} {types_text(have)} do not match {what} @{name}'s "
                                 f"{'parameters' if kind == 'arguments' else 'results'} {types_text(want)}")


@irdl_op_definition
class CompositeOp(HloOp):
    """``hlo.composite``: an op named ``name`` whose meaning is the function ``decomposition``.

    Running it runs the decomposition (XLA's kCall with ``is_composite=true``);
    ``composite_attributes`` and ``version`` describe the op for tools.
    """

    name = "hlo.composite"
    inputs = var_operand_def()
    results_ = var_result_def()
    composite_name = prop_def(StringAttr, prop_name="name")
    composite_attributes = opt_prop_def(DictionaryAttr)
    decomposition = prop_def(SymbolRefAttr)
    version = opt_prop_def(IntegerAttr)

    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        name = props["name"].data
        if not _NAMESPACED.fullmatch(name):
            fail(cls.name, f"name {name!r} must be a namespaced op name such as 'my_namespace.my_op'")
        if "version" in props and props["version"].value.data < 0:
            fail(cls.name, f"version must be non-negative, got {props['version'].value.data}")
        if result_types is None:
            fail(cls.name, "result types must be given (they are the decomposition's result types)")
        return list(result_types)

    def verify_(self) -> None:
        super().verify_()
        _check_callee(self, self.decomposition, "decomposition")


API_VERSIONS = {0: "API_VERSION_UNSPECIFIED", 1: "API_VERSION_ORIGINAL", 2: "API_VERSION_STATUS_RETURNING",
                3: "API_VERSION_STATUS_RETURNING_UNIFIED", 4: "API_VERSION_TYPED_FFI"}
"""StableHLO's custom_call API versions."""

TYPED_FFI = 4


def _layouts(op_name: str, attr: Attribute, types: Sequence[Attribute], what: str) -> None:
    """Check ``{what}_layouts``: one minor-to-major permutation per array, empty for tokens."""
    if not isinstance(attr, ArrayAttr) or not all(isinstance(a, DenseArrayBase) for a in attr.data):
        fail(op_name, f"{what}_layouts must be a list of array<i64> layouts")
    layouts = [tuple(a.get_values()) for a in attr.data]
    if len(layouts) != len(types):
        fail(op_name, f"{what}_layouts has {len(layouts)} layouts for {len(types)} {what}s")
    for i, (layout, t) in enumerate(zip(layouts, types)):
        rank = t.get_num_dims() if isinstance(t, TensorType) else 0
        if isinstance(t, TupleType):
            fail(op_name, f"{what} #{i} is a tuple {fmt(t)}; layouts are given for arrays and tokens only")
        if sorted(layout) != list(range(rank)):
            fail(op_name, f"{what}_layouts[{i}] = {list(layout)} is not a permutation of 0..{rank - 1} "
                          f"for {what} #{i} {fmt(t)}")


def _aliased_type(op_name: str, types: Sequence[Attribute], index: Sequence[int], what: str) -> Attribute:
    """The type at tuple ``index`` (ShapeIndex) of a list of types."""
    t: Attribute | None = None
    elements = list(types)
    for depth, i in enumerate(index):
        if not 0 <= i < len(elements):
            fail(op_name, f"output_operand_aliases: {what} index {list(index)} is out of range")
        t = elements[i]
        elements = list(t.types) if isinstance(t, TupleType) else []
    return t


def _check_aliases(op_name: str, attr: Attribute, operand_types, result_types) -> None:
    """Each alias (output index, operand index, operand tuple index) pairs values of the same type."""
    if not isinstance(attr, ArrayAttr):
        fail(op_name, "output_operand_aliases must be a list of dictionaries")
    for k, alias in enumerate(attr.data):
        if not isinstance(alias, DictionaryAttr) or "operand_index" not in alias.data:
            fail(op_name, f"output_operand_aliases[{k}] must be a dictionary with operand_index, "
                          f"output_tuple_indices and operand_tuple_indices")
        fields = alias.data
        operand = fields["operand_index"].value.data
        if not 0 <= operand < len(operand_types):
            fail(op_name, f"output_operand_aliases[{k}]: operand_index {operand} is out of range for "
                          f"{len(operand_types)} operands")
        out_index = ints(fields.get("output_tuple_indices"))
        in_index = ints(fields.get("operand_tuple_indices"))
        out_t = (_aliased_type(op_name, result_types, out_index, "output") if out_index or len(result_types) != 1
                 else result_types[0])
        if out_t is None:
            fail(op_name, f"output_operand_aliases[{k}]: an op with {len(result_types)} results needs an "
                          f"output_tuple_indices")
        in_t = (_aliased_type(op_name, list(operand_types[operand].types), in_index, "operand")
                if in_index else operand_types[operand])
        if strip_layout(out_t) != strip_layout(in_t):
            fail(op_name, f"output_operand_aliases[{k}]: output {list(out_index)} has type {fmt(out_t)} but "
                          f"operand {operand} {list(in_index)} has type {fmt(in_t)}")


@irdl_op_definition
class CustomCallOp(HloOp):
    """``hlo.custom_call``: calls the implementation registered for ``call_target_name``.

    Result types are whatever the call declares. ``lowering.register_custom_call``
    provides implementations; the LAPACK targets JAX emits on CPU are built in.
    """

    name = "hlo.custom_call"
    inputs = var_operand_def()
    results_ = var_result_def()
    call_target_name = prop_def(StringAttr)
    has_side_effect = opt_prop_def(IntegerAttr[IntegerType])
    backend_config = opt_prop_def(StringAttr | DictionaryAttr)
    api_version = opt_prop_def(IntegerAttr)
    called_computations = opt_prop_def(ArrayAttr)
    operand_layouts = opt_prop_def(ArrayAttr)
    result_layouts = opt_prop_def(ArrayAttr)
    output_operand_aliases = opt_prop_def(ArrayAttr)
    mhlo_backend_config = opt_prop_def(DictionaryAttr, prop_name="mhlo.backend_config")

    assembly_format = "$call_target_name `(` $inputs `)` attr-dict `:` functional-type($inputs, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if not props["call_target_name"].data:
            fail(cls.name, "call_target_name must not be empty")
        if result_types is None:
            fail(cls.name, "result types must be given (a custom call declares its results)")
        version = props["api_version"].value.data if "api_version" in props else 0
        if version not in API_VERSIONS:
            fail(cls.name, f"api_version must be one of {sorted(API_VERSIONS)}, got {version}")
        if isinstance(props.get("backend_config"), DictionaryAttr) and version != TYPED_FFI:
            fail(cls.name, f"a dictionary backend_config needs api_version = {TYPED_FFI} (typed FFI), "
                           f"got {version}")
        if ("operand_layouts" in props) != ("result_layouts" in props):
            fail(cls.name, "operand_layouts and result_layouts must be given together or not at all")
        if "operand_layouts" in props:
            _layouts(cls.name, props["operand_layouts"], operand_types, "operand")
            _layouts(cls.name, props["result_layouts"], result_types, "result")
        if "called_computations" in props and not all(
                isinstance(c, SymbolRefAttr) for c in props["called_computations"].data):
            fail(cls.name, "called_computations must be a list of function symbols")
        if "output_operand_aliases" in props:
            _check_aliases(cls.name, props["output_operand_aliases"], operand_types, result_types)
        return list(result_types)


OPS = [CreateTokenOp, AfterAllOp, InfeedOp, OutfeedOp, SendOp, RecvOp, OptimizationBarrierOp,
       GetDimensionSizeOp, SetDimensionSizeOp, CompositeOp, CustomCallOp]
"""Every op class of this family (registered in the hlo dialect)."""

# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("transparent", InfeedOp, OutfeedOp, SendOp, RecvOp, OptimizationBarrierOp, GetDimensionSizeOp,
              CompositeOp, CustomCallOp)


# ----------------------------------------------------------------------------
# Attribute values <-> Python values (composite attributes, custom-call configs)
# ----------------------------------------------------------------------------


def attribute_from_python(value, what: str = "attribute") -> Attribute:
    """An xDSL attribute for a Python value.

    bool -> ``true``/``false`` (i1), int -> i64, NumPy integer scalars keep their
    type (``np.uint8(76)`` -> ``76 : ui8``, as typed-FFI attributes need), float ->
    f64 (``np.float32`` -> f32), str -> string, dict -> dictionary, a list of ints
    -> ``array<i64>``, other lists -> array attributes; attributes pass through.
    """
    if isinstance(value, Attribute):
        return value
    if isinstance(value, (bool, np.bool_)):
        return BoolAttr.from_bool(bool(value))
    if isinstance(value, np.integer):
        dtype = np.dtype(type(value))
        sign = Signedness.UNSIGNED if dtype.kind == "u" else Signedness.SIGNLESS
        return IntegerAttr(int(value), IntegerType(dtype.itemsize * 8, sign))
    if isinstance(value, int):
        return IntegerAttr(value, 64)
    if isinstance(value, np.float32):
        return FloatAttr(float(value), f32)
    if isinstance(value, (float, np.floating)):
        return FloatAttr(float(value), f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, Mapping):
        return DictionaryAttr({str(k): attribute_from_python(v, f"{what}[{k!r}]") for k, v in value.items()})
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(np.asarray(value).tolist()) if isinstance(value, np.ndarray) else list(value)
        if items and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return i64_array(items)
        return ArrayAttr([attribute_from_python(v, what) for v in items])
    raise BuilderError(f"{what}: cannot make an attribute from {type(value).__name__} {value!r}")


def python_from_attribute(attr: Attribute):
    """The Python value of an attribute (inverse of :func:`attribute_from_python`).

    Integers become ``int`` (``bool`` for i1), floats ``float``, strings
    ``str``, dictionaries ``dict``, arrays ``list``, symbols their name.
    """
    if isinstance(attr, IntegerAttr):
        v = attr.value.data
        return bool(v) if isinstance(attr.type, IntegerType) and attr.type.width.data == 1 else int(v)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DictionaryAttr):
        return {k: python_from_attribute(v) for k, v in attr.data.items()}
    if isinstance(attr, DenseArrayBase):
        return list(attr.get_values())
    if isinstance(attr, ArrayAttr):
        return [python_from_attribute(a) for a in attr.data]
    if isinstance(attr, SymbolRefAttr):
        return attr.string_value()
    return attr


# ----------------------------------------------------------------------------
# Builder methods
# ----------------------------------------------------------------------------


def _int_prop(value, what: str) -> IntegerAttr:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BuilderError(f"{what} must be an int, got {value!r}")
    return IntegerAttr(int(value), 64)


def _channel_id(builder, channel_handle) -> int:
    """The channel id of a ChannelHandle-like value: an int, or an object with ``handle``."""
    handle = getattr(channel_handle, "handle", channel_handle)
    if isinstance(handle, bool) or not isinstance(handle, (int, np.integer)):
        raise BuilderError(f"{builder._caller()}: channel_handle must be an int channel id (or have .handle), "
                           f"got {channel_handle!r}")
    return int(handle)


def _check_token(builder, token, what: str = "token"):
    value = builder._value(token, what)
    if not is_token(value.type):
        raise BuilderError(f"{builder._caller()}: {what} must be a token (from create_token/after_all), "
                           f"got {fmt(value.type)}")
    return token


class EffectsBuilder:
    """Builder methods of the effects family."""

    # -- tokens -----------------------------------------------------------------

    @builder_method
    def create_token(self):
        """``hlo.create_token``: a token to order side-effecting ops (XLA's ``CreateToken``)."""
        return self._emit1(CreateTokenOp)

    @builder_method
    def after_all(self, tokens: Sequence):
        """``hlo.after_all``: a token ordered after every token in ``tokens`` (XLA's ``AfterAll``)."""
        return self._emit1(AfterAllOp, list(tokens))

    # -- feeds ------------------------------------------------------------------

    def _data_types(self, shape, what: str) -> tuple[list[Attribute], bool]:
        """The array types read by an infeed/recv of ``shape`` and whether it is a tuple shape."""
        t = self._type(shape)
        if isinstance(t, TupleType):
            elements = list(t.types)
            for e in elements:
                if not isinstance(e, TensorType):
                    raise BuilderError(f"{self._caller()}: {what} shape {fmt(t)} has a nested tuple or token; "
                                       f"only a tuple of arrays is supported")
            return elements, True
        if not isinstance(t, TensorType):
            raise BuilderError(f"{self._caller()}: {what} shape must be an array or a tuple of arrays, got {fmt(t)}")
        return [t], False

    def _read(self, op_cls, token, shape, props: dict, what: str):
        """Emit infeed/recv; return (data, token) with data one XlaOp (a tuple XlaOp for tuple shapes)."""
        types, is_tuple = self._data_types(shape, what)
        results = self._emit(op_cls, [token], props, result_types=[*types, TOKEN_TYPE])
        data, out_token = results[:-1], results[-1]
        return (self.tuple(data) if is_tuple else data[0]), out_token

    def _infeed(self, token, shape, config: str):
        props = {"infeed_config": StringAttr(config)} if config else {}
        return self._read(InfeedOp, token, shape, props, "infeed")

    @builder_method
    def infeed_with_token(self, token, shape, config: str = ""):
        """``hlo.infeed`` after ``token``: reads one item of ``shape``; returns ``(data, token)``.

        A tuple ``shape`` reads one item holding an array per element (data is
        then a tuple-shaped XlaOp); the empty tuple reads nothing.
        """
        return self._infeed(_check_token(self, token), shape, config)

    @builder_method
    def infeed(self, shape, config: str = ""):
        """``hlo.infeed`` (XLA's ``Infeed``): reads one item of ``shape`` from the infeed queue; returns the data."""
        return self._infeed(self.create_token(), shape, config)[0]

    def _written(self, operand, shape_with_layout, what: str) -> list:
        """The arrays an outfeed/send writes for ``operand`` (tuple elements for a tuple)."""
        value = self._value(operand, "operand")
        if shape_with_layout is not None:
            want = self._type(shape_with_layout)
            if strip_layout(want) != strip_layout(value.type):
                raise BuilderError(f"{self._caller()}: shape_with_layout {fmt(want)} does not match the operand's "
                                   f"shape {fmt(value.type)}")
        if isinstance(value.type, TupleType):
            elements = [self.get_tuple_element(operand, i) for i in range(len(value.type.types))]
            for e in elements:
                if not isinstance(e.type, TensorType):
                    raise BuilderError(f"{self._caller()}: {what} of {fmt(value.type)}: only a tuple of arrays "
                                       f"is supported")
            return elements
        if not isinstance(value.type, TensorType):
            raise BuilderError(f"{self._caller()}: {what} operand must be an array or a tuple of arrays, "
                               f"got {fmt(value.type)}")
        return [operand]

    def _outfeed(self, operand, token, shape_with_layout, outfeed_config: str):
        data = self._written(operand, shape_with_layout, "outfeed")
        props = {"outfeed_config": StringAttr(outfeed_config)} if outfeed_config else {}
        return self._emit1(OutfeedOp, [*data, token], props)

    @builder_method
    def outfeed_with_token(self, operand, token, shape_with_layout=None, outfeed_config: str = ""):
        """``hlo.outfeed`` after ``token``: writes ``operand`` (an array, or a tuple as one item); returns a token.

        ``shape_with_layout`` must match the operand's shape; its layout is the
        transfer layout, which the host-side queue (logical arrays) does not need.
        """
        return self._outfeed(operand, _check_token(self, token), shape_with_layout, outfeed_config)

    @builder_method
    def outfeed(self, operand, shape_with_layout=None, outfeed_config: str = ""):
        """``hlo.outfeed`` (XLA's ``Outfeed``): writes ``operand`` to the outfeed queue; returns the token."""
        return self._outfeed(operand, self.create_token(), shape_with_layout, outfeed_config)

    # -- channels ---------------------------------------------------------------

    def _send(self, operand, token, shape_with_layout, channel_handle, channel_type: str, source_target_pairs):
        data = self._written(operand, shape_with_layout, "send")
        props = self._channel_props(channel_handle, channel_type, source_target_pairs)
        return self._emit1(SendOp, [*data, token], props)

    def _recv(self, token, shape, channel_handle, channel_type: str, source_target_pairs):
        props = self._channel_props(channel_handle, channel_type, source_target_pairs)
        return self._read(RecvOp, token, shape, props, "recv")

    def _channel_props(self, channel_handle, channel_type: str, source_target_pairs) -> dict:
        props = {"channel_id": IntegerAttr(_channel_id(self, channel_handle), 64),
                 "channel_type": StringAttr(channel_type),
                 "is_host_transfer": BoolAttr.from_bool(channel_type != "DEVICE_TO_DEVICE")}
        if source_target_pairs:
            props["source_target_pairs"] = i64_array([x for pair in source_target_pairs for x in pair])
        return props

    @builder_method
    def send_with_token(self, operand, token, channel_handle, source_target_pairs=()):
        """``hlo.send`` after ``token``: sends ``operand`` on channel ``channel_handle``; returns a token.

        ``source_target_pairs`` (``[(source, target), ...]`` device ids) routes
        the data between devices of a multi-device run.
        """
        return self._send(operand, _check_token(self, token), None, channel_handle, "DEVICE_TO_DEVICE",
                          source_target_pairs)

    @builder_method
    def send(self, operand, channel_handle):
        """``hlo.send`` (XLA's ``Send``): sends ``operand`` to the ``recv`` with the same channel; returns the token."""
        return self._send(operand, self.create_token(), None, channel_handle, "DEVICE_TO_DEVICE", ())

    @builder_method
    def recv_with_token(self, token, shape, channel_handle, source_target_pairs=()):
        """``hlo.recv`` after ``token``: receives data of ``shape`` from channel ``channel_handle``; ``(data, token)``."""
        return self._recv(_check_token(self, token), shape, channel_handle, "DEVICE_TO_DEVICE", source_target_pairs)

    @builder_method
    def recv(self, shape, channel_handle):
        """``hlo.recv`` (XLA's ``Recv``): the data of ``shape`` sent on the channel ``channel_handle``."""
        return self._recv(self.create_token(), shape, channel_handle, "DEVICE_TO_DEVICE", ())[0]

    @builder_method
    def send_to_host(self, operand, token, shape_with_layout, channel_handle):
        """``hlo.send`` to the host (XLA's ``SendToHost``): the host reads it from ``exe.channels``; returns a token."""
        return self._send(operand, _check_token(self, token), shape_with_layout, channel_handle, "DEVICE_TO_HOST",
                          ())

    @builder_method
    def recv_from_host(self, token, shape, channel_handle):
        """``hlo.recv`` from the host (XLA's ``RecvFromHost``): data the host put in ``exe.channels``; ``(data, token)``."""
        return self._recv(_check_token(self, token), shape, channel_handle, "HOST_TO_DEVICE", ())

    # -- structure --------------------------------------------------------------

    @builder_method
    def optimization_barrier(self, operand):
        """``hlo.optimization_barrier``: ``operand`` (one XlaOp, or a list of them) unchanged, evaluated first."""
        values = as_list(operand)
        results = self._emit(OptimizationBarrierOp, values)
        return results[0] if not isinstance(operand, (list, tuple)) else tuple(results)

    @builder_method
    def get_dimension_size(self, operand, dimension: int):
        """``hlo.get_dimension_size``: the size of ``dimension`` of ``operand`` as an ``s32[]`` (static shapes)."""
        return self._emit1(GetDimensionSizeOp, [operand], {"dimension": _int_prop(dimension, "dimension")})

    @builder_method
    def set_dimension_size(self, operand, size, dimension: int):
        """``hlo.set_dimension_size``: ``operand`` with ``dimension`` of run-time size ``size`` (an ``s32[]``).

        Static shapes only: the result keeps the operand's shape (the bound)
        and data; ``size`` is checked to be within ``[0, bound]`` when it runs.
        """
        return self._emit1(SetDimensionSizeOp, [operand, size], {"dimension": _int_prop(dimension, "dimension")})

    @builder_method
    def composite_call(self, computation, operands: Sequence, name: str, composite_attributes=None,
                       version: int = 0):
        """``hlo.composite`` (XLA's ``CompositeCall``): op ``name`` implemented by ``computation``.

        ``computation`` (callable or built computation) becomes the private
        decomposition function; ``composite_attributes`` is a dict of Python
        values or a ``DictionaryAttr``; ``version`` numbers semantic changes.
        """
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        fn_name, fn = self._function_symbol(computation, [v.type for v in values], "decomposition")
        props = {"name": StringAttr(str(name)), "decomposition": SymbolRefAttr(fn_name),
                 "version": _int_prop(version, "version")}
        if composite_attributes:
            props["composite_attributes"] = attribute_from_python(dict(composite_attributes)
                                                                  if isinstance(composite_attributes, Mapping)
                                                                  else composite_attributes, "composite_attributes")
        results = self._emit(CompositeOp, values, props, result_types=list(fn.function_type.outputs))
        return one_or_tuple(results) if results else None

    @builder_method
    def custom_call(self, call_target_name: str, operands: Sequence, shape, opaque: str = "",
                    has_side_effect: bool = False, output_operand_aliasing: Sequence = (),
                    api_version: int | None = None, operand_shapes_with_layout: Sequence | None = None,
                    backend_config: Mapping | None = None, called_computations: Sequence = ()):
        """``hlo.custom_call`` (XLA's ``CustomCall`` / ``CustomCallWithLayout``).

        ``shape`` is the result shape; a tuple shape gives one result per
        element (returned as a tuple of XlaOps). ``opaque`` is the string
        backend config; ``backend_config`` a dict of attributes for a typed-FFI
        call (``api_version`` 4, e.g. ``{"uplo": np.uint8(ord("L"))}``).
        ``output_operand_aliasing`` lists ``(output_index, (operand_index,
        operand_index_path))`` pairs as in XLA. With ``operand_shapes_with_layout``
        the operand layouts and the layouts of ``shape`` become the
        ``operand_layouts``/``result_layouts`` constraints.
        """
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        t = self._type(shape)
        result_types = list(t.types) if isinstance(t, TupleType) else [t]
        if backend_config is not None and opaque:
            raise BuilderError(f"{self._caller()}: give either opaque (a string) or backend_config (a dict), not both")
        if api_version is None:
            api_version = TYPED_FFI if backend_config is not None else 1
        props: dict = {"call_target_name": StringAttr(str(call_target_name)),
                       "api_version": IntegerAttr(int(api_version), 32)}
        if has_side_effect:
            props["has_side_effect"] = BoolAttr.from_bool(True)
        if backend_config is not None:
            props["backend_config"] = attribute_from_python(dict(backend_config), "backend_config")
        elif opaque:
            props["backend_config"] = StringAttr(opaque)
        if operand_shapes_with_layout is not None:
            props.update(self._custom_call_layouts(values, operand_shapes_with_layout, result_types))
        if called_computations:
            names = [self._function_symbol(c, self._computation_params(c), "called_computation")[0]
                     for c in called_computations]
            props["called_computations"] = ArrayAttr([SymbolRefAttr(n) for n in names])
        if output_operand_aliasing:
            props["output_operand_aliases"] = ArrayAttr([_alias_attr(self, a) for a in output_operand_aliasing])
        results = self._emit(CustomCallOp, values, props, result_types=result_types)
        return one_or_tuple(results) if results else None

    def _computation_params(self, computation) -> list[Attribute]:
        """Parameter types of a built computation (called computations must be built ones)."""
        return list(self._func_of(computation, "called_computation").function_type.inputs)

    def _custom_call_layouts(self, values, operand_shapes, result_types) -> dict:
        """operand_layouts/result_layouts from CustomCallWithLayout's shapes."""
        operand_shapes = [self._type(s) for s in operand_shapes]
        if len(operand_shapes) != len(values):
            raise BuilderError(f"{self._caller()}: {len(operand_shapes)} operand_shapes_with_layout for "
                               f"{len(values)} operands")
        for i, (s, v) in enumerate(zip(operand_shapes, values)):
            if strip_layout(s) != strip_layout(v.type):
                raise BuilderError(f"{self._caller()}: operand_shapes_with_layout[{i}] {fmt(s)} does not match "
                                   f"operand #{i} {fmt(v.type)}")

        def layout(t: Attribute) -> DenseArrayBase:
            if not isinstance(t, TensorType):
                return i64_array([])
            known = layout_of(t)
            m2m = known.minor_to_major if known is not None else tuple(range(t.get_num_dims() - 1, -1, -1))
            return i64_array(m2m)

        return {"operand_layouts": ArrayAttr([layout(s) for s in operand_shapes]),
                "result_layouts": ArrayAttr([layout(t) for t in result_types])}


def _alias_attr(builder, alias) -> DictionaryAttr:
    """XLA's ``(ShapeIndex output, (operand_index, ShapeIndex operand))`` as a dictionary attribute."""
    try:
        output, (operand, operand_index) = alias
        return DictionaryAttr({"output_tuple_indices": i64_array(as_list(output) if output != () else []),
                               "operand_index": IntegerAttr(int(operand), 64),
                               "operand_tuple_indices": i64_array(list(operand_index))})
    except (TypeError, ValueError):
        raise BuilderError(f"{builder._caller()}: output_operand_aliasing entries are (output_index, "
                           f"(operand_index, operand_index_path)), got {alias!r}") from None
