"""Module verification for the pass manager: the checks of xDSL's ``ModuleOp.verify()``,
with the op-local ones memoized.

``passes.run(..., verify=True)`` verifies the module after every pass. Doing
that with ``module.verify()`` costs about 70 µs per op (IRDL constraints, then
``HloOp.verify_``'s layout checks and shape inference), several times the cost
of the passes themselves. Yet a large program repeats the same few op shapes
thousands of times, and for hlo ops the op-local verifier only looks at:

* the op class, its operand and result types, properties and attributes;
* its place: whether it ends its block, how many blocks that region has and
  which op holds it (the terminator checks of ``Operation.verify`` and of the
  ``IsTerminator`` trait);
* for ops with regions (``hlo.reduce``, ``hlo.while``, ...): what the regions
  hold, which ``infer`` inspects (block argument types, the ops, their types
  and attributes, how values flow between them).

:class:`ModuleVerifier` walks the module exactly as xDSL does (nested ops
before their op, the same parent-pointer, block and terminator checks, the
same errors) and builds that key for every op whose class verifies nothing
else (:func:`signature_only`: an :class:`~xla_dialect.ops.base.HloOp`
without its own ``verify_`` and without traits other than ``IsTerminator``).
It runs the op's own verifier (``op.verify(verify_nested_ops=False)``) only
when no op with an equal key passed before; nested ops are always visited and
checked the same way, and every other op (functions, ``func.return``,
``hlo.call``, ops with successors, custom verifiers) is verified in full each
time, as are the whole-function checks of their traits (``IsolatedFromAbove``,
symbol tables). An op is thus accepted without running its verifier only when
an op the verifier cannot tell apart from it was accepted: the outcome is that
of ``module.verify()``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.core import BlockArgument, ErasedSSAValue, OpResult
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

from xla_dialect.ops.base import HloOp
from xla_dialect.xdsl_compat import irdl_custom_verifiers, operands_of, successors_of

from .util import AttrInterner

_SIGNATURE_ONLY: dict[type, bool] = {}
_HLO_VERIFY = vars(HloOp)["verify_"]


def signature_only(cls: type) -> bool:
    """Whether verifying an op of class ``cls`` depends only on its key (see the module docstring).

    True for IRDL-defined :class:`HloOp` classes whose ``verify_`` is the IRDL
    check followed by ``HloOp.verify_`` (layouts and ``infer``) and whose only
    trait, if any, is ``IsTerminator`` (other traits may look anywhere). False
    for every class when :func:`xla_dialect.xdsl_compat.irdl_custom_verifiers`
    cannot tell (then every op is verified in full).
    """
    known = _SIGNATURE_ONLY.get(cls)
    if known is None:
        known = False
        if issubclass(cls, HloOp):
            try:
                op_def = cls.get_irdl_definition()
                known = (all(type(t) is IsTerminator for t in op_def.traits)
                         and irdl_custom_verifiers(cls) == (_HLO_VERIFY,))
            except Exception:  # not an IRDL-defined class
                known = False
        _SIGNATURE_ONLY[cls] = known
    return known


def _place(op: Operation):
    """What the terminator checks of ``Operation.verify`` and ``IsTerminator`` read about ``op``'s place."""
    block = op.parent
    if block is None:
        return 0
    last = block.last_op is op
    region = block.parent
    if region is None:
        return 2 if last else 1
    if not last:
        return 3
    blocks = len(region.blocks)
    # single-block regions: the holding op's class decides (its NoTerminator trait)
    return (4, blocks, type(region.parent) if blocks == 1 else None)


