"""Element-wise fusion (lowering.executor.fusion): fused groups give the same bits as the ops' own kernels."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from lowering.executor import compiled_loops, fusion
from lowering.runtime import numba_cache
from xla_dialect.errors import XlaError

F32, F64 = np.float32, np.float64
RNG = np.random.default_rng(0)



@pytest.fixture(autouse=True)
def _no_compiled_segments(monkeypatch):
    # These tests look at the fused groups the executor forms; compiled segments (lowering.executor.compiled_segments),
    # which take over small straight-line programs whole, are off unless a test asks for loop compilation.
    monkeypatch.setenv("XLA_DIALECT_LOOP_COMPILATION", "never")

def _bits(a):
    a = np.atleast_1d(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _mixed(dtype, n=200):
    x = RNG.standard_normal(n) * np.exp(RNG.uniform(-8, 8, n))
    tiny = float(np.finfo(dtype).tiny)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny / 3, -tiny / 5, tiny, 2.5, -1.0]
    return np.concatenate([x, specials]).astype(dtype)


def _check(fn, *args, groups=None, denormals=None, nan_signs=False):
    """Fused and unfused results are the same bits (``nan_signs``: up to the sign of NaNs, where a fused
    multiply-add with several NaN operands picks one as the CPU's instruction does, like XLA, and the
    unfused emulation may pick another)."""
    module = import_jax(fn, *args)
    fused = lowering.compile(module, fusion="always", denormals=denormals)
    plain = lowering.compile(module, fusion="never", denormals=denormals)
    if groups is not None:
        assert fused.source.count("# fused:") == groups, fused.source
    got, want = fused(*args), plain(*args)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        g, w = np.atleast_1d(g), np.atleast_1d(w)
        if nan_signs and g.dtype.kind == "f":
            g, w = np.where(np.isnan(g), np.abs(g), g), np.where(np.isnan(w), np.abs(w), w)
        np.testing.assert_array_equal(_bits(g), _bits(w))
    return got


@pytest.mark.parametrize("denormals", ["flush", "keep"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.sample(2)
def test_float_ops(dtype, denormals):
    x = _mixed(dtype)
    y = np.roll(x, 7)[::-1].copy()

    def fn(x, y):
        zero = y - y
        a = jnp.maximum(x, y) * dtype(1.5) + jnp.minimum(x, zero)  # FMA contraction inside the group
        b = jnp.where(x > y, x / y, -jnp.abs(y))
        c = jnp.sin(a) - jnp.cos(b) * jnp.tan(x * dtype(1e-3))
        return a, b, c, (x < y) & (y != zero), jnp.maximum(x, zero)

    got = _check(fn, x, y, denormals=denormals, nan_signs=True)
    if denormals == "flush":  # XLA's mode: the fused results are XLA's, NaN signs included
        for g, want in list(zip(got, jax.jit(fn)(x, y)))[:4]:
            np.testing.assert_array_equal(_bits(g), _bits(want))


@pytest.mark.parametrize("denormals", ["flush", "keep"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.sample(2)
def test_every_op_with_a_scalar_definition_fuses_with_the_same_bits(dtype, denormals):
    """What a group may hold is what has a scalar definition (lowering.executor.fusion_plan.fusible_op): roots, rounding,
    powers, remainders, XLA's approximations and integer ops fuse and give the unfused bits."""
    x = _mixed(dtype)
    y = np.roll(x, 3)[::-1].copy()
    k = (np.arange(x.size) % 7 - 3).astype(np.int32)

    def fn(x, y, k):
        a = jnp.sqrt(jnp.abs(x)) + jax.lax.rsqrt(jnp.abs(y)) * jnp.floor(x) - jnp.ceil(y) + jnp.round(x)
        b = jnp.fmod(x, y) * jnp.sign(y) + jnp.power(jnp.abs(x), y * dtype(0.25)) + jnp.arctan2(x, y)
        c = jnp.expm1(x * dtype(1e-3)) + jnp.log1p(jnp.abs(y)) + jnp.exp(-jnp.abs(x)) * jnp.tanh(y) + jnp.cbrt(x)
        d = jnp.where(jnp.isfinite(x), jax.lax.erf(y * dtype(0.1)), jax.nn.sigmoid(x))
        m = (k * 3) % (k + 4) + (k // jnp.int32(2)) ** 2 + jax.lax.population_count(k) + jax.lax.clz(k)
        return a, b, c, d, m, jnp.clip(x, dtype(-1), y)

    exe = lowering.compile(import_jax(fn, x, y, k), fusion="always", denormals=denormals)
    assert "# fused:" in exe.source
    _check(fn, x, y, k, denormals=denormals)


def test_matches_xla():
    x = _mixed(F32)
    y = np.roll(x, 3)

    def fn(x, y):
        return jnp.sin(x * F32(0.5) + y) * F32(3) - jnp.maximum(x, y)

    (got,) = _check(fn, x, y)
    np.testing.assert_array_equal(_bits(got), _bits(jax.jit(fn)(x, y)))


def test_integers_conversions_and_shifts():
    a = RNG.integers(-2**31, 2**31, 300, dtype=np.int64).astype(np.int32)
    f = _mixed(F32, 290)

    def fn(a, f):
        b = (a * np.int32(1103515245) + np.int32(12345)) ^ (a >> np.int32(3))
        u = a.astype(np.uint32) << np.uint32(5)
        return b, u, (f * F32(1e9)).astype(np.int32), f.astype(np.uint8), (b > 0).astype(F32), -b

    _check(fn, a, f)


def test_groups_around_other_ops():
    x = RNG.standard_normal((16, 32), dtype=F32)

    def fn(x):
        a = x * F32(2) + F32(1)
        s = a.sum(axis=1, keepdims=True)  # breaks the run
        b = jnp.sin(a) * a - s
        return b, a

    _check(fn, x, groups=2)


def test_auto_mode_compiles_after_enough_calls(monkeypatch):
    monkeypatch.setattr(fusion, "AUTO_CALLS", 2)
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)  # (never compiled before)
    monkeypatch.delenv("XLA_DIALECT_FUSION", raising=False)
    x = _mixed(F32)
    module = import_jax(lambda v: jnp.sin(v) * F32(2) + v, x)
    exe = lowering.compile(module)
    plain = lowering.compile(module, fusion="never")
    runner = next(v for v in exe._fn.__globals__.values() if isinstance(v, fusion.FusedGroup))
    for call in range(4):
        np.testing.assert_array_equal(_bits(exe(x)[0]), _bits(plain(x)[0]))
        assert runner.started == (call >= 2)
        if call == 2:  # the kernel is compiled on a background thread; the calls meanwhile run interpreted
            assert compiled_loops.wait_for_background_compiles(timeout=300)
            assert runner.kernel is not None
    # Read-only inputs (constants) get the kernel compiled for them: calls never compile it again.
    assert len(runner.kernel.signatures) == 1


