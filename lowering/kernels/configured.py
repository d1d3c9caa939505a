"""Kernels of the ops configured at run time: ``dynamic_pad``, ``dynamic_gather``, ``dynamic_conv``.

Each is an op of the StableHLO spec whose configuration (paddings, slice sizes) arrives as operands instead
of attributes; its class names the static op it becomes (``STATIC``), which operands configure it
(``CONFIGURATION``) and how their values become that op's properties (``static_properties``). The kernel
reads the configuration at every call and runs the static op's own kernel, built once per distinct
configuration (a program usually sees one): the results are those of ``pad``, ``gather`` and ``convolution``.
A configuration the static op rejects, or one giving another result shape than the op declares, is an
:class:`~xla_dialect.errors.ExecutionError` naming the op and the values.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Block

from xla_dialect.errors import ExecutionError, HloVerifyError, op_context
from xla_dialect.ops.data_movement import DynamicPadOp
from xla_dialect.ops.indexing import DynamicGatherOp
from xla_dialect.ops.windowed import DynamicConvOp
from xla_dialect.shape import format_shape

from .registry import KERNELS, Constant, register


@register(DynamicPadOp, DynamicGatherOp, DynamicConvOp)
def configured_kernel(op, ctx):
    """The kernel of an op configured at run time (see the module docstring)."""
    cls = type(op)
    static_cls, configuration = cls.STATIC, cls.CONFIGURATION
    data = [i for i in range(len(op.operands)) if i not in configuration]
    data_types = [op.operands[i].type for i in data]
    result_types = [r.type for r in op.results]
    base_properties = dict(op.properties)
    what = op_context(op)
    cache: dict[tuple, object] = {}

    def kernel_for(values) -> object:
        key = tuple(tuple(int(x) for x in np.asarray(v).reshape(-1)) for v in values)
        kernel = cache.get(key)
        if kernel is not None:
            return kernel
        properties = {**base_properties, **cls.static_properties(key)}
        try:
            inferred = static_cls.infer(data_types, properties, [], None)
        except HloVerifyError as e:
            raise ExecutionError(f"{what}: the run-time configuration {list(map(list, key))} is invalid: {e}") from None
        if [tuple(t.get_shape()) for t in inferred] != [tuple(t.get_shape()) for t in result_types]:
            raise ExecutionError(f"{what}: the run-time configuration {list(map(list, key))} gives "
                                 f"{', '.join(format_shape(t) for t in inferred)}, but the op declares "
                                 f"{', '.join(format_shape(t) for t in result_types)}")
        scratch = Block(arg_types=data_types)
        static = static_cls.create(operands=list(scratch.args), properties=properties, result_types=result_types)
        kernel = KERNELS[static_cls](static, ctx)
        if isinstance(kernel, Constant):
            value = kernel.value
            kernel = lambda *args: value  # noqa: E731
        cache[key] = kernel
        return kernel

    def kernel(*args):
        return kernel_for([args[i] for i in configuration])(*[args[i] for i in data])

    return kernel
