"""``xla-float-rewrites``: the executor computes what jax.jit computes after XLA's algebraic simplifier.

Every program is imported from jax (interop.import_jax), run by the executor and
compared bit for bit with jax.jit on random inputs; the cases where XLA does
not rewrite stay exact too. ``xla_rewrites=False`` gives the literal IEEE
result of every op.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from helpers import sweep
import lowering
import passes
from interop import import_jax
from passes.pipelines import prepare_for_execution
from xla_dialect.errors import ExecutionError

F32, F64, F16, BF16 = np.float32, np.float64, np.float16, ml_dtypes.bfloat16
FLOATS = (F32, F64, F16, BF16)


def _data(dtype, n=2000, scale=3.0, positive=False, seed=0):
    x = np.random.default_rng(seed).normal(0, scale, n)
    return (np.abs(x) + 0.1 if positive else x).astype(dtype)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind in "fc" and a.dtype.itemsize <= 8 else a


def _same_bits(actual, expected) -> bool:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "c":
        return _same_bits(actual.real, expected.real) and _same_bits(actual.imag, expected.imag)
    nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    return bool(np.all((_bits(actual) == _bits(expected)) | nan))


def _run(fn, *args, **options):
    module = import_jax(fn, *args)
    return lowering.compile(module, **options)(*[np.asarray(a) for a in args])


def assert_matches_jax(fn, *args):
    """The executor's results equal jax.jit's bit for bit."""
    expected = jax.jit(fn)(*args)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    actual = _run(fn, *args)
    for a, e in zip(actual, expected):
        assert _same_bits(a, np.asarray(e)), f"{np.mean(_bits(a) != _bits(np.asarray(e))):.3f} of elements differ"


# -- A / constant ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("c", [0.02, 3.0, -7.0, 0.1])
def test_divide_by_scalar_constant(dtype, c):
    assert_matches_jax(lambda v: v / dtype(c), _data(dtype, scale=10))


def test_divide_by_constant_special_values():
    x = _data(F32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    for c in (0.0, -0.0, np.inf, 3e38, 1e-38):
        assert_matches_jax(lambda v: v / F32(c), x)


def test_divide_by_array_constant_and_complex():
    table = np.linspace(0.5, 3.0, 2000).astype(F32)
    assert_matches_jax(lambda v: v / table, _data(F32))
    assert_matches_jax(lambda v: v / table[:40].reshape(1, 40), _data(F32).reshape(50, 40))  # broadcast(C)
    z = (_data(F32) + 1j * _data(F32, seed=1)).astype(np.complex64)
    assert_matches_jax(lambda v: v / np.complex64(2.0), z)


def test_integer_division_is_not_rewritten():
    x = np.random.default_rng(0).integers(-1000, 1000, 500).astype(np.int32)
    assert_matches_jax(lambda v: v // 7, x)
    assert_matches_jax(lambda v: jax.lax.div(v, np.int32(3)), x)


def test_constant_dividend_is_folded_as_written():
    # m::NonConstant(A): 1 / c is evaluated as a true division.
    assert_matches_jax(lambda v: v * (F32(1) / F32(3)), _data(F32))


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_mean(dtype):
    # Integer-valued data: the sums are exact whatever the reduction order, so only the
    # division by the count (XLA: a multiplication by 1/n) decides the bits.
    x = np.random.default_rng(0).integers(-50, 50, 7 * 60).astype(dtype).reshape(60, 7)
    assert_matches_jax(lambda v: jnp.mean(v, axis=1), x)
    assert_matches_jax(lambda v: jnp.mean(v.T, axis=1), x)
    literal = _run(lambda v: jnp.mean(v, axis=1), x, xla_rewrites=False)[0]
    assert _same_bits(literal, (x.astype(np.float64).sum(1)).astype(dtype) / dtype(7))


def test_division_by_constant_inside_while_loop():
    def body(carry):
        i, v = carry
        return i + 1, jnp.maximum(v / F32(3.0), F32(-1.5)) * F32(1.25)

    assert_matches_jax(lambda v: jax.lax.while_loop(lambda c: c[0] < 5, body, (0, v))[1], _data(F32))


# -- A / broadcast(B) --------------------------------------------------------------


_ROWS = np.random.default_rng(3).normal(0, 3, (48, 40)).astype(F32)
_COLUMN = np.random.default_rng(4).normal(0, 3, 40).astype(F32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_divide_by_broadcast_is_a_multiplication_by_the_reciprocal(dtype):
    # XLA CPU: A / broadcast(B) -> A * broadcast(1 / B) (about a quarter of the quotients differ).
    x, y = _ROWS.astype(dtype), _COLUMN.astype(dtype)
    assert_matches_jax(lambda a, b: a / b[None, :], x, y)
    assert_matches_jax(lambda a, b: a / b[:, None], x.T, y)
    assert_matches_jax(lambda a: a / jnp.max(a, axis=-1, keepdims=True), x)
    assert_matches_jax(lambda a, s: a / s, x, dtype(0.37))
    # Integer-valued rows: the sum is exact in any order, so only the division decides the bits.
    counts = np.random.default_rng(5).integers(1, 50, (48, 40)).astype(dtype)
    assert_matches_jax(lambda a: a / jnp.sum(a, axis=-1, keepdims=True), counts)
    if dtype in (F32, F64):
        literal = _run(lambda a, b: a / b[None, :], x, y, xla_rewrites=False)[0]
        assert _same_bits(literal, x / y[None, :])


def test_divide_by_broadcast_flushes_a_subnormal_reciprocal():
    big = np.full((2, 4), 3e38, F32)
    assert_matches_jax(lambda a, b: a / b[None], big, big[0])  # 1/3e38 is subnormal: XLA gives 0


def test_divide_by_broadcast_counts_uses_as_xla_does():
    # B used elsewhere: XLA divides as written ...
    assert_matches_jax(lambda a, s: (a / s, s * 2), _ROWS, F32(0.37))
    assert_matches_jax(lambda a, s: a / s + s, _ROWS, F32(0.37))
    assert_matches_jax(lambda a, b: (a / jax.lax.broadcast_in_dim(b, (48, 40), (1,)), b + 1), _ROWS, _COLUMN)
    # ... but b[None, :] is a value of its own with one use, each time it is written.
    assert_matches_jax(lambda a, b: (a / b[None, :], (a + 1) / b[None, :]), _ROWS, _COLUMN)
    assert_matches_jax(lambda a: (a / jnp.max(a, -1)[:, None], jnp.max(a, -1)), _ROWS)


def test_divide_by_a_reused_keepdims_value_is_a_multiplication_by_the_reciprocal():
    # A (1, n) or (n, 1) value spread over a batch is reshaped to (n,) first by XLA's translation of
    # broadcast_in_dim (an HLO broadcast cannot repeat a size-1 dimension): that reshape, with one use, is the
    # divide's B, whatever else reads the keepdims value -- BatchNorm's (h - mean) / sqrt(var + eps) in its
    # gradient program, where the root is also squared and divided by (53 of 256 elements 1 ULP off before).
    v = np.abs(_COLUMN) + F32(0.1)
    assert_matches_jax(lambda a: (a / jnp.max(a, -1, keepdims=True), jnp.max(a, -1, keepdims=True) * 2), _ROWS)
    assert_matches_jax(lambda a, b: (a / jnp.sqrt(b)[None, :], a - jnp.sqrt(b)[None, :] ** 2,
                                     (a + 1) / jnp.sqrt(b)[None, :]), _ROWS, v)

    def normalized(a):
        d = jnp.sqrt(a.var(0, keepdims=True) + F32(1e-5))
        return (a - a.mean(0)) / d, 1 / (d * d)

    assert_matches_jax(normalized, _ROWS)  # (jnp.var's select and n - ddof folded as XLA folds them)


def test_scalar_constants_fold_as_xla_folds_them():
    # XLA's constant folding makes jnp.var's `n - ddof` a constant before its simplifier runs: dividing by it is
    # multiplying by its reciprocal, and the select on `n - ddof > 0` is gone, so `var * (1/n) + eps` is an FMA.
    assert_matches_jax(lambda a: a.var(0) + F32(1e-5), _ROWS)
    assert_matches_jax(lambda a: a.std(0, ddof=1) + 1, _ROWS)
    assert_matches_jax(lambda a: jnp.var(a, axis=-1, ddof=3) * 3 + 1, _ROWS)


def test_divide_by_broadcast_root_and_exp_become_rsqrt_and_exp():
    # 1 / sqrt(B) -> rsqrt(B) and 1 / exp(B) -> exp(-B) beneath the keepdims reshape, as XLA's reshape
    # mover and simplifier do.
    v = np.abs(_COLUMN) + F32(0.1)
    assert_matches_jax(lambda a, b: a / jnp.sqrt(b)[None, :], _ROWS, v)
    assert_matches_jax(lambda a, b: a / jnp.exp(b)[None, :], _ROWS, _COLUMN)


def test_divide_by_broadcast_not_for_complex_or_in_loops_too():
    z = (_ROWS + 1j * _ROWS[::-1]).astype(np.complex64)
    assert_matches_jax(lambda a, b: a / b[None, :], z, (_COLUMN + 0.5j).astype(np.complex64))
    assert_matches_jax(lambda a, b: jax.lax.fori_loop(0, 3, lambda i, c: c / b[None, :], a), _ROWS, _COLUMN)


def test_divide_by_implicit_broadcast_from_the_builder():
    from xla_dialect import XlaBuilder

    x, y = _ROWS, _COLUMN
    for fresh in (False, True):
        b = XlaBuilder("div")
        p = b.parameter(0, "f32[48,40]")
        q = b.parameter(1, "f32[40]" if not fresh else "f32[1,40]")
        b.div(p, q, broadcast_dimensions=(1,)) if not fresh else b.div(p, q)
        out = lowering.compile(b.build())(x, y if not fresh else y.reshape(1, 40))[0]
        assert _same_bits(out, x * (F32(1) / y))


# -- A / f(B) and divisions of divisions -------------------------------------------


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_divide_by_functions(dtype):
    x, y, p = _data(dtype), _data(dtype, seed=1), _data(dtype, positive=True, seed=2)
    assert_matches_jax(lambda a, b: a / jnp.sqrt(b), x, p)
    assert_matches_jax(lambda a, b: a / jax.lax.rsqrt(b), x, p)
    assert_matches_jax(lambda a, b: a / jnp.exp(b), x, y)
    assert_matches_jax(lambda a, b: jnp.exp(a) / jnp.exp(b), x, y)
    assert_matches_jax(lambda a, b, c: a / jax.lax.pow(b, c), x, p, y)


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_a_product_of_exps_is_the_exp_of_the_sum(dtype):
    # exp(A) * exp(B) -> exp(A + B), whatever else reads the exps (about half of the elements differed before;
    # long fuzz campaign: exp(x) squared in f16). In loops and fused too; large exponents whose exps overflow.
    x, y = _data(dtype), _data(dtype, seed=1)
    assert_matches_jax(lambda a, b: jnp.exp(a) * jnp.exp(b), x, y)
    assert_matches_jax(lambda a, b: jnp.exp(a) ** 2, x, y)
    assert_matches_jax(lambda a, b: (jnp.exp(a) * jnp.exp(b), jnp.exp(a) + b), x, y)
    assert_matches_jax(lambda a, b: jnp.exp(a) * jnp.exp(b) * jnp.exp(a + 1), x, y)
    big = np.array([1000, -999, 80, 12, -20000, 3], dtype)
    assert_matches_jax(lambda a, b: jnp.exp(a) * jnp.exp(b), big, -big[::-1] + 1)
    _run_modes(lambda a, b: jax.lax.fori_loop(0, 3, lambda i, v: jnp.exp(v) * jnp.exp(b) * dtype(0.25), a),
               x[:16], y[:16])


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_cos_of_a_negation_or_absolute_value_is_cos_of_the_value(dtype):
    # LLVM drops the sign change under XLA's cos (and numba's LLVM did in compiled loops only): a NaN's sign is
    # the operand's, in every configuration (long fuzz campaign: cos(-cos(x)) of an infinity differed in sign
    # between the interpreter and compiled loops). NaN bits compared exactly here.
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5], dtype)
    payload = np.array([0x7E09, 0xFE09], np.uint16).view(F16) if dtype == F16 else \
        np.array([0x7FC12345, 0xFFC12345], np.uint32).view(F32).astype(dtype)
    x = np.concatenate([specials, payload, _data(dtype, 22)])
    for fn in (lambda v: jnp.cos(-v), lambda v: jnp.cos(jnp.abs(v)), lambda v: jnp.cos(-jnp.cos(v))):
        expected = _bits(jax.jit(fn)(x))
        module = import_jax(fn, x)
        for mode in ("never", "always"):
            got = _bits(lowering.compile(module, fusion=mode, loop_compilation=mode)(x)[0])
            np.testing.assert_array_equal(got, expected)
        loop = lambda v: jax.lax.fori_loop(0, 1, lambda i, w: fn(w), v)  # noqa: E731
        looped = import_jax(loop, x)
        for mode in ("never", "always"):
            np.testing.assert_array_equal(_bits(lowering.compile(looped, loop_compilation=mode)(x)[0]), expected)


@pytest.mark.parametrize("dtype", (F32, F64))
def test_arithmetic_with_a_nan_constant_is_the_constant(dtype):
    # LLVM folds x + c, x * c, x / c, max(x, c)... with a NaN constant c to c's NaN (x - c: -c's), whatever x
    # holds: the executor gave x's NaN where x was one. NaN bits compared exactly; straight-line, fused, in loops.
    u = np.dtype(f"u{np.dtype(dtype).itemsize}")
    shift = 8 * u.itemsize - 1
    quiet = u.type(1) << u.type(np.finfo(dtype).nmant - 1)
    c = (np.array((1 << (shift + 1)) - 1, u) ^ quiet).view(dtype)  # a signalling NaN, sign and payload bits set
    assert np.isnan(c)
    payload = (np.array([np.nan], dtype).view(u) | u.type(0x1234)).view(dtype)
    x = np.concatenate([np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5], dtype), payload,
                        _data(dtype, 7)])
    programs = [lambda v: v + c, lambda v: c * v, lambda v: v - c, lambda v: c - v, lambda v: v / c,
                lambda v: jnp.maximum(v, c), lambda v: jnp.minimum(c, v), lambda v: v * c + 1]
    for fn in programs:
        expected = _bits(jax.jit(fn)(x))
        for mode in ("never", "always"):
            got = _bits(lowering.compile(import_jax(fn, x), fusion=mode, loop_compilation=mode)(x)[0])
            np.testing.assert_array_equal(got, expected)
        loop = lambda v: jax.lax.fori_loop(0, 2, lambda i, w: fn(w), v)  # noqa: E731
        np.testing.assert_array_equal(_bits(lowering.compile(import_jax(loop, x), loop_compilation="always")(x)[0]),
                                      _bits(jax.jit(loop)(x)))


def test_divide_by_shared_sqrt_is_not_rewritten():
    # A / sqrt(B) -> A * rsqrt(B) needs the sqrt to have one use.
    def fn(a, b):
        s = jnp.sqrt(b)
        return a / s, s

    assert_matches_jax(fn, _data(F32), _data(F32, positive=True, seed=1))


@pytest.mark.parametrize("dtype", (F32, F64))
def test_divisions_of_divisions(dtype):
    x, y, z, w = (_data(dtype, seed=s) for s in range(4))
    assert_matches_jax(lambda a, b, c: (a / b) / c, x, y, z)
    assert_matches_jax(lambda a, b, c: a / (b / c), x, y, z)
    assert_matches_jax(lambda a, b, c, d: (a / b) / (c / d), x, y, z, w)


# -- constants folded together, A + 0, powers ---------------------------------------


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_constant_chains(dtype):
    x = _data(dtype, scale=10)
    assert_matches_jax(lambda a: (a * dtype(0.1)) * dtype(0.3), x)
    assert_matches_jax(lambda a: dtype(0.3) * (dtype(0.1) * a), x)
    assert_matches_jax(lambda a: (a + dtype(0.1)) + dtype(0.3), x)
    assert_matches_jax(lambda a: (a - dtype(0.1)) - dtype(0.3), x)
    assert_matches_jax(lambda a: (a / dtype(3)) * dtype(7), x)


def test_constant_chains_not_folded():
    x, y = _data(F32), _data(F32, seed=1)
    table = np.linspace(1, 2, 2000).astype(F32)
    assert_matches_jax(lambda a: (a * table) * F32(0.3), x)  # array constant with a broadcast scalar
    assert_matches_jax(lambda a, b: (a * b) * F32(0.3), x, y)
    assert_matches_jax(lambda a, b: (a * F32(0.1)) * b, x, y)


@pytest.mark.parametrize("dtype", (F32, F64))
def test_products_by_one_power_of_two_are_factored(dtype):
    # A*C + B*C -> (A+B)*C for a power-of-two constant C that is one instruction for XLA (the program's equal
    # constants are merged by its CSE, the reciprocals its simplifier makes are not): the products' underflow
    # shows it, x / 2 + x / 2 of the smallest normal is that normal in XLA, two flushed halves otherwise.
    tiny = np.finfo(dtype).tiny
    x, y = _data(dtype) * dtype(tiny), _data(dtype, seed=1)
    x[:3] = y[:3] = [tiny, -tiny, 5.5]
    half, quarter, third = dtype(0.5), dtype(0.25), dtype(0.3)
    assert_matches_jax(lambda a, b: a * half + b * half, x, y)  # factored: two constants 0.5 in jax's program
    assert_matches_jax(lambda a, b: half * a + b * half, x, y)
    assert_matches_jax(lambda a: (lambda d: d + d)(a / dtype(2)), x)  # factored: one product, used twice
    assert_matches_jax(lambda a, b: a / dtype(2) + b / dtype(2), x, y)  # not: two reciprocals made by XLA
    assert_matches_jax(lambda a, b: a * half + b * quarter, x, y)  # not: different constants
    # not by a subnormal power of two: XLA's compiler reads it as zero (long fuzz campaign: NaN for -0)
    big = np.array([np.finfo(dtype).max, 1.0, 1.0, 5.0, -np.inf, 3.0], dtype)
    for c in (-dtype(tiny) / 2 ** 20, dtype(tiny) / 8, -dtype(tiny)):
        assert_matches_jax(lambda a, b: a * c + b * c, big, -big[::-1])
        assert_matches_jax(lambda a, b: a * c + a * c, big, big)
    assert_matches_jax(lambda a, b: a * third + b * third, x, y)  # not: 0.3 is no power of two
    module = import_jax(lambda a, b: a * half + b * half, x, y)
    factored = lowering.compile(module)(x, y)[0]
    assert np.asarray(factored)[0] == tiny  # (the test tells the two apart)
    assert np.asarray(lowering.compile(module, xla_rewrites=False)(x, y)[0])[0] == 0


def test_add_zero_keeps_negative_zero():
    x = _data(F32)
    x[:4] = [-0.0, 0.0, np.nan, -np.inf]
    assert_matches_jax(lambda a: a + F32(0), x)
    assert_matches_jax(lambda a: F32(0) + a, x)
    assert_matches_jax(lambda a: a * F32(0), x)  # A * 0 is not folded for floats (NaN, -0)


@pytest.mark.parametrize("dtype", (F32, F64, F16, BF16))
@pytest.mark.parametrize("e", [0, 1, 2, 3, 4, -1, -2, 0.5, 1.5])
def test_power_by_constant(dtype, e):
    assert_matches_jax(lambda a: jax.lax.pow(a, dtype(e)), _data(dtype, positive=True))


@pytest.mark.parametrize("dtype", (F32, F64))
@pytest.mark.parametrize("e", [np.int32(3), np.int32(2), np.int32(-1), np.int8(3)])
def test_power_by_converted_integer_constant(dtype, e):
    # XLA folds convert(3: s32) -> f32 before its pow(A, 3) -> A * (A * A) rewrite.
    assert_matches_jax(lambda v: jax.lax.pow(v, e), _data(dtype, n=4096))


@pytest.mark.parametrize("dtype", (F32, F64, F16))
def test_log_of_exp_pow_sqrt_rsqrt(dtype):
    # XLA's HandleLog: ln(exp(A)) -> A, ln(pow(A, B)) -> ln|A| * B (finite for A < 0, where pow is NaN),
    # ln(sqrt(A)) -> ln(A) * 0.5, ln(rsqrt(A)) -> ln(A) * -0.5.
    a, b, p = _data(dtype), _data(dtype, scale=1.0, seed=1), _data(dtype, positive=True, seed=2)
    a[:5] = [-2.0, -0.0, np.inf, np.nan, -np.inf]
    assert_matches_jax(lambda x, y: jnp.log(jax.lax.pow(x, y)), a, b)
    assert_matches_jax(lambda x, y: (jnp.log(jax.lax.pow(x, y)), jax.lax.pow(x, y)), a, b)
    assert_matches_jax(lambda x: jnp.log(jnp.exp(x)), b)
    assert_matches_jax(lambda x: jnp.log(jnp.sqrt(x)), p)
    assert_matches_jax(lambda x: jnp.log(jax.lax.rsqrt(x)), p)


def test_complex_logs_are_not_rewritten():
    z = (_data(F32) + 1j * _data(F32, seed=1)).astype(np.complex64)
    w = (_data(F32, scale=0.5, seed=2) + 0.25j).astype(np.complex64)
    assert_matches_jax(lambda x, y: jnp.log(jax.lax.pow(x, y)), z, w)
    assert_matches_jax(lambda x: jnp.log(jnp.exp(x)), w)
    assert_matches_jax(lambda x: jnp.log(jnp.sqrt(x)), z)


@pytest.mark.parametrize("dtype", FLOATS)
def test_identities_keep_subnormals_and_nan_bits(dtype):
    # XLA removes x * 1, x / 1, x - 0, max(x, x), min(x, x) and makes x * -1 a negation when it compiles.
    x = _data(dtype)
    tiny = float(jnp.finfo(dtype).tiny)
    x[:6] = [tiny / 4, -tiny / 8, np.nan, -np.nan, -0.0, np.inf]
    bits = x.view(f"u{x.dtype.itemsize}")
    bits[6] = bits[2] | 1  # a NaN payload
    for fn in (lambda v: v * dtype(1), lambda v: dtype(1) * v, lambda v: v / dtype(1), lambda v: v - dtype(0),
               lambda v: jnp.maximum(v, v), lambda v: jnp.minimum(v, v), lambda v: v * dtype(-1),
               lambda v: dtype(-1) * v):
        assert_matches_jax(fn, x)
    # select(p, x, x) is x, so min(x, select(p, x, x)) is min(x, x) is x (found by the differential fuzzer:
    # a subnormal x was flushed here).
    assert_matches_jax(lambda v, w: jnp.minimum(v, jnp.where(w > v, v, v)), x, _data(dtype, seed=3))


def test_value_preserving_convert_pairs_are_removed():
    # XLA's IsConvertPairNoOp: a bf16/f16/f32 subnormal survives a round trip through a wider type under
    # flush-to-zero (found by the differential fuzzer: bf16 -> f64 -> bf16 flushed here).
    x = np.array([0x8012, 0x0001, 0x7F81, 0x3F80, 0xFFC3], np.uint16).view(BF16)
    h = np.array([0x8012, 0x0001, 0x7C01, 0x3C00], np.uint16).view(F16)
    f = np.array([1e-40, -1e-42, 1.0, 3e38], F32)
    for v, mids in ((x, (F64, F32)), (h, (F64, F32)), (f, (F64,))):
        for mid in mids:
            assert_matches_jax(lambda a: a.astype(mid).astype(v.dtype), v)
    assert_matches_jax(lambda a: a.astype(F16).astype(F32), f)  # not value-preserving: converted twice
    assert_matches_jax(lambda a: a.astype(np.int32).astype(np.int8), np.array([-5, 127, -128], np.int8))


def test_power_of_exp():
    assert_matches_jax(lambda a, b: jax.lax.pow(jnp.exp(a), b), _data(F32, scale=1), _data(F32, scale=1, seed=1))


# -- options, pass registry, caller's module --------------------------------------


def test_literal_mode_and_bad_option():
    x = _data(F32, n=100000, scale=10)
    literal = _run(lambda v: v / F32(0.02), x, xla_rewrites=False)[0]
    assert _same_bits(literal, x / F32(0.02))
    assert np.mean(literal != np.asarray(jax.jit(lambda v: v / F32(0.02))(x))) > 0.1
    module = import_jax(lambda v: v / F32(0.02), x)
    with pytest.raises(ExecutionError, match="xla_rewrites"):
        lowering.compile(module, xla_rewrites="yes")


def test_pass_is_registered_and_leaves_the_callers_module_alone():
    x = _data(F32)
    module = import_jax(lambda v: v / F32(3.0), x)
    before = str(module)
    lowering.compile(module)(x)
    assert str(module) == before
    assert "xla-float-rewrites" in passes.available_passes()
    passes.run(module, "canonicalize-broadcasts,xla-float-rewrites")
    assert "hlo.divide" not in str(module) and "hlo.multiply" in str(module)


def test_the_cheap_check_covers_every_patterns_root():
    # needs_rewrites decides whether xla-float-rewrites runs at all: a pattern whose root it does not name never
    # applies in lowering.compile (cos(-A) -> cos(A) did not, while running the pass by hand applied it).
    import typing

    from xdsl.ir import Operation

    from passes import xla_numerics as xn
    from passes.patterns import Rule

    named = {*xn._ROOTS, xn.ReduceOp, xn.cv.ConvertOp, xn.dm.TransposeOp, xn.DotGeneralOp, xn.ReduceWindowOp,
             xn.ew.CompareOp}
    for pattern in xn.XlaFloatRewritesPass.PATTERNS:
        if isinstance(pattern, Rule):
            roots = pattern.op_types()
        else:
            roots = (typing.get_type_hints(pattern.match_and_rewrite)["op"],)
        if roots == (Operation,):
            continue  # (constant folding of any op: its operands are constants, checked by the folds' own tests)
        assert roots is not None and set(roots) <= named, (pattern, roots)


def test_quantized_ops_are_not_rewritten():
    # A division computing on quantized values keeps the spec's dequantize / divide / quantize.
    from passes.xla_numerics import needs_rewrites, xla_float_rewrites
    from xla_dialect import XlaBuilder
    from xla_dialect.quant import uniform_quantized

    q = uniform_quantized("s8", "f32", 0.1, 0)
    b = XlaBuilder("qdiv")
    x = b.uniform_quantize(b.parameter(0, "f32[8]"), q)
    c = b.uniform_quantize(b.constant(np.full(8, 3.0, np.float32)), q)
    module = b.build(b.div(x, c, result_type=q))
    assert not needs_rewrites(module)
    assert xla_float_rewrites(module, clone=True) is module


# ----------------------------------------------------------------------------
# Excess precision: a bf16 op whose result is converted to f32 (XLA's float normalization)
# ----------------------------------------------------------------------------

_EXCESS_CASES = {
    "add": lambda x, y: x + y, "multiply": lambda x, y: x * y, "divide": lambda x, y: x / y,
    "subtract": lambda x, y: x - y, "exp": lambda x, y: jnp.exp(x), "log": lambda x, y: jnp.log(y),
    "tanh": lambda x, y: jnp.tanh(x), "sqrt": lambda x, y: jnp.sqrt(y), "rsqrt": lambda x, y: jax.lax.rsqrt(y),
    "logistic": lambda x, y: jax.nn.sigmoid(x), "power": lambda x, y: jnp.power(y, x),
    "sin": lambda x, y: jnp.sin(x), "cos": lambda x, y: jnp.cos(x), "expm1": lambda x, y: jnp.expm1(x),
    "log1p": lambda x, y: jnp.log1p(y), "atan2": lambda x, y: jnp.arctan2(x, y), "cbrt": lambda x, y: jnp.cbrt(x),
    "erf": lambda x, y: jax.lax.erf(x), "tan": lambda x, y: jnp.tan(x), "divide_by_constant": lambda x, y: x / 3.0,
    "chain_keeps_inner_rounding": lambda x, y: x * y + x,
    "convolution": lambda x, y: jax.lax.conv(x.reshape(1, 1, 32, 64), y.reshape(1, 1, 32, 64)[:, :, :3, :3],
                                             (1, 1), "VALID"),
    "program_round_trip_keeps_rounding": lambda x, y: (x.astype(jnp.float32) * 3).astype(jnp.bfloat16),
}


@pytest.mark.parametrize("name", sorted(_EXCESS_CASES))
def test_bf16_op_widened_by_convert_is_computed_in_f32(name):
    """convert(op(bf16) -> bf16) -> f32 is XLA's f32 op without the bf16 rounding, bit for bit."""
    import interop

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(2048) * 2).astype(jnp.bfloat16)
    y = (rng.standard_normal(2048) + 3).astype(jnp.bfloat16)
    f = _EXCESS_CASES[name]
    report = interop.difftest(lambda x, y: f(x, y).astype(jnp.float32), x, y, exact=True)
    assert report.ok, str(report)


