"""``assign-layouts{target=cpu|tpu}``: give every array value an XLA layout, inserting copies where needed.

**Targets** (:data:`TARGETS`):

* ``cpu`` — XLA's CPU backend: every array is row-major (descending
  ``minor_to_major``), untiled; operands are constrained row-major
  (``CpuLayoutAssignment``), so a copy appears only where an entry layout
  demands something else.
* ``tpu`` — the tiling rules of XLA's shapes, layout and tiling notes, table
  :func:`tpu_tiles`: ``T(8,128)`` for 32-bit (and wider) types, ``T(2,128)`` when
  the second-most-minor dimension is 1 or 2 and ``T(4,128)`` when it is 3 or 4;
  ``T(8,128)(2,1)`` for 16-bit, ``T(8,128)(4,1)`` for 8-bit,
  ``T(32,128)(32,1)`` for pred, ``T(8,128)(32/n,1)E(n)`` for n-bit types (n < 8).
  Rank-1 arrays and scalars use the same tiles over a row-major view with rows
  of 128 (``T(1024)``, ``T(256)`` up to 256 elements of 32 bits,
  ``T(1024)(128)(2,1)`` for 16-bit, ...). Free choices are row-major with
  size-1 dimensions most major (``bf16[8,1,1280,16384]{3,2,0,1:...}`` of XLA's shapes, layout and tiling notes).

**Constraints.** Entry parameters and results keep the layouts they are given
(in the function type — the builder's, an importer's ``mhlo.layout_mode`` — or
the ``arg-layouts``/``result-layouts`` options, ``;``-separated, ``auto`` for
free). On tpu an untiled entry layout fixes ``minor_to_major``; the tiling is
the target's.

**Propagation** (per op class, table :data:`LAYOUT_RULES`), aiming for the
fewest copies: element-wise ops, slice, pad, concatenate and reverse keep
their operands' layout (the most common one among same-rank operands; the others are
copied); on tpu, transposes and reshapes become bitcasts (the result layout
is the operand's memory order) where possible; reductions keep the operand's
order of the kept dimensions. Preferences flow backwards to values whose
layout is free: reduce operands want the reduced dimensions most minor, dot
operands the contracting dimensions most minor (lhs) or the free ones (rhs),
results their entry layout. Where constraints conflict an explicit
``hlo.copy`` with the required layout is inserted.

The pass emits a :class:`LayoutReport`: copies inserted, bytes of every value
(tile padding included, via ``xla_dialect.layout.byte_size``), totals before
and after.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, FunctionType, IntegerAttr, ModuleOp, StringAttr, TensorType, TupleType
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint

from xla_dialect.errors import LayoutError, PassError, op_context
from xla_dialect.layout import Layout, LayoutAttr, byte_size, layout_of, parse_layout
from xla_dialect.ops import control_flow as cf
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import linalg, reduction
from xla_dialect.ops.base import HloOp, ints
from xla_dialect.shape import format_shape
from xla_dialect.types import element_type_of

from .base import PatternPass, emit_report
from .registry import register_pass
from .util import IdMemo, insert_new_ops, retype, share_types, tensor_type

M2M = tuple[int, ...]

# ----------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------


def descending(rank: int) -> M2M:
    """Row-major ``minor_to_major``."""
    return tuple(range(rank - 1, -1, -1))


def degenerate_major(shape: Sequence[int]) -> M2M:
    """Row-major order with size-1 dimensions moved most major (they then cost no tile padding)."""
    rank = len(shape)
    return (tuple(d for d in range(rank - 1, -1, -1) if shape[d] != 1)
            + tuple(d for d in range(rank - 1, -1, -1) if shape[d] == 1))


def tpu_tiles(element_type: Attribute, minor_dims: Sequence[int]) -> tuple[tuple[tuple[int, ...], ...], int]:
    """(tiles, E(n) bits or 0) of a TPU array given its physical dimensions (most major first).

    The rules of XLA's shapes, layout and tiling notes: 32-bit and wider ``(8,128)``,
    compact ``(2,128)``/``(4,128)`` for a second-most-minor dimension of 1-2/3-4;
    16-bit ``(8,128)(2,1)``; 8-bit ``(8,128)(4,1)``; pred ``(32,128)(32,1)``;
    n-bit (n < 8) ``(8,128)(32/n,1)`` with ``E(n)``. Rank <= 1 uses the same
    tile over rows of 128 elements: ``(rows*128)`` then ``(128)(sub-tile)``.
    """
    element = element_type_of(element_type)
    bits = element.bits
    if element.kind == "pred":
        rows, sub, e = 32, (32, 1), 0
    elif bits < 8:
        rows, sub, e = 8, (32 // bits, 1), bits
    elif bits < 32:
        rows, sub, e = 8, (32 // bits, 1), 0
    else:
        rows, sub, e = 8, None, 0
    if len(minor_dims) >= 2:
        if sub is None:
            second = minor_dims[-2]
            rows = 2 if second <= 2 else 4 if second <= 4 else 8
        tiles = ((rows, 128),) + ((sub,) if sub else ())
        return tiles, e
    count = minor_dims[0] if minor_dims else 1
    if sub is None:
        return (((256 if count <= 256 else rows * 128),),), e
    return ((rows * 128,), (128,), sub), e


@dataclass(frozen=True)
class Target:
    """How a backend lays out arrays: default order and tiling."""

    name: str
    tiled: bool

    def default_m2m(self, shape: Sequence[int]) -> M2M:
        """The layout order the target picks when nothing constrains a value."""
        return degenerate_major(shape) if self.tiled else descending(len(shape))

    def layout(self, type_: TensorType, m2m: M2M, like: Layout | None = None) -> Layout:
        """The full layout (tiling included) of ``type_`` in order ``m2m``.

        ``like`` (an entry constraint) contributes its memory space; if it
        is tiled it is taken as is.
        """
        if like is not None and (like.tiles or not self.tiled):
            return like
        # Per type object, then per (order, constraint): no attribute hashing on the hot path.
        per_type = _LAYOUTS[self.name](type_)
        key = (tuple(m2m), like)
        layout = per_type.get(key)
        if layout is None:
            space = like.memory_space if like is not None else 0
            if not self.tiled:
                layout = Layout(tuple(m2m), memory_space=space)
            else:
                shape = type_.get_shape()
                tiles, e = tpu_tiles(type_.element_type, [shape[d] for d in reversed(m2m)])
                layout = Layout(tuple(m2m), tiles, element_size_in_bits=e, memory_space=space)
            per_type[key] = layout
        return layout

    def default_m2m_of(self, type_: TensorType) -> M2M:
        """:meth:`default_m2m` of ``type_``'s shape, memoized per type object."""
        return _DEFAULT_M2M[self.name](type_)


