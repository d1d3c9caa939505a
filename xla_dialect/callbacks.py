"""Host callbacks: the Python functions behind JAX's ``xla_ffi_python_cpu_callback`` custom calls.

``jax.debug.print``, ``jax.debug.callback``, ``jax.pure_callback``, ``jax.experimental.io_callback`` and
equinox's runtime checks (``eqx.error_if``) lower to ``custom_call @xla_ffi_python_cpu_callback`` whose
typed-FFI attribute ``index`` points into the list of Python callables jax keeps with the lowering (the
``host_callbacks`` of the ``Lowered``); the program text holds nothing but that index.

When a program is traced in this process (``interop.import_jax(fn, *args)``, a ``jax.stages.Lowered``), the
importer puts each callable on its op, in the discardable attribute ``hlo.host_callback``
(:data:`HOST_CALLBACK_ATTR`) holding a :class:`HostCallbackAttr`: the module itself keeps the function alive,
jax's registry is not consulted again, and clones of the module (passes, ``lowering.compile``) share it.
Printed, the attribute shows only a description (``#hlo.host_callback<"jax.pure_callback(mysin) #1">``);
parsed back, it holds no function, like a call from a serialized program or StableHLO text, which the
executor reports as not captured when the call runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

from xdsl.ir import Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

HOST_CALLBACK_TARGETS = frozenset({"xla_ffi_python_cpu_callback", "xla_ffi_partitioned_python_cpu_callback"})
"""The custom-call targets JAX emits on the CPU for Python callbacks (typed FFI, ``{index = N : ui64}``)."""

HOST_CALLBACK_ATTR = "hlo.host_callback"
"""The op attribute holding the :class:`HostCallbackAttr` of a captured callback."""


@dataclass(frozen=True)
class HostCallback:
    """A captured callback: jax's wrapped callable (``fn(*arrays) -> tuple``), its index, a description."""

    description: str
    index: int | None = None
    fn: Callable[..., Any] | None = field(default=None, compare=True, repr=False)

    def __str__(self) -> str:
        return self.description + (f" #{self.index}" if self.index is not None else "")


@irdl_attr_definition
class HostCallbackAttr(Data[HostCallback]):
    """``#hlo.host_callback<"description #index">``: the Python function a host-callback custom call runs."""

    name = "hlo.host_callback"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> HostCallback:
        parser.parse_punctuation("<")
        text = parser.parse_str_literal()
        parser.parse_punctuation(">")
        description, sep, index = text.rpartition(" #")
        if sep and index.isdigit():
            return HostCallback(description, int(index), None)
        return HostCallback(text, None, None)  # parsed text holds no function: not captured

    def print_parameter(self, printer: Printer) -> None:
        import json

        printer.print_string("<" + json.dumps(str(self.data)) + ">")


def callback_index(op) -> int | None:
    """The ``index`` of a host-callback custom call's typed-FFI attributes, None when it has none."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

    for key in ("mhlo.backend_config", "backend_config"):
        config = op.properties.get(key) or op.attributes.get(key)
        if isinstance(config, DictionaryAttr):
            index = config.data.get("index")
            if isinstance(index, IntegerAttr):
                return int(index.value.data)
    return None


# ----------------------------------------------------------------------------
# Describing jax's wrapped callables (for messages and the printed attribute)
# ----------------------------------------------------------------------------

_KINDS = {
    "pure_callback_lowering": "jax.pure_callback",
    "io_callback_lowering": "jax.experimental.io_callback",
    "debug_callback_lowering": "jax.debug.callback",
}


def _walk(obj, depth: int = 0, seen: set | None = None):
    """The callables reachable from ``obj`` through closures, partials and jax's ``_FlatCallback``."""
    seen = set() if seen is None else seen
    if depth > 8 or id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, functools.partial):
        yield from _walk(obj.func, depth + 1, seen)
        return
    inner = getattr(obj, "callback_func", None)
    if inner is not None:
        yield from _walk(inner, depth + 1, seen)
    code, cells = getattr(obj, "__code__", None), getattr(obj, "__closure__", None)
    if code is None or not cells:
        return
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if callable(value):
            yield from _walk(value, depth + 1, seen)


def describe_callback(fn) -> str:
    """``jax.pure_callback(mysin)``, ``jax.debug.print('x={x}')``, ... for jax's wrapped callable ``fn``."""
    kind, user = "a Python callback", None
    for obj in _walk(fn):
        if isinstance(obj, functools.partial) and getattr(obj.func, "__name__", "") == "_format_print_callback":
            fmt = obj.args[0] if obj.args and isinstance(obj.args[0], str) else "..."
            return f"jax.debug.print({fmt!r})"
        qualname = getattr(obj, "__qualname__", "") or ""
        module = getattr(obj, "__module__", "") or ""
        for marker, name in _KINDS.items():
            if qualname.startswith(marker + "."):
                kind = name
        if user is None and qualname and not module.startswith(("jax.", "jax._src", "jaxlib")) \
                and not isinstance(obj, functools.partial):
            user = f"{module}.{qualname}" if module and module != "__main__" else qualname
    if user is not None and user.startswith("equinox._errors."):
        return "equinox runtime check (eqx.error_if)"
    return f"{kind}({user})" if user else kind
