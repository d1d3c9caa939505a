"""Command-line tools: ``xla-run``."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from xla_dialect.errors import XlaError


def _load_inputs(path: str | None, exe) -> list[np.ndarray]:
    if path is None:
        if exe.input_types:
            raise XlaError(
                f"the program takes {len(exe.input_types)} arguments; give them with --inputs FILE.npz "
                "(arrays named arg0, arg1, ... or in file order)"
            )
        return []
    with np.load(path) as data:
        names = list(data.files)
        ordered = [f"arg{i}" for i in range(len(names))]
        keys = ordered if all(k in data for k in ordered) else names
        return [data[k] for k in keys]


def xla_run_main(argv: list[str] | None = None) -> int:
    """``xla-run FILE [--inputs inputs.npz]`` or ``xla-run --demo``."""
    parser = argparse.ArgumentParser(prog="xla-run", description="Run an hlo program on the NumPy executor.")
    parser.add_argument("file", nargs="?", help="program file (hlo MLIR text)")
    parser.add_argument("--inputs", help=".npz file with the arguments (arg0, arg1, ...)")
    parser.add_argument("--entry", default="main", help="entry function (default: main)")
    parser.add_argument("--demo", action="store_true", help="build axpy and an MLP, run them, compare with jax.jit")
    parser.add_argument("--show-source", action="store_true", help="print the generated Python code")
    args = parser.parse_args(argv)
    try:
        if args.demo:
            from .demo import run_demo

            worst = run_demo()
            print(f"demo finished: max difference against jax.jit {worst:.3g}")
            return 0 if worst < 1e-5 else 1
        if not args.file:
            parser.error("give a program FILE or --demo")
        import lowering
        from xla_dialect import parse_module

        with open(args.file) as f:
            module = parse_module(f.read())
        exe = lowering.compile(module, entry=args.entry)
        if args.show_source:
            print(exe.source)
        results = exe(*_load_inputs(args.inputs, exe))
        for i, r in enumerate(results):
            print(f"result #{i}: {r.dtype}{list(r.shape)}")
            print(np.array2string(r, threshold=200))
        return 0
    except XlaError as e:
        print(f"xla-run: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"xla-run: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(xla_run_main())
