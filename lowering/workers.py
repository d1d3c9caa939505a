"""Running the pieces of one large kernel on several CPUs at once.

Large float matmuls (:func:`lowering.blas.split_matmul`) and large fused
element-wise loops (:mod:`lowering.fusion`) cut their work into one piece per
CPU: the calling thread computes the first piece and a small process-wide pool
of worker threads the others (NumPy's BLAS calls and the numba kernels release
the GIL), and the call returns when every piece is done. The pieces meet once,
at the end, so a CPU taken by another process costs at most its own piece
(unlike OpenBLAS's threads, which synchronize many times per call; see
:mod:`lowering.blas`). Each piece writes its own part of the result, so the
result does not depend on how the work was cut or on how many CPUs ran it.

Workers compute in the caller's denormal mode: the caller passes the context
manager that sets it (:func:`lowering.denormals.mode_switch`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def usable_cpus() -> int:
    """The number of CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def worker_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` worker threads (created on first use, shared by every executable)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="xla-dialect-worker")
        return pool


def run_pieces(function, pieces: list[tuple], mode=None) -> None:
    """Call ``function(*args)`` for every ``args`` of ``pieces`` at once: the first on this thread, the others on
    worker threads inside the context manager ``mode`` (the caller's denormal mode; None: as they are).

    Returns when every piece is done, also when one raised (the first error is then raised): the pieces write
    into the caller's arrays, which must not be freed or read while a worker still writes.
    """
    if len(pieces) == 1:
        function(*pieces[0])
        return
    mode = mode if mode is not None else contextlib.nullcontext()

    def in_mode(*args):
        with mode:
            function(*args)

    pool = worker_pool(len(pieces) - 1)
    futures = [pool.submit(in_mode, *args) for args in pieces[1:]]
    try:
        function(*pieces[0])
    finally:
        errors = []
        for future in futures:
            try:
                future.result()
            except BaseException as error:  # noqa: BLE001 - collected, the first re-raised below
                errors.append(error)
    if errors:
        raise errors[0]


def even_bounds(size: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges cutting ``range(size)`` into at most ``parts`` pieces; every piece but the last
    starts and ends at a multiple of ``align``, the last takes the remainder (at least as large as the others)."""
    bounds = sorted({size * i // parts // align * align for i in range(parts)} | {size})
    return list(zip(bounds[:-1], bounds[1:]))
