"""Compiled while loops (lowering.executor.compiled_loops): the same bits as the interpreted loop, op by op."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from lowering.executor import compiled_loops, compiled_segments
from lowering.runtime import generated_modules, numba_cache, workers
from helpers import in_forked_child
from xla_dialect.errors import XlaError

F32, F64 = np.float32, np.float64
RNG = np.random.default_rng(0)


def _bits(a):
    a = np.atleast_1d(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _both(fn, *args):
    """Results of the compiled and the interpreted program, and whether its first loop compiled: the loop writer
    accepts it and generated machine code ran (:func:`_run_compiled`). (Not ``compile_loop``: that compiles the loop
    on its own, which the executor does not when a segment holds the loop -- it doubled these tests' numba time.)"""
    module = import_jax(fn, *args)
    whiles = [op for op in module.walk() if op.name == "hlo.while"]
    assert whiles, "the program has no while loop"
    compiled, machine_code_calls = _run_compiled(module, args)
    interpreted = lowering.compile(module, loop_compilation="never")(*args)
    eligible = _writes_loop(module, whiles[0])
    if eligible:
        assert machine_code_calls, "the loop is eligible, but no compiled loop or segment ran"
    return _leaves(compiled), _leaves(interpreted), eligible


def _writes_loop(module, loop) -> bool:
    """Whether the compiled-loop writer writes ``loop`` (an ``hlo.while`` of ``module``)."""
    from xdsl.dialects import func

    from xla_dialect.types import numpy_dtype

    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    try:
        compiled_loops.loop_source(loop, functions, numpy_dtype)
    except compiled_loops.Ineligible:
        return False
    return True


def _run_compiled(module, args):
    """``module``'s results with ``loop_compilation="always"``, and how many calls ran generated machine code (a
    compiled loop or segment)."""
    calls = []
    original = compiled_loops.call_compiled

    def counted(function, *arguments):
        calls.append(function)
        return original(function, *arguments)

    compiled_loops.call_compiled = compiled_segments.call_compiled = counted
    try:
        out = lowering.compile(module, loop_compilation="always")(*args)
    finally:
        compiled_loops.call_compiled = compiled_segments.call_compiled = original
    return out, len(calls)


def _assert_same(fn, *args, eligible=True):
    compiled, interpreted, was_eligible = _both(fn, *args)
    assert was_eligible == eligible
    assert len(compiled) == len(interpreted)
    for c, i in zip(compiled, interpreted):
        assert np.asarray(c).dtype == np.asarray(i).dtype and np.shape(c) == np.shape(i)
        np.testing.assert_array_equal(_bits(c), _bits(i))
    return compiled


def _floats(dtype, n):
    x = RNG.standard_normal(n) * np.exp(RNG.uniform(-5, 5, n))
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-310, 3.5]
    return np.concatenate([x, specials]).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_scalar_fori_loop_with_fma(dtype):
    def fn(x):
        return lax.fori_loop(0, 500, lambda i, v: v * dtype(0.999) + dtype(0.001), x)

    out = _assert_same(fn, dtype(0.5))
    np.testing.assert_array_equal(_bits(out[0]), _bits(jax.jit(fn)(dtype(0.5))))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_elementwise_ops_on_arrays(dtype):
    x = _floats(dtype, 40)
    y = np.roll(x, 3)

    def fn(x, y):
        def body(i, state):
            a, b = state
            m = jnp.maximum(a, b) - jnp.minimum(a, -b)
            c = jnp.where(a > b, a / (jnp.abs(b) + dtype(1)), -a * b)
            s = jnp.sin(a) + jnp.cos(b) - jnp.tan(m * dtype(1e-3))
            return c + s * dtype(0.5), b - a

        return lax.fori_loop(0, 7, body, (x, y))

    out = _assert_same(fn, x, y)
    for o, e in zip(out, jax.jit(fn)(x, y)):  # the same as XLA, where the interpreted kernels are
        np.testing.assert_array_equal(_bits(o), _bits(e))


def test_integer_wraparound_bitwise_and_conversions():
    def fn(n, x):
        def body(i, state):
            a, u, f, p = state
            a = a * np.int32(1103515245) + np.int32(12345)  # wraps
            u = (u ^ (u << np.uint32(13))) | np.uint32(1)
            f = f + a.astype(F32) * F32(1e-9) + u.astype(F32) * F32(1e-10)
            p = jnp.logical_xor(p, a > 0)
            return a, u, f, p

        a, u, f, p = lax.fori_loop(0, n, body, (np.int32(1), np.uint32(7), F32(0), False))
        return a, u, f, p, f.astype(np.int32), (f * F32(1e12)).astype(np.int8), p.astype(F32)

    _assert_same(fn, np.int32(300), F32(0))


def test_float_to_int_saturation_and_nan():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, -0.5, 255.9, 256.0], F32)

    def fn(x):
        def body(i, state):
            v, a, b, c = state
            return v, v.astype(np.int32), v.astype(np.uint8), v.astype(np.int64)

        zeros = (np.zeros(10, np.int32), np.zeros(10, np.uint8), np.zeros(10, np.int64))
        return lax.fori_loop(0, 2, body, (x, *zeros))[1:]

    out = _assert_same(fn, x)
    for o, e in zip(out, jax.jit(fn)(x)):
        np.testing.assert_array_equal(o, e)


@pytest.mark.parametrize("n", [1, 5, 8, 9, 16, 127, 128, 129, 300, 1000])
def test_sums_follow_the_interpreted_order(n):
    x = _floats(F32, n)[:n] * F32(1e3)

    def fn(x):
        return lax.fori_loop(0, 3, lambda i, s: s + jnp.sum(x * s), F32(0.25))

    _assert_same(fn, np.where(np.isfinite(x), x, F32(1)))


def test_scan_with_dynamic_slices_and_reductions():
    xs = RNG.standard_normal((64, 16), dtype=F32)

    def fn(xs):
        return lax.scan(lambda c, row: (c * F32(0.9) + jnp.sin(row), (c.max(), c.prod(), c.sum())),
                        jnp.zeros(16, jnp.float32), xs)

    _assert_same(fn, xs)  # (the float max as the interpreted kernel's fold: signed zeros and NaNs)
    specials = xs.copy()
    specials[3, :4] = [np.nan, -0.0, 0.0, -np.nan]
    specials[7, 5:8] = [-np.inf, 1e-40, -1e-41]
    _assert_same(fn, specials)

    def fn2(xs):
        return lax.scan(lambda c, row: (c * F32(0.9) + jnp.sin(row), c.sum()), jnp.zeros(16, jnp.float32), xs)

    _assert_same(fn2, xs)


def test_ineligible_loops_fall_back():
    w = RNG.standard_normal((8, 8), dtype=F32)

    def with_an_fft(x):  # (complex values and FFTs are not compiled in loops)
        return lax.fori_loop(0, 3, lambda i, v: jnp.abs(jnp.fft.fft(jnp.tanh(v @ w))).astype(F32), x)

    _assert_same(with_an_fft, RNG.standard_normal((4, 8), dtype=F32), eligible=False)


def _compiled_calls(monkeypatch) -> list:
    """A list that gets an entry for every call of a compiled loop."""
    calls = []
    original = compiled_loops.CompiledLoop.__call__
    monkeypatch.setattr(compiled_loops.CompiledLoop, "__call__", lambda self, state: calls.append(1) or original(self, state))
    return calls


def test_auto_mode_switches_in_the_middle_of_a_call(monkeypatch):
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)  # (never compiled before:
    # a loop an earlier run compiled is loaded at its first call, tests/test_numba_cache.py)
    monkeypatch.setattr(compiled_loops, "AUTO_THRESHOLD", 100)
    monkeypatch.delenv("XLA_DIALECT_LOOP_COMPILATION", raising=False)
    # The background compilation made synchronous, so the switch happens at iteration 100 of the first call.
    monkeypatch.setattr(compiled_loops, "compile_in_background", lambda job: job())
    calls = _compiled_calls(monkeypatch)

    def fn(x):
        return lax.fori_loop(0, 250, lambda i, v: v * F32(1.001) + jnp.sin(v), x)

    x = _floats(F32, 20)
    module = import_jax(fn, x)
    auto = lowering.compile(module)
    never = lowering.compile(module, loop_compilation="never")
    from lowering.executor import compiled_segments

    segment_calls = []
    call_compiled = compiled_segments.call_compiled
    monkeypatch.setattr(compiled_segments, "call_compiled",
                        lambda fn, *args: segment_calls.append(1) or call_compiled(fn, *args))
    # The first call switches after 100 iterations; the second runs compiled code: the loop, or the segment
    # around it if its background compilation (which the loop body's fused group starts) is done by then.
    np.testing.assert_array_equal(_bits(auto(x)[0]), _bits(never(x)[0]))
    assert len(calls) == 1 and not segment_calls
    np.testing.assert_array_equal(_bits(auto(x)[0]), _bits(never(x)[0]))
    assert len(calls) + len(segment_calls) == 2


