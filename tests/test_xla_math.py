"""XLA CPU's own transcendental approximations (lowering/kernels/xla_math.py) vs jax.jit, bit for bit.

Inputs cover the whole f32 range (random bit patterns, so denormals, infinities
and NaN payloads too, which XLA's FTZ/DAZ mode treats specially), scaled
normal samples, and each algorithm's thresholds; f16, bf16 and the 8-bit floats
are checked exhaustively. Results must match XLA's bit patterns exactly (NaN
payloads and signs included).
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import JaxReferences, execute
from test_elementwise import _RAW, xla_ref

import lowering
from lowering.kernels import xla_math
from xla_dialect.builder import XlaBuilder
from xla_dialect.ops import elementwise as E
from xla_dialect.types import ELEMENT_TYPES

OPS = {
    "exponential": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "exponential_minus_one": jnp.expm1,
    "log_plus_one": jnp.log1p,
    "erf": jax.lax.erf,
    "rsqrt": jax.lax.rsqrt,
    "logistic": None,  # stablehlo.logistic itself (jax.nn.sigmoid decomposes it for narrow floats)
    "sine": jnp.sin,  # glibc's sinf/cosf/tanf (XLA CPU calls them), libm for f64
    "cosine": jnp.cos,
    "tan": jnp.tan,
}


def _xla(mnemonic: str, x: np.ndarray) -> np.ndarray:
    """XLA's result for the unary op on ``x`` (jax.jit on CPU)."""
    with np.errstate(all="ignore"):
        if OPS[mnemonic] is None:
            return xla_ref(mnemonic, x)
        return np.asarray(jax.jit(OPS[mnemonic])(x))


# Each algorithm's branch points and clamps, with their neighbours.
_THRESHOLDS = [88.8, -87.8, 88.72284, -87.33654, -103.97208, 127.0, 4e-4, 7.9053111, 20.0, 0.5, 0.41421357, 3.8325066,
               0.70710677, 1.4142135, 1.0, -1.0, 1.1754944e-38, 2.3509887e-38, 0.0, 1e-38, -1e-40,
               0.75, 0.7853982, 120.0, 2.0**-12, 1.5707964, 3.1415927, 1e4, 3.4e38]


def _f32_inputs(seed: int, n: int = 60000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = rng.standard_normal(n) * np.exp(rng.uniform(-12, 5, n))
    edges = np.array(_THRESHOLDS, np.float32)
    near = np.concatenate([edges, -edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, -np.inf)])
    special = np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32)
    # Runs of consecutive floats where results leave the normal range (FTZ decides before rounding).
    runs = [np.arange(-2000, 2000, dtype=np.int32) + np.float32(v).view(np.int32)
            for v in (-87.33654, 2.0**-125, 2.0**-126)]
    runs = np.concatenate(runs).view(np.float32)
    return np.concatenate([bits, scaled.astype(np.float32), near.astype(np.float32), special, runs, -runs])


def _run(mnemonic: str, x: np.ndarray, name: str) -> np.ndarray:
    b = XlaBuilder("unary")
    p = b.parameter(0, f"{name}[{x.size}]")
    b._emit1(E.UNARY_OP_CLASSES[mnemonic], [p])
    return execute(b.build(), x)[0]


def _assert_same_bits(got: np.ndarray, ref: np.ndarray, x: np.ndarray, what: str) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, what
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    bad = got.view(width) != ref.view(width)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ; first inputs {x[bad][:4]!r} "
                           f"got {got[bad][:4]!r} expected {ref[bad][:4]!r}")


@pytest.mark.parametrize("mnemonic", OPS)
def test_f32_bit_exact(mnemonic):
    x = _f32_inputs(zlib.crc32(mnemonic.encode()))
    ref = _xla(mnemonic, x)
    _assert_same_bits(_run(mnemonic, x, "f32"), ref, x, f"{mnemonic} f32")


