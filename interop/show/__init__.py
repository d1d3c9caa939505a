"""Seeing programs: layout pictures, memory and cost reports, a program graph (``xla-show``; docs/seeing-programs.md).

* :func:`xla_dialect.layout_drawing.draw` / ``xla-show layout`` -- an array's physical order as SVG;
* :func:`cost_report` / ``xla-show cost`` -- XLA's cost analysis (:mod:`passes.cost_analysis`) and a roofline;
* :func:`memory_report` / ``xla-show memory`` -- logical and physical bytes, copies, peak live bytes;
* :func:`graph_html` / :func:`write_graph` / ``xla-show graph`` -- a self-contained HTML page of the program.
"""

from passes.cost_analysis import CHIPS, CostReport, cost_analysis, measure_cpu, roofline

from .cost import cost_report
from .graph import executor_view, graph_html, write_graph
from .layout import write_layout_picture
from .memory import MemoryReport, memory_report

__all__ = ["CHIPS", "CostReport", "MemoryReport", "cost_analysis", "cost_report", "executor_view", "graph_html",
           "measure_cpu", "memory_report", "roofline", "write_graph", "write_layout_picture"]
