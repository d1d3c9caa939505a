"""hlo ``ModuleOp`` -> XLA HLO module text (:func:`export_hlo`), with the module's own layouts.

Every value prints with its shape and layout (``f32[8,128]{0,1:T(8,128)}``);
``entry_computation_layout`` is ``@main``'s signature. ``@main`` is the ENTRY
computation; other functions are computations named after them (or their
``hlo.name``); each region is a computation of its own (identical regions are
printed once and shared, as XLA shares them). Instructions take their
``hlo.name`` when it is free, else a fresh ``opcode.N``; attributes the importer
kept (``hlo.attributes``: metadata, sharding, frontend attributes...) are
printed back verbatim.

Forms of the hlo dialect that HLO text does not have are printed as their HLO
equivalents: implicit broadcasting of binary ops becomes explicit
``broadcast`` instructions (the ``explicit-binary-broadcasts`` pass, on a copy;
select's scalar predicate and clamp's scalar bounds print as they are), ``hlo.dot`` a
``dot`` with contracting dimensions, ops with several results one
tuple-shaped instruction (read with ``get-tuple-element``), a while loop over
several values a while over their tuple. So ``import_hlo(export_hlo(m))`` is
structurally ``m`` for modules read from HLO text, and printing it again gives
the same text for every module.
"""

from __future__ import annotations

import re

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr, TupleType
from xdsl.ir import Block, Operation, Region, SSAValue

from xla_dialect.errors import UnsupportedError, XlaError
from xla_dialect.ops import constants, control_flow, data_movement, effects
from xla_dialect.shape import DYNAMIC_SHAPE, format_shape, parse_shape

from . import attributes as A
from .opcodes import (
    NO_HLO_FORM,
    OPAQUE_PREFIX,
    UPCAST,
    WRITERS,
    custom_call_result_types,
    write_constant_literal,
    write_opaque,
)


def _shape(t) -> str:
    return format_shape(t, default_layout=True)


def _shape_of(t, attributes) -> str:
    """``t`` printed with the bounded dynamic dimensions the importer kept (``hlo.dynamic_shape`` in
    ``attributes``, an op's or a parameter's), when that shape is still ``t`` with its bounds; else ``t``."""
    written = attributes.get(DYNAMIC_SHAPE) if attributes is not None else None
    if isinstance(written, StringAttr):
        dynamic: list = []
        try:
            static = parse_shape(written.data, dynamic)
        except XlaError:
            return _shape(t)
        if _shape(static) == _shape(t):
            return format_shape(t, default_layout=True, dynamic=dynamic)
    return _shape(t)


class _Comp:
    """A computation being printed: its lines and value names."""

    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.names: dict[SSAValue, str] = {}


