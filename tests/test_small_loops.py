"""``xla-small-loops``: ops inside the while loops XLA CPU compiles whole (``xla_cpu_small_call``) give
jax.jit's bits, interpreted and compiled, and the loops XLA hoists are the ones the pass picks."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import lowering
from interop import import_jax
from passes.inlining import inline_calls
from passes.small_loops import is_small_loop
from xla_dialect.ops.control_flow import WhileOp

F32, F64, F16, BF16 = np.float32, np.float64, np.float16, ml_dtypes.bfloat16


def _bits(a):
    a = np.asarray(a[0] if isinstance(a, (list, tuple)) else a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _inputs(op, dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.05, 3.0, n)
    if op == "cbrt":
        x = x * np.where(rng.random(n) < 0.5, -1, 1)
    return x.astype(dtype)


CASES = [("tan", F32), ("tan", F64), ("tan", F16), ("tan", BF16), ("cbrt", F32), ("cbrt", F64), ("cbrt", F16),
         ("cbrt", BF16), ("log1p", F16), ("rsqrt", F16)]


def _op_loop(op):
    return lambda a: jax.lax.fori_loop(0, 3, lambda i, v: getattr(jax.lax, op)(v), a)


@functools.lru_cache(maxsize=None)
def _op_loop_on_xla(op, dtype, n):
    """jax.jit's result of _op_loop(op) on _inputs(op, dtype, n): computed once for both loop modes."""
    return np.asarray(jax.jit(_op_loop(op))(_inputs(op, dtype, n)))


@pytest.mark.parametrize("loops", ["never", "always"])
@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{o}-{np.dtype(d).name}" for o, d in CASES])
def test_small_loop_ops_match_jax(op, dtype, loops):
    """A fori_loop of ``op`` over 16 elements is hoisted by XLA (measured 1 ULP off before on 2-9 of 16
    elements for f32 tan/cbrt, f64 tan/cbrt, f16 tan/log1p/cbrt/rsqrt); 4,096 elements are not."""
    fn = _op_loop(op)
    for n in (16, 4096):
        x = _inputs(op, dtype, n)
        expected = _op_loop_on_xla(op, dtype, n)
        actual = lowering.compile(import_jax(fn, x), loop_compilation=loops)(x)
        np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=f"{op} {np.dtype(dtype).name} n={n}")


_BF16_DENORMAL_OPS = {"expm1": jnp.expm1, "sin": jnp.sin, "tanh": jnp.tanh, "neg": lambda v: -v, "abs": jnp.abs,
                      "twice": lambda v: v * BF16(2), "log1p": jnp.log1p}


@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.parametrize("name", list(_BF16_DENORMAL_OPS))
def test_bf16_denormals_in_small_loops_as_xla(name, mode):
    """bf16 denormals through ops in a loop XLA compiles whole: on hosts computing bf16 natively (AVX512-BF16 with AMX: native_bf16) the rounding of each f32
    result to bf16 flushes them (sign moves keep them); in a loop of 4,096 elements and elsewhere they are kept.
    Whatever the host, jax.jit's bits, interpreted, fused and compiled."""
    op = _BF16_DENORMAL_OPS[name]
    fn = lambda a: jax.lax.fori_loop(0, 2, lambda i, v: op(v), a)  # noqa: E731
    values = np.array([1e-39, -3e-39, 1e-40, -1e-40, 2e-38, 0.5, -0.0, 1.5], np.float32)
    for n in (8, 4096):
        x = np.resize(values, n).astype(BF16)
        expected = np.asarray(jax.jit(fn)(x))
        actual = lowering.compile(import_jax(fn, x), fusion=mode, loop_compilation=mode)(x)
        np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=f"{name} n={n}")


_F32_TO_BF16_LOOPS = {
    # the convert in the loop (flushed by the hardware conversion on native-bf16 hosts, long fuzz campaign seed 25)
    "convert": lambda a: jax.lax.fori_loop(0, 2, lambda i, v: (v * 1.0).astype(jnp.bfloat16).astype(jnp.float32), a),
    # the convert of a carried-unchanged value: hoisted by XLA, straight-line rounding
    "hoisted convert": lambda a: jax.lax.fori_loop(
        0, 2, lambda i, c: (c[0], c[1] + c[0].astype(jnp.bfloat16)), (a, jnp.zeros(a.shape, jnp.bfloat16)))[1],
}


