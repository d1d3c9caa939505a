"""XLA CPU's ``HloCostAnalysis`` bytes of a while loop, from a model of the HLO XLA makes of its body.

``SmallWhileLoopHoistingPass`` (``xla/service/cpu/small_while_loop_hoisting_pass.cc``) compiles a loop whole when
``HloCostAnalysis(CpuExecutable::ShapeSizeBytes).bytes_accessed(while)`` is below the threshold; the analysis runs on
the HLO after fusion and copy insertion, and sums one run of the body and of the condition. So the count depends on
how XLA fuses the body. This module rebuilds that HLO from the loop as imported, by XLA's rules (read from its source):

* simplification: identity converts, unit reshapes and broadcasts vanish, equal ops are one (CSE), a multiply by a
  splat one is its operand, a ``!= false`` compare of a predicate is the predicate, a dot of two vectors is a
  reduce of their product, ops of constants are folded (not broadcasts);
* ``WhileLoopInvariantCodeMotion``: an op computed from values carried unchanged (and constants) moves out of the
  loop and its result becomes a new carried element, unless it is a broadcast, reshape, slice, transpose or reverse;
  dead elements are removed (``WhileLoopSimplifier``);
* ``CpuInstructionFusion`` (``InstructionFusion::Run``): producers are fused into consumers in reverse post order,
  not when ``ComputeGloballyUnfusible`` forbids duplicating them (more than one non-broadcast input, more input
  elements than output elements, and not fusible into every consumer on every path), not an expensive producer that
  would be duplicated (divide, sqrt, exp, log, tanh, reduce, ... ``CpuInstructionFusion::IsExpensive``) or whose
  consumer reuses its elements (a broadcast), not a constant into a lone op, not a fusion into another;
* copy insertion: a carried element the body changes gets a copy (2x its bytes) when the old value is read by an
  instruction that the one computing the new value does not depend on;
* ``HloCostAnalysis``: a fusion reads each operand once (a slice of it: the slice; through a broadcast or reshape:
  once per such use) and writes its result (a ``dynamic_update_slice`` root: the update); other instructions read
  their operands and write their result; the root tuple is 8 bytes per element; get-tuple-element, parameters and
  constants nothing; a nested loop its own bytes.

Measured against ``XLA_FLAGS=--xla_dump_to`` dumps (the HLO before ``small-while-loop-hoisting``, costed by the same
rules): the line search's zoom loop of ``jax.scipy.optimize.minimize(method="BFGS")`` on a 5-d Rosenbrock function,
1,016 bytes (19 elements) inside the line search, 1,111 (20) on its own -- XLA hoists the first at the default
threshold of 1,024, not the second.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from xla_dialect.ops import conversion as cv
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import indexing as ix
from xla_dialect.ops.constants import ConstantOp, IotaOp
from xla_dialect.ops.control_flow import WhileOp, loop_invariant_ops
from xla_dialect.ops.linalg import DotGeneralOp, DotOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.types import numpy_dtype

from .util import AttrInterner

_TUPLE_ELEMENT_BYTES = 8  # CpuExecutable::ShapeSizeBytes of a tuple: one pointer per element
_MAX_CONCATENATE_OPERANDS = 8  # CpuInstructionFusion: a concatenate of more operands is not fused

_ELEMENTWISE = (ew.UnaryElementwiseOp, ew.BinaryElementwiseOp, ew.CompareOp, ew.SelectOp, ew.ClampOp,
                cv.ConvertOp, cv.BitcastConvertOp, dm.CopyOp)
_SHAPE_ONLY = (dm.ReshapeOp, dm.BitcastOp)
_LOOP_FUSIBLE = _ELEMENTWISE + _SHAPE_ONLY + (
    dm.BroadcastInDimOp, dm.BroadcastOp, dm.ConcatenateOp, ix.DynamicSliceOp, ix.DynamicUpdateSliceOp, ix.GatherOp,
    IotaOp, dm.PadOp, ReduceOp, dm.ReverseOp, dm.SliceOp, dm.TransposeOp)
"""``CanBeLoopFused`` (cpu_instruction_fusion.cc)."""

_NO_REUSE = _ELEMENTWISE + _SHAPE_ONLY + (dm.ConcatenateOp, dm.ReverseOp, dm.SliceOp, dm.TransposeOp, ix.GatherOp,
                                          ix.DynamicSliceOp, ix.DynamicUpdateSliceOp)
"""Consumers that read each element of an operand once (``HloInstruction::OperandElementUse``: kUse); a pad reuses
its padding value only, every other op (a broadcast, a reduce) reuses its operands."""

_EXPENSIVE = (ew.DivOp, ew.RemOp, ew.SqrtOp, ew.RsqrtOp, ew.CbrtOp, ew.PowOp, ew.ExpOp, ew.Expm1Op, ew.LogOp,
              ew.Log1pOp, ew.ErfOp, ew.TanhOp, ew.Atan2Op, ew.LogisticOp)
_EXPENSIVE_IF_COMPLEX = (ew.SineOp, ew.CosineOp, ew.TanOp, ew.AbsOp, ew.SignOp)

_NOT_WORTH_HOISTING = (dm.BroadcastInDimOp, dm.BroadcastOp, dm.ReshapeOp, dm.BitcastOp, dm.SliceOp, dm.TransposeOp,
                       dm.ReverseOp, IotaOp, ConstantOp)
"""Ops ``WhileLoopInvariantCodeMotion`` does not move out of a loop on their own."""


def _itemsize(t) -> int:
    try:
        return np.dtype(numpy_dtype(t)).itemsize
    except Exception:  # noqa: BLE001 - quantized or unknown element types: counted as one byte
        return 1


_SUBCLASS: dict[tuple, bool] = {}
"""(op class, classes) -> whether the class is a subclass (:meth:`_Node.is_`)."""


class _Node:
    """One HLO instruction of the model (or one instruction inside a fusion)."""

    PARAM, CONST, OP, FUSION, TUPLE = range(5)

    def __init__(self, kind, cls=None, shape=(), itemsize=0, operands=(), op=None, dtype=None):
        self.kind, self.cls, self.shape, self.itemsize, self.op = kind, cls, tuple(shape), itemsize, op
        self.dtype = dtype  # numpy dtype of the elements (None when unknown)
        self.operands: list[_Node] = []
        self.users: list[_Node] = []
        for o in operands:
            self.add_operand(o)
        self.inner_root: _Node | None = None  # a fusion: its root instruction
        self.params: dict[_Node, _Node] = {}  # a fusion: outer operand -> inner parameter
        self.reused: set[_Node] = set()  # a fusion: the operands some fused instruction reuses
        self.extra_bytes = 0  # a nested loop: its own bytes
        self.alive = True
        self.replaced_by: _Node | None = None  # a node fusion replaced: the fusion

    def add_operand(self, o: _Node) -> None:
        self.operands.append(o)
        if self not in o.users:
            o.users.append(self)

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def size(self) -> int:
        return self.elements * self.itemsize

    def is_(self, classes) -> bool:
        if self.kind != _Node.OP or self.cls is None:
            return False
        key = (self.cls, classes)
        found = _SUBCLASS.get(key)
        if found is None:  # (the classes are abstract bases: issubclass walks their registries every time)
            found = _SUBCLASS[key] = issubclass(self.cls, classes)
        return found

    def is_scalar_constant(self) -> bool:
        return self.kind == _Node.CONST and self.elements == 1


# ----------------------------------------------------------------------------
# Properties of instructions (XLA's predicates)
# ----------------------------------------------------------------------------

def _fusible(n: _Node) -> bool:
    """``HloInstruction::IsFusible``."""
    return n.kind in (_Node.CONST, _Node.FUSION, _Node.TUPLE) or (n.kind == _Node.OP and not n.is_(WhileOp))


def _loop_fusible(n: _Node) -> bool:
    return n.kind == _Node.CONST or n.is_(_LOOP_FUSIBLE)


def _expensive(n: _Node) -> bool:
    """``CpuInstructionFusion::IsExpensive``."""
    if n.kind in (_Node.CONST, _Node.TUPLE):
        return False
    if n.kind != _Node.OP:
        return True  # a parameter, a fusion
    if n.is_((ew.DivOp, ew.RemOp)) and _kind(n) in "iub":
        # (integer division by a constant is cheap; XLA's CPU rule looks at operand 0)
        return not n.operands[0].is_scalar_constant()
    if n.is_(_EXPENSIVE) or n.is_((ReduceOp, ix.GatherOp)):
        return True
    if n.is_(_EXPENSIVE_IF_COMPLEX):
        return _kind(n) == "c"
    if n.is_(cv.ConvertOp):  # f32 -> bf16 checks for NaN
        return n.dtype is not None and n.dtype.name == "bfloat16" and n.operands[0].dtype == np.float32
    return not n.is_(_LOOP_FUSIBLE)


def _kind(n: _Node) -> str:
    return n.dtype.kind if n.dtype is not None else "?"


def _reuses(consumer: _Node, producer: _Node) -> bool:
    """``InstructionFusion::ReusesOperandElements``."""
    if consumer.kind == _Node.FUSION:
        return producer in consumer.reused
    return producer in _reused_operands(consumer)


def _reused_operands(n: _Node) -> set[_Node]:
    if n.kind != _Node.OP or n.is_(_NO_REUSE):
        return set()
    if n.is_(dm.PadOp):
        return {n.operands[1]}
    return set(n.operands)


def _always_duplicable(n: _Node) -> bool:
    """``IsAlwaysDuplicable``: a broadcast, a widening convert."""
    return n.is_((dm.BroadcastInDimOp, dm.BroadcastOp)) or (n.is_(cv.ConvertOp) and n.operands[0].itemsize < n.itemsize)


def _effectively_unary(n: _Node) -> bool:
    """``InstructionFusion::EffectivelyAtMostUnary``."""
    def true_rank(shape) -> int:
        return sum(d != 1 for d in shape)

    rank = true_rank(n.shape)
    return sum(1 for o in n.operands
               if not (o.is_((dm.BroadcastInDimOp, dm.BroadcastOp, IotaOp)) or o.is_scalar_constant())
               and true_rank(o.shape) >= rank) <= 1


def _should_fuse(consumer: _Node, producer: _Node) -> bool:
    """``CpuInstructionFusion::ShouldFuse`` (then ``InstructionFusion::ShouldFuse``) for a small loop body."""
    if producer.kind == _Node.CONST and producer.elements != 1:
        return False
    if not _loop_fusible(producer):
        return False
    if (producer.is_(dm.ConcatenateOp) and len(producer.operands) > _MAX_CONCATENATE_OPERANDS) or (
            consumer.is_(dm.ConcatenateOp) and len(consumer.operands) > _MAX_CONCATENATE_OPERANDS):
        return False
    if producer.kind != _Node.FUSION and _expensive(producer) and _reuses(consumer, producer):
        return False
    would_duplicate = not (len(producer.users) == 1 and producer.users[0] is consumer)
    if would_duplicate and _expensive(producer) and not _always_duplicable(producer):
        return False
    if producer.kind == _Node.CONST and consumer.kind != _Node.FUSION:
        return False
    if producer.kind == _Node.FUSION:
        return False
    return consumer.kind == _Node.FUSION or _loop_fusible(consumer)


# ----------------------------------------------------------------------------
# Building the model of a computation
# ----------------------------------------------------------------------------

class _Graph:
    """The instructions XLA makes of one computation (a loop body or condition) before fusion."""

    def __init__(self):
        self.nodes: list[_Node] = []  # in a topological order (operands first)
        self._cse: dict = {}
        self.intern = AttrInterner()  # (keys hold attributes as numbers: printing them cost a fifth of the model)

    def attribute_key(self, attribute: Attribute):
        """``attribute`` in a key of this graph: equal for equal attributes."""
        number = self.intern(attribute)
        return str(attribute) if number is None else number

    def props_key(self, op: Operation) -> tuple:
        """An op's properties and attributes (not its location) in a key of this graph."""
        return tuple(sorted((k, self.attribute_key(v)) for k, v in op.properties.items())) + tuple(
            sorted((k, self.attribute_key(v)) for k, v in op.attributes.items() if k != "loc"))

    def add(self, node: _Node, key=None) -> _Node:
        if key is not None:
            found = self._cse.get(key)
            if found is not None:
                for o in node.operands:  # undo the uses the duplicate registered
                    if node in o.users:
                        o.users.remove(node)
                return found
            self._cse[key] = node
        self.nodes.append(node)
        return node


