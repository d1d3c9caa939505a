"""Quantized element types, hlo.uniform_quantize / hlo.uniform_dequantize and ops on quantized values.

The reference is the StableHLO specification's ``quantize`` / ``dequantize``
/ ``dequantize_op_quantize``, written out below in plain NumPy (independently
of the kernels), with the float ops computed by ``jax.jit`` (XLA), and XLA
running the program after ``expand-quantized`` (XLA's CPU client does not
compile quantized programs itself; note that XLA rewrites ``x / scale`` as
``x * (1 / scale)``, which equals the spec's division only for power-of-two
scales, so those tests use such scales). The conformance corpus
(``testdata/quantized``, checked by tests/test_conformance.py) gives the
StableHLO reference interpreter's results for 125 more programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from xdsl.dialects.builtin import TensorType

import lowering
import passes
from xla_dialect import XlaBuilder
from xla_dialect.dialect import parse_module
from xla_dialect.errors import BuilderError, ExecutionError, HloVerifyError, XlaError
from xla_dialect.quant import (
    QuantError,
    UniformQuantizedType,
    expressed_type,
    parse_quantized_type,
    quantized_element,
    storage_type,
    uniform_quantized,
)

RNG = np.random.default_rng(20261122)

# ----------------------------------------------------------------------------
# The spec's formulas in NumPy
# ----------------------------------------------------------------------------


def _params(q: UniformQuantizedType, rank: int, dtype):
    scales = np.asarray(q.data.scales, dtype=dtype)
    zps = np.asarray(q.data.zero_points, dtype=np.int64)
    if q.data.axis is not None:
        shape = [1] * rank
        shape[q.data.axis] = -1
        scales, zps = scales.reshape(shape), zps.reshape(shape)
    else:
        scales, zps = scales.reshape(()), zps.reshape(())
    return scales, zps


def ref_quantize(x: np.ndarray, q: UniformQuantizedType) -> np.ndarray:
    """``convert(round_nearest_even(clamp(min, x / scale + zero_point, max)), storage)`` in the expressed type."""
    dtype = q.expressed.dtype
    x = np.asarray(x, dtype)
    scales, zps = _params(q, x.ndim, dtype)
    with np.errstate(all="ignore"):
        y = (x / scales).astype(dtype) + zps.astype(dtype)
    y = y.astype(dtype)
    with np.errstate(over="ignore"):
        lo, hi = np.asarray(q.data.storage_min, dtype), np.asarray(q.data.storage_max, dtype)
    clamped = np.where(np.isnan(y), y, np.clip(y, lo, hi))
    rounded = np.rint(clamped.astype(np.float64))  # exact: float -> f64 is exact, rint rounds half to even
    rounded = np.where(np.isnan(rounded), 0, rounded)  # XLA converts NaN to 0
    return np.clip(rounded, q.data.storage_min, q.data.storage_max).astype(np.int64).astype(q.storage.dtype)


def ref_dequantize(storage: np.ndarray, q: UniformQuantizedType) -> np.ndarray:
    """``convert(storage - zero_point, expressed) * scale`` (the difference taken exactly)."""
    dtype = q.expressed.dtype
    scales, zps = _params(q, np.ndim(storage), dtype)
    centred = np.asarray(storage).astype(np.int64) - zps
    with np.errstate(over="ignore"):
        return (centred.astype(dtype) * scales).astype(dtype)


def run(module, *args):
    return lowering.compile(module)(*args)


def q8(scale, zp=0, expressed="f32"):
    return uniform_quantized("s8", expressed, scale, zp)


# ----------------------------------------------------------------------------
# The type
# ----------------------------------------------------------------------------

SPELLINGS = [
    "!quant.uniform<i8:f32, 0.5:-3>",
    "!quant.uniform<i8:f32, 0.5>",
    "!quant.uniform<u8:f32, 0.0039172410964965817:128>",
    "!quant.uniform<i8<-127:127>:bf16, 2.0>",
    "!quant.uniform<i4:f16, 1.5:-2>",
    "!quant.uniform<u4<1:14>:f64, 1e-3:7>",
    "!quant.uniform<i16:f32:1, {0.1:-1, 0.2, 3.0e2:5}>",
    "!quant.uniform<i32:f32, 1.25e-05>",
    "!quant.uniform<ui8:f32, 0.5:3>",
    "!quant.uniform<si8:f32, 0.5:3>",
]


@pytest.mark.parametrize("text", SPELLINGS)
def test_type_spelling_round_trips(text):
    t = parse_quantized_type(text)
    again = parse_quantized_type(str(t))
    assert again == t and str(again) == str(t)
    assert str(t).startswith("!quant.uniform<")
    module = parse_module(f"builtin.module {{ func.func @f(%a: tensor<3x{t}>) -> tensor<3x{t}> "
                          f"{{ func.return %a : tensor<3x{t}> }} }}")
    (arg,) = list(module.ops)[0].function_type.inputs
    assert arg.element_type == t


def test_type_parameters():
    t = parse_quantized_type("!quant.uniform<i8<-127:127>:f32:1, {0.1:-1, 0.2:3}>")
    p = t.data
    assert (p.storage, p.expressed, p.axis) == ("s8", "f32", 1)
    assert p.scales == (0.1, 0.2) and p.zero_points == (-1, 3)
    assert (p.storage_min, p.storage_max) == (-127, 127)
    assert str(parse_quantized_type("!quant.uniform<u8:f32, 0.5:3>").data.storage) == "u8"
    # defaults of the storage range are not printed (MLIR's spelling)
    assert str(uniform_quantized("i8", "f32", 0.5, 0, storage_range=(-128, 127))) == "!quant.uniform<i8:f32, 0.5>"


@pytest.mark.parametrize("text, message", [
    ("!quant.uniform<i8:f32, -0.5>", "finite and positive"),  # C5
    ("!quant.uniform<i8:f32, 0.0>", "finite and positive"),
    ("!quant.uniform<i8:f32, inf>", "finite and positive"),  # C6
    ("!quant.uniform<i8:f32, 0.5:200>", "outside the storage range"),  # C7
    ("!quant.uniform<i8<-127:300>:f32, 0.5>", "storage range"),  # C3
    ("!quant.uniform<i8<5:5>:f32, 0.5>", "storage range"),
    ("!quant.uniform<i8:f32, {0.5, 0.25}>", "quantization dimension"),  # C10
    ("!quant.uniform<i8:f32:0, 0.5>", "quantization dimension"),
    ("!quant.uniform<f32:f32, 0.5>", "storage type"),
    ("!quant.uniform<i8:i32, 0.5>", "expressed type"),
    ("!quant.uniform<i8:f32, abc>", "scale"),
    ("!quant.uniform<i8:f32>", "cannot parse"),
    ("!quant.any<i8:f32>", "expected a quantized type"),
])
def test_type_constraints_are_checked(text, message):
    with pytest.raises(QuantError, match=message):
        parse_quantized_type(text)


def test_bad_type_in_module_text_is_a_parse_error():
    from xla_dialect.errors import MlirParseError

    with pytest.raises(MlirParseError, match="finite and positive"):
        parse_module("builtin.module { func.func @f(%a: tensor<3x!quant.uniform<i8:f32, -1.0>>) "
                     "-> tensor<3x!quant.uniform<i8:f32, -1.0>> { func.return %a : tensor<3x!quant.uniform<i8:f32, -1.0>> } }")


def test_type_helpers():
    q = q8(0.5, -3)
    t = TensorType(q, [2, 3])
    assert quantized_element(t) == q
    assert str(expressed_type(t)) == "tensor<2x3xf32>"
    assert str(storage_type(t)) == "tensor<2x3xi8>"
    assert expressed_type(TensorType(q.expressed.mlir, [2])) == TensorType(q.expressed.mlir, [2])


# ----------------------------------------------------------------------------
# uniform_quantize / uniform_dequantize against the spec
# ----------------------------------------------------------------------------

EDGE = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e30, -1e30, np.inf, -np.inf, np.nan, 1e-40, 127.5, -128.5]


def _inputs(dtype, n=400):
    x = np.concatenate([RNG.normal(0, 40, n), RNG.uniform(-3, 3, n), EDGE]).astype(np.float64)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("storage", ["s8", "u8", "s4", "u4", "s16", "s32", "s2"])
@pytest.mark.parametrize("expressed", ["f32", "bf16", "f16", "f64"])
def test_quantize_and_dequantize_follow_the_spec(storage, expressed):
    lo_zp = 0 if storage.startswith("u") else -1
    q = uniform_quantized(storage, expressed, 0.37, lo_zp)
    x = _inputs(q.expressed.dtype)
    b = XlaBuilder("qd")
    p = b.parameter(0, TensorType(q.expressed.mlir, [x.size]))
    quant = b.uniform_quantize(p, q)
    module = b.build([quant, b.uniform_dequantize(quant)])
    got_q, got_f = run(module, x)
    want_q = ref_quantize(x, q)
    assert got_q.dtype == q.storage.dtype
    np.testing.assert_array_equal(got_q.astype(np.int64), want_q.astype(np.int64))
    np.testing.assert_array_equal(got_f.view(np.uint8), ref_dequantize(want_q, q).view(np.uint8))


def test_quantize_rounds_half_to_even_and_clamps_to_the_storage_range():
    q = uniform_quantized("s8", "f32", 1.0, 0, storage_range=(-100, 100))
    b = XlaBuilder("r")
    p = b.parameter(0, "f32[9]")
    module = b.build(b.uniform_quantize(p, q))
    x = np.float32([0.5, 1.5, 2.5, -0.5, -1.5, 99.5, 100.5, -1000, np.nan])
    (got,) = run(module, x)
    np.testing.assert_array_equal(got, np.int8([0, 2, 2, 0, -2, 100, 100, -100, 0]))


def test_per_axis_quantization():
    q = uniform_quantized("s8", "f32", [0.1, 0.5, 2.0], [0, -10, 5], axis=1)
    x = RNG.normal(0, 5, (4, 3)).astype(np.float32)
    b = XlaBuilder("axis")
    p = b.parameter(0, "f32[4,3]")
    quant = b.uniform_quantize(p, q)
    transposed = b.transpose(quant, [1, 0])
    assert quantized_element(transposed.type).data.axis == 0
    module = b.build([quant, b.uniform_dequantize(quant), b.uniform_dequantize(transposed)])
    got_q, got_f, got_t = run(module, x)
    want_q = ref_quantize(x, q)
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_f, ref_dequantize(want_q, q))
    np.testing.assert_array_equal(got_t, ref_dequantize(want_q, q).T)


def test_per_axis_dimension_follows_reshape_and_broadcast():
    q = uniform_quantized("s8", "f32", [0.5, 0.25, 1.0], 0, axis=1)
    b = XlaBuilder("moves")
    p = b.uniform_quantize(b.parameter(0, "f32[2,3]"), q)
    assert quantized_element(b.reshape(p, [2, 3, 1]).type).data.axis == 1
    assert quantized_element(b.reshape(p, [1, 2, 3]).type).data.axis == 2
    assert quantized_element(b.broadcast_in_dim(p, [5, 2, 3], [1, 2]).type).data.axis == 2
    assert quantized_element(b.broadcast(p, [7]).type).data.axis == 2
    with pytest.raises(BuilderError, match="per-axis"):
        b.reshape(p, [6])


def test_requantization_goes_through_the_expressed_floats():
    a, c = q8(0.5, -3), uniform_quantized("u8", "f32", 0.3, 17)
    x = _inputs(np.float32)
    b = XlaBuilder("requant")
    module = b.build(b.uniform_quantize(b.uniform_quantize(b.parameter(0, TensorType(a.expressed.mlir, [x.size])), a), c))
    (got,) = run(module, x)
    np.testing.assert_array_equal(got, ref_quantize(ref_dequantize(ref_quantize(x, a), a), c))


def test_quantized_arguments_and_constants_are_storage_integers():
    q = q8(0.5, -3)
    b = XlaBuilder("args")
    p = b.parameter(0, TensorType(q, [3]))
    module = b.build([b.uniform_dequantize(p), p])
    storage = np.int8([1, -2, 127])
    deq, same = run(module, storage)
    np.testing.assert_array_equal(deq, ref_dequantize(storage, q))
    np.testing.assert_array_equal(same, storage)
    with pytest.raises(ExecutionError):
        run(module, np.float32([1, 2, 3]))
    t = f"tensor<3x{q}>"
    parsed = parse_module(f"""builtin.module {{
      func.func @main() -> tensor<3xf32> {{
        %c = hlo.constant <[4, 5, -6] : {t}> : {t}
        %1 = hlo.uniform_dequantize %c : ({t}) -> tensor<3xf32>
        func.return %1 : tensor<3xf32>
      }}
    }}""")
    (deq,) = run(parsed)
    np.testing.assert_array_equal(deq, ref_dequantize(np.int8([4, 5, -6]), q))


# ----------------------------------------------------------------------------
# Ops on quantized values: dequantize_op_quantize, against jax.jit for the float op
# ----------------------------------------------------------------------------

UNARY = {
    "abs": jnp.abs, "neg": jnp.negative, "sign": jnp.sign, "floor": jnp.floor, "ceil": jnp.ceil,
    "round": lax.round, "sqrt": jnp.sqrt, "exp": jnp.exp, "log": jnp.log, "tanh": jnp.tanh, "cos": jnp.cos,
    "sin": jnp.sin, "logistic": jax.nn.sigmoid, "rsqrt": lax.rsqrt, "expm1": jnp.expm1, "log1p": jnp.log1p,
}
BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "max": jnp.maximum,
          "min": jnp.minimum, "pow": jnp.power, "atan2": jnp.arctan2, "rem": jnp.remainder}


def _jax_float(fn, *arrays):
    return np.asarray(jax.jit(fn)(*arrays))


def _float_op_is_exact(name):
    # f32 sin/cos differ from XLA's own by an ULP on a few percent of inputs: an ULP may move a value across
    # a rounding boundary of the quantization. Every other op here is bit-exact with XLA.
    return name not in {"cos", "sin"}


def on_xla(module, *args):
    """Run ``module`` on XLA's CPU backend after expand-quantized (XLA has no quantized types)."""
    from interop import run_xla

    expanded = module.clone()
    passes.run(expanded, "expand-quantized")
    return run_xla(expanded, *args)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_on_quantized_values(name):
    # Scales are powers of two here: XLA rewrites x / scale as x * (1 / scale), exact only then, so that
    # XLA running the expanded program computes the spec's formula too.
    qa, qr = q8(1 / 16, -4), q8(1 / 64, 3)
    x = RNG.uniform(0.0625, 6, 300).astype(np.float32)  # positive: sqrt/log/rsqrt defined
    b = XlaBuilder(name)
    quant = b.uniform_quantize(b.parameter(0, "f32[300]"), qa)
    module = b.build(getattr(b, name)(quant, result_type=qr))
    (got,) = run(module, x)
    float_in = ref_dequantize(ref_quantize(x, qa), qa)
    want = ref_quantize(_jax_float(UNARY[name], float_in), qr)
    (xla,) = on_xla(module, x)
    if _float_op_is_exact(name):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, xla)
    else:
        ours = ref_quantize(run(_float_program(name, 300), float_in)[0], qr)
        np.testing.assert_array_equal(got, ours)  # the quantization around our float op is exact
        assert np.mean(got == want) > 0.99 and np.mean(got == xla) > 0.99  # the float op: see above


