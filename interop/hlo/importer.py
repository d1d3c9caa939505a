"""HLO module text -> hlo ``ModuleOp`` (:func:`import_hlo`).

Mapping:

* the ENTRY computation becomes ``func.func @main`` (its HLO name kept as the
  function's ``hlo.name``); computations called by ``call``, ``fusion``,
  ``async-start`` and custom calls become private functions named after the
  computation; computations applied by region-carrying instructions
  (``to_apply`` of reduce, sort, scatter, map, all-reduce..., ``condition`` /
  ``body`` of while, conditional branches) become the op's regions (a copy
  per use, as the hlo dialect keeps sub-computations in regions);
* every instruction keeps its shape with the full layout (tiles, ``L``, ``E``,
  ``S``), its name (op attribute ``hlo.name``), its metadata as the op's
  location (``loc = "file.py:12"``, from ``source_file``/``source_line`` or the
  module's ``StackFrames``) and, verbatim in the op attribute
  ``hlo.attributes``, the attributes without effect on values here
  (``metadata``, ``sharding``, ``frontend_attributes``, ``backend_config``,
  ``control-predecessors``, ...); :mod:`interop.hlo.exporter` prints them back;
* tuple-shaped results of ops with several results (variadic reduce, sort,
  batch-norm, rng-bit-generator...) are the op's results packed by an
  ``hlo.tuple``; a computation whose root is a ``tuple`` instruction returns the
  elements where the region needs several values;
* asynchronous pairs (``all-reduce-start``/``-done``, ``copy-start``/``-done``,
  ``async-start``/``-update``/``-done``, ``send``/``send-done``,
  ``recv``/``recv-done``...) become the synchronous op at the start, whose
  value the done instruction hands over;
* ``add-dependency`` and ``domain`` are the value of their operand (ordering
  and partitioning hints; execution here is in program order on one device).

The module's ``entry_computation_layout`` decides the layouts of ``@main``'s
parameters and result (a copy is inserted when the root has another layout,
as XLA's layout assignment does). Header attributes are kept on the module
(``hlo.module_name``, ``hlo.module_attributes``).

Every error is an :class:`~xla_dialect.errors.XlaError` naming the line and
column of the instruction (and the instruction and opcode).
"""

from __future__ import annotations

import gc
import os
import re

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    TensorType,
    TupleType,
)
from xdsl.ir import Attribute, Block, OpResult, Region, SSAValue

from xla_dialect.errors import HloParseError, LayoutError, UnsupportedError, XlaError
from xla_dialect.ops import control_flow, data_movement, elementwise
from xla_dialect.shape import DYNAMIC_SHAPE
from xla_dialect.xdsl_compat import create_op, link_ops

from . import attributes as A
from .opcodes import READERS, reader_for
from .syntax import Computation, HloModuleText, Instruction, parse_hlo_text

KEPT_ATTRIBUTES = frozenset({
    "metadata", "sharding", "frontend_attributes", "backend_config", "control-predecessors", "statistics_viz",
    "origin", "original_value", "result_accuracy", "schedule", "raw_backend_config", "output_to_operand_aliasing",
    "_xla_send_recv_source_target_pairs", "is_composite", "constrain_layout", "outfeed_shape",
})
"""Instruction attributes kept verbatim (op attribute ``hlo.attributes``): no effect on values here."""

_DONE = frozenset({"all-reduce-done", "all-gather-done", "collective-permute-done", "copy-done", "async-done",
                   "async-update", "send-done", "recv-done"})

_REQUIRED = object()

_SAME_SHAPE_OPCODES = frozenset(
    {op.name[4:].replace("_", "-") for op in elementwise.OPS}
    | {"copy", "negate", "clamp", "select"}) - {"real", "imag", "complex", "abs", "is-finite"}
"""Opcodes whose result has the first operand's shape and element type (compare: pred)."""


