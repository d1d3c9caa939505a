"""Conversion family vs XLA on CPU: hlo.convert (every type pair, bit-exact) and hlo.bitcast_convert."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import execute
from test_elementwise import sample, xla_ref, xla_refs

import xla_dialect
from xla_dialect.builder import XlaBuilder
from xla_dialect.errors import BuilderError
from xla_dialect.types import ELEMENT_TYPES

TYPES = ["pred", "s2", "s4", "u4", "s8", "s32", "s64", "u8", "u32", "u64", "f16", "bf16", "f32", "f64",
         "f8e4m3fn", "f8e5m2", "f4e2m1fn", "c64", "c128"]


def _bits(a):
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        a = a.view(np.float32 if a.dtype == np.complex64 else np.float64)
    return a.view(f"u{a.dtype.itemsize}")


def _nan(a):
    try:
        return np.isnan(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64))
    except (TypeError, ValueError):
        return np.zeros(a.shape, bool)


@pytest.mark.parametrize("src", TYPES)
@pytest.mark.sample(10)
def test_convert_all_pairs_bit_exact(src):
    rng = np.random.default_rng(11)
    x = sample(rng, src, 96)
    if ELEMENT_TYPES[src].kind in ("float", "complex") and ELEMENT_TYPES[src].bits >= 32:
        x[-4:] = np.array([1e-40, 3e9, -3e19, 1e300 if src in ("f64", "c128") else 3e38]).astype(x.dtype)
    refs = xla_refs("convert", (x,), [(ELEMENT_TYPES[dst].dtype, {}) for dst in TYPES])  # one XLA compile
    for dst, ref in zip(TYPES, refs, strict=True):
        b = XlaBuilder("cvt")
        b.convert_element_type(b.parameter(0, f"{src}[96]"), dst)
        got = execute(b.build(), x)[0]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        same = _bits(got) == _bits(ref)
        if same.ndim > 1 or got.dtype.kind == "c":
            same = same.reshape(got.shape + (-1,)).all(-1)
        bad = ~(same | (_nan(got) & _nan(ref)))
        assert not bad.any(), f"{src}->{dst}: x={x[bad][:3]} got={got[bad][:3]} xla={ref[bad][:3]}"


def test_convert_semantics():
    f = np.array([np.nan, np.inf, -np.inf, 2.7, -2.7, 1e10, -0.5], np.float32)
    b = XlaBuilder("c")
    b.convert(b.parameter(0, "f32[7]"), np.int32)
    np.testing.assert_array_equal(execute(b.build(), f)[0], [0, 2**31 - 1, -2**31, 2, -2, 2**31 - 1, 0])
    b = XlaBuilder("c")
    b.convert(b.parameter(0, "c64[2]"), "f32")
    np.testing.assert_array_equal(execute(b.build(), np.array([1 + 2j, -3 + 4j], np.complex64))[0], [1, -3])


@pytest.mark.parametrize("src,dst,shape,out", [
    ("f32", "u8", (2, 3), (2, 3, 4)), ("u8", "f32", (2, 4), (2,)), ("s8", "s4", (3,), (3, 2)),
    ("s4", "s8", (2, 2), (2,)), ("u4", "u8", (3, 2), (3,)), ("s4", "u4", (5,), (5,)), ("s32", "s2", (2,), (2, 16)),
    ("f32", "bf16", (3,), (3, 2)), ("f8e4m3fn", "s8", (4,), (4,)), ("f4e2m1fn", "s4", (4,), (4,)),
    ("f64", "s64", (), ()), ("u64", "u16", (0,), (0, 4)),
])
def test_bitcast_vs_xla(src, dst, shape, out):
    rng = np.random.default_rng(5)
    x = sample(rng, src, int(np.prod(shape))).reshape(shape)
    b = XlaBuilder("bc")
    y = b.bitcast_convert_type(b.parameter(0, f"{src}[{','.join(map(str, shape))}]"), dst)
    assert y.dims == out
    got = execute(b.build(), x)[0]
    ref = xla_ref("bitcast_convert", x, dtype=ELEMENT_TYPES[dst].dtype, shape=out)
    np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("src,dst,match", [
    ("f32[3]", "f64", "needs a minor dimension of size 2"),
    ("c64[2]", "f32", "complex and real"),
    ("pred[2]", "s8", "size 8"),
    ("pred[8,2]", "s8", "size 8"),
    ("s8[2,3]", "s32", "size 4"),
])
def test_bitcast_errors(src, dst, match):
    b = XlaBuilder("bad")
    with pytest.raises(BuilderError, match=match):
        b.bitcast_convert(b.parameter(0, src), dst)


def test_bitcast_pred_is_one_bit_like_stablehlo():
    # StableHLO's num_bits(i1) = 1 (the reference interpreter's bitcast_convert tests): element i is bit i.
    # XLA has no consistent behaviour to compare with (its HLO counts pred as 8 bits).
    bits = np.array([0x0123456789ABCDEF >> i & 1 for i in range(64)], np.bool_)
    b = XlaBuilder("pred_to_s64")
    y = b.bitcast_convert(b.parameter(0, "pred[64]"), "s64")
    assert y.dims == ()
    assert int(execute(b.build(), bits)[0]) == 0x0123456789ABCDEF
    b = XlaBuilder("f64_to_pred")
    y = b.bitcast_convert(b.parameter(0, "f64[2]"), "pred")
    assert y.dims == (2, 64)
    word = np.array([0x0123456789ABCDEF, -1], np.int64).view(np.float64)
    got = execute(b.build(), word)[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, np.stack([bits, np.ones(64, np.bool_)]))
    b = XlaBuilder("pred_pred")
    b.bitcast_convert(b.bitcast_convert(b.parameter(0, "pred[3,4]"), "pred"), "s4")
    module = b.build()
    assert str(xla_dialect.parse_module(str(module))) == str(module)
    x = np.array([[1, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]], np.bool_)
    np.testing.assert_array_equal(execute(module, x)[0], np.array([-3, -8, -1], ml_dtypes.int4))


def test_convert_errors_and_round_trip():
    b = XlaBuilder("bad")
    p = b.parameter(0, "f32[2]")
    with pytest.raises(BuilderError, match="unknown XLA primitive type"):
        b.convert(p, "f33")
    with pytest.raises(BuilderError, match="new_element_type"):
        b.convert(p, object())
    b = XlaBuilder("rt")
    x = b.parameter(0, "f32[4]")
    b.bitcast_convert(b.convert(x, "bf16"), "u8")
    module = b.build()
    text = str(module)
    assert str(xla_dialect.parse_module(text)) == text
    assert execute(module, np.ones(4, np.float32))[0].shape == (4, 2)


_NAN_BITS = {
    np.float32: [0x7F800001, 0x7FC00001, 0xFFC12345, 0x7FA00000, 0x7FBFFFFF, 0x7FC02000],
    np.float64: [0x7FF0000000000001, 0x7FF8000000000001, 0xFFF8123456789ABC, 0x7FF4000000000000],
    np.float16: [0x7C01, 0x7E01, 0xFE12, 0x7D00, 0x7DFF],
    ml_dtypes.bfloat16: [0x7F81, 0x7FC1, 0xFFD2, 0x7FA0],
}


@pytest.mark.parametrize("src", list(_NAN_BITS), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dst", list(_NAN_BITS), ids=lambda t: np.dtype(t).name)
def test_convert_nan_payloads_and_signalling_nans_as_xla(src, dst):
    """NaN payloads and signs through float conversions are XLA's (jax.jit) bit for bit: to f16 through the
    hardware conversion (quieted, top payload bits; f64 drops the payload unless the host has AVX512-FP16),
    f16 -> f32 quieted."""
    import jax

    import lowering
    from interop import import_jax

    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(src).itemsize]
    x = np.array(_NAN_BITS[src], unsigned).view(src)
    fn = lambda v: v.astype(dst)  # noqa: E731
    expected = np.asarray(jax.jit(fn)(x))
    got = lowering.compile(import_jax(fn, x))(x)[0]
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dst).itemsize]
    assert [hex(v) for v in got.view(width)] == [hex(v) for v in expected.view(width)]


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64"])
def test_integers_to_bf16_round_through_f32_as_xla(dtype):
    """Long fuzz campaign (session 20): XLA converts an integer to bf16 through f32, rounding twice -- int32
    832569354 is the f32 832569344, a bf16 tie, rounded to even (830472192); rounded once it is 834666496. Every
    configuration, straight-line and in a loop."""
    import jax
    import jax.numpy as jnp

    import lowering
    from interop import import_jax

    info = np.iinfo(dtype)
    values = [832569354, -832569354, 2 ** 30 + 2 ** 22 + 3, 2 ** 24 + 1, 2 ** 62 + 2 ** 54 + 2 ** 39 + 5, info.max,
              info.min, 7]
    x = np.array([min(max(v, int(info.min)), int(info.max)) for v in values], dtype)
    for fn in (lambda a: a.astype(jnp.bfloat16),
               lambda a: jax.lax.fori_loop(0, 2, lambda i, v: v.astype(jnp.bfloat16).astype(v.dtype) + 1, a)):
        expected = np.asarray(jax.jit(fn)(x))
        module = import_jax(fn, x)
        for options in ({"fusion": "never", "loop_compilation": "never"},
                        {"fusion": "always", "loop_compilation": "always"}):
            assert np.asarray(lowering.compile(module, **options)(x)[0]).tobytes() == expected.tobytes(), options
