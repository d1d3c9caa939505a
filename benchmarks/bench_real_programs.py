"""Real-program shapes against jax.jit, measured in one run (issue 28's targets).

    python benchmarks/bench_real_programs.py [--only TEXT]

Times each program of ``benchmarks/real_programs.py`` (an ODE solve, a continued fraction, a sampler, an LSTM
scan, a Newton while loop, a fori_loop of dynamic slices) with the executor's default options and with
jax.jit, after the same warm-up, in interleaved rounds (medians of 7; ``bench_executor.bench_workloads``), and
prints a Markdown table with the geomean and the largest ratio. Issue 28's goals: every program within 3x
jax.jit, geomean <= 1.5x. Not run in CI (timings depend on the machine); README.md and docs/performance.md quote the figures.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from bench_executor import bench_workloads  # noqa: E402
from real_programs import REAL_PROGRAMS  # noqa: E402


def real_program_table(rows: list[dict]) -> str:
    """The results as a Markdown table, with the geomean and the largest ratio against jax.jit."""
    out = ["| program | executor (ms) | jax.jit (ms) | vs jax.jit | max abs diff |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['executor_ms']:.3f} | {r['jax_ms']:.3f} | {r['ratio_jax']:.1f}x "
                   f"| {r['max_abs_diff']:.2g} |")
    ratios = [r["ratio_jax"] for r in rows]
    if ratios:
        geomean = float(np.exp(np.mean(np.log(ratios))))
        out.append(f"\nGeomean {geomean:.1f}x jax.jit, largest {max(ratios):.1f}x (goals: each <= 3x, geomean <= "
                   "1.5x); medians of 7 interleaved rounds after 40 warm-up calls.")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` unless ``argv`` is given)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="TEXT", help="only the programs whose name contains TEXT")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(real_program_table(bench_workloads(only=parse_args().only, workloads=REAL_PROGRAMS)))
