"""Windowed ops: hlo.convolution, hlo.reduce_window, hlo.select_and_scatter.

Every result is compared with jax.jit of the matching jax.lax call (XLA CPU).
XLA compilation dominates the run time, so the jax references of each family
are collected in a :class:`References` batch and computed by one jax.jit.

* Convolutions in many configurations (strides, padding incl. negative,
  lhs/rhs dilation, feature and batch groups, layouts, 1-3 spatial
  dimensions) and element types. Integer and pred convolutions must match
  exactly; float sums are reassociated differently by BLAS and XLA (XLA allows
  any order), so floats are compared within ``8 eps_acc n max|x| max|w|`` plus
  one rounding of the result type.
* reduce_window: max/min/and/or and integer reductions exactly; float sums
  and products within reassociation error (XLA CPU's window walk and
  summation order depend on its code generator), bit-exactly where XLA's
  order is known (2-d windows without padding; bodies that are not one op,
  on windows without padding or 1-d windows).
* select_and_scatter: against jax's select_and_scatter and jax.grad of max
  pooling, bit-exactly (ties only where XLA walks windows row-major); plus
  the examples of XLA's operation semantics and the StableHLO spec.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax._src.lax.windowed_reductions import _select_and_scatter

from helpers import JaxReferences, assert_close, execute, random_array, run_builder
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, HloVerifyError
from xla_dialect.ops.windowed import ConvDimensionNumbers, make_padding
from xla_dialect.types import element_type_from_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def shape_text(dtype, shape) -> str:
    return f"{element_type_from_dtype(np.dtype(dtype)).xla_name}[{','.join(map(str, shape))}]"


References = JaxReferences  # (tests/helpers.py: one jax.jit for a batch of independent references)


# ============================================================================
# Convolution
# ============================================================================

CONV_CASES = {
    # name: (lhs shape, rhs shape, jax.lax.conv_general_dilated keyword arguments)
    "basic": ((2, 3, 8, 8), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="VALID")),
    "strides_same": ((2, 3, 9, 7), (4, 3, 3, 2), dict(window_strides=(2, 3), padding="SAME")),
    "padding": ((1, 2, 6, 5), (3, 2, 3, 3), dict(window_strides=(1, 1), padding=((2, 1), (0, 3)))),
    "negative_padding": ((2, 2, 7, 8), (3, 2, 2, 3), dict(window_strides=(1, 2), padding=((-1, 2), (1, -2)))),
    "lhs_dilation": ((1, 2, 5, 4), (3, 2, 3, 2), dict(window_strides=(1, 1), padding=((1, 1), (2, 0)),
                                                      lhs_dilation=(2, 3))),
    "rhs_dilation": ((2, 3, 9, 9), (2, 3, 3, 2), dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 3))),
    "everything": ((2, 6, 7, 5), (4, 3, 3, 2), dict(window_strides=(2, 1), padding=((1, -1), (2, 0)),
                                                    lhs_dilation=(1, 2), rhs_dilation=(2, 1), feature_group_count=2)),
    "depthwise": ((2, 4, 7, 7), (8, 1, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=4)),
    "batch_groups": ((4, 3, 6, 6), (6, 3, 3, 3), dict(window_strides=(1, 1), padding="VALID", batch_group_count=2)),
    "batch_groups_nhwc": ((6, 5, 5, 2), (2, 2, 2, 9), dict(window_strides=(2, 1), padding=((0, 1), (1, 0)),
                                                           batch_group_count=3,
                                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "nhwc": ((2, 7, 5, 3), (3, 2, 3, 4), dict(window_strides=(1, 2), padding="SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "odd_layout": ((2, 5, 3, 7), (2, 3, 4, 3), dict(window_strides=(2, 1), padding=((1, 0), (0, 2)),
                                                    rhs_dilation=(1, 2),
                                                    dimension_numbers=("NWCH", "WHOI", "CHNW"))),
    "conv1d": ((3, 2, 10), (4, 2, 3), dict(window_strides=(2,), padding=((1, 2),), rhs_dilation=(3,),
                                           dimension_numbers=("NCH", "OIH", "NCH"))),
    "conv1d_nwc": ((2, 9, 4), (3, 2, 6), dict(window_strides=(1,), padding="SAME", feature_group_count=2,
                                              dimension_numbers=("NWC", "WIO", "NWC"))),
    "conv3d": ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(window_strides=(1, 2, 1), padding="SAME",
                                                      rhs_dilation=(1, 1, 2))),
    "conv3d_ndhwc": ((2, 4, 3, 5, 4), (2, 2, 3, 2, 4), dict(window_strides=(1, 1, 2), padding=((0, 1), (1, 1), (0, 0)),
                                                            lhs_dilation=(2, 1, 1), feature_group_count=2,
                                                            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
    "transposed": ((1, 3, 4, 4), (2, 3, 3, 3), dict(window_strides=(1, 1), padding=((2, 2), (2, 2)),
                                                    lhs_dilation=(2, 2))),
    "one_by_one": ((2, 5, 6, 6), (7, 5, 1, 1), dict(window_strides=(2, 2), padding="VALID")),
    "window_too_large": ((1, 1, 2, 2), (1, 1, 3, 3), dict(window_strides=(1, 1), padding="VALID")),
    "empty_batch": ((0, 2, 4, 4), (3, 2, 2, 2), dict(window_strides=(1, 1), padding="SAME")),
    "no_features": ((2, 0, 4, 4), (3, 0, 2, 2), dict(window_strides=(1, 1), padding="VALID")),
    "larger": ((2, 16, 16, 16), (32, 16, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
}


def build_conv(b, lhs, rhs, kw):
    return b.conv_general_dilated(lhs, rhs, kw["window_strides"], kw["padding"], kw.get("lhs_dilation"),
                                  kw.get("rhs_dilation"), kw.get("dimension_numbers"),
                                  kw.get("feature_group_count", 1), kw.get("batch_group_count", 1),
                                  preferred_element_type=kw.get("preferred_element_type"))


def jax_conv(kw):
    return lambda a, c: lax.conv_general_dilated(a, c, **kw)


def check_conv(actual, expected, x, w, kw, acc_dtype=np.float32):
    """Exact for ints/pred; floats within reassociation error plus one rounding of the result.

    The reassociation bound is ``8 eps_acc n max|x| max|w|`` for ``n`` products per
    result element (cheaper than a second XLA convolution of ``|x|`` and ``|w|``).
    """
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if element_type_from_dtype(actual.dtype).kind in ("pred", "sint", "uint"):
        assert_close(actual, expected)
        return
    out = np.dtype(actual.dtype)
    real = np.dtype(out.char.lower()) if out.kind == "c" else out  # c64 -> f32 components
    eps_out = float(ml_dtypes.finfo(real).eps)
    eps_acc = float(ml_dtypes.finfo(acc_dtype).eps)
    dn = ConvDimensionNumbers.of(kw.get("dimension_numbers"), x.ndim)
    terms = w.size // max(1, w.shape[dn.kernel_output_feature_dimension])

    def largest(v):
        v = np.abs(v.astype(np.complex128))
        v = v[np.isfinite(v)]
        return float(v.max()) if v.size else 0.0

    a, e = actual.astype(np.complex128), expected.astype(np.complex128)
    bound = 8 * eps_acc * terms * largest(x) * largest(w) + eps_out * np.abs(e) + float(ml_dtypes.finfo(real).tiny)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(a - e) <= bound)
    # Non-finite results must agree exactly (same infinity, NaN where NaN).
    same_special = (np.isnan(a) & np.isnan(e)) | (a == e)
    bad = np.where(np.isfinite(e), bad, ~same_special)
    assert not bad.any(), f"{int(bad.sum())} elements differ; first at {np.argwhere(bad)[0]}: " \
                          f"{actual[tuple(np.argwhere(bad)[0])]} vs {expected[tuple(np.argwhere(bad)[0])]}"


CONV = References()
_rng = np.random.default_rng(1)
for _case, (_ls, _rs, _kw) in CONV_CASES.items():
    CONV.add(("f32", _case), jax_conv(_kw), _rng.standard_normal(_ls).astype(np.float32),
             _rng.standard_normal(_rs).astype(np.float32))

CONV_DTYPES = {"everything": [np.float64, BF16, F16, np.int32, np.int8, np.uint8, np.complex64, np.bool_],
               "batch_groups_nhwc": [BF16, np.int8, np.complex64, np.bool_],
               "conv1d": [np.float64, np.uint8, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.int4,
                          ml_dtypes.uint4, np.int16, np.uint32, np.int64, np.complex128]}
for _case, _dtypes in CONV_DTYPES.items():
    _ls, _rs, _kw = CONV_CASES[_case]
    for _dt in _dtypes:
        CONV.add((_case, np.dtype(_dt).name), jax_conv(_kw), random_array(_rng, _ls, _dt), random_array(_rng, _rs, _dt))

PREFERRED = [(np.int8, np.int32), (np.uint8, np.int32), (np.int8, np.float32), (BF16, np.float32),
             (F16, np.float32), (np.float32, np.float64), (np.int16, np.int64)]
for _in, _out in PREFERRED:
    _ls, _rs, _kw = CONV_CASES["everything"]
    CONV.add(("preferred", np.dtype(_in).name, np.dtype(_out).name),
             jax_conv(dict(_kw, preferred_element_type=_out)), random_array(_rng, _ls, _in), random_array(_rng, _rs, _in))

SAME_KW = dict(window_strides=(1, 1), padding="SAME")
for _dt in (BF16, F16):
    # Small integers: every f32 partial sum is exact, so the result does not depend on the order.
    _x = _rng.integers(-8, 8, (2, 8, 6, 6)).astype(_dt)
    _w = (_rng.integers(-8, 8, (3, 8, 3, 3)) / 8).astype(_dt)
    CONV.add(("rounds_once", _dt.name), jax_conv(SAME_KW), _x, _w)
    CONV.add(("rounds_once_f32", _dt.name), jax_conv(SAME_KW), _x.astype(np.float32), _w.astype(np.float32))

WRAP_KW = dict(window_strides=(1, 1), padding=((1, 1), (0, 1)))
_info = np.iinfo(np.int32)
CONV.add("wraps", jax_conv(WRAP_KW), _rng.choice([_info.min, _info.max, -1, 1, 12345], size=(2, 3, 5, 4)).astype(np.int32),
         _rng.choice([_info.min, _info.max, 7, -3], size=(2, 3, 2, 2)).astype(np.int32))

_x = _rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
_x[0, 0, 1, 1], _x[0, 1, 4, 4], _x[0, 0, 5, 0] = np.nan, np.inf, -np.inf
CONV.add("special", jax_conv(SAME_KW), _x, _rng.standard_normal((2, 2, 3, 3)).astype(np.float32))
VALID_KW = dict(window_strides=(1, 1), padding="VALID")
CONV.add("negative_zero", jax_conv(VALID_KW), np.full((1, 1, 3, 3), -0.0, np.float32), np.ones((1, 1, 2, 2), np.float32))

_x = _rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
_w = _rng.standard_normal((4, 3, 4, 3)).astype(np.float32)
_xt, _wt = np.ascontiguousarray(_x.transpose(0, 2, 3, 1)), np.ascontiguousarray(_w.transpose(2, 3, 1, 0))
NHWC = ("NHWC", "HWIO", "NHWC")
FORMS = {
    # key: (XlaBuilder call, keyword arguments of the equivalent conv_general_dilated, NHWC operands)
    "conv_same": (lambda b, p, q: b.conv(p, q, (2, 3), "SAME"), dict(window_strides=(2, 3), padding="SAME"), False),
    "conv_valid": (lambda b, p, q: b.conv(p, q, (2, 3), "VALID"), dict(window_strides=(2, 3), padding="VALID"),
                   False),
    "general_padding": (lambda b, p, q: b.conv_with_general_padding(p, q, (1, 2), ((1, 2), (-1, 0)), (2, 1), (1, 2)),
                        dict(window_strides=(1, 2), padding=((1, 2), (-1, 0)), lhs_dilation=(2, 1),
                             rhs_dilation=(1, 2)), False),
    "general_dimensions": (lambda b, p, q: b.conv_with_general_dimensions(p, q, (1, 1), "SAME", NHWC),
                           dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC), True),
    "general": (lambda b, p, q: b.conv_general(p, q, (1, 1), ((0, 1), (1, 1)), NHWC),
                dict(window_strides=(1, 1), padding=((0, 1), (1, 1)), dimension_numbers=NHWC), True),
}
CONV.add(("form", "conv_same"), lambda a, c: lax.conv(a, c, (2, 3), "SAME"), _x, _w)
CONV.add(("form", "conv_valid"), lambda a, c: lax.conv(a, c, (2, 3), "VALID"), _x, _w)
CONV.add(("form", "general_padding"),
         lambda a, c: lax.conv_with_general_padding(a, c, (1, 2), ((1, 2), (-1, 0)), (2, 1), (1, 2)), _x, _w)
for _name in ("general_dimensions", "general"):
    CONV.add(("form", _name), jax_conv(FORMS[_name][1]), _xt, _wt)

REVERSAL_KW = dict(window_strides=(2, 1), padding=((1, 0), (0, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1))
_x = _rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
_w = _rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
CONV.add("reversal", lambda a, c: lax.conv_general_dilated(a, lax.rev(c, (2,)), **REVERSAL_KW), _x, _w)


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.sample(4)
def test_conv_configurations_vs_jax(case):
    x, w = CONV.args(("f32", case))
    kw = CONV_CASES[case][2]
    actual = run_builder(lambda b, p, q: build_conv(b, p, q, kw), x, w)
    check_conv(actual, CONV[("f32", case)], x, w, kw)


@pytest.mark.parametrize("case,dtype", [(c, np.dtype(d).name) for c, ds in CONV_DTYPES.items() for d in ds])
def test_conv_dtypes_vs_jax(case, dtype):
    """Integers wrap around, pred is OR of ANDs; bf16/f16 accumulate in f32 and round once (as XLA CPU)."""
    x, w = CONV.args((case, dtype))
    kw = CONV_CASES[case][2]
    actual = run_builder(lambda b, p, q: build_conv(b, p, q, kw), x, w)
    acc = np.float64 if dtype in ("float64", "complex128") else np.float32
    check_conv(actual, CONV[(case, dtype)], x, w, kw, acc)


@pytest.mark.parametrize("in_dtype,out_dtype", [(np.dtype(i).name, np.dtype(o).name) for i, o in PREFERRED])
def test_conv_preferred_element_type(in_dtype, out_dtype):
    """s8 x s8 -> s32 accumulates in s32; bf16 -> f32 converts the operands (XLA's OperandUpcaster)."""
    key = ("preferred", in_dtype, out_dtype)
    x, w = CONV.args(key)
    kw = dict(CONV_CASES["everything"][2], preferred_element_type=np.dtype(out_dtype))
    actual = run_builder(lambda b, p, q: build_conv(b, p, q, kw), x, w)
    check_conv(actual, CONV[key], x, w, kw, np.float64 if out_dtype == "float64" else np.float32)


def test_conv_preferred_narrower_float_vs_xla(rng):
    """f32 x f32 -> bf16: XLA accepts it (jax does not) and rounds the f32 result once."""
    from interop.stablehlo import run_xla

    lhs_shape, rhs_shape, kw = CONV_CASES["everything"]
    x, w = rng.standard_normal(lhs_shape).astype(np.float32), rng.standard_normal(rhs_shape).astype(np.float32)
    b = XlaBuilder("narrow")
    build_conv(b, b.parameter(0, shape_text(np.float32, lhs_shape)), b.parameter(1, shape_text(np.float32, rhs_shape)),
               dict(kw, preferred_element_type=BF16))
    module = b.build()
    (actual,) = execute(module, x, w)
    check_conv(actual, run_xla(module, x, w)[0], x, w, kw)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_conv_low_precision_rounds_once(dtype):
    """bf16/f16 convolutions are exactly the f32 convolution rounded once (XLA CPU)."""
    x, w = CONV.args(("rounds_once", dtype))
    actual = run_builder(lambda b, p, q: build_conv(b, p, q, SAME_KW), x, w)
    assert_close(actual, CONV[("rounds_once_f32", dtype)].astype(np.dtype(dtype)))
    assert_close(actual, CONV[("rounds_once", dtype)])


def test_conv_integer_wraps():
    x, w = CONV.args("wraps")
    assert_close(run_builder(lambda b, p, q: build_conv(b, p, q, WRAP_KW), x, w), CONV["wraps"])


def test_conv_special_values():
    """NaN and infinities propagate as in XLA; a sum of -0.0 products is +0.0 (XLA starts from +0.0)."""
    x, w = CONV.args("special")
    check_conv(run_builder(lambda b, p, q: build_conv(b, p, q, SAME_KW), x, w), CONV["special"], x, w, SAME_KW)
    z, one = CONV.args("negative_zero")
    assert_close(run_builder(lambda b, p, q: build_conv(b, p, q, VALID_KW), z, one), CONV["negative_zero"])


@pytest.mark.parametrize("form", FORMS)
def test_conv_builder_forms(form):
    """conv (SAME/VALID), conv_with_general_padding, conv_with_general_dimensions, conv_general."""
    build, kw, _ = FORMS[form]
    x, w = CONV.args(("form", form))
    check_conv(run_builder(build, x, w), CONV[("form", form)], x, w, kw)


def test_conv_dimension_numbers_forms():
    """Strings, jax's ConvDimensionNumbers, spec triples and dicts mean the same thing."""
    jax_dn = lax.conv_dimension_numbers((1, 5, 5, 3), (2, 2, 3, 4), ("NHWC", "HWIO", "NHWC"))
    expected = ConvDimensionNumbers.of(("NHWC", "HWIO", "NHWC"), 4)
    assert ConvDimensionNumbers.of(jax_dn, 4) == expected
    assert ConvDimensionNumbers.of(tuple(jax_dn), 4) == expected
    assert ConvDimensionNumbers.of({f: getattr(expected, f) for f in ConvDimensionNumbers.FIELDS}, 4) == expected
    assert expected == ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert ConvDimensionNumbers.of(None, 4) == ConvDimensionNumbers.of(("NCHW", "OIHW", "NCHW"), 4)


def test_make_padding_matches_jax():
    for base, window, stride in [(10, 3, 1), (10, 3, 2), (7, 4, 3), (5, 8, 1), (1, 1, 5), (6, 2, 4)]:
        for kind in ("SAME", "VALID", "SAME_LOWER"):
            assert make_padding(kind, [base], [window], [stride]) == \
                [tuple(p) for p in lax.padtype_to_pads((base,), (window,), (stride,), kind)]


def test_conv_window_reversal():
    """A reversed window equals the kernel reversed along that dimension; XLA agrees."""
    from interop.stablehlo import run_xla

    x, w = CONV.args("reversal")
    b = XlaBuilder("reversal")
    p, q = b.parameter(0, shape_text(np.float32, x.shape)), b.parameter(1, shape_text(np.float32, w.shape))
    b.conv_general_dilated(p, q, (2, 1), ((1, 0), (0, 1)), (1, 2), (2, 1), window_reversal=(True, False))
    module = b.build()
    (actual,) = execute(module, x, w)
    check_conv(actual, CONV["reversal"], x, w, REVERSAL_KW)
    check_conv(actual, run_xla(module, x, w)[0], x, w, REVERSAL_KW)


def test_conv_stablehlo_spec_example():
    """The StableHLO spec's convolution example (lhs dilation 2, stride 4)."""
    lhs = np.array([[1, 2, 5, 6], [3, 4, 7, 8], [10, 11, 14, 15], [12, 13, 16, 17]], np.int64).reshape(1, 4, 4, 1)
    rhs = np.ones((3, 3, 1, 1), np.int64)
    dn = ("NHWC", "HWIO", "NHWC")
    actual = run_builder(lambda b, p, q: b.conv_general_dilated(p, q, (4, 4), ((0, 0), (0, 0)), (2, 2), (1, 1), dn),
                         lhs, rhs)
    np.testing.assert_array_equal(actual, np.array([[[[10], [26]], [[46], [62]]]]))


def test_conv_seed_pseudocode(rng):
    """XLA's operation semantics' 2-d pseudo-code (padding and striding), written out with loops."""
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3, 3, 2))
    stride, pad = (2, 1), (1, 0)
    actual = run_builder(lambda b, p, q: b.conv_with_general_padding(p, q, stride, ((1, 1), (0, 1))), x, w)
    expected = np.zeros(actual.shape)
    for bi, oz, oy, ox in np.ndindex(*actual.shape):
        for iz, ky, kx in np.ndindex(3, 3, 2):
            iy, ix = oy * stride[0] + ky - pad[0], ox * stride[1] + kx - pad[1]
            if 0 <= iy < 6 and 0 <= ix < 5:
                expected[bi, oz, oy, ox] += x[bi, iz, iy, ix] * w[oz, iz, ky, kx]
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)


