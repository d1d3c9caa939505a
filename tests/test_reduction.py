"""hlo.reduce and hlo.map: builder, shape inference, verifier, round trip, and the kernels vs jax.

Float sums and products: XLA CPU and the NumPy kernel reassociate in different
orders (XLA permits any), so they are compared with the tolerance
``|actual - expected| <= 4 * eps * sum(|x|)`` (products: relative ``4 * eps * n``);
everything else (integers, max/min, and/or/xor, argmax) must match exactly.
"""

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from helpers import JaxReferences, assert_close, execute
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, HloVerifyError
from xla_dialect.types import element_type_from_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)


def xla_name(dtype) -> str:
    return element_type_from_dtype(dtype).xla_name


def shape_text(dtype, shape) -> str:
    return f"{xla_name(dtype)}[{','.join(map(str, shape))}]"


def random_array(rng, dtype, shape, op="add"):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if op == "mul":
        return rng.uniform(0.5, 1.5, shape).astype(dtype)  # keep products finite
    return rng.standard_normal(shape).astype(dtype)


def identity(op, dtype):
    """The identity init value of ``op`` for ``dtype`` (what jax passes)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.bool_({"max": False, "min": True, "and": True, "or": False, "xor": False}[op])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = {"add": 0, "mul": 1, "max": info.min, "min": info.max, "and": -1 if dtype.kind == "i" else info.max,
                 "or": 0, "xor": 0}[op]
        return np.asarray(value).astype(dtype)
    return np.asarray({"add": 0.0, "mul": 1.0, "max": -np.inf, "min": np.inf}[op], dtype)


BUILDER_METHODS = {"add": "add", "mul": "mul", "max": "max", "min": "min", "and": "and_", "or": "or_", "xor": "xor"}
JAX_OPS = {"add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min, "and": lax.bitwise_and,
           "or": lax.bitwise_or, "xor": lax.bitwise_xor}


def build_reduce(dtype, shape, op, init, dims):
    b = XlaBuilder("reduce")
    x = b.parameter(0, shape_text(dtype, shape))
    method = BUILDER_METHODS[op]
    b.reduce(x, b.constant(init, dtype), lambda acc, v: getattr(acc.builder, method)(acc, v), dims)
    return b.build()


def jax_reduce(x, init, op, dims):
    return np.asarray(jax.jit(lambda v: lax.reduce(v, init, JAX_OPS[op], tuple(dims)))(x))


def check_float_reduction(actual, expected, x, dims, op):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    eps = float(ml_dtypes.finfo(actual.dtype).eps)
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if op == "add":
        bound = 4 * eps * np.abs(x.astype(np.float64)).sum(axis=tuple(dims)) + float(ml_dtypes.finfo(actual.dtype).tiny)
    else:
        n = max(1, int(np.prod([x.shape[d] for d in dims])))
        bound = 4 * eps * n * np.abs(e)
    assert np.all(np.abs(a - e) <= bound), f"max error {np.abs(a - e).max()} exceeds the bound"


SHAPES_AND_DIMS = [
    ((3, 4, 5), (0, 2)),
    ((3, 4, 5), (1,)),
    ((3, 4, 5), ()),
    ((3, 4, 5), (0, 1, 2)),
    ((2, 257), (1,)),
    ((6, 0, 2), (1,)),
    ((6, 0, 2), (0,)),
    ((), ()),
]

DTYPE_OPS = [
    (np.int8, ("add", "mul", "max", "min", "and", "or", "xor")),
    (np.int32, ("add", "mul", "max", "min", "and", "or", "xor")),
    (np.uint16, ("add", "max", "min", "and", "or", "xor")),
    (np.int64, ("add", "mul", "max", "min")),
    (np.uint64, ("add", "max")),
    (np.bool_, ("max", "min", "and", "or", "xor")),
    (np.float16, ("add", "max", "min")),
    (BF16, ("add", "mul", "max")),
    (np.float32, ("add", "mul", "max", "min")),
    (np.float64, ("add", "mul", "max", "min")),
]


def _single_op_references() -> JaxReferences:
    """jax's result for every case of test_single_op_reduce_matches_jax, each reduce on its own operand, in
    one XLA compilation; the operands are those the ``rng`` fixture (default_rng(0)) gave each test."""
    refs = JaxReferences()
    for dtype, ops in DTYPE_OPS:
        for op in ops:
            rng = np.random.default_rng(0)
            for shape, dims in SHAPES_AND_DIMS:
                init = identity(op, dtype)
                refs.add((np.dtype(dtype).name, op, shape, dims),
                         lambda v, init=init, op=op, dims=dims: lax.reduce(v, init, JAX_OPS[op], tuple(dims)),
                         random_array(rng, dtype, shape, op))
    return refs


SINGLE_OP_REFS = _single_op_references()


@pytest.mark.parametrize("dtype,op", [(d, o) for d, ops in DTYPE_OPS for o in ops],
                         ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
@pytest.mark.sample(20)
def test_single_op_reduce_matches_jax(dtype, op):
    for shape, dims in SHAPES_AND_DIMS:
        key = (np.dtype(dtype).name, op, shape, dims)
        (x,) = SINGLE_OP_REFS.args(key)
        init = identity(op, dtype)
        (actual,) = execute(build_reduce(dtype, shape, op, init, dims), x)
        expected = SINGLE_OP_REFS[key]
        if np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16:
            if op in ("add", "mul"):
                check_float_reduction(actual, expected, x, dims, op)
                continue
        assert_close(actual, expected, err_msg=f"{op} over {dims} of {shape}")


def test_seed_examples():
    # The XLA operation semantics: a 4x2x3 array, values 1..6 replicated along dimension 0.
    x = np.tile(np.arange(1, 7, dtype=np.float32).reshape(1, 2, 3), (4, 1, 1))
    cases = {(0,): [[4, 8, 12], [16, 20, 24]], (2,): [[6, 15]] * 4, (0, 1): [20, 28, 36], (0, 1, 2): 84}
    for dims, expected in cases.items():
        (r,) = execute(build_reduce(np.float32, (4, 2, 3), "add", np.float32(0), dims), x)
        np.testing.assert_array_equal(r, np.asarray(expected, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BF16])
def test_max_min_nan_and_signed_zero(dtype):
    x = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0], [1.0, np.nan, 2.0],
                  [-np.inf, -np.inf, -np.inf]], dtype)
    for op in ("max", "min"):
        init = identity(op, dtype)
        (actual,) = execute(build_reduce(dtype, x.shape, op, init, (1,)), x)
        expected = jax_reduce(x, init, op, (1,))
        assert_close(actual, expected)
        np.testing.assert_array_equal(np.signbit(actual.astype(np.float32)), np.signbit(expected.astype(np.float32)))


@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("op", ["max", "min"])
def test_signed_zero_results_along_any_axes(rng, op, dims):
    # Mostly zeros of both signs, some +-1 and NaN: many zero results, each signed by its own elements only.
    x = rng.choice(np.array([-0.0, 0.0, -0.0, 0.0, -1.0, 1.0, np.nan], np.float32), (4, 5, 6))
    for init in (identity(op, np.float32), np.float32(0.0), np.float32(-0.0)):
        (actual,) = execute(build_reduce(np.float32, x.shape, op, init, dims), x)
        expected = jax_reduce(x, init, op, dims)
        assert actual.shape == expected.shape
        np.testing.assert_array_equal(actual, expected)
        number = ~np.isnan(expected)  # the sign of a NaN result is not compared (XLA's min gives -NaN)
        np.testing.assert_array_equal(np.signbit(actual[number]), np.signbit(expected[number]))


def test_integer_sum_wraps_like_xla(rng):
    x = np.full((1000,), 2**30, np.int32)
    (r,) = execute(build_reduce(np.int32, x.shape, "add", np.int32(0), (0,)), x)
    assert r == jax_reduce(x, np.int32(0), "add", (0,)) == np.int32(0)


def test_init_value_is_applied_once():
    # XLA's definition: result = init op reduce(x) (jax agrees on small inputs).
    x = np.arange(5, dtype=np.int32)
    (r,) = execute(build_reduce(np.int32, x.shape, "add", np.int32(5), (0,)), x)
    assert r == 15 == jax_reduce(x, np.int32(5), "add", (0,))
    (r,) = execute(build_reduce(np.int32, (4, 0), "add", np.int32(5), (1,)), np.zeros((4, 0), np.int32))
    np.testing.assert_array_equal(r, [5, 5, 5, 5])


# ----------------------------------------------------------------------------
# Generic bodies: vectorized tree reduction
# ----------------------------------------------------------------------------


def select_max(acc, v):
    b = acc.builder
    return b.select(b.gt(acc, v), acc, v)


@pytest.mark.parametrize("shape,dims", [((5, 7, 3), (1,)), ((5, 7, 3), (0, 2)), ((1, 1), (0, 1)), ((4, 0), (1,)),
                                        ((33,), (0,)), ((2, 3), ())])
def test_generic_body_matches_jax(rng, shape, dims):
    x = rng.integers(-1000, 1000, shape).astype(np.int32)
    b = XlaBuilder("r")
    p = b.parameter(0, shape_text(np.int32, shape))
    init = np.int32(np.iinfo(np.int32).min)
    b.reduce(p, b.constant(init), select_max, dims)
    (actual,) = execute(b.build(), x)
    expected = jax.jit(lambda v: lax.reduce(v, init, lambda a, c: lax.select(a > c, a, c), dims))(x)
    assert_close(actual, np.asarray(expected))


def test_generic_float_body_is_close_to_jax(rng):
    x = rng.standard_normal((6, 50)).astype(np.float32)
    b = XlaBuilder("r")
    p = b.parameter(0, "f32[6,50]")
    b.reduce(p, b.constant(np.float32(0)), lambda a, c: a.builder.sub(a, a.builder.neg(c)), [1])
    (actual,) = execute(b.build(), x)
    expected = jax_reduce(x, np.float32(0), "add", (1,))
    check_float_reduction(actual, expected, x, (1,), "add")


def argminmax_body(pick_op):
    """jax's argmax/argmin reducer: (value, index) pairs; NaN wins; ties take the lower index."""

    def body(acc_v, acc_i, v, i):
        b = acc_v.builder
        pick = b.or_(pick_op(b, v, acc_v), b.ne(v, v))
        pick_index = b.or_(pick, b.and_(b.eq(v, acc_v), b.lt(i, acc_i)))
        return b.select(pick, v, acc_v), b.select(pick_index, i, acc_i)

    return body


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("axis", [0, 1])
def test_argmax_argmin_via_variadic_reduce(rng, kind, dtype, axis):
    x = (rng.integers(-3, 3, (17, 12)) if dtype == np.int32 else rng.standard_normal((17, 12))).astype(dtype)
    if dtype != np.int32:
        x[3, 5] = x[7, 2] = np.nan
        x[4, :] = 1.0  # ties everywhere in a row
        x[:, 6] = -0.0
        x[2, 6] = 0.0
    shape = shape_text(dtype, x.shape)
    b = XlaBuilder("arg")
    p = b.parameter(0, shape)
    index = b.iota(shape_text(np.int32, x.shape), axis)
    if dtype == np.int32:
        init = np.iinfo(np.int32).min if kind == "max" else np.iinfo(np.int32).max
    else:
        init = -np.inf if kind == "max" else np.inf
    pick = (lambda bb, a, c: bb.gt(a, c)) if kind == "max" else (lambda bb, a, c: bb.lt(a, c))
    value, idx = b.reduce([p, index], [b.constant(init, dtype), b.constant(np.int32(0))], argminmax_body(pick),
                          [axis])
    actual_value, actual_index = execute(b.build([value, idx]), x)
    jax_fn = lax.argmax if kind == "max" else lax.argmin
    expected_index = np.asarray(jax.jit(lambda v: jax_fn(v, axis, np.int32))(x))
    assert_close(actual_index, expected_index)
    expected_value = np.take_along_axis(x, np.expand_dims(expected_index, axis), axis).squeeze(axis)
    assert_close(actual_value, expected_value)