def _float_program(name, n):
    b = XlaBuilder("float_" + name)
    getattr(b, name)(b.parameter(0, f"f32[{n}]"))
    return b.build()


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_on_quantized_values(name):
    qa, qb, qr = q8(1 / 16, -4), uniform_quantized("u8", "f32", 1 / 32, 100), q8(1 / 8, 2)  # see above
    x = RNG.uniform(0.1, 5, 257).astype(np.float32)
    y = RNG.uniform(0.1, 3, 257).astype(np.float32)
    b = XlaBuilder(name)
    lhs = b.uniform_quantize(b.parameter(0, "f32[257]"), qa)
    rhs = b.uniform_quantize(b.parameter(1, "f32[257]"), qb)
    module = b.build(b.uniform_dequantize(getattr(b, name)(lhs, rhs, result_type=qr)))
    (got,) = run(module, x, y)
    fx, fy = ref_dequantize(ref_quantize(x, qa), qa), ref_dequantize(ref_quantize(y, qb), qb)
    want = ref_dequantize(ref_quantize(_jax_float(BINARY[name], fx, fy), qr), qr)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, on_xla(module, x, y)[0])


def test_compare_select_clamp_on_quantized_values():
    qa, qr = q8(0.25, 0), q8(0.5, -1)
    x = RNG.uniform(-10, 10, 64).astype(np.float32)
    y = RNG.uniform(-10, 10, 64).astype(np.float32)
    b = XlaBuilder("csc")
    a = b.uniform_quantize(b.parameter(0, "f32[64]"), qa)
    c = b.uniform_quantize(b.parameter(1, "f32[64]"), qa)
    less = b.lt(a, c)
    chosen = b.select(less, a, c, result_type=qr)
    lo = b.uniform_quantize(b.constant(np.float32(-2.0)), qa)
    hi = b.uniform_quantize(b.constant(np.float32(3.0)), qa)
    clamped = b.clamp(lo, a, hi, result_type=qr)
    module = b.build([less, chosen, clamped])
    got_less, got_sel, got_clamp = run(module, x, y)
    fx, fy = ref_dequantize(ref_quantize(x, qa), qa), ref_dequantize(ref_quantize(y, qa), qa)
    np.testing.assert_array_equal(got_less, fx < fy)
    np.testing.assert_array_equal(got_sel, ref_quantize(np.where(fx < fy, fx, fy), qr))
    np.testing.assert_array_equal(got_clamp, ref_quantize(np.clip(fx, -2.0, 3.0), qr))


