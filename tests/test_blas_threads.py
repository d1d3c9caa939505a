"""lowering.compile(..., blas_threads=...): the BLAS thread count of the float matmuls (lowering/runtime/blas.py).

The limit is observed from inside the kernels' matmul (``lowering.runtime.blas._matmul``
replaced by a spy that asks threadpoolctl for NumPy's BLAS thread count).
Results must be bit-identical to NumPy's own matmul at that thread count (the
executor adds nothing to what BLAS computes) and close to jax.jit. No timings.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import threadpoolctl
from jax import lax

import lowering
from lowering.runtime import blas, workers
from lowering.executor.executable import LoweringContext
from lowering.kernels.registry import KERNELS
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError
from xla_dialect.ops.linalg import DotOp

from helpers import assert_close


def numpy_blas_threads() -> list[int]:
    """Thread counts of NumPy's BLAS libraries, as threadpoolctl reports them."""
    paths = {c.filepath for c in blas._SCOPE.controllers()}
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["filepath"] in paths]


@pytest.fixture(autouse=True)
def _on_blas(products_on_blas):
    """These tests are about the BLAS route (conftest's ``products_on_blas``)."""


@pytest.fixture
def seen(monkeypatch):
    """Thread counts NumPy's BLAS had inside each limited matmul call."""
    calls: list[list[int]] = []

    def spy(a, b, **kwargs):
        calls.append(numpy_blas_threads())
        return np.matmul(a, b, **kwargs)

    real_native = blas._run_native

    def native_spy(a, b, out, gemm_calls, starts):  # split pieces on numba's threads: one entry per piece
        calls.extend(numpy_blas_threads() for _ in range(len(starts) - 1))
        real_native(a, b, out, gemm_calls, starts)

    monkeypatch.setattr(blas, "_matmul", spy)
    monkeypatch.setattr(blas, "_run_native", native_spy)
    return calls


@pytest.fixture
def auto_env(monkeypatch):
    """No BLAS thread count in the environment (automatic mode then decides by the CPU count)."""
    for name in blas.ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def dot_module(m: int, k: int, n: int, dtype: str = "f32"):
    b = XlaBuilder("dot")
    b.dot(b.parameter(0, f"{dtype}[{m},{k}]"), b.parameter(1, f"{dtype}[{k},{n}]"))
    return b.build()


def other_count(before: list[int]) -> int:
    """A thread count different from BLAS's current one, so that setting it is observable."""
    return 2 if before and before[0] == 1 else 1


def test_numpy_blas_is_found():
    assert blas._SCOPE.controllers(), "threadpoolctl finds no BLAS library loaded by NumPy"
    assert all(n >= 1 for n in numpy_blas_threads())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_limit_inside_dot_and_restored(rng, seen, threads, dtype):
    before = numpy_blas_threads()
    a, b = rng.standard_normal((96, 80)).astype(dtype), rng.standard_normal((80, 70)).astype(dtype)
    exe = lowering.compile(dot_module(96, 80, 70, "f32" if dtype == np.float32 else "f64"), blas_threads=threads)
    (got,) = exe(a, b)
    assert seen == [[threads] * len(before)]
    assert numpy_blas_threads() == before
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        want = np.matmul(a, b)
    np.testing.assert_array_equal(got, want)  # bit for bit what BLAS gives at that thread count
    assert_close(got, np.asarray(jax.jit(lax.dot)(a, b)), atol=4 * 80 * np.finfo(dtype).eps * 16)


def test_batched_dot_general(rng, seen):
    before = numpy_blas_threads()
    threads = other_count(before)
    b = XlaBuilder("dg")
    b.dot_general(b.parameter(0, "f32[3,90,70]"), b.parameter(1, "f32[3,70,60]"), (([2], [1]), ([0], [0])))
    x, y = rng.standard_normal((3, 90, 70), np.float32), rng.standard_normal((3, 70, 60), np.float32)
    (got,) = lowering.compile(b.build(), blas_threads=threads)(x, y)
    assert seen == [[threads] * len(before)]
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        np.testing.assert_array_equal(got, np.matmul(x, y))


