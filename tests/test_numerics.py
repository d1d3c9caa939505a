"""Numerics family vs XLA on CPU: reduce_precision, fft, cholesky, triangular_solve,
batch norm, rng, rng_bit_generator.

References: jax.jit of the jax.lax op where jax has one (reduce_precision, fft,
linalg.cholesky, linalg.triangular_solve, rng_bit_generator), and otherwise the
StableHLO op itself run by XLA (``interop.run_xla`` of the exported module:
batch norm, upper Cholesky, u64[3] Philox states, non-unsigned bit outputs).
reduce_precision and rng_bit_generator are compared bit for bit; the others
within a few ULPs (XLA's FFT, factorizations and reductions order their
arithmetic differently).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import execute

import lowering
import xla_dialect
from interop import export_stablehlo, import_stablehlo, run_xla
from xla_dialect.builder import XlaBuilder
from xla_dialect.errors import BuilderError, ExecutionError, HloVerifyError
from xla_dialect.types import element_type_from_dtype

RNG = np.random.default_rng(7)


def _shape_text(a: np.ndarray) -> str:
    return f"{element_type_from_dtype(a.dtype).xla_name}[{','.join(str(d) for d in a.shape)}]"


def build(fn, *args):
    """A module with one parameter per array in ``args`` whose roots are ``fn(builder, *params)``."""
    b = XlaBuilder("numerics")
    params = [b.parameter(i, _shape_text(np.asarray(a))) for i, a in enumerate(args)]
    out = fn(b, *params)
    return b.build(list(out) if isinstance(out, (tuple, list)) else out)


def run(fn, *args):
    """Build with :func:`build` and run on the NumPy executor (a tuple of results)."""
    return execute(build(fn, *args), *args)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_bits_equal(actual, expected, msg=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (msg, actual.dtype, expected.dtype)
    bad = _bits(actual) != _bits(expected)
    if bad.any():
        i = np.argwhere(bad)[0]
        raise AssertionError(f"{msg}: {int(bad.sum())} of {bad.size} differ; first at {i.tolist()}: "
                             f"{hex(int(_bits(actual)[tuple(i)]))} vs {hex(int(_bits(expected)[tuple(i)]))}")


def assert_ulps(actual, expected, max_ulp, msg=""):
    """Same dtype/shape/NaNs; finite values at most ``max_ulp`` apart (float bit patterns as integers)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, msg
    a, e = (_bits(v).astype(np.int64) for v in (actual, expected))
    sign = 1 << (8 * actual.dtype.itemsize - 1)
    a, e = (np.where(v >= sign, sign - v, v) for v in (a, e))  # monotonic integer order
    worst = int(np.abs(a - e).max(initial=0))
    assert worst <= max_ulp, f"{msg}: {worst} ULP apart"


