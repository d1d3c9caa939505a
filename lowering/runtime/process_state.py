"""The state of the process the library changes, all of it here, with the reasons.

A library should leave its host process alone; the executor cannot quite, and
this module is the one place that touches process-wide state (the other
modules call it). What changes, when, and why:

* **numba's on-disk cache, patched** (:func:`install`, on ``import lowering``):
  saves take an exclusive file lock beside numba's index and loads check the
  signature of what they read (:mod:`lowering.runtime.numba_cache`): several processes
  compiling the same kernels (pytest workers, ``xla-conformance --jobs``) raced
  on numba's index and loaded another signature's code.
* **numba compilations on the main thread run on a thread of their own**
  (:func:`install`, :func:`lowering.runtime.interrupt.guard_compiles`, patching
  ``numba``'s ``Dispatcher.compile``): Ctrl-C during a compilation otherwise
  raised inside numba/LLVM (swallowed in a ctypes callback, or leaving state
  half-updated).
* **one warning filter** (:func:`install`, :func:`quiet_warning`): numba's
  "Code running in object mode won't allow parallel execution despite
  nogil=True", given for compiled loops that poll for Ctrl-C and timeouts
  through ``objmode`` on purpose (once every 65,536 iterations).
* **generated modules on disk and in ``sys.modules``**
  (:func:`cache_directory`, :func:`import_module_file`): compiled loops, segments
  and fused groups are written as module files under
  ``$XLA_DIALECT_CACHE/loops`` (default ``~/.cache/xla_dialect/loops``; read at
  each use, so a test may point it elsewhere) and imported under a fixed name,
  because numba's cache finds a cached function's module by file and name.
* **fork hooks** (:func:`at_fork_in_child`, four of them): a child forked from a
  process whose numba threads ran must not start GNU OpenMP parallel regions
  (libgomp aborts it), so compiled loops' paired products run one after the
  other there (:data:`lowering.runtime.loop_runtime.PAIRS_ENABLED`); and the child has
  none of the parent's threads, so the worker pools of
  :mod:`lowering.runtime.workers` are forgotten (a pool made before the fork would
  take work and never run it); and the background compilation queue and the
  compile process (:mod:`lowering.executor.compile_queue`) are the parent's.
* **a compile process** (:mod:`lowering.executor.compile_process`, started by the first
  background compilation of ``loop_compilation="auto"``; ``XLA_DIALECT_COMPILE_PROCESS=0``
  turns it off): numba's compiler is Python and, on a thread of this process,
  shares the GIL with the interpreted calls it is meant to replace; the child
  compiles generated code into numba's cache, and exits when this process closes
  its pipe (an exit hook, :func:`at_exit`, closes it; a forked child forgets it).
* **one environment default** (:func:`environment_default`):
  ``GOMP_SPINCOUNT`` (:data:`lowering.runtime.workers.GOMP_SPINCOUNT`), written just
  before numba first starts GNU OpenMP and only when the user set neither it
  nor ``OMP_WAIT_POLICY``: with libgomp's default a worker kept one CPU busy for
  4-4.7 ms after the last parallel region, taken from whatever runs next.
* **the floating-point control register (MXCSR / FPCR)**, per call and per
  thread, never left changed: an ``Executable`` call under ``denormals="flush"``
  sets FTZ/DAZ for the call and restores the caller's bits when it returns
  (:func:`lowering.runtime.denormals.mode_switch`); numba's worker threads are handed
  the caller's MXCSR with each piece of work. Nothing is set at import.

Elsewhere only what is not the library's: the commands (``interop/tools``) set
``JAX_PLATFORMS=cpu`` by default in their own processes, and warning filters
inside ``warnings.catch_warnings()`` blocks end with their block.
:data:`CHANGES` lists what this process has had changed so far (for
debugging and the tests); ``tests/test_process_state.py`` checks that no
other module of the library changes process state.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import CodeType, ModuleType

from .cache_size import mark_used

CHANGES: list[str] = []
"""What the library changed in this process, in order (one line each)."""

_LOCK = threading.Lock()
_INSTALLED = False


def install() -> None:
    """What ``import lowering`` changes (idempotent): numba's cache made safe for concurrent processes, numba
    compilations on the main thread moved to a thread of their own, numba's slice-assignment error message without
    the shapes (compiled in every process otherwise), numba's objmode-in-nogil warning off."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    from . import interrupt, numba_cache, slice_assignment_errors

    numba_cache.install()  # before any kernel module compiles or loads a cached function
    CHANGES.append("numba's cache: saves locked, loads checked (lowering.runtime.numba_cache)")
    interrupt.guard_compiles()
    CHANGES.append("numba's Dispatcher.compile: main-thread compilations on a thread of their own")
    slice_assignment_errors.install()
    CHANGES.append("numba's slice assignment: a shape mismatch raises a message without the shapes "
                   "(lowering.runtime.slice_assignment_errors)")
    quiet_warning(interrupt.POLL_WARNING)  # (the objmode polls of compiled loops take the GIL on purpose)


