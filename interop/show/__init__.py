"""Seeing programs: layout pictures, memory and cost reports, a program graph (``xla-show``).

* :func:`layout_svg` / ``xla-show layout`` -- an array's physical order (:mod:`xla_dialect.layout_drawing`);
* :func:`cost_report` / ``xla-show cost`` -- XLA's cost analysis (:mod:`passes.cost_analysis`) and a roofline;
* :func:`memory_report` / ``xla-show memory`` -- logical and physical bytes, copies, peak live bytes;
* :func:`graph_html` / ``xla-show graph`` -- a self-contained HTML page of the program.
"""

from passes.cost_analysis import CHIPS, CostReport, cost_analysis, measure_cpu, roofline

from .cost import cost_report

__all__ = ["CHIPS", "CostReport", "cost_analysis", "cost_report", "measure_cpu", "roofline"]
