"""What kernel factories may ask for while an op is lowered: :class:`KernelContext`.

A kernel factory (``lowering.kernels.registry``) receives the op and a context; the
executor hands it a :class:`lowering.executor.executable.LoweringContext`, which also
compiles called functions, and passes that evaluate ops with the kernels
(``fold-constants``, ``tile-layouts``) hand it a plain :class:`KernelContext`,
without importing the executor.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute

from xla_dialect.errors import UnsupportedError
from xla_dialect.types import numpy_dtype

from ..runtime.blas import blas_matmul
from ..runtime.denormals import flush_threaded_matmul, mode_switch
from ..runtime.options import CompileOptions
from ..runtime.program_state import Runtime
from ..runtime.workers import usable_cpus


class KernelContext:
    """The services and settings kernel factories use: dtypes, the BLAS, the process grid, the runtime."""

    def __init__(self, module: ModuleOp, num_replicas: int = 1, num_partitions: int = 1,
                 blas_threads: int | None = None, denormals: str | None = None, *,
                 options: CompileOptions | None = None):
        self.module = module
        if options is None:  # (a context of its own, e.g. for fold-constants: loops and fusion "auto")
            options = CompileOptions(num_replicas=num_replicas, num_partitions=num_partitions,
                                     blas_threads=blas_threads, denormals=denormals, loop_compilation="auto",
                                     fusion="auto")
        # lowering.compile's options, resolved (lowering.runtime.options); the fields below are read from it.
        self.options = options
        # "flush" (XLA CPU's FTZ/DAZ) or "keep" (IEEE): see lowering.runtime.denormals; flush: the same as a bool.
        self.denormals = options.denormals
        self.flush = options.flush
        # BLAS threads for the float matmuls (dot, convolution): an int, or None
        # to leave the BLAS as configured (see lowering.runtime.blas).
        self.blas_threads = options.blas_thread_count
        # CPUs a large float matmul is split over (automatic mode on two-CPU machines; lowering.runtime.blas).
        self.split_workers = options.split_workers
        # CPUs a large fused element-wise loop is split over (lowering.executor.fusion, lowering.runtime.workers).
        self.loop_workers = usable_cpus()
        self.limits_blas = False  # set when a kernel's matmul takes the limit
        # The process grid the program runs on (collective kernels read it).
        self.num_replicas = options.num_replicas
        self.num_partitions = options.num_partitions
        # When hlo.while loops are compiled with numba ("auto", "always", "never"; lowering.executor.compiled_loops).
        self.loop_compilation = options.loop_compilation
        # When element-wise runs are fused and compiled ("auto", "always", "never"; lowering.executor.fusion).
        self.fusion = options.fusion
        # The most bytes one array may take (xla_dialect.limits).
        self.max_bytes = options.max_bytes
        # Seconds a call may run (lowering.runtime.interrupt); None: unbounded, and no checks are generated.
        self.timeout = options.timeout
        self.functions: dict[str, func.FuncOp] = {
            op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)
        }
        # Host-side state (feeds, channels) the side-effecting kernels share
        # with the Executable built from this context.
        self.runtime = Runtime()

    def dtype(self, type_: Attribute) -> np.dtype:
        """NumPy dtype of a tensor type."""
        return numpy_dtype(type_)

    def function(self, name: str):
        """The compiled function of ``func.func @name``: only the executor compiles functions."""
        raise UnsupportedError(f"func.call @{name}: calling a function needs the executor (lowering.compile)")

    def loop_kernel(self, op, interpreted):
        """The kernel of ``op`` (an ``hlo.while``) given its ``interpreted`` kernel: that kernel here; the executor's
        context compiles loops that run long enough (``loop_compilation``)."""
        return interpreted

    def blas_matmul(self, dtype: np.dtype, m: int, k: int, n: int, batch: int = 1):
        """``np.matmul`` for ``(batch, m, k) x (batch, k, n)`` operands of ``dtype``, run with the program's
        BLAS thread count, split over the CPUs where that is the policy (:func:`lowering.runtime.blas.blas_matmul`)."""
        matmul = blas_matmul(self.blas_threads, dtype, m, k, n, batch, self.split_workers,
                             mode_switch(self.denormals))
        if matmul is not np.matmul:
            self.limits_blas = True  # the Executable takes the limit once per call
        if self.flush:  # OpenBLAS's worker threads do not flush (lowering.runtime.denormals)
            matmul = flush_threaded_matmul(matmul, self.blas_threads, dtype, m, k, n)
        return matmul
