"""``xla-show memory PROGRAM [--target cpu|tpu]``: what a program's values take in memory on a target.

The program is laid out by the ``assign-layouts{target=...}`` pass (on a copy; the caller's module is not
changed). For every array value: its logical bytes (elements times element size), its physical bytes with
the target's tile padding (:func:`xla_dialect.layout.byte_size`) and the expansion factor between them; the
copies layout assignment inserts; and the peak of live bytes in program order, counted as the executor's
(:func:`lowering.executor.memory.block_peak`): a value is live from the op that defines it to its last use,
function arguments throughout, an op's largest region and called functions add their own peak while the op
runs (region arguments alias the op's operands and are not counted again).
This is a model of buffer sizes, not of XLA's buffer assignment (which also reuses and aliases buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, TupleType
from xdsl.ir import Attribute

from xla_dialect.errors import XlaError
from xla_dialect.layout import byte_size
from xla_dialect.shape import format_shape
from xla_dialect.types import element_type_of


@dataclass
class ValueMemory:
    """One value: where it comes from, its shape with the target's layout, and its sizes."""

    name: str
    """``%N`` as the laid-out program prints it."""
    op: str
    """The defining op's name (``argument`` for function and region arguments)."""
    function: str
    shape: str
    logical_bytes: int
    physical_bytes: int
    location: str = ""

    @property
    def expansion(self) -> float:
        """physical / logical bytes (1.0 for an empty value)."""
        return self.physical_bytes / self.logical_bytes if self.logical_bytes else 1.0


@dataclass
class MemoryReport:
    """What :func:`memory_report` found (sizes in bytes)."""

    target: str
    entry: str
    values: list[ValueMemory] = field(default_factory=list)
    copies: list = field(default_factory=list)
    """The :class:`passes.layouts.CopyRecord` of every copy layout assignment inserted."""
    peak_bytes: int = 0
    """Peak live physical bytes of the entry function in program order."""
    peak_logical_bytes: int = 0
    """The same peak counted with logical sizes (no tile padding)."""
    peak_at: str = ""
    """The op at which the physical peak is reached."""

    @property
    def logical_bytes(self) -> int:
        """Sum of the logical bytes of every value."""
        return sum(v.logical_bytes for v in self.values)

    @property
    def physical_bytes(self) -> int:
        """Sum of the physical bytes of every value."""
        return sum(v.physical_bytes for v in self.values)

    def largest(self) -> list[ValueMemory]:
        """The values, largest physical size first."""
        return sorted(self.values, key=lambda v: (-v.physical_bytes, -v.logical_bytes))

    def text(self, top: int | None = 30) -> str:
        """The report as text: totals, peak, copies, then the ``top`` largest values (all when None)."""
        exp = self.physical_bytes / self.logical_bytes if self.logical_bytes else 1.0
        lines = [
            f"target {self.target}, entry @{self.entry}: {len(self.values)} values, "
            f"{_b(self.logical_bytes)} logical, {_b(self.physical_bytes)} physical (x{exp:.3g} with tile padding)",
            f"peak live: {_b(self.peak_bytes)} physical ({_b(self.peak_logical_bytes)} logical), at {self.peak_at}",
            f"copies inserted by layout assignment: {len(self.copies)}"
            + (f" ({_b(sum(c.bytes for c in self.copies))})" if self.copies else ""),
        ]
        for c in self.copies:
            lines.append(f"  copy {c.value}: {c.from_shape} -> {c.to_shape} ({_b(c.bytes)}) for {c.user}")
        lines.append("")
        lines.append(f"{'physical':>12} {'logical':>12} {'x':>7}  value")
        ranked = self.largest()
        shown = ranked if top is None else ranked[:top]
        for v in shown:
            where = f"  [{v.location}]" if v.location else ""
            lines.append(f"{v.physical_bytes:>12,} {v.logical_bytes:>12,} {v.expansion:>7.3g}  "
                         f"@{v.function} {v.name} ({v.op}) {v.shape}{where}")
        if len(shown) < len(ranked):
            lines.append(f"  ... {len(ranked) - len(shown)} more values (--top 0 shows all)")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """The report as plain data (JSON)."""
        return {
            "target": self.target, "entry": self.entry, "peak_bytes": self.peak_bytes,
            "peak_logical_bytes": self.peak_logical_bytes, "peak_at": self.peak_at,
            "logical_bytes": self.logical_bytes, "physical_bytes": self.physical_bytes,
            "copies": [{"value": c.value, "user": c.user, "from": c.from_shape, "to": c.to_shape, "bytes": c.bytes}
                       for c in self.copies],
            "values": [{"name": v.name, "op": v.op, "function": v.function, "shape": v.shape,
                        "logical_bytes": v.logical_bytes, "physical_bytes": v.physical_bytes,
                        "expansion": v.expansion, "location": v.location} for v in self.largest()],
        }