# -- convolution errors ---------------------------------------------------------

def conv_error(lhs_shape, rhs_shape, match, dtype="f32", rhs_dtype=None, **kw):
    b = XlaBuilder("bad_conv")
    p = b.parameter(0, f"{dtype}[{','.join(map(str, lhs_shape))}]")
    q = b.parameter(1, f"{rhs_dtype or dtype}[{','.join(map(str, rhs_shape))}]")
    args = dict(window_strides=(1,) * (len(lhs_shape) - 2), padding="VALID")
    args.update(kw)
    with pytest.raises(BuilderError, match=match):
        b.conv_general_dilated(p, q, **args)


def test_conv_errors():
    conv_error((1, 4, 5, 5), (2, 3, 3, 3), r"lhs feature dimension 1 .* \(size 4\) must be feature_group_count "
                                           r"\(1\) times the kernel input feature dimension 1 .* \(size 3\)")
    conv_error((1, 4, 5, 5), (3, 2, 3, 3), r"kernel output feature dimension 0 .* \(size 3\) must be a multiple "
                                           r"of feature_group_count 2", feature_group_count=2)
    conv_error((3, 4, 5, 5), (4, 4, 3, 3), r"lhs batch dimension 0 .* \(size 3\) must be a multiple of "
                                           r"batch_group_count 2", batch_group_count=2)
    conv_error((4, 4, 5, 5), (3, 4, 3, 3), r"\(size 3\) must be a multiple of batch_group_count 2",
               batch_group_count=2)
    conv_error((4, 4, 5, 5), (4, 2, 3, 3), r"cannot both be greater than 1", batch_group_count=2,
               feature_group_count=2)
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"feature_group_count must be positive, got 0", feature_group_count=0)
    conv_error((1, 4, 5, 5), (4, 4, 3), r"rhs f32\[4,4,3\].* must have rank 4")
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"must have the same element type", rhs_dtype="f16")
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"window stride 0 of dimension 1 must be positive",
               window_strides=(1, 0))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"window_strides has 3 values", window_strides=(1, 1, 1))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"padding \(-4, -2\) of dimension 0 removes more than the 5 elements",
               padding=((-4, -2), (0, 0)))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"window dilation 0 of dimension 0 must be positive",
               rhs_dilation=(0, 1))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"'SAME' is not defined with lhs_dilation", padding="SAME",
               lhs_dilation=(2, 1))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"input dimension numbers .* must contain each dimension 0..3 exactly once",
               dimension_numbers=ConvDimensionNumbers(0, 0, (2, 3), 1, 0, (2, 3), 0, 1, (2, 3)))
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"dimension_numbers: .* must contain each of 'N' and 'C'",
               dimension_numbers=("NHWW", "OIHW", "NCHW"))
    conv_error((1, 4, 5, 5), (4, 4, 0, 3), r"kernel spatial dimensions \[2, 3\] .* have sizes \[0, 3\]")
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"must not be narrower than the operand element type",
               dtype="s32", preferred_element_type=np.int8)
    conv_error((1, 4, 5, 5), (4, 4, 3, 3), r"padding must be 'SAME', 'VALID' or \(low, high\) pairs",
               padding="FULL")


