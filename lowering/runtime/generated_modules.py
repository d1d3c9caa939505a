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
import re
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


def import_generated(text: str, prefix: str, directory: str | None = None) -> ModuleType | None:
    """The module of generated ``text``, written once to ``<cache>/<prefix>_<digest>.py`` (atomically: concurrent
    processes never see half a file) and imported under a name numba's cache finds it by; None when there is no
    cache directory (the caller then runs the text in memory, uncached). ``directory``: another directory than
    the generated-code cache (:func:`library_module_directory`), not pruned by its size limit."""
    pruned = directory is None
    directory = cache_directory() if pruned else directory
    if directory is None:
        return None
    digest = text_digest(text)
    path = os.path.join(directory, f"{prefix}_{digest}.py")
    if not os.path.exists(path):
        write_atomically(path, text)
        if pruned:
            prune_in_background(directory)  # (the cache grew: at most hourly, kept under its size limit)
    return import_module_file(f"xla_dialect_{prefix}_{digest}", path)  # (numba's cache finds it by name)


def library_module_directory(name: str) -> str | None:
    """A directory ``name`` for generated modules that belong to the library rather than to a program (the
    interpreter's ufunc loops, :mod:`lowering.kernels.ufunc_loops`: one per scalar definition and operand types,
    whatever program uses them), kept where numba keeps the library's own machine code, so that they are compiled
    once per installation, not once per generated-code cache: ``$NUMBA_CACHE_DIR/xla_dialect/<name>`` when numba
    is told where to cache, else ``lowering/__pycache__/<name>`` when writable, else the generated-code cache
    (:func:`cache_directory`); None when none can be written."""
    from numba.core import config

    if config.CACHE_DIR:
        candidates = [os.path.join(config.CACHE_DIR, "xla_dialect", name)]
    else:
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (lowering/)
        candidates = [os.path.join(package, "__pycache__", name)]
    for path in candidates:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    return cache_directory()


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


def hoisted_ints(source: str,
                 int64_callees: frozenset[str] = frozenset()) -> tuple[str, tuple[int, ...]]:
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
    rows element by element instead of loading whole vectors (``tests/test_fusion.py``'s whole-vector check).

    Every integer constant passed to one of ``int64_callees`` (directly or inside a tuple: shapes, sizes, axes,
    permutations) is also written ``np.int64(...)`` (and so is a size as above). Why: numba types a constant as
    ``Literal[int]`` and compiles a called jitted function once per distinct literal signature, so every new shape
    of a view or allocation compiled (and cached) the helper again -- 0.1 s each, 30-40 s of the compiled-loop
    tests, most of a small loop's compile. Typed int64, a helper compiles once per array type; it is inlined where
    it is called, so LLVM still sees the constants.

    The source is parsed once and edited as text where the syntax tree says (rewriting and printing the whole tree,
    as this did first, cost 1.9 of random.gamma's 3.3 s first call as a new program: 0.2 s now)."""
    import ast

    data = source.encode()
    tree = ast.parse(data)
    line_starts = [0, *(match.end() for match in re.finditer(b"\n", data))]

    def start(node) -> int:
        return line_starts[node.lineno - 1] + node.col_offset  # (col_offset counts UTF-8 bytes, as data does)

    def end(node) -> int:
        return line_starts[node.end_lineno - 1] + node.end_col_offset

    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    sized: set[ast.AST] = set()  # constants that are sizes: a slot when large
    typed: set[ast.AST] = set()  # constants passed to an int64 callee: written np.int64(...)
    inserts: list[int] = []  # offsets of the "(" of calls to the module's functions: _ints goes first

    def int64_argument(node) -> None:
        if _int_constant(node):
            typed.add(node)
        elif isinstance(node, ast.Tuple):
            for element in node.elts:
                int64_argument(element)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):  # (a size stored into an array: d[0] = 24)
            if _int_constant(node.value) and all(isinstance(t, ast.Subscript) for t in node.targets):
                sized.add(node.value)
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in int64_callees:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                int64_argument(argument)
        if isinstance(func, ast.Attribute) and func.attr == "reshape":  # (x.reshape((1, 24)))
            for argument in node.args:
                for element in argument.elts if isinstance(argument, ast.Tuple) else [argument]:
                    if _int_constant(element):
                        sized.add(element)
        elif ((isinstance(func, ast.Attribute) and func.attr == "int64" and isinstance(func.value, ast.Name)
               and func.value.id == "np") or (isinstance(func, ast.Name) and func.id == "range")):
            if not node.keywords:
                sized.update(argument for argument in node.args if _int_constant(argument))
        elif isinstance(func, ast.Name) and func.id in functions:
            inserts.append(data.index(b"(", end(func)) + 1)

    spans = sorted((start(node), end(node)) for node in functions.values())

    def in_function(offset: int) -> bool:
        return any(first <= offset < last for first, last in spans)

    values: list[int] = []
    slot_offsets: list[int] = []  # where each slot is read
    edits: list[tuple[int, int, int, str]] = []  # (start, order at one offset, end, replacement)
    for node in sorted(sized | typed, key=start):
        first, last = start(node), end(node)
        value = node.value if isinstance(node, ast.Constant) else -node.operand.value
        text = data[first:last].decode()
        if LITERAL_SIZES < abs(value) < 2 ** 63 and in_function(first):
            # (one slot per occurrence: equal sizes on one shape need not be equal on another)
            text = f"_s{len(values)}"
            values.append(value)
            slot_offsets.append(first)
        edits.append((first, 1, last, f"np.int64({text})" if node in typed else text))
    for offset in inserts:
        edits.append((offset, 0, offset, _first_argument(data, offset)))
    for node in functions.values():
        first = data.index(b"(", start(node) + 3) + 1  # (after "def name(")
        edits.append((first, 0, first, _first_argument(data, first)))
        # each function reads its own slots only (every slot in every function was 2,029 of the 3,581 lines of
        # random.gamma's segment, and as much of numba's typing and LLVM's work)
        used = [k for k, offset in enumerate(slot_offsets) if start(node) <= offset < end(node)]
        if used:
            body = start(node.body[0])
            indent = data[line_starts[node.body[0].lineno - 1]:body].decode()
            if indent.strip():
                raise ValueError(f"generated function {node.name} has its body on the line of its def")
            edits.append((body, 0, body, "".join(f"_s{k} = _ints[{k}]\n{indent}" for k in used)))
    out: list[bytes] = []
    position = 0
    for first, _, last, replacement in sorted(edits):
        out.append(data[position:first])
        out.append(replacement.encode())
        position = last
    out.append(data[position:])
    return b"".join(out).decode(), tuple(values)


def _first_argument(data: bytes, offset: int) -> str:
    """The text inserting ``_ints`` as the first argument of the call or parameter list opened just before
    ``offset``."""
    return "_ints" if _NEXT_CHARACTER.match(data, offset).group(1) == b")" else "_ints, "


_NEXT_CHARACTER = re.compile(rb"\s*(.?)")


def _int_constant(node) -> bool:
    import ast

    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int