def test_narrow_floats_are_limited(rng, seen):
    # f16 dots multiply in f32 (a BLAS sgemm), so they take the limit too.
    before = numpy_blas_threads()
    threads = other_count(before)
    x, y = (rng.standard_normal(s).astype(np.float16) for s in ((70, 64), (64, 70)))
    (got,) = lowering.compile(dot_module(70, 64, 70, "f16"), blas_threads=threads)(x, y)
    assert seen == [[threads] * len(before)]
    assert got.dtype == np.float16


def test_convolution_honors_limit(rng, seen):
    before = numpy_blas_threads()
    threads = other_count(before)
    b = XlaBuilder("conv")
    b.conv(b.parameter(0, "f32[1,16,32,32]"), b.parameter(1, "f32[32,16,3,3]"), [1, 1], "VALID")
    x, w = rng.standard_normal((1, 16, 32, 32), np.float32), rng.standard_normal((32, 16, 3, 3), np.float32)
    (got,) = lowering.compile(b.build(), blas_threads=threads)(x, w)
    assert seen == [[threads] * len(before)]
    assert numpy_blas_threads() == before
    want = np.asarray(jax.jit(lambda p, q: lax.conv(p, q, (1, 1), "VALID"))(x, w))
    assert_close(got, want, atol=4 * 144 * float(np.finfo(np.float32).eps) * 16)


@pytest.mark.parametrize("shape,dtype", [((16, 16, 16), "f32"), ((64, 64, 64), "f32"), ((128, 128, 128), "s32")])
@pytest.mark.sample(2)
def test_matmuls_blas_never_threads_are_plain(seen, shape, dtype):
    # m*n*k <= 2**18 (OpenBLAS runs those on one thread anyway) and integer matmuls (no BLAS) take no limit.
    exe = lowering.compile(dot_module(*shape, dtype), blas_threads=1)
    np_dtype = np.float32 if dtype == "f32" else np.int32
    m, k, n = shape
    exe(np.ones((m, k), np_dtype), np.ones((k, n), np_dtype))
    assert seen == []


class CountingSetter:
    """Wraps a controller's set_num_threads, recording each outermost call (threadpoolctl's re-enters itself)."""

    def __init__(self, real, log: list):
        self.real, self.log, self.depth = real, log, 0

    def __call__(self, n):
        if self.depth == 0:
            self.log.append(n)
        self.depth += 1
        try:
            return self.real(n)
        finally:
            self.depth -= 1


def test_one_limit_per_call_and_check_in_per_matmul(rng, seen, monkeypatch):
    # Three dots in one program: the executable takes the limit once, each matmul only checks in.
    changes = []
    for c in blas._SCOPE.controllers():
        monkeypatch.setattr(c, "set_num_threads", CountingSetter(c.set_num_threads, changes))
    before = numpy_blas_threads()
    threads = other_count(before)
    b = XlaBuilder("chain")
    x, y = b.parameter(0, "f32[80,80]"), b.parameter(1, "f32[80,80]")
    b.dot(b.dot(b.dot(x, y), y), y)
    a = rng.standard_normal((80, 80), np.float32) * 0.1
    lowering.compile(b.build(), blas_threads=threads)(a, a)
    assert seen == [[threads] * len(before)] * 3
    assert changes == [threads] * len(before) + before  # set once, restored once
    assert numpy_blas_threads() == before


def test_kernel_outside_an_executable_limits_each_matmul(rng, seen):
    # Kernels called directly (constant folding) take the limit around the matmul itself.
    before = numpy_blas_threads()
    threads = other_count(before)
    module = dot_module(70, 70, 70)
    ctx = LoweringContext(module, blas_threads=threads)
    op = next(op for op in module.walk() if isinstance(op, DotOp))
    kernel = KERNELS[DotOp](op, ctx)
    a = rng.standard_normal((70, 70), np.float32)
    kernel(a, a)
    assert seen == [[threads] * len(before)]
    assert numpy_blas_threads() == before


