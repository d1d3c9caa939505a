"""``contract-fma``: XLA CPU's floating-point contraction, ``add``/``subtract`` of a ``multiply`` as one FMA.

jax.jit on the CPU does not round ``a * b + c`` twice: XLA fuses the
elementwise ops into one loop and LLVM contracts the multiply into the add
(a fused multiply-add, rounded once). Measured with jax 0.10.2 (bit
comparisons with :func:`lowering.kernels.xla_math.fma32` / ``fma64``, and the
optimized HLO of ``jax.jit(f).lower(*a).compile().as_text()``), for f32 and f64:

* ``a*b + c``, ``c + a*b`` -> ``fma(a, b, c)``; ``a*b - c`` -> ``fma(a, b, -c)``;
  ``c - a*b`` -> ``fma(-a, b, c)`` (100% of elements, every order).
* Of two products, one read through a move XLA makes a bitcast (a ``reshape``, or a ``transpose`` of
  dimensions of size 1, between the multiply and the add, or of a factor XLA's ``ReshapeMover`` sinks below a
  multiply by a constant: ``0.1 * g.T`` for a column ``g``), the other, read directly, is fused (measured on
  4,096 elements, either operand order: ``(g * 0.1).reshape(n, 1) + mu * 0.9`` fuses ``mu * 0.9``; adam's moments
  of a gradient computed as
  ``(r.T @ x).T``, optax's fit in a scan).
* ``a*a + b*b`` / ``a*a - b*b``: the multiply that is the FIRST operand is
  fused (LLVM's DAGCombiner tries operand 0 first): ``fma(a, a, b*b)``. First
  after LLVM's ``Reassociate`` has ordered an add's operands by rank (the
  deeper expression second: ``100*(a - b*b)**2 + (1 - b)**2`` fuses the second
  square, measured 300 of 300; ranks: :class:`_Ranks`). Unless
  the first product is a negation to LLVM -- a factor that is a negative
  constant, a ``negate`` or a product of such (``(-2 * dt) * x + (2 * dt) * y``,
  ``-3.3 * x + 1.7 * y``, ``(-s) * x + t * y``): InstCombine makes the add a
  subtraction of the positive product and the SECOND is fused (measured:
  jax's odeint's interpolation polynomial, 200 of 200 draws each form). A
  ``negate`` factor decides first when only one product has one: XLA's simplifier
  makes ``A * -B + C * D`` the subtraction ``C * D - A * B`` before LLVM, whatever
  constants ``C`` holds (:func:`_negated_in_hlo`); when both have one, ``-P - Q``,
  whose second product LLVM fuses. A sum that is ``P - P`` of one product once its
  negations are taken out (``v * -y + v * y``, ``v * -3.0 + v * 3.0``) is not
  contracted: one rounded product, subtracted from itself
  (:func:`_one_product_up_to_sign`).
* A multiply with more than one use is not fused when its uses land in the
  same XLA fusion: ``(a*b + c, a*b)`` (the product is also returned),
  ``(a*b + c) * (a*b - d)``, ``(a*b + c) * (a*b)`` all round twice (LLVM
  contracts only a one-use ``fmul``). Unless XLA copies the multiply into each
  fusion that reads it (``InstructionFusion``'s duplication rule, :func:`_duplicated`:
  a product of one array and broadcasts or scalar constants -- ``x * s``,
  ``x * row``, ``x / max(x)`` as ``x * (1 / max)`` -- or ``x * x``): then each copy
  has the uses in its own fusion, and an add or subtract whose fusion reads it
  once contracts, whatever reads it elsewhere -- a reduce (its own fusion), a
  return, a dot, element-wise ops whose fused readers never meet the add's
  (measured, f32/f16/f64: ``z - max(z)`` and ``exp(z - max(z))`` with ``z = x * s``,
  the scaled softmax; ``v + min(v)`` with ``v = x / max(x)``; ``(z - max(z), z)``;
  ``(x*s + c, x*s - d)``; fuzz seed 34). ``x * y`` of two arrays is computed once
  and rounded; ``(x*s + c) * (x*s - d)`` rounds twice (one fusion).
* A ``pad`` with +0 edges is index arithmetic too: ``pad(a*b) + c`` contracts where the pad reads the product and
  adds +0 elsewhere (:func:`_is_zero_pad`; a product XLA duplicates reaches through a pad that shifts it, at other
  elements than its other readers); and ``-(k * x)`` with a constant ``k`` is a product to LLVM (InstCombine
  folds the negation into the constant), fused like any other (jax.grad of the Rosenbrock sum, read from XLA's
  optimized LLVM IR: 18 of 41 draws differed). Not a pad read by an add XLA copies into several fusions (the
  gradient read by ``g + grad`` and by ``grad[0] * p[0]``): the pad is then a fusion of its own, its product
  stored (:func:`_copied_into_several_fusions`).
* A product XLA moves out of a while loop stays rounded (:func:`~passes.small_loops.moved_out_of_its_loop`): one of values the loop
  carries unchanged and constants (``x2 * c`` with ``x2`` captured by a ``fori_loop`` body), which
  ``WhileLoopInvariantCodeMotion`` computes and stores before the loop, read by an add that stays in it (measured:
  every three-trip draw of ``x2 * c + v * 0.5``, ``x2 * s + v``, ``x2 * x2 + v * v`` differed with it fused; a loop
  of one trip is removed first, and there it fuses).
* A product LLVM hoists out of the add's loop stays rounded (:func:`_hoisted_out_of_the_add`): XLA emits a loop
  per dimension, and a product of broadcasts (``m * 3`` with ``m`` spread over rows, written before or after the
  broadcast) that does not vary along the innermost dimension, or varies along it alone while LLVM unrolls that
  loop whole (:func:`_inner_loop_unrolled`), is computed outside the add's basic block. Read through the
  ``broadcast`` otherwise: ``x*s - 0.5 + m*3`` with ``m`` of (1, 512) over (64, 512) rows is
  ``fma(m, 3, fma(x, s, -0.5))`` (8,470 of 32,768 elements differed rounded). And an f32 ``exp`` added to a
  product is itself a multiply to LLVM, fused where it is the add's first operand after ``Reassociate``
  (:func:`_scaled_by_exponent`, :func:`_contracted_exp_operand`).
* Nothing else in between: ``convert(a*b) + c`` rounds
  twice (a broadcast OF THE ADDEND is fine: ``x * k + broadcast(c)`` fuses).
  Except ops that only move elements: a ``transpose``, ``reshape``, ``reverse``,
  ``slice``, ``copy`` or same-type ``bitcast`` of the product (each the only use of
  the one before, in the same fusion) is index arithmetic in XLA's fused loop,
  so LLVM still sees the multiply's result subtracted: ``c - (a*b).T`` is
  ``fma(-a.T, b.T, c)`` (measured with jax.jit: every element of ``c - (a*b).T``,
  ``(a*b).T + c``, ``c - reshape``, ``c - reverse``, ``c - slice`` of ``(16, 16)``
  to ``(700, 900)`` operands; the SGD update ``p - (0.1 * g).T`` of XLA's
  partitioned training step, ``multiply -> transpose -> copy -> subtract`` in
  one fusion, examples/sharded_training.py). The moves are replayed on the
  multiply's operands (exact) and the FMA computed after them. A move read
  twice in one fusion rounds twice (``(c - (a*b).T) * (c + (a*b).T)``, measured);
  not reproduced: ``(c - (a*b).T, (a*b).T)``, where XLA fuses a copy of the
  multiply and transpose into the subtraction's fusion and contracts it.
* A slice of a product other slices read too, ``y[1:] - y[:-1] ** 2`` with ``y = x * s`` (one fusion): XLA's loop
  multiplies ``y``'s element once per slice reading it, two one-use products, and LLVM fuses the subtraction's
  first: ``fma(x[1:], s, -(y[:-1] ** 2))`` (measured: every element of 200 draws, 2 to 100 elements). In a sum LLVM
  unrolls (up to :data:`UNROLLED_SUM_TERMS` terms) it merges the products of an element two slices read into one
  with two uses, fused nowhere: the Rosenbrock sum of ``x * s`` fuses the square in every term but the last, whose
  ``s * x[-1]`` only ``y[1:]`` reads (read from XLA's object code, f32[4], [5], [8], [16]; bitwise for 2 to 23
  elements after, 5-61 of 200 draws differed before). :func:`_contract_shared_slice`.
* Chains fuse step by step (Horner: ``(p*x + c1)*x + c2`` is two FMAs); the
  product of a dot or a reduce result fuses like any other value.
* A sum of a product, ``jnp.sum(x * y, axis=...)`` (f32/f64, the multiply read by the sum only), whose
  reduced dimensions are at most 32 long (no tree rewrite) and whose operand has fewer than 4,096 elements
  (not YNNPACK's): XLA fuses the multiply into the reduce's loop and LLVM contracts each step, ``acc =
  fma(x, y, acc)`` (measured: rows, columns, 1-D, ``x * c``; a product of two arrays also returned is
  rounded). Made a :class:`~xla_dialect.internal.MultiplyReduceOp`. So is a sum of a product XLA copies into
  the sum's fusion (above; measured: ``x*s + sum(x*s)`` and ``(sum(x*s), x*s)`` contract each step of the
  sum). Where XLA vectorizes the loop over rows of 5-8 products of
  two arguments (program or loop-body arguments; computed factors, ``a * (b + 1)``, ``exp(a) * b``, keep the
  loop scalar: measured), those rows add rounded products (its ``rounded_rows``:
  :func:`lowering.kernels.tree_sum.rounded_product_rows`). A square ``x * x`` summed from +0 starts
  ``fma(x0, x0, x1 * x1)``: LLVM drops the +0 and fuses the first add's first product (measured: every draw of
  1-D, row, column, ``jnp.var`` and norm sums of squares, f32 and f64; it made jax's odeint bitwise).
* A sum of a contracted two-product term, ``jnp.sum(a*b + c*d)`` (the term ``fma(a, b, c*d)``, read by the sum
  only, in the same one-loop sums): the loop's adds allow reassociation, and LLVM's x86 backend pushes the running
  sum into the term's FMAs, ``acc = fma(a, b, fma(c, d, acc))``, from +0 starting with the term itself (read from
  XLA's optimized LLVM IR; the Rosenbrock sum bitwise for 1 to 27 terms, half of the draws differed before). Made
  a :class:`~xla_dialect.internal.MultiplyAddReduceOp`. From 28 terms of that body LLVM vectorizes the loop
  instead of unrolling it (not identified).
* f16 contracts the same way on hosts with AVX512-FP16 (LLVM computes f16
  natively there: ``a*b + c`` is one f16 FMA; measured on an Intel CPU with
  ``avx512fp16``); elsewhere LLVM computes f16 in f32 and rounds after each op,
  so nothing contracts. bf16 contracts only inside the while loops XLA compiles
  whole, in scalar code, on hosts computing bf16 natively (AVX512-BF16 with AMX): the adds, subtracts and
  multiplies ``xla-small-loops`` marks :data:`~passes.small_loops.BF16_SCALAR`
  (an f32 FMA rounded once to bf16); elsewhere XLA's fusion emitters widen bf16
  to f32 with a rounding after each op. Complex multiply-adds are left alone (measured
  equal without contraction on ``a*b + a`` in c64).

:func:`contract_fma` (the pass ``contract-fma``) rewrites each such pair into
:class:`~xla_dialect.internal.FusedMultiplyAddOp` (``hlo_internal.fma``, defined in the IR package; made
only here, for the executor; its kernel is :func:`lowering.kernels.elementwise.fused_multiply_add_kernel`),
with an exact ``negate`` for the subtracting forms. The executor's pipeline
(:data:`passes.pipelines.EXECUTOR_PIPELINE`) runs it unless
``fma_contraction=False``. Ops on quantized types are left alone. Which element
types contract is the pass option ``types``: ``host`` (the default: f32, f64,
and f16 where the host has AVX512-FP16, as XLA on this host) or a list such as
``f16,f32,f64``.
Known limit: with denormals kept (``denormals="keep"``), an f64 FMA whose
result is denormal and whose product is below 2**-900 may round twice.
"""