def _shape_of(value: SSAValue):
    t = value.type
    if not isinstance(t, TensorType):
        return (), 0, None
    try:
        dtype = np.dtype(numpy_dtype(t))
    except Exception:  # noqa: BLE001 - quantized or unknown element types: counted as one byte
        dtype = None
    return tuple(t.get_shape()), _itemsize(t), dtype


def _splat_value(node: _Node):
    """The value of a splat constant (or a broadcast of a scalar constant), else None."""
    if node.is_((dm.BroadcastInDimOp, dm.BroadcastOp)):
        node = node.operands[0]
    if node.kind != _Node.CONST or node.op is None:
        return None
    try:
        values = np.asarray(node.op.value.array).ravel()
    except (AttributeError, ValueError):
        return None
    return values[0].item() if values.size and np.all(values == values[0]) else None


def _build(graph: _Graph, block, args: dict[int, _Node], hoisted: set[int], hoisted_params: dict) -> dict:
    """Adds the ops of ``block`` to ``graph``; returns SSA value -> node. ``args``: block argument index -> node."""
    env: dict[SSAValue, _Node] = {block.args[i]: n for i, n in args.items()}

    def node_of(v: SSAValue) -> _Node:
        if v not in env and v.owner is block:  # an element not (yet) kept: found if a kept value reads it
            shape, itemsize, dtype = _shape_of(v)
            env[v] = args[v.index] = _Node(_Node.PARAM, None, shape, itemsize, (), None, dtype)
        return env[v]

    for op in block.ops:
        if op is block.last_op:
            break
        results = op.results
        if len(results) != 1 and not isinstance(op, WhileOp):
            for r in results:  # (multi-result ops: opaque)
                shape, itemsize, dtype = _shape_of(r)
                env[r] = graph.add(_Node(_Node.OP, type(op), shape, itemsize,
                                         [node_of(v) for v in op.operands if v in env], op, dtype))
            continue
        if isinstance(op, WhileOp):
            n = _Node(_Node.OP, WhileOp, (), 0, [node_of(v) for v in op.operands], op)
            inner_live = live_state(op)
            n.extra_bytes = loop_model_bytes(op, inner_live)[0] + _TUPLE_ELEMENT_BYTES * len(inner_live)
            graph.add(n)
            for r in results:
                shape, itemsize, dtype = _shape_of(r)
                env[r] = graph.add(_Node(_Node.OP, None, shape, itemsize, [n], None, dtype))  # get-tuple-element
            continue
        result = results[0]
        shape, itemsize, dtype = _shape_of(result)
        operands = [node_of(v) for v in op.operands]
        if isinstance(op, ConstantOp):
            try:
                values = np.asarray(op.value.array)
            except (AttributeError, ValueError):
                values = None
            if values is not None and values.size > 1 and np.all(values == values.ravel()[0]):
                # (a splat: XLA's is the broadcast of a scalar constant, fused into its users)
                element_type = graph.attribute_key(result.type.element_type)
                scalar = graph.add(_Node(_Node.CONST, None, (), itemsize, (), None, dtype),
                                   ("const", (), element_type, values.ravel()[:1].tobytes()))
                env[result] = graph.add(_Node(_Node.OP, dm.BroadcastInDimOp, shape, itemsize, [scalar], None, dtype),
                                        ("splat", id(scalar), shape))
                continue
            key = None if values is None else ("const", shape, graph.attribute_key(result.type), values.tobytes())
            env[result] = graph.add(_Node(_Node.CONST, ConstantOp, shape, itemsize, (), op, dtype), key)
            continue
        if id(op) in hoisted and not isinstance(op, _NOT_WORTH_HOISTING):
            if all(o.kind == _Node.CONST for o in operands):  # folded
                env[result] = graph.add(_Node(_Node.CONST, None, shape, itemsize, (), None, dtype),
                                        ("folded", id(op)))
                continue
            key = ("hoisted", type(op), tuple(map(id, operands)), graph.props_key(op))
            if key not in hoisted_params:
                hoisted_params[key] = _Node(_Node.PARAM, None, shape, itemsize, (), op, dtype)
            env[result] = hoisted_params[key]
            continue
        # Algebraic simplification.
        if isinstance(op, (cv.ConvertOp, dm.ReshapeOp, dm.BroadcastInDimOp, dm.BroadcastOp, dm.CopyOp)) \
                and op.operands[0].type == result.type:
            env[result] = operands[0]
            continue
        if isinstance(op, ew.MulOp) and itemsize:
            ones = [i for i in range(2) if _splat_value(operands[i]) == 1 and operands[1 - i].shape == shape]
            if ones:
                env[result] = operands[1 - ones[0]]
                continue
        if isinstance(op, ew.CompareOp) and op.comparison_direction.data == "NE" and operands[0].itemsize == 1 \
                and _splat_value(operands[1]) is False and operands[0].shape == shape:
            env[result] = operands[0]
            continue
        if isinstance(op, (DotOp, DotGeneralOp)):
            env[result] = _dot(graph, op, operands, shape, itemsize, dtype)
            continue
        n = _Node(_Node.OP, type(op), shape, itemsize, operands, op, dtype)
        key = (type(op), tuple(map(id, operands)), shape, graph.attribute_key(result.type), graph.props_key(op))
        env[result] = graph.add(n, None if op.regions and not isinstance(op, ReduceOp) else key)
    return env


