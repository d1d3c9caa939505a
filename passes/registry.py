"""The one pass registry: built-in passes, installed plugins and plugin files.

* :func:`register_pass` (a class decorator) adds a ``ModulePass`` under its ``name``.
* Built-in passes live in the modules of :data:`BUILTIN_MODULES`, imported on
  first use.
* Installed plugins declare an entry point in the group ``xla_dialect.passes``
  (a ``ModulePass`` class, an iterable of them, or a module that registers its
  passes when imported); :func:`load_plugin` loads a plain Python file.
* :func:`universe_passes` is what ``xla_dialect.universe`` hands to ``xdsl-opt``.
* :func:`register_pipelines` adds named pipelines (:func:`parse_pipeline` reads a name as its passes);
  ``passes.pipelines`` registers the built-in ones when the package ``passes`` is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping

from xdsl.passes import ModulePass, PassPipeline

from xla_dialect.errors import PassError

ENTRY_POINT_GROUP = "xla_dialect.passes"
"""Entry-point group of installed pass plugins."""

PLUGINS_ENV = "XLA_PASS_PLUGINS"
"""Environment variable naming plugin files (or module names), separated by ``os.pathsep`` (``:``), loaded
by every tool: ``xla-opt``, ``passes.run`` and ``xdsl-opt``, which has no option for it."""

BUILTIN_MODULES = (
    "passes.cleanup",
    "passes.broadcasts",
    "passes.layouts",
    "passes.tiling",
    "passes.pdl",
    "passes.quantized",
    "passes.xla_numerics",
    "passes.fma_contraction",
    "passes.inlining",
    "passes.conditionals",
    "passes.small_loops",
    "passes.in_place_selects",
    "passes.ynnpack_fusion",
)
"""Modules whose import registers the built-in passes."""

_REGISTRY: dict[str, type[ModulePass]] = {}
_ORIGIN: dict[str, str] = {}
_loaded_builtin = False
_loaded_entry_points = False
_plugin_files: dict[str, list[str]] = {}
_PIPELINE_TABLES: list[Mapping[str, str]] = []


def register_pass(cls: type[ModulePass] | None = None, *, replace: bool = False, origin: str | None = None):
    """Register a ``ModulePass`` subclass under ``cls.name`` (usable as a decorator).

    Registering a different class under a taken name raises
    :class:`~xla_dialect.errors.PassError` unless ``replace`` is true.
    """

    def add(c: type[ModulePass]) -> type[ModulePass]:
        if not (inspect.isclass(c) and issubclass(c, ModulePass)):
            raise PassError(f"register_pass: {c!r} is not an xDSL ModulePass subclass")
        name = getattr(c, "name", None)
        if not isinstance(name, str) or not name:
            raise PassError(f"register_pass: {c.__qualname__} has no `name`")
        old = _REGISTRY.get(name)
        if old is not None and old is not c and not replace and _qualname(old) != _qualname(c):
            raise PassError(
                f"register_pass: pass name {name!r} is already taken by {_qualname(old)} "
                f"(from {_ORIGIN.get(name, '?')}); cannot register {_qualname(c)}"
            )
        _REGISTRY[name] = c
        _ORIGIN[name] = origin or c.__module__
        return c

    return add if cls is None else add(cls)


def _qualname(c: type) -> str:
    return f"{c.__module__}.{c.__qualname__}"


def _load_builtin() -> None:
    global _loaded_builtin
    if _loaded_builtin:
        return
    _loaded_builtin = True
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def builtin_passes() -> list[type[ModulePass]]:
    """The built-in pass classes (also published through the ``xla_dialect.passes`` entry point)."""
    _load_builtin()
    return [c for c in _REGISTRY.values() if c.__module__ in BUILTIN_MODULES]


def _register_plugin_object(obj, origin: str) -> list[str]:
    """Register what a plugin entry point or file exposes; return the pass names."""
    if inspect.isclass(obj) and issubclass(obj, ModulePass):
        register_pass(obj, origin=origin)
        return [obj.name]
    if inspect.ismodule(obj):
        return [n for n, o in _REGISTRY.items() if o.__module__ == obj.__name__]
    if isinstance(obj, Iterable):
        names: list[str] = []
        for item in obj:
            names.extend(_register_plugin_object(item, origin))
        return names
    if callable(obj):
        return _register_plugin_object(obj(), origin)
    raise PassError(f"pass plugin {origin}: expected a ModulePass class, an iterable of them or a module, got {obj!r}")


def load_entry_point_plugins() -> list[str]:
    """Load every installed plugin of the ``xla_dialect.passes`` group (once); return their pass names."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return []
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    names: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            obj = ep.load()
        except Exception as e:
            raise PassError(f"pass plugin {origin} failed to load: {type(e).__name__}: {e}") from e
        names.extend(_register_plugin_object(obj, origin))
    return names


