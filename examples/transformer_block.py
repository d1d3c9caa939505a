"""Layout assignment on a JAX transformer block: what XLA-style TPU layouts cost.

    python examples/transformer_block.py [--target tpu] [--pipeline "..."]

Imports a pre-norm transformer block (multi-head attention and an MLP) from
``jax.jit(...).lower(...)`` with ``interop.import_jax``, runs the full pass
pipeline and prints the ``assign-layouts`` report (copies inserted, bytes of
every value including tile padding, totals), then checks that the executor's
results are unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

FULL_PIPELINE = "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce"


def transformer_block(x, wq, wk, wv, wo, w1, w2, g1, g2, heads: int = 4):
    """Pre-norm block: x + attention(norm(x)); then + mlp(norm(.)). x: [batch, seq, model]."""
    import jax
    import jax.numpy as jnp

    def norm(v, g):
        mean = v.mean(-1, keepdims=True)
        var = ((v - mean) ** 2).mean(-1, keepdims=True)
        return (v - mean) * jax.lax.rsqrt(var + 1e-5) * g

    b, s, d = x.shape
    h = norm(x, g1)
    q, k, v = (jnp.einsum("bsd,de->bse", h, w).reshape(b, s, heads, d // heads) for w in (wq, wk, wv))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads).astype(np.float32)
    attn = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, s, d)
    x = x + attn @ wo
    return x + jax.nn.gelu(norm(x, g2) @ w1) @ w2


def example_args(batch: int = 2, seq: int = 128, model: int = 256, hidden: int = 1024, seed: int = 0):
    """Random float32 inputs for :func:`transformer_block`."""
    rng = np.random.default_rng(seed)
    shapes = [(batch, seq, model), (model, model), (model, model), (model, model), (model, model),
              (model, hidden), (hidden, model), (model,), (model,)]
    return [(rng.standard_normal(s) * (0.05 if len(s) == 2 else 1)).astype(np.float32) for s in shapes]


def run(pipeline: str = FULL_PIPELINE, args=None):
    """(module before, module after, PipelineResult) for the block."""
    import passes
    from interop import import_jax

    args = example_args() if args is None else args
    module = import_jax(transformer_block, *args)
    before = module.clone()
    result = passes.run(module, pipeline)
    return before, module, result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=FULL_PIPELINE)
    parser.add_argument("--values", action="store_true", help="print the bytes of every value too")
    options = parser.parse_args(argv)
    import lowering

    args = example_args()
    before, after, result = run(options.pipeline, args)
    report = result.report("assign-layouts")
    print(str(report) if options.values else report.summary())
    for copy in report.copies:
        print(f"  copy {copy.value}: {copy.from_shape} -> {copy.to_shape} ({copy.bytes} bytes) for {copy.user}")
    tiling = result.report("tile-layouts")
    if tiling is not None:
        print(" ", tiling)
    # Each op's IEEE meaning is what the pipeline preserves (XLA's float rewrites, on by default in
    # lowering.compile, match patterns that layout and tiling change).
    expected = lowering.compile(before, xla_rewrites=False, fma_contraction=False)(*args)
    actual = lowering.compile(after, xla_rewrites=False, fma_contraction=False)(*args)
    same = all(np.array_equal(a, b) for a, b in zip(expected, actual))
    print(f"  executor results identical before/after: {same}")


if __name__ == "__main__":
    main()