def test_a_first_call_does_not_wait_for_numba(monkeypatch):
    # In "auto" mode a group is compiled on a background thread: the call that asks for it runs interpreted.
    monkeypatch.setattr(fusion, "AUTO_CALLS", 0)
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)  # (never compiled before)
    x = _mixed(F32)
    exe = lowering.compile(import_jax(lambda v: jnp.cos(v) * F32(3) - v, x))
    runner = next(v for v in exe._fn.__globals__.values() if isinstance(v, fusion.FusedGroup))
    started = threading.Event()
    release = threading.Event()
    compile_kernel = runner._compile

    def slow_compile(readonly):
        started.set()
        release.wait(60)
        compile_kernel(readonly)

    monkeypatch.setattr(runner, "_compile", slow_compile)
    plain = lowering.compile(import_jax(lambda v: jnp.cos(v) * F32(3) - v, x), fusion="never")
    np.testing.assert_array_equal(_bits(exe(x)[0]), _bits(plain(x)[0]))  # returns while numba has not run
    assert started.wait(60) and runner.kernel is None
    release.set()
    assert compiled_loops.wait_for_background_compiles(timeout=300)
    assert runner.kernel is not None
    np.testing.assert_array_equal(_bits(exe(x)[0]), _bits(plain(x)[0]))


