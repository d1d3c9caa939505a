"""How the executor's float matmuls use the CPUs (``lowering.compile(..., blas_threads=...)``).

The dot and convolution kernels end in one ``np.matmul``, which NumPy hands to
its BLAS (OpenBLAS in the NumPy wheels). This module picks the BLAS thread
count for those calls, applies it with threadpoolctl while they run, and on
small machines splits large products over the CPUs itself:

* ``blas_threads=n`` (a positive int): every BLAS-sized float matmul runs with
  ``n`` BLAS threads, unsplit.
* ``blas_threads=None`` (automatic, the default): if a BLAS thread count was
  configured in the environment (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS``, ... -- see :data:`ENV_VARS`) it is left alone. Otherwise,
  on machines where the process may use at most two CPUs, the BLAS runs with
  one thread and a large product (``batch * m * n * k >= 2**25``) is cut into
  one piece per CPU -- along the batch, else along the longer of the rows and
  the columns, at multiples of 64 -- whose single-threaded BLAS calls run at
  the same time, one on the calling thread and the others on numba's polling
  threads (the calls NumPy's matmul makes, through NumPy's own gemm) or,
  where numba's threading layer does not poll, on a small pool of Python
  worker threads (:func:`split_matmul`, :mod:`lowering.runtime.workers`). On larger
  machines the BLAS's own setting is used (untouched, no overhead).

Why that automatic policy and not OpenBLAS's own threads or a one-time timing
calibration (measured on 2-core KVM VMs shared with other jobs, OpenBLAS
0.3.31 as shipped with NumPy 2.4):

* On two cores threading gains at most 2x, and only on an idle machine: a
  256x1024x1024 sgemm takes 3.5-4.0 ms on one thread, 1.8-2.2 ms on OpenBLAS's
  two. Under load OpenBLAS's threading loses badly: it splits a gemm statically
  between its threads and synchronizes them many times per call, so one
  descheduled thread stalls the call for a scheduler time slice (256x1024 MLP:
  with the VM's background load 94 vs 43 ms on one thread, plus one busy
  process 145 vs 56 ms, plus two 182 vs 67 ms; with one busy process that
  sgemm took 5.95 ms on OpenBLAS's two threads vs 3.71 on one).
* The pieces of :func:`split_matmul` meet once, at the end of the call, so a
  descheduled piece costs at most its own length: with one busy process the
  same sgemm took 3.99 ms split in two (vs 3.71 on one thread), and on an idle
  machine 2.0-2.3 ms (vs 1.8-2.2 on OpenBLAS's two threads). Over a grid of
  f32 shapes (m, n in {128, 512, 2048}, k in {64, 256, 1024}) the split takes
  0.51-0.66x the one-thread time from ``m*n*k >= 2**26`` up and 0.6-1.04x at
  ``2**24``, where waking the worker (~65 us on that VM) costs as much as it
  gains; hence the threshold.
* The split gives the same bits as the whole product on one thread. Measured
  bit-identical on every shape tried, f32 and f64, and tested
  (tests/test_blas_threads.py). The reason: OpenBLAS's gemm driver blocks the
  contraction by ``k`` alone, so every element is summed in the same order
  whichever rows or columns share its call, as long as the pieces take the
  same code path as the whole: pieces of at least 64 rows or columns of a
  product that large. (A 1-row piece would be a gemv, and OpenBLAS computes
  sgemms below ``28 * 512 * 512`` multiply-adds on AVX-512 hosts with its
  "direct" kernel, which sums differently; a piece of a split product is at
  least a third of ``2**25``, and matrix-vector products are never split.) So a program gives the same bits on one
  or two CPUs, split or not, loaded or idle.
* OpenBLAS's threaded sgemm does not give those bits (8.5% of the elements of
  a 256x1024x1024 product, 23% of a 100x100x100 one differ in the last bits
  from one thread; its dgemm agreed in every shape tried). A timing-based
  choice of OpenBLAS's thread count would let two runs of one program on one
  machine disagree; a calibration also sees the load of its few milliseconds
  only (timing a 256x512x512 sgemm both ways chose 2 threads in 11 of 12
  processes, even with a busy neighbour).
* OpenBLAS's idle worker threads spin for a while after a threaded call (as do
  jax's): a split matmul run right after NumPy code using OpenBLAS's threads
  finds a core taken and runs at one-thread speed until they sleep.

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
(``np.linalg`` kernels) and host callbacks run under it too. The pieces a
split matmul gives its worker threads run in the caller's denormal mode
(:mod:`lowering.runtime.denormals`).

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

from .workers import even_bounds, numba_threads_available, run_pieces, usable_cpus

ENV_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "FLEXIBLAS_NUM_THREADS")
"""Environment variables through which a user sets the BLAS thread count; automatic mode then defers to them."""

SERIAL_MNK = 1 << 18
"""Matmuls with ``m * n * k`` at most this (per 2-d product) run single-threaded in OpenBLAS anyway."""

_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def resolve_split_workers(option) -> int:
    """How many CPUs a large float matmul is split over (:func:`split_matmul`) for ``blas_threads=option``.

    More than 1 only in the automatic mode on a machine with two CPUs (with no
    BLAS thread count in the environment); 1 (no split) otherwise.
    """
    if option is None and resolve_blas_threads(None) == 1:
        return usable_cpus()
    return 1


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


def blas_matmul(threads: int | None, dtype, m: int, k: int, n: int, batch: int = 1, workers: int = 1,
                worker_mode=None):
    """``np.matmul`` for ``(batch, m, k) x (batch, k, n)`` operands of ``dtype``, run with ``threads`` BLAS threads.

    With ``workers > 1`` a real float product of at least :data:`SPLIT_MNK`
    multiply-adds is split over that many CPUs (:func:`split_matmul`), each
    worker computing in the context manager ``worker_mode`` (the caller's
    denormal mode). Returns ``np.matmul`` itself when no limit applies
    (``threads`` is None, the dtype is not a BLAS type, or the product is too
    small to be threaded) and nothing is split.
    """
    dtype = np.dtype(dtype)
    if workers > 1 and dtype in _SPLIT_DTYPES and batch * m * k * n >= SPLIT_MNK and _pieces(batch, m, n, workers):
        return split_matmul(threads if m * k * n > SERIAL_MNK else None, workers, worker_mode)
    if threads is None or dtype not in _BLAS_DTYPES or m * k * n <= SERIAL_MNK:
        return np.matmul
    return _limited_matmul(threads)


SPLIT_MNK = 1 << 25
"""Products (``batch * m * n * k``) from this size up are split over the CPUs on small machines (module docstring)."""

SPLIT_ALIGN = 64
"""Row and column pieces of a split product are whole multiples of this many rows or columns (module docstring)."""

_SPLIT_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64))


def _pieces(batch: int, m: int, n: int, workers: int):
    """How a ``(batch, m, n)`` product is split: ``(axis, bounds)``, axis 0 (batch), 1 (rows) or 2 (columns),
    or None when it cannot be split into at least two pieces."""
    if m < 2 or n < 2:
        return None  # NumPy computes matrix-vector products with gemv, whose pieces may sum differently
    if batch >= 2:
        size, axis, align = batch, 0, 1
    elif m >= n:
        size, axis, align = m, 1, SPLIT_ALIGN
    else:
        size, axis, align = n, 2, SPLIT_ALIGN
    parts = min(workers, size // align)
    if parts < 2:
        return None
    return axis, tuple(even_bounds(size, parts, align))


SPLIT_MOST_UNEVEN = 0.75
"""The largest share of a two-piece split's work in one piece that is still worth trying (1.33x on two CPUs)."""