def test_conv_verifier_rejects_bad_result():
    b = XlaBuilder("conv")
    p, q = b.parameter(0, "f32[1,2,5,5]"), b.parameter(1, "f32[3,2,3,3]")
    b.conv(p, q, (1, 1), "VALID")
    text = str(b.build()).replace("tensor<1x3x3x3xf32", "tensor<1x3x4x3xf32")
    with pytest.raises(HloVerifyError, match=r"hlo.convolution.*result #0 has type f32\[1,3,4,3\].*gives f32\[1,3,3,3\]"):
        parse_module(text).verify()


# ============================================================================
# reduce_window
# ============================================================================

RW_CASES = {
    # name: (operand shape, window_dimensions, window_strides, padding, base_dilation, window_dilation)
    "dilated_padded": ((6, 7), (2, 3), (1, 2), ((1, 2), (0, 1)), (2, 1), (1, 2)),
    "same_strided": ((9, 8), (3, 2), (2, 3), "SAME", None, None),
    "rank3": ((3, 4, 5), (2, 2, 2), (1, 1, 2), "VALID", None, None),
    "seed_2x3": ((4, 6), (2, 3), (2, 3), "VALID", None, None),
    "negative_padding": ((10,), (3,), (1,), ((-2, 3),), None, (2,)),
    "all_padding_windows": ((3, 2), (2, 1), (1, 1), ((3, 4), (1, 0)), (1, 1), (1, 1)),
    "scalar": ((), (), (), (), None, None),
    "empty": ((0, 4), (1, 2), (1, 1), "VALID", None, None),
}

