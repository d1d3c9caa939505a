"""Executor speed, measured against plain NumPy and jax.jit in the same run.

    python benchmarks/bench_executor.py

1. Per-op overhead: a chain of 2,000 small element-wise ops (f32[4]) run by the
   executor vs the same NumPy ufunc calls written by hand. Goal: < 1 us/op of overhead.
2. A 256x1024 MLP (two 1024-wide layers, ReLU, softmax) vs jax.jit on CPU.
   Goal: within 1.5x of jax.jit.
Not run in CI (timings depend on the machine); the README quotes the figures.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import lowering  # noqa: E402
from interop.demo import build_mlp, jax_mlp  # noqa: E402
from xla_dialect import XlaBuilder  # noqa: E402


def best_of(fn, repeat: int = 7, number: int = 10) -> float:
    """Best mean time per call, in seconds."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def bench_overhead(n_ops: int = 2000) -> dict:
    b = XlaBuilder("chain")
    x = b.parameter(0, "f32[4]")
    y = b.parameter(1, "f32[4]")
    v = x
    for i in range(n_ops):
        v = b.add(v, y) if i % 2 else b.mul(v, y)
    exe = lowering.compile(b.build())
    a = np.ones(4, np.float32)
    c = np.full(4, 0.5, np.float32)

    def by_hand():
        v = a
        for i in range(n_ops):
            v = np.add(v, c) if i % 2 else np.multiply(v, c)
        return v

    t_exe = best_of(lambda: exe(a, c))
    t_np = best_of(by_hand)
    return {"ops": n_ops, "executor_us_per_op": t_exe / n_ops * 1e6, "numpy_us_per_op": t_np / n_ops * 1e6,
            "overhead_us_per_op": (t_exe - t_np) / n_ops * 1e6}


def bench_mlp(batch: int = 256, width: int = 1024) -> dict:
    import jax

    module = build_mlp(batch, width, width, width)
    exe = lowering.compile(module)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s, dtype=np.float32) * 0.05 for s in
            [(batch, width), (width, width), (width,), (width, width), (width,)]]
    jitted = jax.jit(jax_mlp)
    jax_args = [jax.device_put(a) for a in args]

    def run_jax():
        jitted(*jax_args).block_until_ready()

    t_exe = best_of(lambda: exe(*args), number=5)
    t_jax = best_of(run_jax, number=5)
    (ours,) = exe(*args)
    diff = float(np.max(np.abs(ours - np.asarray(jitted(*jax_args)))))
    return {"executor_ms": t_exe * 1e3, "jax_jit_ms": t_jax * 1e3, "ratio": t_exe / t_jax, "max_abs_diff": diff}


if __name__ == "__main__":
    o = bench_overhead()
    print(f"per-op chain ({o['ops']} f32[4] ops): executor {o['executor_us_per_op']:.3f} us/op, "
          f"hand-written NumPy {o['numpy_us_per_op']:.3f} us/op, overhead {o['overhead_us_per_op']:.3f} us/op "
          f"(goal < 1)")
    m = bench_mlp()
    print(f"MLP 256x1024: executor {m['executor_ms']:.2f} ms, jax.jit {m['jax_jit_ms']:.2f} ms, "
          f"ratio {m['ratio']:.2f}x (goal <= 1.5), max |diff| {m['max_abs_diff']:.2g}")
