"""Generated numba code kept as module files, so that numba's on-disk cache serves it to later processes.

numba caches a function's machine code beside the file that defines it, keyed on that file alone. Code written at
run time (compiled loops, fused kernels, segments, ufunc wrappers of scalar definitions with constants) is
therefore written to a module file in the cache directory and imported from there; the file name is a digest of
its text, which names the digest of the modules the code calls into (:func:`runtime_digest`), so a changed
helper gives a new file instead of stale machine code.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from types import ModuleType

from .numba_cache import library_digest
from .process_state import cache_directory, import_module_file  # noqa: F401  (cache_directory: its callers' name)

def runtime_digest() -> str:
    """A digest of the modules generated code can call into (:func:`lowering.runtime.numba_cache.library_digest`),
    part of every generated module's text: numba's on-disk cache checks only the cached function's own file, so a
    changed helper must change the file name."""
    return library_digest()


def import_generated(text: str, prefix: str, finish: Callable[[str], str] | None = None) -> ModuleType | None:
    """The module of generated ``text``, written once to ``<cache>/<prefix>_<digest>.py`` (atomically: concurrent
    processes never see half a file) and imported under a name numba's cache finds it by; None when there is no
    cache directory (the caller then runs the text in memory, uncached). ``finish``: applied to ``text`` when the
    file is written (the file is named by ``text``'s digest, so a process that finds it skips ``finish``; this
    package's sources are part of every generated text's digest, so a changed ``finish`` here changes the name)."""
    directory = cache_directory()
    if directory is None:
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = os.path.join(directory, f"{prefix}_{digest}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(finish(text) if finish is not None else text)
        os.replace(tmp, path)
    return import_module_file(f"xla_dialect_{prefix}_{digest}", path)  # (numba's cache finds it by name)


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
