"""hlo.sort: builder, shape inference, verifier, round trip, and both kernel strategies vs jax.lax.sort.

The comparators jax.lax.sort emits (float keys canonicalised: -0.0 -> +0.0, every
NaN -> +NaN, then a TOTALORDER less-than; lexicographic chains for num_keys > 1)
are built here with the builder, so the results can be compared with jax exactly.
"""

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from xdsl.dialects.builtin import BoolAttr

from helpers import assert_close, execute
from lowering.kernels.sorting import recognise_comparator
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, HloVerifyError
from xla_dialect.ops.sorting import SortOp
from xla_dialect.types import element_type_from_dtype, numpy_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)


def shape_text(dtype, shape) -> str:
    return f"{element_type_from_dtype(dtype).xla_name}[{','.join(map(str, shape))}]"


def const_like(b, x, value):
    return b.constant(np.asarray(value, numpy_dtype(x.type)))


def is_float(x) -> bool:
    return numpy_dtype(x.type).kind == "f" or numpy_dtype(x.type) == BF16


def canonical(b, x):
    """jax's _canonicalize_float_for_sort: -0.0 -> +0.0, NaN -> +NaN."""
    if not is_float(x):
        return x
    zero = const_like(b, x, 0)
    x0 = b.select(b.eq(x, zero), const_like(b, x, 0), x)
    return b.select(b.ne(x, x), const_like(b, x, np.nan), x0)


def jax_comparator(num_keys=1, wrap=None):
    """The comparator jax.lax.sort builds (``wrap`` post-processes the result to defeat recognition)."""

    def comparator(*params):
        b = params[0].builder
        p = None
        for k in reversed(range(num_keys)):
            lhs, rhs = canonical(b, params[2 * k]), canonical(b, params[2 * k + 1])
            lt = b.lt_total_order(lhs, rhs) if is_float(lhs) else b.lt(lhs, rhs)
            if p is None:
                p = lt
            else:
                eq = b.eq_total_order(lhs, rhs) if is_float(lhs) else b.eq(lhs, rhs)
                p = b.or_(lt, b.and_(eq, p))
        return wrap(b, p) if wrap else p

    return comparator


def not_recognised(b, p):
    """``p & true``: the same comparator, in a form the key fast path does not recognise."""
    return b.and_(p, b.constant(np.bool_(True)))


def build_sort(dtypes, shape, comparator, dimension=-1, is_stable=True):
    b = XlaBuilder("sort")
    params = [b.parameter(i, shape_text(d, shape)) for i, d in enumerate(dtypes)]
    out = b.sort(params, comparator, dimension, is_stable)
    module = b.build(list(out) if isinstance(out, tuple) else out)
    sort_op = next(op for op in module.walk() if isinstance(op, SortOp))
    return module, recognise_comparator(sort_op) is not None


def sample(rng, dtype, shape, special=True):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(-5 if dtype.kind == "i" else 0, 5, shape).astype(dtype)  # many ties
        if special and x.size >= 2:
            x.flat[0], x.flat[-1] = info.min, info.max
        return x
    x = rng.integers(-4, 4, shape).astype(np.float64) / 2  # ties, exactly representable
    if special and x.size >= 8:
        flat = x.reshape(-1)
        flat[:8] = [np.nan, -0.0, 0.0, -np.nan, np.inf, -np.inf, -0.0, np.nan]
        rng.shuffle(flat)
    return x.astype(dtype)


def assert_same(actual, expected):
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        assert_close(a, e)
        if a.dtype.kind == "f" or a.dtype == BF16:  # -0.0 vs +0.0 positions too
            np.testing.assert_array_equal(np.signbit(a.astype(np.float32)), np.signbit(e.astype(np.float32)))


DTYPES = [np.int8, np.int32, np.uint32, np.int64, np.bool_, np.float16, BF16, np.float32, np.float64]

# One jitted sort for every test: jax compiles it once per operand shape, dtype and dimension, so the
# "keys" and "merge" cases of a dtype share XLA's compilations (a lambda per call compiled each time).
_jax_sort = jax.jit(lax.sort, static_argnames=("dimension", "is_stable", "num_keys"))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fast", [True, False], ids=["keys", "merge"])
def test_single_operand_matches_jax(rng, dtype, fast):
    for shape, dim in (((13,), 0), ((4, 9), 1), ((4, 9), 0), ((2, 3, 5), 1), ((0,), 0), ((3, 0), 1), ((3, 0), 0)):
        x = sample(rng, dtype, shape)
        module, recognised = build_sort([dtype], shape, jax_comparator(1, None if fast else not_recognised), dim)
        assert recognised == fast
        got = execute(module, x)
        expected = _jax_sort(x, dimension=dim)
        assert_same(got, [expected])