def test_multi_device_restores_and_leaves_threadpoolctl_usable(rng, seen):
    # Two device threads run the dot at once: the count is set once and restored by whichever finishes last,
    # and the main thread can still set limits with threadpoolctl afterwards.
    before = numpy_blas_threads()
    threads = other_count(before)
    exe = lowering.compile(dot_module(90, 90, 90), num_replicas=2, blas_threads=threads)
    a = rng.standard_normal((90, 90), np.float32)
    exe([a, a], [a, a])
    assert seen == [[threads] * len(before)] * 2
    assert numpy_blas_threads() == before
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        assert numpy_blas_threads() == [threads] * len(before)
    assert numpy_blas_threads() == before


def test_automatic_policy(monkeypatch, auto_env):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    assert blas.resolve_blas_threads(None) == 1
    assert blas.resolve_split_workers(None) == 2  # one-thread BLAS calls, large products split over both CPUs
    monkeypatch.setattr(blas, "usable_cpus", lambda: 1)
    assert blas.resolve_blas_threads(None) == 1
    assert blas.resolve_split_workers(None) == 1
    monkeypatch.setattr(blas, "usable_cpus", lambda: 8)
    assert blas.resolve_blas_threads(None) is None  # the BLAS's own setting, untouched
    assert blas.resolve_split_workers(None) == 1
    assert blas.resolve_blas_threads(3) == 3  # explicit wins on any machine
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    assert [blas.resolve_split_workers(n) for n in (1, 2, 3)] == [1, 1, 1]  # an explicit count is never split


