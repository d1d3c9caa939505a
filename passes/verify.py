"""Module verification for the pass manager: the checks of xDSL's ``ModuleOp.verify()``,
with the op-local ones memoized.

``passes.run(..., verify=True)`` verifies the module after every pass. Doing
that with ``module.verify()`` costs about 70 µs per op (IRDL constraints, then
``HloOp.verify_``'s layout checks and shape inference), several times the cost
of the passes themselves. Yet a large program repeats the same few op
signatures thousands of times, and for most hlo ops everything the op-local
verifier looks at *is* the signature:

* the op class,
* the operand and result types,
* the properties and attributes.

:class:`ModuleVerifier` therefore walks the module exactly as xDSL does
(regions before their op, the same parent-pointer, block and terminator
checks, the same errors), and for an op whose class verifies only its
signature (an :class:`~xla_dialect.ops.base.HloOp` without its own
``verify_`` override and without traits, see :func:`signature_only`) with no
regions or successors that is not the last op of its block, it runs
``op.verify()`` only when no op with an equal signature passed before. Every
other op (functions, returns, ops with regions such as ``hlo.reduce`` or
``hlo.while``, calls, custom verifiers, the last op of a block) is verified in
full every time. The result is the same as ``module.verify()``: an op is
accepted without running its verifier only when an op of equal signature,
for which the verifier returns the same answer, was accepted.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region
from xdsl.ir.core import ErasedSSAValue
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

from xla_dialect.ops.base import HloOp

from .util import AttrInterner

_SIGNATURE_ONLY: dict[type, bool] = {}
_HLO_VERIFY = HloOp.__dict__["verify_"]


def _calls_only_hlo_verify(fn) -> bool:
    """Whether ``fn`` is ``HloOp.verify_`` or xDSL's IRDL wrapper ending in it (op_def.verify + custom)."""
    if fn is _HLO_VERIFY:
        return True
    cells = getattr(fn, "__closure__", None) or ()
    customs = [c.cell_contents for c in cells if callable(c.cell_contents) and not isinstance(c.cell_contents, type)]
    if getattr(fn, "__qualname__", "").split(".")[-1] != "verify_" or "irdl" not in (fn.__module__ or ""):
        return False
    # The IRDL wrapper closes over the op definition and the class's own verify_ (if any).
    return len(customs) == 1 and _calls_only_hlo_verify(customs[0])


def signature_only(cls: type) -> bool:
    """Whether verifying an op of class ``cls`` (without regions or successors) depends only on its
    signature: class, operand and result types, properties, attributes.

    True for IRDL-defined :class:`HloOp` classes whose ``verify_`` is the IRDL
    check followed by ``HloOp.verify_`` (layouts and ``infer``) and that carry
    no traits (a trait may look at the op's surroundings).
    """
    known = _SIGNATURE_ONLY.get(cls)
    if known is None:
        known = False
        if issubclass(cls, HloOp):
            try:
                op_def = cls.get_irdl_definition()
                known = not any(True for _ in op_def.traits) and _calls_only_hlo_verify(cls.verify_)
            except Exception:  # not an IRDL-defined class
                known = False
        _SIGNATURE_ONLY[cls] = known
    return known


class ModuleVerifier:
    """Verifies modules like ``ModuleOp.verify()``, remembering which op signatures passed.

    One verifier may check a module many times (after every pass): signatures
    that passed once are not re-verified (see the module docstring).
    """

    def __init__(self):
        self._intern = AttrInterner()
        self._passed: set[tuple] = set()

    def verify(self, module: ModuleOp) -> None:
        """Raise what ``module.verify()`` would raise (nothing when the module is valid)."""
        self._op(module)

    def _signature(self, op: Operation) -> tuple | None:
        """The memo key of an eligible op, None when the op must be verified in full."""
        cls = type(op)
        if not signature_only(cls) or op.regions or op.successors or op.next_op is None:
            return None
        return self._intern.op_signature(op, [cls], operand_types=True)

    def _op(self, op: Operation) -> None:
        key = self._signature(op)
        if key is not None and key in self._passed:
            # What Operation.verify checks outside verify_ for such an op (no successors, regions,
            # nor a terminator position): no operand may be an erased value.
            for operand in op.operands:
                if isinstance(operand, ErasedSSAValue):
                    raise ValueError("Erased SSA value is used by the operation")
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
        empty = True
        for operation in block.ops:
            empty = False
            if operation.parent != block:
                raise ValueError("Parent pointer of operation does not refer to containing region")
            self._op(operation)
        if empty:
            if (region_parent := block.parent) is not None and (parent_op := region_parent.parent) is not None:
                if len(region_parent.blocks) == 1 and not parent_op.has_trait(NoTerminator):
                    raise VerifyException(
                        f"Operation {parent_op.name} contains empty block in "
                        "single-block region that expects at least a terminator"
                    )


def _check_structure(op: Operation) -> None:
    """The checks ``Operation.verify`` makes before verifying nested ops (same order, same errors)."""
    for operand in op.operands:
        if isinstance(operand, ErasedSSAValue):
            raise ValueError("Erased SSA value is used by the operation")
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