def test_variadic_reduce_matches_jax_multi_operand(rng):
    x = rng.integers(-50, 50, (4, 9, 6)).astype(np.int64)
    y = rng.standard_normal((4, 9, 6)).astype(np.float32)

    def body(b, s, m, xv, yv):
        return b.add(s, xv), b.max(m, yv)

    b = XlaBuilder("v")
    px, py = b.parameter(0, "s64[4,9,6]"), b.parameter(1, "f32[4,9,6]")
    s, m = b.reduce([px, py], [b.constant(0, np.int64), b.constant(np.float32(-np.inf))], body, [0, 2])
    actual = execute(b.build([s, m]), x, y)
    expected = jax.jit(lambda u, v: lax.reduce((u, v), (np.int64(0), np.float32(-np.inf)),
                                               lambda a, c: (a[0] + c[0], lax.max(a[1], c[1])), (0, 2)))(x, y)
    assert_close(actual[0], np.asarray(expected[0]))
    assert_close(actual[1], np.asarray(expected[1]))


def test_non_commutative_body_keeps_order(rng):
    # 2x2 integer matrix products are associative but not commutative: the
    # reduction must combine neighbours in order. Reference: a sequential product.
    n = 37
    mats = rng.integers(-3, 4, (n, 2, 2)).astype(np.int64)

    def body(b, a00, a01, a10, a11, b00, b01, b10, b11):
        return (b.add(b.mul(a00, b00), b.mul(a01, b10)), b.add(b.mul(a00, b01), b.mul(a01, b11)),
                b.add(b.mul(a10, b00), b.mul(a11, b10)), b.add(b.mul(a10, b01), b.mul(a11, b11)))

    b = XlaBuilder("matprod")
    params = [b.parameter(i, f"s64[{n}]") for i in range(4)]
    one, zero = b.constant(1, np.int64), b.constant(0, np.int64)
    outs = b.reduce(params, [one, zero, zero, one], body, [0])
    actual = execute(b.build(list(outs)), *(mats[:, i, j] for i in range(2) for j in range(2)))
    expected = np.eye(2, dtype=np.int64)
    for m in mats:
        expected = expected @ m
    np.testing.assert_array_equal(np.array(actual).reshape(2, 2), expected)