RW_OPS = {
    # name: (jax op, builder method, init for floats, init for ints (or None: min/max of the type))
    "add": (lax.add, "add", 0.0, 0),
    "max": (lax.max, "max", -np.inf, None),
    "min": (lax.min, "min", np.inf, None),
    "mul": (lax.mul, "mul", 1.0, 1),
}


def rw_init(op, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = RW_OPS[op][3] if RW_OPS[op][3] is not None else (info.min if op == "max" else info.max)
        return np.array(value).astype(dtype)
    return np.array(RW_OPS[op][2]).astype(dtype)


def rw_method(op):
    """A reduction computation calling builder method ``op`` (``add``, ``max``, ``or_``, ...)."""
    return lambda a, c: getattr(a.builder, op)(a, c)


def jax_rw(init, computation, *window):
    return lambda v: lax.reduce_window(v, init, computation, *window)


RW = References()
_rng = np.random.default_rng(2)
for _op in RW_OPS:
    for _case, (_shape, *_window) in RW_CASES.items():
        _x = (_rng.uniform(0.5, 1.5, _shape) if _op == "mul" else _rng.standard_normal(_shape)).astype(np.float32)
        RW.add((_op, _case), jax_rw(rw_init(_op, np.float32), RW_OPS[_op][0], *_window), _x)
RW_DTYPES = [np.float64, BF16, F16, np.int32, np.uint8, np.int8, ml_dtypes.float8_e4m3fn, ml_dtypes.int4]
for _op in RW_OPS:
    for _dt in RW_DTYPES:
        _shape, *_window = RW_CASES["dilated_padded"]
        _x = random_array(_rng, _shape, _dt)
        if _op == "mul" and np.dtype(_dt).kind not in "iu":
            _x = _rng.uniform(0.5, 1.5, _shape).astype(_dt)  # keep products finite
        RW.add((_op, np.dtype(_dt).name), jax_rw(rw_init(_op, _dt), RW_OPS[_op][0], *_window), _x)

for _op in ("add", "mul"):
    _shape, *_window = RW_CASES["dilated_padded"]
    _x = random_array(_rng, _shape, np.complex64) if _op == "add" else \
        np.exp(1j * _rng.uniform(-1, 1, _shape)).astype(np.complex64)
    RW.add((_op, "complex64"), jax_rw(np.array(1 if _op == "mul" else 0, np.complex64), RW_OPS[_op][0], *_window), _x)

SUM_ORDER = [((5, 5), (1, 1), np.float32), ((3, 2), (2, 1), np.float32), ((5, 5), (1, 1), BF16)]
_x = (_rng.standard_normal((40, 40)) * 1000).astype(np.float32)
for _window, _strides, _dt in SUM_ORDER:
    RW.add(("order", _window, np.dtype(_dt).name), jax_rw(np.zeros((), _dt), lax.add, _window, _strides, "VALID"),
           _x.astype(_dt))

PRED_OPS = {"or_": (lax.bitwise_or, False), "and_": (lax.bitwise_and, True), "max": (lax.max, False),
            "min": (lax.min, True)}
PRED_WINDOW = ((2, 3), (1, 2), ((1, 0), (2, 1)))
_x = _rng.random((5, 6)) < 0.5
for _method, (_jop, _init) in PRED_OPS.items():
    RW.add(("pred", _method), jax_rw(np.bool_(_init), _jop, *PRED_WINDOW), _x)

SPECIAL_PADDINGS = (((0, 0), (0, 0)), ((1, 1), (2, 0)))
_x = np.array([[np.nan, 1.0, -0.0, 0.0, -0.0], [2.0, -np.inf, np.inf, -0.0, -0.0]], np.float32)
for _op in ("max", "min", "add"):
    for _i, _padding in enumerate(SPECIAL_PADDINGS):
        RW.add(("special", _op, _i), jax_rw(rw_init(_op, np.float32), RW_OPS[_op][0], (1, 2), (1, 1), _padding), _x)

SKIP_INITS = {"add": np.float32(100), "mul": np.float32(3), "max": np.float32(100)}
for _op, _init in SKIP_INITS.items():
    RW.add(("skip", _op), jax_rw(_init, RW_OPS[_op][0], (3,), (1,), ((2, 2),), (2,)), np.arange(1, 6, dtype=np.float32))

HALF = np.float32(0.5)
NON_ASSOCIATIVE = [
    # VALID 3-d windows (XLA walks them row-major), then 1-d windows with padding and dilations
    ((4, 5, 7), (2, 2, 2), (1, 1, 2), "VALID", None, (1, 1, 1)),
    ((4, 5, 7), (2, 3, 2), (2, 1, 1), "VALID", None, (1, 2, 3)),
    ((9,), (3,), (2,), ((2, 1),), (2,), (1,)),
    ((9,), (3,), (2,), ((-1, 3),), (1,), (2,)),
    ((9,), (3,), (2,), ((3, -2),), (3,), (2,)),
]
for _i, (_shape, *_window) in enumerate(NON_ASSOCIATIVE):
    RW.add(("non_associative", _i), jax_rw(np.float32(1), lambda a, c: a * HALF + c, *_window),
           _rng.standard_normal(_shape).astype(np.float32))


def jax_argmax_reducer(a, c):
    (av, ai), (cv, ci) = a, c
    pick = (av > cv) | ((av == cv) & (ai < ci))
    return lax.select(pick, av, cv), lax.select(pick, ai, ci)


ARGMAX_WINDOW = ((3, 2), (2, 1), ((1, 1), (0, 1)))
ARGMAX_INITS = (np.float32(-np.inf), np.int32(-1))
RW.add("argmax", lambda v, i: lax.reduce_window((v, i), ARGMAX_INITS, jax_argmax_reducer, *ARGMAX_WINDOW),
       _rng.integers(0, 5, (6, 7)).astype(np.float32), np.arange(42, dtype=np.int32).reshape(6, 7))


def check_rw(actual, expected, x, op, case):
    """max/min and integer results exactly; float sums and products within reassociation error.

    XLA CPU's loop order over a window depends on its code generator (with padding, a padded
    dimension's loop can be outermost), and float sums may be reassociated, so float add/mul
    are compared with ``|a - e| <= 2 n eps max|x|`` (sums) or ``2 n eps |e|`` (products)
    for windows of ``n`` elements.
    """
    if op in ("max", "min") or element_type_from_dtype(x.dtype).kind in ("pred", "sint", "uint"):
        assert_close(actual, expected)
        return
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    n = int(np.prod(RW_CASES[case][1]))
    eps = float(ml_dtypes.finfo(x.dtype).eps)
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    scale = np.abs(x.astype(np.float64)).max(initial=0.0) if op == "add" else np.abs(e)
    assert (np.abs(a - e) <= 2 * n * eps * scale + float(ml_dtypes.finfo(x.dtype).tiny)).all()


def run_reduce_window(x, op, case, init=None):
    _, window, strides, padding, base, wdil = RW_CASES[case]
    init = rw_init(op, x.dtype) if init is None else init
    return run_builder(lambda b, p: b.reduce_window(p, b.constant(init), rw_method(RW_OPS[op][1]), window, strides,
                                                    padding, base, wdil), x)


@pytest.mark.parametrize("case", RW_CASES)
@pytest.mark.parametrize("op", RW_OPS)
def test_reduce_window_vs_jax(op, case):
    (x,) = RW.args((op, case))
    check_rw(run_reduce_window(x, op, case), RW[(op, case)], x, op, case)


@pytest.mark.parametrize("dtype", [np.dtype(d).name for d in RW_DTYPES])
@pytest.mark.parametrize("op", RW_OPS)
def test_reduce_window_dtypes_vs_jax(op, dtype):
    """Integer sums and products wrap around; bf16/f16 sums round at every step, as XLA CPU."""
    (x,) = RW.args((op, dtype))
    check_rw(run_reduce_window(x, op, "dilated_padded"), RW[(op, dtype)], x, op, "dilated_padded")


@pytest.mark.parametrize("op", ["add", "mul"])
def test_reduce_window_complex_vs_jax(op):
    (x,) = RW.args((op, "complex64"))
    init = np.array(1 if op == "mul" else 0, np.complex64)
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(init), rw_method(RW_OPS[op][1]),
                                                      *RW_CASES["dilated_padded"][1:]), x)
    expected = RW[(op, "complex64")]
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * np.abs(x).max())