def load_plugin(path: str) -> list[str]:
    """Import the Python file ``path`` (or the importable module of that dotted name) and register the
    passes it defines; return their names.

    The file either decorates its passes with :func:`register_pass` or simply
    defines ``ModulePass`` subclasses with a ``name`` (those are registered too).
    A relative path is relative to the current directory; a module name
    (``my_package.my_passes``) works from anywhere. Loading the same file
    again is a no-op.
    """
    real = os.path.realpath(path)
    if real in _plugin_files:
        return list(_plugin_files[real])
    if not os.path.isfile(real):
        if not path.endswith(".py") and all(part.isidentifier() for part in path.split(".")):
            return _load_plugin_module(path)
        raise PassError(f"pass plugin {path}: no such file (relative paths are taken from the current "
                        f"directory, {os.getcwd()}; a module name such as my_package.my_passes also works)")
    _load_builtin()
    module_name = "xla_pass_plugin_" + "".join(c if c.isalnum() else "_" for c in real)
    spec = importlib.util.spec_from_file_location(module_name, real)
    if spec is None or spec.loader is None:
        raise PassError(f"pass plugin {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    before = set(_REGISTRY)
    try:
        spec.loader.exec_module(module)
    except PassError:
        del sys.modules[module_name]
        raise
    except Exception as e:
        del sys.modules[module_name]
        raise PassError(f"pass plugin {path} failed to load: {type(e).__name__}: {e}") from e
    for obj in list(vars(module).values()):
        if (inspect.isclass(obj) and issubclass(obj, ModulePass) and obj.__module__ == module_name
                and isinstance(getattr(obj, "name", None), str) and not inspect.isabstract(obj)):
            register_pass(obj, origin=path)
    names = [n for n in _REGISTRY if n not in before or _REGISTRY[n].__module__ == module_name]
    _plugin_files[real] = names
    return list(names)


def _load_plugin_module(name: str) -> list[str]:
    """``load_plugin`` for an importable module: import it and register its passes."""
    _load_builtin()
    before = set(_REGISTRY)
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        raise PassError(f"pass plugin {name}: neither a file nor an importable module ({e})") from None
    except Exception as e:
        raise PassError(f"pass plugin {name} failed to load: {type(e).__name__}: {e}") from e
    for obj in list(vars(module).values()):
        if (inspect.isclass(obj) and issubclass(obj, ModulePass) and obj.__module__ == module.__name__
                and isinstance(getattr(obj, "name", None), str) and not inspect.isabstract(obj)
                and obj.name not in _REGISTRY):
            register_pass(obj, origin=name)
    return [n for n in _REGISTRY if n not in before or _REGISTRY[n].__module__ == module.__name__]


_loaded_env: set[str] = set()


def load_env_plugins() -> list[str]:
    """Load the plugin files and modules named in ``$XLA_PASS_PLUGINS`` (each once); return their pass names."""
    names: list[str] = []
    for path in filter(None, (p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep))):
        if path in _loaded_env:
            continue
        try:
            names.extend(load_plugin(path))
        except PassError as e:
            raise PassError(f"{PLUGINS_ENV}: {e}") from None
        _loaded_env.add(path)
    return names


def available_passes() -> dict[str, type[ModulePass]]:
    """Every registered pass (built-in, installed plugins, ``$XLA_PASS_PLUGINS``, loaded plugin files):
    name -> class. (The ``hlo-`` names of :func:`pass_aliases` are accepted too, not listed.)"""
    _load_builtin()
    load_entry_point_plugins()
    load_env_plugins()
    return dict(sorted(_REGISTRY.items()))