@pytest.mark.parametrize("name", ["sqrt", "exp", "sin", "multiply", "add", "divide_by_constant", "convolution"])
def test_bf16_op_converted_to_f64_is_rounded_to_bf16_first(name):
    """convert(op(bf16) -> bf16) -> f64 reads the bf16 value: XLA drops the bf16 rounding only before f32."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(2048) * 2).astype(jnp.bfloat16)
    y = (rng.standard_normal(2048) + 3).astype(jnp.bfloat16)
    f = _EXCESS_CASES[name]
    assert_matches_jax(lambda x, y: f(x, y).astype(jnp.float64), x, y)


def test_bf16_matmul_widened_by_convert():
    """A bf16 matmul converted to f32: XLA's f32 dot (no bf16 rounding: 32,000 ULPs before this rewrite);
    the remaining difference is the f32 summation order, within the magnitude bound."""
    import interop

    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 64)).astype(jnp.bfloat16)
    b = rng.standard_normal((64, 8)).astype(jnp.bfloat16)
    report = interop.difftest(lambda a, b: (a @ b).astype(jnp.float32), a, b)
    assert report.ok, str(report)
    assert report.outputs[0].comparison.max_ulp < 64


# -- max/min with a constant operand -------------------------------------------


def _strict_bits_match(fn, x, **options):
    expected = _bits(np.asarray(jax.jit(fn)(x)))
    actual = _bits(np.asarray(_run(fn, x, **options)[0]))
    assert np.array_equal(actual, expected), [(hex(a), hex(e)) for a, e in zip(actual, expected) if a != e][:6]


@pytest.mark.parametrize("fusion", ["never", "always"])
@pytest.mark.parametrize("dtype", (F32, F64))
def test_a_constant_first_operand_of_max_min_moves_right(dtype, fusion):
    # XLA's simplifier puts the constant of a commutative op on the right; a NaN x then keeps its own sign
    # (max(0, -nan) is -nan in XLA), where max(C, x) as written gives C's NaN sign rule.
    x = np.array([np.nan, -np.nan, 1.0, -2.0, -0.0, 0.0] * 3, dtype)
    c = np.array([0, 1, 2, 3, -4, -0.0] * 3, dtype)
    for fn in (lambda v: jnp.maximum(dtype(0), v), lambda v: jnp.minimum(dtype(-0.0), v),
               lambda v: jnp.maximum(dtype(1), v), lambda v: jnp.minimum(dtype(-1), v),
               lambda v: jnp.maximum(c, v), lambda v: jnp.minimum(-c, v)):
        _strict_bits_match(fn, x, fusion=fusion)


@pytest.mark.parametrize("dtype, fusion", sweep([F32, F64], ["never", "always"],
                                                 ids=[lambda t: np.dtype(t).name, str]))
def test_max_min_with_a_denormal_constant_read_as_a_zero(dtype, fusion):
    # Found by the differential fuzzer: jnp.minimum(+0, -1e-45) is +0 in XLA (the sign rule gives -0). XLA's
    # vector code knows the constant is not zero, so no signed-zero fix-up is emitted: under DAZ the constant
    # reads as a zero of its sign and a tie returns x (flushed); one element keeps the sign rule.
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([0.0, -0.0, tiny, -tiny, 1.0, -1.0, np.nan, -np.nan, np.inf, -np.inf,
                  np.finfo(dtype).tiny / 8, np.finfo(dtype).tiny], dtype)
    for c in (dtype(tiny), dtype(-tiny), dtype(-3 * tiny), dtype(0.0), dtype(-0.0)):
        for n in (1, 2, len(x)):
            for fn in (lambda v: jnp.minimum(v, c), lambda v: jnp.maximum(v, c),
                       lambda v: jnp.minimum(c, v), lambda v: jnp.maximum(c, v)):
                _strict_bits_match(fn, x[:n], fusion=fusion)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_a_complex_zero_minus_x_is_left_as_written(dtype):
    """The '-0 - x -> -x' rule is of real floats: a complex constant operand (the corpus's subtract_op_test_c64)
    passes through it (np.signbit raised a TypeError on complex constants in the pass)."""
    z = (_data(F32, 64) + 1j * _data(F32, 64, seed=1)).astype(dtype)
    for c in (dtype(0), dtype(complex(-0.0, -0.0)), dtype(complex(-0.0, 1.0))):
        assert_matches_jax(lambda v, c=c: c - v, z)


# -- A + scatter(O, I, U) -> scatter(A + O, I, U) (HandleAdd) -----------------------------------------------

def _run_modes(fn, *args):
    expected = [np.asarray(e) for e in jax.tree.leaves(jax.jit(fn)(*args))]
    for mode in ("never", "always"):
        exe = lowering.compile(import_jax(fn, *args), fusion=mode, loop_compilation=mode)
        actual = [np.asarray(a) for a in jax.tree.leaves(exe(*args))]
        for a, e in zip(actual, expected):
            assert _same_bits(a, e), f"{mode}: {np.mean(_bits(a) != _bits(e)):.3f} of elements differ"


def test_softmax_cross_entropy_gradient_is_not_a_multiply_add():
    # The gradient is exp(z - max) * (1/n / sum) + scatter(0, label, -1/n): XLA scatters into the product (no
    # FMA at the labels; contracted, 3 of 320 elements of flax's MLP train step differed).
    import optax

    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((64, 10)).astype(F32), rng.integers(0, 10, 64).astype(np.int32)
    loss = lambda z, y: optax.softmax_cross_entropy_with_integer_labels(z, y).mean()  # noqa: E731
    _run_modes(jax.grad(loss), logits, labels)


def test_added_into_a_scatter():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(50).astype(F32), rng.standard_normal(50).astype(F32)
    i, u = rng.integers(0, 50, 400).astype(np.int32), rng.standard_normal(400).astype(F32)
    _run_modes(lambda a, b, i, u: a * b + (b * 0.3).at[i].add(u), a, b, i, u)


@pytest.mark.parametrize("case", ["1d", "swapped", "ranks", "rows", "sorted", "many"])
@pytest.mark.sample(3)
def test_two_scatters_added(case):
    # The gradient of two gathers: one scatter of both's updates, the left's first (sorted indices: the left
    # scatter into the right's result; more updates than elements: the add stays).
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 4) if case in ("rows", "sorted") else 1000).astype(F32)
    i, j = (rng.integers(0, 20, 100).astype(np.int32) for _ in range(2))
    if case == "ranks":
        j = rng.integers(0, 20, (20, 3)).astype(np.int32)
    if case == "many":
        x, i, j = x[:50], rng.integers(0, 50, 400).astype(np.int32), rng.integers(0, 50, 400).astype(np.int32)
    if case == "sorted":
        i = np.sort(i)
    first, second = (j, i) if case == "swapped" else (i, j)

    def f(x, a, b):
        ga = x.at[a].get(indices_are_sorted=case == "sorted")
        return jnp.sum(jnp.sin(ga) * 3.1) + jnp.sum(jnp.cos(x[b]) * 1.7)

    _run_modes(jax.grad(f), x, first, second)


def test_a_constant_factor_moves_onto_the_broadcast_operand():
    # HandleMultiply: (A * C) * broadcast(B) -> A * broadcast(B * C) for a scalar constant C: the constant rounds
    # with the smaller operand. Long fuzz campaign, seed 40: (x / 1e-40) / max(x / 1e-40) in f64 gave 1.0 where
    # XLA gives 0.9999999999999999 (x * broadcast((1 / max) * 1e40)).
    x = np.array([[3.0e-4, 1.9e-4, 0.0], [1.0e-3, 2.0e-3, 3.0e-3]], np.float64)
    x[0, 0] = np.frombuffer(np.uint64(0x3F34D2EAED6D4B60).tobytes(), np.float64)[0]
    assert_matches_jax(lambda a: (a / np.float64(1e-40)) / jnp.max(a / np.float64(1e-40), -1, keepdims=True), x)
    rows, column = _ROWS, _COLUMN
    assert_matches_jax(lambda a, b: F32(0.37) * a * b[None, :], rows, column)
    assert_matches_jax(lambda a, b: (a * F32(3.3)) * b[:, None], rows.T, column)
    assert_matches_jax(lambda a: (a / F32(7)) / jnp.max(a / F32(7), -1, keepdims=True), rows)
    assert_matches_jax(lambda a, b: ((a * F32(0.37)) * b[None, :], a * F32(0.37) + 1), rows, column)  # (reused)


# -- dots and window reductions as XLA computes them -------------------------------------------------------------

def _normal(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _rewritten(fn, *args) -> list[str]:
    """The op names of ``fn``'s program after the executor's pipeline."""
    prepared = prepare_for_execution(import_jax(fn, *args))
    return [op.name for op in prepared.walk()]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_transposed_dot_is_the_product_with_swapped_operands(dtype):
    # HandleTranspose: transpose(dot(A, B)) -> dot(B, A) where the transpose swaps the two free dimensions and is
    # the dot's only user. equinox's Linear under vmap computes transpose(dot_general(W, x)); XLA runs dot(x, W),
    # a YNNPACK product of the other shape (88 of 128 outputs of a 4-64-64-64-2 tanh MLP differed before).
    with jax.enable_x64(dtype == F64):
        x, w1, w2, w3 = (_normal(s, dtype, seed) for seed, s in enumerate([(64, 4), (64, 4), (64, 64), (2, 64)]))
        b1, b2, b3 = (_normal(s, dtype, 9 + seed) for seed, s in enumerate([(64,), (64,), (2,)]))

        def mlp(x, w1, b1, w2, b2, w3, b3):
            def one(v):  # (equinox.nn.Linear: weight @ x + bias, per example)
                h = jnp.tanh(w1 @ v + b1)
                h = jnp.tanh(w2 @ h + b2)
                return w3 @ h + b3
            return jax.vmap(one)(x)

        assert_matches_jax(mlp, x, w1, b1, w2, b2, w3, b3)
        assert "hlo.transpose" not in _rewritten(mlp, x, w1, b1, w2, b2, w3, b3)
        batched = (_normal((3, 8, 20), dtype), _normal((3, 16, 20), dtype, 1))
        assert_matches_jax(lambda a, b: jnp.swapaxes(jnp.einsum("bik,bjk->bij", a, b), 1, 2), *batched)
        # Not folded in XLA: a dot with another reader, and a transpose that is a bitcast (a free dimension of 1).
        def shared(a, b):
            d = jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())))
            return d.T, d.sum(0)

        assert_matches_jax(shared, _normal((40, 24), dtype), _normal((32, 24), dtype, 1))
        assert "hlo.transpose" in _rewritten(shared, _normal((40, 24), dtype), _normal((32, 24), dtype, 1))
        assert_matches_jax(lambda a, b: (a @ b).T, _normal((1, 24), dtype), _normal((24, 32), dtype, 1))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_dot_of_one_term_is_a_multiply_contracted_into_its_add(dtype):
    # HandleDot: a dot whose contracting dimensions have size 1 is a multiply of broadcasts in XLA (every shape and
    # type measured), so the add of a bias is one FMA per element: equinox's first Linear of one input feature
    # (367 of 2,048 elements of the layer differed before, up to 119 ULP).
    with jax.enable_x64(dtype == F64):
        x, w, b = _normal((64, 1), dtype), _normal((32, 1), dtype, 1), _normal((32,), dtype, 2)
        layer = lambda x, w, b: jax.vmap(lambda v: w @ v + b)(x)
        assert_matches_jax(layer, x, w, b)
        assert "hlo.dot_general" not in _rewritten(layer, x, w, b)
        assert_matches_jax(lambda a, c, d: a @ c - d, _normal((16, 1), dtype), _normal((1, 24), dtype, 1),
                           _normal((16, 24), dtype, 2))
        batched = (_normal((4, 8, 1), dtype), _normal((4, 1, 9), dtype, 1))
        assert_matches_jax(lambda a, c: jnp.einsum("bik,bkj->bij", a, c) + 1, *batched)
        zeros = np.array([[-0.0], [2.0]], dtype)  # (a product of -0 stays -0: no sum from +0)
        assert_matches_jax(lambda a, c: a @ c, zeros, np.array([[1.0, -3.0]], dtype))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_matrix_vector_products_are_summed_by_xlas_matrix_vector_emitters(dtype):
    # XLA's dot emitter swaps the operands of (1, K) x (K, N) whose rhs is stored (N, K) (a row-major
    # matrix-vector product) and of (M, K) x (K, 1) whose lhs is stored (K, M) (a column-major one, the order of
    # the vector-matrix product): equinox's last Linear of one output, and its gradients.
    with jax.enable_x64(dtype == F64):
        dn = lambda a, b, dims: jax.lax.dot_general(a, b, (dims, ((), ())))
        for k, n in [(32, 64), (5, 9), (17, 40), (64, 33), (8, 8)]:
            assert_matches_jax(lambda v, w: dn(v, w, ((1,), (1,))), _normal((1, k), dtype), _normal((n, k), dtype, 1))
            assert_matches_jax(lambda a, v: dn(a, v, ((0,), (0,))), _normal((k, n), dtype), _normal((k, 1), dtype, 1))
            # one token's gradient through a dense layer, (1, 1, K) x W.T: the vector is (1, K) to XLA (long
            # fuzz campaign of layer gradients, session 21: 112 of 128 elements differed)
            assert_matches_jax(lambda v, w: dn(v, w, ((2,), (1,))), _normal((1, 1, k), dtype), _normal((n, k), dtype, 1))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_sum_over_the_free_dimensions_of_a_decomposed_dot_as_xla(dtype):
    # XLA's DotDecomposer computes (batch, sequence, K) @ W on the (batch * sequence, K) reshape and its simplifier
    # folds a sum over batch and sequence into a sum over the flat rows: a bias gradient behind another layer
    # (long fuzz campaign of layer gradients, session 21: 12-14 of 16 elements differed)
    with jax.enable_x64(dtype == F64):
        g, w = _normal((3, 46, 4), dtype), _normal((16, 4), dtype, 1)
        assert_matches_jax(lambda g, w: jnp.sum(g @ w.T, axis=(0, 1)), g, w)
        assert_matches_jax(lambda g, w: (jnp.sum(g @ w.T, axis=(0, 1)), g @ w.T), g, w)  # (the dot read back too)
        assert_matches_jax(lambda h, w: jnp.sum(h @ w, axis=(0, 1)), _normal((2, 30, 8), dtype), _normal((8, 24), dtype, 1))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_window_sums_of_disjoint_windows_are_ynnpacks_reduces(dtype):
    # XLA CPU gives a reduce_window whose windows do not overlap (size = stride) over 4,096 elements or more to
    # YNNPACK, which reduces the window dimensions as a reduce: (a00 + a01) + (a10 + a11) for 2 x 2 -- flax's
    # avg_pool (30% of a pooled 8x28x28x16 activation differed before).
    with jax.enable_x64(dtype == F64):
        pool = lambda w, padding="VALID", init=0.0: (
            lambda x: jax.lax.reduce_window(x, np.array(init, dtype), jax.lax.add, w, w, padding))
        x = _normal((8, 28, 28, 16), dtype)
        for window in [(1, 2, 2, 1), (1, 4, 4, 1), (1, 7, 7, 1)]:
            assert_matches_jax(pool(window), x)
        assert_matches_jax(lambda x: pool((1, 2, 2, 1))(jnp.maximum(x * 1.5, 0)) / 4, x)  # (a fused producer)
        assert_matches_jax(pool((1, 2, 2, 1), init=1.0), x)
        assert_matches_jax(pool((1, 1, 2, 2)), _normal((8, 16, 28, 28), dtype))  # NCHW
        assert_matches_jax(pool((1, 2, 2, 1), "SAME"), _normal((8, 27, 27, 16), dtype))  # padded
        assert_matches_jax(pool((1, 2, 2, 1)), _normal((8, 27, 27, 16), dtype))  # a last incomplete window
        assert_matches_jax(pool((2,)), _normal((65536,), dtype))
        assert "hlo.reduce_window" not in _rewritten(pool((1, 2, 2, 1)), x)
        spiked = x.copy()
        spiked.reshape(-1)[::97] = np.nan  # (a max pool is YNNPACK's max: lowering/kernels/ynnpack_extrema.py)
        assert_matches_jax(lambda v: jax.lax.reduce_window(v, -np.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                                           "VALID"), spiked)
        small = _normal((1, 16, 16, 15), dtype)  # (3,840 elements: XLA's own window loop)
        assert_matches_jax(pool((1, 2, 2, 1)), small)
        assert "hlo.reduce_window" in _rewritten(pool((1, 2, 2, 1)), small)


def test_constants_fold_as_xlas_constant_folding_before_the_simplifier():
    # optax's first adam step: 0.9 * zeros + 0.1 * g, and the bias correction 1 - 0.9 ** count of a count XLA
    # knows is 1. XLA folds the splat product to zeros (the add of zero goes), 0.9 ** 1 to 0.9 (a power of
    # exponent 0, 1 or 2 is exact or correctly rounded), and then the division's inverse into 0.1 * g's multiply:
    # g * 0.99999982. 4 of 8 updates were 1 ULP off.
    def adam_first_step(g):
        count = jnp.int32(0) + 1
        mu = F32(0.9) * jnp.zeros_like(g) + F32(0.1) * g
        nu = F32(0.999) * jnp.zeros_like(g) + F32(0.001) * g * g
        mu_hat = mu / (1 - F32(0.9) ** count.astype(F32))
        nu_hat = nu / (1 - F32(0.999) ** count.astype(F32))
        return F32(-0.05) * mu_hat / (jnp.sqrt(nu_hat) + F32(1e-8))

    g = _normal((8, 1))
    assert_matches_jax(adam_first_step, g)
    assert_matches_jax(adam_first_step, _normal((300, 7), seed=1))
    # Splats of the program's own constants fold too; other powers of constants are left to run (their value at
    # run time is what XLA's folding gives only where the power is exact).
    assert_matches_jax(lambda x: x * (F32(3) * jnp.ones_like(x)) - F32(2) ** jnp.float32(3) * x, _normal((16,)))


@pytest.mark.parametrize("n", [3, 5, 6, 7, 9, 11, 13, 16, 19])
@pytest.mark.parametrize("returned", ["exp", "exp and another", "exp and its sum", "exp and its maximum"])
@pytest.mark.sample(12)
def test_an_exp_in_a_loop_of_its_own_calls_glibc_after_the_last_vector(n, returned):
    """XLA CPU's loop of ``jnp.exp`` alone over f32[n], n < 16 with n % 8 in 3, 5, 6, 7: glibc's expf after the last
    whole vector of 8 (every element of f32[3], [5], [6], [7]; the last 3-7 of [11], [13], [14], [15]); 31-132 of
    each 200 draws' elements differed before. With a sum or maximum of it (jax writes the exp again; XLA merges
    the two): one fusion, which reduces the glibc values (3-15 of 100 draws differed). Same bits fused, unfused
    and with loops compiled."""
    def fn(x):
        return {"exp": lambda: jnp.exp(x), "exp and another": lambda: (jnp.exp(x), x * 2),
                "exp and its sum": lambda: (jnp.exp(x), jnp.sum(jnp.exp(x))),
                "exp and its maximum": lambda: (jnp.exp(x), jnp.max(jnp.exp(x)))}[returned]()

    xs = (np.random.default_rng(n).standard_normal((20, n)) * 3).astype(F32)
    module = import_jax(fn, xs[0])
    for options in ({}, {"fusion": "always"}, {"fusion": "never"}, {"loop_compilation": "always"}):
        exe = lowering.compile(module, **options)
        for x in xs:
            for got, want in zip(exe(x), jax.tree.leaves(jax.jit(fn)(x))):
                np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
