"""Compiled programs kept on disk: a later process loads the executable instead of lowering the module again.

``lowering.compile`` runs the executor's passes, plans fusion groups and compiled segments, folds constants and
writes the Python code of every function: 0.03-0.7 s for the real programs of ``benchmarks/`` even when numba's
machine code is cached. The executable that comes out is data -- the generated Python code, the kernels it calls
(functions and closures of the library's kernel factories), the constants computed ahead, the fusion groups' and
compiled segments' generated source -- so it is written to the generated-code cache
(:func:`~lowering.runtime.process_state.cache_directory`, ``executable_<digest>.exe``) when it is made, and a later
process compiling the same module with the same options loads it (:func:`load`) and skips all of that.

**The key** (:func:`cache_key`) is a digest of the module's text, the entry, every resolved option, ``XLA_FLAGS``,
the host (CPU model and flags, usable CPUs: kernels choose XLA's code paths by them), the versions of Python, NumPy,
numba, ml_dtypes, xDSL and SciPy, and the digest of the library's own source (every module of ``xla_dialect``, ``passes`` and
``lowering``): a changed library, option or program is another key, never stale code.

**What is stored** is the namespace of the generated code, pickled with the rules of :class:`_Pickler`: functions
and closures by value (their code, their cells; their globals the live module they come from, or the executable's
own namespace), module-level functions, numba functions and NumPy ufuncs by name, the interpreter's ufuncs by their
definition, the library's module-level state by name (shared, not copied), constants with their read-only flags and
views (a broadcast stays a view), the executable's host-side queues as the new executable's own, host callbacks'
Python functions as their positions in the module (a loaded executable calls those of the module it is loaded for,
as a compilation would). Fusion groups, compiled segments and tiered loops are stored as their generated source, as
they stand before their first call: the first call loads their machine code when an earlier process compiled it
(numba's cache), else they tier up as usual. A program holding something that cannot be stored this way -- a
custom-call target a script registered (its registration is not in the key), an object of the IR -- is not stored
(:class:`NotCacheable`; the reason is kept in :data:`last_not_stored`), and compiles as before.

Switched off with ``lowering.compile(..., executable_cache=False)`` or ``XLA_DIALECT_EXECUTABLE_CACHE=0``; a
probe, several devices or an entry grid are never cached. The files count toward the generated-code cache's size
limit (least recently used first; :mod:`lowering.runtime.cache_size`), ``xla-cache clear`` removes them.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import importlib
import io
import marshal
import os
import pickle
import platform
import sys
import threading
import types

import numpy as np

CACHE_VERSION = 1
"""Bumped when the stored format changes (part of the key)."""

PREFIX = "executable"
"""Files are ``<cache>/executable_<digest>.exe`` (:mod:`lowering.runtime.cache_size` counts them as entries)."""

last_miss: str | None = None
"""Why the last ``lowering.compile`` of this process did not load its executable from the cache (None: loaded)."""

last_not_stored: str | None = None
"""Why the last executable this process tried to store was not stored (None: stored; stores run in the background:
read it after :func:`wait`)."""


class NotCacheable(Exception):
    """A program holds something :class:`_Pickler` cannot store faithfully (the message says what)."""


def enabled(options) -> bool:
    """Whether ``lowering.compile`` with ``options`` (resolved :class:`~lowering.runtime.options.CompileOptions`)
    uses the cache: the option (``$XLA_DIALECT_EXECUTABLE_CACHE`` by default), no probe, one device."""
    return (options.executable_cache and options.probe is None
            and options.num_replicas * options.num_partitions == 1)


# ---------------------------------------------------------------------------------------------------------------
# The key
# ---------------------------------------------------------------------------------------------------------------

_STATIC: str | None = None
_STATIC_LOCK = threading.Lock()


def _static_part() -> str:
    """The part of every key that does not change within a process: library source, versions, host."""
    global _STATIC
    if _STATIC is None:
        with _STATIC_LOCK:
            if _STATIC is None:
                import ml_dtypes
                import numba

                from ..kernels.host import host_properties
                from ..runtime.workers import usable_cpus

                from ..runtime.numba_cache import source_digest

                h = hashlib.sha256()
                root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                h.update(source_digest(root, ("xla_dialect", "passes", "lowering")).encode())
                h.update(repr((CACHE_VERSION, sys.version, np.__version__, numba.__version__, ml_dtypes.__version__,
                               _version("xdsl"), _version("scipy"), platform.machine(),
                               sorted(host_properties().items()), usable_cpus(), _cpu_flags())).encode())
                _STATIC = h.hexdigest()
    return _STATIC


def _version(distribution: str) -> str | None:
    """An installed distribution's version (without importing it: SciPy's import alone costs 0.2 s), or None."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_flags() -> str:
    """The CPU's model name and flags (Linux), or the platform's processor name."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def module_digest(module, callbacks: list | None = None) -> str:
    """A digest of everything ``module``'s text says (ops in order, operands, types, attributes with their
    locations, properties, regions, blocks and successors), 5-8x faster than printing it: each attribute object is
    printed once (memoized by identity: equal attributes, such as the floats 0.0 and -0.0, may print differently).
    A host callback's attribute counts with whether it holds its Python function (its text does not say); those
    functions are appended to ``callbacks`` (when given) in op order, each once (:func:`dumps` stores them as these
    positions)."""
    from xla_dialect.callbacks import HostCallbackAttr

    if callbacks is None:
        callbacks = []
    parts: list[str] = []
    append = parts.append
    printed: dict[int, str] = {}
    numbers: dict = {}
    blocks: dict = {}

    def text(attribute) -> str:
        found = printed.get(id(attribute))
        if found is None:
            found = printed[id(attribute)] = str(attribute)
            if isinstance(attribute, HostCallbackAttr):
                fn = attribute.data.fn
                found += " (captured)" if fn is not None else " (not captured)"
                if fn is not None and not any(fn is known for known in callbacks):
                    callbacks.append(fn)
        return found

    def number(value) -> int:  # (numbered at first sight, use or definition: graph regions too)
        found = numbers.get(value)
        if found is None:
            found = numbers[value] = len(numbers)
        return found

    def operation(op) -> None:
        append(op.name)
        append(",".join([str(number(v)) for v in op.operands]))
        for r in op.results:
            append(f"%{number(r)}:{text(r.type)}")
        for name, attribute in op.attributes.items():
            append(f"{name}={text(attribute)}")
        append("|")
        for name, attribute in op.properties.items():
            append(f"{name}={text(attribute)}")
        for successor in op.successors:
            append(f"^{blocks.setdefault(successor, len(blocks))}")
        for region in op.regions:
            append("{")
            for block in region.blocks:
                append(f"^{blocks.setdefault(block, len(blocks))}(")
                for arg in block.args:
                    append(f"%{number(arg)}:{text(arg.type)}")
                append(")")
                for inner in block.ops:
                    operation(inner)
            append("}")

    operation(module)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cache_key(module_digest_: str, entry: str, options) -> str:
    """The digest naming the cached executable of a module of :func:`module_digest` ``module_digest_``, compiled
    for function ``entry`` with ``options`` (resolved), on this host, by this library."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
              if f.name not in ("probe", "executable_cache")}  # (every option, resolved: a new one is in the key)
    h = hashlib.sha256()
    h.update(_static_part().encode())
    h.update(repr((entry, sorted(fields.items()), os.environ.get("XLA_FLAGS", ""))).encode())
    h.update(module_digest_.encode())
    return h.hexdigest()[:32]