def test_a_read_only_input_does_not_compile_a_kernel_again():
    # numba compiles a function again, at the call, for a read-only array where it was compiled for a
    # writable one (an ODE solve's first call took 18 s with a cold cache, 14 of them such compiles).
    x = _mixed(F32)
    exe = lowering.compile(import_jax(lambda v, w: jnp.sin(v) * w + v, x, x), fusion="always")
    runner = next(v for v in exe._fn.__globals__.values() if isinstance(v, fusion.FusedGroup))
    frozen = x.copy()
    frozen.flags.writeable = False
    first = exe(x, frozen)
    for args in ((x, x), (frozen, frozen), (frozen, x)):
        np.testing.assert_array_equal(_bits(exe(*args)[0]), _bits(first[0]))
    assert len(runner.kernel.signatures) == 1


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_subnormal_constants_and_scalars_keep_their_bits_on_every_call(dtype, monkeypatch):
    # A select passes a subnormal constant or scalar argument through untouched in XLA, also under
    # flush-to-zero; the fused kernel once flushed it (its float32 scalars crossed numba's boundary as
    # doubles), so one executable returned 1e-40 on its first 20 calls and 0.0 from the 21st.
    monkeypatch.setattr(fusion, "AUTO_CALLS", 2)
    monkeypatch.delenv("XLA_DIALECT_FUSION", raising=False)
    tiny = dtype(np.finfo(dtype).tiny / 1000)
    x = _mixed(dtype)
    for fn, args in ((lambda v: jnp.where(v > 0, v, tiny), (x,)),
                     (lambda v, s: jnp.where(v > 0, v, s), (x, tiny))):
        expected = np.asarray(jax.jit(fn)(*args))
        assert np.any(_bits(expected) == _bits(np.atleast_1d(tiny))[0])
        exe = lowering.compile(import_jax(fn, *args))
        for _ in range(5):
            np.testing.assert_array_equal(_bits(exe(*args)[0]), _bits(expected))
        _check(fn, *args)


def test_bad_option():
    module = import_jax(lambda x: x + 1, F32(1))
    with pytest.raises(XlaError, match="fusion"):
        lowering.compile(module, fusion="maybe")


def test_row_statistics_broadcast_inside_the_fused_loop():
    # softmax / layer norm: the row max and sum broadcast back over the rows are read by the fused loop
    # (one element per row) instead of being materialized; a bias (trailing dimensions) is not fused.
    x = RNG.standard_normal((4, 3, 33)).astype(F32)
    bias = RNG.standard_normal(33).astype(F32)

    def fn(x, b):
        e = jnp.exp(x - lax.broadcast_in_dim(jnp.max(x, axis=-1), x.shape, (0, 1)))
        return e / lax.broadcast_in_dim(jnp.sum(e, axis=-1), x.shape, (0, 1)) + b

    got = _check(fn, x, bias)
    source = lowering.compile(import_jax(fn, x, bias), fusion="always").source
    assert "# fused: broadcast_in_dim, subtract, exponential" in source
    np.testing.assert_allclose(got[0] if isinstance(got, tuple) else got, np.asarray(jax.jit(fn)(x, bias)), rtol=1e-6,
                               atol=1e-7)


@pytest.fixture(params=["numba", "python"])
def three_cpus(request, monkeypatch):
    """Large fused loops cut into three pieces (the calling thread and two workers), whatever this machine has;
    the pieces on numba's threads (where its threading layer polls) or on Python worker threads. Returns which."""
    import lowering.kernels.context
    from lowering.runtime import workers

    monkeypatch.setattr(lowering.kernels.context, "usable_cpus", lambda: 3)
    if request.param == "python":
        monkeypatch.setattr(fusion, "numba_threads_available", lambda: False)
    elif not workers.numba_threads_available():
        pytest.skip("numba's threading layer does not poll here (or the CPU is not x86-64): Python workers only")
    return request.param


def _pieces_of(exe) -> list:
    """The row ranges of each fused group of an executable (from its generated code's bound runners)."""
    return [runner.pieces for name, runner in exe._fn.__globals__.items()
            if name.startswith("fz") and isinstance(runner, fusion.FusedGroup)]


@pytest.mark.parametrize("denormals", ["flush", "keep"])
def test_large_loops_run_in_pieces_with_the_same_bits(three_cpus, denormals):
    # Pieces run on worker threads in the caller's denormal mode: the tiny values flush (or not) as unfused.
    n = 3 * fusion.PARALLEL_ELEMENTS // 2 + 1001  # three pieces, not a multiple of them
    x = np.concatenate([_mixed(F32), RNG.standard_normal(n - 210).astype(F32)])
    y = (np.roll(x, 5) * F32(1e-36)).astype(F32)  # products and sums near and below the normal range

    def fn(x, y):
        return jnp.tanh(x * F32(1.5) + y) - jnp.exp(x * y), x * y + y

    module = import_jax(fn, x, y)
    exe = lowering.compile(module, fusion="always", denormals=denormals)
    got = _check(fn, x, y, denormals=denormals, nan_signs=True)
    exe(x, y)
    assert [len(p) for p in _pieces_of(exe)] == [3], exe.source
    np.testing.assert_array_equal(_bits(exe(x, y)[1]), _bits(got[1]))


