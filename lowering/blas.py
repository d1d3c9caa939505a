"""How many BLAS threads the executor's float matmuls use (``lowering.compile(..., blas_threads=...)``).

The dot and convolution kernels end in one ``np.matmul``, which NumPy hands to
its BLAS (OpenBLAS in the NumPy wheels). This module picks the BLAS thread
count for those calls and applies it with threadpoolctl while they run:

* ``blas_threads=n`` (a positive int): every BLAS-sized float matmul runs with
  ``n`` threads.
* ``blas_threads=None`` (automatic, the default): if a BLAS thread count was
  configured in the environment (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS``, ... -- see :data:`ENV_VARS`) it is left alone; otherwise
  one thread when the process may use at most two CPUs, and the BLAS's own
  setting (untouched, no overhead) on larger machines.

Why that automatic policy and not a one-time timing calibration (measured on
a 2-core KVM VM shared with other jobs, OpenBLAS 0.3.31 as shipped with NumPy
2.4; 256x1024 MLP of benchmarks/bench_executor.py, medians of 30-40 calls):

* On two cores threading gains at most 2x, and only on an idle machine (MLP
  8.2 ms with 2 threads vs 14.2 ms with 1). Under load it loses badly: with the
  VM's background load 94 vs 43 ms, plus one busy process 145 vs 56 ms, plus
  two 182 vs 67 ms (with one busy process, a 256x256x256 sgemm took 0.5 ms
  with 1 thread and 15 ms with 2). OpenBLAS
  splits a gemm statically between its threads and waits for the slowest, so
  with two threads on two cores one descheduled thread stalls the whole call
  for a scheduler time slice. With more cores a neighbour takes one thread's
  share while the others keep the gain (reasoned, not measured here), so the
  BLAS's setting is kept there.
* A calibration sees the load of its few milliseconds only: timing a
  256x512x512 sgemm both ways chose 2 threads in 11 of 12 processes, even with
  a busy neighbour, i.e. the slow choice for most of a loaded run.
* OpenBLAS's sgemm does not give the same bits with 1 and 2 threads (8.5% of
  the elements of a 256x1024x1024 product, 23% of a 100x100x100 one differ in
  the last bits; its dgemm agreed in every shape tried, and products OpenBLAS
  does not thread agree). A timing-based choice would let two runs of one
  program on one machine disagree; this rule depends only on the machine, and
  one thread gives the same bits whatever the number of cores.

Only the matmuls that the limit can affect take it: those of a BLAS dtype
(f32, f64 and the narrower floats computed in f32; complex dots use XLA's own
summation order, integer ones NumPy's loops) with ``m * n * k > 2**18`` per
2-d product (OpenBLAS's interface/gemm.c runs smaller ones on one thread:
``65536 * GEMM_MULTITHREAD_THRESHOLD``, default 4). Other matmuls are plain
``np.matmul`` calls; so are matrix-vector products under that size, which
OpenBLAS may still split (its gemv threshold is lower) but which take less
time than the limit costs. Only the BLAS library NumPy itself loaded is limited.

Setting and restoring the limit through threadpoolctl costs about 6 us
(measured; ~14 us per executable call in all), as much as a 100x100x100 sgemm,
so it is not paid per matmul: an executable whose program has such a matmul
takes the limit once for the whole call (:class:`BlasThreadLimit` in
``Executable.__call__``), and each matmul then only checks in (about 1 us).
Kernels run outside an executable (constant folding) take the limit around
each matmul. While a call holds the limit, the program's other NumPy BLAS work
(``np.linalg`` kernels) and host callbacks run under it too.

The BLAS thread count is process-wide: when several Python threads run
matmuls at once (multi-device executables, or executables called from
threads), the first one to start sets the count and the last one to finish
restores it, so concurrent executables compiled with different
``blas_threads`` run with the first one's setting meanwhile. An OpenMP-based
BLAS keeps its limit per thread; there only the thread that set it is limited.
"""

from __future__ import annotations

import functools
import os
import threading

import numpy as np

from xla_dialect.errors import ExecutionError

ENV_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "FLEXIBLAS_NUM_THREADS")
"""Environment variables through which a user sets the BLAS thread count; automatic mode then defers to them."""

SERIAL_MNK = 1 << 18
"""Matmuls with ``m * n * k`` at most this (per 2-d product) run single-threaded in OpenBLAS anyway."""

