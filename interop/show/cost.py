"""``xla-show cost``: XLA's cost analysis of a program as text, with a roofline estimate."""

from __future__ import annotations

from passes.cost_analysis import CostReport, cost_analysis, roofline


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def roofline_text(line: dict) -> str:
    """One roofline estimate (a :func:`passes.cost_analysis.roofline` result) as two lines of text."""
    return (f"roofline on {line['chip']} ({line['precision']}; peak {_si(line['peak flops/s'], 'flop/s')}, "
            f"{_si(line['peak bytes/s'], 'B/s')}; {line['source']}):\n"
            f"  {_si(line['seconds'], 's')} ({line['bound']}-bound: compute {_si(line['compute seconds'], 's')}, "
            f"memory {_si(line['memory seconds'], 's')}; intensity {line['arithmetic intensity']:.3g} flop/B, "
            f"ridge {line['ridge point']:.3g} flop/B)")


def cost_report(module, chips=("cpu",), top: int | None = 20, entry: str | None = None,
                physical: bool = False, target: str | None = None) -> tuple[CostReport, str]:
    """The cost analysis of ``module`` and its text: XLA's totals (jax's key names), the ``top`` most
    expensive ops (all when None) and a roofline estimate on each chip of ``chips``.

    ``target="tpu"`` (or ``"cpu"``) first lays out a copy of the program with ``assign-layouts`` for that
    target and counts bytes with its tile padding (``physical``), as a TPU's shape size function does."""
    heading = "XLA cost analysis (jax's lower(...).cost_analysis() keys):"
    if target is not None:
        import passes

        module = module.clone()
        passes.assign_layouts(module, target)
        physical = True
        heading = f"XLA cost analysis, bytes with {target} layouts and tile padding:"
    report = cost_analysis(module, entry=entry, physical=physical)
    lines = [heading]
    for key in ("flops", "transcendentals", "bytes accessed"):
        lines.append(f"  {key!r}: {report.totals.get(key, 0.0):.10g}")
    lines.append("")
    lines.append(report.table(top))
    if top is not None and len(report.ops) > top:
        lines.append(f"  ... {len(report.ops) - top} more ops (--top 0 shows all)")
    for chip in chips:
        lines.append("")
        lines.append(roofline_text(roofline(report, chip)))
    return report, "\n".join(lines)
