"""``xla-small-loops``: the numerics XLA CPU gives ops inside the small while loops it compiles whole.

XLA CPU (jax 0.10.2) outlines a while loop into one kernel (``SmallWhileLoopHoistingPass``: a ``call``
tagged ``xla_cpu_small_call``, emitted by the legacy ``IrEmitter``) when nothing in it needs the runtime
(no convolution, custom call, infeed, outfeed, scatter or collective, at any depth; a dot is allowed in
jax 0.10.2: a loop of ``tan(v @ v)`` on f32[4, 4] is hoisted) and its
``HloCostAnalysis`` bytes (one iteration of condition and body, counted on the HLO XLA makes of the loop:
:mod:`passes.xla_loop_bytes` models its simplification, fusion and copy insertion) are below
``xla_cpu_small_while_loop_byte_threshold`` (1,024 by default;
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=N`` is read here too).
Measured: a ``fori_loop`` of ``tan`` on f32[123] is hoisted, on f32[124] it is not (8n + 37 bytes:
the counter's add 12, the compare 9, the 2-element tuple 16); with a second carried array 16n + 45,
with a loop-invariant operand 12n + 45 -- the estimate below gives exactly these.

The legacy emitter computes some ops differently from the fusion emitters used everywhere else
(read from the LLVM IR and object code, ``XLA_FLAGS=--xla_dump_to=DIR``):

* ``tan(x)`` is ``sin(x) / cos(x)`` (one ``sincosf``/``sincos`` call), not libm's ``tanf``/``tan``:
  f32 and f64 in their type, f16 rounding each of the three ops to f16, bf16 in f32 rounded once.
* ``cbrt(x)`` is ``copysign(pow(|x|, 1/3), x)`` with 1/3 rounded to the type (f16: 0.33325), not
  libm's ``cbrt``; bf16 in f32.
* f16 ``log1p`` is XLA's ``EmitLog1p`` in f16 arithmetic (rounded after each op; only the log of
  ``x + 1`` is XLA's f32 log), not the f32 formula rounded once.
* f16 ``rsqrt`` is ``1 / sqrt(x)`` in f16, not XLA's f32 estimate-and-Newton rounded once.

* Vector-matrix, matrix-vector and vector dots are emitted with 64-byte vectors (16 f32, 8 f64 lanes) where
  XLA's dot emitters elsewhere use 32-byte ones (measured on an AMD EPYC: the orders of
  ``lowering/kernels/small_dot.py`` with the wider vectors give every element and zero sign of jax.jit's loops,
  f32 and f64, ``[1, K] @ [K, N]`` and ``[M, K] @ [K, 1]`` for K up to 64, N up to 33, M up to 12) -- on CPUs
  LLVM tunes for 64-byte vectors; on an Intel Xeon, which it tunes for 32-byte ones, the 32-byte orders
  (``lowering.kernels.host.prefers_wide_vectors``).
* An f32/bf16 max/min with a denormal splat constant has no signed-zero fix-up on a single element either
  (``max(-0, 1e-40)`` is ``-0`` in the loop, ``+0`` in straight-line code and in loops XLA does not compile
  whole; ``lowering.kernels.scalar``'s denormal-constant definition applies from one element on).

* An add of a product that one fusion reads at two elements (``pad(f(u), low 1) + g(u)``, the Rosenbrock
  gradient) whose operands read different elements (``u = x[1:] - x[:-1] ** 2``) keeps its product rounded:
  LLVM shares the product between the two elements' copies (:data:`SHARED_PRODUCT`; ``contract-fma`` honours it).

Dots, max/min and selects in these loops are marked with the attribute :data:`SMALL_CALL` (the kernels, fused
loops and compiled loops read it); they are not rewritten. (A select: LLVM sees the loop's constants there, which
XLA moves out of larger loops as loaded values: ``lowering.kernels.scalar._cse``.)

* On hosts where LLVM computes bf16 natively (AVX512-BF16 with AMX: :func:`lowering.kernels.host.native_bf16`; an
  AMD EPYC with AVX512-BF16 alone rounds in software, measured), LLVM rounds an f32 result to bf16 there with the
  hardware conversion, which flushes
  a denormal to a zero of its sign (measured on a Xeon: bf16 ``expm1``, ``sin``, ``tanh`` of denormals in a loop
  of two trips are +-0, straight-line and in larger loops the denormal). bf16 arithmetic ops there are marked
  with ``BF16_FLUSHED_STORE`` (:mod:`lowering.kernels.elementwise`), whose kernels flush before rounding (fused
  groups leave them to the kernels); so are converts of f32 to bf16 (measured alike), including those this pass's
  own rewrites of bf16 ops write (each stands for the op's store).

* On the same hosts, a bf16 multiply whose result a bf16 add or subtract reads is one FMA rounded once
  to bf16 where LLVM computes the elements in scalar code (measured on a Xeon: ``x * 0.3 + x``, ``x * x + x``,
  ``(x * a + x) * b + x`` two FMAs, ``x * 1.7 - x * x``, ``(x - 0.3) - x * 0.3``; every element; on the same
  Xeon with ``--xla_cpu_max_isa=AVX512_BF16`` or lower, and elsewhere, each op rounds): XLA writes the bf16 ops
  as f32 ops between conversions, LLVM's InstCombine shrinks them to ``bfloat`` instructions, and its x86
  backend contracts ``fmul bfloat`` into ``fadd bfloat`` when it has the bf16 conversion. Not where an operand
  is a value XLA moves out of the loop (its f32 conversion moves out with it, and the op stays f32: ``x * y + x``,
  ``x * x + y``, ``x * (y * y) + x`` with ``y`` carried unchanged each round per op, measured; a constant the loop
  carries is no such value: XLA sinks it into the body),
  and not in vector code: LLVM's loop vectorizer rounds ``<8 x bfloat>`` ops one by one. Which elements are
  scalar code follows LLVM's full unrolling of the fusion's element loop (:func:`unrolled_element_loop`); such
  adds, subtracts and multiplies are marked :data:`BF16_SCALAR`, and ``contract-fma`` contracts them.

Ops the loop computes from values it carries unchanged (and constants) are not rewritten: XLA's
``WhileLoopInvariantCodeMotion`` moves them out of the loop first, and computes them as straight-line code
(:func:`loop_invariant_ops`; measured for tan, cbrt, f16 log1p and rsqrt, and for the bf16 stores of ``expm1``
and f32 -> bf16 converts, which keep their denormals; dots and max/min of invariant values are still marked: not
measured).

Others measured the same in both (f32/f64 rsqrt, log1p, exp, log, sin, cos, tanh, logistic, erf,
expm1, pow, atan2 of every float type). This pass rewrites those four ops, inside the while loops
XLA would hoist, into the ops that compute them there, so every path of the executor (kernels, fused
groups, compiled loops) uses the existing definitions of those ops. XLA removes loops that run at
most once (``WhileLoopSimplifier``): a loop whose counter visibly runs once is left alone.

Not reproduced: the model of XLA's passes covers the rules these loops need (module doc of
:mod:`passes.xla_loop_bytes`); XLA's other simplifications can change a count near the threshold.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, TensorType, UnitAttr
from collections.abc import Callable

from xdsl.ir import Operation, SSAValue

from xla_dialect.ops import collectives as co
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import effects as fx
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import indexing as ix
from xla_dialect.ops import windowed as wd
from xla_dialect.ops.base import ints, make_tensor, pred_type
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import WhileOp, loop_invariant_ops, moved_out_of_loop  # noqa: F401 (re-exported)
from xla_dialect.ops.data_movement import BroadcastInDimOp, PadOp, ReshapeOp, SliceOp
from xla_dialect.ops.linalg import DotGeneralOp, DotOp
from xla_dialect.types import element_type_named, numpy_dtype

from .base import PatternPass
from .quantized import computes_on_quantized
from .registry import register_pass
from .util import create, element_name, make_constant, tensor_type
from .xla_loop_bytes import _copied_into_several_fusions, live_state, loop_model_bytes, memoized

from lowering.kernels.elementwise import BF16_FLUSHED_STORE  # noqa: E402 - (read by the kernels)
from lowering.kernels.host import native_bf16  # noqa: E402
from lowering.kernels.small_dot import SMALL_CALL  # noqa: E402 - the attribute of marked ops (read by the kernels)

DEFAULT_THRESHOLD = 1024
"""XLA CPU's ``xla_cpu_small_while_loop_byte_threshold`` default (jax 0.10.2, measured above)."""