@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.parametrize("name", list(_F32_TO_BF16_LOOPS))
def test_f32_to_bf16_converts_in_small_loops_as_xla(name, mode):
    """f32 -> bf16 converts in a loop XLA compiles whole: f32 denormals (and values that round up to bf16's
    smallest normal) are zeros on native-bf16 hosts (AVX512-BF16 with AMX) unless XLA hoists the convert out of the loop; jax.jit's bits
    whatever the host."""
    fn = _F32_TO_BF16_LOOPS[name]
    values = np.array([-1.653e-39, 1.2e-39, 3e-40, 1.0, -2e-38, 5e-39, -1e-45, 1.1754942e-38], np.float32)
    for n in (8, 4096):
        x = np.resize(values, n)
        expected = np.asarray(jax.jit(fn)(x))
        actual = lowering.compile(import_jax(fn, x), fusion=mode, loop_compilation=mode)(x)
        np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=f"{name} n={n}")


def test_hoisted_bf16_ops_keep_denormals_as_xla():
    """A bf16 op of a carried-unchanged value is moved out of the loop by XLA and computed as straight-line code:
    its denormal results are kept, also on native-bf16 hosts (measured: ``expm1(v)``)."""
    fn = lambda a: jax.lax.fori_loop(0, 2, lambda i, c: (c[0], jnp.expm1(c[0])),  # noqa: E731
                                     (a, jnp.zeros(a.shape, jnp.bfloat16)))[1]
    x = np.array([-1.653e-39, 1.2e-39, 3e-40, 1.0, -2e-38, 5e-39, -1e-45, 1e-39], np.float32).astype(BF16)
    expected = np.asarray(jax.jit(fn)(x))
    for mode in ("never", "always"):
        actual = lowering.compile(import_jax(fn, x), fusion=mode, loop_compilation=mode)(x)
        np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=mode)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_small_loop_tan_fused_and_compiled(dtype):
    """The rewritten tan (sin/cos/divide) keeps the same bits in fused groups and compiled loops."""
    fn = lambda a, b: jax.lax.fori_loop(0, 4, lambda i, v: jnp.tan(v) * b + v, a)  # noqa: E731
    x, y = _inputs("tan", dtype, 16, 1) * 0.3, _inputs("tan", dtype, 16, 2) * 0.2
    expected = _bits(jax.jit(fn)(x, y))
    for fusion in ("never", "always"):
        for loops in ("never", "always"):
            ex = lowering.compile(import_jax(fn, x, y), fusion=fusion, loop_compilation=loops)
            np.testing.assert_array_equal(_bits(ex(x, y)), expected, err_msg=f"{fusion} {loops}")


def _xla_hoists(fn, *args) -> bool:
    return "xla_cpu_small_call" in jax.jit(fn).lower(*args).compile().as_text()


def _we_hoist(fn, *args) -> bool:
    module = inline_calls(import_jax(fn, *args), clone=True)
    return any(is_small_loop(op) for op in module.walk() if isinstance(op, WhileOp))


LOOPS = {
    "fori": lambda n: (lambda a: jax.lax.fori_loop(0, 3, lambda i, v: jnp.tan(v), a), (np.ones(n, F32),)),
    "two carries": lambda n: (lambda a: jax.lax.fori_loop(0, 3, lambda i, v: (jnp.tan(v[0]), v[1] + 1), (a, a)),
                              (np.ones(n, F32),)),
    "invariant": lambda n: (lambda a, b: jax.lax.fori_loop(0, 3, lambda i, v: jnp.tan(v) + b, a),
                            (np.ones(n, F32), np.ones(n, F32))),
    "scan": lambda n: (lambda a: jax.lax.scan(lambda c, x: (jnp.tan(c) + x, c), a[0], a)[0], (np.ones((4, n), F32),)),
    "dot": lambda n: (lambda a: jax.lax.fori_loop(0, 3, lambda i, v: jnp.tan(v @ v), a), (np.ones((n, n), F32),)),
    "shared operands": lambda n: (lambda a, b: jax.lax.fori_loop(0, 3, lambda i, v: (jnp.tan(v[0]) * v[1], v[1] - v[0]),
                                                                (a, b)), (np.ones(n, F32), np.ones(n, F32))),
    "once": lambda n: (lambda a: jax.lax.fori_loop(0, n, lambda i, v: jnp.tan(v), a), (np.ones(8, F32),)),
}
SIZES = {"fori": (123, 124), "two carries": (61, 62), "invariant": (81, 82), "scan": (40, 80), "dot": (4, 8), "shared operands": (40, 44),
         "once": (1, 2)}


