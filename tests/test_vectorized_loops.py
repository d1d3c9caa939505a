"""Sums XLA CPU leaves to LLVM's loop vectorizer (``lowering/kernels/vectorized_loops.py``): a transposed matrix
times a vector (``g.T @ x``, XLA's elemental dot in a loop fusion) bit for bit against jax.jit, through the
executor, in a compiled loop, and in row pieces."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.kernels import small_dot, vectorized_loops
from lowering.kernels.host import measured_host


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.itemsize}")


def _operands(k, m, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal((k, m)) * np.exp(rng.standard_normal((k, m)) * 3)).astype(dtype)
    x = rng.standard_normal((k, 1)).astype(dtype)
    return g, x


def _transposed_product(g, x):
    return g.T @ x


needs_host = pytest.mark.skipif(not measured_host(), reason="XLA's vectorized loops were measured on AVX-512 hosts")

# (K, M): the unrolled chain (up to 49, 59 for two rows), main loops of 2 and 4 parts unrolled (n <= 3) and not,
# vector epilogues of 4 and 8 lanes, the alternating scalar tails (K mod 16 or 32 below 4), the GEMV of K >= 4096.
SHAPES = [(2, 9), (49, 3), (49, 9), (59, 2), (50, 9), (51, 16), (52, 33), (57, 12), (60, 9), (63, 100), (64, 32),
          (66, 10), (67, 9), (80, 17), (84, 64), (92, 13), (96, 9), (99, 40), (128, 33), (131, 9), (162, 20),
          (257, 128), (1000, 11), (4095, 9), (4096, 64), (5000, 3)]


@needs_host
@pytest.mark.parametrize("k,m", SHAPES, ids=[f"K{k}-M{m}" for k, m in SHAPES])
def test_transposed_matrix_times_vector_bitwise_with_jax(k, m):
    g, x = _operands(k, m, k * 1000 + m)
    (got,) = lowering.compile(import_jax(_transposed_product, g, x))(g, x)
    assert np.array_equal(_bits(got), _bits(jax.jit(_transposed_product)(g, x)))


# M <= 8 (f32: interleaved loads): the chain limit (59 for M = 2), unrolled up to n = 14 / 11 / 10, the epilogue
# widths 2, 4 and 8 (8 for r >= 28 only with M = 5, 6), a loop of 127 iterations.
SHAPES_FEW_ROWS = [(59, 2), (60, 2), (480, 2), (481, 2), (50, 3), (70, 4), (100, 4), (384, 4), (385, 3), (64, 8),
                   (352, 5), (353, 8), (92, 5), (92, 7), (4095, 6), (4095, 8)]


@needs_host
@pytest.mark.parametrize("k,m", SHAPES_FEW_ROWS, ids=[f"K{k}-M{m}" for k, m in SHAPES_FEW_ROWS])
def test_few_rows_bitwise_with_jax(k, m):
    g, x = _operands(k, m, k * 1000 + m + 1)
    (got,) = lowering.compile(import_jax(_transposed_product, g, x))(g, x)
    assert np.array_equal(_bits(got), _bits(jax.jit(_transposed_product)(g, x)))


# f64: 4 lanes; unrolled and reassociated up to 7 iterations of 16; the copied transpose from K = 2048.
SHAPES_F64 = [(49, 2), (50, 9), (63, 10), (64, 16), (80, 17), (127, 33), (128, 9), (131, 64), (2047, 9), (2048, 12)]


@needs_host
@pytest.mark.parametrize("k,m", SHAPES_F64, ids=[f"K{k}-M{m}" for k, m in SHAPES_F64])
def test_f64_transposed_matrix_times_vector_bitwise_with_jax(k, m):
    g, x = _operands(k, m, k * 1000 + m, np.float64)
    (got,) = lowering.compile(import_jax(_transposed_product, g, x))(g, x)
    assert np.array_equal(_bits(got), _bits(jax.jit(_transposed_product)(g, x)))


@needs_host
def test_the_order_is_the_elemental_dots_only_where_replayed():
    """f64 with ``M <= 8`` beyond the unrolled chain keeps its earlier order (not identified); K >= 4096 is the
    GEMV's."""
    order = small_dot.small_dot_order(1, 9, 64, 1, np.float32, 32 | small_dot.LHS_TRANSPOSED)
    assert order & small_dot.ELEMENTAL_DOT and (order >> small_dot.CHUNK_SHIFT) & 0xFFFFF == 9
    assert small_dot.small_dot_order(1, 9, 5000, 1, np.float32, 32 | small_dot.LHS_TRANSPOSED) == small_dot.ROW_TILES
    assert vectorized_loops.is_replayed(8, 50, 4) and vectorized_loops.is_replayed(2, 60, 4)
    assert not vectorized_loops.is_replayed(8, 50, 8) and vectorized_loops.is_replayed(8, 49, 8)
    assert not vectorized_loops.is_replayed(2, 50, 8) and vectorized_loops.is_replayed(9, 50, 8)


