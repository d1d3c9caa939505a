"""``xla-ynnpack-fusion``: the element-wise ops XLA CPU computes inside YNNPACK, marked to use YNNPACK's numerics.

XLA CPU (jax 0.10.2) gives a reduce of 4,096 elements or more to YNNPACK: its ``LibraryRewriter`` starts a
``__ynn_fusion`` at each such reduce and grows it over its neighbours, and YNNPACK then computes every op in
the fusion with its own kernels, one op at a time. For ``exp``, ``log``, ``tanh`` and ``logistic`` those are
other approximations than XLA's own (:mod:`lowering.kernels.ynnpack_math`): the ``exp(x - max(x))`` of a large
softmax differs from XLA's exp in about 4% of its elements. And no multiply is contracted into an add there
(no LLVM loop fuses them): ``sum(gelu(x))`` in f64 differed in 18 of 64 rows before this pass, 0 after. This
pass marks the element-wise ops of those fusions with the attribute :data:`YNNPACK` (``xla_cpu_ynn_fusion``):
the kernels, fused loops and compiled loops use YNNPACK's definitions for the marked exp, log, tanh and
logistic (f32, f64; :mod:`lowering.kernels.scalar`), and ``contract-fma`` leaves a marked add, subtract or
multiply uncontracted.

How the fusion grows (XLA's ``LibraryRewriter::ProcessComputation`` with its YNNPACK matcher, read from its
source and checked against the fusions jax.jit's compiled HLO holds -- ``XLA_FLAGS`` not needed,
``jax.jit(f).lower(x).compile().as_text()`` shows the ``__ynn_fusion`` computations):

* Starters are the reduces of each computation (function bodies and loop and branch bodies; not reduction
  bodies), from the last to the first. One starts a fusion when YNNPACK supports it: one operand, a body
  that is one ``add`` (f32 or f64), ``maximum`` or ``minimum`` (bf16, f16, f32, f64) of its two
  parameters, at least one reduced dimension, and 4,096 elements or more in its operand or result.
* The fusion then grows breadth-first. Upwards: an operand's producer whose users are all in a fusion
  already. Downwards: the single user of the op just fused (an op with two users ends the way down). Each
  candidate must be supported: an element-wise op YNNPACK has (measured in jax 0.10.2: abs, ceil, convert,
  erf, exponential, floor, log, logistic, negate, rsqrt, sign, sqrt, tanh; add, divide, maximum, minimum,
  multiply, power, subtract) on f64, f32, bf16, s8 or u8 values with 4,096 elements or more in its result
  or an operand; a broadcast that keeps the order of its operand's dimensions; a reshape; a transpose; a
  constant; another such reduce. Growing repeats until nothing more is fused (fusing down can free an
  operand for fusing up).
* Not fused, as measured: select (also ``x * convert(mask)``, which XLA's simplifier makes one), clamp, compare, expm1, log1p, sine, cosine, tan, round, cbrt; an op on
  a reduced result smaller than 4,096 elements (the mean's scaling, a softmax's reciprocal).

Not reproduced: fusions XLA starts at element-wise ops or dots (none change the numerics of an
``exp``/``log``/``tanh`` in the cases measured); programs whose HLO XLA's simplifier reshapes before this
pass (a fusion is grown over the program as imported, after the executor's own XLA rewrites). YNNPACK's
erf, rsqrt and power are not modelled: in a fusion they keep XLA's definitions (not bitwise there).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, UnitAttr
from xdsl.ir import Block, Operation, SSAValue

from lowering.kernels.ynnpack_math import YNNPACK
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.base import ints
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import ConditionalOp, ReturnOp, WhileOp
from xla_dialect.ops.data_movement import BroadcastInDimOp, ReshapeOp, TransposeOp
from xla_dialect.ops.reduction import ReduceOp

from .base import PatternPass
from .registry import register_pass
from .small_loops import moved_out_of_its_loop
from .util import element_name

MIN_ELEMENTS = 4096
"""YNNPACK's ``IsInstructionPreferredByYnn``: an op with this many elements in its result or an operand."""

