"""XLA CPU's rsqrt, from this CPU's own reciprocal-square-root estimate instructions.

XLA CPU computes ``rsqrt`` (XLA's ``Rsqrt`` intrinsic, after Eigen's) as a
hardware estimate refined by Newton-Raphson steps
``y <- y + (-y/2) (x y y - 1)`` (both multiply-adds fused by LLVM), except
where the estimate is itself the answer (inputs below the smallest normal
number, read as 0 under DAZ, and +inf). Which instruction and how many steps
depends on the host, and the estimate instructions' tables differ between CPU
designs (AMD's RSQRTSS is not Intel's), so no table can be written down once:
the rsqrt scalar definition (:func:`lowering.kernels.scalar.rsqrt_refined`)
runs the instruction itself, through numba and LLVM's x86 intrinsics, on the
CPU that runs the program — as XLA does; the interpreter's kernel here is that
definition as a ufunc.

The rules (jaxlib 0.10's XLA, measured bit-exact against ``jax.jit`` on an AMD
family-26 CPU with AVX-512; ``tests/test_xla_math.py`` checks on every CPU):

* f32, host with AVX: ``RSQRTPS`` (XLA vectorizes f32 8 wide, so not the
  AVX-512 ``VRSQRT14PS``), one Newton step on AMD CPUs, two elsewhere.
* f64, host with AVX-512F: ``VRSQRT14PD`` and two Newton steps.
* otherwise: ``1 / sqrt(x)``, correctly rounded.

Denormal inputs read as 0 (XLA's DAZ), whatever the caller's denormal mode.
"""

from __future__ import annotations

import functools

import numpy as np

from . import scalar
from .host import host_properties


def _definition(dtype) -> scalar.Scalar:
    return scalar.rsqrt_definition(np.dtype(dtype), host_properties())


def rsqrt_f32_method() -> str:
    """How XLA computes f32 rsqrt on this host (for docs, reports and tests)."""
    d = _definition(np.float32)
    return "1/sqrt (no AVX)" if d.name == "rsqrt_exact" else f"RSQRTPS + {d.arguments[1]} Newton step(s)"


def rsqrt_f64_method() -> str:
    """How XLA computes f64 rsqrt on this host (for docs, reports and tests)."""
    d = _definition(np.float64)
    return "1/sqrt (no AVX-512F)" if d.name == "rsqrt_exact" else f"VRSQRT14PD + {d.arguments[1]} Newton steps"


@functools.cache
def _compiled(dtype: np.dtype):
    """The ufunc of the ``rsqrt`` scalar definition (:func:`lowering.kernels.scalar.rsqrt_refined` or
    ``rsqrt_exact``) for ``dtype`` elements on this host."""
    return scalar.ufunc(_definition(dtype), [dtype], dtype)


def rsqrt(x: np.ndarray) -> np.ndarray:
    """XLA CPU's rsqrt of each element of the f32 or f64 array ``x`` on this host (see the module doc)."""
    x = np.asarray(x)
    return _compiled(x.dtype)(x)
