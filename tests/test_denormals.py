"""Denormal floats: ``lowering.compile(..., denormals=...)`` (lowering/runtime/denormals.py) against jax.jit.

XLA CPU computes with the CPU's flush-to-zero and denormals-are-zero modes:
denormal inputs of arithmetic read as 0 and denormal results become 0, while
data movement keeps denormals. The "flush" mode (the default here) must give
jax.jit's bits on inputs full of denormals; "keep" gives IEEE results.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import lowering
from interop.jax import import_jax
from lowering.runtime import denormals as dn
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError, XlaError

pytestmark = pytest.mark.skipif(not dn.flush_supported(), reason="the CPU's flush-to-zero mode cannot be set here")

F32, F64, BF16, F16 = np.float32, np.float64, ml_dtypes.bfloat16, np.float16
RNG = np.random.default_rng(1)


def tiny_mix(dtype, n: int = 48) -> np.ndarray:
    """Denormals (random and extreme), normals near the bottom of the range, signed zeros, small ints."""
    info = ml_dtypes.finfo(dtype)
    sub, tiny = float(info.smallest_subnormal), float(info.tiny)
    v = np.concatenate([RNG.uniform(0, tiny, n // 2), RNG.uniform(tiny, 4 * tiny, n // 4),
                        [sub, 2 * sub, tiny - sub, tiny, tiny / 2, 0.0, 1.0, 0.5, 2.0, 3.0]])
    return np.concatenate([v, -v]).astype(dtype)


def denormals_and_ints(dtype, shape) -> np.ndarray:
    """Denormals (which read as 0) mixed with small integers: sums of products are exact in any order,
    and no partial sum can land below the normal range (where the order would decide what flushes)."""
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    den = RNG.uniform(-tiny, tiny, shape)
    return np.where(RNG.random(shape) < 0.5, den, RNG.integers(-3, 4, shape)).astype(dtype)


def bits(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return np.stack([bits(a.real), bits(a.imag)])
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bits(actual, expected, what=""):
    """Bit-for-bit equality (signed zeros and denormals included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    bad = np.flatnonzero(bits(actual).ravel() != bits(expected).ravel())
    assert bad.size == 0, (f"{what}: {bad.size} elements differ; first at {bad[0]}: "
                           f"actual {actual.ravel()[bad[0] % actual.size]!r} "
                           f"expected {expected.ravel()[bad[0] % expected.size]!r}")


def is_denormal(a) -> np.ndarray:
    """(Evaluated in the test's own thread, which computes in IEEE mode.)"""
    a = np.asarray(a)
    wide = np.abs(a.astype(np.float64))
    return (wide != 0) & (wide < float(ml_dtypes.finfo(a.dtype).tiny))


def check_vs_jax(fn, *args, denormals=None):
    """Run ``fn`` with jax.jit and with the executor; every output must be bit-identical."""
    want = jax.tree.leaves(jax.jit(fn)(*args))
    got = lowering.compile(import_jax(fn, *args), denormals=denormals)(*args)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_bits(g, np.asarray(w), f"output #{i}")
    return got


# ----------------------------------------------------------------------------
# "flush": XLA's results
# ----------------------------------------------------------------------------


def _elementwise(x, y):
    # (Not a constant 0: XLA compiles bf16 x == 0.0 to a test of the bits, which ignores DAZ; see
    # lowering/runtime/denormals.py.)
    zero = y - y
    return (x + y, x - y, x * y, x / y, lax.max(x, y), lax.min(x, y), lax.max(x, zero),
            lax.rem(x, y), lax.sqrt(lax.abs(x)), lax.cbrt(x), lax.floor(x), lax.ceil(x), lax.sign(x),
            lax.abs(x), -x, lax.round(x), lax.clamp(zero, x, lax.abs(y)), lax.is_finite(x),
            x < zero, x <= zero, x == zero, x != zero, x > zero, x >= zero, x < y,
            lax.select(y > zero, x, y))


def _transcendental(x, y):
    return (lax.sin(x), lax.cos(x), lax.tan(x), lax.exp(x), lax.log(lax.abs(x)), lax.tanh(x), lax.expm1(x),
            lax.log1p(x), lax.logistic(x), lax.erf(x), lax.rsqrt(lax.abs(x)), lax.atan2(x, y),
            lax.pow(lax.abs(x), y))


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=["f32", "f64", "bf16", "f16"])
def test_elementwise_match_xla(dtype):
    x = tiny_mix(dtype)
    y = np.roll(x, 7)[::-1].copy()
    out = check_vs_jax(_elementwise, x, y)
    if dtype in (F32, F64, BF16):
        assert not is_denormal(out[0]).any()  # sums flush
        assert is_denormal(out[13]).any()  # abs keeps


