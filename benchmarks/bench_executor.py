"""Executor speed, measured against plain NumPy and jax.jit in the same run.

    python benchmarks/bench_executor.py

1. Per-op overhead: a chain of 2,000 small element-wise ops (f32[4]) run by the
   executor vs the same NumPy ufunc calls written by hand. Goal: < 1 us/op of overhead.
   Measured without FMA contraction (which computes something else: one emulated
   f32 FMA per multiply-add pair); the contracted chain is timed too.
2. The workloads of ``benchmarks/workloads.py`` (MLP, convnet, attention, scan RNN, element-wise, a chain
   of 1,500 small ops, a 64-step scan, a 1,000-iteration while loop, a ResNet block, a GPT-2 block), each
   imported from JAX and compiled with the default options, timed against jax.jit and against the same math
   written by hand in NumPy, in interleaved rounds (medians of 7). Goals (issue 9): geomean <= 1.5x jax.jit
   on the five "model" workloads, loops <= 3x, nothing slower than hand-written NumPy.
   ``--markdown`` prints the table as docs/performance.md shows it; ``--only TEXT`` keeps the workloads whose
   name contains TEXT.
3. A 256x1024 MLP (two 1024-wide layers, ReLU, softmax) vs jax.jit on CPU.
   Goal: within 1.5x of jax.jit. Timed under the default (automatic) BLAS
   policy (on two CPUs: large products split over both, one BLAS thread
   each), with ``blas_threads=1`` and with the BLAS's own thread count (see
   lowering/runtime/blas.py), all in the same run; also says whether the f32
   outputs of the three are bit-identical (OpenBLAS's threaded sgemm is not;
   the split is checked to be).
Not run in CI (timings depend on the machine); README.md and docs/performance.md quote the figures.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import lowering  # noqa: E402
from interop.tools.demo import build_mlp, jax_mlp  # noqa: E402
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


WARM_UP_S = 0.12
"""Seconds of untimed calls that start each function's block. OpenBLAS's worker threads keep spinning for about
0.1 s after a multi-threaded call (measured: ~0.1 s of process CPU time during a pause after a threaded 256x1024
sgemm; jax's threads use none), taking a core from whatever runs next; and on a VM a CPU left idle is slow to
wake (a pause before each block made the split matmuls of lowering.runtime.blas slower than one thread)."""


def settle(fns: dict, calls: int = 40) -> None:
    """Run each function until the executor's automatic fast paths are in place -- fused groups compile after
    20 calls, while loops after 2,000 iterations, on a background thread -- and wait for those compilations,
    so that timed calls measure the steady state, not the interpreted loop still waiting for its machine code."""
    from lowering.executor import compiled_loops

    for fn in fns.values():
        for _ in range(calls):
            fn()
        if hasattr(compiled_loops, "wait_for_background_compiles"):  # (A/B runs against older trees)
            compiled_loops.wait_for_background_compiles()


def best_of_each(fns: dict, repeat: int = 7, number: int = 5, warm_up: float = WARM_UP_S) -> dict:
    """(best, median) over rounds of the mean time per call of each function, in seconds.

    The rounds interleave the functions, so that every one sees the same drift
    in machine load (a shared VM's neighbours come and go), and shuffle their
    order (seeded). Each function's block of ``number`` timed calls follows
    ``warm_up`` seconds of untimed calls of the same function (at least one),
    so that worker threads the previous function left spinning (OpenBLAS's,
    after NumPy's threaded matmuls) have gone to sleep and the CPUs are awake:
    each function is timed in its own steady state, as in a loop calling it.
    The best round shows the machine at its quietest; the median shows what
    load costs (multi-threaded BLAS suffers most from it).
    """
    for fn in fns.values():
        fn()
    settle(fns)
    keys = list(fns)
    rounds: dict = {key: [] for key in keys}
    shuffle = random.Random(0).shuffle
    for _ in range(repeat):
        shuffle(keys)
        for key in keys:
            fn = fns[key]
            until = time.perf_counter() + warm_up
            fn()
            while time.perf_counter() < until:
                fn()
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            rounds[key].append((time.perf_counter() - t0) / number)
    return {key: (min(ts), float(np.median(ts))) for key, ts in rounds.items()}


def bench_overhead(n_ops: int = 2000) -> dict:
    b = XlaBuilder("chain")
    x = b.parameter(0, "f32[4]")
    y = b.parameter(1, "f32[4]")
    v = x
    for i in range(n_ops):
        v = b.add(v, y) if i % 2 else b.mul(v, y)
    module = b.build()
    # Dispatch overhead: the same ufunc calls as by hand. With XLA's FMA contraction (the default) each
    # multiply-add pair is one emulated f32 FMA instead, a different computation, timed separately.
    exe = lowering.compile(module, fma_contraction=False)
    contracted = lowering.compile(module)
    a = np.ones(4, np.float32)
    c = np.full(4, 0.5, np.float32)

    def by_hand():
        v = a
        for i in range(n_ops):
            v = np.add(v, c) if i % 2 else np.multiply(v, c)
        return v

    t_exe = best_of(lambda: exe(a, c))
    t_np = best_of(by_hand)
    t_fma = best_of(lambda: contracted(a, c))
    return {"ops": n_ops, "executor_us_per_op": t_exe / n_ops * 1e6, "numpy_us_per_op": t_np / n_ops * 1e6,
            "overhead_us_per_op": (t_exe - t_np) / n_ops * 1e6, "fma_contracted_us_per_op": t_fma / n_ops * 1e6}


def bench_mlp(batch: int = 256, width: int = 1024) -> dict:
    """The MLP under each BLAS thread policy (label -> compile's blas_threads) and under jax.jit."""
    import jax

    from lowering.runtime.blas import numpy_blas_threads, resolve_blas_threads, resolve_split_workers

    module = build_mlp(batch, width, width, width)
    auto = resolve_blas_threads(None)
    split = resolve_split_workers(None)
    own = max(numpy_blas_threads())  # as configured: environment, else the number of cores
    if auto is None:
        automatic = "BLAS as configured"
    elif split > 1:
        automatic = f"{auto} BLAS thread per piece, large products split over {split} CPUs"
    else:
        automatic = f"{auto} thread(s)"
    policies = {f"default (automatic: {automatic})": None,
                "blas_threads=1": 1, f"BLAS's own count ({own})": own}
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s, dtype=np.float32) * 0.05 for s in
            [(batch, width), (width, width), (width,), (width, width), (width,)]]
    jitted = jax.jit(jax_mlp)
    jax_args = [jax.device_put(a) for a in args]

    def run_jax():
        jitted(*jax_args).block_until_ready()

    exes = {label: lowering.compile(module, blas_threads=threads) for label, threads in policies.items()}
    times = best_of_each({"jax": run_jax, **{label: functools.partial(exe, *args) for label, exe in exes.items()}},
                         repeat=15, number=3)
    t_jax, median_jax = times.pop("jax")
    expected = np.asarray(jitted(*jax_args))
    single = exes["blas_threads=1"](*args)[0]
    rows = {}
    for label, exe in exes.items():
        (ours,) = exe(*args)
        rows[label] = {"executor_ms": times[label][0] * 1e3, "ratio": times[label][0] / t_jax,
                       "median_ms": times[label][1] * 1e3, "median_ratio": times[label][1] / median_jax,
                       "max_abs_diff": float(np.max(np.abs(ours - expected))),
                       "same_bits_as_single": np.array_equal(ours, single)}
    return {"jax_jit_ms": t_jax * 1e3, "jax_jit_median_ms": median_jax * 1e3, "policies": rows}


def bench_workloads(repeat: int = 7, only: str | None = None, workloads=None) -> list[dict]:
    """Each workload of ``benchmarks/workloads.py`` (or of ``workloads``; those whose name contains ``only``, if
    given): executor, jax.jit and NumPy times (median and best of ``repeat`` interleaved rounds) and the largest
    difference between the executor's and jax.jit's outputs."""
    import jax

    from interop import import_jax
    from workloads import WORKLOADS

    rows = []
    for make in WORKLOADS if workloads is None else workloads:
        w = make()
        if only is not None and only not in w.name:
            continue
        exe = lowering.compile(import_jax(w.fn, *w.args))
        jitted = jax.jit(w.fn)
        jax_args = [jax.device_put(a) for a in w.args]

        def run_jax(jitted=jitted, jax_args=jax_args):
            jax.block_until_ready(jitted(*jax_args))

        # Warm-up, as for jax.jit's first call: with the default options the executor compiles a fused group
        # after 20 calls and a loop after 2,000 iterations (lowering.executor.fusion, lowering.executor.compiled_loops).
        for _ in range(40):
            exe(*w.args)
        fns = {"executor": functools.partial(exe, *w.args), "jax": run_jax}
        if w.numpy_fn is not None:
            fns["numpy"] = functools.partial(w.numpy_fn, *w.args)
        # Enough calls per round for ~20 ms, so that short cases are not timer noise.
        t0 = time.perf_counter()
        exe(*w.args)
        number = max(1, min(50, int(0.02 / max(time.perf_counter() - t0, 1e-6))))
        times = best_of_each(fns, repeat=repeat, number=number)
        ours = jax.tree.leaves(exe(*w.args))
        ref = jax.tree.leaves(jitted(*jax_args))
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0))
                   for a, b in zip(ours, ref))
        row = {"name": w.name, "group": w.group, "executor_ms": times["executor"][1] * 1e3,
               "jax_ms": times["jax"][1] * 1e3, "numpy_ms": times["numpy"][1] * 1e3 if "numpy" in times else None,
               "executor_best_ms": times["executor"][0] * 1e3, "jax_best_ms": times["jax"][0] * 1e3,
               "max_abs_diff": diff}
        row["ratio_jax"] = row["executor_ms"] / row["jax_ms"]
        row["ratio_numpy"] = row["executor_ms"] / row["numpy_ms"] if row["numpy_ms"] else None
        rows.append(row)
    return rows


