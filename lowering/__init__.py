"""The NumPy executor: lower hlo once to straight-line Python over vectorized kernels.

>>> exe = lowering.compile(module)
>>> (result,) = exe(x, y)
"""

from .devices import MultiDeviceExecutable
from .executor import Executable, LoweringContext, compile
from .registry import KERNELS, Constant, register, register_kernel
from .runtime import register_custom_call

__all__ = ["Constant", "Executable", "KERNELS", "LoweringContext", "MultiDeviceExecutable", "compile", "register",
           "register_custom_call", "register_kernel"]