def test_computation_as_built_module(rng):
    sub = XlaBuilder("add")
    sub.add(sub.parameter(0, "f32[]"), sub.parameter(1, "f32[]"))
    add = sub.build()
    b = XlaBuilder("sum")
    x = b.parameter(0, "f32[3,4]")
    b.reduce(x, b.constant(np.float32(0)), add, [1])
    module = b.build()
    xs = rng.standard_normal((3, 4)).astype(np.float32)
    (r,) = execute(module, xs)
    check_float_reduction(r, jax_reduce(xs, np.float32(0), "add", (1,)), xs, (1,), "add")
    assert "hlo.reduce" in str(module)


def test_body_with_shape_ops_uses_per_element_fallback(rng):
    # A nested reduce over no dimensions is not an element-wise op, so the
    # region runs once per pair (the documented slow path); results must match.
    x = rng.integers(-100, 100, (3, 5)).astype(np.int32)

    def body(acc, v):
        b = acc.builder
        return b.reduce(b.add(acc, v), b.constant(np.int32(0)), lambda p, q: p.builder.add(p, q), [])

    b = XlaBuilder("r")
    p = b.parameter(0, "s32[3,5]")
    b.reduce(p, b.constant(np.int32(0)), body, [1])
    (r,) = execute(b.build(), x)
    np.testing.assert_array_equal(r, x.sum(1, dtype=np.int32))


