"""The layers import one way (ir <- runtime <- kernels <- passes <- executor <- interop), interop's packages one way among
themselves (formats below tools: INTEROP_LAYERS), and modules import without cycles.

The import graph is read from the source (every ``import``, module-level or inside functions, counts
for the layering: a function-level import only hides a dependency). Module-level imports must form
no cycle between files.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from helpers import library_sources

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"xla_dialect": 0, "runtime": 1, "kernels": 2, "passes": 3, "executor": 4, "interop": 5}
"""Layer -> rank: a module imports only from its own layer or lower ones."""

LOWERING_PACKAGES = {"lowering.runtime": "runtime", "lowering.kernels": "kernels", "lowering.executor": "executor"}
"""lowering's packages and their layers: the run-time support, the kernels (below the passes, which evaluate ops
with them) and the executor (above the passes, whose pipeline it runs). ``lowering`` itself, the face that
exports ``lowering.compile``, stands with the executor."""


def layer_of(module: str) -> str | None:
    """The layer of a module of the repository (None for other modules)."""
    package = module.split(".")[0]
    if package == "lowering":
        if module == "lowering":
            return "executor"
        return LOWERING_PACKAGES[".".join(module.split(".")[:2])]
    return package if package in LAYERS else None


def test_every_lowering_module_is_in_a_layer_package():
    """lowering/ holds its three packages and its face, nothing else: a new module goes into the package of its
    layer (layer_of fails for any other)."""
    strays = [name for name, _ in _modules() if name.startswith("lowering.")
              and ".".join(name.split(".")[:2]) not in LOWERING_PACKAGES]
    assert not strays, f"modules of lowering outside runtime/, kernels/ and executor/: {strays}"
    assert {p.name for p in (REPO / "lowering").iterdir() if p.suffix == ".py"} == {"__init__.py"}


def _modules():
    if not MODULE_NAMES:
        for path in library_sources(PACKAGES):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            MODULE_NAMES.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for path in library_sources(PACKAGES):
        rel = path.relative_to(REPO)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


MODULE_NAMES = set()
PACKAGES = ("xla_dialect", "passes", "lowering", "interop")


def _imports(name: str, path: Path):
    """(imported module, line, module-level?) for every import of the file."""
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body}
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` imports mod.
            subs = [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in MODULE_NAMES]
            targets = subs if len(subs) == len(node.names) else [prefix] + subs
        else:
            continue
        for t in targets:
            yield t, node.lineno, id(node) in top_level


def test_layers_import_one_way():
    upward = []
    for name, path in _modules():
        mine = layer_of(name)
        for target, line, _ in _imports(name, path):
            theirs = layer_of(target)
            if theirs is not None and LAYERS[theirs] > LAYERS[mine]:
                upward.append(f"{path.relative_to(REPO)}:{line} ({mine}) imports {target} ({theirs})")
    assert not upward, "imports from a higher layer:\n" + "\n".join(sorted(set(upward)))


def _cycles(graph: dict[str, set[str]], nodes) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return cycles


def _import_graph(module_level_only: bool) -> dict[str, set[str]]:
    """Module -> the repository's modules it imports (a name inside a module counts as the module)."""
    known = {name for name, _ in _modules()}
    graph = defaultdict(set)
    for name, path in _modules():
        for target, _, top in _imports(name, path):
            if module_level_only and not top:
                continue
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def test_no_import_cycle_between_files():
    graph = _import_graph(module_level_only=True)
    cycles = _cycles(graph, {name for name, _ in _modules()})

    # A package's __init__ importing its own submodules (which import the package for siblings) is how
    # Python packages are built; a cycle is a problem only between modules that are not such a pair.
    def family(m, c):  # another member is m's package or one of m's submodules
        return any(o != m and (o.startswith(m + ".") or m.startswith(o + ".")) for o in c)

    real = [c for c in cycles if not all(family(m, c) for m in c)]
    assert not real, f"module-level import cycles: {real}"