TARGETS = {"cpu": Target("cpu", tiled=False), "tpu": Target("tpu", tiled=True)}
"""``assign-layouts{target=...}`` choices."""

_LAYOUTS = {name: IdMemo(lambda t: {}) for name in TARGETS}
"""Per target, array type -> {(minor_to_major, constraint): layout} (layouts depend on element type and shape)."""

_DEFAULT_M2M = {name: IdMemo(lambda t, target=target: target.default_m2m(t.get_shape()))
                for name, target in TARGETS.items()}

_PADDED = {name: IdMemo(lambda t: {}) for name in TARGETS}
_WITH_LAYOUT = IdMemo(lambda t: {})
"""Per target, array type -> {minor_to_major: bytes in that order (tiles and padding included)}."""


# ----------------------------------------------------------------------------
# Layout rules per op class
# ----------------------------------------------------------------------------

LAYOUT_RULES: dict[type, str] = {
    ew.UnaryElementwiseOp: "elementwise",
    ew.BinaryElementwiseOp: "elementwise",
    ew.CompareOp: "elementwise",
    ew.SelectOp: "elementwise",
    ew.ClampOp: "elementwise",
    dm.SliceOp: "elementwise",
    dm.PadOp: "elementwise",
    dm.ConcatenateOp: "elementwise",
    dm.ReverseOp: "elementwise",
    dm.TransposeOp: "transpose",
    dm.ReshapeOp: "reshape",
    dm.BroadcastInDimOp: "free",
    dm.BroadcastOp: "free",
    dm.CopyOp: "copy",
    dm.BitcastOp: "bitcast",
    reduction.ReduceOp: "reduce",
    linalg.DotOp: "dot",
    linalg.DotGeneralOp: "dot",
    cf.TupleOp: "tuple",
    cf.GetTupleElementOp: "get_tuple_element",
    cf.WhileOp: "while",
    cf.CallOp: "call",
    cf.FusionOp: "call",
}
"""Op class -> how its result layout follows from its operands (see the module docstring).

Ops not listed (and not subclasses of a listed class) take the layout of an
operand of the result's shape if there is one, else the target's default;
they accept any operand layout.
"""

_STRUCTURAL_RULES = ("tuple", "get_tuple_element", "while", "call", "copy")
"""Rules that also apply on cpu (where every other op is constrained row-major)."""

_RULE_CACHE: dict[type, str] = {}


def rule_for(op: Operation) -> str:
    """The :data:`LAYOUT_RULES` entry of ``op``'s class (searching base classes)."""
    cls = type(op)
    rule = _RULE_CACHE.get(cls)
    if rule is None:
        rule = next((LAYOUT_RULES[c] for c in cls.__mro__ if c in LAYOUT_RULES), "generic")
        if issubclass(cls, (func.ReturnOp, cf.ReturnOp)):
            rule = "return"  # handled by the block walks, not by a rule
        _RULE_CACHE[cls] = rule
    return rule


