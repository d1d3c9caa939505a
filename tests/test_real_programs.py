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
