"""``xla-show``: pictures and reports of layouts and programs.

Subcommands: ``layout SHAPE -o out.svg|png`` (an array's physical order), ``cost PROGRAM`` (XLA's cost
analysis and a roofline), ``memory PROGRAM [--target cpu|tpu]`` (bytes per value, copies, peak live
bytes), ``graph PROGRAM -o out.html`` (a self-contained page of the program). Errors print one line
``xla-show: error: ...`` and exit with status 1 (2 for a bad command line).
"""

from __future__ import annotations

import argparse
import json
import sys

from xla_dialect.errors import XlaError

from ..programs import FORMATS_HELP

EPILOG = FORMATS_HELP


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xla-show",
        description="See layouts and programs: layout pictures, cost and memory reports, a program graph.",
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{layout,cost,memory,graph}")

    p = sub.add_parser("layout", help="draw an array's physical order (SVG or PNG)",
                       description="Draw SHAPE (XLA shape text with a layout, e.g. 'f32[3,5]{1,0:T(2,2)}'): "
                                   "each element in its logical grid labelled with its offset in memory, "
                                   "tiles outlined, padding shaded.")
    p.add_argument("shape", metavar="SHAPE")
    p.add_argument("-o", "--output", required=True, help="out.svg or out.png (PNG needs cairosvg or rsvg-convert)")
    p.add_argument("--max-elements", type=int, default=1024,
                   help="shapes with more elements are summarised (first tiles, counts); default 1024")

    p = sub.add_parser("cost", help="XLA's cost analysis and a roofline estimate", epilog=EPILOG)
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("--chip", action="append", default=None,
                   help="roofline chip: cpu (measured) or one of the published ones; repeatable (default: cpu)")
    p.add_argument("--top", type=int, default=20, help="ops listed, most expensive first (0: all)")
    p.add_argument("--entry", default=None, help="entry function (default: main)")
    p.add_argument("--physical", action="store_true", help="count bytes with tile padding (the layouts')")
    p.add_argument("--target", choices=("cpu", "tpu"), default=None,
                   help="lay the program out for this target first and count bytes with its tile padding")
    p.add_argument("--json", metavar="FILE", help="also write the totals and per-op costs as JSON")

    p = sub.add_parser("memory", help="bytes per value with tile padding, copies, peak live bytes", epilog=EPILOG)
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("--target", choices=("cpu", "tpu"), default="cpu")
    p.add_argument("--top", type=int, default=30, help="values listed, largest first (0: all)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")

    p = sub.add_parser("graph", help="a self-contained HTML page of the program graph", epilog=EPILOG)
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("-o", "--output", required=True, help="out.html")
    p.add_argument("--no-fusion", action="store_true", help="do not ask the executor for its fusion groups")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``xla-show``; returns the exit status (0 ok, 1 an error in the input, 2 a bad command line)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except XlaError as e:
        print(f"xla-show: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"xla-show: error: {e}", file=sys.stderr)
        return 1


def _load(path: str):
    from ..programs import load_program

    return load_program(path)


def _run(args) -> int:
    if args.command == "cost":
        from ..show.cost import cost_report

        module = _load(args.program)
        report, text = cost_report(module, chips=tuple(args.chip or ["cpu"]), top=args.top or None,
                                   entry=args.entry, physical=args.physical, target=args.target)
        print(text)
        if args.json:
            payload = {"totals": report.totals, "entry": report.entry,
                       "ops": [{"op": c.label, "function": c.function, "location": c.location,
                                "flops": c.flops, "transcendentals": c.transcendentals,
                                "bytes accessed": c.bytes_accessed} for c in report.ops]}
            with open(args.json, "w") as f:
                json.dump(payload, f, indent=1)
        return 0
    if args.command == "layout":
        from ..show.layout import write_layout_picture

        path = write_layout_picture(args.shape, args.output, max_elements=args.max_elements)
        print(f"wrote {path}")
        return 0
    if args.command == "memory":
        from ..show.memory import memory_report

        module = _load(args.program)
        report = memory_report(module, target=args.target)
        print(report.text(args.top or None))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report.as_dict(), f, indent=1)
        return 0
    if args.command == "graph":
        from ..show.graph import write_graph

        module = _load(args.program)
        path = write_graph(module, args.output, fusion=not args.no_fusion, source=args.program)
        print(f"wrote {path}")
        return 0
    raise XlaError(f"unknown command {args.command!r}")  # (argparse refuses it first)


if __name__ == "__main__":
    sys.exit(main())
