"""The NumPy executor: lower hlo once to straight-line Python over vectorized kernels.

>>> exe = lowering.compile(module)
>>> (result,) = exe(x, y)

Two layers live here. The kernels (:mod:`lowering.kernels`, one file per op
family, with :mod:`lowering.registry`, :mod:`lowering.context` and their
runtime support) sit below the passes, which evaluate ops with them
(``fold-constants``); the executor (:mod:`lowering.executor`) sits above the
passes and runs the executor pipeline before lowering. Importing
``lowering.kernels`` therefore does not import the executor: its names below
are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import process_state

# numba's cache made safe for concurrent processes (before any kernel module compiles or loads a cached function),
# Ctrl-C during a numba compilation raised in the caller, never inside numba, and numba's warning about the
# objmode polls of compiled loops off: lowering.process_state says what and why
process_state.install()

from .options import CompileOptions
from .registry import KERNELS, Constant, register, register_kernel
from .runtime import register_custom_call

if TYPE_CHECKING:
    from .devices import MultiDeviceExecutable
    from .executor import Executable, LoweringContext, compile

_EXECUTOR_NAMES = {"Executable": "executor", "LoweringContext": "executor", "compile": "executor",
                   "MultiDeviceExecutable": "devices"}
"""Names exported from the executor layer, imported when first asked for."""

__all__ = ["CompileOptions", "Constant", "Executable", "KERNELS", "LoweringContext", "MultiDeviceExecutable", "compile", "register",
           "register_custom_call", "register_kernel"]


def __getattr__(name: str):
    """``lowering.compile`` and the other executor names, imported on first use."""
    module = _EXECUTOR_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'lowering' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