from __future__ import annotations

from collections import deque

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, ModuleOp, UnitAttr, i64
from xdsl.ir import BlockArgument, Operation, SSAValue

from lowering.kernels.elementwise import BF16_FLUSHED_STORE
from lowering.kernels.host import host_properties, prefers_wide_vectors
from lowering.kernels.scalar import GLIBC_EXP_TAIL
from lowering.kernels.tree_sum import TREE_WINDOW, rounded_product_rows, vector_lanes
from lowering.kernels.ynnpack_math import YNNPACK
from lowering.kernels.ynnpack_sum import MIN_ELEMENTS
from xla_dialect.errors import PassError
from xla_dialect.internal import ExpAddOp, FusedMultiplyAddOp, MultiplyAddReduceOp, MultiplyReduceOp
from xla_dialect.ops import elementwise as ew
from xla_dialect.cse import ELEMENT_WISE, MOVES, CseNumbering, splat_value
from xla_dialect.ops.base import ints, make_tensor, pred_type
from xla_dialect.ops.collectives import CollectiveOp
from xla_dialect.ops.constants import ConstantOp, IotaOp
from xla_dialect.ops.control_flow import ReturnOp, WhileOp
from xla_dialect.ops.conversion import ConvertOp
from xla_dialect.ops.data_movement import (BitcastOp, BroadcastInDimOp, ConcatenateOp, PadOp, ReshapeOp, SliceOp,
                                          TransposeOp)
from xla_dialect.ops.linalg import _DotBase
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.types import numpy_dtype

from .base import PatternPass
from .quantized import computes_on_quantized
from .registry import register_pass
from .small_loops import BF16_SCALAR, SHARED_PRODUCT, UNROLL_THRESHOLD, is_small_loop, moved_out_of_its_loop
from .util import element_name, make_constant
from .xla_loop_bytes import _LOOP_FUSED, _copied_into_several_fusions, _fused_forward

_MUL, _ADD, _SUB, _NEG = ew.MulOp, ew.AddOp, ew.SubOp, ew.NegOp

CONTRACTIBLE = frozenset({"f16", "f32", "f64"})
"""Element types an FMA instruction exists for (f16 with AVX512-FP16)."""


def host_contracted_types() -> frozenset[str]:
    """The element types whose multiply-adds XLA CPU contracts on this host: f32 and f64, and f16 where the
    host computes f16 natively (AVX512-FP16)."""
    return frozenset({"f32", "f64"} | ({"f16"} if host_properties()["avx512fp16"] else set()))


_UNARY_BINARY = (*ew.BINARY_OP_CLASSES.values(), *ew.UNARY_OP_CLASSES.values())
"""The element-wise arithmetic ops (unary and binary)."""


class _Uses:
    """Uses of each multiply after XLA's common-subexpression elimination.

    jax writes ``a*b`` twice in ``(a*b + c) * (a*b - d)``; XLA merges the two
    multiplies into one with two uses, which LLVM does not contract. Values are
    numbered by XLA's CSE (:class:`xla_dialect.cse.CseNumbering`); the uses of a
    multiply are those of every multiply with its number.
    """

    def __init__(self, module: Operation):
        self.number = CseNumbering().number  # (XLA's CSE runs per computation: the default)
        self.users: dict[int, set] = {}
        self.readers: dict[int, list[tuple[Operation, int]]] = {}  # number -> (reading op, operand index)
        self.exp_adds: list[tuple[Operation, int]] = []  # (add or subtract, its exp operand): _contract_exp's
        for op in module.walk():
            if isinstance(op, _MUL):
                n = self.number(op.results[0])
                users = self.users.setdefault(n, set())
                self.readers.setdefault(n, []).extend((use.operation, use.index) for use in op.results[0].uses)
                for use in op.results[0].uses:
                    # (a user XLA's CSE merges with its duplicates counts once: jax writes (a - b*b) twice in
                    # (a - b*b) * (a - b*b), one subtract of one multiply for XLA, which LLVM contracts)
                    user = use.operation
                    merged = isinstance(user, ELEMENT_WISE) and not user.regions and len(user.results) == 1
                    users.add((self.number(user.results[0]), use.index) if merged else (id(user), use.index))
        self.uses = {n: len(users) for n, users in self.users.items()}

    def one_use(self, value: SSAValue) -> bool:
        """Whether the multiply ``value`` has one use once merged with its duplicates."""
        return self.uses.get(self.number(value)) == 1

    def read_once_in_fusion_of(self, value: SSAValue, user: Operation) -> bool:
        """Whether ``user`` reads the multiply ``value`` once and every other reader (merged with duplicates) is in
        another of XLA's fusions (:func:`_in_another_fusion`): with the multiply duplicated into each fusion that
        reads it (:func:`_duplicated`), the copy in ``user``'s fusion then has one use."""
        readers = self.readers.get(self.number(value), [])
        mine = [index for reader, index in readers if reader is user]
        return len(mine) == 1 and all(_in_another_fusion(reader, index, user)
                                      for reader, index in readers if reader is not user)


_MOVES = MOVES
"""Ops that only move elements: in XLA's fused loop index arithmetic between a multiply and the add that reads it,
which LLVM still contracts (module doc)."""


def _true_rank(value: SSAValue) -> int:
    return sum(d != 1 for d in value.type.get_shape())


def _elements(value: SSAValue) -> int:
    return int(np.prod(value.type.get_shape(), dtype=np.int64))


def _duplicated(mul: Operation, uses: _Uses) -> bool:
    """Whether XLA's fusion copies the multiply ``mul`` into each fusion that reads it rather than computing it once
    (``InstructionFusion::ComputeGloballyUnfusible``), as far as the program as written shows:

    * it is effectively at most unary -- at most one operand that is neither a broadcast, an iota nor a scalar
      constant and has at least the result's number of dimensions longer than one -- or its distinct operands
      hold no more elements than its result (``x * s``, ``x * row``, ``x * x``);
    * its operands are reshapes of one shape (XLA's ``ReshapeMover`` multiplies first and reshapes the product:
      the reshape is what several fusions read, and each copies it with the multiply);
    * or every reader can fuse it on every path to it: no reader also reads it through a reduce, a dot or another
      op that is not fused into its readers (``z - max(z)`` with ``z = x * y`` is computed once), and no reader is
      a return or a dot (``(x*y + c, x*y - d)`` is copied into both fusions, ``(x*y + c, x*y)`` computed once).

    Measured (f32, [5, 13] and [32, 24]): ``z - max(z)`` contracts for ``x * s``, ``x * row``, ``x * x`` and
    ``x[:768].reshape(32, 24) * y[:768].reshape(32, 24)``, not for ``x * y`` or ``x * x[::-1]``."""
    rank = _true_rank(mul.results[0])
    large = [v for v in mul.operands
             if not (isinstance(v.owner, (BroadcastInDimOp, IotaOp))
                     or isinstance(v.owner, ConstantOp) and (_elements(v) == 1 or _splat(v.owner)))
             and _true_rank(v) >= rank]
    if len(large) <= 1 or sum(_elements(v) for v in set(mul.operands)) <= _elements(mul.results[0]):
        return True
    if all(isinstance(v.owner, ReshapeOp) for v in large) and \
            len({tuple(v.owner.operands[0].type.get_shape()) for v in large}) == 1:
        return True
    product = mul.results[0]
    for reader, index in uses.readers.get(uses.number(product), []):  # (with the duplicates XLA's CSE merges)
        if not isinstance(reader, (*_LOOP_FUSED, ReduceOp)):
            return False
        read = reader.operands[index]
        if any(_reaches_through_unfused(v, read, uses) for v in reader.operands if v is not read):
            return False
    return True


def _reaches_through_unfused(value: SSAValue, product: SSAValue, uses: _Uses) -> bool:
    """Whether ``value`` is computed from ``product`` (or a duplicate XLA's CSE merges with it) through an op XLA
    does not fuse into its readers (a reduce read through a broadcast, a dot, a loop...): the reader of both cannot
    fuse the product on that path."""
    seen: set[tuple[int, bool]] = set()
    stack = [(value, False)]
    block = product.owner.parent
    number = uses.number(product)
    while stack:
        current, unfused = stack.pop()
        if isinstance(current.owner, _MUL) and uses.number(current) == number:
            if unfused:
                return True
            continue
        owner = current.owner
        if not isinstance(owner, Operation) or owner.parent is not block or (id(current), unfused) in seen:
            continue
        seen.add((id(current), unfused))
        through = unfused or not isinstance(owner, _LOOP_FUSED)
        stack.extend((v, through) for v in owner.operands)
    return False


def _splat(constant: ConstantOp) -> bool:
    try:
        values = np.asarray(constant.value.array) if hasattr(constant.value, "array") else None
    except Exception:  # noqa: BLE001 - (an unreadable constant is no splat)
        return False
    return values is not None and values.size > 0 and bool((values == values.flat[0]).all())


def _read_by_a_dot(value: SSAValue) -> bool:
    """Whether a dot reads the element-wise ``value`` too: XLA CPU fuses no producer into a dot, and duplicates a
    producer into its consumers only where every consumer fuses it, so the value is computed by a fusion of its
    own and the others load it (long fuzz campaign, session 24: ``v0 * v0**3 + x * (x - sum(x, 0))`` with ``v0``
    also read by ``v2.T @ v0`` contracts ``v0 * v0**3`` in XLA -- ``v0`` its fusion's first load --, where ranking
    ``v0``'s own expression inside contracted the other product: an f64 -0 that XLA gives as +0)."""
    return any(isinstance(use.operation, _DotBase) for use in value.uses)


def _in_another_fusion(reader: Operation, index: int, user: Operation) -> bool:
    """Whether ``reader`` (reading a multiply at operand ``index``) is in another of XLA's fusions than ``user``:
    a reduce reading it as an input (a fusion of its own), a return (the multiply's own result), a dot, or an
    element-wise op whose fused readers never meet ``user``'s (measured: ``(x*s - max(x*s), x*s)``,
    ``x*s + sum(x*s)`` contract the subtract, the add and the sum)."""
    if isinstance(reader, ReduceOp):
        return index < len(reader.operands) // 2
    if isinstance(reader, (func.ReturnOp, ReturnOp, _DotBase)):
        return True
    if isinstance(reader, _LOOP_FUSED) and isinstance(user, _LOOP_FUSED):
        return not (_fused_forward(reader) & _fused_forward(user))
    return False


def _is_move(op: Operation | None) -> bool:
    return (isinstance(op, _MOVES) and op.operands[0].type.element_type == op.results[0].type.element_type
            and not computes_on_quantized(op))


def _is_zero_pad(op: Operation | None) -> bool:
    """A ``pad`` with +0 at the edges and nothing inside: in XLA's fused loop the padded positions add a constant
    +0 (``c + 0.0``) and the others read the product, which LLVM contracts (read from XLA's optimized LLVM IR of
    jax.grad of the Rosenbrock sum: ``pad(a*b) + c``)."""
    if not isinstance(op, PadOp) or any(ints(op.interior_padding)) or computes_on_quantized(op):
        return False
    value = op.operands[1].owner
    if not isinstance(value, ConstantOp) or op.operands[0].type.element_type != op.results[0].type.element_type:
        return False
    splat = value.splat_value()
    return splat is not None and float(splat) == 0.0 and not np.signbit(splat)