def _dot(graph: _Graph, op, operands, shape, itemsize, dtype) -> _Node:
    """A dot: of two vectors, the reduce of their product (algebraic simplifier); otherwise a dot instruction whose
    vector operands and result XLA bitcasts to matrices (``DotDecomposer``)."""
    lhs, rhs = operands
    dims = op.dimension_numbers()
    lhs_free = len(lhs.shape) - len(dims.lhs_contracting_dimensions) - len(dims.lhs_batch_dimensions)
    rhs_free = len(rhs.shape) - len(dims.rhs_contracting_dimensions) - len(dims.rhs_batch_dimensions)
    if lhs_free == 0 and rhs_free == 0 and not dims.lhs_batch_dimensions and lhs.shape == rhs.shape:
        product = graph.add(_Node(_Node.OP, ew.MulOp, lhs.shape, itemsize, [lhs, rhs], None, dtype))
        init = graph.add(_Node(_Node.CONST, None, (), itemsize, (), None, dtype), ("zero", itemsize, dtype))
        return graph.add(_Node(_Node.OP, ReduceOp, shape, itemsize, [product, init], None, dtype))
    ins = []
    for o, free in ((lhs, lhs_free), (rhs, rhs_free)):
        ins.append(graph.add(_Node(_Node.OP, dm.BitcastOp, o.shape + (1,), o.itemsize, [o], None, o.dtype))
                   if free == 0 else o)
    dot_shape = shape + (1,) if (lhs_free == 0) != (rhs_free == 0) else shape
    dot = graph.add(_Node(_Node.OP, DotGeneralOp, dot_shape, itemsize, ins, op, dtype))
    if dot_shape == shape:
        return dot
    return graph.add(_Node(_Node.OP, dm.BitcastOp, shape, itemsize, [dot], None, dtype))