def assert_near(actual, expected, rtol, msg=""):
    """Same dtype/shape; |actual - expected| <= rtol * max|expected| (NaN where NaN)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (msg, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (msg, actual.shape, expected.shape)
    wide = np.complex128 if actual.dtype.kind == "c" else np.float64
    a, e = actual.astype(wide), expected.astype(wide)
    assert (np.isnan(a) == np.isnan(e)).all(), f"{msg}: NaN positions differ"
    ok = ~np.isnan(e)
    scale = max(float(np.max(np.abs(e[ok]), initial=0.0)), 1.0)
    err = float(np.max(np.abs(a[ok] - e[ok]), initial=0.0))
    assert err <= rtol * scale, f"{msg}: max error {err:.3g} > {rtol:.1g} * {scale:.3g}"


# ----------------------------------------------------------------------------
# reduce_precision
# ----------------------------------------------------------------------------

# XLA compiles each op separately (~0.1 s apiece on CPU), so the pairs are chosen to cover the
# algorithm's branches: rounding only, exponent clamping only, both, m = 0 (NaN handling), no-ops,
# formats wider than the type, and the f8 compute format's neighbour (4, 11).
RP_PAIRS = {
    "wide": [(1, 0), (3, 2), (5, 10), (8, 7), (8, 23), (4, 30), (11, 52), (12, 60), (6, 1)],
    "f8": [(1, 0), (2, 1), (3, 1), (5, 2), (4, 11), (8, 3)],
}

RP_TYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
            ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3, ml_dtypes.float8_e3m4,
            ml_dtypes.float8_e8m0fnu]


def _all_bit_patterns(dtype) -> np.ndarray:
    """Every bit pattern for 8/16-bit types; random patterns plus specials for wider ones."""
    dtype = np.dtype(dtype)
    u = np.dtype(f"u{dtype.itemsize}")
    if dtype.itemsize <= 2:
        return np.arange(1 << (8 * dtype.itemsize), dtype=np.uint64).astype(u).view(dtype)
    bits = RNG.integers(0, np.iinfo(u).max, 6000, dtype=u, endpoint=True)
    info = np.finfo(dtype)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, info.max, -info.max, info.tiny, -info.tiny,
                         info.tiny / 2, info.smallest_subnormal, 65504, 65519, 65520, 1 + 2 ** -11, 1 + 3 * 2 ** -11],
                        dtype)
    payload_nans = np.array([0x7F800001, 0xFFC00001, 0x7FFFFFFF], np.uint32) if dtype.itemsize == 4 else \
        np.array([0x7FF0000000000001, 0xFFF8000000000001, 0x7FFFFFFFFFFFFFFF], np.uint64)
    return np.concatenate([bits.view(dtype), specials, payload_nans.view(dtype)])


@pytest.mark.parametrize("dtype", RP_TYPES, ids=lambda d: np.dtype(d).name)
def test_reduce_precision_bit_exact_vs_jax(dtype):
    x = _all_bit_patterns(dtype)
    pairs = RP_PAIRS["f8" if np.dtype(dtype).itemsize == 1 else "wide"]
    refs = jax.jit(lambda v: [jax.lax.reduce_precision(v, e, m) for e, m in pairs])(x)
    got = run(lambda b, p: [b.reduce_precision(p, e, m) for e, m in pairs], x)
    for (e, m), g, r in zip(pairs, got, refs):
        assert_bits_equal(g, r, f"{np.dtype(dtype).name} exponent_bits={e} mantissa_bits={m}")


def test_reduce_precision_spec_example():
    # StableHLO spec: +Inf, NaN, +denormal, 0.0, 65519.0, 65520.0 -> +Inf, NaN, 0.0, 0.0, 65504.0, +Inf
    x = np.array([0x7FF0000000000000, 0x7FFFFFFFFFFFFFFF, 1, 0, 0, 0], np.uint64).view(np.float64)
    x[4:] = [65519.0, 65520.0]
    (out,) = run(lambda b, p: b.reduce_precision(p, 5, 10), x)
    assert out[0] == np.inf and np.isnan(out[1]) and _bits(out)[1] == _bits(x)[1]
    np.testing.assert_array_equal(out[2:], [0.0, 0.0, 65504.0, np.inf])
    neg = run(lambda b, p: b.reduce_precision(p, 5, 10), -x[2:])[0]
    assert np.signbit(neg).all()  # signed zeros and infinities keep the sign


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn],
                         ids=lambda d: np.dtype(d).name)
def test_reduce_precision_keeps_scalar_and_empty_shapes(dtype):
    # The corpus's reduce_precision_float64 program: a 0-d operand must stay 0-d.
    for shape in [(), (0,), (2, 0, 3)]:
        x = np.full(shape, 1.2006864362520839, dtype)
        (got,) = run(lambda b, p: b.reduce_precision(p, 5, 2), x)
        ref = np.asarray(jax.jit(lambda v: jax.lax.reduce_precision(v, 5, 2))(x))
        assert got.shape == shape and got.dtype == x.dtype
        assert_bits_equal(got, ref, f"{np.dtype(dtype).name}{list(shape)}")


def test_reduce_precision_errors():
    b = XlaBuilder("rp")
    f, i = b.parameter(0, "f32[3]"), b.parameter(1, "s32[3]")
    with pytest.raises(BuilderError, match="exponent_bits must be at least 1"):
        b.reduce_precision(f, 0, 3)
    with pytest.raises(BuilderError, match="mantissa_bits must be non-negative"):
        b.reduce_precision(f, 5, -1)
    with pytest.raises(BuilderError, match="floating-point element type, got s32"):
        b.reduce_precision(i, 5, 10)
    with pytest.raises(BuilderError, match="must be an int"):
        b.reduce_precision(f, 5.0, 10)


# ----------------------------------------------------------------------------
# fft
# ----------------------------------------------------------------------------

FFT_CASES = [
    ("FFT", (8,), [8]), ("FFT", (2, 6, 4), [6, 4]), ("FFT", (2, 3, 4, 5), [3, 4, 5]), ("FFT", (1,), [1]),
    ("IFFT", (7,), [7]), ("IFFT", (2, 3, 4, 2), [3, 4, 2]),
    ("RFFT", (3, 7), [7]), ("RFFT", (2, 4, 6), [4, 6]), ("RFFT", (2, 3, 5, 4), [3, 5, 4]),
    ("IRFFT", (5,), [8]), ("IRFFT", (3, 4), [7]), ("IRFFT", (2, 4, 4), [4, 6]), ("IRFFT", (2, 3, 5, 3), [3, 5, 5]),
]


@pytest.mark.parametrize("precision", ["single", "double"])
def test_fft_vs_jax(precision):
    real = np.float32 if precision == "single" else np.float64
    cplx = np.complex64 if precision == "single" else np.complex128
    cases = FFT_CASES if precision == "single" else FFT_CASES[1::3]  # every type, 1 to 3 axes
    inputs = [RNG.standard_normal(shape).astype(real) if kind == "RFFT" else
              (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(cplx) for kind, shape, _ in cases]
    refs = jax.jit(lambda *xs: [jax.lax.fft(x, kind, tuple(n)) for x, (kind, _, n) in zip(xs, cases)])(*inputs)
    got = run(lambda b, *ps: [b.fft(p, kind, n) for p, (kind, _, n) in zip(ps, cases)], *inputs)
    for (kind, shape, lengths), g, r in zip(cases, got, refs):
        want_dtype = real if kind == "IRFFT" else cplx  # c64 stays c64, f32 RFFT gives c64
        assert g.dtype == want_dtype and r.dtype == want_dtype
        assert_near(g, np.asarray(r), 2e-6 if precision == "single" else 1e-14, f"{kind} {shape} {lengths}")


def test_fft_matches_numpy_definitions_and_special_values():
    x = np.zeros(4, np.complex64)
    x[0] = 1
    (out,) = run(lambda b, p: b.fft(p, "FFT", [4]), x)  # StableHLO example: an impulse -> all ones
    np.testing.assert_array_equal(out, np.ones(4, np.complex64))
    y = np.array([1.0, np.nan, 2.0, 3.0], np.float32)
    (r,) = run(lambda b, p: b.fft(p, "RFFT", [4]), y)
    assert np.isnan(r).all()
    ref = np.asarray(jax.jit(lambda v: jnp.fft.rfft(v))(y))
    assert (np.isnan(r) == np.isnan(ref)).all()


def test_fft_empty_dimensions():
    x = np.zeros((0, 4), np.complex64)
    (out,) = run(lambda b, p: b.fft(p, "FFT", [4]), x)
    assert out.shape == (0, 4) and out.dtype == np.complex64
    z = np.zeros((3, 0), np.float32)
    (r,) = run(lambda b, p: b.fft(p, "RFFT", [0]), z)  # a zero length keeps the zero-sized dimension
    assert r.shape == (3, 0) and r.dtype == np.complex64
    c = np.zeros((0, 3), np.complex128)
    (i,) = run(lambda b, p: b.fft(p, "IRFFT", [4]), c)
    assert i.shape == (0, 4) and i.dtype == np.float64


@pytest.mark.parametrize("shape,fft_type,lengths,match", [
    ("c64[8]", "FFT", [], "1 to 3 entries"),
    ("c64[2,2,2,2]", "FFT", [2, 2, 2, 2], "1 to 3 entries"),
    ("f32[8]", "FFT", [8], "FFT requires a complex"),
    ("c64[8]", "RFFT", [8], "RFFT requires an f32 or f64"),
    ("f16[8]", "RFFT", [8], "RFFT requires an f32 or f64"),
    ("f32[8]", "IRFFT", [8], "IRFFT requires a complex"),
    ("c64[8]", "FFT", [8, 8], "at least rank 2"),
    ("f32[4,8]", "RFFT", [4, 6], r"innermost dimensions \[4, 8\] of f32\[4,8\]\S* to equal fft_length \[4, 6\]"),
    ("c64[4,5]", "IRFFT", [3, 8], r"fft_length \[3\]"),
    ("c64[4,4]", "IRFFT", [4, 8], "fft_length\\[-1\\]/2\\+1 = 5, got 4"),
    ("c64[8]", "FFT", [4], "innermost dimensions"),
    ("c64[8]", "DCT", [8], "fft_type must be one of"),
])
def test_fft_errors(shape, fft_type, lengths, match):
    b = XlaBuilder("fft")
    p = b.parameter(0, shape)
    with pytest.raises(BuilderError, match=match):
        b.fft(p, fft_type, lengths)


def test_fft_accepts_jax_enum():
    x = (RNG.standard_normal(6) + 0j).astype(np.complex64)
    (out,) = run(lambda b, p: b.fft(p, jax.lax.FftType.IFFT, [6]), x)
    assert_near(out, np.fft.ifft(x).astype(np.complex64), 1e-6)


# ----------------------------------------------------------------------------
# cholesky
# ----------------------------------------------------------------------------


def _spd(batch, n, dtype, junk=True):
    """Hermitian positive definite matrices; the strict upper triangle holds junk when ``junk``."""
    a = RNG.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal(batch + (n, n))
    a = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    if junk:
        a = np.where(np.triu(np.ones((n, n), bool), 1), 1e3 + 7j if np.iscomplexobj(a) else 1e3, a)
    return a.astype(dtype)


@pytest.mark.parametrize("dtype,batch,n", [(np.float32, (2, 2), 7), (np.float64, (3,), 4),
                                           (np.complex64, (), 1), (np.complex128, (2,), 6)])
def test_cholesky_lower_vs_jax(dtype, batch, n):
    a = _spd(batch, n, dtype)
    ref = np.asarray(jax.jit(lambda v: jax.lax.linalg.cholesky(v, symmetrize_input=False))(a))
    (got,) = run(lambda b, p: b.cholesky(p, lower=True), a)
    tol = 5e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13
    assert_near(got, ref, tol, "cholesky lower")
    assert (np.triu(got, 1) == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_cholesky_upper_vs_xla(dtype):
    # The upper factor reads the upper triangle only (junk below); XLA zeroes the other triangle.
    a = np.conj(np.swapaxes(_spd((3,), 5, dtype), -1, -2))
    module = build(lambda b, p: b.cholesky(p, lower=False), a)
    (got,) = execute(module, a)
    (ref,) = run_xla(module, a)
    tol = 5e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13
    assert_near(got, ref, tol, "cholesky upper")
    assert (np.tril(got, -1) == 0).all()
    full = np.where(np.triu(np.ones((5, 5), bool)), a, np.conj(np.swapaxes(a, -1, -2)))
    assert_near(np.conj(np.swapaxes(got, -1, -2)) @ got, full, tol * 10, "u^H u = a")


def test_cholesky_not_positive_definite_is_nan_per_batch_element():
    a = _spd((3,), 4, np.float64, junk=False)
    a[1, 2, 2] = -50.0  # only batch element 1 fails
    a[2, 3, 0] = np.nan  # a NaN read from the lower triangle fails element 2
    module = build(lambda b, p, q: [b.cholesky(p, lower=True), b.cholesky(q, lower=False)], a,
                   np.swapaxes(a, -1, -2).copy())
    args = (a, np.swapaxes(a, -1, -2).copy())
    for lower, got, ref in zip((True, False), execute(module, *args), run_xla(module, *args)):
        assert np.isnan(got[1]).all() and np.isnan(got[2]).all() and np.isfinite(got[0]).all()
        assert_near(got, ref, 1e-13, f"lower={lower}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_cholesky_low_precision_bit_exact_vs_xla(dtype):
    # XLA's CholeskyExpander step by step in the narrow type (f16: reciprocal pivots), both triangles,
    # several batches; one module per dtype keeps XLA's compile count low.
    cases = [((2,), 4, True), ((), 7, False), ((3, 2), 9, True), ((12,), 5, False), ((1,), 24, True)]
    args = []
    for batch, n, _ in cases:
        a = RNG.standard_normal(batch + (n, n))
        args.append(((a @ np.swapaxes(a, -1, -2) + n * np.eye(n)) / n).astype(dtype))
    module = build(lambda b, *ps: [b.cholesky(p, lower=c[2]) for p, c in zip(ps, cases)], *args)
    for case, got, ref in zip(cases, execute(module, *args), run_xla(module, *args)):
        assert_bits_equal(got, ref, f"batch, n, lower = {case}")


def test_cholesky_low_precision_not_positive_definite():
    a = _spd((2,), 4, np.float32, junk=False).astype(np.float16)
    a[1, 2, 2] = -40
    module = build(lambda b, p: b.cholesky(p), a)
    got, ref = execute(module, a)[0], run_xla(module, a)[0]
    assert np.isnan(got[1].astype(np.float32)).all() and np.isfinite(got[0].astype(np.float32)).all()
    assert_bits_equal(got, ref, "f16 failed batch element")


def test_cholesky_spec_example_and_empty():
    a = np.array([[1.0, 2, 3], [2, 20, 26], [3, 26, 70]], np.float32)
    (l,) = run(lambda b, p: b.cholesky(p, True), a)
    np.testing.assert_allclose(l, [[1, 0, 0], [2, 4, 0], [3, 5, 6]], rtol=1e-6)
    (e,) = run(lambda b, p: b.cholesky(p), np.zeros((2, 0, 0), np.float32))
    assert e.shape == (2, 0, 0)


def test_cholesky_errors():
    b = XlaBuilder("chol")
    with pytest.raises(BuilderError, match="rank >= 2"):
        b.cholesky(b.parameter(0, "f32[4]"))
    with pytest.raises(BuilderError, match="minor dimensions of operand a must be equal"):
        b.cholesky(b.parameter(1, "f32[2,3,4]"))
    with pytest.raises(BuilderError, match="floating-point or complex element type, got s32"):
        b.cholesky(b.parameter(2, "s32[3,3]"))


# ----------------------------------------------------------------------------
# triangular_solve
# ----------------------------------------------------------------------------

TRANSPOSES = ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]


def _triangular(batch, n, dtype, lower, unit):
    a = RNG.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal(batch + (n, n))
    a = a + 3 * n * np.eye(n)
    # Junk outside the triangle that is read (and on the diagonal when it is assumed to be 1).
    keep = np.tril(np.ones((n, n), bool), 0 if not unit else -1) if lower else np.triu(np.ones((n, n), bool), 0 if not unit else 1)
    return np.where(keep, a, 977.0).astype(dtype)


ALL_SOLVES = [(left, lower, unit, t) for left in (True, False) for lower in (True, False) for unit in (False, True)
              for t in TRANSPOSES]
SOME_SOLVES = [(True, True, False, "NO_TRANSPOSE"), (True, False, True, "TRANSPOSE"), (False, True, False, "ADJOINT"),
               (False, False, True, "NO_TRANSPOSE"), (True, True, True, "ADJOINT"), (False, False, False, "TRANSPOSE")]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64, np.complex128])
def test_triangular_solve_vs_jax(dtype):
    # Every option combination for f64, a spread of them for the other types (XLA compiles are slow).
    cases = ALL_SOLVES if dtype == np.float64 else SOME_SOLVES
    single = np.dtype(dtype) in (np.float32, np.complex64)
    cplx = np.dtype(dtype).kind == "c"
    args = []
    for left, lower, unit, _ in cases:
        a = _triangular((2,), 5, dtype, lower, unit)
        shape = (2, 5, 3) if left else (2, 3, 5)
        rhs = RNG.standard_normal(shape) + (1j * RNG.standard_normal(shape) if cplx else 0)
        args += [a, rhs.astype(dtype)]

    def reference(*xs):
        return [jax.lax.linalg.triangular_solve(xs[2 * i], xs[2 * i + 1], left_side=left, lower=lower,
                                                transpose_a=t != "NO_TRANSPOSE", conjugate_a=t == "ADJOINT",
                                                unit_diagonal=unit)
                for i, (left, lower, unit, t) in enumerate(cases)]

    refs = jax.jit(reference)(*args)
    got = run(lambda b, *ps: [b.triangular_solve(ps[2 * i], ps[2 * i + 1], *case) for i, case in enumerate(cases)], *args)
    for case, g, r in zip(cases, got, refs):
        assert_near(g, np.asarray(r), 2e-5 if single else 1e-12, f"left, lower, unit, transpose = {case}")


def test_triangular_solve_spec_example_scalars_and_empty():
    a = np.array([[1.0, 0, 0], [2, 4, 0], [3, 5, 6]], np.float32)
    b = np.array([[2.0, 0, 0], [4, 8, 0], [6, 10, 12]], np.float32)
    (x,) = run(lambda bl, p, q: bl.triangular_solve(p, q, True, True, False, "NO_TRANSPOSE"), a, b)
    np.testing.assert_allclose(x, 2 * np.eye(3), atol=1e-6)
    (e,) = run(lambda bl, p, q: bl.triangular_solve(p, q, True, True, False, "TRANSPOSE"),
               np.zeros((0, 3, 3), np.float64), np.zeros((0, 3, 2), np.float64))
    assert e.shape == (0, 3, 2)
    (k,) = run(lambda bl, p, q: bl.triangular_solve(p, q, False, False, True, "ADJOINT"),
               np.ones((2, 2), np.complex64), np.zeros((0, 2), np.complex64))
    assert k.shape == (0, 2) and k.dtype == np.complex64


def test_triangular_solve_singular_matches_xla():
    a = np.array([[2.0, 0, 0], [1, 0, 0], [1, 2, 3]])
    rhs = np.ones((3, 2))
    module = build(lambda bl, p, q: bl.triangular_solve(p, q, True, True, False, "NO_TRANSPOSE"), a, rhs)
    (got,) = execute(module, a, rhs)
    (ref,) = run_xla(module, a, rhs)
    assert_near(got, ref, 0, "zero pivot")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("batch,n", [((), 5), ((2,), 6), ((12,), 4)])
def test_triangular_solve_low_precision_bit_exact_vs_xla(dtype, batch, n):
    # Every option; batch () / (2,) invert diagonal blocks, (12,) is XLA's direct substitution.
    args = []
    for left, lower, unit, _ in ALL_SOLVES:
        a = RNG.standard_normal(batch + (n, n)) * 0.3 + 2 * np.eye(n)
        args += [a.astype(dtype), RNG.standard_normal(batch + ((n, 3) if left else (3, n))).astype(dtype)]
    module = build(lambda bl, *ps: [bl.triangular_solve(ps[2 * i], ps[2 * i + 1], *case)
                                    for i, case in enumerate(ALL_SOLVES)], *args)
    for case, got, ref in zip(ALL_SOLVES, execute(module, *args), run_xla(module, *args)):
        if np.dtype(dtype) == np.float16 and batch == (2,):
            # Blocks inverted in a batch: now and then XLA's f32 dot order differs (1 ULP).
            assert_ulps(got, ref, 1, f"left, lower, unit, transpose = {case}")
        else:
            assert_bits_equal(got, ref, f"left, lower, unit, transpose = {case}")


@pytest.mark.parametrize("a,b,left,match", [
    ("f32[3,3]", "f64[3,2]", True, "same element type"),
    ("s32[3,3]", "s32[3,2]", True, "floating-point or complex"),
    ("f32[3]", "f32[3]", True, "rank >= 2"),
    ("f32[3,4]", "f32[3,2]", True, "minor dimensions of operand a must be equal"),
    ("f32[3,3]", "f32[2,3,2]", True, "same rank"),
    ("f32[3,3]", "f32[4,2]", True, "shared dimension"),
    ("f32[3,3]", "f32[3,2]", False, "shared dimension"),
    ("f32[2,3,3]", "f32[4,3,2]", True, "same batch dimensions"),
])
def test_triangular_solve_errors(a, b, left, match):
    bl = XlaBuilder("ts")
    with pytest.raises(BuilderError, match=match):
        bl.triangular_solve(bl.parameter(0, a), bl.parameter(1, b), left, True, False, "NO_TRANSPOSE")


def test_triangular_solve_bad_transpose():
    bl = XlaBuilder("ts")
    with pytest.raises(BuilderError, match="transpose_a must be one of"):
        bl.triangular_solve(bl.parameter(0, "f32[2,2]"), bl.parameter(1, "f32[2,2]"), True, True, False, "CONJ")


# ----------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------


def _feature(v, rank, index):
    shape = [1] * rank
    shape[index] = -1
    return v.reshape(shape)


def seed_training(x, scale, offset, eps, index):
    """XLA's operation semantics' formulas in f64: batch mean, biased variance, normalize, scale and shift."""
    axes = tuple(i for i in range(x.ndim) if i != index)
    x = x.astype(np.float64)
    mean = x.mean(axis=axes)
    var = ((x - _feature(mean, x.ndim, index)) ** 2).mean(axis=axes)
    y = _feature(scale, x.ndim, index) * (x - _feature(mean, x.ndim, index)) / np.sqrt(_feature(var, x.ndim, index) + eps) \
        + _feature(offset, x.ndim, index)
    return y, mean, var


def seed_grad(x, scale, mean, var, g, eps, index):
    """XLA's operation semantics' BatchNormGrad formulas in f64."""
    axes = tuple(i for i in range(x.ndim) if i != index)
    f = lambda v: _feature(np.asarray(v, np.float64), x.ndim, index)  # noqa: E731
    x, g = x.astype(np.float64), g.astype(np.float64)
    c = (g * (x - f(mean)) / (f(var) + eps)).mean(axis=axes)
    d = g.mean(axis=axes)
    gx = f(scale) / np.sqrt(f(var) + eps) * (g - f(d) - f(c) * (x - f(mean)))
    gscale = (g * (x - f(mean)) / np.sqrt(f(var) + eps)).sum(axis=axes)
    return gx, gscale, g.sum(axis=axes)


BN_NAMES = ["output", "batch_mean", "batch_var", "inference", "grad_operand", "grad_scale", "grad_offset"]
BN_CASES = [((6,), 0, np.float32, True), ((4, 3), 1, np.float32, False), ((4, 3), 0, np.float64, True),
            ((2, 3, 5), 1, np.float32, True), ((2, 4, 3, 3), 3, np.float64, False), ((2, 4, 3, 3), 0, np.float32, True)]


@pytest.mark.parametrize("shape,index,dtype,with_xla", BN_CASES)
def test_batch_norm_vs_seed_and_xla(shape, index, dtype, with_xla):
    """All three ops against XLA's operation semantics' formulas (in f64) and, for most cases, against XLA's expander."""
    eps = 1e-3
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(dtype)
    c = shape[index]
    scale, offset = RNG.standard_normal(c).astype(dtype), RNG.standard_normal(c).astype(dtype)
    mean, var = RNG.standard_normal(c).astype(dtype), (RNG.random(c) + 0.5).astype(dtype)
    g = RNG.standard_normal(shape).astype(dtype)
    args = (x, scale, offset, mean, var, g)
    module = build(lambda b, x_, s_, o_, m_, v_, g_: [
        *b.batch_norm_training(x_, s_, o_, eps, index), b.batch_norm_inference(x_, s_, o_, m_, v_, eps, index),
        *b.batch_norm_grad(x_, s_, m_, v_, g_, eps, index)], *args)
    got = execute(module, *args)
    eps32 = np.float32(eps)  # XLA: epsilon is an f32 attribute
    inference = _feature(scale, x.ndim, index) * (x - _feature(mean, x.ndim, index)) / np.sqrt(
        _feature(var.astype(np.float64), x.ndim, index) + eps32) + _feature(offset, x.ndim, index)
    seed = [*seed_training(x, scale, offset, eps32, index), inference, *seed_grad(x, scale, mean, var, g, eps32, index)]
    names = ["output", "batch_mean", "batch_var", "inference", "grad_operand", "grad_scale", "grad_offset"]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for out, want, what in zip(got, seed, names):
        assert_near(out, np.asarray(want).astype(dtype), tol * 10, f"{what} vs seed")
    if with_xla:
        for out, ref, what in zip(got, run_xla(module, *args), names):
            assert_near(out, ref, tol, f"{what} vs XLA")


