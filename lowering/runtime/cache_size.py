"""The size of the generated-code cache: the least recently used programs' code removed past a limit.

Every program compiled leaves files in the cache directory (:func:`~lowering.runtime.process_state.cache_directory`):
generated module files (``loop_<digest>.py``; ``ufunc_<digest>.py`` only where the library's own directory is not
writable, :func:`~lowering.runtime.generated_modules.library_module_directory`), the index files naming a program's
shape-free module (``loop_<digest>.ints``), numba's machine code for each module
(``__pycache__/<module>.*.nbi/.nbc``), and the executables ``lowering.compile`` stored (``executable_<digest>.exe``:
:mod:`lowering.executor.executable_cache`). The names are digests of the text (a stored executable's, of its module,
options and library), which includes the digest of the runtime the code calls into, so a new release or an edit of
the runtime leaves the old files unused, never read again. Without a
limit the directory only grows (a developer's machine reached 3.2 GB over a month of test runs).

So the cache has a size limit (:func:`size_limit`: ``$XLA_DIALECT_CACHE_SIZE``, default :data:`DEFAULT_LIMIT`).
A module's last use is its file's access time, set when a process imports it (:func:`mark_used`; the modification
time is left alone: numba's index checks it). At most once per :data:`PRUNE_INTERVAL` seconds per cache directory,
a process that writes a new file checks the total size in a background thread and, past the limit, removes whole
entries (a module with its machine code; an index file) least recently used first, down to 80% of the limit, none
used in the last :data:`GRACE` seconds (a process may be loading it). A removed entry costs a compilation the next
time it is needed; it never gives stale code (the file names are digests of the text). ``xla-cache`` (the CLI)
shows the cache, prunes it to a size, or clears it.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass

from xla_dialect.errors import UnsupportedError

try:
    import fcntl
except ImportError:  # not POSIX: pruning runs without the cross-process lock
    fcntl = None

DEFAULT_LIMIT = 2 << 30
"""2 GiB: a few hundred programs' machine code (a compiled module and its code are 10 KB to 1 MB)."""
ENVIRONMENT = "XLA_DIALECT_CACHE_SIZE"
PRUNE_INTERVAL = 3600.0
GRACE = 600.0
_STAMP = ".pruned"
_LOCK_FILE = ".prune.lock"
_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_ENTRY = re.compile(r"^([a-z]+_[0-9a-f]{16,64})\.(py|ints|exe)(\.\d+\.\d+\.tmp)?$")
"""A module file, a shape index, a stored executable (:mod:`lowering.executor.executable_cache`), or what a process
killed while writing one left (``write_atomically``)."""