def test_broadcast_rows_are_cut_between_rows(three_cpus):
    # With a fused broadcast of leading dimensions the loop runs over rows, and the pieces are whole rows.
    x = RNG.standard_normal((2053, 257)).astype(F32)

    def fn(x):
        return jnp.exp(x - lax.broadcast_in_dim(jnp.max(x, axis=-1), x.shape, (0,)))

    _check(fn, x)
    exe = lowering.compile(import_jax(fn, x), fusion="always")
    exe(x)
    (pieces,) = _pieces_of(exe)
    assert len(pieces) == 3 and pieces[0][0] == 0 and pieces[-1][1] == 2053  # rows, not elements


def test_small_loops_run_whole(three_cpus):
    x = RNG.standard_normal(1000).astype(F32)
    exe = lowering.compile(import_jax(lambda v: jnp.tanh(v * F32(2)) + v, x), fusion="always")
    exe(x)
    assert _pieces_of(exe) == [[(0, 1000)]]


@pytest.mark.parametrize("form", ["flat", "rows"])
def test_fused_loops_read_whole_vectors(form, monkeypatch, tmp_path):
    # The kernels index from 0 within their piece, so numba's negative-index wraparound folds away and
    # LLVM's vectorizer loads contiguous vectors; with `range(start, stop)` it emitted a masked gather per
    # vector (2.4x slower on a tanh loop). The IR is target independent: no gather on any CPU.
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))  # compiled here: numba's cache keeps no IR
    x = RNG.standard_normal((64, 256)).astype(F32)
    if form == "flat":
        def fn(x):
            return jnp.tanh(x * F32(1.5) + F32(0.25)) + x
    else:
        def fn(x):
            return jnp.exp(x - lax.broadcast_in_dim(jnp.max(x, axis=-1), x.shape, (0,)))
    exe = lowering.compile(import_jax(fn, x), fusion="always")
    exe(x)
    (runner,) = [r for name, r in exe._fn.__globals__.items() if name.startswith("fz") and isinstance(r, fusion.FusedGroup)]
    (signature,) = runner.kernel.signatures
    ir = runner.kernel.inspect_llvm(signature)
    assert "x float>" in ir, "the loop was not vectorized"
    assert "masked.gather" not in ir


def test_splat_constants_are_read_as_scalars():
    # canonicalize-broadcasts folds a broadcast scalar of up to 65,536 elements into a splat constant;
    # the fused loop reads its scalar (a relu is one fused maximum, not NumPy's three-pass maximum).
    x = np.concatenate([_mixed(F32, 490), np.zeros(2, F32), -np.zeros(2, F32)]).reshape(4, 3, 42)

    def fn(x):
        return jax.nn.relu(x), jnp.minimum(x, F32(0.5)) * x

    got = _check(fn, x, groups=1)
    source = lowering.compile(import_jax(fn, x), fusion="always").source
    assert "# fused: constant, maximum" in source, source
    for g, w in zip(got, jax.jit(fn)(x)):
        np.testing.assert_array_equal(_bits(g), _bits(np.asarray(w)))


def test_softmax_exponential_fused_after_an_unused_keepdims_broadcast():
    # jax's softmax leaves an unused keepdims broadcast of the row max after canonicalize-broadcasts: it
    # must not stop the subtract and exp from forming a group (a lone op gives way to the next group).
    x = RNG.standard_normal((4, 8, 64)).astype(F32)

    def fn(x):
        return jax.nn.softmax(x, axis=-1)

    _check(fn, x)
    source = lowering.compile(import_jax(fn, x), fusion="always").source
    assert "# fused: broadcast_in_dim, subtract, exponential" in source, source
    # (The row sums are XLA's order: lowering/kernels/tree_sum.py; the fused and unfused results above are the
    # same bits, and jax.jit's.)
    np.testing.assert_array_equal(lowering.compile(import_jax(fn, x))(x)[0].view(np.uint32),
                                  np.asarray(jax.jit(fn)(x)).view(np.uint32))