def test_dot_general_quantized_and_hybrid():
    # Scales of powers of two and small integers: every product and sum is exact in f32.
    qa, qb = q8(0.5, 1), q8(0.25, -2)
    qr = uniform_quantized("s32", "f32", 0.125, 0)
    x = RNG.integers(-20, 20, (3, 4)).astype(np.float32) * 0.5
    y = RNG.integers(-20, 20, (4, 5)).astype(np.float32) * 0.25
    b = XlaBuilder("dot")
    lhs = b.uniform_quantize(b.parameter(0, "f32[3,4]"), qa)
    rhs = b.uniform_quantize(b.parameter(1, "f32[4,5]"), qb)
    full = b.dot_general(lhs, rhs, (([1], [0]), ([], [])), preferred_element_type=qr)
    hybrid = b.dot(b.parameter(2, "f32[3,4]"), rhs)  # float lhs x quantized rhs -> float
    module = b.build([b.uniform_dequantize(full), hybrid])
    got_full, got_hybrid = run(module, x, y, x)
    fx, fy = ref_dequantize(ref_quantize(x, qa), qa), ref_dequantize(ref_quantize(y, qb), qb)
    want = _jax_float(lambda a, c: jnp.dot(a, c, preferred_element_type=jnp.float32), fx, fy)
    np.testing.assert_array_equal(got_full, ref_dequantize(ref_quantize(want, qr), qr))
    np.testing.assert_array_equal(got_hybrid, _jax_float(jnp.dot, x, fy))