def _path(key: str) -> str | None:
    from ..runtime.process_state import cache_directory

    directory = cache_directory()
    return None if directory is None else os.path.join(directory, f"{PREFIX}_{key}.exe")


# ---------------------------------------------------------------------------------------------------------------
# Storing
# ---------------------------------------------------------------------------------------------------------------

class _EmptyCell:
    """Marks a closure cell that held nothing when stored (the class itself, stored by name)."""


def _function_skeleton(code: bytes, globals_ref, name: str, cells: int):
    """A function of marshalled ``code`` whose globals are ``globals_ref`` (a dict, or a module's name) and whose
    closure has ``cells`` empty cells (:func:`_fill_function` fills them: a closure may reach itself)."""
    namespace = importlib.import_module(globals_ref).__dict__ if isinstance(globals_ref, str) else globals_ref
    closure = tuple(types.CellType() for _ in range(cells)) if cells else None
    return types.FunctionType(marshal.loads(code), namespace, name, None, closure)


def _fill_function(fn, state) -> None:
    values, defaults, kwdefaults, attributes, qualname, module = state
    for cell, value in zip(fn.__closure__ or (), values):
        if value is not _EmptyCell:
            cell.cell_contents = value
    fn.__defaults__ = defaults
    fn.__kwdefaults__ = kwdefaults
    fn.__qualname__ = qualname
    fn.__module__ = module
    if attributes:
        fn.__dict__.update(attributes)


