"""Run hlo modules on XLA's CPU backend: the reference for builder-made programs.

:func:`run_xla` exports the module to StableHLO (:func:`interop.stablehlo.export_stablehlo`),
compiles it with the CPU client of ``jax.extend.backend`` and runs it on NumPy
arrays. Compiled executables are cached by program text.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType

from xla_dialect.errors import ExecutionError, UnsupportedError, XlaError
from xla_dialect.shape import format_shape
from xla_dialect.types import numpy_dtype

from .exporter import export_stablehlo


__all__ = ["run_xla", "compile_xla"]


@lru_cache(maxsize=64)
def _compile(text: str):
    import jax
    from jax.extend import backend as jex_backend

    client = jex_backend.get_backend("cpu")
    options = jex_backend.get_compile_options(num_replicas=1, num_partitions=1)
    try:
        return client.compile_and_load(text, jax.devices("cpu")[:1], options)
    except Exception as e:  # XLA's own message names the op
        raise ExecutionError(f"XLA could not compile the exported module: {e}") from None


def compile_xla(module: ModuleOp):
    """Compile ``module`` with XLA's CPU backend; returns jaxlib's ``LoadedExecutable``."""
    return _compile(export_stablehlo(module, layouts=False))


def _x64():
    """A context with jax's 64-bit types enabled (jax.enable_x64 where it exists, else the experimental one)."""
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64

    return enable_x64()


def run_xla(module: ModuleOp, *arrays) -> tuple[np.ndarray, ...]:
    """Run ``module``'s ``@main`` on XLA's CPU backend; returns a tuple of NumPy arrays.

    Arguments follow the executor's rule (``lowering.compile``'s default ``argument_conversion="exact"``:
    arrays of the parameter's dtype; Python numbers and lists when every value survives the conversion);
    64-bit values are passed as such whether or not jax's x64 mode is on. Tuple-typed parameters or
    results are not supported (XLA's runtime takes and returns flat arrays).
    """
    import jax

    if not isinstance(module, ModuleOp):
        raise XlaError(f"run_xla expects an xDSL ModuleOp, got {type(module).__name__}")
    main = next((op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main"), None)
    if main is None:
        raise ExecutionError("run_xla: the module has no @main function")
    inputs = list(main.function_type.inputs)
    if len(arrays) != len(inputs):
        raise ExecutionError(f"@main takes {len(inputs)} arguments ({', '.join(format_shape(t) for t in inputs)}), "
                             f"got {len(arrays)}")
    for t in list(main.function_type.outputs) + inputs:
        if not isinstance(t, TensorType):
            raise UnsupportedError(f"run_xla: @main parameters and results must be arrays, got {format_shape(t)}")
    from lowering.executor.executable import _argument_array

    args = []
    for i, (a, t) in enumerate(zip(arrays, inputs)):
        want = numpy_dtype(t)
        arr = _argument_array(a, want, "exact", lambda what: ExecutionError(
            f"run_xla: @main argument #{i}: expected {format_shape(t, False)} ({want}), {what}"))
        if arr.shape != tuple(t.get_shape()):
            raise ExecutionError(f"@main argument #{i}: expected {format_shape(t, False)}, got shape {list(arr.shape)}")
        args.append(arr)
    executable = compile_xla(module)
    device = jax.devices("cpu")[0]
    # 64-bit arguments stay 64-bit whatever the caller's jax_enable_x64 (device_put would narrow them).
    with _x64():
        buffers = [jax.device_put(a, device) for a in args]
    try:
        outputs = executable.execute(buffers)
    except Exception as e:
        raise ExecutionError(f"XLA execution failed: {e}") from None
    return tuple(np.asarray(o) for o in outputs)