@needs_host
def test_row_pieces_sum_each_row_as_the_whole_product():
    """A piece of rows keeps the whole product's row count (the loops depend on it)."""
    g, x = _operands(300, 40, 7)
    order = small_dot.small_dot_order(1, 40, 300, 1, np.float32, 32 | small_dot.LHS_TRANSPOSED)
    a = np.ascontiguousarray(g.T)[None]
    whole = small_dot.small_matmul(order, 1)(a, x[None])
    kernel = small_dot.order_kernel(order)
    pieces = np.empty_like(whole)
    for s, e in ((0, 5), (5, 40)):
        kernel(np.ascontiguousarray(a[:, s:e]), x[None], pieces[:, s:e], small_dot.piece_order(order, s, e))
    assert np.array_equal(_bits(whole), _bits(pieces))
    assert np.array_equal(_bits(whole[0]), _bits(jax.jit(_transposed_product)(g, x)))


@needs_host
def test_in_a_loop_bitwise_with_jax():
    """The product in a while loop's body, on the loop's carry (interpreted and compiled loops call the same
    kernel)."""
    g, x = _operands(64, 64, 3)
    g = g * np.float32(0.01)

    def loop(g, x):
        return jax.lax.fori_loop(0, 30, lambda i, c: jnp.tanh(g.T @ c), x)

    ref = jax.jit(loop)(g, x)
    for loops in ("never", "auto"):
        exe = lowering.compile(import_jax(loop, g, x), loop_compilation=loops)
        for _ in range(3):
            (got,) = exe(g, x)
        assert np.array_equal(_bits(got), _bits(ref)), loops


def _cross_entropy_mean(logits, labels):
    """optax's ``softmax_cross_entropy_with_integer_labels(logits, labels).mean()``, written out."""
    label_logits = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - label_logits)


# (K, C): chains (K 3, 9, 15), one vector (4, 8; 2 with more than 32 classes), 8 and 4 lanes with tails, the
# classes' choice at 28-31 rows, windows (40), YNNPACK's row sums (K * C >= 4096).
LOSSES = [(3, 10), (4, 3), (8, 10), (2, 40), (2, 10), (9, 100), (16, 2), (19, 10), (20, 3), (23, 100), (24, 10),
          (27, 2), (28, 3), (28, 10), (30, 100), (31, 7), (32, 10), (40, 10), (50, 100)]


@needs_host
@pytest.mark.parametrize("k,c", LOSSES, ids=[f"K{k}-C{c}" for k, c in LOSSES])
@pytest.mark.sample(6)
def test_gathered_loss_mean_bitwise_with_jax(k, c):
    """The mean over K of a softmax cross-entropy with integer labels: its loop body (a gather, exp and log) is too
    large for LLVM to unroll, so its vectorizer sums it (lowering.kernels.reduction.gathered_loss_lanes)."""
    rng = np.random.default_rng(k * 1000 + c)
    for _ in range(3):
        logits = (rng.standard_normal((k, c)) * 3).astype(np.float32)
        labels = rng.integers(0, c, k).astype(np.int32)
        (got,) = lowering.compile(import_jax(_cross_entropy_mean, logits, labels))(logits, labels)
        assert _bits(got) == _bits(jax.jit(_cross_entropy_mean)(logits, labels))