@pytest.mark.parametrize("dtype", [F32, F64, BF16], ids=["f32", "f64", "bf16"])
def test_transcendentals_match_xla(dtype):
    # xla_math's approximations flush by themselves; the hardware mode must not change them. pow and
    # atan2 are libm's: their denormal paths run under DAZ as in XLA. f32 sin passes denormals through.
    x = tiny_mix(dtype)
    check_vs_jax(_transcendental, x, np.roll(x, 5)[::-1].copy())


def test_measured_examples():
    d = np.array([1e-39, -1e-39], F32)
    ones, zeros = np.ones(2, F32), np.zeros(2, F32)
    fn = lambda a, one, zero: (a * one, np.float32(3e-39) + a, jnp.sum(a), a < zero, lax.max(a, zero),  # noqa: E731
                               lax.sign(a), lax.sqrt(lax.abs(a)), lax.floor(a))
    prod, total, summed, lt0, mx, sign, root, floor = check_vs_jax(fn, d, ones, zeros)
    assert_bits(prod, np.array([0.0, -0.0], F32))  # 1e-39 * 1 = 0
    assert_bits(total, np.array([0.0, 0.0], F32))  # 3e-39 + 1e-39 = 0
    assert bits(summed) == 0
    assert lt0.tolist() == [False, False]  # DAZ: -1e-39 < 0 is false
    assert_bits(mx, np.array([0.0, 0.0], F32))  # max(1e-39, 0) = 0
    assert_bits(sign, np.array([0.0, -0.0], F32))
    assert_bits(root, np.array([0.0, 0.0], F32))
    assert_bits(floor, np.array([0.0, -0.0], F32))  # not -1
    a, b = np.array([1e-30], F32), np.array([1e-10], F32)
    (r,) = check_vs_jax(lax.mul, a, b)
    assert r[0] == 0
    (r,) = check_vs_jax(lambda v: jnp.sum(v), np.array([1e-39, 1e-39], F32))
    assert r == 0
    (r,) = check_vs_jax(lax.mul, np.array([1e-310]), np.array([2.0]))
    assert_bits(r, np.array([0.0]))


def test_complex_match_xla():
    x = tiny_mix(F32)
    y = np.roll(x, 3)[::-1].copy()
    for ctype in (np.complex64, np.complex128):
        real = F32 if ctype == np.complex64 else F64
        a, b = x.astype(real), y.astype(real)
        if real == F64:
            a, b = a * 2.0 ** -896, b * 2.0 ** -896  # into f64's denormal range
        check_vs_jax(lambda p, q: (lax.complex(p, q) + lax.complex(q, p), lax.complex(p, q) - lax.complex(q, p),
                                   lax.abs(lax.complex(p, q)), lax.sign(lax.complex(p, q))), a, b)


def test_f16_denormals_survive_bf16_flushes():
    h = np.array([6e-5], F16), np.array([5.9e-5], F16)
    (r,) = check_vs_jax(lax.sub, *h)
    assert is_denormal(r).all()  # computed in f32 (normal there), rounded to an f16 denormal
    b = np.array([1e-39], BF16), np.array([1.0], BF16)
    (r,) = check_vs_jax(lax.mul, *b)
    assert bits(r)[0] == 0


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_dot_and_convolution_match_xla(dtype):
    # Small integers and denormals: every product is exact, so any summation order gives XLA's bits.
    ints = RNG.integers(-3, 4, (8, 8)).astype(dtype)
    den = denormals_and_ints(dtype, (8, 8))
    check_vs_jax(jnp.matmul, den, ints)
    check_vs_jax(lambda a, b: lax.dot_general(a, b, (((0,), (1,)), ((), ()))), den, ints)
    # Products below the normal range: XLA gives 0 (each FMA's result flushes), IEEE would not.
    small = np.full((4, 4), np.sqrt(ml_dtypes.finfo(dtype).tiny) / 4, dtype)
    (r,) = check_vs_jax(jnp.matmul, small, small)
    assert not r.any()
    signal = den.reshape(1, 1, 64)
    kernel = np.array([1, 2, -1], dtype).reshape(1, 1, 3)
    check_vs_jax(lambda s, k: lax.conv(s, k, (1,), "SAME"), signal, kernel)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_reductions_match_xla(dtype):
    x = tiny_mix(dtype)
    mixed = denormals_and_ints(dtype, x.shape)
    d = np.full(8, tiny_mix(dtype)[0], dtype)
    out = check_vs_jax(lambda a, m, e: (jnp.sum(m), jnp.max(a), jnp.min(a), jnp.max(-jnp.abs(a)), jnp.sum(e),
                                        jnp.cumsum(m), jnp.sort(a), jnp.argmax(a), jnp.prod(a[:4])), x, mixed, d)
    assert bits(out[4]) == 0  # the sum of denormals is +0
    check_vs_jax(lambda a: (lax.reduce_window(a, -np.inf, lax.max, (3,), (1,), "VALID"),
                            lax.reduce_window(a, dtype(0), lax.add, (3,), (1,), "VALID")), mixed)


