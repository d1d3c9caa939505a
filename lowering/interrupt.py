"""Bounding a run: ``lowering.compile(..., timeout=seconds)`` and prompt Ctrl-C.

An executable compiled with a ``timeout`` checks, after every op and every
loop iteration, whether the current call has run longer than that; if so it
raises :class:`ExecutionTimeout` (an :class:`~xla_dialect.errors.ExecutionError`) naming
where it stopped. Without a timeout nothing is checked (no cost per op). One
kernel is never interrupted in the middle (NumPy's C loops do not look at the
clock), so the bound is "timeout plus the longest single op".

Ctrl-C: Python raises ``KeyboardInterrupt`` between two ops or two interpreted
loop iterations. Compiled loops (:mod:`lowering.compiled_loops`) return to
Python every :data:`CHUNK` iterations, so a runaway compiled loop is
interruptible (and bounded by the timeout) too.
"""

from __future__ import annotations

import threading
import time

from xla_dialect.errors import ExecutionError

CHUNK = 1 << 16
"""Iterations a compiled loop runs before handing control back to Python."""


class ExecutionTimeout(ExecutionError, TimeoutError):
    """A call ran longer than its executable's ``timeout``."""


_current = threading.local()


def start(timeout: float | None) -> None:
    """Begin a call on this thread with ``timeout`` seconds (None: unbounded)."""
    _current.deadline = None if timeout is None else time.monotonic() + timeout
    _current.timeout = timeout


def finish() -> None:
    """End the call begun by :func:`start`."""
    _current.deadline = None


def check(where: str = "") -> None:
    """Raise :class:`ExecutionTimeout` if this thread's call is past its deadline."""
    deadline = getattr(_current, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        _current.deadline = None
        raise ExecutionTimeout(f"the call ran longer than its timeout of {_current.timeout} s"
                               + (f" (stopped at {where})" if where else ""))