def test_convolution_on_quantized_values():
    qa, qk, qr = q8(0.5, 0), q8(0.25, 0), uniform_quantized("s32", "f32", 0.125, 0)
    x = RNG.integers(-6, 6, (1, 2, 6, 6)).astype(np.float32) * 0.5
    k = RNG.integers(-6, 6, (3, 2, 3, 3)).astype(np.float32) * 0.25
    b = XlaBuilder("conv")
    lhs = b.uniform_quantize(b.parameter(0, "f32[1,2,6,6]"), qa)
    rhs = b.uniform_quantize(b.parameter(1, "f32[3,2,3,3]"), qk)
    module = b.build(b.uniform_dequantize(b.conv(lhs, rhs, [1, 1], "VALID", preferred_element_type=qr)))
    (got,) = run(module, x, k)
    want = _jax_float(lambda a, c: lax.conv(a, c, (1, 1), "VALID"), x, k)
    np.testing.assert_array_equal(got, ref_dequantize(ref_quantize(want, qr), qr))


def test_iota_and_reduce_precision_on_quantized_results():
    q = q8(0.5, -3)
    b = XlaBuilder("iota")
    module = b.build(b.iota(TensorType(q, [8]), 0))
    (got,) = run(module)
    np.testing.assert_array_equal(got, ref_quantize(np.arange(8, dtype=np.float32), q))
    b = XlaBuilder("rp")
    quant = b.uniform_quantize(b.parameter(0, "f32[16]"), q)
    module = b.build(b.reduce_precision(quant, 5, 2, result_type=q))
    x = RNG.normal(0, 20, 16).astype(np.float32)
    (got,) = run(module, x)
    f = ref_dequantize(ref_quantize(x, q), q)
    want = ref_quantize(np.asarray(jax.jit(lambda v: lax.reduce_precision(v, 5, 2))(f)), q)
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------
# Ops that move storage values, and structural ops
# ----------------------------------------------------------------------------