@pytest.mark.parametrize("mnemonic", OPS)
def test_f64_bit_exact(mnemonic):
    # f64 exp, tanh, expm1 and log1p are XLA's own algorithms with fused multiply-adds; log, erf and
    # rsqrt are libm's / IEEE; all read denormals as 0 (DAZ). Random bit patterns cover denormals and NaN payloads.
    rng = np.random.default_rng(zlib.crc32(f"f64-{mnemonic}".encode()))
    n = 30000
    x = np.concatenate([rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64),
                        rng.standard_normal(n) * np.exp(rng.uniform(-30, 6.6, n)),
                        [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 709.782712893384, 709.7827128933841,
                         -708.3964185322641, -708.3964185322642, 2.0**-1021, -(2.0**-1021), 2.0**-1022,
                         np.nextafter(2.0**-1021, 0)]])
    ref = _xla(mnemonic, x)
    _assert_same_bits(_run(mnemonic, x, "f64"), ref, x, f"{mnemonic} f64")


def test_f32_bit_exact_beyond_one_block():
    # Kernels run on blocks of xla_math.BLOCK elements; the seams must not show.
    x = np.random.default_rng(7).standard_normal(2 * xla_math.BLOCK + 5).astype(np.float32) * 30
    with np.errstate(all="ignore"):
        _assert_same_bits(_run("exponential", x, "f32"), np.asarray(jax.jit(jnp.exp)(x)), x, "exp f32 blocks")


@pytest.mark.slow
@pytest.mark.parametrize("mnemonic", ["exponential", "log", "tanh", "logistic"])
def test_f32_exhaustive(mnemonic):
    # XLA's own f32 exp, log, tanh and logistic (lowering.kernels.xla_scalar, also what fused loops call) on every
    # one of the 2**32 f32 bit patterns, 2**24 at a time (~10-20 s each).
    chunk = 1 << 24
    b = XlaBuilder("unary")
    b._emit1(E.UNARY_OP_CLASSES[mnemonic], [b.parameter(0, f"f32[{chunk}]")])
    exe = lowering.compile(b.build())
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        _assert_same_bits(exe(x)[0], _xla(mnemonic, x), x, f"{mnemonic} f32 from bit pattern {start:#x}")


_SMALL_FLOATS = [name for name, et in ELEMENT_TYPES.items()
                 if et.kind == "float" and 8 <= et.bits <= 16 and name != "f8e8m0fnu"]


def _every_value(name: str) -> np.ndarray:
    et = ELEMENT_TYPES[name]
    return np.arange(2**et.bits, dtype=np.uint8 if et.bits == 8 else np.uint16).view(et.dtype)


def _raw_unary(mnemonic: str):
    return lambda a: _RAW.bind(a, op=mnemonic, shape=a.shape, dtype=a.dtype, attrs=())


# XLA's results for every case of test_small_floats_exhaustive, each op on its own operand, in one XLA
# compilation (helpers.JaxReferences) instead of one per case.
SMALL_FLOAT_REFS = JaxReferences()
for _mnemonic, _fn in OPS.items():
    for _name in _SMALL_FLOATS:
        SMALL_FLOAT_REFS.add((_mnemonic, _name), _raw_unary(_mnemonic) if _fn is None else _fn, _every_value(_name))


@pytest.mark.parametrize("name", _SMALL_FLOATS)
@pytest.mark.parametrize("mnemonic", OPS)
def test_small_floats_exhaustive(mnemonic, name):
    # bf16 is computed in f32; f16 in f16 arithmetic around f32 parts (expm1); 8-bit floats via f16.
    x = _every_value(name)
    ref = SMALL_FLOAT_REFS[(mnemonic, name)]
    got = _run(mnemonic, x, name)
    nan = np.isnan(got.astype(np.float32)) & np.isnan(ref.astype(np.float32))
    _assert_same_bits(np.where(nan, ref, got), ref, x, f"{mnemonic} {name}")  # NaN payloads: f32 -> f8 casts


def _f32_bits(*values) -> np.ndarray:
    return np.array(values, np.uint32).view(np.float32)


def test_fma32_rounds_once():
    # (1 + 2^-23) + (1 + 2^-23)(1 - 2^-23) 2^-24 = 1 + 3 * 2^-24 - 2^-70: the f64 sum rounds to the f32
    # midpoint 1 + 3 * 2^-24, which would then round to even (1 + 2^-22); the fused result is 1 + 2^-23.
    a = np.float32(1 + 2**-23)
    b = np.float32((1 - 2**-23) * 2**-24)
    c = np.float32(1 + 2**-23)
    assert xla_math.fma32(np.array([a, -a]), b, np.array([c, -c])).tolist() == [c, -c]
    # Exactly on the midpoint (no error): ties to even, like the hardware.
    assert xla_math.fma32(np.float32(2**-24), np.float32(3), np.float32(1))[()] == np.float32(1 + 2**-22)


