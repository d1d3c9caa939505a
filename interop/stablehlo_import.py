"""Import StableHLO (text, bytecode, portable artifacts) into the hlo dialect.

StableHLO is read with jaxlib's own MLIR Python bindings (``jaxlib.mlir``):
``ir.Module.parse`` or ``stablehlo.deserialize_portable_artifact`` builds the
MLIR module, and :class:`Importer` walks it op by op, building hlo ops. Reading
through jaxlib rather than xDSL's parser is about 15x faster and understands
JAX's pretty syntax (``stablehlo.reduce(...) applies stablehlo.add``).

Conversion is table-driven:

* :data:`CONVERTERS` maps an op name (``stablehlo.constant``, ``func.call``, ...)
  to a converter for the ops that are not 1:1; every other ``stablehlo.<name>``
  becomes ``hlo.<name>`` (looked up in :data:`xla_dialect.ops.OPS_BY_NAME` at
  import time, so op families added later are picked up) with its attributes
  converted generically: ``array<i64>`` stays ``array<i64>``, enums
  (``#stablehlo<comparison_direction LT>``) become strings, dimension-number
  structs (``#stablehlo.dot<...>``, ``#stablehlo.gather<...>``,
  ``#stablehlo.scatter<...>``, ``#stablehlo.conv<...>``) become one property per
  field, 2-D dense integer attributes (``padding``) become flat ``array<i64>``.
* chlo ops: ``chlo.mulhi``, ``chlo.scan``, ``chlo.top_k`` and ``chlo.erf`` have
  converters of their own; every other chlo op is copied alone into a one-op
  module that XLA expands with its own decompositions (:func:`legalize_chlo_op`,
  cached), and the expansion's ops take its place (:meth:`Importer.inline_expansion`),
  so chlo ops work in functions of any name and leave the rest untouched.
* Quantized text (``!quant.uniform`` element types, which jaxlib cannot parse)
  is rewritten by :func:`parse_stablehlo`, which records each op's
  quantization on the op (:data:`QUANTIZATION`); see :mod:`interop.stablehlo_quant`.
* Types are converted once per distinct MLIR type (cache keyed by the uniqued
  ``ir.Type``); attributes once per distinct ``ir.Attribute``.
* Each op gets its source location as a ``loc`` string attribute
  (``file.py:12``), which :func:`xla_dialect.errors.op_context` puts in messages.

Anything without a counterpart raises :class:`~xla_dialect.errors.UnsupportedError`
naming the op and its location. The importer does not run the hlo verifier by
default: the input was verified by MLIR when it was parsed, and
``lowering.compile`` verifies the hlo module; pass ``verify=True`` to check now.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IndexType,
    Signedness,
    DictionaryAttr,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TupleType,
    DYNAMIC_INDEX,
    UNKNOWN_LOC,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue, SSAValues, Use

from xla_dialect.errors import MlirParseError, UnsupportedError, XlaError
from xla_dialect.layout import LayoutAttr, parse_layout
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops import OPS_BY_NAME
from xla_dialect.ops.base import i64_array
from xla_dialect.types import ELEMENT_TYPES, ElementType, TokenType

from .schema import (  # noqa: F401  (QUANTIZATION is also read from here by users)
    BRANCH_ARGUMENT,
    BRANCH_OPERANDS,
    BROADCAST_DIMENSIONS,
    CHANNEL_TYPES,
    IMPLICIT_BROADCAST,
    ORIGINAL_OP,
    QUANTIZATION,
    QUANTIZED,
    REGION_ARG_LAYOUTS,
    RESULT_LAYOUTS,
    STATE_ARG,
    STATE_PART,
    STATE_RESULT,
    STATE_RETURN,
    STRUCT_FIELDS,
    TUPLE_STATE,
    leaf_types as _leaf_types,
)


__all__ = [
    "CONVERTERS",
    "Importer",
    "OpEmitter",
    "QUANTIZATION",
    "import_mlir_module",
    "import_stablehlo",
    "legalize_chlo_op",
    "mlir_context",
    "parse_stablehlo",
    "register_converter",
]

# ----------------------------------------------------------------------------
# jaxlib MLIR access
# ----------------------------------------------------------------------------

_CONTEXT = None


def _ir():
    from jaxlib.mlir import ir

    return ir


def mlir_context():
    """The jaxlib MLIR context used to parse StableHLO (created once).

    It has every dialect JAX emits registered (stablehlo, chlo, func, sdy, ...)
    and allows unregistered dialects so that test-harness ops such as
    ``check.expect_eq`` in the generic form parse (converters may handle them).
    """
    global _CONTEXT
    if _CONTEXT is None:
        from jax._src.interpreters import mlir as jax_mlir

        _CONTEXT = jax_mlir.make_ir_context()
        _CONTEXT.allow_unregistered_dialects = True
    return _CONTEXT


_BYTECODE_MAGIC = b"ML\xefR"


def parse_stablehlo(source, trusted: bool = False):
    """Parse StableHLO into a jaxlib ``ir.Module``.

    MLIR bytecode is untrusted input for jaxlib's C++ reader, which aborts the process or loops on some
    corrupted bytes: unless ``trusted``, it is checked structurally and then read once in a child process
    (about 0.5 s) before this process reads it (:mod:`interop.bytecode_check`).

    ``source`` is MLIR text (pretty or generic form, ``str`` or UTF-8 ``bytes``),
    MLIR bytecode, or a StableHLO portable artifact (versioned VHLO bytecode,
    as in ``Exported.mlir_module_serialized``). Raises
    :class:`~xla_dialect.errors.MlirParseError` with MLIR's diagnostic.

    jaxlib has no ``quant`` dialect: text with ``!quant.uniform`` element
    types is rewritten to their expressed types first
    (:func:`interop.stablehlo_quant.expand_quantized_text`), and each op with
    quantized results carries them in a ``hlo.quantization`` attribute, so
    that the module can be edited and then imported like any other.
    """
    ir = _ir()
    ctx = mlir_context()
    if isinstance(source, ir.Module):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if data.startswith(_BYTECODE_MAGIC):
            from jaxlib.mlir.dialects import stablehlo

            from .bytecode_check import check_bytecode, check_in_subprocess

            check_bytecode(data)  # jaxlib's C++ reader aborts the process on some malformed input
            if not trusted:
                check_in_subprocess(data)

            try:
                with ctx:
                    return stablehlo.deserialize_portable_artifact(ctx, data)
            except Exception:  # plain MLIR bytecode rather than a VHLO artifact
                pass
            try:
                with ctx, ir.Location.unknown():
                    return ir.Module.parse(data)
            except Exception as e:
                raise MlirParseError(f"cannot read the MLIR bytecode / StableHLO portable artifact: {e}") from None
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MlirParseError("bytes are neither MLIR bytecode (magic 'ML\\xefR') nor UTF-8 MLIR text") from None
    if not isinstance(source, str):
        raise MlirParseError(f"expected StableHLO text or bytes, got {type(source).__name__}")
    table = None
    if "!quant." in source:
        from .stablehlo_quant import expand_quantized_text

        source, table = expand_quantized_text(source)
    try:
        with ctx, ir.Location.unknown():
            module = ir.Module.parse(source)
    except Exception as e:
        raise MlirParseError(f"cannot parse the StableHLO text: {e}") from None
    if table is not None:
        _annotate_quantization(module, table)
    return module




def _annotate_quantization(module, table: dict) -> None:
    """Move the per-line table of :func:`~interop.stablehlo_quant.expand_quantized_text` onto the ops."""
    ir = _ir()
    ops = []

    def visit(op):
        loc = op.location
        if isinstance(loc, ir.FileLineColLoc) and loc.filename == "-" and loc.start_line in table:
            ops.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit)
        for op in ops:
            kind, infos = table[op.location.start_line]
            # Without the "!quant." prefix: printed and parsed again, the text is plain StableHLO.
            spellings = [kind] + [str(i)[len("!quant."):] if i is not None else "" for i in infos]
            op.attributes[QUANTIZATION] = ir.ArrayAttr.get([ir.StringAttr.get(t) for t in spellings])
        module.operation.attributes[QUANTIZED] = ir.UnitAttr.get()


# ----------------------------------------------------------------------------
# Types
# ----------------------------------------------------------------------------

ELEMENT_BY_MLIR: dict[str, ElementType] = {str(e.mlir): e for e in ELEMENT_TYPES.values()}
"""MLIR spelling of an element type (``f8E4M3FN``, ``ui4``, ``complex<f32>``) -> :class:`ElementType`."""

_DYNAMIC = -(2**63)


def convert_element_type(text: str, what: str = "element type") -> ElementType:
    """The :class:`ElementType` of an MLIR element-type spelling."""
    e = ELEMENT_BY_MLIR.get(text)
    if e is None:
        if text.startswith("!quant."):
            raise UnsupportedError(f"quantized {what} {text} is not supported yet")
        raise UnsupportedError(f"{what} {text} has no XLA equivalent")
    return e


def convert_type(t, cache: dict | None = None, allow_dynamic: bool = False) -> Attribute:
    """An xDSL type for a jaxlib ``ir.Type`` (tensor, tuple, token).

    ``?`` dimensions are an error unless ``allow_dynamic`` (they are then kept:
    xDSL and MLIR use the same marker value).
    """
    if cache is not None:
        hit = cache.get(t)
        if hit is not None:
            return hit
    ir = _ir()
    if isinstance(t, ir.RankedTensorType):
        shape = list(t.shape)
        if _DYNAMIC in shape and not allow_dynamic:
            raise UnsupportedError(
                f"dynamic shape {t} is not supported: refine it with example arguments (static shapes), "
                "or import with allow_unknown=True to keep it (round trip only)")
        if t.encoding is not None:
            raise UnsupportedError(f"tensor encoding in {t} (bounded dynamic shapes) is not supported yet")
        result: Attribute = TensorType(convert_element_type(str(t.element_type)).mlir, shape)
    elif isinstance(t, ir.TupleType):
        result = TupleType([convert_type(t.get_type(i), cache, allow_dynamic) for i in range(t.num_types)])
    else:
        text = str(t)
        if text == "!stablehlo.token":
            result = TokenType()
        elif isinstance(t, ir.UnrankedTensorType):
            raise UnsupportedError(f"unranked tensor type {text} is not supported")
        elif text.startswith("tensor<"):
            raise UnsupportedError(f"type {text} is not supported")
        else:
            raise UnsupportedError(f"type {text} is not an XLA shape (tensor, tuple or token)")
    if cache is not None:
        cache[t] = result
    return result


# ----------------------------------------------------------------------------
# Dense literals
# ----------------------------------------------------------------------------

_NATIVE_DTYPES = frozenset(
    np.dtype(d) for d in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                          np.uint64, np.float16, np.float32, np.float64)
)
_DENSE_TOKEN = re.compile(r"true|false|[-+]?0x[0-9a-fA-F]+|[-+]?(?:inf|nan|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")


def dense_array(attr, text: str | None, type_: TensorType) -> np.ndarray:
    """The NumPy array held by a ``dense<...>`` attribute of tensor type ``type_``.

    jaxlib's buffer protocol handles booleans, 8- to 64-bit integers and f16/32/64
    (``attr`` given); every other element type (bf16, f8, f4, i2/i4/u2/u4,
    complex, for which jaxlib cannot even hand out the attribute object) is
    read from the attribute's text ``text``: a hex blob of the raw storage
    (one byte per element below 8 bits), a splat, or nested lists where
    non-finite floats are written as hex bit patterns.
    """
    element = ELEMENT_BY_MLIR[str(type_.element_type)]
    shape = tuple(type_.get_shape())
    from xla_dialect.limits import check_bytes

    check_bytes(int(np.prod(shape, dtype=object)) * element.dtype.itemsize, f"the constant of type {type_}")
    if attr is not None and element.dtype in _NATIVE_DTYPES:
        arr = np.array(attr)
        if arr.dtype != element.dtype:
            arr = arr.astype(element.dtype)
        return arr.reshape(shape)
    if text is None:
        text = str(attr)
    return parse_dense_text(text, element, shape)


def parse_dense_text(text: str, element: ElementType, shape: tuple[int, ...]) -> np.ndarray:
    """Parse ``dense<BODY> : type`` (or just BODY) into an array of ``element`` and ``shape``."""
    body = text.strip()
    if body.startswith("dense<"):
        body = body[len("dense<"):body.rfind("> : ")]
    body = body.strip()
    dtype = element.dtype
    count = int(np.prod(shape)) if shape else 1
    if body.startswith('"'):
        data = bytes.fromhex(body.strip('"')[2:])
        if len(data) == dtype.itemsize:
            return np.broadcast_to(np.frombuffer(data, dtype=dtype).reshape(()), shape).copy()
        if len(data) != count * dtype.itemsize:
            raise UnsupportedError(f"dense hex data has {len(data)} bytes; expected {count * dtype.itemsize}")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    tokens = _DENSE_TOKEN.findall(body)
    if element.kind == "complex":
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        flat = _tokens_to_array(tokens, part, "float").view(dtype)
    else:
        flat = _tokens_to_array(tokens, dtype, element.kind)
    if flat.size == 1:
        return np.broadcast_to(flat.reshape(()), shape).copy()
    if flat.size != count:
        raise UnsupportedError(f"dense literal has {flat.size} elements; its type needs {count}")
    return flat.reshape(shape)


def _tokens_to_array(tokens: list[str], dtype: np.dtype, kind: str) -> np.ndarray:
    if kind == "pred":
        return np.array([t == "true" or (t not in ("false",) and int(t, 0) != 0) for t in tokens], dtype=np.bool_)
    if kind in ("sint", "uint"):
        wide = np.array([int(t, 0) for t in tokens], dtype=object)
        return wide.astype(np.int64 if kind == "sint" else np.uint64).astype(dtype)
    if any(t.lstrip("+-").startswith("0x") for t in tokens):
        # Floats written as bit patterns (NaN payloads, infinities) mixed with decimals.
        bits_dtype = np.dtype(f"u{dtype.itemsize}")
        out = np.empty(len(tokens), dtype=dtype)
        for i, t in enumerate(tokens):
            if t.lstrip("+-").startswith("0x"):
                out[i] = np.array(int(t, 16), dtype=bits_dtype).view(dtype)
            else:
                out[i] = np.float64(t).astype(dtype)
        return out
    return np.array([float(t) for t in tokens], dtype=np.float64).astype(dtype)


# ----------------------------------------------------------------------------
# Attributes
# ----------------------------------------------------------------------------

_PY_FIELD_NAMES = {"scatter_dims_to_operand_dims": "scattered_dims_to_operand_dims"}  # jaxlib's Python spelling

IGNORED_ATTRIBUTES = frozenset({
    "precision_config", "algorithm", "mhlo.sharding", "mhlo.frontend_attributes", "sdy.sharding",
    "sdy.sharding_rule", "mhlo.original_value", "result_accuracy", "indices_are_sorted", "unique_indices",
    "xla_shape", "mhlo.layout_mode", "jax.result_info", "mhlo.is_same_data_across_replicas",
    "layout",  # infeed's result layouts: XLA's CPU runtime takes any
})
"""Attributes dropped when the hlo op has no property of that name: hints and
metadata that do not change results on a CPU (precision, sharding, sortedness
promises, the default result accuracy), as XLA's CPU backend treats them."""