def test_data_movement_runs_on_storage():
    q = q8(0.5, -3)
    storage = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    b = XlaBuilder("moves")
    p = b.parameter(0, TensorType(q, [4, 6]))
    zero = b.parameter(1, TensorType(q, []))
    outs = [b.transpose(p, [1, 0]), b.reshape(p, [6, 4]), b.slice(p, [1, 0], [3, 6], [1, 2]), b.rev(p, [0]),
            b.concat_in_dim([p, p], 0), b.pad(p, zero, [(1, 0, 0), (0, 2, 1)]),
            b.broadcast_in_dim(b.slice(p, [0, 0], [1, 6], [1, 1]), [3, 6], [0, 1])]
    for o in outs:
        assert quantized_element(o.type) == q
    module = b.build(outs)
    got = run(module, storage, np.int8(9))
    padded = np.full((5, 13), 9, np.int8)
    padded[1:, 0:11:2] = storage
    want = [storage.T, storage.reshape(6, 4), storage[1:3, 0:6:2], storage[::-1], np.concatenate([storage] * 2),
            padded, np.broadcast_to(storage[:1], (3, 6))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_gather_and_dynamic_slices_on_quantized_values():
    q = q8(0.5, -3)
    storage = RNG.integers(-128, 128, (5, 4)).astype(np.int8)
    b = XlaBuilder("gather")
    p = b.parameter(0, TensorType(q, [5, 4]))
    i = b.parameter(1, "s32[]")
    rows = b.dynamic_slice(p, [i, b.constant(np.int32(0))], [2, 4])
    updated = b.dynamic_update_slice(p, rows, [b.constant(np.int32(3)), b.constant(np.int32(0))])
    module = b.build([rows, updated, b.uniform_dequantize(rows)])
    got_rows, got_upd, got_f = run(module, storage, np.int32(1))
    np.testing.assert_array_equal(got_rows, storage[1:3])
    want = storage.copy()
    want[3:5] = storage[1:3]
    np.testing.assert_array_equal(got_upd, want)
    np.testing.assert_array_equal(got_f, ref_dequantize(storage[1:3], q))


def test_reduce_on_quantized_values_requantizes_each_step():
    # Scale 1 / zero point 0 and small integers: every requantized partial sum is exact, so the result
    # does not depend on the reduction order; a clamp shows the per-step requantization.
    q = q8(1.0, 0)
    storage = RNG.integers(-5, 6, (3, 8)).astype(np.int8)
    b = XlaBuilder("reduce")
    p = b.parameter(0, TensorType(q, [3, 8]))
    init = b.parameter(1, TensorType(q, []))

    def add(s, x, y):
        return s.add(x, y, result_type=q)

    module = b.build(b.reduce(p, init, add, [1]))
    (got,) = run(module, storage, np.int8(0))
    np.testing.assert_array_equal(got, storage.astype(np.int64).sum(1).clip(-128, 127).astype(np.int8))
    (got,) = run(module, np.full((3, 8), 100, np.int8), np.int8(0))
    np.testing.assert_array_equal(got, np.full(3, 127, np.int8))  # saturates at the storage range


def test_sort_while_and_call_carry_quantized_values():
    q = q8(0.5, -3)
    storage = RNG.integers(-128, 128, 20).astype(np.int8)
    b = XlaBuilder("structural")
    p = b.parameter(0, TensorType(q, [20]))

    def less(s, x, y):
        return s.lt(x, y)

    sorted_ = b.sort(p, less)
    module = b.build([sorted_, b.uniform_dequantize(sorted_)])
    got, got_f = run(module, storage)
    np.testing.assert_array_equal(got, np.sort(storage))
    np.testing.assert_array_equal(got_f, ref_dequantize(np.sort(storage), q))


def test_lower_quantized_pass():
    q = q8(0.5, -3)
    b = XlaBuilder("pass")
    a = b.uniform_quantize(b.parameter(0, "f32[4]"), q)
    module = b.build(b.uniform_dequantize(b.tanh(b.add(a, a, result_type=q), result_type=q)))
    x = np.float32([0.3, -7, 12, 1e9])
    want = run(module, x)
    result = passes.run(module, "lower-quantized")
    names = [op.name for op in module.walk()]
    assert names.count("hlo.uniform_dequantize") == 4 and names.count("hlo.uniform_quantize") == 3
    from passes.quantized import computes_on_quantized

    assert not any(computes_on_quantized(op) for op in module.walk())
    module.verify()
    assert result is not None
    np.testing.assert_array_equal(run(module, x)[0], want[0])
    assert "lower-quantized" in passes.available_passes()


def test_print_parse_round_trip_of_a_quantized_module():
    q, r = q8(0.5, -3), uniform_quantized("u8", "f32", [0.1, 0.2], [1, 2], axis=0)
    b = XlaBuilder("rt")
    a = b.uniform_quantize(b.parameter(0, "f32[2,3]"), q)
    c = b.uniform_quantize(b.parameter(1, "f32[2,3]"), r)
    module = b.build([b.uniform_dequantize(b.mul(a, a, result_type=q)), b.transpose(c, [1, 0])])
    again = parse_module(str(module))
    assert again.is_structurally_equivalent(module)
    assert str(again) == str(module)


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def _quantized_param(b, q=None, shape=(4,)):
    return b.uniform_quantize(b.parameter(0, f"f32[{','.join(map(str, shape))}]"), q or q8(0.5, -3))


def test_errors_name_the_op_and_what_was_expected():
    b = XlaBuilder("e")
    a = _quantized_param(b)
    with pytest.raises(BuilderError, match=r"XlaBuilder.population_count: hlo.popcnt: does not accept quantized"):
        b.population_count(a)
    with pytest.raises(BuilderError, match=r"XlaBuilder.add: hlo.add: result #0 must be quantized.*result_type"):
        b.add(a, a)
    with pytest.raises(BuilderError, match=r"hlo.convert: does not accept quantized"):
        b.convert_element_type(a, "f32")
    other = b.uniform_quantize(b.parameter(1, "f32[4]"), q8(0.25, 0))
    with pytest.raises(BuilderError, match=r"hlo.concatenate: quantized operands must share one quantization"):
        b.concat_in_dim([a, other], 0)
    with pytest.raises(BuilderError, match=r"hlo.concatenate: operand #1 is f32\[4\]\{0\} but other operands are quantized"):
        b.concat_in_dim([a, b.parameter(9, "f32[4]")], 0)
    with pytest.raises(BuilderError, match=r"hlo.uniform_dequantize: operand must be a quantized tensor"):
        b.uniform_dequantize(b.parameter(2, "f32[4]"))
    with pytest.raises(BuilderError, match=r"hlo.uniform_quantize: the operand's element type s32 must be"):
        b.uniform_quantize(b.parameter(3, "s32[4]"), q8(0.5))
    with pytest.raises(BuilderError, match=r"expressed type f32 of .* must be the result's expressed type bf16"):
        b.uniform_quantize(a, q8(0.5, 0, "bf16"))
    with pytest.raises(BuilderError, match=r"has 2 scales but dimension 0 has size 4"):
        b.uniform_quantize(b.parameter(4, "f32[4]"), uniform_quantized("s8", "f32", [0.5, 1.0], 0, axis=0))
    with pytest.raises(BuilderError, match=r"quantization dimension 3 .* out of range for rank 1"):
        b.uniform_quantize(b.parameter(5, "f32[4]"), uniform_quantized("s8", "f32", [0.5], 0, axis=3))
    with pytest.raises(BuilderError, match=r"expected a quantized type"):
        b.uniform_quantize(b.parameter(6, "f32[4]"), "s8")
    with pytest.raises(BuilderError, match=r"finite and positive"):
        b.uniform_quantize(b.parameter(7, "f32[4]"), "!quant.uniform<i8:f32, -2.0>")
    per_axis = b.uniform_quantize(b.parameter(8, "f32[4,2]"), uniform_quantized("s8", "f32", [0.5, 1.0], 0, axis=1))
    with pytest.raises(BuilderError, match=r"hlo.gather: per-axis quantized operands .* not supported"):
        b.gather(per_axis, b.constant(np.int32([[0]])), dimension_numbers=dict(
            offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0], index_vector_dim=1), slice_sizes=[1, 2])