def test_bias_broadcast_read_per_column(three_cpus):
    # A bias (the trailing dimensions) is read with the inner index, the row statistics with the outer one,
    # in one group; pieces cut whole rows and read the whole bias.
    x = RNG.standard_normal((2053, 257)).astype(F32)
    bias = RNG.standard_normal(257).astype(F32)

    def fn(x, b):
        m = lax.broadcast_in_dim(jnp.max(x, axis=-1), x.shape, (0,))
        return jnp.tanh(x - m + lax.broadcast_in_dim(b, x.shape, (1,))) * F32(1.5)

    got = _check(fn, x, bias)
    exe = lowering.compile(import_jax(fn, x, bias), fusion="always")
    assert "# fused: broadcast_in_dim, subtract, broadcast_in_dim, add, tanh" in exe.source, exe.source
    exe(x, bias)
    assert len(_pieces_of(exe)[0]) == 3
    # (Not bit-compared with jax.jit: XLA's simplifier may reassociate the two adds of broadcasts.)
    np.testing.assert_allclose(got[0], np.asarray(jax.jit(fn)(x, bias)), rtol=1e-5, atol=1e-6)


def test_broadcasts_that_expand_size_one_dimensions_are_read_in_the_loop():
    # flax's Conv bias is reshaped to (1, 1, 1, c) and broadcast to (n, h, w, c); keepdims statistics are (r, 1):
    # their size-1 dimensions read like absent ones (inner / outer), inside the group -- not a broadcast computed
    # on its own whose stride-0 view the group copied whole every call. A middle dimension stays its kernel's.
    x = RNG.standard_normal((4, 6, 5, 16)).astype(F32)
    bias, scale = RNG.standard_normal((1, 1, 1, 16)).astype(F32), RNG.standard_normal((4, 1, 1, 1)).astype(F32)
    middle = RNG.standard_normal((1, 6, 1, 1)).astype(F32)

    def fn(x, b, s, m):
        y = jnp.maximum(x + lax.broadcast_in_dim(b, x.shape, (0, 1, 2, 3)), F32(0))
        z = y * lax.broadcast_in_dim(s, x.shape, (0, 1, 2, 3)) - F32(0.5)
        return z, jnp.tanh(z) * lax.broadcast_in_dim(m, x.shape, (0, 1, 2, 3))

    _check(fn, x, bias, scale, middle)
    source = lowering.compile(import_jax(fn, x, bias, scale, middle), fusion="always").source
    (call,) = [line for line in source.splitlines() if "# fused:" in line]
    arguments = call[call.index("(") + 1:call.index(")")].split(", ")
    assert "a1" in arguments and "a2" in arguments and "a3" not in arguments, source  # (b, s read in the loop; m not)
    got = lowering.compile(import_jax(fn, x, bias, scale, middle), fusion="always")(x, bias, scale, middle)
    for g, w in zip(got, jax.jit(fn)(x, bias, scale, middle)):
        np.testing.assert_array_equal(_bits(g), _bits(w))


def test_cheap_large_loops_run_whole(three_cpus):
    # Handing a piece to a Python worker costs about as much as a few hundred thousand additions: a cheap loop
    # of that size runs whole there, one with transcendental work is cut. numba's polling threads take a piece
    # at little cost: there the threshold is lower.
    x = RNG.standard_normal(2 * fusion.PARALLEL_ELEMENTS).astype(F32)
    cheap = lowering.compile(import_jax(lambda v: v * F32(2) + v, x), fusion="always")
    costly = lowering.compile(import_jax(lambda v: jnp.exp(jnp.tanh(v) * F32(2)) + v, x), fusion="always")
    cheap(x), costly(x)
    threshold = fusion.PARALLEL_MIN_NS if three_cpus == "numba" else fusion.PARALLEL_MIN_NS_PYTHON
    for exe in (cheap, costly):
        (runner,) = [r for name, r in exe._fn.__globals__.items() if name.startswith("fz")]
        assert len(runner.pieces) == (3 if runner.estimated_ns >= threshold else 1)
        assert (runner.bounds is not None) == (len(runner.pieces) > 1 and three_cpus == "numba")
    assert [len(p) for p in _pieces_of(costly)] == [3]
    if three_cpus == "python":
        assert [len(p) for p in _pieces_of(cheap)] == [1]


