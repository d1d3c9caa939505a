"""XLA CPU's floating-point contraction: ``add``/``subtract`` of a ``multiply`` computed as one FMA.

jax.jit on the CPU does not round ``a * b + c`` twice: XLA fuses the
elementwise ops into one loop and LLVM contracts the multiply into the add
(a fused multiply-add, rounded once). Measured with jax 0.10.2 (bit
comparisons with :func:`lowering.kernels.xla_math.fma32` / ``fma64``, and the
optimized HLO of ``jax.jit(f).lower(*a).compile().as_text()``), for f32 and f64:

* ``a*b + c``, ``c + a*b`` -> ``fma(a, b, c)``; ``a*b - c`` -> ``fma(a, b, -c)``;
  ``c - a*b`` -> ``fma(-a, b, c)`` (100% of elements, every order).
* ``a*a + b*b`` / ``a*a - b*b``: the multiply that is the FIRST operand is
  fused (LLVM's DAGCombiner tries operand 0 first): ``fma(a, a, b*b)``.
* A multiply with more than one use is not fused when its uses land in the
  same XLA fusion: ``(a*b + c, a*b)`` (the product is also returned),
  ``(a*b + c) * (a*b - d)``, ``(a*b + c) * (a*b)`` all round twice (LLVM
  contracts only a one-use ``fmul``). When XLA duplicates such a multiply into
  two separate fusions (``(a*b + c, a*b - d)``) both become FMAs; that case is
  not reproduced here (it depends on XLA's fusion decisions): a multi-use
  multiply is never fused.
* Nothing in between: ``broadcast(a*b) + c`` and ``convert(a*b) + c`` round
  twice (a broadcast OF THE ADDEND is fine: ``x * k + broadcast(c)`` fuses).
* Chains fuse step by step (Horner: ``(p*x + c1)*x + c2`` is two FMAs); the
  product of a dot or a reduce result fuses like any other value.
* f16 and bf16 are unaffected (XLA computes them in f32, where their
  products are exact); complex multiply-adds are left alone (measured equal
  without contraction on ``a*b + a`` in c64).

:func:`contract_fma` rewrites each such pair into :class:`FusedMultiplyAddOp`
(an executor-internal op, never printed or verified as part of the dialect),
with an exact ``negate`` for the subtracting forms. ``lowering.compile`` runs
it unless ``fma_contraction=False``. Ops on quantized types are left alone.
Known limit: with denormals kept (``denormals="keep"``), an f64 FMA whose
result is denormal and whose product is below 2**-900 may round twice.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def
from xdsl.ir import Operation, SSAValue

from xla_dialect.ops import elementwise as ew

from passes.xla_numerics import _element_name

from .kernels.xla_math import fma32, fma64
from .registry import register

_B, _U = ew.BINARY_OP_CLASSES, ew.UNARY_OP_CLASSES
_MUL, _ADD, _SUB, _NEG = _B["multiply"], _B["add"], _B["subtract"], _U["negate"]

_CONTRACTED = frozenset({"f32", "f64"})
"""Element types whose multiply-adds XLA CPU contracts (f16/bf16 compute in f32 with exact products)."""


@irdl_op_definition
class FusedMultiplyAddOp(IRDLOperation):
    """``a * b + c`` rounded once (executor-internal; made only by :func:`contract_fma`)."""

    name = "hlo_internal.fma"
    a = operand_def()
    b = operand_def()
    c = operand_def()
    result = result_def()


_CSE_CLASSES = (*_B.values(), *_U.values())
"""Ops whose duplicates XLA's CSE merges before fusion (the elementwise ones: enough to see that two
``a*b`` written out by jax are one multiply with two uses)."""


class _Uses:
    """Uses of each multiply after XLA's common-subexpression elimination.

    jax writes ``a*b`` twice in ``(a*b + c) * (a*b - d)``; XLA merges the two
    multiplies into one with two uses, which LLVM does not contract. Values are
    numbered (same op, same numbered operands, same type -> same number); the
    uses of a multiply are those of every multiply with its number.
    """

    def __init__(self, module: Operation):
        self._numbers: dict[SSAValue, int] = {}
        self._keys: dict[tuple, int] = {}  # (op, operand numbers, type) -> number: flat keys hash fast
        self.uses: dict[int, int] = {}
        for op in module.walk():
            if isinstance(op, _MUL):
                n = self.number(op.results[0])
                self.uses[n] = self.uses.get(n, 0) + sum(1 for _ in op.results[0].uses)

    def number(self, value: SSAValue) -> int:
        """``value``'s number: equal for values XLA's CSE would merge."""
        n = self._numbers.get(value)
        if n is None:
            op = value.owner
            key = (value,)
            if isinstance(op, _CSE_CLASSES) and not op.regions:
                key = (op.name, id(op.parent), *(self.number(v) for v in op.operands), value.type)
            n = self._numbers[value] = self._keys.setdefault(key, len(self._keys))
        return n

    def one_use(self, value: SSAValue) -> bool:
        """Whether the multiply ``value`` has one use once merged with its duplicates."""
        return self.uses.get(self.number(value)) == 1


def _fusible_product(value: SSAValue, user: Operation, uses: _Uses) -> Operation | None:
    """The ``multiply`` defining ``value`` if LLVM would contract it into ``user``: same block,
    same type, and ``user`` its only use after CSE (a value used twice by ``user`` has two uses)."""
    mul = value.owner
    if (not isinstance(mul, _MUL) or mul.parent is not user.parent or not uses.one_use(value)
            or mul.results[0].type != user.results[0].type):
        return None
    return mul


def _new(cls, operands: list[SSAValue], result_type, before: Operation) -> SSAValue:
    op = cls.create(operands=operands, result_types=[result_type])
    before.parent.insert_op_before(op, before)
    return op.results[0]


def _contract(op: Operation, uses: _Uses) -> bool:
    """Replace ``op`` (an add or subtract) by an FMA if an operand is a fusible multiply."""
    x, y = op.operands
    t = op.results[0].type
    for index, value in enumerate((x, y)):
        mul = _fusible_product(value, op, uses)
        if mul is None:
            continue
        a, b = mul.operands
        other = y if index == 0 else x
        if isinstance(op, _SUB):
            if index == 0:  # a*b - c -> fma(a, b, -c)
                other = _new(_NEG, [other], other.type, op)
            else:  # c - a*b -> fma(-a, b, c)
                a = _new(_NEG, [a], a.type, op)
        fused = _new(FusedMultiplyAddOp, [a, b, other], t, op)
        op.results[0].replace_all_uses_with(fused)
        for dead in (op, mul):
            dead.detach()
            dead.erase()
        return True
    return False


def _candidates(module: Operation) -> list[Operation]:
    from passes.quantized import computes_on_quantized

    return [op for op in module.walk()
            if isinstance(op, (_ADD, _SUB)) and _element_name(op.results[0]) in _CONTRACTED
            and not computes_on_quantized(op)
            and any(isinstance(v.owner, _MUL) and not computes_on_quantized(v.owner) for v in op.operands)]


def contract_fma(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` with XLA CPU's multiply-add contractions made :class:`FusedMultiplyAddOp`\\ s
    (a copy with ``clone``; ``module`` itself when nothing contracts)."""
    if not _candidates(module):
        return module
    if clone:
        module = module.clone()
    uses = _Uses(module)  # numbered before any rewrite: the FMAs are not CSE'd
    for op in _candidates(module):  # program order: a chain's inner step is contracted first
        _contract(op, uses)
    return module