def test_no_import_cycle_counting_imports_inside_functions():
    """A function-level import only defers a dependency: counting them too, no modules of the four packages
    import each other in a circle (a package's face importing its own submodules aside, as above)."""
    graph = _import_graph(module_level_only=False)
    cycles = _cycles(graph, {name for name, _ in _modules()})
    real = [c for c in cycles if not all(any(o != m and (o.startswith(m + ".") or m.startswith(o + ".")) for o in c)
                                         for m in c)]
    assert not real, f"import cycles (function-level imports counted): {real}"


INTEROP_LAYERS = (
    ("interop.schema", "interop.comparison", "interop.processes"),
    ("interop.stablehlo",),
    ("interop.hlo",),
    ("interop.jax",),
    ("interop.programs",),
    ("interop.debugging", "interop.show"),
    ("interop.tools",),
)
"""interop's packages from the bottom up: what the formats share (the StableHLO schema table, how two runs
compare, child processes); StableHLO; HLO text (read through StableHLO's converters, run on XLA through
it); JAX (its programs are StableHLO, its sharded programs HLO text); the loader of program files in any
format; the numerics-debugging and picture libraries; the tools and commands. ``interop`` itself, the
library's API, stands above them all."""


def _interop_layer(module: str) -> int:
    if module == "interop":
        return len(INTEROP_LAYERS)
    for rank, packages in enumerate(INTEROP_LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return rank
    raise AssertionError(f"{module} is in none of INTEROP_LAYERS: place it in a package of one")


def test_interop_packages_import_one_way():
    """Counting imports inside functions too: no interop package imports one above it (a format never
    imports a tool, StableHLO never HLO text or JAX), and interop's modules import without a cycle."""
    graph = _import_graph(module_level_only=False)
    names = {name for name, _ in _modules() if name.split(".")[0] == "interop"}
    upward = sorted(f"{a} imports {b}" for a in names for b in graph[a]
                    if b in names and _interop_layer(b) > _interop_layer(a))
    assert not upward, "interop imports from a higher package:\n" + "\n".join(upward)
    interop_graph = defaultdict(set, {a: {b for b in graph[a] if b in names} for a in names})
    assert not _cycles(interop_graph, names), "import cycles in interop"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_alone(package):
    """A fresh interpreter imports each layer by itself (no hidden dependency on import order)."""
    run = subprocess.run([sys.executable, "-c", f"import {package}"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr


def test_every_op_class_is_a_class_statement():
    """grep finds every op: each is written ``class XxxOp(...)`` in its family's file."""
    import inspect
    import re

    from xla_dialect.ops import ALL_OPS

    for op in ALL_OPS:
        source = inspect.getsource(sys.modules[op.__module__])
        assert re.search(rf"^class {op.__name__}\(", source, re.M), op.__name__
        assert getattr(sys.modules[op.__module__], op.__name__) is op


def test_every_builder_method_is_a_def_statement():
    import inspect

    from xla_dialect import XlaBuilder

    for name, fn in inspect.getmembers(XlaBuilder, inspect.isfunction):
        if name.startswith("_"):
            continue
        owner = next(c for c in XlaBuilder.__mro__ if name in vars(c))
        source = inspect.getsource(sys.modules[owner.__module__])
        assert f"def {name}(" in source or f"    {name} = " in source, f"XlaBuilder.{name}"


def test_ops_declare_xdsl_effect_traits_consistent_with_the_purity_table():
    """Pure ops carry xDSL's Pure trait, region ops RecursiveMemoryEffect; ops with effects carry neither,
    so xDSL's own analyses (is_side_effect_free, its dce) agree with passes.purity."""
    from xdsl.traits import Pure, RecursiveMemoryEffect

    from passes.purity import IMPURE_OPS
    from xla_dialect.ops import ALL_OPS

    for op in ALL_OPS:
        if op in IMPURE_OPS:
            assert not op.has_trait(Pure) and not op.has_trait(RecursiveMemoryEffect), op.name
        elif op.get_irdl_definition().regions and op.has_trait(Pure):
            raise AssertionError(f"{op.name} has regions: its effects are those of its body")
    assert sum(op.has_trait(Pure) for op in ALL_OPS) >= 80


def test_xdsl_dead_code_elimination_uses_the_traits():
    import numpy as np
    from xdsl.context import Context
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    from xla_dialect import XlaBuilder

    b = XlaBuilder("dce")
    x = b.parameter(0, "f32[4]")
    b.sin(x)  # unused and pure: removed
    b.outfeed(x)  # an effect: kept
    b.reduce(x, b.constant(np.float32(0)), lambda p, q: p + q, dimensions=[0])  # unused, pure body: removed
    module = b.build(b.add(x, x))
    DeadCodeElimination().apply(Context(), module)
    names = [op.name for op in module.walk()]
    assert "hlo.sine" not in names and "hlo.reduce" not in names
    assert "hlo.outfeed" in names and "hlo.add" in names


def test_kernels_import_without_the_executor_or_passes():
    """fold-constants may use the kernels: importing them loads neither the executor nor a pass."""
    code = ("import sys, lowering.kernels, lowering.kernels.context; "
            "bad = [m for m in sys.modules if m == 'lowering.executor.executable' or m.split('.')[0] in ('passes', 'interop')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr


def test_passes_import_without_the_executor():
    code = ("import sys, passes; passes.available_passes(); "
            "sys.exit(1 if 'lowering.executor.executable' in sys.modules else 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr


def test_builder_errors_name_the_method_called():
    """Every public builder method is marked (no stack-frame walking); an error names the method the user
    called, also when it fails inside another public method it uses."""
    import inspect

    from xla_dialect import XlaBuilder
    from xla_dialect.errors import BuilderError

    unmarked = [n for n, f in inspect.getmembers(XlaBuilder, inspect.isfunction)
                if not n.startswith("_") and not hasattr(f, "__wrapped__")]
    assert not unmarked, f"public XlaBuilder methods without @builder_method: {unmarked}"
    b = XlaBuilder("names")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"^XlaBuilder\.add: "):
        b.add(x, b.parameter(1, "f32[4]"))
    with pytest.raises(BuilderError, match=r"^XlaBuilder\.dot: "):
        b.dot(x, x)
    assert b._method is None  # reset after the error
    with pytest.raises(BuilderError, match=r"^XlaBuilder\.mul: "):
        x * b.parameter(2, "f32[5]")


@pytest.mark.slow
def test_every_module_imports_alone():
    """Each module of the four packages imports in a fresh interpreter of its own (no hidden dependency on
    what another module happened to import first). Slow: one interpreter per module."""
    import concurrent.futures

    names = [name for name, _ in _modules()]

    def attempt(name):
        run = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=REPO)
        return name, run.returncode, run.stderr.strip().splitlines()[-1:] if run.returncode else []

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        failures = [(n, err) for n, code, err in pool.map(attempt, names) if code]
    assert not failures, f"modules that do not import alone: {failures}"


def test_private_xdsl_use_is_one_checked_helper():
    """xDSL's private parser call is used in one module only (xla_dialect.xdsl_compat, with xDSL's other
    internals: tests/test_xdsl_compat.py), which names the tested xDSL range; that range is pyproject.toml's
    pin."""
    import re

    from xla_dialect import xdsl_compat

    users = sorted(str(p.relative_to(REPO)) for p in library_sources(PACKAGES)
                   if "_resume_from" in p.read_text() or "xdsl.utils.worklist" in p.read_text())
    assert users == ["xla_dialect/xdsl_compat.py"], users
    pin = re.search(r'"xdsl([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert pin == xdsl_compat.TESTED_XDSL


def _compiled_writers():
    from lowering.executor import compiled_loops, compiled_segments, fusion

    return compiled_loops._LoopWriter, compiled_loops.ElementLoopWriter, compiled_segments._SegmentWriter


def test_compiled_forms_are_registered_by_op_class_once():
    """Each op class the compiled paths accept (loops, fused groups, segments) has one compiled form per writer
    class, found by the class (``@compiles(ExpOp)``-style marks collected in ``COMPILED_FORMS``); a class
    marked twice in one writer, or a marked method redefined without the mark, is refused."""
    from xdsl.irdl import IRDLOperation

    from lowering.executor.compiled_loops import _LoopWriter, compiled_forms, compiles
    from xla_dialect.internal import OPS as INTERNAL_OPS
    from xla_dialect.ops import ALL_OPS
    from xla_dialect.ops.constants import ConstantOp, IotaOp

    known = {*ALL_OPS, *INTERNAL_OPS}
    for writer in _compiled_writers():
        assert writer.COMPILED_FORMS == compiled_forms(writer), writer.__name__
        assert writer.COMPILED_FORMS, writer.__name__
        for klass in writer.__mro__:
            marks = Counter(c for member in vars(klass).values() for c in getattr(member, "compiled_forms", ()))
            assert all(n == 1 for n in marks.values()), (klass.__name__, marks)
        for op_class, method in writer.COMPILED_FORMS.items():
            assert isinstance(op_class, type) and issubclass(op_class, IRDLOperation) and op_class in known, op_class
            assert op_class in method.compiled_forms and getattr(writer, method.__name__) is method, method
    with pytest.raises(TypeError, match="two compiled forms"):
        type("Twice", (_LoopWriter,), {"a": compiles(IotaOp)(lambda *a: None),
                                       "b": compiles(IotaOp)(lambda *a: None)})
    with pytest.raises(TypeError, match="without @compiles"):
        type("Unmarked", (_LoopWriter,), {_LoopWriter.COMPILED_FORMS[ConstantOp].__name__: lambda *a: None})


def test_no_dispatch_on_a_spelling_of_the_op_name():
    """Ops are found by their class: no ``getattr(self, "op_" + name)`` dispatch anywhere, and the compiled
    paths (loops, fused groups, segments) and the small-loop and purity passes never compare ``op.name``
    with a mnemonic string."""
    dispatch = re.compile(r"getattr\([^)]*[\"']op_[\"']\s*\+")
    by_name = re.compile(r"\.name\s*(?:==|!=|not\s+in|in)\s*[(\[{]?\s*[\"']hlo(?:_internal)?\.")
    found = []
    for name, path in _modules():
        text = path.read_text()
        if dispatch.search(text):
            found.append(f"{path.relative_to(REPO)}: getattr(..., 'op_' + ...)")
        if name in ("lowering.executor.compiled_loops", "lowering.executor.fusion", "lowering.executor.compiled_segments", "lowering.executor.mpi",
                    "lowering.kernels.control_flow", "passes.small_loops", "passes.purity"):
            found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in by_name.finditer(text)]
    assert not found, "\n".join(found)


FOUND_BY_CLASS = ("lowering.executor.executable", "lowering.executor.compiled_loops", "lowering.executor.fusion", "lowering.executor.compiled_segments",
                  "lowering.executor.mpi", "lowering.kernels.control_flow", "lowering.kernels.indexing",
                  "lowering.kernels.small_dot", "lowering.kernels.sorting", "lowering.kernels.reduction",
                  "passes.small_loops", "passes.purity",
                  "passes.xla_numerics", "passes.cleanup", "passes.quantized", "passes.ynnpack_fusion")
"""Modules that find the ops they treat by class only (issue 27)."""


def _reads_a_name(node: ast.AST) -> bool:
    """``x.name`` or ``getattr(x, "name", ...)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "name"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "name")


def _spellings_of_op_names(tree: ast.Module, op_names: set[str], lookups: bool = True) -> list[tuple[int, str]]:
    """(line, code) of each place ``tree`` finds an op by a spelling of its name: a string naming a registered
    op (docstrings aside: a set of them, a dict keyed by them, a comparison with one), and with ``lookups`` a
    name looked up in a table (``x.name in TABLE``, ``TABLE[x.name]``, ``TABLE.get(x.name)``)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in op_names
                and id(node) not in docstrings):
            found.append((node.lineno, repr(node.value)))
        elif not lookups:
            continue
        elif (isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)
              and any(_reads_a_name(x) for x in [node.left, *node.comparators])):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Subscript) and _reads_a_name(node.slice):
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _reads_a_name(node.args[0])):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_lowering_finds_ops_by_class_not_by_name():
    """The executor, the compiled paths, the indexing and small-product kernels and the small-loop and purity
    passes test and look ops up by class (``isinstance(op, ReduceOp)``, tables keyed by ``AddOp``), never by a
    spelling of the name (``op.name == "hlo.reduce"``, ``{"hlo.add": np.add}[op.name]``), so that grepping an op's
    class finds every place that treats it. (An unregistered op, e.g. a kept ``sdy.manual_computation``, has
    only its name.) The check itself: it finds each spelling it is meant to."""
    from xla_dialect.internal import OPS as INTERNAL_OPS
    from xla_dialect.ops import ALL_OPS

    op_names = {op.name for op in (*ALL_OPS, *INTERNAL_OPS)}
    bad = ast.parse('TABLE = {"hlo.add": 1}\n'
                    'def f(op, v):\n'
                    '    """Not "hlo.add" itself."""\n'
                    '    return op.name == "hlo.reduce", v.op.name in TABLE, TABLE[op.name], '
                    'getattr(op, "name", None) in ("x",), op.name == "sdy.manual_computation"\n'
                    '    return TABLE.get(op.name)\n')
    assert sorted(line for line, _ in _spellings_of_op_names(bad, op_names)) == [1, 4, 4, 4, 4, 5]
    assert sorted(line for line, _ in _spellings_of_op_names(bad, op_names, lookups=False)) == [1, 4]
    found = [f"{path.relative_to(REPO)}:{line}: {code}" for name, path in _modules() if name in FOUND_BY_CLASS
             for line, code in _spellings_of_op_names(ast.parse(path.read_text()), op_names)]
    assert not found, "\n".join(found)
    assert len({name for name, _ in _modules()} & set(FOUND_BY_CLASS)) == len(FOUND_BY_CLASS)


