"""A flax (linen) model's training step, as its users write it, through the whole toolkit.

The step (forward pass, loss, gradients, an optax Adam update) is imported from JAX
(``interop.import_jax``), rewritten by a pass pipeline (``canonicalize-broadcasts``, layout
assignment for XLA's CPU, ``cse``, ``dce``), run on the NumPy executor for a few steps next to
``jax.jit``, and checked with ``interop.difftest``.

    python examples/flax_training_step.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

import interop
import lowering
import passes


class ConvNet(nn.Module):
    """A small convolutional classifier (conv, pooling, dense layers, layer norm)."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.LayerNorm()(x.reshape(x.shape[0], -1))
        return nn.Dense(10)(nn.gelu(nn.Dense(32)(x)))


model = ConvNet()
optimizer = optax.adam(1e-2)


def train_step(params, opt_state, images, labels):
    """One step: cross-entropy loss, gradients, Adam update; returns the new state and the loss."""
    def loss_fn(p):
        logits = model.apply(p, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def main(steps: int = 3) -> float:
    """Train ``steps`` steps on the executor and with jax.jit side by side; return the worst difference."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((8, 8, 8, 1)).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(np.int32)
    params = model.init(jax.random.key(0), images)
    opt_state = optimizer.init(params)

    module = interop.import_jax(train_step, params, opt_state, images, labels)
    result = passes.run(module, "canonicalize-broadcasts,assign-layouts{target=cpu},cse,dce")
    print(f"imported: {sum(1 for _ in module.walk())} ops after the pipeline; {len(result.timings)} passes")
    step = lowering.compile(module)

    state = (params, opt_state)
    jax_state = (params, opt_state)
    worst = 0.0
    for i in range(steps):
        flat = [np.asarray(a) for a in jax.tree.leaves((*state, images, labels))]
        outputs = step(*flat)
        treedef = jax.tree.structure(train_step(*state, images, labels))
        new_params, new_opt_state, loss = jax.tree.unflatten(treedef, list(outputs))
        jp, jo, jloss = jax.jit(train_step)(*jax_state, images, labels)
        worst = max(worst, abs(float(loss) - float(jloss)))
        print(f"step {i}: loss {float(loss):.6f} (jax.jit {float(jloss):.6f})")
        state, jax_state = (new_params, new_opt_state), (jp, jo)
    report = interop.difftest(train_step, params, opt_state, images, labels)
    print(report if not report.ok else f"difftest: OK ({len(report.outputs)} outputs, "
                                       f"{sum(report.exact)} bitwise exact)")
    report.raise_if_mismatch()
    return worst


if __name__ == "__main__":
    main()
