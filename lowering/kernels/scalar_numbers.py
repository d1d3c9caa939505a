"""The scalar definitions of :mod:`lowering.kernels.scalar` compiled without their NaN-payload rule, for fused loops.

A fused loop (:mod:`lowering.executor.fusion`) reports whether any float output came out NaN, and the executor
then computes the whole group with the ops' own kernels: a NaN's payload and sign are never taken from a fused loop.
Inside one, the rule that picks *which* NaN an add, multiply or FMA returns (:func:`lowering.kernels.scalar.first_nan`:
two compares, a select and an add for each of them, in every element) only costs time: measured on this 2-core VM,
the gelu + tanh loop of ``benchmarks/workloads.py``'s element-wise workload (4M f32 elements, one thread) ran in
7.0 ms with its three FMAs without the rule and 11.1 ms with it.

The definitions are the same functions -- the same code objects, so there is no second copy of any op's numerics --
compiled again with ``first_nan`` bound to :func:`result_as_computed` (the result, whatever NaN it is). Only the
definitions that reach ``first_nan`` (directly or through other definitions) are compiled again; the rest are the
originals. The copies are not cached on their own (numba's cache would key them as the originals): the fused
modules that inline them are.

:func:`payload_free` says whether a fused group may use them: not when one of its ops turns a NaN's payload into a
value that is not NaN (a total-order compare, a bitcast of a float to an integer) or an output the loop does not
check (anything but f32, f64, integers and pred: f16, bf16, complex), since such a value would not be reported.
"""

from __future__ import annotations

import types

import numba
from numba.core.registry import CPUDispatcher

from . import scalar

__all__ = list(scalar.EXPORTS)


def result_as_computed(r, a):
    """``r`` as the instruction computed it (stands for :func:`lowering.kernels.scalar.first_nan`)."""
    return r


def _needs_copy() -> set[str]:
    """The exported definitions that reach ``first_nan``, directly or through other definitions."""
    dispatchers = {name: value for name, value in vars(scalar).items() if isinstance(value, CPUDispatcher)}
    needs = {"first_nan"}
    changed = True
    while changed:
        changed = False
        for name, dispatcher in dispatchers.items():
            if name not in needs and needs & set(dispatcher.py_func.__code__.co_names):
                needs.add(name)
                changed = True
    return needs - {"first_nan"}


def _copies() -> dict:
    namespace = dict(vars(scalar))
    namespace["first_nan"] = numba.njit(error_model="numpy", forceinline=True)(result_as_computed)
    copies = {}
    for name in sorted(_needs_copy()):
        original = getattr(scalar, name).py_func
        if original.__code__.co_freevars:  # (the definitions are module-level functions)
            raise TypeError(f"lowering.kernels.scalar.{name} is a closure: it cannot be compiled again here")
        function = types.FunctionType(original.__code__, namespace, original.__name__, original.__defaults__)
        function.__qualname__ = original.__qualname__
        function.__module__ = __name__  # (another symbol name than the original's: both may sit in one LLVM module)
        function.__doc__ = original.__doc__
        options = {k: v for k, v in getattr(scalar, name).targetoptions.items() if k != "nopython"}
        copies[name] = namespace[name] = numba.njit(**options)(function)
    return copies


_COPIES = _copies()
globals().update({name: _COPIES.get(name, getattr(scalar, name)) for name in scalar.EXPORTS})


def payload_free(group) -> bool:
    """Whether the fused loop of ``group`` (a :class:`lowering.executor.fusion_plan.Group`) may use these
    definitions: each output is f32 or f64 (the outputs the loop checks for NaN) or an integer or pred, and no op
    reads a float's bits into a value that is not a float (whose NaN the check would not see)."""
    from xdsl.dialects.builtin import AnyFloat, Float32Type, Float64Type, IntegerType

    from xla_dialect.ops.conversion import BitcastConvertOp
    from xla_dialect.ops.elementwise import CompareOp

    for value in group.outputs:
        element = value.type.element_type
        if not isinstance(element, (IntegerType, Float32Type, Float64Type)):  # (f16, bf16, complex: not checked)
            return False
    for op in group.members:
        if isinstance(op, BitcastConvertOp) and isinstance(op.operand.type.element_type, AnyFloat):
            return False
        if isinstance(op, CompareOp) and op.compare_type is not None and op.compare_type.data == "TOTALORDER":
            return False
    return True