def _candidate_plans(batch: int, m: int, n: int, workers: int) -> list:
    """The splits of a ``(batch, m, n)`` product to try, most even first: :func:`_pieces`' even split, then, for
    one matrix on two CPUs, the two-piece cuts of either side at multiples of :data:`SPLIT_ALIGN` up to
    :data:`SPLIT_MOST_UNEVEN` of the work in one piece. Which cuts keep the whole product's bits depends on the
    BLAS's blocking for the shape (OpenBLAS 0.3.31, one thread, AMD EPYC: a 256x1024x1024 f32 product keeps them
    cut at column 640 or row 192, not at the even column 512)."""
    even = _pieces(batch, m, n, workers)
    if even is None:
        return []
    plans = [even]
    if batch == 1 and workers == 2:
        cuts = [(axis, cut, max(cut, size - cut) / size)
                for axis, size in ((1, m), (2, n)) for cut in range(SPLIT_ALIGN, size, SPLIT_ALIGN)]
        for axis, cut, share in sorted(cuts, key=lambda c: (c[2], c[0] != even[0])):
            plan = (axis, ((0, cut), (cut, m if axis == 1 else n)))
            if share <= SPLIT_MOST_UNEVEN and plan != even:
                plans.append(plan)
    return plans


def split_matmul(threads: int | None, workers: int, worker_mode=None):
    """A matmul of ``(batch, m, k) x (batch, k, n)`` operands that runs its pieces on ``workers`` CPUs at once.

    The product is cut along the batch, else along its longer side at whole
    multiples of :data:`SPLIT_ALIGN` (:func:`_pieces`); the calling thread
    computes the first piece and worker threads the others, each a
    single-threaded BLAS call writing its part of the result: on numba's
    polling threads, the calls NumPy's matmul would make, made from compiled
    code through NumPy's own gemm (:func:`native_gemm_calls`), or else as
    ``np.matmul`` calls on Python workers (:func:`lowering.runtime.workers.run_pieces`,
    in the context manager ``worker_mode``). A product is
    split only where that gives the whole product's bits on one thread:
    checked once per process for each shape, memory order and dtype on
    operands of random values (:func:`exact_plan`); where the BLAS's
    kernels would sum an element differently in a piece, the product stays
    whole. ``threads`` (or None) is the BLAS limit the call holds meanwhile;
    every piece computes in the caller's denormal mode. Operands of other
    ranks or dtypes, products with both operands in the same buffer (NumPy
    computes ``x @ x.T`` with syrk, which sums differently) and products too
    small to split are one plain call.
    """
    enter, leave = _SCOPE.enter, _SCOPE.leave

    def piece(a, b, out):
        _matmul(a, b, out=out)

    def run_split(a, b, plan):
        axis, bounds = plan
        out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
        calls = native_gemm_calls(a, b, axis, bounds)
        if calls is not None:
            _run_native(a, b, out, *calls)
            return out
        slices = [(slice(None),) * axis + (slice(start, stop),) for start, stop in bounds]
        if axis == 0:
            parts = [(a[s], b[s], out[s]) for s in slices]
        elif axis == 1:
            parts = [(a[s], b, out[s]) for s in slices]
        else:
            parts = [(a, b[s], out[s]) for s in slices]
        run_pieces(piece, parts, worker_mode)
        return out

    def matmul(a, b):
        plans = []
        if a.ndim == 3 == b.ndim and a.dtype == b.dtype and a.shape[0] == b.shape[0]:
            batch, m, k = a.shape
            n = b.shape[2]
            if batch * m * k * n >= SPLIT_MNK and a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
                plans = _candidate_plans(batch, m, n, workers)
        if threads is not None:
            enter(threads)
        try:
            if plans:
                key = (a.dtype, a.shape, b.shape, _order(a), _order(b), workers)
                if key not in _SPLIT_EXACT:  # (the first split that keeps the bits, or None)
                    _SPLIT_EXACT[key] = exact_plan(a, b, plans, run_split)
                plan = _SPLIT_EXACT[key]
                if plan is not None:
                    return run_split(a, b, plan)
            return _matmul(a, b)
        finally:
            if threads is not None:
                leave()

    matmul.__doc__ = f"np.matmul split over {workers} CPUs" + (f", {threads} BLAS thread(s) each." if threads else ".")
    return matmul


