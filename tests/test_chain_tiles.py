"""Register-tiled products in YNNPACK's order (``lowering/kernels/chain_tiles.py``): the same bits as the order's
element-by-element definition, and as jax.jit on large products that used to run on BLAS."""

from __future__ import annotations

import jax
import numba
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.kernels import small_dot
from lowering.kernels.chain_tiles import lane_product
from lowering.runtime.loop_runtime import fused_multiply_add as fma


@numba.njit(cache=True)
def _reference(a, b, out, chunk, width):
    """The order, one element at a time: lanes of ``K`` in chunks, the ``K mod width`` tail last."""
    m, k = a.shape
    n = b.shape[1]
    whole = k - k % width
    step = chunk if chunk else max(whole, 1)
    zero = a.dtype.type(0)
    for i in range(m):
        for j in range(n):
            total, first = zero, True
            for s in range(0, whole, step):
                lanes = np.zeros(4, a.dtype)
                for p in range(s, min(whole, s + step)):
                    lanes[p % width] = fma(a[i, p], b[p, j], lanes[p % width])
                t = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) if width == 4
                     else lanes[0] + lanes[1] if width == 2 else lanes[0])
                total, first = (t if first else t + total), False
            if whole < k:
                lanes = np.zeros(4, a.dtype)
                for p in range(whole, k):
                    lanes[p - whole] = fma(a[i, p], b[p, j], zero)
                t = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) if width == 4
                     else lanes[0] + lanes[1] if width == 2 else lanes[0])
                total = t if first else t + total
            out[i, j] = total


def _bits(a):
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("shape", [(8, 16, 32, 0), (7, 13, 45, 0), (64, 785, 130, 512), (37, 102, 70, 32),
                                   (4, 3, 32, 0), (9, 2, 17, 0), (12, 64, 48, 16), (5, 1, 40, 0),
                                   (3, 20, 70, 0), (1, 9, 40, 0),  # (fewer rows than a tile: edges only)
                                   # narrow products: one-vector and half-vector tiles (16 / 8 f32 columns, 8 / 4 f64)
                                   (33, 27, 16, 0), (16, 50, 8, 16), (20, 9, 24, 0), (12, 30, 4, 8), (8, 40, 12, 0)])
@pytest.mark.sample(4)
def test_tiles_give_the_orders_bits(shape, width, dtype):
    m, k, n, chunk = shape
    rng = np.random.default_rng(m * k + n)
    a = (rng.standard_normal((m, k)) * np.exp(rng.standard_normal((m, k)) * 3)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    got, want = np.empty((m, n), dtype), np.empty((m, n), dtype)
    lane_product(a, b, got, 0, m, 0, n, chunk, width)
    _reference(a, b, want, chunk, width)
    assert np.array_equal(_bits(got), _bits(want))


def test_an_empty_contraction_gives_zeros():
    a, b, out = np.ones((6, 0), np.float32), np.ones((0, 40), np.float32), np.full((6, 40), 7, np.float32)
    lane_product(a, b, out, 0, 6, 0, 40, 0, 1)
    assert not out.any()


def test_pieces_on_threads_give_the_same_bits():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((1, 300, 700)).astype(np.float32), rng.standard_normal((1, 700, 260)).astype(np.float32)
    order = small_dot.small_dot_order(1, 300, 700, 260, np.float32)
    if order is None:
        pytest.skip("not a host with YNNPACK's measured AVX-512 kernels: products run on BLAS")
    whole = small_dot.small_matmul(order)(a, b)
    pieces = small_dot.small_matmul(order, workers=2)(a, b)
    assert np.array_equal(_bits(whole), _bits(pieces))


@pytest.mark.parametrize("batch", [1, 3], ids=["row pieces", "batch pieces"])
def test_pieces_call_the_kernel_at_its_address_with_the_whole_products_bits(batch):
    """small_dot_pieces calls the order's kernel's machine code at its address (loop_runtime.call_compiled: linking
    a copy of it made the pieces compile for 36 s per element type on a cold cache); row and batch pieces give the
    bits of the whole product."""
    from lowering.runtime.loop_runtime import native_address

    rng = np.random.default_rng(batch)
    a, b = rng.standard_normal((batch, 90, 130)).astype(np.float32), rng.standard_normal((batch, 130, 70)).astype(np.float32)
    order = small_dot.small_dot_order(batch, 90, 130, 70, np.float32)
    if order is None:
        pytest.skip("not a host with YNNPACK's measured AVX-512 kernels: products run on BLAS")
    whole = small_dot.small_matmul(order)(a, b)
    bounds = np.array([0, 36, 90] if batch == 1 else [0, 1, 3], np.int64)
    pieces = np.full_like(whole, np.nan)
    small_dot.small_dot_pieces(a, b, pieces, order, batch > 1, bounds,
                               native_address(small_dot.order_kernel(order), a, b, pieces, order))
    assert np.array_equal(_bits(whole), _bits(pieces))


LARGE = [((2048, 784, 512), False), ((256, 1024, 1024), True), ((300, 700, 260), False), ((64, 2000, 96), True),
         ((192, 898, 812), False), ((679, 8, 1304), False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,transposed", LARGE, ids=[f"{s}{' wT' if t else ''}" for s, t in LARGE])
@pytest.mark.sample(4)
def test_large_products_bitwise_with_jax(shape, transposed, dtype):
    """Products of more than 2^18 multiply-adds, formerly on BLAS (OpenBLAS's order), now in YNNPACK's."""
    m, k, n = shape
    if small_dot.small_dot_order(1, m, k, n, dtype) is None:
        pytest.skip("not a host with YNNPACK's measured AVX-512 kernels: products run on BLAS")
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = (rng.standard_normal((n, k) if transposed else (k, n)) * 0.05).astype(dtype)
    fn = (lambda x, w: x @ w.T) if transposed else (lambda x, w: x @ w)
    (got,) = lowering.compile(import_jax(fn, x, w))(x, w)
    assert np.array_equal(_bits(np.asarray(got)), _bits(np.asarray(jax.jit(fn)(x, w))))


def test_batched_products_bitwise_with_jax():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 256, 512)).astype(np.float32), rng.standard_normal((4, 512, 256)).astype(np.float32)
    fn = jax.numpy.matmul
    (got,) = lowering.compile(import_jax(fn, x, y))(x, y)
    assert np.array_equal(_bits(np.asarray(got)), _bits(np.asarray(jax.jit(fn)(x, y))))