def test_reduce_all():
    b = XlaBuilder("all")
    x = b.parameter(0, "s32[2,3]")
    b.reduce_all(x, b.constant(np.int32(0)), lambda a, c: a + c)
    (r,) = execute(b.build(), np.arange(6, dtype=np.int32).reshape(2, 3))
    assert r.shape == () and r == 15


# ----------------------------------------------------------------------------
# Map
# ----------------------------------------------------------------------------


def test_map_two_operands(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    b = XlaBuilder("map")
    px, py = b.parameter(0, "f32[4,5]"), b.parameter(1, "f32[4,5]")
    # (a + c) * c: no multiply-add that XLA could contract into an FMA.
    b.map([px, py], lambda a, c: (a + c) * c)
    (r,) = execute(b.build(), x, y)
    expected = jax.jit(lambda u, v: jax.vmap(jax.vmap(lambda a, c: (a + c) * c))(u, v))(x, y)
    assert_close(r, np.asarray(expected))


def test_map_changes_element_type_and_captures(rng):
    x = rng.integers(-5, 5, (6,)).astype(np.int32)
    b = XlaBuilder("map")
    px = b.parameter(0, "s32[6]")
    limit = b.parameter(1, "s32[]")
    b.map(px, lambda a: a.builder.gt(a, limit))  # captures an outer scalar
    (r,) = execute(b.build(), x, np.int32(1))
    assert r.dtype == np.bool_
    np.testing.assert_array_equal(r, x > 1)


def test_map_constant_body_scalar_and_empty():
    for shape in ((3, 2), (), (0, 4)):
        b = XlaBuilder("map")
        px = b.parameter(0, shape_text(np.float32, shape))
        b.map(px, lambda a: a.builder.constant(np.float32(7)))
        (r,) = execute(b.build(), np.zeros(shape, np.float32))
        np.testing.assert_array_equal(r, np.full(shape, 7, np.float32))


def test_map_with_non_elementwise_body_falls_back(rng):
    x = rng.integers(-5, 5, (2, 3)).astype(np.int32)
    b = XlaBuilder("map")
    px = b.parameter(0, "s32[2,3]")
    b.map(px, lambda a: a.builder.reduce(a.builder.mul(a, a), a.builder.constant(np.int32(1)),
                                         lambda p, q: p.builder.add(p, q), []))
    (r,) = execute(b.build(), x)
    np.testing.assert_array_equal(r, x * x + 1)


def test_map_with_bitcast_convert_body(rng):
    # bitcast_convert's kernel is shape-specific, so this region takes the per-element path.
    x = rng.standard_normal(7).astype(np.float32)
    b = XlaBuilder("map")
    px = b.parameter(0, "f32[7]")
    b.map(px, lambda a: a.builder.bitcast_convert(a, "s32"))
    (r,) = execute(b.build(), x)
    np.testing.assert_array_equal(r, x.view(np.int32))


def test_nested_map_inside_map(rng):
    x = rng.standard_normal((3, 3)).astype(np.float64)
    b = XlaBuilder("map")
    px = b.parameter(0, "f64[3,3]")
    b.map(px, lambda a: a.builder.map(a, lambda q: q.builder.neg(q)))
    (r,) = execute(b.build(), x)
    np.testing.assert_array_equal(r, -x)


# ----------------------------------------------------------------------------
# Errors, verifier, round trip
# ----------------------------------------------------------------------------


def add_body(a, c):
    return a.builder.add(a, c)


@pytest.mark.parametrize("make,match", [
    (lambda b, x: b.reduce(x, b.constant(np.int32(0)), add_body, [0]), "init value #0 .* element type"),
    (lambda b, x: b.reduce(x, b.constant(np.zeros(2, np.float32)), add_body, [0]), "init value #0 must be a scalar"),
    (lambda b, x: b.reduce(x, b.constant(np.float32(0)), add_body, [2]), "dimension 2 out of range"),
    (lambda b, x: b.reduce(x, b.constant(np.float32(0)), add_body, [1, 1]), "duplicates"),
    (lambda b, x: b.reduce([x, x], b.constant(np.float32(0)), add_body, [0]), "2 operands but 1 init values"),
    (lambda b, x: b.reduce(x, b.constant(np.float32(0)), lambda a: a, [0]), "takes 1 parameters but must take 2"),
    (lambda b, x: b.reduce(x, b.constant(np.float32(0)), lambda a, c: (a, c), [0]),
     r"returns \(f32\[\], f32\[\]\) but must return \(f32\[\]\)"),
    (lambda b, x: b.reduce(x, b.constant(np.float32(0)), lambda a, c: a.builder.constant(1, np.float64), [0]),
     r"returns \(f64\[\]\) but must return \(f32\[\]\)"),
    (lambda b, x: b.map([x, b.parameter(1, "f32[3]")], lambda a, c: a + c), "same dimensions"),
    (lambda b, x: b.map(x, lambda a: a, [1, 0]), "dimensions must be"),
    (lambda b, x: b.map(x, lambda a: (a, a)), "one scalar"),
])
def test_builder_errors(make, match):
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=match):
        make(b, x)


