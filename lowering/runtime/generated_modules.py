"""Generated numba code kept as module files, so that numba's on-disk cache serves it to later processes.

numba caches a function's machine code beside the file that defines it, keyed on that file alone. Code written at
run time (compiled loops, fused kernels, segments, ufunc wrappers of scalar definitions with constants) is
therefore written to a module file in the cache directory and imported from there; the file name is a digest of
its text, which names the digest of the modules the code calls into (:func:`runtime_digest`), so a changed
helper gives a new file instead of stale machine code. The sizes in the text are arguments (:func:`hoisted_ints`),
so one program on many shapes is one file and one piece of machine code.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from types import ModuleType

from .cache_size import prune_in_background
from .numba_cache import library_digest
from .process_state import cache_directory, import_module_file  # noqa: F401  (cache_directory: its callers' name)

def runtime_digest() -> str:
    """A digest of the modules generated code can call into (:func:`lowering.runtime.numba_cache.library_digest`),
    part of every generated module's text: numba's on-disk cache checks only the cached function's own file, so a
    changed helper must change the file name."""
    return library_digest()


def import_generated(text: str, prefix: str) -> ModuleType | None:
    """The module of generated ``text``, written once to ``<cache>/<prefix>_<digest>.py`` (atomically: concurrent
    processes never see half a file) and imported under a name numba's cache finds it by; None when there is no
    cache directory (the caller then runs the text in memory, uncached)."""
    directory = cache_directory()
    if directory is None:
        return None
    digest = text_digest(text)
    path = os.path.join(directory, f"{prefix}_{digest}.py")
    if not os.path.exists(path):
        write_atomically(path, text)
        prune_in_background(directory)  # (the cache grew: at most hourly, kept under its size limit)
    return import_module_file(f"xla_dialect_{prefix}_{digest}", path)  # (numba's cache finds it by name)


def text_digest(text: str) -> str:
    """The digest naming a generated module file of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that concurrent processes never read half a file."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


LITERAL_SIZES = 16
"""Sizes up to this stay literal in generated code (:func:`hoisted_ints`): LLVM unrolls and straightens the element
loops of tiny arrays only when it sees their trip counts (measured: jax's odeint on a pendulum, arrays of 2, ran
2.2x slower with every size read at run time)."""


def hoisted_ints(source: str) -> tuple[str, tuple[int, ...]]:
    """``source`` (generated module code) with the integer constants that are sizes -- the argument of each
    ``np.int64(...)`` and of each ``range(...)``, a ``reshape``'s shape, a size stored into an array element, each larger
    than :data:`LITERAL_SIZES` -- read from a parameter ``_ints`` (an int64 array, one element
    per occurrence), and those values. Every function the source defines takes ``_ints`` first (calls between them
    pass it on) and reads the values it uses into locals first (a local is a value to LLVM: no reload next to
    stores).
    Why: the same program on other shapes then has the same text, and so the same module file and numba's cached
    machine code -- a new shape is a load, not a compile (0.5-2 s per loop, segment or group). Numerics do not
    change: the code fixes the order of every operation; LLVM only no longer sees the trip counts. Index arithmetic
    (``i * 24 + j``) keeps its constants: with a stride read at run time LLVM's vectorizer gathered a fused loop's
    rows element by element instead of loading whole vectors (``tests/test_fusion.py``'s whole-vector check)."""
    import ast

    tree = ast.parse(source)
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    values: list[int] = []
    used: list[int] = []  # the slots of the function being rewritten

    def slot(node):
        value = node.value if isinstance(node, ast.Constant) else -node.operand.value
        if not LITERAL_SIZES < abs(value) < 2 ** 63:
            return node
        values.append(value)  # (one slot per occurrence: equal sizes on one shape need not be equal on another)
        used.append(len(values) - 1)
        return ast.copy_location(ast.Name(f"_s{len(values) - 1}", ast.Load()), node)

    class Hoist(ast.NodeTransformer):
        def visit_Assign(self, node):  # (a size stored into an array: d[0] = 24)
            self.generic_visit(node)
            if _int_constant(node.value) and all(isinstance(t, ast.Subscript) for t in node.targets):
                node.value = slot(node.value)
            return node

        def visit_Call(self, node):
            self.generic_visit(node)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "reshape":  # (x.reshape((1, 24)))
                node.args = [ast.Tuple([slot(e) if _int_constant(e) else e for e in a.elts], ast.Load())
                             if isinstance(a, ast.Tuple) else slot(a) if _int_constant(a) else a for a in node.args]
                return node
            sized = (isinstance(func, ast.Attribute) and func.attr == "int64" and isinstance(func.value, ast.Name)
                     and func.value.id == "np") or (isinstance(func, ast.Name) and func.id == "range")
            if sized and not node.keywords:
                node.args = [slot(a) if _int_constant(a) else a for a in node.args]
            elif isinstance(func, ast.Name) and func.id in functions:
                node.args.insert(0, ast.Name("_ints", ast.Load()))
            return node

    hoist = Hoist()
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef):
            used.clear()
            node = tree.body[index] = hoist.visit(node)
            node.args.args.insert(0, ast.arg("_ints"))
            # each function reads its own slots only (every slot in every function was 2,029 of the 3,581 lines of
            # random.gamma's segment, and as much of numba's typing and LLVM's work)
            node.body[:0] = [ast.parse(f"_s{k} = _ints[{k}]").body[0] for k in used]
        else:
            tree.body[index] = hoist.visit(node)
    return ast.unparse(ast.fix_missing_locations(tree)), tuple(values)


def _int_constant(node) -> bool:
    import ast

    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def without_literal_ints(source: str, callees: frozenset[str]) -> str:
    """``source`` with every integer constant passed to one of ``callees`` (directly or inside a tuple: shapes,
    sizes, axes, permutations) written ``np.int64(...)``. Why: numba types a constant as ``Literal[int]`` and
    compiles a called jitted function once per distinct literal signature, so every new shape of a view or
    allocation compiled (and cached) the helper again -- 0.1 s each, 30-40 s of the compiled-loop tests, most of a
    small loop's compile. Typed int64, a helper compiles once per array type; it is inlined where it is called,
    so LLVM still sees the constants. (About 50 ms for a 20 KB module: done when its file is first written.)"""
    import ast

    class Unliteral(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id in callees:
                node.args = [self.wrap(a) for a in node.args]
                for keyword in node.keywords:
                    keyword.value = self.wrap(keyword.value)
            return node

        @staticmethod
        def wrap(node):
            if _int_constant(node):
                return ast.copy_location(ast.Call(ast.Attribute(ast.Name("np", ast.Load()), "int64", ast.Load()),
                                                  [node], []), node)
            if isinstance(node, ast.Tuple):
                node.elts = [Unliteral.wrap(e) for e in node.elts]
            return node

    return ast.unparse(ast.fix_missing_locations(Unliteral().visit(ast.parse(source))))