def _batch_norm_module(shape, index, eps, dtype):
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(dtype)
    c = shape[index]
    scale, offset = RNG.standard_normal(c).astype(dtype), RNG.standard_normal(c).astype(dtype)
    mean, var = RNG.standard_normal(c).astype(dtype), (RNG.random(c) + 0.5).astype(dtype)
    args = (x, scale, offset, mean, var, RNG.standard_normal(shape).astype(dtype))
    module = build(lambda b, x_, s_, o_, m_, v_, g_: [
        *b.batch_norm_training(x_, s_, o_, eps, index), b.batch_norm_inference(x_, s_, o_, m_, v_, eps, index),
        *b.batch_norm_grad(x_, s_, m_, v_, g_, eps, index)], *args)
    return module, args


@pytest.mark.parametrize("shape,index,eps", [((4, 3), 1, 1e-2), ((2, 4, 3, 3), 3, 1e-3), ((5, 7, 9), 0, 0.1),
                                             ((64, 33), 1, 1e-3)])
def test_batch_norm_bf16_bit_exact_vs_xla(shape, index, eps):
    # bf16 batch norm is widened to f32 before XLA expands it: f32 epsilon, one rounding at the end.
    module, args = _batch_norm_module(shape, index, eps, ml_dtypes.bfloat16)
    for what, got, ref in zip(BN_NAMES, execute(module, *args), run_xla(module, *args)):
        assert_bits_equal(got, ref, what)


