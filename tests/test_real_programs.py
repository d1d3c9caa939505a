"""Real JAX programs as their users write them: flax (linen, nnx), optax, equinox, typed keys, sharding."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
flax = pytest.importorskip("flax")
optax = pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402

import interop  # noqa: E402


def _ok(report):
    assert report.ok, str(report)
    return report


def test_linen_mlp_with_optax_adam_step():
    from flax import linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.tanh(nn.Dense(16)(x)))

    model, tx = MLP(), optax.adamw(1e-3)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y = np.zeros((5, 3), np.float32)
    params = model.init(jax.random.key(1), x)
    state = tx.init(params)

    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    _ok(interop.difftest(step, params, state, x, y))


def test_nnx_jit_compares_what_the_call_returns():
    """difftest(nnx.jit(f), model, x) compares f's result, not nnx's inner program (state outputs first)."""
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.dense = nnx.Linear(4, 3, rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)
            self.bn = nnx.BatchNorm(3, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.dropout(self.dense(x)))

    model = Model(nnx.Rngs(0))
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)

    @nnx.jit
    def f(model, x):
        return model(x)

    report = _ok(interop.difftest(f, model, x))
    assert len(report.outputs) == 1 and report.outputs[0].shape == (6, 3)


@pytest.mark.parametrize("kind", ["linear", "mlp", "static"])
def test_import_jax_of_nnx_jit_is_what_the_call_computes(kind):
    """import_jax(nnx.jit(f), model, x): the module's results are exactly what the call returns (nnx's inner
    program returns the model's state first: 3 results for a Linear, 5 for the MLP), its parameters the leaves
    of (model, x), the model's state in jax.tree.leaves order (a static argument stays static); run on them it
    gives the call's bits, and tracing changes no state."""
    from flax import nnx

    import lowering

    if kind == "linear":
        model = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
    else:
        model = nnx.Sequential(nnx.Linear(4, 8, rngs=nnx.Rngs(0)), nnx.relu, nnx.Linear(8, 3, rngs=nnx.Rngs(1)))
    # Weights and inputs of a few bits (quarters of small integers): every product and partial sum is exact,
    # so any order of the matmul's sums gives the same bits and the comparison can be bitwise.
    rng = np.random.default_rng(0)
    layers = [model] if kind == "linear" else [model.layers[0], model.layers[2]]
    for layer in layers:
        layer.kernel[...] = rng.integers(-8, 9, layer.kernel[...].shape).astype(np.float32) / 4
        layer.bias[...] = rng.integers(-8, 9, layer.bias[...].shape).astype(np.float32) / 4
    x = rng.integers(-8, 9, (5, 4)).astype(np.float32) / 4
    if kind == "static":
        f = nnx.jit(lambda model, x, scale: (model(x) * scale, jnp.sum(x)), static_argnums=2)
        args = (model, x, 2)
    else:
        f = nnx.jit(lambda model, x: model(x))
        args = (model, x)
    before = [np.asarray(v) for v in jax.tree.leaves(model)]
    module = interop.import_jax(f, *args)
    after = jax.tree.leaves(model)
    assert len(after) == len(before) and all(np.array_equal(np.asarray(a), b) for a, b in zip(after, before))
    main = module.body.block.ops.first
    expected = jax.tree.leaves(f(*args))
    leaves = [np.asarray(v) for v in jax.tree.leaves((model, x))]
    assert len(main.function_type.outputs) == len(expected) == (2 if kind == "static" else 1)
    assert len(main.function_type.inputs) == len(leaves) == {"linear": 3, "mlp": 5, "static": 5}[kind]
    actual = lowering.compile(module)(*leaves)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        assert np.asarray(a).tobytes() == np.asarray(e).tobytes()


def test_nnx_split_state_with_rng_keys_and_optimizer_step():
    from flax import nnx

    model = nnx.Sequential(nnx.Linear(4, 8, rngs=nnx.Rngs(0)), jax.nn.relu, nnx.Linear(8, 2, rngs=nnx.Rngs(1)))
    graphdef, state = nnx.split(model)
    x = np.ones((3, 4), np.float32)

    def apply(state, x):
        m = nnx.merge(graphdef, state)
        return m(x), nnx.state(m)

    _ok(interop.difftest(apply, state, x))

    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    _ok(interop.difftest(train_step, model, optimizer, x))


def test_equinox_mlp():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(4, 2, 16, 2, key=jax.random.key(0))
    params, static = eqx.partition(mlp, eqx.is_array)
    x = np.random.default_rng(0).standard_normal((4,)).astype(np.float32)

    def f(params, x):
        return eqx.combine(params, static)(x)

    _ok(interop.difftest(f, params, x))


def test_random_with_typed_keys():
    def sample(key, mu):
        k1, k2 = jax.random.split(key)
        return mu + jax.random.normal(k1, (8,)), jax.random.gamma(k2, 2.0, (4,)), jax.random.bernoulli(k1, 0.3, (5,))

    _ok(interop.difftest(sample, jax.random.key(42), np.float32(1.5)))


def test_odeint_pendulum_is_bitwise_jax_jit():
    # jax.experimental.ode.odeint (Dopri5 with adaptive steps): every output bit for bit -- it needs XLA's order for the error ratio's sum of squares (lowering/kernels/
    # tree_sum.py) and LLVM's contraction of the interpolation polynomial's -2*dt*dy0 + 2*dt*dy1 (the second
    # product fused: passes/fma_contraction.py); before those, 3 of its 40 outputs were up to 9.7e-8 off.
    import os
    import sys

    import lowering

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import real_programs

    w = real_programs.odeint_pendulum()
    want = np.asarray(jax.jit(w.fn)(*w.args))
    module = interop.import_jax(w.fn, *w.args)
    # (interpreted: tests/test_compiled_loops.py checks its compiled loops give the interpreter's bits)
    got = np.asarray(lowering.compile(module, loop_compilation="never")(*w.args)[0])
    assert got.tobytes() == want.tobytes()
