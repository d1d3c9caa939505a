"""Declarative passes over hlo programs, pipelines as text, plugins, and ``xla-opt``.

>>> import passes
>>> result = passes.run(module, "canonicalize-broadcasts,assign-layouts{target=tpu},cse,dce")
>>> result.report("assign-layouts")          # copies inserted, bytes per value
>>> passes.canonicalize_broadcasts(module)    # the executor's broadcast canonicalization

Every pass is an xDSL ``ModulePass`` built from a table of rewrite patterns
(:class:`~passes.base.PatternPass`); all are in one registry
(:func:`available_passes`) that also holds installed plugins (entry-point group
``xla_dialect.passes``) and plugin files (:func:`load_plugin`). The same passes
are visible to ``xdsl-opt`` through the ``xdsl.universe`` entry point.

This package is the top of ``passes/``: it re-exports :func:`~passes.runner.run`,
:func:`~passes.broadcasts.canonicalize_broadcasts` and the registry's functions, and imports
:mod:`passes.pipelines`, which registers the named pipelines (``executor``, ``cleanup``, ...). No module
of ``passes/`` imports the package itself.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from xla_dialect.errors import PassError, XlaError

from . import pipelines  # noqa: F401  (registers the named pipelines: passes.run(module, "executor"))
from .base import PatternPass, emit_report
from .broadcasts import canonicalize_broadcasts
from .registry import available_passes, get_pass, load_plugin, parse_pipeline, register_pass
from .runner import PipelineResult, run

__all__ = [
    "PassError",
    "PatternPass",
    "PipelineResult",
    "assign_layouts",
    "available_passes",
    "canonicalize_broadcasts",
    "emit_report",
    "get_pass",
    "load_plugin",
    "parse_pipeline",
    "register_pass",
    "run",
    "XlaError",
]


def assign_layouts(module: ModuleOp, target: str = "cpu"):
    """Run ``assign-layouts{target=...}`` on ``module`` in place; return its :class:`~passes.layouts.LayoutReport`."""
    return run(module, f"assign-layouts{{target={target}}}").report("assign-layouts")

