"""XLA CPU's f32 ``x.T @ g`` (Eigen's tensor contraction over oneDNN's sgemm, ``lowering/kernels/eigen_dots.py``):
the plan of the measured shapes, and the same bits as jax.jit as a product, as jax's gradient writes it, in pieces on
threads and inside compiled loops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from lowering.kernels import eigen_dots, small_dot
from lowering.runtime.workers import usable_cpus

_ON_MEASURED_HOST = eigen_dots.measured_eigen_host() and usable_cpus() <= eigen_dots.MEASURED_CPUS
_HOST = pytest.mark.skipif(not _ON_MEASURED_HOST, reason="the plans were measured on AVX-512 hosts whose cache sizes "
                           "Eigen's query is known for (Intel; AMD with a 48 KiB L1 and a 1 MiB L2), with 1 or 2 "
                           "CPUs: elsewhere x.T @ g keeps the BLAS route")
_INTEL_XEON_CACHES = (48 * 1024, 2048 * 1024, 300 * 1024 * 1024)  # (a 2-core Xeon VM: 48 KiB, 2 MiB, 300 MiB)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def _operands(b, i, o, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((b, i)) * np.exp2(rng.integers(-12, 12, (b, i)))).astype(np.float32)
    g = rng.standard_normal((b, o)).astype(np.float32)
    return x, g


@pytest.mark.parametrize("shape,cpus,slices", [
    ((2048, 784, 512), 2, ((2048, 296, 0),)),  # par: six K blocks of 296 and one of 272
    ((2048, 512, 49), 2, ((2048, 296, eigen_dots.LAST_COLUMN),)),  # O mod 48 = 1: oneDNN's gemv_t
    ((2048, 49, 512), 2, ((2048, 296, eigen_dots.LAST_ROW),)),  # I mod 24 = 1: its gemv_n
    ((2956, 901, 7), 2, ((1480, 296, 0), (1476, 296, 0))),  # sharded by the inner dimension
    ((769, 20, 20), 2, ((769, 384, 0),)),  # one thread: K blocks of 384, 384 and 1
    ((128, 64, 32), 2, ((128, 128, 0),)),
    ((2048, 784, 512), 1, ((2048, 512, 0),)),  # one CPU: the one-thread blocks (at most 608)
    ((256, 1024, 49), 1, ((256, 256, 0),)),  # (blocks of 49 with the 1 MiB L2)
])
def test_plans_of_measured_shapes(shape, cpus, slices):
    """Block sizes as oneDNN's verbose log printed them for these shapes on the AMD host (see the module
    docstring)."""
    b, i, o = shape
    assert eigen_dots.contraction_plan(b, i, o, cpus, eigen_dots.MEASURED_AMD_CACHES) == slices


@pytest.mark.parametrize("shape,cpus,slices", [
    ((256, 1024, 49), 1, ((256, 256, eigen_dots.LAST_COLUMN),)),  # sgemm calls 1024x256:256x48 and 1024x256:256x1
    ((2048, 784, 512), 1, ((2048, 512, 0),)),  # four K blocks of 512 (I in blocks of 408 and 376)
    ((2048, 784, 512), 2, ((2048, 296, 0),)),  # six K blocks of 296 and one of 272
])
def test_plans_with_an_intel_hosts_caches(shape, cpus, slices):
    """The same heuristics with the cache sizes Eigen reads on a Xeon (CPUID leaf 4: a 2 MiB L2): the edge block of
    one column that ``ONEDNN_VERBOSE=2`` printed there (taskset to one CPU)."""
    b, i, o = shape
    assert eigen_dots.contraction_plan(b, i, o, cpus, _INTEL_XEON_CACHES) == slices


def test_cache_sizes_eigen_reads(monkeypatch):
    """Intel: Linux's sizes (both read CPUID leaf 4); AMD: the measured host's only; others: not known."""
    sys_sizes = {1: 48 * 1024, 2: 2048 * 1024, 3: 300 * 1024 * 1024}
    monkeypatch.setattr(eigen_dots, "_sys_cache_sizes", lambda: sys_sizes)
    for vendor, expected in [("GenuineIntel", _INTEL_XEON_CACHES), ("AuthenticAMD", None), ("", None)]:
        monkeypatch.setattr(eigen_dots.host, "host_properties", lambda vendor=vendor: {"vendor": vendor})
        eigen_dots.eigen_cache_sizes.cache_clear()
        assert eigen_dots.eigen_cache_sizes() == expected, vendor
    sys_sizes[2] = 1024 * 1024
    monkeypatch.setattr(eigen_dots.host, "host_properties", lambda: {"vendor": "AuthenticAMD"})
    eigen_dots.eigen_cache_sizes.cache_clear()
    assert eigen_dots.eigen_cache_sizes() == eigen_dots.MEASURED_AMD_CACHES
    eigen_dots.eigen_cache_sizes.cache_clear()


def test_onednn_cuts_blocks_longer_than_384():
    """384 terms while 768 or more remain, else halves (the larger first); each of Eigen's blocks on its own."""
    assert list(np.diff(eigen_dots._chunk_bounds(0, 769, 769))) == [384, 193, 192]
    assert list(np.diff(eigen_dots._chunk_bounds(0, 1000, 600))) == [300, 300, 200, 200]
    assert list(np.diff(eigen_dots._chunk_bounds(10, 1800, 2000))) == [384, 384, 384, 319, 319]
    assert list(np.diff(eigen_dots._chunk_bounds(0, 769, 384))) == [384, 384, 1]


