"""The executor: an hlo module lowered once to a program over the kernels, and run.

:mod:`~lowering.executor.executable` (``lowering.compile``: the executor pipeline of passes, then straight-line
Python over the kernels), :mod:`~lowering.executor.fusion_plan` and :mod:`~lowering.executor.fusion` (element-wise
groups as one numba loop), :mod:`~lowering.executor.compiled_loops` and :mod:`~lowering.executor.compiled_segments`
(while loops and runs of ops as machine code, written from the kernels' definitions),
:mod:`~lowering.executor.compile_queue` and :mod:`~lowering.executor.compile_process` (when and where that code
compiles), :mod:`~lowering.executor.dynamic_shapes`, :mod:`~lowering.executor.memory`, and
:mod:`~lowering.executor.multi_device` and :mod:`~lowering.executor.mpi` (programs of several devices, in threads
or over MPI ranks). Users call it through :mod:`lowering`'s names (``lowering.compile``).
"""
