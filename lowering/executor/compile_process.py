"""The compile process: numba compilations of generated code, off this process's GIL (:mod:`lowering.executor.compile_queue`).

A child ``python -m lowering.executor.compile_process`` reads requests from its stdin -- a generated module file, the name
it is imported under, a function and a signature (numba types, pickled) -- imports that file as this process
does (:func:`lowering.runtime.process_state.import_module_file`), compiles the function for the signature, which numba
saves in its on-disk cache beside the file, and answers on its stdout. This process then loads the machine code
from the cache. The child is started at the first request and serves every later one; it exits when this
process closes its stdin (at exit, or when this process dies). Any failure (the child cannot start, dies, numba
rejects the code there) only means this process compiles the function itself, as it would without the child.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading

from ..runtime.process_state import at_exit, at_fork_in_child

CHILD_TIMEOUT = 900.0
"""Seconds to wait for the compile process's answer; then it is killed and this process compiles (a compilation
of a few thousand generated lines takes about a minute on a loaded 2-core VM)."""

_CHILD: list[subprocess.Popen] = []
_CHILD_LOCK = threading.Lock()
_BROKEN = [False]
_LOST = [0]
MAX_LOST = 3
"""Compile processes lost (died, or no answer in time) after which this process stops starting new ones."""
_CHILD_STARTED = [False]


def _send(stream, value) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the compile process closed its pipe")
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


def _child() -> subprocess.Popen | None:
    if _BROKEN[0]:
        return None
    if _CHILD and _CHILD[0].poll() is None:
        return _CHILD[0]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # (the repository)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    from numba.core import config

    # (the cache this process reads, whatever the environment says now: numba read it when it was imported)
    if config.CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = config.CACHE_DIR
    else:
        env.pop("NUMBA_CACHE_DIR", None)
    try:
        child = subprocess.Popen([sys.executable, "-m", "lowering.executor.compile_process"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root)
    except OSError:
        _BROKEN[0] = True
        return None
    if not _CHILD_STARTED[0]:
        at_exit(shutdown)
        _CHILD_STARTED[0] = True
    _CHILD[:] = [child]
    return child


def compile_elsewhere(function, signature: tuple) -> bool:
    """Have the compile process compile ``function`` (a numba dispatcher of a generated module file) for
    ``signature`` into numba's cache; True when it did. Waits for it (the caller is the queue's thread)."""
    python_function = getattr(function, "py_func", None)
    module = sys.modules.get(getattr(python_function, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or not os.path.exists(path):
        return False  # (not a numba function of a module file: nothing a second process could import)
    request = (module.__name__, path, python_function.__name__, tuple(signature))
    with _CHILD_LOCK:
        child = _child()
        if child is None:
            return False
        try:
            _send(child.stdin, request)
            ready, _, _ = select.select([child.stdout], [], [], CHILD_TIMEOUT)
            if not ready:
                raise EOFError(f"no answer from the compile process in {CHILD_TIMEOUT} s")
            ok, _ = _receive(child.stdout)
        except (OSError, EOFError, pickle.PickleError, struct.error):
            child.kill()
            _CHILD.clear()
            _LOST[0] += 1
            _BROKEN[0] = _LOST[0] >= MAX_LOST  # (a child that keeps dying: compile here from now on)
            return False
    return bool(ok)


def shutdown() -> None:
    """Close the compile process's stdin (it exits) -- at exit, and in a forked child (whose parent owns it)."""
    for child in _CHILD:
        try:
            child.stdin.close()
        except OSError:
            pass
    _CHILD.clear()


def forget_after_fork() -> None:
    """In a forked child: the parent's compile process is not this process's to use or close."""
    _CHILD.clear()


at_fork_in_child(forget_after_fork)


def serve(requests=None, answers=None) -> None:
    """The child's loop: compile each request into numba's cache and answer (True, "") or (False, reason)."""
    from ..runtime.process_state import import_module_file

    requests = requests or sys.stdin.buffer
    answers = answers or sys.stdout.buffer
    while True:
        try:
            name, path, function, signature = _receive(requests)
        except EOFError:
            return
        try:
            module = import_module_file(name, path)
            getattr(module, function).compile(signature)
            answer = (True, "")
        except Exception as e:  # noqa: BLE001 - the parent compiles it itself and meets the error there
            answer = (False, f"{type(e).__name__}: {e}")
        _send(answers, answer)


if __name__ == "__main__":
    # (answers go to the original stdout; anything printed while compiling goes to stderr, not into the pipe)
    _answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from lowering.runtime.process_state import install

    install()  # (as `import lowering` does: numba's cache guarded for concurrent processes)
    serve(answers=_answers)