def _padded_value(value: SSAValue) -> SSAValue:
    """``value`` with the element moves and zero pads (:func:`_is_zero_pad`) producing it looked through."""
    while _is_move(value.owner) or _is_zero_pad(value.owner):
        value = value.owner.operands[0]
    return value


def _spread_value(value: SSAValue) -> SSAValue:
    """``value`` with the element moves, zero pads and broadcasts (:func:`_is_spread`) producing it looked through."""
    while _is_move(value.owner) or _is_zero_pad(value.owner) or _is_spread(value.owner):
        value = value.owner.operands[0]
    return value


def _moved_value(value: SSAValue) -> SSAValue:
    """``value`` with the element moves (:data:`_MOVES`) producing it looked through."""
    while _is_move(value.owner):
        value = value.owner.operands[0]
    return value


def _fusible_product(value: SSAValue, user: Operation, uses: _Uses) -> tuple[Operation, list[Operation]] | None:
    """The ``multiply`` defining ``value`` if LLVM would contract it into ``user``, with the element moves between
    them (:data:`_MOVES`, the one producing ``value`` first) and the ``negate`` of a product by a constant in
    between, if any (LLVM folds it into the constant: ``-(2 * s) + q`` contracts ``s * -2``, read from XLA's
    optimized LLVM IR): same block, same type, ``user`` the multiply's only use after CSE (a value used twice by
    ``user`` has two uses), or each move the only use of the value before it and the multiply's operands of its
    result's type (the moves are replayed on them)."""
    if SHARED_PRODUCT in user.attributes:
        return None  # (LLVM merges the product of two elements' copies of the add: xla-small-loops' SHARED_PRODUCT)
    chain = []
    while _is_move(value.owner) or _is_zero_pad(value.owner) or _is_spread(value.owner):
        move = value.owner
        if move.parent is not user.parent or len(list(value.uses)) != 1:
            return None
        chain.append(move)
        value = move.operands[0]
    negate = None
    if (isinstance(value.owner, _NEG) and value.owner.parent is user.parent and len(list(value.uses)) == 1
            and isinstance(value.owner.operands[0].owner, _MUL)
            and any(_constant_factor(f) for f in value.owner.operands[0].owner.operands)):
        negate = value.owner  # (-(c * x): InstCombine folds the negation into the constant, x * -c, a product)
        value = negate.operands[0]
    mul = value.owner
    if not isinstance(mul, _MUL) or mul.parent is not user.parent or YNNPACK in mul.attributes:  # (YNNPACK: no FMA)
        return None
    if moved_out_of_its_loop(mul) and not moved_out_of_its_loop(user):
        return None  # (XLA computes the loop-invariant product before the loop and stores it: rounded)
    if any(isinstance(move, PadOp) for move in chain) and _copied_into_several_fusions(user):
        return None  # (the pad is a fusion of its own, its product stored: _copied_into_several_fusions)
    spread = any(isinstance(move, BroadcastInDimOp) for move in chain)
    if user.results[0].type.get_shape():
        hoisted = _hoisted_out_of_the_add(chain[0].results[0] if chain else mul.results[0], user)
        if hoisted or hoisted is None and spread:
            return None  # (LLVM moves the product out of the add's loop: _hoisted_out_of_the_add)
    shifted = any(isinstance(move, PadOp) and any(ints(move.edge_padding_low)) for move in chain)
    if not (uses.one_use(value) or not chain and _duplicated(mul, uses) and uses.read_once_in_fusion_of(value, user)
            or shifted and _duplicated(mul, uses)):
        return None  # (a duplicated product read through a shifting pad is computed apart, at other elements)
    if BF16_SCALAR in user.attributes and BF16_SCALAR not in mul.attributes:
        return None
    if not chain and mul.results[0].type != user.results[0].type:
        return None
    if chain and (chain[0].results[0].type.get_shape() != user.results[0].type.get_shape()
                  or mul.results[0].type.element_type != user.results[0].type.element_type
                  or any(v.type != mul.results[0].type for v in mul.operands)):
        return None
    return mul, chain, negate


def _varying_dims(value: SSAValue, depth: int = 0, known: dict | None = None) -> frozenset[int]:
    """The dimensions of ``value`` (longer than 1) along which its elements differ as XLA's fused loop computes
    them: a broadcast varies only along the dimensions its operand's varying ones map to, a splat constant along
    none, an element-wise op along its operands' (scalars none), an iota along its own; anything else along all."""
    known = {} if known is None else known
    if value in known:
        return known[value]
    known[value] = found = _varying_dims_of(value, depth, known)
    return found


def _varying_dims_of(value: SSAValue, depth: int, known: dict) -> frozenset[int]:
    shape = value.type.get_shape()
    owner = value.owner
    every = frozenset(d for d, n in enumerate(shape) if n != 1)
    if depth > 24 or not every:
        return every
    if isinstance(owner, ConstantOp) and (_elements(value) == 1 or _splat(owner)):
        return frozenset()
    if isinstance(owner, IotaOp):
        return every & {int(owner.properties["iota_dimension"].value.data)}
    if isinstance(owner, BroadcastInDimOp):
        dims = ints(owner.broadcast_dimensions)
        return frozenset(dims[k] for k in _varying_dims(owner.operands[0], depth + 1, known)) & every
    if isinstance(owner, _LOOP_FUSED) and not isinstance(owner, (BroadcastInDimOp, *_MOVES)) \
            and len(owner.results) == 1:
        varying: frozenset[int] = frozenset()
        for operand in owner.operands:
            if not operand.type.get_shape():
                continue
            if tuple(operand.type.get_shape()) != tuple(shape):
                return every
            varying |= _varying_dims(operand, depth + 1, known)
        return varying
    return every


_VECTOR_COSTS = {
    _ADD: 1, _SUB: 1, _MUL: 1, _NEG: 1, ew.DivOp: 1, ew.CompareOp: 1, ew.SelectOp: 1, ConvertOp: 1,
    ew.MaxOp: 2, ew.MinOp: 2, ew.AbsOp: 1, ew.SqrtOp: 2, ew.LogOp: 3, ew.LogisticOp: 6,
    (ew.TanhOp, "f32"): 80, (ew.TanhOp, "f64"): 37, (ew.ExpOp, "f32"): 3, (ew.ExpOp, "f64"): 20,
}
"""LLVM's size cost per vector of an f32/f64 element-wise op in XLA's fused loops, as far as measured (jax 0.10.2,
Xeon): fitted to the longest inner dimension whose loop of ``op(x) + m * 3`` (``m`` a row broadcast over 8 rows)
LLVM still unrolls whole (:func:`_inner_loop_unrolled`): ``sqrt(abs(x))`` 240 of f32, not 256; ``log(abs(x))`` 192,
not 256; the logistic function (which XLA expands to ``1 / (1 + exp(-x))``: f32 exp 3) 128, not 192; f64
``exp`` more than 12 (kept a loop at 8 trips); f64 ``tanh`` 24, not 32; ``maximum`` 256, not 320; f32 ``tanh``
16, not 32 (over 8 rows; over ``(4, 6, 5, 16)`` and ``(4, 6, 16)`` with ``m`` varying along the last dimension
only the product is fused: :data:`HOISTED_OUT_OF_A_MIDDLE_LOOP`). Fusions holding other ops are not estimated."""

_FREE_IN_LOOP = (ConstantOp, BroadcastInDimOp, *_MOVES)


