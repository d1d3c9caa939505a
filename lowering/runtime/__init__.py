"""The run-time support below the kernels: what kernels and compiled code call while a program runs.

:mod:`~lowering.runtime.options` (``lowering.compile``'s options, resolved once), :mod:`~lowering.runtime.blas`
and :mod:`~lowering.runtime.lapack` (the libraries' routines, and :mod:`~lowering.runtime.lapack_compiled` for
compiled code), :mod:`~lowering.runtime.workers` (pieces of one kernel on several CPUs),
:mod:`~lowering.runtime.denormals` (XLA CPU's flush mode), :mod:`~lowering.runtime.devices` (the devices of a
multi-device run and where their collectives meet), :mod:`~lowering.runtime.program_state` (feeds, channels,
custom-call targets), :mod:`~lowering.runtime.host_callbacks`, :mod:`~lowering.runtime.interrupt` (timeouts and
Ctrl-C), :mod:`~lowering.runtime.loop_runtime` (numba functions generated code calls),
:mod:`~lowering.runtime.generated_modules` and :mod:`~lowering.runtime.numba_cache` (generated code and its
on-disk cache), and :mod:`~lowering.runtime.process_state` (every change the library makes to the process).
Nothing here imports the kernels, the passes or the executor.
"""