# ----------------------------------------------------------------------------
# Fusion (InstructionFusion::Run with CpuInstructionFusion's rules)
# ----------------------------------------------------------------------------

def _post_order(root: _Node) -> list[_Node]:
    order: list[_Node] = []
    seen: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for o in reversed(node.operands):
            if id(o) not in seen:
                stack.append((o, False))
    return order


def _globally_unfusible(post: list[_Node]) -> set[_Node]:
    """``InstructionFusion::ComputeGloballyUnfusible``."""
    reach: dict[int, set[int]] = {}
    for n in post:  # the nodes each node depends on (itself included)
        s = {id(n)}
        for o in n.operands:
            s |= reach.get(id(o), {id(o)})
        reach[id(n)] = s

    def reachable(producer: _Node, node: _Node) -> bool:
        return id(producer) in reach.get(id(node), {id(node)})

    unfusible: set[_Node] = set()
    cache: dict = {}

    def on_all_paths(producer: _Node, consumer: _Node) -> bool:
        if consumer is producer:
            return True
        if not _fusible(consumer):
            return False
        key = (id(producer), id(consumer))
        if key in cache:
            return cache[key]
        result = True
        for o in consumer.operands:
            if not reachable(producer, o):
                continue
            if o in unfusible or not _should_fuse(consumer, o) or not on_all_paths(producer, o):
                result = False
                break
        cache[key] = result
        return result

    for producer in reversed(post):
        if _effectively_unary(producer):
            continue
        if sum(o.elements for o in dict.fromkeys(producer.operands)) <= producer.elements:
            continue
        if _fusible(producer) and all(on_all_paths(producer, c) for c in producer.users):
            continue
        unfusible.add(producer)
    return unfusible


