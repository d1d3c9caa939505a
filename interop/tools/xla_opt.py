"""``xla-opt``: run a pass pipeline over an hlo (or StableHLO) program and print the result.

    xla-opt program.mlir -p "canonicalize-broadcasts,assign-layouts{target=tpu},cse,dce" --report
    xla-opt --list-passes
    xla-opt program.mlir -p my-pass --load-pass-plugin my_pass.py -o out.mlir

Input is any program file :func:`interop.load_program` reads (``xla-run`` reads the same;
:data:`interop.programs.FORMATS`): XLA HLO text, hlo MLIR, StableHLO text or bytecode, a
portable artifact or a serialized jax export.
``--emit`` picks the output: ``mlir`` (default), ``generic``, ``stablehlo`` or ``hlo``
(see :data:`EMITTERS`). The command lives with the other commands in ``interop``, the top
layer: the passes package does not import what is above it.
"""

from __future__ import annotations

import argparse
import io
import sys
import textwrap

from xla_dialect.errors import XlaError

from .command_io import quiet_broken_pipe

EMITTERS = {
    "mlir": "hlo MLIR, custom syntax",
    "generic": "hlo MLIR, generic op syntax",
    "stablehlo": "StableHLO MLIR text that jaxlib parses and XLA compiles",
    "hlo": "XLA HLO module text with the module's layouts",
}
"""``--emit`` choices."""


def emit(module, kind: str) -> str:
    """Print ``module`` in the ``--emit`` format ``kind``."""
    if kind == "mlir":
        return str(module)
    if kind == "generic":
        from xdsl.printer import Printer

        out = io.StringIO()
        Printer(stream=out, print_generic_format=True).print_op(module)
        return out.getvalue()
    if kind == "stablehlo":
        from ..stablehlo import export_stablehlo

        return str(export_stablehlo(module))
    if kind == "hlo":
        return hlo_text(module)
    raise XlaError(f"unknown --emit {kind!r}; choose one of {', '.join(EMITTERS)}")


def hlo_text(module) -> str:
    """XLA HLO text of ``module`` with its layouts (:func:`interop.export_hlo`)."""
    from ..hlo import export_hlo

    return export_hlo(module)


def describe_passes() -> str:
    """One line per registered pass: name, options (dashed, as pipelines spell them) with their defaults
    (``<required>`` / ``<optional>`` where there is none), summary."""
    from passes import available_passes
    from passes.registry import pass_signature, xdsl_opt_name

    lines = []
    for name, cls in available_passes().items():
        head = pass_signature(name, cls)
        # The docstring's whole first paragraph (a first line alone would cut its sentence).
        paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
        summary = " ".join(line.strip() for line in paragraph.splitlines())
        if summary.startswith("``") and "``: " in summary:
            summary = summary.split("``: ", 1)[1]  # the head already shows name and options
        if xdsl_opt_name(name) != name:  # xdsl-opt's own pass has this name (passes.registry.xdsl_opt_name)
            summary += f" (also {xdsl_opt_name(name)}, its name in xdsl-opt)"
        wrapped = textwrap.wrap(summary, 70) or [""]
        lines.append(f"  {head:48s} {wrapped[0]}")
        lines.extend(f"  {'':48s} {rest}" for rest in wrapped[1:])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xla-opt`` console script."""
    from ..programs import FORMATS_HELP

    parser = argparse.ArgumentParser(prog="xla-opt", description="Run hlo pass pipelines over a program and print "
                                     "the result.", epilog=FORMATS_HELP)
    parser.add_argument("file", nargs="?", default="-", help="program file (any format below); '-' = stdin")
    parser.add_argument("-p", "--passes", default="", help='pipeline, e.g. "canonicalize-broadcasts,cse,dce"')
    parser.add_argument("--emit", default="mlir", choices=list(EMITTERS),
                        help="output format: " + "; ".join(f"{k}: {v}" for k, v in EMITTERS.items()))
    parser.add_argument("-o", "--output", help="output file (default: stdout)")
    parser.add_argument("--list-passes", action="store_true", help="list the available passes and exit")
    parser.add_argument("--load-pass-plugin", action="append", default=[], metavar="FILE.py|MODULE",
                        help="load passes from a Python file (relative to the current directory) or an importable "
                             "module name (repeatable); the environment variable XLA_PASS_PLUGINS (':'-separated) "
                             "does the same here and in xdsl-opt. Writing a pass: docs/writing-passes.md")
    parser.add_argument("--report", action="store_true", help="print pass reports and timings to stderr")
    parser.add_argument("--no-verify", action="store_true", help="do not verify after every pass")
    parser.add_argument("--check-semantics", action="store_true",
                        help="also run the program before and after each pass on generated inputs (special values "
                             "included) and name the first pass that changes its results, and the op; exit status "
                             "1 then (interop.debugging.check_semantics)")
    parser.add_argument("--seeds", type=int, default=3, metavar="N",
                        help="--check-semantics: input sets (seeds 0..N-1; all but the first with special values)")
    parser.add_argument("--trusted", action="store_true",
                        help="the file is one you produced yourself: skip the check of bytecode, artifacts and "
                             "serialized exports in a child process (as xla-run --trusted)")
    args = parser.parse_args(argv)
    try:
        from passes import load_plugin, run

        for path in args.load_pass_plugin:
            load_plugin(path)
        if args.list_passes:
            print("available passes:")
            print(describe_passes())
            return 0
        from ..programs import load_program, program_from_bytes

        if args.file == "-":
            module = program_from_bytes(sys.stdin.buffer.read(), "<stdin>", trusted=args.trusted)
        else:
            module = load_program(args.file, trusted=args.trusted)
        semantics = None
        if args.check_semantics:
            from ..debugging.bisection import check_semantics

            if args.seeds < 1:
                raise XlaError(f"--seeds must be at least 1, got {args.seeds}")
            semantics = check_semantics(module, args.passes, seeds=range(args.seeds))
            print(f"xla-opt: --check-semantics: {semantics}".replace("\n", "\nxla-opt: "), file=sys.stderr)
        result = run(module, args.passes, verify=not args.no_verify) if args.passes.strip() else None
        text = emit(module, args.emit)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text + ("" if text.endswith("\n") else "\n"))
        else:
            print(text)
        if args.report and result is not None:
            for spec, seconds in result.timings:
                print(f"xla-opt: {spec}: {seconds * 1e3:.2f} ms", file=sys.stderr)
            for spec, report in result.reports:
                print(f"xla-opt: report of {spec}:\n{report}", file=sys.stderr)
        return 1 if semantics is not None and not semantics.ok else 0
    except BrokenPipeError:  # the reader went away (`xla-opt ... | head`): not an error
        return quiet_broken_pipe()
    except (XlaError, OSError) as e:
        print(f"xla-opt: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