def _inner_loop_unrolled(user: Operation) -> bool | None:
    """Whether LLVM unrolls the innermost loop of the XLA loop fusion computing the element-wise ``user`` whole
    (None: not estimated). XLA emits one loop per dimension; LLVM vectorizes the innermost (8 f32 or 4 f64 lanes,
    ``prefer-vector-width=256``, two vectors per trip) and unrolls it whole when ``cost * trips + 2 <= 300``
    (:data:`~passes.small_loops.UNROLL_THRESHOLD`), the cost of a trip twice the loads, ops and stores of one
    vector, plus 3 (fitted, measured on four bodies: ``x + m*3`` unrolled up to 22 trips, ``x*s - 0.5 + m*3`` 15,
    ``(x*s)*(x+s) - 0.5 + m*3`` and ``x*s*t - 0.5 + m*3`` 12, f32 and f64). The fusion is estimated as ``user``'s
    chain of element-wise producers (cheap ones even when read elsewhere: XLA copies them into each fusion) and
    the element-wise readers it fuses with; a value read from outside counts as one load per vector if it varies
    along the inner dimension."""
    shape = user.results[0].type.get_shape()
    inner = max(d for d, n in enumerate(shape) if n != 1)
    lanes = 2 * (256 // (8 * numpy_dtype(user.results[0].type).itemsize))
    fused = {id(op): op for op in (user, *(o for o in _forward_ops(user)))}
    stack = list(user.operands)
    while stack:
        value = stack.pop()
        owner = value.owner
        if (isinstance(owner, (*_LOOP_FUSED, FusedMultiplyAddOp)) and owner.parent is user.parent
                and id(owner) not in fused
                and (len(list(value.uses)) == 1 or type(owner) in _VECTOR_COSTS and type(owner) is not ew.DivOp
                     or isinstance(owner, _FREE_IN_LOOP))):  # (XLA copies cheap producers into each fusion)
            fused[id(owner)] = owner
            stack.extend(owner.operands)
    cost = 0
    loads: set[SSAValue] = set()
    stores = 0
    for op in fused.values():
        if isinstance(op, _FREE_IN_LOOP) or isinstance(op, _NEG) and all(
                isinstance(use.operation, FusedMultiplyAddOp) for use in op.results[0].uses):
            pass  # (a negation this pass made of a subtraction: one fsub in LLVM's loop, counted with the FMA)
        elif isinstance(op, FusedMultiplyAddOp):
            cost += 2  # (an FMA made earlier in program order: fmul and fadd when LLVM decides the unrolling)
        elif type(op) in _VECTOR_COSTS or (type(op), element_name(op.results[0])) in _VECTOR_COSTS:
            cost += _VECTOR_COSTS.get(type(op)) or _VECTOR_COSTS[type(op), element_name(op.results[0])]
        else:
            return None
        for operand in op.operands:
            if not (isinstance(operand.owner, Operation) and id(operand.owner) in fused) \
                    and operand.type.get_shape() and len(operand.type.get_shape()) == len(shape) \
                    and inner in _varying_dims(operand):
                loads.add(operand)
            elif isinstance(operand.owner, BroadcastInDimOp) and id(operand.owner) in fused:
                source = operand.owner.operands[0]
                if not (isinstance(source.owner, Operation) and id(source.owner) in fused) \
                        and inner in _varying_dims(operand):
                    loads.add(source)
        if any(not isinstance(use.operation, Operation) or id(use.operation) not in fused
               for result in op.results for use in result.uses):
            stores += 1
    trips = shape[inner] // lanes
    per_trip = 2 * (cost + len(loads) + max(stores, 1)) + 3
    if per_trip > HOISTED_OUT_OF_A_MIDDLE_LOOP and sum(n != 1 for n in shape) >= 3:
        return False  # (a costly body of three loops or more: the product stays in the add's loop, measured)
    return per_trip * trips + 2 <= UNROLL_THRESHOLD


HOISTED_OUT_OF_A_MIDDLE_LOOP = 40
"""The largest trip cost (:func:`_inner_loop_unrolled`) at which LLVM still moves a product out of a loop over a
middle dimension (three loops or more): measured, ``x*s - 0.5 + m*3`` (cost 19-23) over (4, 6, 5, 16) with ``m``
of (1, 1, 1, 16) and over (4, 6, 16) with ``m`` of (4, 1, 16) rounds the product, f32 and f64 ``tanh`` and f64
``exp`` bodies (costs 53-173) fuse it -- where over two loops ((8, 16)) they round it. Why is not identified (not
read in LLVM's IR): the threshold is between those costs."""


def _forward_ops(user: Operation) -> list[Operation]:
    """The element-wise readers XLA fuses into ``user``'s loop (:func:`_fused_forward`), ``user`` excluded."""
    ids = _fused_forward(user)
    return [op for op in user.parent.ops if id(op) in ids and op is not user]


def _hoisted_out_of_the_add(product: SSAValue, user: Operation) -> bool | None:
    """Whether LLVM hoists the product ``product`` (at ``user``'s shape) out of the loop computing the element-wise
    ``user`` in XLA's loop fusion, so that it stays rounded: the product of broadcasts (``m * 3`` over rows, or
    ``broadcast(m * 3)``) varies along some dimensions only, and LLVM's LICM moves what a loop does not vary out of
    it, into another basic block, where the DAG combiner cannot fuse it into the add. Measured (f32 and f64, jax
    0.10.2, read in XLA's optimized LLVM IR for [8, 128] and [8, 256]): rounded when the product does not vary along
    the innermost dimension (a vector splat of a scalar: ``(4, 6, 5, 16)`` with ``m`` of ``(1, 6, 1, 1)``, ``(n,
    1)`` keepdims values); when it varies along it but not along the next outer dimension and LLVM unrolls the
    innermost loop whole (:func:`_inner_loop_unrolled`: ``(8, 128)`` with ``m`` of ``(1, 128)``, ``(4, 6, 16)`` of
    ``(4, 1, 16)``); fused when the innermost loop stays a loop (``(64, 512)`` with ``m`` of ``(1, 512)``: 8,470 of
    32,768 elements differed rounded) or the product varies along both (``(4, 6, 5, 16)`` of ``(1, 6, 5, 16)``).
    Checked against jax.jit on 608 cases (f32/f64, eight bodies, 19 shapes, both forms; 263 differed before, 4
    after, with costly bodies over three loops :data:`HOISTED_OUT_OF_A_MIDDLE_LOOP`). Not matched: inner
    dimensions of 3 to 8 (some elements fused, some not). None: the unrolling is not estimated (a fusion with ops
    :data:`_VECTOR_COSTS` lacks); the caller keeps its former rule."""
    shape = product.type.get_shape()
    effective = [d for d, n in enumerate(shape) if n != 1]
    if not effective:
        return False
    varying = _varying_dims(product)
    if effective[-1] not in varying:
        return True
    if len(effective) == 1 or effective[-2] in varying:
        return False
    return _inner_loop_unrolled(user)


def _is_spread(op: Operation | None) -> bool:
    """A ``broadcast_in_dim`` of the same element type: index arithmetic in XLA's fused loop, like a move, but the
    product it spreads may be hoisted out of the add's loop (:func:`_hoisted_out_of_the_add`)."""
    return (isinstance(op, BroadcastInDimOp) and op.operands[0].type.element_type == op.results[0].type.element_type
            and not computes_on_quantized(op))


def _broadcast_scalar(value: SSAValue) -> bool:
    """A broadcast of a one-element value (``v * s`` with a scalar argument ``s``)."""
    owner = value.owner
    return isinstance(owner, BroadcastInDimOp) and owner.operands[0].type.element_count() == 1


def _constant_factor(value: SSAValue) -> bool:
    """A constant, or a broadcast of one: a factor InstCombine can negate in place."""
    owner = value.owner
    if isinstance(owner, BroadcastInDimOp):
        owner = owner.operands[0].owner
    return isinstance(owner, ConstantOp)


def _behind_move(mul: Operation, chain: list[Operation]) -> bool:
    """Whether XLA's fused loop reads the product ``mul`` through an element move: ``chain`` (moves between the
    multiply and its user), or moves of its array factors that XLA's ``ReshapeMover`` sinks below it -- every
    factor a constant, a broadcast scalar or (through multiplies of such) a move: ``0.1 * g.T`` becomes ``(0.1 *
    g).T``, ``0.001 * (g.T * g.T)`` becomes ``(0.001 * (g * g)).T``."""
    return bool(chain) and all(_is_bitcast(move) for move in chain) or not chain and _sunk_moves(mul.results[0], 0)


def _is_bitcast(op: Operation) -> bool:
    """A move XLA makes a ``bitcast`` (the elements stay in order): a reshape, or a transpose that moves only
    dimensions of size 1. Real transposes are not: ``(b*b).T + a*a`` fuses its first product (measured)."""
    if isinstance(op, ReshapeOp) or isinstance(op, BitcastOp):
        return _is_move(op)
    if not isinstance(op, TransposeOp) or not _is_move(op):
        return False
    shape = op.operands[0].type.get_shape()
    kept = [d for d in ints(op.properties["permutation"]) if shape[d] != 1]
    return kept == sorted(kept)


def _sunk_moves(value: SSAValue, depth: int) -> bool:
    owner = value.owner
    if _is_bitcast(owner):
        return True
    if depth > 4 or not isinstance(owner, _MUL):
        return False
    moved = False
    for factor in owner.operands:
        scale = _moved_value(factor).owner
        if isinstance(scale, ConstantOp) or (isinstance(scale, BroadcastInDimOp)
                                             and not scale.operands[0].type.get_shape()):
            continue
        if not _sunk_moves(factor, depth + 1):
            return False
        moved = True
    return moved


def _replayed(value: SSAValue, chain: list[Operation], before: Operation) -> SSAValue:
    """``value`` moved as ``chain`` (innermost last) moves the product: clones of its ops, inserted before
    ``before``."""
    for move in reversed(chain):
        clone = move.clone(value_mapper={move.operands[0]: value})
        # (a second op of the same HLO name; nor the identity a tool gave the original, such as the op number
        # interop.trace's probes key values by: the clone computes another value)
        for name in [k for k in clone.attributes if k == "hlo.name" or k.startswith("debug.")]:
            clone.attributes.pop(name)
        before.parent.insert_op_before(clone, before)
        value = clone.results[0]
    return value


SHARED_SLICE_PIECES = "fma.shared_slice_pieces"
"""The attribute of the ``concatenate`` :func:`_contract_shared_slice` puts a subtraction's pieces together with: no
concatenate in XLA, but each element one piece's value (ranked as its operands, :class:`_Ranks`)."""

_ARITHMETIC = (_MUL, _ADD, _SUB, _NEG)
"""Element-wise ops :class:`_Ranks` ranks as LLVM does (one instruction each)."""


_EMITTED_ELEMENT_WISE = (FusedMultiplyAddOp, *_ARITHMETIC, ew.ExpOp, ConvertOp, ew.MaxOp, ew.MinOp, *_UNARY_BINARY)
"""The element-wise ops XLA's loop emitter visits and emits in a fusion (:meth:`_Ranks.emitted_from`)."""


def _one_reader(value: SSAValue) -> bool:
    """Whether one op reads ``value`` (however many of its operands)."""
    return len({id(use.operation) for use in value.uses}) == 1


class _Unranked(Exception):
    """An expression :class:`_Ranks` cannot rank as LLVM does."""


class _Ranks:
    """LLVM's ``Reassociate`` ranks of values in XLA's fused loop, which order a commutative op's operands
    (``canonicalizeOperands``: the lower rank first): a constant 0, a value the loop loads (an argument of the
    fusion) the next rank in the order the emitter first reads it (operand 0's expression first), an add,
    subtract or multiply one more than its highest operand (a ``negate`` the same). A scalar (a rank-0 argument
    or an expression of them, broadcast into the loop) ranks below every array value: it is computed before the
    loop's block (measured: ``0.1 * (g * (c + 1)) + 0.9 * mu`` with a scalar ``c`` fuses the first product,
    adam's first moment in a loop with a count-scaled gradient). Not in a while loop XLA compiles whole
    (``xla-small-loops``, ``scalars_loaded``): its IR emitter loads a scalar inside the element loop, in the order it
    reads it, like an array (measured: ``fori_loop(0, 5, lambda i, v: v * w + v * 0.5, x)`` with a scalar ``w``
    fuses ``v * 0.5``, read from XLA's optimized LLVM IR; every element of 49 of 50 draws differed with ``v * w``
    fused). An exp is an ``llvm.exp`` call when Reassociate runs, one rank above its operand; so is a float max or
    min, and a conversion. Other element-wise ops
    raise :class:`_Unranked` (their expansions' ranks are not modelled: a GRU's gates kept their order, bitwise)."""

    LOADS = 1 << 16
    SCALAR = 1

    def __init__(self, scalars_loaded: bool = False):
        self.ranks: dict[SSAValue, int] = {}
        self.loads = 0
        self.scalars_loaded = scalars_loaded

    def _kind(self, value: SSAValue) -> str:
        """How XLA's loop emitter treats ``value`` in the fusion :meth:`of` ranks: ``"free"`` (a constant, or a scalar
        computed before the loop), ``"element-wise"`` (an op whose operands its emitter visits breadth-first),
        ``"moved"`` (a broadcast, a move or a concatenate read in place: emitted with its operands on demand),
        ``"injected"`` (the hero of a concatenate fusion: :func:`_injected_concatenate`) or ``"load"`` (a value the
        fusion loads: a parameter of it)."""
        owner = value.owner
        if isinstance(owner, ConstantOp) or (not value.type.get_shape() and not self.scalars_loaded):
            return "free"
        if _injected_concatenate(value):
            return "injected"
        if isinstance(owner, BroadcastInDimOp) or _is_move(owner) or (
                isinstance(owner, ConcatenateOp) and _one_reader(value)):
            return "moved"
        if isinstance(owner, _EMITTED_ELEMENT_WISE) and not _read_by_a_dot(value):
            return "element-wise"
        return "load"

    def emitted_from(self, root: Operation) -> None:
        """Rank the values the fusion whose root is ``root`` loads in the order XLA's loop emitter (jax 0.10.2,
        ``SubgraphConverter::EmitElementwiseInstruction``) first loads them: it visits the element-wise ops
        breadth-first from the root, each op's operands last to first, and emits them in the reverse of that visit;
        an op's operand not emitted yet is emitted where the op needs it (an element-wise one the same way, from
        itself). So ``x * y + x * 3`` loads ``y`` before ``x`` -- ``x`` is first reached from ``x * 3`` -- and
        ``x * y`` ranks with ``x * 3`` (a tie: XLA fuses ``x * y``, read from XLA's MLIR and LLVM IR dumps), where
        reading operand 0's expression first ranked ``x`` lower and fused ``x * 3``. Only for the fusions that emitter
        compiles (:func:`_loop_emitter_fusion`, outside the while loops XLA compiles whole): the others read operand
        0's expression first (``x * y + x * x`` fuses ``x * x``, measured)."""
        emitted: set[SSAValue] = set()

        def emit(value: SSAValue) -> None:  # (EmitInstruction: once per value)
            if value in emitted:
                return
            if self._kind(value) == "element-wise":
                emit_breadth_first(value)
            else:
                emit_one(value)

        def emit_one(value: SSAValue) -> None:  # (HloToMlir: its operands on demand, in order)
            kind = self._kind(value)
            if kind == "load":
                if value not in self.ranks:
                    self.loads += 1
                    self.ranks[value] = self.LOADS + self.loads
            elif kind == "injected":
                self.ranks[value] = self.SCALAR  # (an argument of the epilogue's function: below its loads)
            elif kind != "free":
                for operand in value.owner.operands:
                    emit(operand)
            emitted.add(value)

        def emit_breadth_first(value: SSAValue) -> None:
            queue, visited, visit = deque([value]), {value}, []
            while queue:
                current = queue.popleft()
                visit.append(current)
                if self._kind(current) == "element-wise":
                    for operand in reversed(current.owner.operands):
                        if operand not in emitted and operand not in visited:
                            visited.add(operand)
                            queue.append(operand)
            for current in reversed(visit):
                emit_one(current)

        emit(root.results[0])

    def of(self, value: SSAValue) -> int:
        """``value``'s rank (the values the loop loads ranked by :meth:`emitted_from` where it was called, else in the
        order this reads them, operand 0's expression first)."""
        rank = self.ranks.get(value)
        if rank is not None:
            return rank
        owner = value.owner
        if isinstance(owner, ConstantOp):
            rank = 0
        elif _read_by_a_dot(value) and value.type.get_shape():
            self.loads += 1  # (computed by a fusion of its own: loaded)
            rank = self.LOADS + self.loads
        elif not value.type.get_shape() and not self.scalars_loaded:
            rank = self.SCALAR  # (computed before the loop: below every value the loop body loads)
        elif isinstance(owner, BroadcastInDimOp) or _is_move(owner):
            rank = self.of(owner.operands[0])
        elif isinstance(owner, ConcatenateOp) and _one_reader(value):
            # (elements of one value or the other: _contract_shared_slice. A concatenate two ops read is not fused
            # into them -- XLA does not duplicate a producer of several operands -- but computed once, and loaded:
            # measured, ``v * (v - 1) + x * 2`` with ``v = jnp.roll(x, 1)``; long fuzz campaign, session 21)
            rank = max(self.of(v) for v in owner.operands)
        elif isinstance(owner, FusedMultiplyAddOp):  # (c + a*b before LLVM contracts it)
            a, b, c = owner.operands
            rank = max(max(self.of(a), self.of(b)) + 1, self.of(c)) + 1
        elif isinstance(owner, _ARITHMETIC):
            rank = max(self.of(v) for v in owner.operands) + (0 if isinstance(owner, _NEG) else 1)
        elif isinstance(owner, ew.ExpOp):  # (an ``llvm.exp`` call when Reassociate runs: one instruction)
            rank = self.of(owner.operands[0]) + 1
        elif isinstance(owner, ConvertOp):  # (an fptrunc, fpext, sitofp...: one instruction)
            # (measured: ``v * x + v * s`` with ``v = f32(f16(x))`` and a scalar ``s`` ties, and keeps its order:
            # long fuzz campaign, session 20; ranked as a value the loop loads, the second product went first)
            rank = self.of(owner.operands[0]) + 1
        elif isinstance(owner, (ew.MaxOp, ew.MinOp)) and element_name(value) in ("f16", "f32", "f64"):
            # (one instruction too: measured, ``max(a, b) * 2 + (a * b) * b`` keeps its order on f32[4096] -- a tie
            # -- and ``v * (v * v) + v * 2`` with ``v = jnp.minimum(a, b)`` fuses ``v * 2``, straight-line and in
            # loops; long fuzz campaign, session 20)
            rank = max(self.of(v) for v in owner.operands) + 1
        elif isinstance(owner, _UNARY_BINARY):
            # XLA's emitters expand other element-wise ops (tanh, logistic, divide...) into their own
            # instruction sequences and calls, whose ranks are not modelled: such an add keeps its order.
            raise _Unranked
        else:
            self.loads += 1
            rank = self.LOADS + self.loads
        self.ranks[value] = rank
        return rank


def _negated(value: SSAValue) -> bool:
    """Whether LLVM's InstCombine sees ``value`` as a negation: a negative constant (or its broadcast), a
    ``negate``, or a product of an odd number of such factors (``(-2 * dt) * x`` is ``-((2 * dt) * x)`` to it)."""
    owner = value.owner
    if isinstance(owner, BroadcastInDimOp) or _is_move(owner):
        return _negated(owner.operands[0])
    if isinstance(owner, _NEG):
        return not _negated(owner.operands[0])
    if isinstance(owner, _MUL):
        return _negated(owner.operands[0]) != _negated(owner.operands[1])
    if isinstance(owner, ConstantOp):
        splat = owner.splat_value()
        return splat is not None and np.asarray(splat).dtype.kind == "f" and bool(np.signbit(splat)) \
            and not np.isnan(splat)
    return False


def _signed_factors(value: SSAValue, number) -> tuple[bool, tuple] | None:
    """The product ``value`` of two factors as (negated, sorted factor numbers) with its negations taken out, as XLA's
    simplifier (a ``negate`` factor of a computed value) and LLVM's InstCombine (a negative constant factor, its
    magnitude then the factor) take them out; None when ``value`` is not such a product."""
    owner = value.owner
    if not isinstance(owner, _MUL) or len(owner.operands) != 2:
        return None
    negated, numbers = False, []
    for factor in owner.operands:
        inner = _negated_factor(factor)
        if inner is not None:
            negated, factor = not negated, inner
        constant = splat_value(factor)
        if constant is not None and np.asarray(constant).dtype.kind == "f" and not np.isnan(constant):
            negated ^= bool(np.signbit(constant))
            numbers.append(("constant", abs(float(constant))))
        else:
            numbers.append(("value", number(factor)))
    return negated, tuple(sorted(numbers, key=repr))


def _one_product_up_to_sign(x: SSAValue, y: SSAValue, subtract: bool, number) -> bool:
    """Whether the add (``subtract``: subtract) of ``x`` and ``y`` is ``P - P`` of one product ``P`` once the
    negations are taken out of both (:func:`_signed_factors`): ``v * -y + v * y`` and ``v * -3.0 + v * 3.0`` are
    ``v*y - v*y`` and ``v*3 - v*3`` of one rounded product to XLA and LLVM, a zero (a NaN for infinite products),
    which LLVM does not contract: its multiply has two uses (measured f32 and f64 on 64 elements: every element of
    ``v * -y + v * y`` differed, the FMA giving the product's rounding error). ``number``: XLA's CSE numbering of
    the pass (:class:`_Uses`)."""
    a, b = _signed_factors(x, number), _signed_factors(y, number)
    if a is None or b is None or a[1] != b[1]:
        return False
    return (a[0] != b[0]) != subtract


def _negated_in_hlo(value: SSAValue) -> bool:
    """Whether XLA's algebraic simplifier sees the product ``value`` as a negation it moves out of the product: a
    ``negate`` of a computed value as one of its two factors (``A * -B`` is ``-(A * B)``, so ``A * -B + C * D``
    is the subtraction ``C * D - A * B`` before LLVM sees it, whose operand 0 LLVM fuses -- also where ``C`` is a
    negative constant, which only LLVM reads as a negation: ``v * -y + v * -3.0`` is ``fma(v, -3, -(v * y))`` in
    XLA, measured on 1,000 elements f64, either operand order, found by the long fuzz campaign, session 30; a
    negation deeper in the product, ``(v * -y) * 2.0``, is not: measured). A negated constant is a constant (XLA
    folds it); ``-(A * B)`` itself is a negation."""
    owner = value.owner
    if isinstance(owner, BroadcastInDimOp) or _is_move(owner):
        return _negated_in_hlo(owner.operands[0])
    if isinstance(owner, _NEG):
        return _negated_factor(owner.operands[0]) is None
    if isinstance(owner, _MUL):
        return (_negated_factor(owner.operands[0]) is not None) != (_negated_factor(owner.operands[1]) is not None)
    return False


def _negated_factor(value: SSAValue) -> SSAValue | None:
    """The value ``value`` negates when it is a ``negate`` of a computed value (through broadcasts and moves) in the
    product's own loop, else None (a negated constant is a constant; a negation XLA moves out of a while loop reaches
    the product as a loaded value: ``v * -y`` of a captured ``y`` in a ``fori_loop`` is not rewritten, measured)."""
    owner = value.owner
    if isinstance(owner, BroadcastInDimOp) or _is_move(owner):
        return _negated_factor(owner.operands[0])
    if (isinstance(owner, _NEG) and not isinstance(owner.operands[0].owner, ConstantOp)
            and not moved_out_of_its_loop(owner)):  # (``-y`` of a captured ``y``: computed before the loop, loaded)
        return owner.operands[0]
    return None


def _new(cls, operands: list[SSAValue], result_type, before: Operation) -> SSAValue:
    op = cls.create(operands=operands, result_types=[result_type])
    before.parent.insert_op_before(op, before)
    return op.results[0]


def _scaled_by_exponent(value: SSAValue, user: Operation) -> bool:
    """Whether ``value`` is an f32 ``exp`` whose final multiply LLVM may contract into the add or subtract ``user``:
    XLA's f32 exp ends by scaling its polynomial by ``2**k`` (an ``fmul`` of the polynomial and the exponent's bits,
    read in XLA's optimized LLVM IR), which the DAG combiner contracts into the add that reads it unless it
    contracts a product the add reads instead (:func:`_contracted_exp_operand`, :func:`_exp_multiply_seen`). The
    contracted scaling makes the add one :class:`~xla_dialect.internal.ExpAddOp` (:func:`_contract_exp`): the same
    as the exp rounded, then added, but where the exp's product overflows or falls below the normal range. f64's
    exp and the other transcendental functions end otherwise. Not an exp XLA computes with glibc's ``expf``
    (``GLIBC_EXP_TAIL``, or a vector of 5 or 6 elements in XLA's own vectorized fusions: a call each, no
    multiply), nor one XLA moves out of the loop the add is in (stored: a value like any other)."""
    owner = value.owner
    if not (isinstance(owner, ew.ExpOp) and owner.parent is user.parent and YNNPACK not in owner.attributes
            and GLIBC_EXP_TAIL not in owner.attributes and element_name(value) == "f32"
            and len(list(value.uses)) == 1):
        return False
    if moved_out_of_its_loop(owner) and not moved_out_of_its_loop(user):
        return False  # (computed before the loop and stored: a value like any other)
    shape = [d for d in user.results[0].type.get_shape() if d != 1]
    if not _inside_small_loop(user) and not _loop_emitter_fusion(user):
        # (but for a vector of 5 or 6 elements LLVM calls glibc's expf for each: no multiply -- read in XLA's
        # optimized IR; of 3 or 7 it does so for some readers and widens the vector for others, and the values
        # themselves are not reproduced: docs/operations.md)
        return not (len(shape) == 1 and shape[0] in (5, 6))
    if (_vectorized_loop(user.results[0].type.get_shape(), _inside_small_loop(user)) == "rows" and len(shape) == 2
            and shape[1] in (2, 4, 8)
            and any(_is_constant(v) for v in user.operands if v is not value)):
        # (a loop vectorized across rows stores each row's elements through one interleaving shuffle, and LLVM's
        # VectorCombine moves the adds of one constant past it: ``fadd <64 x float> (shuffle ...), splat``, read
        # in XLA's optimized IR of ``exp(x) - 3e38`` on f32[8, 8]; measured: [4, 2], [4, 4], [4, 8], [8, 2],
        # [8, 4], [8, 8], [16, 2] rounded, [4, 3], [4, 16], [8, 3], [8, 16] and a scalar operand contracted)
        return False
    return True


def _is_constant(value: SSAValue) -> bool:
    """Whether ``value`` is a constant or a broadcast of one."""
    owner = value.owner
    while isinstance(owner, BroadcastInDimOp):
        owner = owner.operands[0].owner
    return isinstance(owner, ConstantOp)


def _inside_small_loop(op: Operation) -> bool:
    """Whether ``op`` is in the body of a while loop XLA compiles whole (``xla-small-loops``), at any depth."""
    enclosing = op.parent_op()
    while enclosing is not None:
        if isinstance(enclosing, WhileOp) and is_small_loop(enclosing):
            return True
        enclosing = enclosing.parent_op()
    return False


def _injected_concatenate(value: SSAValue) -> bool:
    """Whether ``value`` is a concatenate of the program one op reads: in a fusion XLA's loop emitter compiles it is
    the hero of a concatenate fusion, whose element each piece's loop hands to the ops after it (the epilogue, a
    function of its own when LLVM's ``Reassociate`` runs) as an argument, ranked below every value the epilogue loads
    (read from XLA's LLVM IR: ``jnp.roll(x, 1) * c + x * 2`` with ``c`` a conditional's result fuses the first
    product, ranked as ``x`` the second)."""
    owner = value.owner
    return (isinstance(owner, ConcatenateOp) and SHARED_SLICE_PIECES not in owner.attributes
            and _one_reader(value))


def _fusion_root(op: Operation) -> Operation:
    """The last op of the element-wise chain ``op`` heads into through single users: the root XLA's emitter starts
    from for the fusion holding ``op`` (:meth:`_Ranks.emitted_from`)."""
    while len(op.results) == 1:
        users = {id(use.operation): use.operation for use in op.results[0].uses}
        if len(users) != 1:
            break
        (user,) = users.values()
        if not isinstance(user, _EMITTED_ELEMENT_WISE) or user.parent_block() is not op.parent_block():
            break
        op = user
    return op


def _first_operand(op: Operation, ranks: _Ranks) -> int:
    """Which operand of the commutative ``op`` LLVM's ``Reassociate`` puts first: the lower-ranked one, a tie keeping
    the order (:class:`_Ranks`, the loads in the order XLA's emitter reads them; raises :class:`_Unranked`)."""
    root = _fusion_root(op)
    if not ranks.scalars_loaded and (_loop_emitter_fusion(op) or _loop_emitter_fusion(root)):
        ranks.emitted_from(root)  # (XLA's loop emitter; its other emitters read operand 0's expression first)
    first_rank = ranks.of(op.operands[0])
    return 1 if ranks.of(op.operands[1]) < first_rank else 0


def _contracted_exp_operand(op: Operation, uses: _Uses) -> int | None:
    """Which operand of the add or subtract ``op`` is an f32 exp whose own scaling multiply LLVM contracts into it
    (:func:`_scaled_by_exponent`) rather than a product operand, if one is: the DAG combiner contracts operand 0's
    multiply, after ``Reassociate`` has ordered an add's operands by rank (:func:`_first_operand`; the exp is an
    ``llvm.exp`` call then, one rank above its operand); a subtraction keeps its order, and contracts its operand 1's
    multiply where operand 0 is none (``c - exp(x)``). Measured, f32[64] to [64, 512]: ``v*s + exp(x)``,
    ``v*y + exp(x)``, ``x*s + exp(x)``, ``y*x + exp(x)`` fuse the product (before: 697 of 4,096 elements of ``v*s +
    exp(x)`` differed); ``x*y + exp(x)`` ranks the exp first (its load of ``x`` is the product's first) and rounds
    the product, as ``exp(x) + v*y`` does. Not modelled: where LLVM vectorizes across rows ([8, 3], [8, 4],
    [16, 3]: ``_vectorized_loop``), ``v*s + exp(x)`` rounds the product on some elements (43 to 71 of 12 draws)."""
    exps = [i for i, v in enumerate(op.operands) if _scaled_by_exponent(v, op)]
    if not exps:
        return None
    first = exps[0]
    if isinstance(op, _SUB):
        if first == 1 and _fusible_product(op.operands[0], op, uses) is not None:
            return None  # (x*y - exp(x): LLVM's fsub combine contracts operand 0's multiply first)
        return first
    if len(exps) == 1 and _fusible_product(op.operands[1 - first], op, uses) is None:
        return first  # (the only multiply)
    try:
        ranked_first = _first_operand(op, _Ranks())
    except _Unranked:
        return first  # (the order XLA emits: operand 0's exp, measured before ranks were modelled)
    return ranked_first if ranked_first in exps else None


def _exp_multiply_seen(user: Operation) -> bool | np.ndarray:
    """Whether LLVM contracts the final multiply of an f32 exp that the add or subtract ``user`` reads rather than a
    product it reads too (``exp(x) + y * z``; without such a product the exp's multiply is contracted wherever the
    exp has one: :func:`_scaled_by_exponent`): True, False, or a bool array of ``user``'s shape, True at the elements
    computed in vector code. In vector code the DAG combiner sees both multiplies and contracts operand 0's
    (:func:`_contracted_exp_operand`); in scalar code (an unrolled loop, a vector loop's remainder) XLA computes the
    exp as a one-element vector whose multiply the combiner sees only after type legalization, once it has
    contracted the scalar product. XLA's fusion emitter vectorizes a fusion of arrays of one shape itself (``exp(x)
    + y * z``, straight-line code) in vectors of 8 along an innermost dimension of more than one element, the rest
    of a dimension of 9 to 15 in a narrower vector where there is one (a remainder of 2, 4 or 7; measured: of 9, 11,
    13 and 14 elements those from the ninth on are scalar code -- or glibc's ``expf``, no multiply either -- of 10,
    12 and 15 none; [2, 9], [3, 5], [2, 3] all vector code); a fusion with a constant or a broadcast
    (:func:`_loop_emitter_fusion`) and every fusion inside a while loop XLA compiles whole (``xla-small-loops``) are
    loops that LLVM vectorizes or unrolls (:func:`_vectorized_loop`), the last ``c % 4`` elements of a vectorized
    innermost loop of ``c`` its scalar remainder (measured: [43] to [63], [3, 38] to [3, 43], [5, 63])."""
    full = tuple(user.results[0].type.get_shape())
    if not _inside_small_loop(user) and not _loop_emitter_fusion(user):
        # (by the innermost dimension: f32[2, 1] and [9, 1] are scalar code, [1, 9] and [2, 3] vector code)
        if not full or full[-1] == 1:
            return False
        shape = [d for d in full if d != 1]
        if len(shape) == 1 and 8 < shape[0] < 16 and shape[0] - 8 in (1, 3, 5, 6):
            return _vector_part(full, shape[0] - 8)
        return True
    how = _vectorized_loop(full, in_small_loop=_inside_small_loop(user))
    if how == "inner" and full[-1] % 4:
        return _vector_part(full, full[-1] % 4)
    return how != ""


def _vector_part(shape: tuple[int, ...], scalar_tail: int) -> np.ndarray:
    """A bool array of ``shape``: False at the last ``scalar_tail`` elements of each innermost row."""
    mask = np.ones(shape, bool)
    mask[..., shape[-1] - scalar_tail:] = False
    return mask


def _vectorized_loop(full_shape, in_small_loop: bool) -> str:
    """How LLVM vectorizes the element loop of an XLA loop-emitter fusion of ``full_shape`` (by its dimensions other
    than 1: ``shape``), measured with jax 0.10.2 through ``exp(x) - 2 * x`` at ``x = +inf`` (``-inf`` where the
    exp's multiply is contracted, in vector code; NaN where the product is):

    * one dimension of ``n``: vectorized from :func:`vectorized_loop_length` elements, fully unrolled below;
    * several, the innermost of ``c``: the innermost loop vectorized from :data:`VECTORIZED_INNER_LOOP` elements in
      straight-line code (AMD EPYC: [3, 38], [2, 38], [5, 38] vectorized, [3, 37], [2, 37], [5, 37] not), from
      :func:`vectorized_loop_length` inside a while loop XLA compiles whole ([3, 43] vectorized, [3, 40] not);
      below that, unrolled, and two dimensions of 4, 8 or 16 rows (of two or more) vectorized across the rows
      ([4, 2] to [4, 24], [8, 2] to [8, 64], [16, 2], [16, 16] vectorized, rows of 5, 6, 7, 9, 10 or 12 not);
      from 17 rows on a main vector loop of 16 rows and an epilogue, the last rows scalar code (measured, 2
      columns: 17 to 19 rows -> rows 16 on scalar, 20 and 24 none, 21 to 23 rows 20 on, 25 to 31 rows 24 on, 33
      and 36 rows 32 on; 28 rows of 3 none: not modelled);
    * inside a while loop XLA compiles whole, a column of three or more rows (``[r, 1]``, ``[r, 1, 1]``) vectorized
      across them ([3, 1] to [16, 1]; [2, 1] not; straight-line [4, 1] and [8, 1] not).

    ``"inner"`` (the innermost loop), ``"rows"`` (across the rows) or ``""`` (not: unrolled). Not modelled: the last
    ``c % 4`` elements of each vectorized row are the vector loop's scalar remainder, computed as in an unrolled
    loop (measured: [43] to [63], [3, 38] to [3, 43], [5, 63])."""
    shape = [d for d in full_shape if d != 1]
    if not shape:
        return ""
    if in_small_loop and full_shape[-1] == 1 and int(np.prod(shape)) >= 3:
        return "rows"
    if len(shape) == 1:
        return "inner" if shape[0] >= vectorized_loop_length() else ""
    inner = vectorized_loop_length() if in_small_loop else VECTORIZED_INNER_LOOP
    if shape[-1] >= inner:
        return "inner"
    return "rows" if len(shape) == 2 and shape[0] in (4, 8, 16) else ""


def _loop_emitter_fusion(user: Operation, depth: int = 3) -> bool:
    """Whether the element-wise expression of ``user`` (to ``depth`` ops back, through element-wise ops of its
    block) reads a constant or a broadcast -- in XLA's fusion of it, which its loop emitter then compiles (read
    from XLA's dumps: ``exp(x) + v`` and ``exp(x) * v`` are ``__compute_module_*`` fusions, ``exp(x) + 1`` and
    ``exp(x) + v * s`` loop-emitter ``*_kernel_module`` ones)."""
    for value in user.operands:
        owner = value.owner
        if isinstance(owner, (ConstantOp, BroadcastInDimOp)):
            return True
        if (depth > 1 and isinstance(owner, _UNARY_BINARY) and owner.parent is user.parent
                and _loop_emitter_fusion(owner, depth - 1)):
            return True
    return False


VECTORIZED_INNER_LOOP = 38
"""The fewest elements of the innermost dimension of a straight-line loop-emitter fusion of several dimensions whose
loop LLVM vectorizes (:func:`_vectorized_loop`; measured with jax 0.10.2 on an AMD EPYC, f32, 2 to 5 rows)."""


def vectorized_loop_length() -> int:
    """The fewest elements of a one-dimensional loop-emitter fusion (``exp(x) + y * c``) whose loop LLVM vectorizes
    rather than unrolls fully (:func:`_vectorized_loop`), on this host: 43 where LLVM tunes for 64-byte vectors
    (:func:`~lowering.kernels.host.prefers_wide_vectors`; measured on an AMD EPYC, 38 to 42 elements unrolled), 38
    elsewhere (measured on an earlier host with 32-byte vectors: 37 and fewer unrolled, 38 to 130 vectorized)."""
    return 43 if prefers_wide_vectors() else 38


def _contract(op: Operation, uses: _Uses) -> bool:
    """Replace ``op`` (an add or subtract) by an FMA if an operand is a fusible multiply."""
    x, y = op.operands
    exp_operand = _contracted_exp_operand(op, uses)
    beside_exp = exp_operand is not None
    t = op.results[0].type
    order = [(0, x), (1, y)]
    if isinstance(op, (_ADD, _SUB)) and _one_product_up_to_sign(x, y, isinstance(op, _SUB), uses.number):
        return False  # (XLA and LLVM compute ``P - P`` of one rounded product: nothing to fuse, module doc)
    if isinstance(op, _ADD) and all(_fusible_product(v, op, uses) is not None for v in (x, y)):
        try:
            if _first_operand(op, _Ranks(scalars_loaded=_inside_small_loop(op))) == 1:
                order.reverse()  # Reassociate puts the lower-ranked operand first (module doc)
        except _Unranked:
            pass
        behind = [_behind_move(*_fusible_product(v, op, uses)[:2]) for _, v in order]
        if behind[0] and not behind[1]:
            order.reverse()  # XLA fuses the product it reads directly, not the one behind a move (module doc)
        first, second = (order[0][1], order[1][1])
        hoisted = [_negated_in_hlo(first), _negated_in_hlo(second)]
        if hoisted[0] and hoisted[1]:
            # (XLA's simplifier makes -P + -Q the subtraction -P - Q; LLVM cannot fuse a negated multiply as
            # operand 0 of an fsub and fuses Q: measured, ``v * -y + (-v) * z`` either order, f32 and f64)
            order.reverse()
        elif hoisted[0] != hoisted[1]:
            if hoisted[0]:
                order.reverse()  # XLA's simplifier makes -P + Q the subtraction Q - P: LLVM fuses Q (module doc)
        elif _negated(first) and not _negated(second):
            order.reverse()  # LLVM makes -P + Q the subtraction Q - P and fuses Q (module doc)
    seen = _exp_multiply_seen(op) if beside_exp else False  # (True, False, or per element: vector code)
    for index, value in order:
        found = _fusible_product(value, op, uses)
        if found is None:
            continue
        mul, chain, negate = found
        a, b = mul.operands
        if seen is True:
            continue  # (the exp's own scaling multiply is contracted: _scaled_by_exponent)
        if negate is not None:  # (-(c * x) as x * -c: the constant negated, exact)
            if _constant_factor(a):
                a = _new(_NEG, [a], a.type, op)
            else:
                b = _new(_NEG, [b], b.type, op)
        if chain:  # (c - (a*b).T -> fma(-a.T, b.T, c): the moves replayed on the factors)
            moved = _replayed(a, chain, op)
            a, b = moved, (moved if b is a else _replayed(b, chain, op))
        other = y if index == 0 else x
        if isinstance(op, _SUB):
            if index == 0:  # a*b - c -> fma(a, b, -c)
                other = _new(_NEG, [other], other.type, op)
            else:  # c - a*b -> fma(-a, b, c)
                a = _new(_NEG, [a], a.type, op)
        fused = _new(FusedMultiplyAddOp, [a, b, other], t, op)
        if BF16_FLUSHED_STORE in op.attributes:  # (the FMA's result is what the add stored)
            fused.owner.attributes[BF16_FLUSHED_STORE] = op.attributes[BF16_FLUSHED_STORE]
        if isinstance(seen, np.ndarray):  # (vector code contracts the exp's multiply, scalar code the product)
            contracted = _exp_add(op, exp_operand).results[0]
            mask = make_constant(seen, make_tensor(pred_type(), seen.shape))
            op.parent.insert_op_before(mask, op)
            chosen = _new(ew.SelectOp, [mask.results[0], contracted, fused], t, op)
            op.results[0].replace_all_uses_with(chosen)
            op.detach()
            op.erase()  # (the product and the exp stay: each form reads one of them)
            return True
        op.results[0].replace_all_uses_with(fused)
        for dead in (op, *chain, *([negate] if negate is not None else []), mul):
            if dead is mul and mul.results[0].first_use is not None:
                break  # (read by other fusions too: each has its own copy, measured)
            dead.detach()
            dead.erase()
        return True
    if beside_exp:  # (no product, or the exp's multiply contracted before it: _exp_multiply_seen)
        # (made once every contraction is decided: the models of XLA's loops above read the exp and the add)
        uses.exp_adds.append((op, exp_operand))
    return False


def _contract_exp(op: Operation, index: int) -> None:
    """``exp(x) + c``, ``c + exp(x)``, ``exp(x) - c`` or ``c - exp(x)`` (``op``, whose operand ``index`` is the exp
    LLVM contracts: :func:`_contracted_exp_operand`) as one :class:`~xla_dialect.internal.ExpAddOp`: the exp's
    polynomial times its scale plus or minus ``c``, rounded once (measured: ``exp(x) - x`` at ``x = +inf`` is
    ``-inf`` in XLA, NaN rounded; ``exp(88.75) - 3e38`` finite)."""
    fused = _exp_add(op, index)
    op.results[0].replace_all_uses_with(fused.results[0])
    owner = op.operands[index].owner
    op.detach()
    op.erase()
    if owner.results[0].first_use is None:
        owner.detach()
        owner.erase()


def _exp_add(op: Operation, index: int) -> Operation:
    """The :class:`~xla_dialect.internal.ExpAddOp` computing the add or subtract ``op`` whose operand ``index`` is
    an exp with its scaling contracted (:func:`_contract_exp`), inserted before ``op``."""
    exp, c = op.operands[index], op.operands[1 - index]
    properties = {}
    if isinstance(op, _SUB):
        properties = {"subtract": UnitAttr()} if index == 0 else {"exp_subtracted": UnitAttr()}
    fused = ExpAddOp.create(operands=[exp.owner.operands[0], c], result_types=[op.results[0].type],
                            properties=properties)
    op.parent.insert_op_before(fused, op)
    return fused


UNROLLED_SUM_TERMS = 22
"""The longest 1-d sum whose fused loop LLVM unrolls into straight-line code, as measured for the Rosenbrock sum of a
scaled argument (``x * s``, f32[2..23]: scalar code; from 23 terms LLVM vectorizes the loop, not modelled). Other
bodies' limits are not measured (the Rosenbrock sum of ``x`` itself unrolls up to 27 terms)."""


def _slice_bounds(op: SliceOp) -> list[tuple[int, int]] | None:
    """``(start, limit)`` per dimension of a unit-stride ``slice`` (None for other strides)."""
    if any(v != 1 for v in ints(op.strides)):
        return None
    return list(zip(ints(op.start_indices), ints(op.limit_indices)))


def _sum_loop(op: Operation) -> str:
    """Which loop XLA CPU emits ``op`` in, followed through its chain of one-use element-wise readers: ``"unrolled"``,
    a full sum (a ``reduce`` of all dimensions with a body ``add``, :func:`_contracted_sum`) of at most
    :data:`UNROLLED_SUM_TERMS` elements, which LLVM unrolls into straight-line code; ``"sum"``, another sum or a
    reader that is not element-wise (not modelled: the 23-term sum is a vectorized loop); ``""``, none."""
    current = op
    while True:
        readers = list(current.results[0].uses)
        if not readers:
            return ""
        if len({id(use.operation) for use in readers}) != 1:
            return "sum"  # (several readers: not followed)
        reader = readers[0].operation
        if isinstance(reader, (func.ReturnOp, ReturnOp)):
            return ""
        if isinstance(reader, ReduceOp):
            x = reader.operands[0]
            shape = x.type.get_shape()
            unrolled = (reader.parent is op.parent and readers[0].index == 0 and len(shape) > 0
                        and sorted(ints(reader.dimensions)) == list(range(len(shape)))
                        and _elements(x) <= UNROLLED_SUM_TERMS and _contracted_sum(reader, frozenset({"f32", "f64"})))
            return "unrolled" if unrolled else "sum"
        if not isinstance(reader, _LOOP_FUSED) or reader.parent is not op.parent:
            return "sum"
        current = reader


def _shared_slice_product(op: Operation, uses: _Uses):
    """For ``slice(m) - c`` (``op``) with ``m = a * b`` read by other slices in the same fusion: ``(m, slice,
    covered)`` with ``covered`` the dimension and mask of the slice's elements whose product LLVM shares with
    another slice's element, else None.

    XLA's fused loop computes ``m`` once per element each slice reads, so at each element the subtraction's
    product has one use (the slice) and LLVM's DAGCombiner, offered two one-use products
    (``visitFSUBForFMACombine``), fuses operand 0: ``fma(a, b, -c)`` (measured: every element of ``y[1:] -
    y[:-1] ** 2`` with ``y = x * s`` returned as an array). Where the loop is a sum LLVM unrolls
    (:func:`_sum_loop`), it merges the products of ``m``'s elements read by two slices (at different
    iterations) into one with two uses, and fuses the other product instead there: only the elements no other
    slice reads fuse ``m`` (read from XLA's object code of the Rosenbrock sum of ``x * s``, f32[4], [5], [8],
    [16]: ``vfnmadd213ss`` of the square in every term but the last, ``vfmsub231ss`` of ``s * x[-1]`` there)."""
    if not isinstance(op, _SUB) or SHARED_PRODUCT in op.attributes or BF16_SCALAR in op.attributes:
        return None  # (xla-small-loops' straight-line loop bodies: their own rules)
    sliced = op.operands[0]
    slice_op = sliced.owner
    if not isinstance(slice_op, SliceOp) or slice_op.parent is not op.parent or not _is_move(slice_op):
        return None
    if len(list(sliced.uses)) != 1 or op.operands[1] is sliced:
        return None
    mul = slice_op.operands[0].owner
    if not isinstance(mul, _MUL) or mul.parent is not op.parent or YNNPACK in mul.attributes:
        return None
    if computes_on_quantized(mul) or any(v.type != mul.results[0].type for v in mul.operands):
        return None
    mine = _slice_bounds(slice_op)
    if mine is None:
        return None
    duplicated = _duplicated(mul, uses)
    mask = np.zeros(mul.results[0].type.get_shape(), bool)
    others = 0
    for reader, index in uses.readers.get(uses.number(mul.results[0]), []):
        if reader is slice_op:
            continue
        if not isinstance(reader, SliceOp) or reader.parent is not op.parent:
            return None  # (another reader of the whole product: not measured)
        if uses.number(reader.results[0]) == uses.number(sliced):
            return None  # (the same slice twice: one value with two uses to XLA's CSE)
        bounds = _slice_bounds(reader)
        if bounds is None:
            return None
        if _in_another_fusion(reader, index, op):
            if not duplicated:
                return None  # (computed once and stored: rounded)
            continue
        others += 1
        mask[tuple(slice(a, b) for a, b in bounds)] = True
    if not others:
        return None  # (one slice: the ordinary rules)
    covered = mask[tuple(slice(a, b) for a, b in mine)]
    loop = _sum_loop(op)
    if loop == "sum":
        return None
    if loop != "unrolled":
        covered[...] = False
    varying = [d for d in range(covered.ndim) if not (covered == np.take(covered, [0], axis=d)).all()]
    if not covered.size or covered.all() or len(varying) > 1:
        return None  # (every element shared: the ordinary rules; a pattern over two dimensions: not measured)
    return mul, slice_op, (varying[0] if varying else 0, covered)


def _sliced_value(value: SSAValue, dim: int, start: int, limit: int, before: Operation) -> SSAValue:
    """``value[start:limit]`` along ``dim``: a new ``slice`` inserted before ``before``."""
    shape = value.type.get_shape()
    starts = [start if d == dim else 0 for d in range(len(shape))]
    limits = [limit if d == dim else n for d, n in enumerate(shape)]
    sizes = [b - a for a, b in zip(starts, limits)]
    op = SliceOp.create(operands=[value], result_types=[value.type.__class__(value.type.element_type, sizes)],
                        properties={"start_indices": DenseArrayBase.from_list(i64, starts),
                                    "limit_indices": DenseArrayBase.from_list(i64, limits),
                                    "strides": DenseArrayBase.from_list(i64, [1] * len(shape))})
    before.parent.insert_op_before(op, before)
    return op.results[0]


def _contract_shared_slice(op: Operation, uses: _Uses) -> bool:
    """Contract ``slice(m) - c`` where ``m`` is read by other slices in the same fusion
    (:func:`_shared_slice_product`): ``fma(a', b', -c)`` (the slice replayed on ``m``'s factors) at the elements
    whose product LLVM does not share; the others are the subtraction as the ordinary rules contract it (the
    product of ``c`` fused where it is one), put together by slices and a ``concatenate``."""
    found = _shared_slice_product(op, uses)
    if found is None:
        return False
    mul, slice_op, (dim, covered) = found
    x, y = op.operands
    a, b = mul.operands
    a = _replayed(a, [slice_op], op)
    b = a if mul.operands[1] is mul.operands[0] else _replayed(b, [slice_op], op)
    fused = _new(FusedMultiplyAddOp, [a, b, _new(_NEG, [y], y.type, op)], op.results[0].type, op)
    flags = np.moveaxis(covered, dim, 0).reshape(covered.shape[dim], -1)[:, 0]  # (constant across other dimensions)
    if not flags.any():
        op.results[0].replace_all_uses_with(fused)
        op.detach()
        op.erase()
        return True
    rest = op.clone()  # (the shared elements: the subtraction as the ordinary rules contract it)
    for name in [k for k in rest.attributes if k == "hlo.name" or k.startswith("debug.")]:
        rest.attributes.pop(name)
    op.parent.insert_op_before(rest, op)
    pieces, start = [], 0
    for stop in range(1, len(flags) + 1):
        if stop == len(flags) or flags[stop] != flags[start]:
            pieces.append(_sliced_value(rest.results[0] if flags[start] else fused, dim, start, stop, op))
            start = stop
    joined = ConcatenateOp.create(operands=pieces, result_types=[op.results[0].type],
                                  properties={"dimension": IntegerAttr(dim, i64)},
                                  attributes={SHARED_SLICE_PIECES: UnitAttr()})
    op.parent.insert_op_before(joined, op)
    op.results[0].replace_all_uses_with(joined.results[0])
    op.detach()
    op.erase()
    _contract(rest, uses)
    return True


def _candidates(module: Operation, types: frozenset[str]) -> list[Operation]:
    return [op for op in module.walk()
            if isinstance(op, (_ADD, _SUB)) and (element_name(op.results[0]) in types or BF16_SCALAR in op.attributes)
            and not computes_on_quantized(op) and YNNPACK not in op.attributes
            and any(isinstance(_spread_value(v).owner, _MUL) and not computes_on_quantized(_spread_value(v).owner)
                    and YNNPACK not in _spread_value(v).owner.attributes or isinstance(v.owner, ew.ExpOp)
                    for v in op.operands)
            or isinstance(op, ReduceOp) and _contracted_sum(op, types)]


def _contracted_sum(op: ReduceOp, types: frozenset[str]) -> bool:
    """Whether ``op`` is a sum XLA CPU computes as one loop into which it fuses the multiply that is its operand:
    one f32/f64 operand (of ``types``) of fewer than YNNPACK's 4,096 elements whose reduced dimensions are at most
    32 long (no tree rewrite: lowering/kernels/tree_sum.py), a body ``add(p0, p1)``, and an operand that is a
    multiply (a square ``x * x`` too: :func:`lowering.kernels.tree_sum.contracted_sums`)."""
    if len(op.operands) != 2 or len(op.results) != 1:
        return False
    x = op.operands[0]
    product = _sliced_product(x)
    if element_name(op.results[0]) not in types & {"f32", "f64"} or not (isinstance(x.owner, (_MUL, _ADD))
                                                                       or product is not None):
        return False  # (an add of products becomes an FMA first: program order, :func:`_contract_term_sum`)
    if product is not None and computes_on_quantized(product):
        return False
    if computes_on_quantized(x.owner):
        return False
    shape = x.type.get_shape()
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) >= MIN_ELEMENTS:
        return False
    if any(shape[d] > TREE_WINDOW for d in ints(op.dimensions)):
        return False
    block = op.body.block
    body = list(block.ops)
    return (len(body) == 2 and isinstance(body[0], _ADD) and set(body[0].operands) == set(block.args)
            and len(block.args) == 2 and list(body[1].operands) == [body[0].results[0]])