def test_auto_mode_compiles_in_the_background(monkeypatch):
    """The interpreted loop keeps running while numba compiles; once done, calls run the compiled loop."""
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)  # (never compiled before:
    # a loop an earlier run compiled is loaded at its first call, tests/test_numba_cache.py)
    monkeypatch.setattr(compiled_loops, "AUTO_THRESHOLD", 10)
    monkeypatch.delenv("XLA_DIALECT_LOOP_COMPILATION", raising=False)

    def fn(x):
        return lax.fori_loop(0, 40, lambda i, v: v * F32(0.999) + jnp.cos(v), x)

    x = _floats(F32, 12)
    module = import_jax(fn, x)
    auto = lowering.compile(module)
    never = lowering.compile(module, loop_compilation="never")
    expected = _bits(never(x)[0])
    np.testing.assert_array_equal(_bits(auto(x)[0]), expected)  # (compiled or not by the end: the same bits)
    assert compiled_loops.wait_for_background_compiles(timeout=600)
    calls = _compiled_calls(monkeypatch)
    from lowering.executor import compiled_segments

    segment_calls = []
    call_compiled = compiled_segments.call_compiled
    monkeypatch.setattr(compiled_segments, "call_compiled",
                        lambda fn, *args: segment_calls.append(1) or call_compiled(fn, *args))
    np.testing.assert_array_equal(_bits(auto(x)[0]), expected)
    # (the loop compiled, or the segment around it, whose compilation the loop's starts: lowering.executor.compile_queue)
    assert calls + segment_calls == [1]


def test_bad_option():
    module = import_jax(lambda x: x + 1, F32(1))
    with pytest.raises(XlaError, match="loop_compilation"):
        lowering.compile(module, loop_compilation="sometimes")


def test_generated_module_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))

    def fn(x):
        return lax.fori_loop(0, 10, lambda i, v: v + F32(1), x)

    _assert_same(fn, F32(0))
    assert list((tmp_path / "loops").glob("loop_*.py"))


def test_one_program_on_other_shapes_loads_the_same_machine_code(tmp_path, monkeypatch):
    # The sizes of generated code are read from an argument (generated_modules.hoisted_ints): the same program on
    # other batch sizes is the same module file, and numba's cache serves its machine code -- a load, not a compile.
    # Sizes up to LITERAL_SIZES stay literal (LLVM straightens tiny loops: odeint on 2-element arrays), and so do
    # row strides in index arithmetic (LLVM loads whole vectors of a row only when it sees them).
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))

    def fn(x, w):
        return lax.fori_loop(0, 5, lambda i, v: jnp.tanh(v * F32(0.9) + jnp.sum(v * w, axis=-1, keepdims=True)), x)

    modules = []
    for rows, cols in [(40, 24), (33, 24), (70, 24)]:
        x, w = _floats(F32, rows * cols)[:rows * cols].reshape(rows, cols), _floats(F32, cols)[:cols]
        compiled = _assert_same(fn, x, w)
        np.testing.assert_array_equal(_bits(compiled[0]), _bits(jax.jit(fn)(x, w)))
        modules.append({p.name for p in (tmp_path / "loops").glob("loop_*.py")})
    assert modules[0] and modules[0] == modules[1] == modules[2]
    assert len(list((tmp_path / "loops").glob("loop_*.ints"))) >= 3  # (one index per shape)


def test_each_generated_function_reads_only_its_own_sizes():
    # hoisted_ints gives every function of a module the _ints argument, and each reads into locals the sizes it
    # uses: random.gamma's segment read every slot of the module in each of its five functions (2,029 of 3,581
    # lines), all typed by numba and compiled by LLVM.
    source = ("def segment(a):\n    return chunk0(a, np.int64(40)) + chunk1(a)\n\n"
              "def chunk0(a, n):\n    for i in range(33):\n        a[i] = 70\n    return a\n\n"
              "def chunk1(a):\n    return a.reshape((1, 24)) + np.int64(3)\n")
    text, values = generated_modules.hoisted_ints(source)
    assert values == (40, 33, 70, 24)
    reads = {name: re.findall(r"_s(\d+) = _ints\[(\d+)\]", body)
             for name, body in re.findall(r"def (\w+)\(_ints[^)]*\):\n((?:    .*\n?)*)", text)}
    assert reads == {"segment": [("0", "0")], "chunk0": [("1", "1"), ("2", "2")], "chunk1": [("3", "3")]}
    assert "chunk0(_ints, a, np.int64(_s0))" in text and "np.int64(3)" in text  # (3 <= LITERAL_SIZES: literal)


def test_cached_modules_follow_the_runtime_helpers(tmp_path, monkeypatch):
    # numba's cache checks only a cached function's own file: a generated module names the digest of the
    # modules it can call into (lowering/kernels, lowering/runtime), so changing them gives new files, not stale
    # machine code.
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    source = "def loop(x):\n    return tanh_f32(x)\n"
    compiled_loops._load(source)
    (first,) = (tmp_path / "loops").glob("loop_*.py")
    assert f"# runtime {generated_modules.runtime_digest()}" in first.read_text()
    monkeypatch.setattr(generated_modules, "library_digest", lambda: "0123456789abcdef")
    compiled_loops._load(source)
    assert len(list((tmp_path / "loops").glob("loop_*.py"))) == 2


def test_fused_broadcasts_of_rows_and_columns():
    # A fused group in a loop body reads a broadcast row operand once per row and a bias once per column
    # (it once read both element by element, past their end).
    x = RNG.standard_normal((5, 24)).astype(F32)
    v = RNG.standard_normal(5).astype(F32)
    b = RNG.standard_normal(24).astype(F32)

    def fn(x, v, b):
        def body(i, carry):
            x, v = carry
            rows = lax.broadcast_in_dim(v, x.shape, (0,))
            bias = lax.broadcast_in_dim(b, x.shape, (1,))
            return jnp.tanh(x * rows + bias) + x * F32(0.5), v * F32(0.99)

        return lax.fori_loop(0, 40, body, (x, v))

    compiled = _assert_same(fn, x, v, b)
    for c, w in zip(compiled, _leaves(jax.jit(fn)(x, v, b))):
        np.testing.assert_array_equal(_bits(c), _bits(np.asarray(w)))


def test_in_place_updates_leave_arguments_and_constants_alone():
    # A scan's output buffer (and a carried array updated at one index) is written in place by the
    # compiled loop, after one copy when the loop is entered: the caller's array and the program's
    # constants keep their values, so a second call gives the same results.
    x = RNG.standard_normal((40, 8)).astype(F32)
    buf = RNG.standard_normal(40).astype(F32)
    before = buf.copy()

    def fn(x, buf):
        def body(i, carry):
            b, c = carry
            row = lax.dynamic_slice(x, (i, 0), (1, 8)).reshape(8)
            b = lax.dynamic_update_slice(b, (jnp.sum(row) + jnp.sum(c)).reshape(1), (i,))
            return b, c * F32(0.5) + jnp.sin(row)

        ys = lax.scan(lambda c, r: (c + r, jnp.sum(c)), jnp.zeros(8, F32), x)
        return lax.fori_loop(0, 40, body, (buf, jnp.ones(8, F32))), ys

    exe = lowering.compile(import_jax(fn, x, buf), loop_compilation="always")
    first = [np.array(v) for v in exe(x, buf)]
    second = exe(x, buf)
    np.testing.assert_array_equal(buf, before)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    _assert_same(fn, x, buf)
    source = _loop_sources(fn, x, buf)
    assert "updated in place" in source
    # The row only read by the sum and the sine is a view (whole trailing dimensions keep it contiguous).
    assert any("[" in line and line.rstrip().endswith("]") and "dynamic" not in line
               for line in source.splitlines() if " = c0[" in line), source


