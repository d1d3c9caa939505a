"""Compile time and cache behaviour, in new processes (issue 28's targets), against jax.jit's.

    python benchmarks/bench_compile_time.py [--only TEXT] [--budget SECONDS] [--no-first-install]

For each program of ``benchmarks/real_programs.py`` and the diffrax Tsit5 solve of
``benchmarks/library_programs.py`` (when diffrax is installed; a program of several thousand ops with loops),
three new processes each import the program (``interop.import_jax``) and time, from ``lowering.compile`` on:

* **first install**: empty caches (a fresh ``XLA_DIALECT_CACHE`` and ``NUMBA_CACHE_DIR``: the library's own numba
  kernels compile too, once per installation): ``lowering.compile``, the first call, and when the calls reach
  their steady speed (every background compilation of ``loop_compilation="auto"`` done, then the median of 20
  calls: ``steady from``);
* **new program**: the library's kernels cached (the numba cache the first-install run filled), the program's
  generated code not (a fresh ``XLA_DIALECT_CACHE``): a user's first run of a new script;
* **warm**: the same in another process with the caches the new-program run left (the script's second run):
  ``lowering.compile`` loads the executable the new-program run stored (:mod:`lowering.executor.executable_cache`);
* **warm, lowered again**: the same with ``XLA_DIALECT_EXECUTABLE_CACHE=0`` (the module lowered, its machine code
  loaded from numba's cache: the warm start before the executable cache);
* **jax.jit**: ``jax.jit(f)``'s first call (trace, compile, run) in a new process without, then with, jax's
  persistent compilation cache (``jax_compilation_cache_dir``, every compilation cached).

Each child runs with ``PYTHONDONTWRITEBYTECODE`` unset (Python's default: the library's .pyc files are written once,
as a pip install writes them). Issue 28's goals: first-call compile of a 500-op program with loops <= 2 s; a new
process loads it from the cache in <= 50 ms. Not run in CI (timings depend on the machine); README.md and docs/performance.md quote the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _workloads() -> list:
    from real_programs import REAL_PROGRAMS

    makers = list(REAL_PROGRAMS)
    try:
        import diffrax  # noqa: F401

        from library_programs import diffrax_tsit5_lotka_volterra
        makers.append(diffrax_tsit5_lotka_volterra)
    except ImportError:  # (the 'bench' extra is not installed: the real programs alone)
        pass
    return makers


def _child(name: str, mode: str, budget: float) -> dict:
    """Run in a new process: import program ``name`` and time it as ``mode`` says (cold/warm: the executor;
    jax/jax-cache: jax.jit)."""
    import numpy as np

    workload = next(m() for m in _workloads() if m().name == name)
    import jax

    if mode == "jax-cache":
        jax.config.update("jax_compilation_cache_dir", os.environ["BENCH_JAX_CACHE"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if mode.startswith("jax"):
        start = time.perf_counter()
        jax.block_until_ready(jax.jit(workload.fn)(*workload.args))
        return {"first_call_s": time.perf_counter() - start}

    import interop
    import lowering
    from lowering.executor.compile_queue import pending

    module = interop.import_jax(jax.jit(workload.fn), *workload.args)
    ops = sum(1 for op in module.walk() if op.name.startswith("hlo"))
    start = time.perf_counter()
    exe = lowering.compile(module)
    compiled = time.perf_counter()
    exe(*workload.args)
    first = time.perf_counter()
    calls: list[tuple[float, float]] = []
    quiet = 0
    while not calls or time.perf_counter() - start < budget:  # (one call at least: a first call past the budget)
        t = time.perf_counter()
        exe(*workload.args)
        calls.append((t - start, time.perf_counter() - t))
        quiet = 0 if pending() else quiet + 1
        if quiet >= 20 and len(calls) >= 40:
            break
    steady = float(np.median([d for _, d in calls[-20:]]))
    steady_from = next(t for t, d in calls if d <= 1.5 * steady)
    return {"ops": ops, "compile_s": compiled - start, "first_call_s": first - compiled,
            "steady_from_s": steady_from, "steady_ms": steady * 1e3, "budget_hit": quiet < 20,
            "from_cache": exe.from_cache}


def _run_child(name: str, mode: str, budget: float, env: dict, unset: tuple = ("PYTHONDONTWRITEBYTECODE",)) -> dict:
    # (a child runs as Python runs by default, writing .pyc files: the library's own modules compiled once, as a
    # pip-installed package's are at its install -- with PYTHONDONTWRITEBYTECODE set, as in some containers, every
    # new process compiles those it imports again, ~0.1 s more of 'compile' and 'first call' on the warm runs)
    environment = {k: v for k, v in {**os.environ, **env}.items() if k not in unset}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, mode, str(budget)],
                         env=environment, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{name} ({mode}) failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def compile_time_table(only: str | None = None, budget: float = 300.0, first_install: bool = True) -> str:
    """Every program timed cold, warm and under jax.jit, each in its own process, as a Markdown table
    (``first_install`` False: without the first-install column, whose empty numba cache compiles the library's
    kernels for minutes; the new-program runs then use this machine's numba cache as it is)."""
    rows = ["| program | HLO ops | first install: compile / first call / steady from (s) | new program: compile / "
            "first call / steady from (s) | warm: compile / first call / steady from (s) | warm, lowered again: "
            "compile / first call (s) | steady call (ms) | jax.jit first call: no cache / its cache (s) |",
            "|---|---|---|---|---|---|---|---|"]
    for maker in _workloads():
        name = maker().name
        if only and only not in name:
            continue
        with tempfile.TemporaryDirectory() as caches:
            env = {"XLA_DIALECT_CACHE": os.path.join(caches, "xla"), "NUMBA_CACHE_DIR": os.path.join(caches, "numba"),
                   "BENCH_JAX_CACHE": os.path.join(caches, "jax")}
            if first_install:
                cold = _run_child(name, "cold", budget, env)
            else:  # (the library's kernels from this machine's numba cache)
                env.pop("NUMBA_CACHE_DIR")
                cold = None
            # (the library's kernels as the first-install run left them in its numba cache; the program's
            # generated modules new: another directory, so numba's cache has nothing for them)
            program_only = {**env, "XLA_DIALECT_CACHE": os.path.join(caches, "xla-new")}
            fresh = _run_child(name, "cold", budget, program_only)
            warm = _run_child(name, "warm", budget, program_only)
            # (the same without the executable cache: the module lowered again, its machine code loaded)
            lowered = _run_child(name, "warm", budget, {**program_only, "XLA_DIALECT_EXECUTABLE_CACHE": "0"})
            jax_cold = _run_child(name, "jax", budget, env)
            _run_child(name, "jax-cache", budget, env)  # (fills jax's cache)
            jax_warm = _run_child(name, "jax-cache", budget, env)

        def hit(run: dict) -> str:
            return " (budget hit)" if run["budget_hit"] else ""

        first = (f"{cold['compile_s']:.2f} / {cold['first_call_s']:.2f} / {cold['steady_from_s']:.1f}{hit(cold)}"
                 if cold is not None else "not run")

        loaded = "" if warm["from_cache"] else " (not from the executable cache)"
        rows.append(f"| {name} | {fresh['ops']} | {first} | {fresh['compile_s']:.2f} / {fresh['first_call_s']:.2f} / "
                    f"{fresh['steady_from_s']:.1f}{hit(fresh)} | {warm['compile_s']:.3f} / {warm['first_call_s']:.3f} / "
                    f"{warm['steady_from_s']:.2f}{loaded} | {lowered['compile_s']:.3f} / {lowered['first_call_s']:.3f} | "
                    f"{warm['steady_ms']:.3f} | {jax_cold['first_call_s']:.2f} / {jax_warm['first_call_s']:.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    rows.append("\nTimes from `lowering.compile` in a new process (imports and `interop.import_jax` not counted; "
                "jax.jit's first call includes its trace). 'steady from': when calls reach their steady speed, "
                "all background compilations done; '(budget hit)': not reached within --budget seconds.")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` unless ``argv`` is given). ``--child NAME MODE BUDGET`` is the command
    :func:`_run_child` gives the new processes it starts (not listed by ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="TEXT", help="only the programs whose name contains TEXT")
    parser.add_argument("--budget", type=float, default=300.0, metavar="SECONDS",
                        help="how long each process may call its program, from lowering.compile on, waiting for "
                             "the steady speed (default 300)")
    parser.add_argument("--no-first-install", action="store_true",
                        help="skip the first-install runs (an empty numba cache: minutes per program)")
    parser.add_argument("--child", nargs=3, metavar=("NAME", "MODE", "BUDGET"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    if args.child:
        name, mode, budget = args.child
        print(json.dumps(_child(name, mode, float(budget))))
    else:
        print(compile_time_table(args.only, args.budget, not args.no_first_install))