class ModuleVerifier:
    """Verifies modules like ``ModuleOp.verify()``, remembering which op keys passed.

    One verifier may check a module many times (after every pass): keys that
    passed once are not re-verified (see the module docstring).
    """

    def __init__(self):
        self._intern = AttrInterner()
        self._passed: set[tuple] = set()

    def verify(self, module: ModuleOp) -> None:
        """Raise what ``module.verify()`` would raise (nothing when the module is valid)."""
        self._op(module)

    def _key(self, op: Operation) -> tuple | None:
        """The memo key of an eligible op, None when the op must be verified in full."""
        cls = type(op)
        eligible = _SIGNATURE_ONLY.get(cls)
        if eligible is None:
            eligible = signature_only(cls)
        if not eligible or successors_of(op):
            return None
        head = [cls, _place(op)]
        if op.regions:
            contents = self._contents(op)
            if contents is None:
                return None
            head.append(contents)
        return self._intern.op_signature(op, head, operand_types=True)

    def _contents(self, op: Operation) -> tuple | None:
        """What ``op``'s regions hold: blocks, argument types, ops (class, types, properties,
        attributes) and, for each operand, which value of the regions it is (-1: from outside)."""
        intern = self._intern
        local: dict[SSAValue, int] = {}  # every value defined in the regions, in walk order

        def number_values(region: Region) -> None:
            for block in region.blocks:
                for arg in block.args:
                    local[arg] = len(local)
                for inner in block.ops:
                    for region_ in inner.regions:
                        number_values(region_)
                    for r in inner.results:
                        local[r] = len(local)

        parts: list = []

        def add_region(region: Region) -> bool:
            parts.append(len(region.blocks))
            for block in region.blocks:
                args = block.args
                parts.append(len(args))
                for arg in args:
                    number = intern(arg.type)
                    if number is None:
                        return False
                    parts.append(number)
                for inner in block.ops:
                    if inner.successors:
                        return False
                    key = intern.op_signature(inner, [type(inner), len(inner.regions)], operand_types=True)
                    if key is None:
                        return False
                    parts.append(key)
                    parts.append(tuple([local.get(v, -1) for v in inner.operands]))
                    for region_ in inner.regions:
                        if not add_region(region_):
                            return False
            return True

        for region in op.regions:
            number_values(region)
        for region in op.regions:
            if not add_region(region):
                return None
        return tuple(parts)

    def _op(self, op: Operation) -> None:
        key = self._key(op)
        if key is not None and key in self._passed:
            # What Operation.verify checks besides the key for such an op: its operands are live
            # values (then the nested ops are verified, as xDSL does before the op itself).
            _check_live_operands(op)
            for region in op.regions:
                self._region(region)
            return
        if op.regions:
            # xDSL checks the op's place and operands, then the nested ops, then the op itself.
            _check_structure(op)
            for region in op.regions:
                self._region(region)
        op.verify(verify_nested_ops=False)
        if key is not None:
            self._passed.add(key)

    def _region(self, region: Region) -> None:
        """``Region.verify`` with ops verified through :meth:`_op`."""
        for block in region.blocks:
            self._block(block)
            if block.parent != region:
                raise ValueError("Parent pointer of block does not refer to containing region")

    def _block(self, block: Block) -> None:
        """``Block.verify`` with ops verified through :meth:`_op`."""
        # The common case, inlined: an eligible op without regions or successors, not ending the
        # block, whose key passed (the same key :meth:`_key` builds: its place is 3).
        passed, signature = self._passed, self._intern.op_signature
        inner = block.parent is not None
        last = block.last_op
        operation = block.first_op
        empty = operation is None
        while operation is not None:
            if operation.parent is not block:
                raise ValueError("Parent pointer of operation does not refer to containing region")
            cls = type(operation)
            if (inner and operation is not last and _SIGNATURE_ONLY.get(cls) and not operation.regions
                    and not successors_of(operation)):
                key = signature(operation, [cls, 3], operand_types=True)
                if key is not None and key in passed:
                    _check_live_operands(operation)
                    operation = operation.next_op
                    continue
            self._op(operation)
            operation = operation.next_op
        if empty:
            if (region_parent := block.parent) is not None and (parent_op := region_parent.parent) is not None:
                if len(region_parent.blocks) == 1 and not parent_op.has_trait(NoTerminator):
                    raise VerifyException(
                        f"Operation {parent_op.name} contains empty block in "
                        "single-block region that expects at least a terminator"
                    )


def _check_live_operands(op: Operation) -> None:
    """``Operation.verify``'s first check: no operand is an erased value."""
    for operand in operands_of(op):
        kind = type(operand)
        if kind is not OpResult and kind is not BlockArgument and isinstance(operand, ErasedSSAValue):
            raise ValueError("Erased SSA value is used by the operation")


def _check_structure(op: Operation) -> None:
    """The checks ``Operation.verify`` makes before verifying nested ops (same order, same errors)."""
    _check_live_operands(op)
    parent_block = op.parent
    parent_region = None if parent_block is None else parent_block.parent
    if op.successors:
        if parent_block is None or parent_region is None:
            raise VerifyException(
                f"Operation {op.name} with block successors does not belong to a block or a region"
            )
        if parent_block.last_op is not op:
            raise VerifyException(f"Operation {op.name} with block successors must terminate its parent block")
        for succ in op.successors:
            if succ.parent != parent_block.parent:
                raise VerifyException(f"Operation {op.name} is branching to a block of a different region")
    if parent_block is not None and parent_region is not None and parent_block.last_op == op:
        if len(parent_region.blocks) == 1:
            if (parent_op := parent_region.parent) is not None and not parent_op.has_trait(NoTerminator):
                if not op.has_trait(IsTerminator):
                    raise VerifyException(
                        f"Operation {op.name} terminates block in single-block region but is not a terminator"
                    )
        elif len(parent_region.blocks) > 1:
            if not op.has_trait(IsTerminator):
                raise VerifyException(
                    f"Operation {op.name} terminates block in multi-block region but is not a terminator"
                )
