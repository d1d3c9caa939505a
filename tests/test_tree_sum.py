"""Float sums in XLA CPU's tree-reduction order (lowering/kernels/tree_sum.py), in every path, bit for bit.

The definition is checked against a reference written from the rewrite's description (a reduce-window of windows
of 32 per reduced dimension, padded SAME, then the reduce, repeated), and the executor's sums against jax.jit:
straight-line (the interpreter's kernel), fused into element-wise loops (rows of a fused group), in compiled
while loops, all four configurations giving the same bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from helpers import sweep
from lowering.kernels.tree_sum import grid_order, reduced_dims, xla_sum

CONFIGURATIONS = {
    "interpreter": {"fusion": "never", "loop_compilation": "never"},
    "fused": {"fusion": "always", "loop_compilation": "never"},
    "compiled loops": {"fusion": "never", "loop_compilation": "always"},
    "fused and compiled loops": {"fusion": "always", "loop_compilation": "always"},
}


def _shape_id(shape) -> str:
    return "x".join(map(str, shape))


def _dtype_id(dtype) -> str:
    return np.dtype(dtype).name


def rewrite_reference(x: np.ndarray, axes, init) -> np.ndarray:
    """XLA's TreeReductionRewriter applied until no reduced dimension exceeds 32, each reduce-window and the last
    reduce folding ``init`` and then their elements in row-major order (padding, -0, adds nothing)."""
    axes = sorted(axes)
    while any(x.shape[d] > 32 for d in axes):
        pads, split = [], []
        for d in range(x.ndim):
            n = x.shape[d]
            w = min(n, 32) if d in axes else 1
            count = -(-n // w)
            pad = count * w - n
            pads.append((pad // 2, pad - pad // 2))
            split += [count, w]
        windows = np.pad(x, pads, constant_values=-0.0).reshape(split)
        windows = np.transpose(windows, [2 * d for d in range(x.ndim)] + [2 * d + 1 for d in range(x.ndim)])
        windows = windows.reshape(windows.shape[:x.ndim] + (-1,))
        acc = np.full(windows.shape[:-1], init, x.dtype)
        for i in range(windows.shape[-1]):
            acc = acc + windows[..., i]
        x = acc
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = np.transpose(x, kept + axes).reshape([x.shape[d] for d in kept] + [-1])
    acc = np.full(rows.shape[:-1], init, x.dtype)
    for i in range(rows.shape[-1]):
        acc = acc + rows[..., i]
    return acc


def bits(a) -> list[str]:
    a = np.atleast_1d(np.asarray(a))
    return [hex(v) for v in a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize]).ravel()]


def mixed(rng, shape, dtype) -> np.ndarray:
    """Values over six decades of magnitude and both signs: another summation order shows in the last bits."""
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_definition_is_the_rewrite(dtype):
    rng = np.random.default_rng(11)
    for _ in range(120):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(1, 70, rank))
        if np.prod(shape) >= 4096:
            continue  # (YNNPACK's domain: reduced_dims flattens there)
        axes = tuple(sorted(rng.choice(rank, int(rng.integers(1, rank + 1)), replace=False).tolist()))
        if grid_order(shape, axes, dtype):
            continue  # (XLA's loops vectorize these: tree_sum.grid_sum, test_full_sums_over_32_in_xla_windows...)
        init = dtype(0) if rng.random() < 0.7 else dtype(rng.choice([1.5, -0.0, -2.25]))
        x = mixed(rng, shape, dtype)
        assert bits(xla_sum(x, axes, init, np.dtype(dtype))) == bits(rewrite_reference(x, axes, init)), (shape, axes)


def test_a_nonzero_initial_value_is_added_once_per_window_as_xla_does():
    # 100 elements: four windows (padding 14 + 14) and the last reduce, each starting from the init value.
    x = np.ones(100, np.float32)
    fn = lambda v: lax.reduce(v, np.float32(1.0), lax.add, (0,))  # noqa: E731
    assert float(jax.jit(fn)(x)) == 105.0
    assert float(lowering.compile(import_jax(fn, x))(x)[0]) == 105.0


def test_yynpack_sized_sums_without_a_plan_are_windows_over_all_reduced_elements():
    assert list(reduced_dims((8, 32, 32, 64), (0, 1, 2))) == [8192]
    assert list(reduced_dims((50, 40), (0, 1))) == [50, 40]
    assert list(reduced_dims((3, 1, 40), (1, 2))) == [40]


# Sums XLA CPU computes in the rewrite's order (measured bitwise): one reduced dimension of any rank, and several
# dimensions where its loop vectorizer keeps the order (docs in lowering/kernels/tree_sum.py).
SHAPES = [
    ((2,), (0,)), ((31,), (0,)), ((33,), (0,)), ((100,), (0,)), ((1000,), (0,)), ((1025,), (0,)), ((4095,), (0,)),
    ((50, 40), (1,)), ((50, 40), (0,)), ((7, 100), (1,)), ((100, 7), (0,)), ((300, 10), (1,)),
    ((3, 40, 35), (1,)), ((3, 40, 35), (2,)), ((30, 4, 33), (0,)), ((3, 40, 35), (1, 2)),
    ((5, 7, 11), (0, 2)), ((16, 16), (0, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axes", SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_sums_are_xla_bits(shape, axes, dtype):
    # (tests/conftest.py runs jax in x64 mode: f64 arrays stay f64)
    x = mixed(np.random.default_rng(abs(hash((shape, axes))) % 2**32), shape, dtype)
    x.flat[0] = -0.0
    fn = lambda v: jnp.sum(v, axis=axes)  # noqa: E731
    want = bits(jax.jit(fn)(x))
    got = bits(lowering.compile(import_jax(fn, x), fusion="never", loop_compilation="never")(x)[0])
    assert got == want


@pytest.mark.parametrize("width", [7, 24, 40, 100])
@pytest.mark.sample(2)
def test_every_configuration_sums_as_xla_in_loops_and_fused_rows(width):
    # A row sum fused with its element-wise producers and consumers (the group's rows), a 1-d sum and a column
    # sum in a fori_loop body past the compile threshold: the same bits in the four configurations, and
    # jax.jit's.
    rng = np.random.default_rng(width)
    x = mixed(rng, (6, width), np.float32)

    def fn(v):
        centred = v - jnp.sum(jnp.exp(v * 1e-3), axis=-1, keepdims=True)

        def body(i, carry):
            total, columns = carry
            scaled = v * (i + 1).astype(jnp.float32)  # (a product: contracted into the column sums)
            return total + jnp.sum(v[2] - i.astype(jnp.float32)), columns + jnp.sum(scaled, axis=0)

        total, columns = lax.fori_loop(0, 30, body, (jnp.float32(0), jnp.zeros(width, jnp.float32)))
        return centred, total, columns

    want = [bits(r) for r in jax.jit(fn)(x)]
    module = import_jax(fn, x)
    for name, options in CONFIGURATIONS.items():
        got = [bits(r) for r in lowering.compile(module, **options)(x)]
        assert got == want, name


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", ["rows", "columns", "1-d", "times a constant", "two axes", "also returned"])
def test_sums_of_products_are_contracted_as_xla_does(name, dtype):
    # XLA fuses a multiply into the reduce summing it (reduced dimensions of at most 32) and LLVM contracts each
    # step into a fused multiply-add; a product also returned is rounded (passes/fma_contraction.py).
    fn, shape = {
        "rows": (lambda x, y: jnp.sum(x * y, axis=-1), (8, 20)),
        "columns": (lambda x, y: jnp.sum(x * y, axis=0), (20, 8)),
        "1-d": (lambda x, y: jnp.sum(x * y), (30,)),
        "times a constant": (lambda x, y: jnp.sum(x * 3.3, axis=-1) + y[:, 0], (8, 20)),
        "two axes": (lambda x, y: jnp.sum(x * y, axis=(0, 2)), (5, 6, 11)),
        "also returned": (lambda x, y: (jnp.sum(x * y, axis=-1), x * y), (8, 20)),
    }[name]
    rng = np.random.default_rng(len(name))
    x, y = mixed(rng, shape, dtype), mixed(rng, shape, dtype)
    want = [bits(r) for r in jax.tree_util.tree_leaves(jax.jit(fn)(x, y))]
    module = import_jax(fn, x, y)
    for configuration, options in CONFIGURATIONS.items():
        assert [bits(r) for r in lowering.compile(module, **options)(x, y)] == want, configuration
    rounded = [bits(r) for r in lowering.compile(module, fma_contraction=False)(x, y)]
    if dtype == np.float32 and name not in ("also returned", "1-d"):
        assert rounded != want  # (the test tells the two apart: several f32 sums)


@pytest.mark.parametrize("rows, length, dtype", sweep(
    [(4, 6), (12, 5), (16, 7), (17, 6), (44, 5), (50, 8), (9, 6), (20, 3)], [np.float32, np.float64],
    ids=[_shape_id, _dtype_id], keep=4))
def test_rows_of_five_to_eight_products_round_where_xla_vectorizes(rows, length, dtype):
    # XLA unrolls rows of 5-8 products of two arguments and LLVM vectorizes the loop over the rows: those rows
    # add rounded products, the rows after the last whole vector contracted ones (rounded_product_rows); computed
    # factors keep the loop scalar (all contracted). Straight-line and in a compiled loop.
    rng = np.random.default_rng(rows * length)
    x, y = mixed(rng, (rows, length), dtype), mixed(rng, (rows, length), dtype)

    def in_loop(product):
        return lambda a, b: lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(product(a, b, i), axis=-1),
                                          jnp.zeros(rows, dtype))

    programs = [lambda a, b: jnp.sum(a * b, axis=-1), lambda a, b: jnp.sum(a * (b + dtype(1)), axis=-1),
                in_loop(lambda a, b, i: a * b), in_loop(lambda a, b, i: a * (b + i.astype(dtype)))]
    for fn in programs:
        want = bits(jax.jit(fn)(x, y))
        module = import_jax(fn, x, y)
        for configuration in ("interpreter", "fused and compiled loops"):
            assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(x, y)[0]) == want, configuration


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.sample(1)
def test_sums_of_squares_start_with_the_first_square_fused(dtype):
    # x * x summed from +0: LLVM drops the +0 and contracts the first add's first product, fma(x0, x0, x1 * x1),
    # then each step (tree_sum.contracted_sums); jnp.var, norms and odeint's error ratio are such sums. (Full
    # sums of 2-D arrays with short rows are LLVM's vectorized order: docs/operations.md, not compared here.)
    rng = np.random.default_rng(3)
    programs = [lambda v: jnp.sum(v[0] * v[0]), lambda v: jnp.sum(v * v, axis=-1), lambda v: jnp.sum(v * v, axis=0),
                lambda v: jnp.var(v, axis=-1), lambda v: jnp.linalg.norm(v[0])]
    for shape in [(1, 2), (3, 5), (17, 6), (8, 20), (40, 32)]:
        x = mixed(rng, shape, dtype)
        for fn in programs:
            want = bits(jax.jit(fn)(x))
            module = import_jax(fn, x)
            for configuration in ("interpreter", "fused and compiled loops"):
                assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(x)[0]) == want, \
                    (shape, configuration)


@pytest.mark.parametrize("rows, length", sweep(
    [(32, 4), (16, 3), (20, 4), (29, 2), (28, 5), (18, 8), (8, 7), (4, 6), (24, 7), (12, 4)], ids=[_shape_id], keep=4))
def test_full_sums_of_products_in_xla_vector_lanes(rows, length):
    # A full f32 sum of a product over a (rows, length) operand: XLA's outer loop over the rows is not unrolled,
    # LLVM vectorizes it (tree_sum.vector_lanes: rows as lanes, lanes halved, the rest a scalar FMA chain; the
    # lanes FMAs for x*x / x*y with rows of 2-4, rounded products with 5-8 or for (x - y)**2). The per-device loss
    # of examples/sharded_training.py is the (32, 4) (x - y)**2 one. Straight-line and in a compiled loop.
    rng = np.random.default_rng(rows * 100 + length)
    f32 = np.float32

    def in_loop(product):
        return lambda a, b: lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(product(a, b)), f32(0))

    products = [lambda a, b: a * a, lambda a, b: a * b, lambda a, b: (a - b) ** 2]
    programs = [(lambda p: lambda a, b: jnp.sum(p(a, b)))(p) for p in products] + [in_loop(p) for p in products]
    for draw in range(3):
        x, y = mixed(rng, (rows, length), f32), mixed(rng, (rows, length), f32)
        for fn in programs:
            want = bits(jax.jit(fn)(x, y))
            module = import_jax(fn, x, y)
            for configuration in ("interpreter", "fused and compiled loops"):
                assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(x, y)[0]) == want, configuration


def test_vector_lanes_table():
    from lowering.kernels import host
    from lowering.kernels.tree_sum import vector_lanes

    if not host.measured_host():
        pytest.skip("the widths were measured on an AVX-512 host")
    f32 = np.float32
    assert vector_lanes((32, 4), (0, 1), f32, "computed_square") == (8, True)
    assert vector_lanes((32, 4), (0, 1), f32, "square") == (8, False)
    assert vector_lanes((20, 6), (0, 1), f32, "product") == (4, True)
    assert vector_lanes((28, 2), (0, 1), f32, "product") == (8, False)
    assert vector_lanes((12, 4), (0, 1), f32, "square") == (0, False)  # under 16 rows: a width that divides them
    assert vector_lanes((32, 4), (0, 1), np.float64, "square") == (0, False)  # f64: not measured
    assert vector_lanes((32, 4), (1,), f32, "square") == (0, False)  # row sums: outputs, not lanes
    assert vector_lanes((32, 4), (0, 1), f32, "") == (0, False)


@pytest.mark.parametrize("rows, cols, dtype", sweep(
    [(2, 5), (4, 3), (8, 6), (8, 8), (12, 4), (16, 2), (17, 7), (20, 3), (24, 6), (29, 2), (30, 5), (32, 8), (5, 4),
     (9, 3)], [np.float32, np.float64], ids=[_shape_id, _dtype_id], keep=7))
def test_full_sums_of_an_array_in_xla_vector_lanes(rows, cols, dtype):
    # jnp.sum of a (rows, cols) array: XLA's loop over the rows is vectorized (tree_sum.plain_sum_lanes: rows as
    # lanes, lanes halved, the rest in order; 5 and 9 rows stay in order) -- jnp.mean of a (32, 8) loss matrix
    # was off in 19 of 20 draws before. Straight-line in every configuration; a dot's result is read as it is too.
    rng = np.random.default_rng(rows * 100 + cols)
    programs = [lambda v: jnp.sum(v), lambda v: jnp.mean(v), lambda v: (jnp.sum(v), v * 2)]
    for draw in range(3):
        x = mixed(rng, (rows, cols), dtype)
        for fn in programs:
            want = bits(jax.tree.leaves(jax.jit(fn)(x))[0])
            module = import_jax(fn, x)
            for configuration, options in CONFIGURATIONS.items():
                assert bits(lowering.compile(module, **options)(x)[0]) == want, (configuration, fn)


def test_plain_sum_lanes_table():
    from lowering.kernels import host
    from lowering.kernels.tree_sum import plain_sum_lanes

    if not host.measured_host():
        pytest.skip("the widths were measured on an AVX-512 host")
    f32, f64 = np.float32, np.float64
    assert [plain_sum_lanes((r, 4), (0, 1), f32) for r in (2, 3, 4, 8, 12, 16, 20, 28, 32, 33)] == \
        [2, 0, 4, 8, 0, 8, 4, 4, 8, 0]
    assert [plain_sum_lanes((r, 8), (0, 1), f32) for r in (8, 16, 24)] == [4, 4, 4]
    assert plain_sum_lanes((29, 2), (0, 1), f32) == 8
    assert [plain_sum_lanes((r, 5), (0, 1), f64) for r in (2, 4, 6, 12, 16, 31)] == [2, 4, 0, 4, 4, 4]
    assert plain_sum_lanes((16, 7), (0, 1), f64) == 2
    assert plain_sum_lanes((16, 1), (0, 1), f32) == 0  # a column: one loop, in order
    assert plain_sum_lanes((16, 4), (1,), f32) == 0  # row sums: outputs, not lanes
    assert plain_sum_lanes((16, 4), (0, 1), np.float16) == 0


@pytest.mark.parametrize("rows, cols", sweep(
    [(2, 4), (4, 20), (8, 9), (17, 32), (21, 9), (29, 2), (30, 12), (12, 6)], ids=[_shape_id], keep=4))
def test_full_sums_of_exp_in_xla_vector_lanes(rows, cols):
    # jnp.sum(jnp.exp(a)) of a (rows, cols) f32 array, dims <= 32: XLA fuses the exp into the reduce's loop and
    # vectorizes the loop over the rows (tree_sum.exp_sum_lanes: 8 or 4 lanes from 16 rows, 2/4/8 rows one
    # vector, 5 and 12 rows in order), of short element-wise bodies too (reduction._read_in_the_loop:
    # exp(a - max(a)), logsumexp). Before: off in about half the draws.
    from lowering.kernels import host

    if not host.measured_host():
        pytest.skip("the vector lanes were measured on an AVX-512 host")
    rng = np.random.default_rng(rows * 100 + cols)
    f32 = np.float32
    programs = [lambda a: jnp.sum(jnp.exp(a)), lambda a: jnp.mean(jnp.exp(a * f32(0.5))),
                lambda a: jax.nn.logsumexp(a)]
    for draw in range(2):
        x = (rng.uniform(-4, 4, (rows, cols)) if draw == 0 else rng.standard_normal((rows, cols)) * 2).astype(f32)
        for fn in programs:
            want = bits(jax.jit(fn)(x))
            module = import_jax(fn, x)
            for configuration in ("interpreter", "fused and compiled loops"):
                assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(x)[0]) == want, \
                    (configuration, fn)


@pytest.mark.parametrize("cols", [3, 5, 6, 7])
def test_full_sums_of_exp_over_two_rows_of_odd_widths_call_glibc(cols):
    # jnp.sum(jnp.exp(a)) of a (2, cols) argument, cols 3, 5, 6, 7: XLA's 2 lanes of the rows, and its odd-width
    # vector exp becomes calls of glibc's expf (xla-float-rewrites marks the exp: GLIBC_EXP_TAIL); 7-16 of 200 draws
    # differed with XLA's polynomial.
    from lowering.kernels import host

    if not host.measured_host():
        pytest.skip("the vector lanes were measured on an AVX-512 host")
    rng = np.random.default_rng(cols)
    fn = lambda a: jnp.sum(jnp.exp(a))  # noqa: E731
    xs = (rng.standard_normal((40, 2, cols)) * 2).astype(np.float32)
    module = import_jax(fn, xs[0])
    for configuration in ("interpreter", "fused and compiled loops"):
        exe = lowering.compile(module, **CONFIGURATIONS[configuration])
        for x in xs:
            assert bits(exe(x)[0]) == bits(jax.jit(fn)(x)), configuration


def test_exp_sum_lanes_table():
    from lowering.kernels import host
    from lowering.kernels.tree_sum import exp_sum_lanes

    if not host.measured_host():
        pytest.skip("the widths were measured on an AVX-512 host")
    f32 = np.float32
    assert [exp_sum_lanes((r, 5), (0, 1), f32) for r in (2, 3, 4, 8, 12, 16, 20, 28, 32, 33)] == \
        [2, 0, 4, 8, 0, 8, 4, 4, 8, 0]
    assert [exp_sum_lanes((r, 9), (0, 1), f32) for r in (2, 4, 8, 28, 29, 31)] == [0, 4, 8, 8, 8, 8]
    assert [exp_sum_lanes((28, c), (0, 1), f32) for c in (2, 3, 8, 9, 32)] == [8, 4, 4, 8, 8]
    assert exp_sum_lanes((16, 1), (0, 1), f32) == 0  # a column: one loop, in order
    assert exp_sum_lanes((16, 4), (1,), f32) == 0  # row sums: outputs, not lanes
    assert exp_sum_lanes((16, 4), (0, 1), np.float64) == 0  # not measured


@pytest.mark.parametrize("rows, cols", sweep(
    [(50, 40), (33, 33), (63, 5), (64, 7), (96, 3), (127, 8), (20, 63), (63, 63), (40, 100), (2, 2047)],
    ids=[_shape_id], keep=4))
def test_full_sums_over_32_in_xla_windows_and_lanes(rows, cols):
    # jnp.sum of a (rows, cols) f32 array with a dimension over 32 (tree_sum.grid_sum): XLA's windows of 32, rows
    # of 32 (or 31) of 2-8 columns in vector lanes, a window's last column of 32k - 1 after its rows, the windows'
    # sums in the lanes of a plain sum ((50, 40): (w00 + w01) + (w10 + w11)). Of a computed operand too, and in a
    # compiled loop.
    from lowering.kernels import host

    if not host.measured_host():
        pytest.skip("the vector lanes were measured on an AVX-512 host")
    rng = np.random.default_rng(rows * 1000 + cols)
    f32 = np.float32
    programs = [lambda a, b: jnp.sum(a), lambda a, b: jnp.sum(jnp.exp(a * 1e-3)), lambda a, b: jnp.sum(a * b),
                lambda a, b: lax.fori_loop(0, 2, lambda i, acc: acc + jnp.sum(a), f32(0))]
    for draw in range(2):
        x, y = mixed(rng, (rows, cols), f32), mixed(rng, (rows, cols), f32)
        for fn in programs:
            want = bits(jax.jit(fn)(x, y))
            module = import_jax(fn, x, y)
            for configuration in ("interpreter", "fused and compiled loops"):
                assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(x, y)[0]) == want, \
                    (configuration, fn)


def test_grid_order_applies_to_full_f32_sums_over_32():
    from lowering.kernels import host
    from lowering.kernels.tree_sum import grid_order

    if not host.measured_host():
        pytest.skip("measured on an AVX-512 host")
    f32 = np.float32
    assert grid_order((50, 40), (0, 1), f32) and grid_order((1, 50, 40), (0, 1, 2), f32)
    assert not grid_order((32, 32), (0, 1), f32)  # (no windows: plain_sum_lanes)
    assert not grid_order((64, 64), (0, 1), f32)  # (YNNPACK's)
    assert not grid_order((50, 40), (0, 1), np.float64)  # (not measured)
    assert not grid_order((3, 50, 40), (1, 2), f32)  # (outputs kept: not measured)


@pytest.mark.parametrize("rows, cols", [(64, 64), (96, 64), (128, 32)])
@pytest.mark.sample(2)
def test_column_major_full_sums_in_ynnpack_windows(rows, cols):
    # jnp.sum(a.T * b) of 4,096+ elements: XLA lays the product out column-major, so its tree-reduction rewriter
    # cuts the reduce into 32 x 32 windows YNNPACK sums, the windows' sums then in a plain sum's lanes
    # (reduction.ynnpack_window_plan; the GP log marginal likelihood's gradient). a * b.T stays one YNNPACK sum.
    from lowering.kernels import host

    if not host.measured_host():
        pytest.skip("YNNPACK's order was measured on an AVX-512 host")
    rng = np.random.default_rng(rows + cols)
    f32 = np.float32
    programs = [lambda a, b: jnp.sum(a.T * b), lambda a, b: jnp.sum(jnp.exp(a.T * 1e-3) + b),
                lambda a, b: jnp.sum(b * a.T),
                lambda a, b: lax.fori_loop(0, 2, lambda i, acc: acc + jnp.sum(a.T * b), f32(0))]
    for draw in range(2):
        a, b = mixed(rng, (cols, rows), f32), mixed(rng, (rows, cols), f32)
        for fn in programs:
            want = bits(jax.jit(fn)(a, b))
            module = import_jax(fn, a, b)
            for configuration in ("interpreter", "fused and compiled loops"):
                assert bits(lowering.compile(module, **CONFIGURATIONS[configuration])(a, b)[0]) == want, \
                    (configuration, fn)
