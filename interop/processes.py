"""Child processes that end with the process that started them.

A process killed without a chance to clean up (SIGKILL, or a closed terminal) does not stop its children: a
conformance worker in a hanging program, and the multiprocessing forkserver it came from, were seen spinning
for hours as orphans. Every process the toolkit starts uses these guards:

- :func:`die_with_parent`: Linux kills the child (SIGKILL) when the thread that started it ends
  (``PR_SET_PDEATHSIG``). It works whatever the child is doing, also inside C code that holds the GIL (a numba
  compilation, a big kernel). For a worker started by a forkserver, that parent is the forkserver: see
  :func:`release_forkserver`.
- :func:`release_forkserver`: a forkserver exits when every process that may ask it for children has closed
  its "alive" pipe, and multiprocessing hands a copy of that pipe to every child it starts. A busy worker so
  kept the forkserver, and through it itself, alive. A worker that closes its copy lets the forkserver exit
  as soon as the main process is gone, and ``PR_SET_PDEATHSIG`` then ends the worker.
- :func:`exit_when_closed`: a thread that ends the process when a pipe whose other end only the main process
  holds reaches end of file. It works on every platform, whenever the GIL is free.
- :data:`CHILD_GUARD`: the same as :func:`die_with_parent`, as code to run first in a ``python -c`` child
  (given the parent's pid as its first argument), which need not import this package.

Elsewhere than on Linux :func:`die_with_parent` does nothing.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CHILD_GUARD", "die_with_parent", "exit_when_closed", "release_forkserver"]

_PR_SET_PDEATHSIG = 1

CHILD_GUARD = """\
import sys as _sys
if _sys.platform.startswith("linux"):
    import ctypes as _ctypes, os as _os
    try:
        _ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (AttributeError, OSError):
        pass
    if _os.getppid() != int(_sys.argv[1]):  # the parent is gone already
        _os._exit(1)
"""
"""Code that starts a ``python -c`` child (``[sys.executable, "-c", CHILD_GUARD + code, str(os.getpid())]``):
on Linux the child is killed when its parent dies, and exits at once if the parent died before."""


def die_with_parent(parent: int | None = None) -> None:
    """On Linux, have this process killed (SIGKILL) when the thread that started it ends
    (``PR_SET_PDEATHSIG``), and exit now if its parent has died already: ``parent`` is the pid it was
    started by (by default the parent at the time of the call, which sees only a death during the call).
    Elsewhere, or if ``prctl`` is not there, nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    if parent is None:
        parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def release_forkserver() -> None:
    """In a process started by a multiprocessing forkserver: close this process's copy of the write end of
    the server's "alive" pipe, so that the server exits once the process that uses it has ended (the
    server's children are then killed by :func:`die_with_parent`). The process must not start processes
    through that server itself (it would start its own server if it did). Anywhere else, nothing."""
    try:
        from multiprocessing import forkserver

        server = forkserver._forkserver
        fd = server._forkserver_alive_fd
        own = server._forkserver_pid is not None
    except (ImportError, AttributeError):  # (another multiprocessing than CPython 3.8-3.13's)
        return
    if fd is None or own:  # not started by a forkserver, or the server is this process's own
        return
    server._forkserver_alive_fd = None
    server._forkserver_address = None
    try:
        os.close(fd)
    except OSError:
        pass


def exit_when_closed(lifeline) -> None:
    """End this process (``os._exit``) when ``lifeline``, the reading end of a
    ``multiprocessing.Pipe(duplex=False)`` whose writing end the starting process keeps and never writes
    to, reaches end of file: that process is gone. A daemon thread waits for it, so it works whenever that
    thread gets the GIL (always on Linux: :func:`die_with_parent`)."""
    import threading

    def watch():
        try:
            lifeline.poll(None)
        except (OSError, EOFError, ValueError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="xla-dialect-lifeline", daemon=True).start()