def _loop_sources(fn, *args) -> str:
    """The generated source of the program's compiled while loops."""
    from xdsl.dialects import func

    from passes.pipelines import prepare_for_execution
    from xla_dialect.types import numpy_dtype

    module = prepare_for_execution(import_jax(fn, *args))
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    return "\n".join(compiled_loops.loop_source(op, functions, numpy_dtype)[0]
                     for op in module.walk() if op.name == "hlo.while")


def _only_loop_source(module) -> str:
    """The generated source of the program's one while loop, after the executor's passes, one-thread BLAS."""
    from xdsl.dialects import func

    from passes.pipelines import prepare_for_execution
    from xla_dialect.types import numpy_dtype

    prepared = prepare_for_execution(module)
    functions = {op.sym_name.data: op for op in prepared.ops if isinstance(op, func.FuncOp)}
    (loop,) = [op for op in prepared.walk() if op.name == "hlo.while"]
    return compiled_loops.loop_source(loop, functions, numpy_dtype, single_thread_blas=True)[0]


def _rnn(h0, xs, wx, wh):
    def step(h, x):
        h = jnp.sin(x @ wx + h @ wh)  # (f64 tanh is not compiled yet; sin is, in both types)
        return h, h.sum()

    return lax.scan(step, h0, xs)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.sample(1)
def test_matrix_products_in_loops(dtype):
    # A dot in a loop body is the CBLAS gemm call NumPy's matmul makes: the same bits as the interpreted loop.
    xs = RNG.standard_normal((10, 8, 16)).astype(dtype)
    wx, wh = (RNG.standard_normal(s).astype(dtype) * 0.3 for s in ((16, 32), (32, 32)))
    h0 = RNG.standard_normal((8, 32)).astype(dtype)
    compiled = _assert_same(_rnn, h0, xs, wx, wh)
    for c, w in zip(compiled, _leaves(jax.jit(_rnn)(h0, xs, wx, wh))):
        # (BLAS and XLA sum the products and the row sums in different orders: close, not the same bits.)
        np.testing.assert_allclose(c, np.asarray(w), rtol=1e-4 if dtype == F32 else 1e-12,
                                   atol=1e-4 if dtype == F32 else 1e-12)


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
def test_larger_products_compile_only_under_one_blas_thread():
    # A product OpenBLAS would thread (m*k*n > 2**18) is compiled only when the executor holds a one-thread
    # BLAS limit (the automatic policy on small machines), where the gemm call is single-threaded either way.
    from xdsl.dialects import func

    from xla_dialect.types import numpy_dtype

    xs = RNG.standard_normal((6, 32, 128)).astype(F32)
    wx, wh = RNG.standard_normal((128, 256)).astype(F32), RNG.standard_normal((256, 256)).astype(F32) * 0.05
    h0 = np.zeros((32, 256), F32)
    module = import_jax(_rnn, h0, xs, wx, wh)
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    (loop,) = [op for op in module.walk() if op.name == "hlo.while"]
    assert compiled_loops.compile_loop(loop, functions, numpy_dtype, single_thread_blas=False) is None
    assert compiled_loops.compile_loop(loop, functions, numpy_dtype, single_thread_blas=True) is not None
    compiled = lowering.compile(module, blas_threads=1, loop_compilation="always")(h0, xs, wx, wh)
    interpreted = lowering.compile(module, blas_threads=1, loop_compilation="never")(h0, xs, wx, wh)
    for c, i in zip(_leaves(compiled), _leaves(interpreted)):
        np.testing.assert_array_equal(_bits(c), _bits(i))


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
def test_small_batched_products_compile_and_large_ones_stay_interpreted():
    # Small ones are the dot kernel's small_dot call (XLA's order); large batched ones are BLAS calls per batch
    # that compiled loops do not make.
    def fn(xs, w):
        return lax.scan(lambda h, x: (jnp.tanh(jnp.einsum("bij,bjk->bik", x + h, w)), h.sum()), xs[0], xs)

    small = RNG.standard_normal((5, 2, 4, 6)).astype(F32), RNG.standard_normal((2, 6, 6)).astype(F32)
    _assert_same(fn, *small)
    large = RNG.standard_normal((2, 2, 64, 300)).astype(F32), RNG.standard_normal((2, 300, 300)).astype(F32)
    _assert_same(fn, *large, eligible=False)


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
def test_products_stay_interpreted_without_numpys_own_gemm(monkeypatch):
    # Only NumPy's own vendored OpenBLAS is called (another library's gemm may sum differently from np.matmul).
    from lowering.runtime import blas

    monkeypatch.setattr(blas, "_GEMM_ADDRESSES", {})
    monkeypatch.setattr(blas, "_inside_numpy", lambda path: False)
    assert blas.numpy_gemm_address(F32) is None
    # (Products beyond lowering.kernels.small_dot's range: small ones are the project's own loop, not BLAS.)
    xs = RNG.standard_normal((2, 8, 300)).astype(F32)
    wx, wh = (RNG.standard_normal(s).astype(F32) * 0.05 for s in ((300, 320), (320, 320)))
    _assert_same(_rnn, RNG.standard_normal((8, 320)).astype(F32), xs, wx, wh, eligible=False)


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
@pytest.mark.parametrize("denormals", ["flush", "keep"])
def test_independent_products_run_as_a_pair_with_the_same_bits(denormals):
    # An RNN step's x @ wx and h @ wh (independent) run at once on two CPUs where numba's threading layer
    # keeps its workers polling; the second CPU computes in the caller's denormal mode. Operands near the
    # bottom of the normal range make flushing visible in the products.
    xs = (RNG.standard_normal((6, 32, 128)) * 1e-19).astype(F32)
    wx = (RNG.standard_normal((128, 256)) * 1e-19).astype(F32)
    wh = (RNG.standard_normal((256, 256)) * 0.05).astype(F32)
    h0 = (RNG.standard_normal((32, 256)) * 1e-37).astype(F32)

    def step_fn(h0, xs, wx, wh):
        return lax.scan(lambda h, x: (x @ wx + h @ wh, jnp.sum(h)), h0, xs)

    module = import_jax(step_fn, h0, xs, wx, wh)
    if workers.numba_threads_available():
        source = _only_loop_source(module)
        assert "gemm_pair(" in source or "gemm_pair_balanced(" in source  # (unequal products: balanced)
    compiled = lowering.compile(module, blas_threads=1, loop_compilation="always", denormals=denormals)
    interpreted = lowering.compile(module, blas_threads=1, loop_compilation="never", denormals=denormals)
    got, want = _leaves(compiled(h0, xs, wx, wh)), _leaves(interpreted(h0, xs, wx, wh))
    for c, i in zip(got, want):
        np.testing.assert_array_equal(_bits(c), _bits(i))
    tiny = np.abs(want[0]) < np.finfo(F32).tiny
    assert tiny.any() and (denormals == "keep") == bool((want[0][tiny] != 0).any())