def test_while_loop_body_flushes():
    # Halving tiny normals in a loop: each step's result flushes once below the normal range.
    x = np.array([2.0 ** -120, -(2.0 ** -123), 2.0 ** -126, 1.0, 3 * 2.0 ** -125], F32)
    (r,) = check_vs_jax(lambda a: lax.fori_loop(0, 6, lambda i, v: v * F32(0.5), a), x)
    assert_bits(r, np.array([2.0 ** -126, -0.0, 0.0, 2.0 ** -6, 0.0], F32))


def test_data_movement_keeps_denormals():
    x = tiny_mix(F32)[:48]
    idx = np.array([3, 1, 4, 1, 5], np.int32)
    out = check_vs_jax(lambda a, i: (a.reshape(6, 8), a.reshape(6, 8).T, a[3:40], jnp.concatenate([a, a[::-1]]),
                                     jnp.pad(a, 2), a[i], lax.dynamic_slice(a, (2,), (5,)),
                                     lax.bitcast_convert_type(lax.bitcast_convert_type(a, np.int32), F32),
                                     lax.select(a != a, a, a), jnp.broadcast_to(a, (2, 48))), x, idx)
    for o in out:
        assert is_denormal(o).any()


def test_xla_simplifier_identities():
    # XLA's algebraic simplifier drops x * 1 and x - 0 before code generation, so their denormals survive in
    # XLA; so does the executor (xla-float-rewrites), and the simplify pass drops them too. With
    # xla_rewrites=False each op is computed, and flushes.
    import passes

    x = tiny_mix(F32)
    fn = lambda a: (a * jnp.ones_like(a), a - jnp.zeros_like(a))  # noqa: E731
    want = jax.jit(fn)(x)
    module = import_jax(fn, x)
    for g, w in zip(lowering.compile(module)(x), want):
        assert_bits(g, np.asarray(w))
    assert not is_denormal(lowering.compile(module, xla_rewrites=False)(x)[0]).any()
    for g, w in zip(lowering.compile(passes.run(module, "canonicalize-broadcasts,simplify").module)(x), want):
        assert_bits(g, np.asarray(w))


def test_program_outputs_and_arguments_keep_bits():
    x = tiny_mix(F64)
    (r,) = lowering.compile(import_jax(lambda a: a, x))(x)
    assert_bits(r, x)


# ----------------------------------------------------------------------------
# "keep": IEEE
# ----------------------------------------------------------------------------


def test_keep_gives_ieee_results():
    x = tiny_mix(F32)
    y = np.roll(x, 7)[::-1].copy()
    def fn(a, b):
        return (a + b, a * b, a - b, a / b, lax.sqrt(lax.abs(a)), a < b, lax.max(a, b), jnp.sum(a[:2]),
                lax.sign(a), lax.sin(a))

    got = lowering.compile(import_jax(fn, x, y), denormals="keep")(x, y)
    with np.errstate(all="ignore"):
        want = (x + y, x * y, x - y, x / y, np.sqrt(np.abs(x)), x < y, np.maximum(x, y), x[0] + x[1],
                np.copysign(np.sign(x), x), x)
    for i, (g, w) in enumerate(zip(got, want)):
        if i != 9:
            assert_bits(g, w, f"output #{i}")
    assert got[7] != 0  # the sum of two denormals (exact), 0 under "flush"
    assert_bits(got[9][is_denormal(x)], x[is_denormal(x)])  # sin(d) = d
    # One nonzero per column of m: each element of the product is one exact product, whatever the summation
    # order of the dot (lowering/kernels/small_dot.py), so the IEEE result is den @ m bit for bit.
    m = (np.eye(8)[RNG.permutation(8)] * RNG.choice([-3, -2, -1, 1, 2, 3], 8)).astype(F32)
    den = tiny_mix(F32)[:64].reshape(8, 8)
    (r,) = lowering.compile(import_jax(jnp.matmul, den, m), denormals="keep")(den, m)
    np.testing.assert_array_equal(r, den @ m)
    assert is_denormal(r).any()


