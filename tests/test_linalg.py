"""dot and dot_general: shapes, numerics and preferred element types against jax.jit(jax.lax), seed examples, errors.

Float results are compared within a tolerance that covers a different
summation order (XLA CPU's Eigen vs. NumPy's BLAS): ``k * eps`` of the
accumulation type times the operands' magnitudes, and one ULP of the result for
types narrower than 32 bits (the f32 accumulator is rounded once at the end,
so a sum that lands near a rounding boundary may round either way). Integer
and pred results must be exact (integer dots wrap around).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import xla_dialect
from xla_dialect import XlaBuilder
from xla_dialect.errors import BuilderError, HloVerifyError
from xla_dialect.ops.linalg import DotDimensionNumbers, higher_precision_type
from xla_dialect.types import element_type_from_dtype

from helpers import assert_close, execute, random_array, run_builder, sweep

bf16, f8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


def tolerance(result: np.ndarray, a: np.ndarray, b: np.ndarray, k: int) -> dict:
    """assert_close arguments for a dot result accumulated over ``k`` products."""
    if result.dtype.kind in "biu":
        return {}
    real = np.empty(0, result.dtype).real.dtype
    narrow = real.itemsize < 4
    eps = float(ml_dtypes.finfo(np.float32 if narrow else real).eps)

    def magnitude(x):
        x = np.abs(np.asarray(x).astype(np.complex128))
        x = x[np.isfinite(x)]
        return float(x.max()) if x.size else 0.0

    return {"atol": 4 * max(k, 1) * eps * magnitude(a) * magnitude(b), "max_ulp": 1 if narrow else 0}


def check(build, jax_fn, a, b, k):
    """Executor vs jax.jit for a dot over ``k`` products."""
    got = run_builder(build, a, b)
    want = np.asarray(jax.jit(jax_fn)(a, b))
    assert_close(got, want, **tolerance(want, a, b, k))


DTYPES = [np.float32, np.float64, bf16, np.float16, np.int32, np.int8, np.uint8, np.bool_, np.complex64]
DTYPE_IDS = ["f32", "f64", "bf16", "f16", "s32", "s8", "u8", "pred", "c64"]


@pytest.fixture(params=DTYPES, ids=DTYPE_IDS)
def dtype(request):
    return request.param


# ----------------------------------------------------------------------------
# dot
# ----------------------------------------------------------------------------

DOT_SHAPES = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)), ((0, 5), (5, 4)), ((3, 0), (0, 4)),
              ((3, 5), (5, 0)), ((0,), (0,)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("ls,rs", DOT_SHAPES)
def test_dot_matches_jax(rng, dtype, ls, rs):
    a, b = random_array(rng, ls, dtype), random_array(rng, rs, dtype)
    check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), a, b, ls[-1])


def test_dot_large_contraction(rng):
    a, b = random_array(rng, (17, 300), np.float32), random_array(rng, (300, 9), np.float32)
    check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), a, b, 300)


def test_seed_dot_semantics():
    # vector.vector -> scalar, matrix.vector -> vector, matrix.matrix -> matrix.
    v = np.array([1.0, 2.0, 3.0], np.float32)
    m = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]], np.float32)
    assert_close(run_builder(lambda b, x, y: b.dot(x, y), v, v), np.float32(14.0))
    assert_close(run_builder(lambda b, x, y: b.dot(x, y), m, v), np.array([7.0, 5.0], np.float32))
    assert_close(run_builder(lambda b, x, y: b.dot(x, y), m, m.T.copy()), np.array([[5.0, 2.0], [2.0, 2.0]], np.float32))


# ----------------------------------------------------------------------------
# dot_general
# ----------------------------------------------------------------------------

DOT_GENERAL_CASES = [
    ((2, 3, 4), (2, 4, 5), (([2], [1]), ([0], [0]))),
    ((2, 3, 4, 5), (2, 3, 5, 6), (([3], [2]), ([0, 1], [0, 1]))),
    ((3, 2, 4), (4, 5, 2), (([2], [0]), ([1], [2]))),
    ((2, 3, 4), (4, 3, 5), (([1, 2], [1, 0]), ([], []))),
    ((4, 2, 3), (3, 5, 2), (([2, 1], [0, 2]), ([], []))),
    ((3,), (4,), (([], []), ([], []))),
    ((3, 4), (3, 4), (([], []), ([0, 1], [0, 1]))),
    ((2, 5), (2, 5), (([1], [1]), ([0], [0]))),
    ((), (), (([], []), ([], []))),
    ((2, 3), (), (([], []), ([], []))),
    ((2, 0, 3), (2, 3, 4), (([2], [1]), ([0], [0]))),
    ((0, 3, 4), (0, 4, 2), (([2], [1]), ([0], [0]))),
    ((5, 3, 2, 4), (4, 2, 5, 6), (([3, 2], [0, 1]), ([0], [2]))),
]


@pytest.mark.parametrize("ls,rs,dn", DOT_GENERAL_CASES)
def test_dot_general_matches_jax(rng, ls, rs, dn):
    for dtype in (np.float32, np.int32):
        a, b = random_array(rng, ls, dtype), random_array(rng, rs, dtype)
        k = int(np.prod([ls[d] for d in dn[0][0]]))
        check(lambda bl, x, y: bl.dot_general(x, y, dn), lambda x, y: lax.dot_general(x, y, dn), a, b, k)


def test_dot_general_dtypes(rng, dtype):
    dn = (([2], [1]), ([0], [0]))
    a, b = random_array(rng, (3, 4, 6), dtype), random_array(rng, (3, 6, 2), dtype)
    check(lambda bl, x, y: bl.dot_general(x, y, dn), lambda x, y: lax.dot_general(x, y, dn), a, b, 6)


def test_seed_dot_general_examples():
    lhs = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    rhs = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], np.float32)
    dn = DotDimensionNumbers(lhs_contracting_dimensions=(1,), rhs_contracting_dimensions=(1,))
    assert_close(run_builder(lambda b, x, y: b.dot_general(x, y, dn), lhs, rhs),
                 np.array([[6.0, 12.0], [15.0, 30.0]], np.float32))
    lhs = np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]], np.float32)
    rhs = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]], np.float32)
    dn = {"lhs_contracting_dimensions": [2], "rhs_contracting_dimensions": [1],
          "lhs_batch_dimensions": [0], "rhs_batch_dimensions": [0]}
    assert_close(run_builder(lambda b, x, y: b.dot_general(x, y, dn), lhs, rhs), lhs)


def test_seed_batch_matmul_table(rng):
    # [b0, m, k] dot [b0, k, n] -> [b0, m, n]; [b0, b1, m, k] dot [b0, b1, k, n] -> [b0, b1, m, n].
    a, b = random_array(rng, (2, 3, 4), np.float64), random_array(rng, (2, 4, 5), np.float64)
    out = run_builder(lambda bl, x, y: bl.dot_general(x, y, (([2], [1]), ([0], [0]))), a, b)
    assert_close(out, a @ b, atol=1e-12)
    a, b = random_array(rng, (2, 2, 3, 4), np.float64), random_array(rng, (2, 2, 4, 5), np.float64)
    out = run_builder(lambda bl, x, y: bl.dot_general(x, y, (([3], [2]), ([0, 1], [0, 1]))), a, b)
    assert_close(out, a @ b, atol=1e-12)


def test_dimension_numbers_forms_agree(rng):
    a, b = random_array(rng, (2, 3, 4), np.float32), random_array(rng, (2, 4, 5), np.float32)
    forms = [(([2], [1]), ([0], [0])),
             DotDimensionNumbers((2,), (1,), (0,), (0,)),
             {"lhs_contracting_dimensions": [2], "rhs_contracting_dimensions": [1],
              "lhs_batching_dimensions": [0], "rhs_batching_dimensions": [0]}]
    outs = [run_builder(lambda bl, x, y, f=f: bl.dot_general(x, y, f), a, b) for f in forms]
    for out in outs[1:]:
        assert_close(out, outs[0])


# ----------------------------------------------------------------------------
# Numerics: wrap-around, special values, accumulation of narrow floats
# ----------------------------------------------------------------------------


def test_integer_dots_wrap_like_xla():
    a = np.full((1, 4), 2**30, np.int32)
    b = np.full((4, 1), 4, np.int32)
    check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), a, b, 4)
    assert run_builder(lambda bl, x, y: bl.dot(x, y), a, b)[0, 0] == 0
    u = np.full((1, 3), 200, np.uint8)
    assert run_builder(lambda bl, x, y: bl.dot(x, y), u, u.T.copy())[0, 0] == (3 * 200 * 200) % 256
    m = np.array([[np.iinfo(np.int64).max, 1]], np.int64)
    check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), m, np.array([[1], [1]], np.int64), 2)


def test_special_values_propagate(rng):
    for dtype in (np.float32, np.float64, bf16, np.float16):
        a = random_array(rng, (6, 7), dtype, special=True)
        b = random_array(rng, (7, 5), dtype, special=True)
        check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), a, b, 7)


def test_complex_nan_propagates(rng):
    a, b = random_array(rng, (6, 7), np.complex64), random_array(rng, (7, 5), np.complex64)
    a[1, 2] = complex(np.nan, 1.0)
    b[3, 4] = complex(2.0, np.nan)
    check(lambda bl, x, y: bl.dot(x, y), lambda x, y: lax.dot(x, y), a, b, 7)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 1, 4), (1, 5, 1), (4, 3, 6), (1, 5, 6), (16, 5, 16)])
def test_complex_infinities_like_xla(rng, m, k, n):
    # Eigen scales its sum by alpha = 1+0j with the textbook product, so (inf+1j)(1+1j) plus finite terms is
    # nan+nanj in a matrix dot; dots XLA rewrites (K == 1: multiply, M == N == 1: multiply + reduce) keep
    # the textbook inf+infj.
    for dtype in (np.complex64, np.complex128):
        a, b = random_array(rng, (m, k), dtype), random_array(rng, (k, n), dtype)
        a[0, 0], b[0, 0] = complex(np.inf, 1.0), complex(1.0, 1.0)
        got = run_builder(lambda bl, x, y: bl.dot(x, y), a, b)
        want = np.asarray(jax.jit(lax.dot)(a, b))
        assert_close(got[:1, :1], want[:1, :1])
        if k > 1 and (m, n) != (1, 1):
            assert np.isnan(got[0, 0].real) and np.isnan(got[0, 0].imag)
        else:
            assert got[0, 0] == complex(np.inf, np.inf)


# (batch, M, K, N): matrix dots XLA CPU gives to Eigen's gemm, and lhs row vectors (M == 1, its vector path).
COMPLEX_EXACT_SHAPES = [(0, 4, 3, 6), (0, 2, 2, 2), (0, 16, 16, 16), (0, 64, 64, 64), (0, 48, 70, 136),
                        (0, 300, 4, 300), (3, 4, 5, 6), (5, 8, 20, 8), (4, 2, 40, 30), (0, 1, 40, 30),
                        (3, 1, 7, 6), (0, 3, 0, 4)]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("batch,m,k,n", COMPLEX_EXACT_SHAPES)
def test_complex_dot_rounds_like_xla(rng, dtype, batch, m, k, n):
    # Bit-exact: XLA sums four real products in contraction order (two for M == 1); BLAS's complex gemm
    # (FMA, reordered sums) is off by hundreds of ULP where a component cancels.
    lead = (batch,) if batch else ()
    a, b = random_array(rng, lead + (m, k), dtype), random_array(rng, lead + (k, n), dtype)
    dn = (([len(lead) + 1], [len(lead)]), ([0], [0]) if batch else ([], []))
    got = run_builder(lambda bl, x, y: bl.dot_general(x, y, dn), a, b)
    assert_close(got, np.asarray(jax.jit(lambda x, y: lax.dot_general(x, y, dn))(a, b)))


def test_complex_dot_of_real_operands_converted_to_complex():
    # The corpus case (dot_general_bfloat16_4_3_complex64_3_6): the imaginary part of row 0, column 3 sums
    # three products that cancel; XLA's order gives -0.028159142, BLAS -0.028159462 (172 ULP apart).
    a = np.array([[-1.203125, 3.28125, -2.0625]], bf16).astype(np.complex64)
    b = np.array([0.912404239 + 0.554522038j, -2.31424093 + 1.29751551j, -0.259796768 + 1.7544111j], np.complex64)
    got = run_builder(lambda bl, x, y: bl.dot(x, y), np.repeat(a, 2, 0), np.stack([b, b], 1))
    assert_close(got, np.asarray(jax.jit(lax.dot)(np.repeat(a, 2, 0), np.stack([b, b], 1))))
    assert got[0, 0].imag == np.float32(-0.028159142)

def test_narrow_floats_accumulate_in_f32():
    # 4096 ones: an f16 accumulator would stop at 2048; XLA CPU accumulates in f32.
    for dtype in (np.float16, bf16):
        ones = np.ones((1, 4096), dtype)
        out = run_builder(lambda bl, x, y: bl.dot(x, y), ones, ones.T.copy())
        assert out.dtype == np.dtype(dtype) and float(out[0, 0]) == 4096.0


def test_pred_dot_is_or_of_ands(rng):
    a, b = rng.random((5, 6)) < 0.3, rng.random((6, 4)) < 0.3
    out = run_builder(lambda bl, x, y: bl.dot(x, y), a, b)
    np.testing.assert_array_equal(out, (a.astype(int) @ b.astype(int)) > 0)


# ----------------------------------------------------------------------------
# preferred_element_type
# ----------------------------------------------------------------------------

PREFERRED = [
    (np.int8, np.int32), (np.uint8, np.int32), (np.int8, np.uint32), (np.int32, np.int64), (np.int8, np.float32),
    (np.int32, np.float32), (bf16, np.float32), (np.float16, np.float32), (np.float32, bf16), (bf16, np.float16),
    (np.float16, bf16), (np.float32, np.float64), (np.float64, np.float32), (np.float32, np.int32),
    (np.float32, np.uint8), (np.complex64, np.float32), (np.float32, np.complex64), (np.complex64, np.complex128),
    (np.bool_, np.int32), (np.bool_, np.float32), (f8, np.float32), (f8, bf16), (np.float32, np.bool_),
]


@pytest.mark.parametrize("src,dst", PREFERRED, ids=[f"{np.dtype(s).name}->{np.dtype(d).name}" for s, d in PREFERRED])
def test_preferred_element_type_matches_jax(rng, src, dst):
    a, b = random_array(rng, (8, 40), src), random_array(rng, (40, 6), src)
    if np.dtype(src).kind in "iu" and np.dtype(dst).kind in "iu":
        a, b = a // 2, b // 2  # keep s32 -> s64 sums meaningful and exercise wrap-around elsewhere
    got = run_builder(lambda bl, x, y: bl.dot(x, y, preferred_element_type=dst), a, b)
    want = np.asarray(jax.jit(lambda x, y: lax.dot(x, y, preferred_element_type=dst))(a, b))
    tol = tolerance(want, a, b, 40)
    if np.dtype(dst).kind in "iub" and np.dtype(src).kind in "fc":
        # The float sum is converted (truncated) to an integer: a last-bit difference in the float sum
        # can move it across an integer, so allow one unit there.
        assert got.dtype == want.dtype
        assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1
        return
    assert_close(got, want, **tol)


def test_preferred_element_type_spellings(rng):
    a, b = random_array(rng, (2, 3), np.int8), random_array(rng, (3, 2), np.int8)
    outs = [run_builder(lambda bl, x, y, p=p: bl.dot(x, y, preferred_element_type=p), a, b)
            for p in ("s32", np.int32, np.dtype("int32"), element_type_from_dtype(np.int32).mlir)]
    for out in outs:
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_result_conversion_saturates_like_xla():
    big = np.full((1, 2), 1e6, np.float32)
    for sign, expected in ((1, np.iinfo(np.int32).max), (-1, np.iinfo(np.int32).min)):
        out = run_builder(lambda bl, x, y: bl.dot(x, y, preferred_element_type="s32"), big, sign * big.T)
        assert out[0, 0] == expected
    nan = np.full((1, 2), np.nan, np.float32)
    assert run_builder(lambda bl, x, y: bl.dot(x, y, preferred_element_type="s32"), nan, big.T)[0, 0] == 0


def test_higher_precision_type_order():
    from xdsl.dialects.builtin import BFloat16Type, ComplexType, Float16Type, Float32Type, IntegerType, Signedness

    f16, b16, f32 = Float16Type(), BFloat16Type(), Float32Type()
    assert higher_precision_type(f16, b16) == b16  # more exponent range wins
    assert higher_precision_type(IntegerType(32), f16) == f16  # floats beat ints
    assert higher_precision_type(f32, ComplexType(f32)) == ComplexType(f32)
    assert higher_precision_type(IntegerType(32, Signedness.UNSIGNED), IntegerType(32)) == IntegerType(32)
    assert higher_precision_type(IntegerType(1), IntegerType(8)) == IntegerType(8)


# ----------------------------------------------------------------------------
# Precision config
# ----------------------------------------------------------------------------


def test_precision_config_is_recorded_and_does_not_change_cpu_results(rng):
    a, b = random_array(rng, (4, 5), np.float32), random_array(rng, (5, 3), np.float32)
    outs = []
    for precision in (None, "DEFAULT", "highest", ("HIGH", "HIGHEST"), lax.Precision.HIGHEST):
        bl = XlaBuilder("p")
        x, y = bl.parameter(0, "f32[4,5]"), bl.parameter(1, "f32[5,3]")
        bl.dot(x, y, precision_config=precision)
        module = bl.build()
        if precision is not None:
            assert "precision_config = [" in str(module)
        outs.append(execute(module, a, b)[0])
    for out in outs[1:]:
        assert_close(out, outs[0])


# ----------------------------------------------------------------------------
# Errors at the builder call
# ----------------------------------------------------------------------------


def _builder(*shapes):
    b = XlaBuilder("errors")
    return b, [b.parameter(i, s) for i, s in enumerate(shapes)]


ERROR_CASES = [
    ("dot contracting size", ["f32[2,5]", "f32[3,2]"], lambda b, x, y: b.dot(x, y),
     r"contracting dimension 1 of lhs f32\[2,5\]\{1,0\} has size 5 but the matching contracting dimension 0 "
     r"of rhs f32\[3,2\]\{1,0\} has size 3"),
    ("dot rank 3", ["f32[2,3,4]", "f32[3,2]"], lambda b, x, y: b.dot(x, y), "rank 1 or 2"),
    ("dot scalar", ["f32[]", "f32[]"], lambda b, x, y: b.dot(x, y), "rank 1 or 2"),
    ("dot element types", ["f32[2]", "s32[2]"], lambda b, x, y: b.dot(x, y), "same element type"),
    ("dot tuple", ["(f32[2])", "f32[2]"], lambda b, x, y: b.dot(x, y), "lhs must be an array"),
    ("contracting count", ["f32[2,3]", "f32[3,2]"],
     lambda b, x, y: b.dot_general(x, y, (([1], [0, 1]), ([], []))), "same number of contracting dimensions"),
    ("contracting range", ["f32[2,3]", "f32[3,2]"],
     lambda b, x, y: b.dot_general(x, y, (([2], [0]), ([], []))),
     r"lhs_contracting_dimensions \[2\] has dimension 2 out of range for lhs f32\[2,3\]\{1,0\} of rank 2"),
    ("negative dimension", ["f32[2,3]", "f32[3,2]"],
     lambda b, x, y: b.dot_general(x, y, (([1], [-1]), ([], []))), "out of range"),
    ("contracting duplicate", ["f32[3,3]", "f32[3,3]"],
     lambda b, x, y: b.dot_general(x, y, (([1, 1], [0, 1]), ([], []))), "appears more than once"),
    ("batch and contracting", ["f32[3,3]", "f32[3,3]"],
     lambda b, x, y: b.dot_general(x, y, (([0], [0]), ([0], [1]))),
     "lhs dimension 0 appears more than once among the lhs batching and contracting dimensions"),
    ("batch count", ["f32[2,3,4]", "f32[2,4]"],
     lambda b, x, y: b.dot_general(x, y, (([2], [1]), ([0], []))), "same number of batching dimensions"),
    ("batch size", ["f32[2,3,4]", "f32[3,4,5]"],
     lambda b, x, y: b.dot_general(x, y, (([2], [1]), ([0], [0]))),
     r"batching dimension 0 of lhs f32\[2,3,4\]\{2,1,0\} has size 2 but the matching batching dimension 0 "
     r"of rhs f32\[3,4,5\]\{2,1,0\} has size 3"),
    ("narrowing int", ["s32[2,3]", "s32[3,2]"], lambda b, x, y: b.dot(x, y, preferred_element_type="s16"),
     "must not be narrower than the operand element type i32"),
    ("narrowing int to float", ["s32[2,3]", "s32[3,2]"], lambda b, x, y: b.dot(x, y, preferred_element_type="f16"),
     "must not be narrower"),
    ("narrowing pred", ["s8[2,3]", "s8[3,2]"], lambda b, x, y: b.dot(x, y, preferred_element_type="pred"),
     "must not be narrower"),
    ("bad preferred", ["f32[2,3]", "f32[3,2]"], lambda b, x, y: b.dot(x, y, preferred_element_type="f31"),
     "unknown XLA primitive type"),
    ("bad precision", ["f32[2,3]", "f32[3,2]"], lambda b, x, y: b.dot(x, y, precision_config="FAST"),
     "precision 'FAST' is not one of DEFAULT, HIGH, HIGHEST"),
    ("bad dimension numbers", ["f32[2,3]", "f32[3,2]"], lambda b, x, y: b.dot_general(x, y, 5),
     "cannot read dot dimension numbers"),
]


@pytest.mark.parametrize("shapes,build,message", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_builder_errors(shapes, build, message):
    b, params = _builder(*shapes)
    with pytest.raises(BuilderError, match=message) as info:
        build(b, *params)
    assert str(info.value).startswith(("XlaBuilder.dot:", "XlaBuilder.dot_general:"))


# ----------------------------------------------------------------------------
# Verifier errors on hand-written IR, and the print/parse round trip
# ----------------------------------------------------------------------------

BAD_IR = [
    ("hlo.dot %0, %1 : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>", r"shape inference gives f32\[2,4\]"),
    ("hlo.dot %0, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>", "contracting dimension 1 of lhs"),
    ("hlo.dot %0, %1 {precision_config = [\"DEFAULT\"]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>",
     "precision_config must have 0 or 2 entries"),
    ("hlo.dot %0, %1 {precision_config = [\"LOW\", \"LOW\"]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> "
     "tensor<2x4xf32>", "precision 'LOW'"),
    ("hlo.dot_general %0, %1 {lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = "
     "array<i64: 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>", "has size 2 but the matching"),
    ("hlo.dot_general %0, %1 {lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = "
     "array<i64: 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<4x2xf32>", r"shape inference gives f32\[2,4\]"),
    ("hlo.dot_general %2, %2 {lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = "
     "array<i64: 0>} : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x2xi8>", "must not be narrower"),
]


@pytest.mark.parametrize("op_text,message", BAD_IR)
def test_verifier_rejects_bad_ir(op_text, message):
    text = ("func.func @main(%0: tensor<2x3xf32>, %1: tensor<3x4xf32>, %2: tensor<2x2xi32>) -> () {\n"
            f"  %3 = {op_text}\n  func.return\n}}")
    with pytest.raises(HloVerifyError, match=message):
        xla_dialect.parse_module(text)


def test_dot_general_without_dimension_properties_is_an_outer_product(rng):
    text = ("func.func @main(%0: tensor<2xf32>, %1: tensor<3xf32>) -> tensor<2x3xf32> {\n"
            "  %2 = hlo.dot_general %0, %1 : (tensor<2xf32>, tensor<3xf32>) -> tensor<2x3xf32>\n"
            "  func.return %2 : tensor<2x3xf32>\n}")
    a, b = random_array(rng, (2,), np.float32), random_array(rng, (3,), np.float32)
    assert_close(execute(xla_dialect.parse_module(text), a, b)[0], np.outer(a, b))


def test_print_parse_round_trip_of_every_op(rng):
    """A module using every data-movement and linalg op prints, parses back identically and runs the same."""
    b = XlaBuilder("all")
    x = b.parameter(0, "f32[2,3]")
    w = b.parameter(1, "bf16[3,4]")
    v = b.parameter(2, "f32[]")
    y = b.dot(x, b.transpose(b.reshape(b.broadcast(b.slice(x, [0, 0], [1, 3], [1, 1]), [1]), [1, 3]), [1, 0]),
              precision_config="HIGHEST")                                             # f32[2,1]
    y = b.broadcast_in_dim(b.reshape(y, [2]), [2, 3], [0])                         # f32[2,3]
    y = b.pad(b.concat_in_dim([y, x], 0), v, [(0, 0, 0), (1, 0, 0)])            # f32[4,4]
    z = b.dot_general(b.rev(y, [1]), b.reshape(b.broadcast(y, [2]), [2, 4, 4]), (([1], [1]), ([], [])),
                      precision_config=("DEFAULT", "HIGH"))                        # f32[4,2,4]
    wz = b.dot_general(w, w, (([0], [0]), ([], [])), preferred_element_type=np.float32)  # f32[4,4]
    module = b.build([z, wz])
    text = str(module)
    for name in ("dot", "dot_general", "broadcast", "broadcast_in_dim", "reshape", "transpose", "slice",
                 "concatenate", "pad", "reverse"):
        assert f"hlo.{name} " in text
    parsed = xla_dialect.parse_module(text)
    assert parsed.is_structurally_equivalent(module)
    assert str(parsed) == text
    args = (random_array(rng, (2, 3), np.float32), random_array(rng, (3, 4), bf16), np.float32(0.5))
    for got, want in zip(execute(parsed, *args), execute(module, *args)):
        assert_close(got, want)


# Small f32/f64 products: XLA CPU's summation order (lowering/kernels/small_dot.py), measured on AVX-512 hosts.
_SMALL_DOTS_AS_XLA = [(1, 7, 2), (1, 2, 2), (1, 7, 3), (1, 16, 8), (1, 5, 17), (1, 33, 9), (1, 3, 100), (1, 9, 63), (1, 9, 10), (1, 9, 57), (4, 8, 4), (8, 8, 8), (16, 16, 16), (4, 32, 16),
                      (3, 100, 5), (7, 7, 7), (32, 32, 32), (64, 64, 64), (4, 64, 128), (2, 12, 3), (16, 256, 17)]
_SMALL_F64_DOTS_AS_XLA = [(1, 7, 2), (1, 2, 2), (1, 7, 3), (1, 9, 5), (1, 33, 17), (1, 16, 8), (8, 8, 8), (16, 16, 16), (4, 32, 16), (3, 100, 5),
                          (32, 32, 32), (64, 64, 64), (4, 64, 128), (16, 256, 17)]


def _avx512_host() -> bool:
    """Whether this CPU has what the orders of lowering/kernels/small_dot.py were measured on (AVX-512, FMA3, AVX2)."""
    from lowering.kernels.host import measured_host

    return measured_host()


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("dtype, mkn", [(np.float32, s) for s in _SMALL_DOTS_AS_XLA]
                         + [(np.float64, s) for s in _SMALL_F64_DOTS_AS_XLA])
def test_small_dots_sum_as_xla_cpu(dtype, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    f = jax.jit(lambda a, b: a @ b)
    for _ in range(5):
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        np.testing.assert_array_equal(run_builder(lambda bld, x, y: bld.dot(x, y), a, b), np.asarray(f(a, b)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_dot_zero_signs_as_xla_cpu(dtype):
    # Which chains start from zero and which from the first product shows in the sign of a zero result:
    # [-1, ..., -1] @ zeros is -0 in the last N mod (32 bytes / itemsize) columns of a vector-matrix product,
    # +0 elsewhere; a contraction of length 1 is a plain product (-0).
    f = jax.jit(lambda a, b: a @ b)
    for m, k, n in [(1, 8, 2), (1, 8, 5), (1, 8, 9), (1, 8, 12), (1, 8, 17), (1, 8, 64), (1, 2, 1), (2, 7, 1),
                    (4, 8, 4), (8, 8, 8), (3, 1, 4)]:
        a, b = -np.ones((m, k), dtype), np.zeros((k, n), dtype)
        ours = run_builder(lambda bld, x, y: bld.dot(x, y), a, b)
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(np.asarray(f(a, b))), err_msg=f"{(m, k, n)}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_pair_of_products_calls_each_orders_kernel(dtype):
    """small_dot_pair (two products of a compiled loop's body on two threads) calls each order's kernel at its
    address: the same bits as the kernels called one by one, for pairs of different orders."""
    from lowering.kernels import small_dot as sd
    from lowering.runtime.loop_runtime import current_mxcsr

    rng = np.random.default_rng(3)
    shapes = [(1, 7, 2), (16, 16, 1), (12, 8, 8), (8, 8, 8), (3, 100, 5), (64, 64, 64), (1, 40, 1), (4, 4, 3)]
    kernels = set()
    for (m0, k0, n0), (m1, k1, n1) in zip(shapes, shapes[1:] + shapes[:1]):
        operands, orders = [], []
        for m, k, n in ((m0, k0, n0), (m1, k1, n1)):
            a, b = rng.standard_normal((1, m, k)).astype(dtype), rng.standard_normal((1, k, n)).astype(dtype)
            operands.append((a, b, np.empty((1, m, n), dtype)))
            orders.append(sd.small_dot_order(1, m, k, n, np.dtype(dtype)))
            kernels.add(sd.order_kernel(orders[-1]).__name__)
        (a0, b0, c0), (a1, b1, c1) = operands
        sd.small_dot_pair(a0, b0, c0, orders[0], sd.kernel_address(orders[0], dtype),
                          a1, b1, c1, orders[1], sd.kernel_address(orders[1], dtype), np.int32(current_mxcsr()))
        for (a, b, c), order in zip(operands, orders):
            alone = np.empty_like(c)
            sd.order_kernel(order)(a, b, alone, order)
            np.testing.assert_array_equal(c.view(f"u{c.itemsize}"), alone.view(f"u{c.itemsize}"),
                                          err_msg=f"{a.shape} @ {b.shape} order {order}")
    assert len(kernels) >= 3, kernels


def test_small_dots_are_one_definition_in_compiled_loops():
    # A small product in a loop body calls the same small_dot as the interpreter's dot kernel: the same bits.
    import lowering
    from interop import import_jax

    rng = np.random.default_rng(7)
    xs = rng.standard_normal((6, 4, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 8)) * 0.5).astype(np.float32)

    def fn(h, xs, w):
        return jax.lax.scan(lambda h, x: (jnp.sin(h @ w + x), h[0, 0]), h, xs)

    module = import_jax(fn, xs[0], xs, w)
    compiled = lowering.compile(module, loop_compilation="always")(xs[0], xs, w)
    interpreted = lowering.compile(module, loop_compilation="never")(xs[0], xs, w)
    for c, i in zip(compiled, interpreted):
        np.testing.assert_array_equal(np.asarray(c).view(np.uint32), np.asarray(i).view(np.uint32))
    theirs = jax.jit(fn)(xs[0], xs, w)
    np.testing.assert_array_equal(np.asarray(compiled[0]), np.asarray(theirs[0]))


# Vector dots [1, K] @ [K, 1] with K > 32: XLA CPU computes reduce(multiply) summed in windows of 32 (the tree
# order of lowering/kernels/small_dot.py; issue 30, item 9).
_VECTOR_DOT_LENGTHS = [33, 34, 40, 47, 63, 64, 65, 96, 100, 129, 256, 257, 1000, 1025, 3000]


def _vector_dot_bits(dtype, a, b, loops="never"):
    import lowering
    from interop import import_jax

    module = import_jax(jnp.matmul, a, b)
    got = np.asarray(lowering.compile(module, loop_compilation=loops)(a, b)[0])
    want = np.asarray(jax.jit(jnp.matmul)(a, b))
    return got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("k", _VECTOR_DOT_LENGTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.sample(10)
def test_vector_dots_sum_in_windows_as_xla_cpu(dtype, k):
    # Operands of mixed magnitudes: another order of the sum changes the last bits of most results.
    rng = np.random.default_rng(k)
    for batch in (None, 3):
        if batch and batch * k >= 4096:
            continue
        lead = () if batch is None else (batch,)
        for _ in range(3):
            scale = 10.0 ** rng.integers(-3, 4, (*lead, 1, k))
            a = (rng.standard_normal((*lead, 1, k)) * scale).astype(dtype)
            b = rng.standard_normal((*lead, k, 1)).astype(dtype)
            got, want = _vector_dot_bits(dtype, a, b)
            np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}")


@pytest.mark.parametrize("k", [33, 40, 64, 100])
def test_vector_dots_with_infinite_partial_products_as_xla_cpu(k):
    # Products that overflow to +inf and -inf: XLA rounds each product (its multiply) before the windowed sum,
    # so both infinities in the sum give NaN; an FMA chain kept the first one's sign (issue 30, item 9).
    big = np.float32(3e38)
    a = np.ones((1, k), np.float32)
    b = np.ones((k, 1), np.float32)
    a[0, 3], b[3, 0] = big, np.float32(4)  # +inf
    a[0, k - 2], b[k - 2, 0] = big, np.float32(-4)  # -inf, in another window
    cases = {"two windows": (a, b)}
    one = a.copy(), b.copy()
    one[0][0, 5], one[1][5, 0] = big, np.float32(-4)  # -inf in the first window too
    one[0][0, k - 2] = np.float32(1)
    cases["one window"] = one
    just_one = a.copy(), b.copy()
    just_one[0][0, k - 2] = np.float32(1)  # a single overflowing product: +inf
    cases["one infinity"] = just_one
    for name, (x, y) in cases.items():
        for loops in ("never", "always"):
            got, want = _vector_dot_bits(np.float32, x, y, loops)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, loop compilation {loops}")


def test_vector_dots_of_negative_zero_products_are_positive_zero():
    # Each window's sum starts from +0 (XLA's reduce_window init): products that are all -0 sum to +0.
    for k in (33, 100):
        a, b = -np.ones((1, k), np.float32), np.zeros((k, 1), np.float32)
        got, want = _vector_dot_bits(np.float32, a, b)
        np.testing.assert_array_equal(got, want)
        assert got.ravel()[0] == 0


def test_vector_dots_in_compiled_loops_are_the_kernels_tree():
    # A vector dot inside a loop body calls the same small_dot (tree order) as the interpreter's dot kernel.
    import lowering
    from interop import import_jax

    rng = np.random.default_rng(33)
    v = (rng.standard_normal((1, 40)) * 10.0 ** rng.integers(-3, 4, (1, 40))).astype(np.float32)
    w = rng.standard_normal((40, 1)).astype(np.float32)

    def fn(v, w):
        return jax.lax.fori_loop(0, 3, lambda i, x: x * 0.5 + jnp.tanh(x @ w), v)

    from xdsl.dialects import func

    from lowering.executor import compiled_loops
    from lowering.kernels.small_dot import TREE
    from passes.pipelines import prepare_for_execution
    from xla_dialect.types import numpy_dtype

    module = import_jax(fn, v, w)
    prepared = prepare_for_execution(import_jax(fn, v, w))
    functions = {op.sym_name.data: op for op in prepared.ops if isinstance(op, func.FuncOp)}
    (loop,) = [op for op in prepared.walk() if op.name == "hlo.while"]
    assert f", {TREE})" in compiled_loops.loop_source(loop, functions, numpy_dtype)[0]  # tree_kernel(a, b, c, TREE)
    compiled = np.asarray(lowering.compile(module, loop_compilation="always")(v, w)[0])
    interpreted = np.asarray(lowering.compile(module, loop_compilation="never")(v, w)[0])
    np.testing.assert_array_equal(compiled.view(np.uint32), interpreted.view(np.uint32))
    np.testing.assert_array_equal(compiled.view(np.uint32), np.asarray(jax.jit(fn)(v, w)).view(np.uint32))


# Matrix-vector products [M, K] @ [K, 1], M >= 2: XLA CPU's row-major GEMV emitter (the row-tiles order of
# lowering/kernels/small_dot.py; issue 30).
_MATRIX_VECTOR_SHAPES = [(2, 2), (3, 7), (2, 8), (8, 8), (9, 17), (12, 33), (16, 100), (20, 13), (100, 256),
                         (1000, 40)]


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("mk", _MATRIX_VECTOR_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.sample(8)
def test_matrix_vector_products_sum_in_row_tiles_as_xla_cpu(dtype, mk):
    m, k = mk
    rng = np.random.default_rng(m * 1000 + k)
    for batch in (None, 3):
        lead = () if batch is None else (batch,)
        for _ in range(2):
            a = (rng.standard_normal((*lead, m, k)) * 10.0 ** rng.integers(-2, 3, (*lead, m, k))).astype(dtype)
            b = rng.standard_normal((*lead, k, 1)).astype(dtype)
            got, want = _vector_dot_bits(dtype, a, b)
            np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}")


def test_matrix_vector_products_in_compiled_loops_are_the_kernels():
    import lowering
    from interop import import_jax

    rng = np.random.default_rng(17)
    w = (rng.standard_normal((12, 12)) * 10.0 ** rng.integers(-2, 3, (12, 12))).astype(np.float32)
    v = rng.standard_normal((12, 1)).astype(np.float32)

    def fn(w, v):
        return jax.lax.fori_loop(0, 3, lambda i, x: jnp.tanh(w @ x) + x, v)

    module = import_jax(fn, w, v)
    compiled = np.asarray(lowering.compile(module, loop_compilation="always")(w, v)[0])
    interpreted = np.asarray(lowering.compile(module, loop_compilation="never")(w, v)[0])
    np.testing.assert_array_equal(compiled.view(np.uint32), interpreted.view(np.uint32))
    np.testing.assert_array_equal(compiled.view(np.uint32), np.asarray(jax.jit(fn)(w, v)).view(np.uint32))


# Inside the while loops XLA CPU compiles whole (passes/small_loops.py) its dot emitters use 64-byte vectors.
def test_small_loop_dots_take_the_vectors_llvm_prefers(monkeypatch):
    """The dots of the loops XLA compiles whole follow 64-byte vectors on the AMD host, 32-byte ones on the Xeon
    (LLVM's tuning for Intel's AVX-512 cores), as :func:`test_dots_in_small_loops_sum_with_wide_vectors_as_xla_cpu`
    checks on whichever host runs it."""
    from lowering.kernels import host, small_dot

    for vendor, avx512, wide in [("AuthenticAMD", True, True), ("GenuineIntel", True, False), ("", False, False)]:
        monkeypatch.setattr(host, "host_properties", lambda v=vendor, a=avx512: {"vendor": v, "avx512f": a})
        assert host.prefers_wide_vectors() is wide
        order = small_dot.small_dot_order(1, 1, 10, 10, np.float32, 64)
        assert bool(order & small_dot.WIDE_VECTORS) is wide


_SMALL_LOOP_DOTS = [(1, 7, 7), (1, 10, 10), (1, 16, 9), (1, 9, 17), (1, 5, 24), (1, 12, 31), (4, 9, 1), (3, 17, 1),
                    (2, 40, 1), (1, 40, 1), (3, 5, 5), (1, 8, 8), (2, 8, 1), (4, 4, 3)]


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
# (each compiles a loop and runs jax.jit: ~3 s cold; six of the 28 in the default run, all with -m slow)
@pytest.mark.parametrize("dtype, mkn", sweep(
    [np.float32, np.float64], [(mkn,) for mkn in _SMALL_LOOP_DOTS],
    ids=[lambda t: np.dtype(t).name, lambda v: "x".join(map(str, v[0]))], keep=6))
@pytest.mark.sample(3)
def test_dots_in_small_loops_sum_with_wide_vectors_as_xla_cpu(dtype, mkn):
    import lowering
    from interop import import_jax
    from passes.pipelines import prepare_for_execution
    from passes.small_loops import SMALL_CALL

    m, k, n = mkn
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)

    def fn(x, w):  # the dot reads the loop state (x * (i + 1)): XLA cannot hoist it out of the loop
        acc = jnp.zeros((m, n), dtype)
        return jax.lax.fori_loop(0, 2, lambda i, s: (s[0], (s[0] * (i + 1).astype(dtype)) @ w), (x, acc))[1]

    cases = [(-np.ones((m, k), dtype), np.zeros((k, n), dtype))]  # zero signs: where each chain starts
    for _ in range(3):
        cases.append(((rng.standard_normal((m, k)) * 10.0 ** rng.integers(-2, 3, (m, k))).astype(dtype),
                      rng.standard_normal((k, n)).astype(dtype)))
    module = import_jax(fn, *cases[0])
    # The pass finds the loops XLA compiles whole (f32 (2, 40, 1), f64 (1, 10, 10) and larger are not).
    xla_small = "xla_cpu_small_call" in jax.jit(fn).lower(*cases[0]).compile().as_text()
    marked = [op for op in prepare_for_execution(module).walk() if SMALL_CALL in op.attributes and "dot" in op.name]
    assert len(marked) == (1 if xla_small else 0)
    for x, w in cases:
        want = np.asarray(jax.jit(fn)(x, w))
        for loop_compilation in ("never", "always"):
            got = np.asarray(lowering.compile(module, loop_compilation=loop_compilation)(x, w)[0])
            np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"),
                                          err_msg=f"loop compilation {loop_compilation}")


# f32 [M, K] @ [K, N], M >= 2, 2 <= N <= 16: four lanes and a remainder, or one chain, by XLA CPU's measured table
# (lowering/kernels/small_dot.py; issue 30: these were 'not identified' for K not a multiple of 4).
_FOUR_LANE_REMAINDERS = [(2, 9, 2), (3, 10, 8), (8, 11, 5), (5, 13, 8), (4, 4, 9), (3, 7, 12), (16, 14, 16),
                         (5, 21, 10), (3, 33, 16), (9, 101, 7), (4, 255, 3), (12, 8, 8), (40, 19, 13)]
_ONE_CHAIN_TILES = [(3, 13, 12), (4, 10, 9), (2, 5, 16), (6, 17, 11), (3, 3, 15), (4, 6, 5), (6, 7, 7)]


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("mkn", _FOUR_LANE_REMAINDERS + _ONE_CHAIN_TILES, ids=str)
def test_f32_products_in_four_lanes_with_a_remainder_as_xla_cpu(mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    for batch in (None, 2):
        lead = () if batch is None else (batch,)
        for _ in range(2):
            a = (rng.standard_normal((*lead, m, k)) * 10.0 ** rng.integers(-2, 3, (*lead, m, k))).astype(np.float32)
            b = rng.standard_normal((*lead, k, n)).astype(np.float32)
            got, want = _vector_dot_bits(np.float32, a, b)
            np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}")


# The shapes issue 30 left 'not identified': XLA CPU runs them with YNNPACK kernels it picks by a cost model
# (lowering/kernels/ynnpack_dots.py) or, for f64 products below 8 x 8 x 8, with Eigen (no FMA; the last column of
# an odd N in four lanes of K). lowering/kernels/small_dot.py replays both.
_YNNPACK_F32 = [(2, 5, 8), (3, 2, 8), (11, 2, 5), (8, 3, 5), (9, 7, 3), (8, 6, 8), (10, 4, 7), (8, 2, 4), (8, 5, 5),
                (53, 2, 11), (2, 67, 512)]
_YNNPACK_F64 = [(4, 8, 4), (2, 12, 3), (2, 8, 2), (8, 6, 8), (2, 57, 300)]
_EIGEN_F64 = [(7, 7, 7), (5, 6, 5), (4, 4, 3), (6, 7, 7), (4, 5, 6), (3, 3, 3)]


def _product_bits(fn, a, b, loops="never"):
    import lowering
    from interop import import_jax

    got = np.asarray(lowering.compile(import_jax(fn, a, b), loop_compilation=loops)(a, b)[0])
    want = np.asarray(jax.jit(fn)(a, b))
    return got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")


def _mixed(rng, shape, dtype):
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape)).astype(dtype)


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("dtype, mkn", [pytest.param(np.float32, s, id=f"f32-{s}") for s in _YNNPACK_F32]
                         + [pytest.param(np.float64, s, id=f"f64-{s}") for s in _YNNPACK_F64 + _EIGEN_F64])
def test_products_sum_as_xla_cpus_ynnpack_and_eigen_kernels(dtype, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    for batch in (None, 3):
        if batch and m * k * n > 10_000:
            continue
        lead = () if batch is None else (batch,)
        for _ in range(3):
            a, b = _mixed(rng, (*lead, m, k), dtype), rng.standard_normal((*lead, k, n)).astype(dtype)
            got, want = _product_bits(jnp.matmul, a, b)
            np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}")


def _times_transposed(x, w):
    return x @ w.T


def _transposed_times(x, g):
    return x.T @ g


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_products_with_a_transposed_operand_sum_as_xla_cpu(dtype):
    # x @ w.T: XLA folds the transpose into the dot and YNNPACK always packs such a w (another kernel choice than
    # for x @ w); x.T @ g (jax.grad's weight gradient): f32 XLA's own emitter, one chain; f64 Eigen's (its 8-column
    # blocks, even/odd accumulators after them, the last odd column in four lanes). Below 8 x 8 x 8 as x @ w.
    rng = np.random.default_rng(30)
    cases = [(_times_transposed, (7, 12, 32)), (_times_transposed, (26, 20, 19)), (_times_transposed, (13, 27, 36)),
             (_times_transposed, (5, 6, 7)), (_times_transposed, (4, 4, 3)), (_transposed_times, (37, 4, 12)),
             (_transposed_times, (6, 7, 5)), (_transposed_times, (10, 31, 6)), (_transposed_times, (27, 76, 15)),
             (_transposed_times, (9, 12, 7)), (_transposed_times, (5, 20, 13))]
    for fn, (m, k, n) in cases:
        for _ in range(3):
            if fn is _times_transposed:
                a, b = _mixed(rng, (m, k), dtype), rng.standard_normal((n, k)).astype(dtype)
            else:
                a, b = _mixed(rng, (k, m), dtype), rng.standard_normal((k, n)).astype(dtype)
            got, want = _product_bits(fn, a, b)
            np.testing.assert_array_equal(got, want, err_msg=f"{fn.__name__} {(m, k, n)}")


def _attention_scores(x):
    # q @ k.T over heads split out of the features: both transposes move a batch dimension (h), so XLA copies them
    # out row-major and its dot reads [b, h, s, d] x [b, h, d, t] (YNNPACK's kernel), not a folded transpose
    q, k, _ = jnp.split(x, 3, axis=-1)
    split = lambda t: t.reshape(2, 48, 4, 16).transpose(0, 2, 1, 3)  # noqa: E731
    return split(q) @ split(k).transpose(0, 1, 3, 2)


def _attention_einsum(x):
    # "bshd,bthd->bhst" (flax's attention): batch dimensions not leading, so XLA's DotDecomposer transposes both
    # operands to [b, h, s, d] and [b, h, d, t], copied out
    q, k, _ = jnp.split(x, 3, axis=-1)
    return jnp.einsum("bshd,bthd->bhst", q.reshape(2, 48, 4, 16), k.reshape(2, 48, 4, 16))


def _batched_transposed_times(p, v):
    # p.T @ v per batch (attention's gradients): the transpose keeps the batch dimensions and folds into the dot,
    # which XLA runs as Eigen's contraction, one per batch
    return jnp.swapaxes(p, -1, -2) @ v


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("fn", [_attention_scores, _attention_einsum, _batched_transposed_times],
                         ids=["heads-split", "einsum-bshd", "batched-x.T@g"])
def test_products_of_operands_xla_lays_out_for_its_dot_sum_as_xla_cpu(fn):
    from lowering.kernels import eigen_dots
    from lowering.runtime.workers import usable_cpus

    if fn is _batched_transposed_times and not (eigen_dots.measured_eigen_host()
                                                and usable_cpus() <= eigen_dots.MEASURED_CPUS):
        pytest.skip("Eigen's plans were measured on hosts with known cache sizes and at most two CPUs")
    rng = np.random.default_rng(31)
    if fn is _batched_transposed_times:
        args = (rng.standard_normal((3, 2, 70, 40), dtype=np.float32),
                rng.standard_normal((3, 2, 70, 24), dtype=np.float32))
    else:
        args = (rng.standard_normal((2, 48, 192), dtype=np.float32),)
    import lowering
    from interop import import_jax

    got = np.asarray(lowering.compile(import_jax(fn, *args))(*args)[0])
    want = np.asarray(jax.jit(fn)(*args))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _both_transposed(a, b):
    return a.T @ b.T


def _dense_weight_gradient(x, g):
    # jax's gradient of x @ w for x (batch, sequence, features): transpose(dot_general(g, x)) contracting batch and
    # sequence, which XLA canonicalizes (g copied out to (N, K)) before swapping the operands: x.T @ g.T to Eigen
    return jax.vjp(lambda w: x @ w, np.zeros((x.shape[-1], g.shape[-1]), np.float32))[1](g)[0]


@pytest.mark.parametrize("fn, shapes", [
    (_both_transposed, ((1024, 256), (512, 1024))), (_both_transposed, ((300, 20), (30, 300))),
    (_both_transposed, ((129, 49), (97, 129))), (_dense_weight_gradient, ((8, 128, 256), (8, 128, 96)))],
    ids=["x.T@g.T-1024", "x.T@g.T-300", "x.T@g.T-129", "dense-weight-gradient"])
def test_products_of_two_transposed_operands_sum_as_xlas_eigen(fn, shapes):
    from lowering.kernels import eigen_dots
    from lowering.runtime.workers import usable_cpus

    if not (eigen_dots.measured_eigen_host() and usable_cpus() <= eigen_dots.MEASURED_CPUS):
        pytest.skip("Eigen's plans were measured on hosts with known cache sizes and at most two CPUs")
    rng = np.random.default_rng(32)
    args = tuple(_mixed(rng, shape, np.float32) for shape in shapes)
    import lowering
    from interop import import_jax

    got = np.asarray(lowering.compile(import_jax(fn, *args))(*args)[0])
    want = np.asarray(jax.jit(fn)(*args))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_new_product_orders_are_one_definition_in_compiled_loops():
    # A loop body's products in the orders above (a rounded chain, four lanes with K < 8, x @ w.T) call the same
    # small_dot as the interpreter's dot kernel.
    rng = np.random.default_rng(31)
    x = _mixed(rng, (8, 6), np.float32)
    w1, w2 = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((6, 6)).astype(np.float32)

    def fn(x, w1, w2):
        def body(i, h):
            return jnp.tanh((h @ w1)[:, :6] * 0.5 + h @ w2.T)
        return jax.lax.fori_loop(0, 3, body, x)

    import lowering
    from interop import import_jax

    module = import_jax(fn, x, w1, w2)
    compiled = np.asarray(lowering.compile(module, loop_compilation="always")(x, w1, w2)[0])
    interpreted = np.asarray(lowering.compile(module, loop_compilation="never")(x, w1, w2)[0])
    np.testing.assert_array_equal(compiled.view(np.uint32), interpreted.view(np.uint32))
    if _avx512_host():
        np.testing.assert_array_equal(compiled.view(np.uint32), np.asarray(jax.jit(fn)(x, w1, w2)).view(np.uint32))


def test_products_keep_the_previous_orders_on_other_cpus(monkeypatch):
    # Where the CPU lacks what the orders were measured with (AVX-512, FMA3, AVX2), XLA picks other kernels: the
    # orders stay the previous rules (one chain, the four-lane table), documented as not bitwise there.
    from lowering.kernels import host
    from lowering.kernels import small_dot as sd

    monkeypatch.setattr(host, "measured_host", lambda: False)
    assert sd.small_dot_order(1, 2, 5, 8, np.float32) == sd.ONE_CHAIN
    assert sd.small_dot_order(1, 12, 8, 8, np.float32) == sd.FOUR_LANES
    assert sd.small_dot_order(1, 7, 7, 7, np.float64) == sd.ONE_CHAIN


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("batch, k", [(None, 4096), (None, 5000), (None, 16384), (2, 2048), (128, 33), (300, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_vector_dots_of_4096_products_or_more_sum_as_xla_cpus_ynnpack_reduce(dtype, batch, k):
    # 4,096 products or more over all batches: XLA's reduce(multiply) runs in YNNPACK (16 f32 / 8 f64 lanes, a tree
    # of accumulators with Kahan summation at its top; the YNNPACK_SUM order of lowering/kernels/small_dot.py).
    rng = np.random.default_rng(k)
    lead = () if batch is None else (batch,)
    for trial in range(3):
        a = (rng.standard_normal((*lead, 1, k)) * 10.0 ** rng.integers(-3, 4, (*lead, 1, k))).astype(dtype)
        b = rng.standard_normal((*lead, k, 1)).astype(dtype)
        if trial == 2:  # infinite products of both signs in some dots
            a[..., 0, 5::97] = np.inf
            a[..., 0, 11::89] = -np.inf
        got, want = _vector_dot_bits(dtype, a, b)
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("mkn", [(8, 1000, 32), (25, 4330, 2), (4, 2000, 30), (16, 600, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("transposed", [False, True], ids=["x @ w", "x @ w.T"])
def test_small_products_with_long_contractions_are_ynnpacks(dtype, mkn, transposed):
    # YNNPACK's products with K > 256 and at most 2^18 multiply-adds: its replayed order (was BLAS's).
    import lowering
    from interop import import_jax

    m, k, n = mkn
    rng = np.random.default_rng(m * k + n)
    fn = (lambda a, w: a @ w.T) if transposed else (lambda a, w: a @ w)
    for _ in range(2):
        a = (rng.standard_normal((m, k)) * np.exp(rng.uniform(-2, 2, (m, k)))).astype(dtype)
        w = rng.standard_normal((n, k) if transposed else (k, n)).astype(dtype)
        got = np.asarray(lowering.compile(import_jax(fn, a, w))(a, w)[0])
        want = np.asarray(jax.jit(fn)(a, w))
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("mkn", [(4, 8, 4), (16, 64, 16), (64, 256, 64), (8, 7, 8), (2, 100, 40), (37, 301, 11),
                                 (20, 101, 33), (17, 512, 128), (2, 1200, 65)])
def test_bf16_products_into_f32_sum_in_pairs_as_xla_cpu(mkn):
    # bf16 x bf16 -> f32 (preferred_element_type): YNNPACK's bf16 kernels add each pair of K, the odd term first
    # (small_dot's PAIRS); one chain gave 72-94% of these elements. On CPUs with AMX-BF16 YNNPACK's cost model
    # gives most tiles to its AMX kernels (small_dot's AMX_TILES: blocks of 32 terms, even and odd terms in two
    # chains), pairs elsewhere: (17, 512, 128) has its last row, (2, 1200, 65) its last column in pairs tiles.
    import lowering
    from interop import import_jax

    m, k, n = mkn
    rng = np.random.default_rng(m * k + n)
    fn = lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32)  # noqa: E731
    for _ in range(2):
        a, b = rng.standard_normal((m, k)).astype(bf16), rng.standard_normal((k, n)).astype(bf16)
        got = np.asarray(lowering.compile(import_jax(fn, a, b))(a, b)[0])
        np.testing.assert_array_equal(got.view(np.uint32), np.asarray(jax.jit(fn)(a, b)).view(np.uint32))


def _amx_bf16_host() -> bool:
    from lowering.kernels.host import host_properties

    return _avx512_host() and bool(host_properties()["amx_bf16"])


@pytest.mark.skipif(not _amx_bf16_host(), reason="measured on a CPU with AMX-BF16 (llvm 'amx-bf16') only: this "
                                                 "host lacks it (or AVX-512)")
@pytest.mark.parametrize("mkn", [(16, 64, 16), (20, 101, 33), (2, 100, 40), (5, 9, 2), (8, 7, 8), (2, 100, 3),
                                 (3, 40, 3), (8, 3, 8), (4, 7, 4), (16, 33, 1)])
def test_bf16_products_on_amx_hosts_as_xla_cpu(mkn):
    # Where the host has AMX-BF16 (measured on an Emerald Rapids Xeon): the AMX unit and vdpbf16ps read denormal
    # inputs as zero and flush denormal sums, products exact (operands scaled to 2^-63: products near 2^-126); the
    # summation tree shows with +-2^25 among ones (the even and odd chains of a block of 32 terms); products with
    # K < 4, M and N < 4, or all dimensions < 8 are f32 products in XLA (its HLO converts the operands).
    import lowering
    from interop import import_jax

    m, k, n = mkn
    rng = np.random.default_rng(m * k + n + 1)
    fn = lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32)  # noqa: E731
    crafted = np.ones((m, k))
    for row in range(m):
        i, j = rng.choice(k, 2, replace=False) if k >= 2 else (0, 0)
        crafted[row, i], crafted[row, j] = 2.0 ** 25, -(2.0 ** 25)
    operands = [(crafted.astype(bf16), np.ones((k, n), bf16))]
    for scale in (1.0, 2.0 ** -63):
        a = (rng.standard_normal((m, k)) * np.exp(rng.uniform(-3, 3, (m, k))) * scale).astype(bf16)
        operands.append((a, (rng.standard_normal((k, n)) * scale).astype(bf16)))
    for a, b in operands:
        got = np.asarray(lowering.compile(import_jax(fn, a, b))(a, b)[0])
        np.testing.assert_array_equal(got.view(np.uint32), np.asarray(jax.jit(fn)(a, b)).view(np.uint32))


def test_bf16_products_in_compiled_loops_are_the_kernels():
    import lowering
    from interop import import_jax

    rng = np.random.default_rng(35)
    w = rng.standard_normal((16, 16)).astype(bf16)
    x0 = rng.standard_normal((4, 16)).astype(np.float32)

    def fn(x, w):
        step = lambda i, x: jnp.tanh(jnp.matmul(x.astype(bf16), w, preferred_element_type=jnp.float32))  # noqa: E731
        return jax.lax.fori_loop(0, 3, step, x)

    module = import_jax(fn, x0, w)
    compiled = np.asarray(lowering.compile(module, loop_compilation="always")(x0, w)[0])
    interpreted = np.asarray(lowering.compile(module, loop_compilation="never")(x0, w)[0])
    np.testing.assert_array_equal(compiled.view(np.uint32), interpreted.view(np.uint32))


def test_long_vector_dots_in_compiled_loops_are_the_kernels_sum():
    import lowering
    from interop import import_jax

    rng = np.random.default_rng(34)
    v = rng.standard_normal((1, 5000)).astype(np.float32)
    w = (rng.standard_normal((5000, 1)) * 0.01).astype(np.float32)  # (a dot near 1: tanh keeps its last bits)

    def fn(v, w):
        return jax.lax.fori_loop(0, 3, lambda i, x: x * 0.5 + jnp.tanh(x @ w), v)

    module = import_jax(fn, v, w)
    compiled = np.asarray(lowering.compile(module, loop_compilation="always")(v, w)[0])
    interpreted = np.asarray(lowering.compile(module, loop_compilation="never")(v, w)[0])
    np.testing.assert_array_equal(compiled.view(np.uint32), interpreted.view(np.uint32))
    if _avx512_host():
        np.testing.assert_array_equal(compiled.view(np.uint32), np.asarray(jax.jit(fn)(v, w)).view(np.uint32))


@pytest.mark.skipif(not _avx512_host(), reason="XLA CPU's small-dot order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (4, 64, 48, 80), (32, 64, 64, 64)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_one_chain_products_read_a_transposed_rhs_where_it_lies(shape, dtype):
    # An einsum's "bhqd,bhkd" rhs is a transposed view: the one-chain kernel reads it in place (B_TRANSPOSED, below
    # and above the register tiles' size, in pieces on threads at the largest), with the bits of a copied rhs; the
    # executor's einsum has jax.jit's bits.
    import lowering
    from interop import import_jax
    from lowering.kernels import small_dot

    batch, m, k, n = shape
    rng = np.random.default_rng(m)
    a = (rng.standard_normal((batch, m, k)) * np.exp(rng.uniform(-2, 2, (batch, m, k)))).astype(dtype)
    bt = (rng.standard_normal((batch, n, k)) * np.exp(rng.uniform(-2, 2, (batch, n, k)))).astype(dtype)
    matmul = small_dot.small_matmul(small_dot.ONE_CHAIN, workers=2)
    in_place = matmul(a, bt.transpose(0, 2, 1))
    copied = matmul(a, np.ascontiguousarray(bt.transpose(0, 2, 1)))
    np.testing.assert_array_equal(in_place.view(f"u{in_place.itemsize}"), copied.view(f"u{copied.itemsize}"))

    def einsum(x, y):
        return jnp.einsum("bmk,bnk->bmn", x, y)

    with jax.enable_x64(dtype == np.float64):
        want = np.asarray(jax.jit(einsum)(a, bt))
        got = np.asarray(lowering.compile(import_jax(einsum, a, bt), fusion="never")(a, bt)[0])
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_gemv_rows_in_vector_registers_are_the_scalar_forms_bits():
    # XLA's GEMV order with each row's lanes in a vector register (gemv_lanes._gemv_rows_vector) and in numba code
    # (gemv_rows_scalar, also what a non-contiguous operand takes): every tile case (whole tiles of 8 rows, a last
    # tile of 4 for f64's pairwise adds), K below, at and past the lanes, 32- and 64-byte vectors, batches.
    import numba

    from lowering.kernels import small_dot
    from lowering.kernels.gemv_lanes import gemv_rows, gemv_rows_scalar

    @numba.njit
    def strided(a, b, out, wide):  # (a non-contiguous lhs: the overload's numba form)
        gemv_rows(a[:, :, ::2], b, out, wide)

    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        for batch, m, k in [(1, 1, 3), (1, 4, 8), (2, 9, 17), (1, 12, 4), (3, 16, 33), (1, 20, 16), (2, 128, 8)]:
            a = (rng.standard_normal((batch, m, 2 * k)) * np.exp(rng.uniform(-3, 3, (batch, m, 2 * k)))).astype(dtype)
            b = rng.standard_normal((batch, k, 1)).astype(dtype)
            dense = np.ascontiguousarray(a[:, :, ::2])
            for wide in (False, True):
                got, want, other = (np.empty((batch, m, 1), dtype) for _ in range(3))
                small_dot.row_tiles_kernel(dense, b, got, small_dot.ROW_TILES | (small_dot.WIDE_VECTORS if wide else 0))
                gemv_rows_scalar(dense, b, want, wide)
                strided(a, b, other, wide)
                np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
                np.testing.assert_array_equal(other.view(f"u{other.itemsize}"), want.view(f"u{want.itemsize}"))
                for operand in (dense, a[:, :, ::2]):  # (from Python: the same forms)
                    gemv_rows(operand, b, other, wide)
                    np.testing.assert_array_equal(other.view(f"u{other.itemsize}"), want.view(f"u{want.itemsize}"))