@pytest.mark.parametrize("shape,index,exact", [((4, 3), 1, True), ((8, 5), 1, True), ((6,), 0, False),
                                               ((64, 33), 1, False), ((5, 7, 9), 0, False)])
def test_batch_norm_f16_vs_xla(shape, index, exact):
    # f16 is expanded in f16 (every op rounds, reciprocal divisors): bit-exact for short 2-D sums;
    # inference (no sums) always. Long sums XLA CPU splits, and a few other shapes differ (not
    # reproduced): within a few percent.
    module, args = _batch_norm_module(shape, index, 1e-3, np.float16)
    for what, got, ref in zip(BN_NAMES, execute(module, *args), run_xla(module, *args)):
        if exact or what == "inference":
            assert_bits_equal(got, ref, what)
        else:
            assert_near(got, ref, 3e-2, what)


def test_batch_norm_spec_examples():
    x = np.array([[[1.0, 2.0], [3.0, 4.0]], [[3.0, 4.0], [1.0, 2.0]]])
    ones = np.ones(2)
    (y,) = run(lambda b, *p: b.batch_norm_inference(*p, 0.0, 2), x, ones, ones, np.array([2.0, 3.0]), ones)
    np.testing.assert_array_equal(y, [[[0, 0], [2, 2]], [[2, 2], [0, 0]]])
    g = np.full((2, 2, 2), 0.1)
    gx, gs, go = run(lambda b, *p: b.batch_norm_grad(*p, 0.0, 2), x, ones, np.array([2.0, 3.0]), ones, g)
    np.testing.assert_allclose(gx, 0, atol=1e-15)
    np.testing.assert_allclose(gs, 0, atol=1e-15)
    np.testing.assert_allclose(go, [0.4, 0.4])
    out, mean, var = run(lambda b, *p: b.batch_norm_training(*p, 0.0, 2), x, ones, ones)
    np.testing.assert_allclose(mean, [2.0, 3.0])
    np.testing.assert_allclose(var, [1.0, 1.0])
    np.testing.assert_allclose(out, [[[0, 0], [2, 2]], [[2, 2], [0, 0]]])


