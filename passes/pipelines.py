"""Named pipelines: the pass sequences the rest of the toolkit runs, written down once.

:data:`PIPELINES` maps a name to pipeline text (usable with :func:`passes.run`
and ``xla-opt -p``: this module registers the table with
:func:`passes.registry.register_pipelines`, and the package ``passes`` imports
it); :func:`prepare_for_execution` is what ``lowering.compile``
runs before it lowers a program (the ``executor`` pipeline, with its two
optional rewrites as switches, on a copy of the caller's module).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from xla_dialect.errors import PassError

from .registry import register_pipelines

EXECUTOR_PIPELINE = ("inline-calls,inline-constant-conditionals,dce,xla-divide-by-broadcast,canonicalize-broadcasts,xla-float-rewrites,xla-ynnpack-fusion,"
                     "xla-small-loops,xla-in-place-selects,"
                     "contract-fma,lower-quantized")
"""What the executor runs before lowering: calls inlined (as XLA's CallInliner does before fusion), conditionals on
constant selectors replaced by the branch they take (XLA's ConditionalSimplifier), dead pure ops removed (XLA's
DCE: a dead user changes no fusion or use count), XLA CPU's
divisions by broadcasts made multiplications by reciprocals (``xla-divide-by-broadcast``, on the program as
written: XLA counts the divisor's uses before broadcasts merge), implicit
broadcasts made explicit (kernels see same-shape operands), XLA's float-result-changing rewrites (``xla-float-rewrites``), the exp, log, tanh and logistic ops XLA CPU
computes inside YNNPACK fusions marked for YNNPACK's numerics (``xla-ynnpack-fusion``), the ops of the while loops XLA CPU compiles whole
in the form it computes them there (``xla-small-loops``), the max/min selects XLA CPU stores in place in a while loop
by masked stores (``xla-in-place-selects``), XLA CPU's multiply-add
contraction (``contract-fma``), and computations on quantized values as float ones (``lower-quantized``)."""

PIPELINES = {
    "executor": EXECUTOR_PIPELINE,
    "xla-cpu-layouts": "canonicalize-broadcasts,assign-layouts{target=cpu}",
    "xla-tpu-layouts": "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts",
    "cleanup": "simplify,fold-constants,cse,dce",
}
"""Pipeline name -> pipeline text."""

register_pipelines(PIPELINES)


def prepare_for_execution(module: ModuleOp, xla_rewrites: bool = True, fma_contraction: bool = True) -> ModuleOp:
    """``module`` after the :data:`EXECUTOR_PIPELINE` (``xla-divide-by-broadcast`` and ``xla-float-rewrites`` only with ``xla_rewrites``,
    ``contract-fma`` only with ``fma_contraction``).

    The caller's module is never changed: each step works on a copy, made only when the step has
    something to rewrite (checked first, cheaply), so a program none of them touches is returned as is.
    """
    from .broadcasts import canonicalize_broadcasts
    from .cleanup import remove_dead_ops
    from .conditionals import inline_constant_conditionals
    from .fma_contraction import contract_fma
    from .inlining import inline_calls
    from .quantized import lower_quantized
    from .in_place_selects import mark_in_place_selects
    from .small_loops import small_loop_numerics
    from .xla_numerics import xla_divide_by_broadcast, xla_float_rewrites
    from .ynnpack_fusion import ynnpack_fusion_numerics

    for what, flag in (("xla_rewrites", xla_rewrites), ("fma_contraction", fma_contraction)):
        if not isinstance(flag, bool):
            raise PassError(f"prepare_for_execution: {what} must be True or False, got {flag!r}")
    prepared = inline_calls(module, clone=True)
    prepared = inline_constant_conditionals(prepared, clone=prepared is module)
    # (XLA's DCE runs before its simplifier and fusion: a dead user must not count -- jax.nn.logsumexp's unused
    # sign(sum) kept the sum's YNNPACK fusion from growing over its log, 91 of 4,096 results 1 ULP off)
    prepared = remove_dead_ops(prepared, clone=prepared is module)
    if xla_rewrites:
        prepared = xla_divide_by_broadcast(prepared, clone=prepared is module)
    prepared = canonicalize_broadcasts(prepared, clone=prepared is module)
    if xla_rewrites:
        prepared = xla_float_rewrites(prepared, clone=prepared is module)
        prepared = ynnpack_fusion_numerics(prepared, clone=prepared is module)
    prepared = small_loop_numerics(prepared, clone=prepared is module)
    prepared = mark_in_place_selects(prepared, clone=prepared is module)
    if fma_contraction:
        prepared = remove_dead_ops(prepared, clone=prepared is module)  # (XLA removes dead code before fusing)
        prepared = contract_fma(prepared, clone=prepared is module)
    return lower_quantized(prepared, clone=prepared is module)