def test_computation_with_wrong_parameter_types():
    sub = XlaBuilder("add")
    sub.add(sub.parameter(0, "s32[]"), sub.parameter(1, "s32[]"))
    add = sub.build()
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4]")
    with pytest.raises(BuilderError, match=r"computation takes \(s32\[\].*must take \(f32\[\]"):
        b.reduce(x, b.constant(np.float32(0)), add, [0])


def reduce_text(result="tensor<3xf32>", body="f32"):
    return f"""
builtin.module {{
  func.func @main(%x: tensor<3x4xf32>, %i: tensor<f32>) -> {result} {{
    %r = hlo.reduce %x, %i {{dimensions = array<i64: 1>}} : (tensor<3x4xf32>, tensor<f32>) -> {result} {{
    ^bb0(%a: tensor<{body}>, %b: tensor<{body}>):
      %s = hlo.add %a, %b : (tensor<{body}>, tensor<{body}>) -> tensor<{body}>
      hlo.return %s : tensor<{body}>
    }}
    func.return %r : {result}
  }}
}}
"""


def test_verifier_accepts_and_rejects_reduce_text():
    module = parse_module(reduce_text())
    (r,) = execute(module, np.ones((3, 4), np.float32), np.float32(1))
    np.testing.assert_array_equal(r, [5, 5, 5])
    with pytest.raises(HloVerifyError, match="shape inference gives f32\\[3\\]"):
        parse_module(reduce_text(result="tensor<4xf32>"))
    with pytest.raises(HloVerifyError, match="reduction computation takes"):
        parse_module(reduce_text(body="f64"))