def _b(n: int) -> str:
    return f"{n:,} B"


def logical_bytes(type_: Attribute) -> int:
    """Elements times element size (XLA's ``ByteSizeOf`` without layout), tuples summed, tokens 0."""
    if isinstance(type_, TupleType):
        return sum(logical_bytes(t) for t in type_.types)
    if not isinstance(type_, TensorType) or any(d < 0 for d in type_.get_shape()):
        return 0
    n = 1
    for d in type_.get_shape():
        n *= d
    try:
        bits = element_type_of(type_.element_type).bits
    except Exception:
        return byte_size(type_) if not type_.get_shape() else n * 4
    return n * -(-bits // 8)


def physical_bytes(type_: Attribute) -> int:
    """Bytes with the type's layout and tile padding (:func:`xla_dialect.layout.byte_size`), tuples summed."""
    if isinstance(type_, TupleType):
        return sum(physical_bytes(t) for t in type_.types)
    if not isinstance(type_, TensorType) or any(d < 0 for d in type_.get_shape()):
        return 0
    try:
        return byte_size(type_)
    except XlaError:
        return logical_bytes(type_)


def memory_report(module: ModuleOp, target: str = "cpu", entry: str | None = None) -> MemoryReport:
    """Lay out a copy of ``module`` for ``target`` (``cpu`` or ``tpu``) and report its values' sizes, the copies
    inserted and the peak of live bytes (see the module docstring)."""
    import passes
    from passes.layouts import TARGETS, _value_table

    if target not in TARGETS:
        raise XlaError(f"memory: unknown target {target!r} (one of {', '.join(TARGETS)})")
    laid = module.clone()
    layout_report = passes.assign_layouts(laid, target)
    functions = {f.sym_name.data: f for f in laid.ops if isinstance(f, func.FuncOp)}
    if not functions:
        raise XlaError("memory: the program has no function")
    if entry is None:
        entry = "main" if "main" in functions else next(iter(functions))
    elif entry not in functions:
        raise XlaError(f"memory: no function @{entry} (functions: {', '.join(functions)})")
    names = _value_table(laid)
    report = MemoryReport(target, entry, copies=list(layout_report.copies))
    for fn in functions.values():
        fname = fn.sym_name.data
        for op in fn.walk():
            # Function arguments and op results (region arguments alias their op's operands).
            if op is fn:
                values = [(a, "argument") for a in fn.body.block.args]
            else:
                values = [(r, op.name) for r in op.results]
            for value, kind in values:
                if not isinstance(value.type, (TensorType, TupleType)):
                    continue
                label = names.get(value, "%?").split(" ", 1)[0]
                loc = op.attributes.get("loc") if op is not fn else None
                report.values.append(ValueMemory(
                    label, kind, fname, _shape(value.type), logical_bytes(value.type), physical_bytes(value.type),
                    getattr(loc, "data", "") if loc is not None else ""))
    report.peak_bytes, report.peak_at = _peak(functions, names, entry, physical_bytes)
    report.peak_logical_bytes, _ = _peak(functions, names, entry, logical_bytes)
    return report


def _shape(type_) -> str:
    try:
        return format_shape(type_)
    except XlaError:
        return str(type_)


def _peak(functions: dict, names: dict, entry: str, size) -> tuple[int, str]:
    """(peak bytes, where reached) of function ``entry``: the executor's liveness
    (:func:`lowering.executor.memory.block_peak`) counted with ``size``."""
    from lowering.executor.memory import block_peak

    peak, op = block_peak(functions[entry].body.block, size, functions)
    if op is None:
        return peak, f"@{entry} entry"
    label = names.get(op.results[0], "").split(" ", 1)[0] if op.results else ""
    return peak, f"@{entry} {label + ' = ' if label else ''}{op.name}"
