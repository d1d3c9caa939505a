"""The commands of numerics debugging: ``xla-diverge`` and ``xla-reduce``.

``xla-run --random-inputs`` / ``--dump-intermediates`` and ``xla-opt --check-semantics`` are options of the
existing commands (:mod:`interop.tools.cli`, :mod:`interop.tools.xla_opt`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from xla_dialect.errors import XlaError

__all__ = ["add_input_arguments", "diverge_main", "parse_compile_options", "program_and_inputs", "reduce_main"]


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """``FILE``, ``--inputs``, ``--random-inputs``, ``--seed``, ``--special-values``, ``--entry``, ``--trusted``."""
    from ..programs import FORMATS_HELP

    parser.epilog = FORMATS_HELP
    parser.add_argument("file", help="program file (any format xla-run reads)")
    parser.add_argument("--inputs", help=".npz file with the arguments (arg0, arg1, ...)")
    parser.add_argument("--random-inputs", action="store_true",
                        help="generated arguments of the parameter types (the default without --inputs)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the generated arguments")
    parser.add_argument("--special-values", action="store_true",
                        help="mix NaN, +-inf, +-0, denormals and integer extremes into the generated arguments")
    parser.add_argument("--entry", default="main", help="entry function (default: main)")
    parser.add_argument("--trusted", action="store_true",
                        help="skip the child-process check of bytecode, artifacts and serialized exports")


def program_and_inputs(args) -> tuple:
    """The module and its arguments for the options of :func:`add_input_arguments`."""
    from .command_io import read_npz
    from ..programs import load_program
    from ..debugging.random_inputs import random_inputs

    if args.inputs and args.random_inputs:
        raise XlaError("give --inputs or --random-inputs, not both")
    inputs = read_npz(args.inputs)
    module = load_program(args.file, inputs, trusted=args.trusted)
    if inputs is None:
        inputs = random_inputs(module, seed=args.seed, special_values=args.special_values, entry=args.entry)
    return module, inputs


def parse_compile_options(text: str) -> dict:
    """``xla_rewrites=false,denormals=keep`` as ``{"xla_rewrites": False, "denormals": "keep"}``."""
    options = {}
    for item in text.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise XlaError(f"compile option {item.strip()!r}: write NAME=VALUE (e.g. xla_rewrites=false)")
        name, value = (x.strip() for x in item.split("=", 1))
        lowered = value.lower()
        if lowered in ("true", "false"):
            options[name] = lowered == "true"
        elif lowered == "none":
            options[name] = None
        else:
            try:
                options[name] = int(value)
            except ValueError:
                options[name] = value
    return options


def _against(text: str):
    if text in ("f64", "xla"):
        return text
    if os.path.exists(text):
        return text
    if "=" in text:
        return parse_compile_options(text)
    raise XlaError(f"--against {text}: give f64, xla, compile options (xla_rewrites=false,...), an .npz file "
                   "or a --dump-intermediates directory")


def diverge_main(argv: list[str] | None = None) -> int:
    """``xla-diverge PROGRAM [--inputs a.npz | --random-inputs] [--against f64|xla|OPTIONS|PATH] [--json]``:
    the first op whose value differs beyond its budget between a run of the program and a reference run
    (:func:`interop.debugging.find_divergence`). Exit status 0 when every value agrees, 1 when one
    diverges, 2 on errors."""
    parser = argparse.ArgumentParser(
        prog="xla-diverge", description="Run a program and a reference run; name the first op whose value "
        "leaves its error budget (ULPs or relative to the array's magnitude), with its source location.")
    add_input_arguments(parser)
    parser.add_argument("--against", default="f64", metavar="REFERENCE",
                        help="f64 (a float64 shadow run; default), xla (XLA CPU's values of the entry function's "
                             "ops), compile options of the reference run (xla_rewrites=false,fma_contraction=false), "
                             "an .npz of intermediate values or a --dump-intermediates directory")
    parser.add_argument("--options", default="", metavar="NAME=VALUE,...",
                        help="compile options of the run under test (and of the reference unless --against gives "
                             "options)")
    parser.add_argument("--max-ulp", type=int, default=None, metavar="N", help="ULP budget (default per dtype)")
    parser.add_argument("--rtol-magnitude", type=float, default=None, metavar="R",
                        help="budget relative to the array's largest magnitude (default per dtype; 0: off)")
    parser.add_argument("--max-iterations", type=int, default=16, metavar="N",
                        help="values compared per op inside loops (default 16)")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="write the report as JSON to FILE (stdout when no FILE is given)")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        from ..debugging.divergence import find_divergence, report_json

        module, inputs = program_and_inputs(args)
        report = find_divergence(module, *inputs, against=_against(args.against), max_ulp=args.max_ulp,
                                 rtol_magnitude=args.rtol_magnitude, entry=args.entry,
                                 max_iterations=args.max_iterations, **parse_compile_options(args.options))
        if args.json == "-":
            print(report_json(report))
        else:
            print(report)
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    f.write(report_json(report) + "\n")
        return 1 if report else 0
    except TypeError as e:  # an unknown compile option
        print(f"xla-diverge: error: {e}", file=sys.stderr)
        return 2
    except (XlaError, OSError) as e:
        print(f"xla-diverge: error: {e}", file=sys.stderr)
        return 2


def reduce_main(argv: list[str] | None = None) -> int:
    """``xla-reduce PROGRAM (--test CMD | --crash | --mismatch-vs-jax | --pass-changes PIPELINE) -o OUT``: shrink
    the program while it stays interesting (:func:`interop.debugging.reducer.reduce_program`); write the
    smallest as hlo MLIR to OUT and a pytest file reproducing it. Exit status 0 when written, 2 on errors
    (the program not interesting to begin with included)."""
    parser = argparse.ArgumentParser(
        prog="xla-reduce", description="Shrink a program (delta debugging over results, ops, operands, regions and "
        "constants; every candidate verifies) while a test says it is interesting; write the smallest and a pytest "
        "file reproducing it.")
    from ..programs import FORMATS_HELP

    parser.epilog = FORMATS_HELP
    parser.add_argument("file", help="program file (any format xla-run reads)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--test", metavar="CMD", help="interesting when `CMD candidate.mlir` exits 0")
    what.add_argument("--crash", action="store_true",
                      help="interesting when compiling or running on generated inputs raises the original's error "
                           "(same class, same op named)")
    what.add_argument("--mismatch-vs-jax", action="store_true",
                      help="interesting when the executor's results differ from XLA CPU's (difftest budgets)")
    what.add_argument("--pass-changes", metavar="PIPELINE",
                      help="interesting when the same pass of PIPELINE changes the results (check_semantics)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.mlir", help="where to write the smallest program")
    parser.add_argument("--pytest", metavar="FILE.py",
                        help="where to write the reproducing test (default: test_<OUT stem>.py next to OUT)")
    parser.add_argument("--load-pass-plugin", action="append", default=[], metavar="FILE.py|MODULE",
                        help="load passes (for --pass-changes)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the generated inputs")
    parser.add_argument("--max-ulp", type=int, default=None, metavar="N",
                        help="--mismatch-vs-jax: ULP budget (default per dtype, difftest's)")
    parser.add_argument("--rtol-magnitude", type=float, default=None, metavar="R",
                        help="--mismatch-vs-jax: budget relative to the result's magnitude (default per dtype; 0: off)")
    parser.add_argument("--max-seconds", type=float, default=None, metavar="S",
                        help="stop after S seconds with the smallest program so far")
    parser.add_argument("--entry", default="main", help="entry function (default: main)")
    parser.add_argument("--trusted", action="store_true",
                        help="skip the child-process check of bytecode, artifacts and serialized exports")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the op count at each step")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import passes

        from ..programs import load_program
        from ..debugging import reducer

        for plugin in args.load_pass_plugin:
            passes.load_plugin(plugin)
        module = load_program(args.file, trusted=args.trusted)
        if args.test:
            test = reducer.command_test(args.test)
        elif args.crash:
            test = reducer.crash_test(args.entry, args.seed)
        elif args.mismatch_vs_jax:
            test = reducer.mismatch_vs_jax_test(args.entry, args.seed, max_ulp=args.max_ulp,
                                                rtol_magnitude=args.rtol_magnitude)
        else:
            passes.parse_pipeline(args.pass_changes)  # (a bad pipeline is an error, not an uninteresting program)
            test = reducer.pass_changes_test(args.pass_changes, args.entry)
        result = reducer.reduce_program(module, test, entry=args.entry, max_seconds=args.max_seconds,
                                        verbose=args.verbose)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(str(result.module) + "\n")
        stem = os.path.splitext(os.path.basename(args.output))[0]
        test_path = args.pytest or os.path.join(os.path.dirname(os.path.abspath(args.output)),
                                                f"test_{re.sub(r'[^0-9A-Za-z_]', '_', stem)}.py")
        reducer.write_pytest(test_path, result.module, test, args.file, args.entry, args.seed,
                             plugins=args.load_pass_plugin)
        print(f"{result}; wrote {args.output} and {test_path}")
        return 0
    except (XlaError, OSError) as e:
        print(f"xla-reduce: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(diverge_main())