def _replace_uses(old: _Node, new: _Node) -> None:
    present = set(map(id, new.users))  # (a list searched for each user was most of the model's time)
    for user in old.users:
        user.operands = [new if o is old else o for o in user.operands]
        if id(user) not in present:
            present.add(id(user))
            new.users.append(user)
    old.users = []


def _make_fusion(node: _Node) -> _Node:
    fusion = _Node(_Node.FUSION, None, node.shape, node.itemsize, (), None, node.dtype)
    inner = _Node(_Node.OP, node.cls, node.shape, node.itemsize, (), node.op, node.dtype)
    inner.kind = node.kind if node.kind != _Node.FUSION else _Node.OP
    fusion.inner_root = inner
    fusion.reused = set(_reused_operands(node))
    for o in node.operands:
        if o not in fusion.params:
            fusion.params[o] = _Node(_Node.PARAM, None, o.shape, o.itemsize, (), None, o.dtype)
        inner.add_operand(fusion.params[o])
    for o in dict.fromkeys(node.operands):
        o.users.remove(node)
        fusion.add_operand(o)
    _replace_uses(node, fusion)
    node.alive = False
    node.replaced_by = fusion
    return fusion


def _absorb(fusion: _Node, producer: _Node) -> None:
    """``HloInstruction::FuseInstruction``: a copy of ``producer`` replaces its parameter in ``fusion``."""
    if producer in fusion.reused:
        fusion.reused.discard(producer)
        fusion.reused |= set(producer.operands)
    else:
        fusion.reused |= _reused_operands(producer)
    param = fusion.params.pop(producer)
    clone = _Node(producer.kind, producer.cls, producer.shape, producer.itemsize, (), producer.op, producer.dtype)
    for o in producer.operands:
        if o not in fusion.params:
            fusion.params[o] = _Node(_Node.PARAM, None, o.shape, o.itemsize, (), None, o.dtype)
            fusion.add_operand(o)
        clone.add_operand(fusion.params[o])
    _replace_uses(param, clone)
    fusion.operands = [o for o in fusion.operands if o is not producer]
    producer.users.remove(fusion)