_ENUM_TEXT = re.compile(r"#stablehlo<([a-z_]+) ([A-Za-z0-9_]+)>")


def _struct_kind(attr):
    """(kind, typed attribute) for a dimension-numbers struct attribute, else (None, None)."""
    from jaxlib.mlir.dialects import stablehlo

    for kind, cls in (("dot", stablehlo.DotDimensionNumbers), ("gather", stablehlo.GatherDimensionNumbers),
                      ("scatter", stablehlo.ScatterDimensionNumbers), ("conv", stablehlo.ConvDimensionNumbers)):
        if cls.isinstance(attr):
            return kind, cls(attr)
    return None, None


def _exact_integer(attr) -> IntegerAttr:
    """An integer attribute with its MLIR type kept (i32 stays i32, ui8 stays ui8)."""
    t = attr.type
    if isinstance(t, _ir().IndexType):
        return IntegerAttr(attr.value, IndexType())
    sign = Signedness.UNSIGNED if t.is_unsigned else Signedness.SIGNED if t.is_signed else Signedness.SIGNLESS
    return IntegerAttr(attr.value, IntegerType(t.width, sign))


def convert_attribute(attr, exact: bool = False) -> Any:
    """Convert one jaxlib attribute to xDSL.

    Returns an xDSL attribute, or a ``dict`` of field name -> attribute for a
    struct (dimension numbers, channel handles) which becomes several
    properties. Integers become i64 (the hlo convention for op properties)
    unless ``exact``, used inside dictionaries (``composite_attributes``,
    ``mhlo.backend_config``) whose consumers read the declared types.
    """
    ir = _ir()
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return i64_array(list(attr))
    if isinstance(attr, ir.BoolAttr):
        return BoolAttr(bool(attr.value), IntegerType(1))
    if isinstance(attr, ir.IntegerAttr):
        return _exact_integer(attr) if exact else IntegerAttr(attr.value, 64)
    if isinstance(attr, ir.StringAttr):
        return StringAttr(attr.value)
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return SymbolRefAttr(attr.value)
    if isinstance(attr, ir.FloatAttr):
        width = str(attr.type)
        return FloatAttr(attr.value, f64 if width == "f64" else f32 if width == "f32" or not exact
                         else ELEMENT_BY_MLIR[width].mlir)
    if isinstance(attr, ir.DenseBoolArrayAttr):
        return DenseArrayBase.from_list(IntegerType(1), [int(bool(v)) for v in attr])
    if isinstance(attr, ir.DenseI32ArrayAttr):
        return i64_array(list(attr))
    if isinstance(attr, ir.UnitAttr):
        return UnitAttr()
    if isinstance(attr, ir.DenseIntElementsAttr):
        # 1-D and 2-D integer attributes (old-style dimension lists, padding
        # pairs, layouts) become a flat array<i64>, row-major (ops that keep
        # them 2-D get dense_elements() through Importer.properties).
        return i64_array(np.array(attr).reshape(-1).tolist())
    if isinstance(attr, ir.ArrayAttr):
        return ArrayAttr([convert_attribute(a, exact) for a in attr])
    if isinstance(attr, ir.DictAttr):
        return DictionaryAttr({attr[i].name: convert_attribute(attr[i].attr, True) for i in range(len(attr))})
    if isinstance(attr, ir.TypeAttr):
        return convert_type(attr.value)
    kind, typed = _struct_kind(attr)
    if kind is not None:
        fields = {}
        for name, field_kind in STRUCT_FIELDS[kind]:
            value = getattr(typed, _PY_FIELD_NAMES.get(name, name))
            fields[name] = IntegerAttr(int(value), 64) if field_kind == "int" else i64_array(list(value))
        return fields
    from jaxlib.mlir.dialects import stablehlo

    if stablehlo.ChannelHandle.isinstance(attr):
        handle = stablehlo.ChannelHandle(attr)
        return {"channel_id": IntegerAttr(handle.handle, 64),
                "channel_type": StringAttr(CHANNEL_TYPES.get(handle.channel_type, str(handle.channel_type)))}
    if stablehlo.OutputOperandAlias.isinstance(attr):
        alias = stablehlo.OutputOperandAlias(attr)
        return DictionaryAttr({"output_tuple_indices": i64_array(list(alias.output_tuple_indices)),
                               "operand_index": IntegerAttr(alias.operand_index, 64),
                               "operand_tuple_indices": i64_array(list(alias.operand_tuple_indices))})
    text = str(attr)
    m = _ENUM_TEXT.fullmatch(text)
    if m:
        return StringAttr(m.group(2))
    raise UnsupportedError(f"attribute {text} is not supported")


def dense_elements(attr) -> DenseIntOrFPElementsAttr:
    """A 2-D (any rank) integer ``dense<...>`` attribute as xDSL's builtin one, shape kept
    (``replica_groups``, ``source_target_pairs`` of the collectives)."""
    array = np.array(attr)
    shape = list(attr.type.shape)
    return DenseIntOrFPElementsAttr.from_list(TensorType(i64, shape), array.reshape(-1).astype(np.int64).tolist())


# ----------------------------------------------------------------------------
# Locations
# ----------------------------------------------------------------------------


_OWN_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
    for d in ("interop", "lowering", "xla_dialect")
)


def location_text(loc) -> str | None:
    """``file.py:12`` for the innermost file location of ``loc`` (None if it has none).

    JAX writes ``loc("jit(f)/sin"(callsite("f"("a.py":5:12) at ...)))``: names
    wrap call sites whose callee is the frame that created the op.
    """
    ir = _ir()
    for _ in range(64):  # nesting depth guard
        if isinstance(loc, ir.FileLineColLoc):
            if loc.filename == "-":
                return None  # the parser's position in the input text, not a source location
            return f"{loc.filename}:{loc.start_line}"
        if isinstance(loc, ir.NameLoc):
            loc = loc.child_loc
        elif isinstance(loc, ir.CallSiteLoc):
            inner = location_text(loc.callee)
            if inner is None or inner.startswith(_OWN_DIRS):
                # Frames of this toolkit (import_jax tracing the function) are not the user's.
                outer = location_text(loc.caller)
                return outer if outer is not None else inner
            return inner
        elif isinstance(loc, ir.FusedLoc):
            for sub in loc.locations:
                text = location_text(sub)
                if text is not None:
                    return text
            return None
        else:
            return None
    return None


# ----------------------------------------------------------------------------
# The importer
# ----------------------------------------------------------------------------

Converter = Callable[["Importer", Any], "list[SSAValue] | None"]