class HloExporter:
    """Prints one hlo module as HLO text (see the module docstring)."""

    def __init__(self, module: ModuleOp, for_xla: bool = False):
        self.module = module
        self.for_xla = for_xla  # fusions as calls, bitcasts as transpose/reshape (see export_hlo)
        self.functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
        self.printed: list[str] = []  # computation texts, callees first
        self.function_names: dict[str, str] = {}  # symbol -> computation name
        self.region_names: dict[tuple, str] = {}  # (HLO name, body text) -> computation name (shared regions)
        self.used: set[str] = set()  # instruction names (unique per module, as XLA keeps them)
        self.used_computations: set[str] = set()  # computation names (a namespace of their own in XLA)
        self.comp: _Comp | None = None
        self.packer: dict[Operation, Operation] = {}  # op with several results -> the tuple packing them

    # -- module -----------------------------------------------------------------

    def export(self) -> str:
        main = self.functions.get("main")
        if main is None:
            raise UnsupportedError("export_hlo: the module has no @main function (the ENTRY computation)")
        entry_name = self._name_of(main)
        self.function_names["main"] = entry_name
        self.used_computations.add(entry_name)
        entry = self._function_text(main, entry_name, is_entry=True)
        ftype = main.function_type
        arg_attrs = [a.data for a in main.arg_attrs.data] if main.arg_attrs is not None else []
        inputs = [_shape_of(t, arg_attrs[i] if i < len(arg_attrs) else None) for i, t in enumerate(ftype.inputs)]
        ret = main.body.block.last_op
        root = ret.operands[0].owner if ret is not None and len(ret.operands) == 1 else None
        result_attrs = root.attributes if isinstance(root, Operation) and len(root.results) == 1 else None
        layout = "{(" + ", ".join(inputs) + ")->" + \
                 (_shape_of(ftype.outputs.data[0], result_attrs) if len(ftype.outputs) == 1
                  else "(" + ", ".join(_shape(t) for t in ftype.outputs) + ")") + "}"
        name_attr = self.module.attributes.get("hlo.module_name")
        header = f"HloModule {name_attr.data if isinstance(name_attr, StringAttr) else 'module'}"
        kept = self.module.attributes.get("hlo.module_attributes")
        if isinstance(kept, DictionaryAttr):
            for k, v in kept.data.items():
                header += f", {k}={v.data}"
        header += f", entry_computation_layout={layout}"
        return header + "\n\n" + "\n\n".join(self.printed + [entry]) + "\n"

    def _name_of(self, fop: func.FuncOp) -> str:
        attr = fop.attributes.get("hlo.name")
        return attr.data if isinstance(attr, StringAttr) else fop.sym_name.data

    def _unique(self, name: str, used: set[str] | None = None) -> str:
        used = self.used if used is None else used
        if name not in used:
            used.add(name)
            return name
        base, n = name, 1
        while f"{base}.{n}" in used:
            n += 1
        used.add(f"{base}.{n}")
        return f"{base}.{n}"

    # -- computations for write rules ---------------------------------------------

    def function(self, symbol: str) -> str:
        """The computation name of function ``symbol`` (printed on first use)."""
        hit = self.function_names.get(symbol)
        if hit is not None:
            return "%" + hit
        fop = self.functions.get(symbol)
        if fop is None:
            raise UnsupportedError(f"export_hlo: @{symbol} is called but not defined")
        name = self._unique(self._name_of(fop), self.used_computations)
        self.function_names[symbol] = name
        self.printed.append(self._function_text(fop, name, is_entry=False))
        return "%" + name

    def computation(self, region: Region, hint: str, pack_params: bool = False) -> str:
        """``%name`` of the computation printed for ``region`` (once per distinct body).

        The name and parameter names are those the region had in HLO text (op attribute
        ``hlo.region_names``) when it came from there, else ``hint``.
        """
        block = region.block
        owner = region.parent
        names = owner.attributes.get("hlo.region_names") if owner is not None else None
        param_names = None
        original = None
        if isinstance(names, ArrayAttr):
            index = list(owner.regions).index(region)
            if index < len(names.data):
                entry = [a.data for a in names.data[index].data]
                hint, param_names = entry[0], entry[1:]
                original = hint
                if len(param_names) != len(block.args) or pack_params:
                    param_names = None
        saved = self.comp
        comp = self.comp = _Comp(hint)
        try:
            self._parameters(block, pack_params, param_names)
            self._body(block, block.last_op.operands if block.last_op is not None else ())
        finally:
            self.comp = saved
        # Regions read from one HLO computation are printed once; distinct computations stay distinct.
        key = (original, _structure_key(comp.lines))
        shared = self.region_names.get(key)
        if shared is not None:
            return "%" + shared
        name = self._unique(hint, self.used_computations)
        self.region_names[key] = name
        self.printed.append(self._wrap(name, comp, is_entry=False))
        return "%" + name

    def one_operand(self, op: Operation) -> list[SSAValue | str]:
        """The single (tuple) operand of ops HLO gives one operand (opt-barrier)."""
        operands = list(op.operands)
        if len(operands) == 1:
            return operands
        return [self._tuple_line(operands, op)]

    def packed_operands(self, op: Operation, values: list[SSAValue]) -> list[SSAValue | str]:
        if len(values) == 1:
            return values
        return [self._tuple_line(values, op)]

    # -- printing -----------------------------------------------------------------

    def _function_text(self, fop: func.FuncOp, name: str, is_entry: bool) -> str:
        saved = self.comp
        comp = self.comp = _Comp(name)
        try:
            block = fop.body.block
            arg_names, arg_kept = [], []
            attrs = fop.arg_attrs.data if fop.arg_attrs is not None else ()
            for i, arg in enumerate(block.args):
                n, kept = None, None
                if i < len(attrs):
                    d = attrs[i].data
                    if "hlo.name" in d and isinstance(d["hlo.name"], StringAttr):
                        n = d["hlo.name"].data
                    kept = d.get("hlo.attributes")
                arg_names.append(n)
                arg_kept.append(kept)
            self._parameters(block, False, arg_names, arg_kept,
                             [attrs[i].data if i < len(attrs) else None for i in range(len(block.args))])
            ret = block.last_op
            self._body(block, ret.operands if ret is not None else ())
        finally:
            self.comp = saved
        return self._wrap(name, comp, is_entry)

    def _wrap(self, name: str, comp: _Comp, is_entry: bool) -> str:
        head = ("ENTRY " if is_entry else "") + f"%{name}"
        return head + " {\n" + "\n".join(comp.lines) + "\n}"

    def _parameters(self, block: Block, pack: bool, names=None, kept=None, arg_attrs=None) -> None:
        comp = self.comp
        if pack:
            state = TupleType([a.type for a in block.args])
            p = self._unique("param")
            comp.lines.append(f"  %{p} = {_shape(state)} parameter(0)")
            for i, arg in enumerate(block.args):
                n = self._unique(f"{p}.{i}")
                comp.lines.append(f"  %{n} = {_shape(arg.type)} get-tuple-element(%{p}), index={i}")
                comp.names[arg] = n
            return
        for i, arg in enumerate(block.args):
            n = self._unique((names[i] if names and names[i] else None) or f"param_{i}")
            extra = ""
            if kept and isinstance(kept[i], DictionaryAttr):
                extra = "".join(f", {k}={v.data}" for k, v in kept[i].data.items())
            shape = _shape_of(arg.type, arg_attrs[i]) if arg_attrs else _shape(arg.type)
            comp.lines.append(f"  %{n} = {shape} parameter({i}){extra}")
            comp.names[arg] = n

    def _body(self, block: Block, results) -> None:
        comp = self.comp
        ops = list(block.ops)[:-1] if isinstance(block.last_op, (func.ReturnOp, control_flow.ReturnOp)) \
            else list(block.ops)
        skipped = self._packing_tuples(ops)
        for op in ops:
            if op in skipped:
                continue
            if UPCAST in op.attributes:  # the importer's convert of a mixed-type dot operand: printed as written
                comp.names[op.results[0]] = self._operand(op.operands[0], op)
                continue
            self._instruction(op, skipped)
        results = list(results)
        if len(results) == 1:
            root = comp.names[results[0]]
            for i in range(len(comp.lines) - 1, -1, -1):
                if comp.lines[i].startswith(f"  %{root} = "):
                    comp.lines[i] = "  ROOT " + comp.lines[i][2:]
                    return
            raise UnsupportedError(f"export_hlo: cannot find the root %{root}")
        name = self._unique("tuple")
        operands = ", ".join(f"%{comp.names[v]}" for v in results)
        comp.lines.append(f"  ROOT %{name} = {_shape(TupleType([v.type for v in results]))} tuple({operands})")

    def _packing_tuples(self, ops: list[Operation]) -> set[Operation]:
        """``hlo.tuple`` ops that only pack every result of the op just before (printed as that op)."""
        skipped = set()
        for op in ops:
            if isinstance(op, control_flow.TupleOp) and op.operands:
                first = op.operands[0]
                owner = getattr(first, "op", None)
                if (owner is not None and len(owner.results) == len(op.operands) and len(owner.results) != 1
                        and all(a is b for a, b in zip(op.operands, owner.results)) and owner.parent is op.parent):
                    self.packer[owner] = op
                    skipped.add(op)
        return skipped

    def _tuple_line(self, values: list[SSAValue], op: Operation) -> str:
        comp = self.comp
        n = self._unique("tuple")
        types = [v.type for v in values]
        comp.lines.append(f"  %{n} = {_shape(TupleType(types))} tuple("
                          + ", ".join(f"%{comp.names[v]}" for v in values) + ")")
        return n

    def _instruction(self, op: Operation, skipped: set[Operation]) -> None:
        comp = self.comp
        if type(op) in NO_HLO_FORM:
            raise UnsupportedError(f"export_hlo: {op.name} has no HLO form: {NO_HLO_FORM[type(op)]}")
        if isinstance(op, control_flow.WhileOp) and len(op.operands) != 1:
            return self._while_over_tuple(op)
        if self.for_xla and isinstance(op, data_movement.BitcastOp):
            return self._bitcast_as_moves(op)
        if isinstance(op, constants.ConstantOp):
            opcode, operands, attrs = "constant", [], []
            literal = write_constant_literal(op)
        else:
            writer = WRITERS.get(type(op)) or (write_opaque if op.name.startswith(OPAQUE_PREFIX) else None)
            if writer is None:
                raise UnsupportedError(f"export_hlo: {op.name} has no HLO text form")
            if self.for_xla and isinstance(op, control_flow.FusionOp):
                writer = WRITERS[control_flow.CallOp]
            try:
                opcode, operands, attrs = writer(self, op)
            except XlaError:
                raise
            except (KeyError, ValueError, TypeError, AttributeError, IndexError) as e:
                raise UnsupportedError(f"export_hlo: cannot print {op.name}: {type(e).__name__}: {e}") from None
            literal = None
        results = list(op.results)
        types = custom_call_result_types(op) if isinstance(op, effects.CustomCallOp) else [r.type for r in results]
        shape = _shape_of(types[0] if len(types) == 1 else TupleType(types), op.attributes)
        packer = self.packer.get(op)
        name_attr = op.attributes.get("hlo.name")
        if name_attr is None and packer is not None:
            name_attr = packer.attributes.get("hlo.name")
        name = self._unique(name_attr.data if isinstance(name_attr, StringAttr) else opcode)
        if literal is not None:
            args = literal
        else:
            args = ", ".join(o if isinstance(o, str) else f"%{self._operand(o, op)}" for o in operands)
        text = f"  %{name} = {shape} {opcode}({args})"
        for key, value in attrs:
            text += f", {key}={value}"
        text += self._kept(op)
        comp.lines.append(text)
        if len(results) == 1:
            comp.names[results[0]] = name
            return
        if packer is not None:
            comp.names[packer.results[0]] = name
        for i, r in enumerate(results):
            if any(u.operation is not packer for u in r.uses):
                n = self._unique(f"{name}.{i}")
                comp.lines.append(f"  %{n} = {_shape(r.type)} get-tuple-element(%{name}), index={i}")
                comp.names[r] = n

    def _operand(self, value: SSAValue, op: Operation) -> str:
        try:
            return self.comp.names[value]
        except KeyError:
            raise UnsupportedError(f"export_hlo: {op.name} uses a value defined outside its computation "
                                   f"(regions here must not capture values; HLO computations cannot)") from None

    def _kept(self, op: Operation) -> str:
        kept = op.attributes.get("hlo.attributes")
        if self.for_xla and isinstance(kept, DictionaryAttr):
            kept = DictionaryAttr({k: v for k, v in kept.data.items() if k != "backend_config"})
        if not isinstance(kept, DictionaryAttr):
            loc = op.attributes.get("loc")
            if isinstance(loc, StringAttr) and ":" in loc.data:
                file, _, line = loc.data.rpartition(":")
                if line.isdigit():
                    return f", metadata={{source_file={A.quote(file)} source_line={line}}}"
            return ""
        out = ""
        for key, value in kept.data.items():
            text = value.data
            if key == "control-predecessors":
                names = [n.strip().lstrip("%") for n in text.strip("{} ").split(",") if n.strip()]
                known = set(self.comp.names.values())
                if not all(n in known for n in names):
                    continue
            out += f", {key}={text}"
        return out

    def _bitcast_as_moves(self, op: Operation) -> None:
        """A bitcast between untiled layouts as the moves it stands for: into the operand's memory
        order, reshape to the result's memory-order dimensions, back to the result's logical order."""
        from xla_dialect.layout import Layout, LayoutAttr, layout_of

        comp = self.comp
        src, dst = op.operand.type, op.result.type
        ls, ld = layout_of(src) or Layout.default(src.get_num_dims()), layout_of(dst) or \
            Layout.default(dst.get_num_dims())
        from xdsl.dialects.builtin import TensorType

        from xla_dialect.types import element_type_of

        same_width = element_type_of(src.element_type).bits == element_type_of(dst.element_type).bits
        if ls.tiles or ld.tiles or not same_width:
            raise UnsupportedError(f"export_hlo: {op.name} between tiled layouts or element types of other widths "
                                   f"({_shape(src)} -> {_shape(dst)}) has no equivalent XLA compiles from text")
        operand = self._operand(op.operand, op)
        if src.element_type != dst.element_type:  # the same bits read as the other type, then moved
            converted = TensorType(dst.element_type, src.get_shape(), src.encoding)
            c = self._unique("bitcast.convert")
            comp.lines.append(f"  %{c} = {_shape(converted)} bitcast-convert(%{operand})")
            operand, src = c, converted

        def plain(element, dims):
            return TensorType(element, list(dims), LayoutAttr(Layout.default(len(dims))))

        src_order = list(reversed(ls.minor_to_major))  # major to minor
        dst_order = list(reversed(ld.minor_to_major))
        src_dims, dst_dims = src.get_shape(), dst.get_shape()
        physical_src = [src_dims[d] for d in src_order]
        physical_dst = [dst_dims[d] for d in dst_order]
        a = self._unique("bitcast.in_memory_order")
        comp.lines.append(f"  %{a} = {_shape(plain(src.element_type, physical_src))} transpose("
                          f"%{operand}), dimensions={A.format_ints(src_order)}")
        b = self._unique("bitcast.reshape")
        comp.lines.append(f"  %{b} = {_shape(plain(dst.element_type, physical_dst))} reshape(%{a})")
        inverse = [dst_order.index(d) for d in range(len(dst_order))]
        name_attr = op.attributes.get("hlo.name")
        name = self._unique(name_attr.data if isinstance(name_attr, StringAttr) else "bitcast")
        comp.lines.append(f"  %{name} = {_shape(dst)} transpose(%{b}), dimensions={A.format_ints(inverse)}")
        comp.names[op.result] = name

    def _while_over_tuple(self, op: Operation) -> None:
        comp = self.comp
        state = TupleType([v.type for v in op.operands])
        init = self._tuple_line(list(op.operands), op)
        cond = self.computation(op.cond, "while_condition", pack_params=True)
        body = self.computation(op.body, "while_body", pack_params=True)
        name_attr = op.attributes.get("hlo.name")
        name = self._unique(name_attr.data if isinstance(name_attr, StringAttr) else "while")
        comp.lines.append(f"  %{name} = {_shape(state)} while(%{init}), condition={cond}, body={body}"
                          + self._kept(op))
        for i, r in enumerate(op.results):
            n = self._unique(f"{name}.{i}")
            comp.lines.append(f"  %{n} = {_shape(r.type)} get-tuple-element(%{name}), index={i}")
            comp.names[r] = n