@pytest.mark.parametrize("window,strides,dtype", SUM_ORDER, ids=str)
def test_reduce_window_sum_order_is_xla_order(window, strides, dtype):
    """Without padding, XLA CPU adds a 2-d window in row-major order: sums are bit-exact; bf16
    sums round at every step (no f32 accumulator), as XLA CPU."""
    key = ("order", window, np.dtype(dtype).name)
    (x,) = RW.args(key)
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(np.zeros((), dtype)), rw_method("add"), window,
                                                      strides), x)
    assert_close(actual, RW[key])


@pytest.mark.parametrize("method", PRED_OPS)
def test_reduce_window_pred(method):
    (x,) = RW.args(("pred", method))
    init = np.bool_(PRED_OPS[method][1])
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(init), rw_method(method), *PRED_WINDOW), x)
    assert_close(actual, RW[("pred", method)])


@pytest.mark.parametrize("op", ["max", "min", "add"])
def test_reduce_window_special_values(op):
    """NaN propagates through max/min/add; max/min order -0 < +0, as XLA."""
    for i, padding in enumerate(SPECIAL_PADDINGS):
        (x,) = RW.args(("special", op, i))
        actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(rw_init(op, np.float32)),
                                                          rw_method(RW_OPS[op][1]), (1, 2), (1, 1), padding), x)
        expected = RW[("special", op, i)]
        assert_close(actual, expected, err_msg=str(padding))
        assert np.array_equal(np.signbit(actual), np.signbit(expected))


def test_reduce_window_padding_is_skipped():
    """XLA CPU skips padding and dilation holes (it does not combine init values there)."""
    for op, init in SKIP_INITS.items():
        (x,) = RW.args(("skip", op))
        actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(init), rw_method(RW_OPS[op][1]), (3,), (1,),
                                                          ((2, 2),), (2,)), x)
        assert_close(actual, RW[("skip", op)], err_msg=op)
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(np.float32(100)), rw_method("add"), (3,), (1,),
                                                      ((2, 2),)), np.arange(1, 6, dtype=np.float32))
    np.testing.assert_array_equal(actual, [101, 103, 106, 109, 112, 109, 105])


@pytest.mark.parametrize("index", range(len(NON_ASSOCIATIVE)))
def test_reduce_window_non_associative_body(index):
    """A body that is not one op runs in window order: init first, then the window row-major.

    XLA CPU uses that order for windows without padding (with padding in several dimensions
    its code generator may make a padded dimension's loop outermost; XLA leaves the order
    unspecified). Padding and base-dilation holes are skipped.
    """
    _, *window = NON_ASSOCIATIVE[index]

    def body(a, c):
        b = a.builder
        return b.add(b.mul(a, b.constant(HALF)), c)

    (x,) = RW.args(("non_associative", index))
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(np.float32(1)), body, *window), x)
    assert_close(actual, RW[("non_associative", index)])


def test_reduce_window_variadic_argmax():
    """Two operands (value, index) reduced together: jax's argmax-style reducer, many ties."""
    x, idx = RW.args("argmax")

    def body(av, ai, cv, ci):
        b = av.builder
        pick = b.or_(b.gt(av, cv), b.and_(b.eq(av, cv), b.lt(ai, ci)))
        return b.select(pick, av, cv), b.select(pick, ai, ci)

    actual = run_builder(lambda b, p, q: b.reduce_window([p, q], [b.constant(v) for v in ARGMAX_INITS], body,
                                                         *ARGMAX_WINDOW), x, idx)
    for a, e in zip(actual, RW["argmax"]):
        assert_close(a, e)


def test_reduce_window_seed_examples():
    """XLA's operation semantics' 1-d minimum example (VALID and SAME) and the StableHLO spec example."""
    x = np.array([10000, 1000, 100, 10, 1], np.float32)
    big = np.float32(np.finfo(np.float32).max)
    for padding, expected in (("VALID", [100, 1]), ("SAME", [1000, 10, 1])):
        actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(big), lambda a, c: a.builder.min(a, c),
                                                          (3,), (2,), padding), x)
        np.testing.assert_array_equal(actual, np.array(expected, np.float32))
    x = np.array([[1, 2], [3, 4], [5, 6]], np.int64)
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(0, np.int64), lambda a, c: a.builder.add(a, c),
                                                      (2, 1), (4, 1), ((2, 1), (0, 0)), (2, 1), (3, 1)), x)
    np.testing.assert_array_equal(actual, [[0, 0], [3, 4]])
    # XLA's operation semantics' 4x6 max pooling with 2x3 windows and strides.
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::-1].copy()
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(np.float32(np.finfo(np.float32).min)),
                                                      lambda a, c: a.builder.max(a, c), (2, 3), (2, 3), "VALID"), x)
    np.testing.assert_array_equal(actual, x.reshape(2, 2, 2, 3).max(axis=(1, 3)))