def _fuse(root: _Node) -> list[_Node]:
    """Runs the fusion pass on the computation ending in ``root``; returns its instructions afterwards."""
    post = _post_order(root)
    reachable = set(map(id, post))
    for n in post:  # (dead code is gone before XLA fuses)
        n.users = [u for u in n.users if id(u) in reachable]
    unfusible = _globally_unfusible(post)
    queue: list[_Node | None] = list(post)
    index = {id(n): i for i, n in enumerate(queue)}
    while queue:
        while queue and queue[-1] is None:
            queue.pop()
        if not queue:
            break
        node = queue.pop()
        index.pop(id(node), None)
        if not _fusible(node) and node.kind != _Node.FUSION:
            continue
        order = sorted((i for i, o in enumerate(node.operands) if id(o) in index),
                       key=lambda i: -index[id(node.operands[i])])
        for i in order:
            producer = node.operands[i]
            if not _fusible(producer) or producer in unfusible or not _should_fuse(node, producer):
                continue
            fusion = node if node.kind == _Node.FUSION else _make_fusion(node)
            _absorb(fusion, producer)
            if not producer.users:  # dead: removed, and no longer a user of its operands
                for o in dict.fromkeys(producer.operands):
                    o.users.remove(producer)
                unfusible.discard(producer)
                queue[index.pop(id(producer))] = None
                producer.alive = False
            index[id(fusion)] = len(queue)
            queue.append(fusion)
            if fusion is not node:
                unfusible.discard(node)
            break
    while root.replaced_by is not None:
        root = root.replaced_by
    return _post_order(root)


# ----------------------------------------------------------------------------
# The state XLA keeps
# ----------------------------------------------------------------------------

def result_live(value: SSAValue, _seen: frozenset = frozenset()) -> bool:
    """Whether ``value`` is needed by the program (XLA removes what is not, across loops: a loop's result feeding
    only a state element the enclosing loop drops is dead): some use is a function's return, a loop condition's, a
    live element of a loop's state or body result, or an op with a live result (ops with regions or no results are
    taken as live)."""
    if value in _seen:
        return True
    seen = _seen | {value}
    for use in value.uses:
        user = use.operation
        if isinstance(user, WhileOp):
            if use.index in live_state(user):
                return True
            continue
        parent = user.parent_op()
        if user is (user.parent_block().last_op if user.parent_block() else None) and isinstance(parent, WhileOp):
            if user.parent_block() is parent.cond.block or use.index in live_state(parent):
                return True
            continue
        if user.regions or not user.results or user.parent_block() is None or user is user.parent_block().last_op:
            return True
        if any(result_live(r, seen) for r in user.results):
            return True
    return False


def live_state(op: WhileOp) -> list[int]:
    """The state indices XLA keeps (its dead tuple element removal): results used after the loop, state
    the condition reads, and what the body needs to compute those."""
    memo = _MEMO.get()
    if memo is None:
        return _live_state(op)
    key = ("live", id(op))
    if key not in memo:
        memo[key] = (op, _live_state(op))
    return list(memo[key][1])


def _live_state(op: WhileOp) -> list[int]:
    body = op.body.block
    cond = op.cond.block
    n = len(op.operands)
    returned = list(body.last_op.operands)

    def deps(value: SSAValue, seen: set) -> set[int]:
        out: set[int] = set()
        stack = [value]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v.owner is body:
                out.add(v.index)
            elif isinstance(v.owner, Operation):
                stack.extend(v.owner.operands)
        return out

    live = {i for i in range(n) if result_live(op.results[i]) or cond.args[i].first_use is not None}
    todo = list(live)
    while todo:
        for j in deps(returned[todo.pop()], set()):
            if j not in live:
                live.add(j)
                todo.append(j)
    return sorted(live)



# ----------------------------------------------------------------------------
# HloCostAnalysis
# ----------------------------------------------------------------------------

def _parameter_read_bytes(param: _Node) -> int:
    """``HloCostAnalysis::FusionParameterReadBytes``."""
    size, seen_trivial = 0, False
    for user in param.users:
        if user.is_(dm.SliceOp):
            size += user.size
        elif user.is_(ix.DynamicSliceOp):
            if user.operands[0] is param:
                size += user.size
            elif not seen_trivial:
                seen_trivial, size = True, size + param.size
        elif user.is_(ix.DynamicUpdateSliceOp):
            if user.operands[0] is not param and not seen_trivial:
                seen_trivial, size = True, size + param.size
        elif user.is_((dm.BroadcastInDimOp, dm.BroadcastOp, dm.ReshapeOp)):
            size += param.size
        elif not seen_trivial:
            seen_trivial, size = True, size + param.size
    return size