@pytest.mark.parametrize("denormals", ["flush", "keep"])
def test_large_products_in_xla_order_run_as_a_pair_with_jax_bits(denormals):
    # On the measured host an RNN step's x @ wx and h @ wh are YNNPACK products computed in its order
    # (small_dot's register tiles); independent, they run at once on two of numba's threads (small_dot_pair),
    # with the interpreted loop's bits and jax.jit's.
    from lowering.kernels import small_dot as small_dot_module

    xs = RNG.standard_normal((6, 32, 128)).astype(F32)
    wx = (RNG.standard_normal((128, 256)) * 0.1).astype(F32)
    wh = (RNG.standard_normal((256, 256)) * 0.05).astype(F32)
    h0 = RNG.standard_normal((32, 256)).astype(F32)

    def step_fn(h0, xs, wx, wh):
        return lax.scan(lambda h, x: (x @ wx + h @ wh, jnp.sum(h)), h0, xs)

    if small_dot_module.small_dot_order(1, 32, 256, 256, F32) is None:
        pytest.skip("not a host with YNNPACK's measured AVX-512 kernels: the products run on BLAS")
    module = import_jax(step_fn, h0, xs, wx, wh)
    if workers.numba_threads_available():
        assert "small_dot_pair(" in _only_loop_source(module)
    compiled = lowering.compile(module, blas_threads=1, loop_compilation="always", denormals=denormals)
    interpreted = lowering.compile(module, blas_threads=1, loop_compilation="never", denormals=denormals)
    got, want = _leaves(compiled(h0, xs, wx, wh)), _leaves(interpreted(h0, xs, wx, wh))
    for c, i in zip(got, want):
        np.testing.assert_array_equal(_bits(c), _bits(i))
    for c, x in zip(got, _leaves(jax.jit(step_fn)(h0, xs, wx, wh))):
        np.testing.assert_array_equal(_bits(c), _bits(np.asarray(x)))


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_unequal_paired_products_share_the_larger_ones_columns(dtype):
    # x @ wx (32x128x256) and h @ wh (32x256x256): the larger product's first columns go with the smaller one,
    # where those column pieces give the whole product's bits (checked once per shape); the same bits as the
    # interpreted loop either way.
    xs = RNG.standard_normal((5, 32, 128)).astype(dtype)
    wx = (RNG.standard_normal((128, 256)) * 0.05).astype(dtype)
    wh = (RNG.standard_normal((256, 256)) * 0.05).astype(dtype)
    h0 = RNG.standard_normal((32, 256)).astype(dtype)
    module = import_jax(_rnn, h0, xs, wx, wh)
    cut = compiled_loops.balanced_cut(dtype, (32, 128, 256), (32, 256, 256))
    assert cut in (64, None)  # 1M + 0.5M multiply-adds on one thread, 1.5M on the other
    if workers.numba_threads_available():
        from xdsl.dialects import func

        from passes.pipelines import prepare_for_execution
        from xla_dialect.types import numpy_dtype

        prepared = prepare_for_execution(module)
        functions = {op.sym_name.data: op for op in prepared.ops if isinstance(op, func.FuncOp)}
        (loop,) = [op for op in prepared.walk() if op.name == "hlo.while"]
        source = compiled_loops.loop_source(loop, functions, numpy_dtype, single_thread_blas=True)[0]
        assert ("gemm_pair_balanced(" in source) == (cut is not None), source
    compiled = lowering.compile(module, blas_threads=1, loop_compilation="always")
    interpreted = lowering.compile(module, blas_threads=1, loop_compilation="never")
    for c, i in zip(_leaves(compiled(h0, xs, wx, wh)), _leaves(interpreted(h0, xs, wx, wh))):
        np.testing.assert_array_equal(_bits(c), _bits(i))


def test_balanced_cut():
    assert compiled_loops.balanced_cut(F32, (32, 256, 256), (32, 256, 256)) is None  # equal: a plain pair
    assert compiled_loops.balanced_cut(F32, (8, 8, 8), (8, 8, 16)) is None  # no whole 16-column piece
    cut = compiled_loops.balanced_cut(F32, (64, 64, 64), (64, 64, 512))
    assert cut is None or (cut % 16 == 0 and 16 <= cut <= 512 - 16)


@pytest.mark.usefixtures("products_on_blas")  # (the BLAS route's gemm calls in loops)
def test_dependent_products_are_not_paired():
    from xdsl.dialects import func

    from xla_dialect.types import numpy_dtype

    # (Products beyond lowering.kernels.small_dot's range, which BLAS computes.)
    x = RNG.standard_normal((3, 8, 320)).astype(F32)
    w, v = (RNG.standard_normal((320, 320)).astype(F32) * 0.05 for _ in range(2))

    def fn(x, w, v):
        return lax.scan(lambda h, r: ((h @ w) @ v + r, jnp.sum(h)), x[0], x)

    module = import_jax(fn, x, w, v)
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    (loop,) = [op for op in module.walk() if op.name == "hlo.while"]
    source = compiled_loops.loop_source(loop, functions, numpy_dtype, single_thread_blas=True)[0]
    assert "gemm_pair(" not in source and source.count("cblas_gemm(") == 2
    compiled = lowering.compile(module, blas_threads=1, loop_compilation="always")
    interpreted = lowering.compile(module, blas_threads=1, loop_compilation="never")
    for c, i in zip(_leaves(compiled(x, w, v)), _leaves(interpreted(x, w, v))):
        np.testing.assert_array_equal(_bits(c), _bits(i))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # (the child does not use jax)
def test_a_forked_child_runs_paired_products_one_after_the_other():
    # GNU OpenMP aborts a forked child that starts a parallel region its parent used: the child computes the
    # pair's products one after the other (same bits) instead.
    xs = RNG.standard_normal((4, 32, 128)).astype(F32)
    wx, wh = RNG.standard_normal((128, 256)).astype(F32), RNG.standard_normal((256, 256)).astype(F32) * 0.05
    h0 = np.zeros((32, 256), F32)
    exe = lowering.compile(import_jax(_rnn, h0, xs, wx, wh), blas_threads=1, loop_compilation="always")
    want = _leaves(exe(h0, xs, wx, wh))

    def child():
        got = _leaves(exe(h0, xs, wx, wh))
        return b"same" if all(np.array_equal(_bits(g), _bits(w)) for g, w in zip(got, want)) else b"different"

    assert in_forked_child(child) == b"same"