def _rows(dtype, rows, n):
    """Rows of mixed values: spread magnitudes, infinities, denormals, and rows of zeros of both signs."""
    x = (RNG.standard_normal((rows, n)) * np.exp(RNG.uniform(-6, 6, (rows, n)))).astype(dtype)
    tiny = np.finfo(dtype).tiny
    x[0] = -0.0
    x[1] = np.where(np.arange(n) % 3 == 0, dtype(0.0), dtype(-0.0))
    x[2] = -np.abs(x[2])
    x[2, n // 2] = tiny / 3  # the row's maximum is a denormal
    x[3, 0], x[3, n - 1] = np.inf, -np.inf
    x[4, :] = np.abs(x[4]) + dtype(1)
    x[4, n // 3] = -tiny / 5  # the row's minimum is a denormal
    return x


def _reduce_groups(exe) -> list:
    return [line for line in exe.source.splitlines() if "# fused:" in line and "reduce" in line]


@pytest.mark.parametrize("denormals", ["flush", "keep"])
@pytest.mark.parametrize("n", [7, 128, 300])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.sample(4)
def test_row_reductions_join_the_group_with_the_kernels_bits(dtype, n, denormals, monkeypatch):
    # A softmax: the bias add and the row maximum in one loop, the exponentials and the row sum in another;
    # and a maximum and a minimum of one group's rows. Each row's reduction is the reduction kernel's, bit for
    # bit: the sum in NumPy's order, zeros with XLA's sign (-0 < +0), a denormal maximum flushed in "flush" mode.
    # (As on hosts without YNNPACK's AVX-512 sums: there sums of 4,096 elements or more stay with their kernel.)
    from lowering.kernels import host

    monkeypatch.setattr(host, "measured_host", lambda: False)
    x = _rows(dtype, 37, n)
    bias = RNG.standard_normal(n).astype(dtype)

    def softmax(x, b):
        z = x + b
        e = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))
        s = jnp.sum(e, axis=-1)
        return e / s[:, None], s

    def extrema(x):
        z = -x  # (negation passes denormals through in "flush" mode too: the reductions see them)
        return jnp.max(z, axis=-1), jnp.min(z, axis=-1), z

    _check(softmax, x, bias, denormals=denormals)
    got = _check(extrema, -x, denormals=denormals)
    assert list(np.signbit(got[0][:2])) == [True, False] and list(np.signbit(got[1][:2])) == [True, True]
    flushed = denormals == "flush"
    assert (got[0][2] == 0) == flushed and (got[1][4] == 0) == flushed
    for fn, args, count in ((softmax, (x, bias), 2), (extrema, (-x,), 1)):
        exe = lowering.compile(import_jax(fn, *args), fusion="always", denormals=denormals)
        assert len(_reduce_groups(exe)) == count, exe.source
    np.testing.assert_allclose(got[0][5:], np.asarray(jax.jit(extrema)(-x)[0])[5:])


def test_a_nan_row_recomputes_the_group_with_the_ops_kernels(monkeypatch):
    # A row maximum meeting a NaN: NumPy's reduce gives the NaN it propagates (payload and sign); the fused
    # kernel says so and the group is computed by the ops' own kernels, the same bits as unfused.
    x = _rows(F32, 20, 50)
    bits = np.array([np.nan], F32).view(np.uint32)
    bits |= 0x80000005  # a negative NaN with a payload
    x[7, 11] = bits.view(F32)[0]

    def fn(x):
        return jnp.max(x * F32(3), axis=-1)

    exe = lowering.compile(import_jax(fn, x), fusion="always")
    (runner,) = [r for name, r in exe._fn.__globals__.items() if name.startswith("fz")]
    calls = []
    real = runner.interpreted
    monkeypatch.setattr(runner, "interpreted", lambda *a: calls.append(1) or real(*a))
    clean = np.where(np.isnan(x), F32(1), x)
    exe(clean)
    assert calls == []
    _check(fn, x)
    (got,) = exe(x)
    assert calls == [1]
    np.testing.assert_array_equal(_bits(got), _bits(lowering.compile(import_jax(fn, x), fusion="never")(x)[0]))


