"""Ops configured at run time (the StableHLO spec's dynamic_pad, dynamic_gather, dynamic_conv): configuration
operands computed by the program are read when it runs; results equal the static ops' (checked against jax)."""

from __future__ import annotations

import numpy as np
import pytest
from jax import lax

import lowering
from interop import export_stablehlo, import_stablehlo
from xla_dialect import XlaBuilder
from xla_dialect.errors import BuilderError, ExecutionError


def test_dynamic_pad_from_the_builder_and_bad_configurations():
    b = XlaBuilder("dp")
    x, v = b.parameter(0, "f32[2,3]"), b.parameter(1, "f32[]")
    lo, hi, it = (b.parameter(i, "s64[2]") for i in (2, 3, 4))
    b.dynamic_pad(x, v, lo, hi, it, "f32[5,10]")
    exe = lowering.compile(b.build())
    x_ = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = exe(x_, np.float32(7), np.array([1, 2]), np.array([2, 1]), np.array([0, 2]))
    np.testing.assert_array_equal(out, np.asarray(lax.pad(x_, np.float32(7), ((1, 2, 0), (2, 1, 2)))))
    with pytest.raises(ExecutionError, match=r"hlo.dynamic_pad: .* gives f32\[5,11\], but the op declares f32\[5,10\]"):
        exe(x_, np.float32(7), np.array([1, 2]), np.array([2, 2]), np.array([0, 2]))
    with pytest.raises(ExecutionError, match="interior padding -1 of dimension 1 must not be negative"):
        exe(x_, np.float32(7), np.array([1, 6]), np.array([2, 1]), np.array([0, -1]))
    with pytest.raises(BuilderError, match=r"edge_padding_low must be an integer array of shape \[2\]"):
        b.dynamic_pad(x, v, b.parameter(5, "s64[3]"), hi, it, "f32[5,10]")


def test_dynamic_gather_with_computed_slice_sizes():
    text = """
func.func @main(%x: tensor<3x4x2xi64>, %i: tensor<2x3x2xi64>, %s: tensor<3xi64>) -> tensor<2x3x2x2xi64> {
  %r = "stablehlo.dynamic_gather"(%x, %i, %s) {
    dimension_numbers = #stablehlo.gather<offset_dims = [2, 3], collapsed_slice_dims = [0], start_index_map = [1, 0],
                                          index_vector_dim = 2>, indices_are_sorted = false
  } : (tensor<3x4x2xi64>, tensor<2x3x2xi64>, tensor<3xi64>) -> tensor<2x3x2x2xi64>
  return %r : tensor<2x3x2x2xi64>
}"""
    module = import_stablehlo(text)
    assert any(op.name == "hlo.dynamic_gather" for op in module.walk())
    x = np.arange(24).reshape(3, 4, 2)
    idx = np.array([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 2]]])
    (out,) = lowering.compile(module)(x, idx, np.array([1, 2, 2]))
    dn = lax.GatherDimensionNumbers(offset_dims=(2, 3), collapsed_slice_dims=(0,), start_index_map=(1, 0))
    np.testing.assert_array_equal(out, np.asarray(lax.gather(x, idx, dn, (1, 2, 2))))
    assert "stablehlo.dynamic_gather" in export_stablehlo(module)


def test_dynamic_conv_from_text_and_builder():
    text = """
func.func @main(%x: tensor<1x5x5x1xf32>, %k: tensor<3x3x1x2xf32>, %p: tensor<2x2xi64>) -> tensor<1x5x5x2xf32> {
  %0 = "stablehlo.dynamic_conv"(%x, %k, %p) {dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
      feature_group_count = 1 : i64, batch_group_count = 1 : i64}
      : (tensor<1x5x5x1xf32>, tensor<3x3x1x2xf32>, tensor<2x2xi64>) -> tensor<1x5x5x2xf32>
  return %0 : tensor<1x5x5x2xf32>
}"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 5, 1)).astype(np.float32)
    k = rng.standard_normal((3, 3, 1, 2)).astype(np.float32)
    expected = np.asarray(lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (0, 2)),
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC")))
    (out,) = lowering.compile(import_stablehlo(text))(x, k, np.array([[1, 1], [0, 2]]))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    b = XlaBuilder("dc")
    xs, ks, ps = b.parameter(0, "f32[1,5,5,1]"), b.parameter(1, "f32[3,3,1,2]"), b.parameter(2, "s64[2,2]")
    b.dynamic_conv(xs, ks, ps, "f32[1,5,5,2]", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    (again,) = lowering.compile(b.build())(x, k, np.array([[1, 1], [0, 2]]))
    np.testing.assert_allclose(again, expected, rtol=1e-5, atol=1e-5)