_UNAVAILABLE = frozenset({
    wd.ConvolutionOp, wd.DynamicConvOp, fx.CustomCallOp, fx.InfeedOp, fx.OutfeedOp, ix.ScatterOp,
    co.AllReduceOp, co.AllGatherOp, co.AllToAllOp, co.ReduceScatterOp, co.CollectivePermuteOp,
    co.CollectiveBroadcastOp, co.CollectiveReduceOp, fx.SendOp, fx.RecvOp,
})
"""Ops that keep XLA from hoisting a loop (``InstructionIsUnavailable``: they need the runtime)."""

_UNFUSED = frozenset({DotOp, DotGeneralOp})
"""Ops XLA keeps out of loop fusions: their operands and results are counted whole (measured: a loop of
``tan(v @ v)`` on f32[8, 8] is not hoisted, 768 + 512 + 37 bytes)."""

_FREE = frozenset({ConstantOp, ReshapeOp})
"""Ops whose result feeding a dot is no fusion of its own (a constant, a bitcast)."""

_FLAG = re.compile(r"xla_cpu_small_while_loop_byte_threshold=(\d+)")


def byte_threshold() -> int:
    """XLA's small-loop byte threshold in this process (``XLA_FLAGS`` can set it; 0 disables)."""
    found = _FLAG.findall(os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else DEFAULT_THRESHOLD


def _cone(block, roots: list[SSAValue], stop: frozenset = frozenset()) -> list[Operation]:
    """The ops of ``block`` that ``roots`` depend on, in program order (XLA removes the others); with
    ``stop``, not through ops of those classes or loops (their results are read from memory)."""
    needed: set[Operation] = set()
    stack = [v.owner for v in roots if isinstance(v.owner, Operation)]
    while stack:
        op = stack.pop()
        if op in needed or op.parent is not block:
            continue
        needed.add(op)
        stack.extend(v.owner for v in op.operands if isinstance(v.owner, Operation)
                     and not (stop and (type(v.owner) in stop or isinstance(v.owner, WhileOp))))
    return [op for op in block.ops if op in needed]


def while_bytes(op: WhileOp) -> int:
    """XLA's ``HloCostAnalysis`` bytes of the while loop ``op`` (one iteration), from a model of the HLO XLA makes
    of it (:mod:`passes.xla_loop_bytes`)."""
    return loop_model_bytes(op, live_state(op))[0]


def runs_at_most_once(op: WhileOp) -> bool:
    """Whether the loop is visibly a counted loop of at most one iteration (``i < c`` from a constant
    start, ``i + 1`` in the body), which XLA's while-loop simplifier removes."""
    cond = op.cond.block
    compare = cond.last_op.operands[0].owner
    if not isinstance(compare, ew.CompareOp) or compare.comparison_direction.data != "LT":
        return False
    counter, limit = compare.operands
    if counter.owner is not cond or not isinstance(limit.owner, ConstantOp):
        return False
    start = op.operands[counter.index].owner
    step = op.body.block.last_op.operands[counter.index].owner
    if not isinstance(start, ConstantOp) or not isinstance(step, ew.AddOp):
        return False
    if op.body.block.args[counter.index] not in step.operands:
        return False
    other = step.operands[1] if step.operands[0] is op.body.block.args[counter.index] else step.operands[0]
    if not isinstance(other.owner, ConstantOp):
        return False
    try:
        first, end, increment = (np.asarray(c.value.array).reshape(()).item()
                                 for c in (start, limit.owner, other.owner))
    except (ValueError, AttributeError):  # not a scalar constant
        return False
    return increment == 1 and end - first <= 1


def moved_out_of_its_loop(op: Operation) -> bool:
    """Whether XLA's ``WhileLoopInvariantCodeMotion`` moves ``op`` out of the while loop whose body block holds it
    (:func:`~xla_dialect.ops.control_flow.moved_out_of_loop`: computed from values the loop carries unchanged and
    constants) -- unless XLA removes the loop as running at most once (:func:`runs_at_most_once`). XLA computes
    such an op before the loop and stores its result: the FMA contraction, YNNPACK fusions and exps read it as a
    value of its own (``passes/fma_contraction.py``, ``passes/ynnpack_fusion.py``, ``passes/xla_numerics.py``)."""
    loop = op.parent_op()
    return (isinstance(loop, WhileOp) and op.parent is loop.body.block and not runs_at_most_once(loop)
            and moved_out_of_loop(op, loop))


SMALL_LOOP = "xla_cpu_small_loop"
"""The attribute (a bool) this pass puts on every ``hlo.while`` of a program it rewrites: whether XLA CPU compiles
the loop whole (:func:`is_small_loop`), decided once, on the program as the pass gets it -- the HLO XLA decides on,
before this pass writes ops in the forms XLA's emitter computes (which would change the model's count) -- and read
by ``contract-fma`` and :func:`is_small_loop` after it (the model costs up to ~0.1 s per loop; jax.random.gamma's
program asked it 124 times). A pass that changes a loop after this one must drop the mark."""


def is_small_loop(op: WhileOp, threshold: int | None = None) -> bool:
    """Whether XLA CPU compiles the while loop ``op`` whole (``xla_cpu_small_call``), by its rule: the
    :data:`SMALL_LOOP` mark where ``xla-small-loops`` put one and no ``threshold`` is given, else the model."""
    if threshold is None:
        mark = op.attributes.get(SMALL_LOOP)
        if isinstance(mark, IntegerAttr):
            return bool(mark.value.data)
    threshold = byte_threshold() if threshold is None else threshold
    if threshold <= 0 or runs_at_most_once(op):
        return False
    if any(type(inner) in _UNAVAILABLE for region in op.regions for inner in region.walk()):
        return False
    return while_bytes(op) < threshold


# ----------------------------------------------------------------------------
# The legacy emitter's forms of the ops it computes differently
# ----------------------------------------------------------------------------


class _Builder:
    """Creates ops before ``anchor``."""

    def __init__(self, anchor: Operation):
        self.anchor = anchor

    def op(self, cls, operands, result_type, props=None) -> SSAValue:
        new = create(cls, list(operands), props or {}, [result_type])
        self.anchor.parent.insert_op_before(new, self.anchor)
        return new.results[0]

    def splat(self, number, like: TensorType) -> SSAValue:
        dtype = numpy_dtype(like)
        new = make_constant(np.full(tuple(like.get_shape()), number, dtype=dtype), like)
        self.anchor.parent.insert_op_before(new, self.anchor)
        return new.results[0]


def _retyped(t: TensorType, name: str) -> TensorType:
    return tensor_type(element_type_named(name).mlir, t.get_shape())


def _tan(b: _Builder, x: SSAValue, t: TensorType) -> SSAValue:
    return b.op(ew.DivOp, [b.op(ew.SineOp, [x], t), b.op(ew.CosineOp, [x], t)], t)


def _cbrt(b: _Builder, x: SSAValue, t: TensorType) -> SSAValue:
    third = b.splat(np.asarray(1.0 / 3.0).astype(numpy_dtype(t)), t)
    root = b.op(ew.PowOp, [b.op(ew.AbsOp, [x], t), third], t)
    bits_name = {"f16": "s16", "f32": "s32", "f64": "s64"}[element_name(x)]
    bits_type = _retyped(t, bits_name)
    bits = b.op(cv.BitcastConvertOp, [x], bits_type)
    negative = b.op(ew.CompareOp, [bits, b.splat(0, bits_type)], make_tensor(pred_type(), t.get_shape()),
                    {"comparison_direction": StringAttr("LT"), "compare_type": StringAttr("SIGNED")})
    return b.op(ew.SelectOp, [negative, b.op(ew.NegOp, [root], t), root], t)  # copysign(root, x)


def _log1p_f16(b: _Builder, x: SSAValue, t: TensorType) -> SSAValue:
    """XLA's EmitLog1p, each op in f16: x - x²/2 + x³ P(x)/Q(x) for |x| < sqrt(2) - 1, else log(x + 1)."""
    from lowering.kernels.xla_math import _LOG1P_P, _LOG1P_Q  # the f64 coefficients XLA rounds to the type

    mul, add = ew.MulOp, ew.AddOp

    def horner(coeffs):
        p = b.splat(coeffs[0], t)
        for c in coeffs[1:]:
            p = b.op(add, [b.op(mul, [p, x], t), b.splat(c, t)], t)
        return p

    ratio = b.op(ew.DivOp, [horner(_LOG1P_P), horner(_LOG1P_Q)], t)
    x2 = b.op(mul, [x, x], t)
    cubic = b.op(mul, [b.op(mul, [x, x2], t), ratio], t)
    small = b.op(add, [x, b.op(add, [b.op(mul, [x2, b.splat(-0.5, t)], t), cubic], t)], t)
    large = b.op(ew.LogOp, [b.op(add, [x, b.splat(1.0, t)], t)], t)
    near = b.op(ew.CompareOp, [b.op(ew.AbsOp, [x], t), b.splat(np.sqrt(2.0) - 1.0, t)],
                make_tensor(pred_type(), t.get_shape()),
                {"comparison_direction": StringAttr("LT"), "compare_type": StringAttr("FLOAT")})
    return b.op(ew.SelectOp, [near, small, large], t)


def _rsqrt_f16(b: _Builder, x: SSAValue, t: TensorType) -> SSAValue:
    return b.op(ew.DivOp, [b.splat(1.0, t), b.op(ew.SqrtOp, [x], t)], t)


_FORMS = {
    (ew.TanOp, "f16"): _tan, (ew.TanOp, "f32"): _tan, (ew.TanOp, "f64"): _tan,
    (ew.CbrtOp, "f16"): _cbrt, (ew.CbrtOp, "f32"): _cbrt, (ew.CbrtOp, "f64"): _cbrt,
    (ew.Log1pOp, "f16"): _log1p_f16,
    (ew.RsqrtOp, "f16"): _rsqrt_f16,
}
"""(op class, element type) -> the legacy emitter's form. bf16 tan and cbrt: the f32 form between
conversions (XLA computes bf16 in f32 there)."""
_IN_F32 = {(ew.TanOp, "bf16"): _tan, (ew.CbrtOp, "bf16"): _cbrt}


def _rewrite(op: Operation) -> bool:
    key = (type(op), element_name(op.results[0]))
    form, wide = _FORMS.get(key), False
    if form is None:
        form, wide = _IN_F32.get(key), True
    if form is None or computes_on_quantized(op):
        return False
    b = _Builder(op)
    t = op.results[0].type
    x = op.operands[0]
    if wide:
        wide_type = _retyped(t, "f32")
        value = b.op(cv.ConvertOp, [form(b, b.op(cv.ConvertOp, [x], wide_type), wide_type)], t)
    else:
        value = form(b, x, t)
    op.results[0].replace_all_uses_with(value)
    op.detach()
    op.erase()
    return True


_REWRITTEN = frozenset(cls for cls, _ in (*_FORMS, *_IN_F32))
_MARKED = frozenset({DotOp, DotGeneralOp, ew.MaxOp, ew.MinOp, ew.SelectOp})

_BF16_STORED = frozenset({ew.AddOp, ew.SubOp, ew.MulOp, ew.DivOp, ew.PowOp, ew.Atan2Op, ew.RemOp, ew.ExpOp,
                          ew.Expm1Op, ew.LogOp, ew.Log1pOp, ew.LogisticOp, ew.SineOp, ew.CosineOp, ew.TanOp,
                          ew.TanhOp, ew.SqrtOp, ew.RsqrtOp, ew.CbrtOp, ew.ErfOp})
"""bf16 ops computed in f32 whose result LLVM rounds to bf16 with the hardware conversion in these loops on hosts
computing bf16 natively (flushing a denormal: :data:`lowering.kernels.elementwise.BF16_FLUSHED_STORE`); not sign moves
(``neg``, ``abs``: measured to keep denormals), max/min, compares and selects."""


def _candidates(module: Operation, small: Callable[[WhileOp], bool]) -> list[Operation]:
    found: list[Operation] = []
    seen: set[int] = set()
    for op in module.walk():
        if isinstance(op, WhileOp) and small(op):
            # (a rewritten op XLA hoists out of the loop is computed as straight-line code there, measured: a loop
            # of v * 0.5 + tan(b) with b carried unchanged gives tan's own bits on an Intel Xeon, the sin / cos
            # form differed on 15 of 56 elements; f32 cbrt, f16 log1p and rsqrt alike. Marked ops: not measured.)
            hoisted = loop_invariant_ops(op)
            for region in op.regions:
                for inner in region.walk():
                    if id(inner) in seen or (type(inner) in _REWRITTEN and id(inner) in hoisted):
                        continue
                    if type(inner) in _REWRITTEN or type(inner) in _MARKED:
                        seen.add(id(inner))
                        found.append(inner)
    return found


def small_loop_numerics(module: ModuleOp, clone: bool = False, threshold: int | None = None) -> ModuleOp:
    """``module`` with the ops inside XLA's small while loops in the form XLA computes them there (a copy
    with ``clone``; ``module`` itself when nothing changes)."""
    threshold = byte_threshold() if threshold is None else threshold
    if threshold <= 0:
        return module
    flushed_stores = native_bf16() and any(
        op.results and _bf16_stored(op) for op in module.walk())
    shifted = any(isinstance(op, _SHIFTING) for op in module.walk())  # (SHARED_PRODUCT needs a pad or slice)
    if not flushed_stores and not shifted and not any(type(op) in _REWRITTEN or type(op) in _MARKED
                                                      for op in module.walk()):
        return module
    loops = [op for op in module.walk() if isinstance(op, WhileOp)]
    with memoized():  # (nested loops are modelled once, not again for each loop around them)
        decided = [is_small_loop(op, threshold) for op in loops]  # (once: SMALL_LOOP)
    small = _decisions(loops, decided)
    if (not any(_rewrite_key(op) or _unmarked(op) for op in _candidates(module, small))
            and not (flushed_stores and (_bf16_stores(module, small) or _bf16_scalar_ops(module, small)))
            and not (shifted and _shared_products(module, small))
            and all(_marked_as(loop, s) for loop, s in zip(loops, decided))):
        return module
    if clone:
        module = module.clone()
        loops = [op for op in module.walk() if isinstance(op, WhileOp)]  # (the clone's, in the same order)
        small = _decisions(loops, decided)
    for loop, s in zip(loops, decided):
        loop.attributes[SMALL_LOOP] = IntegerAttr.from_bool(s)
    for op in _candidates(module, small):
        if type(op) in _MARKED:
            op.attributes[SMALL_CALL] = UnitAttr()
        else:
            _rewrite(op)
    if shifted:
        for op in _shared_products(module, small):
            op.attributes[SHARED_PRODUCT] = UnitAttr()
    if native_bf16():
        for op in _bf16_stores(module, small):
            op.attributes[BF16_FLUSHED_STORE] = UnitAttr()
        for op in _bf16_scalar_ops(module, small):
            op.attributes[BF16_SCALAR] = UnitAttr()
    return module


def _decisions(loops: list[WhileOp], decided: list[bool]) -> Callable[[WhileOp], bool]:
    """Whether each of ``loops`` is small, as decided (parallel lists), as a predicate on the loops."""
    by_loop = {id(loop): s for loop, s in zip(loops, decided)}
    return lambda loop: by_loop[id(loop)]


def _marked_as(loop: WhileOp, small: bool) -> bool:
    """Whether ``loop`` carries the :data:`SMALL_LOOP` mark saying ``small``."""
    mark = loop.attributes.get(SMALL_LOOP)
    return isinstance(mark, IntegerAttr) and bool(mark.value.data) == small


def _bf16_stored(op: Operation) -> bool:
    """Whether LLVM rounds ``op``'s f32 value to bf16 with the hardware conversion in XLA's small loops: a bf16 op
    of :data:`_BF16_STORED`, or a convert of f32 to bf16 (measured: ``(c * 1.0).astype(bf16)`` of f32 denormals
    in a ``fori_loop`` of two trips is +-0, the denormal's bf16 rounding straight-line; f64 -> bf16 flushes
    everywhere through f32 already, f16 has no value below bf16's smallest normal)."""
    if element_name(op.results[0]) != "bf16":
        return False
    if isinstance(op, cv.ConvertOp):
        return element_name(op.operands[0]) == "f32"
    return type(op) in _BF16_STORED


def _bf16_stores(module: Operation, small: Callable[[WhileOp], bool]) -> list[Operation]:
    """The ops storing bf16 with the hardware conversion (:func:`_bf16_stored`) inside the loops XLA compiles
    whole, not yet marked; not those XLA hoists out of the loop (measured: ``expm1(v)`` and ``v.astype(bf16)`` of
    a carried-unchanged ``v`` keep the denormal, as straight-line code)."""
    found = []
    for op in module.walk():
        if isinstance(op, WhileOp) and small(op):
            hoisted = loop_invariant_ops(op)
            found += [inner for region in op.regions for inner in region.walk()
                      if inner.results and _bf16_stored(inner) and id(inner) not in hoisted
                      and BF16_FLUSHED_STORE not in inner.attributes]
    return found


# ----------------------------------------------------------------------------
# bf16 multiply-adds in scalar code (hosts computing bf16 natively)
# ----------------------------------------------------------------------------

BF16_SCALAR = "xla_cpu_bf16_scalar"
"""The attribute (unit) this pass puts on a bf16 ``add``, ``subtract`` or ``multiply`` inside a while loop XLA CPU
compiles whole, on hosts computing bf16 natively, that LLVM computes as a ``bfloat`` instruction in scalar code (module
doc): ``contract-fma`` contracts a marked multiply into a marked add or subtract (one FMA, rounded once)."""

UNROLL_THRESHOLD = 300
"""LLVM's full-unroll size threshold at ``-O3`` (``unroll-threshold-aggressive``): an element loop of ``N``
trips whose body costs ``b`` (besides its back-edge) is unrolled whole when ``b * N + 2 <= 300``."""

_ELEMENT_LOOP_BASE = 2
"""The element loop's own instructions per element besides loads, stores and arithmetic (measured with the
costs below: ``x * a + x`` on bf16[49] is unrolled, on bf16[50] vectorized -- 6 per element)."""

_BF16_COSTS = {
    ew.AddOp: 1, ew.SubOp: 1, ew.MulOp: 1, ew.NegOp: 1, ew.FloorOp: 1, ew.CeilOp: 1, ew.RoundEvenOp: 1,
    ew.CompareOp: 1, ew.SelectOp: 1, ew.AbsOp: 2, ew.MaxOp: 2, ew.MinOp: 2, ew.ExpOp: 3, ew.LogOp: 3,
    ew.SineOp: 3, ew.CosineOp: 3, ew.SqrtOp: 3, ew.TanhOp: 4, ew.RsqrtOp: 4, ew.Log1pOp: 4, ew.LogisticOp: 6,
    ew.SignOp: 8, ew.Expm1Op: 13, cv.ConvertOp: 1,
}
"""LLVM's size cost of each element-wise op of a bf16 fusion in XLA's small loops, per element, measured on a Xeon
(jax 0.10.2) as the largest element count whose loop of ``op(x) * a + x`` (or ``op`` applied to it) LLVM still
unrolls whole (read from the optimized IR: no ``<N x bfloat>`` instruction): 49 elements for cost 6 in all, 42
for 7, 37 for 8, 33 for 9, 29 for 10, 27 for 11, 24 for 12, 21 for 14, 15 for 19. A division by a constant
costs 3 (XLA multiplies by the f32 reciprocal; a division by a computed value measured 1 once, not listed); a
convert of f32 values 1 (a bf16 -> f32 -> bf16 round trip is removed: 0). Ops not listed (and fusions holding
them) are not estimated."""

_FREE_IN_FUSION = (ConstantOp, BroadcastInDimOp, ReshapeOp)
"""Ops of a fusion without an instruction per element (a constant splat, index arithmetic)."""


def _loop_roots(block) -> list[SSAValue]:
    """The values each of which XLA computes in a loop fusion of its own in the loop body ``block`` (as the
    estimate before :mod:`passes.xla_loop_bytes` counted them): the values the body returns changed, and the
    operands of dots."""
    returned = list(block.last_op.operands)
    roots = [v for i, v in enumerate(returned) if v is not block.args[i]]
    for op in block.ops:
        if type(op) in _UNFUSED:
            roots += [v for v in op.operands if isinstance(v.owner, Operation) and v.owner.parent is block]
    unique: list[SSAValue] = []
    for v in roots:
        if v not in unique and isinstance(v.owner, Operation) and type(v.owner) not in _UNFUSED | _FREE:
            unique.append(v)
    return unique


def _round_trip(op: Operation) -> bool:
    """Whether ``op`` is half of a bf16 -> f32 -> bf16 conversion pair (XLA removes both)."""
    if not isinstance(op, cv.ConvertOp):
        return False
    if element_name(op.operands[0]) == "f32" and isinstance(op.operands[0].owner, cv.ConvertOp):
        return element_name(op.operands[0].owner.operands[0]) == element_name(op.results[0])
    return element_name(op.results[0]) == "f32" and all(
        isinstance(use.operation, cv.ConvertOp)
        and element_name(use.operation.results[0]) == element_name(op.operands[0]) for use in op.results[0].uses)


class _LoopValues:
    """How the values of a small loop's body reach its fusions: as constants (XLA folds what it moves out of the
    loop when it depends on constants only) or as f32 values XLA converted before the loop (a value carried
    unchanged, or computed from one and moved out of the loop)."""

    def __init__(self, loop: WhileOp):
        self.loop = loop
        self.body = loop.body.block
        self.returned = list(self.body.last_op.operands)
        self.hoisted = loop_invariant_ops(loop)

    def moved(self, op: Operation) -> bool:
        return id(op) in self.hoisted

    def constant(self, value: SSAValue) -> bool:
        owner = value.owner
        if owner is self.body:  # (a constant carried unchanged: XLA's WhileLoopConstantSinking puts it in the body)
            return (self.returned[value.index] is value
                    and isinstance(self.loop.operands[value.index].owner, ConstantOp))
        return isinstance(owner, ConstantOp) or (isinstance(owner, Operation) and self.moved(owner)
                                                 and all(self.constant(v) for v in owner.operands))

    def wide(self, value: SSAValue) -> bool:
        owner = value.owner
        if owner is self.body:
            return self.returned[value.index] is value and not self.constant(value)
        return isinstance(owner, Operation) and self.moved(owner) and not self.constant(value)


def _op_cost(op: Operation, values: _LoopValues) -> int | None:
    if isinstance(op, _FREE_IN_FUSION) or _round_trip(op):
        return 0
    if isinstance(op, ew.DivOp) and values.constant(op.operands[1]):
        return 3
    return _BF16_COSTS.get(type(op))


def unrolled_whole(elements: int, cost: int) -> bool:
    """Whether LLVM unrolls an element loop of ``elements`` trips costing ``cost`` per element whole (scalar code):
    ``cost * elements + 2 <=`` :data:`UNROLL_THRESHOLD`."""
    return cost * elements + 2 <= UNROLL_THRESHOLD


def _scalar_code(shape: tuple[int, ...], cost: int) -> bool:
    """Whether LLVM computes every element of a loop fusion of ``shape`` in scalar code, its element loop costing
    ``cost`` per element (:func:`unrolled_element_loop`)."""
    if len(shape) <= 1 or (len(shape) == 2 and shape[0] == 1):
        return unrolled_whole(int(np.prod(shape, dtype=np.int64)), cost)
    if len(shape) != 2:
        return False
    rows, columns = shape
    # The inner loop unrolled whole; the outer one not vectorized: fewer than 16 trips that LLVM's vector factors
    # (4 and 8 here) do not divide need a scalar epilogue, which it does not make for such short loops.
    return columns >= 2 and rows < 16 and rows % 4 != 0 and unrolled_whole(columns, cost)


def unrolled_element_loop(loop: WhileOp, values: _LoopValues | None = None) -> dict[int, bool]:
    """For each op (by id) of the loop fusions of ``loop``'s body: whether LLVM computes every element of its fusion
    in scalar code. One-dimensional fusions of ``N`` elements (and ``[1, N]``, measured alike): when LLVM unrolls
    the element loop whole, ``cost * N + 2 <=`` :data:`UNROLL_THRESHOLD`, the cost per element ``2 + loads + 1 +
    sum of op costs`` (each load a value read from memory: a carried value, another fusion's result; one store,
    the fusion's result; op costs :data:`_BF16_COSTS`); past that LLVM vectorizes the loop and leaves a scalar
    remainder whose length follows its cost model (vector factor 8 or 16, an epilogue of 2, 4 or 8: measured, not
    estimated -- each op rounds there).

    Two dimensions ``[r, c]``: XLA emits a loop nest, whose inner loop LLVM unrolls (the one-dimensional limit:
    18 columns at cost 16, 12 at cost 24, measured) and whose outer loop it vectorizes over interleaved rows or
    not, by its cost model. Measured with 2, 4, 6, 12 and 20 ops per element: rows 2, 3, 5, 6, 7, 9, 10, 11, 13,
    14, 15 of 2 to 24 columns are scalar code (up to the small-loop byte threshold: 246 bf16 elements); bf16[4, 5]
    is one ``<20 x bfloat>`` multiply and add; rows 4, 8 and 16 of up to 8 columns are vectorized, of more columns
    by the number of ops; ``[r, 1]`` from 3 or 4 rows on; 12 rows of 2 to 20 columns are scalar code at 2 ops.
    Estimated as scalar code: rows below 16 and no multiple of 4, two columns or more, the inner loop unrolled;
    other shapes (and three or more dimensions) are not estimated: each op rounds there.

    False for a fusion holding an op whose cost is not known. An op in several fusions (XLA duplicates it into
    each) is scalar code only if it is in each of them."""
    values = values or _LoopValues(loop)
    decided: dict[int, bool] = {}
    for root in _loop_roots(values.body):
        shape = root.type.get_shape() if isinstance(root.type, TensorType) else ()
        cone = [op for op in _cone(values.body, [root], stop=_UNFUSED) if not values.moved(op)]
        members = set(map(id, cone))
        costs = [_op_cost(op, values) for op in cone]
        loads = {v for op in cone for v in op.operands
                 if not values.constant(v) and not (isinstance(v.owner, Operation) and id(v.owner) in members)}
        unrolled = (all(c is not None for c in costs)
                    and _scalar_code(shape, _ELEMENT_LOOP_BASE + len(loads) + 1 + sum(costs)))
        for op in cone:
            decided[id(op)] = decided.get(id(op), True) and unrolled
    return decided


def _bf16_scalar_ops(module: Operation, small: Callable[[WhileOp], bool]) -> list[Operation]:
    """The bf16 adds, subtracts and multiplies LLVM computes as ``bfloat`` instructions in scalar code inside the
    loops XLA compiles whole (module doc), not yet marked :data:`BF16_SCALAR`: in a fusion LLVM unrolls whole, not
    moved out of the loop, no operand an f32 value XLA converted before the loop (:class:`_LoopValues`)."""
    found = []
    for loop in module.walk():
        if not (isinstance(loop, WhileOp) and small(loop)):
            continue
        values = _LoopValues(loop)
        unrolled = unrolled_element_loop(loop, values)
        found += [op for op in values.body.ops
                  if isinstance(op, (ew.AddOp, ew.SubOp, ew.MulOp)) and element_name(op.results[0]) == "bf16"
                  and unrolled.get(id(op)) and not values.moved(op) and not any(map(values.wide, op.operands))
                  and BF16_SCALAR not in op.attributes and not computes_on_quantized(op)]
    return found


# ----------------------------------------------------------------------------
# Products LLVM merges in the unrolled code of one fusion
# ----------------------------------------------------------------------------

SHARED_PRODUCT = "xla_cpu_shared_product"
"""The attribute (unit) this pass puts on an f32/f64 ``add`` or ``subtract`` of a product inside a while loop XLA
CPU compiles whole when one fusion of the body reads it at two elements (through a pad or slice that shifts it, and
not: :func:`_read_at_two_offsets`): ``contract-fma`` leaves it alone, the product rounded.

Measured (jax 0.10.2, x86 object code and optimized LLVM IR of ``XLA_FLAGS=--xla_dump_to``): the gradient of the
Rosenbrock sum, ``pad(-(200 * u) * (2 * x[:-1])) + pad(200 * u, low 1) + ...`` with ``u = x[1:] - x[:-1] ** 2``,
in such a loop (BFGS's line search, its zoom loops) computes ``u`` with ``x[:-1] ** 2`` rounded at every element:
output element ``i`` computes ``u[i]`` and ``u[i - 1]``, the unrolled code loads ``x[i - 1]`` once and its square
is one value read by both subtractions (``vmulss`` then ``vsubss``), so the product has two uses and LLVM's x86
backend does not contract it; the other operand of the subtraction, ``x[i]``, is loaded again after the store of
the element before, so the two subtractions stay apart (measured in the asm: ``x[i]`` is recomputed there, the
square is not; the optimized IR reuses the element before's loads of ``x[i - 1]`` -- GVN's ``.phi.trans.insert``
loads -- and recomputes the square from them, which instruction selection then merges: inferred, LLVM's source
not read). Hence the condition that the product and the other operand read different elements
(:func:`_mixed_offsets`): ``x + a * p`` read at two elements is contracted there. The same fusion as
straight-line code contracts ``u`` at every element (``vfnmadd231ss``). Measured on f32[5] only (4-element
``u``; longer vectors, which LLVM may vectorize rather than unroll, not measured). With
the sum ``100 * u**2 + (1 - x[:-1])**2`` reading the same ``u``, the value and gradient in a loop of two trips
differed from jax.jit on 138 of 200 draws, the gradient alone on 129; BFGS's line search from its fourth
iterate on (``a_k`` 2 ULP, ``g_k`` up to 44 ULP)."""

_SHIFTING = (PadOp, SliceOp)
"""Moves that read their operand at other elements than they write (a pad's low edge, a slice's start)."""


def _shift(op: Operation, offset: tuple[int, ...]) -> tuple[int, ...] | None:
    """The offset at which ``op``'s result reads the value its operand 0 reads at ``offset`` (output element ``j``
    reads ``j - offset``), or None for a move this does not follow (interior padding, strides)."""
    if isinstance(op, PadOp):
        if any(ints(op.interior_padding)):
            return None
        return tuple(o + low for o, low in zip(offset, ints(op.edge_padding_low), strict=True))
    if any(s != 1 for s in ints(op.strides)):
        return None
    return tuple(o - start for o, start in zip(offset, ints(op.start_indices), strict=True))


def _read_at_two_offsets(op: Operation) -> bool:
    """Whether an element-wise op reached from ``op``'s result through element-wise ops, pads and slices reads it at
    two offsets (``pad(f(u), low 1) + g(u)``): XLA fuses them into one loop, each of whose elements computes ``op``
    at two elements. Not through a pad XLA makes a fusion of its own
    (:func:`passes.xla_loop_bytes._copied_into_several_fusions`)."""
    rank = len(op.results[0].type.get_shape())
    reached: dict[int, set[tuple[int, ...]]] = {}
    stack = [(op, (0,) * rank)]
    while stack:
        current, offset = stack.pop()
        offsets = reached.setdefault(id(current), set())
        if offset in offsets:
            continue
        offsets.add(offset)
        if len(offsets) > 1:
            return True
        for use in current.results[0].uses:
            reader = use.operation
            if reader.parent is not op.parent or len(reader.results) != 1:
                continue
            if isinstance(reader, _SHIFTING) and use.index == 0:
                moved = _shift(reader, offset)
                # (a pad read by an add XLA copies into several fusions is a fusion of its own, measured: its
                # element loop computes ``op`` at one offset, and its readers load the stored result)
                own = isinstance(reader, PadOp) and any(_copied_into_several_fusions(u.operation)
                                                        for u in reader.results[0].uses)
                if moved is not None and not own:
                    stack.append((reader, moved))
            elif isinstance(reader, _ELEMENTWISE):
                stack.append((reader, offset))
    return False


def _element_offset(value: SSAValue, depth: int = 0) -> int | None:
    """How many elements past the one it writes ``value`` reads the arrays it is computed from (1-D: ``x[1:]`` 1,
    ``x[:-1] ** 2`` 0; a scalar broadcast, a constant or a 0-d value -1, as any element), or None when the operands
    of one element-wise op read at different offsets or the path is not followed (more dimensions, other moves)."""
    owner = value.owner
    if isinstance(owner, ConstantOp) or not value.type.get_shape():
        return -1
    if len(value.type.get_shape()) != 1 or depth > 8:
        return None
    if isinstance(owner, BroadcastInDimOp):
        return -1 if not owner.operands[0].type.get_shape() else None
    if isinstance(owner, SliceOp):
        inner = _element_offset(owner.operands[0], depth + 1)
        if inner is None or ints(owner.strides) != (1,):
            return None
        return ints(owner.start_indices)[0] + max(inner, 0)
    if isinstance(owner, _ELEMENTWISE):
        offsets = {_element_offset(v, depth + 1) for v in owner.operands} - {-1}
        return None if None in offsets or len(offsets) > 1 else (offsets.pop() if offsets else -1)
    return 0  # (a value the fusion loads: a loop argument, another fusion's result)


def _mixed_offsets(op: Operation) -> bool:
    """Whether ``op``'s product operand and its other operand read their arrays at different elements (``x[1:] -
    x[:-1] ** 2``), so that, computed for the element before, the product is that element's own and the add is
    not."""
    offsets = [_element_offset(v) for v in op.operands]
    return None not in offsets and -1 not in offsets and offsets[0] != offsets[1]


_ELEMENTWISE = (*ew.BINARY_OP_CLASSES.values(), *ew.UNARY_OP_CLASSES.values(), ew.CompareOp, ew.SelectOp,
                cv.ConvertOp)
"""Ops that read each operand at the element they write."""


def _shared_products(module: Operation, small: Callable[[WhileOp], bool]) -> list[Operation]:
    """The f32/f64 adds and subtracts of a product inside the loops XLA compiles whole that one fusion reads at two
    elements (:data:`SHARED_PRODUCT`), not yet marked; not those XLA moves out of the loop (straight-line code)."""
    found = []
    for loop in module.walk():
        if not (isinstance(loop, WhileOp) and small(loop)):
            continue
        hoisted = loop_invariant_ops(loop)
        found += [op for op in loop.body.block.ops
                  if isinstance(op, (ew.AddOp, ew.SubOp)) and element_name(op.results[0]) in ("f32", "f64")
                  and id(op) not in hoisted and SHARED_PRODUCT not in op.attributes
                  and any(isinstance(v.owner, ew.MulOp) for v in op.operands)
                  and not computes_on_quantized(op) and _mixed_offsets(op) and _read_at_two_offsets(op)]
    return found


def _unmarked(op: Operation) -> bool:
    return type(op) in _MARKED and SMALL_CALL not in op.attributes


def _rewrite_key(op: Operation) -> bool:
    key = (type(op), element_name(op.results[0]))
    return (key in _FORMS or key in _IN_F32) and not computes_on_quantized(op)


@register_pass
@dataclass(frozen=True)
class SmallLoopNumericsPass(PatternPass):
    """``xla-small-loops``: ops inside the while loops XLA CPU compiles whole computed as it computes them
    there (see the module doc)."""

    name = "xla-small-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        small_loop_numerics(op)
