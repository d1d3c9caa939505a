"""The tools built on the formats: the commands ``xla-run`` (:mod:`~interop.tools.cli`, sharded programs in
:mod:`~interop.tools.sharded_cli`), ``xla-opt`` (:mod:`~interop.tools.xla_opt`) and ``xla-conformance``
(:mod:`~interop.tools.conformance`), ``xla-diverge`` and ``xla-reduce`` (:mod:`~interop.tools.debugging_cli`, over
:mod:`interop.debugging`), ``xla-show`` (:mod:`~interop.tools.show_cli`, over :mod:`interop.show`); what they share
(:mod:`~interop.tools.command_io`); the bundled demo (:mod:`~interop.tools.demo`), the StableHLO
specification's examples (:mod:`~interop.tools.spec_examples`), the survey of HLO text files
(:mod:`~interop.tools.hlo_survey`) and the op table of docs/operations.md (:mod:`~interop.tools.op_table`).

Nothing below imports them: the formats (:mod:`interop.stablehlo`, :mod:`interop.hlo`, :mod:`interop.jax`)
and the library's API (:mod:`interop`) stand without them."""