def test_reduce_window_errors():
    b = XlaBuilder("bad_rw")
    x = b.parameter(0, "f32[4,6]")
    y = b.parameter(1, "f32[4,5]")
    zero = b.constant(np.float32(0))

    def add(a, c):
        return a.builder.add(a, c)

    cases = [
        (lambda: b.reduce_window(x, zero, add, (2,), (1,), "VALID"), r"window_dimensions has 1 values \[2\]; "
                                                                      r"expected 2 values"),
        (lambda: b.reduce_window(x, zero, add, (2, 2), (1, 0), "VALID"), r"window stride 0 of dimension 1 must be "
                                                                         r"positive"),
        (lambda: b.reduce_window(x, zero, add, (0, 2), (1, 1), "VALID"), r"window dimension 0 of dimension 0"),
        (lambda: b.reduce_window(x, zero, add, (2, 2), (1, 1), "VALID", (1, -1)), r"base dilation -1"),
        (lambda: b.reduce_window(x, zero, add, (2, 2), (1, 1), ((-3, -2), (0, 0))), r"padding \(-3, -2\) of dimension"
                                                                                     r" 0 removes more than the 4"),
        (lambda: b.reduce_window(x, b.constant(np.zeros(2, np.float32)), add, (2, 2), (1, 1), "VALID"),
         r"init value #0 must be a scalar, got f32\[2\]"),
        (lambda: b.reduce_window(x, b.constant(np.int32(0)), add, (2, 2), (1, 1), "VALID"),
         r"init value #0 s32\[\].* must have operand #0's element type f32\[\]"),
        (lambda: b.reduce_window([x, y], [zero, zero], lambda a, c, d, e: (a, c), (2, 2), (1, 1), "VALID"),
         r"all operands must have the same dimensions"),
        (lambda: b.reduce_window([x], [zero, zero], add, (2, 2), (1, 1), "VALID"), r"1 operands but 2 init values"),
        (lambda: b.reduce_window(x, zero, lambda a: a, (2, 2), (1, 1), "VALID"), r"computation takes 1 parameters"),
        (lambda: b.reduce_window(x, zero, lambda a, c: a.builder.gt(a, c), (2, 2), (1, 1), "VALID"),
         r"reduction computation returns \(pred\[\]\) but must return \(f32\[\]"),
    ]
    for build, match in cases:
        with pytest.raises(BuilderError, match=match):
            build()


# ============================================================================
# select_and_scatter
# ============================================================================

SAS_CASES = {
    # name: (operand shape, window_dimensions, window_strides, padding)
    "overlapping_padded": ((5, 6), (2, 3), (2, 1), ((1, 1), (0, 2))),
    "pooling": ((6, 8), (2, 2), (2, 2), "VALID"),
    "same": ((7, 5), (3, 3), (2, 2), "SAME"),
    "rank3": ((3, 4, 5), (2, 3, 2), (1, 1, 2), ((0, 1), (1, 1), (1, 0))),
    "all_padding_windows": ((3,), (2,), (1,), ((4, 4),)),
    "empty": ((0, 3), (1, 2), (1, 1), "VALID"),
    "overlapping": ((6, 7), (3, 2), (1, 2), "VALID"),
    "rank3_overlapping": ((3, 4, 5), (2, 3, 2), (1, 1, 2), "VALID"),
}
SAS_EXTRA_CASES = {
    "nan": ((7,), (2,), (1,), "VALID"),
    "scatter_order": ((6, 6), (2, 2), (1, 1), "VALID"),
}
SAS_WINDOWS = {**SAS_CASES, **SAS_EXTRA_CASES}

SELECTS = {"ge": lax.ge, "gt": lax.gt, "le": lax.le}
SCATTERS = {"add": (lax.add, "add", 0), "mul": (lax.mul, "mul", 1), "max": (lax.max, "max", -1)}


def source_shape(case):
    shape, window, strides, padding = SAS_WINDOWS[case]
    return jax.eval_shape(lambda v: lax.reduce_window(v, np.float32(0), lax.max, window, strides, padding),
                          jax.ShapeDtypeStruct(shape, np.float32)).shape


def jax_sas(case, select, scatter, init):
    """jax's select_and_scatter for a case of SAS_CASES (jax wants explicit padding pairs)."""
    shape, window, strides, padding = SAS_WINDOWS[case]
    pads = padding if not isinstance(padding, str) else make_padding(padding, shape, window, strides)
    scatter_fn = scatter if callable(scatter) else SCATTERS[scatter][0]
    return lambda o, s: _select_and_scatter(o, SELECTS[select], window, strides, pads, s, init, scatter_fn)


def run_sas(operand, source, case, select, scatter, init):
    """Our select_and_scatter for a case of SAS_CASES; ``scatter`` is a builder method name or a computation."""
    _, window, strides, padding = SAS_WINDOWS[case]
    scatter_fn = scatter if callable(scatter) else rw_method(SCATTERS[scatter][1])
    return run_builder(lambda b, o, s: b.select_and_scatter(o, rw_method(select), window, strides, padding, s,
                                                            b.constant(init), scatter_fn), operand, source)


SAS_COMBOS = [("ge", "add"), ("gt", "add"), ("le", "mul"), ("ge", "max")]
SAS_TIES = ["pooling", "overlapping", "rank3_overlapping"]
SAS_DTYPES = [np.float64, BF16, F16, np.int32, np.uint8, ml_dtypes.float8_e5m2, ml_dtypes.int4]
SAS = References()
_rng = np.random.default_rng(3)
for _i, _case in enumerate(SAS_CASES):
    _shape = SAS_CASES[_case][0]
    for _select, _scatter in (SAS_COMBOS[_i % 4], SAS_COMBOS[(_i + 1) % 4]):
        # Distinct operand values: the selection does not depend on the order a window is walked.
        _init = np.float32(SCATTERS[_scatter][2])
        SAS.add((_case, _select, _scatter), jax_sas(_case, _select, _scatter, _init),
                _rng.permutation(int(np.prod(_shape))).reshape(_shape).astype(np.float32),
                _rng.standard_normal(source_shape(_case)).astype(np.float32))
for _case in SAS_TIES:
    for _select in SELECTS:
        SAS.add(("ties", _case, _select), jax_sas(_case, _select, "add", np.float32(0)),
                _rng.integers(-2, 2, SAS_CASES[_case][0]).astype(np.float32),
                _rng.standard_normal(source_shape(_case)).astype(np.float32))
for _dt in SAS_DTYPES:
    _case = "overlapping_padded"
    _shape = SAS_CASES[_case][0]
    _operand = _rng.permutation(int(np.prod(_shape))).reshape(_shape).astype(_dt)
    _source = random_array(_rng, source_shape(_case), _dt)
    for _select, _scatter in (("ge", "add"), ("le", "max")):
        SAS.add((np.dtype(_dt).name, _select, _scatter),
                jax_sas(_case, _select, _scatter, np.array(SCATTERS[_scatter][2]).astype(_dt)), _operand, _source)

for _select in ("ge", "gt"):
    SAS.add(("nan", _select), jax_sas("nan", _select, "add", np.float32(0)),
            np.array([1.0, np.nan, 1.0, 2.0, np.nan, 0.0, 0.0], np.float32), np.arange(10, 70, 10, dtype=np.float32))

SAS.add("scatter_order", jax_sas("scatter_order", "ge", lambda a, c: a * HALF + c, np.float32(1)),
        _rng.integers(0, 3, (6, 6)).astype(np.float32), _rng.standard_normal((5, 5)).astype(np.float32))

SAS.add("all_padding", jax_sas("all_padding_windows", "ge", "add", np.float32(0)),
        np.array([3.0, 1.0, 2.0], np.float32), np.arange(1, 11, dtype=np.float32))

POOL_WINDOW, POOL_STRIDES = (1, 3, 2), (1, 2, 2)
POOL_PADDINGS = ("VALID", "SAME", ((0, 0), (1, 2), (0, 1)))
_x = _rng.standard_normal((2, 7, 6)).astype(np.float32)
for _i, _padding in enumerate(POOL_PADDINGS):
    _pads = _padding if not isinstance(_padding, str) else make_padding(_padding, _x.shape, POOL_WINDOW, POOL_STRIDES)

    def _pool(v, _pads=_pads):
        return lax.reduce_window(v, -np.inf, lax.max, POOL_WINDOW, POOL_STRIDES, _pads)

    _cotangent = _rng.standard_normal(jax.eval_shape(_pool, _x).shape).astype(np.float32)
    SAS.add(("pool_grad", _i), jax.grad(lambda v, c, _pool=_pool: (_pool(v) * c).sum()), _x, _cotangent)


@pytest.mark.parametrize("case,select,scatter", [k for k in SAS.calls if len(k) == 3 and k[0] in SAS_CASES])
def test_select_and_scatter_vs_jax(case, select, scatter):
    operand, source = SAS.args((case, select, scatter))
    actual = run_sas(operand, source, case, select, scatter, np.float32(SCATTERS[scatter][2]))
    assert_close(actual, SAS[(case, select, scatter)])


