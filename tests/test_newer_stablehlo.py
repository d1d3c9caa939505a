"""StableHLO newer than jaxlib 0.10's parser: ops of the current spec read through the importer's fallback
(interop.stablehlo.parse.NEWER_OPS), and quantized forms jaxlib's verifier rejects after the rewrite of
quantized types (bitcast_convert between a quantized type and its storage integers)."""

from __future__ import annotations

import numpy as np
import pytest

import lowering
from interop import import_stablehlo
from interop.stablehlo import parse_stablehlo
from interop.stablehlo.parse import PARSED_NEWER_OPS
from xla_dialect.errors import MlirParseError

REDUCE = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %r = "stablehlo.collective_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
  }) {
    replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
    channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>
  } : (tensor<3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
"""

BROADCAST = """
func.func @main(%x: tensor<2xi32>, %y: tensor<4xf32>, %root: tensor<2xi32>) -> (tensor<2xi32>, tensor<4xf32>) {
  %r:2 = "stablehlo.collective_broadcast"(%x, %y, %root) {
    replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
    has_dynamic_root
  } : (tensor<2xi32>, tensor<4xf32>, tensor<2xi32>) -> (tensor<2xi32>, tensor<4xf32>)
  return %r#0, %r#1 : tensor<2xi32>, tensor<4xf32>
}
"""


def test_collective_reduce_text_is_read_past_jaxlib():
    assert PARSED_NEWER_OPS in parse_stablehlo(REDUCE).operation.attributes
    exe = lowering.compile(import_stablehlo(REDUCE), num_replicas=2)
    x0, x1 = np.array([1, 5, -2], np.float32), np.array([3, 4, -1], np.float32)
    (r0,), (r1,) = exe([x0], [x1])
    np.testing.assert_array_equal(r0, [0, 0, 0])  # device 0 is the second member of the group
    np.testing.assert_array_equal(r1, np.maximum(x0, x1))  # device 1 is the root


def test_variadic_collective_broadcast_with_dynamic_root():
    exe = lowering.compile(import_stablehlo(BROADCAST), num_replicas=2)
    root = np.array([1, 0], np.int32)  # the first operand from member 1, the second from member 0
    args = [[np.array([d, d], np.int32), np.full(4, 10.0 + d, np.float32), root] for d in range(2)]
    for ints, floats in exe(*args):
        np.testing.assert_array_equal(ints, [1, 1])
        np.testing.assert_array_equal(floats, np.full(4, 10.0, np.float32))


def test_text_that_is_wrong_anyway_keeps_jaxlibs_error():
    with pytest.raises(MlirParseError, match="cannot parse the StableHLO text"):
        parse_stablehlo(REDUCE.replace("tensor<1x2xi64>,", "tensor<1x2xi64>"))


def test_an_op_jaxlib_does_not_know_is_named_as_such():
    # Any generic-form stablehlo op jaxlib's StableHLO has not registered is read past its parser: one the
    # importer converts runs, any other is reported by name as newer than jaxlib and unconverted.
    from xla_dialect.errors import UnsupportedError

    text = REDUCE.replace('"stablehlo.collective_reduce"(%x) ({', '"stablehlo.frobnicate"(%x) ({')
    assert PARSED_NEWER_OPS in parse_stablehlo(text).operation.attributes
    with pytest.raises(UnsupportedError, match=r"stablehlo\.frobnicate is neither an op of jaxlib's StableHLO"):
        import_stablehlo(text)


def test_bitcast_between_per_axis_quantized_and_storage_integers():
    text = """
func.func @main(%x: tensor<2xf32>) -> (tensor<2xi8>, tensor<2xf32>) {
  %q = "stablehlo.uniform_quantize"(%x) : (tensor<2xf32>) -> tensor<2x!quant.uniform<i8:f32:0, {0.5:1, 0.25:-3}>>
  %s = "stablehlo.bitcast_convert"(%q) : (tensor<2x!quant.uniform<i8:f32:0, {0.5:1, 0.25:-3}>>) -> tensor<2xi8>
  %back = stablehlo.bitcast_convert %s : (tensor<2xi8>) -> tensor<2x!quant.uniform<i8:f32:0, {0.5:1, 0.25:-3}>>
  %d = "stablehlo.uniform_dequantize"(%back) : (tensor<2x!quant.uniform<i8:f32:0, {0.5:1, 0.25:-3}>>) -> tensor<2xf32>
  return %s, %d : tensor<2xi8>, tensor<2xf32>
}
"""
    storage, values = lowering.compile(import_stablehlo(text))(np.array([2.0, 1.0], np.float32))
    np.testing.assert_array_equal(storage, [5, 1])  # round(2 / 0.5) + 1, round(1 / 0.25) - 3
    np.testing.assert_array_equal(values, [2.0, 1.0])


@pytest.mark.parametrize("dims", [(2, 0), (1, 0), (0, 2)])
def test_broadcast_in_dim_with_dimensions_out_of_order(dims):
    # The spec asks broadcast_dimensions to be unique only; XLA's broadcast wants them increasing: the
    # importer transposes the operand first (checked against jax.lax.broadcast_in_dim).
    import jax

    out_shape = (3, 4, 2) if dims != (0, 2) else (2, 4, 3)
    shape = (out_shape[dims[0]], out_shape[dims[1]])
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    text = f'''func.func @main(%x: tensor<{x.shape[0]}x{x.shape[1]}xf32>) -> tensor<{"x".join(map(str, out_shape))}xf32> {{
  %0 = "stablehlo.broadcast_in_dim"(%x) {{broadcast_dimensions = array<i64: {dims[0]}, {dims[1]}>}} : (tensor<{x.shape[0]}x{x.shape[1]}xf32>) -> tensor<{"x".join(map(str, out_shape))}xf32>
  return %0 : tensor<{"x".join(map(str, out_shape))}xf32>
}}'''
    (out,) = lowering.compile(import_stablehlo(text))(x)
    np.testing.assert_array_equal(out, np.asarray(jax.lax.broadcast_in_dim(x, out_shape, dims)))
