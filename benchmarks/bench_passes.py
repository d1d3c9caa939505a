"""Pass pipeline throughput on a 15,000-op program.

    python benchmarks/bench_passes.py [--ops 15000] [--pipeline "..."] [--repeat 3]

The program is a stack of MLP/attention-like layers built with the builder
(dots, implicit broadcasts of biases and scalars, reductions, softmax,
transposes, reshapes, element-wise chains), so every pass has work to do.
Throughput = ops in the input program / CPU time of the whole pipeline
(``passes.run`` after a warm-up run that pays the one-time imports), without
and with verification after every pass (``passes.run``'s default, memoized
per op signature: see ``passes/verify.py``). Each mode runs ``--repeat`` times
on a fresh program and the fastest run is reported, as ``timeit`` does: on a
shared machine slower runs mostly measure the neighbours. CPU time is
reported for the same reason. Goal: the full pipeline
``canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce``
over 10,000 ops/s. Not run in CI (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import passes  # noqa: E402
from xla_dialect import XlaBuilder  # noqa: E402

FULL_PIPELINE = "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce"


def layer(b: XlaBuilder, x, w, bias, scale):
    """One layer: ~24 ops, with implicit broadcasts, a softmax, a transpose and a reshape."""
    h = b.add(b.dot(x, w), bias, [1])  # bias: InDim broadcast
    h = b.max(h, b.constant(np.float32(0)))  # scalar broadcast
    m = b.reduce(h, b.constant(np.float32(-np.inf)), lambda p, q: p.builder.max(p, q), [1])
    e = b.exp(b.sub(h, m, [0]))
    s = b.reduce(e, b.constant(np.float32(0)), lambda p, q: p + q, [1])
    p = b.div(e, s, [0])
    t = b.transpose(p, [1, 0])
    t = b.mul(t, scale)
    r = b.reshape(b.transpose(t, [1, 0]), [x.dims[0], x.dims[1]])
    return b.add(b.tanh(r), x)


def build_layers(layers: int, width: int = 128, batch: int = 8):
    """``layers`` stacked layers over f32[batch, width]."""
    b = XlaBuilder("bench")
    x = b.parameter(0, f"f32[{batch},{width}]")
    w = b.parameter(1, f"f32[{width},{width}]")
    bias = b.parameter(2, f"f32[{width}]")
    scale = b.parameter(3, "f32[]")
    for _ in range(layers):
        x = layer(b, x, w, bias, scale)
    return b.build(x)


def build_program(target_ops: int):
    """A program of about ``target_ops`` ops (every op counted, region bodies included)."""
    per_layer = count_ops(build_layers(2)) - count_ops(build_layers(1))
    return build_layers(max(1, round(target_ops / per_layer)))


def count_ops(module) -> int:
    """Ops in the module, nested ones included (module and functions excluded)."""
    return sum(1 for op in module.walk() if op.name not in ("builtin.module", "func.func"))


def bench(pipeline: str, n_ops: int, verify: bool) -> dict:
    """Run ``pipeline`` once on a fresh ~``n_ops`` program; wall and CPU time, ops/s."""
    module = build_program(n_ops)
    ops = count_ops(module)
    wall, cpu = time.perf_counter(), time.process_time()
    result = passes.run(module, pipeline, verify=verify)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"ops": ops, "wall": wall, "cpu": cpu, "ops_per_s": ops / cpu, "after": count_ops(module),
            "timings": result.timings, "verify_timings": result.verify_timings, "result": result}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=15000)
    parser.add_argument("--pipeline", default=FULL_PIPELINE)
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; the fastest is reported")
    args = parser.parse_args(argv)
    passes.run(build_program(300), args.pipeline)  # warm-up: imports (kernels, scipy) and caches
    for verify in (False, True):
        runs = [bench(args.pipeline, args.ops, verify) for _ in range(max(1, args.repeat))]
        r = min(runs, key=lambda run: run["cpu"])
        others = ", ".join(f"{run['ops_per_s']:,.0f}" for run in runs if run is not r)
        print(f"{args.pipeline}\n  verify after each pass: {verify}: {r['ops']} ops, CPU {r['cpu']:.2f} s "
              f"(wall {r['wall']:.2f} s) = {r['ops_per_s']:,.0f} ops/s of CPU time (goal > 10,000); "
              f"{r['after']} ops after" + (f"  [other runs: {others} ops/s]" if others else ""))
        verified = dict(r["verify_timings"])
        for spec, seconds in r["timings"]:
            check = f"  + {verified[spec] * 1e3:7.1f} ms verifying" if spec in verified else ""
            print(f"    {spec:40s} {seconds * 1e3:9.1f} ms wall{check}")
    report = r["result"].report("assign-layouts")
    if report is not None:
        print("   ", report.summary())


if __name__ == "__main__":
    main()