NAMES_OF_OTHER_THINGS = {
    "interop.comparison": "element type names (real.name in defaults)",
    "interop.hlo.importer": "names of HLO text instructions and computations (scope.values[ins.name])",
    "interop.hlo.syntax": "names of HLO text instructions and computations (instr.name in names)",
    "interop.jax.sharded": "names of Python parameters (p.name in self.names)",
    "interop.stablehlo.importer": "names of MLIR attributes (attrs[named.name])",
    "interop.stablehlo.dispatch": "names of the MLIR ops read (ATTRIBUTE_RENAMES.get(op.name): stablehlo.X)",
    "interop.tools.conformance.extraction": "names of the MLIR ops read (op.name in ('interpreter.probe', ...))",
}
"""interop modules whose ``x.name`` look-ups are names of something else than an hlo op: in them only the
strings naming an hlo op are looked for."""

NAME_TO_CLASS = {"interop.stablehlo.importer", "interop.stablehlo.dispatch"}
"""The one place a name read from a program finds its op class (``OPS_BY_NAME``): the StableHLO importer's
``ops_by_name``, read by :func:`interop.stablehlo.dispatch.hlo_op_class` (``stablehlo.X`` -> ``hlo.X``, and the
op an exporter marker names)."""


def _name_to_class_maps(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, code) of each use of the op-name -> class map (``OPS_BY_NAME``, an importer's ``ops_by_name``)."""
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id == "OPS_BY_NAME"
            or isinstance(node, ast.Attribute) and node.attr in ("OPS_BY_NAME", "ops_by_name")]


