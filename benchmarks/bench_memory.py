"""Memory of real programs against jax.jit's (issue 28's target: no more than 2x jax.jit's peak).

    python benchmarks/bench_memory.py [--only TEXT]

For each program of ``benchmarks/real_programs.py`` and, when the 'bench' extra is installed, of
``benchmarks/library_programs.py``: the executor's peak of live values in one call
(:func:`lowering.executor.memory.program_memory` of the program as ``lowering.compile`` runs it, after its passes:
arguments, intermediates and results held at once in program order, the generated code freeing each value
after its last use; loop bodies and branches add their own peak) against XLA CPU's own figures for the program
jax.jit compiles (``compiled.memory_analysis()``: arguments + outputs + temporaries, less what its outputs alias).
Both are buffer-level figures of the same kind; neither counts code, constants baked into the executable or a
kernel's scratch space (BLAS's, a fused loop's registers). Deterministic: no timing.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def _makers() -> list:
    from real_programs import REAL_PROGRAMS

    makers = list(REAL_PROGRAMS)
    try:
        from library_programs import LIBRARY_PROGRAMS
        makers += list(LIBRARY_PROGRAMS)
    except ImportError:  # (the 'bench' extra is not installed: the real programs alone)
        pass
    return makers


def memory_row(workload) -> dict:
    """The executor's and XLA's bytes for one workload."""
    import jax

    import interop
    import lowering
    from lowering.executor.memory import program_memory

    jitted = jax.jit(workload.fn)
    exe = lowering.compile(interop.import_jax(jitted, *workload.args))
    ours = program_memory(exe.entry.parent_op(), exe.entry.sym_name.data)
    analysis = jitted.lower(*workload.args).compile().memory_analysis()
    xla = (int(analysis.argument_size_in_bytes) + int(analysis.output_size_in_bytes)
           + int(analysis.temp_size_in_bytes) - int(analysis.alias_size_in_bytes))
    return {"name": workload.name, "ours": ours.peak, "arguments": ours.arguments, "results": ours.results,
            "xla": xla, "xla_temporaries": int(analysis.temp_size_in_bytes)}


def memory_table(only: str | None = None) -> str:
    """Every program's bytes as a Markdown table, with the largest ratio."""
    rows = ["| program | executor peak live (KiB) | arguments / results (KiB) | XLA: args + outputs + temporaries "
            "(KiB) | ratio |", "|---|---|---|---|---|"]
    ratios = []
    for make in _makers():
        workload = make()
        if only and only not in workload.name:
            continue
        r = memory_row(workload)
        ratio = r["ours"] / max(r["xla"], 1)
        ratios.append((ratio, r["name"]))
        rows.append(f"| {r['name']} | {r['ours'] / 1024:.1f} | {r['arguments'] / 1024:.1f} / {r['results'] / 1024:.1f} "
                    f"| {r['xla'] / 1024:.1f} | {ratio:.2f}x |")
        print(rows[-1], file=sys.stderr, flush=True)
    if ratios:
        worst = max(ratios)
        rows.append(f"\nLargest ratio {worst[0]:.2f}x ({worst[1]}); {sum(r <= 2 for r, _ in ratios)} of {len(ratios)} "
                    "programs within 2x XLA's figure (issue 28's goal: all).")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` unless ``argv`` is given)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="TEXT", help="only the programs whose name contains TEXT")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(memory_table(parse_args().only))