_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def usable_cpus() -> int:
    """The number of CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def resolve_blas_threads(option) -> int | None:
    """The BLAS thread count for ``lowering.compile``'s ``blas_threads`` option (see the module docstring).

    Returns a positive int, or None for "leave the BLAS as configured". Raises
    :class:`ExecutionError` for anything but None or a positive int.
    """
    if option is None:
        if any(os.environ.get(name) for name in ENV_VARS):
            return None
        return 1 if usable_cpus() <= 2 else None
    if isinstance(option, bool) or not isinstance(option, int) or option < 1:
        raise ExecutionError(f"lowering.compile: blas_threads must be None (automatic) or a positive int, "
                             f"got {option!r}")
    return option


def numpy_blas_threads() -> list[int]:
    """The current thread count of each BLAS library NumPy loaded (usually one)."""
    return [c.get_num_threads() for c in _SCOPE.controllers()]


class BlasThreadLimit:
    """Context manager: NumPy's BLAS runs with ``threads`` threads inside (process-wide, thread-safe, nestable).

    Cheap to create; entering while a limit is already in force (another
    executable call, another device thread) only counts in.
    """

    __slots__ = ("threads",)

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        _SCOPE.enter(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        _SCOPE.leave()


def blas_matmul(threads: int | None, dtype, m: int, k: int, n: int):
    """``np.matmul`` for ``(.., m, k) x (.., k, n)`` operands of ``dtype``, run with ``threads`` BLAS threads.

    Returns ``np.matmul`` itself when no limit applies (``threads`` is None,
    the dtype is not a BLAS type, or the product is too small to be threaded).
    """
    if threads is None or np.dtype(dtype) not in _BLAS_DTYPES or m * k * n <= SERIAL_MNK:
        return np.matmul
    return _limited_matmul(threads)


@functools.lru_cache(maxsize=None)
def _limited_matmul(threads: int):
    """A matmul taking the process-wide BLAS limit of ``threads`` for the length of the call."""
    enter, leave = _SCOPE.enter, _SCOPE.leave

    def matmul(a, b):
        enter(threads)
        try:
            return _matmul(a, b)
        finally:
            leave()

    matmul.__doc__ = f"np.matmul with {threads} BLAS thread(s)."
    return matmul


# The matmul the limited kernels call (a module global so tests can observe the limit inside the call).
_matmul = np.matmul


class _BlasScope:
    """A process-wide, thread-safe BLAS thread limit, counted over the calls currently holding it.

    The first call to enter records NumPy's BLAS thread count and sets the
    limit; the last one to leave restores it. threadpoolctl lets only one
    Python thread at a time (its "controlling thread") change OpenBLAS's
    process-wide count and silently ignores the others, so the thread setting
    the limit claims that right and keeps it while the limit is in force, and
    the restoring thread (claiming it too if it is another one) gives it back,
    so that the user's own threadpoolctl calls from any thread keep working.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._restore: list = []  # (controller, threads before) for each library changed
        self._owner: int | None = None  # the thread that set the limit (threadpoolctl's controlling thread)
        self._controllers: list | None = None
        self._claimable: tuple = ()  # controller classes with a controlling thread (threadpoolctl >= 3.6, OpenBLAS)

    def controllers(self) -> list:
        """threadpoolctl controllers of NumPy's BLAS (found once per process: ~1 ms)."""
        if self._controllers is None:
            controllers = _numpy_blas_controllers()
            self._claimable = tuple({type(c) for c in controllers if hasattr(type(c), "clear_controlling_thread")})
            self._controllers = controllers
        return self._controllers

    def enter(self, threads: int) -> None:
        """A call starts: apply the limit unless one is in force."""
        with self._lock:
            if self._running == 0:
                self._restore = [(c, before) for c in self.controllers()
                                 if (before := c.get_num_threads()) != threads]
                if self._restore:
                    self._claim()
                    self._owner = threading.get_ident()
                    for c, _ in self._restore:
                        c.set_num_threads(threads)
            self._running += 1

    def leave(self) -> None:
        """A call ended: the last one running restores the previous counts."""
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._restore:
                if self._owner != threading.get_ident():
                    self._claim()
                for c, before in self._restore:
                    c.set_num_threads(before)
                for cls in self._claimable:
                    cls.clear_controlling_thread()  # give the right back
                self._restore, self._owner = [], None

    def _claim(self) -> None:
        """Make the calling thread the one threadpoolctl lets change the count."""
        for cls in self._claimable:
            cls.clear_controlling_thread(force=True)


def _numpy_blas_controllers() -> list:
    """The BLAS libraries NumPy loaded: those inside NumPy's installation (wheels vendor one), else every BLAS."""
    from threadpoolctl import ThreadpoolController

    blas = ThreadpoolController().select(user_api="blas").lib_controllers
    root = os.path.dirname(os.path.realpath(np.__file__))
    inside = (root + os.sep, root + ".libs" + os.sep)  # numpy/.dylibs/ (macOS), numpy.libs/ (Linux, Windows)
    own = [c for c in blas if os.path.realpath(c.filepath).startswith(inside)]
    return own or blas


_SCOPE = _BlasScope()