@pytest.mark.parametrize("num_keys", [1, 2, 3])
@pytest.mark.parametrize("fast", [True, False], ids=["keys", "merge"])
def test_multiple_operands_and_keys_match_jax(rng, num_keys, fast):
    dtypes = [np.int32, np.float32, np.int8, np.float64]
    shape = (5, 40)
    xs = [sample(rng, d, shape) for d in dtypes]
    xs[3] = np.arange(200, dtype=np.float64).reshape(shape)  # payload: shows the permutation
    module, recognised = build_sort(dtypes, shape, jax_comparator(num_keys, None if fast else not_recognised), 1)
    assert recognised == fast
    got = execute(module, *xs)
    expected = _jax_sort(tuple(xs), dimension=1, num_keys=num_keys)
    assert_same(got, expected)


def test_complex_keys_via_real_and_imag_match_jax(rng):
    # jax sorts complex numbers by (real, imag) in total order, without canonicalisation.
    x = (rng.integers(-2, 2, 30) + 1j * rng.integers(-2, 2, 30)).astype(np.complex64)

    def comparator(b, p, q):
        re_p, re_q, im_p, im_q = b.real(p), b.real(q), b.imag(p), b.imag(q)
        return b.or_(b.lt_total_order(re_p, re_q), b.and_(b.eq_total_order(re_p, re_q), b.lt_total_order(im_p, im_q)))

    module, recognised = build_sort([np.complex64], (30,), comparator)
    assert not recognised
    (got,) = execute(module, x)
    np.testing.assert_array_equal(got, np.asarray(jax.jit(lax.sort)(x)))


def test_default_comparator_is_xla_less_than(rng):
    x = rng.standard_normal((3, 20)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, 0.0, -0.0]
    b = XlaBuilder("sort")
    b.sort(b.parameter(0, "f32[3,20]"))
    (got,) = execute(b.build(), x)
    expected = np.take_along_axis(x, np.argsort(x, axis=1, kind="stable"), 1)
    np.testing.assert_array_equal(got, expected)
    # FLOAT comparison: -0.0 and +0.0 are equal, so they keep their order.
    np.testing.assert_array_equal(np.signbit(got[0, np.where(got[0] == 0)[0]]), [False, True, False, True])


def test_raw_total_order_comparator():
    x = np.array([np.nan, -0.0, 0.0, -np.nan, -np.inf, 1.0, np.inf, -1.0], np.float32)
    expected_bits = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan], np.float32).view(np.uint32)
    for fast in (True, False):
        def comparator(b, p, q):
            lt = b.lt_total_order(p, q)
            return lt if fast else not_recognised(b, lt)

        module, recognised = build_sort([np.float32], x.shape, comparator)
        assert recognised == fast
        (got,) = execute(module, x)
        np.testing.assert_array_equal(got.view(np.uint32), expected_bits)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float32, np.bool_])
def test_descending_comparator_is_stable(rng, dtype):
    n = 50
    x = sample(rng, dtype, (n,), special=False)
    payload = np.arange(n, dtype=np.int32)
    for fast in (True, False):
        def comparator(b, p, q, i, j):
            gt = b.gt(p, q)
            return gt if fast else not_recognised(b, gt)

        module, recognised = build_sort([dtype, np.int32], (n,), comparator)
        assert recognised == fast
        values, perm = execute(module, x, payload)
        key = -x.astype(np.float64)
        expected = np.argsort(key, kind="stable")
        np.testing.assert_array_equal(perm, expected)
        np.testing.assert_array_equal(values, x[expected])