def test_verifier_rejects_storage_ops_that_change_the_quantization():
    q = q8(0.5, -3)
    b = XlaBuilder("v")
    module = b.build(b.reshape(_quantized_param(b, q), [2, 2]))
    text = str(module)
    changed = text.replace("tensor<2x2x!quant.uniform<i8:f32, 0.5:-3>", "tensor<2x2x!quant.uniform<i8:f32, 0.25:-3>")
    with pytest.raises(HloVerifyError, match=r"hlo.reshape.*must keep the operands' quantization"):
        parse_module(changed)
    dropped = text.replace("tensor<2x2x!quant.uniform<i8:f32, 0.5:-3>", "tensor<2x2xf32")
    with pytest.raises(HloVerifyError, match=r"hlo.reshape.*must be quantized like the operands"):
        parse_module(dropped)


def test_every_error_is_a_project_error():
    for text in ("!quant.uniform<i8:f32, nan>", "!quant.uniform<>", "!quant.uniform<i8:f32, 1.0:1:2>"):
        with pytest.raises(XlaError):
            parse_quantized_type(text)


# ----------------------------------------------------------------------------
# Import and export
# ----------------------------------------------------------------------------

QUANTIZED_ARGS = """
  func.func @main(%arg0: tensor<4x!quant.uniform<i8:f32, 0.5:-3>>, %arg1: tensor<4xf32>) -> (tensor<4x!quant.uniform<i8:f32, 0.25:1>>, tensor<4xf32>) {
    %c = stablehlo.constant dense<[1, 2, -3, 4]> : tensor<4x!quant.uniform<i8:f32, 0.5:-3>>
    %0 = stablehlo.add %arg0, %c : (tensor<4x!quant.uniform<i8:f32, 0.5:-3>>, tensor<4x!quant.uniform<i8:f32, 0.5:-3>>) -> tensor<4x!quant.uniform<i8:f32, 0.25:1>>
    %1 = stablehlo.uniform_dequantize %0 : (tensor<4x!quant.uniform<i8:f32, 0.25:1>>) -> tensor<4xf32>
    %2 = stablehlo.add %1, %arg1 : tensor<4xf32>
    return %0, %2 : tensor<4x!quant.uniform<i8:f32, 0.25:1>>, tensor<4xf32>
  }"""