@pytest.mark.parametrize("name", ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_automatic_respects_environment(monkeypatch, auto_env, seen, name):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.setenv(name, "2")
    assert blas.resolve_blas_threads(None) is None
    assert blas.resolve_split_workers(None) == 1
    exe = lowering.compile(dot_module(80, 80, 80))
    exe(np.ones((80, 80), np.float32), np.ones((80, 80), np.float32))
    assert seen == []  # plain np.matmul: BLAS keeps the environment's count
    assert blas.resolve_blas_threads(1) == 1  # an explicit value still applies


def test_automatic_on_two_cpus_limits_to_one(monkeypatch, auto_env, seen):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    before = numpy_blas_threads()
    exe = lowering.compile(dot_module(80, 80, 80))
    exe(np.ones((80, 80), np.float32), np.ones((80, 80), np.float32))
    assert seen == [[1] * len(before)]


@pytest.mark.parametrize("bad", [0, -1, "x", "2", 1.5, 2.0, True, False, [1]])
def test_bad_values_raise(bad):
    with pytest.raises(ExecutionError, match="blas_threads"):
        lowering.compile(dot_module(2, 2, 2), blas_threads=bad)
    with pytest.raises(ExecutionError, match="blas_threads"):
        LoweringContext(dot_module(2, 2, 2), blas_threads=bad)


def test_limit_set_in_one_thread_restored_from_another():
    # The thread that restores need not be the one that set the limit (threadpoolctl lets only one thread
    # change OpenBLAS's count; the restoring thread claims that right, then gives it back).
    import threading

    before = numpy_blas_threads()
    threads = other_count(before)
    entered, done = threading.Event(), threading.Event()

    def setter():  # sets the limit and stays alive (threadpoolctl would hand a dead thread's right over)
        blas._SCOPE.enter(threads)
        entered.set()
        done.wait(10)

    worker = threading.Thread(target=setter)
    worker.start()
    entered.wait(10)
    try:
        assert numpy_blas_threads() == [threads] * len(before)
        with blas.BlasThreadLimit(threads + 5):  # nested: counts in, changes nothing
            assert numpy_blas_threads() == [threads] * len(before)
        blas._SCOPE.leave()
        assert numpy_blas_threads() == before
    finally:
        done.set()
        worker.join()
    observed = []

    def elsewhere():
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            observed.append(numpy_blas_threads())

    other = threading.Thread(target=elsewhere)
    other.start()
    other.join()
    assert observed == [[threads] * len(before)]
    assert numpy_blas_threads() == before


# ----------------------------------------------------------------------------
# Large products split over the CPUs (automatic mode on two-CPU machines)
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("batch,m,n,workers,want", [
    (1, 256, 1024, 2, (2, ((0, 512), (512, 1024)))),   # more columns: split the columns
    (1, 1024, 256, 2, (1, ((0, 512), (512, 1024)))),   # more rows: split the rows
    (1, 130, 100, 2, (1, ((0, 64), (64, 130)))),       # whole multiples of 64, the remainder last
    (1, 191, 191, 2, (1, ((0, 64), (64, 191)))),
    (32, 256, 256, 2, (0, ((0, 16), (16, 32)))),       # a batch: split the batch
    (3, 8, 8, 2, (0, ((0, 1), (1, 3)))),
    (1, 127, 127, 2, None),                             # no two pieces of 64
    (1, 4096, 1, 2, None),                              # matrix-vector: NumPy's gemv, never split
    (1, 1, 4096, 2, None),
    (1, 1024, 1024, 1, None),                           # one CPU
])
def test_split_pieces(batch, m, n, workers, want):
    assert blas._pieces(batch, m, n, workers) == want


def split_dot(shape_a, shape_b, dtype="f32", contracting=(1, 0)):
    """A dot_general module of the given operand shapes (batch dimension 0 when both are 3-d)."""
    b = XlaBuilder("split")
    x, y = b.parameter(0, f"{dtype}{list(shape_a)}".replace(" ", "")), b.parameter(1, f"{dtype}{list(shape_b)}".replace(" ", ""))
    if len(shape_a) == 3:
        b.dot_general(x, y, (([contracting[0] + 1], [contracting[1] + 1]), ([0], [0])))
    else:
        b.dot_general(x, y, (([contracting[0]], [contracting[1]]), ([], [])))
    return b.build()


@pytest.fixture(params=["numba", "python"])
def two_cpus(request, monkeypatch, auto_env):
    """The automatic policy of a two-CPU machine, whatever this machine has, with no split verified yet; the
    pieces on numba's threads (where it has a polling threading layer) or on Python worker threads. Returns
    which."""
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.setattr(blas, "_SPLIT_EXACT", {})
    if request.param == "python":
        monkeypatch.setattr(blas, "numba_threads_available", lambda: False)
    elif not workers.numba_threads_available():
        pytest.skip("numba's threading layer does not poll here (or the CPU is not x86-64): Python workers only")
    return request.param


@pytest.mark.parametrize("shape_a,shape_b,contracting", [
    ((256, 1024), (1024, 1024), (1, 0)),     # columns
    ((1024, 512), (512, 200), (1, 0)),       # rows
    ((333, 1000), (1000, 257), (1, 0)),      # odd sizes, a remainder piece, an edge column
    ((1000, 333), (1000, 257), (0, 0)),      # a transposed lhs view
    ((16, 256, 64), (16, 64, 512), (1, 0)),  # a batch
])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_split_matmul_is_bit_identical_to_one_thread(rng, seen, two_cpus, shape_a, shape_b, contracting, dtype):
    # On any CPU: split where the pieces give the whole product's bits, whole where the BLAS's kernels would not.
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x, y = rng.standard_normal(shape_a).astype(np_dtype), rng.standard_normal(shape_b).astype(np_dtype)
    module = split_dot(shape_a, shape_b, dtype, contracting)
    exe = lowering.compile(module)
    (got,) = exe(x, y)
    (whole,) = lowering.compile(module, blas_threads=1)(x, y)
    np.testing.assert_array_equal(got, whole)
    (verdict,) = blas._SPLIT_EXACT.values()  # checked once, on the first call
    seen.clear()
    (again,) = exe(x, y)
    np.testing.assert_array_equal(again, whole)
    assert len(seen) == (2 if verdict else 1)  # two pieces, or the whole product
    assert all(counts == [1] * len(numpy_blas_threads()) for counts in seen)  # each on one BLAS thread


def test_split_that_would_change_bits_stays_whole(rng, two_cpus, monkeypatch):
    # A BLAS whose pieces sum differently (simulated: the pieces are one ulp off) keeps the product whole.
    calls = []

    def off_by_one_ulp(a, b, **kwargs):
        calls.append(a.shape)
        out = kwargs.pop("out")
        out[...] = np.nextafter(np.matmul(a, b), np.inf)
        return out

    real_native = blas._run_native

    def native_off_by_one_ulp(a, b, out, gemm_calls, starts):
        calls.append(a.shape)
        real_native(a, b, out, gemm_calls, starts)
        out[...] = np.nextafter(out, np.inf)

    monkeypatch.setattr(blas, "_matmul", lambda a, b, **kwargs: off_by_one_ulp(a, b, **kwargs) if kwargs
                        else np.matmul(a, b))
    monkeypatch.setattr(blas, "_run_native", native_off_by_one_ulp)
    x = rng.standard_normal((512, 512), np.float32)
    exe = lowering.compile(dot_module(512, 512, 512))
    (got,) = exe(x, x + 1)
    assert list(blas._SPLIT_EXACT.values()) == [None]
    calls.clear()
    (again,) = exe(x, x + 1)
    assert calls == []
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        want = np.matmul(x, x + 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_uneven_cuts_are_tried_when_the_even_split_changes_bits():
    # Which cuts keep the whole product's bits depends on the BLAS's blocking: OpenBLAS 0.3.31 on an AMD EPYC
    # keeps them for a 256x1024x1024 f32 product cut at column 640 or row 192, not at the even column 512.
    plans = blas._candidate_plans(1, 256, 1024, 2)
    assert plans[0] == (2, ((0, 512), (512, 1024)))  # the even split first, then the most even cuts
    shares = [max(b[0][1] - b[0][0], b[1][1] - b[1][0]) / (256 if axis == 1 else 1024) for axis, b in plans]
    assert shares == sorted(shares) and max(shares) <= blas.SPLIT_MOST_UNEVEN
    assert (2, ((0, 640), (640, 1024))) in plans and (1, ((0, 192), (192, 256))) in plans
    assert blas._candidate_plans(4, 256, 256, 2) == [blas._pieces(4, 256, 256, 2)]  # a batch: the even split only

    a, b = np.ones((1, 256, 1024), np.float32), np.ones((1, 1024, 1024), np.float32)
    tried = []

    def run_split(x, y, plan):  # a BLAS whose pieces change the bits unless cut at column 640
        tried.append(plan)
        whole = np.matmul(x, y)
        return whole if plan == (2, ((0, 640), (640, 1024))) else np.nextafter(whole, np.inf)

    assert blas.exact_plan(a, b, plans, run_split) == (2, ((0, 640), (640, 1024)))
    assert tried == plans[:plans.index((2, ((0, 640), (640, 1024)))) + 1]  # in order, up to the first exact one
    assert blas.exact_plan(a, b, plans[:1], run_split) is None


def test_split_pieces_run_on_a_worker_thread(rng, two_cpus, monkeypatch):
    import threading

    threads = []

    def spy(a, b, **kwargs):
        threads.append(threading.get_ident())
        return np.matmul(a, b, **kwargs)

    real_native = blas._run_native
    native = []

    def native_spy(a, b, out, gemm_calls, starts):
        native.append(len(starts) - 1)
        real_native(a, b, out, gemm_calls, starts)

    monkeypatch.setattr(blas, "_matmul", spy)
    monkeypatch.setattr(blas, "_run_native", native_spy)
    x = rng.standard_normal((512, 512), np.float32)
    exe = lowering.compile(dot_module(512, 512, 512))
    exe(x, x + 1)
    if not all(blas._SPLIT_EXACT.values()):
        pytest.skip(f"this CPU's BLAS sums a 512x512x512 product differently in pieces: {blas._SPLIT_EXACT}")
    threads.clear()
    native.clear()
    exe(x, x + 1)
    if two_cpus == "numba":  # both pieces in one call of the compiled runner, which numba's threads share
        assert native == [2] and threads == []
    else:
        assert len(threads) == 2 and threads[0] == threading.get_ident() and threads[1] != threads[0]


def test_same_buffer_operands_are_not_split(rng, seen, two_cpus):
    # x @ x.T: NumPy computes it with syrk, which sums differently from the gemm of pieces; it stays whole.
    x = rng.standard_normal((512, 512), np.float32)
    (got,) = lowering.compile(split_dot((512, 512), (512, 512), "f32", (1, 1)))(x, x)
    assert len(seen) == 1 and not blas._SPLIT_EXACT
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        np.testing.assert_array_equal(got, np.matmul(x, x.T))


def test_small_products_are_not_split(seen, two_cpus):
    lowering.compile(dot_module(128, 128, 128))(np.ones((128, 128), np.float32), np.ones((128, 128), np.float32))
    assert len(seen) == 1 and not blas._SPLIT_EXACT  # 2**21 multiply-adds: one call


@pytest.mark.skipif(not lowering.runtime.denormals.flush_supported(), reason="the CPU's flush-to-zero mode cannot be set here")
@pytest.mark.parametrize("mode", ["flush", "keep"])
def test_split_pieces_compute_in_the_callers_denormal_mode(rng, two_cpus, mode):
    # Every product is ~1e-40, below f32's normal range: flushed to 0 under XLA's mode, kept under IEEE. The worker
    # thread's piece must follow the caller's mode as the calling thread's does.
    x = (rng.uniform(1, 2, (512, 512)) * 1e-20).astype(np.float32)
    module = dot_module(512, 512, 512)
    (got,) = lowering.compile(module, denormals=mode)(x, x)
    (whole,) = lowering.compile(module, denormals=mode, blas_threads=1)(x, x)
    np.testing.assert_array_equal(got, whole)
    assert (got == 0).all() if mode == "flush" else (got != 0).all()


@pytest.mark.parametrize("layout_a,layout_b", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F"), ("lead", "lead")])
@pytest.mark.parametrize("axis_shape", [
    (0, (3, 70, 40, 90)),    # batch pieces
    (1, (1, 200, 50, 70)),   # row pieces
    (2, (2, 70, 50, 200)),   # column pieces
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_gemm_calls_are_numpys_calls(rng, layout_a, layout_b, axis_shape, dtype):
    # Each piece is the gemm call NumPy's matmul makes for it, so it has that call's bits.
    if not workers.numba_threads_available() or blas.numpy_gemm_address(dtype) is None:
        pytest.skip("numba's threads or NumPy's gemm by address are not available here")
    axis, (batch, m, k, n) = axis_shape

    def stored(x, layout):
        if layout == "C":
            return np.ascontiguousarray(x)
        if layout == "F":
            return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 1, 2)), 1, 2)
        wide = np.zeros(x.shape[:2] + (x.shape[2] + 13,), x.dtype)  # rows further apart than their length
        wide[:, :, : x.shape[2]] = x
        return wide[:, :, : x.shape[2]]

    a = stored(rng.standard_normal((batch, m, k)).astype(dtype), layout_a)
    b = stored(rng.standard_normal((batch, k, n)).astype(dtype), layout_b)
    size = (batch, m, n)[axis]
    bounds = ((0, size // 3), (size // 3, 2 * size // 3), (2 * size // 3, size))
    calls = blas.native_gemm_calls(a, b, axis, bounds)
    assert calls is not None
    out = np.full((batch, m, n), np.nan, dtype)
    blas._run_native(a, b, out, *calls)
    want = np.empty_like(out)
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        for start, stop in bounds:  # (the whole product may sum differently: pieces cut off the BLAS's blocks)
            piece = (slice(None),) * axis + (slice(start, stop),)
            if axis == 0:
                np.matmul(a[piece], b[piece], out=want[piece])
            elif axis == 1:
                np.matmul(a[piece], b, out=want[piece])
            else:
                np.matmul(a, b[piece], out=want[piece])
    np.testing.assert_array_equal(out, want)


def test_native_gemm_calls_leave_unblasable_operands_to_numpy(rng):
    if not workers.numba_threads_available() or blas.numpy_gemm_address(np.float32) is None:
        pytest.skip("numba's threads or NumPy's gemm by address are not available here")
    a = rng.standard_normal((1, 64, 128)).astype(np.float32)[:, :, ::2]  # no unit stride: NumPy copies it
    b = rng.standard_normal((1, 64, 64)).astype(np.float32)
    assert blas.native_gemm_calls(a, b, 1, ((0, 32), (32, 64))) is None
