"""The bundled demo (``xla-run --demo``): axpy and a small MLP, built, printed, run and checked.

For each program it builds the computation with :class:`XlaBuilder`, prints the
MLIR (with XLA layouts) and the XLA shape of every value, runs it on the NumPy
executor and on ``jax.jit`` with the same inputs, and prints the maximum
difference.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import lowering
from xla_dialect import XlaBuilder, format_shape


def build_axpy(n: int = 10):
    """The XLA compiler overview's axpy: ``alpha * x + y``."""
    b = XlaBuilder("axpy")
    alpha = b.parameter(0, "f32[]", "alpha")
    x = b.parameter(1, f"f32[{n}]", "x")
    y = b.parameter(2, f"f32[{n}]", "y")
    b.add(b.mul(alpha, x), y)
    return b.build()


def build_mlp(batch: int = 8, d_in: int = 16, d_hidden: int = 32, d_out: int = 4):
    """A two-layer MLP with ReLU and a softmax: ``softmax(relu(x @ w1 + b1) @ w2 + b2)``."""
    b = XlaBuilder("mlp")
    x = b.parameter(0, f"f32[{batch},{d_in}]", "x")
    w1 = b.parameter(1, f"f32[{d_in},{d_hidden}]", "w1")
    b1 = b.parameter(2, f"f32[{d_hidden}]", "b1")
    w2 = b.parameter(3, f"f32[{d_hidden},{d_out}]", "w2")
    b2 = b.parameter(4, f"f32[{d_out}]", "b2")
    zero = b.constant(np.float32(0))
    h = b.max(b.add(b.dot(x, w1), b1, broadcast_dimensions=(1,)), zero)
    logits = b.add(b.dot(h, w2), b2, broadcast_dimensions=(1,))
    neg_inf = b.constant(np.float32(-np.inf))
    row_max = b.reduce(logits, neg_inf, lambda p, q: p.builder.max(p, q), [1])
    e = b.exp(b.sub(logits, row_max, broadcast_dimensions=(0,)))
    denom = b.reduce(e, zero, lambda p, q: p + q, [1])
    b.div(e, denom, broadcast_dimensions=(0,))
    return b.build()


def jax_axpy(alpha, x, y):
    return alpha * x + y


def jax_mlp(x, w1, b1, w2, b2):
    import jax

    h = jax.numpy.maximum(x @ w1 + b1, 0)
    return jax.nn.softmax(h @ w2 + b2, axis=1)


def value_shapes(module) -> list[tuple[str, str]]:
    """(SSA name, XLA shape) of every value in the entry function, in order."""
    from xdsl.dialects import func

    main = next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")
    rows = [(f"%arg{i}", format_shape(a.type)) for i, a in enumerate(main.body.block.args)]
    for op in main.body.block.ops:
        for r in op.results:
            rows.append((op.name, format_shape(r.type)))
    return rows


def run_demo(out=sys.stdout) -> float:
    """Run the demo; returns the largest difference seen against jax.jit."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    rng = np.random.default_rng(0)
    worst = 0.0
    programs = [
        ("axpy", build_axpy(), jax_axpy,
         [np.float32(3.0), rng.standard_normal(10, dtype=np.float32), rng.standard_normal(10, dtype=np.float32)]),
        ("mlp", build_mlp(), jax_mlp,
         [rng.standard_normal(s, dtype=np.float32) for s in [(8, 16), (16, 32), (32,), (32, 4), (4,)]]),
    ]
    for name, module, reference, args in programs:
        print(f"=== {name}: MLIR (hlo dialect, XLA layouts) ===", file=out)
        print(module, file=out)
        print(f"--- {name}: XLA shapes of the values ---", file=out)
        for op_name, shape in value_shapes(module):
            print(f"  {op_name:<24} {shape}", file=out)
        exe = lowering.compile(module)
        (ours,) = exe(*args)
        expected = np.asarray(jax.jit(reference)(*args))
        diff = float(np.max(np.abs(ours.astype(np.float64) - expected.astype(np.float64)))) if ours.size else 0.0
        worst = max(worst, diff)
        print(f"--- {name}: NumPy executor vs jax.jit: max |difference| = {diff:.3g} "
              f"(result {format_shape(module.ops.first.function_type.outputs.data[0], False)}) ---\n", file=out)
    return worst
