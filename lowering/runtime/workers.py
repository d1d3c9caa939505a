"""Running the pieces of one large kernel on several CPUs at once.

Large float matmuls (:func:`lowering.runtime.blas.split_matmul`), large fused
element-wise loops (:mod:`lowering.executor.fusion`) and large max/min row reductions
(:mod:`lowering.kernels.rowwise`) cut their work into one piece per CPU: the calling
thread computes the first piece and a small process-wide pool of worker
threads the others (NumPy's BLAS calls and the numba kernels release
the GIL), and the call returns when every piece is done. The pieces meet once,
at the end, so a CPU taken by another process costs at most its own piece
(unlike OpenBLAS's threads, which synchronize many times per call; see
:mod:`lowering.runtime.blas`). Each piece writes its own part of the result, so the
result does not depend on how the work was cut or on how many CPUs ran it.

Where numba's threading layer keeps its workers polling (OpenMP or TBB, on
x86-64: :func:`numba_threads_available`), the pieces run on numba's threads
instead, from compiled code that never takes the GIL: split matmuls call
NumPy's own gemm by address (:func:`lowering.runtime.loop_runtime.gemm_calls`), fused
loops through a parallel wrapper of their kernel (:mod:`lowering.executor.fusion`), row
reductions through :func:`lowering.kernels.rowwise.row_extrema_pieces`, and compiled
loops pair their products there (:func:`lowering.runtime.loop_runtime.gemm_pair`). One
pool then serves all of them; a worker that polls starts its piece at once where a
sleeping Python thread took ~0.1 ms to wake and take the GIL (a 256x1024x1024
sgemm split in two: 2.08 vs 2.25 ms, medians of 15 rounds in one process).
Elsewhere (other threading layers, other CPUs, a forked child) the pieces run
on a small pool of Python threads (:func:`run_pieces`; row reductions stay
whole there).

Workers compute in the caller's denormal mode: on numba's threads each piece
sets the caller's MXCSR (which the parallel function reads on the calling
thread, before its parallel loop); Python workers enter the context manager the caller
passes (:func:`lowering.runtime.denormals.mode_switch`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .process_state import at_fork_in_child, environment_default

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools_after_fork() -> None:
    """A forked child has none of its parent's threads: a pool created before the fork would take pieces and
    never run them. The child starts its own pools (and a fresh lock: the parent's may have been held)."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


at_fork_in_child(_forget_pools_after_fork)


def numba_threads_available() -> bool:
    """Whether pieces of work can run on numba's threads at little cost: numba's threading layer keeps its
    workers polling (OpenMP or TBB) and the CPU is x86-64 (the caller's denormal mode is handed over as its
    MXCSR). numba's queue-based fallback wakes its workers through the OS: two gemms then took 155-177 us
    against 55 us one after the other (measured). False in a child forked from this process once numba's
    threads ran (:data:`lowering.runtime.loop_runtime.PAIRS_ENABLED`: GNU OpenMP aborts it).

    Before numba first starts GNU OpenMP, its spin before sleeping is shortened to :data:`GOMP_SPINCOUNT`
    iterations unless the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``: with libgomp's default a
    worker kept one CPU busy for 4-4.7 ms after the last parallel region (taken from whatever runs next),
    with this count 0.4-1.1 ms, and the scan RNN keeps most of its paired products' gain (A/B: 4.44 vs
    4.91 ms, default 4.31 vs 4.82)."""
    if _NUMBA_THREADS:
        return _NUMBA_THREADS[0] and bool(_NUMBA_THREADS[1][0])  # (checked at each call: a fork clears it)
    import platform

    from .loop_runtime import PAIRS_ENABLED

    if not PAIRS_ENABLED[0]:
        return False
    with _POOLS_LOCK:
        if not _NUMBA_THREADS:
            if platform.machine().lower() not in ("x86_64", "amd64"):
                _NUMBA_THREADS.extend((False, PAIRS_ENABLED))
            else:
                # (read once, when libgomp starts; see lowering.runtime.process_state)
                environment_default("GOMP_SPINCOUNT", str(GOMP_SPINCOUNT), unless=("OMP_WAIT_POLICY",))
                try:
                    import numba
                    import numpy as np

                    from .loop_runtime import parallel_probe

                    parallel_probe(np.zeros(2))
                    _NUMBA_THREADS.extend((numba.threading_layer() in ("omp", "tbb"), PAIRS_ENABLED))
                except Exception:  # noqa: BLE001 - no threading layer: Python workers
                    _NUMBA_THREADS.extend((False, PAIRS_ENABLED))
    return _NUMBA_THREADS[0] and bool(PAIRS_ENABLED[0])


_NUMBA_THREADS: list = []
"""[whether the threading layer polls on this CPU, loop_runtime.PAIRS_ENABLED] once probed."""

GOMP_SPINCOUNT = 20000
"""The spin count :func:`numba_threads_available` gives GNU OpenMP when the user has not chosen one."""


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


def run_pieces(function, pieces: list[tuple], mode=None) -> list:
    """Call ``function(*args)`` for every ``args`` of ``pieces`` at once: the first on this thread, the others on
    worker threads inside the context manager ``mode`` (the caller's denormal mode; None: as they are).

    Returns the calls' results, in order, when every piece is done, also when one raised (the first error is
    then raised): the pieces write into the caller's arrays, which must not be freed or read while a worker
    still writes.
    """
    if len(pieces) == 1:
        return [function(*pieces[0])]
    mode = mode if mode is not None else contextlib.nullcontext()

    def in_mode(*args):
        with mode:
            return function(*args)

    pool = worker_pool(len(pieces) - 1)
    futures = [pool.submit(in_mode, *args) for args in pieces[1:]]
    results = []
    try:
        results.append(function(*pieces[0]))
    finally:
        errors = []
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as error:  # noqa: BLE001 - collected, the first re-raised below
                errors.append(error)
    if errors:
        raise errors[0]
    return results


PIECES_MNK = 1 << 22
"""Products (``batch * m * k * n``) from this size up are computed in pieces on the CPUs (the matmuls of
:mod:`lowering.kernels.small_dot` and :mod:`lowering.kernels.eigen_dots`)."""

PIECE_ROWS = 64
"""Row pieces of a product (:func:`row_piece_bounds`) are whole multiples of this many rows (but the last)."""


def row_piece_bounds(rows: int, parts: int, multiple: int = PIECE_ROWS) -> list[int]:
    """The ``parts + 1`` bounds cutting ``rows`` rows of a product into ``parts`` pieces of equal whole multiples of
    ``multiple`` rows, the last piece taking the remainder (each product element is computed by one piece, in the
    same order whatever the cut)."""
    return [i * (rows // parts // multiple) * multiple for i in range(parts)] + [rows]


def even_bounds(size: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges cutting ``range(size)`` into at most ``parts`` pieces; every piece but the last
    starts and ends at a multiple of ``align``, the last takes the remainder (at least as large as the others)."""
    bounds = sorted({size * i // parts // align * align for i in range(parts)} | {size})
    return list(zip(bounds[:-1], bounds[1:]))