CONVERTERS: dict[str, Converter] = {}
"""Op name -> converter ``fn(importer, op)`` for ops that are not a 1:1 rename.

A converter appends hlo ops through :meth:`Importer.emit` and returns the
values that replace the op's results (or None when it has none)."""


def register_converter(name: str):
    """Decorator registering a converter for the MLIR op ``name`` (replaces any previous one)."""

    def deco(fn: Converter) -> Converter:
        CONVERTERS[name] = fn
        return fn

    return deco


class Importer:
    """Walks a jaxlib ``ir.Module`` and builds the equivalent hlo ``ModuleOp``."""

    def __init__(self, allow_unknown: bool = False, quant_lines: dict | None = None):
        self.allow_unknown = allow_unknown  # keep unknown ops / dynamic shapes as opaque ops
        self.types: dict = {}  # ir.Type -> xDSL type
        self.quant_lines: dict = quant_lines or {}  # source line -> (kind, quantized types), see stablehlo_quant
        self.quantized = bool(self.quant_lines)  # ops may carry quantizations (table or QUANTIZATION attributes)
        self.quant_types: dict = {}  # quantized type spelling -> UniformQuantizedType
        self.result_override = None  # (MLIR op, result types) while an op with quantized results converts
        self.loc_override: dict | None = None  # location attributes for ops inlined from an expansion
        self.extra_functions: list[func.FuncOp] = []  # functions of chlo expansions, added to the module
        self.callee_renames: dict[str, str] = {}  # callee symbol -> its name in the module (expansions)
        self.symbols: set[str] = set()  # function names of the module
        self.values: dict = {}  # ir.Value -> SSAValue
        self.attrs: dict = {}  # ir.Attribute -> converted
        self.locs: dict = {}  # location attribute -> "file:line" | None
        self.op_defs: dict = {}  # hlo op class -> property names
        self.dense_props: dict = {}  # hlo op class -> properties kept as 2-D dense elements
        self.branch_operands: dict = {}  # marker tuple ir.Value -> hlo.conditional branch operands
        # Restoring the exporter's flattened tuple-state while loops:
        self.state_roots: dict = {}  # leaf ir.Value -> the tuple it was read from
        self.state_args: list[list[SSAValue]] = []  # block arguments of the regions being converted
        self.state_types: list[list[Attribute]] = []  # state types of the loops being converted
        self.state_results: list[SSAValue] = []  # results of the last restored loop
        self.ops_by_name = OPS_BY_NAME
        self._ops: list[Operation] = []  # ops of the block being built
        self._current = None  # the MLIR op being converted (for messages)
        self._ir = _ir()

    # -- entry ----------------------------------------------------------------

    def import_module(self, module) -> ModuleOp:
        """Convert a jaxlib ``ir.Module`` (every ``func.func`` of its body)."""
        ops: list[Operation] = []
        with module.context:
            if QUANTIZED in module.operation.attributes:
                self.quantized = True
            body = list(module.body.operations)
            self.symbols.update(op.attributes["sym_name"].value for op in body if op.operation.name == "func.func")
            for op in body:
                name = op.operation.name
                if name == "func.func":
                    ops.append(self.function(op))
                elif name in ("sdy.mesh",):
                    continue  # sharding metadata: one device here
                else:
                    raise UnsupportedError(f"{self._where_op(op)}: module-level op {name} is not supported")
        return ModuleOp(ops + self.extra_functions)

    # -- services for converters ------------------------------------------------

    def type(self, t) -> Attribute:
        """The xDSL type of a jaxlib type (cached)."""
        hit = self.types.get(t)
        if hit is None:
            hit = convert_type(t, self.types, self.allow_unknown)
        return hit

    def value(self, v) -> SSAValue:
        """The hlo value standing for a jaxlib value."""
        try:
            return self.values[v]
        except KeyError:
            raise UnsupportedError(f"{self._where()}: operand {v.get_name()} is not defined before its use") from None

    def operands(self, op) -> list[SSAValue]:
        """The hlo values of an MLIR op's operands."""
        values = self.values
        try:
            return [values[v] for v in op.operands]
        except KeyError:
            return [self.value(v) for v in op.operands]

    def result_types(self, op) -> list[Attribute]:
        """The xDSL types of an MLIR op's results."""
        override = self.result_override
        if override is not None and override[0] == op:
            return list(override[1])
        types = self.types
        out = []
        for r in op.results:
            t = r.type
            x = types.get(t)
            out.append(x if x is not None else self.type(t))
        return out


    def with_result_types(self, op, types: list[Attribute], convert: Callable[[], Any]):
        """Run ``convert()`` with ``types`` as MLIR ``op``'s result types (its quantized types)."""
        saved, self.result_override = self.result_override, (op, types)
        try:
            return convert()
        finally:
            self.result_override = saved

    def location(self, op) -> str | None:
        """``file:line`` of an MLIR op (cached per location)."""
        attrs = self._loc_attributes(op)
        return attrs["loc"].data if attrs else None

    def _loc_attributes(self, op) -> dict:
        """``{"loc": StringAttr("file:line")}`` (or ``{}``) for an MLIR op, one attribute per location."""
        if self.loc_override is not None:
            return self.loc_override
        key = op.location.attr
        try:
            return self.locs[key]
        except KeyError:
            text = location_text(op.location)
            attrs = self.locs[key] = {"loc": StringAttr(text)} if text else {}
            return attrs

    def attribute(self, attr) -> Any:
        """Converted jaxlib attribute (cached; see :func:`convert_attribute`)."""
        try:
            return self.attrs[attr]
        except KeyError:
            try:
                value = convert_attribute(attr)
            except UnsupportedError as e:
                raise UnsupportedError(f"{self._where()}: {e}") from None
            self.attrs[attr] = value
            return value

    def properties(self, op, cls, renames: dict[str, str] | None = None) -> dict[str, Attribute]:
        """Properties of hlo op ``cls`` from the attributes of MLIR op ``op``.

        Attribute names map to property names (through ``renames``), structs
        expand to one property per field; an attribute the hlo op lacks is
        dropped if it is in :data:`IGNORED_ATTRIBUTES`, else it is an error.
        """
        allowed = self.op_defs.get(cls)
        if allowed is None:
            defs = cls.get_irdl_definition().properties
            allowed = self.op_defs[cls] = frozenset(defs)
            self.dense_props[cls] = frozenset(
                n for n, d in defs.items() if getattr(d.constr, "attr", None) is DenseIntOrFPElementsAttr)
        props: dict[str, Attribute] = {}
        attrs = op.attributes
        for i in range(len(attrs)):
            named = attrs[i]
            name = named.name
            if renames and name in renames:
                name = renames[name]
                if name is None:
                    continue
            if name not in allowed and (name in IGNORED_ATTRIBUTES or name.startswith("hlo.")):
                continue  # hlo.* are the exporter's discardable attributes, read by emit()/regions()
            try:
                raw = attrs[named.name]  # by key: NamedAttribute.attr aborts on complex dense attributes
            except TypeError:
                raise UnsupportedError(f"{self._where()}: attribute {name} = {str(named)[:80]} is not supported") from None
            if name in self.dense_props[cls]:
                props[name] = dense_elements(raw)
                continue
            value = self.attribute(raw)
            if isinstance(value, dict):
                for field, v in value.items():
                    if field in allowed:
                        props[field] = v
                    elif not _is_empty(v) and field not in OPTIONAL_FIELDS:
                        raise UnsupportedError(
                            f"{self._where()}: {cls.name} has no property {field!r} for {name}.{field} = {_show(v)}"
                        )
                continue
            if name not in allowed:
                if name.startswith("mhlo.") or name.startswith("sdy.") or name.startswith("jax."):
                    continue  # compiler metadata, no effect on results
                raise UnsupportedError(
                    f"{self._where()}: attribute {name} = {str(raw)[:80]} has no counterpart in {cls.name}"
                )
            props[name] = value
        return props

    def emit(self, cls, operands, properties=None, regions=(), result_types=None, op=None,
             plain: bool = False) -> list[SSAValue]:
        """Append hlo op ``cls`` to the block being built; return its results.

        ``op`` (the MLIR op being converted, default: the current one) gives
        the location; ``result_types`` default to its converted result types
        (with the exporter's ``hlo.result_layouts``, unless ``plain``: the op
        has no attributes).
        """
        src = op if op is not None else self._current
        if result_types is None:
            result_types = self.result_types(src)
        if not plain and src is not None and RESULT_LAYOUTS in src.attributes:
            result_types = _with_layouts(result_types, src.attributes[RESULT_LAYOUTS])
        attributes = dict(self._loc_attributes(src)) if src is not None else {}
        new = _create(cls, operands, result_types, properties or {}, attributes, regions)
        self._ops.append(new)
        return new.results

    def region(self, region, arg_layouts=None) -> Region:
        """Convert a single-block MLIR region (block arguments + ops).

        ``arg_layouts``: an ``ir.ArrayAttr`` of layout strings for the block arguments.
        """
        blocks = list(region.blocks)
        if len(blocks) != 1:
            raise UnsupportedError(f"{self._where()}: regions with {len(blocks)} blocks are not supported")
        arg_types = None
        if arg_layouts is not None:
            arg_types = _with_layouts([self.type(a.type) for a in blocks[0].arguments], arg_layouts)
        return Region(self.block(blocks[0], arg_types))

    def regions(self, op) -> list[Region]:
        """Convert every region of ``op`` (with the exporter's region argument layouts, if any)."""
        count = len(op.regions)
        if not count:
            return []
        layouts = op.attributes[REGION_ARG_LAYOUTS] if REGION_ARG_LAYOUTS in op.attributes else None
        current = self._current
        out = [self.region(r, layouts[i] if layouts is not None else None) for i, r in enumerate(op.regions)]
        self._current = current
        return out

    def block(self, ir_block, arg_types: list[Attribute] | None = None, first_op_is_argument: bool = False,
              target: Block | None = None) -> Block:
        """Convert a block: its arguments and every op, in order.

        With ``first_op_is_argument`` the block's first op is not converted:
        its result becomes the (single) block argument instead. With
        ``target`` the ops go into that block, whose arguments the caller has
        mapped already.
        """
        values = self.values
        ops = iter(ir_block.operations)
        if target is not None:
            block = target
        else:
            if arg_types is None:
                arg_types = [self.type(a.type) for a in ir_block.arguments]
            block = Block(arg_types=arg_types)
            if first_op_is_argument:
                values[next(ops).operation.results[0]] = block.args[0]
            else:
                for a, b in zip(ir_block.arguments, block.args):
                    values[a] = b
        saved, self._ops = self._ops, []
        saved_current = self._current
        try:
            for op in ops:
                self.convert_op(op)
            _append_ops(block, self._ops)
        finally:
            self._ops = saved
            self._current = saved_current
        return block

    def convert_op(self, op) -> None:
        """Convert one MLIR op (appending hlo ops) and map its results."""
        op = op.operation
        self._current = op
        if self.quantized:
            entry = self._quant_entry(op)
            if entry is not None:
                from .stablehlo_quant import convert_quantized_op

                results = convert_quantized_op(self, op, entry[1], entry[0])
                self._map_results(op, results)
                return
        self._map_results(op, convert_unquantized(self, op))

    def _map_results(self, op, results) -> None:
        if results is not None:
            values = self.values
            for r, v in zip(op.results, results):
                values[r] = v

    def _quant_entry(self, op):
        """(kind, result quantizations) of an op with quantized results, else None."""
        attrs = op.attributes
        if QUANTIZATION in attrs:
            ir = self._ir
            kind, *spellings = [ir.StringAttr(a).value for a in ir.ArrayAttr(attrs[QUANTIZATION])]
            return kind, [self._quant_type("!quant." + t) if t else None for t in spellings]
        if self.quant_lines:
            loc = op.location
            if isinstance(loc, self._ir.FileLineColLoc) and loc.filename == "-":
                return self.quant_lines.get(loc.start_line)
        return None

    def _quant_type(self, spelling: str):
        found = self.quant_types.get(spelling)
        if found is None:
            from .stablehlo_quant import parse_quantized

            found = self.quant_types[spelling] = parse_quantized(spelling)
        return found

    # -- expansions -----------------------------------------------------------

    def inline_block(self, ir_block, args: list[SSAValue]) -> list[SSAValue]:
        """Convert the ops of ``ir_block`` into the block being built, its arguments bound to ``args``.

        Returns the operands of its terminator (``stablehlo.return`` /
        ``func.return``), which is not converted: the caller uses the values.
        """
        values = self.values
        for a, v in zip(ir_block.arguments, args):
            values[a] = v
        current = self._current
        ops = list(ir_block.operations)
        for op in ops[:-1]:
            self.convert_op(op)
        self._current = ops[-1].operation
        results = self.operands(ops[-1].operation)
        self._current = current
        return results

    def build_region(self, arg_types: list[Attribute], body: Callable[[list[SSAValue]], list[SSAValue]]) -> Region:
        """A one-block region: ``body(block arguments)`` emits its ops and gives the values it returns."""
        block = Block(arg_types=arg_types)
        saved, self._ops = self._ops, []
        current = self._current
        try:
            results = body(list(block.args))
            self.emit(self.ops_by_name["hlo.return"], results, {}, (), [], plain=True)
            _append_ops(block, self._ops)
        finally:
            self._ops = saved
            self._current = current
        return Region(block)

    def inline_expansion(self, module, args: list[SSAValue]) -> list[SSAValue]:
        """Convert an expansion (a module whose ``@main`` computes one op) in place of that op.

        ``@main``'s ops join the block being built with its arguments bound to
        ``args``, located at the op being converted; its other functions are
        added to the module under fresh names.
        """
        current = self._current
        loc = self._loc_attributes(current)
        saved = (self.loc_override, self.quantized, self.callee_renames, self.allow_unknown)
        # The expansion's ops stand for the op: its location, and no quantization of their own.
        # It converts completely or not at all (allow_unknown then keeps the op itself).
        self.loc_override, self.quantized, self.allow_unknown = loc, False, False
        try:
            with module.context:
                functions = {op.attributes["sym_name"].value: op for op in module.body.operations
                             if op.operation.name == "func.func"}
                main = functions.pop("main")
                renames = dict(self.callee_renames)
                for name in functions:
                    renames[name] = self._fresh_symbol(name)
                self.callee_renames = renames
                for name, fop in functions.items():
                    new = self.function(fop)
                    new.sym_name = StringAttr(renames[name])
                    new.sym_visibility = StringAttr("private")
                    self.extra_functions.append(new)
                self._current = current
                return self.inline_block(main.regions[0].blocks[0], args)
        finally:
            self.loc_override, self.quantized, self.callee_renames, self.allow_unknown = saved
            self._current = current

    def _fresh_symbol(self, name: str) -> str:
        n = len(self.symbols)
        while f"{name}.{n}" in self.symbols:
            n += 1
        self.symbols.add(f"{name}.{n}")
        return f"{name}.{n}"

    # -- functions ------------------------------------------------------------

    def function(self, fop) -> func.FuncOp:
        """Convert a ``func.func``; ``mhlo.layout_mode`` argument attributes become layouts."""
        attrs = fop.attributes
        name = attrs["sym_name"].value
        ftype = attrs["function_type"].value
        arg_attrs = _dict_list(attrs, "arg_attrs")
        res_attrs = _dict_list(attrs, "res_attrs")
        self._current = fop.operation
        inputs = [self.type(t) for t in ftype.inputs]
        outputs = [self.type(t) for t in ftype.results]
        if self.quantized:
            entry = self._quant_entry(fop.operation)
            if entry is not None and entry[0] == "func":  # quantized arguments, as the source text had them
                inputs = [t if q is None else TensorType(q, t.get_shape(), t.encoding) for t, q in zip(inputs, entry[1])]
        for i, d in enumerate(arg_attrs or ()):
            mode = d.get("mhlo.layout_mode")
            if mode is not None and isinstance(inputs[i], TensorType):
                layout = _layout_of_mode(mode, inputs[i])
                if layout is not None:
                    inputs[i] = TensorType(inputs[i].element_type, inputs[i].get_shape(), LayoutAttr(layout))
        blocks = list(fop.regions[0].blocks)
        if len(blocks) != 1:
            raise UnsupportedError(f"{self._where()}: func.func @{name} has {len(blocks)} blocks; one is supported")
        block = self.block(blocks[0], inputs)
        term = block.last_op
        if isinstance(term, func.ReturnOp):
            # Result types are those of the returned values (which may carry layouts).
            outputs = [v.type for v in term.operands]
        for d in arg_attrs or ():
            d.pop("mhlo.layout_mode", None)  # now in the argument types
        for d, t in zip(res_attrs or (), outputs):
            mode = d.get("mhlo.layout_mode")
            if mode is not None and isinstance(t, TensorType) and isinstance(t.encoding, LayoutAttr) \
                    and t.encoding.data.to_text() == mode:
                del d["mhlo.layout_mode"]
        visibility = attrs["sym_visibility"].value if "sym_visibility" in attrs else None
        if visibility == "public":
            visibility = None
        return func.FuncOp(
            name, FunctionType.from_lists(inputs, outputs), Region(block), visibility,
            arg_attrs=_kept_dicts(arg_attrs), res_attrs=_kept_dicts(res_attrs),
        )

    # -- messages -------------------------------------------------------------

    def _where(self) -> str:
        return self._where_op(self._current) if self._current is not None else "import"

    def _where_op(self, op) -> str:
        op = getattr(op, "operation", op)
        try:
            loc = location_text(op.location)
        except Exception:
            loc = None
        return f"{op.name} at {loc}" if loc else op.name