@pytest.mark.parametrize("case", SAS_TIES)
@pytest.mark.parametrize("select", SELECTS)
def test_select_and_scatter_ties_vs_jax(case, select):
    """Ties: the first (ge/le) or last (gt) element in row-major window order wins, as XLA CPU
    walks windows without padding (with padding XLA's walk order depends on its code generator)."""
    operand, source = SAS.args(("ties", case, select))
    assert_close(run_sas(operand, source, case, select, "add", np.float32(0)), SAS[("ties", case, select)])


@pytest.mark.parametrize("dtype", [np.dtype(d).name for d in SAS_DTYPES])
def test_select_and_scatter_dtypes_vs_jax(dtype):
    for select, scatter in (("ge", "add"), ("le", "max")):
        key = (dtype, select, scatter)
        operand, source = SAS.args(key)
        init = np.array(SCATTERS[scatter][2]).astype(operand.dtype)
        actual = run_sas(operand, source, "overlapping_padded", select, scatter, init)
        assert_close(actual, SAS[key], err_msg=f"{select} {scatter}")


@pytest.mark.parametrize("select", ["ge", "gt"])
def test_select_and_scatter_nan_and_ties(select):
    """select(current, candidate) false replaces the selection: NaN compares false, so NaN and
    the elements after it are picked as XLA's walk picks them."""
    operand, source = SAS.args(("nan", select))
    assert_close(run_sas(operand, source, "nan", select, "add", np.float32(0)), SAS[("nan", select)])


@pytest.mark.parametrize("index", range(len(POOL_PADDINGS)))
def test_select_and_scatter_is_max_pool_gradient(index):
    """jax.grad of max pooling (reduce_window max) is select_and_scatter(ge, add)."""
    x, cotangent = SAS.args(("pool_grad", index))
    actual = run_builder(lambda b, o, s: b.select_and_scatter(o, rw_method("ge"), POOL_WINDOW, POOL_STRIDES,
                                                              POOL_PADDINGS[index], s, b.constant(np.float32(0)),
                                                              rw_method("add")), x, cotangent)
    assert_close(actual, SAS[("pool_grad", index)])


def test_select_and_scatter_examples():
    """The StableHLO spec example, XLA's operation semantics' description, and windows made only of padding
    (they scatter nothing)."""
    operand = np.array([[1, 5], [2, 5], [3, 6], [4, 4]], np.int64)
    source = np.array([[5, 6], [7, 8]], np.int64)
    actual = run_builder(lambda b, o, s: b.select_and_scatter(o, rw_method("ge"), (3, 1), (2, 1), ((0, 1), (0, 0)), s,
                                                              b.constant(0, np.int64), rw_method("add")),
                         operand, source)
    np.testing.assert_array_equal(actual, [[0, 0], [0, 0], [5, 14], [7, 0]])
    # As the seed describes its figure (2): 9 is the maximum of both overlapping top windows, so add
    # scatters 2 + 6 = 8 there.
    operand = np.array([[7, 2, 5, 3, 8], [3, 8, 9, 3, 4], [1, 5, 7, 5, 6], [0, 6, 2, 10, 2]], np.float32)
    source = np.array([[2, 6], [3, 1]], np.float32)
    actual = run_builder(lambda b, o, s: b.select_and_scatter(o, rw_method("ge"), (2, 3), (2, 2), "VALID", s,
                                                              b.constant(np.float32(0)), rw_method("add")),
                         operand, source)
    expected = np.zeros_like(operand)
    expected[1, 2] = 8  # 9 is the maximum of both top windows
    expected[2, 2], expected[3, 3] = 3, 1  # 7 and 10 are the bottom windows' maxima
    np.testing.assert_array_equal(actual, expected)
    operand, source = SAS.args("all_padding")
    actual = run_sas(operand, source, "all_padding_windows", "ge", "add", np.float32(0))
    assert_close(actual, SAS["all_padding"])
    np.testing.assert_array_equal(actual, [9, 0, 13])


def test_select_and_scatter_general_scatter_order():
    """A non-commutative scatter body applies the source elements of a position in row-major order."""
    operand, source = SAS.args("scatter_order")

    def scatter(u, v):
        b = u.builder
        return b.add(b.mul(u, b.constant(HALF)), v)

    assert_close(run_sas(operand, source, "scatter_order", "ge", scatter, np.float32(1)), SAS["scatter_order"])


def test_select_and_scatter_errors():
    b = XlaBuilder("bad_sas")
    x = b.parameter(0, "f32[4,6]")
    s = b.parameter(1, "f32[2,2]")
    si = b.parameter(2, "s32[2,2]")
    zero = b.constant(np.float32(0))

    def ge(u, v):
        return u.builder.ge(u, v)

    def add(u, v):
        return u.builder.add(u, v)

    cases = [
        (lambda: b.select_and_scatter(x, ge, (2, 2), (2, 2), "VALID", s, zero, add),
         r"source f32\[2,2\].* must have the shape of the window-reduced operand .*\[2, 3\]"),
        (lambda: b.select_and_scatter(x, ge, (2, 3), (2, 3), "VALID", si, zero, add),
         r"source s32\[2,2\].* must have the operand's element type f32"),
        (lambda: b.select_and_scatter(x, ge, (2, 3), (2, 3), "VALID", s, b.constant(np.int32(0)), add),
         r"init value #0 s32\[\].* must have operand #0's element type"),
        (lambda: b.select_and_scatter(x, add, (2, 3), (2, 3), "VALID", s, zero, add),
         r"select computation must return pred\[\], returns \(f32\[\]"),
        (lambda: b.select_and_scatter(x, ge, (2, 3), (2, 3), "VALID", s, zero, ge),
         r"scatter computation returns \(pred\[\]"),
        (lambda: b.select_and_scatter(x, ge, (2, 3, 1), (2, 3, 1), "VALID", s, zero, add),
         r"window_dimensions has 3 values"),
    ]
    for build, match in cases:
        with pytest.raises(BuilderError, match=match):
            build()


# ============================================================================
# IR: round trip and verifier
# ============================================================================

def windowed_module():
    b = XlaBuilder("windowed")
    x = b.parameter(0, "f32[4,6]")
    s = b.parameter(1, "f32[2,2]")
    img = b.parameter(2, "bf16[1,2,5,5]")
    ker = b.parameter(3, "bf16[4,1,3,3]")
    zero, one = b.constant(np.float32(0)), b.constant(np.float32(1))
    sums = b.reduce_window([x, x], [zero, one], lambda a, c, d, e: (a.builder.add(a, d), a.builder.mul(c, e)),
                           (2, 3), (2, 3), "VALID")
    picked = b.select_and_scatter(x, lambda u, v: u.builder.ge(u, v), (2, 3), (2, 3), "VALID", s, zero,
                                  lambda u, v: u.builder.add(u, v))
    conv = b.conv_general_dilated(img, ker, (1, 2), ((1, -1), (0, 2)), (1, 1), (2, 1), None, 2,
                                  precision_config=("HIGHEST", "DEFAULT"), preferred_element_type="f32",
                                  window_reversal=(False, True))
    return b.build([*sums, picked, conv])


def test_round_trip():
    module = windowed_module()
    text = str(module)
    parsed = parse_module(text)
    parsed.verify()
    assert str(parsed) == text
    assert parsed.is_structurally_equivalent(module)


def test_verifier_rejects_bad_ir():
    text = str(windowed_module())
    bad = text.replace("window_strides = array<i64: 2, 3>, padding = array<i64: 0, 0, 0, 0>}",
                       "window_strides = array<i64: 2, 3>, padding = array<i64: 0, 0, 0, 3>}", 1)
    assert bad != text
    with pytest.raises(HloVerifyError, match=r"hlo.select_and_scatter: source f32\[2,2\].* must have the shape of "
                                             r"the window-reduced operand .*\[2, 3\]"):
        parse_module(bad).verify()
    bad = text.replace("input_feature_dimension = 1 : i64", "input_feature_dimension = 0 : i64")
    with pytest.raises(HloVerifyError, match=r"hlo.convolution: input dimension numbers"):
        parse_module(bad).verify()
    bad = text.replace("feature_group_count = 2", "feature_group_count = 1")
    with pytest.raises(HloVerifyError, match=r"hlo.convolution: lhs feature dimension 1"):
        parse_module(bad).verify()