def test_default_is_flush_and_executable_reports_mode():
    x = np.array([1e-39], F32)
    module = import_jax(lambda a: a * 2, x)  # (not a * 1: XLA drops it, and so does the executor)
    assert dn.resolve_denormals(None) == "flush"
    assert lowering.compile(module).denormals == "flush"
    assert lowering.compile(module, denormals="keep").denormals == "keep"
    assert lowering.compile(module)(x)[0][0] == 0
    assert_bits(lowering.compile(module, denormals="keep")(x)[0], x * F32(2))


# ----------------------------------------------------------------------------
# The mode is per call and per thread
# ----------------------------------------------------------------------------


def _ieee_now() -> bool:
    d = np.array([1e-39], F32)
    return bool(np.multiply(d, np.ones(1, F32))[0] != 0)


def test_mode_restored_after_call_error_and_nesting():
    x = np.array([1e-39], F32)
    flush = lowering.compile(import_jax(lambda a: a * 2, x))
    keep = lowering.compile(import_jax(lambda a: a * 2, x), denormals="keep")
    seen = {}

    def host(operands, attributes, result_types):
        seen["mode_in_callback_is_ieee"] = _ieee_now()
        seen["nested_keep"] = keep(x)[0][0]  # another executable inside the call: its own mode
        seen["after_nested_is_ieee"] = _ieee_now()
        if attributes.get("backend_config") == "raise":
            raise ValueError("boom")
        return operands[0]

    lowering.register_custom_call("denormal_probe", host)
    try:
        for config in ("", "raise"):
            b = XlaBuilder("probe")
            p = b.parameter(0, "f32[1]")
            b.custom_call("denormal_probe", [p], "f32[1]", opaque=config)
            exe = lowering.compile(b.build())
            if config:
                with pytest.raises(Exception, match="boom"):
                    exe(x)
            else:
                exe(x)
            assert seen == {"mode_in_callback_is_ieee": False, "nested_keep": x[0] * F32(2),
                            "after_nested_is_ieee": False}
            assert _ieee_now()  # restored, also after the error
    finally:
        from lowering.runtime.program_state import unregister_custom_call

        unregister_custom_call("denormal_probe")
    assert flush(x)[0][0] == 0 and _ieee_now()


def test_flush_in_other_threads_and_devices():
    x = np.array([1e-39, 2e-39], F32)
    exe = lowering.compile(import_jax(lambda a: a + a, x))
    results = []
    threads = [threading.Thread(target=lambda: results.append(exe(x)[0])) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and not any(r.any() for r in results)
    b = XlaBuilder("replicated")
    p = b.parameter(0, "f32[2]")
    b.add(p, p)
    (r0,), (r1,) = lowering.compile(b.build(), num_replicas=2)([x], [x])
    assert not r0.any() and not r1.any()
    assert _ieee_now()


def test_threaded_matmul_result_is_flushed():
    # OpenBLAS's worker threads ignore the caller's mode; the executor flushes the result of a matmul it may
    # split (m*n*k > 2**18, more than one BLAS thread). Products of 1e-21 and 1e-20: XLA gives 0 everywhere.
    n = 128
    a = (RNG.standard_normal((n, n)) * 1e-21).astype(F32)
    b = (RNG.standard_normal((n, n)) * 1e-20).astype(F32)
    module = import_jax(jnp.matmul, a, b)
    (flushed,) = lowering.compile(module, blas_threads=2)(a, b)
    assert not is_denormal(flushed).any()
    assert (flushed == 0).all() and (np.asarray(jax.jit(jnp.matmul)(a, b)) == 0).all()  # (signs of 0 differ)
    (kept,) = lowering.compile(module, blas_threads=2, denormals="keep")(a, b)
    assert is_denormal(kept).any()


def test_flush_bits():
    for dtype in (F32, F64):
        x = tiny_mix(dtype)
        want = np.where(is_denormal(x), np.copysign(dtype(0), x), x)
        assert_bits(dn.flush_bits(x), want)
        clean = x[~is_denormal(x)]
        assert dn.flush_bits(clean) is clean


# ----------------------------------------------------------------------------
# Option errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["FLUSH", "ieee", "", True, 0, 1.0])
def test_bad_option_raises(bad):
    module = import_jax(lambda a: a, np.zeros(1, F32))
    with pytest.raises(ExecutionError, match="denormals") as info:
        lowering.compile(module, denormals=bad)
    assert isinstance(info.value, XlaError) and repr(bad) in str(info.value)
    with pytest.raises(ExecutionError, match="denormals"):
        lowering.LoweringContext(module, denormals=bad)