@pytest.mark.parametrize("user", [None, "300000"])
def test_openmp_spin_is_shortened_unless_the_user_chose(user):
    # A fresh process: GNU OpenMP reads GOMP_SPINCOUNT once, when it starts.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if user is not None:
        env["GOMP_SPINCOUNT"] = user
    code = ("import os; from lowering.runtime import workers as c; c.numba_threads_available(); "
            "print(os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    import platform

    expected = user if user is not None else (
        str(workers.GOMP_SPINCOUNT) if platform.machine().lower() in ("x86_64", "amd64") else "None")
    assert out.stdout.strip() == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subnormal_scalars_cross_into_compiled_loops(dtype):
    """A subnormal 0-d float (loop state or constant) keeps its value in a compiled loop, as in XLA: numba
    passed f32 scalars through a double, which the flush-to-zero mode made 0, so pow(NaN, 1e-45) after the
    loop gave 1.0 compiled and NaN interpreted and in jax.jit."""
    tiny = dtype(np.finfo(dtype).smallest_subnormal)
    x = np.array([np.nan, 1.0, 2.0, -np.nan, 0.0, np.inf, -1.0, 3.0], dtype)

    def state(a, t):
        return jnp.power(a, lax.fori_loop(0, 2, lambda i, v: jnp.where(v > 5, v, t), a))

    def constant(a):
        body = lambda i, v: (jnp.where(v[0] > 5, v[0], v[1]), jnp.asarray(tiny))  # noqa: E731
        return jnp.power(a, lax.fori_loop(0, 3, body, (a, jnp.asarray(dtype(2))))[0])

    def scalar_result(a, t):
        return lax.fori_loop(0, 3, lambda i, s: jnp.where(s > 1, s * 2, t), t) + a * 0

    for fn, args in ((state, (x, tiny)), (constant, (x,)), (scalar_result, (x, tiny))):
        expected = _bits(np.asarray(jax.jit(fn)(*args)))
        for loops in ("never", "always"):
            got = lowering.compile(import_jax(fn, *args), loop_compilation=loops)(*args)
            assert np.array_equal(_bits(np.asarray(got[0])), expected), (fn.__name__, loops)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_two_nan_operands_give_the_first_operands_nan_as_interpreted(dtype):
    """a + b and a * b of two NaNs keep a's payload and sign in the compiled loop as in the kernels (LLVM may
    swap a commutative op's operands)."""
    unsigned = np.uint32 if dtype == F32 else np.uint64
    quiet = int(np.array(np.nan, dtype).view(unsigned))
    sign = 1 << (8 * np.dtype(dtype).itemsize - 1)
    a = np.array([quiet | 1, quiet | 2 | sign, 0, quiet | 3], unsigned).view(dtype)
    b = np.array([quiet | 4 | sign, quiet | 5, quiet | 6, 0], unsigned).view(dtype)
    a[2], b[3] = dtype(1.5), dtype(2.5)

    def fn(x, y):
        def body(i, state):
            u, v = state
            return (u * v) + (v * u), (v + u) * (u + v)

        return lax.fori_loop(0, 3, body, (x, y))

    _assert_same(fn, a, b)


# -- structured ops and nested loops (issue 28: real programs' loop bodies) ---------------------------------


def test_nested_while_loops_compile_with_the_interpreted_bits():
    """An adaptive inner loop (a while inside a fori_loop), as ODE solvers and samplers have."""
    x = _floats(F32, 24)

    def fn(x):
        def outer(i, carry):
            def cond(state):
                y, k = state
                return (k < 5) & (jnp.max(jnp.abs(y)) > 1e-3)

            def body(state):
                y, k = state
                return y * 0.5 + jnp.float32(1e-4) * k, k + 1

            y, _ = lax.while_loop(cond, body, (carry, 0))
            return y + jnp.sin(y)

        return lax.fori_loop(0, 7, outer, x)

    _assert_same(fn, np.nan_to_num(x, posinf=3.0, neginf=-3.0))


def test_slices_concatenates_broadcasts_iota_and_bitcasts_in_loops():
    x = _floats(F32, 16)[:16].reshape(4, 4)

    def fn(x):
        def body(i, c):
            top = lax.slice(c, (0, 0), (2, 4))
            strided = lax.slice(c, (1, 0), (4, 4), (2, 1))
            joined = jnp.concatenate([strided, top], axis=0)[:4]
            column = jnp.broadcast_to(c[:, :1].T, (4, 4))  # a broadcast_in_dim of an array (transposed)
            index = lax.broadcasted_iota(jnp.float32, (4, 4), 1)
            bits = lax.bitcast_convert_type(joined, jnp.int32)
            flipped = lax.bitcast_convert_type(bits ^ jnp.int32(1), jnp.float32)
            return flipped * 0.5 + column * index

        return lax.fori_loop(0, 3, body, x)

    _assert_same(fn, x)


def test_pred_and_integer_reductions_in_loops():
    a = np.abs(_floats(F32, 64)) + 1.0
    a = np.nan_to_num(a, nan=2.0, posinf=50.0)

    def fn(a):
        def cond(state):
            x, i = state
            return (i < 50) & jnp.any(jnp.abs(x * x - a) > 1e-6 * a)

        def body(state):
            x, i = state
            return 0.5 * (x + a / x), i + 1

        x, i = lax.while_loop(cond, body, (a, 0))
        return x, i, jnp.all(x > 0), jnp.sum(jnp.arange(64) * i)

    _assert_same(fn, a)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_vector_matrix_products_in_loops_make_numpys_gemv_call(dtype):
    """``c @ k`` of a Runge-Kutta tableau row and the stages (an ODE solver's step): NumPy's gemv, same bits."""
    w = RNG.standard_normal((7, 3)).astype(dtype)
    back = RNG.standard_normal((3, 7)).astype(dtype)
    c = RNG.standard_normal(7).astype(dtype)

    def fn(c, w, back):
        def body(i, v):
            return jnp.sin(jnp.dot(v, w) @ back * 0.1 + v[:1])

        return lax.fori_loop(0, 9, body, c)

    _assert_same(fn, c, w, back)
    # A longer contraction (OpenBLAS's kernel blocks it) and a row vector of rank 2.
    w2 = RNG.standard_normal((37, 37)).astype(dtype)
    _assert_same(lambda v, w: lax.fori_loop(0, 4, lambda i, v: jnp.sin(v[None, :] @ w)[0], v),
                 RNG.standard_normal(37).astype(dtype), w2)


@pytest.mark.parametrize("mode", ["set", "add", "max"])
def test_one_window_scatters_in_loops(mode):
    """``ys.at[i].set(y)`` (an ODE solver's output rows) and combining updates, including indices out of bounds,
    which XLA skips."""
    ys = RNG.standard_normal((6, 3)).astype(F32)
    ys[2, 1] = np.nan

    def fn(ys):
        def body(i, acc):
            row = jnp.cos(acc[i % 6]) * 2.0
            at = acc.at[i - 2]  # (negative at first: out of bounds, skipped)
            return getattr(at, mode)(row, mode="drop")

        return lax.fori_loop(0, 11, body, ys)

    _assert_same(fn, ys)


@pytest.mark.parametrize("mode", ["set", "add", "max"])
def test_scatters_of_many_windows_and_vmapped_scatters_in_loops(mode):
    """Scatters of several windows in XLA's order: repeated indices (applied one after another: the last set
    wins, adds accumulate in update order), out-of-bounds indices skipped, windows of rows, and a vmapped
    update (batching dimensions, as jax writes ``vmap`` of ``x.at[i].set``)."""
    x = RNG.standard_normal((5, 4)).astype(F32)
    x[1, 2] = np.nan
    idx = np.array([3, 0, 3, 7, -1, 1, 3], np.int32)
    rows = np.array([2, 2, 0], np.int32)

    def fn(x, idx, rows):
        def body(i, acc):
            flat = acc.reshape(-1)
            flat = getattr(flat.at[(idx + i) % 9 - 1], mode)(jnp.sin(flat[:7]) * 3.0, mode="drop")
            acc = flat.reshape(5, 4)
            acc = getattr(acc.at[rows], mode)(jnp.cos(acc[:3]) + 1.0, mode="drop")
            per_row = jax.vmap(lambda r, j: getattr(r.at[j % 4], mode)(r[0] * 0.5))(acc, idx[:5] + i)
            return per_row

        return lax.fori_loop(0, 5, body, x)

    compiled = _assert_same(fn, x, idx, rows)
    np.testing.assert_array_equal(_bits(compiled[0]), _bits(jax.jit(fn)(x, idx, rows)))


def test_real_program_loops_compile_with_the_interpreted_bits():
    """The loop-heavy programs of benchmarks/real_programs.py (an adaptive ODE solve with nested loops,
    scatters and gemv products; a continued fraction; a rejection sampler; an LSTM scan; a Newton while loop)
    compile, and give the interpreter's bits."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import real_programs

    for make in (real_programs.odeint_pendulum, real_programs.lstm_scan, real_programs.newton_while):
        w = make()
        module = import_jax(w.fn, *w.args)
        whiles = [op for op in module.walk() if op.name == "hlo.while"]
        assert any(_writes_loop(module, op) for op in whiles), w.name
        compiled, machine_code_calls = _run_compiled(module, w.args)
        assert machine_code_calls, w.name
        compiled = _leaves(compiled)
        interpreted = _leaves(lowering.compile(module, loop_compilation="never")(*w.args))
        for a, b in zip(compiled, interpreted):
            np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=w.name)


def test_auto_mode_compiles_a_loop_of_few_heavy_iterations(monkeypatch):
    """A loop that runs few iterations per call (a sampler's rejection loop) is compiled once it has run
    AUTO_SECONDS interpreted, however few its iterations."""
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)  # (never compiled before:
    # a loop an earlier run compiled is loaded at its first call, tests/test_numba_cache.py)
    monkeypatch.setattr(compiled_loops, "AUTO_SECONDS", 1e-9)
    monkeypatch.setattr(compiled_loops, "compile_in_background", lambda job: job())
    monkeypatch.delenv("XLA_DIALECT_LOOP_COMPILATION", raising=False)
    calls = _compiled_calls(monkeypatch)

    def fn(x):
        return lax.fori_loop(0, 3, lambda i, v: v * F32(0.5) + jnp.sin(v), x)

    x = _floats(F32, 10)
    module = import_jax(fn, x)
    auto = lowering.compile(module)
    expected = _bits(lowering.compile(module, loop_compilation="never")(x)[0])
    np.testing.assert_array_equal(_bits(auto(x)[0]), expected)  # 3 iterations, interpreted: time spent
    assert calls == []
    np.testing.assert_array_equal(_bits(auto(x)[0]), expected)  # compiled before it starts
    assert calls == [1]


def test_a_read_only_state_does_not_compile_the_loop_again(monkeypatch):
    # numba compiles a function again, at the call, for a read-only array where it was compiled for a
    # writable one: an ODE solve's loop took 3 s more at its first compiled call with a cold cache. The loop
    # is compiled for writable state, and read-only state (a constant, a read-only argument) is copied.
    loops = []
    original = compiled_loops.CompiledLoop.__call__
    monkeypatch.setattr(compiled_loops.CompiledLoop, "__call__",
                        lambda self, state: loops.append(self) or original(self, state))
    table = np.arange(12, dtype=np.float32).reshape(3, 4)

    def fn(x):
        return lax.fori_loop(0, 50, lambda i, v: v * F32(0.5) + jnp.asarray(table), x)

    exe = lowering.compile(import_jax(fn, table), loop_compilation="always")
    plain = lowering.compile(import_jax(fn, table), loop_compilation="never")
    frozen = table.copy()
    frozen.flags.writeable = False
    for arg in (table, frozen):
        np.testing.assert_array_equal(exe(arg)[0], plain(arg)[0])
    # (the loop is compiled on its own, or inside a compiled segment of the function: the same holds for both)
    from lowering.executor.compiled_segments import CompiledSegment

    functions = [loop._fn for loop in loops] + [value.kernel for value in exe._fn.__globals__.values()
                                                if isinstance(value, CompiledSegment) and value.kernel is not None]
    assert functions and all(len(function.signatures) == 1 for function in functions)


def _while_bodies(fn, *args) -> list:
    """The bodies of the program's while loops as the executor sees them, outermost first."""
    from passes.pipelines import prepare_for_execution

    module = prepare_for_execution(import_jax(fn, *args))
    return [op.regions[1].block for op in module.walk() if op.name == "hlo.while"]


def test_stage_arrays_read_then_updated_are_written_in_place_in_nested_loops():
    # An explicit Runge-Kutta step: the inner loop reads the whole stage array (a product) and then writes one
    # row of it. Nothing sees the old contents after the write, so the inner loop updates the array in place
    # after one copy on entry (it was copied on every iteration: odeint's inner loop, 774 iterations a call).
    w = RNG.standard_normal((6, 7)).astype(F32) * F32(0.3)
    y0 = RNG.standard_normal(2).astype(F32)

    def fn(y0, w):
        def step(i, y):
            def stage(j, k):
                slope = jnp.sin(w[j] @ k + y)
                return k.at[j + 1].set(slope)

            k = lax.fori_loop(0, 6, stage, jnp.zeros((7, 2), F32).at[0].set(y))
            return y + F32(0.1) * (k[1] + k[6])

        return lax.fori_loop(0, 5, step, y0)

    _assert_same(fn, y0, w)
    inner = _while_bodies(fn, y0, w)[-1]
    assert list(compiled_loops.in_place_updates(inner)), "the stage array is not updated in place"


def test_state_whose_old_contents_are_read_after_the_update_is_copied():
    # The old row is read after the update in program order: writing in place would give the new value.
    x = RNG.standard_normal((8, 3)).astype(F32)

    def fn(x):
        def body(i, carry):
            a, s = carry
            updated = a.at[i].set(a[i] * F32(2) + F32(1))
            old_row = lax.dynamic_slice(a, (i, 0), (1, 3))  # (after the update in the program)
            return updated, s + jnp.sum(old_row)

        return lax.fori_loop(0, 8, body, (x, F32(0)))

    compiled = _assert_same(fn, x)
    np.testing.assert_array_equal(compiled[1], jax.jit(fn)(x)[1])
    (body,) = _while_bodies(fn, x)
    assert not compiled_loops.in_place_updates(body)


def test_conditionals_in_loop_bodies_compile_with_the_interpreted_bits():
    # lax.cond (a pred or an s32 selector: jax converts the predicate), lax.switch with an index out of range
    # (clamped by jax; XLA itself runs the last branch), a branch returning a constant, one returning the
    # state unchanged, a conditional inside a nested while, and one that updates a row of the state.
    x = _floats(F32, 16)
    x = np.nan_to_num(x, posinf=2.0, neginf=-2.0)

    def fn(x):
        def body(i, carry):
            v, acc, buf = carry
            v = lax.cond(i % 3 == 0, lambda v: v * F32(0.5) + F32(1), lambda v: v, v)
            w = lax.switch(i % 5 - 1, [lambda: jnp.sin(v), lambda: jnp.full(v.shape, F32(2)), lambda: v - F32(1)])
            acc = lax.cond(jnp.sum(w) > 0, lambda: acc + jnp.max(w), lambda: acc - F32(1))

            def inner(state):
                k, y = state
                return k + 1, lax.cond(y[0] > 0, lambda y: y * F32(0.25), lambda y: y + F32(0.125), y)

            _, v = lax.while_loop(lambda s: s[0] < 3, inner, (0, v))
            buf = lax.cond(i % 2 == 0, lambda b: b.at[i].set(acc), lambda b: b, buf)
            return v, acc, buf

        return lax.fori_loop(0, 12, body, (x, F32(0), jnp.zeros(12, F32)))

    compiled = _assert_same(fn, x)
    for c, j in zip(compiled, jax.jit(fn)(x)):
        np.testing.assert_allclose(c, j, rtol=1e-6)
    assert "if " in _loop_sources(fn, x)


@pytest.mark.parametrize("shape", [pytest.param((6, 5), marks=pytest.mark.slow),
                                   pytest.param((70, 3), marks=pytest.mark.slow), (4, 6, 5)])
def test_reductions_that_keep_dimensions_in_loops(shape):
    # Sums over the last axis and over leading axes (XLA's windows of 32: lowering/kernels/tree_sum.py), maxima and
    # minima with NaNs and signed zeros, products, integer sums, any/all, argmax/argmin (a reduce of two
    # operands), a logsumexp row step: compiled per output in the interpreted kernel's order, bitwise.
    x = _floats(F32, int(np.prod(shape)))[:int(np.prod(shape))]
    x = RNG.permutation(x).reshape(shape)
    k = np.arange(x.size, dtype=np.int32).reshape(shape) * np.int32(7919)

    def fn(x, k):
        def body(i, carry):
            v, s, m, p, n, a, q, lse = carry
            s = s + jnp.sum(v, axis=0).sum() + jnp.sum(v, axis=-1).sum()
            if v.ndim == 3:
                s = s + jnp.sum(v, axis=(0, 1)).sum() + jnp.max(v, axis=(0, 2)).sum()
            m = m + jnp.max(v, axis=0) - jnp.min(v, axis=-1).sum()
            p = p + jnp.prod(v * F32(0.5), axis=0).sum()
            n = n + (jnp.sum(k, axis=0) + jnp.max(k, axis=-1).sum()).astype(jnp.int32)
            a = a + (jnp.argmax(v, axis=0).sum() + jnp.argmin(v, axis=-1).sum()
                     + jnp.any(v > 0, axis=0).sum()).astype(jnp.int32)
            q = q + jnp.all(v < 1, axis=-1).sum().astype(jnp.int32)
            lse = lse + jax.nn.logsumexp(jnp.nan_to_num(v), axis=-1).sum()
            return v * F32(0.75) + F32(0.25), s, m, p, n, a, q, lse

        m0 = jnp.zeros(x.shape[1:], F32)
        n0 = jnp.zeros(k.shape[1:], jnp.int32)
        return lax.fori_loop(0, 3, body, (x, F32(0), m0, F32(0), n0, jnp.int32(0), jnp.int32(0), F32(0)))

    _assert_same(fn, x, k)


def test_a_reduce_with_a_general_body_in_a_loop():
    # A body of several ops (not one ufunc): combined pairwise, neighbours first, then with the initial value.
    x = _floats(F32, 13).reshape(3, 7)

    def combine(a, b):
        return jnp.maximum(a, b) * F32(0.5) + jnp.minimum(a, b)

    def fn(x):
        def body(i, v):
            r = lax.reduce(v, F32(0.125), combine, (1,))
            return v * F32(0.5) + r[:, None] + lax.reduce(v, F32(1), combine, (0, 1))

        return lax.fori_loop(0, 4, body, x)

    _assert_same(fn, np.nan_to_num(x, posinf=5.0, neginf=-5.0))


def test_gathers_in_loops():
    # x[idx] with indices out of range (clamped, as XLA clamps a gather's starts), rows of a matrix, an
    # embedding lookup, take_along_axis, a vmapped dynamic index (a gather with batching dimensions), unsigned
    # indices: compiled as the kernel computes the offsets, bitwise.
    x = _floats(F32, 16)
    table = RNG.standard_normal((10, 4)).astype(F32)
    idx = np.array([3, 0, 23, -5, 9, 9, 1], np.int32)
    tokens = RNG.integers(0, 10, (3, 5)).astype(np.int32)
    order = np.argsort(RNG.standard_normal((10, 4)), axis=0).astype(np.int32)

    def fn(x, table, idx, tokens, order):
        def body(i, carry):
            v, t, acc = carry
            g = v[jnp.clip(idx + i, -100, 100)]  # (jax clips in range; the gather clamps again)
            rows = t[idx % 10]
            emb = t[tokens].sum(axis=(0, 1))
            along = jnp.take_along_axis(t, order, axis=0)
            per_row = jax.vmap(lambda row, j: row[j])(t, (idx[:1] + i) % 4 + jnp.zeros(10, jnp.int32))
            unsigned = v[(idx.astype(jnp.uint32) + i.astype(jnp.uint32)) % 16]
            acc = acc + g.sum() + rows.sum() + emb.sum() + along[0].sum() + per_row.sum() + unsigned.sum()
            return v * F32(0.5) + acc * F32(1e-3), t * F32(0.75) + along * F32(0.25), acc

        return lax.fori_loop(0, 5, body, (x, table, F32(0)))

    args = (np.nan_to_num(x, posinf=2.0, neginf=-2.0), table, idx, tokens, order)
    compiled = _assert_same(fn, *args)
    for c, j in zip(compiled, jax.jit(fn)(*args)):  # (sums of gathered values: not in XLA's order everywhere)
        np.testing.assert_allclose(c, j, rtol=1e-5, atol=1e-6)


def test_sorts_in_loops():
    # jnp.sort (canonicalised keys: -0 == +0, NaN last), argsort (ties keep their order), top_k (TOTALORDER),
    # a two-key lexsort, a sort along the first axis: a stable merge sort calling the comparator's own ops,
    # bitwise equal to the interpreted kernel's (and to jax.jit: sorting does no arithmetic).
    x = _floats(F32, 24)
    x[:6] = [0.0, -0.0, 1.5, 1.5, np.nan, -np.nan]
    x = RNG.permutation(x)
    m = RNG.integers(-3, 3, (6, 5)).astype(F32)

    def fn(x, m):
        def body(i, carry):
            v, acc = carry
            s = jnp.sort(v)
            a = jnp.argsort(jnp.round(v * F32(2)))
            t, ti = lax.top_k(v, 5)
            lex = jnp.lexsort((v, jnp.round(v)))
            cols = jnp.sort(m + i.astype(F32), axis=0)
            acc = acc + a.astype(F32) + lex.astype(F32) + jnp.nansum(t) + ti.sum() + cols[0].sum()
            return jnp.roll(s, 1) * F32(0.5), acc

        return lax.fori_loop(0, 3, body, (x, jnp.zeros(x.shape, F32)))

    compiled = _assert_same(fn, x, m)
    for c, j in zip(compiled, jax.jit(fn)(x, m)):
        np.testing.assert_array_equal(_bits(c), _bits(j))


def test_window_reductions_in_loops():
    # Cumulative sums and products, an integer running max, a strided and padded 2-D window sum with base and
    # window dilation: the kernel's fold per output (row-major window positions, padding skipped), bitwise.
    x = np.nan_to_num(_floats(F32, 16), posinf=3.0, neginf=-3.0)
    img = RNG.standard_normal((5, 6)).astype(F32)
    k = RNG.integers(-50, 50, 12).astype(np.int32)

    def fn(x, img, k):
        def body(i, carry):
            v, acc, m = carry
            c = jnp.cumsum(v) + jnp.cumprod(jnp.clip(v, -1.5, 1.5))
            pooled = lax.reduce_window(img * (i + 1).astype(F32), F32(0), lax.add, (2, 3), (1, 2),
                                       [(1, 0), (2, 1)], base_dilation=(1, 2), window_dilation=(2, 1))
            m = m + lax.cummax(k + i, axis=0)
            return v * F32(0.5) + c * F32(0.01), acc + pooled.sum(), m

        return lax.fori_loop(0, 3, body, (x, F32(0), jnp.zeros(12, jnp.int32)))

    _assert_same(fn, x, img, k)


def test_float_max_pooling_in_loops_stays_interpreted():
    # (the kernel fixes the zeros' signs of a NumPy fold: not the scalar definitions' NaN rules)
    img = RNG.standard_normal((4, 4)).astype(F32)

    def fn(img):
        return lax.fori_loop(0, 2, lambda i, v: lax.reduce_window(v, -jnp.inf, lax.max, (2, 2), (1, 1), "SAME"), img)

    _assert_same(fn, img, eligible=False)


@pytest.mark.parametrize("dtype", [F32, pytest.param(np.float64, marks=pytest.mark.slow)])  # (18 s each, cold)
def test_scalar_reductions_transposed_small_products_and_pads_in_loops(dtype):
    # Found by benchmarks/bench_library_programs.py (loops left interpreted): diffrax's and numpyro's reduces of
    # a scalar (the body applied to init and the value), jax.grad's dot_general over leading dimensions and
    # batched einsums (the kernel's transposes, then the same small_dot call), BFGS's jnp.pad (negative and
    # interior padding too).
    x = RNG.standard_normal((32, 6)).astype(dtype)
    r = RNG.standard_normal((32, 1)).astype(dtype)
    b = RNG.standard_normal((2, 4, 3)).astype(dtype)
    specials = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40, 2.5, -1.5], dtype)

    def fn(x, r, b, specials):
        def body(i, carry):
            v, s, w, p = carry
            e = specials[i % 8]
            s = s + jnp.max(e) - jnp.min(e) + jnp.sum(e * 0) + lax.reduce(e, dtype(0), lax.max, ())
            v = v * dtype(0.5) + lax.dot_general(x, r * s, (((0,), (0,)), ((), ())))[:, 0]
            w = jnp.einsum("bij,bjk->bik", w, b[:, :3, :]) * dtype(0.25) + jnp.einsum("bij,bkj->bik", w, w)[:, :, :3]
            p = jnp.pad(p[1:], (0, 1)) + lax.pad(p, dtype(-1), [(-2, 3, 1)])[::2] * dtype(0.5)
            return v, s, w, p

        return lax.fori_loop(0, 8, body, (jnp.zeros(6, dtype), dtype(0), jnp.ones((2, 4, 3), dtype),
                                          jnp.arange(6, dtype=dtype)))

    _assert_same(fn, x, r, b, specials)


