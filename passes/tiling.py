"""``tile-layouts``: carry tiled values as their physical buffers.

A value whose layout is tiled (after ``assign-layouts{target=tpu}``) gets a
*physical buffer*: an array whose dimensions are the tile grid and the tile
dimensions (``xla_dialect.layout.physical_dims``), padding included, in
memory order — reshaped to 1-D it is exactly
``xla_dialect.layout.to_physical`` of the logical value (padding zero).

The conversions are ordinary hlo ops, following the tiled-layout spec's
"tiling as pad-reshape-transpose": *pack* = transpose to memory order, then
per tiling level combine ``*`` dimensions (reshape), pad to whole tiles
(``hlo.pad`` with zero), split each dimension into (tiles, tile) (reshape) and
move the tile dimensions most minor (transpose); *unpack* is the inverse
(transpose, reshape, ``hlo.slice`` dropping the padding).

Element-wise ops whose operands and result share shape and layout run on
the physical buffers directly; when an op does not map zero padding to zero
(``exp``, ``negate`` of +0.0, comparisons...), its result is masked so the
padding stays zero. Bitcast transposes and reshapes (same memory order) pass
the buffer through (reshaping it at most). Every other op reads logical
values: a buffer is unpacked where such an op (or the function result) needs
it, and packed lazily where a physical consumer needs a logical value.
Conversions nobody uses are removed at the end, so results are identical to
the untiled program.

``tile-layouts{expose-physical=true}`` additionally returns, from every public
function, the physical buffer of each tiled top-level value (in value order;
the report lists them) — the executor then hands back every value's buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint

import lowering.kernels  # noqa: F401  (registers every kernel family)
from lowering.kernels.context import KernelContext
from lowering.kernels.registry import KERNELS, Constant
from xla_dialect.layout import COMBINE_DIMENSION, Layout, LayoutAttr, layout_of, physical_dims
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import ints
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.shape import format_shape

from .base import PatternPass, emit_report
from .layouts import _tiled_bitcast, TARGETS, reshape_bitcast_m2m
from .purity import is_pure
from .registry import register_pass
from .util import (AttrInterner, IdMemo, constant_properties, create, erase_op, i64s, insert_new_ops, make_constant,
                   new_op, tensor_type)

ELEMENTWISE = (ew.UnaryElementwiseOp, ew.BinaryElementwiseOp, ew.CompareOp, ew.SelectOp, ew.ClampOp)
"""Op classes that may run directly on physical buffers (same shape and layout everywhere)."""

_IS_ELEMENTWISE: dict[type, bool] = {}
_UNKNOWN = object()


def tiled_layout(type_: Attribute) -> Layout | None:
    """The layout of a tiled array type (None for untiled, non-array, dynamic, or L(n)-padded ones)."""
    return _tiled_layout(type_)


def _compute_tiled_layout(type_: Attribute) -> Layout | None:
    layout = layout_of(type_)
    if layout is None or not layout.tiles or layout.tail_padding_alignment != 1:
        return None
    if any(d < 0 for d in type_.get_shape()):
        return None
    return layout


_tiled_layout = IdMemo(_compute_tiled_layout)
_ROW_MAJOR: dict[int, Layout] = {}


def _plain(element_type: Attribute, shape) -> TensorType:
    """A row-major (untiled) array type: how physical buffers and conversion temporaries are typed."""
    rank = len(shape)
    layout = _ROW_MAJOR.get(rank)
    if layout is None:
        layout = _ROW_MAJOR[rank] = Layout.default(rank)
    return tensor_type(element_type, shape, layout)


_physical_dims = IdMemo(lambda type_: tuple(physical_dims(type_)))
"""``xla_dialect.layout.physical_dims``, memoized per type."""


@dataclass
class _Level:
    """One tiling level's dimensions (see :func:`_levels`)."""

    before: list[int]  # dims entering the level
    expanded: list[int]  # with leading size-1 dims when the tile has more dims than the array
    merged: list[int]  # after combining '*' dims
    split: int  # number of untiled (outer) dims
    sizes: list[int]  # tile sizes of the tiled dims
    padded: list[int] = field(default_factory=list)

    @property
    def counts(self) -> list[int]:
        return [-(-d // t) for d, t in zip(self.merged[self.split:], self.sizes)]

    @property
    def out(self) -> list[int]:
        return self.merged[:self.split] + self.counts + self.sizes


def _levels(shape, layout: Layout) -> tuple[list[int], list[_Level]]:
    """The memory-order permutation and the per-level dimensions of packing ``shape`` in ``layout``."""
    order = list(reversed(layout.minor_to_major))
    dims = [shape[d] for d in order]
    levels = []
    for tile in layout.tiles:
        before = list(dims)
        if len(tile) > len(dims):
            dims = [1] * (len(tile) - len(dims)) + dims
        expanded = list(dims)
        split = len(dims) - len(tile)
        merged, sizes, m = list(dims[:split]), [], 1
        for size, d in zip(tile, dims[split:]):
            m *= d
            if size == COMBINE_DIMENSION:
                continue
            merged.append(m)
            sizes.append(size)
            m = 1
        level = _Level(before, expanded, merged, split, sizes)
        level.padded = merged[:split] + [c * t for c, t in zip(level.counts, sizes)]
        levels.append(level)
        dims = level.out
    return order, levels


class _Emitter:
    """Creates conversion ops, to be inserted together at one point.

    Packing and unpacking depend only on the types and layout involved, so
    each conversion sequence is recorded once per run (:class:`_Recorder`,
    :class:`_Templates`) and replayed: the same ops, created without
    recomputing the tiling arithmetic.
    """

    def __init__(self, counter: list[int], templates: _Templates):
        self.counter = counter  # shared count of conversion ops, for the report
        self.templates = templates
        self.ops: list[Operation] = []

    def emit(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        self.counter[0] += 1
        return op.results[0]

    def make(self, cls: type[Operation], operands: list, props: dict, result_type: Attribute) -> SSAValue:
        """Emit a ``cls`` op (result types given: no inference)."""
        return self.emit(new_op(cls, operands, props, (result_type,)))

    def insert_before(self, op: Operation) -> None:
        if self.ops:
            insert_new_ops(self.ops, InsertPoint.before(op))
            self.ops = []

    def insert_after_definition(self, value: SSAValue) -> None:
        if self.ops:
            where = (InsertPoint.after(value.owner) if isinstance(value.owner, Operation)
                     else InsertPoint.at_start(value.owner))
            insert_new_ops(self.ops, where)
            self.ops = []

    def transpose(self, v: SSAValue, perm) -> SSAValue:
        if list(perm) == list(range(len(perm))):
            return v
        shape = v.type.get_shape()
        return self.make(dm.TransposeOp, [v], {"permutation": i64s(perm)},
                         _plain(v.type.element_type, [shape[p] for p in perm]))

    def reshape(self, v: SSAValue, shape) -> SSAValue:
        if list(v.type.get_shape()) == list(shape):
            return v
        return self.make(dm.ReshapeOp, [v], {}, _plain(v.type.element_type, shape))

    def zero(self, element_type: Attribute) -> SSAValue:
        from xla_dialect.types import numpy_dtype

        t = _plain(element_type, [])
        return self.make(ConstantOp, [], constant_properties(np.zeros((), numpy_dtype(t)), t), t)

    def pad(self, v: SSAValue, shape) -> SSAValue:
        have = list(v.type.get_shape())
        if have == list(shape):
            return v
        high = [b - a for a, b in zip(have, shape)]
        zeros = i64s([0] * len(have))
        return self.make(dm.PadOp, [v, self.zero(v.type.element_type)],
                         {"edge_padding_low": zeros, "edge_padding_high": i64s(high), "interior_padding": zeros},
                         _plain(v.type.element_type, shape))

    def slice(self, v: SSAValue, shape) -> SSAValue:
        have = list(v.type.get_shape())
        if have == list(shape):
            return v
        return self.make(dm.SliceOp, [v], {"start_indices": i64s([0] * len(have)),
                                           "limit_indices": i64s(shape),
                                           "strides": i64s([1] * len(have))},
                         _plain(v.type.element_type, shape))

    def broadcast(self, v: SSAValue, shape) -> SSAValue:
        return self.make(dm.BroadcastInDimOp, [v], {"broadcast_dimensions": i64s([])},
                         _plain(v.type.element_type, shape))

    def pack(self, v: SSAValue, layout: Layout) -> SSAValue:
        """Logical ``v`` -> its physical buffer in ``layout``."""
        return self.templates.get("pack", v.type, None, layout).replay(self, v)

    def unpack(self, p: SSAValue, logical_type: TensorType, layout: Layout) -> SSAValue:
        """Physical buffer ``p`` -> the logical value of type ``logical_type``."""
        return self.templates.get("unpack", p.type, logical_type, layout).replay(self, p)

    def pack_ops(self, v: SSAValue, layout: Layout) -> SSAValue:
        """Emit the ops of :meth:`pack`."""
        order, levels = _levels(v.type.get_shape(), layout)
        cur = self.transpose(v, order)
        for lv in levels:
            cur = self.reshape(cur, lv.expanded)
            cur = self.reshape(cur, lv.merged)
            cur = self.pad(cur, lv.padded)
            interleaved = lv.merged[:lv.split] + [x for c, t in zip(lv.counts, lv.sizes) for x in (c, t)]
            cur = self.reshape(cur, interleaved)
            cur = self.transpose(cur, _tile_perm(lv))
        return cur

    def unpack_ops(self, p: SSAValue, logical_type: TensorType, layout: Layout) -> SSAValue:
        """Emit the ops of :meth:`unpack`."""
        order, levels = _levels(logical_type.get_shape(), layout)
        cur = p
        for lv in reversed(levels):
            cur = self.transpose(cur, _inverse(_tile_perm(lv)))
            cur = self.reshape(cur, lv.padded)
            cur = self.slice(cur, lv.merged)
            cur = self.reshape(cur, lv.before)
        cur = self.transpose(cur, _inverse(order))
        # A copy gives the value exactly the logical type (layout included) users expect, and a
        # compact buffer: kernels such as reductions may sum in a memory-order-dependent order.
        return self.make(dm.CopyOp, [cur], {}, logical_type)


class _Ref:
    """A value while recording a template: the input (index -1) or the result of step ``index``."""

    __slots__ = ("type", "index")

    def __init__(self, type_: Attribute, index: int):
        self.type = type_
        self.index = index


class _Recorder(_Emitter):
    """An emitter that records the ops it would create (see :class:`_Template`)."""

    def __init__(self):
        super().__init__([0], None)
        self.steps: list[tuple[type[Operation], tuple[int, ...], dict, Attribute]] = []

    def make(self, cls, operands, props, result_type) -> _Ref:
        self.steps.append((cls, tuple(o.index for o in operands), props, result_type))
        return _Ref(result_type, len(self.steps) - 1)


@dataclass
class _Template:
    """A recorded conversion: ops as (class, operand step indices (-1 = the input), properties, result type)."""

    steps: list[tuple[type[Operation], tuple[int, ...], dict, Attribute]]
    out: int  # the step whose result is the output (-1: the input itself)

    def replay(self, em: _Emitter, v: SSAValue) -> SSAValue:
        """Emit the recorded ops on input ``v`` through ``em``; return the output."""
        results: list[SSAValue] = []
        for cls, refs, props, result_type in self.steps:
            operands = [v if r < 0 else results[r] for r in refs]
            results.append(em.emit(new_op(cls, operands, props, (result_type,))))
        return results[self.out] if self.out >= 0 else v


class _Templates:
    """The templates of one run, by (conversion, input type, logical type, layout); ``intern``
    numbers the run's attributes."""

    def __init__(self):
        self.intern = AttrInterner()
        self._cache: dict[tuple, _Template] = {}

    def get(self, kind: str, in_type: Attribute, logical_type: Attribute | None, layout: Layout) -> _Template:
        """The template packing (``kind="pack"``) or unpacking a value of ``in_type``."""
        key = (kind, self.intern(in_type), self.intern(logical_type), self.intern(layout))
        template = self._cache.get(key) if None not in key else None
        if template is None:
            rec = _Recorder()
            source = _Ref(in_type, -1)
            out = rec.pack_ops(source, layout) if kind == "pack" else rec.unpack_ops(source, logical_type, layout)
            template = _Template(rec.steps, out.index)
            if None not in key:
                self._cache[key] = template
        return template


def _tile_perm(lv: _Level) -> list[int]:
    """The transpose moving a level's tile dimensions most minor: (outer, c1, t1, c2, t2) -> (outer, c1, c2, t1, t2)."""
    k = len(lv.sizes)
    return list(range(lv.split)) + [lv.split + 2 * i for i in range(k)] + [lv.split + 2 * i + 1 for i in range(k)]


def _inverse(perm) -> list[int]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


_ZERO_CACHE: dict[tuple, bool] = {}


def preserves_zero(op: Operation) -> bool:
    """Whether ``op`` maps all-zero operands to an all-zero (bitwise) result, by running its kernel once."""
    key = (type(op), tuple(sorted(op.properties.items())),
           tuple(o.type.element_type for o in op.operands), op.results[0].type.element_type)
    cached = _ZERO_CACHE.get(key)
    if cached is not None:
        return cached
    result = False
    try:
        from xla_dialect.types import numpy_dtype

        scratch = Block(arg_types=[TensorType(o.type.element_type, [1]) for o in op.operands])
        probe = type(op).create(operands=list(scratch.args), properties=dict(op.properties),
                                result_types=[TensorType(op.results[0].type.element_type, [1])])
        kernel = KERNELS[type(op)](probe, KernelContext(ModuleOp([])))
        zeros = [np.zeros(1, numpy_dtype(a.type)) for a in scratch.args]
        with np.errstate(all="ignore"):
            out = kernel.value if isinstance(kernel, Constant) else kernel(*zeros)
        out = np.ascontiguousarray(np.asarray(out, dtype=numpy_dtype(probe.results[0].type)))
        result = not out.view(np.uint8).any()
        probe.erase()
    except Exception:
        result = False  # unknown: mask, which is always correct
    _ZERO_CACHE[key] = result
    return result


@dataclass
class TilingReport:
    """What ``tile-layouts`` did."""

    physical_ops: int = 0
    """Element-wise ops now running on physical buffers."""
    bitcasts: int = 0
    """Transposes/reshapes whose buffer passes through."""
    conversions: int = 0
    """Conversion ops (pack/unpack/mask) kept in the program."""
    exposed: list[tuple[int, str]] = field(default_factory=list)
    """With expose-physical: (value index in print order before the pass, logical shape) per extra result."""

    def __str__(self) -> str:
        text = (f"tile-layouts: {self.physical_ops} element-wise ops on physical buffers, {self.bitcasts} bitcasts, "
                f"{self.conversions} conversion ops")
        if self.exposed:
            text += f", {len(self.exposed)} physical buffers exposed as extra results"
        return text


class _FunctionTiler:
    """Tiles the top-level block of one function (see the module docstring)."""

    def __init__(self, report: TilingReport, counter: list[int], templates: _Templates):
        self.report = report
        self.counter = counter
        self.phys: dict[SSAValue, SSAValue] = {}  # logical value -> its physical buffer
        self.masks: dict[tuple, tuple[SSAValue, SSAValue]] = {}
        self.block: Block | None = None
        self.templates = templates
        self._forms: dict[tuple, tuple[TensorType, bool] | None] = {}  # op signature -> _physical_form

    def physical(self, v: SSAValue) -> SSAValue:
        """The physical buffer of tiled ``v``, packing it (once, after its definition) if needed."""
        p = self.phys.get(v)
        if p is None:
            em = _Emitter(self.counter, self.templates)
            p = em.pack(v, tiled_layout(v.type))
            em.insert_after_definition(v)
            self.phys[v] = p
        return p

    def mask(self, layout: Layout, type_: TensorType) -> tuple[SSAValue, SSAValue]:
        """(valid-element mask, zeros) in physical form for arrays of ``type_`` in ``layout`` (cached)."""
        key = (layout, tuple(type_.get_shape()), type_.element_type)
        if key not in self.masks:
            from xdsl.dialects.builtin import IntegerType

            em = _Emitter(self.counter, self.templates)
            true = em.emit(make_constant(np.ones((), np.bool_), _plain(IntegerType(1), [])))
            mask = em.pack(em.broadcast(true, type_.get_shape()), layout)
            zeros = em.broadcast(em.zero(type_.element_type), _physical_dims(type_))
            insert_new_ops(em.ops, InsertPoint.at_start(self.block))
            self.masks[key] = (mask, zeros)
        return self.masks[key]

    def run(self, block: Block) -> None:
        """Compute what can be computed on physical buffers, then give the remaining users logical values."""
        self.block = block
        done: list[Operation] = []
        for op in list(block.ops):
            elementwise = _IS_ELEMENTWISE.get(type(op))
            if elementwise is None:
                elementwise = _IS_ELEMENTWISE[type(op)] = isinstance(op, ELEMENTWISE)
            physical = self._physical_form(op) if elementwise else None
            if physical is not None:
                self._elementwise(op, *physical)
            elif not (isinstance(op, dm.TransposeOp) and self._transpose(op)
                      or isinstance(op, dm.ReshapeOp) and self._reshape(op)):
                continue
            done.append(op)
        moved = set(done)
        for op in done:
            result = op.results[0]
            if any(use.operation not in moved for use in result.uses):
                em = _Emitter(self.counter, self.templates)
                logical = em.unpack(self.phys[result], result.type, tiled_layout(result.type))
                em.insert_before(op)
                result.replace_all_uses_with(logical)
                self.phys[logical] = self.phys[result]
        for op in reversed(done):
            erase_op(op)

    @staticmethod
    def _same_layouts(op: Operation) -> bool:
        result = op.results[0]
        layout = tiled_layout(result.type)
        if layout is None or not is_pure(op):
            return False
        shape = result.type.get_shape()
        for v in op.operands:
            lv = tiled_layout(v.type)
            if (lv is None or v.type.get_shape() != shape or lv.minor_to_major != layout.minor_to_major
                    or lv.tiles != layout.tiles):
                return False
        return True

    def _physical_form(self, op: Operation) -> tuple[TensorType, bool] | None:
        """(physical result type, whether zero padding stays zero) when element-wise ``op`` can run on
        physical buffers, else None; memoized by op signature (class, types, properties, attributes),
        which determines it."""
        key = self.templates.intern.op_signature(op, [type(op)], operand_types=True)
        found = self._forms.get(key, _UNKNOWN) if key is not None else _UNKNOWN
        if found is _UNKNOWN:
            found = None
            if self._same_layouts(op):
                result = op.results[0]
                found = (_plain(result.type.element_type, _physical_dims(result.type)), preserves_zero(op))
            if key is not None:
                self._forms[key] = found
        return found

    def _elementwise(self, op: Operation, physical_type: TensorType, zero_stays_zero: bool) -> None:
        result = op.results[0]
        operands = [self.physical(v) for v in op.operands]
        em = _Emitter(self.counter, self.templates)
        new = new_op(type(op), operands, op.properties, (physical_type,), op.attributes)
        em.ops.append(new)
        value = new.results[0]
        if not zero_stays_zero:
            em.insert_before(op)
            mask, zeros = self.mask(tiled_layout(result.type), result.type)
            value = em.emit(create(ew.SelectOp, [mask, value, zeros], {}, [physical_type]))
        em.insert_before(op)
        self.phys[result] = value
        self.report.physical_ops += 1

    def _transpose(self, op: dm.TransposeOp) -> bool:
        src = op.operand
        lin, lout = tiled_layout(src.type), tiled_layout(op.result.type)
        if src not in self.phys or lin is None or lout is None:
            return False
        inverse = _inverse(ints(op.permutation))
        if lin.tiles != lout.tiles or tuple(inverse[d] for d in lin.minor_to_major) != lout.minor_to_major:
            return False
        self.phys[op.result] = self.phys[src]
        self.report.bitcasts += 1
        return True

    def _reshape(self, op: dm.ReshapeOp) -> bool:
        src = op.operand
        lin, lout = tiled_layout(src.type), tiled_layout(op.result.type)
        if src not in self.phys or lin is None or lout is None:
            return False
        m2m = reshape_bitcast_m2m(src.type.get_shape(), lin.minor_to_major, op.result.type.get_shape())
        if m2m != lout.minor_to_major or not _tiled_bitcast(TARGETS["tpu"], src.type, lin, op.result.type, lout):
            return False
        em = _Emitter(self.counter, self.templates)
        self.phys[op.result] = em.reshape(self.phys[src], _physical_dims(op.result.type))
        em.insert_before(op)
        self.report.bitcasts += 1
        return True


def _expose(fn: func.FuncOp, tiler: _FunctionTiler, report: TilingReport,
            top_level: list[tuple[SSAValue, int]]) -> None:
    """Append the physical buffer of every tiled top-level value of ``fn`` to its results."""
    ret = fn.body.block.last_op
    extra = []
    for value, index in top_level:
        if tiled_layout(value.type) is None:
            continue
        extra.append(tiler.phys[value] if value in tiler.phys else tiler.physical(value))
        report.exposed.append((index, format_shape(value.type)))
    if extra:
        ret.operands = [*ret.operands, *extra]
        fn.function_type = FunctionType.from_lists(list(fn.function_type.inputs), [v.type for v in ret.operands])


def tile(module: ModuleOp, expose_physical: bool = False) -> TilingReport:
    """Run the tiling on every function of ``module`` (in place)."""
    from .layouts import _values_in_print_order

    report = TilingReport()
    counter = [0]
    templates = _Templates()
    index_of = {v: i for i, (v, _) in enumerate(_values_in_print_order(module))} if expose_physical else {}
    for fn in [op for op in module.ops if isinstance(op, func.FuncOp)]:
        block = fn.body.block
        top_level = [(v, index_of[v]) for v in (*block.args, *(r for op in block.ops for r in op.results))
                     if v in index_of]
        tiler = _FunctionTiler(report, counter, templates)
        tiler.run(block)
        if expose_physical and (fn.sym_visibility is None or fn.sym_visibility.data == "public"):
            _expose(fn, tiler, report, top_level)
    report.conversions = counter[0]
    return report


@register_pass
@dataclass(frozen=True)
class TileLayoutsPass(PatternPass):
    """``tile-layouts{expose-physical=false}``: tiled values as physical buffers, element-wise chains on them."""

    name = "tile-layouts"
    expose_physical: bool = False
    """Also return every tiled value's physical buffer from public functions (for inspection and tests)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        emit_report(self, tile(op, self.expose_physical))