def get_pass(name: str) -> type[ModulePass]:
    """The pass class registered as ``name`` (or an ``hlo-`` alias, see :func:`pass_aliases`)."""
    passes = available_passes()
    if name not in passes:
        aliases = pass_aliases(passes)
        if name in aliases:
            return aliases[name]
        raise PassError(f"unknown pass {name!r}; available: {', '.join(passes)}")
    return passes[name]


def xdsl_opt_name(name: str) -> str:
    """The name pass ``name`` has in ``xdsl-opt``: ``hlo-<name>`` when xDSL has a pass of that name itself
    (``cse``, ``dce``, ``apply-pdl``), else ``name``.

    xDSL's ``Universe.get_multiverse`` raises on a pass name defined twice (``ValueError: Duplicate definition
    of cse``), which would break every ``xdsl-opt`` run, and xDSL's own ``cse``/``dce`` know nothing of hlo
    ops (they rely on effect traits hlo ops do not carry). So those passes are ``hlo-cse``, ``hlo-dce``,
    ``hlo-apply-pdl`` there, and both names work in ``xla-opt`` and :func:`passes.run`
    (:func:`pass_aliases`): a pipeline written with the ``hlo-`` names runs the same in both tools.
    """
    return f"hlo-{name}" if name in _xdsl_pass_names() else name


_ALIASES: dict[tuple[type, str], type[ModulePass]] = {}


def pass_aliases(passes: dict[str, type[ModulePass]] | None = None) -> dict[str, type[ModulePass]]:
    """``hlo-<name>`` -> pass class for the passes whose name xDSL uses itself (see :func:`xdsl_opt_name`)."""
    if passes is None:
        passes = available_passes()
    out: dict[str, type[ModulePass]] = {}
    for name, cls in passes.items():
        alias = xdsl_opt_name(name)
        if alias != name and alias not in passes:
            key = (cls, alias)
            if key not in _ALIASES:
                _ALIASES[key] = aliased(cls, alias)
            out[alias] = _ALIASES[key]
    return out


REQUIRED = "<required>"
OPTIONAL = "<optional>"
"""How :func:`pass_options` shows an option without a default: one the pass cannot run without (a
dataclass field without default, or named in the pass's ``required_options``), or one it may go without."""