@pytest.mark.parametrize("method,shapes,index,match", [
    ("training", ["f32[4,3]", "f32[3]", "f32[3]"], 2, "feature_index 2 is out of range"),
    ("training", ["f32[4,3]", "f32[3]", "f32[3]"], -1, "feature_index -1 is out of range"),
    ("training", ["f32[4,3]", "f32[4]", "f32[3]"], 1, "scale f32\\[4\\]\\S* must have the feature count 3"),
    ("training", ["f32[4,3]", "f32[3]", "f32[1,3]"], 1, "offset must have rank 1"),
    ("training", ["s32[4,3]", "s32[3]", "s32[3]"], 1, "floating-point element type"),
    ("training", ["f32[]", "f32[3]", "f32[3]"], 0, "rank >= 1"),
    ("inference", ["f32[4,3]", "f32[3]", "f32[3]", "f64[3]", "f32[3]"], 1, "mean f64\\[3\\]\\S* must have the operand's element type f32"),
    ("inference", ["f32[4,3]", "f32[3]", "f32[3]", "f32[3]", "f32[2]"], 1, "variance"),
    ("grad", ["f32[4,3]", "f32[3]", "f32[3]", "f32[3]", "f32[4,2]"], 1, "grad_output f32\\[4,2\\]\\S* must have the operand's shape"),
    ("grad", ["f32[4,3]", "f32[3]", "f32[3]", "f32[3]", "f16[4,3]"], 1, "grad_output"),
])
def test_batch_norm_errors(method, shapes, index, match):
    b = XlaBuilder("bn")
    params = [b.parameter(i, s) for i, s in enumerate(shapes)]
    with pytest.raises(BuilderError, match=match):
        getattr(b, f"batch_norm_{method}")(*params, 1e-3, index)