def test_row_reductions_in_pieces(three_cpus, monkeypatch):
    # A large softmax runs in pieces of whole rows, each computing its rows' reductions (a NaN in a later
    # piece's row is reported from that piece). (As on hosts without YNNPACK's AVX-512 sums, where the row sum
    # joins the group.)
    from lowering.kernels import host

    monkeypatch.setattr(host, "measured_host", lambda: False)
    x = _rows(F32, 2053, 257)

    def fn(x):
        z = jnp.tanh(x * F32(1.5))
        m = jnp.max(z, axis=-1, keepdims=True)
        e = jnp.exp(z - m)
        return e / jnp.sum(e, axis=-1, keepdims=True), m

    _check(fn, x)
    exe = lowering.compile(import_jax(fn, x), fusion="always")
    exe(x)
    runners = [exe._fn.__globals__[line.split("= ")[1].split("(")[0]] for line in _reduce_groups(exe)]
    assert [len(r.pieces) for r in runners] == [3, 3], exe.source
    x[2000, 5] = np.nan
    _check(fn, x)


def test_reductions_that_stay_with_their_kernel():
    # Only reductions over the rows the loop runs over, with the body's identity as init, join a group.
    x = RNG.standard_normal((16, 40)).astype(F32)
    for fn in (lambda v: lax.reduce(v * F32(2), F32(1), lax.max, (1,)),  # init 1: not the identity
               lambda v: jnp.sum(v * F32(2), axis=0),  # not the last dimension
               lambda v: jnp.prod(v * F32(2), axis=-1),  # not a sum, maximum or minimum
               lambda v: jnp.sum((v * F32(2)).astype(jnp.int32), axis=-1)):  # not a float
        _check(fn, x)
        assert _reduce_groups(lowering.compile(import_jax(fn, x), fusion="always")) == []


def test_a_denormal_row_maximum_flushes_as_the_kernel_does():
    # A denormal constant as a row's maximum: in "flush" mode the kernel's init -inf op total reads it as a
    # zero (DAZ); the fused loop has it as a zero already (converted to f32 under the caller's MXCSR).
    tiny = np.finfo(F32).tiny
    x = -np.abs(RNG.standard_normal((8, 40)).astype(F32)) - F32(1)
    x[::2, 3] = 1

    def fn(x):
        return jnp.max(jnp.where(x > 0, F32(tiny / 3), x * F32(2)), axis=-1)

    for denormals in ("flush", "keep"):
        (got,) = _check(fn, x, denormals=denormals)
        assert (got[0] == 0) == (denormals == "flush") and got[1] < -1
        assert _reduce_groups(lowering.compile(import_jax(fn, x), fusion="always")), "not fused"


@pytest.mark.parametrize("n", [8, 40])
def test_row_reductions_under_a_mask_broadcast_over_two_dimensions(n, monkeypatch):
    # Attention's causal mask, broadcast over the last two dimensions, makes the loop's rows n * n long: each
    # holds n reduction rows, reduced at the end of the loop row. A NaN in one of them recomputes the group.
    # (As on hosts without YNNPACK's AVX-512 sums, where the 9,600-element row sums of n = 40 join the group.)
    from lowering.kernels import host

    monkeypatch.setattr(host, "measured_host", lambda: False)
    x = _rows(F32, 2 * 3 * n, n).reshape(2, 3, n, n)
    mask = np.tril(np.ones((n, n), bool))

    def fn(x, mask):
        s = jnp.where(mask, x * F32(0.125), F32(-1e9))
        return jnp.max(s, axis=-1), jnp.sum(s, axis=-1), jnp.min(s, axis=-1)

    _check(fn, x, mask)
    exe = lowering.compile(import_jax(fn, x, mask), fusion="always")
    assert len(_reduce_groups(exe)) == 1 and "reduce, reduce, reduce" in _reduce_groups(exe)[0], exe.source
    x[1, 2, n - 1, 3] = np.nan
    _check(fn, x, mask)