@pytest.mark.parametrize("dtype", [F32, pytest.param(np.float64, marks=pytest.mark.slow)])
def test_products_with_a_scalar_result_in_loops(dtype):
    # x @ y of two vectors inside a loop (BFGS's curvature y.s): the product's one element is a scalar in the
    # generated code (it was a 0-d array, which numba's typing of the scalar definitions rejected: the whole
    # loop stayed interpreted, found by benchmarks/bench_library_programs.py).
    x = RNG.standard_normal(5).astype(dtype)

    def fn(x):
        return lax.fori_loop(0, 4, lambda i, v: v * (x @ v) * dtype(0.1) + x * jnp.dot(v, v), x)

    _assert_same(fn, x)


@pytest.mark.parametrize("dtype", [pytest.param(F32, marks=pytest.mark.slow), F64], ids=["f32", "f64"])
def test_lapack_solves_in_loops_call_the_interpreters_routines(dtype):
    """``jnp.linalg.solve`` in a loop (an implicit ODE step, a Kalman filter): jaxlib's getrf and trsm custom
    calls compile as calls of the LAPACK routines the interpreter's targets call -- same bits as interpreted
    and as jax.jit, for batches, a singular matrix (getrf's info, NaN results) and every trsm flag."""
    a = RNG.standard_normal((3, 3)).astype(dtype)
    b = RNG.standard_normal((3, 2)).astype(dtype)

    def solve_steps(a, b):
        def body(i, x):
            m = a + i.astype(a.dtype) * jnp.eye(3, dtype=a.dtype)
            return jnp.linalg.solve(m, x) * 0.5 + x

        return lax.fori_loop(0, 6, body, b)

    for fn, args in [(solve_steps, (a, b)),
                     (solve_steps, (np.zeros((3, 3), dtype), b)),  # singular: getrf's info > 0
                     (lambda a, b: lax.fori_loop(0, 3, lambda i, x: jnp.linalg.solve(a, x) + x, b),
                      (RNG.standard_normal((2, 4, 4)).astype(dtype), RNG.standard_normal((2, 4, 1)).astype(dtype)))]:
        compiled = _assert_same(fn, *args)
        np.testing.assert_array_equal(_bits(compiled[0]), _bits(jax.jit(fn)(*args)))
    for left in (True, False):
        for lower in (True, False):
            for transpose in (False, True):
                for unit in (False, True):
                    def fn(a, b, left=left, lower=lower, transpose=transpose, unit=unit):
                        return lax.fori_loop(0, 2, lambda i, x: lax.linalg.triangular_solve(
                            a, x, left_side=left, lower=lower, transpose_a=transpose, unit_diagonal=unit), b)

                    t = (np.tril(RNG.standard_normal((3, 3))) + 3 * np.eye(3)).astype(dtype)
                    args = (t if lower else t.T.copy(), RNG.standard_normal((3, 3)).astype(dtype))
                    compiled = _assert_same(fn, *args)
                    np.testing.assert_array_equal(_bits(compiled[0]), _bits(jax.jit(fn)(*args)))