def _fusion_parameter(value: SSAValue) -> bool:
    """Whether XLA CPU reads ``value`` as a parameter of the loop fusion that sums it: a block argument, or the
    result of a collective or a dot (never fused into an element-wise loop)."""
    return isinstance(value, BlockArgument) or isinstance(value.owner, (CollectiveOp, _DotBase))


def _lane_body(a: SSAValue, b: SSAValue) -> str:
    """The body of a sum of ``a * b`` as :func:`lowering.kernels.tree_sum.vector_lanes` names the measured ones
    (``""``: another)."""
    if _fusion_parameter(a) and _fusion_parameter(b):
        return "square" if a is b else "product"
    if a is b and isinstance(a.owner, _SUB) and all(_fusion_parameter(v) for v in a.owner.operands):
        return "computed_square"
    return ""


def _contract_term_sum(op: ReduceOp, uses: _Uses) -> bool:
    """Replace the sum ``op`` (:func:`_contracted_sum`) of a contracted term ``fma(a, b, c * d)`` (the add of two
    products, contracted before: program order) by a :class:`MultiplyAddReduceOp`: the term's FMA and its addend's
    multiply read only here, in the sum's loop, not one of XLA's vectorized full sums."""
    term = op.operands[0].owner
    if (not isinstance(term, FusedMultiplyAddOp) or term.parent is not op.parent
            or len(list(op.operands[0].uses)) != 1):
        return False
    product = term.operands[2].owner
    if not isinstance(product, _MUL) or product.parent is not op.parent or not uses.one_use(term.operands[2]):
        return False
    if product.results[0].type != term.results[0].type or computes_on_quantized(product):
        return False
    shape = term.results[0].type.get_shape()
    if vector_lanes(shape, ints(op.dimensions), numpy_dtype(op.results[0].type), "")[0]:
        return False  # (XLA's vectorized full sums: not measured for a term)
    a, b, _ = term.operands
    c, d = product.operands
    contracted = MultiplyAddReduceOp.create(operands=[a, b, c, d, op.operands[1]], result_types=[op.results[0].type],
                                            properties={"dimensions": op.dimensions})
    return _replace_sum(op, contracted, (term, product))