def test_round_trip_with_regions(rng):
    b = XlaBuilder("rt")
    x = b.parameter(0, "f32[5,6]")
    idx = b.iota("s32[5,6]", 1)
    v, i = b.reduce([x, idx], [b.constant(np.float32(-np.inf)), b.constant(np.int32(0))],
                    argminmax_body(lambda bb, a, c: bb.gt(a, c)), [1])
    m = b.map([v, v], lambda p, q: p + q)
    module = b.build([m, i])
    text = str(module)
    again = parse_module(text)
    assert str(again) == text
    xs = rng.standard_normal((5, 6)).astype(np.float32)
    for got, want in zip(execute(again, xs), execute(module, xs)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,axis", [((2048, 16), 0), ((1000, 7), 0), ((8, 32, 32, 64), (0, 1, 2)),
                                        ((2048, 1024), 0)])
def test_long_non_minor_sums_are_as_accurate_as_xla(shape, axis):
    # NumPy sums a non-minor axis row by row (error ~ n); XLA's sums are tree-shaped (error ~ log n), which
    # BatchNorm-training statistics depend on (issue 9: jnp.mean(x, axis=0) on (2048, 16)).
    import jax.numpy as jnp

    import lowering
    from interop import import_jax

    x = (np.random.default_rng(0).standard_normal(shape) + 3).astype(np.float32)
    fn = lambda v: jnp.mean(v, axis=axis)  # noqa: E731
    (ours,) = lowering.compile(import_jax(fn, x))(x)
    exact = np.mean(x.astype(np.float64), axis=axis)
    ours_error = np.abs(ours - exact).max()
    xla_error = np.abs(np.asarray(jax.jit(fn)(x)) - exact).max()
    count = np.prod([shape[a] for a in np.atleast_1d(axis)])
    row_by_row_error = np.abs(np.add.reduce(x, axis=axis) / np.float32(count) - exact).max()
    assert ours_error <= 2 * xla_error
    assert row_by_row_error > 4 * xla_error  # the test can tell the orders apart


