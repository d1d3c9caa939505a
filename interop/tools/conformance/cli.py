"""The command ``xla-conformance PATH... [--jobs N] [--timeout S] [--json REPORT]`` (:func:`main`);
see :mod:`interop.tools.conformance`."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence

from xla_dialect.errors import XlaError

from .records import ConformanceError
from .discovery import discover
from .running import run_program_through_hlo
from .workers import Interrupted, run_programs
from .report import Progress, causes_table, family_table, summarize, write_json


def _threshold(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    value = data.get("corpus", data).get("passed") if isinstance(data, dict) else data
    if not isinstance(value, int):
        raise ConformanceError(f"{path}: expected {{\"corpus\": {{\"passed\": N}}}} or {{\"passed\": N}}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``xla-conformance PATH... [--jobs N] [--timeout S] [--json REPORT]``; see the module docstring.

    Exit status: 0 when every non-disabled program passed (or, with
    ``--min-passed``/``--threshold``, when at least that many passed), 1
    otherwise, 2 on usage errors (a ``--filter`` matching no program
    included), 130 when interrupted with Ctrl-C (after printing the summary
    of the programs that finished and writing their ``--json`` report).
    """
    parser = argparse.ArgumentParser(
        prog="xla-conformance",
        description="Run StableHLO conformance programs (testdata and interpreter tests) through the importer, the "
                    "NumPy executor and their checks.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".mlir files or folders (searched recursively)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: CPU count; 0: run in this process, no isolation)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program (default 120; 0: none)")
    parser.add_argument("--memory", type=int, default=4096, metavar="MB",
                        help="address-space limit per worker in MiB (default 4096; 0: none)")
    parser.add_argument("--json", metavar="REPORT", help="write the JSON report to this file")
    parser.add_argument("--filter", metavar="REGEX", help="only programs whose path or name matches")
    parser.add_argument("--min-passed", type=int, help="succeed when at least this many programs pass")
    parser.add_argument("--threshold", metavar="FILE", help="JSON file with the minimum number passing "
                        "({\"corpus\": {\"passed\": N}})")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no family table")
    parser.add_argument("--via", choices=("stablehlo", "hlo"), default="stablehlo",
                        help="stablehlo (default): import the StableHLO; hlo: translate each program to XLA HLO text "
                             "with jaxlib, import that (interop.import_hlo), check the text round trip, then run")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the command's own process (and its workers): no GPU probing
    try:
        programs = discover(args.paths)
        minimum = args.min_passed
        if args.threshold:
            minimum = _threshold(args.threshold)
    except (XlaError, OSError, ValueError) as e:
        print(f"xla-conformance: error: {e}", file=sys.stderr)
        return 2
    if args.filter:
        try:
            pattern = re.compile(args.filter)
        except re.error as e:
            print(f"xla-conformance: error: --filter {args.filter!r} is not a regular expression: {e}",
                  file=sys.stderr)
            return 2
        found = len(programs)
        programs = [p for p in programs if pattern.search(p.path) or pattern.search(p.name)]
        if not programs:
            print(f"xla-conformance: error: --filter {args.filter!r} matches none of the {found} programs found "
                  f"in {', '.join(args.paths)} (it is searched in each program's path and name)", file=sys.stderr)
            return 2
    start = time.monotonic()
    progress = None if args.quiet else Progress(len(programs))
    runner = run_program_through_hlo if args.via == "hlo" else None
    interrupted = False
    try:
        results = run_programs(programs, args.jobs, args.timeout or None, args.memory or None, progress, runner)
    except Interrupted as e:
        results, interrupted = e.results, True
        print(f"\nxla-conformance: interrupted (Ctrl-C): {len(results)} of {len(programs)} programs finished; "
              "the summary and report below cover those", file=sys.stderr)
    summary = summarize(results, time.monotonic() - start)
    if interrupted:
        summary.update(interrupted=True, programs=len(programs))
    if not args.quiet:
        print(family_table(results))
    failing = [r for r in results if r.status in ("failed", "error")]
    if failing:
        print(f"\n{len(failing)} programs did not pass, by cause:")
        print(causes_table(results))
    print(f"\n{summary['passed']} of {summary['enabled']} enabled programs passed ({100 * summary['pass_rate']:.2f}%); "
          f"{summary['failed']} failed, {summary['error']} errors, {summary['skipped']} skipped, "
          f"{summary['disabled']} disabled; {summary['seconds']:.1f} s")
    if summary.get("newer_ops"):
        print(f"jaxlib's StableHLO parser reads {summary['parsed_by_jaxlib']} of them: "
              f"{summary['passed_parsed_by_jaxlib']} pass; it rejects {summary['newer_ops']} that use ops newer "
              f"than it, read through the importer's fallback (interop.stablehlo.parse.NEWER_OPS): "
              f"{summary['newer_ops_passed']} pass")
    if summary["unparsed"]:
        print(f"jaxlib's StableHLO parser rejects {summary['unparsed']} of them (their syntax may be newer than "
              f"jaxlib's); among the {summary['enabled'] - summary['unparsed']} it parses, "
              f"{100 * summary['pass_rate_parsed']:.2f}% pass")
    if args.json:
        write_json(args.json, results, summary)
    if interrupted:
        return 130  # (the shell's status of a command stopped by SIGINT)
    if minimum is not None:
        if summary["passed"] < minimum:
            print(f"xla-conformance: {summary['passed']} programs passed, fewer than the required {minimum}",
                  file=sys.stderr)
            return 1
        return 0
    return 0 if summary["passed"] == summary["enabled"] else 1


if __name__ == "__main__":
    sys.exit(main())