def _replace_sum(op: ReduceOp, contracted: Operation, dead: tuple[Operation, ...]) -> bool:
    """Put the contracted sum ``contracted`` where the sum ``op`` stands, and erase ``op`` and the ops ``dead``
    that only it read (in use order)."""
    op.parent.insert_op_before(contracted, op)
    op.results[0].replace_all_uses_with(contracted.results[0])
    for erased in (op, *dead):
        erased.detach()
        erased.erase()
    return True


def _sliced_product(value: SSAValue) -> Operation | None:
    """The multiply ``value`` is a slice of (``(x * t)[1:]``) when nothing else reads the product, else None: XLA
    fuses the slice into the sum's loop as index arithmetic, so the loop multiplies the sliced elements and LLVM
    contracts each step as for an unsliced product (measured: ``jnp.sum((x * t)[1:])`` on f32[5] equal to jax.jit
    0.10.2's as a chain of fused multiply-adds; 72 of 200 draws differed with the rounded products)."""
    slice_op = value.owner
    if not isinstance(slice_op, SliceOp) or len(list(value.uses)) != 1:
        return None
    product = slice_op.operands[0].owner
    if not isinstance(product, _MUL) or product.parent is not slice_op.parent \
            or len(list(slice_op.operands[0].uses)) != 1:
        return None
    return product


