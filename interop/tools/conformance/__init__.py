"""The StableHLO conformance runner: ``xla-conformance PATH... [--jobs N] [--timeout S] [--json REPORT]``.

It runs the programs of the StableHLO test corpus (``stablehlo/testdata`` and
``stablehlo/tests/interpret``, see ``../shared/corpus/README.md``) through
:func:`interop.import_stablehlo`, the NumPy executor and the corpus's checks:

1. **Discovery** (:func:`discover`, :mod:`~interop.tools.conformance.discovery`): every ``.mlir`` file under the given
   paths; its ``// RUN`` lines say what it is. Files whose interpreter run is
   ``RUN-DISABLED`` upstream are reported ``disabled``; ``-split-input-file``
   files are split at ``// -----`` into independent programs; files that are
   only serialized and compared upstream (``dynamic/``) are round-trip tests;
   files tested only for error messages (``not stablehlo-translate``) are
   ``skipped``.
2. **Check ops** (:func:`normalize_checks` in :mod:`~interop.tools.conformance.rewriting`,
   :func:`prepare_module` in :mod:`~interop.tools.conformance.extraction`): the checks
   appear as ``stablehlo.custom_call @check.*`` or as ``check.*`` ops in their
   custom syntax. The text is rewritten so that every ``check.*`` op is in the
   generic form (which jaxlib's MLIR parser accepts for an unregistered
   dialect), parsed with jaxlib, and then each check op is removed and its
   operands become extra results of the tested function (``*_const`` checks
   get their value as a ``stablehlo.constant``). The importer therefore sees
   plain StableHLO; the runner applies the check to the extra results.
   ``interpreter.run_parallel`` is run by compiling the device program for a
   replicas x partitions grid (``lowering.compile(..., num_replicas=...)``)
   between a prologue computing its operands and an epilogue checking its
   results; ``interpreter.probe`` values feed ``check.expect_serialized_eq``.
   Quantized programs go through the importer's ``!quant`` text rewrite first.
3. **Isolation** (:func:`run_programs`, :mod:`~interop.tools.conformance.workers`; one program:
   :func:`run_program`, :mod:`~interop.tools.conformance.running`): programs run in worker processes
   (``forkserver``, or ``spawn``) with an address-space limit
   (``resource.setrlimit``); a program that crashes its worker, exceeds the
   memory limit or the per-program timeout is reported as an ``error`` and the
   worker is replaced. The executor's array-size limit follows the address-space
   limit (:mod:`xla_dialect.limits`), so a program asking for more memory fails
   when it is lowered, before anything is compiled, whatever the state of the
   numba cache. The timeout counts from the moment the worker takes the program
   (it acknowledges it), so the start-up of a fresh worker, importing JAX on a
   busy machine, is not charged to the program. A runner killed before it can
   stop its workers (SIGKILL, a closed terminal) takes them and the forkserver
   with it, even a worker inside a hanging program (:mod:`interop.processes`).

Check semantics follow the StableHLO test harness (see the corpus README and
:func:`check_close`, :func:`check_almost_eq` in :mod:`~interop.tools.conformance.comparators`): the ``custom_call`` forms of
``testdata/`` allow 3 ULPs (``expect_close``) or an absolute error of 1e-3
(``expect_almost_eq``); the ``check`` dialect ops use their own attributes.
Programs are compiled with ``denormals="keep"`` (IEEE gradual underflow, as
the reference interpreter computes), not XLA CPU's flush-to-zero default.

The command (:mod:`~interop.tools.conformance.cli`) prints a table by op family (:func:`family_table`,
:mod:`~interop.tools.conformance.report`) and the
programs that did not pass grouped by cause (:func:`causes_table`). The
report (``--json``) is ``{"summary": {...}, "results": [{"path", "name",
"status", "message", "seconds"}]}`` with ``status`` one of ``passed``,
``failed`` (a check did not hold), ``error`` (import, compile or run failed,
crash, timeout), ``skipped`` or ``disabled``.
"""

from .cli import main
from .comparators import CHECKS, CheckSpec, check_abs_close, check_almost_eq, check_close, check_eq
from .discovery import discover, family_of
from .extraction import Check, Prepared, extract_checks, prepare_module
from .records import STATUSES, ConformanceError, Program, Result
from .report import Progress, cause_of, causes_table, family_table, summarize, write_json
from .rewriting import normalize_checks, split_programs
from .running import NEWER_OPS_NOTE, hlo_text_of, run_program, run_program_through_hlo
from .workers import Interrupted, run_programs

__all__ = [
    "CHECKS",
    "Check",
    "CheckSpec",
    "ConformanceError",
    "Interrupted",
    "NEWER_OPS_NOTE",
    "Prepared",
    "Program",
    "Progress",
    "Result",
    "STATUSES",
    "cause_of",
    "causes_table",
    "check_abs_close",
    "check_almost_eq",
    "check_close",
    "check_eq",
    "discover",
    "extract_checks",
    "family_of",
    "family_table",
    "hlo_text_of",
    "main",
    "normalize_checks",
    "prepare_module",
    "run_program",
    "run_program_through_hlo",
    "run_programs",
    "split_programs",
    "summarize",
    "write_json",
]
