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
from types import ModuleType

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
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = os.path.join(directory, f"{prefix}_{digest}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return import_module_file(f"xla_dialect_{prefix}_{digest}", path)  # (numba's cache finds it by name)