def _instruction_bytes(n: _Node) -> int:
    if n.kind in (_Node.PARAM, _Node.CONST) or (n.kind == _Node.OP and n.cls is None):
        return 0  # parameters, constants, get-tuple-elements
    if n.kind == _Node.TUPLE:
        return _TUPLE_ELEMENT_BYTES * len(n.operands)
    if n.kind == _Node.FUSION:
        root = n.inner_root
        out = root.operands[1].size if root.is_(ix.DynamicUpdateSliceOp) else n.size
        return out + sum(_parameter_read_bytes(p) for p in n.params.values())
    if n.is_(WhileOp):
        return n.extra_bytes
    if _loop_fusible(n) and not n.is_(_SHAPE_ONLY + (dm.SliceOp, ix.DynamicSliceOp, ix.DynamicUpdateSliceOp)):
        # (``FusionWrapper`` makes a lone fusible op a fusion: each operand read once)
        return n.size + sum(o.size for o in dict.fromkeys(n.operands))
    if n.is_(dm.SliceOp):
        return 2 * n.size
    if n.is_(ix.DynamicSliceOp):
        return 2 * n.size + n.operands[1].size
    if n.is_(ix.DynamicUpdateSliceOp):
        return 2 * n.operands[1].size + n.operands[2].size
    return n.size + sum(o.size for o in n.operands)


def _ancestors(node: _Node) -> set[int]:
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(n.operands)
    return seen


def computation_bytes(root: _Node, carried: dict[int, _Node] | None = None, trace=None) -> int:
    """The bytes of the computation ending in ``root`` after fusion; with ``carried`` (element index -> parameter
    node, of a loop body whose root is the tuple), the copies copy insertion adds too. ``trace``: a list to which
    each instruction's bytes and description are appended."""
    nodes = _fuse(root)
    total = sum(_instruction_bytes(n) for n in nodes)
    if trace is not None:
        trace += [(_instruction_bytes(n), _describe(n)) for n in nodes if _instruction_bytes(n)]
    if carried:
        for position, (i, param) in enumerate(carried.items()):
            new = root.operands[position]
            if new is param:
                continue
            before = _ancestors(new)
            if any(user is not new and id(user) not in before for user in param.users):
                total += 2 * param.size
                if trace is not None:
                    trace.append((2 * param.size, f"copy of element {i}, read by " + "; ".join(
                        _describe(u)[:60] for u in param.users if u is not new and id(u) not in before)))
    return total


_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar("xla_loop_bytes_memo", default=None)
"""The results of :func:`loop_model_bytes` and :func:`live_state` while :func:`memoized` is active."""


@contextlib.contextmanager
def memoized():
    """Within the block, :func:`loop_model_bytes` computes each (loop, live state) once, :func:`live_state` each
    loop once: the model of a loop is
    built again for every loop around it (a loop nested three deep, four times), and a pass asks about every loop
    of a program. Only while the program does not change (the results are kept by the loop's identity)."""
    token = _MEMO.set({}) if _MEMO.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _MEMO.reset(token)


def loop_model_bytes(loop: WhileOp, live: list[int], trace=None) -> tuple[int, int]:
    """XLA's bytes of one run of ``loop``'s body and condition (module doc), and the number of elements of its
    state; ``live``: the indices of the state XLA keeps; ``trace``: as :func:`computation_bytes`."""
    memo = _MEMO.get() if trace is None else None
    if memo is None:
        return _loop_model_bytes(loop, live, trace)
    key = (id(loop), tuple(live))
    if key not in memo:
        memo[key] = (loop, _loop_model_bytes(loop, live, None))  # (the loop held: its id stays its own)
    return memo[key][1]


def _loop_model_bytes(loop: WhileOp, live: list[int], trace=None) -> tuple[int, int]:
    body, cond = loop.body.block, loop.cond.block
    hoisted = loop_invariant_ops(loop)
    returned = list(body.last_op.operands)
    live = list(live)
    while True:
        graph = _Graph()
        args = {}
        for i in live:
            shape, itemsize, dtype = _shape_of(body.args[i])
            args[i] = _Node(_Node.PARAM, None, shape, itemsize, (), None, dtype)
        hoisted_params: dict = {}
        env = _build(graph, body, args, hoisted, hoisted_params)
        root = _Node(_Node.TUPLE, None, (), 0, [env[returned[i]] for i in live])
        reached = set(map(id, _post_order(root)))
        # (an element only ops moved out of the loop read is dead in XLA's loop, unless used after it)
        extra = [i for i in args if i not in live and id(args[i]) in reached]
        if not extra:
            break
        live = sorted(set(live) | set(extra))
    used_hoisted = [p for p in hoisted_params.values() if id(p) in reached]
    for p in used_hoisted:
        root.add_operand(p)
    carried = {i: args[i] for i in live}
    for k, p in enumerate(used_hoisted):
        carried[len(body.args) + k] = p
    body_bytes = computation_bytes(root, carried, trace)
    cgraph = _Graph()
    cargs = {}
    for i in range(len(cond.args)):
        shape, itemsize, dtype = _shape_of(cond.args[i])
        cargs[i] = _Node(_Node.PARAM, None, shape, itemsize, (), None, dtype)
    cenv = _build(cgraph, cond, cargs, set(), {})
    cond_root = cenv[cond.last_op.operands[0]]
    cond_bytes = 0 if cond_root.kind in (_Node.PARAM, _Node.CONST) else computation_bytes(cond_root, None, trace)
    return body_bytes + cond_bytes, len(root.operands)