def _attribute(module: str, qualname: str):
    """``module.qualname`` (a module-level function, class or numba function of the library)."""
    value = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _generated_attribute(module: str, path: str, name: str):
    """Function ``name`` of the generated module file ``path``, imported as ``module``."""
    from ..runtime.process_state import import_module_file

    if not os.path.exists(path):
        raise NotCacheable(f"the generated module {path} is gone")
    return getattr(import_module_file(module, path), name)


def _array_from_bytes(data: bytes, dtype, shape: tuple, writeable: bool) -> np.ndarray:
    array = np.frombuffer(data, dtype).reshape(shape)  # (read-only: it is the pickle's buffer)
    return array.copy() if writeable else array


def _view(base: np.ndarray, offset: int, shape: tuple, strides: tuple, writeable: bool) -> np.ndarray:
    flat = base.reshape(-1)[offset:]
    # (as raw bytes of the element size: as_strided's array interface does not name ml_dtypes' types)
    raw = flat.view(np.dtype((np.void, flat.itemsize))) if flat.dtype.isbuiltin != 1 else flat
    view = np.lib.stride_tricks.as_strided(raw, shape, strides, writeable=writeable and flat.flags.writeable)
    return view.view(flat.dtype) if raw is not flat else view


def _module(name: str):
    return importlib.import_module(name)


def _lazy_ufunc(key):
    from ..kernels.scalar import ufunc

    return ufunc(*key)


def _built_ufunc(key):
    from ..kernels.scalar import ufunc

    return ufunc(*key).built()


_PARSED: dict[str, object] = {}


def _attribute_from_text(text: str):
    """The xDSL attribute printed as ``text`` (parsed once per process)."""
    found = _PARSED.get(text)
    if found is None:
        from xdsl.parser import Parser

        from xla_dialect.dialect import make_context

        found = _PARSED[text] = Parser(make_context(), text).parse_attribute()
    return found


def _lookup(module_name: str, qualname: str):
    module = sys.modules.get(module_name)
    if module is None or "<locals>" in qualname:
        return None
    value = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


LIBRARY_MODULES = frozenset({"lowering", "xla_dialect", "passes", "numpy", "ml_dtypes", "numba", "builtins",
                             "collections", "functools", "operator", "_operator", "math", "itertools", "copyreg",
                             "dataclasses", "enum", "types", "_functools", "_collections"})
"""The packages an executable's stored objects may come from: the library, NumPy, numba and the standard modules
its kernels use. A function or object of any other module -- a host callback's Python function, a custom-call
target a script registered, jax's callback machinery -- is not stored (:class:`NotCacheable`): the registration it
came from is not part of the key, so a later process could call another function than its program names."""


def _outside_library(module: str | None) -> bool:
    return not module or module.partition(".")[0] not in LIBRARY_MODULES