_UNARY = frozenset({ew.AbsOp, ew.CeilOp, cv.ConvertOp, ew.ErfOp, ew.ExpOp, ew.FloorOp, ew.LogOp, ew.LogisticOp,
                    ew.NegOp, ew.RsqrtOp, ew.SignOp, ew.SqrtOp, ew.TanhOp})
_BINARY = frozenset({ew.AddOp, ew.DivOp, ew.MaxOp, ew.MinOp, ew.MulOp, ew.PowOp, ew.SubOp})
_ELEMENT_TYPES = frozenset({"f64", "f32", "bf16", "s8", "u8"})
_STRUCTURAL = (BroadcastInDimOp, ReshapeOp, TransposeOp, ConstantOp)


def _elements(value: SSAValue) -> int:
    t = value.type
    if not isinstance(t, TensorType):
        return 0
    n = 1
    for d in t.get_shape():
        n *= d
    return n


def _preferred(op: Operation) -> bool:
    return any(_elements(v) >= MIN_ELEMENTS for v in (*op.results, *op.operands))


def _reduce_supported(op: ReduceOp) -> bool:
    """A reduce YNNPACK takes (``IsReduceLikeOpSupportedByYnn`` and the 4,096-element preference)."""
    if len(op.operands) != 2 or len(op.results) != 1 or not ints(op.dimensions) or not _preferred(op):
        return False
    block = op.body.block
    body = list(block.ops)
    if len(block.args) != 2 or len(body) != 2 or not isinstance(body[1], ReturnOp):
        return False
    combine = body[0]
    if set(combine.operands) != set(block.args) or len(combine.operands) != 2 \
            or combine.properties.get("broadcast_dimensions") is not None:
        return False
    dtype = element_name(op.operands[0])
    if dtype != element_name(op.results[0]):
        return False
    if isinstance(combine, ew.AddOp):
        return dtype in ("f32", "f64")
    if isinstance(combine, (ew.MaxOp, ew.MinOp)):
        return dtype in ("bf16", "f16", "f32", "f64", "s8", "u8")
    return False


def _supported(op: Operation) -> bool:
    """Whether XLA's YNNPACK matcher lets ``op`` into a fusion (see the module doc)."""
    if isinstance(op, ReduceOp):
        return _reduce_supported(op)
    if isinstance(op, _STRUCTURAL):
        if isinstance(op, BroadcastInDimOp):
            dims = ints(op.broadcast_dimensions)
            return all(a < b for a, b in zip(dims, dims[1:]))
        return True
    kinds = _UNARY if len(op.operands) == 1 else _BINARY if len(op.operands) == 2 else frozenset()
    if type(op) not in kinds or op.properties.get("broadcast_dimensions") is not None:
        return False
    if any(element_name(v) not in _ELEMENT_TYPES for v in (*op.results, *op.operands)):
        return False
    if isinstance(op, ew.MulOp) and any(isinstance(v.owner, cv.ConvertOp) and element_name(v.owner.operands[0])
                                        == "pred" for v in op.operands):
        return False  # (XLA's simplifier makes x * convert(mask) a select, which YNNPACK does not take)
    return _preferred(op)


def _users(op: Operation) -> list[Operation]:
    """The distinct ops reading ``op``'s results (XLA's users; a return is one)."""
    seen: dict[int, Operation] = {}
    for result in op.results:
        for use in result.uses:
            seen.setdefault(id(use.operation), use.operation)
    return list(seen.values())


def _producer(value: SSAValue) -> Operation | None:
    owner = value.owner
    return owner if isinstance(owner, Operation) else None