def quiet_warning(message: str) -> None:
    """Ignore warnings starting with ``message`` (a process-wide filter)."""
    warnings.filterwarnings("ignore", message=message)
    CHANGES.append(f"warning filter: ignore {message!r}")


def at_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every child forked from this process (where ``os.register_at_fork`` exists)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=hook)
        CHANGES.append(f"fork hook: {getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', hook)}")


def at_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` when this process exits (``atexit``)."""
    import atexit

    atexit.register(hook)
    CHANGES.append(f"exit hook: {getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', hook)}")


def environment_default(name: str, value: str, unless: tuple[str, ...] = ()) -> bool:
    """Set environment variable ``name`` to ``value`` unless it or one of ``unless`` is set; whether it was set."""
    if name in os.environ or any(other in os.environ for other in unless):
        return False
    os.environ[name] = value
    CHANGES.append(f"environment: {name}={value}")
    return True


def cache_directory() -> str | None:
    """Where generated modules (and numba's compiled code for them) are kept: ``$XLA_DIALECT_CACHE/loops``,
    else ``~/.cache/xla_dialect/loops``; None when it cannot be created (then nothing is cached)."""
    path = os.environ.get("XLA_DIALECT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "xla_dialect")
    path = os.path.join(path, "loops")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) else None


def import_module_file(name: str, path: str) -> ModuleType:
    """The module of file ``path`` as ``sys.modules[name]``, imported the first time (registered before it runs:
    numba's cache finds a cached function's module by name) -- and again when the module of that name came from
    another file: the same text in another cache directory (``XLA_DIALECT_CACHE`` changed, or a long-lived compile
    process serving both), whose numba cache is beside that file."""
    with _LOCK:
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) != path:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                exec(module_code(path), module.__dict__)  # noqa: S102 - the generated module, as an import runs it
            except BaseException:
                sys.modules.pop(name, None)
                raise
            mark_used(path)  # (the cache's least recently used entries are removed past its size limit)
    return module


def module_code(path: str) -> CodeType:
    """The code object of module file ``path``, compiled once per Python version and kept beside numba's cache
    (``__pycache__/<stem>.<cache tag>.code``: the interpreter's magic number and a digest of the source, then the
    marshalled code). Python's own ``.pyc`` files are not written where ``PYTHONDONTWRITEBYTECODE`` is set
    (common in containers), and every warm process then compiled a program's generated modules again; the source
    is read and hashed each time, so a changed file is compiled again, never served stale."""
    import hashlib
    import marshal

    with open(path, "rb") as f:
        source = f.read()
    stamp = importlib.util.MAGIC_NUMBER + hashlib.sha256(source).digest()[:16]
    directory, file = os.path.split(path)
    cached = os.path.join(directory, "__pycache__", f"{file[:-3]}.{sys.implementation.cache_tag}.code")
    try:
        with open(cached, "rb") as f:
            data = f.read()
        if data.startswith(stamp):
            return marshal.loads(data[len(stamp):])
    except (OSError, EOFError, ValueError, TypeError):  # (absent, or unreadable: compiled again below)
        pass
    code = compile(source, path, "exec", dont_inherit=True)
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(stamp + marshal.dumps(code))
        os.replace(tmp, cached)  # (atomically: a concurrent process reads the whole file or none)
    except OSError:  # (a read-only cache: compiled each time)
        pass
    return code