def test_custom_comparator_by_absolute_value(rng):
    x = rng.integers(-20, 20, (6, 64)).astype(np.int32)
    y = rng.standard_normal((6, 64)).astype(np.float64)

    def by_abs(b, p, q, r, s):
        return b.lt(b.abs(p), b.abs(q))

    module, recognised = build_sort([np.int32, np.float64], x.shape, by_abs, 1)
    assert not recognised
    got_x, got_y = execute(module, x, y)
    perm = np.argsort(np.abs(x), axis=1, kind="stable")
    np.testing.assert_array_equal(got_x, np.take_along_axis(x, perm, 1))
    np.testing.assert_array_equal(got_y, np.take_along_axis(y, perm, 1))


def test_generic_sort_of_a_larger_array(rng):
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    module, recognised = build_sort([np.float32], x.shape, jax_comparator(1, not_recognised), 1)
    assert not recognised
    (got,) = execute(module, x)
    np.testing.assert_array_equal(got, np.sort(x, axis=1))


def test_custom_comparators_match_xla_cpu(rng):
    # Comparators jax cannot express, run on XLA's CPU backend as the reference
    # (strict weak orders only: for others XLA's result is implementation-defined).
    from interop.stablehlo import run_xla

    x = rng.integers(-6, 6, (4, 33)).astype(np.int32)
    y = rng.integers(-3, 3, (4, 33)).astype(np.float32)
    payload = np.arange(4 * 33, dtype=np.int32).reshape(4, 33)

    def by_abs_desc(p, q, r, s, i, j):
        b = p.builder
        return b.gt(b.abs(p), b.abs(q))

    def x_asc_then_y_desc(p, q, r, s, i, j):
        b = p.builder
        return b.or_(b.lt(p, q), b.and_(b.eq(p, q), b.gt(r, s)))

    for comparator in (by_abs_desc, x_asc_then_y_desc):
        module, _ = build_sort([np.int32, np.float32, np.int32], x.shape, comparator, 1, is_stable=True)
        for got, want in zip(execute(module, x, y, payload), run_xla(module, x, y, payload)):
            np.testing.assert_array_equal(got, want)


def test_inconsistent_comparator_still_permutes(rng):
    # A comparator that is not a strict weak order (<=, or FLOAT < with NaNs) has
    # implementation-defined results in XLA; the merge sort must still return a
    # permutation of its input (nothing lost or duplicated).
    x = rng.integers(0, 4, 100).astype(np.float32)
    x[::7] = np.nan
    payload = np.arange(100, dtype=np.int32)
    for direction in ("le", "lt"):
        def comparator(b, p, q, i, j):
            return not_recognised(b, getattr(b, direction)(p, q))

        module, _ = build_sort([np.float32, np.int32], x.shape, comparator)
        _, perm = execute(module, x, payload)
        np.testing.assert_array_equal(np.sort(perm), payload)


def test_is_stable_property_and_negative_dimension():
    b = XlaBuilder("sort")
    x = b.parameter(0, "s32[2,3]")
    b.sort(x, dimension=-2, is_stable=True)
    module = b.build()
    op = next(op for op in module.walk() if isinstance(op, SortOp))
    assert op.dimension.value.data == 0 and op.is_stable == BoolAttr.from_bool(True)
    (got,) = execute(module, np.array([[3, 1, 2], [0, 5, -1]], np.int32))
    np.testing.assert_array_equal(got, [[0, 1, -1], [3, 5, 2]])


def test_sort_comparator_as_built_module(rng):
    sub = XlaBuilder("greater")
    sub.gt(sub.parameter(0, "f64[]"), sub.parameter(1, "f64[]"))
    greater = sub.build()
    b = XlaBuilder("sort")
    b.sort(b.parameter(0, "f64[10]"), greater)
    x = rng.standard_normal(10)
    (got,) = execute(b.build(), x)
    np.testing.assert_array_equal(got, np.sort(x)[::-1])


def test_seed_example_three_operands():
    # operand0 = [3, 1], operand1 = [42, 50], operand2 = [-3.0, 1.1], comparing operand0 only.
    b = XlaBuilder("sort")
    ps = [b.parameter(0, "s32[2]"), b.parameter(1, "s32[2]"), b.parameter(2, "f32[2]")]
    out = b.sort(ps, lambda p0, q0, p1, q1, p2, q2: p0.builder.lt(p0, q0))
    got = execute(b.build(list(out)), np.array([3, 1], np.int32), np.array([42, 50], np.int32),
                  np.array([-3.0, 1.1], np.float32))
    np.testing.assert_array_equal(got[0], [1, 3])
    np.testing.assert_array_equal(got[1], [50, 42])
    np.testing.assert_array_equal(got[2], np.array([1.1, -3.0], np.float32))


