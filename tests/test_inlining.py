"""``inline-calls``: hlo.call replaced by the callee's body, as XLA's CallInliner does."""

from __future__ import annotations

import numpy as np
import pytest

import lowering
import passes
from interop import import_stablehlo
from xla_dialect.errors import PassError
from xla_dialect.ops.control_flow import CallOp

NESTED = """
func.func private @square(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = stablehlo.multiply %x, %x : tensor<3xf32>
  return %y : tensor<3xf32>
}
func.func private @both(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %s = call @square(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %t = call @square(%y) : (tensor<3xf32>) -> tensor<3xf32>
  %d = stablehlo.subtract %s, %t : tensor<3xf32>
  return %s, %d : tensor<3xf32>, tensor<3xf32>
}
func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<2> : tensor<i32>
  %r:3 = stablehlo.while(%i = %c, %a = %x, %b = %y) : tensor<i32>, tensor<3xf32>, tensor<3xf32>
  cond {
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    %u:2 = func.call @both(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
    stablehlo.return %j, %u#0, %u#1 : tensor<i32>, tensor<3xf32>, tensor<3xf32>
  }
  return %r#1, %r#2 : tensor<3xf32>, tensor<3xf32>
}
"""


def _reference(x, y):
    a, b = x, y
    for _ in range(2):
        a, b = a * a, a * a - b * b
    return a, b


def test_inline_calls_nested_and_in_loop_bodies():
    module = import_stablehlo(NESTED)
    assert sum(isinstance(op, CallOp) for op in module.walk()) == 3
    x, y = np.array([1.5, -2.0, 0.5], np.float32), np.array([0.25, 1.0, -3.0], np.float32)
    before = lowering.compile(module)(x, y)
    passes.run(module, "inline-calls")
    assert not any(isinstance(op, CallOp) for op in module.walk())
    main = next(op for op in module.ops if getattr(op, "sym_name", None) and op.sym_name.data == "main")
    assert sum(1 for op in main.walk() if op.name == "hlo.multiply") == 2  # @square inlined twice
    after = lowering.compile(module, fma_contraction=False)(x, y)
    for got, want, ref in zip(after, before, _reference(x, y)):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        np.testing.assert_allclose(want, ref, rtol=1e-6)


def test_inline_calls_leaves_a_module_without_calls_alone():
    from passes.inlining import inline_calls

    module = import_stablehlo("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %x : tensor<2xf32>\n}")
    assert inline_calls(module, clone=True) is module


def test_recursive_calls_are_reported():
    module = import_stablehlo("""
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %y = call @g(%x) : (tensor<f32>) -> tensor<f32>
  return %y : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %y = call @f(%x) : (tensor<f32>) -> tensor<f32>
  return %y : tensor<f32>
}
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %y = call @f(%x) : (tensor<f32>) -> tensor<f32>
  return %y : tensor<f32>
}""")
    with pytest.raises(PassError, match=r"recursive calls \(@f -> @g -> @f\)"):
        passes.run(module, "inline-calls")