def test_other_custom_calls_keep_loops_interpreted():
    """A custom call without a compiled form (an eigendecomposition) leaves its loop interpreted."""
    a = RNG.standard_normal((3, 3)).astype(F32)
    _assert_same(lambda a: lax.fori_loop(0, 2, lambda i, x: jnp.linalg.eigh(x)[1] + x, a), a, eligible=False)


def test_integer_constants_reach_the_helpers_as_int64():
    # numba types a constant as Literal[int] and compiles a called jitted function once per literal signature: every
    # new shape of a view or allocation compiled (and cached) the helper again. The loaded module passes int64.
    source = ("def loop(x, y):\n"
              "    v = c_view(x, (3, 4))\n"
              "    w = window_sum(v, 0, -5, y)\n"
              "    return add(w, 1), transposed(v, (1, 0))\n")
    text, values = generated_modules.hoisted_ints(source, frozenset({"c_view", "window_sum", "transposed"}))
    assert "c_view(x, (np.int64(3), np.int64(4)))" in text
    assert "window_sum(v, np.int64(0), np.int64(-5), y)" in text
    assert "transposed(v, (np.int64(1), np.int64(0)))" in text
    assert "add(w, 1)" in text  # (the scalar definitions: their types are the generated casts')
    assert values == ()
    # sizes passed to a helper are both: typed int64 and read from _ints (a helper's keyword argument too)
    text, values = generated_modules.hoisted_ints("def loop(x):\n    return c_view(x, (3, 40), n=-70)\n",
                                                  frozenset({"c_view"}))
    assert values == (40, -70)
    assert "def loop(_ints, x):\n    _s0 = _ints[0]\n    _s1 = _ints[1]\n" in text
    assert "c_view(x, (np.int64(3), np.int64(_s0)), n=np.int64(_s1))" in text