# ----------------------------------------------------------------------------
# Errors, verifier, round trip
# ----------------------------------------------------------------------------


def less(p, q, *rest):
    return p.builder.lt(p, q)


def test_builder_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[2,3]")
    y = b.parameter(1, "f32[3,2]")
    s = b.parameter(2, "f32[]")
    with pytest.raises(BuilderError, match=r"all operands must have the same dimensions: operand #0 is f32\[2,3\]"):
        b.sort([x, y], less)
    with pytest.raises(BuilderError, match="dimension 2 is out of range for operands of rank 2"):
        b.sort(x, less, dimension=2)
    with pytest.raises(BuilderError, match="dimension -1 is out of range for operands of rank 0"):
        b.sort(s, less)
    with pytest.raises(BuilderError, match=r"comparator must return pred\[\], returns \(f32\[\]\)"):
        b.sort(x, lambda p, q: p)
    with pytest.raises(BuilderError, match="comparator takes 2 parameters but must take 4"):
        b.sort([x, x], lambda p, q: p.builder.lt(p, q))
    with pytest.raises(BuilderError, match="expects at least one operand"):
        b.sort([], less)


SORT_TEXT = """
builtin.module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = hlo.sort %x {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = hlo.compare %a, %b {comparison_direction = "GT", compare_type = "TOTALORDER"} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    }
    func.return %r : tensor<4xf32>
  }
}
"""


def test_verifier_and_parsed_text():
    module = parse_module(SORT_TEXT)
    (got,) = execute(module, np.array([1, 3, -2, 0], np.float32))
    np.testing.assert_array_equal(got, [3, 1, 0, -2])
    with pytest.raises(HloVerifyError, match="dimension 1 is out of range"):
        parse_module(SORT_TEXT.replace("dimension = 0", "dimension = 1"))
    with pytest.raises(HloVerifyError, match="comparator takes"):
        parse_module(SORT_TEXT.replace("^bb0(%a: tensor<f32>, %b: tensor<f32>)", "^bb0(%a: tensor<f32>)")
                     .replace("%a, %b", "%a, %a"))


def test_round_trip(rng):
    module, _ = build_sort([np.float32, np.int32], (3, 8), jax_comparator(2), 1)
    text = str(module)
    again = parse_module(text)
    assert str(again) == text
    x = sample(rng, np.float32, (3, 8))
    y = sample(rng, np.int32, (3, 8))
    for got, want in zip(execute(again, x, y), execute(module, x, y)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("loop", [False, True], ids=["straight", "loop"])
def test_denormal_keys_tie_with_zeros_as_xla_compares_them(dtype, loop):
    """Long fuzz campaign (session 20): ``jnp.sort`` of bf16 rows holding denormals and zeros put the denormals in
    value order; XLA compares bf16 keys widened to f32, where the flush mode reads a denormal as zero, so they tie
    with +-0 and keep their order (as f32 denormals did here already). An f16 denormal is a normal f32: ordered."""
    import jax
    import jax.numpy as jnp
    import ml_dtypes

    import lowering
    from interop import import_jax

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype).type
    tiny = float(ml_dtypes.finfo(dt).tiny)
    row = np.array([3.0, tiny / 3, 0.0, -tiny / 5, -0.0, 1.0, -tiny / 7, tiny / 2, -1.0, np.nan, -np.inf], dt)
    x = np.stack([row, row[::-1], np.roll(row, 4)]).astype(dt)
    if loop:
        def fn(a):
            return jax.lax.fori_loop(0, 2, lambda i, v: jnp.sort(v, axis=-1)[:, ::-1] * 1, a)
    else:
        def fn(a):
            return jnp.sort(a, axis=-1), jnp.argsort(a[::-1], axis=-1)
    expected = [np.asarray(v) for v in jax.tree.leaves(jax.jit(fn)(x))]
    module = import_jax(fn, x)
    for options in ({"fusion": "never", "loop_compilation": "never"}, {"fusion": "always", "loop_compilation": "always"}):
        got = lowering.compile(module, **options)(x)
        for g, e in zip(got, expected, strict=True):
            assert np.asarray(g).tobytes() == e.tobytes(), (options, g, e)
