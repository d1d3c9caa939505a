"""XLA CPU's rsqrt, from this CPU's own reciprocal-square-root estimate instructions.

XLA CPU computes ``rsqrt`` (XLA's ``Rsqrt`` intrinsic, after Eigen's) as a
hardware estimate refined by Newton-Raphson steps
``y <- y + (-y/2) (x y y - 1)`` (both multiply-adds fused by LLVM), except
where the estimate is itself the answer (inputs below the smallest normal
number, read as 0 under DAZ, and +inf). Which instruction and how many steps
depends on the host, and the estimate instructions' tables differ between CPU
designs (AMD's RSQRTSS is not Intel's), so no table can be written down once:
this module runs the instruction itself, through numba and LLVM's x86
intrinsics, on the CPU that runs the program — as XLA does.

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
import math
import threading

import numpy as np

from .host import host_properties

_LOCK = threading.Lock()


def rsqrt_f32_method() -> str:
    """How XLA computes f32 rsqrt on this host (for docs, reports and tests)."""
    host = host_properties()
    if not host["avx"]:
        return "1/sqrt (no AVX)"
    return f"RSQRTPS + {_f32_steps()} Newton step(s)"


def rsqrt_f64_method() -> str:
    """How XLA computes f64 rsqrt on this host (for docs, reports and tests)."""
    return "VRSQRT14PD + 2 Newton steps" if host_properties()["avx512f"] else "1/sqrt (no AVX-512F)"


def _f32_steps() -> int:
    return 1 if host_properties()["vendor"] == "AuthenticAMD" else 2


@functools.cache
def _compiled(precision: str):
    """The numba ufunc for ``precision`` ('f32' or 'f64'), or None where XLA uses 1/sqrt."""
    host = host_properties()
    if precision == "f32" and not host["avx"] or precision == "f64" and not host["avx512f"]:
        return None
    with _LOCK:
        return _build(precision, _f32_steps() if precision == "f32" else 2)


def _build(precision: str, steps: int):
    import llvmlite.ir as ir
    import numba
    from numba import types
    from numba.extending import intrinsic

    if precision == "f32":
        scalar, ir_scalar, lanes, name, masked = types.float32, ir.FloatType(), 4, "llvm.x86.sse.rsqrt.ps", False
        tiny = np.float32(np.finfo(np.float32).tiny)
    else:
        scalar, ir_scalar, lanes, name, masked = types.float64, ir.DoubleType(), 2, "llvm.x86.avx512.rsqrt14.pd.128", True
        tiny = np.finfo(np.float64).tiny

    @intrinsic
    def estimate(typingctx, x):
        """The instruction on lane 0 of a vector holding x."""
        def codegen(context, builder, signature, args):
            vector = ir.VectorType(ir_scalar, lanes)
            arg_types = [vector, vector, ir.IntType(8)] if masked else [vector]
            fn = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(vector, arg_types))
            packed = builder.insert_element(ir.Constant(vector, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
            call_args = [packed, ir.Constant(vector, [0.0] * lanes), ir.Constant(ir.IntType(8), -1)] if masked \
                else [packed]
            return builder.extract_element(builder.call(fn, call_args), ir.Constant(ir.IntType(32), 0))

        return scalar(scalar), codegen

    @intrinsic
    def fused_multiply_add(typingctx, a, b, c):
        """LLVM's fma: a * b + c rounded once."""
        def codegen(context, builder, signature, args):
            fn = builder.module.declare_intrinsic("llvm.fma", [ir_scalar], ir.FunctionType(ir_scalar, [ir_scalar] * 3))
            return builder.call(fn, args)

        return scalar(scalar, scalar, scalar), codegen

    minus_half, minus_one, zero, inf = scalar(-0.5), scalar(-1.0), scalar(0.0), scalar(np.inf)

    def rsqrt(x):
        if abs(x) < tiny:  # DAZ: a denormal reads as a zero of its sign
            x = math.copysign(zero, x)
        y0 = estimate(x)
        y = y0
        for _ in range(steps):
            y = fused_multiply_add(y * minus_half, fused_multiply_add(x * y, y, minus_one), y)
        return y0 if (x < tiny or x == inf) else y

    return numba.vectorize([scalar(scalar)], nopython=True)(rsqrt)


def rsqrt(x: np.ndarray) -> np.ndarray:
    """XLA CPU's rsqrt of each element of the f32 or f64 array ``x`` on this host (see the module doc)."""
    x = np.asarray(x)
    ufunc = _compiled("f32" if x.dtype == np.float32 else "f64")
    if ufunc is None:
        tiny = np.finfo(x.dtype).tiny
        x = np.where(np.abs(x) < tiny, x * x.dtype.type(0), x)  # DAZ
        with np.errstate(divide="ignore", invalid="ignore"):
            return x.dtype.type(1) / np.sqrt(x)
    return ufunc(x)
