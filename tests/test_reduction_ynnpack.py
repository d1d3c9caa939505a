"""Float sums XLA CPU runs in YNNPACK (4,096 elements or more): bit for bit against jax.jit, in every executor path.

XLA CPU (jax 0.10.2) hands f32/f64/bf16 sums of large operands to YNNPACK's reduce, a Kahan-compensated tree of
16-lane accumulators (lowering/kernels/ynnpack_sum.py, the definition vector dots use too). The interpreter's
kernel, fused loops (which leave these sums to it) and compiled segments give its bits (issue 30, item 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from helpers import INSPECTS_THE_LOWERING, sweep

bf16 = ml_dtypes.bfloat16


def _avx512_host() -> bool:
    from lowering.kernels.host import measured_host

    return measured_host()


pytestmark = pytest.mark.skipif(not _avx512_host(), reason="YNNPACK's sum order was measured on AVX-512 hosts only")


def _mixed(rng, shape, dtype):
    """Values of mixed magnitudes (another order of the sum changes the last bits of most results)."""
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-2, 2, shape))).astype(dtype)


def _bits(fn, args, **options):
    import lowering
    from interop import import_jax

    module = import_jax(fn, *args)
    executable = lowering.compile(module, **options)
    for _ in range(2):  # (the second call: fused groups and segments compiled by then with "always")
        got = [np.asarray(v) for v in executable(*args)]
    want = [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return [v.view(f"u{v.itemsize}") for v in got], [v.view(f"u{v.itemsize}") for v in want]


_SUMS = [
    ("sum 4096", lambda x: jnp.sum(x), (4096,)),
    ("sum 5000", lambda x: jnp.sum(x), (5000,)),
    ("mean 64x64", lambda x: jnp.mean(x), (64, 64)),
    ("sum in tiles", lambda x: jnp.sum(x), (70001,)),          # split in tiles of 32,768 f32 / 16,384 f64
    ("2-d sum in row tiles", lambda x: jnp.sum(x), (300, 300)),
    ("row sums", lambda x: jnp.sum(x, axis=1), (64, 100)),
    ("long rows in tiles", lambda x: jnp.sum(x, axis=1), (2, 40000)),
    ("long rows whole", lambda x: jnp.sum(x, axis=1), (4, 40000)),  # (4 rows: enough tasks for 2 CPUs, no tiles)
    ("column sums", lambda x: jnp.sum(x, axis=0), (5000, 3)),
    ("column sums in row tiles", lambda x: jnp.sum(x, axis=0), (600, 64)),
    ("middle axis", lambda x: jnp.sum(x, axis=1), (8, 9, 100)),
    ("sum of products", lambda x: jnp.sum(x * x), (64, 64)),
    ("two runs of rows", lambda x: jnp.sum(x, axis=(0, 2)), (4, 8, 256)),       # each row's sum added in turn
    ("two runs, kept outside", lambda x: jnp.sum(x, axis=(1, 3)), (3, 4, 8, 256)),
    ("two runs of columns", lambda x: jnp.sum(x, axis=(0, 2)), (2, 5, 300, 4)),
    ("two runs with an initial value", lambda x: jax.lax.reduce(x, x.dtype.type(12345.678), jax.lax.add, (0, 2)),
     (16, 4, 100)),
    ("two runs in tiles", lambda x: jnp.sum(x, axis=(0, 2)), (64, 64, 64)),  # tiles' sums by the columns kernel
    ("two runs of columns in tiles", lambda x: jnp.sum(x, axis=(0, 2)), (40, 3, 100, 8)),
    ("two runs in tiles with an initial value",
     lambda x: jax.lax.reduce(x, x.dtype.type(12345.678), jax.lax.add, (0, 2)), (100, 4, 2000)),
    ("two runs past a tile, not cut", lambda x: jax.lax.reduce(x, x.dtype.type(12345.678), jax.lax.add, (1, 3)),
     (4, 64, 64, 64)),  # (the initial value last)
    # a bias gradient (sum over batch and sequence): tiles of 32 (f32) / 16 (f64) rows below the batch dimension,
    # every tile's sum a partial, the partials in row-major order
    ("leading axes in tiles below another", lambda x: jnp.sum(x, axis=(0, 1)), (2, 128, 1024)),
    ("leading axes of 4-d in tiles", lambda x: jnp.sum(x, axis=(0, 1, 2)), (3, 40, 8, 128)),
    # 4 batch indices or more: the tile loop serial, dropped -- each batch index's rows one sum into its first
    # partial, the others zero, all summed (pairs, fours, ... as the zeros fall in the columns kernel's tree)
    ("leading axes, serial tiles in pairs", lambda x: jnp.sum(x, axis=(0, 1)), (8, 128, 512)),
    ("leading axes, serial tiles of 8", lambda x: jnp.sum(x, axis=(0, 1)), (16, 256, 1024)),
    ("leading axes, serial tiles of 7", lambda x: jnp.sum(x, axis=(0, 1)), (5, 100, 2048)),
    # columns wider than a tile: the rows added to the output one at a time (an LM head's bias gradient)
    ("wide columns, rows in turn", lambda x: jnp.sum(x, axis=0), (16, 40000)),
    ("wide columns between kept dimensions", lambda x: jnp.sum(x, axis=1), (2, 7, 40000)),
    ("wide columns with an initial value", lambda x: jax.lax.reduce(x, x.dtype.type(12345.678), jax.lax.add, (0,)),
     (9, 40000)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name, fn, shape", _SUMS, ids=[s[0] for s in _SUMS])
@pytest.mark.sample(12)
def test_large_sums_are_ynnpacks_bits(name, fn, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    for _ in range(2):
        x = _mixed(rng, shape, dtype)
        got, want = _bits(fn, (x,), fusion="never", loop_compilation="never")
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("fn", [lambda x: jnp.sum(x), lambda x: jnp.sum(x, dtype=jnp.float32),
                                lambda x: jnp.sum(x, axis=0, dtype=jnp.float32)], ids=["bf16", "bf16 into f32", "bf16 columns"])
def test_bf16_sums_read_two_values_per_lane(fn):
    # YNNPACK's bf16 kernel: the pair 2l, 2l + 1 of each 32 elements in lane l, the odd one first.
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = rng.standard_normal((7001,) if fn(np.ones((2, 2), bf16)).ndim == 0 else (1000, 8)).astype(bf16)
        got, want = _bits(fn, (x,))
        np.testing.assert_array_equal(got[0], want[0])


def test_f16_sum_is_an_f32_sum():
    rng = np.random.default_rng(8)
    for _ in range(3):
        x = rng.standard_normal(5000).astype(np.float16)
        got, want = _bits(lambda x: jnp.sum(x), (x,))
        np.testing.assert_array_equal(got[0], want[0])


def test_infinities_and_zero_signs_in_a_large_sum():
    rng = np.random.default_rng(9)
    x = _mixed(rng, (3, 6000), np.float32)
    x[0, ::701] = np.inf      # one infinite row
    x[1, 5] = np.inf
    x[1, 4000] = -np.inf       # inf - inf: NaN
    x[2] = -0.0                # all -0: +0 (sums start from +0)
    got, want = _bits(lambda x: jnp.sum(x, axis=1), (x,))
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's YNNPACK reduce was measured on AVX-512 hosts only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(4096, 1), (2048, 3), (512, 17), (64, 64), (70, 100), (40, 257), (16, 1100),
                                   (5, 4099)], ids=str)
def test_row_sums_of_every_length_are_ynnpacks_bits(shape, dtype):
    # The row kernel (ynnpack_sum.k1_sum, vector code): whole blocks four at a time and one at a time, a last
    # partial block padded with zeros, the clock's levels and Kahan step (rows past 256 and 4,096 elements);
    # mixed magnitudes, then NaNs, infinities and signed zeros, then tiny negative values (a -0 flushed sum).
    rng = np.random.default_rng(shape[1])
    for x in (_mixed(rng, shape, dtype), _specials(rng, shape, dtype, nan=0.002),
              -np.abs(_mixed(rng, shape, dtype)) * dtype(1e-38 if dtype == np.float32 else 1e-308)):
        for options in (dict(fusion="never", loop_compilation="never"), {}):
            got, want = _bits(lambda v: jnp.sum(v, axis=1), (x,), **options)
            np.testing.assert_array_equal(got, want)


_FUSED = [
    ("layer norm", lambda x: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5), (128, 64)),
    ("row sums of a fused chain", lambda x: jnp.sum(x * 2.0 + 1.0, axis=-1), (256, 64)),
    ("small ops around a large sum", lambda x: jnp.tanh(jnp.sum(x) * 1e-3 + jnp.arange(8.0, dtype=x.dtype)) * 3.0 - 1.0,
     (5000,)),
]


@pytest.mark.parametrize("options", [dict(fusion="never", loop_compilation="never"),
                                     dict(fusion="always", loop_compilation="always")], ids=["interpreted", "compiled"])
@pytest.mark.parametrize("name, fn, shape", _FUSED, ids=[s[0] for s in _FUSED])
def test_large_sums_in_fused_and_compiled_code_are_the_kernels(name, fn, shape, options):
    # Fused groups leave such sums to the reduction kernel (not NumPy's row sums), segments do not take them.
    x = _mixed(np.random.default_rng(10), shape, np.float32)
    got, want = _bits(fn, (x,), **options)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_long_vector_dots_are_summed_in_ynnpacks_tiles(dtype):
    # A vector dot is XLA's reduce(multiply): longer than one tile (32,768 f32 / 16,384 f64 products) it is
    # summed per tile, then the tiles' sums (was BLAS above 16,384).
    rng = np.random.default_rng(11)
    a, b = _mixed(rng, (40000,), dtype), rng.standard_normal(40000).astype(dtype)
    got, want = _bits(jnp.matmul, (a, b))
    np.testing.assert_array_equal(got[0], want[0])


def test_plans_of_unidentified_and_small_sums():
    from lowering.kernels.ynnpack_sum import COLUMNS, LOOPED_COLUMNS, LOOPED_ROWS, ROWS, _task_target, sum_plan

    assert sum_plan((4095,), (0,), np.float32) is None                 # XLA's own loops (reduce-window tree)
    assert sum_plan((4, 2, 40000), (0, 2), np.float32) is None         # two runs, tiles cut the inner one
    assert sum_plan((4, 8, 4, 8, 64), (0, 2, 4), np.float32) is None    # three runs: not identified
    assert sum_plan((3, 4, 8, 256), (1, 3), np.float32) == (LOOPED_ROWS, (3, 4, 8, 0), 256, 1, (1, 256, 1, 256))
    assert sum_plan((2, 5, 300, 4), (0, 2), np.float64)[:4] == (LOOPED_COLUMNS, (1, 2, 5, 0), 300, 4)
    assert sum_plan((64, 64, 64), (0, 2), np.float32)[1] == (1, 64, 64, 8)   # tiles of 8 of the outer run
    assert sum_plan((16, 70000), (0, 1), np.float32) is None           # tiles below another reduced dimension
    if _task_target() == 4:  # (2 CPUs, as measured)
        assert sum_plan((2, 128, 1024), (0, 1), np.float32) == (COLUMNS, 1, 256, 1024, (2, 128, 1, 32))
        assert sum_plan((8, 128, 1024), (0, 1), np.float32) == (COLUMNS, 1, 1024, 1024, (8, 128, 1, -32))
        assert sum_plan((5, 3, 64, 512), (0, 1, 2), np.float64) is None  # (two serial loops: one call, not here)
    assert sum_plan((64, 64), (0, 1), np.float16) is None              # (f16 sums are f32 sums of a convert)
    assert sum_plan((64, 1, 64), (0,), np.float32)[0] == COLUMNS
    assert sum_plan((1, 5000), (1,), np.float32)[:4] == (ROWS, 1, 5000, 1)


def _in_a_loop(axis, steps=6):
    """``steps`` sums over ``axis`` of a carried array that changes each step, in a ``fori_loop`` body."""

    def fn(x):
        kept = tuple(s for d, s in enumerate(x.shape) if axis is not None and d not in np.atleast_1d(axis))

        def body(i, state):
            y, sums = state
            return y * y.dtype.type(0.75) + y.dtype.type(0.125), sums.at[i].set(jnp.sum(y, axis=axis))

        return jax.lax.fori_loop(0, steps, body, (x, jnp.zeros((steps,) + kept, x.dtype)))

    return fn


_LOOP_SUMS = [
    ("sum 6000", None, (6000,)),
    ("sum in tiles", None, (70001,)),
    ("row sums", 1, (64, 100)),
    ("long rows in tiles", 1, (2, 40000)),
    ("column sums in row tiles", 0, (600, 64)),
    ("middle axis", 1, (8, 9, 100)),
    ("two runs of rows", (0, 2), (4, 8, 256)),
    ("two runs of columns", (0, 2), (2, 5, 300, 4)),
    ("two runs in tiles", (0, 2), (64, 64, 64)),
]
_LOOP_OPTIONS = [dict(fusion=f, loop_compilation=c) for c in ("never", "always") for f in ("never", "always")]


def _options_id(options):
    return f"fusion {options['fusion']}, loops {options['loop_compilation']}"


@pytest.mark.parametrize("name, axis, shape, dtype, options", sweep(
    _LOOP_SUMS, [np.float32, np.float64], _LOOP_OPTIONS,
    ids=[lambda s: s[0], lambda t: np.dtype(t).name, _options_id]))
@pytest.mark.sample(3)
def test_large_sums_inside_loops_are_ynnpacks_bits(name, axis, shape, dtype, options):
    # XLA CPU sums in while, scan and fori_loop bodies in YNNPACK's order too (measured: every case of
    # _SUMS in each kind of loop); interpreted, fused and compiled loops call the same definition.
    x = _mixed(np.random.default_rng(sum(shape)), shape, dtype)
    got, want = _bits(_in_a_loop(axis), (x,), **options)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _feedback(xs):
    # A scan whose carry depends on the sums (another order would change every later step), a while loop
    # whose condition is a large sum, and a loop inside a loop.
    def step(c, x):
        s = jnp.sum(x * c, axis=0)
        return c * x.dtype.type(0.5) + s[0] * x.dtype.type(1e-3), s

    c, ys = jax.lax.scan(step, xs.dtype.type(1.0), xs)
    y, n = jax.lax.while_loop(lambda st: jnp.sum(st[0]) < 1e5,
                              lambda st: (st[0] * xs.dtype.type(1.5) + xs.dtype.type(0.5), st[1] + 1), (xs[0], 0))

    def outer(i, st):
        return jax.lax.fori_loop(0, 2, lambda j, s: (s[0] * xs.dtype.type(0.9), s[1] + jnp.sum(s[0], axis=1)),
                                 (st[0] + xs.dtype.type(0.25), st[1]))

    z = jax.lax.fori_loop(0, 2, outer, (xs[1], jnp.zeros(xs.shape[1], xs.dtype)))[1]
    return c, ys, y, n, z


@pytest.mark.parametrize("options", _LOOP_OPTIONS,
                         ids=[f"fusion {o['fusion']}, loops {o['loop_compilation']}" for o in _LOOP_OPTIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.sample(3)
def test_sums_that_steer_loops_are_ynnpacks_bits(dtype, options):
    xs = _mixed(np.random.default_rng(12), (3, 600, 64), dtype)
    got, want = _bits(_feedback, (xs,), **options)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@INSPECTS_THE_LOWERING
def test_compiled_loops_and_segments_call_the_kernels_definition():
    # The loop compiles (not left interpreted) and its source calls ynnpack_sum's functions; a segment of
    # small ops takes a large sum of an operand from before it.
    from xdsl.dialects import func

    import lowering
    from interop import import_jax
    from lowering.executor import compiled_loops, compiled_segments
    from passes.pipelines import prepare_for_execution
    from xla_dialect.types import numpy_dtype

    # (kernels are called through call_kernel: lowering.runtime.loop_runtime)
    for axis, call, shape in [(0, "call_kernel(_failed, ynnpack_sum_columns, ", (600, 64)),
                              (1, "call_kernel(_failed, ynnpack_sum_rows, ", (600, 64)),
                              (None, "call_kernel(_failed, ynnpack_sum_rows, ", (600, 64)),
                              ((0, 2), "call_kernel(_failed, ynnpack_sum_rows_looped, ", (4, 8, 256)),
                              ((0, 2), "call_kernel(_failed, ynnpack_sum_columns_looped, ", (2, 5, 300, 4))]:
        x = _mixed(np.random.default_rng(13), shape, np.float32)
        module = prepare_for_execution(import_jax(_in_a_loop(axis), x))
        functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
        (loop,) = [op for op in module.walk() if op.name == "hlo.while"]
        assert call in compiled_loops.loop_source(loop, functions, numpy_dtype)[0]
        assert compiled_loops.compile_loop(loop, functions, numpy_dtype) is not None

    fn, shape = _FUSED[2][1:]
    y = _mixed(np.random.default_rng(14), shape, np.float32)
    executable = lowering.compile(import_jax(fn, y), loop_compilation="always")
    (got,) = executable(y)
    segments = [r for name, r in executable._fn.__globals__.items()
                if name.startswith("sg") and isinstance(r, compiled_segments.CompiledSegment)]
    assert any(op.name == "hlo.reduce" for s in segments for op in s.segment.ops), "the sum is not in a segment"
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(jax.jit(fn)(y)).view(np.uint32))


def _bf16_carry(x):
    def body(i, state):
        y, sums = state
        return (y * bf16(0.5)).astype(bf16), sums.at[i].set(jnp.sum(y, dtype=jnp.float32))

    return jax.lax.fori_loop(0, 3, body, (x, jnp.zeros(3, jnp.float32)))[1]


def _bf16_unchanged_carry(x):
    def body(state):
        i, y, s = state
        return i + 1, y, s + jnp.sum(y, dtype=jnp.float32)

    return jax.lax.while_loop(lambda state: state[0] < 2, body, (0, x, jnp.float32(0)))[2]


_BF16 = [  # (name, function, operand shapes)
    ("argument", lambda x: jnp.sum(x, dtype=jnp.float32), [(7001,)]),
    ("square of an argument", lambda x: jnp.sum(x * x, dtype=jnp.float32), [(7001,)]),
    ("argument also multiplied", lambda x: (jnp.sum(x, dtype=jnp.float32), x * bf16(2)), [(7001,)]),
    ("product of two arguments", lambda x, y: jnp.sum(x * y, dtype=jnp.float32), [(7001,), (7001,)]),
    ("static slice", lambda x: jnp.sum(x[1], dtype=jnp.float32), [(3, 7001)]),
    ("dynamic slice", lambda x: jnp.sum(jax.lax.dynamic_index_in_dim(x, jnp.int32(1), keepdims=False),
                                        dtype=jnp.float32), [(3, 7001)]),
    ("reshape kept", lambda x: jnp.sum(x.reshape(7, 1000, 3), axis=(1, 2), dtype=jnp.float32), [(21000,)]),
    ("reshape folded", lambda x: jnp.sum(x.reshape(7, 1000), dtype=jnp.float32), [(7000,)]),
    ("scan over slices", lambda xs: jax.lax.scan(lambda c, x: (c, jnp.sum(x, dtype=jnp.float32)), 0.0, xs)[1],
     [(3, 7001)]),
    ("carry changed in the loop", _bf16_carry, [(7001,)]),
    ("carry returned unchanged", _bf16_unchanged_carry, [(7001,)]),
]


@pytest.mark.parametrize("options", [dict(fusion="never", loop_compilation="never"),
                                     dict(fusion="always", loop_compilation="always")], ids=["interpreted", "compiled"])
@pytest.mark.parametrize("name, fn, shapes", _BF16, ids=[s[0] for s in _BF16])
def test_bf16_operands_use_the_kernel_xla_chooses(name, fn, shapes, options):
    # YNNPACK's bf16 kernel (two values per lane) only where XLA fuses the convert into its call: a program
    # argument nothing else reads (or its square); slices, other readers, changed loop carries and reshapes XLA
    # keeps give the f32 kernel. Magnitudes far apart, so that the two orders differ.
    rng = np.random.default_rng(15)
    args = [(rng.standard_normal(s) * np.exp(rng.uniform(-9, 9, s))).astype(bf16) for s in shapes]
    got, want = _bits(fn, args, **options)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


_TRANSPOSED = [  # XLA's simplifier sums the transpose's operand over the permuted dimensions (HandleReduce)
    ("full sum", lambda x: jnp.sum(x.T), (64, 100)),
    ("rows of a transpose", lambda x: jnp.sum(x.T, axis=1), (100, 300)),
    ("kept dimensions transposed after", lambda x: jnp.sum(x.T, axis=2), (33, 100, 100)),
    ("a transpose two sums read", lambda x: (lambda z: (jnp.sum(z, axis=2), jnp.sum(z, axis=(0, 1))))(x.T),
     (33, 100, 100)),
    ("a scalar sum of a transpose also doubled", lambda x: (lambda z: (jnp.sum(z), z * 2))(x.T), (64, 100)),
    ("in a loop", lambda x: jax.lax.fori_loop(
        0, 3, lambda i, s: (s[0] * x.dtype.type(0.75), s[1] + jnp.sum(jnp.swapaxes(s[0], 0, 2), axis=(1, 2))),
        (x, jnp.zeros(x.shape[2], x.dtype)))[1], (8, 16, 100)),
    ("in a loop, transposed after", lambda x: jax.lax.fori_loop(
        0, 3, lambda i, s: (s[0] * x.dtype.type(0.75), s[1] + jnp.sum(s[0].T, axis=2)),
        (x, jnp.zeros(x.shape[:0:-1], x.dtype)))[1], (33, 40, 50)),
]


@pytest.mark.parametrize("name, fn, shape, dtype, options", sweep(
    _TRANSPOSED, [np.float32, np.float64], _LOOP_OPTIONS,
    ids=[lambda s: s[0], lambda t: np.dtype(t).name, _options_id]))
def test_sums_of_transposes_are_sums_of_their_operands(name, fn, shape, dtype, options):
    x = _mixed(np.random.default_rng(16), shape, dtype)
    got, want = _bits(fn, (x,), **options)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# -- maxima and minima: YNNPACK's NaN and zero rule (lowering/kernels/ynnpack_extrema.py) ---------------------

def _specials(rng, shape, dtype, nan=0.03):
    """Normal values with NaNs, zeros of both signs and infinities scattered (about ``nan`` of them NaN)."""
    x = rng.standard_normal(shape).astype(dtype)
    u = rng.random(shape)
    x[u < nan] = np.nan
    x[(u >= nan) & (u < nan + 0.05)] = 0.0
    x[(u >= nan + 0.05) & (u < nan + 0.1)] = -0.0
    x[(u >= nan + 0.1) & (u < nan + 0.12)] = -np.inf
    return x


_EXTREMA = [
    ("rows", 1, (64, 128)),
    ("rows with a short last vector", 1, (64, 100)),
    ("rows of two", 1, (4096, 2)),
    ("columns", 0, (128, 64)),
    ("columns, a short last block", 0, (130, 40)),
    ("full", None, (8192,)),
    ("full in tiles", None, (70001,)),
    ("columns in row tiles", 0, (40000, 2)),
    ("middle axis", 1, (8, 64, 16)),
    ("two runs of rows", (0, 2), (4, 8, 256)),
    ("two runs of columns", (2, 4), (8, 14, 2, 14, 2, 16)),  # (a 2 x 2 max pool: XLA's reshape and reduce)
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, axis, shape", _EXTREMA, ids=[c[0] for c in _EXTREMA])
@pytest.mark.sample(8)
def test_large_maxima_and_minima_follow_ynnpacks_nan_and_zero_rule(name, axis, shape, dtype):
    # YNNPACK's maxps(acc, x) lanes forget a NaN that is not the last element of its lane, and std::max(init, h)
    # returns the init value for a NaN h: jnp.max of 8,192 elements holding NaNs is a number, -inf when the last
    # element is NaN; zeros take the sign of the lane that wins the ties. The NumPy/IEEE rule gave NaN.
    rng = np.random.default_rng(len(name))
    nan = 0.0005 if int(np.prod(shape)) > 20000 else 0.03
    x = _specials(rng, shape, dtype, nan)
    if axis == 1 and len(shape) == 2:
        x[0, -1] = np.nan  # (a NaN last in its lane: the row's maximum is the init value)
    with jax.enable_x64(dtype == np.float64):
        for fn in (lambda v: jnp.max(v, axis=axis), lambda v: jnp.min(v, axis=axis),
                   lambda v: jnp.max(v * dtype(0), axis=axis)):  # (rows of zeros of both signs)
            got, want = _bits(fn, (x,), fusion="never")
            assert np.array_equal(got[0], want[0]), name
    if axis == 1 and len(shape) == 2:
        assert not np.isnan(np.asarray(jax.jit(lambda v: jnp.max(v, axis=1))(x))).any()  # (XLA's own behaviour)


@pytest.mark.parametrize("options", [dict(fusion="always", loop_compilation="never"),
                                     dict(fusion="never", loop_compilation="always")], ids=["fused", "loops"])
def test_large_maxima_in_fused_groups_and_compiled_loops_follow_ynnpacks_rule(options):
    # The fused row reduction takes a zero row maximum's sign from YNNPACK's rule (a row holding a NaN is the
    # kernel's to compute); compiled loops call the same definition for rows, columns and full reductions.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    zeros = lambda v: (jnp.max(v * np.float32(0), axis=1), jnp.min(v * np.float32(0), axis=0))  # noqa: E731
    got, want = _bits(zeros, (x,), **options)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    y = _specials(rng, (64, 128), np.float32)

    def loop(v):
        def body(i, c):
            return c[0] * np.float32(0.5), c[1] + jnp.max(c[0], axis=1), c[2] + jnp.min(c[0], axis=0), c[3] + jnp.max(c[0])
        return jax.lax.fori_loop(0, 3, body, (v, jnp.zeros(64, np.float32), jnp.zeros(128, np.float32), np.float32(0)))[1:]

    got, want = _bits(loop, (y,), **options)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