def _blas_operand(x: np.ndarray):
    """``(transpose, leading dimension)`` of the CBLAS call NumPy's matmul makes for the row-major matrices of
    the 3-d ``x``: rows contiguous -> (111 no transpose, row stride), columns contiguous -> (112 transpose,
    column stride), in elements; None when NumPy would not hand them to BLAS as they are."""
    item = x.itemsize
    _, rows, cols = x.shape
    if rows < 2 or cols < 2:
        return None  # (a vector's strides say little; such products are never split anyway)
    row_stride, col_stride = x.strides[1], x.strides[2]
    if col_stride == item and row_stride % item == 0 and row_stride // item >= cols:
        return 111, row_stride // item
    if row_stride == item and col_stride % item == 0 and col_stride // item >= rows:
        return 112, col_stride // item
    return None


def native_gemm_calls(a: np.ndarray, b: np.ndarray, axis: int, bounds):
    """The pieces of a split product of ``a`` and ``b`` into a new C-ordered array as rows of CBLAS gemm calls
    for :func:`lowering.runtime.loop_runtime.gemm_calls`: ``(calls, starts)``, piece ``p`` being rows ``starts[p]`` to
    ``starts[p + 1]`` (one per matrix of its batch), each the call NumPy's matmul makes for that piece (the
    whole product's transposes and leading dimensions, the piece's sizes, its matrices as byte offsets into
    the operands and the result). Computed once per dtype, shapes, strides and pieces. None where numba's
    threads cannot run them (:func:`lowering.runtime.workers.numba_threads_available`), NumPy's gemm cannot be called
    by address, or an operand is not in a form NumPy hands to BLAS as it is."""
    if not numba_threads_available() or numpy_gemm_address(a.dtype) is None:
        return None
    key = (a.dtype, a.shape, a.strides, b.shape, b.strides, axis, bounds)
    if key not in _NATIVE_PLANS:  # (None is kept too: an operand NumPy does not hand to BLAS as it is)
        _NATIVE_PLANS[key] = _native_plan(a, b, axis, bounds)
    return _NATIVE_PLANS[key]