@pytest.mark.parametrize("name", list(LOOPS))
def test_hoisting_rule_matches_xla(name):
    """The pass's byte estimate decides as XLA does on both sides of each loop form's threshold."""
    for n in SIZES[name]:
        fn, args = LOOPS[name](n)
        assert _we_hoist(fn, *args) == _xla_hoists(fn, *args), (name, n)


INVARIANT_CASES = [("tan", F32), ("tan", F16), ("cbrt", F32), ("cbrt", F64), ("log1p", F16), ("rsqrt", F16)]


@pytest.mark.parametrize("loops", ["never", "always"])
@pytest.mark.parametrize("op, dtype", INVARIANT_CASES, ids=[f"{o}-{np.dtype(d).name}" for o, d in INVARIANT_CASES])
def test_loop_invariant_ops_are_computed_as_straight_line_code(op, dtype, loops):
    """XLA's WhileLoopInvariantCodeMotion moves ``op(b)`` of a value the loop carries unchanged out of the loop, so
    it is computed as straight-line code (its own bits), while ``op(v)`` of the carry stays the loop's form
    (found by the long fuzz campaign, seed 22: f16 log1p of a closure constant in a fori_loop; measured on an Intel
    Xeon: f32 tan of the invariant differed on 15 of 56 elements with the loop's form)."""
    rng = np.random.default_rng(3)
    a = _inputs(op, dtype, 56, 1).reshape(4, 14) * dtype(0.3)
    b = (_inputs(op, dtype, 56, 2) * dtype(1.5 if op != "rsqrt" else 1.0)).reshape(4, 14)
    if op == "log1p":
        b = np.abs(b) * dtype(rng.uniform(0.1, 2.0))
    fn = getattr(jax.lax, op)

    def program(v0, c):
        return jax.lax.fori_loop(0, 3, lambda i, v: (fn(v) * dtype(0.5) + fn(c)).astype(v.dtype), v0)

    expected = np.asarray(jax.jit(program)(a, b))
    actual = lowering.compile(import_jax(program, a, b), loop_compilation=loops)(a, b)
    np.testing.assert_array_equal(_bits(actual), _bits(expected))


def test_one_op_moved_out_of_a_loop_is_asked_of_its_operands_only():
    # What the kernels ask of one op (moved_out_of_loop) agrees with the whole body's set (loop_invariant_ops).
    from xla_dialect.ops.control_flow import WhileOp, loop_invariant_ops, moved_out_of_loop

    a = np.linspace(-1, 1, 6, dtype=np.float32)

    def fn(a, b):
        def body(i, carry):
            x, y, k = carry
            h = jnp.floor(jnp.exp(y) * 2.0) + 1.0  # (y carried unchanged: moved out)
            return x * h + jnp.sin(x), y, k + jnp.abs(h).sum()

        return jax.lax.fori_loop(0, 3, body, (a, b, jnp.float32(0)))

    module = inline_calls(import_jax(fn, a, a * 2))
    loops = [op for op in module.walk() if isinstance(op, WhileOp)]
    assert loops
    for loop in loops:
        expected = loop_invariant_ops(loop)
        body = list(loop.body.block.ops)
        assert any(id(op) in expected for op in body) and any(id(op) not in expected for op in body)
        for op in body:
            assert moved_out_of_loop(op, loop) == (id(op) in expected), op.name