class _Pending:
    """The value of an asynchronous ``*-start`` instruction: only its ``*-done`` may read it."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: SSAValue):
        self.name = name
        self.value = value


class _Scope:
    """The computation being converted: its values by name and the ops of its block."""

    __slots__ = ("computation", "values", "ops", "current", "named", "consumed", "region_names", "verbatim",
                 "by_name")

    def __init__(self, computation: Computation):
        self.computation = computation
        self.values: dict[str, object] = {}
        self.ops: list = []
        self.current: Instruction | None = None
        self.named = False
        self.consumed: set[str] = set()
        self.region_names: list = []  # [computation name, parameter names...] per region read for the op
        self.verbatim: set[str] = set()  # attributes of the current instruction kept as written (keep_verbatim)
        self.by_name: dict[str, Instruction] | None = None  # the computation's instructions by name, on demand


class HloImporter:
    """Builds the hlo module for one parsed HLO module (see the module docstring)."""

    def __init__(self, parsed: HloModuleText):
        self.parsed = parsed
        self._create = create_op
        self._append = link_ops
        self.functions: dict[str, str] = {}  # computation name -> function symbol
        self.function_ops: list[func.FuncOp] = []
        self.converting: set[str] = set()
        self.positions: dict = {}  # op -> text offset of its instruction
        self.locations: dict[str, dict] = {}  # metadata text -> {"loc": ...}
        self.scope: _Scope | None = None
        self.symbols: set[str] = set()
        self.chlo_functions: dict[tuple, str] = {}  # (chlo op, operand type, result type) -> function symbol

    # -- entry ----------------------------------------------------------------

    def run(self) -> ModuleOp:
        entry = self.parsed.entry
        self.symbols.add("main")
        self.functions[entry.name] = "main"
        main = self.function(entry, "main", entry_layout=self.parsed.attrs.get("entry_computation_layout"))
        ops = [main] + self.function_ops
        attrs: dict[str, Attribute] = {"hlo.module_name": StringAttr(self.parsed.name)}
        kept = {k: StringAttr(v) for k, v in self.parsed.attrs.items() if k != "entry_computation_layout"}
        if kept:
            attrs["hlo.module_attributes"] = DictionaryAttr(kept)
        return ModuleOp(ops, attributes=attrs)

    # -- errors -----------------------------------------------------------------

    def where(self, ins: Instruction | None = None) -> str:
        ins = ins if ins is not None else (self.scope.current if self.scope else None)
        if ins is None:
            return f"HLO module {self.parsed.name}"
        return f"{self.parsed.where(ins.pos)}: %{ins.name} ({ins.opcode})"

    def fail(self, message: str, ins: Instruction | None = None):
        raise HloParseError(f"{self.where(ins)}: {message}")

    # -- computations -----------------------------------------------------------------

    def _computation(self, name: str, ins: Instruction | None, what: str) -> Computation:
        comp = self.parsed.computations.get(name)
        if comp is None:
            self.fail(f"{what} names computation {name!r}, which the module does not define", ins)
        return comp

    def _parameters(self, comp: Computation) -> list[Instruction]:
        params = {}
        for ins in comp.instructions:
            if ins.opcode == "parameter":
                try:
                    index = int(ins.literal)
                except (TypeError, ValueError):
                    self.fail(f"parameter number must be an integer, got {ins.literal!r}", ins)
                if index in params:
                    self.fail(f"parameter({index}) is defined twice in computation {comp.name!r}", ins)
                params[index] = ins
        if sorted(params) != list(range(len(params))):
            self.fail(f"computation {comp.name!r} has parameters {sorted(params)}; expected 0..{len(params) - 1}")
        return [params[i] for i in range(len(params))]

    def function(self, comp: Computation, symbol: str, entry_layout: str | None = None) -> func.FuncOp:
        params = self._parameters(comp)
        types = [p.shape for p in params]
        result_layout = None
        if entry_layout is not None:
            types, result_layout = self._entry_layouts(entry_layout, types, comp)
        block = Block(arg_types=types)
        root = self.body(comp, block, params, expand=False)
        (value,) = root
        if result_layout is not None and value.type != result_layout:
            if not _same_shape(value.type, result_layout):
                self.fail(f"entry_computation_layout gives the result {_fmt(result_layout)}, but the root is "
                          f"{_fmt(value.type)}", comp.root)
            if isinstance(result_layout, TensorType):
                copy = self._create(data_movement.CopyOp, [value], [result_layout], {}, {}, ())
                self._append(block, [copy])
                value = copy.results[0]
        self._append(block, [func.ReturnOp(value)])
        arg_attrs = ArrayAttr([DictionaryAttr(self._parameter_attributes(p)) for p in params])
        fop = func.FuncOp(symbol, FunctionType.from_lists(types, [value.type]), Region(block),
                          None if symbol == "main" else "private", arg_attrs=arg_attrs)
        if comp.name != symbol:
            fop.attributes["hlo.name"] = StringAttr(comp.name)
        for key, text in comp.attrs.items():
            fop.attributes[f"hlo.{key}"] = StringAttr(text)
        return fop

    def _parameter_attributes(self, ins: Instruction) -> dict[str, Attribute]:
        """Argument attributes of a parameter: its name, and its kept attributes (sharding, metadata...)."""
        out: dict[str, Attribute] = {"hlo.name": StringAttr(ins.name)}
        if ins.dynamic is not None:
            out.update(self._dynamic_attributes(ins))
        if "parameter_replication" in ins.attrs:
            self._check_parameter_replication(ins)
        if "metadata" in ins.attrs:
            self._check_metadata(ins)
        unknown = [k for k in ins.attrs if k not in KEPT_ATTRIBUTES and k != "parameter_replication"]
        if unknown:
            self.fail(f"attribute {unknown[0]}={ins.attrs[unknown[0]][:60]} is not supported for parameter", ins)
        if ins.attrs:
            out["hlo.attributes"] = DictionaryAttr({k: StringAttr(self._kept_text(k, v)) for k, v in ins.attrs.items()})
        return out

    def _dynamic_attributes(self, ins: Instruction) -> dict[str, Attribute]:
        """``hlo.dynamic_shape``: the shape with its bounded dynamic dimensions (``f32[<=8,4]{1,0}``; the type
        has the bound), printed back by the exporter; ``hlo.position``: where it is written, for the
        executor's UnsupportedError (:data:`DYNAMIC_SHAPE`)."""
        return {DYNAMIC_SHAPE: StringAttr(ins.dynamic), "hlo.position": StringAttr(self.parsed.where(ins.pos))}

    def _check_parameter_replication(self, ins: Instruction) -> None:
        """``parameter_replication={true,false}``: one flag per leaf buffer of the parameter (as XLA checks);
        kept as written (one device here: every parameter is replicated)."""
        text = ins.attrs["parameter_replication"].strip()
        body = text[1:-1] if text.startswith("{") and text.endswith("}") else None
        flags = [f.strip() for f in body.split(",")] if body and body.strip() else []
        if body is None or any(f not in ("true", "false") for f in flags):
            self.fail(f"parameter_replication must be a list of true/false such as {{true,false}}, "
                      f"got {text[:60]!r}", ins)
        leaves = _leaf_count(ins.shape)
        if len(flags) != leaves:
            self.fail(f"the parameter has {leaves} leaf buffers, but parameter_replication has {len(flags)} "
                      f"elements", ins)

    def _entry_layouts(self, text: str, types: list[Attribute], comp: Computation):
        """Parameter and result types from ``entry_computation_layout={(...)->...}``."""
        body = text.strip()
        if body.startswith("{") and body.endswith("}"):
            body = body[1:-1].strip()
        m = re.fullmatch(r"\((.*)\)\s*->\s*(.*)", body, re.S)
        if m is None:
            self.fail(f"malformed entry_computation_layout {text[:80]!r}")
        from .syntax import _Reader

        reader = _Reader(m.group(1), "entry_computation_layout")
        params = []
        for s, e in reader.split(0, len(m.group(1))):
            item = m.group(1)[s:e].strip()
            if ":" in item.split("[")[0]:  # 'name: shape' (older printers)
                item = item.split(":", 1)[1].strip()
            params.append(reader.shape_text(item, s))
        result = _Reader(m.group(2).strip(), "entry_computation_layout").shape_text(m.group(2).strip(), 0)
        if len(params) != len(types):
            self.fail(f"entry_computation_layout has {len(params)} parameters, ENTRY {comp.name!r} has {len(types)}")
        out = []
        for i, (want, have) in enumerate(zip(params, types)):
            if not _same_shape(want, have):
                self.fail(f"entry_computation_layout gives parameter {i} as {_fmt(want)}, but parameter({i}) is "
                          f"{_fmt(have)}")
            out.append(want)
        return out, result

    def body(self, comp: Computation, block: Block, params: list[Instruction], expand: bool) -> list[SSAValue]:
        """Convert ``comp``'s instructions into ``block``; return the value(s) of the root."""
        saved = self.scope
        scope = self.scope = _Scope(comp)
        try:
            for p, arg in zip(params, block.args):
                scope.values[p.name] = arg
            root = comp.root
            for ins in _ordered(comp, self):
                if ins.opcode == "parameter":
                    continue
                if expand and ins is root and ins.opcode == "tuple":
                    values = [self.value(n, ins) for n in ins.operands]
                    self._append(block, scope.ops)
                    return values
                self.instruction(ins)
            self._append(block, scope.ops)
            if comp.result is not None and root.shape is not None and not _same_shape(comp.result[0], root.shape):
                raise HloParseError(f"{self.parsed.where(comp.result[1])}: computation {comp.name!r} returns "
                                    f"{_fmt(comp.result[0])}, but its root %{root.name} is {_fmt(root.shape)}")
            value = scope.values[root.name]
            if isinstance(value, _Pending):
                self.fail("the root is an asynchronous start; the computation must return its done", root)
            if expand and isinstance(value.type, TupleType):
                scope.ops = []
                values = self.unpack(value)
                self._append(block, scope.ops)
                return values
            return [value]
        finally:
            self.scope = saved

    def instruction(self, ins: Instruction) -> None:
        scope = self.scope
        scope.current = ins
        scope.named = False
        scope.consumed = set()
        scope.region_names = []
        scope.verbatim = set()
        reader = READERS.get(ins.opcode) or reader_for(ins.opcode)
        if reader is None:
            self.fail(f"opcode {ins.opcode!r} is not supported: XLA has no such opcode")
        if ins.opcode in _DONE or (ins.opcode not in READERS and ins.opcode.endswith(("-done", "-update"))):
            args = []
        else:
            args = [self.value(n, ins) for n in ins.operands]
        if ins.shape is None:
            ins.shape = self._inferred_shape(ins, args)
        for declared, name, arg in zip(ins.operand_shapes, ins.operands, args):
            if declared is not None and not _same_shape(declared, arg.type):
                self.fail(f"operand %{name} is written as {_fmt(declared)} but is {_fmt(arg.type)}", ins)
        if "metadata" in ins.attrs:
            self._check_metadata(ins)
        first = len(scope.ops)
        try:
            value = reader(self, ins, args)
        except HloParseError:
            raise
        except (A.AttributeTextError, UnsupportedError, LayoutError) as e:
            self.fail(str(e), ins)
        except XlaError as e:
            self.fail(str(e), ins)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
            self.fail(f"malformed instruction ({type(e).__name__}: {e})", ins)
        extra = [k for k in ins.attrs if k not in scope.consumed and k not in KEPT_ATTRIBUTES
                 and k not in scope.verbatim]
        if extra:
            self.fail(f"attribute {extra[0]}={ins.attrs[extra[0]][:60]} is not supported for {ins.opcode}", ins)
        kept = {k: StringAttr(self._kept_text(k, v)) for k, v in ins.attrs.items()
                if k not in scope.consumed and (k in KEPT_ATTRIBUTES or k in scope.verbatim)}
        new_ops = scope.ops[first:]
        if new_ops:
            loc = self._location(ins)
            named = next((op for op in new_ops if "hlo.name" in op.attributes), new_ops[-1])
            if kept:
                named.attributes["hlo.attributes"] = DictionaryAttr(kept)
            if ins.dynamic is not None:  # bounded dynamic dimensions: the static bound, the text kept for printing
                owner = value.owner if isinstance(value, OpResult) and value.owner in new_ops else named
                owner.attributes.update(self._dynamic_attributes(ins))
            for op in new_ops:
                if loc:
                    op.attributes.update(loc)
                self.positions[op] = ins.pos
        scope.values[ins.name] = value

    def _inferred_shape(self, ins: Instruction, args) -> Attribute:
        """The shape of an instruction written without one: a tuple of its operands, or an
        element-wise op's (pred for compare); XLA's parser infers these the same way."""
        from xdsl.dialects.builtin import IntegerType

        if ins.opcode == "tuple":
            return TupleType([a.type for a in args])
        if ins.opcode == "get-dimension-size":  # XLA's shape inference: always s32[]
            from xla_dialect.shape import parse_shape

            from .syntax import with_default_layouts

            return with_default_layouts(parse_shape("s32[]"))
        if args and isinstance(args[0].type, TensorType) and ins.opcode in _SAME_SHAPE_OPCODES:
            t = args[-1].type if ins.opcode == "select" else args[0].type
            if ins.opcode == "compare":
                return TensorType(IntegerType(1), t.get_shape(), t.encoding)
            return t
        self.fail("the instruction has no shape; write it (only tuples and element-wise ops infer theirs)", ins)

    def _check_metadata(self, ins: Instruction) -> None:
        """``metadata={...}``: a {key=value} list whose line, column and frame fields are 32-bit integers
        (``OpMetadata``'s int32 fields, as XLA's parser reads them)."""
        text = ins.attrs["metadata"]
        if text in self.locations:
            return
        try:
            items = A.key_values(text)
        except A.AttributeTextError as e:
            self.fail(f"attribute metadata: {e}", ins)
        for key, value in items.items():
            if key in _INT32_METADATA and (not re.fullmatch(r"-?\d+", value) or not -2**31 <= int(value) < 2**31):
                self.fail(f"metadata {key}={value} must be a 32-bit integer", ins)

    def _kept_text(self, key: str, text: str) -> str:
        if key != "metadata":
            return text
        try:
            items = A.key_values(text)
        except A.AttributeTextError:
            return text
        frame = items.pop("stack_frame_id", None)
        if frame is not None and "source_file" not in items:
            resolved = self._stack_frame(frame)
            if resolved is not None:
                items["source_file"] = A.quote(resolved[0])
                items["source_line"] = str(resolved[1])
        return A.format_key_values(items)

    def _stack_frame(self, frame_id: str):
        sections = self.parsed.sections
        try:
            frame = A.key_values(sections["StackFrames"][int(frame_id)])
            location = A.key_values(sections["FileLocations"][int(frame["file_location_id"])])
            file_name = A.string(sections["FileNames"][int(location["file_name_id"])])
            return file_name, int(location["line"])
        except (KeyError, ValueError, A.AttributeTextError):
            return None

    def _location(self, ins: Instruction) -> dict:
        text = ins.attrs.get("metadata")
        if text is None:
            return {}
        hit = self.locations.get(text)
        if hit is None:
            hit = {}
            try:
                items = A.key_values(text)
            except A.AttributeTextError:
                items = {}
            source = A.string(items["source_file"]) if "source_file" in items else None
            line = items.get("source_line")
            if source is None and "stack_frame_id" in items:
                resolved = self._stack_frame(items["stack_frame_id"])
                if resolved is not None:
                    source, line = resolved[0], str(resolved[1])
            if source:
                hit = {"loc": StringAttr(f"{source}:{line}" if line else source)}
            self.locations[text] = hit
        return hit

    # -- services for read rules ---------------------------------------------------

    def value(self, name: str, ins: Instruction) -> SSAValue:
        try:
            value = self.scope.values[name]
        except KeyError:
            self.fail(f"operand %{name} is not defined in computation {self.scope.computation.name!r}", ins)
        if isinstance(value, _Pending):
            self.fail(f"operand %{name} is an asynchronous start; only its done instruction may use it", ins)
        return value

    def emit(self, cls, operands, props, result_types, regions=(), name: bool = True) -> list[SSAValue]:
        """Append an hlo op for the current instruction; return its results."""
        scope = self.scope
        attributes = {}
        if name and not scope.named:
            attributes["hlo.name"] = StringAttr(scope.current.name)
            scope.named = True
        if regions and scope.region_names:
            attributes["hlo.region_names"] = ArrayAttr(
                [ArrayAttr([StringAttr(n) for n in names]) for names in scope.region_names])
            scope.region_names = []
        op = self._create(cls, list(operands), list(result_types), dict(props or {}), attributes, regions)
        scope.ops.append(op)
        return list(op.results)

    def pack(self, values, tuple_type: Attribute, name: bool = True) -> SSAValue:
        """An ``hlo.tuple`` of ``values`` (the HLO value of an op with several results)."""
        return self.emit(control_flow.TupleOp, values, None, [tuple_type], name=name)[0]

    def unpack(self, value: SSAValue) -> list[SSAValue]:
        """``hlo.get_tuple_element`` of every element of a tuple value."""
        from xdsl.dialects.builtin import IntegerAttr

        return [self.emit(control_flow.GetTupleElementOp, [value], {"index": IntegerAttr(i, 64)}, [t], name=False)[0]
                for i, t in enumerate(value.type.types)]

    def attr(self, ins: Instruction, key: str, reader, default=_REQUIRED):
        """Attribute ``key`` of ``ins`` read by ``reader`` (``default`` if absent; required without one)."""
        text = ins.attrs.get(key)
        self.scope.consumed.add(key)
        if text is None:
            if default is _REQUIRED:
                self.fail(f"{ins.opcode} needs the attribute {key}=", ins)
            return default
        try:
            return reader(text)
        except A.AttributeTextError as e:
            self.fail(f"attribute {key}: {e}", ins)

    def keep(self, ins: Instruction, key: str) -> None:
        """Keep attribute ``key`` of ``ins`` verbatim (in ``hlo.attributes``) although a read rule looked at it."""
        self.scope.consumed.discard(key)

    def keep_verbatim(self, ins: Instruction, key: str) -> None:
        """Keep attribute ``key`` of ``ins`` as written (printed back by the exporter), whatever it is: for
        attributes a read rule checked and the executor needs no more of (``algorithm=``, ``is_stable=``)."""
        self.scope.consumed.discard(key)
        self.scope.verbatim.add(key)

    def start_instruction(self, ins: Instruction) -> Instruction | None:
        """The instruction a done (or update) names as its operand, if it is one of the computation's."""
        scope = self.scope
        if scope.by_name is None:
            scope.by_name = {i.name: i for i in scope.computation.instructions}
        start = scope.by_name.get(ins.operands[0]) if len(ins.operands) == 1 else None
        while start is not None and start.opcode.endswith("-update") and len(start.operands) == 1:
            start = scope.by_name.get(start.operands[0])
        return start

    def emit_opaque(self, cls, operands, result_type: Attribute, attributes: dict) -> SSAValue:
        """Append an opaque op (an XLA instruction the dialect has no op for) for the current instruction."""
        scope = self.scope
        attributes = {"hlo.name": StringAttr(scope.current.name), **attributes}
        scope.named = True
        op = cls.create(operands=list(operands), result_types=[result_type], attributes=attributes)
        scope.ops.append(op)
        return op.results[0]

    def shape_of_text(self, text: str, ins: Instruction) -> Attribute:
        from .syntax import _Reader

        return _Reader(text, self.parsed.source).shape_text(text, 0)

    def region(self, ins: Instruction, key: str | None, param_types, expand: bool = False,
               name: str | None = None) -> Region:
        """The computation named by attribute ``key`` (or ``name``) as a region of the current op."""
        if name is None:
            name = self.attr(ins, key, A.computation)
        comp = self._computation(name, ins, key or "branch_computations")
        params = self._parameters(comp)
        if len(params) != len(param_types):
            self.fail(f"{key or 'branch'} computation {name!r} takes {len(params)} parameters, "
                      f"{ins.opcode} passes {len(param_types)}", ins)
        if name in self.converting:
            self.fail(f"computation {name!r} calls itself (HLO has no recursion)", ins)
        block = Block(arg_types=[p.shape for p in params])
        self.converting.add(name)
        try:
            values = self.body(comp, block, params, expand)
        finally:
            self.converting.discard(name)
        ret = self._create(control_flow.ReturnOp, values, [], {}, {}, ())
        self._append(block, [ret])
        self.scope.region_names.append([name] + [p.name for p in params])
        return Region(block)

    def callee(self, ins: Instruction, key: str) -> str:
        """The function symbol of the computation named by attribute ``key``."""
        return self.callee_named(ins, self.attr(ins, key, A.computation))

    def callee_named(self, ins: Instruction, name: str) -> str:
        symbol = self.functions.get(name)
        if symbol is not None:
            if name in self.converting:
                self.fail(f"computation {name!r} calls itself (HLO has no recursion)", ins)
            return symbol
        comp = self._computation(name, ins, "a call")
        symbol = name if name not in self.symbols else _fresh(name, self.symbols)
        self.symbols.add(symbol)
        self.functions[name] = symbol
        self.converting.add(name)
        try:
            self.function_ops.append(self.function(comp, symbol))
        finally:
            self.converting.discard(name)
        return symbol

    def chlo_function(self, chlo_name: str, operand_type: Attribute, result_type: Attribute) -> str:
        """A private function computing the unary chlo op ``chlo_name`` as XLA expands it (through the
        StableHLO importer's chlo legalization); one per op and types."""
        from xla_dialect.layout import strip_layout

        from ..stablehlo import import_stablehlo

        key = (chlo_name, strip_layout(operand_type), strip_layout(result_type))
        cache = self.chlo_functions
        if key in cache:
            return cache[key]
        arg, res = key[1], key[2]
        text = (f"func.func @main(%arg0: {arg}) -> {res} {{\n  %0 = {chlo_name} %arg0 : {arg} -> {res}\n"
                f"  return %0 : {res}\n}}\n")
        expansion = import_stablehlo(text)
        symbol = _fresh(chlo_name.replace("chlo.", "") + "_expansion", self.symbols)
        self.symbols.add(symbol)
        renames = {}
        for fop in list(expansion.ops):
            old = fop.sym_name.data
            new = symbol if old == "main" else _fresh(f"{symbol}.{old}", self.symbols)
            self.symbols.add(new)
            renames[old] = new
        for fop in list(expansion.ops):
            fop.detach()
            fop.sym_name = StringAttr(renames[fop.sym_name.data])
            fop.sym_visibility = StringAttr("private")
            for op in fop.walk():
                callee = op.properties.get("callee")
                if callee is not None and callee.string_value() in renames:
                    from xdsl.dialects.builtin import SymbolRefAttr

                    op.properties["callee"] = SymbolRefAttr(renames[callee.string_value()])
            self.function_ops.append(fop)
        cache[key] = symbol
        return symbol

    def function_result_type(self, symbol: str) -> Attribute:
        """The result type of a function converted for a call (its computation's root shape)."""
        fop = next(f for f in self.function_ops if f.sym_name.data == symbol)
        (result,) = fop.function_type.outputs.data
        return result

    def build_region(self, arg_types, body) -> Region:
        """A one-block region: ``body(block arguments)`` emits its ops and gives the values it returns."""
        block = Block(arg_types=list(arg_types))
        scope = self.scope
        saved = scope.ops
        scope.ops = []
        try:
            results = body(list(block.args))
            ret = self._create(control_flow.ReturnOp, list(results), [], {}, {}, ())
            self._append(block, scope.ops + [ret])
        finally:
            scope.ops = saved
        return Region(block)

    def async_start(self, ins: Instruction, value: SSAValue) -> _Pending:
        return _Pending(ins.name, value)

    def async_result(self, ins: Instruction) -> SSAValue:
        if len(ins.operands) != 1:
            self.fail(f"{ins.opcode} takes one operand (its start)", ins)
        pending = self.scope.values.get(ins.operands[0])
        if not isinstance(pending, _Pending):
            self.fail(f"the operand of {ins.opcode} must be the matching start instruction", ins)
        return pending.value

    def async_forward(self, ins: Instruction) -> _Pending:
        return _Pending(ins.name, self.async_result(ins))

    def replica_count(self) -> int:
        try:
            return int(self.parsed.attrs.get("replica_count", "1"))
        except ValueError:
            return 1


