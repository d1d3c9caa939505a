"""How much memory a program's run holds: its arguments, its results and the peak of its live values.

The executor's generated code deletes each value after its last use (``del v3``), so the values alive at a
point of the program are those defined before it and used after it. :func:`program_memory` walks a
function in program order and returns the largest total of live values (arguments still used, intermediates,
results already computed); the values of a loop body or a branch add their own peak while the op runs, as
does a called function. Shapes are static, so this is exact for the values the program names; kernels'
temporaries (a fused loop's, BLAS's) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ProgramMemory", "program_memory", "value_bytes"]


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
    functions = {op.sym_name.data: op for op in module.walk() if getattr(op, "sym_name", None) is not None
                 and op.regions and op.name in ("func.func", "hlo.func")}
    function = functions[entry]
    body = function.body.blocks[0]
    arguments = sum(value_bytes(a.type) for a in body.args)
    results = sum(value_bytes(t) for t in function.function_type.outputs.data)
    return ProgramMemory(arguments, results, _block_peak(body, functions, set()))


def _block_peak(block, functions: dict, calling: set) -> int:
    """The largest total of live values of ``block`` (its arguments included), in program order."""
    ops = list(block.ops)
    defined = set(block.args)
    for op in ops:
        defined.update(op.results)
    last_use: dict = {}
    for i, op in enumerate(ops):
        for inner in op.walk():  # uses inside the op's regions keep an outer value alive until the op ends
            for v in inner.operands:
                if v in defined:
                    last_use[v] = i
    size = {v: value_bytes(v.type) for v in defined}
    live = sum(size[a] for a in block.args if a in last_use)
    peak = sum(size[a] for a in block.args)
    for i, op in enumerate(ops):
        inner = sum(_block_peak(b, functions, calling) - sum(size.get(a, value_bytes(a.type)) for a in b.args)
                    for region in op.regions for b in region.blocks)
        callee = _callee(op, functions)
        if callee is not None and callee.sym_name.data not in calling:
            body = callee.body.blocks[0]
            inner += _block_peak(body, functions, calling | {callee.sym_name.data}) - sum(
                value_bytes(a.type) for a in body.args)
        made = sum(size[r] for r in op.results)
        peak = max(peak, live + max(inner, 0) + made)
        live += sum(size[r] for r in op.results if r in last_use)  # an unused result is dropped at once
        live -= sum(size[v] for v, last in last_use.items() if last == i)
    return peak


def _callee(op, functions: dict):
    callee = op.properties.get("callee") or op.attributes.get("callee")
    if callee is None:
        return None
    name = getattr(getattr(callee, "root_reference", None), "data", None)
    return functions.get(name)
