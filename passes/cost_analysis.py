"""Cost analysis: flops, transcendentals and bytes accessed of a program, per op and in total, as XLA counts them.

:func:`cost_analysis` follows XLA's ``HloCostAnalysis`` (``xla/service/hlo_cost_analysis.cc``), the
analysis behind jax's ``cost_analysis()``, rule for rule: the rules are a table keyed by op class,
:data:`COST_RULES`, found through the op's base classes (an elementwise op not listed takes the rule of
:class:`~xla_dialect.ops.elementwise.UnaryElementwiseOp`). The totals use XLA's key names (``"flops"``,
``"transcendentals"``, ``"bytes accessed"``, ``"bytes accessedout{}"``, ``"bytes accessed0{}"``,
``"utilization0{}"``, ...) and XLA's arithmetic (32-bit floats, as its ``Properties`` are).

**Which of jax's two analyses this equals.** ``jax.jit(f).lower(*args).cost_analysis()`` runs
``HloCostAnalysis`` on the program as written (the HLO jax's StableHLO converts to, before any
optimization); ``.compile().cost_analysis()`` on the program XLA's CPU compiler made of it (fused, with
constants folded, dots rewritten, loops simplified), which is not the program this IR holds. The IR is the
program as written, so the totals here are the lowered ones. Measured (``tests/test_show.py``, 56 programs:
elementwise, complex, integer and transcendental ops, CHLO functions, dots, convolutions (3-D, transposed,
grouped, strided, dilated, kernel gradients), reductions, windows, loops, conditionals, sort, top_k,
gather/scatter, dynamic slices, FFT, linear algebra, random numbers, gradients, remat):

* on the same program -- jax's lowered HLO text read with :func:`interop.import_hlo` -- ``flops``,
  ``transcendentals`` and ``bytes accessed`` all equal jax's lowered ``cost_analysis()`` on 55 of them; the
  other is ``top_k``: XLA counts nothing for its ``topk`` instruction (a TODO in XLA), the HLO importer reads it
  as a sort and slices, counted as a sort;
* on XLA's compiled program (``compile().as_text()``: fusions, folded constants) read the same way, the three
  keys equal ``compile().cost_analysis()`` on 55 of 56 (``top_k`` again: XLA CPU's ``TopK`` custom call counts
  -1) -- the same rules, XLA's fusion byte rules included, on the program XLA optimized;
* on the program :func:`interop.import_jax` makes of the same function, ``flops`` and ``transcendentals`` are
  equal where that program is the same computation; it is not always: jax's jit drops unused loop state and
  folds some constants that the exported program keeps (a ``fori_loop`` counts one more add per iteration), and
  LAPACK custom calls become hlo ops with a known cost (``cholesky``, ``qr``, ``eigh``); jit's lowering expands
  complex ``exp`` and ``multiply`` into real ops, the exported program keeps them (9 of the 56 differ in flops,
  each listed in the test with both figures). ``bytes accessed`` differs more often: XLA's
  HLO passes loop state and conditional operands as tuples, this IR as variadic regions.

XLA's own conventions kept: dead ops cost nothing (XLA's converted module has none); a result of several
values is a tuple-shaped instruction counting its arrays; a ``tuple`` op only its pointer table (8 bytes an
element); ``get-tuple-element``, bitcasts and constants touch no memory; ``hlo.custom_call`` counts ``-1``
flops and bytes ("unknown"); ``hlo.fusion`` (from compiled HLO text) counts its fused computation's flops and
XLA's fusion bytes (outputs once, large constants, each parameter as its users read it).

A loop counts one iteration of its body and condition (XLA cannot know the trip count either); a
conditional the most expensive branch, key by key. :func:`roofline` turns totals into a time estimate for a
chip of :data:`CHIPS` or this CPU, measured (:func:`measure_cpu`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, TupleType
from xdsl.ir import Attribute, Operation, Region

from xla_dialect.errors import XlaError
from xla_dialect.layout import byte_size, layout_of
from xla_dialect.ops import collectives as coll
from xla_dialect.ops import constants as const
from xla_dialect.ops import control_flow as cf
from xla_dialect.ops import conversion as conv
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import effects as fx
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import indexing as ix
from xla_dialect.ops import linalg
from xla_dialect.ops import numerics as nm
from xla_dialect.ops import reduction as red
from xla_dialect.ops import sorting
from xla_dialect.ops import windowed as win
from xla_dialect.ops.base import ints
from xla_dialect.types import TokenType, element_type_of

__all__ = ["BYTES", "CHIPS", "COST_RULES", "Chip", "CostReport", "FLOPS", "OpCost", "TRANSCENDENTALS",
           "cost_analysis", "measure_cpu", "roofline"]

FLOPS = "flops"
TRANSCENDENTALS = "transcendentals"
BYTES = "bytes accessed"
OUT_BYTES = "bytes accessedout{}"
POINTER_SIZE = 8
"""Bytes XLA counts for each element of a tuple (its pointer table; ``kDefaultPointerSize``)."""

_F32 = np.float32


def _operand_bytes_key(i: int) -> str:
    return f"{BYTES}{i}{{}}"


def _utilization_key(i: int) -> str:
    return f"utilization{i}{{}}"


def _copied(key: str) -> bool:
    """XLA's ``KeyToCopyFromSubcomputation``: per-element costs of a called computation, not its bytes."""
    return not key.startswith(BYTES) and not key.startswith("utilization")


class Properties(dict):
    """XLA's ``HloCostAnalysis::Properties``: key -> 32-bit float (missing keys are 0)."""

    def set(self, key: str, value) -> None:
        """``properties[key] = value`` rounded to a 32-bit float as XLA stores it."""
        self[key] = _F32(value)

    def add(self, key: str, value) -> None:
        """``properties[key] += value`` in 32-bit floats."""
        self[key] = _F32(self.get(key, _F32(0)) + _F32(value))

    def get_(self, key: str) -> np.float32:
        """The value of ``key`` (0 when absent)."""
        return self.get(key, _F32(0))


