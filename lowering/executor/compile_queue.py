"""The background compilations of ``loop_compilation="auto"``: one queue, outermost code first, in a compile process.

In "auto" mode the first calls of a program run interpreted while its compiled loops, segments and fused groups
(:mod:`lowering.executor.compiled_loops`, :mod:`lowering.executor.compiled_segments`, :mod:`lowering.executor.fusion`) compile in the
background. Three things made a new program slow to reach its steady speed (odeint's pendulum, 394 ops, measured
on the 2-core VM: calls at full speed only 48 s after the first, its last compilation done at 72 s):

* **Nested code compiled several times.** A while loop inside a compiled segment is compiled once on its own and
  once as part of the segment; the loops and fused groups inside a segment start compiling first (they run many
  times in the first call), the segment after its 20th call. numba compiles one function at a time (its global
  compiler lock), so the segment -- the one that makes every other useless -- waited for the others.
  Here a unit that starts compiling while it runs inside a segment or a while loop that is still interpreted
  starts that one's compilation as well (:func:`compile_in_background` "promotes" the outermost enclosing unit), jobs
  run one at a time from a queue ordered by nesting depth (outermost first), and a job whose enclosing segment
  has machine code by its turn is dropped.
* **The GIL.** numba's type inference and lowering are Python: on a thread of this process they share the GIL with
  the interpreted calls, each at roughly half speed. Jobs therefore compile in a **compile process**
  (``python -m lowering.executor.compile_process``, started at the first background job and kept for the next ones): it
  imports the same generated module file, compiles the function for the same signature, and numba's on-disk
  cache hands the machine code to this process, which then only loads it (a fraction of a second). Without a
  cache directory (``$XLA_DIALECT_CACHE`` unset and no home directory), where the process cannot start, or with
  ``XLA_DIALECT_COMPILE_PROCESS=0``, jobs compile on the queue's thread as before.
* **Compile time itself**, which :mod:`lowering.executor.compiled_loops` keeps down (cached helpers instead of numba's
  per-process overloads; no IR-level inlining).

The queue's thread is a daemon; :func:`wait_for_background_compiles` waits until the queue is empty.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

from ..runtime.process_state import at_fork_in_child

_LOCK = threading.Condition()
_QUEUE: list[tuple[int, int, Callable[[], None], list]] = []
_SEQUENCE = itertools.count()
_ACTIVE = [0]
_WORKER: list[threading.Thread] = []
_STACK = threading.local()


def enclosing_units() -> list:
    """The compiled units (segments, while loops) running interpreted on this thread, outermost first: a unit
    pushes itself (:func:`enter`) while its interpreted form runs, so the units called inside know what encloses
    them."""
    units = getattr(_STACK, "units", None)
    if units is None:
        units = _STACK.units = []
    return units


def enter(unit) -> None:
    """``unit`` (with ``kernel`` and ``background_job()``) starts running interpreted on this thread."""
    enclosing_units().append(unit)


def leave() -> None:
    """The innermost unit of :func:`enter` finished running interpreted."""
    enclosing_units().pop()


def compile_in_background(job: Callable[[], None]) -> None:
    """Queue ``job`` (a unit's compilation) behind the jobs of units enclosing it. The outermost enclosing unit
    (a segment or a while loop) that has not started compiling starts now too (ahead of ``job``: it makes ``job``
    useless once done); ``job`` is dropped at its turn when an enclosing unit has machine code by then."""
    units = list(enclosing_units())
    for depth, unit in enumerate(units):
        outer = unit.background_job()
        if outer is not None:
            _push(depth, outer, units[:depth])
            break
    _push(len(units), job, units)


def _push(depth: int, job: Callable[[], None], units: list) -> None:
    with _LOCK:
        heapq.heappush(_QUEUE, (depth, next(_SEQUENCE), job, units))
        if not _WORKER or not _WORKER[0].is_alive():
            thread = threading.Thread(target=_work, name="xla-dialect loop compiler", daemon=True)
            _WORKER[:] = [thread]
            thread.start()


def _work() -> None:
    while True:
        with _LOCK:
            if not _QUEUE:
                _WORKER.clear()
                _LOCK.notify_all()
                return
            _, _, job, units = heapq.heappop(_QUEUE)
            _ACTIVE[0] += 1
        try:
            if not any(getattr(unit, "kernel", None) is not None for unit in units):
                job()
        except BaseException:  # noqa: BLE001 - a failed compilation leaves its unit interpreted
            pass
        finally:
            with _LOCK:
                _ACTIVE[0] -= 1
                _LOCK.notify_all()


def pending() -> bool:
    """Whether a background compilation is queued or running."""
    with _LOCK:
        return bool(_QUEUE) or _ACTIVE[0] > 0


def wait_for_background_compiles(timeout: float | None = None) -> bool:
    """Wait until every queued background compilation has finished; True when none is left (False: the
    timeout ran out first)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _LOCK:
        while _QUEUE or _ACTIVE[0] > 0:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            _LOCK.wait(remaining)
    return True


def compile_function(function, signature: tuple) -> None:
    """``function.compile(signature)`` for a numba function of a generated module file; on the queue's thread
    the compile process compiles it first, so that this process only loads its machine code from numba's
    cache (when the process cannot, this process compiles it)."""
    if (_WORKER and threading.current_thread() is _WORKER[0]
            and os.environ.get("XLA_DIALECT_COMPILE_PROCESS", "1") != "0"):
        from . import compile_process

        compile_process.compile_elsewhere(function, signature)
    function.compile(signature)


def reset_after_fork() -> None:
    """In a forked child: no queue thread runs there (the parent's jobs stay the parent's)."""
    global _LOCK
    _LOCK = threading.Condition()
    _QUEUE.clear()
    _ACTIVE[0] = 0
    _WORKER.clear()


at_fork_in_child(reset_after_fork)