@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 31, 33, 128, 200, 256])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
def test_compiled_row_extrema_equal_numpys(rng, n, dtype, ufunc):
    # lowering.kernels.rowwise: every value NumPy's reduce gives, NaN rows with NumPy's own NaN (payloads and signs
    # differ between the NaNs planted), zero signs left to the caller's fix (either zero may come back).
    from lowering.kernels.rowwise import row_extrema_of

    x = rng.standard_normal((64, n)).astype(dtype)
    x[rng.random(x.shape) < 0.2] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf], dtype), size=1)
    nans = np.array([np.nan, -np.nan], dtype)
    bits = nans.view(np.uint32 if dtype == np.float32 else np.uint64)
    bits[0] |= 1  # a payload
    nans = bits.view(dtype)
    x[3, n // 2] = nans[0]
    x[5, 0] = nans[1]
    x[5, n - 1] = nans[0]
    x[7] = -0.0
    got, want = row_extrema_of(x, ufunc), ufunc.reduce(x, axis=-1)
    nan = np.isnan(want)
    assert list(np.flatnonzero(nan)) == [3, 5]
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    np.testing.assert_array_equal(got[nan].view(unsigned), want[nan].view(unsigned))
    np.testing.assert_array_equal(got[~nan], want[~nan])


@pytest.mark.parametrize("op", ["max", "min"])
def test_short_row_extrema_use_the_compiled_kernel_and_match_jax(rng, op, monkeypatch):
    import lowering.kernels.rowwise

    calls = []
    real = lowering.kernels.rowwise.row_extrema_of
    monkeypatch.setattr(lowering.kernels.rowwise, "row_extrema_of",
                        lambda x, u, w=1: calls.append(x.shape) or real(x, u, w))
    # (No NaN, no signed-zero init: XLA CPU's max/min reductions of 4,096 elements or more (jax 0.10.2: 32 rows
    # of 128, or one row of 4,096) drop a NaN -- jnp.max too; openxla/xla#21461, open -- and take max(-0 init,
    # +0 row) as -0, where the executor propagates the NaN and orders -0 < +0 at every size, as XLA's semantics
    # say; the tests above check both against jax.jit on small shapes, where XLA CPU follows them.)
    x = rng.choice(np.array([-0.0, 0.0, -1.5, 2.5, np.inf, -np.inf], np.float32), (2, 8, 32, 128))
    x[0, 0, 0, :] = -0.0
    x[0, 0, 1, :] = 0.0
    for init in (identity(op, np.float32), np.float32(1.0)):
        calls.clear()
        (actual,) = execute(build_reduce(np.float32, x.shape, op, init, (3,)), x)
        assert calls == [x.shape]
        expected = jax_reduce(x, init, op, (3,))
        np.testing.assert_array_equal(actual, expected)
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


@pytest.mark.parametrize("mode", ["flush", "keep"])
@pytest.mark.parametrize("n", [7, 256, 1024])
@pytest.mark.parametrize("op", ["max", "min"])
def test_row_extrema_in_pieces_give_numpys_bits_in_the_callers_mode(rng, mode, n, op, monkeypatch):
    # Large inputs run in pieces of rows on numba's threads, each in the caller's denormal mode. The reduction's
    # results, zero signs included, are those of NumPy's reduce in either mode (denormal rows, zeros of both
    # signs, a NaN). (Which denormal a piece picks under DAZ does not show: init op total flushes it.)
    from lowering.kernels import rowwise

    _skip_unless_pieces(mode, monkeypatch)
    rows = rowwise.PARALLEL_ELEMENTS // n + 3
    x = (rng.standard_normal((rows, n)) * 1e-39).astype(np.float32)  # denormals (zeros in flush mode)
    x[::3] = np.where(rng.random((len(x[::3]), n)) < 0.5, np.float32(0.0), x[::3])
    x[1::7] = -np.abs(x[1::7])
    x[5, 3] = np.nan
    _pieces_and_numpy_agree(x, op, "row_extrema_of", mode, monkeypatch)


def _skip_unless_pieces(mode, monkeypatch):
    """Skip where numba's threads or the flush mode are not available; else make the executor see two CPUs."""
    import lowering.kernels.context
    from lowering.runtime import denormals, workers

    if not workers.numba_threads_available():
        pytest.skip("numba's threading layer does not poll here (or the CPU is not x86-64)")
    if mode == "flush" and not denormals.flush_supported():
        pytest.skip("the CPU's flush-to-zero mode cannot be set here")
    monkeypatch.setattr(lowering.kernels.context, "usable_cpus", lambda: 2)  # two pieces, whatever this machine has


def _pieces_and_numpy_agree(x, op, kernel, mode, monkeypatch):
    """The f32 reduction ``op`` of ``x`` over its last axis, run by the executor in ``mode`` through the
    ``lowering.kernels.rowwise`` function ``kernel`` in two pieces: its bits must be NumPy's reduce's. Returns them."""
    import lowering
    from lowering.kernels import rowwise
    from lowering.kernels import reduction

    module = build_reduce(np.float32, x.shape, op, identity(op, np.float32), (1,))
    calls = []
    real = getattr(rowwise, kernel)
    monkeypatch.setattr(rowwise, kernel, lambda x, *args: calls.append(args[-1]) or real(x, *args))
    (got,) = lowering.compile(module, denormals=mode)(x)
    assert calls == [2]
    monkeypatch.setattr(reduction, "_ROW_DTYPES", frozenset())
    calls.clear()
    (want,) = lowering.compile(module, denormals=mode)(x)  # NumPy's reduce
    assert calls == []
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axes", [((4, 7), (1,)), ((3, 300), (1,)), ((9, 5), (0,)), ((2, 3, 8), (0, 2))])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_max_min_carry_the_first_nan_with_its_payload(dtype, shape, axes, kind):
    """XLA's max/min reductions return the first NaN they meet (payload and sign kept), not NumPy's NaN."""
    import jax.numpy as jnp

    import lowering
    from interop import import_jax

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    bits = x.view(unsigned).reshape(-1)
    quiet = int(np.array(np.nan, dtype).view(unsigned))
    for k, position in enumerate(rng.choice(bits.size, size=min(bits.size, 12), replace=False)):
        bits[position] = quiet | (k + 1) | (0 if k % 2 else 1 << (8 * np.dtype(dtype).itemsize - 1))
    fn = (lambda v: jnp.max(v, axis=axes)) if kind == "max" else (lambda v: jnp.min(v, axis=axes))
    expected = np.asarray(jax.jit(fn)(x)).view(unsigned)
    got = lowering.compile(import_jax(fn, x))(x)[0].view(unsigned)
    assert [hex(v) for v in got.ravel()] == [hex(v) for v in expected.ravel()]