def test_bfgs_zoom_loops_counted_as_xla():
    """The line search's zoom loops of ``minimize(method="BFGS")`` on a 5-d Rosenbrock function: XLA's
    ``HloCostAnalysis`` gives each 1,016 bytes with 32-bit integers (read from its HLO before
    ``small-while-loop-hoisting``, ``XLA_FLAGS=--xla_dump_to``) and compiles both whole, 8 bytes under the threshold;
    with x64 (as in these tests: the counters are s64) 1,044, and neither; the BFGS loop (5,150; 5,278 with x64) and
    the line search (3,211; 3,315) never. The model of XLA's fusion and copy insertion counts the same."""
    from jax.scipy.optimize import minimize

    from passes.broadcasts import canonicalize_broadcasts
    from passes.conditionals import inline_constant_conditionals
    from passes.small_loops import while_bytes
    from passes.xla_numerics import xla_divide_by_broadcast, xla_float_rewrites

    def rosenbrock(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def solve(x0):
        res = minimize(rosenbrock, x0, method="BFGS", options={"maxiter": 200})
        return res.x, res.fun, res.nit

    x0 = np.array([-1.2, 1.0, -0.5, 0.8, 1.5], F32)
    # (the module as ``xla-small-loops`` sees it in ``prepare_for_execution``)
    module = inline_calls(import_jax(solve, x0), clone=True)
    for step in (inline_constant_conditionals, xla_divide_by_broadcast, canonicalize_broadcasts, xla_float_rewrites):
        module = step(module)
    loops = [op for op in module.walk() if isinstance(op, WhileOp)]
    zooms = [op for op in loops if not any(isinstance(inner, WhileOp) for inner in op.body.block.walk())
             and isinstance(op.parent_op(), WhileOp) and isinstance(op.parent_op().parent_op(), WhileOp)]
    expected = 1044 if jax.config.jax_enable_x64 else 1016
    assert len(zooms) == 2 and [while_bytes(op) for op in zooms] == [expected, expected]
    xla = jax.jit(solve).lower(x0).compile().as_text().count("xla_cpu_small_call=")
    assert sum(is_small_loop(op) for op in loops) == xla == (0 if jax.config.jax_enable_x64 else 2)


def test_each_loop_is_decided_once_and_marked(monkeypatch):
    # XLA's model of a loop is built again for every loop around it, and the pipeline asked about every loop in
    # several passes: jax.random.gamma's program (29 loops) modelled loops 124 times, 3 of its 4 s of compile.
    # Now the pass decides each loop once, before it rewrites any op (the HLO XLA decides on), and marks it;
    # contract-fma reads the mark.
    from passes import xla_loop_bytes
    from passes.pipelines import prepare_for_execution
    from passes.small_loops import SMALL_LOOP, byte_threshold

    def nest(a, b):
        def inner(i, v):
            return jax.lax.fori_loop(0, 2, lambda j, w: jnp.tan(w) * np.float32(1.5) + w, v)

        def middle(i, v):
            return jax.lax.fori_loop(0, 2, inner, v * np.float32(0.5))

        return jax.lax.fori_loop(0, 2, middle, a), jax.lax.fori_loop(0, 3, lambda i, v: jnp.tan(v), b)

    x = np.linspace(0.1, 0.2, 8, dtype=F32)
    y = np.linspace(0.1, 0.2, 4096, dtype=F32)
    module = inline_calls(import_jax(nest, x, y), clone=True)
    expected = [is_small_loop(op, byte_threshold()) for op in module.walk() if isinstance(op, WhileOp)]
    assert len(expected) >= 4 and any(expected) and not all(expected), expected
    modelled = []
    original = xla_loop_bytes._loop_model_bytes
    monkeypatch.setattr(xla_loop_bytes, "_loop_model_bytes",
                        lambda loop, live, trace=None: modelled.append(loop) or original(loop, live, trace))
    prepared = prepare_for_execution(module)
    assert len(modelled) == len({id(loop) for loop in modelled}) == len(expected)  # (each loop once)
    loops = [op for op in prepared.walk() if isinstance(op, WhileOp)]
    assert [bool(op.attributes[SMALL_LOOP].value.data) for op in loops] == expected
    assert [is_small_loop(op) for op in loops] == expected  # (the mark, read)
    assert all(SMALL_LOOP not in op.attributes for op in module.walk() if isinstance(op, WhileOp))  # (a copy)
    out = lowering.compile(module)(x, y)
    for a, b in zip(out, jax.jit(nest)(x, y)):
        np.testing.assert_array_equal(_bits(a), _bits(np.asarray(b)))
