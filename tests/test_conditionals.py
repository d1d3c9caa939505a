"""inline-constant-conditionals: a conditional on a constant selector becomes the branch it takes (XLA's
ConditionalSimplifier), and the executor's results do not change."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from helpers import execute
from interop import import_jax
from passes.conditionals import inline_constant_conditionals
from passes.pipelines import prepare_for_execution
from xla_dialect import parse_module
from xla_dialect.ops.control_flow import ConditionalOp

THREE_BRANCHES = """
builtin.module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %i = hlo.constant <INDEX : tensor<i32>> : tensor<i32>
    %r = hlo.conditional %i, %x, %x, %x : (tensor<i32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> {
    ^bb0(%a: tensor<2xf32>):
      hlo.return %a : tensor<2xf32>
    } {
    ^bb0(%b: tensor<2xf32>):
      %n = hlo.negate %b : (tensor<2xf32>) -> tensor<2xf32>
      hlo.return %n : tensor<2xf32>
    } {
    ^bb0(%c: tensor<2xf32>):
      %e = hlo.exponential %c : (tensor<2xf32>) -> tensor<2xf32>
      hlo.return %e : tensor<2xf32>
    }
    func.return %r : tensor<2xf32>
  }
}
"""


def _conditionals(module) -> int:
    return sum(isinstance(op, ConditionalOp) for op in module.walk())


@pytest.mark.parametrize("index, expected", [(0, "x"), (1, "negate"), (2, "exp"), (7, "exp"), (-1, "exp")])
def test_a_constant_index_runs_its_branch_the_last_when_out_of_range(index, expected):
    module = parse_module(THREE_BRANCHES.replace("INDEX", str(index)))
    inlined = inline_constant_conditionals(module, clone=True)
    assert _conditionals(module) == 1 and _conditionals(inlined) == 0  # (the caller's module unchanged)
    x = np.array([0.5, -2.0], np.float32)
    want = {"x": x, "negate": -x, "exp": np.exp(x)}[expected]
    for program in (module, inlined):
        np.testing.assert_array_equal(execute(program, x)[0], execute(module, x)[0])
    np.testing.assert_allclose(execute(inlined, x)[0], want, rtol=1e-6)


def test_a_selector_computed_from_constants_counts_and_a_traced_one_does_not():
    def fn(x, flag):
        always = jnp.any(jnp.array([True, False]))  # convert(reduce_or(constant)) as jax writes it
        y = lax.cond(always, lambda v: v * 2.0, lambda v: v - 1.0, x)
        return lax.cond(flag, lambda v: jnp.sin(v), lambda v: jnp.cos(v), y)

    x = np.linspace(-1, 1, 5, dtype=np.float32)
    module = import_jax(fn, x, np.bool_(True))
    assert _conditionals(module) == 2
    assert _conditionals(prepare_for_execution(module)) == 1  # (the one on the argument stays)
    for flag in (True, False):
        (ours,) = lowering.compile(module)(x, np.bool_(flag))
        ref = jax.jit(fn)(x, flag)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


def test_nested_constant_conditionals_are_inlined_from_the_outside_in():
    def fn(x):
        inner = lambda v: lax.cond(jnp.all(jnp.array([True])), lambda u: u + 1.0, lambda u: u - 1.0, v)
        return lax.cond(jnp.any(jnp.array([False, True])), inner, lambda v: v * 3.0, x)

    x = np.arange(4, dtype=np.float32)
    module = import_jax(fn, x)
    assert _conditionals(module) == 2
    assert _conditionals(prepare_for_execution(module)) == 0
    np.testing.assert_array_equal(lowering.compile(module)(x)[0], x + 1.0)


def test_a_selector_on_the_replica_id_is_not_a_constant():
    """replica_id is pure but differs per device: a conditional on it stays (and fold-constants keeps it)."""
    from passes import run
    from xla_dialect import XlaBuilder

    b = XlaBuilder("per_replica")
    x = b.parameter(0, "f32[2]")
    is_zero = b.eq(b.replica_id(), b.constant(np.uint32(0)))
    r = b.conditional(is_zero, x, lambda v: v.builder.neg(v), x, lambda v: v)
    module = b.build(r)
    assert _conditionals(inline_constant_conditionals(module, clone=True)) == 1
    assert _conditionals(run(module, "fold-constants").module) == 1
    exe = lowering.compile(module, num_replicas=2)
    ones = np.ones(2, np.float32)
    (first,), (second,) = exe([ones], [ones])
    np.testing.assert_array_equal(first, -ones)
    np.testing.assert_array_equal(second, ones)