def test_ftz_daz_behaviour():
    # XLA CPU reads denormal operands as 0 and flushes denormal results; selects pass denormals through.
    tiny = _f32_bits(0x00000001, 0x807FFFFF)  # smallest and (negated) largest f32 denormals
    with np.errstate(all="ignore"):
        assert np.isneginf(_run("log", tiny, "f32")).all()
        assert _run("erf", tiny, "f32").view(np.uint32).tolist() == [0, 0x80000000]
        assert _run("tanh", tiny, "f32").view(np.uint32).tolist() == [0x00000001, 0x807FFFFF]
        assert _run("exponential", np.array([-87.5], np.float32), "f32")[0] == 0  # exp(-87.5) is denormal


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rsqrt_without_estimate_instructions(monkeypatch, dtype):
    # Where XLA has no estimate instruction to use (f32 without AVX, f64 without AVX-512F) it computes
    # 1/sqrt; that path, forced here, is within 2 ULP of this host's XLA and reads denormals as 0.
    from helpers import assert_close

    from lowering.kernels import cpu_rsqrt

    monkeypatch.setattr(cpu_rsqrt, "host_properties", lambda: {"avx": False, "avx512f": False, "vendor": ""})
    cpu_rsqrt._compiled.cache_clear()
    try:
        with np.errstate(all="ignore"):
            x = np.abs(_f32_inputs(11, 20000)).astype(dtype)
            x = x[(x >= np.finfo(dtype).tiny) | (x == 0) | ~np.isfinite(x)]
            got = cpu_rsqrt.rsqrt(x)
            ref = np.asarray(jax.jit(jax.lax.rsqrt)(x))
        assert_close(got, ref, max_ulp=2)
        denormal = np.array([np.finfo(dtype).smallest_subnormal, -np.finfo(dtype).smallest_subnormal], dtype)
        assert cpu_rsqrt.rsqrt(denormal).tolist() == [np.inf, -np.inf]
    finally:
        cpu_rsqrt._compiled.cache_clear()


def test_rsqrt_method_is_reported():
    from lowering.kernels import cpu_rsqrt

    assert "RSQRTPS" in cpu_rsqrt.rsqrt_f32_method() or "no AVX" in cpu_rsqrt.rsqrt_f32_method()
    assert "VRSQRT14PD" in cpu_rsqrt.rsqrt_f64_method() or "no AVX-512F" in cpu_rsqrt.rsqrt_f64_method()


# ----------------------------------------------------------------------------
# Complex functions built from these (XLA's formulas with fused multiply-adds)
# ----------------------------------------------------------------------------

_GRID = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan]


def _complex_pairs(dtype, n: int = 20000):
    """Every combination of special and plain parts (10^4 pairs), then random pairs."""
    import itertools

    grid = np.array(list(itertools.product(_GRID, repeat=4)))
    rng = np.random.default_rng(zlib.crc32(np.dtype(dtype).name.encode()))
    parts = np.concatenate([grid, rng.standard_normal((n, 4)) * 3])
    x, y = np.empty(len(parts), dtype), np.empty(len(parts), dtype)
    x.real, x.imag, y.real, y.imag = parts.T
    return x, y


def _binary_vs_xla(mnemonic, name):
    """(lhs, executor result, XLA result) of a complex binary op on :func:`_complex_pairs`."""
    x, y = _complex_pairs(ELEMENT_TYPES[name].dtype)
    with np.errstate(all="ignore"):
        ref = np.asarray(jax.jit(_COMPLEX_BINARY[mnemonic])(x, y))
    b = XlaBuilder("binary")
    p = b.parameter(0, f"{name}[{x.size}]")
    q = b.parameter(1, f"{name}[{y.size}]")
    b._emit1(E.BINARY_OP_CLASSES[mnemonic], [p, q])
    return x, execute(b.build(), x, y)[0], ref