def _contract_sliced_sum(op: ReduceOp) -> bool:
    """Replace the sum ``op`` of a slice of a product (:func:`_sliced_product`) by a :class:`MultiplyReduceOp` of
    the sliced factors (slicing commutes with the element-wise multiply: the same elements, contracted)."""
    slice_op = op.operands[0].owner
    product = _sliced_product(op.operands[0])
    factors = []
    for factor in product.operands:
        sliced = SliceOp.create(operands=[factor], result_types=[slice_op.results[0].type.__class__(
            factor.type.element_type, slice_op.results[0].type.get_shape())], properties=dict(slice_op.properties),
            attributes=dict(slice_op.attributes))
        op.parent.insert_op_before(sliced, op)
        factors.append(sliced.results[0])
    contracted = MultiplyReduceOp.create(operands=[*factors, op.operands[1]], result_types=[op.results[0].type],
                                         properties={"dimensions": op.dimensions, "rounded_rows": IntegerAttr(0, i64)})
    return _replace_sum(op, contracted, (slice_op, product))


def _contract_sum(op: ReduceOp, uses: _Uses) -> bool:
    """Replace the sum ``op`` (:func:`_contracted_sum`) of a fusible multiply by a :class:`MultiplyReduceOp`."""
    if _sliced_product(op.operands[0]) is not None:
        return _contract_sliced_sum(op)
    if not isinstance(op.operands[0].owner, _MUL):
        return _contract_term_sum(op, uses)
    mul = op.operands[0].owner
    if mul.parent is not op.parent or not (uses.one_use(op.operands[0]) or _duplicated(mul, uses)):
        return False  # (another reader of a product XLA computes once: rounded once for all of them, measured)
    a, b = mul.operands
    rounded = 0
    if all(isinstance(v, BlockArgument) for v in (a, b)):  # (computed factors: contracted throughout, measured)
        rounded = rounded_product_rows(a.type.get_shape(), ints(op.dimensions), numpy_dtype(op.results[0].type))
    properties = {"dimensions": op.dimensions, "rounded_rows": IntegerAttr(rounded, i64)}
    lanes, rounded_lanes = vector_lanes(a.type.get_shape(), ints(op.dimensions), numpy_dtype(op.results[0].type),
                                        _lane_body(a, b))
    if lanes:
        properties["lanes"] = IntegerAttr(lanes, i64)
        properties["rounded_rows"] = IntegerAttr(int(rounded_lanes), i64)
    contracted = MultiplyReduceOp.create(operands=[a, b, op.operands[1]], result_types=[op.results[0].type],
                                         properties=properties)
    op.parent.insert_op_before(contracted, op)
    op.results[0].replace_all_uses_with(contracted.results[0])
    op.detach()
    op.erase()
    if mul.results[0].first_use is None:  # (else read by other fusions, each with its own copy)
        mul.detach()
        mul.erase()
    return True