# ----------------------------------------------------------------------------
# rng_bit_generator
# ----------------------------------------------------------------------------

ALGORITHMS = {"THREE_FRY": jax.lax.RandomAlgorithm.RNG_THREE_FRY, "PHILOX": jax.lax.RandomAlgorithm.RNG_PHILOX,
              "DEFAULT": jax.lax.RandomAlgorithm.RNG_DEFAULT}
# (dtype, shape): every split case of XLA's ThreeFry (scalar, even dimension, odd dimensions -> the largest,
# size-1 and empty dimensions) and Philox's partial blocks, for 8/16/32/64-bit outputs.
RBG_CASES = [(np.uint32, ()), (np.uint32, (3, 2)), (np.uint32, (3, 5)), (np.uint32, (7, 1, 3)), (np.uint32, (0, 3)),
             (np.uint64, (5,)), (np.uint64, (2, 3)), (np.uint8, (3, 5)), (np.uint16, (2, 3, 4))]
STATES = [[1, 2], [0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE], [0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFF]]


def _rbg_module(algorithm, state_type, cases):
    b = XlaBuilder("rbg")
    state = b.parameter(0, state_type)
    outs = [v for dtype, shape in cases for v in b.rng_bit_generator(algorithm, state, (shape, dtype))]
    return b.build(outs)