def _describe(n: _Node) -> str:
    """``n`` as a line of text: its kind, shape and (a fusion) the classes of the instructions in it."""
    if n.kind != _Node.FUSION:
        return f"{('param', 'constant', 'op', 'fusion', 'tuple')[n.kind]} {n.cls.__name__ if n.cls else ''} {n.shape}"
    inner: list[_Node] = []
    stack = [n.inner_root]
    while stack:
        x = stack.pop()
        if x.kind != _Node.PARAM and x not in inner:
            inner.append(x)
            stack.extend(x.operands)
    return f"fusion {n.shape}: " + " ".join(x.cls.__name__ if x.cls else "constant" for x in reversed(inner))


# ----------------------------------------------------------------------------
# Which fusions XLA copies an op into (read by contract-fma and xla-small-loops)
# ----------------------------------------------------------------------------

_LOOP_FUSED = (*ew.BINARY_OP_CLASSES.values(), *ew.UNARY_OP_CLASSES.values(), ew.CompareOp, ew.SelectOp, cv.ConvertOp,
               dm.BroadcastInDimOp, dm.TransposeOp, dm.ReshapeOp, dm.ReverseOp, dm.SliceOp, dm.CopyOp,
               dm.BitcastOp)
"""Ops XLA fuses into the loop fusion of the element-wise op that reads them."""


def _fused_forward(op: Operation) -> set[int]:
    """The ops (ids) reached from ``op`` through readers XLA fuses into one loop fusion with it (:data:`_LOOP_FUSED`):
    two element-wise readers of one multiply land in one fusion when these meet."""
    seen: set[int] = set()
    stack = [op]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        stack.extend(use.operation for result in current.results for use in result.uses
                     if isinstance(use.operation, _LOOP_FUSED))
    return seen


def _copied_into_several_fusions(op: Operation) -> bool:
    """Whether XLA copies the element-wise ``op`` into more than one fusion: the first value on its chain of
    one-use loop-fused readers (``op``'s result, or a reader's) that has several readers, each loop-fused
    (element-wise or a move; not a sum or a dot: the gradient read by ``g @ p`` and a select is one fusion,
    measured) and in fusions that never meet (:func:`_fused_forward`), so ``InstructionFusion`` duplicates that
    value, and the chain up to ``op``, into each.

    A zero ``pad`` read by such an op then has one user per copy, and XLA CPU does not fuse it: it is a fusion of
    its own, which stores the padded product, and the add reads it from memory, rounded. (What the dumps show; the
    rule in XLA's source is presumably its fusion's code-duplication limit for ops whose emitter "invalidates the
    cache", as a pad's does -- not read.) Measured with jax 0.10.2 (optimized HLO and LLVM IR of
    ``XLA_FLAGS=--xla_dump_to``): the gradient of the Rosenbrock sum, ``pad(-(200 * d) * (2 * y)) + pad(...)``,
    read by ``g + grad`` and by ``grad[0] * p[0]`` is three ``multiply_pad_fusion``/``negate_pad_fusion`` kernels
    and two fusions that add their results (108 of 200 draws differed with the pad contracted), in straight-line
    code and in the line search's loop XLA compiles whole (there LLVM forwards the stored product to the add, but
    the store is a second use and the add is not contracted); read by ``g + grad`` only, one fusion, contracted."""
    value = op.results[0]
    while True:
        readers = [use.operation for use in value.uses]
        if not readers or any(reader.parent is not op.parent for reader in readers):
            return False
        if len(readers) == 1:
            reader = readers[0]
            if not isinstance(reader, _LOOP_FUSED) or len(reader.results) != 1:
                return False
            value = reader.results[0]
            continue
        if not all(isinstance(reader, _LOOP_FUSED) for reader in readers):
            return False  # (read by a sum or a dot too -- BFGS's slope g @ p: one fusion, measured in its line search)
        reached = [_fused_forward(reader) for reader in dict.fromkeys(readers)]
        return all(not (a & b) for i, a in enumerate(reached) for b in reached[i + 1:])