def _native_plan(a: np.ndarray, b: np.ndarray, axis: int, bounds):
    """:func:`native_gemm_calls` computed, None when an operand is not in a form NumPy hands to BLAS as it is."""
    form_a, form_b = _blas_operand(a), _blas_operand(b)
    if form_a is None or form_b is None:
        return None
    (trans_a, lda), (trans_b, ldb) = form_a, form_b
    batch, m, k = a.shape
    n = b.shape[2]
    out_strides = (m * n * a.itemsize, n * a.itemsize, a.itemsize)
    ldc = n
    rows, starts = [], [0]
    for start, stop in bounds:
        for i in range(start, stop) if axis == 0 else range(batch):
            a_at, b_at, c_at = i * a.strides[0], i * b.strides[0], i * out_strides[0]
            size_m, size_n = m, n
            if axis == 1:
                size_m = stop - start
                a_at += start * a.strides[1]
                c_at += start * out_strides[1]
            elif axis == 2:
                size_n = stop - start
                b_at += start * b.strides[2]
                c_at += start * out_strides[2]
            rows.append((101, trans_a, trans_b, size_m, size_n, k, a_at, lda, b_at, ldb, c_at, ldc))
        starts.append(len(rows))
    return np.array(rows, np.int64), np.array(starts, np.int64)


def _run_native(a: np.ndarray, b: np.ndarray, out: np.ndarray, calls: np.ndarray, starts: np.ndarray) -> None:
    """Run :func:`native_gemm_calls`' pieces on numba's threads, in the caller's denormal mode."""
    from .loop_runtime import gemm_calls

    gemm_calls(numpy_gemm_address(a.dtype), int(a.dtype == np.float64), a, b, out, calls, starts)


_NATIVE_PLANS: dict = {}
"""(dtype, shapes, strides, pieces) -> :func:`_native_plan`."""


_SPLIT_EXACT: dict = {}
"""(dtype, shapes, memory orders, CPUs) -> the split that gives the whole product's bits, or None
(:func:`exact_plan`)."""