def test_generated_loops_pass_no_literal_integers_to_helpers():
    import ast
    import inspect

    from lowering.runtime.loop_runtime import HELPER_NAMES

    x = _floats(F32, 24)[:24].reshape(2, 3, 4)

    def fn(x):
        return lax.fori_loop(0, 3, lambda i, v: jnp.transpose(v, (1, 2, 0)).reshape(2, 3, 4) * F32(0.5)
                             + jnp.sum(v, axis=-1, keepdims=True), x)

    source = _loop_sources(fn, x)
    assert "transposed(" in source
    loaded = inspect.getsource(compiled_loops._load(source)[0].py_func)
    helpers = set(HELPER_NAMES) | {"window_sum", "nd_window_sum", "tree_sums", "contracted_sums"}
    calls = [node for node in ast.walk(ast.parse(loaded))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers]
    assert calls
    for call in calls:
        for argument in call.args:
            for node in ast.walk(argument):
                assert not (isinstance(node, ast.Constant) and type(node.value) is int
                            and not _inside_int64(argument, node)), ast.unparse(call)


def _inside_int64(root, constant) -> bool:
    """Whether ``constant`` is the argument of an ``np.int64(...)`` call inside ``root``."""
    import ast

    for node in ast.walk(root):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "int64"
                and any(constant is n or constant in ast.walk(n) for n in node.args)):
            return True
    return False


def test_kernel_calls_without_the_status_branch_return_the_kernels_results():
    """call_kernel calls a kernel as numba would, minus the branch on its status: the same outputs and results
    (a kernel writing ``out``, one returning a sum, one with parameters left to their defaults)."""
    import numba

    from lowering.kernels.tree_sum import contracted_sums, lane_sum
    from lowering.runtime.loop_runtime import call_kernel, check_kernels, new_array

    @numba.njit
    def through_call_kernel(a, out):
        failed = new_array(1, np.int64)
        failed[0] = 0
        call_kernel(failed, contracted_sums, a, a, F32(0), out, 0, True)
        total = call_kernel(failed, lane_sum, a.ravel(), 0, a.shape[0], a.shape[1], F32(0), 0)
        check_kernels(failed)
        return total, failed[0]

    a = RNG.standard_normal((3, 5)).astype(F32)
    out, expected = np.empty(3, F32), np.empty(3, F32)
    total, failed = through_call_kernel(a, out)
    contracted_sums(a, a, F32(0), expected, 0, True)
    assert failed == 0
    np.testing.assert_array_equal(_bits(out), _bits(expected))
    assert _bits(total) == _bits(lane_sum(a.ravel(), 0, 3, 5, F32(0), 0))


def test_a_failed_kernel_is_raised_by_the_calling_function():
    """A kernel that fails under call_kernel (numba's error status, here a negative scratch size) sets the flag,
    and check_kernels raises it as the generated function does before it returns."""
    import numba

    from lowering.runtime.loop_runtime import call_kernel, check_kernels, new_array

    @numba.njit(error_model="numpy")
    def kernel_with_scratch(out, size):
        scratch = np.empty(size, out.dtype)
        scratch[:] = 1
        out[0] = scratch.sum()

    @numba.njit
    def caller(out, size):
        failed = new_array(1, np.int64)
        failed[0] = 0
        call_kernel(failed, kernel_with_scratch, out, size)
        recorded = failed[0]
        check_kernels(failed)
        return recorded

    out = np.zeros(1, F32)
    assert caller(out, 3) == 0 and out[0] == 3
    with pytest.raises(MemoryError, match="kernel"):
        caller(out, -1)


def test_generated_loops_call_kernels_through_call_kernel_and_check_the_flag():
    """A loop whose body calls a kernel (a small dot in an inner while loop): the call goes through call_kernel,
    the flag is allocated once, checked after the inner loop's poll and before the function returns; results equal
    the interpreter's."""
    w = RNG.standard_normal((7, 2)).astype(F32)

    def fn(x, w):
        def outer(i, v):
            def body(s):
                k, u = s
                return k + 1, jnp.tanh(u[None, :7] @ w)[0, 0] + u * F32(0.5)
            return lax.while_loop(lambda s: s[0] < 3, body, (0, v))[1]
        return lax.fori_loop(0, 4, outer, x)

    x = RNG.standard_normal(8).astype(F32)
    _assert_same(fn, x, w)
    source = _loop_sources(fn, x, w)
    assert "call_kernel(_failed, " in source
    lines = source.splitlines()
    assert sum(line.strip() == "_failed = new_array(1, np.int64)" for line in lines) == source.count("def loop(")
    polls = [i for i, line in enumerate(lines) if line.strip() == "poll_interrupts()"]
    assert polls and all(lines[i + 1].strip() == "check_kernels(_failed)" for i in polls)
    returns = [i for i, line in enumerate(lines) if line.strip().startswith("return (")]
    assert returns and all(lines[i - 1].strip() == "check_kernels(_failed)" for i in returns)


def test_a_transpose_that_moves_only_unit_dimensions_is_a_view_in_loops():
    """``g.T`` of a column keeps the elements' order: the loop reads it as a reshape (no copy per iteration),
    a real transpose still copies; results equal the interpreter's."""
    assert compiled_loops.keeps_element_order((128, 1), (1, 0))
    assert compiled_loops.keeps_element_order((1, 3, 1, 4), (2, 1, 0, 3))
    assert not compiled_loops.keeps_element_order((3, 4), (1, 0))
    x = RNG.standard_normal((16, 4)).astype(F32)

    def fn(w, x):
        def step(i, w):
            r = x @ w - F32(1)  # (16, 1)
            return w - F32(0.01) * (r.T @ x).T + jnp.transpose(x[:4, :4]) @ w
        return lax.fori_loop(0, 5, step, w)

    w = RNG.standard_normal((4, 1)).astype(F32)
    _assert_same(fn, w, x)
    source = _loop_sources(fn, w, x)
    assert source.count("transposed(") == 1, source  # (x[:4, :4].T only: r.T and the (1, 4) product's .T are views)
