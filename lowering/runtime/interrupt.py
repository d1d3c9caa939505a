"""Bounding a run: ``lowering.compile(..., timeout=seconds)`` and prompt Ctrl-C.

An executable compiled with a ``timeout`` checks, after every op and every
loop iteration, whether the current call has run longer than that; if so it
raises :class:`ExecutionTimeout` (an :class:`~xla_dialect.errors.ExecutionError`) naming
where it stopped. Without a timeout nothing is checked (no cost per op). One
kernel is never interrupted in the middle (NumPy's C loops do not look at the
clock), so the bound is "timeout plus the longest single op".

Ctrl-C: Python raises ``KeyboardInterrupt`` between two ops or two interpreted
loop iterations. Compiled loops (:mod:`lowering.executor.compiled_loops`) return to
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


POLL_MASK = (1 << 16) - 1
"""Compiled code calls :func:`poll` once every ``POLL_MASK + 1`` iterations of each loop it runs inside one
call (nested loops, loops inside compiled segments)."""


POLL_WARNING = "Code running in object mode won't allow parallel execution"
"""The start of the warning numba gives when it compiles a nogil function that calls :func:`poll` ("Code running
in object mode won't allow parallel execution despite nogil=True"): the poll takes the GIL on purpose, once every
65,536 iterations, so :mod:`lowering.runtime.process_state` silences it when :mod:`lowering` is imported."""


def poll() -> None:
    """Called from compiled code (numba's ``objmode``, which takes the GIL) while it runs long loops: running
    this Python function lets Python run pending signal handlers -- Ctrl-C raises ``KeyboardInterrupt`` here,
    which leaves the compiled function -- and the call's deadline is checked (:func:`check`)."""
    check("a loop in compiled code")


# ----------------------------------------------------------------------------
# Ctrl-C while numba compiles
# ----------------------------------------------------------------------------

_GUARDED = False


def guard_compiles() -> None:
    """Make every numba compilation asked for on the main thread run on a thread of its own while the main
    thread waits for it (idempotent; installed when :mod:`lowering` is imported).

    Python runs signal handlers on the main thread only, so Ctrl-C during a compilation on the main thread
    raised ``KeyboardInterrupt`` inside numba: in one of llvmlite's ctypes callbacks it was swallowed
    ("Exception ignored on calling ctypes callback function ... KeyboardInterrupt", the program went on as if
    nothing had been pressed), and elsewhere it could leave numba's or LLVM's state half-updated (a later call
    crashed with a segmentation fault). Now the main thread only waits -- an interruptible wait, so Ctrl-C
    raises ``KeyboardInterrupt`` there at once -- and the compilation, which is never interrupted, finishes on
    its daemon thread: the function is then compiled (and numba's on-disk cache written whole) for the next
    call, which waits for it under numba's compiler lock if it is still running. Compilations already on
    another thread (the background compiles of ``loop_compilation="auto"``, and the functions a compilation
    compiles in turn) run where they are."""
    global _GUARDED
    if _GUARDED:
        return
    _GUARDED = True
    import functools

    from numba.core import sigutils
    from numba.core.dispatcher import Dispatcher

    original = Dispatcher.compile

    @functools.wraps(original)
    def compile(self, sig):
        if not _compiles_here():
            return original(self, sig)
        try:  # already compiled for these types: nothing to wait for
            args, _ = sigutils.normalize_signature(sig)
            existing = self.overloads.get(tuple(args))
        except Exception:  # noqa: BLE001 - let numba report a malformed signature itself
            existing = None
        if existing is not None:
            return existing.entry_point
        return _on_a_thread(original, self, sig)

    Dispatcher.compile = compile


def _compiles_here() -> bool:
    """Whether a numba compilation asked for now must move off this thread: this is the main thread and it
    holds no numba compiler lock (an outer compilation on this thread -- a ``numba.vectorize`` typing the
    functions it calls -- holds it, and a thread of ours would wait for it for ever)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    from numba.core.compiler_lock import global_compiler_lock

    return not global_compiler_lock.is_locked()


def compile_off_main_thread(function, *args):
    """``function(*args)``, a numba compilation other than a dispatcher's (``numba.vectorize`` with its
    signatures compiles at once), run as :func:`guard_compiles` runs those: on a thread of its own when
    called on the main thread, which waits for it interruptibly."""
    return _on_a_thread(function, *args) if _compiles_here() else function(*args)


POLL_SECONDS = 0.1
"""How often the main thread, waiting for a compilation on another thread, wakes to run a pending Ctrl-C."""


def _on_a_thread(function, *args):
    """``function(*args)`` run on a daemon thread while this thread waits (interruptibly) for its result."""
    box: dict = {}
    finished = threading.Event()

    def run():
        try:
            box["value"] = function(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            box["error"] = e
        finally:
            finished.set()

    thread = threading.Thread(target=run, name="xla-dialect numba compile", daemon=True)
    thread.start()
    # Ctrl-C: KeyboardInterrupt here; the compilation goes on to its end on its thread. A timed wait, woken every
    # POLL_SECONDS: Python runs a signal's handler on the main thread, but the OS may deliver SIGINT to another
    # thread of the process, and then a wait without a timeout is not interrupted until the compilation ends.
    while not finished.wait(POLL_SECONDS):
        pass
    if "error" in box:
        error = box.pop("error")
        try:
            raise error
        finally:
            del error
    return box["value"]