# ----------------------------------------------------------------------------
# Fast xDSL construction
# ----------------------------------------------------------------------------
# Building the xDSL ops is most of the import time. Operation.create and
# Block.add_ops do general bookkeeping (dataclass defaults, default properties,
# ancestor checks) that fresh ops appended in order do not need. The fast
# paths below set the same fields directly; _fast_paths_work() checks once,
# against xDSL's own constructors, that they produce identical objects, and
# the importer falls back to the general API if not (another xDSL version).


_DEFAULTS: dict[type, tuple[dict, dict]] = {}


def _defaults(cls) -> tuple[dict, dict]:
    """The default property and attribute values IRDLOperation.__post_init__ would fill in."""
    from xdsl.irdl import OptionalDef

    hit = _DEFAULTS.get(cls)
    if hit is None:
        op_def = cls.get_irdl_definition()
        hit = _DEFAULTS[cls] = tuple(
            {n: d.default_value for n, d in defs.items()
             if not isinstance(d, OptionalDef) and d.default_value is not None}
            for defs in (op_def.properties, op_def.attributes))
    return hit


def _fast_create(cls, operands, result_types, properties, attributes, regions):
    default_props, default_attrs = _DEFAULTS.get(cls) or _defaults(cls)
    if default_props:
        properties = {**default_props, **properties}
    if default_attrs:
        attributes = {**default_attrs, **attributes}
    op = cls.__new__(cls)
    d = op.__dict__
    values = SSAValues(operands)
    uses = tuple([Use(op, i) for i in range(len(values))])
    for v, u in zip(values, uses):
        v.add_use(u)
    d["_operands"] = values
    d["_operand_uses"] = uses
    d["results"] = SSAValues([OpResult(t, op, i) for i, t in enumerate(result_types)])
    d["properties"] = properties
    d["attributes"] = attributes
    d["location"] = UNKNOWN_LOC
    d["_successors"] = ()
    d["_successor_uses"] = ()
    d["regions"] = ()
    for region in regions:
        op.add_region(region)
    return op


def _slow_create(cls, operands, result_types, properties, attributes, regions):
    return cls.create(operands=operands, result_types=result_types, properties=properties,
                      attributes=attributes, regions=list(regions))


def _fast_append(block: Block, ops: list[Operation]) -> None:
    prev = block._last_op
    for op in ops:
        op.parent = block
        op._prev_op = prev
        if prev is None:
            block._first_op = op
        else:
            prev._next_op = op
        prev = op
    block._last_op = prev


def _slow_append(block: Block, ops: list[Operation]) -> None:
    block.add_ops(ops)


def _fast_paths_work() -> bool:
    try:
        from xla_dialect.ops.elementwise import AddOp

        t = TensorType(f32, [2])
        results = []
        for create, append in ((_slow_create, _slow_append), (_fast_create, _fast_append)):
            block = Block(arg_types=[t])
            a = create(AddOp, [block.args[0], block.args[0]], [t], {}, {"loc": StringAttr("x")}, ())
            b = create(AddOp, [a.results[0], block.args[0]], [t], {}, {}, ())
            append(block, [a, b])
            results.append((block, a, b))
        (b0, a0, c0), (b1, a1, c1) = results
        def fields(x):  # linkage fields left at their class default None may be unset
            return {k for k, v in x.__dict__.items() if not (k in ("_prev_op", "_next_op") and v is None)}

        same_fields = all(fields(x) == fields(y) for x, y in ((a0, a1), (c0, c1), (b0, b1)))
        return (same_fields and list(b1.ops) == [a1, c1] and a1.next_op is c1 and c1.prev_op is a1
                and b1.first_op is a1 and b1.last_op is c1 and a1.parent is b1
                and [u.operation for u in a1.results[0].uses] == [c1] and b1.is_structurally_equivalent(b0)
                and not AddOp.get_irdl_definition().properties["broadcast_dimensions"].default_value)
    except Exception:
        return False


_create, _append_ops = (_fast_create, _fast_append) if _fast_paths_work() else (_slow_create, _slow_append)




def _with_layouts(types: list[Attribute], layouts) -> list[Attribute]:
    """``types`` with the layouts of an ``ir.ArrayAttr`` of layout strings (``""``: none)."""
    return [_with_layout_text(t, text.value) for t, text in zip(types, layouts)]