def test_which_products_are_eigens():
    assert eigen_dots.is_eigen_product(40, 5, 9)
    assert not eigen_dots.is_eigen_product(20000, 2, 2)  # XLA's naive loop
    assert not eigen_dots.is_eigen_product(100, 3, 3)
    assert not eigen_dots.is_eigen_product(1, 30, 40)  # a multiply
    assert eigen_dots.contraction_order(2048, 784, 512, 4) is None  # (not measured with more CPUs)


SHAPES = [(2048, 784, 512), (2048, 512, 10), (2048, 512, 49), (2048, 49, 512), (64, 700, 64), (128, 64, 32),
          (769, 20, 20), (2956, 901, 7), (5000, 32, 10), (414, 4, 257), (609, 16, 417), (41, 186, 923),
          (4096, 8, 4), (45, 15, 21)]


@_HOST
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_products_bitwise_with_jax(shape):
    b, i, o = shape
    x, g = _operands(b, i, o, seed=b + i + o)
    fn = lambda x, g: jnp.dot(x.T, g)  # noqa: E731
    (got,) = lowering.compile(import_jax(fn, x, g))(x, g)
    assert np.array_equal(_bits(got), _bits(jax.jit(fn)(x, g)))


@_HOST
@pytest.mark.parametrize("shape", [(2048, 512, 49), (2048, 49, 512), (300, 33, 97), (100, 30, 20)],
                         ids=["49 outputs", "49 inputs", "(300, 33, 97)", "(100, 30, 20)"])
@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.sample(3)
def test_gradients_bitwise_with_jax(shape, mode):
    """jax's gradient of ``x @ w`` is ``transpose(dot_general(g, x))``: XLA folds the transpose into the dot by
    swapping its operands, so Eigen's edge blocks are those of ``x.T @ g``; interpreted and compiled alike."""
    b, i, o = shape
    rng = np.random.default_rng(b * o)
    w = (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)
    x = rng.standard_normal((b, i)).astype(np.float32)
    y = rng.standard_normal((b, o)).astype(np.float32)

    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    exe = lowering.compile(import_jax(jax.grad(loss), w, x, y), fusion=mode, loop_compilation=mode)
    (got,) = exe(w, x, y)
    assert np.array_equal(_bits(got), _bits(jax.jit(jax.grad(loss))(w, x, y)))


@_HOST
def test_a_transpose_with_other_users_is_not_folded():
    """Only a transpose that is the dot's one user is folded (measured): with another user the dot is computed as
    written."""
    x, g = _operands(2048, 512, 49, seed=3)
    dims = (((0,), (0,)), ((), ()))
    fn = lambda g, x: (lambda r: (r.T, r * 2))(lax.dot_general(g, x, dims))  # noqa: E731
    got = lowering.compile(import_jax(fn, g, x))(g, x)
    for a, b in zip(got, jax.jit(fn)(g, x)):
        assert np.array_equal(_bits(a), _bits(b))


@_HOST
@pytest.mark.parametrize("swapped", [False, True], ids=["x.T @ g", "g.T @ x"])
def test_row_pieces_on_threads_give_the_same_bits(swapped):
    """A product cut in row pieces (two CPUs): the rule of the product's last row holds in the last piece only."""
    b, i, o = (2048, 512, 49) if swapped else (2048, 49, 512)
    x, g = _operands(b, i, o, seed=4)
    m, n = (o, i) if swapped else (i, o)
    a = np.ascontiguousarray((g if swapped else x).T)[None]
    rhs = (x if swapped else g)[None]
    order = eigen_dots.contraction_order(b, m, n, usable_cpus(), swapped)
    assert order & (eigen_dots.LAST_COLUMN | eigen_dots.LAST_ROW) << 28  # (an edge in the last row or column)
    whole = small_dot.small_matmul(order)(a, rhs)
    pieces = small_dot.small_matmul(order, workers=2)(a, rhs)
    assert np.array_equal(_bits(whole), _bits(pieces))


@_HOST
def test_products_in_a_compiled_loop_bitwise_with_jax():
    """SGD steps of a linear model in a fori_loop: the weight gradient in the compiled loop is Eigen's too."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 33)).astype(np.float32)
    y = rng.standard_normal((300, 49)).astype(np.float32)
    w0 = np.zeros((33, 49), np.float32)

    def train(w, x, y):
        def step(_, w):
            return w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)

        return lax.fori_loop(0, 30, step, w)

    want = jax.jit(train)(w0, x, y)
    for mode in ("never", "always"):
        (got,) = lowering.compile(import_jax(train, w0, x, y), loop_compilation=mode)(w0, x, y)
        assert np.array_equal(_bits(got), _bits(want)), mode