def test_interop_finds_ops_by_class_not_by_name():
    """The StableHLO exporter's rules (``EXPORTERS``, keyed by ``ReturnOp``), the StableHLO converters (which
    build ``ConstantOp``, not ``ops_by_name["hlo.constant"]``), the HLO text rules (``WRITERS``, keyed by class),
    the debugging tools and the op table find ops by class: no module of ``interop`` spells an hlo op's name,
    none but those of :data:`NAMES_OF_OTHER_THINGS` looks a name up in a table, and an op's class is found from
    its name (``OPS_BY_NAME``) at one place only, :data:`NAME_TO_CLASS`, in ``lowering``, ``passes`` and
    ``interop`` alike. (Text written or read names ops: ``"stablehlo." + op.name[4:]``, ``CopyOp.name``.)"""
    from xla_dialect.internal import OPS as INTERNAL_OPS
    from xla_dialect.ops import ALL_OPS

    op_names = {op.name for op in (*ALL_OPS, *INTERNAL_OPS)}
    sample = ast.parse('def f(imp, op):\n    return imp.ops_by_name["hlo.x"], OPS_BY_NAME.get(op)\n')
    assert [line for line, _ in _name_to_class_maps(sample)] == [2, 2]
    modules = list(_modules())
    found = []
    for name, path in modules:
        tree = ast.parse(path.read_text())
        if name.split(".")[0] == "interop":
            lookups = name not in NAMES_OF_OTHER_THINGS
            found += [f"{path.relative_to(REPO)}:{line}: {code}"
                      for line, code in _spellings_of_op_names(tree, op_names, lookups=lookups)]
        if name.split(".")[0] in ("lowering", "passes", "interop") and name not in NAME_TO_CLASS:
            found += [f"{path.relative_to(REPO)}:{line}: {code} (name -> class)"
                      for line, code in _name_to_class_maps(tree)]
    assert not found, "\n".join(found)
    assert set(NAMES_OF_OTHER_THINGS) | NAME_TO_CLASS <= {name for name, _ in modules}