def _ordered(comp: Computation, imp: HloImporter) -> list[Instruction]:
    """The instructions with every operand before its user (text order when it already is)."""
    seen = set()
    for ins in comp.instructions:
        if any(o not in seen for o in ins.operands):
            break
        seen.add(ins.name)
    else:
        return comp.instructions
    by_name = {i.name: i for i in comp.instructions}
    order, state = [], {}
    for start in comp.instructions:
        if start.name in state:
            continue
        stack = [(start, 0)]
        while stack:
            ins, k = stack.pop()
            if k == 0:
                if state.get(ins.name) == 2:
                    continue
                state[ins.name] = 1
            if k < len(ins.operands):
                stack.append((ins, k + 1))
                dep = by_name.get(ins.operands[k])
                if dep is None:
                    imp.fail(f"operand %{ins.operands[k]} is not defined in computation {comp.name!r}", ins)
                if state.get(dep.name) == 1:
                    imp.fail(f"instructions {ins.name!r} and {dep.name!r} depend on each other", ins)
                if dep.name not in state:
                    stack.append((dep, 0))
            else:
                state[ins.name] = 2
                order.append(ins)
    return order


_INT32_METADATA = frozenset({"source_line", "source_end_line", "source_column", "source_end_column",
                             "stack_frame_id"})
