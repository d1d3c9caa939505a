"""Running host callbacks: the Python functions of ``jax.debug.print``, ``jax.pure_callback``, ``io_callback``
and ``eqx.error_if`` (custom calls ``@xla_ffi_python_cpu_callback``), with jax's semantics.

The importer captured jax's wrapped callable on the op (:mod:`xla_dialect.callbacks`). A call hands it what
jaxlib's CPU handler hands it: one read-only, C-contiguous NumPy array per operand, ``None`` for a token;
the callable (jax's wrapper) checks its results' count, shapes and dtypes itself and returns a tuple with
one value per result, token results included. Results are copied into fresh arrays (the program owns its
values). Ops run in program order, so ordered effects (``io_callback(..., ordered=True)``, threaded through
tokens) run in the order jax.jit runs them; a callback inside a loop or a branch runs at each iteration or
when the branch is taken (loops holding a custom call are never compiled to numba, the fusion never takes
one, and the executor does not evaluate them on constants when lowering: see ``passes.purity``).

An exception raised by the callback becomes what ``jax.jit`` raises: a ``jax.errors.JaxRuntimeError`` (or, for
jax.jit, a ``ValueError`` when the failure surfaces from a result it already handed out; ours is both) whose
message is ``INTERNAL: CpuCallback error calling callback: `` and the callback's traceback (so its last line is
the callback's exception, e.g. ``_EquinoxRuntimeError: x too big``). Here it is also an
:class:`~xla_dialect.errors.HostCallbackError` (an ``ExecutionError``, so an ``XlaError``), its ``__cause__``
the callback's own exception, and its message ends by naming the callback and the op.

A call whose callable was not captured (the program was serialized, printed or written as StableHLO text:
only its index remains) raises :class:`~xla_dialect.errors.UnsupportedError` naming the callback when it runs
(a never-taken ``eqx.error_if`` branch does not stop the program).
"""

from __future__ import annotations

import traceback

import numpy as np

from xla_dialect.callbacks import HOST_CALLBACK_ATTR, HostCallbackAttr, callback_index
from xla_dialect.errors import ExecutionError, HostCallbackError, UnsupportedError, op_context
from xla_dialect.shape import format_shape
from xla_dialect.types import TokenType, numpy_dtype

from .program_state import TOKEN

_ERROR_CLASS: type | None = None


def host_callback_error_class() -> type:
    """The class raised when a callback fails: :class:`HostCallbackError` and, when jax is installed,
    ``jax.errors.JaxRuntimeError`` and ``ValueError``: jax.jit raises the first when it sees the failure
    while executing, the second (same message) when it surfaces from a result buffer it already handed out
    (a later op reading the failed call's result), so an ``except`` written for jax.jit catches it."""
    global _ERROR_CLASS
    if _ERROR_CLASS is None:
        try:
            from jax.errors import JaxRuntimeError
        except Exception:  # jax missing or too old: the project's class alone
            _ERROR_CLASS = HostCallbackError
        else:
            _ERROR_CLASS = type("HostCallbackError", (HostCallbackError, JaxRuntimeError, ValueError),
                                {"__module__": HostCallbackError.__module__, "__doc__": HostCallbackError.__doc__})
    return _ERROR_CLASS


def _argument(x):
    """An operand as jaxlib gives it to a callback: a read-only C-contiguous NumPy array."""
    arr = np.asarray(x)
    arr = arr.view() if arr.flags.c_contiguous else np.array(arr, order="C")  # (ascontiguousarray makes 0-d 1-d)
    arr.flags.writeable = False
    return arr


def host_callback_kernel(op, what: str):
    """The kernel of a host-callback custom call ``op`` (``what`` names it in errors)."""
    attr = op.attributes.get(HOST_CALLBACK_ATTR)
    callback = attr.data if isinstance(attr, HostCallbackAttr) else None
    index = callback_index(op)
    fn = callback.fn if callback is not None else None
    if fn is None:
        named = f"host callback {callback}" if callback is not None else (
            f"host callback #{index}" if index is not None else "a host callback")

        def not_captured(*operands):
            raise UnsupportedError(
                f"{what}: {named} (jax.debug.print, jax.pure_callback, io_callback or an eqx.error_if check) "
                "was not captured: its Python function is not in the program, only its index. Only a program "
                "traced in this process can call back (interop.import_jax(fn, *args) or a jax.stages.Lowered); "
                "a serialized export, MLIR bytecode or StableHLO / hlo text cannot")

        return not_captured

    tokens_in = [isinstance(v.type, TokenType) for v in op.operands]
    # (each result's type as text, for the errors: the kernel holds no IR, so a stored executable can keep it)
    results = [(True, None, None, None) if isinstance(r.type, TokenType) else
               (False, format_shape(r.type, False), tuple(r.type.get_shape()), numpy_dtype(r.type))
               for r in op.results]
    single = len(results) == 1
    where = f"{callback.description} in {what}"

    def host_callback(*operands):
        args = tuple(None if token else _argument(x) for token, x in zip(tokens_in, operands))
        try:
            out = fn(*args)
        except Exception as e:
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            raise host_callback_error_class()(
                f"INTERNAL: CpuCallback error calling callback: {text.rstrip()}\n(raised by {where})") from e
        if not isinstance(out, (tuple, list)):
            raise ExecutionError(f"{where}: the callback returned a {type(out).__name__}; "
                                 "a CPU callback must return a tuple")
        if len(out) != len(results):
            raise ExecutionError(f"{where}: the callback returned {len(out)} value(s), the call declares "
                                 f"{len(results)}")
        values = []
        for i, ((token, declared, shape, dtype), v) in enumerate(zip(results, out)):
            if token:
                values.append(TOKEN)
                continue
            arr = np.asarray(v)
            if arr.shape != shape or arr.dtype != dtype:
                raise ExecutionError(f"{where}: result #{i} is {arr.dtype}{list(arr.shape)}, the call declares "
                                     f"{declared}")
            values.append(np.array(arr, order="C", copy=True))
        if not values:
            return None
        return values[0] if single else tuple(values)

    return host_callback
