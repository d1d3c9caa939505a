"""The project's exception hierarchy.

Every error the toolkit raises on bad input derives from :class:`XlaError`, so a
caller can catch one class. Messages name the op (and its location when known)
and say what was expected.
"""

from __future__ import annotations

from xdsl.utils.exceptions import VerifyException


class XlaError(Exception):
    """Base class of every error raised by this project."""


class LayoutError(XlaError, ValueError):
    """A layout is malformed or does not fit the shape it is attached to."""


class ShapeParseError(XlaError, ValueError):
    """XLA shape text could not be parsed."""


class MlirParseError(XlaError, ValueError):
    """MLIR text (hlo or StableHLO) could not be parsed."""


class HloParseError(XlaError, ValueError):
    """XLA HLO module text could not be parsed; the message gives the line and column."""


class HloVerifyError(XlaError, VerifyException):
    """An hlo op violates XLA's shape-inference rules.

    Also a :class:`xdsl.utils.exceptions.VerifyException`, so xDSL's own
    verification machinery reports it like any other verifier failure.
    """


class BuilderError(XlaError, ValueError):
    """A builder call was given invalid arguments (raised at the offending call)."""


class UnsupportedError(XlaError, NotImplementedError):
    """An op, type or feature that the toolkit does not (yet) support."""


class ExecutionError(XlaError, RuntimeError):
    """Executing a compiled program failed (bad arguments, runtime check)."""


class HostCallbackError(ExecutionError):
    """A Python host callback (``jax.debug.print``, ``jax.pure_callback``, ``io_callback``, ``eqx.error_if``)
    raised. The exception raised is also a ``jax.errors.JaxRuntimeError``, as from ``jax.jit``, with jax's
    message (``INTERNAL: CpuCallback error calling callback: <traceback>``); ``__cause__`` is the callback's
    own exception."""


class PassError(XlaError, RuntimeError):
    """A pass or pipeline failed; the message names the pass and the op."""


def empty_input(source: str, content="") -> str:
    """The message for a program file (or text, ``source`` in angle brackets) with nothing in it."""
    what = "the input" if source.startswith("<") else "the file"
    return f"{source}: {what} is empty" + (" (only whitespace)" if content else "")


def op_context(op) -> str:
    """Return ``'hlo.add'`` or ``'hlo.add at file.py:12'`` for error messages."""
    name = getattr(op, "name", None) or type(op).__name__
    loc = None
    attrs = getattr(op, "attributes", None)
    if attrs is not None and "loc" in attrs:
        loc_attr = attrs["loc"]
        # (not getattr's default: printing an attribute costs ~0.1 ms, and op_context runs for every op)
        loc = loc_attr.data if hasattr(loc_attr, "data") else str(loc_attr)
    return f"{name} at {loc}" if loc else name


class ResourceLimitError(XlaError, MemoryError):
    """A value would take more memory than the limit of :mod:`xla_dialect.limits` allows."""