# ----------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------


def _elements(type_: Attribute) -> int:
    """XLA's ``ShapeUtil::ElementsIn`` (0 for tuples and tokens)."""
    if isinstance(type_, TensorType):
        return math.prod(type_.get_shape())
    return 0


def _elements_recursive(type_: Attribute) -> int:
    if isinstance(type_, TupleType):
        return sum(_elements_recursive(t) for t in type_.types)
    return _elements(type_)


def _dims(value) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


class _ShapeSize:
    """XLA's shape size function: ``ShapeUtil::ByteSizeOf(shape, pointer_size=8)`` (logical bytes), or with
    ``physical=True`` the bytes of the array's layout, tile padding included (a TPU's shape size)."""

    def __init__(self, physical: bool):
        self.physical = physical
        self.memo: dict[int, tuple[Attribute, int]] = {}

    def __call__(self, type_: Attribute) -> int:
        hit = self.memo.get(id(type_))
        if hit is not None and hit[0] is type_:
            return hit[1]
        size = self._compute(type_)
        self.memo[id(type_)] = (type_, size)
        return size

    def _compute(self, type_: Attribute) -> int:
        if isinstance(type_, TupleType):
            return POINTER_SIZE * len(type_.types)
        if isinstance(type_, TokenType) or not isinstance(type_, TensorType):
            return 0
        shape = type_.get_shape()
        if any(d < 0 for d in shape):
            return 0
        if self.physical and layout_of(type_) is not None:
            return byte_size(type_)
        try:
            element = element_type_of(type_.element_type)
        except Exception:  # quantized and other element types: their storage width
            bits = getattr(getattr(type_.element_type, "storage_type", None), "width", None)
            bits = getattr(bits, "data", 32) if bits is not None else 32
            return math.prod(shape) * -(-bits // 8)
        return math.prod(shape) * -(-element.bits // 8)


# ----------------------------------------------------------------------------
# The analysis
# ----------------------------------------------------------------------------


@dataclass
class OpCost:
    """The cost of one op as XLA's analysis gives it (a loop or call includes what it runs)."""

    op: Operation
    label: str
    """The op's name and first result as printed (``%3 = hlo.dot_general``)."""
    function: str
    """The function the op is in."""
    depth: int
    """0 for ops of a function's body, +1 per enclosing region."""
    properties: Properties

    @property
    def flops(self) -> float:
        """``flops`` of the op."""
        return float(self.properties.get_(FLOPS))

    @property
    def transcendentals(self) -> float:
        """``transcendentals`` of the op."""
        return float(self.properties.get_(TRANSCENDENTALS))

    @property
    def bytes_accessed(self) -> float:
        """``bytes accessed`` of the op."""
        return float(self.properties.get_(BYTES))

    @property
    def location(self) -> str:
        """The op's source location (its ``loc`` attribute) or ``""``."""
        loc = self.op.attributes.get("loc")
        return getattr(loc, "data", "") if loc is not None else ""


@dataclass
class CostReport:
    """What :func:`cost_analysis` found: totals with XLA's keys and the cost of every op."""

    totals: dict[str, float]
    """XLA's keys -> totals over the entry function (``flops``, ``transcendentals``, ``bytes accessed``, ...)."""
    ops: list[OpCost] = field(default_factory=list)
    """Every op of every function reachable from the entry, nested ones included, in program order."""
    entry: str = "main"

    def __getitem__(self, key: str) -> float:
        return self.totals[key]

    @property
    def flops(self) -> float:
        """Total ``flops``."""
        return self.totals.get(FLOPS, 0.0)

    @property
    def transcendentals(self) -> float:
        """Total ``transcendentals``."""
        return self.totals.get(TRANSCENDENTALS, 0.0)

    @property
    def bytes_accessed(self) -> float:
        """Total ``bytes accessed``."""
        return self.totals.get(BYTES, 0.0)

    def as_dict(self) -> dict[str, float]:
        """The totals, as jax's ``cost_analysis()`` returns them."""
        return dict(self.totals)

    def cost_of(self, op: Operation) -> OpCost | None:
        """The :class:`OpCost` of ``op`` (None when it was not analysed)."""
        for c in self.ops:
            if c.op is op:
                return c
        return None

    def table(self, top: int | None = None) -> str:
        """A text table: totals, then ops by flops+transcendentals then bytes, most expensive first."""
        lines = [f"entry @{self.entry}: flops {self.flops:.6g}, transcendentals {self.transcendentals:.6g}, "
                 f"bytes accessed {self.bytes_accessed:.6g}"]
        shown = [c for c in self.ops if c.properties or not isinstance(c.op, (func.ReturnOp, cf.ReturnOp))]
        ranked = sorted(shown, key=lambda c: (-(c.flops + c.transcendentals), -c.bytes_accessed))
        if top is not None:
            ranked = ranked[:top]
        lines.append(f"{'flops':>14} {'transc.':>12} {'bytes':>14}  op")
        for c in ranked:
            where = f"  [{c.location}]" if c.location else ""
            lines.append(f"{c.flops:>14.6g} {c.transcendentals:>12.6g} {c.bytes_accessed:>14.6g}  "
                         f"{'  ' * c.depth}@{c.function}: {c.label}{where}")
        return "\n".join(lines)


Rule = Callable[[Operation, "_Analysis", Properties], None]


class _Analysis:
    """One run of the analysis over a module (functions looked up by name, each analysed once per call)."""

    def __init__(self, module: ModuleOp, physical: bool):
        self.module = module
        self.size = _ShapeSize(physical)
        self.functions = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
        self.ops: list[OpCost] = []
        self.recorded: set[int] = set()
        self.stack: list[str] = []
        self.function_props: dict[str, Properties] = {}
        self.dead: set[int] = set()

    def leaf_size(self, type_: Attribute) -> int:
        """Bytes of the arrays of a result (a tuple-typed result counts its elements, as jax's analysis does)."""
        if isinstance(type_, TupleType):
            return sum(self.leaf_size(t) for t in type_.types)
        return self.size(type_)

    def function(self, name: str) -> Properties:
        """Properties of the function ``name`` (XLA's ``ProcessSubcomputation`` of a called computation)."""
        props = self.function_props.get(name)
        if props is not None:
            return props
        fn = self.functions.get(name)
        if fn is None:
            raise XlaError(f"cost analysis: function @{name} is not defined in the module")
        if name in self.stack:
            raise XlaError(f"cost analysis: @{name} calls itself (recursion has no XLA cost)")
        self.stack.append(name)
        try:
            props = self.region(fn.body, name, 0)
        finally:
            self.stack.pop()
        self.function_props[name] = props
        return props

    def region(self, region: Region, fn_name: str, depth: int) -> Properties:
        """The sum of the properties of the ops of ``region``'s block (a computation's properties)."""
        total = Properties()
        for block in region.blocks:
            live = _live_ops(block)
            for op in block.ops:
                if id(op) not in live:
                    self.dead.add(id(op))
                    continue
                props = self.op(op, fn_name, depth)
                for key, value in props.items():
                    total.add(key, value)
        return total

    def op(self, op: Operation, fn_name: str, depth: int) -> Properties:
        """Properties of one op: XLA's ``Preprocess`` defaults, then its rule."""
        props = Properties()
        rule = rule_for(op)
        if rule is not _no_instruction and rule is not _return:
            # Several results are XLA's tuple-shaped instruction: measured, jax's analysis counts their arrays.
            out = sum(self.leaf_size(r.type) for r in op.results)
            total = _F32(out)
            props.set(OUT_BYTES, out)
            for i, operand in enumerate(op.operands):
                size = self.size(operand.type)
                total = _F32(total + _F32(size))
                props.set(_operand_bytes_key(i), size)
                props.set(_utilization_key(i), 1.0)
            props.set(BYTES, total)
        self.current = (fn_name, depth)
        rule(op, self, props)
        if rule is not _no_instruction and id(op) not in self.recorded:
            self.recorded.add(id(op))
            self.ops.append(OpCost(op, _label(op), fn_name, depth, props))
        return props

    def sub(self, region: Region) -> Properties:
        """Properties of a region of the op being analysed (its nested ops are recorded one level deeper)."""
        fn_name, depth = self.current
        props = self.region(region, fn_name, depth + 1)
        self.current = (fn_name, depth)
        return props


def _live_ops(block) -> set[int]:
    """Ids of the ops of ``block`` XLA's HLO keeps: the terminator, ops with effects, and every op whose results
    they use (XLA's converted module has no dead code, so dead ops cost nothing)."""
    from .purity import is_pure

    live: set[int] = set()
    needed: set[int] = set()
    for op in reversed(list(block.ops)):
        if op is block.last_op or not is_pure(op) or any(id(r) in needed for r in op.results):
            live.add(id(op))
            for inner in op.walk():
                for operand in inner.operands:
                    needed.add(id(operand))
    return live


def _label(op: Operation) -> str:
    return op.name


def _name_ops(module: ModuleOp, ops: list[OpCost]) -> None:
    """Label each op with its first result as xDSL prints it (``%3 = hlo.dot_general``)."""
    from .layouts import _value_table

    table = _value_table(module)
    for c in ops:
        if c.op.results:
            name = table.get(c.op.results[0], "").split(" ", 1)[0]
            c.label = f"{name} = {c.op.name}" if name else c.op.name


# ----------------------------------------------------------------------------
# The rules (XLA's Handle* methods), keyed by op class
# ----------------------------------------------------------------------------


def _default(op, a, p) -> None:
    """Bytes of the operands and results, no arithmetic (reshape, broadcast, pad, concatenate, copy, ...)."""


def _no_instruction(op, a, p) -> None:
    """Not an XLA instruction (a function's return with one value; terminators)."""


def _no_bytes(p: Properties, op: Operation) -> None:
    p.set(BYTES, 0)
    p.set(OUT_BYTES, 0)
    for i in range(len(op.operands)):
        p.set(_operand_bytes_key(i), 0)


def _constant(op, a, p) -> None:
    """``HandleConstant``: constants are not read from memory."""
    p.set(BYTES, 0)
    p.set(OUT_BYTES, 0)


def _pointer_forward(op, a, p) -> None:
    """``HandleGetTupleElement`` / ``HandleBitcast`` / ``HandleAfterAll``: no data touched."""
    _no_bytes(p, op)


_TRANSCENDENTAL_OPS = (
    ew.ExpOp, ew.LogOp, ew.LogisticOp, ew.PowOp, ew.SqrtOp, ew.CbrtOp, ew.RsqrtOp, ew.TanhOp, ew.SineOp,
    ew.CosineOp, ew.Expm1Op, ew.Log1pOp, ew.Atan2Op, ew.TanOp, ew.ErfOp,
)
"""XLA's transcendental opcodes (``HandleElementwiseOp``: exp, log, logistic, power, sqrt, cbrt, rsqrt, tanh,
sin, cos, expm1, log1p, atan2, tan, erf; acosh has no hlo op here): one count each per element, not flops."""


def _elementwise(op, a, p) -> None:
    """``HandleElementwiseOp``: one flop (or transcendental) per result element."""
    count = _elements(op.results[0].type)
    p.set(TRANSCENDENTALS if isinstance(op, _TRANSCENDENTAL_OPS) else FLOPS, count)


def _convert(op, a, p) -> None:
    """``HandleConvert`` (elementwise); a convert to the operand's own type is no instruction (XLA's builder
    returns the operand), so it costs nothing."""
    if op.operands[0].type == op.results[0].type:
        p.clear()
        return
    _elementwise(op, a, p)


def _tuple(op, a, p) -> None:
    """``HandleTuple``: only the tuple's pointer table is written. A tuple of exactly the results of one op
    is that op's tuple-shaped result in XLA (the HLO importer spells it so): no instruction of its own."""
    owners = {id(o.owner) for o in op.operands}
    if (len(owners) == 1 and op.operands and isinstance(op.operands[0].owner, Operation)
            and len(op.operands[0].owner.results) == len(op.operands) > 1
            and all(o is r for o, r in zip(op.operands, op.operands[0].owner.results))):
        p.clear()
        return
    size = a.size(op.results[0].type)
    p.set(BYTES, size)
    p.set(OUT_BYTES, size)
    for i in range(len(op.operands)):
        p.set(_operand_bytes_key(i), 0)


def _return(op, a, p) -> None:
    """A return of several values is XLA's root ``tuple`` of them (one pointer each)."""
    if len(op.operands) < 2:
        return
    size = POINTER_SIZE * len(op.operands)
    p.set(BYTES, size)
    p.set(OUT_BYTES, size)
    for i in range(len(op.operands)):
        p.set(_operand_bytes_key(i), 0)
        p.set(_utilization_key(i), 1.0)


def _slice(op, a, p) -> None:
    """``HandleSlice``: the output is read and written."""
    out = a.size(op.results[0].type)
    p.set(BYTES, _F32(out) * 2)
    p.set(OUT_BYTES, out)
    p.set(_operand_bytes_key(0), out)
    p.set(_utilization_key(0), _F32(1.0 * _elements(op.results[0].type) / max(_elements(op.operands[0].type), 1)))


def _dynamic_slice(op, a, p) -> None:
    """``HandleDynamicSlice``: the output twice and the first start index."""
    out = a.size(op.results[0].type)
    index = a.size(op.operands[1].type) if len(op.operands) > 1 else 0
    p.set(BYTES, out * 2 + index)
    p.set(OUT_BYTES, out)
    p.set(_operand_bytes_key(0), out)
    p.set(_operand_bytes_key(1), index)
    p.set(_utilization_key(0), _F32(1.0 * _elements(op.results[0].type) / max(_elements(op.operands[0].type), 1)))


def _dynamic_update_slice(op, a, p) -> None:
    """``HandleDynamicUpdateSlice``: the update twice and the first start index (operand 0 is the output)."""
    update = a.size(op.operands[1].type)
    index = a.size(op.operands[2].type) if len(op.operands) > 2 else 0
    p.set(BYTES, update * 2 + index)
    p.set(OUT_BYTES, update)
    p.set(_operand_bytes_key(0), 0)
    p.set(_operand_bytes_key(1), update)
    p.set(_operand_bytes_key(2), index)
    n_out = _elements(op.results[0].type)
    p.set(_utilization_key(0), _F32(1.0 * (n_out - _elements(op.operands[1].type)) / max(n_out, 1)))


def _dot(op, a, p) -> None:
    """``HandleDot``: an FMA (2 flops) per result element per contracted element."""
    lhs = _dims(op.operands[0])
    if isinstance(op, linalg.DotGeneralOp):
        contracting = ints(op.properties.get("lhs_contracting_dimensions"))
    else:
        contracting = (len(lhs) - 1,) if lhs else ()
    width = math.prod(lhs[d] for d in contracting)
    p.set(FLOPS, 2 * _elements(op.results[0].type) * width)


def _convolution(op, a, p) -> None:
    """``HandleConvolution``: XLA's ``GetConvolutionFlops`` (valid kernel positions per output element)."""
    p.set(FLOPS, convolution_flops(op))


def convolution_flops(op) -> int:
    """Flops of an ``hlo.convolution`` as XLA's ``HloCostAnalysis::GetConvolutionFlops`` counts them."""
    props = op.properties
    lhs, rhs, out = _dims(op.operands[0]), _dims(op.operands[1]), _dims(op.results[0])

    def num(name):
        return props[name].value.data

    kernel_spatial = ints(props.get("kernel_spatial_dimensions"))
    window = win.Window.from_props(op.name, props, len(kernel_spatial), win.CONVOLUTION_PROPS,
                                   dimensions=[rhs[d] for d in kernel_spatial])
    input_feature = lhs[num("input_feature_dimension")]
    output_feature = out[num("output_feature_dimension")]
    batch = lhs[num("input_batch_dimension")]
    in_spatial = ints(props.get("input_spatial_dimensions"))
    out_spatial = ints(props.get("output_spatial_dimensions"))
    if kernel_spatial:
        kernel_limits = [rhs[d] for d in kernel_spatial]
        output_limits = [out[d] for d in out_spatial]
        input_limits = [lhs[d] for d in in_spatial]
        dims = list(zip(window.strides, window.padding, window.base_dilations, window.window_dilations))
    else:
        kernel_limits, output_limits, input_limits = [1], [1], [1]
        dims = [(1, (0, 0), 1, 1)]
    counts = []
    for s, (stride, (pad_low, pad_high), base_dil, win_dil) in enumerate(dims):
        i_lim, o_lim, k_lim = input_limits[s], output_limits[s], kernel_limits[s]
        if (i_lim == o_lim and k_lim == o_lim and i_lim == base_dil and win_dil == 1
                and max(1, i_lim - 1) == stride and pad_low == 0 and pad_high == 0):
            counts.append(i_lim)
            continue
        if (i_lim == 1 and k_lim == o_lim and win_dil == 1 and base_dil == 1 and stride == 1
                and pad_high == o_lim - 1 and pad_low == o_lim - 1):
            counts.append(o_lim)
            continue
        valid = 0
        for k in range(k_lim):
            if stride == 1 and base_dil == 1:
                base = pad_low - k * win_dil
                valid += max(min(i_lim + base, o_lim) - max(base, 0), 0)
                continue
            for o in range(o_lim):
                undilated = o * stride - pad_low + k * win_dil
                index = undilated // base_dil if base_dil > 1 else undilated
                if base_dil > 1 and undilated != int(undilated / base_dil) * base_dil:
                    continue  # (C++ division truncates toward zero)
                if base_dil > 1:
                    index = int(undilated / base_dil)
                if 0 <= index < i_lim:
                    valid += 1
        counts.append(valid)
    fgc = num("feature_group_count")
    bgc = num("batch_group_count")
    return 2 * (input_feature // fgc) * output_feature * (batch // bgc) * math.prod(counts)


def _fft(op, a, p) -> None:
    """``HandleFft``: 2 * 4 * prod(floor(log2(length))) flops per element of the operand."""
    logs = 1
    for n in ints(op.properties.get("fft_length")):
        logs *= max(int(n).bit_length() - 1, 0) if n > 0 else 0
    p.set(FLOPS, 2 * 4 * logs * _elements(op.operands[0].type))


def _triangular_solve(op, a, p) -> None:
    """``HandleTriangularSolve``: half of ``a`` read; 2 * n * elements(b) flops."""
    a_size, b_size = a.size(op.operands[0].type), a.size(op.operands[1].type)
    out = a.size(op.results[0].type)
    total = _F32(out)
    total = _F32(total + _F32(_F32(a_size) / _F32(2)))
    total = _F32(total + _F32(b_size))
    p.set(BYTES, total)
    p.set(OUT_BYTES, out)
    p.set(_operand_bytes_key(0), b_size)  # (XLA writes operand 1's size into operand 0's key)
    p.set(FLOPS, 2 * _dims(op.operands[0])[-1] * _elements(op.operands[1].type))


def _cholesky(op, a, p) -> None:
    """``HandleCholesky``: half of the operand read, half written; n * elements / 3 flops."""
    size = a.size(op.operands[0].type)
    half = _F32(_F32(size) / _F32(2))
    p.set(BYTES, _F32(half + half))
    p.set(OUT_BYTES, half)
    p.set(_operand_bytes_key(0), half)
    p.set(FLOPS, (_dims(op.operands[0])[-1] * _elements(op.operands[0].type)) // 3)


def _times_sub(p: Properties, sub: Properties, count: int) -> None:
    for key, value in sub.items():
        if _copied(key):
            p.set(key, _F32(value) * _F32(count))


def _reduce(op, a, p) -> None:
    """``HandleReduce``: the reducer's cost times (input elements - output elements)."""
    sub = a.sub(op.regions[0])
    count = _elements(op.operands[0].type) - _elements(op.results[0].type)
    _times_sub(p, sub, count)


def _map(op, a, p) -> None:
    """``HandleMap``: the mapped computation's cost per result element."""
    _times_sub(p, a.sub(op.regions[0]), _elements(op.results[0].type))


def _reduce_window(op, a, p) -> None:
    """``HandleReduceWindow``: the reducer's cost times (window size - 1) per output element, or XLA's count
    for a window that reduces one whole dimension and broadcasts it back."""
    sub = a.sub(op.regions[0])
    rank = len(_dims(op.operands[0]))
    window = win.Window.from_props(op.name, op.properties, rank, win.REDUCE_WINDOW_PROPS)
    window_count = math.prod(window.dimensions)
    out_shape = _dims(op.results[0])
    out_count = math.prod(out_shape)
    count = (window_count - 1) * out_count
    reducing = sum(1 for d in window.dimensions if d != 1)
    padded = sum(1 for lo, hi in window.padding if lo != 0 or hi != 0)
    if reducing == 1 and padded == 1 and len(op.results) == 1:
        for d, (size, (lo, hi)) in enumerate(zip(window.dimensions, window.padding)):
            if size != 1 and lo != 0 and hi != 0 and lo == hi and size == 2 * lo + 1:
                if lo == out_shape[d] - 1:
                    window_count = out_shape[d]
                    count = out_count // window_count + (window_count - 1)
                break
    _times_sub(p, sub, count)


def _select_and_scatter(op, a, p) -> None:
    """``HandleSelectAndScatter``: select (window - 1) times and scatter once per source element."""
    select, scatter = a.sub(op.regions[0]), a.sub(op.regions[1])
    rank = len(_dims(op.operands[0]))
    window = win.Window.from_props(op.name, op.properties, rank, win.SELECT_AND_SCATTER_PROPS)
    source = _elements(op.operands[1].type)
    selects = source * (math.prod(window.dimensions) - 1)
    for key, value in select.items():
        if _copied(key):
            p.add(key, _F32(value) * _F32(selects))
    for key, value in scatter.items():
        if _copied(key):
            p.add(key, _F32(value) * _F32(source))


def _gather(op, a, p) -> None:
    """``HandleGather``: a copy of the output's size and a read of the indices; no flops."""
    out = a.size(op.results[0].type)
    indices = a.size(op.operands[1].type)
    p.set(BYTES, out * 2 + indices)
    p.set(_operand_bytes_key(0), out)
    p.set(_operand_bytes_key(1), indices)
    p.set(_utilization_key(0), _F32(1.0 * _elements(op.results[0].type) / max(_elements(op.operands[0].type), 1)))
    p.set(OUT_BYTES, out)


def _scatter(op, a, p) -> None:
    """``HandleScatter``: 3 times the updates (input, output, updates) and the indices; the update
    computation's cost per update element."""
    n = len(op.results)
    updates = op.operands[n + 1:]
    total = 0
    for i, u in enumerate(updates):
        size = a.size(u.type)
        p.set(_operand_bytes_key(i), size)
        p.set(_operand_bytes_key(n + 1 + i), size)
        total += size
    indices = a.size(op.operands[n].type)
    p.set(_operand_bytes_key(n), indices)
    p.set(BYTES, total * 3 + indices)
    p.set(OUT_BYTES, total)
    _times_sub(p, a.sub(op.regions[0]), _elements(updates[0].type))


def _sort(op, a, p) -> None:
    """``HandleSort``: n * ceil(log2(n)) flops for the n elements of the first operand."""
    n = _elements(op.operands[0].type)
    p.set(FLOPS, n * ((n - 1).bit_length() if n > 1 else 0))


def _while(op, a, p) -> None:
    """``HandleWhile``: one iteration: the body's and the condition's properties, all keys."""
    cond, body = a.sub(op.regions[0]), a.sub(op.regions[1])
    p.clear()
    for key, value in body.items():
        p.add(key, value)
    for key, value in cond.items():
        p.add(key, value)


def _conditional(op, a, p) -> None:
    """``HandleConditional``: the maximum over the branches, key by key."""
    p.clear()
    for i, region in enumerate(op.regions):
        props = a.sub(region)
        if i == 0:
            p.update(props)
            continue
        for key, value in props.items():
            p.set(key, max(p.get_(key), value))


def _call(op, a, p) -> None:
    """``HandleCall``: the called function's properties (bytes included)."""
    callee = getattr(op, "callee", None) or op.properties.get("decomposition") or op.properties.get("callee")
    name = callee.string_value() if hasattr(callee, "string_value") else str(callee).lstrip("@")
    sub = a.function(name)
    p.clear()
    p.update(sub)


def _fusion(op, a, p) -> None:
    """``HandleFusion``: the fused computation's flops and transcendentals; bytes: each output written once (a
    dynamic-update-slice root only its update), constants of more than one element read, and each parameter
    read as its users in the fused computation read it (``FusionParameterReadBytes``: a slice reads its
    output's size, a dynamic slice its output and its indices once, a dynamic-update-slice does not read the
    buffer it updates, broadcasts and reshapes read the parameter each, any other users share one read)."""
    fn = a.functions.get(op.callee.string_value())
    sub = a.function(op.callee.string_value())
    p.clear()
    for key, value in sub.items():
        p.set(key, value)
    total = _F32(0)
    block = fn.body.block
    returned = list(block.last_op.operands) if block.last_op is not None else []
    for i, result in enumerate(op.results):
        root = returned[i].owner if i < len(returned) else None  # (a Block when a parameter is returned)
        if isinstance(root, ix.DynamicUpdateSliceOp):
            size = a.size(root.operands[1].type)
        else:
            size = a.leaf_size(result.type)
        total = _F32(total + _F32(size))
    p.set(OUT_BYTES, total)
    for inner in block.ops:
        if isinstance(inner, const.ConstantOp) and _elements(inner.results[0].type) > 1:
            total = _F32(total + _F32(a.size(inner.results[0].type)))
    for i, param in enumerate(block.args):
        size = _parameter_read_bytes(param, a)
        p.set(_operand_bytes_key(i), size)
        total = _F32(total + _F32(size))
    p.set(BYTES, total)


def _parameter_read_bytes(param, a) -> int:
    """XLA's ``FusionParameterReadBytes`` of a fused computation's parameter."""
    size = 0
    seen_trivial = False
    users = []
    for use in param.uses:
        if use.operation not in users:
            users.append(use.operation)
    for user in users:
        if isinstance(user, dm.SliceOp):
            size += a.size(user.results[0].type)
        elif isinstance(user, ix.DynamicSliceOp):
            if user.operands[0] is param:
                size += a.size(user.results[0].type)
            elif not seen_trivial:
                seen_trivial = True
                size += a.size(param.type)
        elif isinstance(user, ix.DynamicUpdateSliceOp):
            if user.operands[0] is not param and not seen_trivial:
                seen_trivial = True
                size += a.size(param.type)
        elif isinstance(user, (dm.BroadcastInDimOp, dm.BroadcastOp, dm.ReshapeOp)):
            size += a.size(param.type)
        elif isinstance(user, (func.ReturnOp, cf.ReturnOp)):
            continue  # (a parameter returned as is has no user instruction in XLA)
        elif not seen_trivial:
            seen_trivial = True
            size += a.size(param.type)
    return size


def _custom_call(op, a, p) -> None:
    """``HandleCustomCall``: unknown cost, which XLA writes as -1 flops and -1 bytes."""
    p.set(BYTES, -1)
    p.set(OUT_BYTES, -1)
    for i in range(len(op.operands)):
        p.set(_operand_bytes_key(i), -1)
    p.set(FLOPS, -1)


def _rng(op, a, p) -> None:
    """``HandleRng``: one transcendental per element generated."""
    p.set(TRANSCENDENTALS, _elements(op.results[0].type))


def _rng_bit_generator(op, a, p) -> None:
    """``HandleRngBitGenerator``: one transcendental per element of the state and the output."""
    p.set(TRANSCENDENTALS, sum(_elements_recursive(r.type) for r in op.results))


def _all_reduce(op, a, p) -> None:
    """``HandleAllReduce``: one flop per output element (XLA assumes 2 replicas)."""
    flops = sum(_elements_recursive(r.type) for r in op.results)
    out = sum(a.size(r.type) for r in op.results if isinstance(r.type, TensorType))
    total = out + sum(a.size(o.type) for o in op.operands)
    p.set(FLOPS, flops)
    p.set(OUT_BYTES, out)
    p.set(BYTES, total)


def _transpose(op, a, p) -> None:
    """``HandleTranspose``: a transpose that is a bitcast (the permutation keeps the memory order) touches no memory."""
    perm = ints(op.properties.get("permutation"))
    in_type, out_type = op.operands[0].type, op.results[0].type
    in_m2m = _m2m(in_type)
    out_m2m = _m2m(out_type)
    if tuple(perm.index(d) for d in in_m2m) == out_m2m:
        _no_bytes(p, op)


def _m2m(type_) -> tuple[int, ...]:
    layout = layout_of(type_)
    if layout is not None:
        return layout.minor_to_major
    return tuple(range(len(type_.get_shape()) - 1, -1, -1))


def _async_start(op, a, p) -> None:
    """``HandleAsyncStart``: the cost of the op it starts."""
    if op.regions:
        sub = a.sub(op.regions[0])
        p.clear()
        p.update(sub)


def _infeed(op, a, p) -> None:
    """``HandleInfeed``: the bytes received."""
    size = sum(a.size(r.type) for r in op.results)
    p.set(OUT_BYTES, size)
    p.set(BYTES, size)


def _outfeed(op, a, p) -> None:
    """``HandleOutfeed``: the bytes sent."""
    total = 0
    for i, o in enumerate(op.operands):
        size = a.size(o.type)
        p.set(_operand_bytes_key(i), size)
        total += size
    p.set(BYTES, total)


COST_RULES: dict[type, Rule] = {
    const.ConstantOp: _constant,
    const.IotaOp: _default,
    ew.UnaryElementwiseOp: _elementwise,
    ew.BinaryElementwiseOp: _elementwise,
    ew.CompareOp: _elementwise,
    ew.SelectOp: _elementwise,
    ew.ClampOp: _elementwise,
    conv.ConvertOp: _convert,
    conv.BitcastConvertOp: _elementwise,
    nm.ReducePrecisionOp: _elementwise,
    cf.TupleOp: _tuple,
    cf.GetTupleElementOp: _pointer_forward,
    dm.BitcastOp: _pointer_forward,
    fx.AfterAllOp: _pointer_forward,
    dm.SliceOp: _slice,
    dm.TransposeOp: _transpose,
    ix.DynamicSliceOp: _dynamic_slice,
    ix.DynamicUpdateSliceOp: _dynamic_update_slice,
    ix.GatherOp: _gather,
    ix.ScatterOp: _scatter,
    linalg.DotOp: _dot,
    linalg.DotGeneralOp: _dot,
    win.ConvolutionOp: _convolution,
    win.ReduceWindowOp: _reduce_window,
    win.SelectAndScatterOp: _select_and_scatter,
    nm.FftOp: _fft,
    nm.TriangularSolveOp: _triangular_solve,
    nm.CholeskyOp: _cholesky,
    nm.RngOp: _rng,
    nm.RngBitGeneratorOp: _rng_bit_generator,
    red.ReduceOp: _reduce,
    red.MapOp: _map,
    sorting.SortOp: _sort,
    cf.WhileOp: _while,
    cf.ConditionalOp: _conditional,
    cf.CallOp: _call,
    func.CallOp: _call,
    fx.CompositeOp: _call,
    cf.FusionOp: _fusion,
    cf.AsyncStartOp: _async_start,
    fx.CustomCallOp: _custom_call,
    fx.InfeedOp: _infeed,
    fx.OutfeedOp: _outfeed,
    coll.AllReduceOp: _all_reduce,
    func.ReturnOp: _return,
    cf.ReturnOp: _return,
}
"""Op class -> its cost rule (XLA's ``HloCostAnalysis::Handle*``); a class not listed takes the rule of its
nearest listed base class, else the default: the bytes of its operands and results, no arithmetic (XLA's
rule for reshape, broadcast, pad, concatenate, reverse, copy, iota, batch-norm, most collectives)."""

_RULE_CACHE: dict[type, Rule] = {}


def rule_for(op: Operation) -> Rule:
    """The :data:`COST_RULES` entry of ``op``'s class (searching its base classes)."""
    cls = type(op)
    rule = _RULE_CACHE.get(cls)
    if rule is None:
        rule = next((COST_RULES[c] for c in cls.__mro__ if c in COST_RULES), _default)
        _RULE_CACHE[cls] = rule
    return rule


def _entry_name(module: ModuleOp, entry: str | None) -> str:
    names = [f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)]
    if entry is not None:
        if entry not in names:
            raise XlaError(f"cost analysis: no function @{entry} (functions: {', '.join(names) or 'none'})")
        return entry
    if "main" in names:
        return "main"
    public = [f.sym_name.data for f in module.ops if isinstance(f, func.FuncOp)
              and (f.sym_visibility is None or f.sym_visibility.data != "private")]
    if public:
        return public[0]
    if names:
        return names[0]
    raise XlaError("cost analysis: the module has no function")


def cost_analysis(module: ModuleOp, entry: str | None = None, physical: bool = False) -> CostReport:
    """Flops, transcendentals and bytes accessed of ``module``'s entry function (``main``, else its first
    public function), per op and in total, as XLA's ``HloCostAnalysis`` counts them (see the module
    docstring for what equals jax's ``lower(...).cost_analysis()`` and what does not).

    ``physical=True`` counts bytes with tile padding (the layouts' :func:`xla_dialect.layout.byte_size`,
    a TPU's shape size function) instead of XLA CPU's logical ``ByteSizeOf``.
    """
    if not isinstance(module, ModuleOp):
        raise XlaError(f"cost_analysis expects a builtin.module, got {type(module).__name__}")
    name = _entry_name(module, entry)
    analysis = _Analysis(module, physical)
    analysis.stack.append(name)
    fn = analysis.functions[name]
    totals = analysis.region(fn.body, name, 0)
    analysis.stack.pop()
    ordered = _program_order(module, analysis.ops)
    _name_ops(module, ordered)
    return CostReport({k: float(v) for k, v in totals.items()}, ordered, name)


def _program_order(module: ModuleOp, ops: list[OpCost]) -> list[OpCost]:
    by_id = {id(c.op): c for c in ops}
    out = []
    for op in module.walk():
        c = by_id.get(id(op))
        if c is not None:
            out.append(c)
    return out


# ----------------------------------------------------------------------------
# Roofline
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Chip:
    """Peak arithmetic and memory bandwidth of a chip (per chip, dense, no sparsity)."""

    name: str
    flops_per_second: float
    """Peak flops per second at the precision named in ``precision``."""
    bytes_per_second: float
    """Peak memory (HBM / DRAM) bandwidth."""
    precision: str
    source: str
    """Where the figures come from."""


CHIPS: dict[str, Chip] = {
    # Google Cloud TPU documentation, "TPU v4": 275 TFLOPS (bf16/int8) peak per chip, 1200 GB/s HBM2.
    # https://cloud.google.com/tpu/docs/v4
    "tpu-v4": Chip("tpu-v4", 275e12, 1200e9, "bf16", "https://cloud.google.com/tpu/docs/v4"),
    # "TPU v5e": 197 TFLOPS bf16 per chip, 819 GB/s HBM2. https://cloud.google.com/tpu/docs/v5e
    "tpu-v5e": Chip("tpu-v5e", 197e12, 819e9, "bf16", "https://cloud.google.com/tpu/docs/v5e"),
    # "TPU v5p": 459 TFLOPS bf16 per chip, 2765 GB/s HBM. https://cloud.google.com/tpu/docs/v5p
    "tpu-v5p": Chip("tpu-v5p", 459e12, 2765e9, "bf16", "https://cloud.google.com/tpu/docs/v5p"),
    # "TPU v6e" (Trillium): 918 TFLOPS bf16 per chip, 1640 GB/s HBM. https://cloud.google.com/tpu/docs/v6e
    "tpu-v6e": Chip("tpu-v6e", 918e12, 1640e9, "bf16", "https://cloud.google.com/tpu/docs/v6e"),
    # NVIDIA A100 datasheet (SXM4 80GB): 19.5 TFLOPS FP32, 312 TFLOPS BF16 tensor core (dense), 2039 GB/s.
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    "a100": Chip("a100", 312e12, 2039e9, "bf16 tensor core, dense",
                 "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM datasheet)"),
    "a100-fp32": Chip("a100-fp32", 19.5e12, 2039e9, "fp32",
                      "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM datasheet)"),
    # NVIDIA H100 datasheet (SXM5): 989 TFLOPS BF16 tensor core dense (1979 with sparsity), 67 TFLOPS FP32,
    # 3.35 TB/s HBM3. https://www.nvidia.com/en-us/data-center/h100/
    "h100": Chip("h100", 989e12, 3350e9, "bf16 tensor core, dense",
                 "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM datasheet)"),
    "h100-fp32": Chip("h100-fp32", 67e12, 3350e9, "fp32",
                      "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM datasheet)"),
}
"""Published peak figures of common accelerators (sources in :attr:`Chip.source` and the comments)."""

_MEASURED: dict[str, Chip] = {}


def measure_cpu(seconds: float = 0.5) -> Chip:
    """This CPU, measured once per process: f32 matmul flops (NumPy's BLAS, all its threads) and the
    bandwidth of a large array copy (read + write bytes). Quick and noisy (other processes share the
    machine); a lower bound of the true peaks."""
    if "cpu" in _MEASURED:
        return _MEASURED["cpu"]
    n = 512
    x = np.ones((n, n), np.float32)
    best_flops = 0.0
    deadline = time.perf_counter() + seconds / 2
    while True:
        t0 = time.perf_counter()
        x @ x
        dt = time.perf_counter() - t0
        best_flops = max(best_flops, 2 * n**3 / max(dt, 1e-9))
        if time.perf_counter() > deadline:
            break
    src = np.ones(64 * 2**20 // 4, np.float32)  # 64 MiB: past most caches
    dst = np.empty_like(src)
    best_bw = 0.0
    deadline = time.perf_counter() + seconds / 2
    while True:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        dt = time.perf_counter() - t0
        best_bw = max(best_bw, 2 * src.nbytes / max(dt, 1e-9))
        if time.perf_counter() > deadline:
            break
    chip = Chip("cpu", best_flops, best_bw, "f32", "measured on this machine (passes.cost_analysis.measure_cpu)")
    _MEASURED["cpu"] = chip
    return chip


def _chip(chip: str | Chip) -> Chip:
    if isinstance(chip, Chip):
        return chip
    if chip == "cpu":
        return measure_cpu()
    found = CHIPS.get(chip)
    if found is None:
        raise XlaError(f"unknown chip {chip!r}; known: cpu (measured), {', '.join(CHIPS)}")
    return found


def roofline(report: CostReport | dict, chip: str | Chip = "cpu") -> dict[str, float | str]:
    """A roofline estimate of the program's time on ``chip`` (a name of :data:`CHIPS`, ``"cpu"`` for this
    machine measured, or a :class:`Chip`): the larger of flops / peak flops and bytes / bandwidth.

    Transcendentals count as flops here (one each). Returns the chip, both times, the estimate, the
    arithmetic intensity (flops per byte), the chip's ridge point and which bound applies.
    """
    c = _chip(chip)
    totals = report.totals if isinstance(report, CostReport) else report
    flops = max(totals.get(FLOPS, 0.0), 0.0) + max(totals.get(TRANSCENDENTALS, 0.0), 0.0)
    nbytes = max(totals.get(BYTES, 0.0), 0.0)
    compute = flops / c.flops_per_second
    memory = nbytes / c.bytes_per_second
    return {
        "chip": c.name,
        "precision": c.precision,
        "source": c.source,
        "peak flops/s": c.flops_per_second,
        "peak bytes/s": c.bytes_per_second,
        "compute seconds": compute,
        "memory seconds": memory,
        "seconds": max(compute, memory),
        "arithmetic intensity": flops / nbytes if nbytes else math.inf,
        "ridge point": c.flops_per_second / c.bytes_per_second,
        "bound": "compute" if compute >= memory else "memory",
    }