def _assert_same_parts(got, ref, x, what):
    """Real and imaginary parts bit for bit, any NaN matching any NaN (complex NaN payloads are not XLA's)."""
    g, r = got.view(got.real.dtype), ref.view(ref.real.dtype)
    nan = np.isnan(g) & np.isnan(r)
    _assert_same_bits(np.where(nan, r, g), r, np.repeat(x, 2), what)


_COMPLEX_BINARY = {"atan2": jax.lax.atan2, "power": jax.lax.pow, "divide": jax.lax.div}


@pytest.mark.parametrize("mnemonic", _COMPLEX_BINARY)
def test_c128_binary_bit_exact(mnemonic):
    # c128: XLA's own exp, libm's atan2/pow/log/sin/cos, and LLVM's fused multiply-adds reproduce XLA.
    x, got, ref = _binary_vs_xla(mnemonic, "c128")
    _assert_same_parts(got, ref, x, f"{mnemonic} c128")


@pytest.mark.parametrize("mnemonic", _COMPLEX_BINARY)
def test_c64_binary_special_values(mnemonic):
    # c64: the same NaN/infinity pattern as XLA everywhere; divide is bit-exact, atan2 and power call
    # glibc's f32 sincosf (NumPy's f32 sin/cos differ in the last bit), which cancellation near a zero
    # result can amplify (up to ~2e4 ULP for atan2 on 2e4 random pairs; power within 2 ULP).
    x, got, ref = _binary_vs_xla(mnemonic, "c64")
    for part in (np.real, np.imag):
        g, r = part(got), part(ref)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
        inf = np.isinf(r)
        np.testing.assert_array_equal(g[inf], r[inf])
    if mnemonic == "divide":
        _assert_same_parts(got, ref, x, "divide c64")
    elif mnemonic == "power":
        from helpers import assert_close

        assert_close(got, ref, max_ulp=2)


_COMPLEX_UNARY = {"exponential": jax.lax.exp, "exponential_minus_one": jax.lax.expm1, "tanh": jax.lax.tanh,
                  "logistic": None, "log": jax.lax.log, "log_plus_one": jax.lax.log1p}


@pytest.mark.parametrize("mnemonic", _COMPLEX_UNARY)
def test_c128_unary_bit_exact(mnemonic):
    # XLA's complex formulas over its own f64 exp/expm1 (and libm's sin/cos), with fused multiply-adds.
    x, _ = _complex_pairs(np.complex128)
    fn = _COMPLEX_UNARY[mnemonic]
    with np.errstate(all="ignore"):
        ref = xla_ref(mnemonic, x) if fn is None else np.asarray(jax.jit(fn)(x))
    _assert_same_parts(_run(mnemonic, x, "c128"), ref, x, f"{mnemonic} c128")


def _near_unit_circle_and_minus_one(dtype, n: int = 20000):
    """Where XLA's complex log and log1p switch formulas: |z| near 1, z near -1, huge and tiny parts."""
    rng = np.random.default_rng(zlib.crc32(f"circle-{np.dtype(dtype).name}".encode()))
    angle = rng.uniform(-np.pi, np.pi, n)
    radius = 1 + rng.standard_normal(n) * np.exp(rng.uniform(-20, 0, n))
    offset = rng.standard_normal((n, 2)) * np.exp(rng.uniform(-20, 1, (n, 2)))
    parts = np.concatenate([np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1),
                            offset - [1, 0], offset * 1e20, offset * 1e160])
    z = np.empty(len(parts), dtype)
    with np.errstate(over="ignore"):  # c64: the 1e160 parts become infinities
        z.real, z.imag = parts.T
    return z


@pytest.mark.parametrize("name", ["c64", "c128"])
@pytest.mark.parametrize("mnemonic", ["log", "log_plus_one"])
def test_complex_log_bit_exact(mnemonic, name):
    # XLA's complex log/log1p expansions (double-word |z|² - 1 and 2x + x² + y²) over its own log/log1p.
    dtype = ELEMENT_TYPES[name].dtype
    x = np.concatenate([_complex_pairs(dtype)[0], _near_unit_circle_and_minus_one(dtype)])
    with np.errstate(all="ignore"):
        ref = np.asarray(jax.jit(_COMPLEX_UNARY[mnemonic])(x))
    _assert_same_parts(_run(mnemonic, x, name), ref, x, f"{mnemonic} {name}")


