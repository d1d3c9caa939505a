"""How much memory a program's run holds: its arguments, its results and the peak of its live values.

The executor's generated code deletes each value after its last use (``del v3``), so the values alive at a
point of the program are those defined before it and used after it, and the arguments, which the caller holds.
:func:`program_memory` walks a function in program order and returns the largest total of live buffers
(:func:`block_peak`: a value the executor passes on unchanged, such as a while loop's invariant carry, is one
buffer); the buffers of a loop body or a branch add their own peak while the op runs, as does a called function.
Shapes are static, so this is exact for the values the program names; kernels' temporaries (a fused loop's,
BLAS's) are not counted. ``xla-show memory`` (:mod:`interop.show.memory`) counts the same liveness with a
target's tiled sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["ProgramMemory", "block_peak", "module_functions", "program_memory", "value_bytes"]


@dataclass(frozen=True)
class ProgramMemory:
    """Bytes of one run of a function: its ``arguments``, its ``results`` and the ``peak`` of live values
    (arguments and results included)."""

    arguments: int
    results: int
    peak: int

    @property
    def intermediates(self) -> int:
        """The peak less the arguments and results: what the run itself allocates at most."""
        return max(0, self.peak - self.arguments - self.results)


def value_bytes(t) -> int:
    """The bytes of a value of type ``t`` (an array, a tuple of them; tokens and others 0)."""
    from xla_dialect.types import numpy_dtype

    types = getattr(t, "types", None)
    if types is not None:  # a tuple
        return sum(value_bytes(x) for x in types.data)
    if not hasattr(t, "get_shape"):
        return 0
    try:
        itemsize = np.dtype(numpy_dtype(t)).itemsize
    except Exception:  # noqa: BLE001 - a type without a NumPy dtype (token, ...)
        return 0
    return int(np.prod(t.get_shape(), dtype=np.int64)) * itemsize


def program_memory(module, entry: str = "main") -> ProgramMemory:
    """The :class:`ProgramMemory` of function ``entry`` of ``module``."""
    functions = module_functions(module)
    function = functions[entry]
    body = function.body.blocks[0]
    arguments = sum(value_bytes(a.type) for a in body.args)
    results = sum(value_bytes(t) for t in function.function_type.outputs.data)
    return ProgramMemory(arguments, results, block_peak(body, value_bytes, functions, views=True)[0])


def module_functions(module) -> dict:
    """``module``'s functions by name (``func.func`` and ``hlo.func``)."""
    return {op.sym_name.data: op for op in module.walk() if getattr(op, "sym_name", None) is not None
            and op.regions and op.name in ("func.func", "hlo.func")}