def reshape_bitcast_m2m(in_shape: Sequence[int], in_m2m: M2M, out_shape: Sequence[int]) -> M2M | None:
    """A result order making a reshape a bitcast of an operand laid out in ``in_m2m`` (None if none).

    The non-degenerate dimensions are split into groups of equal element
    count (row-major reshape semantics); each operand group must be
    contiguous and in order in memory, and the result group takes its place.
    Size-1 result dimensions go most major. (XLA: ``ShapeUtil::AlignLayouts``.)
    """
    if 0 in in_shape or 0 in out_shape:
        return None
    a = [d for d in range(len(in_shape)) if in_shape[d] != 1]
    b = [d for d in range(len(out_shape)) if out_shape[d] != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [a[i]], [b[j]]
        pa, pb = in_shape[a[i]], out_shape[b[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                if i == len(a):
                    return None
                ga.append(a[i])
                pa *= in_shape[a[i]]
                i += 1
            else:
                if j == len(b):
                    return None
                gb.append(b[j])
                pb *= out_shape[b[j]]
                j += 1
        groups.append((ga, gb))
    if i != len(a) or j != len(b):
        return None
    physical = [d for d in in_m2m if in_shape[d] != 1]
    pos = {d: k for k, d in enumerate(physical)}
    placed = []
    for ga, gb in groups:
        where = [pos[d] for d in reversed(ga)]
        if where != list(range(where[0], where[0] + len(where))):
            return None
        placed.append((where[0], gb))
    m2m: list[int] = []
    for _, gb in sorted(placed):
        m2m.extend(reversed(gb))
    m2m.extend(d for d in range(len(out_shape) - 1, -1, -1) if out_shape[d] == 1)
    return tuple(m2m)


def _tiled_bitcast(target: Target, a: TensorType, la: Layout, b: TensorType, lb: Layout) -> bool:
    """Whether two layouts with the same untiled element order also tile the same way.

    With equal tiles and equal most-minor dimensions, rows (everything but the
    most minor dimension, in the same row-major sequence on both sides) fall
    into the same tiles when the second-most-minor sizes are equal or both
    multiples of the tile's row count.
    """
    if not target.tiled or (not la.tiles and not lb.tiles):
        return True
    if la.tiles != lb.tiles or len(la.tiles[0]) != 2:
        return False
    pa = [a.get_shape()[d] for d in reversed(la.minor_to_major)]
    pb = [b.get_shape()[d] for d in reversed(lb.minor_to_major)]
    if len(pa) < 2 or len(pb) < 2 or pa[-1] != pb[-1]:
        return False
    rows = la.tiles[0][0]
    return pa[-2] == pb[-2] or (pa[-2] % rows == 0 and pb[-2] % rows == 0)


# ----------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------


@dataclass
class CopyRecord:
    """One ``hlo.copy`` inserted by the pass."""

    value: str
    """The value copied (``%N`` as printed, and its defining op)."""
    user: str
    """The op (or function result) that needed the other layout."""
    from_shape: str
    to_shape: str
    bytes: int


@dataclass
class LayoutReport:
    """What ``assign-layouts`` did: copies, bytes per value, totals (tile padding included)."""

    target: str
    copies: list[CopyRecord] = field(default_factory=list)
    values: list[tuple[str, str, int]] = field(default_factory=list)
    """(value name and defining op, shape with layout, bytes) for every array value after the pass."""
    total_bytes_before: int = 0
    """Sum of the bytes of every value before the pass (existing layouts; untiled row-major if none)."""
    total_bytes_after: int = 0
    """Sum of the bytes of every value after the pass, copies included."""

    @property
    def copy_bytes(self) -> int:
        """Bytes of the buffers the inserted copies produce."""
        return sum(c.bytes for c in self.copies)

    def summary(self) -> str:
        """One line: copies and totals."""
        return (f"assign-layouts{{target={self.target}}}: {len(self.copies)} copies inserted "
                f"({self.copy_bytes} bytes); {len(self.values)} values, {self.total_bytes_before} bytes before, "
                f"{self.total_bytes_after} bytes after (tile padding included)")

    def __str__(self) -> str:
        lines = [self.summary()]
        for c in self.copies:
            lines.append(f"  copy {c.value}: {c.from_shape} -> {c.to_shape} ({c.bytes} bytes) for {c.user}")
        shown = self.values if len(self.values) <= 200 else self.values[:200]
        for name, shape, nbytes in shown:
            lines.append(f"  {name:32s} {shape:48s} {nbytes:>12d} bytes")
        if len(shown) < len(self.values):
            lines.append(f"  ... {len(self.values) - len(shown)} more values")
        return "\n".join(lines)


def _compute_bytes(type_: Attribute) -> int:
    if isinstance(type_, TensorType):
        return 0 if any(d < 0 for d in type_.get_shape()) else byte_size(type_)
    if isinstance(type_, TupleType):
        return sum(_bytes(t) for t in type_.types)
    return 0


_bytes = IdMemo(_compute_bytes)
"""Bytes of a value of a type (tuples: their elements; tokens: 0), memoized per type object
(programs share a few type objects among many values)."""

_shape_text = IdMemo(format_shape)
"""``format_shape``, memoized per type object."""


def _values_in_print_order(module: ModuleOp) -> list[tuple[SSAValue, Operation | None]]:
    """Every SSA value in the order xDSL's printer numbers them, with its defining op."""
    out: list[tuple[SSAValue, Operation | None]] = []
    append = out.append

    def op_values(op: Operation) -> None:
        for r in op.results:
            append((r, op))
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    append((arg, None))
                for inner in block.ops:
                    op_values(inner)

    for op in module.ops:
        op_values(op)
    return out


def _labels(values: list[tuple[SSAValue, Operation | None]]) -> Iterator[str]:
    """``%name (defining op)`` of each value as xDSL prints it (name hints, else a counter of unnamed values)."""
    counter = 0
    for value, op in values:
        if value.name_hint:
            label = f"%{value.name_hint}"
        else:
            label = f"%{counter}"
            counter += 1
        yield f"{label} ({op.name})" if op is not None else f"{label} (argument)"


def _value_table(module: ModuleOp) -> dict[SSAValue, str]:
    """Value -> ``%name (defining op)`` as xDSL prints it."""
    values = _values_in_print_order(module)
    return {value: label for (value, _), label in zip(values, _labels(values))}


class _LazyNames:
    """The :func:`_value_table` of the values listed at construction, built on first use
    (only inserted copies need names before the pass; most runs insert none)."""

    def __init__(self, values: list[tuple[SSAValue, Operation | None]]):
        self._values = values
        self._table: dict[SSAValue, str] | None = None

    def table(self) -> dict[SSAValue, str]:
        """The whole table."""
        if self._table is None:
            self._table = {value: label for (value, _), label in zip(self._values, _labels(self._values))}
        return self._table

    def get(self, value: SSAValue, default: str) -> str:
        """The name of ``value`` (``default`` when it was not listed)."""
        return self.table().get(value, default)


# ----------------------------------------------------------------------------
# The assignment
# ----------------------------------------------------------------------------

Spec = Any  # Layout for arrays, tuple of Specs for tuples, None for anything else


def _parse_layout_list(text: str | None, what: str) -> list[Layout | None] | None:
    if text is None:
        return None
    out: list[Layout | None] = []
    for part in text.split(";"):
        part = part.strip()
        if part in ("", "auto"):
            out.append(None)
            continue
        try:
            out.append(parse_layout(part))
        except LayoutError as e:
            raise PassError(f"pass assign-layouts: option {what}: {e}") from None
    return out


def _with_spec(type_: Attribute, spec: Spec) -> Attribute:
    """``type_`` carrying the layout(s) ``spec``."""
    if isinstance(spec, Layout) and isinstance(type_, TensorType):
        per_type = _WITH_LAYOUT(type_)  # {id(layout): (layout, type)}: layouts are shared objects
        found = per_type.get(id(spec))
        if found is None:
            found = per_type[id(spec)] = (spec, tensor_type(type_.element_type, type_.get_shape(), spec))
        return found[1]
    if isinstance(type_, TupleType) and isinstance(spec, tuple):
        return TupleType([_with_spec(t, s) for t, s in zip(type_.types, spec)])
    return type_


def _spec_of(type_: Attribute) -> Spec:
    if isinstance(type_, TensorType):
        return layout_of(type_)
    if isinstance(type_, TupleType):
        return tuple(_spec_of(t) for t in type_.types)
    return None


class LayoutAssigner:
    """Runs the analysis and materializes it (see the module docstring)."""

    def __init__(self, target: Target, arg_layouts: list | None, result_layouts: list | None):
        self.target = target
        self.arg_layouts = arg_layouts
        self.result_layouts = result_layouts
        self.chosen: dict[SSAValue, Spec] = {}
        self.pref: dict[SSAValue, M2M] = {}
        self.hard: set[SSAValue] = set()  # values whose preference avoids a copy (entry results)
        self.requests: list[tuple[Operation, int, Spec, str]] = []  # (user, operand index, layout, why)
        self.functions: dict[str, func.FuncOp] = {}
        self._methods: dict[type, Any] = {}  # op class -> bound _rule_* method

    # -- helpers --------------------------------------------------------------

    def free(self, value: SSAValue) -> Spec:
        """The layout of a value nothing constrains: its preference, else the target default."""
        return self.free_type(value.type, self.pref.get(value))

    def free_type(self, type_: Attribute, m2m: M2M | None = None) -> Spec:
        if isinstance(type_, TensorType):
            if m2m is None or len(m2m) != type_.get_num_dims():
                m2m = self.target.default_m2m_of(type_)
            return self.target.layout(type_, m2m)
        if isinstance(type_, TupleType):
            return tuple(self.free_type(t) for t in type_.types)
        return None

    def layout_in(self, type_: Attribute, m2m: M2M) -> Layout:
        return self.target.layout(type_, m2m)

    def m2m(self, value: SSAValue) -> M2M | None:
        spec = self.chosen.get(value)
        return spec.minor_to_major if isinstance(spec, Layout) else None

    def prefer(self, value: SSAValue, m2m: M2M | None, hard: bool = False) -> None:
        """Record a wish for ``value``'s order; ``hard`` wishes (entry results) beat soft ones.

        A soft wish (a reduction's or a dot's) is dropped when it would cost
        more memory than the target's default order (tile padding).
        """
        if m2m is None or not isinstance(value.type, TensorType) or len(m2m) != value.type.get_num_dims():
            return
        if value in self.pref and not (hard and value not in self.hard):
            return  # an equal or stronger wish is already recorded
        if not hard and self.target.tiled and self._padded_bytes(value.type, m2m) > self._padded_bytes(
                value.type, self.target.default_m2m_of(value.type)):
            return
        if value not in self.pref or (hard and value not in self.hard):
            self.pref[value] = tuple(m2m)
            if hard:
                self.hard.add(value)

    def _padded_bytes(self, type_: TensorType, m2m: M2M) -> int:
        per_type = _PADDED[self.target.name](type_)
        m2m = tuple(m2m)
        found = per_type.get(m2m)
        if found is None:
            layout = self.target.layout(type_, m2m)
            found = per_type[m2m] = _bytes(tensor_type(type_.element_type, type_.get_shape(), layout))
        return found

    def require(self, user: Operation, index: int, spec: Spec, why: str) -> None:
        """Operand ``index`` of ``user`` must have layout ``spec``: request a copy if it differs."""
        value = user.operands[index]
        if spec is not None and self.chosen.get(value) != spec:
            self.requests.append((user, index, spec, why))

    # -- entry constraints -----------------------------------------------------

    def entry_constraints(self, fn: func.FuncOp, entry: bool) -> tuple[list, list]:
        inputs, outputs = list(fn.function_type.inputs), list(fn.function_type.outputs)
        if not entry:
            return [None] * len(inputs), [None] * len(outputs)
        args = [_spec_of(t) for t in inputs]
        results = [_spec_of(t) for t in outputs]
        for attrs, specs, types in ((fn.arg_attrs, args, inputs), (fn.res_attrs, results, outputs)):
            if attrs is None:
                continue
            for i, d in enumerate(attrs.data):
                mode = d.data.get("mhlo.layout_mode") if isinstance(d, DictionaryAttr) else None
                if isinstance(mode, StringAttr) and i < len(specs) and isinstance(types[i], TensorType):
                    if mode.data == "auto":
                        specs[i] = None
                    elif mode.data == "default":
                        specs[i] = Layout(descending(types[i].get_num_dims()))
        if fn.sym_name.data == "main" or self.arg_layouts is not None:
            for given, specs, types in ((self.arg_layouts, args, inputs), (self.result_layouts, results, outputs)):
                if given is None:
                    continue
                if len(given) != len(types):
                    raise PassError(f"pass assign-layouts: {len(given)} layouts given for the {len(types)} "
                                    f"{'parameters' if specs is args else 'results'} of @{fn.sym_name.data}")
                for i, layout in enumerate(given):
                    if layout is not None and isinstance(types[i], TensorType):
                        layout.check_rank(types[i].get_num_dims(), format_shape(types[i]))
                    specs[i] = layout
        finish = lambda t, s: (self.target.layout(t, s.minor_to_major, s) if isinstance(s, Layout)  # noqa: E731
                               and isinstance(t, TensorType) else s)
        return [finish(t, s) for t, s in zip(inputs, args)], [finish(t, s) for t, s in zip(outputs, results)]

    # -- analysis ---------------------------------------------------------------

    def preferences(self, block: Block, result_specs: Sequence[Spec] | None) -> None:
        """Backward: what consumers would like their operands to be (free values honour it)."""
        tiled = self.target.tiled
        pref = self.pref
        previous = block.last_op
        while previous is not None:  # last to first (the analysis does not change the block)
            op, previous = previous, previous.prev_op
            rule = rule_for(op)
            if rule == "return":
                if isinstance(op, func.ReturnOp) and result_specs is not None:
                    for v, spec in zip(op.operands, result_specs):
                        if isinstance(spec, Layout):
                            self.prefer(v, spec.minor_to_major, hard=True)
                continue
            if not tiled:
                continue  # XLA CPU wants every operand row-major: nothing to propagate
            if rule == "elementwise":
                for r in op.results:
                    if r in pref:
                        shape = r.type.get_shape()
                        for v in op.operands:
                            if isinstance(v.type, TensorType) and v.type.get_shape() == shape:
                                self.prefer(v, pref[r], r in self.hard)
                        break
            elif rule == "transpose":
                want = self.pref.get(op.result)
                if want is not None:
                    perm = ints(op.permutation)
                    self.prefer(op.operand, tuple(perm[d] for d in want), op.result in self.hard)
            elif rule == "reduce":
                dims = ints(op.dimensions)
                for v in op.inputs:
                    rank = v.type.get_num_dims()
                    kept = [d for d in range(rank) if d not in dims]
                    self.prefer(v, tuple(sorted(dims, reverse=True)) + tuple(reversed(kept)))
            elif rule == "dot":
                dn = op.dimension_numbers()
                lrank, rrank = op.lhs.type.get_num_dims(), op.rhs.type.get_num_dims()
                lfree, rfree = dn.free_dimensions(lrank, rrank)
                lhs_order = [*dn.lhs_batch_dimensions, *lfree, *dn.lhs_contracting_dimensions]
                rhs_order = [*dn.rhs_batch_dimensions, *dn.rhs_contracting_dimensions, *rfree]
                self.prefer(op.lhs, tuple(reversed(lhs_order)))
                self.prefer(op.rhs, tuple(reversed(rhs_order)))

    def assign_block(self, block: Block, arg_specs: Sequence[Spec] | None,
                     result_specs: Sequence[Spec] | None, return_why: str) -> None:
        """Forward: choose every value's layout in ``block`` (and nested regions)."""
        self.preferences(block, result_specs)
        for i, arg in enumerate(block.args):
            spec = arg_specs[i] if arg_specs is not None and i < len(arg_specs) else None
            self.chosen[arg] = spec if spec is not None else self.free(arg)
        for op in block.ops:
            if rule_for(op) == "return":
                if result_specs is not None:
                    for i, spec in enumerate(result_specs):
                        if i < len(op.operands):
                            self.require(op, i, spec, return_why)
                continue
            self.assign_op(op)

    def assign_op(self, op: Operation) -> None:
        """Choose the layouts of ``op``'s results by its class's rule."""
        cls = type(op)
        method = self._methods.get(cls)
        if method is None:
            rule = rule_for(op)
            if not self.target.tiled and rule not in _STRUCTURAL_RULES:
                rule = "cpu"
            method = self._methods[cls] = getattr(self, f"_rule_{rule}")
        method(op)

    def _rule_cpu(self, op: Operation) -> None:
        """XLA CPU: every operand row-major (``CpuLayoutAssignment``); results row-major unless
        an entry result wants them otherwise (the root may produce any layout)."""
        self._regions_free(op)
        for i, v in enumerate(op.operands):
            m = self.m2m(v)
            if m is not None and m != descending(len(m)):
                self.require(op, i, self.layout_in(v.type, descending(len(m))), op_context(op))
        self._set_free(op)

    def _set(self, value: SSAValue, spec: Spec) -> None:
        self.chosen[value] = spec

    def _set_free(self, op: Operation) -> None:
        for r in op.results:
            self._set(r, self.free(r))

    def _regions_free(self, op: Operation) -> None:
        """Nested scalar computations (reduce bodies, comparators...): target defaults inside."""
        for region in op.regions:
            for block in region.blocks:
                self.assign_block(block, None, None, op.name)

    def _rule_free(self, op: Operation) -> None:
        self._regions_free(op)
        self._set_free(op)

    def _rule_generic(self, op: Operation) -> None:
        self._regions_free(op)
        for r in op.results:
            if isinstance(r.type, TensorType) and r not in self.pref:
                same = next((v for v in op.operands if isinstance(v.type, TensorType)
                             and v.type.get_shape() == r.type.get_shape() and self.m2m(v) is not None), None)
                if same is not None:
                    self._set(r, self.layout_in(r.type, self.m2m(same)))
                    continue
            self._set(r, self.free(r))

    def _rule_copy(self, op: Operation) -> None:
        declared = layout_of(op.result.type)
        self._set(op.result, declared if declared is not None and self.target.tiled == bool(declared.tiles)
                  else self.free(op.result))

    def _rule_bitcast(self, op: Operation) -> None:
        """A bitcast means its operand's and result's physical layouts: both stay as they are
        (a copy to the operand's original layout is inserted if the producer's changed)."""
        spec = _spec_of(op.operand.type)
        if spec is not None:
            self.require(op, 0, spec, op_context(op))
        self._set(op.result, _spec_of(op.result.type))

    def _rule_elementwise(self, op: Operation) -> None:
        result = op.results[0]
        if not isinstance(result.type, TensorType):
            return self._rule_generic(op)
        rank = result.type.get_num_dims()
        operands = op.operands
        same_rank: list[tuple[int, M2M]] = []  # (operand index, its order) of the same-rank arrays
        counts: dict[M2M, int] = {}
        for i, v in enumerate(operands):
            if isinstance(v.type, TensorType) and v.type.get_num_dims() == rank:
                m = self.m2m(v)
                if m is not None:
                    same_rank.append((i, m))
                    counts[m] = counts.get(m, 0) + 1
        want = self.pref.get(result)
        if want is not None and (want in counts or not counts):
            m2m = want
        elif counts:
            best = max(counts.values())
            m2m = next(m for _, m in same_rank if counts[m] == best)
        else:
            m2m = self.target.default_m2m_of(result.type)
        self._set(result, self.layout_in(result.type, m2m))
        for i, m in same_rank:
            if m != m2m:
                self.require(op, i, self.layout_in(operands[i].type, m2m), op_context(op))

    def _rule_transpose(self, op: dm.TransposeOp) -> None:
        src = self.m2m(op.operand)
        if src is None or op.result in self.hard:
            # A wish that would otherwise cost a copy: transpose the data instead.
            return self._set(op.result, self.free(op.result))
        perm = ints(op.permutation)
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        self._set(op.result, self.layout_in(op.result.type, tuple(inverse[d] for d in src)))

    def _rule_reshape(self, op: dm.ReshapeOp) -> None:
        src = self.m2m(op.operand)
        if src is not None and op.result not in self.hard:
            m2m = reshape_bitcast_m2m(op.operand.type.get_shape(), src, op.result.type.get_shape())
            if m2m is not None:
                layout = self.layout_in(op.result.type, m2m)
                if _tiled_bitcast(self.target, op.operand.type, self.chosen[op.operand], op.result.type, layout):
                    return self._set(op.result, layout)
        self._set(op.result, self.free(op.result))

    def _rule_reduce(self, op: reduction.ReduceOp) -> None:
        self._regions_free(op)
        dims = ints(op.dimensions)
        for x, r in zip(op.inputs, op.results):
            src = self.m2m(x)
            if src is None or r in self.pref:
                self._set(r, self.free(r))
                continue
            renumber = {d: k for k, d in enumerate(d for d in range(len(src)) if d not in dims)}
            self._set(r, self.layout_in(r.type, tuple(renumber[d] for d in src if d not in dims)))

    def _rule_dot(self, op: Operation) -> None:
        self._set_free(op)

    def _rule_tuple(self, op: cf.TupleOp) -> None:
        self._set(op.result, tuple(self.chosen.get(v) for v in op.operands))

    def _rule_get_tuple_element(self, op: cf.GetTupleElementOp) -> None:
        spec = self.chosen.get(op.operand)
        index = op.index.value.data
        self._set(op.result, spec[index] if isinstance(spec, tuple) and spec[index] is not None else self.free(op.result))

    def _rule_while(self, op: cf.WhileOp) -> None:
        state = [self.chosen.get(v) for v in op.operands]
        state = [s if s is not None else self.free(v) for s, v in zip(state, op.operands)]
        self.assign_block(op.cond.block, state, None, op_context(op))
        self.assign_block(op.body.block, state, state, f"{op_context(op)} body result")
        for r, s in zip(op.results, state):
            self._set(r, s)

    def _rule_call(self, op: cf.CallOp) -> None:
        callee = self.functions.get(op.callee.string_value())
        if callee is None:
            return self._rule_generic(op)
        params = [_spec_of(t) for t in callee.function_type.inputs]
        for i, spec in enumerate(params):
            self.require(op, i, spec, op_context(op))
        for r, t in zip(op.results, callee.function_type.outputs):
            spec = _spec_of(t)
            self._set(r, spec if spec is not None else self.free(r))

    # -- materialization --------------------------------------------------------

    def materialize(self, module: ModuleOp, names: _LazyNames, report: LayoutReport) -> None:
        """Set every value's type, then insert the requested copies (one per value and layout)."""
        for value, spec in list(self.chosen.items()):
            new_type = _with_spec(value.type, spec)
            if new_type is not value.type:  # (an equal type object: retyping is harmless)
                new_value = retype(value, new_type)
                if new_value is not value:  # a new value object: carry its name over
                    table = names.table()
                    if value in table:
                        table[new_value] = table[value]
        made: dict[tuple[int, Any], SSAValue] = {}
        for user, index, spec, why in self.requests:
            value = user.operands[index]
            if _spec_of(value.type) == spec:
                continue
            key = (id(value), spec)
            copy = made.get(key)
            if copy is None:
                copy = self._copy(value, spec)
                made[key] = copy
                report.copies.append(CopyRecord(names.get(value, "?"), why, _shape_text(value.type),
                                                _shape_text(copy.type), _bytes(copy.type)))
            user.operands[index] = copy

    def _copy(self, value: SSAValue, spec: Spec) -> SSAValue:
        """Insert ops giving ``value`` the layout ``spec`` right after its definition."""
        ops: list[Operation] = []
        result = self._copy_ops(value, spec, ops)
        if isinstance(value.owner, Operation):
            insert_new_ops(ops, InsertPoint.after(value.owner))
        else:
            insert_new_ops(ops, InsertPoint.at_start(value.owner))
        return result

    def _copy_ops(self, value: SSAValue, spec: Spec, ops: list[Operation]) -> SSAValue:
        if isinstance(value.type, TupleType) and isinstance(spec, tuple):
            parts = []
            for i, (t, s) in enumerate(zip(value.type.types, spec)):
                gte = cf.GetTupleElementOp.create(operands=[value], properties={"index": IntegerAttr(i, 64)},
                                                  result_types=[t])
                ops.append(gte)
                parts.append(self._copy_ops(gte.results[0], s, ops) if _spec_of(t) != s else gte.results[0])
            tup = cf.TupleOp.create(operands=parts, result_types=[TupleType([p.type for p in parts])])
            ops.append(tup)
            return tup.results[0]
        copy = dm.CopyOp.create(operands=[value], result_types=[_with_spec(value.type, spec)])
        ops.append(copy)
        return copy.results[0]


def _call_order(funcs: list[func.FuncOp]) -> list[func.FuncOp]:
    """Functions with callees first (so call sites see the callee's final signature)."""
    if len(funcs) <= 1:
        return list(funcs)  # (what the walk below finds: a lone function calls no other)
    by_name = {f.sym_name.data: f for f in funcs}
    order: list[func.FuncOp] = []
    state: dict[str, int] = {}

    def visit(f: func.FuncOp):
        name = f.sym_name.data
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            return  # recursion is rejected elsewhere; do not loop here
        state[name] = 1
        for op in f.walk():
            if isinstance(op, (cf.CallOp, cf.FusionOp)):
                callee = by_name.get(op.callee.string_value())
                if callee is not None:
                    visit(callee)
        state[name] = 2
        order.append(f)

    for f in funcs:
        visit(f)
    return order


def assign(module: ModuleOp, target: str = "cpu", arg_layouts: str | None = None,
           result_layouts: str | None = None) -> LayoutReport:
    """Assign layouts in ``module`` (in place) and return the report."""
    if target not in TARGETS:
        raise PassError(f"pass assign-layouts: unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    report = LayoutReport(target)
    before = _values_in_print_order(module)
    share_types([v for v, _ in before])
    report.total_bytes_before = sum(_bytes(v.type) for v, _ in before)
    names = _LazyNames(before)
    assigner = LayoutAssigner(TARGETS[target], _parse_layout_list(arg_layouts, "arg-layouts"),
                              _parse_layout_list(result_layouts, "result-layouts"))
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    assigner.functions = {f.sym_name.data: f for f in funcs}
    for fn in _call_order(funcs):
        entry = fn.sym_visibility is None or fn.sym_visibility.data == "public"
        args, results = assigner.entry_constraints(fn, entry)
        assigner.assign_block(fn.body.block, args, results if entry else None, f"@{fn.sym_name.data} result")
        # Non-entry functions return whatever their values got; fix the signature now for call sites.
        _sync_signature(fn, assigner, results if entry else None)
    assigner.materialize(module, names, report)
    for fn in funcs:
        _sync_signature(fn, None, None)
    after = _values_in_print_order(module)
    for (value, _), label in zip(after, _labels(after)):
        if isinstance(value.type, (TensorType, TupleType)):
            report.values.append((label, _shape_text(value.type), _bytes(value.type)))
    report.total_bytes_after = sum(v[2] for v in report.values)
    return report


def _sync_signature(fn: func.FuncOp, assigner: LayoutAssigner | None, results: Sequence[Spec] | None) -> None:
    """Make ``fn``'s function type match its block arguments and returned values."""
    block = fn.body.block
    ret = block.last_op
    if assigner is None:
        inputs = [a.type for a in block.args]
        outputs = [v.type for v in ret.operands] if ret is not None else list(fn.function_type.outputs)
    else:
        inputs = [_with_spec(a.type, assigner.chosen.get(a)) for a in block.args]
        outputs = []
        for i, v in enumerate(ret.operands if ret is not None else ()):
            spec = results[i] if results is not None and results[i] is not None else assigner.chosen.get(v)
            outputs.append(_with_spec(v.type, spec))
    fn.function_type = FunctionType.from_lists(inputs, outputs)


@register_pass
@dataclass(frozen=True)
class AssignLayoutsPass(PatternPass):
    """``assign-layouts{target=cpu|tpu arg-layouts=... result-layouts=...}``: XLA layouts for every value."""

    name = "assign-layouts"
    target: str = "cpu"
    arg_layouts: str | None = None
    """Entry parameter layouts, ``;``-separated XLA layout text (``auto`` = free), e.g. ``"{0,1};auto"``."""
    result_layouts: str | None = None
    """Entry result layouts, same syntax."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        emit_report(self, assign(op, self.target, self.arg_layouts, self.result_layouts))