def parse_size(text: str) -> int | None:
    """Bytes from ``text``: a number with an optional K, M, G or T suffix (binary units, ``B``/``iB`` allowed),
    or ``unlimited`` (None). Raises :class:`~xla_dialect.errors.UnsupportedError` for anything else."""
    value = text.strip()
    if value.lower() in ("unlimited", "none", "inf"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", value, re.IGNORECASE)
    if match is None:
        raise UnsupportedError(f"cache size {text!r}: expected bytes such as 500M, 2G or 1073741824, or 'unlimited'")
    return int(float(match[1]) * _SUFFIXES.get(match[2].upper(), 1))


def size_limit() -> int | None:
    """The cache's size limit in bytes: ``$XLA_DIALECT_CACHE_SIZE`` (:func:`parse_size`) or :data:`DEFAULT_LIMIT`;
    None: unlimited."""
    text = os.environ.get(ENVIRONMENT)
    if text is None or not text.strip():
        return DEFAULT_LIMIT
    try:
        return parse_size(text)
    except UnsupportedError as error:
        raise UnsupportedError(f"${ENVIRONMENT}: {error}") from None


def mark_used(path: str) -> None:
    """Record that module file ``path`` was just used: its access time (its modification time is numba's stamp
    of the source its machine code was compiled from, so it must not change)."""
    try:
        os.utime(path, (time.time(), os.stat(path).st_mtime))
    except OSError:  # (removed meanwhile, or a read-only cache: nothing to record)
        pass


@dataclass
class Entry:
    """One removable unit of the cache: a module file with its numba files, or an index file."""

    name: str
    files: list[str]
    size: int
    last_used: float


def entries(directory: str) -> list[Entry]:
    """The cache's entries in ``directory``, each with its files, total size and last use."""
    found: dict[str, Entry] = {}
    machine_code: dict[str, list[tuple[str, int]]] = {}
    with os.scandir(directory) as it:
        for item in it:
            match = _ENTRY.match(item.name)
            if match is None or not item.is_file(follow_symlinks=False):
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            key = item.name if match[2] in ("ints", "exe") or match[3] else match[1]
            found[key] = Entry(key, [item.path], st.st_size, max(st.st_atime, st.st_mtime))
    code_directory = os.path.join(directory, "__pycache__")
    if os.path.isdir(code_directory):
        with os.scandir(code_directory) as it:
            for item in it:
                stem = item.name.split(".", 1)[0]
                try:
                    size = item.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                machine_code.setdefault(stem, []).append((item.path, size))
    for stem, files in machine_code.items():
        entry = found.get(stem)
        if entry is None:  # (machine code whose module file is gone: nothing can load it again)
            entry = found[stem] = Entry(stem, [], 0, 0.0)
        for path, size in files:
            entry.files.insert(0, path)  # (machine code removed before the module that names it)
            entry.size += size
    return list(found.values())


@dataclass
class PruneReport:
    """What :func:`prune` found and did."""

    directory: str
    entries: int
    size: int
    removed_entries: int = 0
    removed_size: int = 0


def prune(directory: str, limit: int | None, grace: float = GRACE, target: float = 0.8) -> PruneReport:
    """Remove the least recently used entries of the cache in ``directory`` while its size exceeds ``limit``
    bytes, down to ``target * limit``; entries used in the last ``grace`` seconds stay. ``limit`` None:
    nothing is removed (the report gives the size)."""
    found = entries(directory)
    report = PruneReport(directory, len(found), sum(e.size for e in found))
    if limit is None or report.size <= limit:
        return report
    now = time.time()
    size = report.size
    for entry in sorted(found, key=lambda e: e.last_used):
        if size <= target * limit:
            break
        if now - entry.last_used < grace:
            continue
        for path in entry.files:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        size -= entry.size
        report.removed_entries += 1
        report.removed_size += entry.size
    return report


def clear(directory: str) -> PruneReport:
    """Remove every entry of the cache in ``directory`` (other files there are left alone)."""
    return prune(directory, 0, grace=0.0, target=0.0)


_STARTED: set[str] = set()
_STARTED_LOCK = threading.Lock()


def prune_in_background(directory: str) -> threading.Thread | None:
    """Start a background prune of ``directory`` to :func:`size_limit` unless one ran in the last
    :data:`PRUNE_INTERVAL` seconds (any process: the stamp file's time) or this process started one already;
    the thread started, or None. Another process pruning at the same moment makes this one skip (a lock)."""
    limit = size_limit()
    with _STARTED_LOCK:
        if directory in _STARTED:
            return None
        _STARTED.add(directory)
    stamp = os.path.join(directory, _STAMP)
    try:
        if time.time() - os.stat(stamp).st_mtime < PRUNE_INTERVAL:
            return None
    except OSError:
        pass
    if limit is None:
        return None
    thread = threading.Thread(target=_prune_once, args=(directory, limit, stamp), name="xla-dialect cache prune",
                              daemon=True)
    thread.start()
    return thread


def _prune_once(directory: str, limit: int, stamp: str) -> None:
    try:
        with open(os.path.join(directory, _LOCK_FILE), "a+b") as handle:
            if fcntl is not None:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return  # (another process is pruning)
            with open(stamp, "w"):
                pass  # (the time of this prune, for every process)
            prune(directory, limit)
    except OSError:  # (a cache directory that became unwritable: nothing to prune there)
        pass