"""``metadata`` fields XLA reads as 32-bit integers."""


def _leaf_count(shape: Attribute) -> int:
    if isinstance(shape, TupleType):
        return sum(_leaf_count(t) for t in shape.types)
    return 1


def _fresh(name: str, taken: set[str]) -> str:
    n = 1
    while f"{name}.{n}" in taken:
        n += 1
    return f"{name}.{n}"


def _same_shape(a: Attribute, b: Attribute) -> bool:
    from xla_dialect.ops.base import same_modulo_layout

    return a == b or same_modulo_layout(a, b)


def _fmt(t: Attribute) -> str:
    from xla_dialect.shape import format_shape

    try:
        return format_shape(t)
    except Exception:
        return str(t)


def import_hlo(text_or_path, verify: bool = True, source: str | None = None):
    """Import XLA HLO module text (a string, or a path to a ``.hlo``/``.txt`` file) as an hlo ``ModuleOp``.

    Reads what XLA prints: ``jax.jit(f).lower(x).as_text(dialect="hlo")``,
    ``.compile().as_text()``, XLA dumps and XLA's own ``.hlo`` test files, with
    every layout (tiles, memory spaces, element sizes) on the values. See the
    module docstring for the mapping. ``verify=False`` skips the hlo verifier
    (``lowering.compile`` verifies anyway). Errors name the line and column (and ``source``,
    the file name to show, when the text is given directly).
    """
    text, where_from = _read_source(text_or_path)
    where_from = where_from or source
    # The import allocates many small objects and frees none: the cyclic collector's passes
    # over the growing heap would cost a third of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        parsed = parse_hlo_text(text, where_from)
        importer = HloImporter(parsed)
        module = importer.run()
        if verify:
            _verify(module, parsed, importer.positions)
    finally:
        if collecting:
            gc.enable()
    return module