def contract_fma(module: ModuleOp, clone: bool = False, types: frozenset[str] | None = None) -> ModuleOp:
    """``module`` with XLA CPU's multiply-add contractions made :class:`FusedMultiplyAddOp`\\ s
    (a copy with ``clone``; ``module`` itself when nothing contracts). ``types``: the element types
    to contract (default: :func:`host_contracted_types`)."""
    types = host_contracted_types() if types is None else frozenset(types)
    if not _candidates(module, types):
        return module
    if clone:
        module = module.clone()
    uses = _Uses(module)  # numbered before any rewrite: the FMAs are not CSE'd
    for op in _candidates(module, types):  # program order: a chain's inner step is contracted first
        if isinstance(op, ReduceOp):
            _contract_sum(op, uses)
        elif not _contract_shared_slice(op, uses):
            _contract(op, uses)
    for op, index in uses.exp_adds:
        _contract_exp(op, index)
    return module


def parse_contracted_types(spec: str) -> frozenset[str]:
    """The ``types`` option of ``contract-fma``: ``host`` or a comma-separated list of f16, f32, f64."""
    if spec == "host":
        return host_contracted_types()
    names = frozenset(t.strip() for t in spec.split(",") if t.strip())
    unknown = sorted(names - CONTRACTIBLE)
    if unknown:
        raise PassError(f"contract-fma: types={spec!r}: {', '.join(unknown)} cannot be contracted "
                        f"(expected 'host' or a list of {', '.join(sorted(CONTRACTIBLE))})")
    return names


@register_pass
@dataclass(frozen=True)
class ContractFmaPass(PatternPass):
    """``contract-fma{types=host}``: multiply-adds computed as one FMA where XLA CPU's LLVM contracts them."""

    name = "contract-fma"
    types: str = "host"
    """``host`` (f32, f64, and f16 on AVX512-FP16 hosts) or a comma-separated list such as ``f32,f64``."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        contract_fma(op, types=parse_contracted_types(self.types))