def _with_layout_text(t: Attribute, text: str) -> Attribute:
    """``t`` with the layout written ``{1,0}`` (tensor) or ``({1,0}, {})`` (tuple, recursively)."""
    if not text:
        return t
    if isinstance(t, TensorType):
        return TensorType(t.element_type, t.get_shape(), LayoutAttr(parse_layout(text)))
    if isinstance(t, TupleType) and text.startswith("("):
        parts, depth, start = [], 0, 1
        for i, c in enumerate(text):
            if c in "({":
                depth += 1
            elif c in ")}":
                depth -= 1
            if (c == "," and depth == 1) or (c == ")" and depth == 0):
                parts.append(text[start:i].strip())
                start = i + 1
        return TupleType([_with_layout_text(e, part) for e, part in zip(t.types, parts)])
    return t


OPTIONAL_FIELDS = frozenset({"channel_type"})
"""Struct fields dropped when the hlo op has no property for them (collectives have one channel type)."""


def _is_empty(v) -> bool:
    return isinstance(v, DenseArrayBase) and len(v) == 0


def _show(v) -> str:
    if isinstance(v, DenseArrayBase):
        return str(list(v.get_values()))
    if isinstance(v, IntegerAttr):
        return str(v.value.data)
    return str(v)


def _dict_list(attrs, key: str) -> list[dict[str, str]] | None:
    """``arg_attrs``/``res_attrs`` as dicts of the string-valued entries (others are dropped)."""
    if key not in attrs:
        return None
    ir = _ir()
    out = []
    for d in attrs[key]:
        entry = {}
        for i in range(len(d)):
            named = d[i]
            if isinstance(named.attr, ir.StringAttr):
                entry[named.name] = named.attr.value
            elif named.name in _SHARDING_ARG_ATTRIBUTES:
                entry["hlo.sharding"] = str(named.attr)  # Shardy's sharding, as its text
        out.append(entry)
    return out


_SHARDING_ARG_ATTRIBUTES = ("sdy.sharding",)
_KEPT_ARG_ATTRIBUTES = ("hlo.name", "jax.result_info", "mhlo.layout_mode", "mhlo.sharding", "hlo.sharding")
"""Argument and result attributes kept on the imported function: names, layouts and shardings
(``mhlo.sharding`` as XLA's text, Shardy's ``sdy.sharding`` as ``hlo.sharding``); the executor runs one
device and ignores the shardings, passes keep them."""


def _kept_dicts(dicts: list[dict[str, str]] | None) -> ArrayAttr | None:
    if not dicts:
        return None
    kept = [{k: StringAttr(v) for k, v in d.items() if k in _KEPT_ARG_ATTRIBUTES} for d in dicts]
    if not any(kept):
        return None
    return ArrayAttr([DictionaryAttr(d) for d in kept])


def _layout_of_mode(mode: str, type_: TensorType):
    """The layout of an ``mhlo.layout_mode`` value (``"{1,0}"``; ``default``/``auto`` give None)."""
    if not mode.startswith("{"):
        return None
    try:
        layout = parse_layout(mode)
        layout.check_rank(type_.get_num_dims())
    except XlaError as e:
        raise UnsupportedError(f"mhlo.layout_mode {mode!r}: {e}") from None
    return layout


# ----------------------------------------------------------------------------
# Converters
# ----------------------------------------------------------------------------

ATTRIBUTE_RENAMES: dict[str, dict[str, str | None]] = {}
"""StableHLO op -> {attribute name: hlo property name (None: drop)} where they differ."""


def convert_unquantized(imp: Importer, op) -> list[SSAValue] | None:
    """Convert ``op`` (an ``ir.Operation``) by its converter or the generic rule; return its values."""
    name = op.name
    conv = CONVERTERS.get(name)
    if conv is not None:
        return conv(imp, op)
    if name.startswith("stablehlo.") and "hlo." + name[10:] in imp.ops_by_name:
        return generic_converter(imp, op, imp.ops_by_name["hlo." + name[10:]])
    if name.startswith("chlo."):
        return chlo_through_xla(imp, op)
    if imp.allow_unknown:
        return opaque_converter(imp, op)
    if name.startswith("stablehlo."):
        raise UnsupportedError(f"{imp._where()}: {name} has no hlo counterpart yet")
    raise UnsupportedError(f"{imp._where()}: {name} is not supported")


def generic_converter(imp: Importer, op, cls) -> list[SSAValue]:
    """``stablehlo.X`` -> ``hlo.X``: same operands, results, regions; attributes converted."""
    attrs = op.attributes
    if not len(attrs):  # most element-wise ops: nothing to convert, no exporter markers
        regions = imp.regions(op) if len(op.regions) else ()
        return imp.emit(cls, imp.operands(op), {}, regions, plain=True)
    props = imp.properties(op, cls, ATTRIBUTE_RENAMES.get(op.name))
    if BROADCAST_DIMENSIONS in attrs:  # interop.export's record of XLA implicit broadcasting
        props["broadcast_dimensions"] = imp.attribute(attrs[BROADCAST_DIMENSIONS])
    regions = imp.regions(op)
    segments = OPERAND_SEGMENTS.get(op.name)
    if segments is not None:
        props["operandSegmentSizes"] = DenseArrayBase.from_list(
            IntegerType(32), segments(len(op.operands), len(op.results)))
    return imp.emit(cls, imp.operands(op), props, regions)


_OPAQUE_CLASSES: dict[str, type] = {}


def opaque_op_class(name: str) -> type:
    """An xDSL unregistered-op class named ``name`` (one per name)."""
    from xdsl.dialects.builtin import UnregisteredOp

    cls = _OPAQUE_CLASSES.get(name)
    if cls is None:
        # Named like the op so that messages (op_context) and the exporter see its real name.
        cls = _OPAQUE_CLASSES[name] = type("OpaqueOp", (UnregisteredOp.with_name(name),), {"name": name})
    return cls


def opaque_converter(imp: Importer, op) -> list[SSAValue]:
    """Keep an op without hlo counterpart as an unregistered op (``allow_unknown=True``).

    Its attributes become properties (dimension-number structs one per field,
    as for hlo ops), so that :mod:`interop.export` writes it back unchanged;
    the NumPy executor reports it as an op it has no kernel for.
    """
    props: dict[str, Attribute] = {}
    attrs = op.attributes
    for i in range(len(attrs)):
        name = attrs[i].name
        if name.startswith(("hlo.", "mhlo.", "sdy.", "jax.")):
            continue
        try:
            value = imp.attribute(attrs[name])
        except TypeError:
            raise UnsupportedError(f"{imp._where()}: attribute {name} is not supported") from None
        if isinstance(value, dict):
            props.update(value)
        else:
            props[name] = value
    regions = imp.regions(op)
    cls = opaque_op_class(op.name)
    result_types = imp.result_types(op)
    attributes = dict(imp._loc_attributes(op))
    new = cls.create(operands=imp.operands(op), result_types=result_types, properties=props,
                     attributes=attributes, regions=regions)
    imp._ops.append(new)
    return new.results


OPERAND_SEGMENTS: dict[str, Callable[[int, int], list[int]]] = {}
"""StableHLO op -> ``fn(num_operands, num_results)`` giving the operand group
sizes, for hlo ops with several variadic operand groups."""


@register_converter("stablehlo.constant")
def _constant(imp: Importer, op):
    (result,) = op.results
    type_ = imp.type(result.type)
    if not isinstance(type_, TensorType):
        raise UnsupportedError(f"{imp._where()}: constant of type {type_} is not supported")
    attrs = op.attributes
    element = ELEMENT_BY_MLIR[str(type_.element_type)]
    if element.dtype in _NATIVE_DTYPES:
        attr, text = attrs["value"], None
    else:
        # jaxlib cannot hand out (or even safely touch) a complex dense
        # attribute object: read the attribute's text instead.
        attr = None
        named = next(attrs[i] for i in range(len(attrs)) if attrs[i].name == "value")
        text = str(named)
        text = text[text.index("=") + 1:text.rindex(")")]
    try:
        array = dense_array(attr, text, type_)
    except XlaError as e:
        raise UnsupportedError(f"{imp._where()}: {e}") from None
    except Exception as e:  # e.g. dense_resource<...> blobs
        raise UnsupportedError(f"{imp._where()}: constant {str(attr)[:60]} cannot be read: {e}") from None
    cls = imp.ops_by_name["hlo.constant"]
    return imp.emit(cls, [], {"value": DenseLiteralAttr.from_array(array, type_)}, (), [type_])


@register_converter("func.return")
def _func_return(imp: Importer, op):
    imp._ops.append(func.ReturnOp(*imp.operands(op)))


@register_converter("func.call")
def _func_call(imp: Importer, op):
    callee = op.attributes["callee"].value
    callee = imp.callee_renames.get(callee, callee)
    return imp.emit(imp.ops_by_name["hlo.call"], imp.operands(op), {"callee": SymbolRefAttr(callee)})


@register_converter("stablehlo.composite")
def _composite(imp: Importer, op):
    cls = imp.ops_by_name.get("hlo.composite")
    if cls is not None:
        return generic_converter(imp, op, cls)
    # Without hlo.composite, keep the decomposition: call it (JAX exports chlo ops as composites).
    callee = op.attributes["decomposition"].value
    return imp.emit(imp.ops_by_name["hlo.call"], imp.operands(op), {"callee": SymbolRefAttr(callee)})


@register_converter("stablehlo.custom_call")
def _custom_call(imp: Importer, op):
    target = op.attributes["call_target_name"].value
    if target == "shape_assertion":
        # JAX's shape-polymorphism guard. Shape refinement folds it away; one
        # left with a constant predicate is checked now, any other dropped
        # (it can only fail for shapes other than the imported static ones).
        _check_shape_assertion(imp, op)
        return None
    cls = imp.ops_by_name.get("hlo.custom_call")
    if cls is None:
        raise UnsupportedError(f"{imp._where()}: custom_call @{target} is not supported")
    return generic_converter(imp, op, cls)


@register_converter("sdy.sharding_constraint")
@register_converter("sdy.reshard")
def _sharding_constraint(imp: Importer, op):
    """Shardy's sharding constraint / reshard: XLA's ``Sharding`` custom call, the identity on one device.

    The sharding is kept as the op's ``hlo.sharding`` attribute (Shardy's text, e.g.
    ``<@mesh, [{"x"}, {}]>``) and, when it replicates the value, as XLA's ``{replicated}``
    in ``hlo.attributes`` (printed as ``sharding=`` in HLO text).
    """
    sharding = op.attributes["sharding"]
    text = str(sharding)
    cls = imp.ops_by_name["hlo.custom_call"]
    (value,) = imp.emit(cls, imp.operands(op), {"call_target_name": StringAttr("Sharding")})
    new = value.owner
    new.attributes["hlo.sharding"] = StringAttr(text)
    if not re.search(r'"[^"]*"', text.split("[", 1)[-1]):  # no mesh axis named: replicated
        new.attributes["hlo.attributes"] = DictionaryAttr({"sharding": StringAttr("{replicated}")})
    return [value]


