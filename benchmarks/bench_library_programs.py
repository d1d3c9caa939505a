"""Real JAX programs written with flax, optax, equinox, diffrax and numpyro against jax.jit (issue 28's last target).

    pip install -e '.[bench]'
    python benchmarks/bench_library_programs.py [--only TEXT] [--repeat 7] [--json results.json]
    python benchmarks/bench_library_programs.py --from-json results.json   # the table of a saved run

For each program of ``benchmarks/library_programs.py``: build it, import it (:func:`interop.import_jax`),
compile it with the executor's default options (loop compilation "auto"), run it and compare its outputs with
jax.jit's (bitwise, else the largest absolute difference), then time both in interleaved rounds after the same
warm-up (``bench_executor.best_of_each``: medians of ``--repeat`` rounds; warm-up until the automatic loop
compilations have started, then :func:`lowering.executor.compiled_loops.wait_for_background_compiles`). Prints a Markdown
table with the median and largest ratio against jax.jit (goals: median <= 2x, none above 10x), which while loops
stay interpreted and why (:func:`lowering.executor.compiled_loops.loop_source`'s reason, or numba rejecting the generated
code), the reasons ranked by how many programs they affect, and the programs that failed (with the stage and the
error: they are listed, never dropped). Not run in CI: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from collections import Counter

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import lowering  # noqa: E402
from bench_executor import best_of_each  # noqa: E402
from library_programs import LIBRARY_PROGRAMS  # noqa: E402


def _short(e: BaseException, limit: int = 160) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def loop_report(module) -> list[dict]:
    """The module's while loops as the executor sees them (in the program ``passes.pipelines.
    prepare_for_execution`` makes, as :func:`interop.show.graph.executor_view` finds them), each
    ``{"compiled": bool, "reason": str}``: ``compiled_loops.loop_source`` raises ``Ineligible`` with the reason
    for a loop it does not compile; an eligible loop is also compiled (:func:`compiled_loops.compile_loop`, the
    code numba caches for the executor) to catch generated code numba rejects. A loop nested in an eligible loop
    is part of it and not listed."""
    from xdsl.dialects import func

    from lowering.executor.compiled_loops import Ineligible, compile_loop, loop_source
    from passes.pipelines import prepare_for_execution
    from xla_dialect.ops.control_flow import WhileOp
    from xla_dialect.types import numpy_dtype

    prepared = prepare_for_execution(module)
    functions = {f.sym_name.data: f for f in prepared.ops if isinstance(f, func.FuncOp)}
    eligible: set[int] = set()
    out = []
    for fn in functions.values():
        for op in fn.walk():  # (outer loops before the loops in their bodies)
            if not isinstance(op, WhileOp):
                continue
            parent = op.parent_op()
            while parent is not None and id(parent) not in eligible:
                parent = parent.parent_op()
            if parent is not None:
                continue  # compiled as part of its enclosing loop
            try:
                loop_source(op, functions, numpy_dtype)
            except Ineligible as e:
                out.append({"compiled": False, "reason": str(e) or "an op compiled loops do not cover"})
                continue
            except Exception as e:  # noqa: BLE001 - the executor keeps such a loop interpreted too
                out.append({"compiled": False, "reason": f"loop_source failed: {_short(e, 80)}"})
                continue
            eligible.add(id(op))
            if compile_loop(op, functions, numpy_dtype) is None:
                out.append({"compiled": False, "reason": "numba rejected the generated code"})
            else:
                out.append({"compiled": True, "reason": ""})
    return out


def _warm_up(fn, min_calls: int = 40, min_seconds: float = 0.5, max_seconds: float = 30.0) -> None:
    """Calls until the executor's automatic fast paths are in place (fused groups after 20 calls, loops after
    2,000 iterations or 0.25 s interpreted, compiled on a background thread), waiting for those compilations;
    twice, for loops whose compilation starts only once an enclosing path is fast."""
    from lowering.executor import compiled_loops

    for _ in range(2):
        start, calls = time.perf_counter(), 0
        while calls < min_calls or time.perf_counter() - start < min_seconds:
            fn()
            calls += 1
            if time.perf_counter() - start > max_seconds:
                break
        compiled_loops.wait_for_background_compiles()


def bench_program(make, repeat: int = 7) -> dict:
    import jax

    from interop import import_jax

    row: dict = {"name": getattr(make, "__name__", str(make)), "library": "?"}
    stage = "build"
    try:
        w = make()
        row.update(name=w.name, library=w.group)
        stage = "import"
        t0 = time.perf_counter()
        module = import_jax(w.fn, *w.args)
        row["import_s"] = time.perf_counter() - t0
        stage = "compile"
        t0 = time.perf_counter()
        exe = lowering.compile(module)
        row["compile_s"] = time.perf_counter() - t0
        stage = "loops"
        try:
            row["loops"] = loop_report(module)
        except Exception as e:  # noqa: BLE001 - the report is informative only
            row["loops"] = [{"compiled": False, "reason": f"(loop report failed: {_short(e)})"}]
        stage = "run"
        leaves = jax.tree.leaves(w.args)
        t0 = time.perf_counter()
        first = exe(*leaves)
        row["first_call_s"] = time.perf_counter() - t0
        stage = "jax.jit"
        jitted = jax.jit(w.fn)
        jax_args = jax.device_put(w.args)
        ref = [np.asarray(r) for r in jax.tree.leaves(jitted(*jax_args))]
        ours = [np.asarray(r) for r in jax.tree.leaves(first)]
        stage = "compare"
        if len(ours) != len(ref):
            raise AssertionError(f"{len(ours)} outputs, jax.jit gives {len(ref)}")
        diff, bitwise = 0.0, True
        for a, b in zip(ours, ref):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise AssertionError(f"output {a.dtype}{list(a.shape)}, jax.jit gives {b.dtype}{list(b.shape)}")
            bitwise &= a.tobytes() == b.tobytes()
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            same_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
            d = np.where(same_nan, 0.0, d)
            diff = max(diff, float(np.max(d, initial=0.0)) if not np.isnan(d).any() else float("nan"))
        row.update(max_abs_diff=diff, bitwise=bitwise)

        stage = "timing"
        run_ours = functools.partial(exe, *leaves)

        def run_jax():
            jax.block_until_ready(jitted(*jax_args))

        _warm_up(run_ours)
        t0 = time.perf_counter()
        run_ours()
        per_call = time.perf_counter() - t0
        number = max(1, min(50, int(0.02 / max(per_call, 1e-6))))
        times = best_of_each({"ours": run_ours, "jax": run_jax}, repeat=repeat, number=number)
        row.update(ours_ms=times["ours"][1] * 1e3, jax_ms=times["jax"][1] * 1e3,
                   ours_best_ms=times["ours"][0] * 1e3, jax_best_ms=times["jax"][0] * 1e3)
        row["ratio"] = row["ours_ms"] / row["jax_ms"]
        # Loops compiled by now (loop_compilation="auto"): the report above says which could not be.
    except Exception as e:  # noqa: BLE001 - listed in the table, never hidden
        row["error"] = f"{stage}: {_short(e)}"
        row["traceback"] = traceback.format_exc()
    return row


def _loops_cell(loops: list[dict]) -> str:
    if not loops:
        return "no while loops"
    interpreted = [lp["reason"] for lp in loops if not lp["compiled"]]
    if not interpreted:
        return f"all {len(loops)} compiled"
    counts = Counter(interpreted)
    reasons = "; ".join(f"{r}" + (f" (x{n})" if n > 1 else "") for r, n in counts.items())
    return f"{len(interpreted)} of {len(loops)} interpreted: {reasons}"


def table(rows: list[dict]) -> str:
    out = ["| program | library | ours (ms) | jax.jit (ms) | ratio | best rounds | max abs diff | while loops |",
           "|---|---|---|---|---|---|---|---|"]
    ok = [r for r in rows if "error" not in r]
    for r in ok:
        diff = "0 (bitwise)" if r["bitwise"] else f"{r['max_abs_diff']:.2g}"
        out.append(f"| {r['name']} | {r['library']} | {r['ours_ms']:.3f} | {r['jax_ms']:.3f} | {r['ratio']:.2f}x "
                   f"| {r['ours_best_ms'] / r['jax_best_ms']:.2f}x | {diff} | {_loops_cell(r.get('loops', []))} |")
    ratios = [r["ratio"] for r in ok]
    if ratios:
        worst = max(ok, key=lambda r: r["ratio"])
        out.append(f"\n{len(ok)} of {len(rows)} programs ran: median {np.median(ratios):.2f}x jax.jit, "
                   f"largest {worst['ratio']:.1f}x ({worst['name']}), geomean "
                   f"{float(np.exp(np.mean(np.log(ratios)))):.2f}x; {sum(r > 10 for r in ratios)} above 10x, "
                   f"{sum(r > 2 for r in ratios)} above 2x (goals: median <= 2x, none above 10x); "
                   f"{sum(r['bitwise'] for r in ok)} bitwise equal to jax.jit. Times are medians of "
                   "interleaved rounds; 'best rounds' is the ratio of the fastest rounds (the machine at its quietest).")
    failed = [r for r in rows if "error" in r]
    if failed:
        out += ["", "Programs that did not run:", "", "| program | library | error |", "|---|---|---|"]
        out += [f"| {r['name']} | {r['library']} | {r['error']} |" for r in failed]
    reasons = Counter()
    for r in rows:
        for reason in {lp["reason"] for lp in r.get("loops", []) if not lp["compiled"]}:
            reasons[reason] += 1
    if reasons:
        out += ["", "Why while loops stay interpreted (programs affected):", ""]
        out += [f"{i}. {reason}: {n}" for i, (reason, n) in enumerate(reasons.most_common(), 1)]
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` unless ``argv`` is given)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="TEXT",
                        help="only the programs whose function name contains TEXT (any case)")
    parser.add_argument("--repeat", type=int, default=7, metavar="N",
                        help="interleaved timing rounds, their median (default 7)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows to PATH")
    parser.add_argument("--from-json", metavar="PATH",
                        help="print the table of a run saved with --json, without running anything")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the programs the command line (``sys.argv[1:]`` unless ``argv`` is given) selects and print the
    table, or print a saved run's (``--from-json``)."""
    args = parse_args(argv)
    if args.from_json is not None:  # the table of a saved run
        with open(args.from_json) as f:
            print(table(json.load(f)))
        return
    rows = []
    for make in LIBRARY_PROGRAMS:
        if args.only is not None and args.only.lower() not in make.__name__.lower():
            continue
        t0 = time.perf_counter()
        row = bench_program(make, repeat=args.repeat)
        print(f"{row['name']}: " + (row["error"] if "error" in row else
                                    f"{row['ratio']:.2f}x ({row['ours_ms']:.3f} vs {row['jax_ms']:.3f} ms)")
              + f" [{time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        rows.append(row)
    if args.json is not None:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    print(table(rows))


if __name__ == "__main__":
    main()