_DEFINED = re.compile(r"^  (?:ROOT )?%([^ ]+) = ")


def _structure_key(lines: list[str]) -> str:
    """The computation's text with its own instruction names numbered by first definition
    (two copies of one region print alike whatever names they were given)."""
    defined = {}
    for line in lines:
        m = _DEFINED.match(line)
        if m:
            defined[m.group(1)] = f"v{len(defined)}"
    text = "\n".join(lines)
    return re.sub(r"%([\w.\-]+)", lambda m: "%" + defined.get(m.group(1), m.group(1)), text)


def export_hlo(module: ModuleOp, for_xla: bool = False) -> str:
    """Print an hlo module as XLA HLO module text with its layouts (see the module docstring).

    XLA's parser (``jaxlib``'s ``hlo_module_from_text``) reads the result; :func:`interop.import_hlo`
    reads it back. ``for_xla=True`` prints what jaxlib can compile from text (whose route through
    StableHLO drops layouts): fusions as calls of their computations, bitcasts as the transpose /
    reshape / transpose they stand for (untiled layouts only).
    """
    if not isinstance(module, ModuleOp):
        raise XlaError(f"export_hlo expects an xDSL ModuleOp, got {type(module).__name__}")
    import passes
    from passes.broadcasts import ExplicitBinaryBroadcastsPass, needs_explicit_binary_broadcasts

    if needs_explicit_binary_broadcasts(module):  # (the builder's implicit broadcasting: on a copy)
        module = module.clone()
        passes.run(module, ExplicitBinaryBroadcastsPass(), verify=False)
    return HloExporter(module, for_xla).export()