@register_converter("sdy.manual_computation")
def _manual_computation(imp: Importer, op):
    """Shardy's manual computation (``shard_map``): on one device each shard is the whole value,
    so the body runs once on the operands (inlined). More than one device along its manual axes
    needs XLA's SPMD partitioner: an error here."""
    body = list(op.regions[0].blocks)[0]
    operands = imp.operands(op)
    if all(list(v.type.get_shape()) == list(imp.type(a.type).get_shape()) for v, a in zip(operands, body.arguments)):
        return imp.inline_block(body, operands)
    # Shards smaller than the values: kept as it is (the shardings as text, the body converted), so the
    # program imports and passes see it; the executor reports it (XLA's SPMD partitioner is not reproduced).
    props = {k: StringAttr(str(op.attributes[k])) for k in ("in_shardings", "out_shardings", "manual_axes")
             if k in op.attributes}
    cls = opaque_op_class("sdy.manual_computation")
    new = cls.create(operands=operands, result_types=imp.result_types(op), properties=props,
                     attributes=dict(imp._loc_attributes(op)), regions=imp.regions(op))
    imp._ops.append(new)
    return new.results


@register_converter("sdy.return")
def _sdy_return(imp: Importer, op):
    """The terminator of a kept ``sdy.manual_computation`` body."""
    imp.emit(imp.ops_by_name["hlo.return"], imp.operands(op), {}, (), [], plain=True)
    return None


def _check_shape_assertion(imp: Importer, op) -> None:
    values = imp.operands(op)
    constants = []
    for v in values:
        owner = getattr(v, "owner", None)
        constants.append(owner.properties["value"].array if owner is not None and owner.name == "hlo.constant" else None)
    if constants and constants[0] is not None and not bool(np.all(constants[0])):
        message = op.attributes["error_message"].value if "error_message" in op.attributes else "shape assertion failed"
        try:
            message = message.format(*[c.item() if c is not None else "?" for c in constants[1:]])
        except (IndexError, ValueError, KeyError):
            pass
        raise XlaError(f"{imp._where()}: {message}")