def workload_table(rows: list[dict]) -> str:
    """The workload results as a Markdown table, with the geomean of the model group."""
    out = ["| workload | executor (ms) | jax.jit (ms) | vs jax.jit | NumPy by hand (ms) | vs NumPy | max abs diff |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        numpy = f"{r['numpy_ms']:.3f} | {r['ratio_numpy']:.2f}x" if r["numpy_ms"] else "- | -"
        out.append(f"| {r['name']} | {r['executor_ms']:.3f} | {r['jax_ms']:.3f} | {r['ratio_jax']:.2f}x | {numpy} "
                   f"| {r['max_abs_diff']:.2g} |")
    model = [r["ratio_jax"] for r in rows if r["group"] == "model"]
    if len(model) == 5:
        geomean = float(np.exp(np.mean(np.log(model))))
        out.append(f"\nGeomean over the five model workloads: {geomean:.2f}x jax.jit (goal <= 1.5x); medians of 7 "
                   "interleaved rounds.")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` unless ``argv`` is given)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true",
                        help="only the workloads of benchmarks/workloads.py (part 2), their table as "
                             "docs/performance.md shows it")
    parser.add_argument("--only", metavar="TEXT",
                        help="with --markdown: only the workloads whose name contains TEXT (without it: ignored)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.markdown:
        print(workload_table(bench_workloads(only=args.only)))
        sys.exit(0)
    o = bench_overhead()
    print(f"per-op chain ({o['ops']} f32[4] ops): executor {o['executor_us_per_op']:.3f} us/op, "
          f"hand-written NumPy {o['numpy_us_per_op']:.3f} us/op, overhead {o['overhead_us_per_op']:.3f} us/op "
          f"(goal < 1; fma_contraction=False)")
    print(f"  same chain with XLA's FMA contraction (the default; 1,000 emulated f32 FMAs): "
          f"{o['fma_contracted_us_per_op']:.3f} us/op")
    m = bench_mlp()
    print(f"MLP 256x1024 (best round; median round in parentheses): "
          f"jax.jit {m['jax_jit_ms']:.2f} ms ({m['jax_jit_median_ms']:.2f} ms)")
    for label, r in m["policies"].items():
        print(f"  executor, {label}: {r['executor_ms']:.2f} ms ({r['median_ms']:.2f} ms), "
              f"ratio {r['ratio']:.2f}x ({r['median_ratio']:.2f}x) (goal <= 1.5), max |diff| {r['max_abs_diff']:.2g}, "
              f"bits {'=' if r['same_bits_as_single'] else '!='} blas_threads=1")
    print()
    print(workload_table(bench_workloads()))
