"""numba's on-disk cache, made safe for several processes compiling the same function at once.

numba keeps the compiled overloads of a ``cache=True`` function in one index file (signature -> data file name)
and one data file per overload. Saving a new overload reads the index, takes the first free name, writes the
index, then the data; nothing orders two processes doing that at the same moment. Two processes compiling two
signatures of one function (the workers of ``xla-conformance --jobs 2``, pytest-xdist, two users' scripts) both
take the name ``.1.nbc``: the index ends up naming one signature, the data file holds the other's code, and every
later process that loads the function for that signature calls code compiled for other argument types
(``TypeError: can't unbox array from PyObject into native value``, seen in CI on f32 x f64 dots).

:func:`install` fixes both halves: a save holds an exclusive lock on a file beside the index while it reads the
index, picks the name and writes both files; a load checks that the overload it read was compiled for the
signature asked for and otherwise compiles afresh (which repairs the entry), so caches written before the fix
heal themselves.

It also keys the cache of the library's own functions (and of the code it generates) by the source of every
module under ``lowering/kernels/`` and ``lowering/runtime/`` (:func:`library_digest`) and by numba's settings
that change machine code (:func:`codegen_settings`). numba checks only the file
that defines a cached function: ``small_dot``'s kernels' machine code links the functions it calls from other modules
(``eigen_dots``, ``chain_tiles``), so after a change to one of those (an update of the package, an edit) its cached
code ran the old callee -- wrong bits, or a crash where the callee's arguments had changed.

And it loads the library's cached code without numba's registries: numba refreshes its target context before every
cache load, which imports and installs every typing and lowering registry (~0.3-0.5 s at a process's first load,
scipy.linalg among the imports), though loading machine code needs only numba's runtime. A process that runs a
program compiled before so reaches its compiled code ~0.3 s sooner. (The interpreter's ufuncs are cached whole, loop
included, :mod:`lowering.kernels.ufunc_loops`: nothing is generated around a loaded function.)

Installed when :mod:`lowering` is imported.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os

try:
    import fcntl
except ImportError:  # not POSIX: numba's own behaviour
    fcntl = None

from numba.core import caching

_INSTALLED = False


@contextlib.contextmanager
def _exclusive_lock(index_path: str):
    """An exclusive ``flock`` on ``index_path + '.lock'`` for the duration of the block (none where unsupported)."""
    if fcntl is None:
        yield
        return
    try:
        handle = open(index_path + ".lock", "a+b")
    except OSError:  # a read-only cache directory: numba will not save there either
        yield
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _signature_matches(sig, data) -> bool:
    """Whether a loaded overload was compiled for the argument types ``sig`` (True when it cannot be told)."""
    signature = getattr(data, "signature", None)
    args = getattr(signature, "args", None)
    if args is None or sig is None:
        return True
    try:
        return tuple(args) == tuple(sig)
    except TypeError:
        return True


@functools.cache
def library_digest() -> str:
    """A digest of the source of every module of ``lowering/kernels/`` and ``lowering/runtime/``: the code the
    library's numba functions and generated code can link."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (lowering/)
    return source_digest(root, ("kernels", "runtime"))[:16]


def source_digest(root: str, packages) -> str:
    """A digest of every ``.py`` file under the directories ``packages`` of ``root`` (subdirectories included,
    ``__pycache__`` not), each with its path: also the library's part of the executable cache's key
    (:mod:`lowering.executor.executable_cache`)."""
    h = hashlib.sha256()
    for package in packages:
        for directory, subdirectories, files in os.walk(os.path.join(root, package)):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    with open(path, "rb") as f:
                        h.update(os.path.relpath(path, root).encode() + b"\0" + f.read())
    return h.hexdigest()


CODEGEN_SETTINGS = ("OPT", "ENABLE_PROFILING", "DEBUGINFO_DEFAULT", "BOUNDSCHECK", "LOOP_VECTORIZE", "SLP_VECTORIZE",
                    "USING_SVML", "EXTEND_VARIABLE_LIFETIMES")
"""numba settings (``NUMBA_OPT``, ``NUMBA_ENABLE_PROFILING``, ...) that change the machine code it makes but not
numba's own cache key: machine code compiled under one of them was loaded by every later process. Measured: a
cache filled by a run with ``NUMBA_ENABLE_PROFILING=1`` (for ``perf``) made diffrax's Tsit5 solve 0.051 -> 0.090 ms
per call in every later run."""


def codegen_settings() -> tuple:
    """The values of :data:`CODEGEN_SETTINGS` in this process: part of the cache key of the library's functions."""
    from numba.core import config

    return tuple(str(getattr(config, name, None)) for name in CODEGEN_SETTINGS)


def _ours(function) -> bool:
    """Whether ``function`` is the library's (its modules, or the generated modules it writes and imports)."""
    module = getattr(function, "__module__", "") or ""
    return module.startswith(("lowering.", "xla_dialect_"))


def install() -> None:
    """Make numba's cache saves process-safe and its loads check their signature (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True

    original_save = caching.IndexDataCacheFile.save

    @functools.wraps(original_save)
    def save(self, key, data):
        with _exclusive_lock(self._index_path):
            return original_save(self, key, data)

    caching.IndexDataCacheFile.save = save

    original_load = caching.Cache._load_overload

    @functools.wraps(original_load)
    def load_overload(self, sig, target_context):
        data = original_load(self, sig, target_context)
        if data is not None and not _signature_matches(sig, data):
            return None  # another signature's code under this key (a cache written by racing processes)
        return data

    caching.Cache._load_overload = load_overload

    original_key = caching.Cache._index_key

    @functools.wraps(original_key)
    def index_key(self, sig, codegen):
        key = original_key(self, sig, codegen)
        return key + (library_digest(), codegen_settings()) if _ours(self._py_func) else key

    caching.Cache._index_key = index_key

    original_public_load = caching.Cache.load_overload

    @functools.wraps(original_public_load)
    def load_overload_without_refresh(self, sig, target_context):
        if not _ours(self._py_func):
            return original_public_load(self, sig, target_context)
        # numba refreshes the target context before every cache load: it imports and installs every typing and
        # lowering registry (numba.np.arraymath, which imports scipy.linalg, ...), ~0.3-0.5 s on a 2-core VM at
        # the first load of a process -- while loading machine code needs none of them, only numba's runtime (NRT)
        # symbols and its atomic helpers. So a process that runs a program compiled before starts in ~50 ms
        # instead of ~0.4 s. A compilation (a cache miss) refreshes on its own (numba.core.compiler), so later
        # compilations see every registry as before. (Nothing generates code around a loaded function: the
        # interpreter's ufuncs are cached whole, loop included, lowering.kernels.ufunc_loops.)
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # (the guard swallowed a spurious I/O error: compiled afresh, as numba does)

    caching.Cache.load_overload = load_overload_without_refresh


def has_machine_code(dispatcher, signature: tuple) -> bool:
    """Whether ``dispatcher`` (a ``cache=True`` numba function) has machine code for the argument types
    ``signature`` already: compiled in this process or saved in numba's on-disk cache by an earlier one, so
    that ``dispatcher.compile(signature)`` is a load (milliseconds), not a compilation (seconds). False when it
    cannot be told (no cache, another numba's layout).

    ``loop_compilation="auto"`` asks this at a compiled path's first call: a program run before in another
    process then runs its machine code from the first call, instead of interpreting until a background
    compilation that only loads it."""
    signature = tuple(signature)
    try:
        if signature in dispatcher.overloads:
            return True
        cache = dispatcher._cache
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - numba internals of another release, or no cache: not known
        return False