@register_converter("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(imp: Importer, op):
    if IMPLICIT_BROADCAST in op.attributes:
        # Made explicit by interop.export for an op using XLA's implicit
        # broadcasting: that op takes the unbroadcast operand again.
        return imp.operands(op)
    return generic_converter(imp, op, imp.ops_by_name["hlo.broadcast_in_dim"])


def _static_result(imp: Importer, op) -> bool:
    types = imp.result_types(op)
    return all(isinstance(t, TensorType) and DYNAMIC_INDEX not in t.get_shape() for t in types)


@register_converter("stablehlo.dynamic_reshape")
@register_converter("stablehlo.dynamic_broadcast_in_dim")
@register_converter("stablehlo.dynamic_iota")
def _dynamic_with_static_result(imp: Importer, op):
    """Dynamic-shape ops whose result type is static: the shape operand is redundant."""
    if not _static_result(imp, op):
        if imp.allow_unknown:
            return opaque_converter(imp, op)
        raise UnsupportedError(f"{imp._where()}: {op.name} with a dynamic result shape is not supported "
                               "(refine the shapes with example arguments)")
    name = op.name
    operands = imp.operands(op)
    ops = imp.ops_by_name
    if name == "stablehlo.dynamic_reshape":
        return imp.emit(ops["hlo.reshape"], operands[:1])
    if name == "stablehlo.dynamic_iota":
        props = {"iota_dimension": imp.attribute(op.attributes["iota_dimension"])}
        return imp.emit(ops["hlo.iota"], [], props)
    props = {"broadcast_dimensions": imp.attribute(op.attributes["broadcast_dimensions"])}
    return imp.emit(ops["hlo.broadcast_in_dim"], operands[:1], props)


@register_converter("stablehlo.reshape")
def _reshape(imp: Importer, op):
    # interop.export writes hlo ops without a StableHLO counterpart as an
    # equivalent op marked with the original name (hlo.copy: identity reshape).
    if ORIGINAL_OP in op.attributes:
        return imp.emit(imp.ops_by_name[op.attributes[ORIGINAL_OP].value], imp.operands(op))
    return generic_converter(imp, op, imp.ops_by_name["hlo.reshape"])


@register_converter("chlo.erf")
@register_converter("mhlo.erf")
def _erf(imp: Importer, op):
    return imp.emit(imp.ops_by_name["hlo.erf"], imp.operands(op))


@register_converter("chlo.top_k")
@register_converter("mhlo.topk")
def _top_k(imp: Importer, op):
    """``top_k(x, k)``: the k largest along the last dimension, descending, with their i32 indices.

    Built as XLA expands TopK: a stable sort of (x, iota) by ``x`` in
    descending total order (NaN first, then +inf; ties keep the lower index),
    then a slice of the first k.
    """
    ops = imp.ops_by_name
    (x,) = imp.operands(op)
    values_type, indices_type = imp.result_types(op)
    shape = list(x.type.get_shape())
    rank = len(shape)
    k = values_type.get_shape()[-1]
    index_type = TensorType(indices_type.element_type, shape)
    (iota,) = imp.emit(ops["hlo.iota"], [], {"iota_dimension": IntegerAttr(rank - 1, 64)}, (), [index_type])
    scalar_x = TensorType(x.type.element_type, [])
    scalar_i = TensorType(indices_type.element_type, [])
    kind = ELEMENT_BY_MLIR[str(x.type.element_type)].kind
    compare_type = {"float": "TOTALORDER", "sint": "SIGNED", "uint": "UNSIGNED", "pred": "UNSIGNED"}[kind]
    body = Block(arg_types=[scalar_x, scalar_x, scalar_i, scalar_i])
    gt = _create(ops["hlo.compare"], [body.args[0], body.args[1]], [TensorType(IntegerType(1), [])],
                 {"comparison_direction": StringAttr("GT"), "compare_type": StringAttr(compare_type)}, {}, ())
    ret = _create(ops["hlo.return"], [gt.results[0]], [], {}, {}, ())
    _append_ops(body, [gt, ret])
    sorted_x, sorted_i = imp.emit(ops["hlo.sort"], [x, iota],
                                  {"dimension": IntegerAttr(rank - 1, 64), "is_stable": BoolAttr(True, IntegerType(1))},
                                  [Region(body)], [x.type, index_type])
    limits = shape[:-1] + [k]
    props = {"start_indices": i64_array([0] * rank), "limit_indices": i64_array(limits),
             "strides": i64_array([1] * rank)}
    (values,) = imp.emit(ops["hlo.slice"], [sorted_x], dict(props), (), [values_type])
    (indices,) = imp.emit(ops["hlo.slice"], [sorted_i], dict(props), (), [indices_type])
    return [values, indices]


class OpEmitter:
    """Terse emission of hlo ops with explicit result types, for converters that expand one
    op into several (``emit("add", [a, b], t)``); every op gets the converted op's location."""

    def __init__(self, imp: Importer):
        self.imp = imp
        self.ops = imp.ops_by_name

    def __call__(self, name: str, operands, result_type: Attribute, **props: Attribute) -> SSAValue:
        """Emit ``hlo.<name>`` with one result of ``result_type``."""
        (value,) = self.imp.emit(self.ops["hlo." + name], list(operands), props, (), [result_type], plain=True)
        return value

    def splat(self, value, element: ElementType, shape) -> SSAValue:
        """The scalar ``value`` of ``element`` broadcast to ``shape`` (a scalar constant for ``[]``)."""
        scalar = TensorType(element.mlir, [])
        literal = DenseLiteralAttr.from_array(np.array(value, dtype=element.dtype), scalar)
        constant = self("constant", [], scalar, value=literal)
        if not len(shape):
            return constant
        return self("broadcast_in_dim", [constant], TensorType(element.mlir, list(shape)),
                    broadcast_dimensions=i64_array([]))

    def like(self, value: SSAValue, element: ElementType) -> TensorType:
        """The tensor type of ``value``'s shape with elements ``element``."""
        return TensorType(element.mlir, list(value.type.get_shape()))


_WIDER = {"s2": "s4", "s4": "s8", "s8": "s16", "s16": "s32", "s32": "s64",
          "u2": "u4", "u4": "u8", "u8": "u16", "u16": "u32", "u32": "u64"}
"""Integer type -> the integer type of twice its width and the same signedness (chlo.mulhi)."""


@register_converter("chlo.mulhi")
def _mulhi(imp: Importer, op):
    """``mulhi(x, y)``: the high N bits of the 2N-bit product of N-bit integers.

    Up to 32 bits: the product in the type twice as wide, shifted right by N
    (arithmetically for signed types), converted back. 64 bits: see :func:`_mulhi64`.
    """
    emit = OpEmitter(imp)
    lhs, rhs = imp.operands(op)
    element = ELEMENT_BY_MLIR[str(lhs.type.element_type)]
    if element.kind not in ("sint", "uint"):
        raise UnsupportedError(f"{imp._where()}: chlo.mulhi of {element.xla_name} elements; expected integers")
    if element.bits == 64:
        return [_mulhi64(emit, lhs, rhs, element.kind == "sint")]
    wide = ELEMENT_TYPES[_WIDER[element.xla_name]]
    wide_type = emit.like(lhs, wide)
    product = emit("multiply", [emit("convert", [lhs], wide_type), emit("convert", [rhs], wide_type)], wide_type)
    shift = "shift_right_arithmetic" if element.kind == "sint" else "shift_right_logical"
    high = emit(shift, [product, emit.splat(element.bits, wide, wide_type.get_shape())], wide_type)
    # The high half of a product of two N-bit values fits in N bits: the conversion is exact.
    return [emit("convert", [high], lhs.type)]


def _mulhi64(emit: OpEmitter, lhs: SSAValue, rhs: SSAValue, signed: bool) -> SSAValue:
    """High 64 bits of a 64x64-bit product from 32-bit halves (no 128-bit type).

    Unsigned: with ``a = ah*2^32 + al`` and ``b = bh*2^32 + bl`` (u64 arithmetic),
    ``cross = (al*bl >> 32) + (ah*bl & 0xffffffff) + al*bh`` (at most 2^64 - 1),
    ``high = ah*bh + (ah*bl >> 32) + (cross >> 32)``. Signed: the unsigned high
    half of the bit patterns, minus ``b`` where ``a < 0`` and minus ``a``
    where ``b < 0`` (mod 2^64), which is the floor of the signed product / 2^64.
    """
    u64 = ELEMENT_TYPES["u64"]
    t = emit.like(lhs, u64)
    shape = t.get_shape()
    a, b = (emit("bitcast_convert", [v], t) for v in (lhs, rhs)) if signed else (lhs, rhs)
    mask = emit.splat(0xFFFFFFFF, u64, shape)
    c32 = emit.splat(32, u64, shape)

    def mul(x, y):
        return emit("multiply", [x, y], t)

    def add(x, y):
        return emit("add", [x, y], t)

    def low(x):
        return emit("and", [x, mask], t)

    def high(x):
        return emit("shift_right_logical", [x, c32], t)

    al, ah, bl, bh = low(a), high(a), low(b), high(b)
    hi_lo = mul(ah, bl)
    cross = add(add(high(mul(al, bl)), low(hi_lo)), mul(al, bh))
    result = add(add(mul(ah, bh), high(hi_lo)), high(cross))
    if not signed:
        return result
    pred = TensorType(IntegerType(1), list(shape))
    zero_s = emit.splat(0, ELEMENT_TYPES["s64"], shape)
    zero_u = emit.splat(0, u64, shape)
    for sign_of, other in ((lhs, b), (rhs, a)):
        negative = emit("compare", [sign_of, zero_s], pred, comparison_direction=StringAttr("LT"),
                        compare_type=StringAttr("SIGNED"))
        result = emit("subtract", [result, emit("select", [negative, other, zero_u], t)], t)
    return emit("bitcast_convert", [result], lhs.type)


@register_converter("chlo.scan")
def _scan(imp: Importer, op):
    """``chlo.scan``: an ``hlo.while`` over the positions of the scan dimension.

    The body region takes one slice of every input (the scan dimension
    removed) and the carries, and returns one slice of every output and the
    new carries. Each iteration reads the inputs' slices at the position
    (``dynamic_slice``), runs the body inline and writes the outputs' slices
    (``dynamic_update_slice``); ``is_reverse`` walks the positions from the
    last. ``is_associative`` only allows a parallel evaluation: the
    sequential one gives the results the op defines.
    """
    emit = OpEmitter(imp)
    attrs = op.attributes
    n_inputs = list(attrs["operandSegmentSizes"])[0]
    operands = imp.operands(op)
    inputs, inits = operands[:n_inputs], operands[n_inputs:]
    result_types = imp.result_types(op)
    n_outputs = len(result_types) - len(inits)
    output_types = result_types[:n_outputs]
    dim = attrs["dimension"].value
    reverse = "is_reverse" in attrs and bool(attrs["is_reverse"].value)
    arrays = [v.type for v in inputs] + output_types
    if arrays:
        length = arrays[0].get_shape()[dim]
    elif "scan_dim_size" in attrs:
        length = attrs["scan_dim_size"].value
    else:
        raise UnsupportedError(f"{imp._where()}: chlo.scan without inputs or outputs needs scan_dim_size")
    (body,) = list(op.regions[0].blocks)
    s64 = ELEMENT_TYPES["s64"]
    index_type = TensorType(s64.mlir, [])

    def starts(rank: int, position: SSAValue) -> list[SSAValue]:
        zero = emit.splat(0, s64, [])
        return [position if d == dim else zero for d in range(rank)]

    def with_dim(shape, size):
        return [*shape[:dim], size, *shape[dim + 1:]]

    n_in = len(inputs)

    def loop_body(args):
        # State: counter, the inputs (carried so that no region captures a value: HLO computations
        # cannot), the outputs built so far, the carries.
        counter, xs = args[0], args[1:1 + n_in]
        accumulators, carries = args[1 + n_in:1 + n_in + n_outputs], args[1 + n_in + n_outputs:]
        position = counter
        if reverse:
            position = emit("subtract", [emit.splat(length - 1, s64, []), counter], index_type)
        slices = []
        for x in xs:
            shape = list(x.type.get_shape())
            piece = emit("dynamic_slice", [x, *starts(len(shape), position)],
                         TensorType(x.type.element_type, with_dim(shape, 1)), slice_sizes=i64_array(with_dim(shape, 1)))
            slices.append(emit("reshape", [piece], TensorType(x.type.element_type, shape[:dim] + shape[dim + 1:])))
        returned = imp.inline_block(body, slices + list(carries))
        updated = []
        for acc, y in zip(accumulators, returned[:n_outputs]):
            shape = list(acc.type.get_shape())
            piece = emit("reshape", [y], TensorType(acc.type.element_type, with_dim(shape, 1)))
            updated.append(emit("dynamic_update_slice", [acc, piece, *starts(len(shape), position)], acc.type))
        step = emit("add", [counter, emit.splat(1, s64, [])], index_type)
        return [step, *xs, *updated, *returned[n_outputs:]]

    def loop_cond(args):
        pred = TensorType(IntegerType(1), [])
        return [emit("compare", [args[0], emit.splat(length, s64, [])], pred,
                     comparison_direction=StringAttr("LT"), compare_type=StringAttr("SIGNED"))]

    zeros = [emit.splat(0, ELEMENT_BY_MLIR[str(t.element_type)], t.get_shape()) for t in output_types]
    if length == 0:
        return [*zeros, *inits]  # the body never runs (and could not slice an empty dimension)
    state = [emit.splat(0, s64, []), *inputs, *zeros, *inits]
    state_types = [v.type for v in state]
    regions = [imp.build_region(state_types, loop_cond), imp.build_region(state_types, loop_body)]
    results = imp.emit(imp.ops_by_name["hlo.while"], state, {}, regions, state_types, plain=True)
    return list(results[1 + n_in:])


@register_converter("stablehlo.dynamic_gather")
def _dynamic_gather(imp: Importer, op):
    """``dynamic_gather`` with constant slice sizes: an ``hlo.gather`` (XLA's gather takes them static)."""
    operand, indices, sizes = imp.operands(op)
    owner = sizes.owner if isinstance(sizes, OpResult) else None
    if owner is None or owner.name != "hlo.constant":
        if imp.allow_unknown:
            return opaque_converter(imp, op)
        raise UnsupportedError(f"{imp._where()}: stablehlo.dynamic_gather with slice sizes computed at run time "
                               "is not supported (XLA's gather takes constant slice sizes)")
    cls = imp.ops_by_name["hlo.gather"]
    props = imp.properties(op, cls)
    props["slice_sizes"] = i64_array([int(v) for v in np.asarray(owner.properties["value"].array).reshape(-1)])
    return imp.emit(cls, [operand, indices], props)


def _tuple_of_nothing(imp: Importer) -> SSAValue:
    (value,) = imp.emit(imp.ops_by_name["hlo.tuple"], [], result_types=[TupleType([])])
    return value


@register_converter("stablehlo.tuple")
def _tuple(imp: Importer, op):
    attrs = op.attributes
    if BRANCH_OPERANDS in attrs:
        # The exporter's carrier of hlo.conditional branch operands: no op of its own.
        imp.branch_operands[op.results[0]] = imp.operands(op)
        return [None]
    if STATE_PART in attrs:
        return [None]  # a nested tuple rebuilt by the exporter for a tuple-state while
    if STATE_ARG in attrs:
        return [imp.state_args[-1][attrs[STATE_ARG].value]]
    if STATE_RESULT in attrs:
        return [imp.state_results[attrs[STATE_RESULT].value]]
    return generic_converter(imp, op, imp.ops_by_name["hlo.tuple"])


@register_converter("stablehlo.get_tuple_element")
def _get_tuple_element(imp: Importer, op):
    if STATE_PART in op.attributes:
        # The exporter's flattening of tuple state: remember the tuple it reads from.
        (source,) = op.operands
        imp.state_roots[op.results[0]] = imp.state_roots.get(source) or imp.value(source)
        return [None]
    return generic_converter(imp, op, imp.ops_by_name["hlo.get_tuple_element"])


def _state_groups(imp: Importer, leaves, state_types) -> list[SSAValue]:
    """The tuple-state values whose flattened leaves are ``leaves`` (ir values)."""
    out, i = [], 0
    for t in state_types:
        n = len(_leaf_types(t))
        first = leaves[i]
        out.append(imp.state_roots.get(first) or imp.value(first) if isinstance(t, TupleType) else imp.value(first))
        i += n
    return out


@register_converter("stablehlo.return")
def _hlo_return(imp: Importer, op):
    operands = list(op.operands)
    if STATE_RETURN in op.attributes:
        values = _state_groups(imp, operands, imp.state_types[-1])
    else:
        values = imp.operands(op)
    imp.emit(imp.ops_by_name["hlo.return"], values, result_types=[])


@register_converter("stablehlo.while")
def _while(imp: Importer, op):
    if TUPLE_STATE not in op.attributes:
        return generic_converter(imp, op, imp.ops_by_name["hlo.while"])
    # The exporter's flattening of an hlo.while with tuple state: rebuild it.
    attrs = op.attributes
    state_types = [imp.type(t.value) for t in attrs[TUPLE_STATE]]
    result_types = list(state_types)
    if RESULT_LAYOUTS in attrs:
        result_types = _with_layouts(result_types, attrs[RESULT_LAYOUTS])
    region_layouts = attrs[REGION_ARG_LAYOUTS] if REGION_ARG_LAYOUTS in attrs else None
    operands = _state_groups(imp, list(op.operands), state_types)
    current = imp._current
    regions = []
    imp.state_types.append(state_types)
    try:
        for r_index, region in enumerate(op.regions):
            (ir_block,) = list(region.blocks)
            arg_types = state_types if region_layouts is None else _with_layouts(state_types, region_layouts[r_index])
            block = Block(arg_types=arg_types)
            offset = 0
            for t, arg in zip(state_types, block.args):
                if not isinstance(t, TupleType):
                    imp.values[ir_block.arguments[offset]] = arg
                offset += len(_leaf_types(t))
            imp.state_args.append(list(block.args))
            try:
                regions.append(Region(imp.block(ir_block, target=block)))
            finally:
                imp.state_args.pop()
    finally:
        imp.state_types.pop()
    imp._current = current
    new = imp.emit(imp.ops_by_name["hlo.while"], operands, {}, regions, result_types)
    imp.state_results = list(new)
    out, i = [], 0
    for t, value in zip(state_types, new):
        n = len(_leaf_types(t))
        out.extend([value] + [None] * (n - 1) if not isinstance(t, TupleType) else [None] * n)
        i += n
    return out


def _branches(imp: Importer, op) -> tuple[list[SSAValue], list[Region]]:
    """Branch operands and regions of a StableHLO ``case``/``if`` for ``hlo.conditional``.

    StableHLO branches take no arguments (they capture values), hlo's take one
    operand each: every branch gets the same unused empty tuple, unless the
    module came from :mod:`interop.export`, whose branches start with a marked
    ``get_tuple_element`` of the real branch operands.
    """
    ir_blocks = []
    for r in op.regions:
        blocks = list(r.blocks)
        if len(blocks) != 1:
            raise UnsupportedError(f"{imp._where()}: branch regions with {len(blocks)} blocks are not supported")
        ir_blocks.append(blocks[0])
    firsts = [next(iter(b.operations), None) for b in ir_blocks]
    marked = all(f is not None and BRANCH_ARGUMENT in f.operation.attributes for f in firsts)
    current = imp._current
    regions = []
    if marked:
        operands = imp.branch_operands[firsts[0].operation.operands[0]]
        for b, (block, first) in enumerate(zip(ir_blocks, firsts)):
            first = first.operation
            arg_type = imp.type(first.results[0].type)
            if RESULT_LAYOUTS in first.attributes:
                (arg_type,) = _with_layouts([arg_type], first.attributes[RESULT_LAYOUTS])
            regions.append(Region(imp.block(block, [arg_type], first_op_is_argument=True)))
    else:
        empty = _tuple_of_nothing(imp)
        operands = [empty] * len(ir_blocks)
        regions = [Region(imp.block(block, [TupleType([])])) for block in ir_blocks]
    imp._current = current
    return operands, regions


@register_converter("stablehlo.case")
@register_converter("stablehlo.if")
def _conditional(imp: Importer, op):
    """``case``/``if`` -> ``hlo.conditional`` (selector: the index or the predicate)."""
    (selector,) = imp.operands(op)
    attrs = op.attributes
    if TUPLE_STATE not in attrs:
        operands, regions = _branches(imp, op)
        return imp.emit(imp.ops_by_name["hlo.conditional"], [selector, *operands], {}, regions)
    # The exporter flattened tuple results: rebuild them.
    result_types = [imp.type(t.value) for t in attrs[TUPLE_STATE]]
    if RESULT_LAYOUTS in attrs:
        result_types = _with_layouts(result_types, attrs[RESULT_LAYOUTS])
    imp.state_types.append(result_types)
    try:
        operands, regions = _branches(imp, op)
    finally:
        imp.state_types.pop()
    new = imp.emit(imp.ops_by_name["hlo.conditional"], [selector, *operands], {}, regions, result_types)
    imp.state_results = list(new)
    out = []
    for t, value in zip(result_types, new):
        n = len(_leaf_types(t))
        out.extend([value] + [None] * (n - 1) if not isinstance(t, TupleType) else [None] * n)
    return out


# ----------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------


def legalize_chlo(module, debug_info: bool = True):
    """``module`` with its chlo ops expanded into StableHLO, the way XLA compiles them.

    jaxlib exposes no MLIR pass pipeline, but it converts StableHLO to an XLA
    computation (legalizing chlo with XLA's own decompositions) and back; the
    result computes the same and keeps the source locations (``debug_info``).
    XLA takes the function named ``main`` as the entry and keeps only what it
    calls: :func:`legalize_chlo_op` expands single ops of any function.
    """
    from jax._src.lib import _jax

    text = module.operation.get_asm(enable_debug_info=debug_info)
    try:
        computation = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=False)
        legal = _jax.mlir.xla_computation_to_mlir_module(computation)
    except Exception as e:
        raise UnsupportedError(f"cannot expand the chlo ops through XLA: {e}") from None
    return parse_stablehlo(legal)