def _lookups_by_mnemonic(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, code) of each place ``tree`` looks an op up by its mnemonic: a table read or a comparison with
    ``op.SPEC.mnemonic`` (``TABLE[op.SPEC.mnemonic]``, ``op.SPEC.mnemonic == "complex"``) or a class found from
    one (``BINARY_OP_CLASSES["add"]``, or through any use of the mnemonic -> class maps of
    :mod:`xla_dialect.ops.elementwise` but the list of their classes, ``UNARY_OP_CLASSES.values()``)."""
    maps = ("UNARY_OP_CLASSES", "BINARY_OP_CLASSES")
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in maps or isinstance(node, ast.Name) and node.id in maps) \
                and not (isinstance(parents.get(id(node)), ast.Attribute) and parents[id(node)].attr == "values"):
            found.append((node.lineno, ast.unparse(parents.get(id(node), node))))
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Attribute) and node.slice.attr == "mnemonic":
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare) and any(isinstance(x, ast.Attribute) and x.attr == "mnemonic"
                                                   for x in [node.left, *node.comparators]):
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and ast.unparse(node.value).endswith("_OP_CLASSES")):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_kernels_and_passes_look_ops_up_by_class_not_mnemonic():
    """The kernel tables (``UNARY_KERNELS``: ``ExpOp`` -> element kind -> function), the passes' op sets and the
    ops they build are keyed by and written as op classes, not found through a mnemonic; the op-class maps of
    :mod:`xla_dialect.ops.elementwise` (``UNARY_OP_CLASSES``) stay for readers of mnemonics (HLO text, tests)."""
    sample = ast.parse('def f(op):\n'
                       '    return TABLE[op.SPEC.mnemonic], op.SPEC.mnemonic == "complex", ew.BINARY_OP_CLASSES["or"]\n'
                       '_B = ew.UNARY_OP_CLASSES\n'
                       'ALL = (*ew.UNARY_OP_CLASSES.values(),)\n')
    assert sorted(line for line, _ in _lookups_by_mnemonic(sample)) == [2, 2, 2, 2, 3]  # (not .values())
    found = [f"{path.relative_to(REPO)}:{line}: {code}" for name, path in _modules()
             if name.split(".")[0] in ("lowering", "passes")
             for line, code in _lookups_by_mnemonic(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists(package):
    """``from <package> import *`` works: each name of the package's ``__all__`` is there (``passes`` once listed
    ``check_semantics``, which lives in ``interop.debugging``)."""
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"