@pytest.mark.parametrize("loops", ["never", "always"])
def test_interleaved_updates_of_several_shapes_fuse_a_group_per_shape(loops, monkeypatch):
    # An optimizer's update runs through its parameters one tree.map at a time, so the ops of the parameters'
    # shapes interleave: each shape's chain is a group of its own (the planner kept one group open at a time: a
    # train step's update ran op by op but for its first shape), with the ops' own bits; with compiled segments
    # (loop_compilation="always") the scalar step between them is a segment standing inside the groups' spans.
    monkeypatch.setenv("XLA_DIALECT_LOOP_COMPILATION", loops)
    params = (RNG.standard_normal((96, 64)).astype(F32), RNG.standard_normal(8192).astype(F32))
    grads = tuple(RNG.standard_normal(p.shape).astype(F32) for p in params)
    state = tuple(np.abs(RNG.standard_normal(p.shape)).astype(F32) for p in params)

    def adam(params, grads, m, v, step):
        m = jax.tree.map(lambda m, g: F32(0.9) * m + F32(0.1) * g, m, grads)
        v = jax.tree.map(lambda v, g: F32(0.999) * v + F32(0.001) * g * g, v, grads)
        scale = F32(0.01) * jnp.sqrt(F32(1) - F32(0.999) ** step) / (F32(1) - F32(0.9) ** step)
        return jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + F32(1e-8)), params, m, v), m, v

    args = (params, grads, state, state, F32(3))
    flat = jax.tree.leaves(args)
    module = import_jax(lambda *a: adam(*jax.tree.unflatten(jax.tree.structure(args), a)), *flat)
    fused = lowering.compile(module, fusion="always", loop_compilation=loops)
    plain = lowering.compile(module, fusion="never", loop_compilation="never")
    shapes = {tuple(g.shape) for g in fused._fn.__globals__.values() if isinstance(g, fusion.FusedGroup)}
    assert shapes == {(96, 64), (8192,)}, fused.source
    for got, want in zip(fused(*flat), plain(*flat)):
        np.testing.assert_array_equal(_bits(got), _bits(want))


def _payload_nans(dtype, n):
    """``n`` NaNs of both signs, each with its own payload."""
    unsigned = np.uint32 if dtype == F32 else np.uint64
    quiet = unsigned(0x7FC00000) if dtype == F32 else unsigned(0x7FF8000000000000)
    sign = unsigned(1) << unsigned(8 * np.dtype(dtype).itemsize - 1)
    bits = np.array([quiet | unsigned(k + 1) | (sign if k % 2 else unsigned(0)) for k in range(n)], unsigned)
    return bits.view(dtype)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_fused_loops_leave_nan_payloads_to_the_kernels(dtype):
    # A fused loop computes adds, multiplies and FMAs without their NaN-payload rule (lowering.kernels.scalar_numbers:
    # the element-wise workload ran 2x faster); a NaN output sends the group to the ops' kernels, so every
    # configuration gives the NaN jax.jit gives, and fused and unfused the same bits.
    x, y, z = (_mixed(dtype, 300) for _ in range(3))
    nans = _payload_nans(dtype, len(x[::10]))
    x[::10], y[3::10], z[5::10] = nans, nans[::-1][:len(y[3::10])], nans[:len(z[5::10])]

    def fn(x, y, z):
        return x * y + z, (x + y) * dtype(3), jnp.tanh(x * y) + z

    module = import_jax(fn, x, y, z)
    fused = lowering.compile(module, fusion="always")
    (runner,) = [r for name, r in fused._fn.__globals__.items() if name.startswith("fz")]
    assert runner.scalars == "lowering.kernels.scalar_numbers"
    _check(fn, x, y, z, groups=1)
    want = jax.jit(fn)(x, y, z)
    for got, expected in zip(fused(x, y, z), want):
        np.testing.assert_array_equal(_bits(got), _bits(expected))
    clean = [np.where(np.isnan(v), dtype(0.5), v) for v in (x, y, z)]
    for got, expected in zip(fused(*clean), jax.jit(fn)(*clean)):
        np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_groups_reading_nan_bits_keep_the_nan_rule():
    # A total-order compare turns a NaN's payload and sign into a pred, which the fused loop's NaN check does not
    # see: such a group compiles the definitions with their NaN rule (lowering.kernels.scalar_numbers.payload_free).
    from xla_dialect import XlaBuilder

    x = _mixed(F32, 64)
    y = np.roll(x, 5)
    nans = _payload_nans(F32, len(x[::8]))
    x[::8], y[2::8] = nans, nans[::-1][:len(y[2::8])]
    for compare_type, scalars in [("TOTALORDER", "lowering.kernels.scalar"),
                                  ("FLOAT", "lowering.kernels.scalar_numbers")]:
        b = XlaBuilder("total_order")
        p, q = b.parameter(0, "f32[74]"), b.parameter(1, "f32[74]")
        total = b.add(b.mul(p, q), p)
        b.compare(total, b.mul(q, p), "LT", compare_type)
        module = b.build()
        fused = lowering.compile(module, fusion="always")
        (runner,) = [r for name, r in fused._fn.__globals__.items() if name.startswith("fz")]
        assert runner.scalars == scalars, compare_type
        (got,) = fused(x, y)
        (want,) = lowering.compile(module, fusion="never")(x, y)
        np.testing.assert_array_equal(got, want)