@pytest.mark.parametrize("mnemonic", ["log", "log_plus_one", "rsqrt", "sqrt", "sine", "exponential"])
def test_f4_exhaustive(mnemonic):
    # f4e2m1fn has no NaN: XLA stores a NaN result (also a negative one, e.g. log(-1)) as -0.
    x = np.arange(16, dtype=np.uint8).view(ELEMENT_TYPES["f4e2m1fn"].dtype)
    fn = {"sqrt": jnp.sqrt}.get(mnemonic) or OPS[mnemonic]
    with np.errstate(all="ignore"):
        ref = np.asarray(jax.jit(fn)(x))
    _assert_same_bits(_run(mnemonic, x, "f4e2m1fn"), ref, x, f"{mnemonic} f4e2m1fn")


_SPECIAL_PARTS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -3.0, 100.0, -700.0, 89.0, 1e-30, 1e20, -1e-5,
                  3e38, -1e300, 1e-300, 2.2250738585072014e-308, -1.1754944e-38]


def _complex_bit_patterns(dtype, n: int = 20000):
    """Random bit patterns for both parts (every exponent: denormals, NaN payloads, huge and tiny parts),
    every pair of special parts, and scaled normal samples."""
    real = np.finfo(dtype).dtype
    uint = np.uint32 if real == np.float32 else np.uint64
    rng = np.random.default_rng(zlib.crc32(f"bits-{np.dtype(dtype).name}".encode()))
    bits = rng.integers(0, np.iinfo(uint).max, (n, 2), dtype=uint, endpoint=True).view(real)
    with np.errstate(over="ignore"):
        special = np.array(_SPECIAL_PARTS).astype(real)
        scaled = (rng.standard_normal((n // 2, 2)) * np.exp(rng.uniform(-10, 8, (n // 2, 2)))).astype(real)
    grid = np.stack(np.meshgrid(special, special), -1).reshape(-1, 2)
    parts = np.concatenate([bits, grid, scaled])
    z = np.empty(len(parts), dtype)
    z.real, z.imag = parts.T
    return z


_COMPLEX_EXACT = {"sqrt": jax.lax.sqrt, "exponential": jax.lax.exp, "exponential_minus_one": jax.lax.expm1}


@pytest.mark.parametrize("name", ["c64", "c128"])
@pytest.mark.parametrize("mnemonic", _COMPLEX_EXACT)
def test_complex_bit_exact_everywhere(mnemonic, name):
    # XLA's complex expansions operation by operation (from its optimized HLO and object code, with
    # LLVM's fused multiply-adds): bit for bit on every exponent range, NaN signs and payloads included.
    z = _complex_bit_patterns(ELEMENT_TYPES[name].dtype)
    with np.errstate(all="ignore"):
        ref = np.asarray(jax.jit(_COMPLEX_EXACT[mnemonic])(z))
    got = _run(mnemonic, z, name)
    _assert_same_bits(got.view(got.real.dtype), ref.view(ref.real.dtype), np.repeat(z, 2), f"{mnemonic} {name}")


@pytest.mark.parametrize("name", ["c64", "c128"])
@pytest.mark.parametrize("mnemonic", ["sine", "cosine"])
def test_complex_sin_cos_bit_exact_vs_hlo_op(mnemonic, name):
    # hlo.sine/cosine on complex run XLA's elemental emitter (exp(y), 0.5 e -+ 0.5/e over glibc sin/cos),
    # compared with XLA's stablehlo.sine/cosine itself: jax.lax.sin/cos on complex emit a different
    # program (expm1(+-y), a select on x == 0), which the executor runs op by op.
    z = _complex_bit_patterns(ELEMENT_TYPES[name].dtype)
    with np.errstate(all="ignore"):
        ref = xla_ref(mnemonic, z)
    got = _run(mnemonic, z, name)
    _assert_same_bits(got.view(got.real.dtype), ref.view(ref.real.dtype), np.repeat(z, 2), f"{mnemonic} {name}")