def test_windowed_module_runs_on_xla(rng):
    """The whole module exported to StableHLO gives XLA's results."""
    from interop.stablehlo import run_xla

    module = windowed_module()
    args = [rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32),
            random_array(rng, (1, 2, 5, 5), BF16), random_array(rng, (4, 1, 3, 3), BF16)]
    mine, xla = execute(module, *args), run_xla(module, *args)
    for a, e in zip(mine[:3], xla[:3]):
        assert_close(a, e)
    np.testing.assert_allclose(mine[3], xla[3], rtol=1e-5, atol=1e-4)


def test_zero_stride_with_same_padding_is_a_builder_error():
    from xla_dialect.errors import BuilderError

    b = XlaBuilder("c")
    x = b.parameter(0, "f32[1,4,4,1]")
    k = b.parameter(1, "f32[2,2,1,1]")
    with pytest.raises(BuilderError, match="strides must be positive"):
        b.conv(x, k, (0, 0), "SAME")
    with pytest.raises(BuilderError, match="strides must be positive"):
        b.reduce_window(x, b.constant(np.float32(0)), lambda p, q: p + q, (1, 2, 2, 1), (1, 0, 1, 1), "SAME")


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_pooling_signed_zeros(rng, op, padding):
    """A max-pool of a ReLU's output (mostly zeros of both signs): each zero result is signed by its own window."""
    x = rng.choice(np.array([-0.0, 0.0, -0.0, -1.0, 1.0, np.nan], np.float32), (2, 9, 9, 3))
    init = rw_init(op, np.float32)
    window = ((1, 2, 2, 1), (1, 2, 2, 1), padding)
    actual = run_builder(lambda b, p: b.reduce_window(p, b.constant(init), rw_method(op), window[0], window[1],
                                                      make_padding(padding, x.shape, window[0], window[1])), x)
    expected = np.asarray(jax.jit(jax_rw(init, lax.max if op == "max" else lax.min, *window))(x))
    np.testing.assert_array_equal(actual, expected)
    number = ~np.isnan(expected)  # the sign of a NaN result is not compared (XLA's min gives -NaN)
    np.testing.assert_array_equal(np.signbit(actual[number]), np.signbit(expected[number]))


def _cumulative_cases():
    add = lambda x, axis: jax.lax.cumsum(x, axis=axis)  # noqa: E731
    return {
        "cumsum-f64-(3,64)": (add, np.float64, (3, 64), 1),
        "cumsum-f32-(17,)": (add, np.float32, (17,), 0),  # (padded to 32)
        "cumsum-f32-(40,3)-axis0": (add, np.float32, (40, 3), 0),  # (the scan dimension moved last and back)
        "cumsum-f32-(1000,)": (add, np.float32, (1000,), 0),  # (63 blocks: their prefixes in blocks again)
        "cumsum-reverse-f64-(2,33)": (lambda x, axis: jax.lax.cumsum(x, axis=axis, reverse=True), np.float64,
                                      (2, 33), 1),
        "cumprod-f32-(5,50)": (lambda x, axis: jax.lax.cumprod(x * 0.01 + 1, axis=axis), np.float32, (5, 50), 1),
        "cummax-f32-(70,)": (lambda x, axis: jax.lax.cummax(x, axis=axis), np.float32, (70,), 0),
        "cumsum-bf16-(2,40)": (add, ml_dtypes.bfloat16, (2, 40), 1),
        "cumsum-i32-(50,)": (add, np.int32, (50,), 0),
        "exclusive-f32-(2,48)": (lambda x, axis: lax.reduce_window(x, np.float32(0), lax.add, (1, 48), (1, 1),
                                                                   [(0, 0), (48, 0)]), np.float32, (2, 48), 1),
        "in-a-loop-f64-(64,)": (lambda x, axis: jax.lax.fori_loop(0, 2, lambda i, c: jnp.cumsum(c) * 0.5, x),
                                np.float64, (64,), 0),
    }


@pytest.mark.parametrize("case", list(_cumulative_cases()))
@pytest.mark.sample(4)
def test_cumulative_windows_are_scanned_in_blocks_of_16_as_xla(case):
    """``jnp.cumsum`` over more than 16 elements is XLA's ``ReduceWindowRewriter`` tree (blocks of 16 scanned, the
    blocks' totals scanned exclusively, then added: ``passes.xla_numerics.CumulativeWindowInBlocks``), bitwise,
    interpreted and fused in compiled loops (long fuzz campaign, session 19: in sequence, 1,204 of the 1,500 elements
    of an f32 ``(5, 300)`` cumsum differed)."""


    from interop import import_jax
    import lowering

    fn, dtype, shape, axis = _cumulative_cases()[case]
    rng = np.random.default_rng(len(case))
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e4], shape))
    x = x.astype(dtype) if np.dtype(dtype).kind == "f" else (x * 1000).astype(dtype)
    function = lambda v: fn(v, axis)  # noqa: E731
    expected = np.asarray(jax.jit(function)(x))
    module = import_jax(function, x)
    for options in ({"fusion": "never", "loop_compilation": "never"},
                    {"fusion": "always", "loop_compilation": "always"}):
        got = np.asarray(lowering.compile(module, **options)(x)[0])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        bits = f"u{got.dtype.itemsize}" if got.dtype.kind != "i" else got.dtype
        assert np.array_equal(got.view(bits), expected.view(bits)), (options, np.flatnonzero(got != expected)[:8])


_TINY_BF16 = float(ml_dtypes.finfo(ml_dtypes.bfloat16).tiny)


@pytest.mark.parametrize("case", ["cummax-bf16", "cummin-bf16", "max-pool-bf16", "min-same-bf16", "in-a-loop-bf16",
                                  "one-element-cummax-f32", "one-element-cummax-bf16"])
def test_max_min_windows_of_denormals_as_xla(case):
    """Long fuzz campaign, session 19: XLA computes a bf16 max/min window in f32 with the max instruction, so under
    denormals-are-zero a bf16 denormal comes out a zero (``jax.lax.cummax`` of 0x002b: 0 in jax.jit, 0x002b here
    before); and a window of one element with the identity init is the operand itself (f32 ``cummax`` of one
    denormal keeps it in XLA, where ``max(-inf, x)`` flushed it here)."""
    from interop import import_jax
    import lowering

    dtype = np.float32 if case.endswith("f32") else ml_dtypes.bfloat16
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    x = np.array([tiny / 3, -tiny / 5, 1.0, -0.0, tiny / 2, 0.0] * 6, dtype)
    function = {
        "cummax": lambda v: lax.cummax(v, axis=0), "cummin": lambda v: lax.cummin(v, axis=0),
        "max-pool": lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (2,), (2,), "VALID"),
        "min-same": lambda v: lax.reduce_window(v, jnp.inf, lax.min, (3,), (1,), "SAME"),
        "in-a-loop": lambda v: jax.lax.fori_loop(
            0, 2, lambda i, c: lax.reduce_window(c, -jnp.inf, lax.max, (2,), (1,), "SAME"), v),
        "one-element-cummax": lambda v: lax.cummax(v[:1], axis=0),
    }[case.rsplit("-", 1)[0]]
    expected = np.asarray(jax.jit(function)(x))
    module = import_jax(function, x)
    for options in ({"fusion": "never", "loop_compilation": "never"},
                    {"fusion": "always", "loop_compilation": "always"}):
        got = np.asarray(lowering.compile(module, **options)(x)[0])
        bits = f"u{got.dtype.itemsize}"
        assert np.array_equal(got.view(bits), expected.view(bits)), (options, got.view(bits), expected.view(bits))