def test_import_keeps_quantized_types_arguments_and_constants():
    from interop import import_stablehlo

    module = import_stablehlo(QUANTIZED_ARGS, verify=True)
    main = list(module.ops)[0]
    qa, qr = parse_quantized_type("!quant.uniform<i8:f32, 0.5:-3>"), parse_quantized_type("!quant.uniform<i8:f32, 0.25:1>")
    assert [quantized_element(t) for t in main.function_type.inputs] == [qa, None]
    assert [quantized_element(t) for t in main.function_type.outputs] == [qr, None]
    names = [op.name for op in main.body.walk()]
    assert "hlo.uniform_dequantize" in names and "hlo.convert" not in names
    storage = np.int8([10, -20, 127, 0])
    y = np.float32([0.5, 1, 2, 3])
    got_q, got_f = run(module, storage, y)
    c = np.int8([1, 2, -3, 4])
    want_q = ref_quantize(ref_dequantize(storage, qa) + ref_dequantize(c, qa), qr)
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_f, ref_dequantize(want_q, qr) + y)


def test_export_prints_quantized_types_as_stablehlo():
    from interop import export_stablehlo, import_stablehlo

    module = import_stablehlo(QUANTIZED_ARGS)
    text = export_stablehlo(module)
    assert "!quant.uniform<i8:f32, 0.5:-3>" in text and "stablehlo.uniform_dequantize" in text
    again = import_stablehlo(text)
    assert again.is_structurally_equivalent(module)


