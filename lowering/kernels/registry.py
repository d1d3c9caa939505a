"""The kernel registry: op class -> kernel factory.

A kernel factory is called once per op at lowering time as
``factory(op, ctx)`` and returns a Python callable that computes the op's
results from NumPy arrays. Ops with regions get their compiled region
functions as the leading arguments: ``kernel(*region_fns, *operands)``.
A factory returns either a callable or a :class:`Constant` (the value is then
bound directly, with no call at run time).

Kernels are registered by the op family modules in ``lowering/kernels/``::

    @register(AddOp)
    def _add(op, ctx): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

KernelFactory = Callable[[Any, Any], Any]

KERNELS: dict[type, KernelFactory] = {}
"""Op class -> kernel factory."""


@dataclass(frozen=True)
class Constant:
    """Returned by a kernel factory whose op always yields the same value."""

    value: Any


def register(*op_classes: type) -> Callable[[KernelFactory], KernelFactory]:
    """Decorator: register a kernel factory for one or more op classes."""

    def deco(factory: KernelFactory) -> KernelFactory:
        for cls in op_classes:
            KERNELS[cls] = factory
        return factory

    return deco


def register_kernel(op_class: type, factory: KernelFactory) -> None:
    """Register (or replace) the kernel factory of ``op_class`` — for user ops."""
    KERNELS[op_class] = factory