_LEGALIZED: dict[str, Any] = {}
"""Expansions of chlo ops by :func:`legalize_chlo_op`, keyed by the text of the one-op module."""

_LEGALIZED_LIMIT = 512


def legalize_chlo_op(op):
    """XLA's StableHLO expansion of one chlo op: a module whose ``@main`` takes the op's operands
    and returns its results (cached per op text, attributes and types).

    The op is copied alone into a fresh module, so the function holding it
    may have any name and the rest of the program is not touched.
    """
    from jaxlib.mlir.dialects import func as mlir_func

    ir = _ir()
    op = op.operation
    with mlir_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            main = mlir_func.FuncOp("main", ([v.type for v in op.operands], [r.type for r in op.results]))
            block = main.add_entry_block()
        with ir.InsertionPoint(block):
            copy = op.clone()
            for i, arg in enumerate(block.arguments):
                copy.operands[i] = arg
            mlir_func.ReturnOp(list(copy.results))
        key = module.operation.get_asm()
    hit = _LEGALIZED.get(key)
    if hit is None:
        hit = legalize_chlo(module, debug_info=False)
        if len(_LEGALIZED) >= _LEGALIZED_LIMIT:
            _LEGALIZED.clear()
        _LEGALIZED[key] = hit
    return hit


def chlo_through_xla(imp: Importer, op) -> list[SSAValue]:
    """Convert a chlo op without a converter of its own through XLA's expansion of it.

    With ``allow_unknown`` an op XLA cannot expand (or whose expansion has no
    hlo form) is kept as an opaque op instead of raising.
    """
    where = imp._where()
    start = len(imp._ops)
    try:
        return imp.inline_expansion(legalize_chlo_op(op), imp.operands(op))
    except (UnsupportedError, MlirParseError) as e:
        # Take back what the expansion emitted before it failed.
        for partial in reversed(imp._ops[start:]):
            partial.drop_all_references()
        del imp._ops[start:]
        if imp.allow_unknown:
            return opaque_converter(imp, op)
        raise UnsupportedError(f"{where} (expanded through XLA): {e}") from None


def _shape_spec(arg) -> tuple[tuple[int, ...], np.dtype | None]:
    shape = getattr(arg, "shape", None)
    if shape is None:
        arr = np.asarray(arg)
        return arr.shape, arr.dtype
    try:
        return tuple(int(d) for d in shape), getattr(arg, "dtype", None)
    except TypeError:
        raise UnsupportedError(f"example argument of symbolic shape {shape} cannot refine shapes") from None


def _main_function(module):
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == "main":
            return op
    raise UnsupportedError("the module has no @main function")


def has_dynamic_inputs(module) -> bool:
    """True when ``@main`` takes arrays with ``?`` dimensions (a shape-polymorphic program)."""
    ir = _ir()
    with module.context:
        try:
            main = _main_function(module)
        except UnsupportedError:
            return False  # no @main (e.g. interpreter test functions): nothing to refine
        ftype = main.attributes["function_type"].value
        return any(isinstance(t, ir.RankedTensorType) and _DYNAMIC in list(t.shape) for t in ftype.inputs)


def refine_shapes(module, example_args):
    """A copy of ``module`` whose dynamic shapes are refined for ``@main`` arguments shaped like ``example_args``.

    ``@main``'s parameters get the example shapes (a ``stablehlo.convert``
    feeds the old, dynamic uses), then jaxlib's shape refinement (the pass
    ``jax.export`` uses to call shape-polymorphic exports) propagates them and
    checks JAX's ``shape_assertion`` guards.
    """
    import io

    from jax._src.lib import _jax
    from jaxlib.mlir.dialects import stablehlo

    ir = _ir()
    ctx = mlir_context()
    with ctx, ir.Location.unknown():
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        copy = ir.Module.parse(buffer.getvalue())
        main = _main_function(copy)
        block = main.regions[0].blocks[0]
        args = list(block.arguments)
        if len(args) != len(example_args):
            raise UnsupportedError(f"@main takes {len(args)} arguments; {len(example_args)} example arguments given")
        inputs = []
        for i, (arg, example) in enumerate(zip(args, example_args)):
            old = arg.type
            if not isinstance(old, ir.RankedTensorType):
                inputs.append(old)
                continue
            shape, dtype = _shape_spec(example)
            declared = list(old.shape)
            if len(shape) != len(declared) or any(d != _DYNAMIC and d != s for d, s in zip(declared, shape)):
                raise UnsupportedError(f"example argument #{i} has shape {list(shape)}; @main expects {old}")
            new = ir.RankedTensorType.get(list(shape), old.element_type)
            if new != old:
                with ir.InsertionPoint.at_block_begin(block):
                    cast = stablehlo.ConvertOp(old, arg)
                arg.replace_all_uses_except(cast.result, cast.operation)
                arg.set_type(new)
            inputs.append(new)
        results = list(main.attributes["function_type"].value.results)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
        buffer = io.BytesIO()
        copy.operation.write_bytecode(buffer)
        try:
            refined = _jax.mlir.refine_polymorphic_shapes(
                buffer.getvalue(), enable_shape_assertions=True, validate_static_shapes=True)
        except Exception as e:
            raise UnsupportedError(f"cannot refine the dynamic shapes for the example arguments: {e}") from None
        return ir.Module.parse(refined)


def import_mlir_module(module, *example_args, verify: bool = False, allow_unknown: bool = False,
                       quant_lines: dict | None = None) -> ModuleOp:
    """Convert a jaxlib ``ir.Module`` holding StableHLO to an hlo ``ModuleOp``.

    ``example_args`` (arrays or anything with ``shape``/``dtype``, one per
    ``@main`` parameter) refine a shape-polymorphic program to static shapes;
    they are required when ``@main`` takes arrays with ``?`` dimensions.

    ``allow_unknown=True`` keeps what has no hlo form instead of raising: ops
    become unregistered ops of the same name (see :func:`opaque_converter`)
    and ``?`` dimensions stay dynamic. Such a module exports back unchanged
    (:func:`interop.export.export_stablehlo`) but does not run.

    A module that :func:`parse_stablehlo` read from quantized text carries
    its quantizations on its ops. ``quant_lines`` is the older form: the
    per-line table of :func:`interop.stablehlo_quant.expand_quantized_text`
    for a module parsed from text rewritten by it.
    """
    if example_args:
        module = refine_shapes(module, example_args)
    elif has_dynamic_inputs(module) and not allow_unknown:
        raise UnsupportedError(
            "@main takes arrays of dynamic shape (a shape-polymorphic program): give example arguments "
            "(arrays or jax.ShapeDtypeStruct) to refine it to static shapes")
    result = Importer(allow_unknown, quant_lines).import_module(module)
    if verify:
        result.verify()
    return result


def import_stablehlo(source, *example_args, verify: bool = False, allow_unknown: bool = False,
                     trusted: bool = False) -> ModuleOp:
    """Import StableHLO into the hlo dialect.

    ``source``: MLIR text in the pretty or generic form (``str`` or ``bytes``;
    quantized ``!quant.uniform`` element types included, see
    :mod:`interop.stablehlo_quant`), MLIR bytecode, a StableHLO portable
    artifact (``jax.export.Exported.mlir_module_serialized``), or a jaxlib
    ``ir.Module`` (from :func:`parse_stablehlo` for quantized text, which
    may be edited in between). ``example_args`` refine dynamic (``?``) shapes
    of ``@main``'s parameters (see :func:`import_mlir_module`). With
    ``verify=True`` the hlo verifier runs on the result (otherwise
    ``lowering.compile`` runs it); ``allow_unknown=True`` keeps ops without
    hlo form and dynamic shapes for a round trip instead of raising. Bytecode is first read in a child
    process unless ``trusted`` (see :func:`parse_stablehlo`).
    """
    module = parse_stablehlo(source, trusted=trusted)
    try:
        return import_mlir_module(module, *example_args, verify=verify, allow_unknown=allow_unknown)
    except XlaError:
        raise
    except Exception as e:  # jaxlib's bindings on a malformed module (e.g. strings that are not UTF-8)
        raise MlirParseError(f"cannot import the StableHLO module: {type(e).__name__}: {e}") from None