class _Fusion:
    """One YNNPACK fusion being grown from a starter reduce (XLA's ``FuseNeighbors``)."""

    def __init__(self, starter: Operation, fused: set[int]):
        self.members: list[Operation] = [starter]
        self.ids = {id(starter)}
        self.root = starter
        self.fused = fused
        self.hoisted = moved_out_of_its_loop(starter)
        fused.add(id(starter))

    def _inputs(self) -> list[Operation]:
        found: dict[int, Operation] = {}
        for member in self.members:
            for value in member.operands:
                producer = _producer(value)
                if producer is not None and id(producer) not in self.ids:
                    found.setdefault(id(producer), producer)
        return list(found.values())

    def _candidates(self, instr: Operation | None, up: bool, down: bool, queue: deque, visited: set[int]) -> None:
        operands = self._inputs() if instr is None else \
            [p for p in (_producer(v) for v in instr.operands) if p is not None]
        if up:
            for operand in operands:
                if id(operand) in self.fused or id(operand) in visited:
                    continue
                if all(id(user) in self.fused or user is instr for user in _users(operand)):
                    queue.append((operand, "up"))
                    visited.add(id(operand))
        users = _users(self.root if instr is None else instr)
        if down and len(users) == 1:
            user = users[0]
            if id(user) not in self.fused and id(user) not in visited:
                queue.append((user, "down"))
                visited.add(id(user))

    def grow_once(self) -> bool:
        queue: deque = deque()
        visited: set[int] = set(self.ids)
        self._candidates(None, True, True, queue, visited)
        changed = False
        while queue:
            instr, direction = queue.popleft()
            if not _supported(instr) or moved_out_of_its_loop(instr) != self.hoisted:
                # (an op XLA moves out of a loop and one it leaves there are in different computations: ``sum(x2) * v
                # + v`` in a fori_loop is a YNNPACK sum before the loop and an FMA in it, 1,604 of 4,096 elements
                # differed with the multiply and add in the sum's fusion)
                continue
            self.fused.add(id(instr))
            self.ids.add(id(instr))
            self.members.append(instr)
            self._candidates(instr, direction == "up", direction == "down", queue, visited)
            if direction == "down":
                self.root = instr
            changed = True
        return changed


def _blocks(module: ModuleOp):
    """Every block XLA treats as a computation of its own: function, loop and branch bodies (not the bodies of
    reduces, sorts, scatters and other ops that apply a computation to elements)."""
    for op in module.walk():
        if isinstance(op, (func.FuncOp, WhileOp, ConditionalOp)):
            for region in op.regions:
                yield from region.blocks


def ynnpack_fusions(block: Block) -> list[list[Operation]]:
    """The YNNPACK fusions XLA CPU forms in ``block``, each a list of its ops (the starter reduce first)."""
    fused: set[int] = set()
    fusions = []
    for op in reversed(list(block.ops)):
        if not isinstance(op, ReduceOp) or id(op) in fused or not _reduce_supported(op):
            continue
        fusion = _Fusion(op, fused)
        while fusion.grow_once():
            pass
        fusions.append(fusion.members)
    return fusions


def _to_mark(module: ModuleOp) -> list[Operation]:
    return [op for block in _blocks(module) for members in ynnpack_fusions(block) for op in members
            if type(op) in _UNARY | _BINARY and YNNPACK not in op.attributes]


def ynnpack_fusion_numerics(module: ModuleOp, clone: bool = False) -> ModuleOp:
    """``module`` with the element-wise ops XLA CPU computes inside YNNPACK fusions marked :data:`YNNPACK` (a copy
    with ``clone``; ``module`` itself when nothing changes)."""
    if not any(isinstance(op, ReduceOp) for op in module.walk()) or not _to_mark(module):
        return module
    if clone:
        module = module.clone()
    for op in _to_mark(module):
        op.attributes[YNNPACK] = UnitAttr()
    return module


@register_pass
@dataclass(frozen=True)
class YnnpackFusionPass(PatternPass):
    """``xla-ynnpack-fusion``: exp, log, tanh and logistic that XLA CPU computes inside YNNPACK fusions
    computed with YNNPACK's approximations (see the module doc)."""

    name = "xla-ynnpack-fusion"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        ynnpack_fusion_numerics(op)