@pytest.mark.parametrize("algorithm", ["THREE_FRY", "PHILOX", "DEFAULT"])
def test_rng_bit_generator_bit_exact_vs_jax(algorithm):
    cases = RBG_CASES if algorithm != "DEFAULT" else RBG_CASES[2:3]  # DEFAULT is Philox on CPU
    fn = jax.jit(lambda k: [jax.lax.rng_bit_generator(k, shape, dtype, ALGORITHMS[algorithm]) for dtype, shape in cases])
    exe = lowering.compile(_rbg_module(algorithm, "u64[2]", cases))
    for words in STATES:
        key = np.array(words, np.uint64)
        got = exe(key)
        for i, ((dtype, shape), (ref_state, ref_bits)) in enumerate(zip(cases, fn(key))):
            what = f"{algorithm} {np.dtype(dtype).name}{list(shape)} from state {words}"
            assert_bits_equal(got[2 * i], np.asarray(ref_state), what + " (state)")
            assert_bits_equal(got[2 * i + 1], np.asarray(ref_bits), what)


@pytest.mark.parametrize("algorithm,state_type,cases", [
    ("PHILOX", "u64[3]", [(np.uint32, (5,)), (np.uint64, (3,)), (np.int16, (3, 2))]),
    ("THREE_FRY", "u64[2]", [(np.float32, (2, 3)), (ml_dtypes.int4, (5,)), (np.int64, (3,))]),
    ("PHILOX", "u64[2]", [(np.float16, (3, 3)), (ml_dtypes.float8_e5m2, (4,))]),
])
def test_rng_bit_generator_other_states_and_types_vs_xla(algorithm, state_type, cases):
    # u64[3] Philox states (128-bit counters) and signed/float/sub-byte outputs (raw bits) through XLA.
    module = _rbg_module(algorithm, state_type, cases)
    size = int(state_type[4])
    for words in ([5, 7, 9], [3, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF]):
        key = np.array(words[:size], np.uint64)
        for i, (g, r) in enumerate(zip(execute(module, key), run_xla(module, key))):
            # XLA returns these outputs in its unsigned bit type: compare the bits.
            np.testing.assert_array_equal(_bits(g).reshape(-1), _bits(r).reshape(-1).astype(_bits(g).dtype),
                                          err_msg=f"{algorithm} {state_type} output {i} ({g.dtype}) from {words}")


def test_rng_bit_generator_spec_example_and_chaining():
    # StableHLO spec example (THREE_FRY, state [1, 2], u64[2,2]): state [1, 6] and these bits.
    b = XlaBuilder("rbg")
    s = b.parameter(0, "u64[2]")
    new_state, bits = b.rng_bit_generator(jax.lax.RandomAlgorithm.RNG_THREE_FRY, s, ((2, 2), np.uint64))
    again_state, again = b.rng_bit_generator("THREE_FRY", new_state, "u64[2,2]")
    out = execute(b.build([new_state, bits, again_state, again]), np.array([1, 2], np.uint64))
    np.testing.assert_array_equal(out[0], [1, 6])
    np.testing.assert_array_equal(out[1], np.array([[9236835810183407956, 16087790271692313299],
                                                    [18212823393184779219, 2658481902456610144]], np.uint64))
    np.testing.assert_array_equal(out[2], [1, 10])
    assert not np.array_equal(out[1], out[3])


@pytest.mark.parametrize("state,algorithm,output,match", [
    ("u64[3]", "THREE_FRY", "u32[4]", "THREE_FRY needs a state of u64\\[2\\], got u64\\[3\\]"),
    ("u64[4]", "PHILOX", "u32[4]", "u64\\[2\\] or u64\\[3\\]"),
    ("u32[2]", "PHILOX", "u32[4]", "initial_state must be a u64 vector"),
    ("u64[2]", "PHILOX", "pred[4]", "2/4/8/16/32/64-bit integer or floating-point"),
    ("u64[2]", "PHILOX", "c64[4]", "2/4/8/16/32/64-bit integer or floating-point"),
    ("u64[2]", "MERSENNE", "u32[4]", "algorithm must be one of"),
])
def test_rng_bit_generator_errors(state, algorithm, output, match):
    b = XlaBuilder("rbg")
    with pytest.raises(BuilderError, match=match):
        b.rng_bit_generator(algorithm, b.parameter(0, state), output)


# ----------------------------------------------------------------------------
# rng (RngUniform / RngNormal): statistics, shapes and types
# ----------------------------------------------------------------------------


def _rng_program(kind, dtype, a, b, shape):
    bl = XlaBuilder("rng")
    lo, hi = bl.constant(np.asarray(a, dtype)), bl.constant(np.asarray(b, dtype))
    name = element_type_from_dtype(dtype).xla_name
    fn = bl.rng_uniform if kind == "uniform" else bl.rng_normal
    fn(lo, hi, f"{name}[{','.join(map(str, shape))}]")
    return bl.build()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_rng_uniform_floats(dtype):
    exe = lowering.compile(_rng_program("uniform", dtype, 2.0, 5.0, (100, 200)))
    (x,) = exe()
    assert x.dtype == np.dtype(dtype) and x.shape == (100, 200)
    v = x.astype(np.float64)
    assert v.min() >= 2.0 and v.max() <= 5.0 and (v < 5.0).mean() > 0.99
    assert abs(v.mean() - 3.5) < 0.05 and abs(v.var() - 0.75) < 0.05
    (y,) = exe()
    assert not np.array_equal(x, y)  # each call draws new numbers, as XLA's stateful Rng
    ref = np.asarray(jax.jit(lambda a, b: jax.lax.rng_uniform(a, b, (100, 200)))(
        np.asarray(2.0, dtype), np.asarray(5.0, dtype))).astype(np.float64)
    assert ref.min() >= 2.0 and abs(ref.mean() - v.mean()) < 0.06  # same distribution as XLA's


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.int8, np.uint16, ml_dtypes.int4])
def test_rng_uniform_integers(dtype):
    lo, hi = (-3, 7) if np.dtype(dtype).kind == "i" or dtype == ml_dtypes.int4 else (3, 13)
    (x,) = execute(_rng_program("uniform", dtype, lo, hi, (5000,)))
    assert x.dtype == np.dtype(dtype) and x.shape == (5000,)
    v = x.astype(np.int64)
    assert v.min() == lo and v.max() == hi - 1  # every value of [lo, hi) shows up, hi never
    # XLA's lo + bits % span is biased when span does not divide 2**width (int4: 16 % 10): expect that mean.
    states = 1 << element_type_from_dtype(dtype).bits
    q, r = divmod(states, hi - lo)
    expected = lo + (q * (hi - lo) * (hi - lo - 1) / 2 + r * (r - 1) / 2) / states
    assert abs(v.mean() - expected) < 0.2
    (same,) = execute(_rng_program("uniform", dtype, 5, 5, (10,)))  # b == a: a + bits (XLA's x % 0 == x)
    assert same.shape == (10,)