def test_cleanup_passes_leave_quantized_arithmetic_alone():
    # A quantized "zero" or "one" is a storage value: x + q(0) requantizes x, and folding a quantized add of
    # constants with the float kernels would compute on storage integers.
    q, r = q8(0.5, 0), q8(0.25, 0)
    b = XlaBuilder("cleanup")
    x = b.parameter(0, TensorType(q, [4]))
    zero = b.uniform_quantize(b.constant(np.zeros(4, np.float32)), q)
    two = b.uniform_quantize(b.constant(np.full(4, 2.0, np.float32)), q)
    module = b.build([b.add(x, zero, result_type=r), b.add(two, two, result_type=r)])
    storage = np.int8([1, 2, -3, 100])
    want = run(module, storage)
    passes.run(module, "simplify,fold-constants,cse,dce")
    got = run(module, storage)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(want[0], ref_quantize(ref_dequantize(storage, q), r))
    np.testing.assert_array_equal(want[1], np.full(4, 16, np.int8))


def test_windowed_scatter_map_and_while_on_quantized_values():
    # Scale 1 / zero point 0 and small integers: the per-step requantizations are exact, so the results do
    # not depend on the order in which the computations combine values.
    q = q8(1.0, 0)
    storage = RNG.integers(-4, 5, (4, 6)).astype(np.int8)
    b = XlaBuilder("regions")
    p = b.parameter(0, TensorType(q, [4, 6]))
    init = b.parameter(1, TensorType(q, []))

    def add(s, x, y):
        return s.add(x, y, result_type=q)

    def maximum(s, x, y):
        return s.max(x, y, result_type=q)

    window_sums = b.reduce_window(p, init, add, [2, 3], [2, 3], "VALID")
    updates = b.parameter(2, TensorType(q, [2, 6]))
    scattered = b.scatter(p, b.constant(np.int32([[0], [2]])), updates, add, dimension_numbers=dict(
        update_window_dims=[1], inserted_window_dims=[0], scatter_dims_to_operand_dims=[0], index_vector_dim=1))
    mapped = b.map([p, p], maximum, [0, 1])
    module = b.build([window_sums, scattered, mapped])
    upd = RNG.integers(-4, 5, (2, 6)).astype(np.int8)
    got_w, got_s, got_m = run(module, storage, np.int8(0), upd)
    wide = storage.astype(np.int64)
    np.testing.assert_array_equal(got_w, wide.reshape(2, 2, 2, 3).sum((1, 3)).astype(np.int8))
    want_s = wide.copy()
    want_s[[0, 2]] += upd
    np.testing.assert_array_equal(got_s, want_s.astype(np.int8))
    np.testing.assert_array_equal(got_m, storage)


def test_expand_quantized_leaves_no_quantized_types_and_runs_on_xla():
    # Power-of-two scales: XLA computes x / scale as x * (1 / scale) (exact only for powers of two).
    q, r = uniform_quantized("s8", "f32", [0.125, 0.25, 0.5], [0, 3, -5], axis=1), q8(1 / 32, 7)
    b = XlaBuilder("expand")
    a = b.uniform_quantize(b.parameter(0, "f32[4,3]"), q)
    t = b.transpose(a, [1, 0])
    s = b.mul(b.uniform_quantize(t, r), b.uniform_quantize(t, r), result_type=r)
    c = b.parameter(1, TensorType(r, [3, 4]))
    module = b.build([b.uniform_dequantize(s), b.add(s, c, result_type=r), t])
    x = RNG.normal(0, 3, (4, 3)).astype(np.float32)
    storage = RNG.integers(-128, 128, (3, 4)).astype(np.int8)
    want = run(module, x, storage)
    expanded = module.clone()
    passes.run(expanded, "expand-quantized")
    assert not any(quantized_element(v.type) is not None for op in expanded.walk() for v in (*op.results, *op.operands))
    main = list(expanded.ops)[0]
    assert all(quantized_element(t) is None for t in (*main.function_type.inputs, *main.function_type.outputs))
    for got in (run(expanded, x, storage), on_xla(module, x, storage)):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