_ONE_INSTRUCTION = re.compile(r"\s*(?:(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=|[a-z][a-z0-9]*\[|\()")


def _read_source(source) -> tuple[str, str | None]:
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and not source.lstrip().startswith("HloModule")
                                           and len(source) < 4096
                                           and not (_ONE_INSTRUCTION.match(source) and "(" in source
                                                    and not os.path.exists(source))):
        path = os.fspath(source)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except OSError as e:
            raise HloParseError(f"cannot read HLO text from {path!r}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise HloParseError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if isinstance(source, bytes):
        try:
            return source.decode("utf-8"), None
        except UnicodeDecodeError as e:
            raise HloParseError(f"HLO text is not UTF-8 ({e.reason} at byte {e.start})") from None
    if not isinstance(source, str):
        raise HloParseError(f"import_hlo expects HLO text or a path, got {type(source).__name__}")
    return source, None


def _verify(module: ModuleOp, parsed: HloModuleText, positions: dict) -> None:
    from xdsl.utils.exceptions import VerifyException

    try:
        module.verify()
        return
    except (VerifyException, XlaError):
        pass
    # Find the first failing op, innermost first, to name its instruction's line.
    for op in module.walk():
        if op is module:
            continue
        try:
            if op.regions:
                op.verify_()
            else:
                op.verify()
        except (VerifyException, XlaError) as e:
            name = op.attributes.get("hlo.name")
            pos = positions.get(op)
            where = parsed.where(pos) if pos is not None else f"HLO module {parsed.name}"
            label = f": %{name.data}" if name is not None else ""
            raise HloParseError(f"{where}{label}: {e}") from None
    module.verify()  # (a module-level failure: report it as xDSL does)