def test_rng_uniform_pred_and_full_range():
    (p,) = execute(_rng_program("uniform", np.bool_, False, True, (50,)))
    assert p.dtype == np.bool_ and not p.any()
    (u,) = execute(_rng_program("uniform", np.uint8, 0, 255, (4000,)))
    assert u.max() == 254 and u.min() == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_rng_normal(dtype):
    (x,) = execute(_rng_program("normal", dtype, 1.5, 2.0, (40000,)))
    assert x.dtype == np.dtype(dtype)
    v = x.astype(np.float64)
    assert abs(v.mean() - 1.5) < 0.05 and abs(v.std() - 2.0) < 0.05
    assert abs(((v - 1.5) / 2.0 > 1.96).mean() - 0.025) < 0.005


def test_rng_scalar_and_empty_shapes_and_reproducible_compiles():
    (s,) = execute(_rng_program("uniform", np.float32, 0.0, 1.0, ()))
    assert s.shape == () and 0 <= s < 1
    (e,) = execute(_rng_program("normal", np.float32, 0.0, 1.0, (0, 4)))
    assert e.shape == (0, 4)
    first = execute(_rng_program("uniform", np.float64, 0.0, 1.0, (8,)))[0]
    again = execute(_rng_program("uniform", np.float64, 0.0, 1.0, (8,)))[0]
    np.testing.assert_array_equal(first, again)  # a fresh compile starts the same stream


def test_rng_errors():
    b = XlaBuilder("rng")
    f, i = b.constant(np.float32(0)), b.constant(np.int32(0))
    with pytest.raises(BuilderError, match="NORMAL needs a floating-point element type, got s32"):
        b.rng_normal(i, i, "s32[3]")
    with pytest.raises(BuilderError, match="a f32\\[\\] must have the result's element type s32"):
        b.rng_uniform(f, f, "s32[3]")
    with pytest.raises(BuilderError, match="b must be a scalar"):
        b.rng_uniform(f, b.constant(np.zeros(2, np.float32)), "f32[3]")
    with pytest.raises(BuilderError, match="UNIFORM needs"):
        b.rng_uniform(b.constant(np.complex64(0)), b.constant(np.complex64(1)), "c64[3]")


def test_rng_shape_operand_checked_at_run_time():
    text = """
    builtin.module {
      func.func @main() -> tensor<3xf32> {
        %a = hlo.constant <0.0 : tensor<f32>> : tensor<f32>
        %b = hlo.constant <1.0 : tensor<f32>> : tensor<f32>
        %s = hlo.constant <[4] : tensor<1xi64>> : tensor<1xi64>
        %r = hlo.rng %a, %b, %s {rng_distribution = "UNIFORM"} : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<3xf32>
        func.return %r : tensor<3xf32>
      }
    }"""
    module = xla_dialect.parse_module(text)
    with pytest.raises(ExecutionError, match="does not match the declared result shape"):
        execute(module)


# ----------------------------------------------------------------------------
# IR: verifier, printing/parsing, StableHLO round trip
# ----------------------------------------------------------------------------


def _every_op_module():
    b = XlaBuilder("all")
    x = b.parameter(0, "f32[4,6]")
    c = b.parameter(1, "c64[4,6]")
    a = b.parameter(2, "f64[2,3,3]")
    v = b.parameter(3, "f32[6]")
    key = b.parameter(4, "u64[2]")
    outs = [b.reduce_precision(x, 5, 10), b.fft(c, "FFT", [4, 6]), b.fft(x, "RFFT", [6]),
            b.fft(b.fft(x, "RFFT", [4, 6]), "IRFFT", [4, 6]), b.cholesky(a, False),
            b.triangular_solve(a, a, False, True, True, "ADJOINT")]
    outs += list(b.batch_norm_training(x, v, v, 1e-3, 1))
    outs.append(b.batch_norm_inference(x, v, v, v, v, 1e-3, 1))
    outs += list(b.batch_norm_grad(x, v, v, v, x, 1e-3, 1))
    outs += list(b.rng_bit_generator("PHILOX", key, "u32[5]"))
    outs.append(b.rng_uniform(b.constant(np.float32(0)), b.constant(np.float32(1)), "f32[2,2]"))
    return b.build(outs)


def test_print_parse_round_trip():
    module = _every_op_module()
    text = str(module)
    again = xla_dialect.parse_module(text)
    assert again.is_structurally_equivalent(module)
    assert str(again) == text


def test_stablehlo_export_import_round_trip():
    module = _every_op_module()
    again = import_stablehlo(export_stablehlo(module), verify=True)
    assert again.is_structurally_equivalent(module)


def test_verifier_rejects_bad_ir():
    text = """
    builtin.module {
      func.func @main(%0: tensor<8xf32>) -> tensor<8xcomplex<f32>> {
        %1 = hlo.fft %0 {fft_type = "RFFT", fft_length = array<i64: 8>} : (tensor<8xf32>) -> tensor<8xcomplex<f32>>
        func.return %1 : tensor<8xcomplex<f32>>
      }
    }"""
    with pytest.raises(HloVerifyError, match="shape inference gives c64\\[5\\]"):
        xla_dialect.parse_module(text)
    text = """
    builtin.module {
      func.func @main(%0: tensor<2xui64>) -> tensor<2xui64> {
        %1, %2 = hlo.rng_bit_generator %0 {rng_algorithm = "THREE_FRY"} : (tensor<2xui64>) -> (tensor<3xui64>, tensor<4xui32>)
        func.return %1 : tensor<3xui64>
      }
    }"""
    with pytest.raises(HloVerifyError, match="output_state"):
        xla_dialect.parse_module(text)
