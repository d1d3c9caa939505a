"""Import StableHLO (text, bytecode, portable artifacts) into the hlo dialect.

StableHLO is read with jaxlib's own MLIR Python bindings (``jaxlib.mlir``):
``ir.Module.parse`` or ``stablehlo.deserialize_portable_artifact`` builds the
MLIR module, and :class:`Importer` walks it op by op, building hlo ops. Reading
through jaxlib rather than xDSL's parser is about 15x faster and understands
JAX's pretty syntax (``stablehlo.reduce(...) applies stablehlo.add``).

Conversion is table-driven:

* :data:`~interop.stablehlo.dispatch.CONVERTERS` maps an op name (``stablehlo.constant``, ``func.call``, ...)
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
  module that XLA expands with its own decompositions (:func:`~interop.stablehlo.chlo.legalize_chlo_op`,
  cached), and the expansion's ops take its place (:meth:`Importer.inline_expansion`),
  so chlo ops work in functions of any name and leave the rest untouched.
* Quantized text (``!quant.uniform`` element types, which jaxlib cannot parse)
  is rewritten by :func:`~interop.stablehlo.parse.parse_mlir`, which records each op's
  quantization on the op (:data:`QUANTIZATION`); see :mod:`interop.stablehlo.quant`.
* Types are converted once per distinct MLIR type (cache keyed by the uniqued
  ``ir.Type``); attributes once per distinct ``ir.Attribute``.
* Each op gets its source location as a ``loc`` string attribute
  (``file.py:12``), which :func:`xla_dialect.errors.op_context` puts in messages.

The importer is split by concern, each module importing only those before it:
:mod:`~interop.stablehlo.context` (jaxlib's MLIR context), :mod:`~interop.stablehlo.bytecode` (the structural
check of bytecode), :mod:`~interop.stablehlo.attributes` (types, literals, attributes, locations),
:mod:`~interop.stablehlo.quant` (quantized text and types), :mod:`~interop.stablehlo.parse` (jaxlib parsing),
:mod:`~interop.stablehlo.chlo` (XLA's chlo expansions), :mod:`~interop.stablehlo.dispatch` (the converter table and the generic rules),
:mod:`~interop.stablehlo.converters` (one converter per op that is not a rename), this module (the
:class:`Importer`), :mod:`~interop.stablehlo.bytecode_check` (untrusted bytecode read in a child first) and
:mod:`~interop.stablehlo.entry` (:func:`~interop.stablehlo.parse_stablehlo`,
:func:`~interop.stablehlo.import_stablehlo`); :mod:`interop.schema` holds what the exporter shares.

Anything without a counterpart raises :class:`~xla_dialect.errors.UnsupportedError`
naming the op and its location. The importer does not run the hlo verifier by
default: the input was verified by MLIR when it was parsed, and
``lowering.compile`` verifies the hlo module; pass ``verify=True`` to check now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from xla_dialect.errors import UnsupportedError, XlaError
from xla_dialect.layout import LayoutAttr, parse_layout
from xla_dialect.ops import OPS_BY_NAME
from xla_dialect.ops.control_flow import ReturnOp
from xla_dialect.xdsl_compat import create_op as _create
from xla_dialect.xdsl_compat import link_ops as _append_ops

from ..schema import QUANTIZATION, QUANTIZED, REGION_ARG_LAYOUTS, RESULT_LAYOUTS
from . import converters  # noqa: F401  (registers the converters in dispatch.CONVERTERS)
from .attributes import (
    _DYNAMIC,
    IGNORED_ATTRIBUTES,
    _with_layouts,
    convert_attribute,
    convert_type,
    dense_elements,
    location_text,
)
from .context import _ir, mlir_context
from .dispatch import convert_unquantized

__all__ = ["Importer", "import_mlir_module"]


class Importer:
    """Walks a jaxlib ``ir.Module`` and builds the equivalent hlo ``ModuleOp``."""

    def __init__(self, allow_unknown: bool = False, quant_lines: dict | None = None):
        self.allow_unknown = allow_unknown  # keep unknown ops / dynamic shapes as opaque ops
        self.types: dict = {}  # ir.Type -> xDSL type
        self.quant_lines: dict = quant_lines or {}  # source line -> (kind, quantized types), see interop.stablehlo.quant
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
        self.filename: str | None = None  # the file parsed, named with the line and column in messages
        self.dense_props: dict = {}  # hlo op class -> properties kept as 2-D dense elements
        self.branch_operands: dict = {}  # marker tuple ir.Value -> hlo.conditional branch operands
        # Restoring the exporter's flattened tuple-state while loops:
        self.state_roots: dict = {}  # leaf ir.Value -> the tuple it was read from
        self.state_args: list[list[SSAValue]] = []  # block arguments of the regions being converted
        self.state_types: list[list[Attribute]] = []  # state types of the loops being converted
        self.state_results: list[SSAValue] = []  # results of the last restored loop
        self.ops_by_name = OPS_BY_NAME  # hlo op name -> class, read by dispatch.hlo_op_class only
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
                from .quant import convert_quantized_op

                results = convert_quantized_op(self, op, entry[1], entry[0])
                self._map_results(op, results)
                return
        self._map_results(op, convert_unquantized(self, op))

    def convert_unquantized(self, op) -> list[SSAValue] | None:
        """Convert ``op`` by its converter or the generic rule (quantized ops end here too, with their types)."""
        return convert_unquantized(self, op)

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
            from .quant import parse_quantized

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
            self.emit(ReturnOp, results, {}, (), [], plain=True)
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
            loc = location_text(op.location) or self._text_position(op.location)
        except Exception:
            loc = None
        return f"{op.name} at {loc}" if loc else op.name

    def _text_position(self, loc) -> str | None:
        """``file:line:col`` of an op placed by the parser in :attr:`filename`'s text (location ``"-":l:c``)."""
        if self.filename is None or not isinstance(loc, self._ir.FileLineColLoc) or loc.filename != "-":
            return None
        return f"{self.filename}:{loc.start_line}:{loc.start_col}"


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
# Entry points
# ----------------------------------------------------------------------------


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
                       quant_lines: dict | None = None, filename: str | None = None) -> ModuleOp:
    """Convert a jaxlib ``ir.Module`` holding StableHLO to an hlo ``ModuleOp``.

    ``example_args`` (arrays or anything with ``shape``/``dtype``, one per
    ``@main`` parameter) refine a shape-polymorphic program to static shapes;
    they are required when ``@main`` takes arrays with ``?`` dimensions.

    ``allow_unknown=True`` keeps what has no hlo form instead of raising: ops
    become unregistered ops of the same name (see :func:`~interop.stablehlo.dispatch.opaque_converter`)
    and ``?`` dimensions stay dynamic. Such a module exports back unchanged
    (:func:`interop.stablehlo.export_stablehlo`) but does not run.

    A module that :func:`~interop.stablehlo.parse_stablehlo` read from quantized text carries
    its quantizations on its ops. ``quant_lines`` is the older form: the
    per-line table of :func:`interop.stablehlo.quant.expand_quantized_text`
    for a module parsed from text rewritten by it. ``filename``: the file the module was parsed from,
    named (with the line and column) in the messages about its ops.
    """
    if example_args:
        module = refine_shapes(module, example_args)
    elif has_dynamic_inputs(module) and not allow_unknown:
        raise UnsupportedError(
            "@main takes arrays of dynamic shape (a shape-polymorphic program): give example arguments "
            "(arrays or jax.ShapeDtypeStruct) to refine it to static shapes")
    importer = Importer(allow_unknown, quant_lines)
    importer.filename = filename
    result = importer.import_module(module)
    if verify:
        result.verify()
    return result
