"""lowering.compile(..., blas_threads=...): the BLAS thread count of the float matmuls (lowering/blas.py).

The limit is observed from inside the kernels' matmul (``lowering.blas._matmul``
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
from lowering import blas
from lowering.executor import LoweringContext
from lowering.registry import KERNELS
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError
from xla_dialect.ops.linalg import DotOp

from helpers import assert_close


def numpy_blas_threads() -> list[int]:
    """Thread counts of NumPy's BLAS libraries, as threadpoolctl reports them."""
    paths = {c.filepath for c in blas._SCOPE.controllers()}
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["filepath"] in paths]


@pytest.fixture
def seen(monkeypatch):
    """Thread counts NumPy's BLAS had inside each limited matmul call."""
    calls: list[list[int]] = []

    def spy(a, b, **kwargs):
        calls.append(numpy_blas_threads())
        return np.matmul(a, b, **kwargs)

    monkeypatch.setattr(blas, "_matmul", spy)
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


@pytest.fixture
def two_cpus(monkeypatch, auto_env):
    """The automatic policy of a two-CPU machine, whatever this machine has, with no split verified yet."""
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.setattr(blas, "_SPLIT_EXACT", {})


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

    monkeypatch.setattr(blas, "_matmul", lambda a, b, **kwargs: off_by_one_ulp(a, b, **kwargs) if kwargs
                        else np.matmul(a, b))
    x = rng.standard_normal((512, 512), np.float32)
    exe = lowering.compile(dot_module(512, 512, 512))
    (got,) = exe(x, x + 1)
    assert list(blas._SPLIT_EXACT.values()) == [False]
    calls.clear()
    (again,) = exe(x, x + 1)
    assert calls == []
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        want = np.matmul(x, x + 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_split_pieces_run_on_a_worker_thread(rng, two_cpus, monkeypatch):
    import threading

    threads = []

    def spy(a, b, **kwargs):
        threads.append(threading.get_ident())
        return np.matmul(a, b, **kwargs)

    monkeypatch.setattr(blas, "_matmul", spy)
    x = rng.standard_normal((512, 512), np.float32)
    exe = lowering.compile(dot_module(512, 512, 512))
    exe(x, x + 1)
    if not all(blas._SPLIT_EXACT.values()):
        pytest.skip(f"this CPU's BLAS sums a 512x512x512 product differently in pieces: {blas._SPLIT_EXACT}")
    threads.clear()
    exe(x, x + 1)
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


@pytest.mark.skipif(not lowering.denormals.flush_supported(), reason="the CPU's flush-to-zero mode cannot be set here")
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
