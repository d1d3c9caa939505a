"""Reporting: the progress line, the summary (:func:`summarize`), the tables by op family and by cause
(:func:`family_table`, :func:`causes_table`) and the ``--json`` report (:func:`write_json`)."""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict

from .records import Result, STATUSES
from .running import NEWER_OPS_NOTE


class Progress:
    """A one-line progress bar on stderr, redrawn in place on a terminal. Elsewhere (a pipe, a file, a CI
    log: ``$CI`` set, or ``TERM=dumb``) one line per tenth of the programs or per ``interval`` seconds,
    whichever comes first, and the last."""

    def __init__(self, total: int, stream=None, width: int = 30, interval: float = 10.0):
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.width = width
        self.counts: Counter = Counter()
        self.done = 0
        self.start = time.monotonic()
        self.tty = (hasattr(self.stream, "isatty") and self.stream.isatty() and not os.environ.get("CI")
                    and os.environ.get("TERM") != "dumb")
        self.every = max(1, -(-self.total // 10))
        self.interval = interval
        self._printed = (0, self.start)  # (programs done, time) at the last line

    def __call__(self, result: Result) -> None:
        self.done += 1
        self.counts[result.status] += 1
        now = time.monotonic()
        if not self.tty and self.done != self.total and self.done - self._printed[0] < self.every \
                and now - self._printed[1] < self.interval:
            return
        self._printed = (self.done, now)
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        counts = " ".join(f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s])
        line = f"[{bar}] {self.done}/{self.total} {counts} ({time.monotonic() - self.start:.0f} s)"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def summarize(results: Sequence[Result], seconds: float | None = None) -> dict:
    """Counts by status, the pass rate over the non-disabled programs, and the total time."""
    counts = Counter(r.status for r in results)
    enabled = len(results) - counts["disabled"]
    unparsed = sum(1 for r in results if r.status == "error" and is_unparsed(r))
    parsed = enabled - unparsed
    newer = [r for r in results if r.message.endswith(NEWER_OPS_NOTE)]
    newer_passed = sum(1 for r in newer if r.status == "passed")
    by_jaxlib = parsed - len(newer)  # (what jaxlib's own parser reads; the fallback reads ``newer``)
    summary = {"total": len(results), **{s: counts[s] for s in STATUSES}, "enabled": enabled,
               "pass_rate": round(counts["passed"] / enabled, 6) if enabled else 1.0,
               "unparsed": unparsed,
               "pass_rate_parsed": round(counts["passed"] / parsed, 6) if parsed else 1.0,
               "newer_ops": len(newer), "newer_ops_passed": newer_passed,
               "parsed_by_jaxlib": by_jaxlib, "passed_parsed_by_jaxlib": counts["passed"] - newer_passed}
    if seconds is not None:
        summary["seconds"] = round(seconds, 2)
    return summary


def is_unparsed(result: Result) -> bool:
    """Whether the program failed because jaxlib's MLIR parser rejects its text (often syntax of a
    StableHLO newer than the one bundled with jaxlib), as opposed to failing in the toolkit."""
    return result.message.startswith("parse:") and "cannot parse the StableHLO text" in result.message


def family_table(results: Sequence[Result]) -> str:
    """A text table of status counts per op family (families with a non-passing program first)."""
    by_family: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by_family[r.family or "?"][r.status] += 1
    rows = sorted(by_family.items(), key=lambda kv: (kv[1]["passed"] + kv[1]["disabled"] == sum(kv[1].values()),
                                                      kv[0]))
    header = ("family", "programs", *STATUSES)
    lines = [header] + [(name if len(name) <= 40 else name[:39] + "~", str(sum(c.values())),
                         *(str(c[s]) if c[s] else "." for s in STATUSES)) for name, c in rows]
    total = Counter(r.status for r in results)
    lines.append(("TOTAL", str(len(results)), *(str(total[s]) for s in STATUSES)))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = []
    for k, row in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if k == 0 or k == len(lines) - 2:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


_OP_NAME = re.compile(r"\b(?:hlo|stablehlo|chlo|mhlo|func)\.[a-z_]+")


def cause_of(result: Result) -> str:
    """A short key grouping programs that fail for the same reason (stage and op, or family and check kind)."""
    message = result.message
    if result.status == "failed":
        kind = re.search(r"(?:custom_call @)?check\.[a-z_]+|roundtrip", message)
        return f"{result.family}: {kind.group(0) if kind else 'check'} mismatch"
    stage = message.split(":", 1)[0] if ":" in message[:20] else "run"
    op = _OP_NAME.search(message)
    if op:
        return f"{stage}: {op.group(0)}"
    return f"{stage}: " + re.sub(r"\b\d+\b", "N", message.split(":", 1)[-1].strip())[:60]


def causes_table(results: Sequence[Result]) -> str:
    """The failed and erroneous programs grouped by :func:`cause_of`, largest group first."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.status in ("failed", "error"):
            groups[cause_of(r)].append(r)
    lines = []
    for cause, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"{len(members):5}  {cause}")
        for r in members[:3]:
            lines.append(f"         {r.path} :: {r.name}: {r.message[:160]}")
        if len(members) > 3:
            lines.append(f"         ... and {len(members) - 3} more")
    return "\n".join(lines)


def write_json(path: str, results: Sequence[Result], summary: dict) -> None:
    """Write the JSON report ``{"summary": ..., "results": [...]}``."""
    from ..command_io import write_json as write

    write(path, {"summary": summary, "results": [asdict(r) for r in results]})