class _Pickler(pickle.Pickler):
    """A pickler of an executable's namespace (see the module docstring for the rules)."""

    def __init__(self, file, namespace: dict, persistent: dict[int, str]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.namespace = namespace
        self.persistent = {id(namespace): "namespace", **persistent}
        self.shared = _library_state()
        from xdsl.ir import Attribute, Block, IRNode, Region, SSAValue

        from ..kernels.context import KernelContext

        self.refused = (IRNode, SSAValue, Block, Region, KernelContext, threading.Thread)
        self.verdicts: dict[type, bool] = {}  # (type -> refused: isinstance of these ABCs is slow per object)
        self.attribute_class = Attribute
        self.attributes: dict[type, bool] = {}  # (type -> an xDSL attribute)

    def persistent_id(self, obj):
        name = self.persistent.get(id(obj))
        if name is not None:
            return name
        shared = self.shared.get(id(obj))
        if shared is not None and shared[0] is obj:
            return ("library state", shared[1], shared[2])
        kind = type(obj)
        refused = self.verdicts.get(kind)
        if refused is None:
            refused = self.verdicts[kind] = issubclass(kind, self.refused)
        if refused:
            raise NotCacheable(f"the executable holds {kind.__module__}.{kind.__qualname__}")
        return None

    def reducer_override(self, obj):
        kind = type(obj)
        attribute = self.attributes.get(kind)
        if attribute is None:
            attribute = self.attributes[kind] = issubclass(kind, self.attribute_class)
        if attribute:
            return self._attribute(obj)
        if _outside_library(kind.__module__):
            raise NotCacheable(f"the executable holds a {kind.__module__}.{kind.__qualname__} (outside the library)")
        if kind is types.FunctionType:
            return self._function(obj)
        if kind is np.ndarray:
            return self._array(obj)
        if kind is types.ModuleType:
            return _module, (obj.__name__,)
        if kind is np.ufunc:
            return self._ufunc(obj)
        if kind.__name__ == "LazyUfunc" and kind.__module__ == "lowering.kernels.scalar":
            return _lazy_ufunc, (obj._key,)
        if isinstance(obj, (threading.Lock().__class__, threading.RLock().__class__)):
            raise NotCacheable("the executable holds a lock")
        module = sys.modules.get("numba.core.dispatcher")
        if module is not None and isinstance(obj, module.Dispatcher):
            return self._dispatcher(obj)
        if kind.__name__ == "fortran" and kind.__module__ == "builtins":  # (SciPy's LAPACK and BLAS routines)
            return self._fortran(obj)
        if kind is types.BuiltinFunctionType and _outside_library(getattr(obj, "__module__", None)):
            self_ = getattr(obj, "__self__", None)  # (a method of a builtin object: e.g. a queue's put)
            if self_ is None or isinstance(self_, types.ModuleType) and _outside_library(self_.__name__):
                raise NotCacheable(f"the executable calls the builtin {obj!r} (outside the library)")
        if kind is type and _outside_library(obj.__module__):
            raise NotCacheable(f"the executable holds the class {obj.__module__}.{obj.__qualname__}")
        return NotImplemented

    def _function(self, fn):
        if _outside_library(fn.__module__) and fn.__globals__ is not self.namespace:
            raise NotCacheable(f"the executable calls {fn.__module__}.{fn.__qualname__} (outside the library: a "
                               f"host callback, a registered custom-call target?)")
        if fn.__module__ and _lookup(fn.__module__, fn.__qualname__) is fn:
            return NotImplemented  # (by name: pickle's own rule for module-level functions)
        namespace = fn.__globals__
        if namespace is self.namespace:
            globals_ref = namespace
        else:
            name = namespace.get("__name__")
            module = sys.modules.get(name) if isinstance(name, str) else None
            if module is None or module.__dict__ is not namespace:
                raise NotCacheable(f"function {fn.__qualname__}: its globals are not a module's")
            if name == "__main__" or name.startswith("xla_dialect_") or getattr(module, "__file__", None) is None:
                raise NotCacheable(f"function {fn.__qualname__} of module {name} (not importable by name)")
            globals_ref = name
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:
                cells.append(_EmptyCell)
        state = (cells, fn.__defaults__, fn.__kwdefaults__, dict(fn.__dict__), fn.__qualname__, fn.__module__)
        return (_function_skeleton, (marshal.dumps(fn.__code__), globals_ref, fn.__name__, len(cells)),
                state, None, None, _fill_function)

    def _array(self, array: np.ndarray):
        if array.dtype.hasobject:
            raise NotCacheable("the executable holds an object array")
        root = array
        while True:  # (the array owning the memory; as_strided's views hold it through an interface object)
            base = root.base
            if isinstance(base, np.ndarray):
                root = base
            elif isinstance(getattr(base, "base", None), np.ndarray) and hasattr(base, "__array_interface__"):
                root = base.base
            else:
                break
        writeable = bool(array.flags.writeable)
        if root is not array and root.flags.c_contiguous and root.dtype == array.dtype:
            # A view (a broadcast, a slice of a larger constant): the root stored once, the view rebuilt over it.
            start = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            if start % root.itemsize == 0 and 0 <= start // root.itemsize <= root.size:
                return _view, (root, start // root.itemsize, array.shape, array.strides, writeable)
        data = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        return _array_from_bytes, (data.tobytes(), array.dtype, array.shape, writeable)

    def _attribute(self, attribute):
        """An xDSL attribute (a custom-call target's result types) as its text, parsed back when loaded: only
        where the text gives back an equal attribute (a host callback's function, say, is not in its text)."""
        from xla_dialect.callbacks import HostCallbackAttr

        if isinstance(attribute, HostCallbackAttr):
            raise NotCacheable("the executable holds a host callback's attribute")
        text = str(attribute)
        try:
            same = _attribute_from_text(text) == attribute
        except Exception:  # noqa: BLE001 - text xDSL cannot parse back
            same = False
        if not same:
            raise NotCacheable(f"the attribute {text[:80]} does not parse back from its text")
        return _attribute_from_text, (text,)

    def _fortran(self, routine):
        """A LAPACK or BLAS routine of SciPy's (``lowering/runtime/lapack.py`` calls them) by its name."""
        for module_name in ("scipy.linalg.lapack", "scipy.linalg.blas"):
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for name, value in vars(module).items():
                if value is routine:
                    return _attribute, (module_name, name)
        raise NotCacheable(f"the compiled routine {routine!r} is not one of SciPy's LAPACK or BLAS routines")

    def _ufunc(self, fn: np.ufunc):
        if getattr(np, fn.__name__, None) is fn:
            return _attribute, ("numpy", fn.__name__)
        from ..kernels.scalar import built_ufunc_key

        key = built_ufunc_key(fn)
        if key is not None:
            return _built_ufunc, (key,)
        raise NotCacheable(f"the NumPy ufunc {fn.__name__} is not the library's")

    def _dispatcher(self, fn):
        module, qualname = fn.py_func.__module__, fn.py_func.__qualname__
        if _lookup(module, qualname) is fn:
            return _attribute, (module, qualname)
        generated = sys.modules.get(module)
        path = getattr(generated, "__file__", None)
        if module.startswith("xla_dialect_") and path and getattr(generated, fn.__name__, None) is fn:
            return _generated_attribute, (module, path, fn.__name__)
        raise NotCacheable(f"numba function {qualname} of {module}")


_OURS = ("lowering", "xla_dialect", "passes")
_BY_VALUE = (types.FunctionType, type, types.ModuleType, int, float, complex, str, bytes, bool, tuple, frozenset,
             type(None))


def _library_state() -> dict[int, tuple]:
    """id -> (object, module, name) of the library's module-level arrays, dicts, lists, sets and instances of its
    classes: state a kernel shares with its module (a flag a fork hook clears, a registry, the BLAS thread scope),
    stored by name so that a loaded kernel shares the module's object, not a copy (``loop_runtime.PAIRS_ENABLED``: a
    copy kept paired products on in a forked child, which GNU OpenMP kills)."""
    found: dict[int, tuple] = {}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in _OURS or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            kind = type(value)
            if attribute.startswith("__") or kind in _BY_VALUE:
                continue
            if kind in (np.ndarray, dict, list, set) or (kind.__module__ or "").partition(".")[0] in _OURS:
                found.setdefault(id(value), (value, name, attribute))
    return found


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, persistent: dict[str, object]):
        super().__init__(file)
        self.persistent = persistent

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and pid[0] == "library state":
            return getattr(importlib.import_module(pid[1]), pid[2])
        return self.persistent[pid]  # (a KeyError -- a callback this module does not have -- is an unreadable file)


def _persistent_objects(runtime) -> dict[str, object]:
    """The host-side objects of an executable that a loaded one replaces with its own (by name)."""
    return {"runtime": runtime, "infeed": runtime.infeed, "outfeed": runtime.outfeed, "channels": runtime.channels}


def dumps(namespace: dict, runtime, entry_function: str, source: str, limits_blas: bool,
          callbacks: list = ()) -> bytes:
    """The stored form of an executable: its namespace (``entry_function`` the name of its entry's Python function
    there), its source and BLAS policy. ``callbacks``: its module's host-callback functions (:func:`module_digest`),
    stored as their positions -- a loaded executable calls those of the module it is loaded for. Raises
    :class:`NotCacheable`."""
    buffer = io.BytesIO()
    persistent = {id(obj): name for name, obj in _persistent_objects(runtime).items()}
    persistent.update({id(fn): ("host callback", k) for k, fn in enumerate(callbacks)})
    items = {k: v for k, v in namespace.items() if k != "__builtins__"}
    try:
        _Pickler(buffer, namespace, persistent).dump((CACHE_VERSION, items, entry_function, source, limits_blas))
    except NotCacheable:
        raise
    except Exception as e:  # noqa: BLE001 - anything an object's own pickling raises: not stored, never an error
        raise NotCacheable(f"{type(e).__name__}: {e}") from None
    return buffer.getvalue()


def loads(data: bytes, runtime, callbacks: list = ()):
    """``(function, source, limits_blas)`` of a stored executable, its host-side objects ``runtime``'s and its
    host callbacks' functions ``callbacks`` (those of the module it is loaded for, as :func:`dumps` numbered them)."""
    namespace: dict = {"__builtins__": builtins.__dict__}
    persistent = {"namespace": namespace, **_persistent_objects(runtime),
                  **{("host callback", k): fn for k, fn in enumerate(callbacks)}}
    version, items, entry_function, source, limits_blas = _Unpickler(io.BytesIO(data), persistent).load()
    if version != CACHE_VERSION:
        raise NotCacheable(f"stored format {version}, this library reads {CACHE_VERSION}")
    namespace.update(items)
    return namespace[entry_function], source, limits_blas


def save(key: str, namespace: dict, runtime, entry_function: str, source: str, limits_blas: bool,
         callbacks: list = ()) -> bool:
    """Write the executable under ``key``; False (and :data:`last_not_stored` says why) when it cannot be stored."""
    global last_not_stored
    path = _path(key)
    if path is None:
        last_not_stored = "no writable cache directory"
        return False
    try:
        data = dumps(namespace, runtime, entry_function, source, limits_blas, callbacks)
    except NotCacheable as e:
        last_not_stored = f"not cacheable: {e}"
        return False
    from ..runtime.cache_size import prune_in_background, size_limit

    limit = size_limit()
    if limit is not None and len(data) > limit // 4:  # (a program of large constants would evict most of the cache)
        last_not_stored = f"{len(data)} bytes: more than a quarter of the cache's size limit ({limit} bytes)"
        return False

    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        last_not_stored = f"not written: {e}"
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False
    prune_in_background(os.path.dirname(path))
    last_not_stored = None
    return True


def load(key: str, runtime, callbacks: list = ()):
    """``(function, source, limits_blas)`` of the executable stored under ``key``, or None (:data:`last_miss`
    says why). A file that cannot be read back (another library wrote it, it is damaged) is removed."""
    global last_miss
    path = _path(key)
    if path is None:
        last_miss = "no writable cache directory"
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        last_miss = "not in the cache"
        return None
    try:
        loaded = loads(data, runtime, callbacks)
    except Exception as e:  # noqa: BLE001 - any failure to read it back is a miss, never an error
        last_miss = f"unreadable ({type(e).__name__}: {e}); removed"
        try:
            os.remove(path)
        except OSError:
            pass
        return None
    from ..runtime.cache_size import mark_used

    mark_used(path)
    last_miss = None
    return loaded


_SAVING: dict[str, threading.Thread] = {}
"""Key -> the thread storing it (a compilation of the same program meanwhile waits for it: a load then)."""
_SAVING_LOCK = threading.Lock()


def save_in_background(key: str, namespace: dict, runtime, entry_function: str, source: str,
                       limits_blas: bool, callbacks: list = ()) -> threading.Thread:
    """:func:`save` on a thread of its own: storing costs 5-400 ms (the loops' source is written for it), which
    ``lowering.compile`` does not wait for. Not a daemon: a script that ends at once still leaves its executable
    for the next run (the interpreter waits for the thread at exit)."""
    thread = threading.Thread(target=save, args=(key, namespace, runtime, entry_function, source, limits_blas,
                                                 callbacks),
                              name="xla-dialect executable cache", daemon=False)
    with _SAVING_LOCK:
        for old in [k for k, t in _SAVING.items() if not t.is_alive()]:
            del _SAVING[old]
        _SAVING[key] = thread
    thread.start()
    return thread


def wait() -> None:
    """Wait until every executable this process is storing is written (tests; a process about to fork)."""
    with _SAVING_LOCK:
        threads = list(_SAVING.values())
    for thread in threads:
        thread.join()


_CALLBACKS: dict[str, list] = {}
"""Key -> the host-callback functions :func:`lookup` found in the module (:func:`store` stores their positions)."""


def lookup(module, entry: str, options):
    """The cache's part of ``lowering.compile``: ``(key, loaded)`` -- ``loaded`` the stored executable's parts
    ``(function, entry_op, source, runtime, limits_blas)`` when the cache holds it (``entry_op`` the caller's
    ``func.func``), else None (compile, then :func:`store` under ``key``); ``(None, None)`` when the cache is not
    used."""
    from xdsl.dialects import func

    from ..runtime.program_state import Runtime

    global last_miss
    if not enabled(options):
        last_miss = "the executable cache is off for this compilation"
        return None, None
    if roundtrip():
        return "roundtrip", None
    callbacks: list = []
    try:
        key = cache_key(module_digest(module, callbacks), entry, options)
    except Exception as e:  # noqa: BLE001 - a module the walk cannot digest: lowered (and verified) as without
        last_miss = f"no key ({type(e).__name__}: {e})"
        return None, None
    _CALLBACKS[key] = callbacks  # (for store(), after the compilation a miss leads to)
    with _SAVING_LOCK:
        saving = _SAVING.get(key)
    if saving is not None:  # (this process is storing it right now: wait, then load it)
        saving.join()
    runtime = Runtime()
    loaded = load(key, runtime, callbacks)
    if loaded is None:
        return key, None
    _CALLBACKS.pop(key, None)
    fn, source, limits_blas = loaded
    function = next((op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == entry), None)
    if function is None:  # (cannot be: the key covers the module; a miss all the same)
        last_miss = f"no function @{entry}"
        return key, None
    return key, (fn, function, source, runtime, limits_blas)


MIN_LOWERING_SECONDS = 0.01
"""Executables lowered faster than this are not stored: loading them would save little, and storing costs a few
milliseconds of a background thread (a conformance run of 1,742 small programs took 48% longer storing each)."""


def store(key: str, module, entry: str, ctx, executable, seconds: float = float("inf")):
    """After ``lowering.compile`` lowered ``module`` in ``seconds`` (``ctx`` its lowering context): store
    ``executable`` under ``key`` in the background, unless that took less than :data:`MIN_LOWERING_SECONDS` or the
    executor's passes changed the entry's signature (the loaded executable takes its signature from the caller's
    module). None; in :func:`roundtrip` mode the parts of the executable read back from its stored form, as
    :func:`lookup` gives them (None when it cannot be stored)."""
    from xdsl.dialects import func

    global last_not_stored
    callbacks = _CALLBACKS.pop(key, [])  # (the caller's module's callbacks, numbered as lookup numbers them)
    original = next((op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == entry), None)
    if original is None or original.function_type != executable.entry.function_type:
        last_not_stored = "not cacheable: the executor's passes change the entry's signature"
        return None
    if key == "roundtrip":
        return _read_back(ctx, executable, original)
    if seconds < MIN_LOWERING_SECONDS:
        last_not_stored = f"lowered in {seconds * 1e3:.1f} ms: not worth storing"
        return None
    save_in_background(key, ctx.namespace, ctx.runtime, executable._fn.__name__, executable.source,
                       ctx.limits_blas, callbacks)
    return None


def roundtrip() -> bool:
    """``XLA_DIALECT_EXECUTABLE_CACHE=roundtrip``: every executable ``lowering.compile`` makes is stored and read
    back at once, in memory, and the read-back one returned (nothing is read from or written to disk): the whole
    test suite run this way checks that the stored form computes what the executable does."""
    return os.environ.get("XLA_DIALECT_EXECUTABLE_CACHE", "").strip().lower() == "roundtrip"


def _read_back(ctx, executable, function):
    """The parts of ``executable`` stored and read back (:func:`roundtrip`); None when it cannot be stored."""
    from ..runtime.program_state import Runtime

    global last_not_stored
    try:
        callbacks: list = []
        module_digest(ctx.module, callbacks)
        data = dumps(ctx.namespace, ctx.runtime, executable._fn.__name__, executable.source, ctx.limits_blas,
                     callbacks)
    except NotCacheable as e:
        last_not_stored = f"not cacheable: {e}"
        return None
    runtime = Runtime()
    fn, source, limits_blas = loads(data, runtime, callbacks)
    last_not_stored = None
    return fn, function, source, runtime, limits_blas
