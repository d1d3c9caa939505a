"""The NumPy executor: lower hlo once to straight-line Python over vectorized kernels.

>>> exe = lowering.compile(module)
>>> (result,) = exe(x, y)

Three layers live here, each a package, each importing only the ones below it:

* :mod:`lowering.runtime` -- what kernels and compiled code call at run time: the options, BLAS and LAPACK,
  worker threads, denormal modes, devices and their rendezvous, host callbacks, interrupts, numba's cache and
  the process state the library changes;
* :mod:`lowering.kernels` -- one module per op family, registered by op class
  (:mod:`lowering.kernels.registry`), with the context a kernel factory reads
  (:mod:`lowering.kernels.context`) and each op's numerics, which the interpreter and every compiled path use;
* :mod:`lowering.executor` -- lowering a module to a program: the executable, fusion, compiled loops and
  segments, the compile queue, multi-device and MPI runs.

The passes (``passes/``) sit between the kernels and the executor: they evaluate ops with the kernels
(``fold-constants``), and the executor runs the executor pipeline before lowering. Importing
``lowering.kernels`` therefore does not import the executor: the executor's names below are loaded on first
use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .runtime import process_state

# numba's cache made safe for concurrent processes (before any kernel module compiles or loads a cached function),
# Ctrl-C during a numba compilation raised in the caller, never inside numba, and numba's warning about the
# objmode polls of compiled loops off: lowering.runtime.process_state says what and why
process_state.install()

from .kernels.registry import KERNELS, Constant, register, register_kernel
from .runtime.options import CompileOptions
from .runtime.program_state import register_custom_call

if TYPE_CHECKING:
    from .executor.executable import Executable, LoweringContext, compile
    from .executor.multi_device import MultiDeviceExecutable

_EXECUTOR_NAMES = {"Executable": "executor.executable", "LoweringContext": "executor.executable",
                   "compile": "executor.executable", "MultiDeviceExecutable": "executor.multi_device"}
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