_STEP = 600  # scaling steps of 2**600 keep every operand fma64 handles exact
_BIG, _SMALL, _TINY_PRODUCT, _VANISHING = 995, -900, -900, -1100  # binary exponents
_TINY64 = np.finfo(np.float64).tiny
_STICKY = np.float64(2.0 ** -1000)


def _scaled(x, steps):
    """``x * 2**(600 * steps)`` (integer array ``steps``), one exact multiply per step."""
    for k in range(int(np.max(np.abs(steps), initial=0))):
        x = x * np.where(steps > k, 2.0 ** _STEP, np.where(steps < -k, 2.0 ** -_STEP, 1.0))
    return x


def _fma64_kernel(a, b, c, flush: bool = True):
    """``fma64`` for every f64 operand.

    ``fma64``'s exact (Dekker) product needs factors in [2**-900, 2**995) and a product above
    about 2**-900: other factors are scaled by powers of 2**600 (``c`` by the same power as the
    product) and the result scaled back (a denormal result then rounds twice where denormals are
    kept; XLA's default flushes it). A product below 2**-1100 leaves ``c`` (or a zero of its sign
    when ``c`` is 0); an infinite ``c`` with finite factors is the result (the exact product is
    finite); a zero or non-finite factor computes ``a*b + c`` as IEEE does.
    """
    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    regular = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)
    ea, eb = np.frexp(a)[1], np.frexp(b)[1]
    ea, eb = np.where(regular, ea, 0), np.where(regular, eb, 0)
    sa = np.where(ea >= _BIG, -1, np.where(ea < _SMALL, 1, 0))
    sb = np.where(eb >= _BIG, -1, np.where(eb < _SMALL, 1, 0))
    # a product still below 2**-900 after that: scale the smaller factor once more
    ea2, eb2 = ea + sa * _STEP, eb + sb * _STEP
    low = ea2 + eb2 < _TINY_PRODUCT
    sa = sa + (low & (ea2 <= eb2))
    sb = sb + (low & (ea2 > eb2))
    vanishing = regular & (ea + eb < _VANISHING)
    special = ~regular & ((np.abs(a) >= 2.0 ** _BIG) | (np.abs(b) >= 2.0 ** _BIG) | ~np.isfinite(a * b))
    if not (sa.any() or sb.any() or special.any()):
        return fma64(a, b, c)
    shift = sa + sb
    c_scaled = _scaled(c, shift)
    # A c scaled below 2**-1000 is far below the product's last bit: it only decides ties, by its
    # sign, which 2**-1000 of that sign does as well. One scaled past the largest f64 is the result.
    lost = (shift < 0) & (c != 0) & (np.abs(c_scaled) < _STICKY)
    c_scaled = np.where(lost, np.copysign(_STICKY, c), c_scaled)
    overflow = np.isinf(c_scaled) & np.isfinite(c)
    r = fma64(_scaled(a, sa), _scaled(b, sb), np.where(overflow, 0.0, c_scaled))
    r = np.where(overflow, c, _scaled(r, -shift))
    c_read = np.where(np.abs(c) < _TINY64, 0.0, c) if flush else c  # DAZ reads denormals as 0
    r = np.where(vanishing, np.where(c_read == 0, np.copysign(0.0, a * b), c_read), r)
    r = np.where(special, a * b + c, r)
    return np.where(np.isinf(c) & regular, c, r)


@register(FusedMultiplyAddOp)
def _fma_kernel(op, ctx):
    dtype = ctx.dtype(op.results[0].type)
    if dtype == np.float32:
        kernel = fma32
    else:
        flush = ctx.denormals == "flush"
        kernel = lambda a, b, c: _fma64_kernel(a, b, c, flush)  # noqa: E731
    if not isinstance(op.operands[0].owner, _NEG):
        return kernel

    def negated_product(a, b, c):
        # fma(-x, b, c): LLVM folds the negation into the instruction (vfnmadd), which returns a NaN x
        # with its own sign, not the negated one (measured against jax.jit: c - x*b with x NaN).
        r = kernel(a, b, c)
        return np.where(np.isnan(a) & ~np.isnan(b), np.negative(r), r) if np.isnan(a).any() else r

    return negated_product