def _order(x: np.ndarray) -> str:
    """How BLAS reads the matrices of a 3-d operand: "C" (rows contiguous), "F" (columns contiguous) or "strided"."""
    item = x.itemsize
    if x.strides[2] == item or x.shape[2] == 1:
        return "C"
    if x.strides[1] == item or x.shape[1] == 1:
        return "F"
    return "strided"


def exact_plan(a: np.ndarray, b: np.ndarray, plans: list, run_split):
    """The first of ``plans`` whose pieces (``run_split(x, y, plan)``) give the whole ``np.matmul(x, y)`` bit for
    bit for operands of random values with the shapes, dtype and memory order of ``a`` and ``b``, or None.

    Which kernels a BLAS runs depends on the shape of each call, and a kernel for the edge rows or columns may
    group the contraction differently (OpenBLAS's f64 kernels on AVX-512 hosts sum the elements of a last,
    single column differently when the rows before them are cut at a multiple of 64 that is not one of 192). A
    different summation order shows on random operands in practically every element it touches (the rounding
    errors of a long sum are many ulps), so one comparison decides. Random values, not the caller's: those may
    be all zeros. Costs the whole product and one split product per plan tried, once per process for each key.
    """
    rng = np.random.default_rng(0)
    x, y = np.empty_like(a), np.empty_like(b)
    x[...] = rng.uniform(-1.0, 1.0, a.shape)
    y[...] = rng.uniform(-1.0, 1.0, b.shape)
    whole = np.matmul(x, y)
    return next((plan for plan in plans if np.array_equal(run_split(x, y, plan), whole)), None)


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
    return [c for c in blas if _inside_numpy(c.filepath)] or blas


def _inside_numpy(path: str) -> bool:
    """Whether the library at ``path`` is NumPy's own (vendored in its installation)."""
    root = os.path.dirname(os.path.realpath(np.__file__))
    inside = (root + os.sep, root + ".libs" + os.sep)  # numpy/.dylibs/ (macOS), numpy.libs/ (Linux, Windows)
    return os.path.realpath(path).startswith(inside)


_GEMM_SYMBOLS = {np.dtype(np.float32): "scipy_cblas_sgemm64_", np.dtype(np.float64): "scipy_cblas_dgemm64_"}
"""The ILP64 CBLAS gemm of the OpenBLAS NumPy's wheels ship (``scipy-openblas64``), by dtype."""
_GEMV_SYMBOLS = {np.dtype(np.float32): "scipy_cblas_sgemv64_", np.dtype(np.float64): "scipy_cblas_dgemv64_"}
"""Its gemv (NumPy's matmul of a vector and a matrix)."""

_GEMM_ADDRESSES: dict = {}


def numpy_gemm_address(dtype) -> int | None:
    """The address of the CBLAS gemm NumPy's own matmul calls for ``dtype`` (f32, f64), for compiled loops to
    make the same call; None when NumPy's BLAS is not the ILP64 OpenBLAS of its wheels (or ``dtype`` is
    another type). Only that library is used: it is the one the executor's thread limit applies to, and
    calling NumPy's own function with NumPy's arguments gives the same bits as ``np.matmul``."""
    return _numpy_cblas_address(_GEMM_SYMBOLS.get(np.dtype(dtype)))


def numpy_gemv_address(dtype) -> int | None:
    """The address of the CBLAS gemv NumPy's matmul calls for a vector times a matrix of ``dtype`` (see
    :func:`numpy_gemm_address`)."""
    return _numpy_cblas_address(_GEMV_SYMBOLS.get(np.dtype(dtype)))


def _numpy_cblas_address(name: str | None) -> int | None:
    if name not in _GEMM_ADDRESSES:
        address = None
        if name is not None:
            import ctypes

            for controller in _SCOPE.controllers():
                if not _inside_numpy(controller.filepath):
                    continue  # (another library's routine could sum differently from NumPy's own)
                try:
                    address = ctypes.cast(getattr(ctypes.CDLL(controller.filepath), name), ctypes.c_void_p).value
                    break
                except (OSError, AttributeError):
                    continue
        _GEMM_ADDRESSES[name] = address
    return _GEMM_ADDRESSES[name]


_SCOPE = _BlasScope()
