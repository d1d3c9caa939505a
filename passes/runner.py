"""Running pipelines: :func:`run` applies passes to a module and hands back a :class:`PipelineResult`.

Above the pass registry (pipeline text is parsed by :func:`passes.registry.parse_pipeline`) and below the
passes that run themselves through it (``remove_dead_ops``, ``lower_quantized``, ...); the package
``passes`` re-exports :func:`run` and :class:`PipelineResult`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xla_dialect.errors import PassError

from .base import clean_pass_error, collect_reports, reset_reports
from .registry import parse_pipeline
from .verify import ModuleVerifier


@dataclass
class PipelineResult:
    """What :func:`run` hands back: the (rewritten in place) module, per-pass timings and reports."""

    module: ModuleOp
    timings: list[tuple[str, float]] = field(default_factory=list)
    """(pass spec, seconds) in pipeline order."""
    reports: list[tuple[str, Any]] = field(default_factory=list)
    """(pass spec, report object) for passes that emit one."""
    verify_timings: list[tuple[str, float]] = field(default_factory=list)
    """(pass spec, seconds spent verifying the module after it) with ``verify=True``."""

    def report(self, name: str) -> Any:
        """The report of the last pass named ``name`` (None when it emitted none)."""
        for spec, rep in reversed(self.reports):
            if spec.split("{", 1)[0] == name:
                return rep
        return None


def pipeline_passes(pipeline) -> tuple[ModulePass, ...]:
    """The pass instances of ``pipeline``: pipeline text (parsed), a ``ModulePass`` or a sequence of either."""
    if isinstance(pipeline, str):
        return parse_pipeline(pipeline).passes
    if isinstance(pipeline, ModulePass):
        return (pipeline,)
    if isinstance(pipeline, Sequence):
        out: list[ModulePass] = []
        for p in pipeline:
            out.extend(pipeline_passes(p))
        return tuple(out)
    raise PassError(f"passes.run: pipeline must be text or ModulePass instances, got {type(pipeline).__name__}")


def run(module: ModuleOp, pipeline: str | ModulePass | Sequence, *, verify: bool = True) -> PipelineResult:
    """Apply ``pipeline`` (text like ``"simplify,cse,dce"`` or pass instances) to ``module`` in place.

    With ``verify`` the module is verified after every pass, with the checks of
    xDSL's ``module.verify()`` (IRDL constraints, ``HloOp.verify_``: layouts and
    shape inference); a pass leaving invalid IR raises :class:`PassError`
    naming it. Within one call the op-local checks of hlo ops are memoized
    (:mod:`passes.verify`): an op that the verifier cannot tell apart from one
    that already passed (same class, operand and result types, properties,
    attributes, place in its block and, for ops with regions, region contents)
    is not re-checked; everything else, whole-function checks included, runs
    every time. Verification still costs about as much as a pass (on the
    15,000-op benchmark 0.15-0.25 s after each pass where module.verify() takes 1.0-1.4 s).
    ``verify=False`` skips verification entirely. Errors inside a pass name
    the pass and the op.
    """
    from xla_dialect.dialect import make_context

    if not isinstance(module, ModuleOp):
        raise PassError(f"passes.run expects an xDSL ModuleOp, got {type(module).__name__}")
    passes = pipeline_passes(pipeline)
    ctx = make_context()
    verifier = ModuleVerifier() if verify else None
    result = PipelineResult(module)
    sink: list = []
    token = collect_reports(sink)
    # Rewriting allocates many small, long-lived IR objects; the cyclic GC would
    # rescan them over and over (about a quarter of the time on large programs).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for p in passes:
            spec = str(p)
            start = time.perf_counter()
            try:
                p.apply(ctx, module)
            except PassError as e:
                clean_pass_error(e)
                raise
            except Exception as e:
                clean_pass_error(e)
                text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise PassError(f"pass {p.name}: {text}") from e
            result.timings.append((spec, time.perf_counter() - start))
            for emitter, rep in sink:
                result.reports.append((str(emitter), rep))
            sink.clear()
            if verifier is not None:
                start = time.perf_counter()
                _verify_after(p, module, verifier)
                result.verify_timings.append((spec, time.perf_counter() - start))
    finally:
        reset_reports(token)
        if gc_was_enabled:
            gc.enable()
    return result


def _verify_after(p: ModulePass, module: ModuleOp, verifier: ModuleVerifier) -> None:
    try:
        verifier.verify(module)
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PassError(f"pass {p.name} produced invalid IR: {text}") from None