def pass_options(cls: type[ModulePass]) -> list[tuple[str, str]]:
    """The options of pass ``cls`` as pipelines spell them: ``(dashed name, default)``, the default shown
    as text, :data:`REQUIRED` or :data:`OPTIONAL` where there is none."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return []
    required = {n.replace("_", "-") for n in getattr(cls, "required_options", ())}
    options = []
    for f in dataclasses.fields(cls):
        if f.name == "name" or not f.init:
            continue
        dashed = f.name.replace("_", "-")
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if dashed in required or no_default:
            shown = REQUIRED
        elif f.default is None:
            shown = OPTIONAL
        else:
            shown = str(f.default if f.default is not dataclasses.MISSING else f.default_factory())
        options.append((dashed, shown))
    return options


def pass_signature(name: str, cls: type[ModulePass]) -> str:
    """``assign-layouts{target=cpu arg-layouts=<optional> result-layouts=<optional>}``."""
    options = pass_options(cls)
    return name + ("{" + " ".join(f"{o}={d}" for o, d in options) + "}" if options else "")


def _check_options(spec: str, passes: dict[str, type[ModulePass]]) -> None:
    """A PassError naming the pass and the option, with the pass's options as pipelines spell them (dashed),
    for an option the pass does not have (xDSL's own message lists the Python field names)."""
    import difflib

    from xdsl.utils.arg_spec import parse_pipeline as parse_specs
    from xdsl.utils.exceptions import ArgSpecParseError

    try:
        specs = list(parse_specs(spec))
    except (Exception, ArgSpecParseError):  # (a BaseException)
        return  # a syntax error: xDSL's parser reports it with its column
    for s in specs:
        cls = passes.get(s.name)
        if cls is None:
            continue
        known = [o for o, _ in pass_options(cls)]
        for given in s.parameters:
            if given.replace("_", "-") in known:
                continue
            close = difflib.get_close_matches(given.replace("_", "-"), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            takes = f"its options: {pass_signature(s.name, cls)}" if known else "it takes no options"
            raise PassError(f"pass {s.name}: unknown option {given!r}{hint}; {takes}")


def register_pipelines(table: Mapping[str, str]) -> None:
    """Let :func:`parse_pipeline` read the names of ``table`` (pipeline name -> pipeline text) as their
    passes. The table is kept, not copied: names added to it later count too."""
    if not any(t is table for t in _PIPELINE_TABLES):
        _PIPELINE_TABLES.append(table)


def _named_pipeline(spec: str) -> str:
    """The text of the registered pipeline named ``spec`` (surrounding spaces ignored), else ``spec``."""
    for table in _PIPELINE_TABLES:
        if spec.strip() in table:
            return table[spec.strip()]
    return spec


def parse_pipeline(spec: str) -> PassPipeline:
    """Parse pipeline text such as ``canonicalize-broadcasts,assign-layouts{target=tpu},cse``.

    Uses xDSL's own pipeline syntax and parser (options in braces, strings in
    double quotes). The name of a registered pipeline (:func:`register_pipelines`:
    those of :data:`passes.pipelines.PIPELINES`, ``executor``, ``cleanup``, ...)
    stands for its passes. Unknown passes or bad options raise PassError.
    """
    from xdsl.utils.exceptions import ArgSpecParseError

    spec = _named_pipeline(spec)
    passes = available_passes()
    known = {**passes, **pass_aliases(passes)}
    try:
        _check_options(spec, known)
        return PassPipeline.parse_spec({n: (lambda c=c: c) for n, c in known.items()}, spec)
    except PassError:
        raise
    except (Exception, ArgSpecParseError) as e:  # (xDSL's ArgSpecParseError is a BaseException)
        import re

        where = re.search(r"pass-pipeline:\d+:(\d+)", str(e))
        at = f" at column {where.group(1)}" if where else ""
        raise PassError(f"bad pass pipeline {spec!r}{at}: {_one_line(e).strip()}. "
                        f"Available passes: {', '.join(passes)}") from None


def _one_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if "\n" in text and "Unrecognized" not in text else text.replace("\n", " ")


_XDSL_NAMES: set[str] | None = None


def _xdsl_pass_names() -> set[str]:
    """The names of xDSL's own passes (computed once)."""
    global _XDSL_NAMES
    if _XDSL_NAMES is None:
        try:
            from xdsl.transforms import get_all_passes

            _XDSL_NAMES = set(get_all_passes())
        except Exception:  # pragma: no cover - xDSL layout changed
            _XDSL_NAMES = set()
    return _XDSL_NAMES


def aliased(cls: type[ModulePass], name: str) -> type[ModulePass]:
    """A subclass of ``cls`` answering to ``name`` (xDSL checks spec name == class name)."""
    from dataclasses import dataclass

    sub = type(cls.__name__ + "Alias", (cls,), {"name": name, "__module__": cls.__module__,
                                                   "__doc__": f"``{name}``: alias of ``{cls.name}``. {cls.__doc__ or ''}"})
    return dataclass(frozen=True)(sub)


def universe_passes(warn: Callable[[str], None] | None = None) -> dict[str, Callable[[], type[ModulePass]]]:
    """Passes for the ``xdsl.universe`` entry point (``xdsl-opt -p canonicalize-broadcasts``): the built-in
    ones, installed plugins (entry-point group ``xla_dialect.passes``) and the plugin files of
    ``$XLA_PASS_PLUGINS``, each under :func:`xdsl_opt_name` (``cse`` is ``hlo-cse`` there, since xDSL
    refuses duplicate names across universes).

    With ``warn``, a plugin that fails to load is reported through it and left out (``xdsl-opt`` then
    still runs the other passes); without, its :class:`PassError` propagates.
    """
    _load_builtin()
    for load in (load_entry_point_plugins, load_env_plugins):
        try:
            load()
        except PassError as e:
            if warn is None:
                raise
            warn(str(e))
    out: dict[str, Callable[[], type[ModulePass]]] = {}
    for name, cls in sorted(_REGISTRY.items()):
        exported = xdsl_opt_name(name)
        target = cls if exported == name else aliased(cls, exported)
        out[exported] = lambda t=target: t
    return out
