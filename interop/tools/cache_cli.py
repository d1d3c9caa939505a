"""``xla-cache``: the generated-code cache -- its size, a prune to a size, or clearing it.

The cache (``$XLA_DIALECT_CACHE/loops``, default ``~/.cache/xla_dialect/loops``) holds the generated modules of
compiled loops, segments and fused kernels, numba's machine code for them, and the executables ``lowering.compile``
stored (:mod:`lowering.executor.executable_cache`: a later process loads them instead of lowering); a process keeps it under its size
limit by itself (:mod:`lowering.runtime.cache_size`, ``$XLA_DIALECT_CACHE_SIZE``). This command is for a look or
an explicit clean-up::

    xla-cache                  # where it is, entries, size, limit
    xla-cache prune --to 500M  # remove least recently used entries down to 500 MiB
    xla-cache clear            # remove every entry
"""

from __future__ import annotations

import argparse
import sys

from xla_dialect.errors import XlaError

__all__ = ["main"]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xla-cache", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="where the cache is, its entries, size and limit (the default command)")
    p = sub.add_parser("prune", help="remove the least recently used entries down to a size")
    p.add_argument("--to", metavar="SIZE",
                   help="bytes, or a size such as 500M or 2G (default: the cache's limit, $XLA_DIALECT_CACHE_SIZE)")
    sub.add_parser("clear", help="remove every entry")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``xla-cache``; returns the exit status (0 ok, 1 an error, 2 a bad command line)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (XlaError, OSError) as e:
        print(f"xla-cache: error: {e}", file=sys.stderr)
        return 1


def _run(args) -> int:
    from lowering.runtime import cache_size
    from lowering.runtime.process_state import cache_directory

    directory = cache_directory()
    if directory is None:
        raise XlaError("no usable cache directory ($XLA_DIALECT_CACHE, else ~/.cache/xla_dialect, is not writable)")
    limit = cache_size.size_limit()
    if args.command in (None, "info"):
        found = cache_size.entries(directory)
        total = sum(e.size for e in found)
        print(f"cache: {directory}")
        executables = [e for e in found if e.name.endswith(".exe")]
        print(f"entries: {len(found)}, size: {_size(total)}, limit: "
              f"{'unlimited' if limit is None else _size(limit)} (${cache_size.ENVIRONMENT})")
        print(f"stored executables: {len(executables)}, {_size(sum(e.size for e in executables))}")
        return 0
    if args.command == "prune":
        to = cache_size.parse_size(args.to) if args.to is not None else limit
        report = cache_size.prune(directory, to, grace=0.0, target=1.0)
    else:
        report = cache_size.clear(directory)
    print(f"removed {report.removed_entries} of {report.entries} entries ({_size(report.removed_size)}); "
          f"{_size(report.size - report.removed_size)} left in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