def block_peak(block, size: Callable, functions: dict, arg_keys: list | None = None,
               calling: frozenset = frozenset(), views: bool = False) -> tuple[int, object]:
    """``(peak, op)``: the largest total ``size(type)`` of the buffers of ``block`` alive at once in program order,
    and the op at which it is reached (None: at the block's start).

    One buffer per value, except where the executor passes the same array on: a value repeated among a while loop's
    operands, and a carried value its body returns unchanged (the loop's result is its operand), are one buffer;
    with ``views``, so are a broadcast's and a reshape's result and their operand (the executor's kernels return
    NumPy views). A buffer lives from the op that makes it to its last use (uses inside an op's regions keep an
    outer value alive until the op ends); the block's arguments for the whole block (the caller holds them: the user
    the program's, the loop the state it passes its body). While an op runs, the largest of its regions' peaks (they
    never run at once) and of a called function's is added for the buffers they make; a while loop's or a
    conditional's results are its regions' last values, counted in that peak. ``arg_keys``: the buffer of each
    argument (a buffer of the enclosing block, or a new one), by default one each."""
    ops = list(block.ops)
    key: dict = dict(zip(block.args, arg_keys if arg_keys is not None else block.args))
    for op in ops:
        for index, result in enumerate(op.results):
            key[result] = _aliased_operand_key(op, index, key, views) or result
    nbytes: dict = {}
    for value, k in key.items():
        nbytes.setdefault(k, size(value.type))
    last_use: dict = {}
    for i, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                if v in key:
                    last_use[key[v]] = i
    held = set(key[a] for a in block.args)
    live = peak = sum(nbytes[k] for k in held)
    peak_op = None
    made_before = set(held)
    for i, op in enumerate(ops):
        new = {key[r] for r in op.results} - made_before
        made = sum(nbytes[k] for k in new)
        inner = 0
        for region in op.regions:
            for b in region.blocks:
                keys = _region_arg_keys(op, region, b, key)
                region_peak = block_peak(b, size, functions, keys, calling, views)[0]
                inner = max(inner, region_peak - sum(nbytes[k] for k in set(keys) if k in made_before))
        callee = _callee(op, functions)
        if callee is not None and callee.sym_name.data not in calling:
            body = callee.body.blocks[0]
            keys = [key.get(v, v) for v in op.operands] if len(op.operands) == len(body.args) else None
            callee_peak = block_peak(body, size, functions, keys, calling | {callee.sym_name.data}, views)[0]
            inner = max(inner, callee_peak - sum(nbytes[k] for k in set(keys or ()) if k in made_before))
        during = live + (max(inner, made) if _results_from_regions(op) else inner + made)
        if during > peak:
            peak, peak_op = during, op
        made_before |= new
        live += sum(nbytes[k] for k in new if k in last_use)  # an unused result is dropped at once
        live -= sum(nbytes[k] for k, last in last_use.items() if last == i and k not in held)
    return peak, peak_op


def _aliased_operand_key(op, index: int, key: dict, views: bool):
    """The buffer of the operand result ``index`` of ``op`` is (a while loop's carried value its body returns
    unchanged; with ``views``, a broadcast's or reshape's operand), else None."""
    from xla_dialect.ops.control_flow import WhileOp
    from xla_dialect.ops.data_movement import BroadcastInDimOp, BroadcastOp, ReshapeOp

    if isinstance(op, WhileOp) and index < len(op.operands) and _carried_unchanged(op, index):
        return key.get(op.operands[index])
    if views and isinstance(op, (BroadcastInDimOp, BroadcastOp, ReshapeOp)):
        return key.get(op.operands[0])
    return None


def _carried_unchanged(op, index: int) -> bool:
    """Whether while loop ``op``'s body returns its carried value ``index`` as it received it."""
    body = op.body.block
    return body.last_op.operands[index] is body.args[index]


def _region_arg_keys(op, region, block, key: dict) -> list:
    """The buffers of ``block``'s arguments: a while loop's carried values its body returns unchanged are its
    operands' (the others are the body's new values from the second trip on: new buffers); a conditional's
    branch and a region taking the op's operands by type receive them; scalar bodies (reduce, sort) new ones."""
    from xla_dialect.ops.control_flow import ConditionalOp, WhileOp

    args = list(block.args)
    if isinstance(op, WhileOp):
        return [key.get(op.operands[k], a) if _carried_unchanged(op, k) else a for k, a in enumerate(args)]
    if isinstance(op, ConditionalOp):
        branch = list(op.regions).index(region)
        operand = op.branch_operands[branch] if branch < len(op.branch_operands) else None
        return [key.get(operand, a) if operand is not None and len(args) == 1 else a for a in args]
    if len(args) == len(op.operands) and all(a.type == v.type for a, v in zip(args, op.operands)):
        return [key.get(v, a) for a, v in zip(args, op.operands)]
    return args


def _results_from_regions(op) -> bool:
    from xla_dialect.ops.control_flow import ConditionalOp, WhileOp

    return isinstance(op, (WhileOp, ConditionalOp))


def _callee(op, functions: dict):
    callee = op.properties.get("callee") or op.attributes.get("callee")
    if callee is None:
        return None
    name = getattr(getattr(callee, "root_reference", None), "data", None)
    return functions.get(name)
